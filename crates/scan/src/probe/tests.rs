//! The probe tests, written once and run for both families (`for_both_families!`): probes are
//! well formed, genuine replies validate, forged ones do not, and fragments, extension headers
//! and custom source ports are handled. Every frame goes through the public [`Probe`] API, and
//! the kernel filter is checked against the same frames with libpcap.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sonde_wire::{ethernet, icmpv4, icmpv6, ipv4, ipv6, tcp, udp, IpProtocol, TcpFlags};

use super::family::{Family, ICMP_HEADER_LEN, IP_AT, V4, V6};
use super::*;

const SENT_AT: u32 = 1_000_000;
const NOW: u32 = 1_000_250;

/// What the tests need of a family beyond what the probes use.
trait TestFamily: Family {
    const IS_V6: bool;
    const ECHO_REQUEST: u8;
    const OURS: Self::Addr;
    const TARGET: Self::Addr;
    const ROUTER: Self::Addr;
    /// The identification our test answers carry, as the reply reports it (IPv6 has none).
    const ANSWER_IPID: u16;
    const PORT_UNREACHABLE: u8;
    const PARAM_PROBLEM: u8;
    /// An address from 128 bits (their low 32 for IPv4).
    fn addr(bits: u128) -> Self::Addr;
    /// `setup` with our address of this family as its only source.
    fn only_source(setup: ProbeSetup, ours: Self::Addr) -> ProbeSetup;
    /// The IP packet from `src` to us carrying `l4` of `protocol`; `fragment`: (offset, more).
    fn ip_packet(
        src: Self::Addr,
        protocol: IpProtocol,
        l4: &[u8],
        fragment: Option<(u16, bool)>,
    ) -> Vec<u8>;
    /// Checks the IP header of a probe we sent to `target` and returns the IP packet.
    fn check_sent(ip: &[u8], target: Self::Addr, protocol: IpProtocol) -> Vec<u8>;
    /// What a router quotes of a packet we sent: IPv4's header and 8 bytes, IPv6's all of it.
    fn quote(ip: &[u8]) -> &[u8];
    fn fill_icmp_checksum(msg: &mut [u8], src: Self::Addr, dst: Self::Addr);
    fn icmp_checksum_ok(msg: &[u8], src: Self::Addr, dst: Self::Addr) -> bool;
}

impl TestFamily for V4 {
    const IS_V6: bool = false;
    const ECHO_REQUEST: u8 = 8;
    const OURS: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
    const TARGET: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 9);
    const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const ANSWER_IPID: u16 = 7;
    const PORT_UNREACHABLE: u8 = 3;
    const PARAM_PROBLEM: u8 = 12;

    fn addr(bits: u128) -> Ipv4Addr {
        Ipv4Addr::from(bits as u32)
    }

    fn only_source(setup: ProbeSetup, ours: Ipv4Addr) -> ProbeSetup {
        ProbeSetup {
            src_ip: Some(ours),
            src_ip6: None,
            ..setup
        }
    }

    fn ip_packet(
        src: Ipv4Addr,
        protocol: IpProtocol,
        l4: &[u8],
        fragment: Option<(u16, bool)>,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; ipv4::HEADER_LEN + l4.len()];
        buf[ipv4::HEADER_LEN..].copy_from_slice(l4);
        let r = ipv4::Repr {
            src_addr: src,
            dst_addr: V4::OURS,
            protocol,
            payload_len: l4.len(),
            ttl: 61,
            ident: 7,
            dont_frag: fragment.is_none(),
        };
        let mut packet = ipv4::Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut packet);
        if let Some((offset, more)) = fragment {
            packet.set_frag_offset(offset);
            packet.set_more_frags(more);
            packet.fill_checksum();
        }
        buf
    }

    fn check_sent(ip: &[u8], target: Ipv4Addr, protocol: IpProtocol) -> Vec<u8> {
        let packet = ipv4::Packet::new_checked(ip).unwrap();
        assert!(packet.verify_checksum(), "IPv4 header checksum to {target}");
        assert_eq!(
            (
                packet.src_addr(),
                packet.dst_addr(),
                packet.ttl(),
                packet.protocol()
            ),
            (V4::OURS, target, 64, protocol)
        );
        ip[..usize::from(packet.total_len())].to_vec()
    }

    fn quote(ip: &[u8]) -> &[u8] {
        &ip[..ipv4::HEADER_LEN + 8]
    }

    fn fill_icmp_checksum(msg: &mut [u8], _src: Ipv4Addr, _dst: Ipv4Addr) {
        icmpv4::Packet::new_unchecked(msg).fill_checksum();
    }

    fn icmp_checksum_ok(msg: &[u8], _src: Ipv4Addr, _dst: Ipv4Addr) -> bool {
        icmpv4::Packet::new_checked(msg).unwrap().verify_checksum()
    }
}

