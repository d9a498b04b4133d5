//! The applications of `sonde grab`: what a connection sends, when its reply is complete, and
//! what the reply says as output fields.
//!
//! Takes a reply's bytes as the TCP engine reassembled them (and, for `tls`/`https`, the session's
//! turns); gives the request to send, whether the reply is complete, and one row of output fields.
//! Uses sonde-tcp (the `App`/`Session` hooks it implements) and sonde-scan (field types and values
//! of a row, named targets), with httparse, rustls, tls-parser and x509-parser for the formats.
//!
//! - `http`: one `GET` (or the method given), `Connection: close`; the reply is parsed with
//!   `httparse`, its body framed by Content-Length or chunked encoding, and reported decoded.
//! - `banner`: sends nothing and keeps what the server says first, up to a line end.
//! - `payload`: sends fixed bytes and keeps the reply as hex.
//! - `tls`: a full TLS 1.2/1.3 handshake with rustls (the server's first flight in clear when
//!   rustls cannot go on): version, cipher, group, ALPN, chain and its validity, JA3S.
//! - `https`: `http` inside a `tls` session.
//! - `ssh`: the identification string, the KEXINIT's algorithm lists and the host key (from a
//!   curve25519 key exchange's reply, its signature not checked).
//! - `smtp`, `imap`, `pop3`, `ftp`: the greeting, the capabilities, and with `--starttls` the
//!   upgrade and a `tls` session inside the same connection: one session, a table per protocol.
//!
//! `tls`, `https`, `ssh`, `smtp`, `imap`, `pop3` and `ftp` open a session per connection (see
//! [`sonde_tcp::Session`]): they talk in turns. The others hold no per-connection state (see
//! [`sonde_tcp::App`]): the engine keeps the reply's bytes, asks [`App::is_complete_after`]
//! after each segment (with one [`ReplyCursor`] word per reply, in which the app notes how far
//! it has read, so that the checks over a whole reply read each byte a bounded number of
//! times), and at the end the run loop turns the bytes into
//! a row with [`AnyApp::describe`], one value per field of [`AnyApp::fields`]. Every parser
//! here reads hostile bytes: none panics, and each does work bounded by the length of the
//! reply.
#![forbid(unsafe_code)]

mod banner;
mod http;
mod mail;
mod names;
mod payload;
mod progress;
mod ssh;
mod text;
mod tls;

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use sonde_scan::reply::{Field, Value};
pub use sonde_tcp::{App, ReplyCursor, Session, MAX_SESSION_SEND};

pub use banner::{BannerApp, BANNER_FIELDS};
pub use http::{HttpApp, HTTP_FIELDS};
pub use mail::{LineApp, FTP_FIELDS, IMAP_FIELDS, POP3_FIELDS, SMTP_FIELDS};
pub use names::TargetNames;
pub use payload::{PayloadApp, PAYLOAD_FIELDS};
pub use ssh::{SshApp, SSH_FIELDS};
pub use tls::{TlsApp, TLS_FIELDS};

/// What a reply says of its protocol: a grab row's `status` when the connection ended well, in
/// ZGrab2's words. Each app says it as it reads the reply ([`AnyApp::describe_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppOutcome {
    /// The reply is the app's protocol and reports no error (for `banner` and `payload`, which
    /// speak no protocol of their own: any reply).
    Success,
    /// The reply is the protocol, and in it the server refuses or reports an error: a TLS
    /// alert instead of a ServerHello, an SMTP or FTP greeting that is not 2xx, IMAP's `* NO`
    /// or `* BYE`, POP3's `-ERR`, a refused STARTTLS.
    ApplicationError,
    /// The reply is not this protocol: HTTP bytes to a TLS hello, no `SSH-` line, the 400 an
    /// HTTPS port sends to plain HTTP, a head that never ends.
    ProtocolError,
    /// sonde could not finish the exchange for a reason of its own: a session the server led
    /// past the bytes a session may send (`tls_error` says so). ZGrab2's word for an error
    /// that is none of the others.
    UnknownError,
}

