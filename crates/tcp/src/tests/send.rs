//! Sending the request: retransmission on the RTO with backoff, and the peer's zero window.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::Status;

const ACK: TcpFlags = TcpFlags::ACK;
const REQ: u32 = REQUEST.len() as u32;

/// Ticks in 1 ms steps for `ms` milliseconds, returning each retransmitted request's time.
fn retransmissions(h: &mut Harness, ms: u64) -> Vec<u64> {
    let start = h.now;
    let mut at = Vec::new();
    for _ in 0..ms {
        h.tick(1000);
        for sent in h.flush() {
            if !sent.payload.is_empty() {
                at.push((h.now - start) / 1000);
            }
        }
    }
    at
}

#[test]
fn request_retransmitted_with_backoff_and_bounded() {
    let mut cfg = config();
    cfg.max_retransmits = 3;
    cfg.first_byte_timeout_us = 10_000_000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    // RTT 100 ms: RTO 300 ms from the SYN-ACK, then 600, 1200.
    assert!(matches!(h.handshake(100_000), crate::Rx::Answered { .. }));
    h.flush();
    let at = retransmissions(&mut h, 5000);
    assert_eq!(
        at,
        [300, 900, 2100],
        "one RTO after the send, then doubling"
    );
    assert_eq!(h.engine.stats().retransmits_sent, 3);
    // The peer finally answers: ACK of the request, then the reply.
    h.input(&h.server.segment(ACK, 0, REQ, b""));
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 0, REQ, b"ok"));
    assert_eq!(h.outcome().0.status, Status::Success);
}

#[test]
fn rto_has_a_floor_of_200_ms_and_stops_once_acked() {
    let mut h = Harness::v4();
    assert!(matches!(h.handshake(1_000), crate::Rx::Answered { .. }));
    h.flush();
    assert_eq!(retransmissions(&mut h, 250), [200]);
    h.input(&h.server.segment(ACK, 0, REQ, b""));
    assert!(retransmissions(&mut h, 3000).is_empty());
}

#[test]
fn no_rtt_means_a_one_second_rto() {
    let mut server = Server::new("198.18.0.7", 80);
    server.timestamps = false;
    let mut h = Harness::new(config(), TestApp::http(), server);
    h.established();
    assert_eq!(retransmissions(&mut h, 1500), [1000]);
}

#[test]
fn zero_window_waits_probes_and_sends_when_it_opens() {
    let mut server = Server::new("198.18.0.7", 80);
    server.window = 0;
    let mut h = Harness::new(config(), TestApp::http(), server);
    assert!(matches!(h.handshake(50_000), crate::Rx::Answered { .. }));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "only the ACK: the peer's window is zero");
    assert!(sent[0].payload.is_empty());
    // Probes of one byte on the RTO schedule (RTO 200 ms: at 200 and 600 ms).
    let mut probes = Vec::new();
    for _ in 0..700 {
        h.tick(1000);
        for s in h.flush() {
            assert_eq!(s.payload, &REQUEST[..1]);
            assert_eq!(s.tcp.seq_number, h.server.client_seq(0));
            probes.push(s);
        }
    }
    assert_eq!(probes.len(), 2);
    // The window opens: 1, scaled by the peer's 7, is 128 bytes, enough for the request.
    h.server.window = 1;
    h.input(&h.server.segment(ACK, 0, 0, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, REQUEST);
    assert_eq!(sent[0].flags(), ACK | TcpFlags::PSH);
}

#[test]
fn small_window_sends_what_fits_then_the_rest() {
    let mut server = Server::new("198.18.0.7", 80);
    server.ws = None;
    server.window = 10;
    let mut h = Harness::new(config(), TestApp::http(), server);
    let sent = h.established();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].payload, &REQUEST[..10]);
    assert_eq!(sent[1].flags(), ACK);
    // The peer ACKs 10 bytes and opens its window.
    h.server.window = 1000;
    h.input(&h.server.segment(ACK, 0, 10, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, &REQUEST[10..]);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(10));
}

#[test]
fn an_ack_of_unsent_data_is_answered_and_ignored() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ + 5, b"x"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].tcp.ack_number,
        Some(h.server.seq(0)),
        "the data was dropped"
    );
    assert_eq!(h.engine.buffers_in_use(), 0);
}