impl TestFamily for V6 {
    const IS_V6: bool = true;
    const ECHO_REQUEST: u8 = 128;
    const OURS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
    const TARGET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 9, 0xfedc, 0xba98, 0x7654, 0x3210);
    const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
    const ANSWER_IPID: u16 = 0;
    const PORT_UNREACHABLE: u8 = 4;
    const PARAM_PROBLEM: u8 = 4;

    fn addr(bits: u128) -> Ipv6Addr {
        Ipv6Addr::from(bits)
    }

    fn only_source(setup: ProbeSetup, ours: Ipv6Addr) -> ProbeSetup {
        ProbeSetup {
            src_ip: None,
            src_ip6: Some(ours),
            ..setup
        }
    }

    /// A fragment carries a fragment header (ident 0x5eed) before `l4`.
    fn ip_packet(
        src: Ipv6Addr,
        protocol: IpProtocol,
        l4: &[u8],
        fragment: Option<(u16, bool)>,
    ) -> Vec<u8> {
        let mut payload = Vec::new();
        let mut next_header = protocol;
        if let Some((offset, more)) = fragment {
            let word = offset | u16::from(more);
            payload.extend_from_slice(&[protocol.0, 0]);
            payload.extend_from_slice(&word.to_be_bytes());
            payload.extend_from_slice(&0x5eedu32.to_be_bytes());
            next_header = IpProtocol::IPV6_FRAG;
        }
        payload.extend_from_slice(l4);
        with_v6_header(src, next_header, &payload)
    }

    fn check_sent(ip: &[u8], target: Ipv6Addr, protocol: IpProtocol) -> Vec<u8> {
        let packet = ipv6::Packet::new_checked(ip).unwrap();
        assert_eq!(
            (
                packet.src_addr(),
                packet.dst_addr(),
                packet.hop_limit(),
                packet.next_header()
            ),
            (V6::OURS, target, 64, protocol)
        );
        ip[..ipv6::HEADER_LEN + usize::from(packet.payload_len())].to_vec()
    }

    fn quote(ip: &[u8]) -> &[u8] {
        ip
    }

    fn fill_icmp_checksum(msg: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) {
        icmpv6::Packet::new_unchecked(msg).fill_checksum(&src, &dst);
    }

    fn icmp_checksum_ok(msg: &[u8], src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        icmpv6::Packet::new_checked(msg)
            .unwrap()
            .verify_checksum(&src, &dst)
    }
}

/// An IPv6 packet from `src` to us: the fixed header, then `payload` as is.
fn with_v6_header(src: Ipv6Addr, next_header: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ipv6::HEADER_LEN + payload.len()];
    buf[ipv6::HEADER_LEN..].copy_from_slice(payload);
    let r = ipv6::Repr {
        src_addr: src,
        dst_addr: V6::OURS,
        next_header,
        payload_len: payload.len(),
        hop_limit: 61,
        traffic_class: 0,
        flow_label: 0,
    };
    r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
    buf
}

/// Runs the generic test `name` once per family.
macro_rules! for_both_families {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn ipv4() {
                super::$name::<super::V4>();
            }
            #[test]
            fn ipv6() {
                super::$name::<super::V6>();
            }
        }
    )*};
}

fn base_setup() -> ProbeSetup {
    ProbeSetup {
        src_mac: "02:00:00:00:00:01".parse().unwrap(),
        dst_mac: "02:00:00:00:00:02".parse().unwrap(),
        src_ip: None,
        src_ip6: None,
        validator: Validator::from_seed(42),
        ports: PortRange::DEFAULT,
        ttl: 64,
    }
}

fn setup<F: TestFamily>() -> ProbeSetup {
    F::only_source(base_setup(), F::OURS)
}

fn options() -> ModuleOptions {
    ModuleOptions {
        payload: b"hello".to_vec(),
        dns_name: "example.com".into(),
        dns_type: 1,
    }
}

fn probe_with(kind: ModuleKind, setup: &ProbeSetup) -> Probe {
    Probe::build(kind, setup, &options()).unwrap()
}

fn module<F: TestFamily>(kind: ModuleKind) -> Probe {
    probe_with(kind, &setup::<F>())
}

/// The same module under another scan's key.
fn other_key<F: TestFamily>(kind: ModuleKind) -> Probe {
    let setup = ProbeSetup {
        validator: Validator::from_seed(43),
        ..setup::<F>()
    };
    probe_with(kind, &setup)
}

/// The Ethernet frame carrying `ip` to us.
fn frame<F: Family>(ip: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ethernet::HEADER_LEN + ip.len()];
    let eth = ethernet::Repr {
        src_addr: "02:00:00:00:00:02".parse().unwrap(),
        dst_addr: "02:00:00:00:00:01".parse().unwrap(),
        ethertype: F::ETHERTYPE,
    };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut buf[..]));
    buf[ethernet::HEADER_LEN..].copy_from_slice(ip);
    buf
}

/// The frame of the IP packet from `src` to us carrying `l4`.
fn answer<F: TestFamily>(src: F::Addr, protocol: IpProtocol, l4: &[u8]) -> Vec<u8> {
    frame::<F>(&F::ip_packet(src, protocol, l4, None))
}

fn classify(p: &Probe, frame: &[u8]) -> Verdict {
    p.classify(frame, NOW)
}

fn is_invalid(p: &Probe, frame: &[u8]) -> bool {
    matches!(classify(p, frame), Verdict::Invalid)
}

fn sent_to<F: Family>(p: &Probe, target: F::Addr, port: u16) -> Vec<u8> {
    let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
    let n = p.write(&mut buf, target.into(), port, SENT_AT);
    assert!(n > 0 && n <= p.frame_len(), "{n} bytes");
    buf.truncate(n);
    buf
}

/// The probe to TARGET:`port` as sent, its Ethernet and IP headers checked: the IP packet.
fn sent<F: TestFamily>(p: &Probe, port: u16, protocol: IpProtocol) -> Vec<u8> {
    let frame = sent_to::<F>(p, F::TARGET, port);
    assert_eq!(frame.len(), p.frame_len());
    assert!(frame.len() >= sonde_craft::MIN_FRAME);
    let eth = ethernet::Frame::new_checked(&frame[..]).unwrap();
    assert_eq!(eth.ethertype(), F::ETHERTYPE);
    F::check_sent(eth.payload(), F::TARGET, protocol)
}

