//! Endings: FIN and RST in every state, each timeout, both close modes, abort.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{CloseMode, Rx, Status};

const ACK: TcpFlags = TcpFlags::ACK;
const FIN: TcpFlags = TcpFlags::FIN;
const RST: TcpFlags = TcpFlags::RST;
const REQ: u32 = REQUEST.len() as u32;

fn fin_mode() -> Harness {
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80))
}

#[test]
fn fin_without_data_is_closed() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Closed);
    assert!(bytes.is_empty());
    let rst = h.flush().pop().unwrap();
    assert_eq!(rst.flags(), RST | ACK);
    assert_eq!(rst.tcp.ack_number, Some(h.server.seq(1)));
    assert_eq!(h.engine.stats().closed, 1);
}

#[test]
fn a_fin_ahead_of_lost_data_is_answered_at_once() {
    let mut h = Harness::v4();
    h.established();
    h.flush();
    // "hello" was lost; the server's FIN (a tail-loss probe) arrives alone, ahead of the gap.
    h.input(&h.server.segment(ACK | FIN, 5, REQ, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "one duplicate ACK, at once");
    assert_eq!(sent[0].flags(), ACK);
    assert_eq!(
        sent[0].tcp.ack_number,
        Some(h.server.seq(0)),
        "we still need byte 0"
    );
    assert!(h.engine.outstanding() == 1, "the connection goes on");
    // The server sends the data again, with its FIN: the reply is whole.
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b"hello"));
    let (outcome, bytes) = h.outcome();
    assert_eq!(
        (outcome.status, bytes.as_slice()),
        (Status::Success, &b"hello"[..])
    );
}

#[test]
fn fin_before_the_request_is_acked() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, 0, b"bye"));
    assert_eq!(h.outcome().0.status, Status::Success);
    assert_eq!(h.engine.outstanding(), 0);
}

#[test]
fn rst_after_the_handshake_is_reset_and_not_answered() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b"partial"));
    h.input(&h.server.segment(RST | ACK, 7, REQ, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Reset);
    assert_eq!(bytes, b"partial", "what arrived is kept");
    assert_eq!(h.engine.outstanding(), 0);
    assert!(h.flush().iter().all(|s| !s.flags().contains(RST)));
    assert_eq!(h.engine.stats().resets, 1);
}

#[test]
fn rst_out_of_window_is_ignored() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(RST, 200_000, REQ, b""));
    assert_eq!(h.engine.outstanding(), 1);
    h.input(&h.server.segment(RST, 0, REQ, b""));
    assert_eq!(h.engine.outstanding(), 0);
}

#[test]
fn first_byte_timeout() {
    let mut cfg = config();
    cfg.first_byte_timeout_us = 2_000_000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b""));
    h.tick(1_999_000);
    assert_eq!(h.engine.outstanding(), 1);
    h.tick(1_000);
    assert_eq!(h.engine.outstanding(), 0);
    let (outcome, _) = h.outcome();
    assert_eq!(outcome.status, Status::DataTimeout);
    assert_eq!(outcome.t_total_us, 2_000_000);
    assert_eq!(outcome.t_first_byte_us, None);
    let rst = h.flush().pop().unwrap();
    assert_eq!(rst.flags(), RST | ACK);
}

#[test]
fn idle_timeout_runs_from_the_last_data() {
    let mut cfg = config();
    cfg.idle_timeout_us = 1_000_000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    let mut off = 0;
    for _ in 0..5 {
        h.tick(900_000);
        h.input(&h.server.segment(ACK, off, REQ, b"tick"));
        off += 4;
    }
    h.tick(999_000);
    assert_eq!(h.engine.outstanding(), 1);
    h.tick(1_000);
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::DataTimeout);
    assert_eq!(bytes.len(), 20);
    assert_eq!(outcome.t_first_byte_us, Some(900_000));
    assert_eq!(outcome.t_total_us, 5 * 900_000 + 1_000_000);
}