#[test]
fn segments_with_sack_blocks_fit_the_peers_mss() {
    // MSS 100 with timestamps: 88 bytes of request a segment. While data ahead of a gap is
    // held, the retransmissions' SACK blocks must not push a segment past the MSS.
    let mut server = Server::new("198.18.0.9", 80);
    server.mss = Some(100);
    let request: Vec<u8> = (0..=255u8).collect();
    let app = TestApp {
        request: request.clone(),
        end: None,
    };
    let mut h = Harness::new(config(), app, server);
    let sent = h.established();
    assert_eq!(sent.len(), 4);
    // Three ranges ahead of a gap, the request still unacknowledged.
    for off in [100, 300, 500] {
        h.input(&h.server.segment(ACK, off, 0, &[b'x'; 50]));
    }
    let acks = h.flush();
    assert_eq!(
        acks.last().unwrap().sacks().len(),
        3,
        "pure ACKs carry every block"
    );
    let mut resent = Vec::new();
    for _ in 0..250 {
        h.tick(1000);
        resent.extend(h.flush().into_iter().filter(|s| !s.payload.is_empty()));
    }
    assert_eq!(resent.len(), 3, "the request again at the RTO");
    for s in &resent {
        assert!(
            s.data_and_options() <= 100,
            "{} bytes of data and {} of header",
            s.payload.len(),
            s.header_len
        );
    }
    let joined: Vec<u8> = resent.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(joined, request);
    // Even the last (80 bytes and 12 of timestamps) leaves 8: a SACK option needs 12.
    assert!(resent.iter().all(|s| s.sacks().is_empty()));
}

