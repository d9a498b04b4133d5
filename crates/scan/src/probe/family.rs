//! The two address families a probe is written for, as one trait: everything that differs
//! between an Ethernet + IPv4 and an Ethernet + IPv6 probe — the frame base, the destination
//! words and the checksums that cover them, the fields read from a received packet, the
//! datagram quoted by an ICMP error, tcpdump expression pieces and ICMP message numbers — so
//! that every module is written once, generic over [`Family`].
//!
//! Differences that shape it: IPv4 has a header checksum (covering the destination) and ICMPv4
//! has no pseudo-header; IPv6 has no header checksum, every transport checksum (ICMPv6's too)
//! covers the 16-byte destination through the pseudo-header, extension headers may stand before
//! the transport header of a reply, and replies carry no IP identifier (reported as 0).

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use sonde_craft::{Patcher, Word};
use sonde_meter::stages::{self, Stage};
use sonde_wire::checksum::{pseudo_header_v4, pseudo_header_v6};
use sonde_wire::{ethernet, icmpv4, icmpv6, ipv4, ipv6, EtherType, IpPair, IpProtocol, MacAddr};

use super::ProbeSetup;
use crate::reply::Reply;
use crate::validate::{PortRange, Validator};

/// Where the IP header starts in a frame.
pub(crate) const IP_AT: usize = ethernet::HEADER_LEN;
/// Every ICMP and ICMPv6 message starts with 8 bytes: type, code, checksum and 4 more.
pub(crate) const ICMP_HEADER_LEN: usize = 8;
/// Most words a probe patches: an IPv6 destination (8) plus TCP's ports, sequence and TSval (6).
const MAX_WORDS: usize = 14;
/// Most words a module patches past the destination.
const MAX_MODULE_WORDS: usize = 6;

/// What the probes of one family share: our addresses, the scan's key, source ports and TTL.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<F: Family> {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub ip: F::Addr,
    pub validator: Validator,
    pub ports: PortRange,
    pub ttl: u8,
}

impl<F: Family> Source<F> {
    /// The validation token of the probe to (`target`, `port`).
    #[inline]
    pub fn token(&self, target: F::Addr, port: u16) -> u64 {
        self.validator.token(self.ip.into(), target.into(), port)
    }

    /// The tcpdump expression for the family's packets to our address.
    pub fn bpf_to_us(&self) -> String {
        format!("{} and dst host {}", F::BPF, self.ip)
    }
}

/// Where a received packet stands among the fragments of its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Not fragmented.
    Whole,
    /// The first fragment: it carries the transport header, but not the whole datagram.
    First,
    /// A later fragment: the middle or end of a datagram, no transport header.
    Later,
}

impl Fragment {
    fn of(offset: u16, more: bool) -> Fragment {
        match (offset, more) {
            (0, false) => Fragment::Whole,
            (0, true) => Fragment::First,
            _ => Fragment::Later,
        }
    }
}

/// What classification reads of a received IP packet, whatever its family.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Received<'a, F: Family> {
    pub src: F::Addr,
    pub dst: F::Addr,
    pub ttl: u8,
    /// IPv4 identification; 0 over IPv6.
    pub ipid: u16,
    /// The transport protocol, past any IPv6 extension headers.
    pub protocol: IpProtocol,
    /// The transport header and what follows it, bounded by the IP length.
    pub transport: &'a [u8],
    pub fragment: Fragment,
}

impl<F: Family> Received<'_, F> {
    /// A reply row with the fields every module fills the same way.
    pub fn reply(&self, sport: u16, classification: &'static str, success: bool) -> Reply {
        Reply {
            saddr: self.src.into(),
            sport,
            daddr: self.dst.into(),
            dport: 0,
            classification,
            success,
            repeat: false,
            ttl: self.ttl,
            ipid: self.ipid,
            window: 0,
            tcp_mss: None,
            tcp_wscale: None,
            tcp_sack_ok: false,
            tcp_ts: None,
            rtt_us: None,
            timestamp_us: 0,
            icmp_type: None,
            icmp_code: None,
            udp_len: None,
            dns_rcode: None,
            dns_answers: None,
            fragmented: self.fragment == Fragment::First,
        }
    }
}

/// The first 8 bytes of an ICMP or ICMPv6 message, the same in both: type, code, checksum, and
/// for echo messages identifier and sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IcmpHeader {
    pub kind: u8,
    pub code: u8,
    pub ident: u16,
    pub seq: u16,
}

