//! `smtp`, `imap`, `pop3` and `ftp` against scripted servers, their bytes cut at every place;
//! after the upgrade, rustls's own server.

use std::io::Read;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::*;
use crate::{AnyApp, AppKind, AppOutcome};

const LEAF_PEM: &[u8] = include_bytes!("../testdata/session_leaf.pem");
const LEAF_KEY: &[u8] = include_bytes!("../testdata/session_leaf.key");
const LEAF_SHA256: &str = "9fd880e306b0d4dec471d53e5a47f6814e5019894fa7a19473e408d4c8ca11c4";

const IMAP_GREETING: &[u8] = b"* OK [CAPABILITY IMAP4rev1 STARTTLS] sonde lab\r\n";
const IMAP_CAPABILITY: &[u8] = b"* CAPABILITY IMAP4rev1 SASL-IR LOGIN-REFERRALS STARTTLS \
    LOGINDISABLED\r\n* OK [ALERT] a note between\r\na1 OK Pre-login capabilities listed.\r\n";
const POP3_GREETING: &[u8] = b"+OK sonde lab\r\n";
const FTP_GREETING: &[u8] = b"220-sonde lab\r\n220 welcome\r\n";
/// vsftpd's FEAT reply with AUTH TLS, with a line that looks like a reply's end but has
/// another code, and one with a mechanism list.
const FTP_FEAT: &[u8] = b"211-Features:\r\n AUTH SSL\r\n AUTH TLS\r\n EPRT\r\n200 x\r\n \
    REST STREAM\r\n UTF8\r\n211 End\r\n";
const POP3_CAPA: &[u8] = b"+OK\r\nCAPA\r\nTOP\r\nUIDL\r\nRESP-CODES\r\n..ODD\r\nSTLS\r\n\
    SASL PLAIN\r\n.\r\n";

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

fn text(s: &str) -> Value {
    Value::Str(s.to_string())
}

fn build(kind: AppKind, starttls: bool) -> AnyApp {
    let options = AppOptions {
        starttls,
        ..AppOptions::default()
    };
    AnyApp::build(kind, &options).unwrap()
}

/// A session and every byte handed to it, fed in segments of `cut` bytes.
struct Client {
    session: Box<dyn Session>,
    raw: Vec<u8>,
    sent: Vec<u8>,
    cut: usize,
}

impl Client {
    fn open(app: &AnyApp, cut: usize) -> Client {
        let mut sent = Vec::new();
        let session = app
            .open_session("198.18.0.7".parse().unwrap(), 143, &mut sent)
            .unwrap();
        assert!(sent.is_empty(), "the server speaks first");
        Client {
            session,
            raw: Vec::new(),
            sent,
            cut,
        }
    }

    /// Hands `bytes` over; whether the session says the exchange is complete.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        self.raw.extend_from_slice(bytes);
        let (session, sent) = (&mut self.session, &mut self.sent);
        bytes
            .chunks(self.cut)
            .any(|piece| session.on_received(piece, sent))
    }

    /// Feeds the server's replies in turn, checking what the client says after each.
    fn script(&mut self, turns: &[(&[u8], &[u8])]) {
        for (reply, said) in turns {
            assert!(!self.feed(reply), "{}", String::from_utf8_lossy(reply));
            assert_eq!(
                String::from_utf8_lossy(&std::mem::take(&mut self.sent)),
                String::from_utf8_lossy(said),
                "cut {}",
                self.cut
            );
        }
    }

    /// Runs rustls's server against the ClientHello already sent, to the end of the handshake.
    fn handshake(&mut self) {
        assert!(
            self.sent.starts_with(&[0x16, 0x03]),
            "a ClientHello follows"
        );
        let mut server = server();
        for _ in 0..20 {
            let mut incoming = &self.sent[..];
            while !incoming.is_empty() {
                server.read_tls(&mut incoming).unwrap();
                server.process_new_packets().unwrap();
            }
            self.sent.clear();
            let _ = server.reader().read(&mut [0u8; 64]);
            let mut out = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut out).unwrap();
            }
            if self.feed(&out) {
                return;
            }
        }
        panic!("the handshake did not end the exchange (cut {})", self.cut);
    }

    fn values(&self, app: &AnyApp) -> Vec<Value> {
        let values = app.describe_session(&self.raw, Some(self.session.as_ref()));
        assert_eq!(values.len(), app.fields().len());
        values
    }
}

