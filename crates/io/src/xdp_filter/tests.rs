//! The reply filter's tests: its configuration, and its verdicts on frames run through the
//! kernel (BPF_PROG_TEST_RUN), in a network namespace of their own.

use super::*;

#[test]
fn a_trailer_counts_only_with_the_mark() {
    let mark = 0x1122_3344_5566_7788u64;
    let mut frame = b"frame bytes".to_vec();
    frame.extend_from_slice(&mark.to_ne_bytes());
    frame.extend_from_slice(&42u64.to_ne_bytes());
    assert_eq!(take_stamp(&frame, mark), Some((&b"frame bytes"[..], 42)));
    assert_eq!(take_stamp(&frame, mark ^ 1), None, "another mark");
    assert_eq!(
        take_stamp(&frame[..15], mark),
        None,
        "shorter than a trailer"
    );
    assert_eq!(take_stamp(&[], mark), None);
    assert_eq!(take_stamp(&frame[11..], mark), Some((&[][..], 42)));
}

const XDP_PASS: u32 = 2;
const XDP_REDIRECT: u32 = 4;
const SCAN4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
const SCAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
const OTHER4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 2);
const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 2);
/// sonde's default source ports (`PortRange::DEFAULT` of sonde-craft).
const PORTS: (u16, u16) = (61000, 65535);
/// A port inside them, and one of Linux's ephemeral ports (32768–60999), outside.
const OURS: u16 = 62000;
const EPHEMERAL: u16 = 45000;
/// The identifier of sonde's echo requests, and another one (the host's ping's).
const ECHO_ID: u16 = 0x66f3;
const OTHER_ID: u16 = 0x1234;

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;

fn spec() -> FilterSpec {
    FilterSpec {
        ipv4: Some(SCAN4),
        ipv6: Some(SCAN6),
        tcp: TcpTake::SynAckOrRst,
        udp: true,
        icmp: true,
        icmp6: true,
        ports: PORTS,
        echo_id: Some(ECHO_ID),
        spare_host_sockets: true,
        stamp_arrivals: false,
    }
}

#[test]
fn config_layout_and_checks() {
    assert_eq!(std::mem::size_of::<FilterCfg>(), 40);
    let cfg = spec().to_cfg().unwrap();
    assert_eq!(cfg.stamp_mark, 0, "no stamps asked for");
    let stamping = FilterSpec {
        stamp_arrivals: true,
        ..spec()
    };
    let (a, b) = (stamping.to_cfg().unwrap(), stamping.to_cfg().unwrap());
    assert_eq!(a.protos & STAMP_ARRIVALS, STAMP_ARRIVALS);
    assert!(
        a.stamp_mark != 0 && a == b,
        "one mark: receivers of an interface share it"
    );
    assert_eq!(cfg.ipv4.to_ne_bytes(), [198, 19, 255, 1]);
    assert_eq!(cfg.protos, 0b110_1111);
    assert_eq!(
        (cfg.port_lo, cfg.port_hi, cfg.echo_id),
        (PORTS.0, PORTS.1, ECHO_ID)
    );
    let only_tcp4 = FilterSpec {
        ipv6: None,
        udp: false,
        icmp: false,
        icmp6: false,
        echo_id: None,
        spare_host_sockets: false,
        stamp_arrivals: false,
        ..spec()
    };
    let cfg = only_tcp4.to_cfg().unwrap();
    assert_eq!(
        (cfg.ipv6, cfg.protos, cfg.echo_id),
        ([0; 16], TAKE_TCP_SYNACK_RST, 0)
    );
    let all_tcp = FilterSpec {
        tcp: TcpTake::All,
        ..only_tcp4.clone()
    };
    assert_eq!(all_tcp.to_cfg().unwrap().protos, TAKE_TCP_ALL);
    let no_tcp = FilterSpec {
        tcp: TcpTake::None,
        ..spec()
    };
    assert_eq!(no_tcp.to_cfg().unwrap().protos, 0b110_1110);
    let bad = [
        FilterSpec {
            ipv4: None,
            ipv6: None,
            ..spec()
        },
        FilterSpec {
            ipv4: Some(Ipv4Addr::UNSPECIFIED),
            ..spec()
        },
        FilterSpec {
            ports: (2, 1),
            ..spec()
        },
        FilterSpec {
            ports: (2, 1),
            udp: false,
            tcp: TcpTake::All,
            ..spec()
        },
        FilterSpec {
            tcp: TcpTake::None,
            udp: false,
            icmp: false,
            icmp6: false,
            echo_id: None,
            ..spec()
        },
        FilterSpec {
            icmp: false,
            icmp6: false,
            ..spec()
        },
    ];
    for s in bad {
        assert!(s.to_cfg().is_err(), "{s:?}");
    }
}