impl IcmpHeader {
    /// The header `bytes` start with, if they hold one.
    pub fn read(bytes: &[u8]) -> Option<IcmpHeader> {
        let [kind, code, _, _, i0, i1, s0, s1] = *bytes.first_chunk::<ICMP_HEADER_LEN>()?;
        Some(IcmpHeader {
            kind,
            code,
            ident: u16::from_be_bytes([i0, i1]),
            seq: u16::from_be_bytes([s0, s1]),
        })
    }
}

/// An address family: the constants and the few functions that differ between IPv4 and IPv6.
pub(crate) trait Family: Copy + fmt::Debug + Send + Sync + 'static {
    type Addr: Copy + fmt::Debug + fmt::Display + PartialEq + Into<IpAddr> + Send + Sync;
    /// For messages: "IPv4", "IPv6".
    const NAME: &'static str;
    /// tcpdump's names of the family's packets and of its ICMP.
    const BPF: &'static str;
    const BPF_ICMP: &'static str;
    const ETHERTYPE: EtherType;
    const UNSPECIFIED: Self::Addr;
    /// Where the transport header starts in our frames (no IP options, no extension headers).
    const L4_AT: usize;
    /// The range an IP header checksum covers (IPv4 only).
    const CHECKSUMMED_HEADER: Option<Range<usize>>;
    /// The family's ICMP and its message numbers.
    const ICMP: IpProtocol;
    const ECHO_REPLY: u8;
    const DST_UNREACHABLE: u8;
    const TIME_EXCEEDED: u8;

    /// Our source address of the family, if the setup has one.
    fn source_ip(setup: &ProbeSetup) -> Option<Self::Addr>;
    /// Writes the IP header of our probes (destination and header checksum zero) for
    /// `l4_len` bytes of `protocol`.
    fn emit_ip(packet: &mut [u8], src: &Source<Self>, protocol: IpProtocol, l4_len: usize);
    /// The addresses a transport checksum is computed over.
    fn pair(src: Self::Addr, dst: Self::Addr) -> IpPair;
    /// The pseudo-header's sum with a zero destination (0 where the checksum has none).
    fn pseudo_header(src: Self::Addr, protocol: IpProtocol, l4_len: usize) -> u32;
    /// How many 16-bit words the destination address is.
    const DST_WORDS: usize;
    /// Writes the [`Family::DST_WORDS`] words of `dst` into `words`, for a frame carrying
    /// `protocol`, each marked with the checksums that cover it.
    fn dst_words(dst: Self::Addr, protocol: IpProtocol, words: &mut [Word]);
    /// Writes an echo request from `src` with zero identifier and sequence number into `l4`.
    fn emit_echo_request(l4: &mut [u8], src: Self::Addr);
    /// A received IP packet (an Ethernet payload), if it is one of the family.
    fn receive(packet: &[u8]) -> Option<Received<'_, Self>>;
    /// For the packet quoted in an ICMP error, when it carries `protocol`: its destination and
    /// the length of its IP header.
    fn quoted_packet(quoted: &[u8], protocol: IpProtocol) -> Option<(Self::Addr, usize)>;
    /// tcpdump's expression for byte `offset` of the transport header of `protocol`.
    fn bpf_l4(protocol: &str, offset: usize) -> String;
    /// tcpdump's expression for the UDP fragments that can be parts of replies to `ports`.
    fn bpf_udp_fragments(ports: PortRange) -> String;
}

/// For an ICMP error (the bytes of its message) quoting one of our packets of `protocol`: the
/// quoted destination (the probe's target) and the quoted transport bytes.
pub(crate) fn quoted_datagram<F: Family>(
    icmp: &[u8],
    protocol: IpProtocol,
) -> Option<(F::Addr, &[u8])> {
    let header = IcmpHeader::read(icmp)?;
    if header.kind != F::DST_UNREACHABLE && header.kind != F::TIME_EXCEEDED {
        return None;
    }
    let quoted = icmp.get(ICMP_HEADER_LEN..)?;
    let (target, header_len) = F::quoted_packet(quoted, protocol)?;
    Some((target, quoted.get(header_len..)?))
}

/// The class of an ICMP error about one of our probes.
pub(crate) fn icmp_error_class<F: Family>(kind: u8) -> &'static str {
    if kind == F::TIME_EXCEEDED {
        "timxceed"
    } else {
        "unreach"
    }
}