#[test]
fn imap_starttls_upgrades_and_the_certificate_is_read_at_any_cut() {
    let app = build(AppKind::Imap, true);
    for cut in [1, 2, 3, 5, 7, 13, 64, 4096] {
        let mut client = Client::open(&app, cut);
        client.script(&[
            (IMAP_GREETING, b"a1 CAPABILITY\r\n"),
            (IMAP_CAPABILITY, b"a2 STARTTLS\r\n"),
        ]);
        assert!(!client.feed(b"a2 OK Begin TLS negotiation now.\r\n"));
        client.handshake();
        let values = client.values(&app);
        let field = |name| field(&app, &values, name);
        assert_eq!(
            field("imap_banner"),
            &text("* OK [CAPABILITY IMAP4rev1 STARTTLS] sonde lab")
        );
        assert_eq!(
            field("imap_capabilities"),
            &text("IMAP4rev1 SASL-IR LOGIN-REFERRALS STARTTLS LOGINDISABLED")
        );
        assert_eq!(
            field("imap_starttls"),
            &text("a2 OK Begin TLS negotiation now.")
        );
        assert_eq!(field("tls_version"), &text("TLSv1.3"));
        assert_eq!(field("tls_path"), &text("rustls"));
        assert_eq!(field("tls_cert_sha256"), &text(LEAF_SHA256));
    }
}

#[test]
fn pop3_stls_upgrades_and_the_certificate_is_read_at_any_cut() {
    let app = build(AppKind::Pop3, true);
    for cut in [1, 2, 3, 5, 7, 13, 64, 4096] {
        let mut client = Client::open(&app, cut);
        client.script(&[(POP3_GREETING, b"CAPA\r\n"), (POP3_CAPA, b"STLS\r\n")]);
        assert!(!client.feed(b"+OK Begin TLS negotiation\r\n"));
        client.handshake();
        let values = client.values(&app);
        let field = |name| field(&app, &values, name);
        assert_eq!(field("pop3_banner"), &text("+OK sonde lab"));
        assert_eq!(
            field("pop3_capabilities"),
            &text("CAPA\nTOP\nUIDL\nRESP-CODES\n.ODD\nSTLS\nSASL PLAIN")
        );
        assert_eq!(field("pop3_starttls"), &text("+OK Begin TLS negotiation"));
        assert_eq!(field("tls_cert_sha256"), &text(LEAF_SHA256));
    }
}

