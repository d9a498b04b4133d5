//! ICMP errors about our segments: a destination unreachable ends a target at once, a
//! too-big lowers a connection's MSS and resends, and a quote that is not of a segment we sent
//! changes nothing.

use std::net::IpAddr;

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{Icmp, Rx, Status};

const ACK: TcpFlags = TcpFlags::ACK;
/// ICMP destination unreachable, and its codes used here.
const UNREACH: u8 = 3;
const HOST_UNREACH: u8 = 1;
const FRAG_NEEDED: u8 = 4;
/// ICMPv6 destination unreachable (address unreachable) and Packet Too Big.
const UNREACH6: u8 = 1;
const ADDR_UNREACH6: u8 = 3;
const TOO_BIG6: u8 = 2;

fn target(v6: bool) -> &'static str {
    if v6 {
        "2001:2::7"
    } else {
        "198.18.0.7"
    }
}

fn harness(v6: bool, app: TestApp) -> Harness {
    Harness::new(config(), app, Server::new(target(v6), 80))
}

/// The family's host/address unreachable: (type, code).
fn unreachable(v6: bool) -> (u8, u8) {
    if v6 {
        (UNREACH6, ADDR_UNREACH6)
    } else {
        (UNREACH, HOST_UNREACH)
    }
}

/// A too-big about `sent` announcing `mtu`: fragmentation needed (the MTU in the low 16 bits
/// of the rest-of-header word) or Packet Too Big.
fn too_big(sent: &Sent, mtu: u32) -> Vec<u8> {
    if sent.src.is_ipv6() {
        icmp_about(sent, TOO_BIG6, 0, mtu)
    } else {
        icmp_about(sent, UNREACH, FRAG_NEEDED, mtu & 0xffff)
    }
}

/// The length of the IP packet carrying `sent`: what a link's MTU bounds.
fn ip_len(sent: &Sent) -> usize {
    let ip = if sent.src.is_ipv6() { 40 } else { 20 };
    ip + sent.header_len + sent.payload.len()
}

/// A request of `len` bytes (its end marked, to check the bytes resent).
fn big_request(len: usize) -> TestApp {
    let mut request: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    request[len - 1] = b'!';
    TestApp { request, end: None }
}

/// Data segments of `sent`, as (offset into the request, payload).
fn data(h: &Harness, sent: &[Sent]) -> Vec<(u32, Vec<u8>)> {
    sent.iter()
        .filter(|s| !s.payload.is_empty())
        .map(|s| {
            let off = s.tcp.seq_number.wrapping_sub(h.server.client_seq(0));
            (off, s.payload.clone())
        })
        .collect()
}

#[test]
fn unreachable_ends_the_target_at_once_with_its_type_and_code() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let syn = h.syn();
        let (kind, code) = unreachable(v6);
        let error = icmp_about(&syn, kind, code, 0);
        let addr: IpAddr = target(v6).parse().unwrap();
        assert_eq!(h.input(&error), Rx::Answered { addr, port: 80 });
        let (outcome, bytes) = h.outcome();
        assert_eq!(outcome.status, Status::Unreachable);
        assert_eq!(outcome.status.name(), "unreachable");
        assert_eq!(
            outcome.icmp,
            Some(Icmp {
                icmp_type: kind,
                icmp_code: code
            })
        );
        assert_eq!((outcome.addr, outcome.port), (addr, 80));
        assert_eq!(outcome.sport, syn.tcp.src_port);
        assert!(bytes.is_empty());
        let stats = h.engine.stats();
        assert_eq!(
            (stats.unreachable, stats.completed, stats.invalid),
            (1, 1, 0)
        );
        assert_eq!(h.engine.tx_pending(), 0, "nothing is sent back");
        assert_eq!(h.engine.outstanding(), 0, "and nothing is held");

        // The same error again (the retried SYN's, say), with the run loop's bitmap saying
        // the target has its row: no second row.
        let now = h.now;
        let again = h
            .engine
            .on_frame_with(&error, now, |a, p| (a, p) == (addr, 80));
        assert_eq!(again, Rx::Icmp);
        assert!(h.outcomes().is_empty());
        assert_eq!(h.engine.stats().icmp_ignored, 1);
        assert_eq!(h.engine.stats().unreachable, 1);
    }
}

