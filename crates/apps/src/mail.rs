//! The line protocols that upgrade to TLS: `smtp`, `imap`, `pop3` and `ftp`. Each is a
//! [`LineProtocol`] table (the greeting it expects, the capability command, the upgrade command
//! and the reply that accepts it, its field names), and one session runs them all
//! ([`LineSession`]): it reads the greeting, asks for the capabilities, and with `--starttls`,
//! when the server offers the upgrade, asks for it (STARTTLS, RFC 3207 and 2595; STLS; AUTH TLS,
//! RFC 4217) and makes a full TLS handshake inside the same connection, whose fields are
//! `tls`'s. Without the upgrade it says goodbye. The protocols differ in how a reply ends and
//! which of its lines says yes or no ([`Framing`]).

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, Session, MAX_SESSION_SEND};

use crate::text::lossy;
use crate::{AppOptions, AppOutcome, TargetNames, TlsApp, TLS_FIELDS};

/// A line longer than this, or a reply longer than [`MAX_REPLY`], is not one of these protocols
/// talking to a client that has not logged in (SMTP lines have at most 512 bytes, RFC 5321
/// §4.5.3.1.5; a capability list has a few dozen words).
const MAX_LINE: usize = 8 * 1024;
const MAX_REPLY: usize = 16 * 1024;

/// How a protocol's replies end, which line of a reply says yes or no, and what is kept of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// SMTP (RFC 5321 §4.2.1): every line starts with the code; `ddd-` goes on, any other line
    /// ends the reply. Replies are kept whole, but for the last line end (see
    /// [`Framing::keep`]).
    Smtp,
    /// FTP (RFC 959 §4.2): `ddd-` opens a reply of free lines that a line starting with the
    /// same code and a space ends. Replies are kept whole, but for the last line end; FEAT's
    /// features one per line.
    Ftp,
    /// IMAP (RFC 9051): the greeting is one line; a command's reply is untagged lines up to the
    /// tagged one (the command's tag), which says yes or no and is what is kept.
    Imap,
    /// POP3 (RFC 1939, 2449): one status line, and a positive CAPA reply goes on up to `.`.
    Pop3,
}

/// The capability that says the server takes the upgrade: a line (a word for IMAP) whose first
/// word is `keyword` and, with `mechanism`, whose further words (`;`-separated too) name it.
#[derive(Clone, Copy, Debug)]
struct Offer {
    keyword: &'static [u8],
    mechanism: Option<&'static [u8]>,
}

/// One protocol: what the client says and which replies let it go on.
#[derive(Debug)]
pub struct LineProtocol {
    name: &'static str,
    framing: Framing,
    /// How a positive greeting starts (ASCII case ignored), and so the other replies.
    greeting_ok: &'static [u8],
    capability_command: &'static [u8],
    capability_ok: &'static [u8],
    offer: Offer,
    upgrade_command: &'static [u8],
    upgrade_ok: &'static [u8],
    quit: &'static [u8],
    /// The names and help of the greeting, capability and upgrade fields.
    fields: [(&'static str, &'static str); 3],
}

pub(crate) static SMTP: LineProtocol = LineProtocol {
    name: "smtp",
    framing: Framing::Smtp,
    greeting_ok: b"2",
    capability_command: b"EHLO sonde.invalid\r\n",
    capability_ok: b"",
    offer: Offer {
        keyword: b"STARTTLS",
        mechanism: None,
    },
    upgrade_command: b"STARTTLS\r\n",
    upgrade_ok: b"2",
    quit: b"QUIT\r\n",
    fields: [
        (
            "smtp_banner",
            "the server's greeting: all its lines, without the last line end",
        ),
        (
            "smtp_ehlo",
            "the server's reply to EHLO: its name and extensions, without the last line end",
        ),
        (
            "smtp_starttls",
            "the server's reply to STARTTLS (--starttls), without its last line end",
        ),
    ],
};