/// The greeting and the capabilities, and the client says goodbye: without --starttls, and
/// with it when the server does not offer the upgrade.
#[test]
fn without_the_upgrade_they_read_the_capabilities_and_quit() {
    let imap_plain = b"* CAPABILITY IMAP4rev1 IDLE\r\na1 OK done\r\n";
    let pop3_plain = b"+OK\r\nTOP\r\n.\r\n";
    for starttls in [false, true] {
        let app = build(AppKind::Imap, starttls);
        let mut client = Client::open(&app, 4);
        client.script(&[(IMAP_GREETING, b"a1 CAPABILITY\r\n")]);
        let reply = if starttls {
            imap_plain
        } else {
            IMAP_CAPABILITY
        };
        assert!(client.feed(reply));
        assert_eq!(client.sent, b"a2 LOGOUT\r\n");
        let values = client.values(&app);
        assert!(
            matches!(field(&app, &values, "imap_capabilities"), Value::Str(s) if s.contains("IMAP4rev1"))
        );
        assert_eq!(field(&app, &values, "imap_starttls"), &Value::Null);
        assert_eq!(field(&app, &values, "tls_version"), &Value::Null);

        let app = build(AppKind::Pop3, starttls);
        let mut client = Client::open(&app, 4);
        client.script(&[(POP3_GREETING, b"CAPA\r\n")]);
        let reply = if starttls { &pop3_plain[..] } else { POP3_CAPA };
        assert!(client.feed(reply));
        assert_eq!(client.sent, b"QUIT\r\n");
        let values = client.values(&app);
        assert!(
            matches!(field(&app, &values, "pop3_capabilities"), Value::Str(s) if s.contains("TOP"))
        );
        assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
    }
    // POP3 without CAPA: -ERR, no capabilities, and goodbye.
    let app = build(AppKind::Pop3, true);
    let mut client = Client::open(&app, 1);
    client.script(&[(POP3_GREETING, b"CAPA\r\n")]);
    assert!(client.feed(b"-ERR unknown command\r\n"));
    assert_eq!(client.sent, b"QUIT\r\n");
    let values = client.values(&app);
    assert_eq!(field(&app, &values, "pop3_capabilities"), &Value::Null);
}

/// A refused greeting, a refused upgrade and endless lines end the exchange.
#[test]
fn refusals_and_endless_lines_end_it() {
    for (kind, refusal) in [
        (AppKind::Imap, &b"* BYE too busy\r\n"[..]),
        (AppKind::Pop3, b"-ERR too busy\r\n"),
    ] {
        let app = build(kind, true);
        let mut client = Client::open(&app, 3);
        assert!(client.feed(refusal));
        assert!(client.sent.is_empty(), "{kind}");
        let values = client.values(&app);
        let banner = field(&app, &values, &format!("{kind}_banner"));
        assert_eq!(
            banner,
            &text(std::str::from_utf8(trim_line_end(refusal)).unwrap())
        );

        let endless = vec![b'x'; MAX_LINE + 2];
        let mut client = Client::open(&app, 1000);
        assert!(client.feed(&endless), "{kind}");
        // Many short lines that never end the reply.
        let mut client = Client::open(&app, 1000);
        let greeting = if kind == AppKind::Imap {
            IMAP_GREETING
        } else {
            POP3_GREETING
        };
        client.feed(greeting);
        let noise = b"* x\r\n".repeat(MAX_REPLY / 5 + 2);
        assert!(client.feed(&noise), "{kind}");
    }
    let app = build(AppKind::Imap, true);
    let mut client = Client::open(&app, 2);
    client.script(&[
        (IMAP_GREETING, b"a1 CAPABILITY\r\n"),
        (IMAP_CAPABILITY, b"a2 STARTTLS\r\n"),
    ]);
    assert!(client.feed(b"a2 NO not now\r\n"));
    assert!(client.sent.is_empty());
    let values = client.values(&app);
    assert_eq!(
        field(&app, &values, "imap_starttls"),
        &text("a2 NO not now")
    );
    assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
}

/// Hostile bytes (a fixed pseudo-random stream, after a valid start) never panic, and the row
/// has one value per field.
#[test]
fn hostile_bytes_never_panic() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for kind in [AppKind::Smtp, AppKind::Imap, AppKind::Pop3, AppKind::Ftp] {
        let app = build(kind, true);
        for round in 0..200 {
            let mut client = Client::open(&app, 1 + (next() % 9) as usize);
            let mut bytes = match (kind, round % 3) {
                (_, 0) => Vec::new(),
                (AppKind::Imap, _) => [IMAP_GREETING, IMAP_CAPABILITY].concat(),
                (AppKind::Pop3, _) => [POP3_GREETING, POP3_CAPA].concat(),
                (AppKind::Ftp, _) => [FTP_GREETING, FTP_FEAT].concat(),
                _ => [&b"220 x\r\n"[..], SMTP_EHLO].concat(),
            };
            let alphabet = b"\r\n. *+OKa12ERR-345\x16\x03\x00";
            for _ in 0..(next() % 600) {
                let r = next();
                let byte = if r % 4 == 0 {
                    r as u8
                } else {
                    alphabet[(r >> 8) as usize % alphabet.len()]
                };
                bytes.push(byte);
            }
            client.feed(&bytes);
            client.values(&app);
        }
    }
}

