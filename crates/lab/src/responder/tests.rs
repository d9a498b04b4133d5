//! The XDP responder run on frames with BPF_PROG_TEST_RUN: its answers are checked field by
//! field (with sonde-wire's checksums), its choice of who answers against truth.rs, and
//! truncated and mangled frames must never make it send a reply whose checksums are wrong.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use sonde_wire::checksum::{checksum, fold, pseudo_header_v4, pseudo_header_v6, sum};

use super::{Loaded, ResponderSpec, SynAckWindows};
use crate::config::{SCAN_IP, SCAN_IP6};
use crate::truth::{Population, Population6};

pub(super) const XDP_DROP: u32 = 1;
pub(super) const XDP_PASS: u32 = 2;
pub(super) const XDP_TX: u32 = 3;

pub(super) const LAB_MAC: [u8; 6] = [0x02, 0, 0xc6, 0x13, 0xff, 0xfe];
pub(super) const SCAN_MAC: [u8; 6] = [0x02, 0, 0xc6, 0x13, 0xff, 0x01];
const OPEN: u16 = 80;
const CLOSED: u16 = 81;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

fn pop() -> Population {
    Population {
        net: "198.18.0.0/24".parse::<Ipv4Net>().unwrap(),
        seed: 7,
        share: 0.3,
    }
}

fn pop6() -> Population6 {
    Population6 {
        net: "2001:2::/120".parse::<Ipv6Net>().unwrap(),
        seed: 7,
        share: 0.3,
    }
}

pub(super) fn spec() -> ResponderSpec {
    ResponderSpec {
        pop: pop(),
        pop6: Some(pop6()),
        open: vec![OPEN, 443],
        dns: true,
        http: true,
        tai_utc: super::tai_utc_offset().unwrap(),
        mac: LAB_MAC,
        windows: windows(),
        kernel_responds: false,
        tree: None,
    }
}

/// Linux 6.18's defaults.
fn windows() -> SynAckWindows {
    SynAckWindows::linux("4096 131072 33554432", "4194304").unwrap()
}

#[test]
fn syn_ack_windows_are_linuxs() {
    // As a 6.18 kernel answers: 65160 and 10 with timestamps, 64240 without.
    let w = windows();
    assert_eq!(w.window, [64240, 65160, 64800, 64260]);
    assert_eq!(w.wscale, 10);
    // 6.1's defaults (tcp_rmem max 6 MiB) give scale 7.
    assert_eq!(
        SynAckWindows::linux("4096 131072 6291456", "212992")
            .unwrap()
            .wscale,
        7
    );
    assert!(SynAckWindows::linux("4096 131072", "1").is_err());
    assert!(SynAckWindows::linux("a b c", "1").is_err());
}

pub(super) fn can_load() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        eprintln!("skipping: loading an XDP program needs root");
    }
    root
}

fn loaded() -> Option<Loaded> {
    can_load().then(|| Loaded::load(&spec()).expect("the verifier takes the responder"))
}

fn responsive4() -> Ipv4Addr {
    pop().responsive().next().expect("some address answers")
}

fn silent4() -> Ipv4Addr {
    pop().addresses().find(|a| !pop().answers(*a)).unwrap()
}

fn responsive6() -> Ipv6Addr {
    pop6().responsive().next().expect("some address answers")
}

// Frame builders: whole frames with correct checksums, as a scanner sends them.

pub(super) fn eth(proto: u16) -> Vec<u8> {
    [&LAB_MAC[..], &SCAN_MAC[..], &proto.to_be_bytes()].concat()
}

pub(super) fn ipv4(dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    ipv4_from(SCAN_IP, dst, proto, l4)
}