pub(crate) static IMAP: LineProtocol = LineProtocol {
    name: "imap",
    framing: Framing::Imap,
    greeting_ok: b"* OK",
    capability_command: b"a1 CAPABILITY\r\n",
    capability_ok: b"a1 OK",
    offer: Offer {
        keyword: b"STARTTLS",
        mechanism: None,
    },
    upgrade_command: b"a2 STARTTLS\r\n",
    upgrade_ok: b"a2 OK",
    quit: b"a2 LOGOUT\r\n",
    fields: [
        (
            "imap_banner",
            "the server's greeting line (without its line end)",
        ),
        (
            "imap_capabilities",
            "the reply to CAPABILITY: its capability list, space-separated",
        ),
        (
            "imap_starttls",
            "the server's reply to STARTTLS (--starttls), without its line end",
        ),
    ],
};

pub(crate) static POP3: LineProtocol = LineProtocol {
    name: "pop3",
    framing: Framing::Pop3,
    greeting_ok: b"+OK",
    capability_command: b"CAPA\r\n",
    capability_ok: b"+OK",
    offer: Offer {
        keyword: b"STLS",
        mechanism: None,
    },
    upgrade_command: b"STLS\r\n",
    upgrade_ok: b"+OK",
    quit: b"QUIT\r\n",
    fields: [
        (
            "pop3_banner",
            "the server's greeting line (without its line end)",
        ),
        (
            "pop3_capabilities",
            "the reply to CAPA: one capability per line (LF-separated)",
        ),
        (
            "pop3_starttls",
            "the server's reply to STLS (--starttls), without its line end",
        ),
    ],
};

pub(crate) static FTP: LineProtocol = LineProtocol {
    name: "ftp",
    framing: Framing::Ftp,
    greeting_ok: b"2",
    capability_command: b"FEAT\r\n",
    capability_ok: b"2",
    offer: Offer {
        keyword: b"AUTH",
        mechanism: Some(b"TLS"),
    },
    upgrade_command: b"AUTH TLS\r\n",
    upgrade_ok: b"234",
    quit: b"QUIT\r\n",
    fields: [
        (
            "ftp_banner",
            "the server's greeting: all its lines, without the last line end",
        ),
        (
            "ftp_features",
            "the features the reply to FEAT lists, one per line (LF-separated)",
        ),
        (
            "ftp_starttls",
            "the server's reply to AUTH TLS (--starttls), without its last line end",
        ),
    ],
};

impl LineProtocol {
    /// The protocol's fields: its own three, then `tls`'s (empty without `--starttls`).
    fn fields(&self) -> Vec<Field> {
        self.fields
            .into_iter()
            .map(|(name, help)| Field {
                name,
                kind: FieldType::Str,
                help,
            })
            .chain(TLS_FIELDS.iter().copied())
            .collect()
    }

    /// What the greeting `banner` (as kept) says: the protocol and yes; the protocol and no (a
    /// reply code other than 2xx, `* NO`, `* BAD`, `* BYE`, `-ERR`: the server turns us away);
    /// or not the protocol (no greeting, or a line none of its replies starts).
    fn outcome(&self, banner: Option<&[u8]>) -> AppOutcome {
        let Some(status) = banner.map(|b| self.framing.status(b)) else {
            return AppOutcome::ProtocolError;
        };
        let starts =
            |prefixes: &[&[u8]]| prefixes.iter().any(|p| starts_with_ignore_case(status, p));
        let (yes, no) = match self.framing {
            Framing::Smtp | Framing::Ftp if !has_reply_code(status) => (false, false),
            Framing::Smtp | Framing::Ftp => (status[0] == b'2', status[0] != b'2'),
            Framing::Imap => (
                starts(&[b"* OK", b"* PREAUTH"]),
                starts(&[b"* NO", b"* BAD", b"* BYE"]),
            ),
            Framing::Pop3 => (starts(&[b"+OK"]), starts(&[b"-ERR"])),
        };
        match (yes, no) {
            (true, _) => AppOutcome::Success,
            (false, true) => AppOutcome::ApplicationError,
            (false, false) => AppOutcome::ProtocolError,
        }
    }