#[test]
fn every_code_but_fragmentation_needed_is_unreachable() {
    // IPv4: net, host, protocol, port, … administratively prohibited (13), up to 15.
    for code in (0..=15).filter(|&c| c != FRAG_NEEDED) {
        let mut h = harness(false, TestApp::http());
        let syn = h.syn();
        assert!(matches!(
            h.input(&icmp_about(&syn, UNREACH, code, 0)),
            Rx::Answered { .. }
        ));
        assert_eq!(h.outcome().0.icmp.unwrap().icmp_code, code);
    }
    // No RFC defines codes above 15: Linux ignores them, and so does the engine.
    let mut h = harness(false, TestApp::http());
    let syn = h.syn();
    assert_eq!(h.input(&icmp_about(&syn, UNREACH, 16, 0)), Rx::NotOurs);
    // ICMPv6: every code of destination unreachable (no route, prohibited, address, port, …).
    for code in 0..=8 {
        let mut h = harness(true, TestApp::http());
        let syn = h.syn();
        assert!(matches!(
            h.input(&icmp_about(&syn, UNREACH6, code, 0)),
            Rx::Answered { .. }
        ));
        assert_eq!(h.outcome().0.status, Status::Unreachable);
    }
}

#[test]
fn other_icmp_errors_are_not_read() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let syn = h.syn();
        // Time exceeded and parameter problem (IPv4 11 and 12, ICMPv6 3 and 4), source quench
        // (IPv4 4) and an echo reply.
        let kinds: &[u8] = if v6 { &[3, 4, 129] } else { &[11, 12, 4, 0] };
        for &kind in kinds {
            assert_eq!(
                h.input(&icmp_about(&syn, kind, 0, 0)),
                Rx::NotOurs,
                "{kind}"
            );
        }
        assert!(h.outcomes().is_empty());
        assert_eq!(h.engine.stats().invalid, 0);
    }
}

#[test]
fn a_too_big_about_a_syn_means_nothing() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let syn = h.syn();
        assert_eq!(h.input(&too_big(&syn, 1280)), Rx::Icmp);
        assert!(h.outcomes().is_empty());
        assert_eq!(h.engine.stats().icmp_ignored, 1);
        assert_eq!(h.engine.stats().unreachable, 0);
        // The SYN-ACK still opens the connection, with the peer's MSS.
        h.now += 1000;
        let synack = h.server.syn_ack();
        assert!(matches!(h.input(&synack), Rx::Answered { .. }));
    }
}

#[test]
fn quotes_not_of_a_segment_we_sent_are_invalid_or_not_ours() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let syn = h.syn();
        let (kind, code) = unreachable(v6);
        let from = router(v6);
        let ours = syn.src;
        let with = |edit: &dyn Fn(&mut Sent)| {
            let mut quoted = syn.clone();
            edit(&mut quoted);
            icmp_frame(from, ours, kind, code, 0, &quote(&quoted, 20))
        };
        // Not our ISN, not the cookie's port (but one of our range), another target (whose
        // cookie gives another port): invalid, counted.
        let invalid = [
            with(&|s| s.tcp.seq_number = s.tcp.seq_number.wrapping_add(1 << 20)),
            with(&|s| s.tcp.seq_number = s.tcp.seq_number.wrapping_sub(1)),
            with(&|s| {
                s.tcp.src_port = if s.tcp.src_port == 61000 {
                    61001
                } else {
                    61000
                }
            }),
            with(&|s| s.tcp.dst_port = 8080),
            with(&|s| {
                s.dst = if v6 {
                    "2001:2::8".parse().unwrap()
                } else {
                    "198.18.0.8".parse().unwrap()
                }
            }),
        ];
        for (i, frame) in invalid.iter().enumerate() {
            assert_eq!(h.input(frame), Rx::Invalid, "quote {i}");
        }
        assert_eq!(h.engine.stats().invalid, invalid.len() as u64);
        // A quote of someone else's segment: from a port outside our range, or from another
        // address of the host. Not ours, and not counted.
        let not_ours = [
            with(&|s| s.tcp.src_port = 40000),
            with(&|s| {
                s.src = if v6 {
                    "2001:2:0:ffff::2".parse().unwrap()
                } else {
                    "198.19.255.2".parse().unwrap()
                }
            }),
        ];
        for frame in &not_ours {
            assert_eq!(h.input(frame), Rx::NotOurs);
        }
        assert_eq!(h.engine.stats().invalid, invalid.len() as u64);
        assert!(h.outcomes().is_empty(), "no row from a bad quote");
    }
}

