//! `imap` and `pop3`: the server's greeting, its capabilities, and with `--starttls` the upgrade
//! (RFC 2595): `a2 STARTTLS` (IMAP) or `STLS` (POP3), then a full TLS handshake inside the same
//! connection, whose fields are `tls`'s. As `smtp`, a session per connection that takes turns;
//! the two protocols differ only in their commands and in how a reply ends, so one session
//! reads both.

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, Session, MAX_SESSION_SEND};

use crate::text::lossy;
use crate::{AppOptions, TargetNames, TlsApp, TLS_FIELDS};

/// A line longer than this, or a reply longer than [`MAX_REPLY`], is not IMAP or POP3 talking
/// to a client that has not logged in (a capability list has a few dozen words).
const MAX_LINE: usize = 8 * 1024;
const MAX_REPLY: usize = 16 * 1024;

/// Which mail protocol a [`MailApp`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailProtocol {
    Imap,
    Pop3,
}

fn mail_fields(names: [(&'static str, &'static str); 3]) -> Vec<Field> {
    names
        .into_iter()
        .map(|(name, help)| Field {
            name,
            kind: FieldType::Str,
            help,
        })
        .chain(TLS_FIELDS.iter().copied())
        .collect()
}

/// Fields of the `imap` app: its own, then `tls`'s (empty without `--starttls`).
pub static IMAP_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| {
    mail_fields([
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
    ])
});

/// Fields of the `pop3` app: its own, then `tls`'s (empty without `--starttls`).
pub static POP3_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| {
    mail_fields([
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
    ])
});

/// Greets, asks for the capabilities, and with `--starttls` upgrades to TLS.
#[derive(Clone, Debug)]
pub struct MailApp {
    protocol: MailProtocol,
    /// `--starttls`: the TLS app the upgrade runs.
    tls: Option<TlsApp>,
    names: Option<Arc<TargetNames>>,
}

impl MailApp {
    pub fn new(protocol: MailProtocol, options: &AppOptions) -> Result<MailApp, String> {
        let tls = options.starttls.then(|| TlsApp::new(options)).transpose()?;
        Ok(MailApp {
            protocol,
            tls,
            names: None,
        })
    }

    pub fn with_names(self, names: Arc<TargetNames>) -> MailApp {
        MailApp {
            names: Some(names),
            ..self
        }
    }

    pub fn names(&self) -> Option<&TargetNames> {
        self.names.as_deref()
    }

    /// Values of [`IMAP_FIELDS`] or [`POP3_FIELDS`] for the raw reply `received` and the
    /// connection's session.
    pub fn describe_session_into(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
        values: &mut Vec<Value>,
    ) {
        let session = session.and_then(|s| s.as_any().downcast_ref::<MailSession>());
        let text = |v: Option<&Vec<u8>>| v.map_or(Value::Null, |t| lossy(t));
        values.push(text(session.and_then(|s| s.banner.as_ref())));
        values.push(text(session.and_then(|s| s.capabilities.as_ref())));
        values.push(text(session.and_then(|s| s.starttls.as_ref())));
        let upgrade = session.and_then(|s| s.tls.as_deref().map(|tls| (s.tls_from, tls)));
        TlsApp::describe_upgrade_into(self.tls.as_ref(), received, upgrade, values);
    }
}

