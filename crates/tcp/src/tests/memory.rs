//! Memory: the entry's size, bytes per connection of a full table, the receive-memory limit
//! and the window update when it lifts.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::conn::Conn;
use crate::{Engine, Rx, Status};

const ACK: TcpFlags = TcpFlags::ACK;
const REQ: u32 = REQUEST.len() as u32;

/// The i-th lab target.
fn target(i: u32) -> Server {
    let a = 0xc612_0000u32 + i; // 198.18.0.0/15
    Server::new(&std::net::Ipv4Addr::from(a).to_string(), 80)
}

#[test]
fn a_full_table_costs_at_most_64_bytes_per_connection() {
    assert_eq!(std::mem::size_of::<Conn>(), 56);
    let n: u32 = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let mut cfg = config();
    cfg.max_outstanding = n as usize;
    cfg.request_in_ack = true;
    let mut engine = Engine::new(cfg, TestApp::http()).unwrap();
    let mut buf = vec![0u8; 1514];
    let now = 1_000_000;
    for i in 0..n {
        let mut server = target(i);
        let len = engine.write_syn(&mut buf, server.addr, 80, now);
        server.read_syn(&read_sent(&buf[..len]));
        assert!(matches!(
            engine.on_frame(&server.syn_ack(), now + 100),
            Rx::Answered { .. }
        ));
        // A run loop drains its transmit queue every pass.
        if i % 1024 == 1023 {
            while engine.write_tx(&mut buf, now + 100) > 0 {}
        }
    }
    while engine.write_tx(&mut buf, now + 100) > 0 {}
    assert_eq!(engine.outstanding(), n as usize);
    let per_connection = engine.memory_bytes() as f64 / f64::from(n);
    println!(
        "{n} connections: {} bytes, {per_connection:.1} bytes per connection",
        engine.memory_bytes()
    );
    assert!(
        per_connection <= 64.0,
        "{per_connection} bytes per connection"
    );
}

#[test]
fn receive_memory_limit_closes_the_window_and_reopens_it() {
    let mut cfg = config();
    cfg.rx_memory_limit = 4000;
    cfg.wscale = 0;
    cfg.rcv_window = 0xffff;
    let mut engine = Engine::new(cfg, TestApp::http()).unwrap();
    let mut buf = vec![0u8; 1514];
    let now = 1_000_000;
    let mut servers = Vec::new();
    for i in 0..2 {
        let mut server = target(i);
        let len = engine.write_syn(&mut buf, server.addr, 80, now);
        server.read_syn(&read_sent(&buf[..len]));
        engine.on_frame(&server.syn_ack(), now);
        servers.push(server);
    }
    let mut flush = |engine: &mut Engine<TestApp>| {
        let mut sent = Vec::new();
        loop {
            let len = engine.write_tx(&mut buf, now);
            if len == 0 {
                return sent;
            }
            sent.push(read_sent(&buf[..len]));
        }
    };
    flush(&mut engine);
    // A's reply takes 3000 of the 4000 bytes and ends; its outcome is not drained yet.
    let (a, b) = (&servers[0], &servers[1]);
    engine.on_frame(&a.segment(ACK, 0, REQ, &[b'a'; 1000]), now);
    engine.on_frame(&a.segment(ACK, 1000, REQ, &[b'a'; 2000]), now);
    engine.on_frame(&a.segment(ACK | TcpFlags::FIN, 3000, REQ, b""), now);
    flush(&mut engine);
    // B: 1000 bytes left, less than an MSS: its ACK advertises a zero window.
    engine.on_frame(&b.segment(ACK, 0, REQ, &[b'b'; 500]), now);
    engine.on_frame(&b.segment(ACK, 500, REQ, &[b'b'; 500]), now);
    let sent = flush(&mut engine);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.window_len, 0);
    assert_eq!(sent[0].tcp.ack_number, Some(b.seq(1000)));
    // No memory left: more data is not kept (the peer will probe and retransmit).
    engine.on_frame(&b.segment(ACK, 1000, REQ, &[b'b'; 1000]), now);
    let sent = flush(&mut engine);
    assert_eq!(sent[0].tcp.ack_number, Some(b.seq(1000)));
    assert_eq!(sent[0].tcp.window_len, 0);
    // Draining A's outcome frees its 3000 bytes: B gets a window update.
    let mut rows = Vec::new();
    engine.drain_outcomes(|o, bytes| rows.push((o.status, bytes.len())));
    assert_eq!(rows, [(Status::Success, 3000)]);
    let sent = flush(&mut engine);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].tcp.dst_port, 80);
    assert_eq!(sent[0].dst, b.addr);
    assert_eq!(sent[0].tcp.window_len, 3000);
}
