#![no_main]

//! Arbitrary reply bytes to every app of `sonde grab` (`sonde-apps`): `is_complete` and
//! `describe` must not panic and must give one value per field, on the bytes and on a prefix
//! of them (the engine asks after every segment). Fed in segments whose lengths the bytes
//! themselves pick, `is_complete_after` (which reads on from its cursor) must answer after
//! each segment as `is_complete` does on the whole prefix.

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde_apps::{AnyApp, App, AppKind, AppOptions, ReplyCursor};

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
        let mut cursor = ReplyCursor::default();
        let mut len = 0;
        while len < data.len() {
            // 1 to 64 bytes, picked by the byte at the cut.
            len = (len + 1 + usize::from(data[len] % 64)).min(data.len());
            let prefix = &data[..len];
            assert_eq!(
                app.is_complete_after(prefix, &mut cursor),
                app.is_complete(prefix),
                "{:?} at {len}",
                app.kind()
            );
        }
    }
});
