//! `tls` and `https`: a full TLS 1.2/1.3 handshake with rustls (see [`full`]), and what it
//! says: version, cipher, key-exchange group, ALPN, the whole certificate chain and whether it
//! validates, the ServerHello's JA3S; `https` then sends an HTTP request inside the session.
//!
//! The first-flight path stays: a hand-written ClientHello and a summary of the server's
//! first flight in clear (version, cipher, alert, certificate chain). It answers when rustls
//! cannot go on (a server of TLS 1.0/1.1 or RSA key exchange: the same connection's first
//! flight is read from the raw bytes), and alone with `--tls-max` 1.0 or 1.1 (rustls speaks
//! neither). Each row says which path answered (`tls_path`).

mod cert;
mod errors;
mod flight;
mod full;
mod hello;
mod ja3s;

use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, ReplyCursor, Session, MAX_SESSION_SEND};
use tls_parser::{TlsAlertDescription, TlsCipherSuite};

use crate::http::HttpApp;
use crate::text::lossy;
use crate::{AppOptions, AppOutcome, TargetNames, TlsVersion};
use flight::read_flight;
#[cfg(test)]
use flight::FlightEnd;
use full::{FullTls, TlsSession};
use hello::ClientHello;

pub(crate) use full::{default_roots, roots_from_pem};

/// The members of each certificate of `tls_chain`, as the leaf's own fields say them.
const CHAIN_MEMBERS: &[Field] = &[
    Field {
        name: "subject",
        kind: FieldType::Str,
        help: "subject",
    },
    Field {
        name: "issuer",
        kind: FieldType::Str,
        help: "issuer",
    },
    Field {
        name: "sans",
        kind: FieldType::Str,
        help: "DNS names and IP addresses, comma-separated",
    },
    Field {
        name: "not_before",
        kind: FieldType::Str,
        help: "start of validity, RFC 3339",
    },
    Field {
        name: "not_after",
        kind: FieldType::Str,
        help: "end of validity, RFC 3339",
    },
    Field {
        name: "key_type",
        kind: FieldType::Str,
        help: "key type",
    },
    Field {
        name: "key_bits",
        kind: FieldType::Int,
        help: "key size in bits",
    },
    Field {
        name: "sha256",
        kind: FieldType::Str,
        help: "SHA-256 of the DER, hex",
    },
];

/// Fields of the `tls` app.
pub static TLS_FIELDS: &[Field] = &[
    Field {
        name: "tls_version",
        kind: FieldType::Str,
        help: "negotiated version: SSLv3, TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3",
    },
    Field {
        name: "tls_cipher",
        kind: FieldType::Str,
        help: "cipher suite the server chose, IANA name",
    },
    Field {
        name: "tls_alert",
        kind: FieldType::Str,
        help: "the fatal alert the server sent instead (e.g. handshake_failure), else a warning it sent and went on after (e.g. unrecognized_name)",
    },
    Field {
        name: "tls_cert_subject",
        kind: FieldType::Str,
        help: "subject of the server's certificate, of any TLS version (TLS 1.3 sends it encrypted: the full handshake, the default, reads it)",
    },
    Field {
        name: "tls_cert_issuer",
        kind: FieldType::Str,
        help: "issuer of the server's certificate",
    },
    Field {
        name: "tls_cert_sans",
        kind: FieldType::Str,
        help: "DNS names and IP addresses of the certificate, comma-separated",
    },
    Field {
        name: "tls_cert_not_before",
        kind: FieldType::Str,
        help: "start of the certificate's validity, RFC 3339",
    },
    Field {
        name: "tls_cert_not_after",
        kind: FieldType::Str,
        help: "end of the certificate's validity, RFC 3339",
    },
    Field {
        name: "tls_cert_sha256",
        kind: FieldType::Str,
        help: "SHA-256 of the certificate's DER, hex",
    },
    Field {
        name: "tls_chain_len",
        kind: FieldType::Int,
        help: "certificates the server sent",
    },
    Field {
        name: "tls_chain",
        kind: FieldType::Records(CHAIN_MEMBERS),
        help: "each certificate sent, leaf first: {subject, issuer, sans, not_before, not_after, key_type, key_bits, sha256} (an array in ndjson, its JSON text in csv, a LIST of structs in parquet)",
    },
    Field {
        name: "tls_path",
        kind: FieldType::Str,
        help: "which path answered: rustls (a full handshake) or first-flight (the server's first flight in clear: TLS 1.0/1.1, RSA key exchange, --tls-max below 1.2)",
    },
    Field {
        name: "tls_kx_group",
        kind: FieldType::Str,
        help: "key-exchange group of the full handshake (X25519, secp256r1, …)",
    },
    Field {
        name: "tls_alpn",
        kind: FieldType::Str,
        help: "the protocol the server picked by ALPN (https offers http/1.1)",
    },
    Field {
        name: "tls_ja3s",
        kind: FieldType::Str,
        help: "JA3S text of the ServerHello: version,cipher,extensions",
    },
    Field {
        name: "tls_ja3s_md5",
        kind: FieldType::Str,
        help: "MD5 of tls_ja3s, hex",
    },
    Field {
        name: "tls_cert_key_type",
        kind: FieldType::Str,
        help: "key type of the server's certificate: RSA, EC, Ed25519, …",
    },
    Field {
        name: "tls_cert_key_bits",
        kind: FieldType::Int,
        help: "key size of the server's certificate in bits",
    },
    Field {
        name: "tls_chain_valid",
        kind: FieldType::Bool,
        help: "the chain validates against the root store (webpki roots, or --root-cas), and for the SNI name sent when there is one (an address-only connection checks no name)",
    },
    Field {
        name: "tls_chain_error",
        kind: FieldType::Str,
        help: "why the chain does not validate, in a sentence of at most 256 bytes (a name mismatch lists the certificate's first names and counts the rest)",
    },
    Field {
        name: "tls_error",
        kind: FieldType::Str,
        help: "why the full handshake stopped (the first flight then answers)",
    },
];