#[test]
fn short_or_truncated_icmp_never_panics_and_takes_only_a_whole_quote() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let syn = h.syn();
        let (kind, code) = unreachable(v6);
        let whole = quote(&syn, 8);
        let ip_header = if v6 { 40 } else { 20 };
        // Quotes cut anywhere: without the ports they are no one's; with the ports but no
        // sequence number, ours but invalid.
        for len in 0..whole.len() {
            let frame = icmp_frame(router(v6), syn.src, kind, code, 0, &whole[..len]);
            let want = if len < ip_header + 4 {
                Rx::NotOurs
            } else {
                Rx::Invalid
            };
            assert_eq!(h.input(&frame), want, "quote of {len} bytes");
        }
        // The frame itself cut anywhere (IP lengths then exceed it): never ours.
        let frame = icmp_frame(router(v6), syn.src, kind, code, 0, &whole);
        for len in 0..frame.len() {
            assert_eq!(h.input(&frame[..len]), Rx::NotOurs, "frame of {len} bytes");
        }
        assert!(matches!(h.input(&frame), Rx::Answered { .. }));
    }
}

#[test]
fn icmp_checksums_are_verified_when_asked() {
    for v6 in [false, true] {
        let mut cfg = config();
        cfg.verify_checksums = true;
        let mut h = Harness::new(cfg, TestApp::http(), Server::new(target(v6), 80));
        let syn = h.syn();
        let (kind, code) = unreachable(v6);
        let mut frame = icmp_about(&syn, kind, code, 0);
        let last = frame.len() - 1;
        frame[last] ^= 0x40; // in the quote: only the ICMP checksum covers it
        assert_eq!(h.input(&frame), Rx::Invalid);
        if !v6 {
            let mut frame = icmp_about(&syn, kind, code, 0);
            frame[14 + 8] ^= 1; // the TTL: only the IPv4 header checksum covers it
            assert_eq!(h.input(&frame), Rx::Invalid);
        }
        assert!(h.outcomes().is_empty());
        assert!(matches!(
            h.input(&icmp_about(&syn, kind, code, 0)),
            Rx::Answered { .. }
        ));
    }
}

#[test]
fn unreachable_on_an_established_connection_is_a_soft_error() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let sent = h.established();
        let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap();
        let (kind, code) = unreachable(v6);
        assert_eq!(h.input(&icmp_about(request, kind, code, 0)), Rx::Icmp);
        assert_eq!(h.engine.stats().icmp_soft_errors, 1);
        assert!(h.outcomes().is_empty(), "the connection goes on");
        assert_eq!(h.engine.outstanding(), 1);
        // The reply still comes and completes it.
        h.input(
            &h.server
                .segment(ACK | TcpFlags::FIN, 0, REQUEST.len() as u32, b"ok"),
        );
        assert_eq!(h.outcome().0.status, Status::Success);
    }
}

