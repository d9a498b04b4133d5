//! `smtp`: the server's greeting, our EHLO and its reply, and with `--starttls` the upgrade
//! (RFC 3207): STARTTLS, then a full TLS handshake inside the same connection, whose fields are
//! `tls`'s. A session per connection: the exchange takes turns.

use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, Session, MAX_SESSION_SEND};

use crate::text::lossy;
use crate::{AppOptions, TargetNames, TlsApp, TLS_FIELDS};

/// A reply longer than this is not SMTP (RFC 5321 §4.5.3.1.5: lines of at most 512 bytes; a
/// long EHLO reply has a few dozen).
const MAX_REPLY: usize = 16 * 1024;

/// Fields of the `smtp` app: its own, then `tls`'s (empty without `--starttls`).
pub static SMTP_FIELDS: LazyLock<Vec<Field>> = LazyLock::new(|| {
    [
        Field {
            name: "smtp_banner",
            kind: FieldType::Str,
            help: "the server's greeting (all its lines)",
        },
        Field {
            name: "smtp_ehlo",
            kind: FieldType::Str,
            help: "the server's reply to EHLO: its name and extensions",
        },
        Field {
            name: "smtp_starttls",
            kind: FieldType::Str,
            help: "the server's reply to STARTTLS (--starttls)",
        },
    ]
    .into_iter()
    .chain(TLS_FIELDS.iter().copied())
    .collect()
});

/// Greets with EHLO, and with `--starttls` upgrades to TLS.
#[derive(Clone, Debug)]
pub struct SmtpApp {
    /// `--starttls`: the TLS app the upgrade runs.
    tls: Option<TlsApp>,
    names: Option<Arc<TargetNames>>,
}

impl SmtpApp {
    pub fn new(options: &AppOptions) -> Result<SmtpApp, String> {
        let tls = options.starttls.then(|| TlsApp::new(options)).transpose()?;
        Ok(SmtpApp { tls, names: None })
    }

    pub fn with_names(self, names: Arc<TargetNames>) -> SmtpApp {
        SmtpApp {
            names: Some(names),
            ..self
        }
    }

    pub fn names(&self) -> Option<&TargetNames> {
        self.names.as_deref()
    }

    /// Values of [`SMTP_FIELDS`] for the raw reply `received` and the connection's session.
    pub fn describe_session_into(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
        values: &mut Vec<Value>,
    ) {
        let session = session.and_then(|s| s.as_any().downcast_ref::<SmtpSession>());
        let text = |reply: Option<&Vec<u8>>| reply.map_or(Value::Null, |r| lossy(r));
        values.push(text(session.and_then(|s| s.banner.as_ref())));
        values.push(text(session.and_then(|s| s.ehlo.as_ref())));
        values.push(text(session.and_then(|s| s.starttls.as_ref())));
        let upgrade = session.and_then(|s| s.tls.as_deref().map(|tls| (s.tls_from, tls)));
        TlsApp::describe_upgrade_into(self.tls.as_ref(), received, upgrade, values);
    }
}

impl App for SmtpApp {
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
        Some(Box::new(SmtpSession {
            addr,
            port,
            name,
            tls_app: self.tls.clone(),
            step: Step::Banner,
            line: Vec::new(),
            reply: Vec::new(),
            received: 0,
            banner: None,
            ehlo: None,
            starttls: None,
            tls: None,
            tls_from: 0,
        }))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Banner,
    Ehlo,
    StartTls,
    Tls,
    Done,
}

/// One connection's SMTP exchange.
pub(crate) struct SmtpSession {
    addr: IpAddr,
    port: u16,
    name: Option<String>,
    tls_app: Option<TlsApp>,
    step: Step,
    /// The reply line being read, and the reply's lines so far.
    line: Vec<u8>,
    reply: Vec<u8>,
    /// Reply bytes handed over so far (where the TLS records start).
    received: usize,
    banner: Option<Vec<u8>>,
    ehlo: Option<Vec<u8>>,
    starttls: Option<Vec<u8>>,
    tls: Option<Box<dyn Session>>,
    tls_from: usize,
}

