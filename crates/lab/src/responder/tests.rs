//! The XDP responder run on frames with BPF_PROG_TEST_RUN: its answers are checked field by
//! field (with sonde-wire's checksums), its choice of who answers against truth.rs, and
//! truncated and mangled frames must never make it send a reply whose checksums are wrong.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use sonde_wire::checksum::{checksum, fold, pseudo_header_v4, pseudo_header_v6, sum};

use super::{Loaded, ResponderSpec, SynAckWindows};
use crate::config::{SCAN_IP, SCAN_IP6};
use crate::truth::{Population, Population6};

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;

const LAB_MAC: [u8; 6] = [0x02, 0, 0xc6, 0x13, 0xff, 0xfe];
const SCAN_MAC: [u8; 6] = [0x02, 0, 0xc6, 0x13, 0xff, 0x01];
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

fn spec() -> ResponderSpec {
    ResponderSpec {
        pop: pop(),
        pop6: Some(pop6()),
        open: vec![OPEN, 443],
        dns: true,
        mac: LAB_MAC,
        windows: windows(),
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

fn can_load() -> bool {
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

fn eth(proto: u16) -> Vec<u8> {
    [&LAB_MAC[..], &SCAN_MAC[..], &proto.to_be_bytes()].concat()
}

fn ipv4(dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
    ip[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    ip.extend(SCAN_IP.octets());
    ip.extend(dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    [eth(0x0800), ip, l4.to_vec()].concat()
}

fn ipv6(dst: Ipv6Addr, next: u8, l4: &[u8]) -> Vec<u8> {
    let mut ip = vec![0x60, 0, 0, 0, 0, 0, next, 64];
    ip[4..6].copy_from_slice(&(l4.len() as u16).to_be_bytes());
    ip.extend(SCAN_IP6.octets());
    ip.extend(dst.octets());
    [eth(0x86dd), ip, l4.to_vec()].concat()
}

/// Fills in the transport checksum at `at` of `l4`, over the pseudo-header sum `pseudo`.
fn with_checksum(mut l4: Vec<u8>, at: usize, pseudo: u32) -> Vec<u8> {
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