impl AppOutcome {
    /// The name in rows: success, application-error, protocol-error, unknown-error (ZGrab2's).
    pub fn name(self) -> &'static str {
        match self {
            AppOutcome::Success => "success",
            AppOutcome::ApplicationError => "application-error",
            AppOutcome::ProtocolError => "protocol-error",
            AppOutcome::UnknownError => "unknown-error",
        }
    }

    /// Success when any bytes came (`banner`, `payload`: no protocol to check).
    pub(crate) fn of_any_reply(received: &[u8]) -> AppOutcome {
        if received.is_empty() {
            AppOutcome::ProtocolError
        } else {
            AppOutcome::Success
        }
    }
}

/// The engine sends a request as one segment of at most this many bytes; longer requests are
/// refused when the app is built.
pub const MAX_REQUEST_LEN: usize = 1400;

/// The heap memory a `tls` or `https` session holds while it waits for the server, as a grab
/// plans for it: rustls's client state (its handshake state and key share, the transcript, the
/// buffer of a record received in part) and the session's own (the part of the first flight
/// not yet read past). Measured with a counting allocator (`tests/session_memory.rs`, with the
/// longest SNI name): about 4.3 KB (`tls`) and 4.9 KB (`https`) once opened, 8.9 and 9.6 KB
/// halfway through a first flight whose chain is two certificates (1.3 KB); this leaves room
/// for a chain of about 3 KB more, held twice while cut (rustls's record buffer, the session's
/// part of the flight).
pub const TLS_SESSION_BYTES: usize = 16 * 1024;

/// The same for an `ssh` session: the part of the reply not yet read past (a preamble line or
/// the packet being received; about 60 bytes once opened).
pub const SSH_SESSION_BYTES: usize = 2 * 1024;

/// The same for a line protocol's session (`smtp`, `imap`, `pop3`, `ftp`) before STARTTLS:
/// the reply being read and what the row keeps (about 800 bytes once opened with
/// `--starttls`, most of it the TLS app it may start).
pub(crate) const LINE_SESSION_BYTES: usize = 2 * 1024;

/// The application a grab runs (`-M`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppKind {
    Http,
    Banner,
    Payload,
    Tls,
    Https,
    Ssh,
    Smtp,
    Imap,
    Pop3,
    Ftp,
}

/// Fields of the `https` app: `http`'s, then `tls`'s.
pub static HTTPS_FIELDS: LazyLock<Vec<Field>> =
    LazyLock::new(|| HTTP_FIELDS.iter().chain(TLS_FIELDS).copied().collect());

impl AppKind {
    pub const ALL: [AppKind; 10] = [
        AppKind::Http,
        AppKind::Banner,
        AppKind::Payload,
        AppKind::Tls,
        AppKind::Https,
        AppKind::Ssh,
        AppKind::Smtp,
        AppKind::Imap,
        AppKind::Pop3,
        AppKind::Ftp,
    ];