pub(super) fn ipv4_from(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend(src.octets());
    ip.extend(dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    [eth(0x0800), ip, l4.to_vec()].concat()
}

fn ipv6(dst: Ipv6Addr, next: u8, l4: &[u8]) -> Vec<u8> {
    ipv6_from(SCAN_IP6, dst, next, l4)
}

fn ipv6_from(src: Ipv6Addr, dst: Ipv6Addr, next: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0, 0, 0, next, 64];
    ip[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    ip.extend(src.octets());
    ip.extend(dst.octets());
    [eth(0x86dd), ip, l4.to_vec()].concat()
}

/// Fills in the transport checksum at `at` of `l4`, over the pseudo-header sum `pseudo`.
pub(super) fn with_checksum(mut l4: Vec<u8>, at: usize, pseudo: u32) -> Vec<u8> {
    let c = !fold(pseudo + sum(&l4));
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    l4
}

/// A SYN with Linux's options (MSS, SACK-permitted, timestamps, NOP, window scale).
fn syn_segment(dport: u16, seq: u32) -> Vec<u8> {
    let mut t = vec![0u8; 40];
    t[0..2].copy_from_slice(&61000u16.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = 10 << 4;
    t[13] = SYN;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t[20..40].copy_from_slice(&[
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 1, 3, 3, 7,
    ]);
    t
}

fn syn4(dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let t = syn_segment(dport, 1000);
    ipv4(
        dst,
        6,
        &with_checksum(t, 16, pseudo_header_v4(SCAN_IP, dst, 6, 40)),
    )
}

fn syn6(dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let t = syn_segment(dport, 1000);
    let pseudo = pseudo_header_v6(&SCAN_IP6, &dst, 6, 40);
    ipv6(dst, 6, &with_checksum(t, 16, pseudo))
}

fn echo4(dst: Ipv4Addr) -> Vec<u8> {
    let icmp = [8, 0, 0, 0, 0, 1, 0, 2, b'p', b'i', b'n', b'g'].to_vec();
    ipv4(dst, 1, &with_checksum(icmp, 2, 0))
}

fn echo6(dst: Ipv6Addr) -> Vec<u8> {
    let icmp = [128, 0, 0, 0, 0, 1, 0, 2, b'p', b'i', b'n', b'g'].to_vec();
    let pseudo = pseudo_header_v6(&SCAN_IP6, &dst, 58, 12);
    ipv6(dst, 58, &with_checksum(icmp, 2, pseudo))
}

fn udp_datagram(payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0xee, 0x48, 0, 161, 0, 0, 0, 0];
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend(payload);
    u
}

fn udp4(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let u = udp_datagram(payload);
    let pseudo = pseudo_header_v4(SCAN_IP, dst, 17, u.len() as u16);
    ipv4(dst, 17, &with_checksum(u, 6, pseudo))
}

fn udp6(dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    let u = udp_datagram(payload);
    let pseudo = pseudo_header_v6(&SCAN_IP6, &dst, 17, u.len() as u32);
    ipv6(dst, 17, &with_checksum(u, 6, pseudo))
}

/// The reply's IP header, checked (addresses swapped, checksum), and its transport segment.
fn reply_l4(probe: &[u8], reply: &[u8]) -> Vec<u8> {
    assert_eq!(
        &reply[0..6],
        &probe[6..12],
        "back to the probe's source MAC"
    );
    assert_eq!(&reply[6..12], &probe[0..6]);
    assert_eq!(reply[12..14], probe[12..14]);
    if probe[12..14] == [0x08, 0x00] {
        let ip = &reply[14..34];
        assert_eq!(checksum(ip), 0, "IPv4 header checksum");
        assert_eq!(&ip[12..16], &probe[30..34], "source is the probed address");
        assert_eq!(&ip[16..20], &probe[26..30]);
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            reply.len() - 14
        );
        let l4 = reply[34..].to_vec();
        let src = Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap());
        let dst = Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap());
        if ip[9] != 1 {
            let pseudo = pseudo_header_v4(src, dst, ip[9], l4.len() as u16);
            assert_eq!(fold(pseudo + sum(&l4)), 0xffff, "transport checksum");
        } else {
            assert_eq!(checksum(&l4), 0, "ICMP checksum");
        }
        l4
    } else {
        let ip = &reply[14..54];
        assert_eq!(&ip[8..24], &probe[38..54]);
        assert_eq!(&ip[24..40], &probe[22..38]);
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[4], ip[5]])),
            reply.len() - 54
        );
        let l4 = reply[54..].to_vec();
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
        let pseudo = pseudo_header_v6(&src, &dst, ip[6], l4.len() as u32);
        assert_eq!(fold(pseudo + sum(&l4)), 0xffff, "transport checksum");
        l4
    }
}

fn tx(prog: &mut Loaded, probe: &[u8]) -> Vec<u8> {
    let (action, reply) = prog.run(probe).unwrap();
    assert_eq!(action, XDP_TX, "probe {probe:02x?}");
    reply
}

#[test]
fn syn_to_an_open_port_gets_a_syn_ack_with_the_options_offered() {
    let Some(mut prog) = loaded() else { return };
    for probe in [syn4(responsive4(), OPEN), syn6(responsive6(), OPEN)] {
        let reply = tx(&mut prog, &probe);
        let t = reply_l4(&probe, &reply);
        assert_eq!(t[13], SYN | ACK);
        assert_eq!(&t[0..2], &OPEN.to_be_bytes());
        assert_eq!(&t[2..4], &61000u16.to_be_bytes());
        assert_eq!(u32::from_be_bytes(t[8..12].try_into().unwrap()), 1001);
        // MSS (IPv6's is 20 bytes less), SACK-permitted with timestamps in one word, the
        // SYN's TSval echoed, NOP and window scale: Linux's 20 bytes.
        let mss: u16 = if probe.len() > 80 { 1440 } else { 1460 };
        let mut want = vec![2, 4];
        want.extend_from_slice(&mss.to_be_bytes());
        want.extend_from_slice(&[4, 2, 8, 10]);
        want.extend_from_slice(&t[28..32]);
        want.extend_from_slice(&[0, 0, 0x12, 0x34, 1, 3, 3, 10]);
        assert_eq!(usize::from(t[12] >> 4), 10, "data offset");
        assert_eq!(&t[20..], &want[..], "options, byte for byte");
        let window = u16::from_be_bytes([t[14], t[15]]);
        assert_eq!(window, if probe.len() > 80 { 64260 } else { 65160 });
        // The same probe again gets the same initial sequence number.
        let again = tx(&mut prog, &probe);
        assert_eq!(reply_l4(&probe, &again)[4..8], t[4..8]);
    }
}

/// A SYN to the open port of `dst` offering `offered` options (padded with NOPs to a word).
fn syn4_offering(dst: Ipv4Addr, offered: &[u8]) -> Vec<u8> {
    let mut t = syn_segment(OPEN, 7)[..20].to_vec();
    t.extend_from_slice(offered);
    while !t.len().is_multiple_of(4) {
        t.push(1);
    }
    t[12] = ((t.len() / 4) as u8) << 4;
    let len = t.len() as u16;
    ipv4(
        dst,
        6,
        &with_checksum(t, 16, pseudo_header_v4(SCAN_IP, dst, 6, len)),
    )
}

