//! RFC 5961 on open and closing connections: RSTs and SYNs inside the window but not where
//! expected, and ACKs of what we never sent, get a challenge ACK (rate-limited per run)
//! instead of acting on the connection.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::engine::CHALLENGE_ACKS_PER_SECOND;
use crate::{CloseMode, Status};

const ACK: TcpFlags = TcpFlags::ACK;
const RST: TcpFlags = TcpFlags::RST;
const REQ: u32 = REQUEST.len() as u32;

/// Asserts that exactly one challenge ACK went out: our next sequence number and `rcv_nxt`.
fn assert_one_challenge_ack(h: &mut Harness, rcv_nxt: u32, our_seq: u32) {
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].flags(), ACK);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(rcv_nxt)));
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(our_seq));
}

#[test]
fn an_rst_inside_the_window_but_not_at_rcv_nxt_gets_a_challenge_ack() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b"hello"));
    h.flush();
    // A blind attacker's guess, 1000 bytes into our window: no reset.
    h.input(&h.server.segment(RST | ACK, 1000, REQ, b""));
    assert_eq!(h.engine.outstanding(), 1);
    assert!(h.outcomes().is_empty());
    assert_one_challenge_ack(&mut h, 5, REQ);
    assert_eq!(h.engine.stats().challenge_acks, 1);
    // Out of the window: dropped without an answer.
    h.input(&h.server.segment(RST | ACK, 1 << 20, REQ, b""));
    assert!(h.flush().is_empty());
    // The genuine peer answers the challenge with an RST at exactly RCV.NXT: reset.
    h.input(&h.server.segment(RST, 5, 0, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(
        (outcome.status, bytes.as_slice()),
        (Status::Reset, &b"hello"[..])
    );
}

#[test]
fn data_with_an_ack_from_before_our_first_byte_is_dropped() {
    let mut h = Harness::v4();
    h.established();
    // In the window, but acknowledging 2^30 bytes before anything we sent.
    let old = h.server.client_seq(REQ).wrapping_sub(1 << 30);
    h.input(&h.server.raw(ACK, h.server.seq(0), Some(old), b"injected"));
    assert_eq!(h.engine.buffers_in_use(), 0, "not delivered");
    assert_one_challenge_ack(&mut h, 0, REQ);
    // Just before our ISN + 1 (the SYN's own sequence number) is out of range too.
    h.input(&h.server.segment(ACK, 0, u32::MAX, b"injected"));
    assert_eq!(h.engine.buffers_in_use(), 0);
    assert_one_challenge_ack(&mut h, 0, REQ);
    // An old ACK inside what we sent counts: the data is taken.
    h.input(&h.server.segment(ACK, 0, 10, b"hello"));
    h.input(&h.server.segment(ACK, 5, 0, b" world"));
    h.engine.abort_all(h.now);
    assert_eq!(h.outcome().1, b"hello world");
    assert_eq!(h.engine.stats().challenge_acks, 2);
}

#[test]
fn an_ack_of_unsent_data_gets_a_challenge_ack() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ + 1, b"x"));
    assert_eq!(h.engine.buffers_in_use(), 0);
    assert_one_challenge_ack(&mut h, 0, REQ);
    assert_eq!(h.engine.stats().challenge_acks, 1);
}

#[test]
fn a_syn_on_an_open_connection_gets_a_challenge_ack() {
    let mut h = Harness::v4();
    h.established();
    // Not our SYN-ACK again (another ISN): a new connection attempt or a forgery.
    let mut other = h.server.clone();
    other.iss = other.iss.wrapping_add(77_777);
    h.input(&other.syn_ack());
    assert_eq!(h.engine.outstanding(), 1);
    assert_one_challenge_ack(&mut h, 0, REQ);
    assert_eq!(h.engine.stats().challenge_acks, 1);
}

#[test]
fn challenge_acks_are_limited_per_second() {
    let mut h = Harness::v4();
    h.established();
    h.now = 10_000_000; // the start of a second
    let limit = CHALLENGE_ACKS_PER_SECOND as usize;
    let mut acks = 0;
    for k in 0..limit + 500 {
        h.input(&h.server.segment(RST, 1 + (k % 1000) as u32, REQ, b""));
        acks += h.flush().len();
    }
    assert_eq!(acks, limit);
    assert_eq!(h.engine.stats().challenge_acks, limit as u64);
    assert_eq!(h.engine.stats().challenge_acks_limited, 500);
    assert_eq!(
        h.engine.outstanding(),
        1,
        "none of them reset the connection"
    );
    // The next second has a new budget.
    h.now += 1_000_000;
    h.input(&h.server.segment(RST, 1, REQ, b""));
    assert_eq!(h.flush().len(), 1);
}

#[test]
fn closing_connections_check_rsts_and_acks_too() {
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 0, REQ, b"bye"));
    assert_eq!(h.outcome().0.status, Status::Success);
    h.flush(); // our FIN: we sent up to REQ + 1
               // An RST 100 bytes into the window: a challenge, the entry stays.
    h.input(&h.server.segment(RST, 104, REQ, b""));
    assert_eq!(h.engine.outstanding(), 1);
    assert_one_challenge_ack(&mut h, 4, REQ + 1);
    // An ACK beyond our FIN: a challenge, and it does not count as the ACK of our FIN.
    h.input(&h.server.segment(ACK, 4, REQ + 2, b""));
    assert_one_challenge_ack(&mut h, 4, REQ + 1);
    assert_eq!(h.engine.outstanding(), 1);
    // The ACK of our FIN ends it.
    h.input(&h.server.segment(ACK, 4, REQ + 1, b""));
    assert_eq!(h.engine.outstanding(), 0);
    assert_eq!(h.engine.stats().challenge_acks, 2);
}

#[test]
fn engines_made_from_one_config_share_the_budget() {
    // grab's threads each run an engine made from one Config: the limit is the run's, as
    // Linux's is the host's, not one per thread.
    let cfg = config();
    let mut a = Harness::new(cfg.clone(), TestApp::http(), Server::new("198.18.0.7", 80));
    let mut b = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.8", 80));
    a.established();
    b.established();
    a.now = 10_000_000;
    b.now = 10_000_000;
    let limit = CHALLENGE_ACKS_PER_SECOND as usize;
    let mut acks = 0;
    for k in 0..limit {
        a.input(&a.server.segment(RST, 1 + (k % 1000) as u32, REQ, b""));
        acks += a.flush().len();
    }
    assert_eq!(acks, limit);
    b.input(&b.server.segment(RST, 1, REQ, b""));
    assert!(b.flush().is_empty(), "the run's budget is spent");
    assert_eq!(b.engine.stats().challenge_acks_limited, 1);
    // The next second has a new budget, for either.
    b.now += 1_000_000;
    b.input(&b.server.segment(RST, 1, REQ, b""));
    assert_eq!(b.flush().len(), 1);
}

#[test]
fn a_clock_a_little_behind_spends_from_the_newer_second() {
    // Threads read the shared clock at slightly different moments: one still in the second
    // before must not reset the budget the others have spent.
    let budget = crate::ChallengeBudget::default();
    let shared = budget.clone();
    for _ in 0..CHALLENGE_ACKS_PER_SECOND {
        assert!(budget.take(5_000_000));
    }
    assert!(!shared.take(4_999_999), "the lagging clock finds it spent");
    assert!(!budget.take(5_999_999));
    assert!(shared.take(6_000_000), "a new second, a new budget");
}