/// tcpdump's expression for the ICMP errors that can be about our probes.
pub(crate) fn bpf_icmp_errors<F: Family>() -> String {
    let kind = F::bpf_l4(F::BPF_ICMP, 0);
    format!(
        "{} and ({kind} = {} or {kind} = {})",
        F::BPF_ICMP,
        F::DST_UNREACHABLE,
        F::TIME_EXCEEDED
    )
}

/// A probe frame built once with the `wire` formats: Ethernet, the family's IP header and
/// `l4_len` bytes of transport, the destination and every varying word zero. Per probe it is
/// copied, the destination and the module's words are patched in and the checksums finished.
#[derive(Clone, Debug)]
pub(crate) struct Template<F: Family> {
    patcher: Patcher,
    protocol: IpProtocol,
    family: PhantomData<F>,
}

impl<F: Family> Template<F> {
    /// `emit` writes the transport header (and payload) into its `l4_len` zeroed bytes, for the
    /// addresses given; `checksum_at` is the offset of its checksum within them.
    pub fn new(
        src: &Source<F>,
        protocol: IpProtocol,
        l4_len: usize,
        checksum_at: usize,
        emit: impl FnOnce(&mut [u8], &IpPair),
    ) -> Template<F> {
        let l4 = F::L4_AT..F::L4_AT + l4_len;
        let mut frame = vec![0u8; l4.end.max(sonde_craft::MIN_FRAME)];
        let eth = ethernet::Repr {
            src_addr: src.src_mac,
            dst_addr: src.dst_mac,
            ethertype: F::ETHERTYPE,
        };
        eth.emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
        F::emit_ip(&mut frame[IP_AT..], src, protocol, l4_len);
        emit(&mut frame[l4.clone()], &F::pair(src.ip, F::UNSPECIFIED));
        let checksum_at = F::L4_AT + checksum_at;
        frame[checksum_at..checksum_at + 2].fill(0);
        let patcher = Patcher::new(
            frame,
            F::CHECKSUMMED_HEADER,
            l4,
            checksum_at,
            F::pseudo_header(src.ip, protocol, l4_len),
            protocol == IpProtocol::UDP,
        );
        Template {
            patcher,
            protocol,
            family: PhantomData,
        }
    }

    pub fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    /// Writes the frame to `dst` with `rest` — (offset within the transport header, value) —
    /// patched in; returns its length. The words live on the stack, their number known at
    /// compile time: the per-probe path allocates nothing and checks no bounds.
    #[inline]
    pub fn write<const N: usize>(
        &self,
        buf: &mut [u8],
        dst: F::Addr,
        rest: [(usize, u16); N],
    ) -> usize {
        const { assert!(N <= MAX_MODULE_WORDS) };
        let mut words = [Word::l4(0, 0); MAX_WORDS];
        let (dst_words, module_words) = words.split_at_mut(F::DST_WORDS);
        F::dst_words(dst, self.protocol, dst_words);
        for (word, (at, value)) in module_words.iter_mut().zip(rest) {
            *word = Word::l4(F::L4_AT + at, value);
        }
        let words = &words[..F::DST_WORDS + N];
        // `sonde profile`: everything before this point (the cookie, the module's fields) is
        // the cookie stage; the patch and the checksums are timed apart.
        stages::mark(Stage::Cookie);
        let len = self.patcher.patch(buf, words);
        stages::mark(Stage::Patch);
        self.patcher.finish_checksums(buf, words);
        stages::mark(Stage::Checksum);
        len
    }
}

pub(crate) fn hi(v: u32) -> u16 {
    (v >> 16) as u16
}

pub(crate) fn lo(v: u32) -> u16 {
    v as u16
}

// ---------------------------------------------------------------------------------------------

/// Ethernet + IPv4.
#[derive(Clone, Copy, Debug)]
pub(crate) struct V4;

impl Family for V4 {
    type Addr = Ipv4Addr;
    const NAME: &'static str = "IPv4";
    const BPF: &'static str = "ip";
    const BPF_ICMP: &'static str = "icmp";
    const ETHERTYPE: EtherType = EtherType::Ipv4;
    const UNSPECIFIED: Ipv4Addr = Ipv4Addr::UNSPECIFIED;
    const L4_AT: usize = IP_AT + ipv4::HEADER_LEN;
    const CHECKSUMMED_HEADER: Option<Range<usize>> = Some(IP_AT..Self::L4_AT);
    const ICMP: IpProtocol = IpProtocol::ICMP;
    const ECHO_REPLY: u8 = icmpv4::Message::ECHO_REPLY.0;
    const DST_UNREACHABLE: u8 = icmpv4::Message::DST_UNREACHABLE.0;
    const TIME_EXCEEDED: u8 = icmpv4::Message::TIME_EXCEEDED.0;

