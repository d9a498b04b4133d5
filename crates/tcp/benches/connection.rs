//! CPU time per complete connection in user space: SYN written, SYN-ACK handled, ACK and
//! request written, reply (with FIN) handled, RST written, outcome drained — the engine's work
//! only: the server's frames are built before the measurement (cookies are deterministic, so
//! the same targets connect again in every iteration).
//!
//! Two cases: a small table (10,000 connections per batch, the table stays in cache), and the
//! same batch beside 1,000,000 idle established connections (a table the size of a real run,
//! whose lookups miss the cache).
//!
//! The time reported is the benchmark thread's CPU time (`getrusage(RUSAGE_THREAD)`), not wall
//! time, so that other work on a shared machine does not count; criterion's "thrpt" is then
//! connections per CPU-second.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nix::sys::resource::{getrusage, UsageWho};
use sonde_tcp::{Engine, Rx};
use sonde_wire::TcpFlags;
use support::*;

const BATCH: u64 = 10_000;
const REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nServer: lab\r\nContent-Length: 0\r\n\r\n";

/// The server's frames for one batch of targets.
struct Frames {
    targets: Vec<(std::net::IpAddr, u16)>,
    synacks: Vec<Vec<u8>>,
    replies: Vec<Vec<u8>>,
}

fn frames(engine: &mut Engine<Http>, first: u64, v6: bool) -> Frames {
    let mut buf = vec![0u8; 1514];
    let mut f = Frames {
        targets: Vec::new(),
        synacks: Vec::new(),
        replies: Vec::new(),
    };
    for i in first..first + BATCH {
        let (addr, port) = target(i, v6);
        let len = engine.write_syn(&mut buf, addr, port, 1_000_000);
        let syn = read_syn(&buf[..len]).unwrap();
        let len = write_synack(&mut buf, &syn);
        f.synacks.push(buf[..len].to_vec());
        let flags = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN;
        let len = write_segment(&mut buf, &syn, flags, 0, REQUEST.len() as u32, REPLY);
        f.replies.push(buf[..len].to_vec());
        f.targets.push((addr, port));
    }
    f
}

/// One batch of complete connections; returns the bytes received (to keep it observable).
fn run_batch(engine: &mut Engine<Http>, f: &Frames, buf: &mut [u8], now: u64) -> u64 {
    for &(addr, port) in &f.targets {
        engine.write_syn(buf, addr, port, now);
    }
    for synack in &f.synacks {
        let rx = engine.on_frame(synack, now + 50);
        debug_assert!(matches!(rx, Rx::Answered { .. }));
    }
    while engine.write_tx(buf, now + 50) > 0 {}
    for reply in &f.replies {
        engine.on_frame(reply, now + 100);
    }
    engine.on_tick(now + 100);
    while engine.write_tx(buf, now + 100) > 0 {}
    let mut bytes = 0;
    engine.drain_outcomes(|o, _| bytes += o.bytes);
    bytes
}

/// An engine holding `idle` established connections that never speak.
fn engine_with_idle(idle: u64, v6: bool) -> Engine<Http> {
    let mut cfg = config(idle as usize + BATCH as usize);
    cfg.first_byte_timeout_us = 1_000_000_000;
    cfg.total_timeout_us = 1_000_000_000;
    let mut engine = Engine::new(cfg, Http).unwrap();
    let mut buf = vec![0u8; 1514];
    let mut synack = vec![0u8; 1514];
    for i in BATCH..BATCH + idle {
        let (addr, port) = target(i, v6);
        let len = engine.write_syn(&mut buf, addr, port, 1_000_000);
        let syn = read_syn(&buf[..len]).unwrap();
        let len = write_synack(&mut synack, &syn);
        engine.on_frame(&synack[..len], 1_000_000);
        if i % 1024 == 0 {
            while engine.write_tx(&mut buf, 1_000_000) > 0 {}
        }
    }
    while engine.write_tx(&mut buf, 1_000_000) > 0 {}
    engine
}

/// CPU time (user and system) of the calling thread.
fn thread_cpu() -> Duration {
    let usage = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let time =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    time(usage.user_time()) + time(usage.system_time())
}

fn connection(c: &mut Criterion) {
    let mut group = c.benchmark_group("connection");
    group.throughput(Throughput::Elements(BATCH));
    group.sample_size(20);
    for (name, idle, v6) in [
        ("v4", 0, false),
        ("v6", 0, true),
        ("v4_beside_1M_idle", 1_000_000, false),
    ] {
        let mut engine = engine_with_idle(idle, v6);
        let f = frames(&mut engine, 0, v6);
        let mut buf = vec![0u8; 1514];
        let mut now = 2_000_000;
        // Sanity: a batch completes every connection.
        assert_eq!(
            run_batch(&mut engine, &f, &mut buf, now),
            BATCH * REPLY.len() as u64
        );
        assert_eq!(engine.outstanding() as u64, idle);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = thread_cpu();
                for _ in 0..iters {
                    now += 1000;
                    std::hint::black_box(run_batch(&mut engine, &f, &mut buf, now));
                }
                thread_cpu() - start
            })
        });
        let s = engine.stats();
        assert_eq!(s.success, s.established - idle);
    }
    group.finish();
}

criterion_group!(benches, connection);
criterion_main!(benches);