/// Offset of the transport header in the IP packets the probes send.
fn l4_at<F: Family>() -> usize {
    F::L4_AT - IP_AT
}

/// An ICMP error from `src` of `kind`/`code` quoting `quoted`.
fn icmp_error<F: TestFamily>(src: F::Addr, kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut msg = vec![kind, code, 0, 0, 0, 0, 0, 0];
    msg.extend_from_slice(quoted);
    F::fill_icmp_checksum(&mut msg, src, F::OURS);
    answer::<F>(src, F::ICMP, &msg)
}

/// Whether the probe's kernel filter (compiled by libpcap) lets `frame` through.
fn filter_passes(p: &Probe, frame: &[u8]) -> bool {
    let program = pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .unwrap()
        .compile(&p.bpf_filter(), true)
        .unwrap_or_else(|e| panic!("{}: {e}", p.bpf_filter()));
    program.filter(frame)
}

/// A genuine reply must validate and pass the kernel filter.
fn valid(p: &Probe, frame: &[u8]) -> Reply {
    assert!(filter_passes(p, frame), "the filter drops a reply");
    match classify(p, frame) {
        Verdict::Valid(r) => r,
        other => panic!("genuine reply classified {other:?}"),
    }
}

// ---- tcp_syn ---------------------------------------------------------------------------------

const ANSWER_MSS: u16 = 1440;

fn tcp_answer<F: TestFamily>(sport: u16, dport: u16, ack: u32, flags: TcpFlags) -> Vec<u8> {
    answer::<F>(
        F::TARGET,
        IpProtocol::TCP,
        &tcp_segment::<F>(sport, dport, ack, flags),
    )
}

fn tcp_segment<F: TestFamily>(sport: u16, dport: u16, ack: u32, flags: TcpFlags) -> Vec<u8> {
    let repr = tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 77,
        ack_number: Some(ack),
        flags,
        window_len: 64240,
        window_scale: Some(7),
        max_seg_size: Some(ANSWER_MSS),
        sack_permitted: true,
        sack_ranges: [None; 3],
        timestamp: Some((5555, SENT_AT)),
        payload_len: 0,
    };
    let mut seg = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut tcp::Packet::new_unchecked(&mut seg[..]),
        &F::pair(F::TARGET, F::OURS),
    );
    seg
}

/// The genuine SYN-ACK segment to the probe's SYN to TARGET:80, and its frame.
fn synack_segment<F: TestFamily>(p: &Probe) -> Vec<u8> {
    let (sport, seq) = syn_sent::<F>(p);
    tcp_segment::<F>(
        80,
        sport,
        seq.wrapping_add(1),
        TcpFlags::SYN | TcpFlags::ACK,
    )
}

fn synack_to<F: TestFamily>(p: &Probe) -> Vec<u8> {
    answer::<F>(F::TARGET, IpProtocol::TCP, &synack_segment::<F>(p))
}

/// The SYN to TARGET:80, checksum verified: its source port and sequence number.
fn syn_sent<F: TestFamily>(p: &Probe) -> (u16, u32) {
    let ip = sent::<F>(p, 80, IpProtocol::TCP);
    let seg = tcp::Packet::new_checked(&ip[l4_at::<F>()..]).unwrap();
    assert!(seg.verify_checksum(&F::pair(F::OURS, F::TARGET)));
    assert_eq!((seg.dst_port(), seg.flags()), (80, TcpFlags::SYN));
    (seg.src_port(), seg.seq_number())
}

fn syn_probe_is_well_formed_and_its_synack_validates<F: TestFamily>() {
    let m = module::<F>(ModuleKind::TcpSyn);
    let (sport, seq) = syn_sent::<F>(&m);
    let synack = tcp_answer::<F>(
        80,
        sport,
        seq.wrapping_add(1),
        TcpFlags::SYN | TcpFlags::ACK,
    );
    let r = valid(&m, &synack);
    assert_eq!(
        (
            r.saddr,
            r.daddr,
            r.sport,
            r.dport,
            r.classification,
            r.success
        ),
        (F::TARGET.into(), F::OURS.into(), 80, sport, "synack", true)
    );
    assert_eq!(
        (r.ttl, r.ipid, r.window, r.fragmented),
        (61, F::ANSWER_IPID, 64240, false)
    );
    assert_eq!(
        (r.tcp_mss, r.tcp_wscale, r.tcp_sack_ok, r.tcp_ts, r.rtt_us),
        (Some(ANSWER_MSS), Some(7), true, Some(5555), Some(250))
    );
    let rst = tcp_answer::<F>(
        80,
        sport,
        seq.wrapping_add(1),
        TcpFlags::RST | TcpFlags::ACK,
    );
    let r = valid(&m, &rst);
    assert!(!r.success && r.classification == "rst");
    assert_eq!(tcp_ack_number(&synack), Some(seq.wrapping_add(1)));
}

fn forged_tcp_replies_are_invalid<F: TestFamily>() {
    let m = module::<F>(ModuleKind::TcpSyn);
    let (sport, seq) = syn_sent::<F>(&m);
    let synack = TcpFlags::SYN | TcpFlags::ACK;
    let ack = seq.wrapping_add(1);
    for forged in [
        tcp_answer::<F>(80, sport, seq, synack),     // wrong ack
        tcp_answer::<F>(80, sport ^ 1, ack, synack), // wrong port
        tcp_answer::<F>(443, sport, ack, synack),    // another target port
    ] {
        assert!(is_invalid(&m, &forged));
    }
    let genuine = tcp_answer::<F>(80, sport, ack, synack);
    assert!(is_invalid(&other_key::<F>(ModuleKind::TcpSyn), &genuine));
    // A plain ACK is not a reply to a SYN at all, and the kernel filter drops it.
    let plain = tcp_answer::<F>(80, sport, ack, TcpFlags::ACK);
    assert!(matches!(classify(&m, &plain), Verdict::NotOurs));
    assert!(!filter_passes(&m, &plain));
}