    fn source_ip(setup: &ProbeSetup) -> Option<Ipv4Addr> {
        setup.src_ip
    }

    fn emit_ip(packet: &mut [u8], src: &Source<V4>, protocol: IpProtocol, l4_len: usize) {
        let ip = ipv4::Repr {
            src_addr: src.ip,
            dst_addr: Ipv4Addr::UNSPECIFIED,
            protocol,
            payload_len: l4_len,
            ttl: src.ttl,
            ident: 54321,
            dont_frag: false,
        };
        let mut packet = ipv4::Packet::new_unchecked(packet);
        ip.emit(&mut packet);
        packet.set_checksum(0);
    }

    fn pair(src: Ipv4Addr, dst: Ipv4Addr) -> IpPair {
        IpPair::V4 { src, dst }
    }

    fn pseudo_header(src: Ipv4Addr, protocol: IpProtocol, l4_len: usize) -> u32 {
        if protocol == IpProtocol::ICMP {
            return 0;
        }
        pseudo_header_v4(src, Ipv4Addr::UNSPECIFIED, protocol.0, l4_len as u16)
    }

    const DST_WORDS: usize = 2;

    /// Two words, in the IP header checksum and, but for ICMP, in the pseudo-header.
    #[inline]
    fn dst_words(dst: Ipv4Addr, protocol: IpProtocol, words: &mut [Word]) {
        let [a, b, c, d] = dst.octets();
        for (i, (word, value)) in words.iter_mut().zip([[a, b], [c, d]]).enumerate() {
            *word = Word {
                at: IP_AT + 16 + 2 * i,
                value: u16::from_be_bytes(value),
                in_ip: true,
                in_l4: protocol != IpProtocol::ICMP,
            };
        }
    }

    fn emit_echo_request(l4: &mut [u8], _src: Ipv4Addr) {
        let echo = icmpv4::Repr::EchoRequest {
            ident: 0,
            seq_no: 0,
            data_len: l4.len() - ICMP_HEADER_LEN,
        };
        echo.emit(&mut icmpv4::Packet::new_unchecked(l4));
    }

    fn receive(packet: &[u8]) -> Option<Received<'_, V4>> {
        let ip = ipv4::Packet::new_checked(packet).ok()?;
        Some(Received {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            ttl: ip.ttl(),
            ipid: ip.ident(),
            protocol: ip.protocol(),
            transport: packet.get(ip.header_len()..usize::from(ip.total_len()))?,
            fragment: Fragment::of(ip.frag_offset(), ip.more_frags()),
        })
    }

    fn quoted_packet(quoted: &[u8], protocol: IpProtocol) -> Option<(Ipv4Addr, usize)> {
        let inner = ipv4::Packet::new_quoted(quoted).ok()?;
        (inner.protocol() == protocol).then(|| (inner.dst_addr(), inner.header_len()))
    }

    fn bpf_l4(protocol: &str, offset: usize) -> String {
        format!("{protocol}[{offset}]")
    }

    /// Port filters pass first fragments (libpcap checks the offset is 0 before reading ports);
    /// later fragments carry no ports, so all UDP ones are let through.
    fn bpf_udp_fragments(_ports: PortRange) -> String {
        "(udp and ip[6:2] & 0x1fff != 0)".into()
    }
}

// ---------------------------------------------------------------------------------------------

/// Ethernet + IPv6.
#[derive(Clone, Copy, Debug)]
pub(crate) struct V6;

/// Offset of the transport header from the start of the IPv6 header, as BPF indexes it.
const BPF_L4: usize = ipv6::HEADER_LEN;