// Frame builders: just the fields the filter reads; checksums do not matter to it.

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn tcp(dport: u16, flags: u8) -> Vec<u8> {
    let mut h = vec![0; 20];
    h[0..2].copy_from_slice(&80u16.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h[12] = 5 << 4;
    h[13] = flags;
    h
}

fn udp(dport: u16) -> Vec<u8> {
    let mut h = vec![0; 8];
    h[0..2].copy_from_slice(&53u16.to_be_bytes());
    h[2..4].copy_from_slice(&dport.to_be_bytes());
    h
}

fn udp_from(sport: u16, dport: u16) -> Vec<u8> {
    let mut h = udp(dport);
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h
}

/// A TCP segment from `sport` to `dport`.
fn tcp_from(sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut h = tcp(dport, flags);
    h[0..2].copy_from_slice(&sport.to_be_bytes());
    h
}

/// An echo message of ICMP(v6) `kind` with identifier `id`, and 8 bytes of data.
fn echo(kind: u8, id: u16) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8];
    m[4..6].copy_from_slice(&id.to_be_bytes());
    m
}

/// An ICMP(v6) error of `kind`/`code` quoting `quoted` (an IP packet).
fn error(kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    cat(&[&[kind, code, 0, 0, 0, 0, 0x05, 0x00], quoted])
}

/// The IPv4 packet from `src` to 198.18.0.7 carrying `payload` (no options).
fn ip4(src: Ipv4Addr, proto: u8, frag_off: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = v4(src, proto, 0, frag_off, payload).split_off(14);
    f[12..16].copy_from_slice(&src.octets());
    f[16..20].copy_from_slice(&[198, 18, 0, 7]);
    f
}

/// The IPv6 packet from `src` to 2001:2::7 with first next-header `next`.
fn ip6(src: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = v6(src, next, payload).split_off(14);
    f[8..24].copy_from_slice(&src.octets());
    f[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 7).octets());
    f
}

/// An ICMP message of `kind` as sonde's scans get it, if it takes that kind at all: an
/// echo reply with sonde's identifier, or an error quoting one of its UDP probes.
fn icmp4(kind: u8) -> Vec<u8> {
    match kind {
        0 => echo(0, ECHO_ID),
        _ => error(kind, 0, &ip4(SCAN4, 17, 0, &udp_from(OURS, 53))),
    }
}

/// The same in ICMPv6.
fn icmp6(kind: u8) -> Vec<u8> {
    match kind {
        129 => echo(129, ECHO_ID),
        _ => error(kind, 0, &ip6(SCAN6, 17, &udp_from(OURS, 53))),
    }
}

fn v4(dst: Ipv4Addr, proto: u8, options: usize, frag_off: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x0800);
    let ihl = 20 + options;
    let mut ip = vec![0; ihl];
    ip[0] = 0x40 | (ihl / 4) as u8;
    ip[2..4].copy_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&frag_off.to_be_bytes());
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&[198, 18, 0, 7]);
    ip[16..20].copy_from_slice(&dst.octets());
    for b in &mut ip[20..] {
        *b = 1; // NOP options
    }
    f.extend_from_slice(&ip);
    f.extend_from_slice(payload);
    f
}

/// An IPv6 frame whose first next-header is `next`; `payload` holds any extension headers.
fn v6(dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = eth(0x86dd);
    let mut ip = vec![0; 40];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    ip[6] = next;
    ip[7] = 64;
    ip[8..24].copy_from_slice(&Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 7).octets());
    ip[24..40].copy_from_slice(&dst.octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(payload);
    f
}

/// A hop-by-hop, routing or destination options header of `(units + 1) * 8` bytes.
fn opt_hdr(next: u8, units: u8) -> Vec<u8> {
    let mut h = vec![0; (usize::from(units) + 1) * 8];
    h[0] = next;
    h[1] = units;
    h[2] = 1; // a PadN option filling the rest
    h[3] = (h.len() - 4) as u8;
    h
}

/// A fragment header: offset in 8-octet units, `more` the M flag.
fn frag_hdr(next: u8, offset: u16, more: bool) -> Vec<u8> {
    let field = (offset << 3) | u16::from(more);
    let mut h = vec![next, 0, 0, 0, 0xab, 0xcd, 0xef, 0x01];
    h[2..4].copy_from_slice(&field.to_be_bytes());
    h
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub(crate) fn can_load() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: loading an XDP program needs root");
    }
    root
}

/// Runs `check` with the filter loaded from `spec` and an AF_XDP socket in `xsks_map` at
/// queue 0 (the queue a test run's frames come from), so a taken frame returns
/// XDP_REDIRECT instead of the XDP_PASS fallback. The socket is bound to `lo` of a network
/// namespace of its own, in a thread of its own, and no program is attached anywhere.
fn with_filter(spec: FilterSpec, check: impl FnOnce(&LoadedFilter) + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespaces (no other flags given).
        let ret = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(ret, 0, "unshare: {}", io::Error::last_os_error());
        let filter = LoadedFilter::load(&spec).unwrap();
        let mut cfg = crate::IoConfig::new("lo");
        cfg.xdp_mode = crate::XdpMode::Generic;
        let port =
            crate::xdp::XskPort::open(&cfg, 64, false, crate::xdp::Steering::Own { native: false })
                .unwrap();
        filter.add_socket(0, port.raw_fd()).unwrap();
        check(&filter);
    })
    .join()
    .unwrap();
}