fn patched_checksums_hold_for_many_targets<F: TestFamily>() {
    // Addresses with high words near 0xffff exercise the end-around carries.
    let (syn, dgram, echo) = (
        module::<F>(ModuleKind::TcpSyn),
        module::<F>(ModuleKind::Udp),
        module::<F>(ModuleKind::IcmpEcho),
    );
    let l4 = F::L4_AT;
    for i in 0..2000u32 {
        let bits = u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        let target = F::addr(bits | if i % 3 == 0 { !0xffffu128 } else { 0 });
        let port = (i * 40503) as u16;
        let ips = F::pair(F::OURS, target);
        let frame = sent_to::<F>(&syn, target, port);
        F::check_sent(&frame[IP_AT..], target, IpProtocol::TCP);
        let seg = tcp::Packet::new_checked(&frame[l4..]).unwrap();
        assert!(seg.verify_checksum(&ips), "TCP to {target}");
        let frame = sent_to::<F>(&dgram, target, port);
        let datagram = udp::Packet::new_checked(&frame[l4..l4 + udp::HEADER_LEN + 5]).unwrap();
        assert!(datagram.verify_checksum(&ips), "UDP to {target}");
        assert_ne!(datagram.checksum(), 0, "UDP must not send a zero checksum");
        let frame = sent_to::<F>(&echo, target, port);
        let message = &frame[l4..l4 + ICMP_HEADER_LEN + 8];
        assert!(
            F::icmp_checksum_ok(message, F::OURS, target),
            "ICMP to {target}"
        );
    }
}

fn rst_frames_are_well_formed<F: TestFamily>() {
    let t = RstTemplate::new(&setup::<F>());
    let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
    let n = t.write(&mut buf, F::TARGET.into(), 80, 61000, 0xdead_beef);
    assert!(n >= sonde_craft::MIN_FRAME, "no RST written");
    let ip = F::check_sent(&buf[IP_AT..n], F::TARGET, IpProtocol::TCP);
    let seg = tcp::Packet::new_checked(&ip[l4_at::<F>()..]).unwrap();
    assert!(seg.verify_checksum(&F::pair(F::OURS, F::TARGET)));
    assert_eq!(
        (
            seg.src_port(),
            seg.dst_port(),
            seg.seq_number(),
            seg.flags()
        ),
        (61000, 80, 0xdead_beef, TcpFlags::RST)
    );
}

fn tcp_first_fragment_validates<F: TestFamily>() {
    let m = module::<F>(ModuleKind::TcpSyn);
    let seg = synack_segment::<F>(&m);
    let first = frame::<F>(&F::ip_packet(
        F::TARGET,
        IpProtocol::TCP,
        &seg,
        Some((0, true)),
    ));
    let Verdict::Valid(r) = classify(&m, &first) else {
        panic!("first fragment of a SYN-ACK rejected")
    };
    assert_eq!((r.classification, r.fragmented), ("synack", true));
    let later = frame::<F>(&F::ip_packet(
        F::TARGET,
        IpProtocol::TCP,
        &seg,
        Some((1448, false)),
    ));
    assert!(matches!(classify(&m, &later), Verdict::Fragment));
    assert_eq!(tcp_ack_number(&later), None);
    // A later fragment of a protocol the module gets no replies in is not ours.
    let udp_later = frame::<F>(&F::ip_packet(
        F::TARGET,
        IpProtocol::UDP,
        &seg,
        Some((1448, false)),
    ));
    assert!(matches!(classify(&m, &udp_later), Verdict::NotOurs));
}

// ---- icmp_echo -------------------------------------------------------------------------------

/// The echo request as sent (checksum verified) and the reply a target would give to it.
fn echo_and_reply<F: TestFamily>(p: &Probe) -> (Vec<u8>, Vec<u8>) {
    let ip = sent::<F>(p, 0, F::ICMP);
    let request = &ip[l4_at::<F>()..];
    assert!(
        F::icmp_checksum_ok(request, F::OURS, F::TARGET),
        "ICMP checksum"
    );
    assert_eq!(request[0], <F as TestFamily>::ECHO_REQUEST);
    assert_eq!(&request[ICMP_HEADER_LEN..][..4], &SENT_AT.to_be_bytes());
    let mut echo = request.to_vec();
    echo[0] = F::ECHO_REPLY;
    echo[2..4].fill(0);
    F::fill_icmp_checksum(&mut echo, F::TARGET, F::OURS);
    (ip, answer::<F>(F::TARGET, F::ICMP, &echo))
}

fn echo_reply_validates_and_forgery_does_not<F: TestFamily>() {
    let m = module::<F>(ModuleKind::IcmpEcho);
    assert_eq!(
        sent_to::<F>(&m, F::TARGET, 0).len(),
        (F::L4_AT + ICMP_HEADER_LEN + 8).max(sonde_craft::MIN_FRAME)
    );
    let (_, reply) = echo_and_reply::<F>(&m);
    let r = valid(&m, &reply);
    assert_eq!(
        (r.saddr, r.classification, r.success, r.rtt_us, r.icmp_type),
        (
            F::TARGET.into(),
            "echoreply",
            true,
            Some(250),
            Some(F::ECHO_REPLY)
        )
    );
    assert_eq!(r.ipid, F::ANSWER_IPID);
    assert!(is_invalid(&other_key::<F>(ModuleKind::IcmpEcho), &reply));
    let id_at = F::L4_AT + 4;
    let mut forged = reply.clone();
    forged[id_at + 1] ^= 1; // another identifier
    assert!(is_invalid(&m, &forged));
    let mut forged = reply;
    forged[id_at + 3] ^= 1; // another sequence number
    assert!(is_invalid(&m, &forged));
}