impl App for MailApp {
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
        Some(Box::new(MailSession {
            protocol: self.protocol,
            addr,
            port,
            name,
            tls_app: self.tls.clone(),
            step: Step::Greeting,
            line: Vec::new(),
            reply_len: 0,
            received: 0,
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
    /// Reading the reply to CAPABILITY (IMAP: up to the tagged line) or CAPA (POP3: its
    /// status line).
    Capabilities,
    /// POP3: the lines of a positive CAPA reply, up to `.`.
    CapaLines,
    StartTls,
    Tls,
    Done,
}

/// One connection's IMAP or POP3 exchange.
pub(crate) struct MailSession {
    protocol: MailProtocol,
    addr: IpAddr,
    port: u16,
    name: Option<String>,
    tls_app: Option<TlsApp>,
    step: Step,
    /// The line being read, and the length of this step's reply so far.
    line: Vec<u8>,
    reply_len: usize,
    /// Bytes handed over so far (where the TLS records start).
    received: usize,
    banner: Option<Vec<u8>>,
    capabilities: Option<Vec<u8>>,
    starttls: Option<Vec<u8>>,
    tls: Option<Box<dyn Session>>,
    tls_from: usize,
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

/// Whether the space-separated `list` has the word `word` (ASCII case ignored).
fn has_word(list: &[u8], word: &[u8]) -> bool {
    list.split(|&b| b == b' ' || b == b'\n')
        .any(|w| w.eq_ignore_ascii_case(word))
}

/// What a line does to the session: go on reading, or stop the exchange.
enum Next {
    Read,
    Stop,
}

impl MailSession {
    /// Appends `line` (no line end) to the capability list, `separator` first when not empty.
    fn add_capabilities(&mut self, words: &[u8], separator: u8) {
        let list = self.capabilities.get_or_insert_with(Vec::new);
        if !list.is_empty() && !words.is_empty() {
            list.push(separator);
        }
        list.extend_from_slice(words);
    }

    /// Asks for TLS when `--starttls` and the server offers it, else says goodbye.
    fn upgrade_or_quit(&mut self, offered: bool, send: &mut Vec<u8>) -> Next {
        let (upgrade, quit) = match self.protocol {
            MailProtocol::Imap => (&b"a2 STARTTLS\r\n"[..], &b"a2 LOGOUT\r\n"[..]),
            MailProtocol::Pop3 => (&b"STLS\r\n"[..], &b"QUIT\r\n"[..]),
        };
        if self.tls_app.is_some() && offered {
            send.extend_from_slice(upgrade);
            self.step = Step::StartTls;
            Next::Read
        } else {
            send.extend_from_slice(quit);
            Next::Stop
        }
    }

    /// The server's reply to the upgrade: on a positive one, the TLS session starts.
    fn start_tls(&mut self, line: &[u8], positive: bool, send: &mut Vec<u8>) -> Next {
        self.starttls = Some(line.to_vec());
        let app = self.tls_app.as_ref().filter(|_| positive);
        let name = self.name.as_deref();
        self.tls = app.and_then(|app| app.open_named(self.addr, self.port, name, send));
        if self.tls.is_none() {
            return Next::Stop;
        }
        self.tls_from = self.received;
        self.step = Step::Tls;
        Next::Read
    }

    fn on_imap_line(&mut self, line: &[u8], send: &mut Vec<u8>) -> Next {
        match self.step {
            Step::Greeting => {
                self.banner = Some(line.to_vec());
                if !starts_with_ignore_case(line, b"* OK") {
                    return Next::Stop;
                }
                send.extend_from_slice(b"a1 CAPABILITY\r\n");
                self.step = Step::Capabilities;
                Next::Read
            }
            Step::Capabilities => {
                const UNTAGGED: &[u8] = b"* CAPABILITY ";
                if starts_with_ignore_case(line, UNTAGGED) {
                    self.add_capabilities(line[UNTAGGED.len()..].trim_ascii(), b' ');
                    return Next::Read;
                }
                if !starts_with_ignore_case(line, b"a1 ") {
                    return Next::Read;
                }
                let offered = self
                    .capabilities
                    .as_deref()
                    .is_some_and(|list| has_word(list, b"STARTTLS"));
                let ok = starts_with_ignore_case(line, b"a1 OK");
                self.upgrade_or_quit(ok && offered, send)
            }
            Step::StartTls => {
                if !starts_with_ignore_case(line, b"a2 ") {
                    return Next::Read;
                }
                let positive = starts_with_ignore_case(line, b"a2 OK");
                self.start_tls(line, positive, send)
            }
            Step::CapaLines | Step::Tls | Step::Done => Next::Stop,
        }
    }

    fn on_pop3_line(&mut self, line: &[u8], send: &mut Vec<u8>) -> Next {
        let positive = starts_with_ignore_case(line, b"+OK");
        match self.step {
            Step::Greeting => {
                self.banner = Some(line.to_vec());
                if !positive {
                    return Next::Stop;
                }
                send.extend_from_slice(b"CAPA\r\n");
                self.step = Step::Capabilities;
                Next::Read
            }
            Step::Capabilities if positive => {
                self.capabilities = Some(Vec::new());
                self.step = Step::CapaLines;
                Next::Read
            }
            // -ERR: no CAPA (RFC 2449 is an extension), so no STLS either.
            Step::Capabilities => self.upgrade_or_quit(false, send),
            Step::CapaLines if line == b"." => {
                let offered = self.capabilities.as_deref().is_some_and(|list| {
                    list.split(|&b| b == b'\n').any(|capability| {
                        let keyword = capability.split(|&b| b == b' ').next();
                        keyword.is_some_and(|k| k.eq_ignore_ascii_case(b"STLS"))
                    })
                });
                self.upgrade_or_quit(offered, send)
            }
            Step::CapaLines => {
                // A line that starts with '.' is dot-stuffed (RFC 1939 §3).
                let line = line.strip_prefix(b".").unwrap_or(line);
                self.add_capabilities(line, b'\n');
                Next::Read
            }
            Step::StartTls => self.start_tls(line, positive, send),
            Step::Tls | Step::Done => Next::Stop,
        }
    }
}

impl Session for MailSession {
    fn on_received(&mut self, mut new: &[u8], send: &mut Vec<u8>) -> bool {
        while !new.is_empty() {
            if self.step == Step::Tls {
                let tls = self.tls.as_mut().expect("a TLS step has its session");
                return tls.on_received(new, send);
            }
            let Some(end) = new.iter().position(|&b| b == b'\n') else {
                self.line.extend_from_slice(new);
                self.received += new.len();
                self.reply_len += new.len();
                return self.line.len() > MAX_LINE || self.reply_len > MAX_REPLY;
            };
            self.line.extend_from_slice(&new[..=end]);
            self.received += end + 1;
            self.reply_len += end + 1;
            new = &new[end + 1..];
            let line = std::mem::take(&mut self.line);
            if line.len() > MAX_LINE || self.reply_len > MAX_REPLY {
                return true;
            }
            let before = self.step;
            let next = match self.protocol {
                MailProtocol::Imap => self.on_imap_line(trim_line_end(&line), send),
                MailProtocol::Pop3 => self.on_pop3_line(trim_line_end(&line), send),
            };
            if self.step != before {
                self.reply_len = 0;
            }
            if let Next::Stop = next {
                self.step = Step::Done;
                return true;
            }
            self.line = line;
            self.line.clear();
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