/// Asserts the filter's verdict on a frame; `what` names the frame in a failure.
type Verdict<'a> = Box<dyn Fn(Vec<u8>, &str) + 'a>;

/// `(take, pass)`: `take(frame, what)` asserts the filter redirects `frame`,
/// `pass(frame, what)` that it leaves it to the OS stack.
fn judge(f: &LoadedFilter) -> (Verdict<'_>, Verdict<'_>) {
    let take = move |frame: Vec<u8>, what: &str| {
        assert_eq!(f.test_run(&frame).unwrap(), XDP_REDIRECT, "take {what}")
    };
    let pass = move |frame: Vec<u8>, what: &str| {
        assert_eq!(f.test_run(&frame).unwrap(), XDP_PASS, "pass {what}")
    };
    (Box::new(take), Box::new(pass))
}

/// With no AF_XDP socket on the frame's queue (while receivers open or close), a frame the
/// filter takes goes to the kernel instead (XDP_PASS): it must go as it came, not with the 16
/// bytes of the arrival stamp, which tcpdump and sonde's own ring capture recorded as if they
/// had been on the wire.
#[test]
fn a_frame_passed_for_want_of_a_socket_keeps_its_length() {
    if !can_load() {
        return;
    }
    let stamping = FilterSpec {
        stamp_arrivals: true,
        spare_host_sockets: false,
        ..spec()
    };
    let filter = LoadedFilter::load(&stamping).unwrap();
    for frame in [
        v4(SCAN4, 6, 0, 0, &tcp(OURS, SYN | ACK)),
        v6(SCAN6, 17, &udp(OURS)),
    ] {
        let (action, out) = filter.test_run_frame(&frame).unwrap();
        assert_eq!(action, XDP_PASS, "no socket: the kernel's");
        assert_eq!(
            out.len(),
            frame.len(),
            "the frame grew on its way to the kernel"
        );
        assert_eq!(out, frame);
    }
}

#[test]
fn takes_exactly_the_replies() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        let synack = SYN | ACK;
        // IPv4 TCP/UDP: address and both ends of the port range.
        take(v4(SCAN4, 6, 0, 0, &tcp(PORTS.0, synack)), "tcp lo");
        take(v4(SCAN4, 6, 0, 0, &tcp(PORTS.1, synack)), "tcp hi");
        take(v4(SCAN4, 17, 0, 0, &udp(OURS)), "udp");
        take(v4(SCAN4, 6, 12, 0, &tcp(OURS, synack)), "after IP options");
        pass(v4(SCAN4, 6, 0, 0, &tcp(PORTS.0 - 1, synack)), "below range");
        pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, synack)), "ephemeral");
        pass(v4(SCAN4, 6, 0, 0, &tcp(22, synack)), "tcp port 22");
        pass(v4(SCAN4, 17, 0, 0, &udp(EPHEMERAL)), "udp ephemeral");
        pass(v4(OTHER4, 6, 0, 0, &tcp(OURS, synack)), "other address");
        pass(v4(SCAN4, 47, 0, 0, &[0; 20]), "gre");
        // ICMP: replies and errors, not requests.
        for t in [0, 3, 4, 11, 12] {
            take(v4(SCAN4, 1, 0, 0, &icmp4(t)), &format!("icmp type {t}"));
        }
        for t in [8, 13, 5] {
            pass(v4(SCAN4, 1, 0, 0, &icmp4(t)), &format!("icmp type {t}"));
        }
        // IPv6.
        take(v6(SCAN6, 6, &tcp(OURS, synack)), "tcp6");
        take(v6(SCAN6, 17, &udp(PORTS.0)), "udp6");
        pass(v6(SCAN6, 17, &udp(1000)), "udp6 outside range");
        pass(v6(OTHER6, 6, &tcp(OURS, synack)), "tcp6 other address");
        for t in [1, 2, 3, 4, 129] {
            take(v6(SCAN6, 58, &icmp6(t)), &format!("icmp6 type {t}"));
        }
        for t in [128, 133, 134, 135, 136, 137, 143] {
            pass(v6(SCAN6, 58, &icmp6(t)), &format!("icmp6 type {t}"));
        }
        // ICMP of the wrong family is not taken.
        pass(v4(SCAN4, 58, 0, 0, &icmp6(129)), "icmp6 in ipv4");
        pass(v6(SCAN6, 1, &icmp4(0)), "icmp in ipv6");
        // Truncated and odd frames.
        let frame = v4(SCAN4, 6, 0, 0, &tcp(OURS, synack));
        pass(frame[..14 + 20 + 3].to_vec(), "truncated before the port");
        pass(frame[..14 + 20 + 13].to_vec(), "truncated before the flags");
        take(
            frame[..14 + 20 + 14].to_vec(),
            "flags present, rest missing",
        );
        pass(frame[..14 + 19].to_vec(), "truncated IPv4 header");
        let mut bad_ihl = frame.clone();
        bad_ihl[14] = 0x44;
        pass(bad_ihl, "IHL below 5");
        let mut long_ihl = frame.clone();
        long_ihl[14] = 0x4f;
        pass(long_ihl, "IHL beyond the frame");
        let mut not_v4 = frame.clone();
        not_v4[14] = 0x65;
        pass(not_v4, "version 6 in an IPv4 frame");
        pass(
            v6(SCAN6, 6, &tcp(OURS, synack))[..14 + 39].to_vec(),
            "truncated IPv6",
        );
        pass(eth(0x0806).into_iter().chain([0; 28]).collect(), "arp");
        let mut vlan = eth(0x8100);
        vlan.extend_from_slice(&frame[12..]);
        pass(vlan, "vlan-tagged");
    });
}