    /// The name `-M` takes: http, banner, payload, tls, https, ssh, smtp, imap, pop3, ftp.
    pub fn name(self) -> &'static str {
        match self {
            AppKind::Http => "http",
            AppKind::Banner => "banner",
            AppKind::Payload => "payload",
            AppKind::Tls => "tls",
            AppKind::Https => "https",
            AppKind::Ssh => "ssh",
            AppKind::Smtp => "smtp",
            AppKind::Imap => "imap",
            AppKind::Pop3 => "pop3",
            AppKind::Ftp => "ftp",
        }
    }

    /// The port `-p` defaults to: the protocol's usual one (80 for the apps of no protocol).
    pub fn default_port(self) -> u16 {
        match self {
            AppKind::Http | AppKind::Banner | AppKind::Payload => 80,
            AppKind::Tls | AppKind::Https => 443,
            AppKind::Ssh => 22,
            AppKind::Smtp => 25,
            AppKind::Imap => 143,
            AppKind::Pop3 => 110,
            AppKind::Ftp => 21,
        }
    }

    /// The heap memory one session of this app holds while it waits for the server (with
    /// `--starttls`: `starttls`), the figure a grab bounds the sessions it keeps at once by;
    /// `None` for the apps that keep no state per connection.
    pub fn session_bytes(self, starttls: bool) -> Option<usize> {
        match self {
            AppKind::Tls | AppKind::Https => Some(TLS_SESSION_BYTES),
            AppKind::Smtp | AppKind::Imap | AppKind::Pop3 | AppKind::Ftp => {
                let tls = if starttls { TLS_SESSION_BYTES } else { 0 };
                Some(LINE_SESSION_BYTES + tls)
            }
            AppKind::Ssh => Some(SSH_SESSION_BYTES),
            AppKind::Http | AppKind::Banner | AppKind::Payload => None,
        }
    }

    /// The output fields of this app, in the order [`AnyApp::describe`] gives their values.
    pub fn fields(self) -> &'static [Field] {
        match self {
            AppKind::Http => HTTP_FIELDS,
            AppKind::Banner => BANNER_FIELDS,
            AppKind::Payload => PAYLOAD_FIELDS,
            AppKind::Tls => TLS_FIELDS,
            AppKind::Https => &HTTPS_FIELDS,
            AppKind::Ssh => SSH_FIELDS,
            AppKind::Smtp => &SMTP_FIELDS,
            AppKind::Imap => &IMAP_FIELDS,
            AppKind::Pop3 => &POP3_FIELDS,
            AppKind::Ftp => &FTP_FIELDS,
        }
    }
}

impl fmt::Display for AppKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AppKind {
    type Err = String;

    fn from_str(name: &str) -> Result<AppKind, String> {
        AppKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = AppKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown app {name:?}{}: use one of {} (-M)",
                    sonde_scan::nearest::did_you_mean(name, &known),
                    known.join(", ")
                )
            })
    }
}

/// The highest TLS version the ClientHello offers (`--tls-max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    /// The default: the full handshake reads the certificate of TLS 1.3 servers too.
    #[default]
    Tls13,
}

impl TlsVersion {
    pub const ALL: [TlsVersion; 4] = [
        TlsVersion::Tls10,
        TlsVersion::Tls11,
        TlsVersion::Tls12,
        TlsVersion::Tls13,
    ];

    /// The name `--tls-max` takes: 1.0, 1.1, 1.2, 1.3.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls10 => "1.0",
            TlsVersion::Tls11 => "1.1",
            TlsVersion::Tls12 => "1.2",
            TlsVersion::Tls13 => "1.3",
        }
    }

    /// The protocol version number on the wire (0x0301 for TLS 1.0 … 0x0304 for TLS 1.3).
    pub fn wire(self) -> u16 {
        match self {
            TlsVersion::Tls10 => 0x0301,
            TlsVersion::Tls11 => 0x0302,
            TlsVersion::Tls12 => 0x0303,
            TlsVersion::Tls13 => 0x0304,
        }
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TlsVersion {
    type Err = String;

    fn from_str(name: &str) -> Result<TlsVersion, String> {
        TlsVersion::ALL
            .into_iter()
            .find(|version| version.name() == name)
            .ok_or_else(|| format!("unknown TLS version {name:?}: use 1.0, 1.1, 1.2 or 1.3"))
    }
}

/// What the command line says about the request; [`AnyApp::build`] checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppOptions {
    /// HTTP method (a token such as GET or HEAD; HEAD replies have no body).
    pub http_method: String,
    /// Request target, starting with '/'.
    pub http_path: String,
    /// Host header (and TLS SNI when it is a name); `None`: the target's address, IPv6 in
    /// brackets, with `:port` unless the port is 80.
    pub http_host: Option<String>,
    /// Extra header lines, "Name: value" each.
    pub http_headers: Vec<String>,
    pub user_agent: String,
    /// The bytes the `payload` app sends.
    pub payload: Vec<u8>,
    /// Server name for TLS SNI (a host name; IP addresses are not allowed in SNI).
    pub tls_sni: Option<String>,
    pub tls_max: TlsVersion,
    /// PEM file of the root certificates chains are validated against (`--root-cas`);
    /// `None`: the Mozilla roots of webpki-roots.
    pub tls_root_cas: Option<PathBuf>,
    /// `smtp`, `imap`, `pop3`, `ftp`: upgrade to TLS with STARTTLS (STLS, AUTH TLS) when the
    /// server offers it (`--starttls`).
    pub starttls: bool,
    /// `tls`: this is `-M tls`'s second connection, with a TLS 1.2 hello, to servers that
    /// answered the first with handshake_failure (rows say so in `tls_error`).
    pub tls_retry: bool,
}