/// The `tls` app (and with an HTTP request, `https`). With `tls_max` 1.2 or 1.3 each
/// connection opens a rustls session (see [`full`]); below, it sends the first-flight
/// ClientHello, and the reply is complete at the ServerHelloDone (TLS ≤ 1.2), at a TLS 1.3
/// ServerHello, at an alert, or when the bytes are not (or no longer readable as) TLS.
#[derive(Clone, Debug)]
pub struct TlsApp {
    hello: ClientHello,
    /// The full handshake's shared configuration (`tls_max` ≥ 1.2).
    full: Option<Arc<FullTls>>,
    /// The roots chains are validated against.
    roots: Arc<rustls::RootCertStore>,
    /// Names per target: a target's name is its SNI (and Host).
    names: Option<Arc<TargetNames>>,
    /// The second connection after a handshake_failure (`AppOptions::tls_retry`).
    retry: bool,
}

impl TlsApp {
    pub fn new(options: &AppOptions) -> Result<TlsApp, String> {
        TlsApp::build(options, None)
    }

    /// `https`: the HTTP request of `options` inside the session, ALPN offering http/1.1.
    pub fn https(options: &AppOptions) -> Result<TlsApp, String> {
        if options.tls_max < TlsVersion::Tls12 {
            return Err(format!(
                "--tls-max {} leaves only the first-flight path, which cannot carry a request: \
                 https needs 1.2 or 1.3",
                options.tls_max
            ));
        }
        TlsApp::build(options, Some(HttpApp::new(options)?))
    }

    /// The longest SNI name a connection of this app sends (the run-wide one, a target's own),
    /// 0 for none.
    fn longest_sni(&self) -> usize {
        let names = self.names().map_or(0, TargetNames::longest);
        self.full.as_ref().map_or(0, |full| full.longest_sni(names))
    }

    /// `https`: the longest request of any target (its Host: `--http-host`, else a target's
    /// name or the SNI or the address, with a port).
    fn longest_request(&self) -> Option<usize> {
        let http = self.full.as_ref()?.http.as_ref()?;
        const PORT: usize = ":65535".len();
        let host = match http.fixed_host_len() {
            Some(len) => len + PORT,
            None => {
                let names = self.names().map_or(0, TargetNames::longest);
                crate::http::MAX_ADDR_HOST_LEN.max(self.longest_sni().max(names) + PORT)
            }
        };
        Some(http.request_len_with_host(host))
    }

    /// The most bytes a session of this app sends when the server follows the protocol (see
    /// [`full::FullTls::handshake_most`]) with the longest SNI name and, for `https`, the
    /// longest request in a record; `None` on the first-flight path (no session).
    pub(crate) fn full_most_sent(&self) -> Option<usize> {
        let handshake = self.full.as_ref()?.handshake_most(self.longest_sni());
        let request = self
            .longest_request()
            .map_or(0, |len| len + full::RECORD_OVERHEAD);
        Some(handshake + request)
    }