#[test]
fn syn_ack_options_are_linuxs_byte_for_byte() {
    let Some(mut prog) = loaded() else { return };
    const MSS: &[u8] = &[2, 4, 0x05, 0xb4];
    const SACK: &[u8] = &[4, 2];
    const TS: &[u8] = &[8, 10, 0, 0, 0x12, 0x34, 0, 0, 0, 0];
    const WS: &[u8] = &[3, 3, 7];
    // What the lab's Linux 6.18 kernel answered (tcp_options_write's layout), captured with
    // SYNs from a raw socket in a lab's scanner namespace to an open port (2026-11-26). The
    // SYN-ACK's own TSval (bytes 8..12 when timestamps are on) is its clock's, and is left
    // out of the comparison.
    let cases: [(&str, Vec<u8>, &[u8]); 9] = [
        ("none", vec![], &[2, 4, 5, 0xb4]),
        ("mss", MSS.to_vec(), &[2, 4, 5, 0xb4]),
        (
            "mss+sack",
            [MSS, SACK].concat(),
            &[2, 4, 5, 0xb4, 1, 1, 4, 2],
        ),
        ("mss+ws", [MSS, WS].concat(), &[2, 4, 5, 0xb4, 1, 3, 3, 10]),
        (
            "mss+sack+ws",
            [MSS, SACK, WS].concat(),
            &[2, 4, 5, 0xb4, 1, 1, 4, 2, 1, 3, 3, 10],
        ),
        (
            "mss+ts",
            [MSS, TS].concat(),
            &[2, 4, 5, 0xb4, 1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0x12, 0x34],
        ),
        (
            "mss+sack+ts",
            [MSS, SACK, TS].concat(),
            &[2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 0, 0, 0, 0x12, 0x34],
        ),
        (
            "mss+ts+ws",
            [MSS, TS, WS].concat(),
            &[
                2, 4, 5, 0xb4, 1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 1, 3, 3, 10,
            ],
        ),
        (
            "mss,sack,ts,nop,ws (Linux's own SYN)",
            [MSS, SACK, TS, &[1], WS].concat(),
            &[
                2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 1, 3, 3, 10,
            ],
        ),
    ];
    let dst = responsive4();
    for (what, offered, linux) in cases {
        let probe = syn4_offering(dst, &offered);
        let t = reply_l4(&probe, &tx(&mut prog, &probe));
        let doff = usize::from(t[12] >> 4) * 4;
        assert_eq!(t.len(), doff, "{what}: no bytes after the header");
        let mut got = t[20..doff].to_vec();
        if linux.len() >= 12 && linux[6] == 8 {
            got[8..12].fill(0);
        }
        assert_eq!(got, linux, "{what}: options as Linux lays them out");
    }
}

#[test]
fn a_syn_without_options_gets_only_an_mss() {
    let Some(mut prog) = loaded() else { return };
    let dst = responsive4();
    let mut t = syn_segment(OPEN, 5)[..20].to_vec();
    t[12] = 5 << 4;
    let probe = ipv4(
        dst,
        6,
        &with_checksum(t, 16, pseudo_header_v4(SCAN_IP, dst, 6, 20)),
    );
    let reply = tx(&mut prog, &probe);
    let t = reply_l4(&probe, &reply);
    assert_eq!(t[12] >> 4, 6, "data offset: as Linux's, no padding");
    assert_eq!(&t[20..], &[2, 4, 0x05, 0xb4]);
}

#[test]
fn syn_to_a_closed_port_gets_a_reset() {
    let Some(mut prog) = loaded() else { return };
    for probe in [syn4(responsive4(), CLOSED), syn6(responsive6(), CLOSED)] {
        let reply = tx(&mut prog, &probe);
        let t = reply_l4(&probe, &reply);
        assert_eq!(t.len(), 20);
        assert_eq!(t[13], RST | ACK);
        assert_eq!(&t[4..8], &[0; 4]);
        assert_eq!(u32::from_be_bytes(t[8..12].try_into().unwrap()), 1001);
    }
}

#[test]
fn echo_requests_get_echo_replies() {
    let Some(mut prog) = loaded() else { return };
    for (probe, reply_type) in [(echo4(responsive4()), 0), (echo6(responsive6()), 129)] {
        let reply = tx(&mut prog, &probe);
        let icmp = reply_l4(&probe, &reply);
        assert_eq!(icmp[0], reply_type);
        assert_eq!(
            &icmp[4..],
            &probe[probe.len() - 8..],
            "identifier, sequence, data"
        );
    }
}

#[test]
fn udp_gets_port_unreachable_quoting_the_datagram() {
    let Some(mut prog) = loaded() else { return };
    // Padded to Ethernet's 60 bytes: the padding is no part of the quote.
    let mut padded = udp4(responsive4(), b"x");
    let datagram = padded[14..].to_vec();
    padded.resize(60, 0);
    let reply = tx(&mut prog, &padded);
    let icmp = reply_l4(&padded, &reply);
    assert_eq!((icmp[0], icmp[1]), (3, 3));
    assert_eq!(&icmp[8..], &datagram[..]);

    let probe = udp6(responsive6(), b"hello");
    let reply = tx(&mut prog, &probe);
    let icmp = reply_l4(&probe, &reply);
    assert_eq!((icmp[0], icmp[1]), (1, 4));
    assert_eq!(&icmp[8..], &probe[14..]);
}