/// Every combination of TCP flags a segment of an ordinary connection carries, and whether
/// a SYN scan's filter takes it (only SYN-ACK and RST kinds).
const SEGMENTS: [(u8, &str, bool); 9] = [
    (SYN | ACK, "SYN-ACK", true),
    (RST, "RST", true),
    (RST | ACK, "RST-ACK", true),
    (SYN | ACK | PSH, "SYN-ACK-PSH", true),
    (SYN, "SYN", false),
    (ACK, "ACK", false),
    (PSH | ACK, "data", false),
    (FIN | ACK, "FIN-ACK", false),
    (0, "no flags", false),
];

#[test]
fn a_syn_scan_takes_only_synacks_and_resets() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        for (flags, what, taken) in SEGMENTS {
            let (frame4, frame6) = (
                v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)),
                v6(SCAN6, 6, &tcp(OURS, flags)),
            );
            if taken {
                take(frame4, what);
                take(frame6, what);
            } else {
                pass(frame4, what);
                pass(frame6, what);
            }
            // Outside the range nothing is taken, whatever the flags.
            pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, flags)), what);
        }
    });
}

#[test]
fn a_tcp_client_takes_every_segment_to_its_ports() {
    if !can_load() {
        return;
    }
    let all = FilterSpec {
        tcp: TcpTake::All,
        ..spec()
    };
    with_filter(all, |f| {
        let (take, pass) = judge(f);
        for (flags, what, _) in SEGMENTS {
            take(v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)), what);
            take(v6(SCAN6, 6, &tcp(OURS, flags)), what);
            pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, flags)), what);
            pass(v6(SCAN6, 6, &tcp(EPHEMERAL, flags)), what);
        }
        // The ports are enough: every segment to them is the client's.
        let frame = v4(SCAN4, 6, 0, 0, &tcp(OURS, ACK));
        take(frame[..14 + 20 + 4].to_vec(), "ports present, rest missing");
    });
    let none = FilterSpec {
        tcp: TcpTake::None,
        ..spec()
    };
    with_filter(none, |f| {
        let (take, pass) = judge(f);
        for (flags, what, _) in SEGMENTS {
            pass(v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)), what);
        }
        take(v4(SCAN4, 17, 0, 0, &udp(OURS)), "udp still");
    });
}

#[test]
fn ipv4_first_fragments_are_judged_later_ones_passed() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        const MF: u16 = 0x2000;
        let synack = tcp(OURS, SYN | ACK);
        take(v4(SCAN4, 6, 0, MF, &synack), "first fragment of a SYN-ACK");
        take(v4(SCAN4, 17, 0, MF, &udp(OURS)), "first fragment of UDP");
        take(
            v4(SCAN4, 1, 0, MF, &icmp4(3)),
            "first fragment of an ICMP error",
        );
        pass(
            v4(SCAN4, 6, 0, MF, &tcp(OURS, ACK)),
            "first fragment, not a reply",
        );
        pass(
            v4(SCAN4, 6, 0, MF, &tcp(EPHEMERAL, SYN | ACK)),
            "first, other port",
        );
        pass(v4(SCAN4, 6, 0, MF, &synack[..3]), "first, ports cut off");
        pass(v4(SCAN4, 6, 0, MF, &synack[..13]), "first, flags cut off");
        // A later fragment's payload is the middle of the datagram: even bytes that look
        // like a reply's header are not one.
        pass(v4(SCAN4, 6, 0, MF | 1, &synack), "middle fragment");
        pass(v4(SCAN4, 6, 0, 185, &synack), "last fragment");
        pass(v4(SCAN4, 17, 0, 0x1fff, &udp(OURS)), "largest offset");
        // DF alone is no fragment.
        take(v4(SCAN4, 6, 0, 0x4000, &synack), "don't fragment");
    });
}

