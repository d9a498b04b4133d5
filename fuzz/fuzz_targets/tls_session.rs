#![no_main]

//! Arbitrary server bytes to a connection's session (`tls` and `https`, with rustls and the
//! first-flight fallback behind it; `smtp`, `imap`, `pop3` and `ftp` with
//! `--starttls`, their replies and the TLS after them; `ssh`, its KEXINIT and KEX reply
//! packets):
//! fed in segments whose lengths the bytes pick,
//! `on_received` must not panic, and `describe_session` must give one value per field (the
//! ServerHello's JA3S, the chain and the HTTP response are read from the same bytes).

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde_apps::{AnyApp, App, AppKind, AppOptions};

fn apps() -> &'static [AnyApp; 7] {
    static APPS: OnceLock<[AnyApp; 7]> = OnceLock::new();
    APPS.get_or_init(|| {
        let options = AppOptions {
            tls_sni: Some("sonde.test".to_string()),
            starttls: true,
            ..AppOptions::default()
        };
        [
            AppKind::Tls,
            AppKind::Https,
            AppKind::Smtp,
            AppKind::Imap,
            AppKind::Pop3,
            AppKind::Ftp,
            AppKind::Ssh,
        ]
        .map(|kind| AnyApp::build(kind, &options).unwrap())
    })
}

fuzz_target!(|data: &[u8]| {
    for app in apps() {
        let mut sent = Vec::new();
        let addr = "198.18.0.7".parse().unwrap();
        let mut session = app.open_session(addr, 443, &mut sent).unwrap();
        let mut len = 0;
        while len < data.len() {
            let next = (len + 1 + usize::from(data[len] % 64)).min(data.len());
            if session.on_received(&data[len..next], &mut sent) {
                len = next;
                break;
            }
            len = next;
        }
        let values = app.describe_session(&data[..len], Some(session.as_ref()));
        assert_eq!(values.len(), app.fields().len());
    }
});
