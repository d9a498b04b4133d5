//! The full handshake, against rustls's own server in this process (the bytes of a full
//! handshake cannot be recorded once and replayed: each side's keys are new each time), the
//! server's bytes handed to the session in segments of several sizes; and the fallback,
//! against first flights recorded from `openssl s_server` (testdata/README.md).

use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, SupportedProtocolVersion};

use super::*;
use crate::{AnyApp, AppKind, MAX_SESSION_SEND};

const LEAF_PEM: &[u8] = include_bytes!("../../testdata/session_leaf.pem");
const CA_PEM: &[u8] = include_bytes!("../../testdata/session_ca.pem");
const LEAF_KEY: &[u8] = include_bytes!("../../testdata/session_leaf.key");
/// `openssl x509 -outform DER | sha256sum` of session_leaf.pem and session_ca.pem.
const LEAF_SHA256: &str = "9fd880e306b0d4dec471d53e5a47f6814e5019894fa7a19473e408d4c8ca11c4";
const CA_SHA256: &str = "f3f8ffc71b4eb780910d37c2103eb607b6c189c2d6fbf80f5d7582434bb53119";
const RSA_CHAIN: &[u8] = include_bytes!("../../testdata/tls12_rsa_chain.bin");
const RSA_CHAIN_LEAF_SHA256: &str =
    "a6ec0c5b5684e0076a5dedd3ef0b821bddeb0bc6acc613f9990bc1f25fa7a700";
const BODY: &[u8] = b"<h1>198.18.0.7</h1>\n";

fn ca_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/session_ca.pem")
}