impl Default for AppOptions {
    fn default() -> AppOptions {
        AppOptions {
            http_method: "GET".to_string(),
            http_path: "/".to_string(),
            http_host: None,
            http_headers: Vec::new(),
            user_agent: concat!("sonde/", env!("CARGO_PKG_VERSION")).to_string(),
            payload: Vec::new(),
            tls_sni: None,
            tls_max: TlsVersion::default(),
            tls_root_cas: None,
            starttls: false,
            tls_retry: false,
        }
    }
}

/// One of the apps, chosen at run time; the grab engine is generic over [`App`] and runs this.
#[derive(Clone, Debug)]
pub enum AnyApp {
    Http(HttpApp),
    Banner(BannerApp),
    Payload(PayloadApp),
    Tls(TlsApp),
    Https(TlsApp),
    Ssh(SshApp),
    Smtp(LineApp),
    Imap(LineApp),
    Pop3(LineApp),
    Ftp(LineApp),
}

impl AnyApp {
    /// Builds the app `kind` from `options`, checking them; the error is one line for the user.
    pub fn build(kind: AppKind, options: &AppOptions) -> Result<AnyApp, String> {
        let app = match kind {
            AppKind::Http => AnyApp::Http(HttpApp::new(options)?),
            AppKind::Banner => AnyApp::Banner(BannerApp),
            AppKind::Payload => AnyApp::Payload(PayloadApp::new(options)?),
            AppKind::Tls => AnyApp::Tls(TlsApp::new(options)?),
            AppKind::Https => AnyApp::Https(TlsApp::https(options)?),
            AppKind::Ssh => AnyApp::Ssh(SshApp),
            AppKind::Smtp => AnyApp::Smtp(LineApp::new(&mail::SMTP, options)?),
            AppKind::Imap => AnyApp::Imap(LineApp::new(&mail::IMAP, options)?),
            AppKind::Pop3 => AnyApp::Pop3(LineApp::new(&mail::POP3, options)?),
            AppKind::Ftp => AnyApp::Ftp(LineApp::new(&mail::FTP, options)?),
        };
        app.check_sessions()?;
        let len = app.max_request_len();
        if len > MAX_REQUEST_LEN {
            return Err(format!(
                "the {kind} request is {len} bytes, longer than the {MAX_REQUEST_LEN} bytes \
                 sonde sends in one segment: shorten it"
            ));
        }
        Ok(app)
    }

    /// Whether every session of this app fits what the engine keeps of one
    /// ([`MAX_SESSION_SEND`]), with the longest server name and request a target may have: else
    /// why not, in one line. [`AnyApp::build`] checks it, and a run with names per target
    /// checks it again after [`AnyApp::with_names`] (a name is the SNI and the Host).
    pub fn check_sessions(&self) -> Result<(), String> {
        match self {
            AnyApp::Tls(app) | AnyApp::Https(app) => app.check_sessions(),
            _ => match self.most_sent_by_session() {
                Some(most) if most > MAX_SESSION_SEND => Err(format!(
                    "a {} session would send up to {most} bytes, more than the \
                     {MAX_SESSION_SEND} sonde keeps of one",
                    self.kind()
                )),
                _ => Ok(()),
            },
        }
    }