impl Family for V6 {
    type Addr = Ipv6Addr;
    const NAME: &'static str = "IPv6";
    const BPF: &'static str = "ip6";
    const BPF_ICMP: &'static str = "icmp6";
    const ETHERTYPE: EtherType = EtherType::Ipv6;
    const UNSPECIFIED: Ipv6Addr = Ipv6Addr::UNSPECIFIED;
    const L4_AT: usize = IP_AT + ipv6::HEADER_LEN;
    const CHECKSUMMED_HEADER: Option<Range<usize>> = None;
    const ICMP: IpProtocol = IpProtocol::ICMPV6;
    const ECHO_REPLY: u8 = icmpv6::Message::ECHO_REPLY.0;
    const DST_UNREACHABLE: u8 = icmpv6::Message::DST_UNREACHABLE.0;
    const TIME_EXCEEDED: u8 = icmpv6::Message::TIME_EXCEEDED.0;

    fn source_ip(setup: &ProbeSetup) -> Option<Ipv6Addr> {
        setup.src_ip6
    }

    fn emit_ip(packet: &mut [u8], src: &Source<V6>, protocol: IpProtocol, l4_len: usize) {
        let ip = ipv6::Repr {
            src_addr: src.ip,
            dst_addr: Ipv6Addr::UNSPECIFIED,
            next_header: protocol,
            payload_len: l4_len,
            hop_limit: src.ttl,
            traffic_class: 0,
            flow_label: 0,
        };
        ip.emit(&mut ipv6::Packet::new_unchecked(packet));
    }

    fn pair(src: Ipv6Addr, dst: Ipv6Addr) -> IpPair {
        IpPair::V6 { src, dst }
    }

    fn pseudo_header(src: Ipv6Addr, protocol: IpProtocol, l4_len: usize) -> u32 {
        pseudo_header_v6(&src, &Ipv6Addr::UNSPECIFIED, protocol.0, l4_len as u32)
    }

    const DST_WORDS: usize = 8;

    /// Eight words: no IP checksum, but every IPv6 transport checksum (ICMPv6's too) covers
    /// them through the pseudo-header.
    #[inline]
    fn dst_words(dst: Ipv6Addr, _protocol: IpProtocol, words: &mut [Word]) {
        for (i, (word, value)) in words.iter_mut().zip(dst.segments()).enumerate() {
            *word = Word {
                at: IP_AT + 24 + 2 * i,
                value,
                in_ip: false,
                in_l4: true,
            };
        }
    }

    fn emit_echo_request(l4: &mut [u8], src: Ipv6Addr) {
        let echo = icmpv6::Repr::EchoRequest {
            ident: 0,
            seq_no: 0,
            data_len: l4.len() - ICMP_HEADER_LEN,
        };
        echo.emit(
            &mut icmpv6::Packet::new_unchecked(l4),
            &src,
            &Ipv6Addr::UNSPECIFIED,
        );
    }

    /// Walks the extension headers to the transport header (a fragment header on the way tells
    /// which fragment this is).
    fn receive(packet: &[u8]) -> Option<Received<'_, V6>> {
        let ip = ipv6::Packet::new_checked(packet).ok()?;
        let upper = ip.upper_layer().ok()?;
        let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
        let fragment = upper
            .fragment
            .map_or(Fragment::Whole, |f| Fragment::of(f.offset, f.more));
        Some(Received {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            ttl: ip.hop_limit(),
            ipid: 0,
            protocol: upper.protocol,
            transport: packet.get(upper.offset..end)?,
            fragment,
        })
    }

    /// Our probes carry no extension headers, so neither do their quoted copies.
    fn quoted_packet(quoted: &[u8], protocol: IpProtocol) -> Option<(Ipv6Addr, usize)> {
        let inner = ipv6::Packet::new_quoted(quoted).ok()?;
        (inner.next_header() == protocol).then(|| (inner.dst_addr(), ipv6::HEADER_LEN))
    }

    /// `tcp[13]`, `icmp6[0]` do not compile for IPv6 on every libpcap: index the transport
    /// from the fixed header, which holds as neither probes nor their errors carry extension
    /// headers.
    fn bpf_l4(_protocol: &str, offset: usize) -> String {
        format!("ip6[{}]", BPF_L4 + offset)
    }

    /// libpcap's port filters do not look past a fragment header: UDP behind one (at offset
    /// 40, the UDP header at 48) passes when it is a later fragment (offset bits of
    /// `ip6[42:2]` set) or a first fragment to one of our ports.
    fn bpf_udp_fragments(ports: PortRange) -> String {
        let dport = "ip6[50:2]";
        format!(
            "(ip6[6] = 44 and ip6[40] = 17 and (ip6[42:2] & 0xfff8 != 0 or ({dport} >= {} and {dport} <= {})))",
            ports.first, ports.last
        )
    }
}