fn server(versions: &[&'static SupportedProtocolVersion]) -> ServerConnection {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(LEAF_PEM)
        .chain(CertificateDer::pem_slice_iter(CA_PEM))
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    ServerConnection::new(Arc::new(config)).unwrap()
}

fn options(sni: Option<&str>, root_cas: bool) -> AppOptions {
    AppOptions {
        tls_sni: sni.map(str::to_string),
        tls_root_cas: root_cas.then(ca_file),
        ..AppOptions::default()
    }
}

/// What a conversation left: the server's raw bytes, the session, the request the server read.
struct Talk {
    raw: Vec<u8>,
    session: Box<dyn Session>,
    request: Vec<u8>,
    /// Every byte the session sent.
    sent: usize,
}

/// Runs the session against `server` until it says the exchange is complete, handing it the
/// server's bytes `segment` at a time; the server answers a request with a 200 and [`BODY`].
fn talk(app: &AnyApp, server: ServerConnection, segment: usize, name: Option<&str>) -> Talk {
    talk_from(app, server, segment, name, &[], "198.18.0.7")
}

/// As [`talk`], to `addr`, the server's bytes led by `lead` (records of its own: an alert).
fn talk_from(
    app: &AnyApp,
    mut server: ServerConnection,
    segment: usize,
    name: Option<&str>,
    lead: &[u8],
    addr: &str,
) -> Talk {
    let addr = addr.parse().unwrap();
    let mut to_server = Vec::new();
    let mut session = app.open_named(addr, 443, name, &mut to_server).unwrap();
    let (mut raw, mut request) = (Vec::new(), Vec::new());
    let mut lead = Some(lead);
    let mut sent = to_server.len();
    let mut answered = false;
    for _ in 0..50 {
        let mut incoming = &to_server[..];
        while !incoming.is_empty() {
            server.read_tls(&mut incoming).unwrap();
            server.process_new_packets().unwrap();
        }
        to_server.clear();
        let mut chunk = [0u8; 1024];
        loop {
            match server.reader().read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => request.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        if request.ends_with(b"\r\n\r\n") && !answered {
            answered = true;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                BODY.len()
            );
            server.writer().write_all(head.as_bytes()).unwrap();
            server.writer().write_all(BODY).unwrap();
        }
        let mut out = lead.take().unwrap_or_default().to_vec();
        while server.wants_write() {
            server.write_tls(&mut out).unwrap();
        }
        for piece in out.chunks(segment) {
            raw.extend_from_slice(piece);
            let before = to_server.len();
            let complete = session.on_received(piece, &mut to_server);
            sent += to_server.len() - before;
            if complete {
                return Talk {
                    raw,
                    session,
                    request,
                    sent,
                };
            }
        }
    }
    panic!("the exchange did not end");
}

fn describe(app: &AnyApp, talk: &Talk) -> Vec<(&'static str, Value)> {
    let values = app.describe_session(&talk.raw, Some(talk.session.as_ref()));
    assert_eq!(values.len(), app.fields().len());
    app.fields().iter().map(|f| f.name).zip(values).collect()
}

fn get<'v>(row: &'v [(&'static str, Value)], name: &str) -> &'v Value {
    &row.iter().find(|(n, _)| *n == name).unwrap().1
}

fn text(value: &str) -> Value {
    Value::Str(value.to_string())
}

#[test]
fn https_over_tls_1_3_in_segments_of_any_size() {
    let app = AnyApp::build(AppKind::Https, &options(Some("sonde.test"), true)).unwrap();
    for segment in [1, 5, 100, 1460, 65536] {
        let talk = talk(&app, server(&[&rustls::version::TLS13]), segment, None);
        let request = String::from_utf8(talk.request.clone()).unwrap();
        assert!(
            request.starts_with("GET / HTTP/1.1\r\nHost: sonde.test\r\n"),
            "{request}"
        );
        let row = describe(&app, &talk);
        assert_eq!(
            get(&row, "http_status"),
            &Value::Int(200),
            "segment {segment}"
        );
        assert_eq!(
            get(&row, "http_body"),
            &text(std::str::from_utf8(BODY).unwrap())
        );
        assert_eq!(get(&row, "tls_version"), &text("TLSv1.3"));
        assert_eq!(get(&row, "tls_path"), &text("rustls"));
        assert_eq!(get(&row, "tls_kx_group"), &text("X25519"));
        assert_eq!(get(&row, "tls_alpn"), &text("http/1.1"));
        assert_eq!(get(&row, "tls_cert_sha256"), &text(LEAF_SHA256));
        assert_eq!(get(&row, "tls_chain_len"), &Value::Int(2));
        assert_eq!(get(&row, "tls_cert_key_type"), &text("EC"));
        assert_eq!(get(&row, "tls_cert_key_bits"), &Value::Int(256));
        assert_eq!(get(&row, "tls_chain_valid"), &Value::Bool(true));
        assert_eq!(get(&row, "tls_error"), &Value::Null);
        let Value::Json(chain) = get(&row, "tls_chain") else {
            panic!("no chain");
        };
        assert_eq!(chain[1]["sha256"], CA_SHA256);
        assert_eq!(chain[0]["sans"], "sonde.test,www.sonde.test,198.18.0.7");
        assert_eq!(chain[0]["key_bits"], 256);
        // TLS 1.3's ServerHello: legacy version 771, then supported_versions and key_share
        // (in the server's order).
        let Value::Str(ja3s) = get(&row, "tls_ja3s") else {
            panic!("no JA3S");
        };
        assert!(ja3s.starts_with("771,") && ja3s.contains("43") && ja3s.contains("51"));
        let Value::Str(md5) = get(&row, "tls_ja3s_md5") else {
            panic!("no JA3S hash");
        };
        assert_eq!(md5, &super::ja3s::Ja3s::md5_of(ja3s));
    }
}

#[test]
fn tls_1_2_is_spoken_in_full_and_the_tls_app_ends_at_the_handshake() {
    let app = AnyApp::build(AppKind::Tls, &options(Some("sonde.test"), true)).unwrap();
    let talk = talk(&app, server(&[&rustls::version::TLS12]), 7, None);
    assert!(talk.request.is_empty(), "tls sends no request");
    let row = describe(&app, &talk);
    assert_eq!(get(&row, "tls_version"), &text("TLSv1.2"));
    assert_eq!(get(&row, "tls_path"), &text("rustls"));
    assert_eq!(get(&row, "tls_alpn"), &Value::Null, "tls offers no ALPN");
    assert_eq!(get(&row, "tls_cert_sha256"), &text(LEAF_SHA256));
    assert_eq!(get(&row, "tls_chain_valid"), &Value::Bool(true));
    let Value::Str(cipher) = get(&row, "tls_cipher") else {
        panic!("no cipher");
    };
    assert!(cipher.starts_with("TLS_ECDHE_ECDSA_WITH_"), "{cipher}");
}

#[test]
fn validity_says_why_not_for_an_unknown_issuer_or_another_name() {
    // The default roots (Mozilla's) do not know the test CA.
    let app = AnyApp::build(AppKind::Tls, &options(Some("sonde.test"), false)).unwrap();
    let row = describe(
        &app,
        &talk(&app, server(&[&rustls::version::TLS13]), 1460, None),
    );
    assert_eq!(get(&row, "tls_cert_sha256"), &text(LEAF_SHA256));
    // TLS 1.3 sends the certificate encrypted: the full handshake reads its subject all the
    // same, as its field's help says.
    assert_eq!(get(&row, "tls_version"), &text("TLSv1.3"));
    assert!(matches!(get(&row, "tls_cert_subject"), Value::Str(s) if s.contains("CN=")));
    let subject_help = TLS_FIELDS.iter().find(|f| f.name == "tls_cert_subject");
    assert!(!subject_help.unwrap().help.contains("1.2 and older"));
    assert_eq!(get(&row, "tls_chain_valid"), &Value::Bool(false));
    let Value::Str(why) = get(&row, "tls_chain_error") else {
        panic!("no reason");
    };
    assert!(why.contains("no trusted root"), "{why}");
    // The target's own name overrides the run-wide one: the certificate does not name it.
    let app = AnyApp::build(AppKind::Https, &options(Some("sonde.test"), true)).unwrap();
    let talk = talk(
        &app,
        server(&[&rustls::version::TLS13]),
        1460,
        Some("other.test"),
    );
    assert!(talk
        .request
        .starts_with(b"GET / HTTP/1.1\r\nHost: other.test\r\n"));
    let row = describe(&app, &talk);
    assert_eq!(get(&row, "tls_chain_valid"), &Value::Bool(false));
    let Value::Str(why) = get(&row, "tls_chain_error") else {
        panic!("no reason");
    };
    assert!(why.contains("does not name other.test"), "{why}");
}

/// A server that answers with a first flight rustls cannot follow (here: recorded from
/// openssl s_server, whose ServerHello answers another ClientHello) still yields its
/// certificate: the session reads the clear flight from the raw bytes.
#[test]
fn when_rustls_stops_the_first_flight_answers() {
    let app = AnyApp::build(AppKind::Tls, &options(Some("sonde.test"), false)).unwrap();
    for segment in [1, 3, 500, RSA_CHAIN.len()] {
        let mut first = Vec::new();
        let mut session = app
            .open_named("198.18.0.7".parse().unwrap(), 443, None, &mut first)
            .unwrap();
        let mut sent = Vec::new();
        let mut ended_at = None;
        for (i, piece) in RSA_CHAIN.chunks(segment).enumerate() {
            if session.on_received(piece, &mut sent) {
                ended_at = Some((i + 1) * segment);
                break;
            }
        }
        assert!(
            ended_at.is_some_and(|end| end >= RSA_CHAIN.len()),
            "{segment}"
        );
        let row: Vec<_> = {
            let values = app.describe_session(RSA_CHAIN, Some(session.as_ref()));
            app.fields().iter().map(|f| f.name).zip(values).collect()
        };
        assert_eq!(get(&row, "tls_path"), &text("first-flight"));
        assert_eq!(get(&row, "tls_version"), &text("TLSv1.2"));
        assert_eq!(get(&row, "tls_cert_sha256"), &text(RSA_CHAIN_LEAF_SHA256));
        assert_eq!(get(&row, "tls_cert_key_type"), &text("RSA"));
        assert_eq!(get(&row, "tls_cert_key_bits"), &Value::Int(2048));
        assert_ne!(get(&row, "tls_error"), &Value::Null);
        assert_eq!(get(&row, "tls_kx_group"), &Value::Null);
    }
}

#[test]
fn the_client_hello_offers_the_legacy_suites_last() {
    let app = AnyApp::build(AppKind::Tls, &AppOptions::default()).unwrap();
    let mut first = Vec::new();
    app.open_named("198.18.0.7".parse().unwrap(), 443, None, &mut first)
        .unwrap();
    let (_, record) = tls_parser::parse_tls_plaintext(&first).unwrap();
    let tls_parser::TlsMessage::Handshake(tls_parser::TlsMessageHandshake::ClientHello(hello)) =
        &record.msg[0]
    else {
        panic!("not a ClientHello");
    };
    // rustls ends the list with the renegotiation SCSV (0x00ff).
    let suites: Vec<u16> = hello
        .ciphers
        .iter()
        .map(|c| c.0)
        .filter(|&c| c != 0xff)
        .collect();
    assert_eq!(
        suites[suites.len() - full::LEGACY_SUITES.len()..],
        *full::LEGACY_SUITES
    );
    assert!(suites.contains(&0x1301), "TLS 1.3 suites too");
}

#[test]
fn a_bad_root_cas_file_is_one_line() {
    let dir = std::env::temp_dir().join(format!("sonde-root-cas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    for path in [junk, dir.join("missing.pem")] {
        let options = AppOptions {
            tls_root_cas: Some(path.clone()),
            ..AppOptions::default()
        };
        let err = AnyApp::build(AppKind::Https, &options).unwrap_err();
        assert!(err.contains("--root-cas") && err.contains(&path.display().to_string()));
        assert!(!err.contains('\n'), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Once rustls has stopped, the session reads the clear first flight on from where it stopped,
/// not from its start: fed one byte at a time, it examines each byte of the flight once, and
/// per call the header of the record still cut (counted, not timed; from the start each time
/// it examined 33,001 bytes of this 2,245-byte flight).
#[test]
fn after_rustls_stops_the_flight_is_read_on_not_again() {
    let app = AnyApp::build(AppKind::Tls, &options(Some("sonde.test"), false)).unwrap();
    let mut first = Vec::new();
    let mut session = app
        .open_named("198.18.0.7".parse().unwrap(), 443, None, &mut first)
        .unwrap();
    crate::progress::take_looked_at();
    let mut sent = Vec::new();
    let mut calls = 0;
    let mut complete = false;
    for piece in RSA_CHAIN.chunks(1) {
        calls += 1;
        if session.on_received(piece, &mut sent) {
            complete = true;
            break;
        }
    }
    let read = crate::progress::take_looked_at();
    assert!(complete);
    let bound = RSA_CHAIN.len() as u64 + 5 * calls;
    assert!(
        read <= bound,
        "{read} bytes examined for a flight of {} in {calls} calls",
        RSA_CHAIN.len()
    );
}

/// A warning alert before the ServerHello (unrecognized_name, as a server sends it for a name
/// it does not serve) is read past: the handshake completes, and the row keeps the version,
/// cipher and JA3S, and names the warning.
#[test]
fn a_warning_alert_before_the_server_hello_is_read_past() {
    const UNRECOGNIZED_NAME: &[u8] = &[21, 3, 3, 0, 2, 1, 112];
    let app = AnyApp::build(AppKind::Https, &options(Some("sonde.test"), true)).unwrap();
    for segment in [1, 6, 1460] {
        let server = server(&[&rustls::version::TLS12]);
        let talk = talk_from(&app, server, segment, None, UNRECOGNIZED_NAME, "198.18.0.7");
        let row = describe(&app, &talk);
        assert_eq!(get(&row, "http_status"), &Value::Int(200), "{segment}");
        assert_eq!(get(&row, "tls_path"), &text("rustls"));
        assert_eq!(get(&row, "tls_version"), &text("TLSv1.2"), "{segment}");
        assert!(matches!(get(&row, "tls_cipher"), Value::Str(c) if c.starts_with("TLS_ECDHE_")));
        assert!(matches!(get(&row, "tls_ja3s"), Value::Str(j) if j.starts_with("771,")));
        assert_eq!(get(&row, "tls_alert"), &text("unrecognized_name"));
        assert_eq!(get(&row, "tls_cert_sha256"), &text(LEAF_SHA256));
    }
    // The first-flight path reads past it too, and a fatal alert still ends the flight.
    let mut warned = UNRECOGNIZED_NAME.to_vec();
    warned.extend_from_slice(RSA_CHAIN);
    let row: Vec<_> = {
        let values = app.describe(&warned);
        app.fields().iter().map(|f| f.name).zip(values).collect()
    };
    assert_eq!(get(&row, "tls_version"), &text("TLSv1.2"));
    assert_eq!(get(&row, "tls_cert_sha256"), &text(RSA_CHAIN_LEAF_SHA256));
    assert_eq!(get(&row, "tls_alert"), &text("unrecognized_name"));
    let tls = AnyApp::build(AppKind::Tls, &options(None, false)).unwrap();
    assert!(!tls.is_complete(&warned[..UNRECOGNIZED_NAME.len()]));
    assert!(tls.is_complete(&warned));
    let mut fatal = UNRECOGNIZED_NAME.to_vec();
    fatal[5] = 2;
    assert!(tls.is_complete(&fatal));
}

/// With no SNI (an address-only target) the chain is checked against the roots only: a
/// certificate that does not name the address still validates (it names hosts).
#[test]
fn an_address_only_connection_checks_no_name() {
    let app = AnyApp::build(AppKind::Tls, &options(None, true)).unwrap();
    // 198.18.0.9 is not among the leaf's SANs (sonde.test, www.sonde.test, 198.18.0.7).
    let server = server(&[&rustls::version::TLS13]);
    let talk = talk_from(&app, server, 1460, None, &[], "198.18.0.9");
    let row = describe(&app, &talk);
    assert_eq!(get(&row, "tls_cert_sha256"), &text(LEAF_SHA256));
    assert_eq!(get(&row, "tls_chain_valid"), &Value::Bool(true), "{row:?}");
    assert_eq!(get(&row, "tls_chain_error"), &Value::Null);
}

/// The reason a chain does not validate stays short: a name mismatch against a certificate of
/// a thousand names lists a few and counts the rest; any other long reason is cut.
#[test]
fn a_chain_error_is_bounded() {
    let bounded = |e: &rustls::Error| cut_to(errors::chain_error(e), MAX_CHAIN_ERROR_LEN);
    let presented: Vec<String> = (0..1000).map(|i| format!("host-{i}.sonde.test")).collect();
    let mismatch =
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("other.test").unwrap(),
            presented,
        });
    let why = bounded(&mismatch);
    assert!(why.len() <= MAX_CHAIN_ERROR_LEN, "{}", why.len());
    assert!(why.contains("does not name other.test"), "{why}");
    assert!(
        why.contains("host-0.sonde.test, host-1.sonde.test") && why.contains("and 996 more"),
        "{why}"
    );
    let long = rustls::Error::General("é".repeat(400));
    let why = bounded(&long);
    assert!(
        why.len() <= MAX_CHAIN_ERROR_LEN && why.ends_with('…'),
        "{why}"
    );
    let few = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext {
        expected: ServerName::try_from("other.test").unwrap(),
        presented: vec!["a.test".into()],
    });
    assert!(bounded(&few).contains("a.test"));
}

/// Servers of DHE suites only, or of AES-CBC with SHA-256/SHA-384 MACs only, show their
/// certificate as other old servers do: both hellos offer their suites (rustls speaks none).
#[test]
fn both_hellos_offer_dhe_and_cbc_sha256_suites() {
    const WANTED: [u16; 6] = [0x009e, 0x0033, 0x0067, 0xc027, 0xc028, 0x003c];
    let app = AnyApp::build(AppKind::Tls, &AppOptions::default()).unwrap();
    let mut first = Vec::new();
    app.open_named("198.18.0.7".parse().unwrap(), 443, None, &mut first)
        .unwrap();
    let offered = |hello: &[u8]| -> Vec<u16> {
        let (_, record) = tls_parser::parse_tls_plaintext(hello).unwrap();
        let tls_parser::TlsMessage::Handshake(tls_parser::TlsMessageHandshake::ClientHello(h)) =
            &record.msg[0]
        else {
            panic!("not a ClientHello");
        };
        h.ciphers.iter().map(|c| c.0).collect()
    };
    let rustls = offered(&first);
    let legacy = TlsApp::new(&AppOptions {
        tls_max: crate::TlsVersion::Tls11,
        ..AppOptions::default()
    })
    .unwrap();
    let mut buf = vec![0; legacy.max_request_len()];
    let len = legacy.write_request(&mut buf, "198.18.0.7".parse().unwrap(), 443);
    let first_flight = offered(&buf[..len]);
    for suite in WANTED {
        assert!(rustls.contains(&suite), "rustls's hello lacks {suite:#06x}");
        assert!(
            first_flight.contains(&suite),
            "the first-flight hello lacks {suite:#06x}"
        );
    }
}

/// The most a session sends, as the app computes it, holds against the longest exchange a
/// server that follows the protocol makes: the longest SNI name and Host (a target's name), a
/// CertificateRequest (an empty Certificate back). A HelloRetryRequest (for P-384, the
/// server's only group) adds a second ClientHello, past that figure but within what a session
/// may send.
#[test]
fn the_most_a_session_sends_covers_the_longest_exchange() {
    let name = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    let named = sonde_scan::targets::NamedTarget {
        addr: "198.18.0.7".parse().unwrap(),
        port: Some(443),
        name: name.clone(),
    };
    let app = AnyApp::build(AppKind::Https, &options(None, true))
        .unwrap()
        .with_names(Arc::new(crate::TargetNames::new(&[named])));
    let most = app.most_sent_by_session().unwrap();
    assert!(most <= MAX_SESSION_SEND);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(LEAF_PEM)
        .chain(CertificateDer::pem_slice_iter(CA_PEM))
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[1].clone()).unwrap();
    let server = |groups: Option<Vec<&'static dyn rustls::crypto::SupportedKxGroup>>| {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(groups) = groups {
            provider.kx_groups = groups;
        }
        let client_auth = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots.clone()))
            .allow_unauthenticated()
            .build()
            .unwrap();
        let config = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_client_cert_verifier(client_auth)
            .with_single_cert(chain.clone(), key.clone_key())
            .unwrap();
        ServerConnection::new(Arc::new(config)).unwrap()
    };
    let talk = talk_from(&app, server(None), 1460, Some(&name), &[], "198.18.0.7");
    let row = describe(&app, &talk);
    assert_eq!(get(&row, "http_status"), &Value::Int(200), "{row:?}");
    assert!(talk.sent <= most, "sent {} of at most {most}", talk.sent);
    // The estimate is close: the name and Host are the longest, so the margin is what the
    // port and the unused TLS 1.2 record overhead leave.
    assert!(
        most - talk.sent < 64,
        "sent {} of at most {most}",
        talk.sent
    );
    let retried = vec![rustls::crypto::ring::kx_group::SECP384R1];
    let talk = talk_from(
        &app,
        server(Some(retried)),
        1460,
        Some(&name),
        &[],
        "198.18.0.7",
    );
    let row = describe(&app, &talk);
    assert_eq!(get(&row, "http_status"), &Value::Int(200), "{row:?}");
    assert_eq!(get(&row, "tls_kx_group"), &text("secp384r1"));
    assert!(
        talk.sent > most && talk.sent <= MAX_SESSION_SEND,
        "{}",
        talk.sent
    );
}