impl SmtpSession {
    /// Reads reply bytes up to the end of a reply (its last line: `ddd ` or just `ddd`);
    /// returns how many bytes of `new` it took and the whole reply once it ended.
    fn read_reply(&mut self, new: &[u8]) -> (usize, Option<Vec<u8>>) {
        for (i, &byte) in new.iter().enumerate() {
            self.line.push(byte);
            if byte != b'\n' {
                continue;
            }
            self.reply.append(&mut self.line);
            let line = &self.reply[self.reply[..self.reply.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)..];
            let last = line.len() < 4 + 1 || line[3] != b'-';
            if last || self.reply.len() > MAX_REPLY {
                return (i + 1, Some(std::mem::take(&mut self.reply)));
            }
        }
        (new.len(), None)
    }
}

/// Whether an EHLO reply lists STARTTLS (`250-STARTTLS` or `250 STARTTLS`).
fn offers_starttls(reply: &[u8]) -> bool {
    reply.split(|&b| b == b'\n').any(|line| {
        line.get(4..)
            .is_some_and(|ext| ext.trim_ascii().eq_ignore_ascii_case(b"STARTTLS"))
    })
}

impl Session for SmtpSession {
    fn on_received(&mut self, mut new: &[u8], send: &mut Vec<u8>) -> bool {
        while !new.is_empty() {
            if self.step == Step::Tls {
                let tls = self.tls.as_mut().expect("a TLS step has its session");
                return tls.on_received(new, send);
            }
            let (taken, reply) = self.read_reply(new);
            self.received += taken;
            new = &new[taken..];
            let Some(reply) = reply else {
                return self.line.len() + self.reply.len() > MAX_REPLY;
            };
            let positive = |code: u8| reply.first() == Some(&code);
            match self.step {
                Step::Banner => {
                    let go_on = positive(b'2');
                    self.banner = Some(reply);
                    if !go_on {
                        return true;
                    }
                    send.extend_from_slice(b"EHLO sonde.invalid\r\n");
                    self.step = Step::Ehlo;
                }
                Step::Ehlo => {
                    let upgrade = self.tls_app.is_some() && offers_starttls(&reply);
                    self.ehlo = Some(reply);
                    if !upgrade {
                        send.extend_from_slice(b"QUIT\r\n");
                        return true;
                    }
                    send.extend_from_slice(b"STARTTLS\r\n");
                    self.step = Step::StartTls;
                }
                Step::StartTls => {
                    let go_on = positive(b'2');
                    self.starttls = Some(reply);
                    let app = self.tls_app.as_ref().filter(|_| go_on);
                    let name = self.name.as_deref();
                    self.tls = app.and_then(|app| app.open_named(self.addr, self.port, name, send));
                    if self.tls.is_none() {
                        return true;
                    }
                    self.tls_from = self.received;
                    self.step = Step::Tls;
                }
                Step::Tls | Step::Done => return true,
            }
        }
        self.step == Step::Done
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use super::*;
    use crate::{AnyApp, AppKind};

    const LEAF_PEM: &[u8] = include_bytes!("../testdata/session_leaf.pem");
    const LEAF_KEY: &[u8] = include_bytes!("../testdata/session_leaf.key");
    const LEAF_SHA256: &str = "9fd880e306b0d4dec471d53e5a47f6814e5019894fa7a19473e408d4c8ca11c4";

    fn server() -> rustls::ServerConnection {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(LEAF_PEM)
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        rustls::ServerConnection::new(Arc::new(config)).unwrap()
    }

    fn field<'v>(app: &AnyApp, values: &'v [Value], name: &str) -> &'v Value {
        let at = app.fields().iter().position(|f| f.name == name).unwrap();
        &values[at]
    }

    /// A scripted SMTP server, then rustls's own server after STARTTLS, its bytes handed over
    /// in segments of 3 bytes.
    #[test]
    fn starttls_upgrades_and_the_certificate_is_read() {
        let options = AppOptions {
            starttls: true,
            ..AppOptions::default()
        };
        let app = AnyApp::build(AppKind::Smtp, &options).unwrap();
        let addr = "198.18.0.7".parse().unwrap();
        let mut sent = Vec::new();
        let mut session = app.open_session(addr, 25, &mut sent).unwrap();
        assert!(sent.is_empty(), "the server speaks first");
        let mut raw = Vec::new();
        let mut feed = |bytes: &[u8], session: &mut Box<dyn Session>, sent: &mut Vec<u8>| {
            raw.extend_from_slice(bytes);
            bytes
                .chunks(3)
                .any(|piece| session.on_received(piece, sent))
        };
        assert!(!feed(
            b"220-mail.test ESMTP\r\n220 hello\r\n",
            &mut session,
            &mut sent
        ));
        assert_eq!(std::mem::take(&mut sent), b"EHLO sonde.invalid\r\n");
        let ehlo = b"250-mail.test\r\n250-SIZE 10240000\r\n250-STARTTLS\r\n250 8BITMIME\r\n";
        assert!(!feed(ehlo, &mut session, &mut sent));
        assert_eq!(std::mem::take(&mut sent), b"STARTTLS\r\n");
        assert!(!feed(
            b"220 2.0.0 Ready to start TLS\r\n",
            &mut session,
            &mut sent
        ));
        assert!(sent.starts_with(&[0x16, 0x03]), "a ClientHello follows");
        let mut server = server();
        let mut done = false;
        for _ in 0..20 {
            let mut incoming = &sent[..];
            while !incoming.is_empty() {
                server.read_tls(&mut incoming).unwrap();
                server.process_new_packets().unwrap();
            }
            sent.clear();
            let _ = server.reader().read(&mut [0u8; 64]);
            let mut out = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut out).unwrap();
            }
            if feed(&out, &mut session, &mut sent) {
                done = true;
                break;
            }
        }
        assert!(done, "the handshake ends the exchange");
        let values = app.describe_session(&raw, Some(session.as_ref()));
        assert_eq!(values.len(), app.fields().len());
        let text = |s: &[u8]| Value::Str(String::from_utf8(s.to_vec()).unwrap());
        assert_eq!(
            field(&app, &values, "smtp_banner"),
            &text(b"220-mail.test ESMTP\r\n220 hello\r\n")
        );
        assert_eq!(field(&app, &values, "smtp_ehlo"), &text(ehlo));
        assert_eq!(
            field(&app, &values, "tls_version"),
            &Value::Str("TLSv1.3".into())
        );
        assert_eq!(
            field(&app, &values, "tls_path"),
            &Value::Str("rustls".into())
        );
        assert_eq!(
            field(&app, &values, "tls_cert_sha256"),
            &Value::Str(LEAF_SHA256.into())
        );
    }

    #[test]
    fn without_starttls_it_greets_and_quits() {
        let app = AnyApp::build(AppKind::Smtp, &AppOptions::default()).unwrap();
        let mut sent = Vec::new();
        let mut session = app
            .open_session("198.18.0.7".parse().unwrap(), 25, &mut sent)
            .unwrap();
        assert!(!session.on_received(b"220 mail.test ESMTP\r\n", &mut sent));
        assert!(session.on_received(b"250-mail.test\r\n250 STARTTLS\r\n", &mut sent));
        assert_eq!(sent, b"EHLO sonde.invalid\r\nQUIT\r\n");
        let values = app.describe_session(b"", Some(session.as_ref()));
        assert_eq!(field(&app, &values, "smtp_starttls"), &Value::Null);
        assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
        // A greeting that refuses ends it at once; endless lines end it too.
        let mut session = app
            .open_session("198.18.0.7".parse().unwrap(), 25, &mut sent)
            .unwrap();
        assert!(session.on_received(b"554 go away\r\n", &mut sent));
        let mut session = app
            .open_session("198.18.0.7".parse().unwrap(), 25, &mut sent)
            .unwrap();
        let endless = vec![b'x'; MAX_REPLY + 2];
        assert!(session.on_received(&endless, &mut sent));
    }
}