    /// The step's command that the reply answers, whose tag ends an IMAP reply.
    fn command_of(&self, step: Step) -> &'static [u8] {
        match step {
            Step::Capabilities => self.capability_command,
            _ => self.upgrade_command,
        }
    }
}

pub static SMTP_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| SMTP.fields());
pub static IMAP_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| IMAP.fields());
pub static POP3_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| POP3.fields());
pub static FTP_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| FTP.fields());

/// Greets, asks for the capabilities, and with `--starttls` upgrades to TLS.
#[derive(Clone, Debug)]
pub struct LineApp {
    protocol: &'static LineProtocol,
    /// `--starttls`: the TLS app the upgrade runs.
    tls: Option<TlsApp>,
    names: Option<Arc<TargetNames>>,
}

impl LineApp {
    pub(crate) fn new(
        protocol: &'static LineProtocol,
        options: &AppOptions,
    ) -> Result<LineApp, String> {
        let tls = options.starttls.then(|| TlsApp::new(options)).transpose()?;
        Ok(LineApp {
            protocol,
            tls,
            names: None,
        })
    }

    /// The most bytes a session sends: the capability command, and with `--starttls` the
    /// upgrade command and the TLS session's most (or the goodbye without it).
    pub(crate) fn most_sent(&self) -> usize {
        let p = self.protocol;
        let after = match &self.tls {
            Some(tls) => (p.upgrade_command.len() + tls.most_sent()).max(p.quit.len()),
            None => p.quit.len(),
        };
        p.capability_command.len() + after
    }

    /// Whether the session upgrades to TLS when offered (`--starttls`).
    pub fn upgrades(&self) -> bool {
        self.tls.is_some()
    }

    /// The protocol's name (`smtp`, `imap`, `pop3`, `ftp`).
    pub fn protocol(&self) -> &'static str {
        self.protocol.name
    }

    pub fn with_names(self, names: Arc<TargetNames>) -> LineApp {
        LineApp {
            names: Some(names),
            ..self
        }
    }

    pub fn names(&self) -> Option<&TargetNames> {
        self.names.as_deref()
    }

    /// Values of the protocol's fields for the raw reply `received` and the connection's
    /// session, and the outcome: the greeting's (see [`LineProtocol::outcome`]), then a
    /// refused upgrade's, then the TLS handshake's.
    pub fn describe_session_into(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
        values: &mut Vec<Value>,
    ) -> AppOutcome {
        let session = session.and_then(|s| s.as_any().downcast_ref::<LineSession>());
        let text = |v: Option<&Vec<u8>>| v.map_or(Value::Null, |t| lossy(t));
        let banner = session.and_then(|s| s.banner.as_ref());
        let starttls = session.and_then(|s| s.starttls.as_ref());
        values.push(text(banner));
        values.push(text(session.and_then(|s| s.capabilities.as_ref())));
        values.push(text(starttls));
        let upgrade = session.and_then(|s| s.tls.as_deref().map(|tls| (s.tls_from, tls)));
        let tls = TlsApp::describe_upgrade_into(self.tls.as_ref(), received, upgrade, values);
        let p = self.protocol;
        match (p.outcome(banner.map(Vec::as_slice)), starttls, tls) {
            (AppOutcome::Success, Some(reply), None)
                if !starts_with_ignore_case(p.framing.status(reply), p.upgrade_ok) =>
            {
                AppOutcome::ApplicationError
            }
            (AppOutcome::Success, _, Some(tls)) => tls,
            (greeting, _, _) => greeting,
        }
    }
}