#[test]
fn total_timeout_bounds_a_trickle() {
    let mut cfg = config();
    cfg.total_timeout_us = 3_000_000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    for off in 0..40 {
        h.tick(100_000);
        h.input(&h.server.segment(ACK, off, REQ, b"."));
        h.flush();
        if h.engine.outstanding() == 0 {
            break;
        }
    }
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::DataTimeout);
    assert_eq!(outcome.t_total_us, 3_000_000);
    assert_eq!(bytes.len(), 29);
}

#[test]
fn fin_close_after_completion_waits_for_ack_and_fin() {
    let app = TestApp {
        request: REQUEST.to_vec(),
        end: Some(b"END"),
    };
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    let mut h = Harness::new(cfg, app, Server::new("198.18.0.8", 80));
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b"dataEND"));
    assert_eq!(
        h.outcome().0.status,
        Status::Success,
        "reported at completion"
    );
    assert_eq!(h.engine.outstanding(), 1, "held while closing");
    let sent = h.flush();
    let fin = sent.last().unwrap();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(fin.tcp.seq_number, h.server.client_seq(REQ));
    assert_eq!(fin.tcp.ack_number, Some(h.server.seq(7)));
    // The server ACKs our FIN and sends its own: we ACK it and the entry is freed.
    h.input(&h.server.segment(ACK | FIN, 7, REQ + 1, b""));
    assert_eq!(h.engine.outstanding(), 0);
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), ACK);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(REQ + 1));
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(8)));
    assert!(h.outcomes().is_empty(), "one row per connection");
}

#[test]
fn fin_close_after_the_servers_fin() {
    let mut h = fin_mode();
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b"bye"));
    assert_eq!(h.outcome().0.status, Status::Success);
    let sent = h.flush();
    let fin = sent.last().unwrap();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(
        fin.tcp.ack_number,
        Some(h.server.seq(4)),
        "acks the server's FIN"
    );
    // Data after our FIN is acknowledged and dropped; then the ACK of our FIN frees it.
    h.input(&h.server.segment(ACK, 4, REQ, b""));
    assert_eq!(h.engine.outstanding(), 1);
    h.input(&h.server.segment(ACK, 4, REQ + 1, b""));
    assert_eq!(h.engine.outstanding(), 0);
}

#[test]
fn fin_close_retransmits_then_gives_up() {
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    cfg.close_timeout_us = 1_000_000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b"x"));
    h.outcome();
    h.flush();
    let mut fins = 0;
    for _ in 0..1100 {
        h.tick(1000);
        fins += h.flush().iter().filter(|s| s.flags().contains(FIN)).count();
    }
    // RTO 200 ms (RTT 10 ms): FINs again at 200 and 600 ms; freed at 1 s.
    assert_eq!(fins, 2);
    assert_eq!(h.engine.outstanding(), 0);
}

#[test]
fn rst_while_closing() {
    let mut h = fin_mode();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b""));
    h.tick(5_000_000); // first-byte timeout: FIN
    assert_eq!(h.outcome().0.status, Status::DataTimeout);
    assert_eq!(h.flush().last().unwrap().flags(), FIN | ACK);
    // An RST ends the closing connection (at RCV.NXT exactly).
    h.input(&h.server.segment(RST, 0, REQ + 1, b""));
    assert_eq!(h.engine.outstanding(), 0);
    assert!(h.outcomes().is_empty());
    assert!(h.flush().is_empty(), "an RST is not answered");
}

#[test]
fn new_data_after_our_fin_gets_an_rst() {
    // RFC 1122 4.2.2.13: data arriving after our close is lost; an RST says so at once, so
    // the server stops sending instead of retransmitting into our close timeout.
    let app = TestApp {
        request: REQUEST.to_vec(),
        end: Some(b"END"),
    };
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    let mut h = Harness::new(cfg, app, Server::new("198.18.0.7", 80));
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b"END"));
    assert_eq!(h.outcome().0.status, Status::Success);
    assert_eq!(h.flush().last().unwrap().flags(), FIN | ACK);
    // A retransmission of what we had is ACKed again; the entry stays.
    h.input(&h.server.segment(ACK, 0, REQ, b"END"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), ACK);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(3)));
    assert_eq!(h.engine.outstanding(), 1);
    // New data (the server had not seen our FIN yet: its ACK is our FIN's sequence number).
    h.input(&h.server.segment(ACK, 3, REQ, b" and more"));
    assert_eq!(h.engine.outstanding(), 0, "freed at once");
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), RST);
    assert_eq!(
        sent[0].tcp.seq_number,
        h.server.client_seq(REQ),
        "the sequence number the server expects: its ACK"
    );
    assert!(h.outcomes().is_empty(), "one row per connection");
}

