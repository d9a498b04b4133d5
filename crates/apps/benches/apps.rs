//! Per-call cost of what the grab engine and run loop ask of the apps: `write_request` once per
//! connection, `is_complete_after` after every data segment (reading on from its cursor; the
//! `fed_by_segments` cases feed a whole reply in 100-byte segments, the `is_complete` cases
//! check half or all of it from scratch), and `describe` once per finished connection. Replies
//! are the captured fixtures.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use sonde_apps::{AnyApp, App, AppKind, AppOptions, ReplyCursor};

const TLS12: &[u8] = include_bytes!("../testdata/tls12_rsa_chain.bin");
const HTTP_LENGTH: &[u8] = include_bytes!("../testdata/http_nginx_content_length.bin");
const HTTP_CHUNKED: &[u8] = include_bytes!("../testdata/http_nginx_chunked.bin");

fn app(kind: AppKind) -> AnyApp {
    AnyApp::build(kind, &AppOptions::default()).unwrap()
}

fn apps(c: &mut Criterion) {
    let mut group = c.benchmark_group("apps");
    let addr: IpAddr = "198.18.0.7".parse().unwrap();
    for kind in [AppKind::Http, AppKind::Tls] {
        let app = app(kind);
        let mut buf = vec![0u8; app.max_request_len()];
        group.bench_function(format!("{kind}_write_request"), |b| {
            b.iter(|| app.write_request(black_box(&mut buf), black_box(addr), 443))
        });
    }
    let cases = [
        (AppKind::Tls, "tls12_flight", TLS12),
        (AppKind::Http, "http_content_length", HTTP_LENGTH),
        (AppKind::Http, "http_chunked", HTTP_CHUNKED),
    ];
    for (kind, name, reply) in cases {
        let app = app(kind);
        // Half a reply: the common case, asked after a segment that did not finish it.
        let half = &reply[..reply.len() / 2];
        group.bench_function(format!("{name}_is_complete_half"), |b| {
            b.iter(|| app.is_complete(black_box(half)))
        });
        group.bench_function(format!("{name}_is_complete_whole"), |b| {
            b.iter(|| app.is_complete(black_box(reply)))
        });
        group.bench_function(format!("{name}_fed_by_segments"), |b| {
            b.iter(|| {
                let mut cursor = ReplyCursor::default();
                (100..reply.len() + 100)
                    .step_by(100)
                    .map(|len| {
                        app.is_complete_after(
                            black_box(&reply[..len.min(reply.len())]),
                            &mut cursor,
                        )
                    })
                    .last()
            })
        });
        group.bench_function(format!("{name}_describe"), |b| {
            b.iter(|| app.describe(black_box(reply)))
        });
    }
    group.finish();
}

criterion_group!(benches, apps);
criterion_main!(benches);