impl App for LineApp {
    fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        0
    }

    fn max_request_len(&self) -> usize {
        0
    }

    fn max_sent_len(&self) -> usize {
        MAX_SESSION_SEND
    }

    /// Never asked: the session says when the exchange is complete.
    fn is_complete(&self, _received: &[u8]) -> bool {
        true
    }

    fn open_session(
        &self,
        addr: IpAddr,
        port: u16,
        _first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        let name = self
            .names()
            .and_then(|names| names.name_of(addr, port))
            .map(str::to_string);
        Some(Box::new(LineSession {
            protocol: self.protocol,
            addr,
            port,
            name,
            tls_app: self.tls.clone(),
            step: Step::Greeting,
            line: Vec::new(),
            reply: Vec::new(),
            received: 0,
            sent: 0,
            banner: None,
            capabilities: None,
            starttls: None,
            tls: None,
            tls_from: 0,
        }))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Greeting,
    Capabilities,
    Upgrade,
    Tls,
    Done,
}

/// One connection's exchange.
pub(crate) struct LineSession {
    protocol: &'static LineProtocol,
    addr: IpAddr,
    port: u16,
    name: Option<String>,
    tls_app: Option<TlsApp>,
    step: Step,
    /// The line being read, and the reply's whole lines so far.
    line: Vec<u8>,
    reply: Vec<u8>,
    /// Bytes handed over so far (where the TLS records start).
    received: usize,
    /// Bytes this session has sent before TLS: the TLS session may send the rest of
    /// [`MAX_SESSION_SEND`].
    sent: usize,
    banner: Option<Vec<u8>>,
    capabilities: Option<Vec<u8>>,
    starttls: Option<Vec<u8>>,
    tls: Option<Box<dyn Session>>,
    tls_from: usize,
}

/// Whether `line` starts with a reply code (RFC 5321 §4.2, RFC 959 §4.2): three digits, then a
/// space, a hyphen or the end.
fn has_reply_code(line: &[u8]) -> bool {
    line.len() >= 3
        && line[..3].iter().all(u8::is_ascii_digit)
        && line.get(3).is_none_or(|&b| b == b' ' || b == b'-')
}