    /// As [`TlsApp::full_most_sent`], the first-flight hello's length when there is no session.
    pub(crate) fn most_sent(&self) -> usize {
        self.full_most_sent().unwrap_or(self.hello.bytes.len())
    }

    /// Whether every session fits what the engine keeps of one ([`MAX_SESSION_SEND`]); else
    /// why not, in one line.
    pub(crate) fn check_sessions(&self) -> Result<(), String> {
        let Some(most) = self.full_most_sent().filter(|&m| m > MAX_SESSION_SEND) else {
            return Ok(());
        };
        let Some(request) = self.longest_request() else {
            return Err(format!(
                "a tls session would send up to {most} bytes, more than the {MAX_SESSION_SEND} \
                 sonde keeps of one"
            ));
        };
        let handshake = most - request - full::RECORD_OVERHEAD;
        let room = MAX_SESSION_SEND - handshake - full::RECORD_OVERHEAD;
        Err(format!(
            "the https request takes up to {request} bytes (with the longest Host), and with \
             the TLS handshake's {handshake} a session would send {most}, more than the \
             {MAX_SESSION_SEND} sonde keeps of one: shorten --http-path or the headers (or the \
             names) so that the request fits in {room} bytes"
        ))
    }

    fn build(options: &AppOptions, http: Option<HttpApp>) -> Result<TlsApp, String> {
        let server_name = server_name(options)?;
        let roots = match &options.tls_root_cas {
            Some(path) => roots_from_pem(path)?,
            None => default_roots(),
        };
        let full = if options.tls_max >= TlsVersion::Tls12 {
            let alpn: &[&[u8]] = if http.is_some() { &[b"http/1.1"] } else { &[] };
            Some(Arc::new(FullTls::new(
                options.tls_max,
                server_name.as_deref(),
                alpn,
                http,
            )?))
        } else {
            None
        };
        Ok(TlsApp {
            hello: ClientHello::new(options.tls_max, server_name.as_deref())?,
            full,
            roots: Arc::new(roots),
            names: None,
            retry: options.tls_retry,
        })
    }

    /// With names per target: a target's name is its SNI (and Host).
    pub fn with_names(self, names: Arc<TargetNames>) -> TlsApp {
        TlsApp {
            names: Some(names),
            ..self
        }
    }

    pub fn names(&self) -> Option<&TargetNames> {
        self.names.as_deref()
    }

    /// Whether this is `https`.
    pub fn is_https(&self) -> bool {
        self.full.as_ref().is_some_and(|full| full.http.is_some())
    }

    /// A session for a connection to (`addr`, `port`) whose name is `name` (SNI and Host; else
    /// the run-wide ones), its ClientHello appended to `first`; `None` on the first-flight
    /// path.
    pub fn open_named(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        self.open_within(addr, port, name, first, MAX_SESSION_SEND)
    }

    /// As [`TlsApp::open_named`], for a session that may send at most `budget` bytes (the
    /// rest of [`MAX_SESSION_SEND`] after what a STARTTLS exchange sent before it).
    pub(crate) fn open_within(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        first: &mut Vec<u8>,
        budget: usize,
    ) -> Option<Box<dyn Session>> {
        let session = self.full.as_ref()?.open(addr, port, name, first, budget)?;
        Some(Box::new(session))
    }

    /// Values of [`TLS_FIELDS`] after a STARTTLS upgrade (smtp, imap, pop3): `upgrade` is where
    /// the TLS records start in `received` and the TLS session, if the exchange got that far;
    /// with no upgrade (or no `--starttls`, `app` none) every field is null. The outcome is
    /// the TLS handshake's, `None` without one.
    pub fn describe_upgrade_into(
        app: Option<&TlsApp>,
        received: &[u8],
        upgrade: Option<(usize, &dyn Session)>,
        values: &mut Vec<Value>,
    ) -> Option<AppOutcome> {
        match (app, upgrade) {
            (Some(app), Some((from, tls))) => Some(app.describe_session_into(
                received.get(from..).unwrap_or_default(),
                Some(tls),
                values,
            )),
            _ => {
                values.extend(std::iter::repeat_n(Value::Null, TLS_FIELDS.len()));
                None
            }
        }
    }

