//! Backpressure, checksums, and hostile input.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{CloseMode, Engine, Rx};

const ACK: TcpFlags = TcpFlags::ACK;
const REQ: u32 = REQUEST.len() as u32;

#[test]
fn table_full_answers_rst_and_creates_nothing() {
    let mut cfg = config();
    cfg.max_outstanding = 1;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    let mut other = Server::new("198.18.0.8", 80);
    let mut buf = [0u8; 1514];
    let len = h.engine.write_syn(&mut buf, other.addr, 80, h.now);
    other.read_syn(&read_sent(&buf[..len]));
    assert_eq!(
        h.input(&other.syn_ack()),
        Rx::Segment,
        "not answered: retried later"
    );
    assert_eq!(h.engine.outstanding(), 1);
    assert_eq!(h.engine.stats().table_full, 1);
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), TcpFlags::RST);
    assert_eq!(sent[0].dst, other.addr);
    assert_eq!(sent[0].tcp.seq_number, other.client_seq(0));
    // Once the first one ends there is room again.
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 0, REQ, b""));
    h.flush();
    assert!(matches!(h.input(&other.syn_ack()), Rx::Answered { .. }));
}

fn corrupt_payload(frame: &mut [u8]) {
    let last = frame.len() - 1;
    frame[last] ^= 0x55;
}

#[test]
fn checksums_are_verified_by_default_and_bad_ones_counted() {
    for v6 in [false, true] {
        let addr = if v6 { "2001:2::9" } else { "198.18.0.9" };
        let mut h = Harness::new(config(), TestApp::http(), Server::new(addr, 80));
        h.established();
        let mut frame = h.server.segment(ACK, 0, REQ, b"payload");
        corrupt_payload(&mut frame);
        assert_eq!(h.input(&frame), Rx::Invalid);
        assert_eq!(h.engine.buffers_in_use(), 0, "corrupted data delivered");
        // A bad IPv4 header checksum too.
        if !v6 {
            let mut frame = h.server.segment(ACK, 0, REQ, b"payload");
            frame[14 + 8] ^= 1; // TTL, covered by the header checksum only
            assert_eq!(h.input(&frame), Rx::Invalid);
        }
        let bad = if v6 { 1 } else { 2 };
        assert_eq!(h.engine.stats().bad_checksums, bad);
        assert_eq!(h.engine.stats().invalid, bad);
        let good = h.server.segment(ACK, 0, REQ, b"payload");
        assert_eq!(h.input(&good), Rx::Segment);
        assert_eq!(h.engine.buffers_in_use(), 1);
        assert_eq!(h.engine.stats().bad_checksums, bad);
    }
}

#[test]
fn a_frame_marked_partial_or_verification_off_is_taken_unchecked() {
    // A partial checksum (the pseudo-header sum a sender leaves for offload) fails a check.
    let mut h = Harness::v4();
    h.established();
    let mut frame = h.server.segment(ACK, 0, REQ, b"partial checksum");
    corrupt_payload(&mut frame);
    let now = h.now;
    assert_eq!(
        h.engine.on_frame_partial_with(&frame, now, |_, _| false),
        Rx::Segment
    );
    assert_eq!(h.engine.buffers_in_use(), 1);
    // Only that frame: the next one is checked again.
    let mut next = h.server.segment(ACK, 16, REQ, b"more");
    corrupt_payload(&mut next);
    assert_eq!(h.input(&next), Rx::Invalid);
    assert_eq!(h.engine.stats().bad_checksums, 1);

    let mut cfg = config();
    cfg.verify_checksums = false;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.9", 80));
    h.established();
    let mut frame = h.server.segment(ACK, 0, REQ, b"partial checksum");
    corrupt_payload(&mut frame);
    assert_eq!(h.input(&frame), Rx::Segment);
    assert_eq!(h.engine.stats().bad_checksums, 0);
}

#[test]
fn foreign_frames_are_not_ours() {
    let mut h = Harness::v4();
    h.syn();
    let synack = h.server.syn_ack();
    // Another destination address.
    let mut frame = synack.clone();
    frame[14 + 19] ^= 1;
    assert_eq!(h.input(&frame), Rx::NotOurs);
    // UDP.
    let mut frame = synack.clone();
    frame[14 + 9] = 17;
    assert_eq!(h.input(&frame), Rx::NotOurs);
    // ARP, and garbage.
    let mut frame = synack.clone();
    frame[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(h.input(&frame), Rx::NotOurs);
    assert_eq!(h.input(&[0u8; 10]), Rx::NotOurs);
    assert_eq!(h.input(&[]), Rx::NotOurs);
    assert_eq!(h.engine.stats().invalid, 0);
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Mutated and truncated frames of every kind, fed to engines with live connections, never
/// panic, and everything the engine writes afterwards is well formed.
#[test]
fn hostile_frames_never_panic() {
    let mut rng = XorShift(0x7c9_1234);
    for (addr, close) in [
        ("198.18.0.7", CloseMode::Rst),
        ("2001:2::7", CloseMode::Fin),
    ] {
        let mut cfg = config();
        cfg.close = close;
        let mut h = Harness::new(cfg, TestApp::http(), Server::new(addr, 80));
        h.established();
        let s = h.server.clone();
        let samples = [
            s.syn_ack(),
            s.segment(ACK, 0, REQ, b"hello world"),
            s.segment(ACK | TcpFlags::FIN, 11, REQ, b""),
            s.segment(TcpFlags::RST, 0, 0, b""),
            s.segment(ACK, 100, REQ, &[7; 300]),
        ];
        let rounds = if cfg!(debug_assertions) {
            3_000
        } else {
            30_000
        };
        for round in 0..rounds {
            let mut frame = samples[round % samples.len()].clone();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % frame.len() as u64) as usize;
                frame[at] = rng.next() as u8;
            }
            if rng.next().is_multiple_of(5) {
                frame.truncate((rng.next() % frame.len() as u64) as usize);
            }
            h.input(&frame);
            if round.is_multiple_of(7) {
                h.tick(rng.next() % 300_000);
            }
            h.flush();
            h.outcomes();
            if h.engine.outstanding() == 0 {
                h.established();
            }
        }
        assert!(h.engine.outstanding() <= 1);
    }
}

#[test]
fn engines_built_with_defaults_accept_the_defaults() {
    let cfg = crate::Config::new(
        OUR_MAC,
        GW_MAC,
        sonde_craft::cookie::Validator::from_seed(1),
    );
    let err = Engine::new(cfg.clone(), TestApp::http()).err().unwrap();
    assert!(err.contains("source address"), "{err}");
    let mut cfg = cfg;
    cfg.src_ip = Some(OUR_IP);
    assert!(Engine::new(cfg, TestApp::http()).is_ok());
}
