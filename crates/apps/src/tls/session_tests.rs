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
use crate::{AnyApp, AppKind};

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
}

/// Runs the session against `server` until it says the exchange is complete, handing it the
/// server's bytes `segment` at a time; the server answers a request with a 200 and [`BODY`].
fn talk(app: &AnyApp, mut server: ServerConnection, segment: usize, name: Option<&str>) -> Talk {
    let addr = "198.18.0.7".parse().unwrap();
    let mut to_server = Vec::new();
    let mut session = app.open_named(addr, 443, name, &mut to_server).unwrap();
    let (mut raw, mut request) = (Vec::new(), Vec::new());
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
        let mut out = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut out).unwrap();
        }
        for piece in out.chunks(segment) {
            raw.extend_from_slice(piece);
            if session.on_received(piece, &mut to_server) {
                return Talk {
                    raw,
                    session,
                    request,
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
        let Value::Str(chain) = get(&row, "tls_chain") else {
            panic!("no chain");
        };
        let chain: serde_json::Value = serde_json::from_str(chain).unwrap();
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
