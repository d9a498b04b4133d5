//! The handshake: options offered and honoured, the request in or after the ACK, cookies.

use std::net::IpAddr;

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{Engine, Rx, Status};

#[test]
fn syn_offers_every_option_and_creates_no_state() {
    let mut h = Harness::v4();
    let syn = h.syn();
    assert_eq!(syn.src, IpAddr::V4(OUR_IP));
    assert_eq!(syn.ttl, 64);
    assert_eq!(syn.tcp.max_seg_size, Some(1460));
    assert_eq!(syn.tcp.window_scale, Some(7));
    assert!(syn.tcp.sack_permitted);
    assert_eq!(syn.tcp.timestamp, Some((h.now as u32, 0)));
    assert_eq!(syn.tcp.window_len, 0xffff);
    assert!(h.engine.config().ports.contains(syn.tcp.src_port));
    // ISN and port are the cookie's.
    let token = h
        .engine
        .config()
        .validator
        .token(IpAddr::V4(OUR_IP), h.server.addr, h.server.port);
    assert_eq!(syn.tcp.seq_number, token as u32);
    assert_eq!(syn.tcp.src_port, h.engine.config().ports.port_for(token));
    assert_eq!(h.engine.outstanding(), 0);
    assert_eq!(h.engine.tx_pending(), 0);
    assert_eq!(h.engine.stats().syn_sent, 1);
}

#[test]
fn ack_then_request_with_timestamps_and_scaling() {
    let mut h = Harness::v4();
    let rx = h.handshake(12_345);
    assert_eq!(
        rx,
        Rx::Answered {
            addr: h.server.addr,
            port: 80
        }
    );
    assert_eq!(h.engine.outstanding(), 1);
    let sent = h.flush();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let (ack, req) = (&sent[0], &sent[1]);
    assert_eq!(ack.flags(), TcpFlags::ACK);
    assert!(ack.payload.is_empty());
    assert_eq!(ack.tcp.seq_number, h.server.client_seq(0));
    assert_eq!(ack.tcp.ack_number, Some(h.server.seq(0)));
    // Our window is scaled by the 7 we offered: 64 KiB >> 7.
    assert_eq!(ack.tcp.window_len, 512);
    assert_eq!(ack.tcp.timestamp, Some((h.now as u32, h.server.tsval)));
    assert_eq!(req.flags(), TcpFlags::ACK | TcpFlags::PSH);
    assert_eq!(req.payload, REQUEST);
    assert_eq!(req.tcp.seq_number, h.server.client_seq(0));
    assert_eq!(req.tcp.ack_number, Some(h.server.seq(0)));
    // The reply, then the FIN: the RTT came from the echoed timestamp.
    h.now += 1000;
    h.input(&h.server.segment(
        TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN,
        0,
        REQUEST.len() as u32,
        b"hello",
    ));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.rtt_us, Some(12_345));
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes, b"hello");
}

#[test]
fn request_in_the_handshake_ack() {
    let mut cfg = config();
    cfg.request_in_ack = true;
    let mut h = Harness::new(cfg, TestApp::http(), Server::new("198.18.0.7", 80));
    let sent = h.established();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].flags(), TcpFlags::ACK | TcpFlags::PSH);
    assert_eq!(sent[0].payload, REQUEST);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(0));
    assert_eq!(h.engine.stats().acks_sent, 0);
}

#[test]
fn peer_without_options() {
    let mut server = Server::new("198.18.0.9", 8080);
    server.mss = None;
    server.ws = None;
    server.sack = false;
    server.timestamps = false;
    // A 1000-byte request must go as two segments of the default IPv4 MSS, 536.
    let app = TestApp {
        request: vec![b'x'; 1000],
        end: None,
    };
    let mut h = Harness::new(config(), app, server);
    let sent = h.established();
    assert_eq!(sent.len(), 3, "{sent:?}");
    for s in &sent {
        assert_eq!(
            s.tcp.timestamp, None,
            "no timestamps unless the peer agreed"
        );
        assert_eq!(s.tcp.window_len, 0xffff, "unscaled window, capped at 65535");
    }
    assert_eq!(sent[1].payload.len(), 536);
    assert_eq!(sent[1].flags(), TcpFlags::ACK);
    assert_eq!(sent[2].payload.len(), 464);
    assert_eq!(sent[2].flags(), TcpFlags::ACK | TcpFlags::PSH);
    assert_eq!(sent[2].tcp.seq_number, h.server.client_seq(536));
    // No timestamps: the RTT is unknown.
    h.input(
        &h.server
            .segment(TcpFlags::RST | TcpFlags::ACK, 0, 1000, b""),
    );
    let (outcome, _) = h.outcome();
    assert_eq!(outcome.status, Status::Reset);
    assert_eq!(outcome.rtt_us, None);
}