const SMTP_EHLO: &[u8] = b"250-mail.test\r\n250-SIZE 10240000\r\n250-STARTTLS\r\n250 8BITMIME\r\n";

#[test]
fn smtp_starttls_upgrades_and_the_certificate_is_read_at_any_cut() {
    let app = build(AppKind::Smtp, true);
    for cut in [1, 2, 3, 5, 7, 13, 64, 4096] {
        let mut client = Client::open(&app, cut);
        client.script(&[
            (
                b"220-mail.test ESMTP\r\n220 hello\r\n",
                b"EHLO sonde.invalid\r\n",
            ),
            (SMTP_EHLO, b"STARTTLS\r\n"),
        ]);
        assert!(!client.feed(b"220 2.0.0 Ready to start TLS\r\n"));
        client.handshake();
        let values = client.values(&app);
        let field = |name| field(&app, &values, name);
        assert_eq!(
            field("smtp_banner"),
            &text("220-mail.test ESMTP\r\n220 hello")
        );
        assert_eq!(
            field("smtp_ehlo"),
            &text(std::str::from_utf8(trim_line_end(SMTP_EHLO)).unwrap())
        );
        assert_eq!(
            field("smtp_starttls"),
            &text("220 2.0.0 Ready to start TLS")
        );
        assert_eq!(field("tls_version"), &text("TLSv1.3"));
        assert_eq!(field("tls_path"), &text("rustls"));
        assert_eq!(field("tls_cert_sha256"), &text(LEAF_SHA256));
    }
}

#[test]
fn smtp_without_starttls_greets_and_quits() {
    let app = build(AppKind::Smtp, false);
    let mut client = Client::open(&app, 4096);
    client.script(&[(b"220 mail.test ESMTP\r\n", b"EHLO sonde.invalid\r\n")]);
    assert!(client.feed(b"250-mail.test\r\n250 STARTTLS\r\n"));
    assert_eq!(client.sent, b"QUIT\r\n");
    let values = client.values(&app);
    assert_eq!(field(&app, &values, "smtp_starttls"), &Value::Null);
    assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
    // A greeting that refuses ends it at once; endless lines end it too.
    let mut client = Client::open(&app, 4096);
    assert!(client.feed(b"554 go away\r\n"));
    assert!(client.sent.is_empty());
    let mut client = Client::open(&app, 4096);
    assert!(client.feed(&vec![b'x'; MAX_REPLY + 2]));
}

/// The greeting (two lines), FEAT's features, AUTH TLS, then the handshake: at every cut.
#[test]
fn ftp_auth_tls_upgrades_and_the_certificate_is_read_at_any_cut() {
    let app = build(AppKind::Ftp, true);
    for cut in [1, 2, 3, 4, 5, 7, 13, 64, 4096] {
        let mut client = Client::open(&app, cut);
        client.script(&[(FTP_GREETING, b"FEAT\r\n"), (FTP_FEAT, b"AUTH TLS\r\n")]);
        assert!(!client.feed(b"234 Proceed with negotiation.\r\n"));
        client.handshake();
        let values = client.values(&app);
        let field = |name| field(&app, &values, name);
        assert_eq!(field("ftp_banner"), &text("220-sonde lab\r\n220 welcome"));
        assert_eq!(
            field("ftp_features"),
            &text("AUTH SSL\nAUTH TLS\nEPRT\n200 x\nREST STREAM\nUTF8")
        );
        assert_eq!(
            field("ftp_starttls"),
            &text("234 Proceed with negotiation.")
        );
        assert_eq!(field("tls_version"), &text("TLSv1.3"));
        assert_eq!(field("tls_path"), &text("rustls"));
        assert_eq!(field("tls_cert_sha256"), &text(LEAF_SHA256));
    }
}