/// The identifier is the scan's, the same for every target and both families (what the XDP
/// reply filter checks); the sequence number and the echoed check word still vary per target.
fn echo_requests_carry_the_scans_identifier<F: TestFamily>() {
    let m = module::<F>(ModuleKind::IcmpEcho);
    let ident = m.echo_ident().expect("icmp_echo has an identifier");
    let id_at = F::L4_AT + 4;
    let mut seqs = Vec::new();
    for i in 0..50u16 {
        let mut target = F::TARGET.into();
        if let IpAddr::V4(a) = &mut target {
            *a = Ipv4Addr::from(u32::from(*a) + u32::from(i));
        } else if let IpAddr::V6(a) = &mut target {
            *a = Ipv6Addr::from(u128::from(*a) + u128::from(i));
        }
        let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
        let n = m.write(&mut buf, target, 0, SENT_AT);
        let echo = &buf[id_at..n];
        assert_eq!(u16::from_be_bytes([echo[0], echo[1]]), ident, "target {i}");
        seqs.push((echo[2], echo[3], echo[8..12].to_vec()));
    }
    seqs.sort();
    seqs.dedup();
    assert!(
        seqs.len() > 45,
        "sequence and check word hardly vary: {seqs:?}"
    );
    let both = ProbeSetup {
        src_ip: Some(V4::OURS),
        src_ip6: Some(V6::OURS),
        ..base_setup()
    };
    assert_eq!(
        probe_with(ModuleKind::IcmpEcho, &both).echo_ident(),
        Some(ident)
    );
    assert_ne!(
        other_key::<F>(ModuleKind::IcmpEcho).echo_ident(),
        Some(ident)
    );
    for kind in [ModuleKind::TcpSyn, ModuleKind::Udp, ModuleKind::Dns] {
        assert_eq!(module::<F>(kind).echo_ident(), None, "{kind}");
    }
    // A reply must echo the check word too.
    let (_, reply) = echo_and_reply::<F>(&m);
    let mut forged = reply.clone();
    forged[F::L4_AT + ICMP_HEADER_LEN + 5] ^= 1;
    assert!(is_invalid(&m, &forged));
    let ip = sent::<F>(&m, 0, F::ICMP);
    let mut short = ip[l4_at::<F>()..][..ICMP_HEADER_LEN + 4].to_vec();
    short[0] = F::ECHO_REPLY;
    short[2..4].fill(0);
    F::fill_icmp_checksum(&mut short, F::TARGET, F::OURS);
    let short = answer::<F>(F::TARGET, F::ICMP, &short);
    assert!(is_invalid(&m, &short), "a reply without its check word");
}

fn echo_errors_validate_through_the_quoted_request<F: TestFamily>() {
    let m = module::<F>(ModuleKind::IcmpEcho);
    let (request, _) = echo_and_reply::<F>(&m);
    let exceeded = icmp_error::<F>(F::ROUTER, F::TIME_EXCEEDED, 0, F::quote(&request));
    let r = valid(&m, &exceeded);
    assert_eq!(
        (
            r.saddr,
            r.classification,
            r.success,
            r.icmp_type,
            r.icmp_code
        ),
        (
            F::TARGET.into(),
            "timxceed",
            false,
            Some(F::TIME_EXCEEDED),
            Some(0)
        )
    );
    let mut forged = request.clone();
    forged[l4_at::<F>() + 4] ^= 1; // another identifier quoted
    let error = icmp_error::<F>(F::ROUTER, F::TIME_EXCEEDED, 0, F::quote(&forged));
    assert!(is_invalid(&m, &error));
    // A quote that reaches the check word must carry the right one.
    valid(
        &m,
        &icmp_error::<F>(F::ROUTER, F::TIME_EXCEEDED, 0, &request),
    );
    let mut forged = request.clone();
    forged[l4_at::<F>() + ICMP_HEADER_LEN + 4] ^= 1;
    let error = icmp_error::<F>(F::ROUTER, F::TIME_EXCEEDED, 0, &forged);
    assert!(is_invalid(&m, &error));
    // Other ICMP errors (here a parameter problem) are not replies to this module.
    let problem = icmp_error::<F>(F::ROUTER, F::PARAM_PROBLEM, 0, F::quote(&request));
    assert!(matches!(classify(&m, &problem), Verdict::NotOurs));
    assert!(!filter_passes(&m, &problem));
}

// ---- udp and dns -----------------------------------------------------------------------------

fn udp_datagram<F: TestFamily>(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut seg = vec![0u8; udp::HEADER_LEN + payload.len()];
    seg[udp::HEADER_LEN..].copy_from_slice(payload);
    udp::Repr {
        src_port: sport,
        dst_port: dport,
        payload_len: payload.len(),
    }
    .emit(
        &mut udp::Packet::new_unchecked(&mut seg[..]),
        &F::pair(F::TARGET, F::OURS),
    );
    seg
}

fn udp_answer<F: TestFamily>(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    answer::<F>(
        F::TARGET,
        IpProtocol::UDP,
        &udp_datagram::<F>(sport, dport, payload),
    )
}