#[test]
fn request_split_by_the_peers_mss_minus_timestamps() {
    let mut server = Server::new("198.18.0.9", 8080);
    server.mss = Some(100);
    let app = TestApp {
        request: (0..=255u8).collect(),
        end: None,
    };
    let mut h = Harness::new(config(), app, server);
    let sent = h.established();
    let sizes: Vec<usize> = sent.iter().map(|s| s.payload.len()).collect();
    assert_eq!(sizes, [0, 88, 88, 80]);
    let joined: Vec<u8> = sent.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(joined, (0..=255u8).collect::<Vec<_>>());
}

#[test]
fn banner_app_sends_no_request() {
    let app = TestApp {
        request: Vec::new(),
        end: Some(b"\r\n"),
    };
    let mut h = Harness::new(config(), app, Server::new("198.18.0.9", 21));
    let sent = h.established();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), TcpFlags::ACK);
    h.input(&h.server.segment(TcpFlags::ACK, 0, 0, b"220 lab ftp\r\n"));
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes, b"220 lab ftp\r\n");
    let rst = h.flush();
    assert_eq!(rst.last().unwrap().flags(), TcpFlags::RST | TcpFlags::ACK);
}

#[test]
fn invalid_cookies_create_nothing() {
    let mut h = Harness::v4();
    h.syn();
    // The ACK is not ISN + 1.
    let mut bad = h.server.clone();
    bad.client_iss = bad.client_iss.wrapping_add(1);
    assert_eq!(h.input(&bad.syn_ack()), Rx::Invalid);
    // Another source port of ours than the cookie's.
    let mut bad = h.server.clone();
    bad.client_port = if bad.client_port == 61000 {
        61001
    } else {
        61000
    };
    assert_eq!(h.input(&bad.syn_ack()), Rx::Invalid);
    // Another target port.
    let mut bad = h.server.clone();
    bad.port = 81;
    assert_eq!(h.input(&bad.syn_ack()), Rx::Invalid);
    // A port outside our range: not ours at all.
    let mut other = h.server.clone();
    other.client_port = 40000;
    assert_eq!(h.input(&other.syn_ack()), Rx::NotOurs);
    // An RST that does not answer our SYN.
    let rst = bad.raw(TcpFlags::RST | TcpFlags::ACK, 0, Some(12345), b"");
    assert_eq!(h.input(&rst), Rx::Invalid);
    assert_eq!(h.engine.outstanding(), 0);
    assert_eq!(h.engine.stats().invalid, 4);
    assert_eq!(h.flush().len(), 0);
    assert!(h.outcomes().is_empty());
    // The genuine SYN-ACK still works.
    assert!(matches!(h.input(&h.server.syn_ack()), Rx::Answered { .. }));
}

#[test]
fn rst_to_the_syn_is_refused() {
    let mut h = Harness::v4();
    h.syn();
    h.now += 500;
    let rst = h.server.raw(
        TcpFlags::RST | TcpFlags::ACK,
        0,
        Some(h.server.client_seq(0)),
        b"",
    );
    assert_eq!(
        h.input(&rst),
        Rx::Answered {
            addr: h.server.addr,
            port: 80
        }
    );
    assert_eq!(h.engine.outstanding(), 0, "no table entry for a refusal");
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.status, Status::Refused);
    assert_eq!(outcome.sport, h.server.client_port);
    assert!(bytes.is_empty());
    assert_eq!(h.engine.stats().refused, 1);
    // A duplicate, when the run loop says the target answered already, is no second row.
    let rx = h.engine.on_frame_with(&rst, h.now, |addr, port| {
        addr == h.server.addr && port == 80
    });
    assert_eq!(rx, Rx::Invalid);
    assert!(h.outcomes().is_empty());
}

#[test]
fn duplicate_synack_after_the_end_gets_an_rst_with_the_answered_filter() {
    let mut h = Harness::v4();
    h.established();
    h.input(
        &h.server
            .segment(TcpFlags::ACK | TcpFlags::FIN, 0, REQUEST.len() as u32, b"x"),
    );
    h.outcome();
    h.flush();
    let synack = h.server.syn_ack();
    let rx = h.engine.on_frame_with(&synack, h.now, |_, _| true);
    assert_eq!(rx, Rx::Invalid);
    assert_eq!(h.engine.outstanding(), 0);
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].flags(), TcpFlags::RST);
    assert_eq!(sent[0].tcp.seq_number, h.server.client_seq(0));
}