/// AUTH TLS is asked only when FEAT lists it (alone or in a mechanism list) and --starttls
/// is given; otherwise the client says QUIT after FEAT.
#[test]
fn ftp_without_the_upgrade_reads_the_features_and_quits() {
    for (starttls, feat, upgrade) in [
        (false, FTP_FEAT, false),
        (
            true,
            &b"211-Features:\r\n EPRT\r\n AUTH SSL\r\n211 End\r\n"[..],
            false,
        ),
        (
            true,
            b"211-Extensions supported:\r\n AUTH TLS-C;TLS;SSL\r\n211 END\r\n",
            true,
        ),
        (true, b"211-Features:\r\n auth tls\r\n211 End\r\n", true),
    ] {
        let app = build(AppKind::Ftp, starttls);
        let mut client = Client::open(&app, 3);
        client.script(&[(b"220 sonde lab\r\n", b"FEAT\r\n")]);
        let said: &[u8] = if upgrade {
            b"AUTH TLS\r\n"
        } else {
            b"QUIT\r\n"
        };
        assert_eq!(client.feed(feat), !upgrade, "{feat:?}");
        assert_eq!(client.sent, said, "{feat:?}");
        let values = client.values(&app);
        assert!(
            matches!(field(&app, &values, "ftp_features"), Value::Str(s) if !s.is_empty()),
            "{feat:?}"
        );
        assert_eq!(field(&app, &values, "ftp_starttls"), &Value::Null);
        assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
    }
    // A server without FEAT: no features, and goodbye.
    let app = build(AppKind::Ftp, true);
    let mut client = Client::open(&app, 1);
    client.script(&[(b"220 old ftpd\r\n", b"FEAT\r\n")]);
    assert!(client.feed(b"500 'FEAT': command not understood.\r\n"));
    assert_eq!(client.sent, b"QUIT\r\n");
    let values = client.values(&app);
    assert_eq!(field(&app, &values, "ftp_features"), &Value::Null);
}

/// A refused greeting, a refused AUTH TLS and endless replies end the exchange.
#[test]
fn ftp_refusals_and_endless_replies_end_it() {
    let app = build(AppKind::Ftp, true);
    let mut client = Client::open(&app, 2);
    assert!(client.feed(b"421 Too many connections.\r\n"));
    assert!(client.sent.is_empty());
    let values = client.values(&app);
    assert_eq!(
        field(&app, &values, "ftp_banner"),
        &text("421 Too many connections.")
    );
    // AUTH TLS refused (RFC 4217: 431, 504, 534): no handshake.
    for refusal in [
        &b"534 Policy requires SSL.\r\n"[..],
        b"504 Unknown AUTH type.\r\n",
    ] {
        let mut client = Client::open(&app, 5);
        client.script(&[(FTP_GREETING, b"FEAT\r\n"), (FTP_FEAT, b"AUTH TLS\r\n")]);
        assert!(client.feed(refusal));
        assert!(client.sent.is_empty());
        let values = client.values(&app);
        let refusal = std::str::from_utf8(trim_line_end(refusal)).unwrap();
        assert_eq!(field(&app, &values, "ftp_starttls"), &text(refusal));
        assert_eq!(field(&app, &values, "tls_version"), &Value::Null);
    }
    // A multi-line reply that never ends, in short lines.
    let mut client = Client::open(&app, 1000);
    client.script(&[(FTP_GREETING, b"FEAT\r\n")]);
    let mut endless = b"211-Features:\r\n".to_vec();
    endless.extend_from_slice(&b" X\r\n".repeat(MAX_REPLY / 4 + 2));
    assert!(client.feed(&endless));
    let mut client = Client::open(&app, 1000);
    assert!(client.feed(&vec![b'2'; MAX_LINE + 2]));
}

