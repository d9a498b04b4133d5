//! Receiving the reply: order, gaps, duplicates, SACK, delayed ACKs, windows, max_bytes.

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::Status;

const ACK: TcpFlags = TcpFlags::ACK;
const REQ: u32 = REQUEST.len() as u32;

fn reply(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 26) as u8).collect()
}

#[test]
fn out_of_order_is_kept_sacked_and_merged() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(3000);
    // Segment 2 first: an immediate ACK for rcv_nxt 0 with a SACK block for it.
    h.input(&h.server.segment(ACK, 1000, REQ, &data[1000..2000]));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(0)));
    assert_eq!(sent[0].sacks(), [(h.server.seq(1000), h.server.seq(2000))]);
    // The hole fills: an immediate ACK of everything, no SACK left.
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1000]));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(2000)));
    assert!(sent[0].sacks().is_empty());
    h.input(
        &h.server
            .segment(ACK | TcpFlags::FIN, 2000, REQ, &data[2000..]),
    );
    let (outcome, bytes) = h.outcome();
    assert_eq!(bytes, data);
    assert_eq!(outcome.bytes, 3000);
    assert_eq!(outcome.ooo_segments, 1);
    assert_eq!(outcome.retransmits_received, 0);
    assert_eq!(h.engine.stats().ooo_segments, 1);
    assert_eq!(h.engine.stats().sack_blocks_sent, 1);
}

#[test]
fn sack_blocks_most_recent_first_at_most_three() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(10_000);
    let server = h.server.clone();
    let s = |off: u32| server.seq(off);
    let mut last_sacks = Vec::new();
    for start in [1000u32, 3000, 5000, 7000] {
        h.input(
            &h.server
                .segment(ACK, start, REQ, &data[start as usize..start as usize + 500]),
        );
        let sent = h.flush();
        assert_eq!(sent.len(), 1);
        last_sacks = sent[0].sacks();
    }
    // Four holes, three blocks reported, the newest first.
    assert_eq!(
        last_sacks,
        [(s(7000), s(7500)), (s(5000), s(5500)), (s(3000), s(3500))]
    );
    // Extending the oldest block moves it to the front.
    h.input(&h.server.segment(ACK, 1500, REQ, &data[1500..1600]));
    let sent = h.flush();
    assert_eq!(
        sent[0].sacks(),
        [(s(1000), s(1600)), (s(7000), s(7500)), (s(5000), s(5500))]
    );
    // Everything arrives: the data is intact.
    for start in (0..10_000).step_by(1000) {
        h.input(&h.server.segment(
            ACK,
            start,
            REQ,
            &data[start as usize..start as usize + 1000],
        ));
    }
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 10_000, REQ, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(bytes, data);
    assert_eq!(outcome.status, Status::Success);
}

#[test]
fn duplicates_and_overlaps_are_trimmed_and_counted() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(2000);
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1000]));
    // An exact duplicate: an immediate ACK.
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1000]));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(1000)));
    // An overlap: old bytes trimmed, new ones kept.
    h.input(&h.server.segment(ACK, 500, REQ, &data[500..1500]));
    // An out-of-order duplicate of data held ahead of a gap.
    h.input(&h.server.segment(ACK, 1700, REQ, &data[1700..1800]));
    h.input(&h.server.segment(ACK, 1700, REQ, &data[1700..1800]));
    h.input(&h.server.segment(ACK, 1500, REQ, &data[1500..1700]));
    h.input(&h.server.segment(ACK, 1800, REQ, &data[1800..]));
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 2000, REQ, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(bytes, data);
    assert_eq!(outcome.retransmits_received, 3);
    assert_eq!(outcome.ooo_segments, 1);
    assert_eq!(h.engine.stats().retransmits_received, 3);
}

/// Sends the reply's first `n` segments of 1000 bytes (the quick-ACK ones), each ACKed at once.
fn quick_segments(h: &mut Harness, data: &[u8], n: u32) -> u32 {
    for k in 0..n {
        let off = 1000 * k;
        let bytes = &data[off as usize..off as usize + 1000];
        h.input(&h.server.segment(ACK, off, REQ, bytes));
        let sent = h.flush();
        assert_eq!(sent.len(), 1, "segment {k} is ACKed at once");
        assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(off + 1000)));
    }
    1000 * n
}