#[test]
fn retransmitted_synack_repeats_ack_and_request() {
    let mut h = Harness::v4();
    h.established();
    h.now += 1000;
    let sent = {
        h.input(&h.server.syn_ack());
        h.flush()
    };
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0].flags(), TcpFlags::ACK);
    assert_eq!(sent[1].payload, REQUEST);
    assert_eq!(h.engine.outstanding(), 1);
    assert_eq!(h.engine.stats().retransmits_sent, 1);
    assert_eq!(h.engine.stats().established, 1);
}

#[test]
fn a_synack_to_a_syn_retry_gets_a_bare_ack() {
    // A 1 s path: our SYN's retry leaves just before the first SYN-ACK arrives, and the
    // server answers both. The second SYN-ACK echoes the retry's TSval: it says nothing of our
    // handshake ACK, so the request is not sent again (it was, once per retry, at 1 s RTT).
    let mut h = Harness::v4();
    let first = h.syn().tcp.timestamp.unwrap().0;
    h.now += 1_000_000;
    let retry = h.syn().tcp.timestamp.unwrap().0;
    assert_ne!(first, retry);
    h.now += 2_000;
    h.server.client_tsval = first;
    assert!(matches!(h.input(&h.server.syn_ack()), Rx::Answered { .. }));
    // The echo is the first SYN's: older than the retry's wait, so the first SYN's answer.
    assert_eq!(h.engine.answer_rtt_us(), Some(1_002_000));
    let sent = h.flush();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1].payload, REQUEST);
    h.now += 1_000_000;
    h.server.client_tsval = retry;
    h.input(&h.server.syn_ack());
    let sent = h.flush();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].flags(), TcpFlags::ACK);
    assert!(sent[0].payload.is_empty());
    assert_eq!(h.engine.stats().retransmits_sent, 0);
    assert_eq!(h.engine.stats().synacks_to_retries, 1);
    // The server's own retransmission of the first SYN-ACK still means our ACK was lost.
    h.server.client_tsval = first;
    h.input(&h.server.syn_ack());
    let sent = h.flush();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1].payload, REQUEST);
    assert_eq!(h.engine.stats().retransmits_sent, 1);
}

#[test]
fn ipv6_connection() {
    let mut h = Harness::new(config(), TestApp::http(), Server::new("2001:2::1:7", 443));
    let syn = h.syn();
    assert_eq!(syn.src, IpAddr::V6(OUR_IP6));
    assert_eq!(syn.tcp.max_seg_size, Some(1440));
    h.now += 100;
    assert!(matches!(h.input(&h.server.syn_ack()), Rx::Answered { .. }));
    let sent = h.flush();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].payload, REQUEST);
    assert!(sent.iter().all(|s| s.dst == h.server.addr));
    h.input(
        &h.server
            .segment(TcpFlags::ACK, 0, REQUEST.len() as u32, b"v6 reply"),
    );
    h.input(
        &h.server
            .segment(TcpFlags::ACK | TcpFlags::FIN, 8, REQUEST.len() as u32, b""),
    );
    let (outcome, bytes) = h.outcome();
    assert_eq!(outcome.addr, h.server.addr);
    assert_eq!(outcome.status, Status::Success);
    assert_eq!(bytes, b"v6 reply");
    let rst = h.flush().pop().unwrap();
    assert_eq!(rst.flags(), TcpFlags::RST | TcpFlags::ACK);
    assert_eq!(
        rst.tcp.seq_number,
        h.server.client_seq(REQUEST.len() as u32)
    );
    assert_eq!(rst.tcp.ack_number, Some(h.server.seq(9)));
}

#[test]
fn missing_family_and_mapped_targets() {
    let mut cfg = config();
    cfg.src_ip6 = None;
    let mut engine = Engine::new(cfg, TestApp::http()).unwrap();
    let mut buf = [0u8; 1514];
    assert_eq!(
        engine.write_syn(&mut buf, "2001:2::1".parse().unwrap(), 80, 0),
        0
    );
    assert_eq!(
        engine.write_syn(&mut buf, "::ffff:198.18.0.1".parse().unwrap(), 80, 0),
        0
    );
    assert!(engine.write_syn(&mut buf, "198.18.0.1".parse().unwrap(), 80, 0) > 0);
}