/// An https request that no session can send whole (the engine keeps 2,047 bytes of what a
/// session sends) is refused when the app is built, in one line; one that fits is not.
#[test]
fn an_https_request_too_long_for_a_session_is_refused() {
    let with_path = |len: usize| AppOptions {
        http_path: format!("/{}", "a".repeat(len)),
        ..AppOptions::default()
    };
    let err = AnyApp::build(AppKind::Https, &with_path(1600)).unwrap_err();
    assert!(
        err.contains("https request") && err.contains("2047"),
        "{err}"
    );
    assert!(!err.contains('\n'));
    // 1,200 bytes fit an address-only run, not one whose targets have the longest names.
    let app = AnyApp::build(AppKind::Https, &with_path(1200)).unwrap();
    assert!(app.most_sent_by_session().unwrap() <= MAX_SESSION_SEND);
    let named = sonde_scan::targets::NamedTarget {
        addr: "198.18.0.7".parse().unwrap(),
        port: None,
        name: [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join("."),
    };
    let app = app.with_names(Arc::new(crate::TargetNames::new(&[named])));
    let err = app.check_sessions().unwrap_err();
    assert!(err.contains("https request"), "{err}");
    // Every app that talks in turns fits, STARTTLS included.
    let options = AppOptions {
        starttls: true,
        payload: b"hello".to_vec(),
        ..AppOptions::default()
    };
    for kind in AppKind::ALL {
        let app = AnyApp::build(kind, &options).unwrap();
        if let Some(most) = app.most_sent_by_session() {
            assert!(most <= MAX_SESSION_SEND, "{kind}: {most}");
        }
    }
}

/// A server that asks for more than a session may send (here a HelloRetryRequest whose
/// cookie the second ClientHello must echo) meets the session's budget: nothing past it is
/// sent, the exchange ends, and the row says why.
#[test]
fn a_handshake_that_asks_for_more_than_the_budget_stops_and_says_so() {
    let app = AnyApp::build(AppKind::Tls, &options(Some("sonde.test"), false)).unwrap();
    let mut sent = Vec::new();
    let addr = "198.18.0.7".parse().unwrap();
    let mut session = app.open_named(addr, 443, None, &mut sent).unwrap();
    let (_, record) = tls_parser::parse_tls_plaintext(&sent).unwrap();
    let tls_parser::TlsMessage::Handshake(tls_parser::TlsMessageHandshake::ClientHello(hello)) =
        &record.msg[0]
    else {
        panic!("not a ClientHello");
    };
    let session_id = hello.session_id.unwrap_or_default().to_vec();
    // RFC 8446 §4.1.3: a HelloRetryRequest is a ServerHello with this random.
    const RETRY_RANDOM: [u8; 32] = [
        0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8,
        0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8,
        0x33, 0x9c,
    ];
    let cookie = vec![0x5a; 1800];
    let mut body = vec![3, 3];
    body.extend_from_slice(&RETRY_RANDOM);
    body.push(session_id.len() as u8);
    body.extend_from_slice(&session_id);
    body.extend_from_slice(&[0x13, 0x01, 0]);
    let mut extensions = vec![0, 0x2b, 0, 2, 3, 4, 0, 0x2c];
    extensions.extend_from_slice(&((cookie.len() + 2) as u16).to_be_bytes());
    extensions.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
    extensions.extend_from_slice(&cookie);
    body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    body.extend_from_slice(&extensions);
    let mut message = vec![2, 0];
    message.extend_from_slice(&(body.len() as u16).to_be_bytes());
    message.extend_from_slice(&body);
    let mut flight = vec![22, 3, 3];
    flight.extend_from_slice(&(message.len() as u16).to_be_bytes());
    flight.extend_from_slice(&message);
    let first_len = sent.len();
    assert!(session.on_received(&flight, &mut sent), "the exchange ends");
    assert_eq!(sent.len(), first_len, "nothing past the budget is sent");
    let (values, outcome) = app.describe_reply(&flight, Some(session.as_ref()));
    let row: Vec<_> = app.fields().iter().map(|f| f.name).zip(values).collect();
    let Value::Str(why) = get(&row, "tls_error") else {
        panic!("no tls_error: {row:?}");
    };
    assert!(
        why.starts_with("session cut") && why.contains("2047"),
        "{why}"
    );
    // A cut session is no success, though the server's hello came.
    assert_eq!(outcome, crate::AppOutcome::UnknownError);
}