/// `line` without its line end (LF or CR LF).
fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Whether `line` starts with `prefix`, ignoring ASCII case.
fn starts_with_ignore_case(line: &[u8], prefix: &[u8]) -> bool {
    line.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// The lines of `reply`, each without its line end.
fn lines(reply: &[u8]) -> impl Iterator<Item = &[u8]> {
    reply.split_inclusive(|&b| b == b'\n').map(trim_line_end)
}

/// Appends `item` to the list `list`, `separator` first when neither is empty.
fn add_to_list(list: &mut Vec<u8>, item: &[u8], separator: u8) {
    if !list.is_empty() && !item.is_empty() {
        list.push(separator);
    }
    list.extend_from_slice(item);
}

impl Offer {
    /// Whether the capability `line` is this one.
    fn is(&self, line: &[u8]) -> bool {
        let mut words = line
            .split(|&b| b == b' ' || b == b';')
            .filter(|w| !w.is_empty());
        let keyword = words
            .next()
            .is_some_and(|w| w.eq_ignore_ascii_case(self.keyword));
        keyword
            && self
                .mechanism
                .is_none_or(|m| words.any(|w| w.eq_ignore_ascii_case(m)))
    }
}

/// Whether `line` ends an FTP reply whose first line is `first`: a first line `ddd-` opens a
/// multi-line reply, which a line `ddd ` (or `ddd`) with the same code ends.
fn ftp_reply_ends(first: &[u8], line: &[u8]) -> bool {
    match first.get(..4) {
        Some(&[a, b, c, b'-']) => {
            let same_code = line.get(..3) == Some(&[a, b, c][..]);
            same_code && line.get(3).is_none_or(|&s| s == b' ')
        }
        _ => true,
    }
}

/// The tag of an IMAP `command` with its space (`a1 `), which starts the reply's last line.
fn tag_of(command: &[u8]) -> &[u8] {
    let end = command.iter().position(|&b| b == b' ').map_or(0, |i| i + 1);
    &command[..end]
}

impl Framing {
    /// Whether the line just read (`line`, without its line end) ends the reply to `step`,
    /// whose first line is `first`.
    fn ends(self, p: &LineProtocol, step: Step, first: &[u8], line: &[u8]) -> bool {
        match (self, step) {
            (Framing::Smtp, _) => line.get(3) != Some(&b'-'),
            (Framing::Ftp, _) => ftp_reply_ends(first, line),
            (Framing::Imap, Step::Greeting) => true,
            (Framing::Imap, step) => starts_with_ignore_case(line, tag_of(p.command_of(step))),
            (Framing::Pop3, Step::Capabilities) => {
                !starts_with_ignore_case(first, p.capability_ok) || line == b"."
            }
            (Framing::Pop3, _) => true,
        }
    }

    /// The line of a whole `reply` that says yes or no (IMAP: the tagged, last one).
    fn status(self, reply: &[u8]) -> &[u8] {
        match self {
            Framing::Imap => lines(reply).last().unwrap_or_default(),
            _ => lines(reply).next().unwrap_or_default(),
        }
    }

    /// What a row keeps of the greeting or of the reply to the upgrade: the reply without its
    /// last line end, as every `*_banner` field is (`ssh_banner` too): the lines of a
    /// multi-line reply keep the line ends between them.
    fn keep(self, reply: &[u8]) -> Vec<u8> {
        match self {
            Framing::Smtp | Framing::Ftp => trim_line_end(reply).to_vec(),
            Framing::Imap | Framing::Pop3 => self.status(reply).to_vec(),
        }
    }

    /// The capability list of a whole reply to the capability command, positive (`ok`) or not.
    fn capabilities(self, reply: &[u8], ok: bool) -> Option<Vec<u8>> {
        let mut list = Vec::new();
        match self {
            Framing::Smtp => return Some(trim_line_end(reply).to_vec()),
            Framing::Imap => {
                const UNTAGGED: &[u8] = b"* CAPABILITY ";
                let mut any = false;
                for line in lines(reply).filter(|l| starts_with_ignore_case(l, UNTAGGED)) {
                    add_to_list(&mut list, line[UNTAGGED.len()..].trim_ascii(), b' ');
                    any = true;
                }
                return any.then_some(list);
            }
            // The lines between the first and the last; a single-line reply lists nothing.
            Framing::Ftp if ok => {
                let all: Vec<&[u8]> = lines(reply).collect();
                let inner = all.get(1..all.len().saturating_sub(1)).unwrap_or_default();
                for feature in inner {
                    add_to_list(&mut list, feature.trim_ascii(), b'\n');
                }
            }
            // After the status line, up to `.`; a line that starts with '.' is dot-stuffed
            // (RFC 1939 §3).
            Framing::Pop3 if ok => {
                for line in lines(reply).skip(1).filter(|&l| l != b".") {
                    add_to_list(&mut list, line.strip_prefix(b".").unwrap_or(line), b'\n');
                }
            }
            Framing::Ftp | Framing::Pop3 => return None,
        }
        Some(list)
    }

    /// Whether the capability list `list` (as [`Framing::capabilities`] made it) has `offer`.
    fn offers(self, list: &[u8], offer: Offer) -> bool {
        match self {
            // Each line's text after its code and separator.
            Framing::Smtp => lines(list).any(|l| offer.is(l.get(4..).unwrap_or_default())),
            Framing::Imap => list.split(|&b| b == b' ').any(|word| offer.is(word)),
            Framing::Ftp | Framing::Pop3 => list.split(|&b| b == b'\n').any(|l| offer.is(l)),
        }
    }
}

/// What a reply does to the session: go on reading, or stop the exchange.
enum Next {
    Read,
    Stop,
}

impl LineSession {
    /// Asks for TLS when `--starttls` and the server offers it, else says goodbye.
    fn upgrade_or_quit(&mut self, offered: bool, send: &mut Vec<u8>) -> Next {
        if self.tls_app.is_some() && offered {
            self.say(self.protocol.upgrade_command, send);
            self.step = Step::Upgrade;
            Next::Read
        } else {
            self.say(self.protocol.quit, send);
            Next::Stop
        }
    }

    /// Sends `command`, counting it.
    fn say(&mut self, command: &[u8], send: &mut Vec<u8>) {
        send.extend_from_slice(command);
        self.sent += command.len();
    }

    /// The server's reply to the upgrade: on a positive one, the TLS session starts.
    fn start_tls(&mut self, positive: bool, send: &mut Vec<u8>) -> Next {
        let app = self.tls_app.as_ref().filter(|_| positive);
        let name = self.name.as_deref();
        let budget = MAX_SESSION_SEND.saturating_sub(self.sent);
        self.tls = app.and_then(|app| app.open_within(self.addr, self.port, name, send, budget));
        if self.tls.is_none() {
            return Next::Stop;
        }
        self.tls_from = self.received;
        self.step = Step::Tls;
        Next::Read
    }

    /// A whole reply to the current step.
    fn on_reply(&mut self, reply: &[u8], send: &mut Vec<u8>) -> Next {
        let p = self.protocol;
        let status = p.framing.status(reply);
        match self.step {
            Step::Greeting => {
                self.banner = Some(p.framing.keep(reply));
                if !starts_with_ignore_case(status, p.greeting_ok) {
                    return Next::Stop;
                }
                self.say(p.capability_command, send);
                self.step = Step::Capabilities;
                Next::Read
            }
            Step::Capabilities => {
                let ok = starts_with_ignore_case(status, p.capability_ok);
                self.capabilities = p.framing.capabilities(reply, ok);
                let list = self.capabilities.as_deref().filter(|_| ok);
                let offered = list.is_some_and(|list| p.framing.offers(list, p.offer));
                self.upgrade_or_quit(offered, send)
            }
            Step::Upgrade => {
                self.starttls = Some(p.framing.keep(reply));
                self.start_tls(starts_with_ignore_case(status, p.upgrade_ok), send)
            }
            Step::Tls | Step::Done => Next::Stop,
        }
    }

    /// Whether the line at `reply[from..]` ends the reply.
    fn reply_ends(&self, from: usize) -> bool {
        let first = lines(&self.reply).next().unwrap_or_default();
        let line = trim_line_end(&self.reply[from..]);
        self.protocol
            .framing
            .ends(self.protocol, self.step, first, line)
    }

    fn too_long(&self) -> bool {
        self.line.len() > MAX_LINE || self.reply.len() + self.line.len() > MAX_REPLY
    }
}

impl Session for LineSession {
    fn on_received(&mut self, mut new: &[u8], send: &mut Vec<u8>) -> bool {
        while !new.is_empty() {
            if self.step == Step::Tls {
                let tls = self.tls.as_mut().expect("a TLS step has its session");
                return tls.on_received(new, send);
            }
            let Some(end) = new.iter().position(|&b| b == b'\n') else {
                self.line.extend_from_slice(new);
                self.received += new.len();
                return self.too_long();
            };
            self.line.extend_from_slice(&new[..=end]);
            self.received += end + 1;
            new = &new[end + 1..];
            if self.too_long() {
                self.step = Step::Done;
                return true;
            }
            let from = self.reply.len();
            self.reply.append(&mut self.line);
            if !self.reply_ends(from) {
                continue;
            }
            let reply = std::mem::take(&mut self.reply);
            let next = self.on_reply(&reply, send);
            self.reply = reply;
            self.reply.clear();
            if let Next::Stop = next {
                self.step = Step::Done;
                return true;
            }
        }
        self.step == Step::Done
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
#[path = "mail_tests.rs"]
mod tests;