    /// Values of [`TLS_FIELDS`] for the reply `received` (first-flight path).
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) -> AppOutcome {
        self.describe_session_into(received, None, values)
    }

    /// Values of the app's fields (`https`: [`crate::HTTP_FIELDS`] first) for the raw reply
    /// `received` and the connection's session, if it had one; and the outcome: TLS when a
    /// ServerHello came (then, for `https`, the HTTP response's), the server's refusal when an
    /// alert came instead, else not TLS.
    pub fn describe_session_into(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
        values: &mut Vec<Value>,
    ) -> AppOutcome {
        let session = session.and_then(|s| s.as_any().downcast_ref::<TlsSession>());
        let http = self.full.as_ref().and_then(|full| full.http.as_ref());
        let http_outcome = http.map(|http| {
            let plaintext = session.map_or(&[][..], |s| s.plaintext.as_slice());
            http.describe_into(plaintext, values)
        });
        let flight = read_flight(received, true);
        let hello = flight.server_hello;
        let done = session.filter(|s| s.done);
        values.push(hello.map_or(Value::Null, |h| Value::Str(version_name(h.version))));
        values.push(hello.map_or(Value::Null, |h| Value::Str(cipher_name(h.cipher))));
        let alert = session
            .and_then(|s| s.failure.as_ref()?.alert())
            .or(flight.alert);
        values.push(alert.map_or(Value::Null, |a| Value::Str(alert_name(a))));
        let outcome = match (hello, alert) {
            (Some(_), _) => http_outcome.unwrap_or(AppOutcome::Success),
            (None, Some(_)) => AppOutcome::ApplicationError,
            (None, None) => AppOutcome::ProtocolError,
        };
        // The chain rustls received, else the clear one (only a whole Certificate message is
        // read; a cut one tells nothing reliable).
        let chain: Vec<&[u8]> = match done.and_then(|s| s.conn.peer_certificates()) {
            Some(certs) => certs.iter().map(|c| c.as_ref()).collect(),
            None => cert::chain_of_message(flight.certificate.as_deref()),
        };
        cert::describe_chain(&chain, values);
        let path = match (done, hello) {
            (Some(_), _) => Value::Str("rustls".into()),
            (None, Some(_)) => Value::Str("first-flight".into()),
            (None, None) => Value::Null,
        };
        values.push(path);
        let conn = done.map(|s| &s.conn);
        values.push(
            conn.and_then(|c| c.negotiated_key_exchange_group())
                .map_or(Value::Null, |g| Value::Str(format!("{:?}", g.name()))),
        );
        values.push(
            conn.and_then(|c| c.alpn_protocol())
                .map_or(Value::Null, lossy),
        );
        values.push(hello.map_or(Value::Null, |h| Value::Str(h.ja3s.text())));
        values.push(hello.map_or(Value::Null, |h| Value::Str(h.ja3s.md5())));
        cert::describe_key(&chain, values);
        match (
            chain.is_empty(),
            self.validate(&chain, session.and_then(|s| s.sni.as_ref())),
        ) {
            (true, _) => values.extend([Value::Null, Value::Null]),
            (false, Ok(())) => values.extend([Value::Bool(true), Value::Null]),
            (false, Err(why)) => values.extend([Value::Bool(false), Value::Str(why)]),
        }
        let stop = session.and_then(|s| s.failure.as_ref());
        // A session cut short by sonde's own send budget did not finish: no success.
        let outcome = match stop {
            Some(full::Stop::SendBudget(_)) => AppOutcome::UnknownError,
            _ => outcome,
        };
        let why = stop.map(|stop| {
            let limit = if self.retry && chain.is_empty() {
                RETRY_LIMIT
            } else if hello.is_none() && stop.alert() == Some(HANDSHAKE_FAILURE) {
                GROUPS_LIMIT
            } else {
                ""
            };
            Value::Str(format!("{stop}{limit}"))
        });
        values.push(why.unwrap_or(Value::Null));
        outcome
    }

    /// Whether `chain` leads to one of the roots, and names `name` when it is given (the SNI
    /// sent; an address-only connection checks no name); else why not, in at most
    /// [`MAX_CHAIN_ERROR_LEN`] bytes.
    fn validate(&self, chain: &[&[u8]], name: Option<&ServerName<'_>>) -> Result<(), String> {
        self.validate_in_full(chain, name)
            .map_err(|e| cut_to(errors::chain_error(&e), MAX_CHAIN_ERROR_LEN))
    }

    fn validate_in_full(
        &self,
        chain: &[&[u8]],
        name: Option<&ServerName<'_>>,
    ) -> Result<(), rustls::Error> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err(rustls::Error::NoCertificatesPresented);
        };
        let leaf = CertificateDer::from(*leaf);
        let intermediates: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|&der| CertificateDer::from(der))
            .collect();
        let parsed = rustls::server::ParsedCertificate::try_from(&leaf)?;
        let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            &intermediates,
            UnixTime::now(),
            algorithms.all,
        )?;
        if let Some(name) = name {
            rustls::client::verify_server_name(&parsed, name)?;
        }
        Ok(())
    }
}