#[test]
fn a_quote_must_lie_between_snd_una_and_snd_nxt() {
    for v6 in [false, true] {
        let mut h = harness(v6, big_request(1000));
        let sent = h.established();
        let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap();
        let (kind, code) = unreachable(v6);
        let server = h.server.clone();
        let about = |seq_off: u32| {
            let mut quoted = request.clone();
            quoted.tcp.seq_number = server.client_seq(seq_off);
            icmp_about(&quoted, kind, code, 0)
        };
        // The peer has 400 of the 1000 bytes.
        h.input(&h.server.segment(ACK, 0, 400, b""));
        // SND.UNA and SND.NXT themselves (a pure ACK's sequence number) are in.
        for (off, want) in [
            (399, Rx::Invalid),
            (400, Rx::Icmp),
            (1000, Rx::Icmp),
            (1001, Rx::Invalid),
        ] {
            assert_eq!(h.input(&about(off)), want, "sequence offset {off}");
        }
        // The SYN's ISN is before SND.UNA: a late error about the SYN is invalid now.
        let syn_quote = {
            let mut quoted = request.clone();
            quoted.tcp.seq_number = h.server.client_iss;
            icmp_about(&quoted, kind, code, 0)
        };
        assert_eq!(h.input(&syn_quote), Rx::Invalid);
        let stats = h.engine.stats();
        assert_eq!((stats.icmp_soft_errors, stats.invalid), (2, 3));
        assert!(h.outcomes().is_empty());
    }
}

#[test]
fn fragmentation_needed_lowers_the_mss_and_resends_at_once() {
    let mut h = harness(false, big_request(1400));
    let sent = h.established();
    let first = data(&h, &sent);
    assert_eq!(first.len(), 1, "the request in one segment (peer MSS 1460)");
    let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
    assert_eq!(ip_len(&request), 20 + 32 + 1400);

    // A router on the way has a 1280-byte link: the request, dropped there, goes out again at
    // once in packets of at most 1280 bytes (MSS 1240, less 12 bytes of timestamps).
    assert_eq!(h.input(&too_big(&request, 1280)), Rx::Icmp);
    let resent = h.flush();
    assert!(resent.iter().all(|s| ip_len(s) <= 1280), "{resent:?}");
    let pieces = data(&h, &resent);
    assert_eq!(
        pieces
            .iter()
            .map(|(off, p)| (*off, p.len()))
            .collect::<Vec<_>>(),
        [(0, 1228), (1228, 172)]
    );
    let bytes: Vec<u8> = pieces.iter().flat_map(|(_, p)| p.clone()).collect();
    assert_eq!(bytes, h.engine.app().request, "the same bytes, in order");
    assert!(resent.last().unwrap().flags().contains(TcpFlags::PSH));
    let stats = h.engine.stats().clone();
    assert_eq!((stats.mss_lowered, stats.retransmits_sent), (1, 2));

    // A larger MTU, or the same one again, changes nothing (the MSS only goes down).
    for mtu in [1400, 1280] {
        assert_eq!(h.input(&too_big(&request, mtu)), Rx::Icmp);
        assert!(h.flush().is_empty());
    }
    assert_eq!(h.engine.stats().icmp_ignored, 2);
    // The retransmission timer's segments keep the new size.
    let mut later = Vec::new();
    for _ in 0..400 {
        h.tick(1000);
        later.extend(h.flush());
    }
    assert!(!data(&h, &later).is_empty(), "the RTO resends");
    assert!(later.iter().all(|s| ip_len(s) <= 1280));
    // The peer gets the whole request and answers.
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 0, 1400, b"ok"));
    assert_eq!(h.outcome().0.status, Status::Success);
}