#[test]
fn first_segments_are_acked_at_once() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(20_000);
    // No delayed ACK at the start: a server waiting for an ACK (Nagle, a small first window)
    // is not held up 40 ms.
    let off = quick_segments(&mut h, &data, 16);
    // Then ACKs are delayed again.
    h.input(
        &h.server
            .segment(ACK, off, REQ, &data[off as usize..off as usize + 1000]),
    );
    assert!(h.flush().is_empty(), "the 17th segment's ACK is delayed");
}

#[test]
fn delayed_ack_every_second_segment_or_after_the_delay() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(25_000);
    let q = quick_segments(&mut h, &data, 16);
    let at = |off: u32| (q + off) as usize;
    h.input(&h.server.segment(ACK, q, REQ, &data[at(0)..at(1448)]));
    assert_eq!(h.flush().len(), 0, "the first segment's ACK is delayed");
    h.input(
        &h.server
            .segment(ACK, q + 1448, REQ, &data[at(1448)..at(2896)]),
    );
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "the second is ACKed at once");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(q + 2896)));
    h.input(
        &h.server
            .segment(ACK, q + 2896, REQ, &data[at(2896)..at(4000)]),
    );
    h.tick(39_000);
    assert_eq!(h.flush().len(), 0);
    h.tick(1_000);
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "40 ms later");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(q + 4000)));
    assert_eq!(sent[0].flags(), ACK);
    // The FIN is ACKed at once (here by the RST that closes).
    h.input(&h.server.segment(ACK | TcpFlags::FIN, q + 4000, REQ, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(q + 4001)));
}

#[test]
fn ts_recent_is_taken_only_at_or_before_the_last_ack_sent() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(20_000);
    let q = quick_segments(&mut h, &data, 16) as usize;
    // Segment A's ACK is delayed; B arrives before it and is ACKed with A (every second
    // segment). RFC 7323 4.3: the ACK echoes A's TSval, not B's: B lies after the last ACK
    // sent, so the sender measures the RTT from A, delay included.
    h.server.tsval = 6000;
    h.input(&h.server.segment(ACK, q as u32, REQ, &data[q..q + 1000]));
    assert!(h.flush().is_empty());
    h.server.tsval = 7000;
    h.input(
        &h.server
            .segment(ACK, q as u32 + 1000, REQ, &data[q + 1000..q + 2000]),
    );
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(q as u32 + 2000)));
    assert_eq!(
        sent[0].tcp.timestamp.map(|ts| ts.1),
        Some(6000),
        "A's TSval"
    );
    // The next segment lies at the last ACK sent: its TSval is taken.
    h.server.tsval = 8000;
    h.input(
        &h.server
            .segment(ACK, q as u32 + 2000, REQ, &data[q + 2000..q + 3000]),
    );
    h.tick(40_000);
    let sent = h.flush();
    assert_eq!(sent[0].tcp.timestamp.map(|ts| ts.1), Some(8000));
}

#[test]
fn app_completion_closes_without_waiting_for_fin() {
    let app = TestApp {
        request: REQUEST.to_vec(),
        end: Some(b"</html>"),
    };
    let mut h = Harness::new(config(), app, Server::new("198.18.0.7", 80));
    h.established();
    h.now += 5000;
    h.input(
        &h.server
            .segment(ACK, 0, REQ, b"HTTP/1.0 200 OK\r\n\r\n<html>"),
    );
    assert_eq!(h.engine.outstanding(), 1);
    h.now += 1000;
    h.input(&h.server.segment(ACK, 25, REQ, b"</html>"));
    assert_eq!(h.engine.outstanding(), 0);
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes.len(), 32);
    assert_eq!(outcome.t_first_byte_us, Some(5000));
    assert_eq!(outcome.t_total_us, 6000);
    let sent = h.flush();
    let rst = sent.last().unwrap();
    assert_eq!(rst.flags(), TcpFlags::RST | ACK);
    assert_eq!(rst.tcp.seq_number, h.server.client_seq(REQ));
}