/// The datagram to TARGET:`port` as sent (checksum verified): the IP packet.
fn udp_sent<F: TestFamily>(p: &Probe, port: u16) -> Vec<u8> {
    let ip = sent::<F>(p, port, IpProtocol::UDP);
    let dgram = udp::Packet::new_checked(&ip[l4_at::<F>()..]).unwrap();
    assert!(dgram.verify_checksum(&F::pair(F::OURS, F::TARGET)));
    assert_eq!(dgram.dst_port(), port);
    ip
}

fn udp_sport<F: Family>(ip: &[u8]) -> u16 {
    udp::Packet::new_checked(&ip[l4_at::<F>()..])
        .unwrap()
        .src_port()
}

fn udp_reply_and_port_unreachable_validate<F: TestFamily>() {
    let m = module::<F>(ModuleKind::Udp);
    let ip = udp_sent::<F>(&m, 9999);
    assert_eq!(&ip[l4_at::<F>() + udp::HEADER_LEN..], b"hello");
    let sport = udp_sport::<F>(&ip);
    let answer = udp_answer::<F>(9999, sport, b"hi");
    let r = valid(&m, &answer);
    assert_eq!(
        (r.classification, r.udp_len, r.dport, r.fragmented),
        ("udp", Some(2), sport, false)
    );
    assert!(is_invalid(&m, &udp_answer::<F>(9999, sport ^ 1, b"hi")));
    assert!(is_invalid(&other_key::<F>(ModuleKind::Udp), &answer));

    // ICMP port unreachable quoting the probe.
    let unreach = icmp_error::<F>(
        F::TARGET,
        F::DST_UNREACHABLE,
        F::PORT_UNREACHABLE,
        F::quote(&ip),
    );
    let r = valid(&m, &unreach);
    assert_eq!(
        (r.saddr, r.sport, r.dport, r.classification, r.success),
        (F::TARGET.into(), 9999, sport, "unreach", false)
    );
    assert_eq!(
        (r.icmp_type, r.icmp_code),
        (Some(F::DST_UNREACHABLE), Some(F::PORT_UNREACHABLE))
    );
    let mut forged = ip.clone();
    forged[l4_at::<F>() + 1] ^= 1; // another quoted source port
    let error = icmp_error::<F>(
        F::TARGET,
        F::DST_UNREACHABLE,
        F::PORT_UNREACHABLE,
        F::quote(&forged),
    );
    assert!(is_invalid(&m, &error));
}

/// The query the `dns` probe sent to TARGET:53 and our source port.
fn dns_query_sent<F: TestFamily>(p: &Probe) -> (Vec<u8>, u16) {
    let ip = udp_sent::<F>(p, 53);
    let query = ip[l4_at::<F>() + udp::HEADER_LEN..].to_vec();
    assert_ne!(
        sonde_wire::dns::Packet::new_checked(&query[..])
            .unwrap()
            .id(),
        0
    );
    (query, udp_sport::<F>(&ip))
}

/// The response to `query`: QR set, NXDOMAIN.
fn nxdomain(query: &[u8]) -> Vec<u8> {
    let mut answer = query.to_vec();
    answer[2] |= 0x80; // QR: response
    answer[3] = 0x83; // NXDOMAIN
    answer
}

fn dns_response_id_must_match<F: TestFamily>() {
    let m = module::<F>(ModuleKind::Dns);
    let (query, sport) = dns_query_sent::<F>(&m);
    let mut answer = nxdomain(&query);
    let r = valid(&m, &udp_answer::<F>(53, sport, &answer));
    assert_eq!(
        (r.classification, r.dns_rcode, r.dns_answers),
        ("dns", Some(3), Some(0))
    );
    answer[0] ^= 0xff; // another query id
    assert!(is_invalid(&m, &udp_answer::<F>(53, sport, &answer)));
    // The query itself, reflected back, is not a response.
    assert!(is_invalid(&m, &udp_answer::<F>(53, sport, &query)));
}

/// A DNS answer of `len` bytes (its header from `query`), as a UDP datagram from port 53.
fn large_dns_answer<F: TestFamily>(query: &[u8], sport: u16, len: usize) -> Vec<u8> {
    let mut answer = nxdomain(query);
    answer[3] = 0x80; // no error
    answer[6..8].copy_from_slice(&9u16.to_be_bytes()); // nine answers
    answer.resize(len, 0xab);
    udp_datagram::<F>(53, sport, &answer)
}

/// The first fragment of `dgram` (its first `len` bytes) and a later one (the rest).
fn fragments<F: TestFamily>(dgram: &[u8], len: usize) -> (Vec<u8>, Vec<u8>) {
    let first = F::ip_packet(F::TARGET, IpProtocol::UDP, &dgram[..len], Some((0, true)));
    let later = F::ip_packet(
        F::TARGET,
        IpProtocol::UDP,
        &dgram[len..],
        Some((len as u16, false)),
    );
    (frame::<F>(&first), frame::<F>(&later))
}