#[test]
fn zero_window_probes_do_not_use_up_max_retransmits() {
    let mut cfg = config();
    cfg.max_retransmits = 1;
    cfg.first_byte_timeout_us = 20_000_000;
    cfg.total_timeout_us = 30_000_000;
    let mut server = Server::new("198.18.0.7", 80);
    server.window = 0;
    let mut h = Harness::new(cfg, TestApp::http(), server);
    assert!(matches!(h.handshake(10_000), crate::Rx::Answered { .. }));
    h.flush();
    // RTO 200 ms: probes at 200, 600 and 1400 ms, though only one retransmission is allowed.
    let probes = retransmissions(&mut h, 1500);
    assert_eq!(probes, [200, 600, 1400]);
    // The window opens: the request goes, and still has its one retransmission, one RTO
    // later (as Linux, the probes' backoff ends when the window opens).
    h.server.window = 1;
    h.input(&h.server.segment(ACK, 0, 0, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, REQUEST);
    let again = retransmissions(&mut h, 8000);
    assert_eq!(again, [200], "once, one RTO after it was sent");
    assert_eq!(h.engine.outstanding(), 1);
}

#[test]
fn an_acked_request_is_not_sent_again_when_our_window_is_zero() {
    // Our receive memory is full: the window we advertise is zero. The server's next segment
    // (a window probe) is not acceptable, but its ACK field, which acknowledges the request,
    // still counts (RFC 9293 3.10.7.4): no needless retransmission at the RTO.
    let mut cfg = config();
    cfg.rx_memory_limit = 1000;
    cfg.wscale = 0;
    cfg.rcv_window = 0xffff;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    // A banner before the server read the request: it does not acknowledge it.
    h.input(&h.server.segment(ACK, 0, 0, &[b'b'; 1000]));
    let sent = h.flush();
    assert_eq!(sent.last().unwrap().tcp.window_len, 0);
    h.input(&h.server.segment(ACK, 1000, REQ, b"x"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].tcp.ack_number,
        Some(h.server.seq(1000)),
        "x is not kept"
    );
    assert!(retransmissions(&mut h, 1000).is_empty());
    assert_eq!(h.engine.stats().retransmits_sent, 0);
}

/// A peer whose window (unscaled) takes `window` bytes of the request at first.
fn window_limited(window: u16) -> Harness {
    let mut server = Server::new("198.18.0.7", 80);
    server.ws = None;
    server.window = window;
    Harness::new(config(), TestApp::http(), server)
}

#[test]
fn an_ack_beyond_the_bytes_sent_gets_a_challenge_ack() {
    // 10 bytes sent of 29: an ACK of 20 acknowledges bytes that never left.
    let mut h = window_limited(10);
    let sent = h.established();
    assert_eq!(sent.last().unwrap().payload, &REQUEST[..10]);
    h.input(&h.server.segment(ACK, 0, 20, b"x"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].payload.is_empty());
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(10));
    assert_eq!(
        sent[0].tcp.ack_number,
        Some(h.server.seq(0)),
        "x is dropped"
    );
    assert_eq!(h.engine.stats().challenge_acks, 1);
    // The ACK of the 10 bytes sent counts, and the rest of the request goes.
    h.server.window = 1000;
    h.input(&h.server.segment(ACK, 0, 10, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, &REQUEST[10..]);
}

#[test]
fn a_shrinking_window_does_not_unsend_what_went_out() {
    // The whole request went out; the peer then shrinks its window to 5 bytes without
    // acknowledging anything. Its later ACK of the whole request still counts.
    let mut h = window_limited(1000);
    h.established();
    h.server.window = 5;
    h.input(&h.server.segment(ACK, 0, 0, b""));
    assert!(h.flush().is_empty());
    h.input(&h.server.segment(ACK, 0, REQ, b"ok"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(2)), "ok is taken");
    assert_eq!(h.engine.stats().challenge_acks, 0);
    assert!(
        retransmissions(&mut h, 3000).is_empty(),
        "the request is acknowledged"
    );
}

#[test]
fn the_ack_of_a_zero_window_probe_counts() {
    let mut server = Server::new("198.18.0.7", 80);
    server.window = 0;
    let mut h = Harness::new(config(), TestApp::http(), server);
    h.established();
    assert_eq!(retransmissions(&mut h, 250), [200], "one probe");
    // The peer took the probe's byte, and its window is still shut.
    h.input(&h.server.segment(ACK, 0, 1, b"x"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(1));
    assert_eq!(h.engine.stats().challenge_acks, 0);
    // The next probe is the next byte.
    let mut probes = Vec::new();
    for _ in 0..1000 {
        h.tick(1000);
        probes.extend(h.flush().into_iter().filter(|s| !s.payload.is_empty()));
    }
    assert!(!probes.is_empty());
    assert!(probes
        .iter()
        .all(|p| p.payload == REQUEST[1..2] && p.tcp.seq_number == h.server.client_seq(1)));
}

#[test]
fn the_rto_runs_from_the_latest_send_or_ack_that_advanced() {
    // RTO 200 ms. 10 bytes go at the SYN-ACK; the peer acknowledges them 190 ms later and
    // opens its window, and the rest goes then: it is retransmitted one RTO after that (as
    // Linux re-arms its timer on an ACK that advances), not 10 ms later.
    let mut h = window_limited(10);
    h.established();
    assert!(retransmissions(&mut h, 190).is_empty());
    h.server.window = 1000;
    h.input(&h.server.segment(ACK, 0, 10, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, &REQUEST[10..]);
    assert_eq!(
        retransmissions(&mut h, 700),
        [200, 600],
        "backing off from the ACK"
    );
}

#[test]
fn a_partial_ack_rearms_the_timer() {
    // A request in three segments (MSS 64: 52 bytes of data with timestamps); the peer
    // acknowledges the first at 150 ms. The other two go again one RTO after that ACK.
    let mut server = Server::new("198.18.0.9", 80);
    server.mss = Some(64);
    let app = TestApp {
        request: vec![b'r'; 130],
        end: None,
    };
    let mut h = Harness::new(config(), app, server);
    let sent = h.established();
    assert_eq!(sent.iter().filter(|s| !s.payload.is_empty()).count(), 3);
    let mut again = Vec::new();
    for ms in 0..400 {
        h.tick(1000);
        if ms == 150 {
            h.input(&h.server.segment(ACK, 0, 52, b""));
        }
        for s in h.flush().into_iter().filter(|s| !s.payload.is_empty()) {
            again.push((h.now, s.tcp.seq_number));
        }
    }
    let acked_at = 1_000_000 + 10_000 + 151_000;
    assert_eq!(
        again,
        [
            (acked_at + 200_000, h.server.client_seq(52)),
            (acked_at + 200_000, h.server.client_seq(104)),
        ]
    );
}

#[test]
fn new_bytes_sent_while_others_are_in_flight_keep_the_running_timer() {
    // As Linux: a window update that lets more of the request go while the first bytes are
    // unacknowledged does not push the timer back: at the RTO everything in flight goes again.
    let mut h = window_limited(10);
    h.established();
    assert!(retransmissions(&mut h, 150).is_empty());
    h.server.window = 1000;
    h.input(&h.server.segment(ACK, 0, 0, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, &REQUEST[10..]);
    let mut again = Vec::new();
    for _ in 0..100 {
        h.tick(1000);
        again.extend(h.flush().into_iter().filter(|s| !s.payload.is_empty()));
    }
    assert_eq!(h.now, 1_000_000 + 10_000 + 250_000);
    let joined: Vec<u8> = again.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(joined, REQUEST, "the whole request, at 200 ms");
}