/// The app's cursor lives with the connection's reply: each check gets back what the previous
/// one left (so an app reads each byte once), and a new connection starts from nothing.
#[test]
fn the_apps_cursor_is_kept_per_reply() {
    use super::peer::COMPLETENESS_CALLS;
    let app = TestApp {
        request: REQUEST.to_vec(),
        end: Some(b"</html>"),
    };
    let mut h = Harness::new(config(), app, Server::new("198.18.0.7", 80));
    h.established();
    for (off, part) in [
        (0, &b"HTTP/1.0 200 OK\r\n"[..]),
        (17, b"\r\n<html>"),
        (25, b"</html>"),
    ] {
        h.now += 1000;
        h.input(&h.server.segment(ACK, off, REQ, part));
    }
    assert_eq!(h.outcome().0.status, Status::Success);
    let calls = COMPLETENESS_CALLS.with(|c| c.borrow().clone());
    assert_eq!(calls, vec![(0, 17), (17, 25), (25, 32)]);
}

#[test]
fn window_is_bounded_by_max_bytes_and_max_bytes_completes() {
    let mut cfg = config();
    cfg.max_bytes = 3000;
    cfg.wscale = 0;
    cfg.rcv_window = 0xffff;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    let sent = h.established();
    assert_eq!(
        sent[0].tcp.window_len, 3000,
        "never more than max_bytes allows"
    );
    let data = reply(5000);
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1000]));
    h.input(&h.server.segment(ACK, 1000, REQ, &data[1000..2000]));
    let sent = h.flush();
    assert_eq!(
        sent.last().unwrap().tcp.window_len,
        1460,
        "1000 bytes left: one MSS, so the server sends a full segment at once"
    );
    // A segment crossing max_bytes: the rest is not kept.
    h.input(&h.server.segment(ACK, 2000, REQ, &data[2000..4000]));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes, &data[..3000]);
    assert_eq!(outcome.bytes, 3000);
    assert!(outcome.truncated, "the reply was cut at max_bytes");
}

#[test]
fn replies_that_end_by_themselves_are_not_truncated() {
    let mut cfg = config();
    cfg.max_bytes = 10;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    // Exactly max_bytes, with the FIN: the whole reply.
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 0, REQ, b"0123456789"));
    let (outcome, _) = h.outcome();
    assert_eq!((outcome.status, outcome.bytes), (Status::Success, 10));
    assert!(!outcome.truncated);
}

#[test]
fn scaled_window_is_rounded_up_near_max_bytes() {
    // Window scale 7: the window goes in units of 128 bytes; rounded down, the window's edge
    // would fall short of max_bytes, and near it shut (56 bytes left: 0 units).
    let mut cfg = config();
    cfg.max_bytes = 3000;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    let sent = h.established();
    assert_eq!(
        sent[0].tcp.window_len, 24,
        "3000 bytes: 23.4 units, rounded up"
    );
    let data = reply(3000);
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1472]));
    h.input(&h.server.segment(ACK, 1472, REQ, &data[1472..2944]));
    let sent = h.flush();
    assert_eq!(
        sent.last().unwrap().tcp.ack_number,
        Some(h.server.seq(2944))
    );
    assert_eq!(
        sent.last().unwrap().tcp.window_len,
        12,
        "56 bytes left: one MSS (1460 bytes, 11.4 units)"
    );
}

/// A reply longer than `max_bytes` over a scaled window, the server sending whatever our
/// window allows: it ends `success` at exactly `max_bytes`, at once (issue 19: it stalled
/// 56 bytes short, at the window's rounded-down edge, until the idle timeout).
#[test]
fn a_reply_longer_than_max_bytes_ends_at_max_bytes_at_once() {
    let mut cfg = config();
    cfg.max_bytes = 256 * 1024; // grab's default
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    let sent = h.established();
    let ws = 7; // what we offered
    let mut edge = sent.last().unwrap().tcp.window_len as u32 * (1 << ws);
    let data = reply(1 << 20);
    let mut next = 0u32;
    let start = h.now;
    for _ in 0..20_000 {
        // The server sends what our window allows, two segments a round (the ACKs come back
        // as the data arrives): the headers (100 bytes), then segments of 1448 bytes at most.
        for _ in 0..2 {
            if next >= edge {
                break;
            }
            let len = (edge - next).min(if next == 0 { 100 } else { 1448 });
            let bytes = &data[next as usize..(next + len) as usize];
            h.input(&h.server.segment(ACK, next, REQ, bytes));
            next += len;
        }
        h.tick(1_000);
        // Like Linux, the server's send window ends where the latest ACK says.
        for ack in h.flush() {
            if let Some(acked) = ack.tcp.ack_number {
                let acked = acked.wrapping_sub(h.server.seq(0));
                edge = acked + u32::from(ack.tcp.window_len) * (1 << ws);
            }
        }
        if h.engine.outstanding() == 0 {
            break;
        }
    }
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(outcome.bytes, 256 * 1024);
    assert_eq!(bytes, &data[..256 * 1024]);
    assert!(outcome.truncated);
    assert!(
        h.now - start < 1_000_000,
        "done in {} ms of simulated time",
        (h.now - start) / 1000
    );
}