/// A large DNS answer comes in fragments: the first is validated from its UDP and DNS headers
/// and reported as fragmented with the UDP length it claims; the later one is counted.
fn fragmented_dns_answers_are_reported<F: TestFamily>() {
    let m = module::<F>(ModuleKind::Dns);
    let (query, sport) = dns_query_sent::<F>(&m);
    let dgram = large_dns_answer::<F>(&query, sport, 2000);
    let (first, later) = fragments::<F>(&dgram, 1232);
    let r = valid(&m, &first);
    assert_eq!(
        (r.classification, r.success, r.fragmented, r.udp_len),
        ("dns", true, true, Some(2000))
    );
    assert_eq!(
        (r.dns_rcode, r.dns_answers, r.sport),
        (Some(0), Some(9), 53)
    );
    assert!(
        filter_passes(&m, &later),
        "the filter drops later fragments"
    );
    assert!(matches!(classify(&m, &later), Verdict::Fragment));

    // The first fragment of an answer with another id, or to another port, is not valid.
    let mut forged = nxdomain(&query);
    forged[0] ^= 0xff;
    forged.resize(2000, 0);
    let dgram = udp_datagram::<F>(53, sport, &forged);
    assert!(is_invalid(&m, &fragments::<F>(&dgram, 1232).0));
    let dgram = large_dns_answer::<F>(&query, sport ^ 1, 2000);
    assert!(is_invalid(&m, &fragments::<F>(&dgram, 1232).0));
    // A first fragment too short to hold the DNS header cannot be validated.
    let dgram = large_dns_answer::<F>(&query, sport, 2000);
    assert!(is_invalid(&m, &fragments::<F>(&dgram, 16).0));
    // Nor one without a whole UDP header.
    let short = fragments::<F>(&dgram, 6).0;
    assert!(matches!(classify(&m, &short), Verdict::NotOurs));
}

fn fragmented_udp_answers_are_reported<F: TestFamily>() {
    let m = module::<F>(ModuleKind::Udp);
    let sport = udp_sport::<F>(&udp_sent::<F>(&m, 9999));
    let dgram = udp_datagram::<F>(9999, sport, &[0x5a; 3000]);
    let (first, later) = fragments::<F>(&dgram, 1448);
    let r = valid(&m, &first);
    assert_eq!(
        (r.classification, r.fragmented, r.udp_len),
        ("udp", true, Some(3000))
    );
    assert!(matches!(classify(&m, &later), Verdict::Fragment));
    assert!(filter_passes(&m, &later));
}

// ---- every module ----------------------------------------------------------------------------

fn modules_are_named_and_filters_name_our_address<F: TestFamily>() {
    for kind in ModuleKind::ALL {
        let m = module::<F>(kind);
        assert_eq!((m.name(), m.kind()), (kind.name(), kind));
        let start = format!("{} and dst host {} and ", F::BPF, F::OURS);
        assert!(m.bpf_filter().starts_with(&start), "{}", m.bpf_filter());
        assert!(m.has_family(F::IS_V6) && !m.has_family(!F::IS_V6));
    }
    let big = ModuleOptions {
        payload: vec![0; 1500],
        ..options()
    };
    let err = Probe::build(ModuleKind::Udp, &setup::<F>(), &big)
        .err()
        .unwrap();
    assert!(err.contains("1500") && err.contains(F::NAME), "{err}");
    let bad_name = ModuleOptions {
        dns_name: "a..b".into(),
        ..options()
    };
    assert!(Probe::build(ModuleKind::Dns, &setup::<F>(), &bad_name).is_err());
}

/// Probes leave from the setup's source ports, and only replies to them count.
fn custom_source_ports_are_used_and_checked<F: TestFamily>() {
    let ports = PortRange::new(40000, 40009).unwrap();
    let setup = ProbeSetup {
        ports,
        ..setup::<F>()
    };
    let m = probe_with(ModuleKind::Udp, &setup);
    let mut seen = std::collections::HashSet::new();
    for i in 0..200u128 {
        let frame = sent_to::<F>(&m, F::addr(i << 8 | 0x10_0000), 53);
        seen.insert(
            udp::Packet::new_checked(&frame[F::L4_AT..])
                .unwrap()
                .src_port(),
        );
    }
    assert!(
        seen.iter().all(|&p| ports.contains(p)) && seen.len() == 10,
        "{seen:?}"
    );
    let sport = udp_sport::<F>(&udp_sent::<F>(&m, 9999));
    assert!(m.bpf_filter().contains("dst portrange 40000-40009"));
    valid(&m, &udp_answer::<F>(9999, sport, b"hi"));
    // An answer to a port outside the range is other traffic, and the filter drops it.
    let outside = udp_answer::<F>(9999, 61000, b"hi");
    assert!(matches!(classify(&m, &outside), Verdict::NotOurs));
    assert!(!filter_passes(&m, &outside));
}

for_both_families!(
    syn_probe_is_well_formed_and_its_synack_validates,
    forged_tcp_replies_are_invalid,
    patched_checksums_hold_for_many_targets,
    rst_frames_are_well_formed,
    tcp_first_fragment_validates,
    echo_reply_validates_and_forgery_does_not,
    echo_requests_carry_the_scans_identifier,
    echo_errors_validate_through_the_quoted_request,
    udp_reply_and_port_unreachable_validate,
    dns_response_id_must_match,
    fragmented_dns_answers_are_reported,
    fragmented_udp_answers_are_reported,
    modules_are_named_and_filters_name_our_address,
    custom_source_ports_are_used_and_checked,
);

// ---- one family or both ----------------------------------------------------------------------

