//! What a connection's session holds in memory while it waits for the server, measured with a
//! counting allocator (dhat's): opened (its first bytes sent), and halfway through the server's
//! first flight (TLS 1.2 and 1.3, from rustls's own server in this process). Each must stay
//! within what the app says a session takes ([`AnyApp::session_bytes`]), the figure grab
//! bounds its sessions by.

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, SupportedProtocolVersion};
use sonde_apps::{AnyApp, App, AppKind, AppOptions, Session};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const LEAF_PEM: &[u8] = include_bytes!("../testdata/session_leaf.pem");
const CA_PEM: &[u8] = include_bytes!("../testdata/session_ca.pem");
const LEAF_KEY: &[u8] = include_bytes!("../testdata/session_leaf.key");

/// Sessions held at once per measurement: enough that one session's share is clear of noise.
const SESSIONS: usize = 200;

fn server(versions: &[&'static SupportedProtocolVersion]) -> ServerConnection {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(LEAF_PEM)
        .chain(CertificateDer::pem_slice_iter(CA_PEM))
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_slice(LEAF_KEY).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    ServerConnection::new(Arc::new(config)).unwrap()
}

/// The server's first flight answering `hello`.
fn first_flight(hello: &[u8], versions: &[&'static SupportedProtocolVersion]) -> Vec<u8> {
    let mut server = server(versions);
    let mut incoming = hello;
    while !incoming.is_empty() {
        server.read_tls(&mut incoming).unwrap();
    }
    server.process_new_packets().unwrap();
    let mut flight = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut flight).unwrap();
    }
    flight
}

fn heap_bytes() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// Heap bytes per session of `app` held at once, each opened and handed the first
/// `share` of the server's answer (`versions`; none: nothing handed).
fn per_session(app: &AnyApp, versions: Option<&[&'static SupportedProtocolVersion]>) -> usize {
    let addr: IpAddr = "198.18.0.7".parse().unwrap();
    let before = heap_bytes();
    let mut sessions: Vec<Box<dyn Session>> = Vec::with_capacity(SESSIONS);
    let mut sent = Vec::new();
    for _ in 0..SESSIONS {
        sent.clear();
        let mut session = app.open_session(addr, 443, &mut sent).unwrap();
        if let Some(versions) = versions {
            let flight = first_flight(&sent, versions);
            // Halfway: rustls holds a record cut short, the session the flight so far.
            let _ = session.on_received(&flight[..flight.len() / 2], &mut sent);
        }
        sessions.push(session);
    }
    let each = heap_bytes().saturating_sub(before + sessions.capacity() * 16) / SESSIONS;
    drop(sessions);
    each
}

#[test]
fn a_waiting_session_takes_no_more_than_its_app_says() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let longest = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    let options = AppOptions {
        tls_sni: Some(longest),
        starttls: true,
        ..AppOptions::default()
    };
    let tls12: &[&'static SupportedProtocolVersion] = &[&rustls::version::TLS12];
    let tls13: &[&'static SupportedProtocolVersion] = &[&rustls::version::TLS13];
    let mut report = std::io::stderr();
    for kind in [AppKind::Tls, AppKind::Https] {
        let app = AnyApp::build(kind, &options).unwrap();
        let bound = app.session_bytes().unwrap();
        for (state, versions) in [
            ("opened", None),
            ("TLS 1.2 flight", Some(tls12)),
            ("TLS 1.3 flight", Some(tls13)),
        ] {
            let each = per_session(&app, versions);
            let _ = writeln!(
                report,
                "{kind} {state}: {each} bytes per session (bound {bound})"
            );
            assert!(
                each > 0 && each <= bound,
                "{kind} {state}: {each} > {bound}"
            );
        }
    }
    for kind in [AppKind::Smtp, AppKind::Ssh] {
        let app = AnyApp::build(kind, &options).unwrap();
        let bound = app.session_bytes().unwrap();
        let each = per_session(&app, None);
        let _ = writeln!(
            report,
            "{kind} opened: {each} bytes per session (bound {bound})"
        );
        assert!(each <= bound, "{kind}: {each} > {bound}");
    }
}
