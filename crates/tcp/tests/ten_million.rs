//! Ten million outstanding connections at once: the engine sends SYNs through `sonde_io::mem`
//! (the in-memory backend), a server thread-free loop answers each with a SYN-ACK and then
//! stays silent, and the engine holds every connection, established, in under 1 GiB.
//!
//! 10,000,000 in release builds; 200,000 in debug builds (same code, a smaller count).

mod support;

use std::time::{Duration, Instant};

use sonde_io::{mem, FrameRx, FrameTx};
use sonde_tcp::{Engine, Rx};
use support::*;

const BATCH: usize = 8192;

#[test]
fn ten_million_outstanding_connections() {
    let n: u64 = if cfg!(debug_assertions) {
        200_000
    } else {
        10_000_000
    };
    let started = Instant::now();
    let mut cfg = config(n as usize);
    cfg.request_in_ack = true;
    // The silent server never acknowledges the request: keep the simulated clock within the
    // first RTO so that no retransmission doubles the traffic (timeouts would end them too).
    cfg.first_byte_timeout_us = 600_000_000;
    cfg.total_timeout_us = 600_000_000;
    let mut engine = Engine::new(cfg, Http).unwrap();
    let (mut client, mut server) = mem::pair(2 * BATCH);
    let mut now: u64 = 1_000_000;
    let mut next = 0u64;
    let mut syns: Vec<Syn> = Vec::with_capacity(BATCH);
    let (mut answered, mut requests) = (0u64, 0u64);
    while engine.outstanding() < n as usize {
        // The engine's pass: SYNs for the next targets.
        let count = BATCH.min((n - next) as usize);
        let first = next;
        let sent = client
            .tx_batch(count, |i, buf| {
                let (addr, port) = target(first + i as u64, false);
                engine.write_syn(buf, addr, port, now)
            })
            .unwrap();
        next += sent as u64;
        // The server answers every SYN.
        syns.clear();
        server
            .rx_batch(usize::MAX, Duration::ZERO, |frame| {
                if let Some(syn) = read_syn(frame) {
                    syns.push(syn);
                } else {
                    requests += 1; // the request, in the handshake's ACK: not answered
                }
            })
            .unwrap();
        let replies = server
            .tx_batch(syns.len(), |i, buf| write_synack(buf, &syns[i]))
            .unwrap();
        assert_eq!(replies, syns.len());
        now += 20;
        client
            .rx_batch(usize::MAX, Duration::ZERO, |frame| {
                if matches!(engine.on_frame(frame, now), Rx::Answered { .. }) {
                    answered += 1;
                }
            })
            .unwrap();
        engine.on_tick(now);
        let pending = engine.tx_pending();
        let written = client
            .tx_batch(pending, |_, buf| engine.write_tx(buf, now))
            .unwrap();
        assert_eq!(written, pending);
    }
    // The last requests reach the server.
    server
        .rx_batch(usize::MAX, Duration::ZERO, |_| requests += 1)
        .unwrap();
    let elapsed = started.elapsed();
    let bytes = engine.memory_bytes();
    let per_connection = bytes as f64 / n as f64;
    println!(
        "{n} connections established and held in {elapsed:.1?}; engine memory {:.0} MiB, \
         {per_connection:.1} bytes per connection; peak RSS {:.0} MiB",
        bytes as f64 / (1 << 20) as f64,
        peak_rss().unwrap_or(0) as f64 / (1 << 20) as f64
    );
    assert_eq!(engine.outstanding(), n as usize);
    assert_eq!(answered, n);
    assert_eq!(requests, n, "every connection sent its request");
    let stats = engine.stats();
    assert_eq!((stats.established, stats.peak_outstanding), (n, n));
    assert_eq!(stats.syn_sent, n);
    assert_eq!(stats.invalid + stats.table_full + stats.completed, 0);
    assert!(bytes < 1 << 30, "{bytes} bytes");
    // Fixed buffers (the timer wheel, a pass's transmit queue: about 0.4 MB) amortise over a
    // large table only; at 200,000 they add 2 bytes per connection.
    if n >= 1_000_000 {
        assert!(
            per_connection <= 64.0,
            "{per_connection} bytes per connection"
        );
    }
    // Every connection is findable: the server closes one in a thousand, spread over all of
    // them, and each of those ends as `Closed` with its own row.
    let mut buf = vec![0u8; 1514];
    let mut closed = 0u64;
    for i in (0..n).step_by(1000) {
        let (addr, port) = target(i, false);
        let len = engine.write_syn(&mut buf, addr, port, now);
        let syn = read_syn(&buf[..len]).unwrap();
        let flags = sonde_wire::TcpFlags::ACK | sonde_wire::TcpFlags::FIN;
        let len = write_segment(&mut buf, &syn, flags, 0, REQUEST.len() as u32, b"");
        assert_eq!(engine.on_frame(&buf[..len], now), Rx::Segment, "target {i}");
        closed += 1;
    }
    let mut rows = 0u64;
    engine.drain_outcomes(|o, _| {
        assert_eq!(o.status, sonde_tcp::Status::Closed);
        rows += 1;
    });
    assert_eq!(rows, closed);
    assert_eq!(engine.outstanding() as u64, n - closed);
}
