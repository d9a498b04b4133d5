#![no_main]

//! Arbitrary reply bytes to every app of `sonde grab` (`sonde-apps`): `is_complete` and
//! `describe` must not panic and must give one value per field, on the bytes and on a prefix
//! of them (the engine asks after every segment).

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde_apps::{AnyApp, App, AppKind, AppOptions};

/// Every app, built once: with an HTTP GET, and with HEAD (a reply to HEAD has no body).
fn apps() -> &'static [Vec<AnyApp>; 2] {
    static APPS: OnceLock<[Vec<AnyApp>; 2]> = OnceLock::new();
    APPS.get_or_init(|| {
        ["GET", "HEAD"].map(|method| {
            let options = AppOptions {
                http_method: method.to_string(),
                payload: b"ping\n".to_vec(),
                ..AppOptions::default()
            };
            AppKind::ALL
                .iter()
                .map(|&kind| AnyApp::build(kind, &options).expect("these options build"))
                .collect()
        })
    })
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks GET or HEAD.
    let apps = &apps()[usize::from(data.first().is_some_and(|b| b & 1 == 1))];
    for app in apps {
        for reply in [data, &data[..data.len() / 2]] {
            let _ = app.is_complete(reply);
            assert_eq!(app.describe(reply).len(), app.fields().len());
        }
    }
});