#[test]
fn ipv6_extension_headers_are_walked() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        let (hop, routing, fragment, dest) = (0u8, 43u8, 44u8, 60u8);
        let synack = tcp(OURS, SYN | ACK);
        take(
            v6(SCAN6, hop, &cat(&[&opt_hdr(6, 0), &synack])),
            "hop-by-hop",
        );
        take(
            v6(
                SCAN6,
                dest,
                &cat(&[&opt_hdr(routing, 1), &opt_hdr(6, 2), &synack]),
            ),
            "destination options, routing",
        );
        take(
            v6(SCAN6, hop, &cat(&[&opt_hdr(58, 0), &icmp6(129)])),
            "hop-by-hop, echo reply",
        );
        pass(
            v6(SCAN6, hop, &cat(&[&opt_hdr(58, 0), &icmp6(143)])),
            "hop-by-hop, MLDv2 report",
        );
        pass(
            v6(SCAN6, hop, &cat(&[&opt_hdr(6, 0), &tcp(OURS, ACK)])),
            "hop-by-hop, ACK",
        );
        pass(
            v6(
                SCAN6,
                hop,
                &cat(&[&opt_hdr(6, 0), &tcp(EPHEMERAL, SYN | ACK)]),
            ),
            "hop-by-hop, other port",
        );
        // Fragments: the first (offset 0) is judged, later ones passed.
        take(
            v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 0, true), &synack])),
            "first fragment",
        );
        take(
            v6(SCAN6, fragment, &cat(&[&frag_hdr(17, 0, true), &udp(OURS)])),
            "first fragment of UDP",
        );
        take(
            v6(
                SCAN6,
                hop,
                &cat(&[&opt_hdr(fragment, 0), &frag_hdr(6, 0, true), &synack]),
            ),
            "hop-by-hop, first fragment",
        );
        pass(
            v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 1, true), &synack])),
            "middle fragment",
        );
        pass(
            v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 8191, false), &synack])),
            "last fragment",
        );
        // Six extension headers are walked, a seventh is one too many.
        let chain = |n: usize| {
            let mut payload = Vec::new();
            for i in 0..n {
                payload.extend(opt_hdr(if i + 1 == n { 6 } else { dest }, 0));
            }
            payload.extend_from_slice(&synack);
            v6(SCAN6, dest, &payload)
        };
        take(chain(6), "six extension headers");
        pass(chain(7), "seven extension headers");
        // Truncated and unknown headers.
        let frame = v6(SCAN6, hop, &cat(&[&opt_hdr(6, 1), &synack]));
        pass(frame[..14 + 40 + 1].to_vec(), "extension header cut off");
        pass(frame[..14 + 40 + 16 + 3].to_vec(), "ports cut off after it");
        let mut overlong = opt_hdr(6, 0);
        overlong[1] = 200;
        pass(
            v6(SCAN6, hop, &cat(&[&overlong, &synack])),
            "extension header longer than the frame",
        );
        pass(
            v6(SCAN6, fragment, &frag_hdr(6, 0, true)[..7]),
            "fragment header cut off",
        );
        pass(v6(SCAN6, 51, &cat(&[&opt_hdr(6, 1), &synack])), "AH");
        pass(v6(SCAN6, 59, &synack), "no next header");
        pass(
            v6(OTHER6, hop, &cat(&[&opt_hdr(6, 0), &synack])),
            "other address",
        );
    });
}

#[test]
fn takes_only_the_protocols_and_families_asked_for() {
    if !can_load() {
        return;
    }
    let tcp4 = FilterSpec {
        ipv6: None,
        udp: false,
        icmp: false,
        icmp6: false,
        echo_id: None,
        ..spec()
    };
    with_filter(tcp4, |f| {
        let run = |frame: Vec<u8>| f.test_run(&frame).unwrap();
        assert_eq!(run(v4(SCAN4, 6, 0, 0, &tcp(OURS, RST))), XDP_REDIRECT);
        assert_eq!(run(v4(SCAN4, 17, 0, 0, &udp(OURS))), XDP_PASS);
        assert_eq!(run(v4(SCAN4, 1, 0, 0, &icmp4(0))), XDP_PASS);
        assert_eq!(run(v6(SCAN6, 6, &tcp(OURS, RST))), XDP_PASS);
    });
    let only_icmp6 = FilterSpec {
        ipv4: None,
        tcp: TcpTake::None,
        udp: false,
        icmp: false,
        ..spec()
    };
    with_filter(only_icmp6, |f| {
        let run = |frame: Vec<u8>| f.test_run(&frame).unwrap();
        assert_eq!(run(v6(SCAN6, 58, &icmp6(129))), XDP_REDIRECT);
        assert_eq!(run(v6(SCAN6, 6, &tcp(OURS, RST))), XDP_PASS);
        assert_eq!(run(v4(SCAN4, 1, 0, 0, &icmp4(0))), XDP_PASS);
    });
}

/// The filter of a scan that takes no TCP (udp, dns, icmp_echo).
fn udp_scan() -> FilterSpec {
    FilterSpec {
        tcp: TcpTake::None,
        ..spec()
    }
}

