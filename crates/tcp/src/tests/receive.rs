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

#[test]
fn delayed_ack_every_second_segment_or_after_the_delay() {
    let mut h = Harness::v4();
    h.established();
    let data = reply(5000);
    h.input(&h.server.segment(ACK, 0, REQ, &data[..1448]));
    assert_eq!(h.flush().len(), 0, "the first segment's ACK is delayed");
    h.input(&h.server.segment(ACK, 1448, REQ, &data[1448..2896]));
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "the second is ACKed at once");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(2896)));
    h.input(&h.server.segment(ACK, 2896, REQ, &data[2896..4000]));
    h.tick(39_000);
    assert_eq!(h.flush().len(), 0);
    h.tick(1_000);
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "40 ms later");
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(4000)));
    assert_eq!(sent[0].flags(), ACK);
    // The FIN is ACKed at once (here by the RST that closes).
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 4000, REQ, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(4001)));
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
    assert_eq!(sent[0].tcp.window_len, 1000);
    // A segment crossing max_bytes: the rest is not kept.
    h.input(&h.server.segment(ACK, 2000, REQ, &data[2000..4000]));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes, &data[..3000]);
    assert_eq!(outcome.bytes, 3000);
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
fn peer_fin_ahead_of_a_gap_waits_for_the_data() {
    let mut h = Harness::v4();
    h.established();
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 5, REQ, b"world"));
    assert_eq!(h.engine.outstanding(), 1);
    assert!(h.outcomes().is_empty());
    h.input(&h.server.segment(ACK, 0, REQ, b"hello"));
    assert_eq!(
        h.engine.outstanding(),
        1,
        "the FIN was not kept; the peer resends it"
    );
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 10, REQ, b""));
    let (outcome, bytes) = h.outcome();
    assert_eq!(bytes, b"helloworld");
    assert_eq!(outcome.status, Status::Success);
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