#[test]
fn configuration_errors_are_one_line() {
    let long = TestApp {
        request: vec![0; 1401],
        end: None,
    };
    let err = Engine::new(config(), long).err().unwrap();
    assert!(err.contains("1401") && err.contains("1400"), "{err}");
    let mut cfg = config();
    cfg.max_outstanding = 0;
    let mut cfgs = vec![cfg];
    let mut cfg = config();
    cfg.src_ip = None;
    cfg.src_ip6 = None;
    cfgs.push(cfg);
    let mut cfg = config();
    cfg.wscale = 15;
    cfgs.push(cfg);
    let mut cfg = config();
    cfg.rcv_window = 0x10000; // needs a window scale
    cfg.wscale = 0;
    cfgs.push(cfg);
    let mut cfg = config();
    cfg.total_timeout_us = 3600 * 1_000_000;
    cfgs.push(cfg);
    let mut cfg = config();
    cfg.max_retransmits = 16;
    cfgs.push(cfg);
    for cfg in cfgs {
        let err = Engine::new(cfg, TestApp::http()).err().expect("refused");
        assert!(!err.contains('\n') && err.contains("give"), "{err}");
    }
    let mut cfg = config();
    cfg.max_outstanding = 1;
    assert!(Engine::new(cfg, TestApp::http()).is_ok());
}

#[test]
fn timestamps_without_window_scale() {
    let mut server = Server::new("198.18.0.9", 80);
    server.ws = None;
    let mut h = Harness::new(config(), TestApp::http(), server);
    let sent = h.established();
    for s in &sent {
        assert_eq!(
            s.tcp.window_len, 0xffff,
            "no scaling: 64 KiB capped at 65535"
        );
        assert_eq!(s.tcp.timestamp, Some((h.now as u32, h.server.tsval)));
    }
    // The peer's window is taken as is: 100 bytes let the 29-byte request go.
    h.server.window = 100;
    h.input(&h.server.segment(TcpFlags::ACK, 0, 0, b""));
    assert!(h.flush().is_empty());
}

#[test]
fn window_scale_without_timestamps() {
    let mut server = Server::new("198.18.0.9", 80);
    server.timestamps = false;
    server.ws = Some(2);
    server.window = 10; // the SYN-ACK's window is not scaled: 10 bytes
    let mut h = Harness::new(config(), TestApp::http(), server);
    let sent = h.established();
    assert_eq!(sent[0].tcp.window_len, 512, "ours scaled by 7");
    assert_eq!(sent[0].tcp.timestamp, None);
    assert_eq!(sent[1].payload, &REQUEST[..10]);
    // Later windows are scaled by the peer's 2: 5 << 2 = 20 more bytes.
    h.server.window = 5;
    h.input(&h.server.segment(TcpFlags::ACK, 0, 10, b""));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload, &REQUEST[10..29]);
}

#[test]
fn a_retransmitted_syn_ack_is_acked_with_its_own_timestamp() {
    // Our handshake ACK was lost: the server sends its SYN-ACK again a second later. The ACK
    // that answers it must echo the new TSval: the server takes its RTT from our echo, and an
    // echo of the first SYN-ACK would make it think the path takes a second.
    let mut cfg = config();
    cfg.request_in_ack = false;
    let banner = TestApp {
        request: Vec::new(),
        end: Some(b"\n"),
    };
    let mut h = Harness::new(cfg, banner, Server::new("198.18.0.7", 22));
    let syn = h.syn();
    h.server.read_syn(&syn);
    h.input(&h.server.syn_ack());
    h.flush();
    h.tick(1_000_000);
    h.server.tsval += 1_000;
    h.input(&h.server.syn_ack());
    let acks = h.flush();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].flags(), TcpFlags::ACK);
    assert_eq!(acks[0].tcp.timestamp.map(|ts| ts.1), Some(h.server.tsval));
}

/// Ticks 1 ms at a time for `ms` ms: when (ms from now) segments with data went out.
fn data_sent_at(h: &mut Harness, ms: u64) -> Vec<u64> {
    let start = h.now;
    let mut at = Vec::new();
    for _ in 0..ms {
        h.tick(1000);
        if h.flush().iter().any(|s| !s.payload.is_empty()) {
            at.push((h.now - start) / 1000);
        }
    }
    at
}