#[test]
fn icmp_is_taken_only_about_sondes_probes() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        let icmp = |m: Vec<u8>| v4(SCAN4, 1, 0, 0, &m);
        // Echo replies: sonde's identifier only; the host's ping has another.
        take(icmp(echo(0, ECHO_ID)), "echo reply, sonde's id");
        pass(icmp(echo(0, OTHER_ID)), "echo reply, the host's ping");
        pass(icmp(echo(0, ECHO_ID)[..6].to_vec()), "echo reply cut short");
        // Errors quoting one of sonde's probes: UDP or TCP from its address and ports,
        // or its echo request.
        let probe_udp = ip4(SCAN4, 17, 0, &udp_from(OURS, 53));
        let probe_tcp = ip4(SCAN4, 6, 0x4000, &tcp_from(OURS, 80, SYN));
        let probe_echo = ip4(SCAN4, 1, 0, &echo(8, ECHO_ID));
        for (kind, code) in [(3, 3), (3, 4), (3, 1), (11, 0), (12, 0), (4, 0)] {
            let what = format!("type {kind} code {code}");
            take(
                icmp(error(kind, code, &probe_udp)),
                &format!("{what}, udp probe"),
            );
            take(
                icmp(error(kind, code, &probe_tcp)),
                &format!("{what}, tcp probe"),
            );
            take(
                icmp(error(kind, code, &probe_echo)),
                &format!("{what}, echo"),
            );
        }
        // Fragmentation needed for the host's own TCP (path-MTU discovery) and errors
        // about the host's other traffic go to the OS.
        let frag_needed = |quoted: &[u8]| icmp(error(3, 4, quoted));
        let host_tcp = ip4(SCAN4, 6, 0x4000, &tcp_from(EPHEMERAL, 22, ACK));
        pass(frag_needed(&host_tcp), "frag needed, host's TCP");
        pass(
            frag_needed(&ip4(SCAN4, 17, 0, &udp_from(EPHEMERAL, 53))),
            "host's UDP",
        );
        pass(
            frag_needed(&ip4(SCAN4, 17, 0, &udp_from(PORTS.0 - 1, 53))),
            "below range",
        );
        pass(
            frag_needed(&ip4(OTHER4, 17, 0, &udp_from(OURS, 53))),
            "other source",
        );
        pass(
            frag_needed(&ip4(SCAN4, 1, 0, &echo(8, OTHER_ID))),
            "host's ping",
        );
        pass(
            frag_needed(&ip4(SCAN4, 1, 0, &echo(0, ECHO_ID))),
            "a quoted reply",
        );
        pass(frag_needed(&ip4(SCAN4, 47, 0, &[0; 8])), "quoting gre");
        // Quotes that cannot be judged are passed: a later fragment, cut before the
        // ports, no IP header, a bad one.
        pass(
            frag_needed(&ip4(SCAN4, 17, 3, &udp_from(OURS, 53))),
            "later fragment",
        );
        pass(frag_needed(&probe_udp[..20 + 1]), "ports cut off");
        pass(frag_needed(&probe_udp[..19]), "header cut off");
        let mut v6_in_v4 = probe_udp.clone();
        v6_in_v4[0] = 0x65;
        pass(frag_needed(&v6_in_v4), "version 6 quoted in ICMP");
        let mut long_ihl = probe_udp.clone();
        long_ihl[0] = 0x4f;
        pass(frag_needed(&long_ihl), "quoted IHL beyond the frame");
        let with_options = cat(&[&v4(SCAN4, 17, 8, 0, &[])[14..], &udp_from(OURS, 53)]);
        let mut with_options = with_options;
        with_options[12..16].copy_from_slice(&SCAN4.octets());
        take(frag_needed(&with_options), "quoted probe after IP options");
    });
    // A scan that takes no TCP takes no error about TCP, and one without an echo
    // identifier no echo reply.
    let no_echo = FilterSpec {
        echo_id: None,
        ..udp_scan()
    };
    with_filter(no_echo, |f| {
        let (take, pass) = judge(f);
        let probe_tcp = ip4(SCAN4, 6, 0, &tcp_from(OURS, 80, SYN));
        pass(
            v4(SCAN4, 1, 0, 0, &error(3, 3, &probe_tcp)),
            "error about tcp",
        );
        take(v4(SCAN4, 1, 0, 0, &icmp4(3)), "error about udp");
        pass(
            v4(SCAN4, 1, 0, 0, &echo(0, ECHO_ID)),
            "no echo id: no reply",
        );
        pass(
            v6(SCAN6, 58, &echo(129, ECHO_ID)),
            "no echo id: no reply (v6)",
        );
        let probe_echo = ip4(SCAN4, 1, 0, &echo(8, ECHO_ID));
        pass(
            v4(SCAN4, 1, 0, 0, &error(11, 0, &probe_echo)),
            "no echo id: no error",
        );
    });
}