    /// For an app that talks in turns: the most bytes one of its sessions sends when the
    /// server follows the protocol (the longest server name and request, no
    /// HelloRetryRequest), which [`AnyApp::check_sessions`] holds to [`MAX_SESSION_SEND`]. A
    /// server that asks for more meets the session's own budget: its handshake stops there,
    /// and the row's `tls_error` says so.
    pub fn most_sent_by_session(&self) -> Option<usize> {
        match self {
            AnyApp::Tls(app) | AnyApp::Https(app) => app.full_most_sent(),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                Some(app.most_sent())
            }
            AnyApp::Ssh(app) => Some(app.max_sent_len()),
            AnyApp::Http(_) | AnyApp::Banner(_) | AnyApp::Payload(_) => None,
        }
    }

    /// For an app that talks in turns: the most heap memory one of its sessions holds while
    /// it waits for the server (see [`TLS_SESSION_BYTES`]), which a grab bounds the sessions
    /// it keeps at once by; `None` for the apps that keep no state per connection.
    pub fn session_bytes(&self) -> Option<usize> {
        let starttls = match self {
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.upgrades()
            }
            _ => false,
        };
        self.kind().session_bytes(starttls)
    }

    pub fn kind(&self) -> AppKind {
        match self {
            AnyApp::Http(_) => AppKind::Http,
            AnyApp::Banner(_) => AppKind::Banner,
            AnyApp::Payload(_) => AppKind::Payload,
            AnyApp::Tls(_) => AppKind::Tls,
            AnyApp::Https(_) => AppKind::Https,
            AnyApp::Ssh(_) => AppKind::Ssh,
            AnyApp::Smtp(_) => AppKind::Smtp,
            AnyApp::Imap(_) => AppKind::Imap,
            AnyApp::Pop3(_) => AppKind::Pop3,
            AnyApp::Ftp(_) => AppKind::Ftp,
        }
    }

    /// The output fields, in the order of [`AnyApp::describe`]'s values.
    pub fn fields(&self) -> &'static [Field] {
        self.kind().fields()
    }

    /// What the reply bytes `received` say: one value per field of [`AnyApp::fields`].
    pub fn describe(&self, received: &[u8]) -> Vec<Value> {
        self.describe_session(received, None)
    }

    /// As [`AnyApp::describe`], with the connection's session (apps that talk in turns).
    pub fn describe_session(&self, received: &[u8], session: Option<&dyn Session>) -> Vec<Value> {
        self.describe_reply(received, session).0
    }

    /// The values of [`AnyApp::describe_session`], and whether the reply was the app's
    /// protocol: what a grab row's `status` says.
    pub fn describe_reply(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
    ) -> (Vec<Value>, AppOutcome) {
        let mut values = Vec::with_capacity(self.fields().len());
        let outcome = self.describe_into(received, session, &mut values);
        (values, outcome)
    }

    /// As [`AnyApp::describe_reply`], appending the values to `values`.
    pub fn describe_into(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
        values: &mut Vec<Value>,
    ) -> AppOutcome {
        match self {
            AnyApp::Http(app) => app.describe_into(received, values),
            AnyApp::Banner(app) => app.describe_into(received, values),
            AnyApp::Payload(app) => app.describe_into(received, values),
            AnyApp::Ssh(app) => app.describe_into(received, values),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.describe_session_into(received, session, values)
            }
            AnyApp::Tls(app) | AnyApp::Https(app) => {
                app.describe_session_into(received, session, values)
            }
        }
    }

    /// The app with names per target (`-I address[:port],name`): a connection's name goes
    /// into Host (http, https) and SNI (tls, https) instead of the run-wide ones.
    pub fn with_names(self, names: Arc<TargetNames>) -> AnyApp {
        match self {
            AnyApp::Http(app) => AnyApp::Http(app.with_names(names)),
            AnyApp::Tls(app) => AnyApp::Tls(app.with_names(names)),
            AnyApp::Https(app) => AnyApp::Https(app.with_names(names)),
            AnyApp::Smtp(app) => AnyApp::Smtp(app.with_names(names)),
            AnyApp::Imap(app) => AnyApp::Imap(app.with_names(names)),
            AnyApp::Pop3(app) => AnyApp::Pop3(app.with_names(names)),
            AnyApp::Ftp(app) => AnyApp::Ftp(app.with_names(names)),
            other => other,
        }
    }

    /// The name of a connection to (`addr`, `port`), when the run has names per target.
    pub fn target_name(&self, addr: IpAddr, port: u16) -> Option<&str> {
        let names = match self {
            AnyApp::Http(app) => app.names(),
            AnyApp::Tls(app) | AnyApp::Https(app) => app.names(),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.names()
            }
            _ => None,
        };
        names?.name_of(addr, port)
    }

    /// A session for a connection to (`addr`, `port`) named `name` (SNI and Host), its first
    /// bytes appended to `first`: as [`App::open_session`], with the target's own name.
    pub fn open_named(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        match self {
            AnyApp::Tls(app) | AnyApp::Https(app) => app.open_named(addr, port, name, first),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.open_session(addr, port, first)
            }
            AnyApp::Ssh(app) => app.open_session(addr, port, first),
            _ => None,
        }
    }
}