#[test]
fn data_beyond_the_window_is_not_accepted() {
    let mut cfg = config();
    cfg.rcv_window = 4096;
    cfg.wscale = 0;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    h.established();
    let data = reply(10_000);
    h.input(&h.server.segment(ACK, 5000, REQ, &data[5000..6000]));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "an ACK answers an unacceptable segment");
    assert!(sent[0].sacks().is_empty(), "nothing was kept");
    assert_eq!(
        h.engine.buffers_in_use(),
        0,
        "no buffer for data never kept"
    );
}

#[test]
fn peer_fin_ahead_of_a_gap_is_kept_until_the_gap_fills() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 5, REQ, b"world"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "a duplicate ACK at once");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(0)));
    assert!(h.outcomes().is_empty());
    // The gap fills: the FIN kept counts now, without the peer sending it again.
    h.input(&h.server.segment(ACK, 0, REQ, b"hello"));
    let (outcome, bytes) = h.outcome();
    assert_eq!(bytes, b"helloworld");
    assert_eq!(
        (outcome.status, outcome.truncated),
        (Status::Success, false)
    );
    let rst = h.flush().pop().unwrap();
    assert_eq!(rst.flags(), TcpFlags::RST | ACK);
    assert_eq!(
        rst.tcp.ack_number,
        Some(h.server.seq(11)),
        "the FIN is ACKed"
    );

    // A FIN alone ahead of the gap (a tail-loss probe), then the lost data without it.
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 5, REQ, b""));
    assert_eq!(h.flush().len(), 1);
    h.input(&h.server.segment(ACK, 0, REQ, b"hello"));
    let (outcome, bytes) = h.outcome();
    assert_eq!(
        (outcome.status, bytes.as_slice()),
        (Status::Success, &b"hello"[..])
    );
    assert_eq!(
        h.flush().pop().unwrap().tcp.ack_number,
        Some(h.server.seq(6))
    );

    // A FIN that data later passes was no FIN: the reply goes on.
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 3, REQ, b""));
    h.input(&h.server.segment(ACK, 0, REQ, b"hello"));
    assert_eq!(h.engine.outstanding(), 1);
    assert!(h.outcomes().is_empty());
}

#[test]
fn paws_allows_one_tick_of_slack() {
    let mut h = Harness::v4();
    h.established();
    h.server.tsval = 9000;
    h.input(&h.server.segment(ACK, 0, REQ, b"a"));
    // One tick back (a peer whose CPUs' clocks differ by a tick): taken, as Linux does.
    h.server.tsval = 8999;
    h.input(&h.server.segment(ACK, 1, REQ, b"b"));
    // Two ticks back: an old duplicate.
    h.server.tsval = 8998;
    h.input(&h.server.segment(ACK, 2, REQ, b"c"));
    h.engine.abort_all(h.now);
    let (_, bytes) = h.outcome();
    assert_eq!(bytes, b"ab");
}

#[test]
fn paws_drops_old_timestamps() {
    let mut h = Harness::v4();
    h.established();
    h.server.tsval = 9000;
    h.input(&h.server.segment(ACK, 0, REQ, b"new"));
    h.server.tsval = 8000;
    h.input(&h.server.segment(ACK, 3, REQ, b"old"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "ACK for the old segment");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(3)));
    assert_eq!(
        sent[0].tcp.timestamp.unwrap().1,
        9000,
        "TSecr is the newest TSval"
    );
}

#[test]
fn no_buffer_until_data_and_buffers_return_to_the_pool() {
    let mut h = Harness::v4();
    h.established();
    assert_eq!(h.engine.buffers_in_use(), 0);
    h.input(&h.server.segment(ACK, 0, REQ, b"data"));
    assert_eq!(h.engine.buffers_in_use(), 1);
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 4, REQ, b""));
    assert_eq!(h.engine.buffers_in_use(), 1, "held until drained");
    h.outcome();
    assert_eq!(h.engine.buffers_in_use(), 0);
}