#[test]
fn icmpv6_is_taken_only_about_sondes_probes() {
    if !can_load() {
        return;
    }
    with_filter(spec(), |f| {
        let (take, pass) = judge(f);
        let icmp = |m: Vec<u8>| v6(SCAN6, 58, &m);
        take(icmp(echo(129, ECHO_ID)), "echo reply, sonde's id");
        pass(icmp(echo(129, OTHER_ID)), "echo reply, the host's ping");
        let probe_udp = ip6(SCAN6, 17, &udp_from(OURS, 53));
        let probe_tcp = ip6(SCAN6, 6, &tcp_from(OURS, 80, SYN));
        let probe_echo = ip6(SCAN6, 58, &echo(128, ECHO_ID));
        for kind in 1..=4 {
            take(
                icmp(error(kind, 0, &probe_udp)),
                &format!("type {kind}, udp probe"),
            );
            take(
                icmp(error(kind, 0, &probe_tcp)),
                &format!("type {kind}, tcp probe"),
            );
            take(
                icmp(error(kind, 0, &probe_echo)),
                &format!("type {kind}, echo"),
            );
        }
        // Packet too big for the host's TCP, and the rest of the host's traffic.
        let too_big = |quoted: &[u8]| icmp(error(2, 0, quoted));
        pass(
            too_big(&ip6(SCAN6, 6, &tcp_from(EPHEMERAL, 22, ACK))),
            "host's TCP",
        );
        pass(
            too_big(&ip6(SCAN6, 17, &udp_from(EPHEMERAL, 53))),
            "host's UDP",
        );
        pass(
            too_big(&ip6(OTHER6, 17, &udp_from(OURS, 53))),
            "other source",
        );
        pass(
            too_big(&ip6(SCAN6, 58, &echo(128, OTHER_ID))),
            "host's ping",
        );
        pass(
            too_big(&ip6(SCAN6, 58, &echo(129, ECHO_ID))),
            "a quoted reply",
        );
        // sonde's probes carry no extension header.
        let with_ext = ip6(SCAN6, 60, &cat(&[&opt_hdr(17, 0), &udp_from(OURS, 53)]));
        pass(too_big(&with_ext), "quote with an extension header");
        pass(too_big(&probe_udp[..40 + 1]), "ports cut off");
        pass(too_big(&probe_udp[..39]), "header cut off");
        let mut v4_in_v6 = probe_udp.clone();
        v4_in_v6[0] = 0x45;
        pass(too_big(&v4_in_v6), "version 4 quoted in ICMPv6");
    });
}

/// Ports in sonde's range that sockets of the host own in these tests, and one nobody owns.
const BOUND4: u16 = 62100;
const BOUND6: u16 = 62110;
const CONNECTED: u16 = 62120;
const LISTENING: u16 = 62130;
const CLOSED: u16 = 62160;

/// Puts the tests' addresses on `lo` (of the test's own namespace) so sockets can use them:
/// ours, and the remote end the frame builders use, which connections to it leave from
/// ours (the preferred source of its local route).
fn lab_addresses_on_lo() {
    let ip = |args: &str| {
        let ok = std::process::Command::new("ip")
            .args(args.split(' '))
            .status()
            .expect("running ip");
        assert!(ok.success(), "ip {args}");
    };
    ip("link set dev lo up");
    ip("-4 addr add 198.19.255.1/32 dev lo");
    ip("-4 addr add 198.18.0.7/32 dev lo");
    ip("-6 addr add 2001:2:0:ffff::1/128 dev lo nodad");
    ip("-6 addr add 2001:2::7/128 dev lo nodad");
    for (family, remote, ours) in [
        ("-4", "198.18.0.7", "198.19.255.1"),
        ("-6", "2001:2::7", "2001:2:0:ffff::1"),
    ] {
        ip(&format!(
            "{family} route del local {remote} dev lo table local"
        ));
        ip(&format!(
            "{family} route add local {remote} dev lo table local src {ours}"
        ));
    }
}