impl App for AnyApp {
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        match self {
            AnyApp::Http(app) => app.write_request(buf, addr, port),
            AnyApp::Banner(app) => app.write_request(buf, addr, port),
            AnyApp::Payload(app) => app.write_request(buf, addr, port),
            AnyApp::Ssh(app) => app.write_request(buf, addr, port),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.write_request(buf, addr, port)
            }
            AnyApp::Tls(app) | AnyApp::Https(app) => app.write_request(buf, addr, port),
        }
    }

    fn max_request_len(&self) -> usize {
        match self {
            AnyApp::Http(app) => app.max_request_len(),
            AnyApp::Banner(app) => app.max_request_len(),
            AnyApp::Payload(app) => app.max_request_len(),
            AnyApp::Ssh(app) => app.max_request_len(),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.max_request_len()
            }
            AnyApp::Tls(app) | AnyApp::Https(app) => app.max_request_len(),
        }
    }

    fn is_complete(&self, received: &[u8]) -> bool {
        match self {
            AnyApp::Http(app) => app.is_complete(received),
            AnyApp::Banner(app) => app.is_complete(received),
            AnyApp::Payload(app) => app.is_complete(received),
            AnyApp::Ssh(app) => app.is_complete(received),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.is_complete(received)
            }
            AnyApp::Tls(app) | AnyApp::Https(app) => app.is_complete(received),
        }
    }

    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        match self {
            AnyApp::Http(app) => app.is_complete_after(received, cursor),
            AnyApp::Banner(app) => app.is_complete_after(received, cursor),
            AnyApp::Payload(app) => app.is_complete_after(received, cursor),
            AnyApp::Ssh(app) => app.is_complete_after(received, cursor),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.is_complete_after(received, cursor)
            }
            AnyApp::Tls(app) | AnyApp::Https(app) => app.is_complete_after(received, cursor),
        }
    }

    fn max_sent_len(&self) -> usize {
        match self {
            AnyApp::Tls(app) | AnyApp::Https(app) => app.max_sent_len(),
            AnyApp::Smtp(app) | AnyApp::Imap(app) | AnyApp::Pop3(app) | AnyApp::Ftp(app) => {
                app.max_sent_len()
            }
            AnyApp::Ssh(app) => app.max_sent_len(),
            other => other.max_request_len(),
        }
    }

    fn open_session(
        &self,
        addr: IpAddr,
        port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        self.open_named(addr, port, self.target_name(addr, port), first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_scan::reply::FieldType;

    #[test]
    fn kinds_parse_from_their_names_and_display_them() {
        for kind in AppKind::ALL {
            assert_eq!(kind.name().parse::<AppKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
        let err = "gopher".parse::<AppKind>().unwrap_err();
        assert!(err.contains("\"gopher\"") && err.contains("http, banner, payload, tls"));
        assert!(!err.contains('\n'));
        assert!(!err.contains("did you mean"), "{err}");
        let typo = "htpp".parse::<AppKind>().unwrap_err();
        assert!(typo.contains("did you mean http?"), "{typo}");
    }

    #[test]
    fn tls_versions_parse_and_default_to_1_3() {
        for version in TlsVersion::ALL {
            assert_eq!(version.name().parse::<TlsVersion>(), Ok(version));
        }
        assert_eq!(TlsVersion::default(), TlsVersion::Tls13);
        assert!("1.4".parse::<TlsVersion>().is_err());
    }

    /// Every app gives exactly one value per field, of the field's type or Null, even for
    /// nothing received.
    #[test]
    fn describe_gives_one_value_of_the_right_type_per_field() {
        let options = AppOptions {
            payload: b"hello\n".to_vec(),
            ..AppOptions::default()
        };
        for kind in AppKind::ALL {
            let app = AnyApp::build(kind, &options).unwrap();
            for reply in [
                &b""[..],
                b"HTTP/1.1 200 OK\r\n\r\n",
                b"\x16\x03\x03\x00\x01\x02",
            ] {
                let values = app.describe(reply);
                assert_eq!(values.len(), app.fields().len(), "{kind}");
                for (field, value) in app.fields().iter().zip(&values) {
                    let ok = match (field.kind, value) {
                        (_, Value::Null) | (FieldType::Bool, Value::Bool(_)) => true,
                        (kind, Value::Int(n)) => kind.is_int() && Some(*n) <= kind.int_max(),
                        (FieldType::Str, Value::Str(_)) => true,
                        (FieldType::Map, Value::Json(json)) => json.is_object(),
                        (FieldType::Records(_), Value::Json(json)) => json.is_array(),
                        _ => false,
                    };
                    assert!(ok, "{kind}: {} = {value:?}", field.name);
                }
            }
        }
    }

    /// Whether a reply was the app's protocol, as each app reads it (the mail apps' greetings
    /// are in mail_tests.rs): a grab row's `status` when the connection ended well.
    #[test]
    fn each_app_says_whether_the_reply_was_its_protocol() {
        use AppOutcome::{ApplicationError, ProtocolError, Success};
        let nginx_400 = b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 62\r\n\r\n\
            <center>The plain HTTP request was sent to HTTPS port</center>";
        let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        // A TLS alert record: handshake_failure.
        let alert = b"\x15\x03\x03\x00\x02\x02\x28";
        let cases: [(AppKind, &[u8], AppOutcome); 12] = [
            (
                AppKind::Http,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                Success,
            ),
            // As ZGrab2 reads it: any whole response is HTTP, errors too …
            (AppKind::Http, not_found, Success),
            // … but for the 400 an HTTPS port answers plain HTTP with.
            (AppKind::Http, nginx_400, ProtocolError),
            (AppKind::Http, alert, ProtocolError),
            (
                AppKind::Http,
                b"HTTP/1.1 200 OK\r\nServer: x",
                ProtocolError,
            ),
            (AppKind::Tls, nginx_400, ProtocolError),
            (AppKind::Tls, alert, ApplicationError),
            (AppKind::Ssh, b"SSH-2.0-OpenSSH_9.6\r\n", Success),
            (AppKind::Ssh, not_found, ProtocolError),
            (AppKind::Banner, b"anything\r\n", Success),
            (AppKind::Payload, b"\x00\x01", Success),
            (AppKind::Payload, b"", ProtocolError),
        ];
        let options = AppOptions {
            payload: b"hello\n".to_vec(),
            ..AppOptions::default()
        };
        for (kind, reply, want) in cases {
            let app = AnyApp::build(kind, &options).unwrap();
            let (values, outcome) = app.describe_reply(reply, None);
            assert_eq!(values.len(), app.fields().len(), "{kind}");
            assert_eq!(outcome, want, "{kind}: {}", String::from_utf8_lossy(reply));
        }
    }

    #[test]
    fn field_names_are_unique_across_apps() {
        // https's fields are http's and tls's, by design.
        let expected: Vec<&str> = HTTP_FIELDS
            .iter()
            .chain(TLS_FIELDS)
            .map(|f| f.name)
            .collect();
        let https: Vec<&str> = AppKind::Https.fields().iter().map(|f| f.name).collect();
        assert_eq!(https, expected);
        // The mail apps' fields are their own, then tls's: each app's own fields are unique.
        let mail = [AppKind::Smtp, AppKind::Imap, AppKind::Pop3, AppKind::Ftp];
        for kind in mail {
            let fields = kind.fields();
            let tail = fields[fields.len() - TLS_FIELDS.len()..]
                .iter()
                .map(|f| f.name);
            assert!(tail.eq(TLS_FIELDS.iter().map(|f| f.name)), "{kind}");
        }
        let own = |kind: AppKind| match kind {
            AppKind::Https => &[][..],
            kind if mail.contains(&kind) => {
                &kind.fields()[..kind.fields().len() - TLS_FIELDS.len()]
            }
            kind => kind.fields(),
        };
        let mut names: Vec<&str> = AppKind::ALL
            .into_iter()
            .flat_map(|kind| own(kind).iter().map(|field| field.name))
            .collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
    }

    #[test]
    fn every_request_fits_the_buffer_it_announces() {
        let options = AppOptions {
            payload: vec![0xab; 100],
            http_host: None,
            ..AppOptions::default()
        };
        let addrs: [IpAddr; 2] = [
            "198.18.0.7".parse().unwrap(),
            "2001:2:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
        ];
        for kind in AppKind::ALL {
            let app = AnyApp::build(kind, &options).unwrap();
            let mut buf = vec![0u8; app.max_request_len()];
            for addr in addrs {
                let len = app.write_request(&mut buf, addr, 65535);
                assert!(len <= app.max_request_len(), "{kind}");
                // The mail apps wait for the greeting; their sessions say everything after.
                let silent = matches!(
                    kind,
                    AppKind::Banner | AppKind::Smtp | AppKind::Imap | AppKind::Pop3 | AppKind::Ftp
                );
                assert_eq!(len == 0, silent, "{kind}");
            }
        }
    }

    #[test]
    fn a_target_s_name_is_the_host_of_http() {
        let named = sonde_scan::targets::NamedTarget {
            addr: "198.18.0.7".parse().unwrap(),
            port: Some(80),
            name: "www.sonde.test".to_string(),
        };
        let app = AnyApp::build(AppKind::Http, &AppOptions::default())
            .unwrap()
            .with_names(Arc::new(TargetNames::new(&[named])));
        let mut buf = vec![0u8; app.max_request_len()];
        let request = |addr: &str, buf: &mut Vec<u8>| {
            let len = app.write_request(buf, addr.parse().unwrap(), 80);
            String::from_utf8(buf[..len].to_vec()).unwrap()
        };
        assert!(request("198.18.0.7", &mut buf).contains("\r\nHost: www.sonde.test\r\n"));
        assert!(request("198.18.0.8", &mut buf).contains("\r\nHost: 198.18.0.8\r\n"));
        assert_eq!(
            app.target_name("198.18.0.7".parse().unwrap(), 80),
            Some("www.sonde.test")
        );
    }

    #[test]
    fn a_request_longer_than_one_segment_is_refused() {
        let options = AppOptions {
            payload: vec![1; MAX_REQUEST_LEN + 1],
            ..AppOptions::default()
        };
        let err = AnyApp::build(AppKind::Payload, &options).unwrap_err();
        assert!(err.contains("1401 bytes") && err.contains("1400"), "{err}");
        let options = AppOptions {
            http_path: format!("/{}", "a".repeat(1400)),
            ..AppOptions::default()
        };
        assert!(AnyApp::build(AppKind::Http, &options).is_err());
        let options = AppOptions {
            payload: vec![1; MAX_REQUEST_LEN],
            ..AppOptions::default()
        };
        assert!(AnyApp::build(AppKind::Payload, &options).is_ok());
    }
}