#[test]
fn silly_mtus_are_floored_as_linux_floors_them() {
    // IPv4: an MTU of 68 (or 0, from a router older than RFC 1191) lowers the path only to
    // 552 bytes (Linux's min_pmtu): an MSS of 512, 500 bytes of data with timestamps.
    for mtu in [68, 0] {
        let mut h = harness(false, big_request(1400));
        let sent = h.established();
        let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
        assert_eq!(h.input(&too_big(&request, mtu)), Rx::Icmp);
        let resent = h.flush();
        let sizes: Vec<usize> = data(&h, &resent).iter().map(|(_, p)| p.len()).collect();
        assert_eq!(sizes, [500, 500, 400], "MTU {mtu}");
        assert!(resent.iter().all(|s| ip_len(s) <= 552));
    }
    // IPv6: below 1280 is no valid MTU (RFC 8200): ignored, as Linux does.
    let mut h = harness(true, big_request(1400));
    let sent = h.established();
    let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
    assert_eq!(h.input(&too_big(&request, 1279)), Rx::Icmp);
    assert!(h.flush().is_empty());
    assert_eq!(h.engine.stats().mss_lowered, 0);
}

#[test]
fn packet_too_big_lowers_an_ipv6_connection_to_1280() {
    let mut h = harness(true, big_request(1400));
    let sent = h.established();
    let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
    // The peer's MSS is 1460: the request goes in one segment.
    assert_eq!(ip_len(&request), 40 + 32 + 1400);
    assert_eq!(h.input(&too_big(&request, 1280)), Rx::Icmp);
    let resent = h.flush();
    let pieces = data(&h, &resent);
    assert_eq!(
        pieces
            .iter()
            .map(|(off, p)| (*off, p.len()))
            .collect::<Vec<_>>(),
        [(0, 1208), (1208, 192)]
    );
    assert!(resent.iter().all(|s| ip_len(s) <= 1280));
    assert_eq!(h.engine.stats().mss_lowered, 1);
}

#[test]
fn a_too_big_resends_only_what_is_unacknowledged() {
    let mut h = harness(false, big_request(1400));
    let sent = h.established();
    let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
    // The peer has the first 1000 bytes (say a first, smaller segment got through).
    h.input(&h.server.segment(ACK, 0, 1000, b""));
    let mut quoted = request.clone();
    quoted.tcp.seq_number = h.server.client_seq(1000);
    assert_eq!(h.input(&too_big(&quoted, 576)), Rx::Icmp);
    let resent = h.flush();
    let pieces = data(&h, &resent);
    assert_eq!(
        pieces
            .iter()
            .map(|(off, p)| (*off, p.len()))
            .collect::<Vec<_>>(),
        [(1000, 400)],
        "MSS 536 less timestamps: the 400 bytes left fit one segment"
    );
    // Everything acknowledged: a too-big then lowers the MSS and resends nothing.
    h.input(&h.server.segment(ACK, 0, 1400, b""));
    let mut quoted = request.clone();
    quoted.tcp.seq_number = h.server.client_seq(1400);
    assert_eq!(h.input(&too_big(&quoted, 552)), Rx::Icmp);
    assert!(h.flush().is_empty());
    assert_eq!(h.engine.stats().mss_lowered, 2);
}

#[test]
fn errors_about_a_connection_that_has_ended_are_ignored() {
    for v6 in [false, true] {
        let mut h = harness(v6, TestApp::http());
        let sent = h.established();
        let request = sent.iter().find(|s| !s.payload.is_empty()).unwrap().clone();
        h.input(
            &h.server
                .segment(ACK | TcpFlags::FIN, 0, REQUEST.len() as u32, b"ok"),
        );
        assert_eq!(h.outcome().0.status, Status::Success);
        h.flush();
        // The router's error about the request comes after the connection ended.
        let (kind, code) = unreachable(v6);
        assert_eq!(h.input(&icmp_about(&request, kind, code, 0)), Rx::Icmp);
        assert_eq!(h.input(&too_big(&request, 1280)), Rx::Icmp);
        assert!(h.outcomes().is_empty(), "no second row");
        assert_eq!(h.engine.stats().icmp_ignored, 2);
        assert_eq!(h.engine.stats().invalid, 0);
    }
}