#[test]
fn a_bogus_echo_in_the_synack_gives_no_rtt() {
    // An echo 100 s old (our SYN left 10 ms ago): as RTT it would make the RTO 60 s. It lies
    // outside the SYN retries' span, so it is not ours: the RTT is unknown, the RTO 1 s. So
    // is an echo from the future, and one just past the span (7 s by default).
    for age_us in [100_000_000i64, -5_000_000, 7_000_001] {
        let mut h = Harness::v4();
        h.syn();
        h.now += 10_000;
        h.server.client_tsval = (h.now as i64 - age_us) as u32;
        assert!(matches!(h.input(&h.server.syn_ack()), Rx::Answered { .. }));
        h.flush();
        assert_eq!(data_sent_at(&mut h, 1500), [1000], "echo {age_us} µs old");
        h.engine.abort_all(h.now);
        assert_eq!(h.outcome().0.rtt_us, None);
    }
    // An echo of a SYN sent within the span is an RTT (the SYN-ACK answered a retried SYN).
    let mut h = Harness::v4();
    h.syn();
    h.now += 3_000_000;
    assert!(matches!(h.input(&h.server.syn_ack()), Rx::Answered { .. }));
    h.engine.abort_all(h.now);
    assert_eq!(h.outcome().0.rtt_us, Some(3_000_000));
}

#[test]
fn an_mss_of_zero_is_no_mss() {
    let mut server = Server::new("198.18.0.9", 80);
    server.mss = Some(0);
    let app = TestApp {
        request: vec![b'x'; 1000],
        end: None,
    };
    let mut h = Harness::new(config(), app, server);
    let sent = h.established();
    let sizes: Vec<usize> = sent.iter().map(|s| s.payload.len()).collect();
    assert_eq!(
        sizes,
        [0, 524, 476],
        "536 less 12 bytes of timestamps, as without the option"
    );
}

#[test]
fn an_option_of_the_wrong_length_is_skipped() {
    let mut h = Harness::v4();
    h.established();
    // The server's segment carries NOP, NOP, timestamps; the NOPs become an MSS option of
    // length 2 (an MSS option is 4 bytes). Linux skips it and reads the rest.
    let mut frame = h
        .server
        .segment(TcpFlags::ACK, 0, REQUEST.len() as u32, b"data");
    let tcp_at = 14 + 20;
    assert_eq!(frame[tcp_at + 20..tcp_at + 23], [1, 1, 8]);
    frame[tcp_at + 20..tcp_at + 22].copy_from_slice(&[2, 2]);
    let ips = sonde_wire::IpPair::V4 {
        src: "198.18.0.7".parse().unwrap(),
        dst: OUR_IP,
    };
    sonde_wire::tcp::Packet::new_unchecked(&mut frame[tcp_at..]).fill_checksum(&ips);
    assert_eq!(h.input(&frame), Rx::Segment);
    assert_eq!(h.engine.stats().invalid, 0);
    h.engine.abort_all(h.now);
    assert_eq!(h.outcome().1, b"data");
}

/// Grab's threads: an engine on a port lane sends from its lane's ports only, a reply (and an
/// ICMP error quoting its SYN) names that port to `our_port_of`, and an engine of another lane
/// takes no connection from it.
#[test]
fn an_engine_on_a_lane_uses_its_ports_and_replies_name_them() {
    use sonde_craft::cookie::PortLane;
    for v6 in [false, true] {
        let target = if v6 { "2001:2::7" } else { "198.18.0.7" };
        for index in 0..3u16 {
            let lane = PortLane { index, count: 3 };
            let mut cfg = config();
            cfg.port_lane = lane;
            let mut h = Harness::new(cfg.clone(), TestApp::http(), Server::new(target, 80));
            let syn = h.syn();
            let port = syn.tcp.src_port;
            assert_eq!(cfg.ports.lane_of(port, 3), index, "{port}");
            let synack = h.server.syn_ack();
            assert_eq!(crate::our_port_of(&synack), Some(port));
            let (t, c) = if v6 { (1, 3) } else { (3, 1) };
            assert_eq!(crate::our_port_of(&icmp_about(&syn, t, c, 0)), Some(port));
            // The same SYN-ACK at an engine of the next lane: no connection of its own.
            cfg.port_lane = PortLane {
                index: (index + 1) % 3,
                count: 3,
            };
            let mut other = Harness::new(cfg, TestApp::http(), Server::new(target, 80));
            assert_eq!(other.input(&synack), Rx::Invalid);
            assert_eq!(other.engine.outstanding(), 0);
            assert!(matches!(h.input(&synack), Rx::Answered { .. }));
        }
    }
    assert_eq!(crate::our_port_of(&[0u8; 10]), None);
}