/// The most bytes of `tls_chain_error`: a certificate of many names would otherwise copy them
/// all into every row.
const MAX_CHAIN_ERROR_LEN: usize = 256;

/// `text` in at most `max` bytes, cut at a character boundary and ended with `…` when cut.
fn cut_to(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let ellipsis = '…';
    let mut end = max - ellipsis.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push(ellipsis);
    text
}

/// The handshake_failure alert's description.
const HANDSHAKE_FAILURE: u8 = 40;

/// What `tls_error` adds to a handshake_failure before any ServerHello: the limit it may be.
const GROUPS_LIMIT: &str = " (nothing in common with the hello: a TLS 1.3 server of FFDHE or \
     P-521 groups only answers so, as rustls has neither; -M tls tries it again with a TLS 1.2 hello)";

/// What `tls_error` adds to a row of that second try that still has no certificate.
const RETRY_LIMIT: &str = " (a TLS 1.2 hello, after a handshake_failure at TLS 1.3: a server of \
     TLS 1.3 only whose groups are FFDHE or P-521 only shows sonde no certificate, as rustls has \
     neither)";

/// The SNI to send: `tls_sni`, else `http_host` when it is a name; never an IP address
/// (RFC 6066 §3 does not allow them).
fn server_name(options: &AppOptions) -> Result<Option<String>, String> {
    if let Some(name) = &options.tls_sni {
        if name.parse::<IpAddr>().is_ok() {
            return Err(format!(
                "bad --tls-sni {name:?}: SNI takes a host name, not an IP address (leave it out)"
            ));
        }
        if !is_host_name(name) {
            return Err(format!(
                "bad --tls-sni {name:?}: give a host name (letters, digits, '-', '.'; at most 253, labels of at most 63)"
            ));
        }
        return Ok(Some(name.clone()));
    }
    let Some(host) = &options.http_host else {
        return Ok(None);
    };
    // Host may carry a port; a bracketed IPv6 literal is no name.
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host.as_str(),
    };
    let usable = is_host_name(name) && name.parse::<IpAddr>().is_err();
    Ok(usable.then(|| name.to_string()))
}

/// A DNS name as SNI carries it: ASCII letters, digits, '-', '_', '.', at most 253 bytes, in
/// labels of at most 63.
pub(crate) fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| label.len() <= 63)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn version_name(version: u16) -> String {
    match version {
        0x0300 => "SSLv3".to_string(),
        0x0301 => "TLSv1.0".to_string(),
        0x0302 => "TLSv1.1".to_string(),
        0x0303 => "TLSv1.2".to_string(),
        0x0304 => "TLSv1.3".to_string(),
        other => format!("0x{other:04x}"),
    }
}

/// The IANA name from `tls-parser`'s table, or the number in hex.
fn cipher_name(id: u16) -> String {
    TlsCipherSuite::from_id(id)
        .map_or_else(|| format!("0x{id:04x}"), |suite| suite.name.to_string())
}

/// The RFC name of an alert (`handshake_failure`), from `tls-parser`'s table; unknown ones as
/// `alert_<n>`.
fn alert_name(code: u8) -> String {
    let camel = TlsAlertDescription(code).to_string();
    if camel.starts_with("TlsAlertDescription(") {
        return format!("alert_{code}");
    }
    // tls-parser abbreviates "certificate" in three names the RFCs spell out.
    let camel = match camel.as_str() {
        "CertUnobtainable" => "CertificateUnobtainable",
        "BadCertStatusResponse" => "BadCertificateStatusResponse",
        "BadCertHashValue" => "BadCertificateHashValue",
        other => other,
    };
    let mut snake = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}

impl App for TlsApp {
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        self.hello.write(buf, addr, port)
    }

    fn max_request_len(&self) -> usize {
        self.hello.bytes.len()
    }

    fn max_sent_len(&self) -> usize {
        match self.full {
            Some(_) => MAX_SESSION_SEND,
            None => self.hello.bytes.len(),
        }
    }

    fn open_session(
        &self,
        addr: IpAddr,
        port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        let name = self.names().and_then(|names| names.name_of(addr, port));
        self.open_named(addr, port, name, first)
    }

    fn is_complete(&self, received: &[u8]) -> bool {
        self.is_complete_after(received, &mut ReplyCursor::default())
    }

    /// Reads on from the cursor (see [`flight::is_complete_after`]).
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        flight::is_complete_after(received, cursor)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod session_tests;