/// Waits (up to two seconds) until this thread's namespace has a TCP socket on local port
/// `port` in TIME-WAIT.
fn wait_time_wait(port: u16) -> bool {
    let end = std::time::Instant::now() + Duration::from_secs(2);
    let needle = format!(":{port:04X} ");
    while std::time::Instant::now() < end {
        let table = std::fs::read_to_string("/proc/thread-self/net/tcp").unwrap();
        let time_wait = table.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "06"
        });
        if time_wait {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// TCP and UDP to a port of sonde's range that a socket of the host owns go to the OS (the
/// kernel is asked in the interface's namespace; for a test run, the caller's), and so do
/// the ICMP errors about them; the same frames to ports nobody owns are taken.
#[test]
fn the_hosts_own_sockets_keep_their_traffic() {
    use std::net::{TcpListener, TcpStream, UdpSocket};
    if !can_load() {
        return;
    }
    let grab = FilterSpec {
        tcp: TcpTake::All,
        ports: (1024, 65535),
        ..spec()
    };
    with_filter(grab, |f| {
        let (take, pass) = judge(f);
        lab_addresses_on_lo();
        let remote4 = Ipv4Addr::new(198, 18, 0, 7);
        let remote6 = Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 7);

        // UDP: a bound socket (an application's, a resolver's), IPv4 and dual-stack.
        let _udp4 = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, BOUND4)).unwrap();
        let _udp6 = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, BOUND6)).unwrap();
        pass(v4(SCAN4, 17, 0, 0, &udp(BOUND4)), "udp to a bound port");
        pass(v6(SCAN6, 17, &udp(BOUND6)), "udp6 to a bound port");
        pass(
            v4(SCAN4, 17, 0, 0, &udp(BOUND6)),
            "udp to a dual-stack port",
        );
        take(v4(SCAN4, 17, 0, 0, &udp(BOUND4 + 1)), "udp to a free port");
        take(
            v6(SCAN6, 17, &udp(BOUND4)),
            "udp6 to a port bound in IPv4 only",
        );
        // A connected socket owns only its peer's datagrams.
        let connected = UdpSocket::bind((SCAN4, CONNECTED)).unwrap();
        connected.connect((remote4, 53)).unwrap();
        pass(
            v4(SCAN4, 17, 0, 0, &udp(CONNECTED)),
            "udp from the connected peer",
        );
        let stranger = udp_from(5353, CONNECTED);
        take(v4(SCAN4, 17, 0, 0, &stranger), "udp from another port");

        // TCP: a listener in the range (an incoming SYN is the host's), a connection in
        // both families, one in TIME-WAIT; nothing at all on CLOSED. (The connections
        // are from ephemeral ports, which this filter's range covers.)
        let _listener = TcpListener::bind((Ipv6Addr::UNSPECIFIED, LISTENING)).unwrap();
        pass(
            v4(SCAN4, 6, 0, 0, &tcp(LISTENING, SYN)),
            "SYN to a host listener",
        );
        pass(
            v6(SCAN6, 6, &tcp(LISTENING, SYN)),
            "SYN6 to a dual-stack listener",
        );
        take(v4(SCAN4, 6, 0, 0, &tcp(CLOSED, SYN)), "SYN to no listener");
        let server4 = TcpListener::bind((remote4, 80)).unwrap();
        let server6 = TcpListener::bind((remote6, 80)).unwrap();
        let client4 = TcpStream::connect((remote4, 80)).unwrap();
        let client6 = TcpStream::connect((remote6, 80)).unwrap();
        let (port4, port6) = (
            client4.local_addr().unwrap().port(),
            client6.local_addr().unwrap().port(),
        );
        assert_eq!(client4.local_addr().unwrap().ip(), SCAN4);
        assert_eq!(client6.local_addr().unwrap().ip(), SCAN6);
        let (accepted4, _) = server4.accept().unwrap();
        let (_accepted6, _) = server6.accept().unwrap();
        for flags in [ACK, PSH | ACK, SYN | ACK, RST] {
            let what = format!("flags {flags:#04x} of a host connection");
            pass(v4(SCAN4, 6, 0, 0, &tcp(port4, flags)), &what);
            pass(v6(SCAN6, 6, &tcp(port6, flags)), &what);
            take(v4(SCAN4, 6, 0, 0, &tcp(CLOSED, flags)), "no connection");
        }
        // ICMP errors about the host's flows in the range go to the OS too.
        let frag_needed = |quoted: &[u8]| v4(SCAN4, 1, 0, 0, &error(3, 4, quoted));
        let too_big = |quoted: &[u8]| v6(SCAN6, 58, &error(2, 0, quoted));
        let seg4 = ip4(SCAN4, 6, 0x4000, &tcp_from(port4, 80, ACK));
        let seg6 = ip6(SCAN6, 6, &tcp_from(port6, 80, ACK));
        pass(frag_needed(&seg4), "frag needed for a host connection");
        pass(too_big(&seg6), "packet too big for a host connection");
        take(
            frag_needed(&ip4(SCAN4, 6, 0, &tcp_from(CLOSED, 80, SYN))),
            "a probe's",
        );
        take(
            too_big(&ip6(SCAN6, 6, &tcp_from(CLOSED, 80, SYN))),
            "a probe's (v6)",
        );
        pass(
            frag_needed(&ip4(SCAN4, 17, 0, &udp_from(BOUND4, 53))),
            "unreachable about a bound UDP port",
        );
        take(
            frag_needed(&ip4(SCAN4, 17, 0, &udp_from(CLOSED, 53))),
            "a udp probe's",
        );

        // The client closes first and waits in TIME-WAIT: still the host's.
        drop(client4);
        drop(accepted4);
        assert!(wait_time_wait(port4), "no TIME-WAIT on port {port4}");
        pass(v4(SCAN4, 6, 0, 0, &tcp(port4, FIN | ACK)), "TIME-WAIT");
        drop(client6);
    });
    // Without spare_host_sockets (a receiver holding its own port) the lookup is skipped.
    let holding = FilterSpec {
        spare_host_sockets: false,
        stamp_arrivals: false,
        ..spec()
    };
    with_filter(holding, |f| {
        let (take, _) = judge(f);
        let _udp = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, BOUND4)).unwrap();
        take(
            v4(SCAN4, 17, 0, 0, &udp(BOUND4)),
            "udp to its own held port",
        );
    });
}