#[test]
fn abort_with_fin_close_frees_everything() {
    let mut h = fin_mode();
    h.established();
    h.engine.abort_all(h.now);
    assert_eq!(h.engine.outstanding(), 0);
    assert_eq!(h.outcome().0.status, Status::DataTimeout);
    assert_eq!(h.flush().last().unwrap().flags(), FIN | ACK);
}

#[test]
fn abort_reports_every_open_connection() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK, 0, REQ, b"half"));
    let mut other = Server::new("198.18.1.1", 443);
    let mut buf = [0u8; 1514];
    let len = h.engine.write_syn(&mut buf, other.addr, 443, h.now);
    other.read_syn(&read_sent(&buf[..len]));
    assert!(matches!(h.input(&other.syn_ack()), Rx::Answered { .. }));
    h.flush();
    h.engine.abort_all(h.now + 1);
    assert_eq!(h.engine.outstanding(), 0);
    let mut outcomes = h.outcomes();
    outcomes.sort_by_key(|o| o.0.port);
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.iter().all(|o| o.0.status == Status::DataTimeout));
    assert_eq!(outcomes[0].1, b"half");
    let sent = h.flush();
    assert_eq!(sent.iter().filter(|s| s.flags().contains(RST)).count(), 2);
    assert_eq!(h.engine.stats().timeouts, 2);
}

#[test]
fn late_segments_after_the_end_are_reset() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b"done"));
    h.outcome();
    h.flush();
    // The server had more in flight.
    assert_eq!(h.input(&h.server.segment(ACK, 4, REQ, b"more")), Rx::Late);
    assert_eq!((h.engine.stats().late, h.engine.stats().invalid), (1, 0));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), RST);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(REQ));
    // An RST is never answered.
    assert_eq!(
        h.input(&h.server.segment(RST | ACK, 4, REQ, b"")),
        Rx::Invalid
    );
    assert!(h.flush().is_empty());
}

#[test]
fn stats_add_up() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | FIN, 0, REQ, b"x"));
    h.outcome();
    h.flush();
    let s = h.engine.stats().clone();
    assert_eq!(
        s.completed,
        s.success + s.refused + s.timeouts + s.resets + s.closed
    );
    assert_eq!(
        (s.established, s.success, s.rsts_sent, s.acks_sent),
        (1, 1, 1, 1)
    );
    assert_eq!(s.peak_outstanding, 1);
}

#[test]
fn fin_close_after_a_window_limited_send_goes_after_the_bytes_sent() {
    // The peer's window took 10 bytes of the request: our FIN follows them, not the 19 never
    // sent, and the close's ACK arithmetic counts from there.
    let mut server = Server::new("198.18.0.7", 80);
    server.ws = None;
    server.window = 10;
    let mut cfg = config();
    cfg.close = CloseMode::Fin;
    let mut h = Harness::new(cfg, TestApp::http(), server);
    let sent = h.established();
    assert_eq!(sent.last().unwrap().payload, &REQUEST[..10]);
    h.input(&h.server.segment(ACK | FIN, 0, 0, b"bye"));
    assert_eq!(h.outcome().0.status, Status::Success);
    let fin = h.flush().pop().unwrap();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(fin.tcp.seq_number, h.server.client_seq(10));
    // An ACK of a FIN after the whole request acknowledges what we never sent.
    h.input(&h.server.segment(ACK, 4, REQ + 1, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "a challenge ACK");
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(11));
    assert_eq!(h.engine.outstanding(), 1);
    // The ACK of our FIN where it went ends the close.
    h.input(&h.server.segment(ACK, 4, 11, b""));
    assert_eq!(h.engine.outstanding(), 0);
}