#[test]
fn ipv6_extension_headers_are_walked_to_the_reply() {
    let m = module::<V6>(ModuleKind::Udp);
    let sport = udp_sport::<V6>(&udp_sent::<V6>(&m, 9999));
    let dgram = udp_datagram::<V6>(9999, sport, b"hi");
    // Hop-by-hop (8 bytes of padding) then destination options (16 bytes) then UDP.
    let mut payload = vec![IpProtocol::IPV6_OPTS.0, 0, 1, 4, 0, 0, 0, 0];
    payload.extend_from_slice(&[IpProtocol::UDP.0, 1, 1, 12]);
    payload.extend_from_slice(&[0; 12]);
    payload.extend_from_slice(&dgram);
    let ip = with_v6_header(V6::TARGET, IpProtocol::HOPOPT, &payload);
    let Verdict::Valid(r) = classify(&m, &frame::<V6>(&ip)) else {
        panic!("a reply behind extension headers rejected")
    };
    assert_eq!((r.classification, r.udp_len), ("udp", Some(2)));
    // A chain that runs past the packet is not a reply.
    let mut broken = ip.clone();
    broken[ipv6::HEADER_LEN + 9] = 200;
    assert!(matches!(
        classify(&m, &frame::<V6>(&broken)),
        Verdict::NotOurs
    ));
}

#[test]
fn a_probe_of_both_families_sends_and_classifies_each_with_its_own() {
    let both = ProbeSetup {
        src_ip: Some(V4::OURS),
        src_ip6: Some(V6::OURS),
        ..base_setup()
    };
    let dual = probe_with(ModuleKind::TcpSyn, &both);
    let (v4, v6) = (
        module::<V4>(ModuleKind::TcpSyn),
        module::<V6>(ModuleKind::TcpSyn),
    );
    assert!(dual.has_family(false) && dual.has_family(true));
    assert_eq!(dual.frame_len(), v4.frame_len().max(v6.frame_len()));
    assert_eq!(
        sent_to::<V4>(&dual, V4::TARGET, 80),
        sent_to::<V4>(&v4, V4::TARGET, 80)
    );
    assert_eq!(
        sent_to::<V6>(&dual, V6::TARGET, 80),
        sent_to::<V6>(&v6, V6::TARGET, 80)
    );
    let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
    assert_eq!(v4.write(&mut buf, IpAddr::V6(V6::TARGET), 80, 0), 0);
    assert_eq!(
        dual.bpf_filter(),
        format!("({}) or ({})", v4.bpf_filter(), v6.bpf_filter())
    );
    for (frame, single) in [(synack_to::<V4>(&v4), &v4), (synack_to::<V6>(&v6), &v6)] {
        assert!(matches!(classify(&dual, &frame), Verdict::Valid(_)));
        assert!(filter_passes(&dual, &frame));
        assert!(matches!(classify(single, &frame), Verdict::Valid(_)));
    }
    assert!(matches!(
        classify(&v4, &synack_to::<V6>(&v6)),
        Verdict::NotOurs
    ));
    // Both families' RSTs from one template.
    let rst = RstTemplate::new(&both);
    assert!(rst.write(&mut buf, IpAddr::V6(V6::TARGET), 80, 61000, 1) > 0);
    assert!(rst.write(&mut buf, IpAddr::V4(V4::TARGET), 80, 61000, 1) > 0);
    let only4 = RstTemplate::new(&setup::<V4>());
    assert_eq!(
        only4.write(&mut buf, IpAddr::V6(V6::TARGET), 80, 61000, 1),
        0
    );
    assert!(Probe::build(ModuleKind::TcpSyn, &base_setup(), &options()).is_err());
}

#[test]
fn filter_strings() {
    let filters: Vec<String> = ModuleKind::ALL
        .into_iter()
        .map(|k| module::<V6>(k).bpf_filter())
        .collect();
    for f in &filters {
        println!("{f}");
    }
    assert_eq!(
        filters[0],
        "ip6 and dst host 2001:db8:ffff::1 and tcp and dst portrange 61000-65535 and (ip6[53] & 0x04 != 0 or ip6[53] & 0x12 = 0x12)"
    );
    assert_eq!(
        module::<V4>(ModuleKind::TcpSyn).bpf_filter(),
        "ip and dst host 198.19.255.1 and tcp and dst portrange 61000-65535 and (tcp[13] & 0x04 != 0 or tcp[13] & 0x12 = 0x12)"
    );
}

#[test]
fn unknown_module_lists_the_known_ones() {
    let err = "tcp_ack".parse::<ModuleKind>().unwrap_err();
    assert!(
        err.contains("tcp_ack") && err.contains("tcp_syn, icmp_echo, udp, dns"),
        "{err}"
    );
    let typo = "tcp_sin".parse::<ModuleKind>().unwrap_err();
    assert!(typo.contains("did you mean tcp_syn?"), "{typo}");
    assert!(!err.contains("did you mean"), "{err}");
}

#[test]
fn zmap_module_names_are_taken_as_sondes() {
    assert_eq!("tcp_synscan".parse(), Ok(ModuleKind::TcpSyn));
    assert_eq!("icmp_echoscan".parse(), Ok(ModuleKind::IcmpEcho));
    for kind in ModuleKind::ALL {
        assert_eq!(kind.zmap_name().parse(), Ok(kind));
    }
}

#[test]
fn default_fields_suit_each_module() {
    for kind in ModuleKind::ALL {
        let fields = kind.default_fields();
        assert_eq!(fields.first(), Some(&"saddr"), "{kind}");
        for needed in ["classification", "success"] {
            assert!(fields.contains(&needed), "{kind} lacks {needed}");
        }
        for name in fields {
            assert!(crate::FIELDS.iter().any(|f| f.name == *name), "{name}");
        }
        let tcp_only = fields.contains(&"tcp_mss") || fields.contains(&"window");
        assert_eq!(tcp_only, kind == ModuleKind::TcpSyn, "{kind}");
    }
    assert!(!ModuleKind::IcmpEcho.default_fields().contains(&"sport"));
    assert!(ModuleKind::Dns.default_fields().contains(&"dns_rcode"));
    assert!(ModuleKind::Udp.default_fields().contains(&"fragmented"));
}