/// What a greeting says of the protocol (a grab row's `status`): yes, no (the server turns us
/// away in its own words), or not the protocol at all.
#[test]
fn the_greeting_says_success_application_error_or_protocol_error() {
    use AppOutcome::{ApplicationError, ProtocolError, Success};
    let cases: [(AppKind, &[u8], AppOutcome); 16] = [
        (AppKind::Smtp, b"220 mail.test ESMTP\r\n", Success),
        (AppKind::Smtp, b"554 go away\r\n", ApplicationError),
        (
            AppKind::Smtp,
            b"421-busy\r\n421 try later\r\n",
            ApplicationError,
        ),
        (AppKind::Smtp, b"SSH-2.0-OpenSSH_9.6\r\n", ProtocolError),
        (
            AppKind::Smtp,
            b"HTTP/1.1 400 Bad Request\r\n",
            ProtocolError,
        ),
        (AppKind::Ftp, b"220-sonde lab\r\n220 welcome\r\n", Success),
        (
            AppKind::Ftp,
            b"421 Too many connections.\r\n",
            ApplicationError,
        ),
        (AppKind::Ftp, b"hello\r\n", ProtocolError),
        (AppKind::Imap, b"* OK ready\r\n", Success),
        (AppKind::Imap, b"* PREAUTH welcome\r\n", Success),
        (AppKind::Imap, b"* BYE too busy\r\n", ApplicationError),
        (AppKind::Imap, b"* NO not you\r\n", ApplicationError),
        (AppKind::Imap, b"220 mail.test ESMTP\r\n", ProtocolError),
        (AppKind::Pop3, b"+OK sonde lab\r\n", Success),
        (AppKind::Pop3, b"-ERR too busy\r\n", ApplicationError),
        (AppKind::Pop3, b"* OK ready\r\n", ProtocolError),
    ];
    for (kind, greeting, want) in cases {
        let app = build(kind, false);
        let mut client = Client::open(&app, 3);
        client.feed(greeting);
        let (values, outcome) = app.describe_reply(&client.raw, Some(client.session.as_ref()));
        assert_eq!(values.len(), app.fields().len());
        assert_eq!(
            outcome,
            want,
            "{kind}: {}",
            String::from_utf8_lossy(greeting)
        );
    }
    // Nothing said, no session: not the protocol.
    let app = build(AppKind::Smtp, false);
    assert_eq!(app.describe_reply(b"", None).1, ProtocolError);
}

/// A refused upgrade is the server's no; a completed one is TLS's success.
#[test]
fn the_upgrade_s_outcome_follows_the_greeting_s() {
    let app = build(AppKind::Smtp, true);
    let mut client = Client::open(&app, 7);
    client.script(&[
        (b"220 mail.test ESMTP\r\n", b"EHLO sonde.invalid\r\n"),
        (SMTP_EHLO, b"STARTTLS\r\n"),
    ]);
    assert!(client.feed(b"454 TLS not available now\r\n"));
    let outcome = app
        .describe_reply(&client.raw, Some(client.session.as_ref()))
        .1;
    assert_eq!(outcome, AppOutcome::ApplicationError);
    let mut client = Client::open(&app, 7);
    client.script(&[
        (b"220 mail.test ESMTP\r\n", b"EHLO sonde.invalid\r\n"),
        (SMTP_EHLO, b"STARTTLS\r\n"),
    ]);
    assert!(!client.feed(b"220 2.0.0 Ready to start TLS\r\n"));
    client.handshake();
    let outcome = app
        .describe_reply(&client.raw, Some(client.session.as_ref()))
        .1;
    assert_eq!(outcome, AppOutcome::Success);
}