#[test]
fn who_answers_is_the_truth() {
    let Some(mut prog) = loaded() else { return };
    for addr in pop().addresses() {
        let (action, _) = prog.run(&syn4(addr, OPEN)).unwrap();
        let want = if pop().answers(addr) {
            XDP_TX
        } else {
            XDP_DROP
        };
        assert_eq!(action, want, "{addr}");
    }
    for addr in pop6().addresses() {
        let (action, _) = prog.run(&echo6(addr)).unwrap();
        let want = if pop6().answers(addr) {
            XDP_TX
        } else {
            XDP_DROP
        };
        assert_eq!(action, want, "{addr}");
    }
    assert_eq!(prog.run(&syn4(silent4(), OPEN)).unwrap().0, XDP_DROP);
}

#[test]
fn what_it_cannot_answer_goes_to_the_kernel() {
    let Some(mut prog) = loaded() else { return };
    let dst = responsive4();
    let outside = Ipv4Addr::new(198, 18, 1, 1);
    let mut other_mac = syn4(dst, OPEN);
    other_mac[0] ^= 0x80;
    let mut fragment = syn4(dst, OPEN);
    fragment[14 + 6] |= 0x20; // more fragments
    let mut bad_checksum = syn4(dst, OPEN);
    bad_checksum[14 + 20 + 16] ^= 0xff;
    let mut ack = syn4(dst, OPEN);
    ack[14 + 20 + 13] = ACK;
    let dns = udp4(dst, b"query");
    let mut dns53 = dns.clone();
    dns53[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
    for (what, frame) in [
        ("outside the population", syn4(outside, OPEN)),
        ("to another MAC", other_mac),
        ("a fragment", fragment),
        ("a bad checksum", bad_checksum),
        ("not a SYN", ack),
        ("to the DNS server", dns53),
        ("ARP", eth(0x0806)),
    ] {
        assert_eq!(prog.run(&frame).unwrap().0, XDP_PASS, "{what}");
    }
}

/// Every truncation, single-byte change and bit flip of each probe: the program must never
/// send a reply a kernel would drop (its checksums are checked whenever it answers).
#[test]
fn truncated_and_mangled_frames_never_get_a_broken_reply() {
    let Some(mut prog) = loaded() else { return };
    let probes = [
        syn4(responsive4(), OPEN),
        syn4(responsive4(), CLOSED),
        syn6(responsive6(), OPEN),
        echo4(responsive4()),
        echo6(responsive6()),
        udp4(responsive4(), b"abc"),
        udp6(responsive6(), b"abc"),
    ];
    let mut answered = 0;
    for probe in &probes {
        let mut check = |frame: &[u8]| {
            let (action, reply) = prog.run(frame).unwrap();
            assert!(
                matches!(action, XDP_PASS | XDP_DROP | XDP_TX),
                "action {action}"
            );
            if action == XDP_TX {
                answered += 1;
                reply_l4(frame, &reply);
            }
        };
        // BPF_PROG_TEST_RUN takes no XDP frame shorter than an Ethernet header (nor does
        // a driver deliver one).
        for len in 14..probe.len() {
            check(&probe[..len]);
        }
        let mut copy = probe.clone();
        for at in 0..probe.len() {
            for value in [0x00, 0xff, probe[at] ^ 0x80, probe[at] ^ 0x01] {
                copy[at] = value;
                check(&copy);
            }
            copy[at] = probe[at];
        }
    }
    // Changes outside the checked fields (the TTL, the IP identification, payload bytes whose
    // checksum the ICMP echo path does not verify) still get answers.
    assert!(answered > 0);
}

// The HTTP server on port 80 (`--responder xdp --http`): a connection is played segment by
// segment, and every answer is checked field by field.

const HTTP: u16 = 80;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CLIENT_PORT: u16 = 61000;
const CLIENT_TS: u32 = 0x0102_0304;
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: lab\r\nAccept: */*\r\n\r\n";

/// What this lab's nginx sent for `curl -si http://198.18.0.1/` (`lab up --http`, captured
/// 2026-11-26; tcpdump showed the same bytes in one segment). Only the Date differs between
/// replies; the XDP server's must be this with its own Date.
const NGINX_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Thu, 26 Nov 2026 04:48:25 GMT\r\nContent-Type: text/plain\r\nContent-Length: 21\r\nConnection: close\r\n\r\nsonde lab 198.18.0.1\n";
/// Where the Date's value lies in a reply, and its length ("Thu, 26 Nov 2026 04:48:25 GMT").
const DATE_AT: usize = 38;
const DATE_LEN: usize = 29;

/// A spec where every address of `pop4` and `pop6` answers.
fn every(pop4: &str, pop6: &str) -> ResponderSpec {
    let mut s = spec();
    s.pop = Population {
        net: pop4.parse().unwrap(),
        seed: 7,
        share: 1.0,
    };
    s.pop6 = Some(Population6 {
        net: pop6.parse().unwrap(),
        seed: 7,
        share: 1.0,
    });
    s
}

/// One client connection to port 80 of `dst`, as seen by the server.
#[derive(Clone, Copy)]
struct Conn {
    dst: std::net::IpAddr,
    /// The client's ISN.
    client: u32,
    /// The server's ISN, from its SYN-ACK.
    server: u32,
    ts: bool,
}

/// A TCP segment from the client: header, options (`ts`: NOP NOP TS, else none), payload.
fn client_segment(c: &Conn, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&CLIENT_PORT.to_be_bytes());
    t[2..4].copy_from_slice(&HTTP.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[13] = flags;
    t[14..16].copy_from_slice(&63u16.to_be_bytes());
    if c.ts {
        t.extend_from_slice(&[1, 1, 8, 10]);
        t.extend_from_slice(&CLIENT_TS.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0x12, 0x34]);
    }
    t[12] = ((t.len() / 4) as u8) << 4;
    t.extend_from_slice(payload);
    t
}

/// `t` (a TCP segment to `dst`) in a whole frame, its checksum filled in.
fn tcp_frame(dst: std::net::IpAddr, t: Vec<u8>) -> Vec<u8> {
    let src = match dst {
        std::net::IpAddr::V4(_) => SCAN_IP.into(),
        std::net::IpAddr::V6(_) => SCAN_IP6.into(),
    };
    tcp_frame_from(src, dst, t)
}

fn tcp_frame_from(src: std::net::IpAddr, dst: std::net::IpAddr, t: Vec<u8>) -> Vec<u8> {
    match (src, dst) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            let pseudo = pseudo_header_v4(s, d, 6, t.len() as u16);
            ipv4_from(s, d, 6, &with_checksum(t, 16, pseudo))
        }
        (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
            let pseudo = pseudo_header_v6(&s, &d, 6, t.len() as u32);
            ipv6_from(s, d, 6, &with_checksum(t, 16, pseudo))
        }
        _ => panic!("{src} and {dst} are of different families"),
    }
}

/// The client's SYN (offering timestamps and window scaling as asked); returns the
/// connection with the server's ISN from the SYN-ACK.
fn connect(prog: &mut Loaded, dst: std::net::IpAddr, ts: bool, wscale: bool) -> Conn {
    let mut c = Conn {
        dst,
        client: 0x5000_0000,
        server: 0,
        ts: false,
    };
    let mut t = client_segment(&c, c.client, 0, SYN, &[]);
    t.extend_from_slice(&[2, 4, 0x05, 0xb4]);
    if ts {
        t.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 0]);
    }
    if wscale {
        t.extend_from_slice(&[1, 3, 3, 7]);
    }
    t[12] = ((t.len() / 4) as u8) << 4;
    let syn = tcp_frame(dst, t);
    let syn_ack = reply_l4(&syn, &tx(prog, &syn));
    assert_eq!(syn_ack[13], SYN | ACK);
    c.server = u32::from_be_bytes(syn_ack[4..8].try_into().unwrap());
    c.ts = ts;
    c
}

/// The client's segment, run: the action and the server's segment (its IP header and
/// checksums checked by `reply_l4`), if any.
fn send(prog: &mut Loaded, c: &Conn, seq: u32, ack: u32, flags: u8, data: &[u8]) -> (u32, Vec<u8>) {
    let frame = tcp_frame(c.dst, client_segment(c, seq, ack, flags, data));
    let (action, reply) = prog.run(&frame).unwrap();
    let t = if action == XDP_TX {
        reply_l4(&frame, &reply)
    } else {
        vec![]
    };
    (action, t)
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

/// A server segment's fields: (seq, ack, flags, window, options, payload), with its ports
/// checked.
fn fields(t: &[u8]) -> (u32, u32, u8, u16, Vec<u8>, Vec<u8>) {
    assert_eq!(&t[0..2], &HTTP.to_be_bytes(), "source port");
    assert_eq!(&t[2..4], &CLIENT_PORT.to_be_bytes(), "destination port");
    assert_eq!(&t[18..20], &[0, 0], "urgent pointer");
    let doff = usize::from(t[12] >> 4) * 4;
    (
        be32(&t[4..]),
        be32(&t[8..]),
        t[13],
        u16::from_be_bytes([t[14], t[15]]),
        t[20..doff].to_vec(),
        t[doff..].to_vec(),
    )
}

/// The timestamp option a reply to the client's segment must carry: NOP NOP TS, TSval this
/// host's clock (not compared), TSecr the client's TSval.
fn check_ts_option(options: &[u8]) {
    assert_eq!(options.len(), 12, "{options:?}");
    assert_eq!(&options[0..4], &[1, 1, 8, 10]);
    assert_eq!(be32(&options[8..]), CLIENT_TS, "TSecr echoes the client");
}

/// `date -u` as HTTP writes it.
fn http_date_now() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%a, %d %b %Y %H:%M:%S GMT"])
        .output()
        .expect("date");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The reply nginx would send for `dst`, with the Date of `reply` (which must be a date
/// between `before` and `after`, as `date -u` printed them).
fn nginx_reply_for(dst: std::net::IpAddr, reply: &[u8], before: &str, after: &str) -> Vec<u8> {
    let date = std::str::from_utf8(&reply[DATE_AT..DATE_AT + DATE_LEN]).unwrap();
    assert!(
        date == before || date == after,
        "Date {date:?}: the clock says {before:?}..{after:?}"
    );
    let body = crate::truth::http_body(dst);
    let mut want = NGINX_REPLY[..DATE_AT].to_vec();
    want.extend_from_slice(date.as_bytes());
    let head = std::str::from_utf8(&NGINX_REPLY[DATE_AT + DATE_LEN..]).unwrap();
    let head = head.split("\r\n\r\n").next().unwrap().to_string() + "\r\n\r\n";
    want.extend_from_slice(head.replace("21", &body.len().to_string()).as_bytes());
    want.extend_from_slice(body.as_bytes());
    want
}

#[test]
fn a_request_gets_nginxs_reply_with_fin_in_one_segment() {
    if !can_load() {
        return;
    }
    let mut prog = Loaded::load(&every("198.18.0.0/24", "2001:2::/120")).unwrap();
    let v4: std::net::IpAddr = "198.18.0.1".parse().unwrap();
    let v6: std::net::IpAddr = "2001:2::5".parse().unwrap();
    // (address, timestamps, window scaling, the window nginx's kernel advertised after the
    // handshake in the capture, or what it would without scaling: the SYN-ACK's).
    for (dst, ts, wscale, window) in [
        (v4, true, true, 64u16),
        (v6, true, true, 63),
        (v4, false, true, 63),
        (v4, true, false, 65160),
        (v6, false, false, 64800),
    ] {
        let what = format!("{dst} ts {ts} wscale {wscale}");
        let c = connect(&mut prog, dst, ts, wscale);
        // The handshake's ACK: nothing to answer.
        let (action, _) = send(&mut prog, &c, c.client + 1, c.server + 1, ACK, &[]);
        assert_eq!(action, XDP_DROP, "{what}: the handshake's ACK");
        let before = http_date_now();
        let (action, t) = send(
            &mut prog,
            &c,
            c.client + 1,
            c.server + 1,
            ACK | PSH,
            REQUEST,
        );
        let after = http_date_now();
        assert_eq!(action, XDP_TX, "{what}");
        let (seq, ack, flags, win, options, payload) = fields(&t);
        assert_eq!(seq, c.server + 1, "{what}: seq is the cookie + 1");
        assert_eq!(
            ack,
            c.client + 1 + REQUEST.len() as u32,
            "{what}: acks the request"
        );
        // Data, PSH as Linux sets on a write's last segment, and FIN: one segment.
        assert_eq!(flags, ACK | PSH | FIN, "{what}");
        assert_eq!(win, window, "{what}: window");
        if ts {
            check_ts_option(&options);
        } else {
            assert!(options.is_empty(), "{what}: no options: {options:?}");
        }
        let want = nginx_reply_for(dst, &payload, &before, &after);
        assert_eq!(
            String::from_utf8_lossy(&payload),
            String::from_utf8_lossy(&want),
            "{what}"
        );
        if dst == v4 {
            // The capture itself, Date aside: byte for byte.
            let mut got = payload.clone();
            got[DATE_AT..DATE_AT + DATE_LEN]
                .copy_from_slice(&NGINX_REPLY[DATE_AT..DATE_AT + DATE_LEN]);
            assert_eq!(got, NGINX_REPLY, "{what}");
        }
        // The same request again (our reply was lost): the same reply.
        let (_, again) = send(
            &mut prog,
            &c,
            c.client + 1,
            c.server + 1,
            ACK | PSH,
            REQUEST,
        );
        let again = fields(&again);
        assert_eq!((again.0, again.1, again.2), (seq, ack, flags), "{what}");
        assert_eq!(again.5.len(), payload.len(), "{what}");
    }
}

#[test]
fn every_address_is_written_as_nginx_and_the_truth_write_it() {
    if !can_load() {
        return;
    }
    // Addresses of every length, and IPv6 zero runs first, last, twice (the first longest
    // goes), once (a single zero group stays "0") and none.
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "198.18.0.0/15",
            "2001:2::/112",
            &[
                "198.18.0.0",
                "198.18.9.99",
                "198.18.10.100",
                "198.19.254.255",
                "2001:2::",
                "2001:2::5",
                "2001:2::cdef",
            ],
        ),
        (
            "198.18.0.0/24",
            "2001:2:0:1234::/120",
            &["2001:2:0:1234::", "2001:2:0:1234::ff"],
        ),
        (
            "198.18.0.0/24",
            "2001:2:0:0:1:0:0:100/120",
            &["2001:2::1:0:0:100", "2001:2::1:0:0:1ff"],
        ),
        (
            "198.18.0.0/24",
            "2001:2:1:2:3:4:5:600/120",
            &["2001:2:1:2:3:4:5:600", "2001:2:1:2:3:4:5:6ff"],
        ),
    ];
    for (pop4, pop6, addrs) in cases {
        let mut prog = Loaded::load(&every(pop4, pop6)).unwrap();
        for addr in addrs {
            let dst: std::net::IpAddr = addr.parse().unwrap();
            // Rust's formatting is the truth's (what `lab score` checks bodies against).
            assert_eq!(
                dst.to_string(),
                *addr,
                "the case is written as Rust writes it"
            );
            let c = connect(&mut prog, dst, true, true);
            let (_, t) = send(
                &mut prog,
                &c,
                c.client + 1,
                c.server + 1,
                ACK | PSH,
                REQUEST,
            );
            let payload = fields(&t).5;
            let body = crate::truth::http_body(dst);
            let text = String::from_utf8_lossy(&payload);
            assert!(text.ends_with(&format!("\r\n\r\n{body}")), "{addr}: {text}");
            assert!(
                text.contains(&format!("Content-Length: {}\r\n", body.len())),
                "{text}"
            );
        }
    }
}

#[test]
fn the_clients_fin_is_answered_and_closes_the_connection() {
    let Some(mut prog) = loaded() else { return };
    for dst in [responsive4().into(), responsive6().into()] {
        let c = connect(&mut prog, dst, true, true);
        let (_, t) = send(
            &mut prog,
            &c,
            c.client + 1,
            c.server + 1,
            ACK | PSH,
            REQUEST,
        );
        let reply_len = fields(&t).5.len() as u32;
        let fin_seq = c.client + 1 + REQUEST.len() as u32;
        let all_acked = c.server + 1 + reply_len + 1;
        // The client acks our reply and FIN: nothing to answer.
        let (action, _) = send(&mut prog, &c, fin_seq, all_acked, ACK, &[]);
        assert_eq!(action, XDP_DROP, "{dst}: the ACK of our FIN");
        // Its FIN: acked, from after our FIN.
        let (action, t) = send(&mut prog, &c, fin_seq, all_acked, FIN | ACK, &[]);
        assert_eq!(action, XDP_TX, "{dst}: FIN");
        let (seq, ack, flags, win, options, payload) = fields(&t);
        assert_eq!((seq, ack, flags), (all_acked, fin_seq + 1, ACK), "{dst}");
        assert_eq!(win, if dst.is_ipv4() { 64 } else { 63 }, "{dst}");
        check_ts_option(&options);
        assert!(payload.is_empty());
        // A request and FIN in one segment: both acked in the reply.
        let (_, t) = send(
            &mut prog,
            &c,
            c.client + 1,
            c.server + 1,
            FIN | ACK | PSH,
            REQUEST,
        );
        let (_, ack, flags, ..) = fields(&t);
        assert_eq!((ack, flags), (fin_seq + 1, ACK | PSH | FIN), "{dst}");
        // A FIN before any request: we close too, with nothing sent.
        let c2 = connect(&mut prog, dst, false, false);
        let (action, t) = send(&mut prog, &c2, c2.client + 1, c2.server + 1, FIN | ACK, &[]);
        assert_eq!(action, XDP_TX);
        let (seq, ack, flags, win, options, payload) = fields(&t);
        assert_eq!(
            (seq, ack, flags),
            (c2.server + 1, c2.client + 2, FIN | ACK),
            "{dst}"
        );
        assert_eq!(win, windows().window[if dst.is_ipv4() { 0 } else { 2 }]);
        assert!(options.is_empty() && payload.is_empty());
    }
}

#[test]
fn resets_and_segments_without_ack_are_dropped() {
    let Some(mut prog) = loaded() else { return };
    let c = connect(&mut prog, responsive4().into(), true, true);
    for (what, seq, ack, flags) in [
        ("RST|ACK", c.client + 1, c.server + 1, RST | ACK),
        ("RST", c.client + 1, 0, RST),
        (
            "RST with a bad cookie",
            c.client + 1,
            c.server + 99_999,
            RST | ACK,
        ),
        ("no ACK", c.client + 1, 0, PSH),
    ] {
        let (action, _) = send(&mut prog, &c, seq, ack, flags, &[]);
        assert_eq!(action, XDP_DROP, "{what}");
    }
    let (action, _) = send(&mut prog, &c, c.client + 1, 0, PSH, REQUEST);
    assert_eq!(action, XDP_DROP, "a request without ACK");
}

#[test]
fn a_segment_outside_the_cookie_gets_linuxs_reset() {
    let Some(mut prog) = loaded() else { return };
    // Both cookies: with and without window scaling offered.
    for wscale in [false, true] {
        let c = connect(&mut prog, responsive4().into(), true, wscale);
        outside_the_cookie(&mut prog, &c);
    }
}

fn outside_the_cookie(prog: &mut Loaded, c: &Conn) {
    let (_, t) = send(prog, c, c.client + 1, c.server + 1, ACK | PSH, REQUEST);
    let reply_len = fields(&t).5.len() as u32;
    // Just before the cookie, just past our FIN, far off; a pure ACK, a request, a FIN.
    for (ack, flags, data) in [
        (c.server, ACK, &[][..]),
        (c.server + 1 + reply_len + 2, ACK, &[][..]),
        (c.server ^ 0x8000_0000, ACK | PSH, REQUEST),
        (c.server + 77_777, FIN | ACK, &[][..]),
    ] {
        let (action, t) = send(prog, c, c.client + 1, ack, flags, data);
        assert_eq!(action, XDP_TX, "ack {ack}");
        // As Linux answers an ACK that is no SYN cookie: RST, seq its ack, no ACK, window 0,
        // no options.
        let (seq, ack_field, rflags, win, options, payload) = fields(&t);
        assert_eq!((seq, ack_field, rflags, win), (ack, 0, RST, 0), "ack {ack}");
        assert!(options.is_empty() && payload.is_empty());
    }
}

#[test]
fn requests_it_cannot_serve_are_reset() {
    let Some(mut prog) = loaded() else { return };
    let c = connect(&mut prog, responsive6().into(), true, true);
    let (_, t) = send(
        &mut prog,
        &c,
        c.client + 1,
        c.server + 1,
        ACK | PSH,
        REQUEST,
    );
    let reply_len = fields(&t).5.len() as u32;
    let after_fin = c.server + 1 + reply_len + 1;
    for (what, ack, data) in [
        (
            "another path",
            c.server + 1,
            &b"GET /big HTTP/1.1\r\nHost: lab\r\n\r\n"[..],
        ),
        (
            "a head split over segments",
            c.server + 1,
            &b"GET / HTTP/1.1\r\nHost: lab\r\n"[..],
        ),
        (
            "another method",
            c.server + 1,
            &b"HEAD / HTTP/1.1\r\nHost: lab\r\n\r\n"[..],
        ),
        ("too short", c.server + 1, &b"GET / \r\n"[..]),
        ("data after our FIN", after_fin, REQUEST),
    ] {
        let (action, t) = send(&mut prog, &c, c.client + 1, ack, ACK | PSH, data);
        assert_eq!(action, XDP_TX, "{what}");
        let (seq, ack_field, flags, _, options, payload) = fields(&t);
        assert_eq!(flags, RST | ACK, "{what}");
        assert_eq!(seq, ack, "{what}: from where the client expects our data");
        assert_eq!(ack_field, c.client + 1 + data.len() as u32, "{what}");
        check_ts_option(&options);
        assert!(payload.is_empty());
    }
}

#[test]
fn without_http_segments_to_port_80_still_go_to_the_kernel() {
    if !can_load() {
        return;
    }
    let mut s = spec();
    s.http = false;
    let mut prog = Loaded::load(&s).unwrap();
    let c = connect(&mut prog, responsive4().into(), true, true);
    for flags in [ACK, ACK | PSH, FIN | ACK, RST] {
        let (action, _) = send(&mut prog, &c, c.client + 1, c.server + 1, flags, REQUEST);
        assert_eq!(action, XDP_PASS, "flags {flags:#x}");
    }
    // And with it, segments to the other open ports do.
    let mut prog = loaded().unwrap();
    let mut t = client_segment(&c, c.client + 1, c.server + 1, ACK, &[]);
    t[2..4].copy_from_slice(&443u16.to_be_bytes());
    assert_eq!(prog.run(&tcp_frame(c.dst, t)).unwrap().0, XDP_PASS);
}

/// Every truncation, byte change and bit flip of the server's segments: never a reply with a
/// wrong checksum, never a panic.
#[test]
fn truncated_and_mangled_segments_never_get_a_broken_reply() {
    let Some(mut prog) = loaded() else { return };
    let mut frames = vec![];
    for dst in [responsive4().into(), responsive6().into()] {
        let c = connect(&mut prog, dst, true, true);
        for (flags, data) in [(ACK | PSH, REQUEST), (FIN | ACK, &[][..]), (ACK, &[][..])] {
            frames.push(tcp_frame(
                dst,
                client_segment(&c, c.client + 1, c.server + 1, flags, data),
            ));
        }
    }
    let mut answered = 0;
    for frame in &frames {
        let mut check = |f: &[u8]| {
            let (action, reply) = prog.run(f).unwrap();
            assert!(
                matches!(action, XDP_PASS | XDP_DROP | XDP_TX),
                "action {action}"
            );
            if action == XDP_TX {
                answered += 1;
                reply_l4(f, &reply);
            }
        };
        for len in 14..frame.len() {
            check(&frame[..len]);
        }
        let mut copy = frame.clone();
        for at in 0..frame.len() {
            for value in [0x00, 0xff, frame[at] ^ 0x80, frame[at] ^ 0x01] {
                copy[at] = value;
                check(&copy);
            }
            copy[at] = frame[at];
        }
    }
    assert!(answered > 0);
}

/// A packet ring's spare source on the link (198.19.255.2, 2001:2:0:ffff::2) is served too with
/// --http (no kernel server stands behind port 80); the lab's own addresses are not hosts.
#[test]
fn other_hosts_of_the_link_are_served_with_http() {
    let Some(mut prog) = loaded() else { return };
    let mut no_http = spec();
    no_http.http = false;
    let mut no_http = Loaded::load(&no_http).unwrap();
    let c4 = Conn {
        dst: responsive4().into(),
        client: 7,
        server: 0,
        ts: false,
    };
    let c6 = Conn {
        dst: responsive6().into(),
        ..c4
    };
    for (src, c, served) in [
        ("198.19.255.2", c4, true),
        ("198.19.255.200", c4, true),
        ("198.19.255.254", c4, false), // the gateway, nx0 itself
        ("198.19.255.255", c4, false), // the link's broadcast
        ("198.19.255.0", c4, false),
        ("198.19.254.2", c4, false), // off the link
        ("2001:2:0:ffff::2", c6, true),
        ("2001:2:0:ffff::fe", c6, false), // the gateway
        ("2001:2:0:ffff::", c6, false),
        ("2001:2:0:fffe::2", c6, false),
    ] {
        let src: std::net::IpAddr = src.parse().unwrap();
        let mut syn = client_segment(&c, c.client, 0, SYN, &[]);
        syn.extend_from_slice(&[2, 4, 5, 0xb4]);
        syn[12] = 6 << 4;
        let syn = tcp_frame_from(src, c.dst, syn);
        let (action, reply) = prog.run(&syn).unwrap();
        assert_eq!(action, if served { XDP_TX } else { XDP_PASS }, "{src}");
        assert_eq!(
            no_http.run(&syn).unwrap().0,
            XDP_PASS,
            "{src} without --http"
        );
        if !served {
            continue;
        }
        let server = be32(&reply_l4(&syn, &reply)[4..]);
        let request = client_segment(&c, c.client + 1, server + 1, ACK | PSH, REQUEST);
        let request = tcp_frame_from(src, c.dst, request);
        let (action, reply) = prog.run(&request).unwrap();
        assert_eq!(action, XDP_TX, "{src}");
        let t = reply_l4(&request, &reply);
        assert_eq!(t[13], ACK | PSH | FIN, "{src}");
    }
}
