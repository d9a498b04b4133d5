//! IPv6 probe modules: the same modules as [`crate::probe`] (same names, tokens, options and
//! classifications) on Ethernet + IPv6 frames. Differences from IPv4 that shape the code:
//! there is no IP header checksum, the pseudo-header (and so every transport checksum, ICMPv6's
//! included) covers the 16-byte destination address, and replies carry no IP identifier.

use std::net::{IpAddr, Ipv6Addr};

use sonde_craft::{Patcher, Word};
use sonde_wire::checksum::pseudo_header_v6;
use sonde_wire::{
    dns, ethernet, icmpv6, ipv6, tcp, udp, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
};

use crate::probe::{ephemeral_range, hi, lo, read_options, timestamp_offset};
use crate::probe::{ModuleKind, ModuleOptions, Verdict};
use crate::reply::Reply;
use crate::validate::{source_port, Validator};

const IP_AT: usize = ethernet::HEADER_LEN;
const L4_AT: usize = IP_AT + ipv6::HEADER_LEN;
const IP_DST: usize = IP_AT + 24;
const MIN_FRAME: usize = 60;
/// Offset of the transport header from the start of the IPv6 header, as BPF indexes it.
const BPF_L4: usize = ipv6::HEADER_LEN;
/// The destination address as 16-bit words.
const DST_WORDS: usize = 8;
/// Most words any module patches: the address plus TCP's ports, sequence number and TSval.
const MAX_WORDS: usize = DST_WORDS + 6;

/// What every IPv6 probe of a scan shares.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSetup6 {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv6Addr,
    pub validator: Validator,
    pub hop_limit: u8,
}

/// An IPv6 probe module; see [`crate::probe::ProbeModule`] for the contract of each method.
pub trait ProbeModule6: Send + Sync {
    fn name(&self) -> &'static str;
    /// Length of every probe frame.
    fn frame_len(&self) -> usize;
    /// Writes the probe for (`target`, `port`) into `buf` and returns its length; `now_us` is
    /// stamped where the reply will carry it back (TCP timestamp, ICMPv6 echo data) for RTTs.
    fn write(&self, buf: &mut [u8], target: Ipv6Addr, port: u16, now_us: u32) -> usize;
    /// A pcap filter expression that passes every frame that can be a reply.
    fn bpf_filter(&self) -> String;
    /// Validates and classifies an IPv6 packet addressed to us.
    fn classify(&self, ip: &ipv6::Packet<&[u8]>, now_us: u32) -> Verdict;
}

/// Prepares the module's IPv6 template.
pub fn build6(
    kind: ModuleKind,
    setup: ProbeSetup6,
    options: &ModuleOptions,
) -> Result<Box<dyn ProbeModule6>, String> {
    Ok(match kind {
        ModuleKind::TcpSyn => Box::new(TcpSyn6::new(setup)),
        ModuleKind::IcmpEcho => Box::new(IcmpEcho6::new(setup)),
        ModuleKind::Udp => Box::new(UdpProbe6::new(setup, options.payload.clone(), None)?),
        ModuleKind::Dns => Box::new(UdpProbe6::new(setup, dns_query(options)?, Some(0))?),
    })
}

/// The DNS query payload with id 0 (the id is patched per probe).
fn dns_query(options: &ModuleOptions) -> Result<Vec<u8>, String> {
    let name = &options.dns_name;
    let len = dns::query_len(name).map_err(|_| format!("invalid DNS name \"{name}\""))?;
    let mut query = vec![0u8; len];
    dns::emit_query(&mut query, 0, name, options.dns_type)
        .map_err(|e| format!("DNS query for \"{name}\": {e}"))?;
    Ok(query)
}

/// An Ethernet + IPv6 frame with the destination address and everything past the IPv6 header
/// zeroed; `l4_len` bytes of transport follow, and the frame is padded to the Ethernet minimum
/// (the payload-length field keeps the padding out of the packet).
fn base_frame(setup: &ProbeSetup6, next_header: IpProtocol, l4_len: usize) -> Vec<u8> {
    let mut frame = vec![0u8; (L4_AT + l4_len).max(MIN_FRAME)];
    let eth = ethernet::Repr {
        src_addr: setup.src_mac,
        dst_addr: setup.dst_mac,
        ethertype: EtherType::Ipv6,
    };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
    let ip = ipv6::Repr {
        src_addr: setup.src_ip,
        dst_addr: Ipv6Addr::UNSPECIFIED,
        next_header,
        payload_len: l4_len,
        hop_limit: setup.hop_limit,
        traffic_class: 0,
        flow_label: 0,
    };
    ip.emit(&mut ipv6::Packet::new_unchecked(&mut frame[IP_AT..]));
    frame
}

/// The template's addresses: ours and the zero destination every template is built with.
fn template_ips(setup: &ProbeSetup6) -> IpPair {
    IpPair::V6 {
        src: setup.src_ip,
        dst: Ipv6Addr::UNSPECIFIED,
    }
}

/// A patcher over `frame` whose transport spans `l4_len` bytes with its checksum at
/// `checksum_at`; the pseudo-header is summed with a zero destination, added per probe.
fn patcher(
    setup: &ProbeSetup6,
    mut frame: Vec<u8>,
    next_header: IpProtocol,
    l4_len: usize,
    checksum_at: usize,
) -> Patcher {
    frame[checksum_at..checksum_at + 2].fill(0);
    let pseudo = pseudo_header_v6(
        &setup.src_ip,
        &Ipv6Addr::UNSPECIFIED,
        next_header.0,
        l4_len as u32,
    );
    let zero_as_ones = next_header == IpProtocol::UDP;
    Patcher::new(
        frame,
        None,
        L4_AT..L4_AT + l4_len,
        checksum_at,
        pseudo,
        zero_as_ones,
    )
}

/// The eight destination-address words: no IP checksum, but every IPv6 transport checksum
/// (ICMPv6's too) covers them through the pseudo-header.
fn dst_words(dst: Ipv6Addr) -> [Word; DST_WORDS] {
    let segments = dst.segments();
    std::array::from_fn(|i| Word {
        at: IP_DST + 2 * i,
        value: segments[i],
        in_ip: false,
        in_l4: true,
    })
}

/// Writes the frame for `target` with `rest` patched in after the address; the words live on
/// the stack so the per-probe path stays allocation-free.
#[inline]
fn write_to(patcher: &Patcher, buf: &mut [u8], target: Ipv6Addr, rest: &[Word]) -> usize {
    let mut words = [Word::l4(0, 0); MAX_WORDS];
    let n = DST_WORDS + rest.len();
    words[..DST_WORDS].copy_from_slice(&dst_words(target));
    words[DST_WORDS..n].copy_from_slice(rest);
    patcher.write(buf, &words[..n])
}

/// A reply row with the fields every module fills the same way; IPv6 has no IP identifier.
fn reply(
    ip: &ipv6::Packet<&[u8]>,
    sport: u16,
    classification: &'static str,
    success: bool,
) -> Reply {
    Reply {
        saddr: IpAddr::V6(ip.src_addr()),
        sport,
        daddr: IpAddr::V6(ip.dst_addr()),
        dport: 0,
        classification,
        success,
        repeat: false,
        ttl: ip.hop_limit(),
        ipid: 0,
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
    }
}

/// The filter clause for ICMPv6 errors: destination unreachable and time exceeded. libpcap
/// cannot index `icmp6[]` on every version, so the type is read at a fixed offset, which holds
/// because neither probes nor their errors carry extension headers.
fn icmp6_errors() -> String {
    format!("icmp6 and (ip6[{BPF_L4}] = 1 or ip6[{BPF_L4}] = 3)")
}

fn icmp_error_class(kind: icmpv6::Message) -> &'static str {
    if kind == icmpv6::Message::TIME_EXCEEDED {
        "timxceed"
    } else {
        "unreach"
    }
}

/// For an ICMPv6 error (the bytes of its ICMPv6 message) quoting one of our packets with
/// `next_header`: the quoted destination (the probe's target) and the quoted transport bytes.
fn quoted_datagram(icmp_bytes: &[u8], next_header: IpProtocol) -> Option<(Ipv6Addr, &[u8])> {
    let icmp = icmpv6::Packet::new_checked(icmp_bytes).ok()?;
    let kind = icmp.msg_type();
    if kind != icmpv6::Message::DST_UNREACHABLE && kind != icmpv6::Message::TIME_EXCEEDED {
        return None;
    }
    let quoted = icmp_bytes.get(icmpv6::HEADER_LEN..)?;
    let inner = ipv6::Packet::new_quoted(quoted).ok()?;
    if inner.next_header() != next_header {
        return None;
    }
    Some((inner.dst_addr(), quoted.get(ipv6::HEADER_LEN..)?))
}

// ---------------------------------------------------------------------------------------------

/// `tcp_syn` over IPv6: the same SYN as over IPv4; sequence number and source port from the
/// token, TSval carrying the send time so SYN-ACKs give RTTs without per-probe state.
struct TcpSyn6 {
    setup: ProbeSetup6,
    patcher: Patcher,
    tsval_at: usize,
}

fn syn_repr() -> tcp::Repr {
    tcp::Repr {
        src_port: 0,
        dst_port: 0,
        seq_number: 0,
        ack_number: None,
        flags: TcpFlags::SYN,
        window_len: 65535,
        window_scale: Some(7),
        max_seg_size: Some(1460),
        sack_permitted: true,
        sack_ranges: [None; 3],
        timestamp: Some((0, 0)),
        payload_len: 0,
    }
}

impl TcpSyn6 {
    fn new(setup: ProbeSetup6) -> TcpSyn6 {
        let syn = syn_repr();
        let l4_len = syn.buffer_len();
        let mut frame = base_frame(&setup, IpProtocol::TCP, l4_len);
        let l4 = L4_AT..L4_AT + l4_len;
        syn.emit(
            &mut tcp::Packet::new_unchecked(&mut frame[l4.clone()]),
            &template_ips(&setup),
        );
        let options = &frame[L4_AT + tcp::HEADER_LEN..l4.end];
        let tsval_at = L4_AT + tcp::HEADER_LEN + timestamp_offset(options);
        let patcher = patcher(&setup, frame, IpProtocol::TCP, l4_len, L4_AT + 16);
        TcpSyn6 {
            setup,
            patcher,
            tsval_at,
        }
    }

    fn token(&self, target: Ipv6Addr, port: u16) -> u64 {
        self.setup
            .validator
            .token(IpAddr::V6(self.setup.src_ip), IpAddr::V6(target), port)
    }
}

impl ProbeModule6 for TcpSyn6 {
    fn name(&self) -> &'static str {
        "tcp_syn"
    }
    fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: Ipv6Addr, port: u16, now_us: u32) -> usize {
        let token = self.token(target, port);
        let seq = token as u32;
        let rest = [
            Word::l4(L4_AT, source_port(token)),
            Word::l4(L4_AT + 2, port),
            Word::l4(L4_AT + 4, hi(seq)),
            Word::l4(L4_AT + 6, lo(seq)),
            Word::l4(self.tsval_at, hi(now_us)),
            Word::l4(self.tsval_at + 2, lo(now_us)),
        ];
        write_to(&self.patcher, buf, target, &rest)
    }

    fn bpf_filter(&self) -> String {
        // `tcp[13]` does not compile for IPv6 in libpcap: index the flags from the fixed header.
        let flags = BPF_L4 + 13;
        format!(
            "ip6 and dst host {} and tcp and dst portrange {} and (ip6[{flags}] & 0x04 != 0 or ip6[{flags}] & 0x12 = 0x12)",
            self.setup.src_ip,
            ephemeral_range()
        )
    }

    fn classify(&self, ip: &ipv6::Packet<&[u8]>, now_us: u32) -> Verdict {
        if ip.next_header() != IpProtocol::TCP {
            return Verdict::NotOurs;
        }
        let Ok(seg) = tcp::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        let Some(class) = tcp_class(seg.flags()) else {
            return Verdict::NotOurs;
        };
        let token = self.token(ip.src_addr(), seg.src_port());
        if seg.dst_port() != source_port(token)
            || seg.ack_number() != (token as u32).wrapping_add(1)
        {
            return Verdict::Invalid;
        }
        let mut r = reply(ip, seg.src_port(), class, class == "synack");
        r.dport = seg.dst_port();
        r.window = seg.window_len();
        read_options(&seg, &mut r, now_us);
        Verdict::Valid(r)
    }
}

/// SYN-ACK and RST are the answers to a SYN; anything else is other traffic.
fn tcp_class(flags: TcpFlags) -> Option<&'static str> {
    if flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
        Some("synack")
    } else if flags.contains(TcpFlags::RST) {
        Some("rst")
    } else {
        None
    }
}

/// The RST a scanner sends for each IPv6 SYN-ACK, so the target drops its half-open connection.
#[derive(Clone, Debug)]
pub struct RstTemplate6 {
    patcher: Patcher,
}

impl RstTemplate6 {
    pub fn new(setup: &ProbeSetup6) -> RstTemplate6 {
        let rst = tcp::Repr {
            flags: TcpFlags::RST,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            timestamp: None,
            ..syn_repr()
        };
        let l4_len = tcp::HEADER_LEN;
        let mut frame = base_frame(setup, IpProtocol::TCP, l4_len);
        rst.emit(
            &mut tcp::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + l4_len]),
            &template_ips(setup),
        );
        let patcher = patcher(setup, frame, IpProtocol::TCP, l4_len, L4_AT + 16);
        RstTemplate6 { patcher }
    }

    /// The RST answering a SYN-ACK from `target:port` to our `sport`; `seq` is the ACK number
    /// the SYN-ACK carried.
    pub fn write(
        &self,
        buf: &mut [u8],
        target: Ipv6Addr,
        port: u16,
        sport: u16,
        seq: u32,
    ) -> usize {
        let rest = [
            Word::l4(L4_AT, sport),
            Word::l4(L4_AT + 2, port),
            Word::l4(L4_AT + 4, hi(seq)),
            Word::l4(L4_AT + 6, lo(seq)),
        ];
        write_to(&self.patcher, buf, target, &rest)
    }
}

// ---------------------------------------------------------------------------------------------

/// `icmp_echo` over IPv6: an ICMPv6 echo request whose identifier and sequence number come from
/// the validation token and whose data carries the send time (echoed back, so replies give RTTs).
struct IcmpEcho6 {
    setup: ProbeSetup6,
    patcher: Patcher,
}

const ECHO_DATA: usize = 8;

impl IcmpEcho6 {
    fn new(setup: ProbeSetup6) -> IcmpEcho6 {
        let l4_len = icmpv6::HEADER_LEN + ECHO_DATA;
        let mut frame = base_frame(&setup, IpProtocol::ICMPV6, l4_len);
        let echo = icmpv6::Repr::EchoRequest {
            ident: 0,
            seq_no: 0,
            data_len: ECHO_DATA,
        };
        echo.emit(
            &mut icmpv6::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + l4_len]),
            &setup.src_ip,
            &Ipv6Addr::UNSPECIFIED,
        );
        let patcher = patcher(&setup, frame, IpProtocol::ICMPV6, l4_len, L4_AT + 2);
        IcmpEcho6 { setup, patcher }
    }

    /// Identifier and sequence number for `target`: the token's upper half, as over IPv4.
    fn ids(&self, target: Ipv6Addr) -> (u16, u16) {
        let token =
            self.setup
                .validator
                .token(IpAddr::V6(self.setup.src_ip), IpAddr::V6(target), 0);
        ((token >> 32) as u16, (token >> 48) as u16)
    }

    fn classify_reply(&self, ip: &ipv6::Packet<&[u8]>, now_us: u32) -> Verdict {
        let Ok(icmp) = icmpv6::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        if self.ids(ip.src_addr()) != (icmp.echo_ident(), icmp.echo_seq_no()) {
            return Verdict::Invalid;
        }
        let mut r = reply(ip, 0, "echoreply", true);
        if let Some(sent) = icmp.payload().first_chunk::<4>() {
            r.rtt_us = Some(u64::from(now_us.wrapping_sub(u32::from_be_bytes(*sent))));
        }
        r.icmp_type = Some(icmp.msg_type().0);
        r.icmp_code = Some(icmp.msg_code());
        Verdict::Valid(r)
    }

    /// An error about one of our echo requests quotes it: validate the quoted identifiers.
    fn classify_error(&self, ip: &ipv6::Packet<&[u8]>) -> Verdict {
        let Some((target, quoted)) = quoted_datagram(ip.payload(), IpProtocol::ICMPV6) else {
            return Verdict::NotOurs;
        };
        let Ok(echo) = icmpv6::Packet::new_checked(quoted) else {
            return Verdict::Invalid;
        };
        if self.ids(target) != (echo.echo_ident(), echo.echo_seq_no()) {
            return Verdict::Invalid;
        }
        let icmp = icmpv6::Packet::new_unchecked(ip.payload());
        let mut r = reply(ip, 0, icmp_error_class(icmp.msg_type()), false);
        r.saddr = IpAddr::V6(target);
        r.icmp_type = Some(icmp.msg_type().0);
        r.icmp_code = Some(icmp.msg_code());
        Verdict::Valid(r)
    }
}

impl ProbeModule6 for IcmpEcho6 {
    fn name(&self) -> &'static str {
        "icmp_echo"
    }
    fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: Ipv6Addr, _port: u16, now_us: u32) -> usize {
        let (ident, seq) = self.ids(target);
        let data = L4_AT + icmpv6::HEADER_LEN;
        let rest = [
            Word::l4(L4_AT + 4, ident),
            Word::l4(L4_AT + 6, seq),
            Word::l4(data, hi(now_us)),
            Word::l4(data + 2, lo(now_us)),
        ];
        write_to(&self.patcher, buf, target, &rest)
    }

    fn bpf_filter(&self) -> String {
        format!(
            "ip6 and dst host {} and icmp6 and (ip6[{BPF_L4}] = 129 or ip6[{BPF_L4}] = 1 or ip6[{BPF_L4}] = 3)",
            self.setup.src_ip
        )
    }

    fn classify(&self, ip: &ipv6::Packet<&[u8]>, now_us: u32) -> Verdict {
        if ip.next_header() != IpProtocol::ICMPV6 {
            return Verdict::NotOurs;
        }
        match ip.payload().first().map(|&t| icmpv6::Message(t)) {
            Some(icmpv6::Message::ECHO_REPLY) => self.classify_reply(ip, now_us),
            _ => self.classify_error(ip),
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// `udp` (and `dns`) over IPv6: a datagram with a fixed payload; the source port comes from the
/// validation token, and for DNS the query id too.
struct UdpProbe6 {
    setup: ProbeSetup6,
    patcher: Patcher,
    /// Frame offset of the DNS query id, for `dns`.
    dns_id_at: Option<usize>,
}

impl UdpProbe6 {
    fn new(
        setup: ProbeSetup6,
        payload: Vec<u8>,
        dns_id_at: Option<usize>,
    ) -> Result<UdpProbe6, String> {
        let l4_len = udp::HEADER_LEN + payload.len();
        if L4_AT + l4_len > sonde_craft::MAX_FRAME {
            return Err(format!(
                "UDP payload of {} bytes does not fit in one IPv6 frame (at most {})",
                payload.len(),
                sonde_craft::MAX_FRAME - L4_AT - udp::HEADER_LEN
            ));
        }
        let mut frame = base_frame(&setup, IpProtocol::UDP, l4_len);
        let payload_at = L4_AT + udp::HEADER_LEN;
        frame[payload_at..payload_at + payload.len()].copy_from_slice(&payload);
        let dgram = udp::Repr {
            src_port: 0,
            dst_port: 0,
            payload_len: payload.len(),
        };
        dgram.emit(
            &mut udp::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + l4_len]),
            &template_ips(&setup),
        );
        let dns_id_at = dns_id_at.map(|at| payload_at + at);
        if let Some(at) = dns_id_at {
            frame[at..at + 2].fill(0);
        }
        let patcher = patcher(&setup, frame, IpProtocol::UDP, l4_len, L4_AT + 6);
        Ok(UdpProbe6 {
            setup,
            patcher,
            dns_id_at,
        })
    }

    fn token(&self, target: Ipv6Addr, port: u16) -> u64 {
        self.setup
            .validator
            .token(IpAddr::V6(self.setup.src_ip), IpAddr::V6(target), port)
    }

    fn classify_udp(&self, ip: &ipv6::Packet<&[u8]>) -> Verdict {
        let Ok(dgram) = udp::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        let token = self.token(ip.src_addr(), dgram.src_port());
        if dgram.dst_port() != source_port(token) {
            return Verdict::Invalid;
        }
        let mut r = reply(ip, dgram.src_port(), "udp", true);
        r.dport = dgram.dst_port();
        r.udp_len = Some(dgram.payload().len() as u16);
        if self.dns_id_at.is_some() && !read_dns(dgram.payload(), token, &mut r) {
            return Verdict::Invalid;
        }
        Verdict::Valid(r)
    }

    fn classify_icmp(&self, ip: &ipv6::Packet<&[u8]>) -> Verdict {
        let Some((target, quoted)) = quoted_datagram(ip.payload(), IpProtocol::UDP) else {
            return Verdict::NotOurs;
        };
        let Ok(head) = udp::Packet::new_quoted(quoted) else {
            return Verdict::Invalid;
        };
        if head.src_port() != source_port(self.token(target, head.dst_port())) {
            return Verdict::Invalid;
        }
        let icmp = icmpv6::Packet::new_unchecked(ip.payload());
        let mut r = reply(
            ip,
            head.dst_port(),
            icmp_error_class(icmp.msg_type()),
            false,
        );
        r.saddr = IpAddr::V6(target);
        r.dport = head.src_port();
        r.icmp_type = Some(icmp.msg_type().0);
        r.icmp_code = Some(icmp.msg_code());
        Verdict::Valid(r)
    }
}

/// Fills the DNS fields from a response to the query `token` identifies; false if it is not one
/// (unparsable, a query, or another id).
fn read_dns(payload: &[u8], token: u64, r: &mut Reply) -> bool {
    let Ok(msg) = dns::Packet::new_checked(payload) else {
        return false;
    };
    if msg.id() != (token >> 16) as u16 || !msg.is_response() {
        return false;
    }
    r.classification = "dns";
    r.dns_rcode = Some(msg.rcode());
    r.dns_answers = Some(msg.answer_count());
    true
}

impl ProbeModule6 for UdpProbe6 {
    fn name(&self) -> &'static str {
        if self.dns_id_at.is_some() {
            "dns"
        } else {
            "udp"
        }
    }
    fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: Ipv6Addr, port: u16, _now_us: u32) -> usize {
        let token = self.token(target, port);
        let sport = Word::l4(L4_AT, source_port(token));
        let dport = Word::l4(L4_AT + 2, port);
        match self.dns_id_at {
            Some(at) => write_to(
                &self.patcher,
                buf,
                target,
                &[sport, dport, Word::l4(at, (token >> 16) as u16)],
            ),
            None => write_to(&self.patcher, buf, target, &[sport, dport]),
        }
    }

    fn bpf_filter(&self) -> String {
        format!(
            "ip6 and dst host {} and ((udp and dst portrange {}) or ({}))",
            self.setup.src_ip,
            ephemeral_range(),
            icmp6_errors()
        )
    }

    fn classify(&self, ip: &ipv6::Packet<&[u8]>, _now_us: u32) -> Verdict {
        match ip.next_header() {
            IpProtocol::UDP => self.classify_udp(ip),
            IpProtocol::ICMPV6 => self.classify_icmp(ip),
            _ => Verdict::NotOurs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1);
    const TARGET: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 9, 0xfedc, 0xba98, 0x7654, 0x3210);
    const ROUTER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
    const SENT_AT: u32 = 1_000_000;
    const NOW: u32 = 1_000_250;

    fn setup() -> ProbeSetup6 {
        ProbeSetup6 {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip: OURS,
            validator: Validator::from_seed(42),
            hop_limit: 64,
        }
    }

    fn options() -> ModuleOptions {
        ModuleOptions {
            payload: b"hello".to_vec(),
            dns_name: "example.com".into(),
            dns_type: 1,
        }
    }

    fn module(kind: ModuleKind) -> Box<dyn ProbeModule6> {
        build6(kind, setup(), &options()).unwrap()
    }

    /// The same module under another scan's key.
    fn other_key(kind: ModuleKind) -> Box<dyn ProbeModule6> {
        let setup = ProbeSetup6 {
            validator: Validator::from_seed(43),
            ..setup()
        };
        build6(kind, setup, &options()).unwrap()
    }

    fn sent_to(m: &dyn ProbeModule6, target: Ipv6Addr, port: u16) -> Vec<u8> {
        let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
        let n = m.write(&mut buf, target, port, SENT_AT);
        assert_eq!(n, m.frame_len());
        buf.truncate(n);
        buf
    }

    /// The probe frame as sent, its Ethernet and IPv6 headers checked; returns the IPv6 packet.
    fn sent(m: &dyn ProbeModule6, port: u16, next_header: IpProtocol) -> Vec<u8> {
        let frame = sent_to(m, TARGET, port);
        assert!(frame.len() >= MIN_FRAME);
        let eth = ethernet::Frame::new_checked(&frame[..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::Ipv6);
        let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(
            (
                ip.src_addr(),
                ip.dst_addr(),
                ip.hop_limit(),
                ip.next_header()
            ),
            (OURS, TARGET, 64, next_header)
        );
        let len = ipv6::HEADER_LEN + usize::from(ip.payload_len());
        eth.payload()[..len].to_vec()
    }

    /// An IPv6 packet from `src` to us carrying `l4` (with its checksum already right).
    fn ip_packet(src: Ipv6Addr, next_header: IpProtocol, l4: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; ipv6::HEADER_LEN + l4.len()];
        buf[ipv6::HEADER_LEN..].copy_from_slice(l4);
        let r = ipv6::Repr {
            src_addr: src,
            dst_addr: OURS,
            next_header,
            payload_len: l4.len(),
            hop_limit: 61,
            traffic_class: 0,
            flow_label: 0,
        };
        r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
        buf
    }

    fn classify(m: &dyn ProbeModule6, packet: &[u8]) -> Verdict {
        m.classify(&ipv6::Packet::new_checked(packet).unwrap(), NOW)
    }

    fn is_invalid(m: &dyn ProbeModule6, packet: &[u8]) -> bool {
        matches!(classify(m, packet), Verdict::Invalid)
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> IpPair {
        IpPair::V6 { src, dst }
    }

    /// An ICMPv6 error from `src` quoting `quoted` (a whole IPv6 packet we sent).
    fn icmp_error(src: Ipv6Addr, error: icmpv6::Repr, quoted: &[u8]) -> Vec<u8> {
        let mut msg = vec![0u8; icmpv6::HEADER_LEN + quoted.len()];
        msg[icmpv6::HEADER_LEN..].copy_from_slice(quoted);
        error.emit(
            &mut icmpv6::Packet::new_unchecked(&mut msg[..]),
            &src,
            &OURS,
        );
        ip_packet(src, IpProtocol::ICMPV6, &msg)
    }

    // ---- tcp_syn -----------------------------------------------------------------------------

    fn tcp_answer(sport: u16, dport: u16, ack: u32, flags: TcpFlags) -> Vec<u8> {
        let repr = tcp::Repr {
            src_port: sport,
            dst_port: dport,
            seq_number: 77,
            ack_number: Some(ack),
            flags,
            window_len: 64240,
            window_scale: Some(7),
            max_seg_size: Some(1440),
            sack_permitted: true,
            sack_ranges: [None; 3],
            timestamp: Some((5555, SENT_AT)),
            payload_len: 0,
        };
        let mut seg = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut tcp::Packet::new_unchecked(&mut seg[..]),
            &v6(TARGET, OURS),
        );
        ip_packet(TARGET, IpProtocol::TCP, &seg)
    }

    /// The SYN to TARGET:80, checksum verified: its source port and sequence number.
    fn syn_sent(m: &dyn ProbeModule6) -> (u16, u32) {
        let ip = sent(m, 80, IpProtocol::TCP);
        let seg = tcp::Packet::new_checked(&ip[ipv6::HEADER_LEN..]).unwrap();
        assert!(seg.verify_checksum(&v6(OURS, TARGET)));
        assert_eq!((seg.dst_port(), seg.flags()), (80, TcpFlags::SYN));
        (seg.src_port(), seg.seq_number())
    }

    #[test]
    fn syn_probe_is_well_formed_and_its_synack_validates() {
        let m = module(ModuleKind::TcpSyn);
        let (sport, seq) = syn_sent(m.as_ref());
        let synack = tcp_answer(
            80,
            sport,
            seq.wrapping_add(1),
            TcpFlags::SYN | TcpFlags::ACK,
        );
        let Verdict::Valid(r) = classify(m.as_ref(), &synack) else {
            panic!("genuine SYN-ACK rejected")
        };
        assert_eq!(
            (
                r.saddr,
                r.daddr,
                r.sport,
                r.dport,
                r.classification,
                r.success
            ),
            (
                IpAddr::V6(TARGET),
                IpAddr::V6(OURS),
                80,
                sport,
                "synack",
                true
            )
        );
        assert_eq!((r.ttl, r.ipid, r.window), (61, 0, 64240));
        assert_eq!(
            (r.tcp_mss, r.tcp_wscale, r.tcp_sack_ok, r.tcp_ts, r.rtt_us),
            (Some(1440), Some(7), true, Some(5555), Some(250))
        );
        let rst = tcp_answer(
            80,
            sport,
            seq.wrapping_add(1),
            TcpFlags::RST | TcpFlags::ACK,
        );
        let Verdict::Valid(r) = classify(m.as_ref(), &rst) else {
            panic!("genuine RST rejected")
        };
        assert!(!r.success && r.classification == "rst");
    }

    #[test]
    fn forged_tcp_replies_are_invalid() {
        let m = module(ModuleKind::TcpSyn);
        let (sport, seq) = syn_sent(m.as_ref());
        let synack = TcpFlags::SYN | TcpFlags::ACK;
        let ack = seq.wrapping_add(1);
        for forged in [
            tcp_answer(80, sport, seq, synack),     // wrong ack
            tcp_answer(80, sport ^ 1, ack, synack), // wrong port
            tcp_answer(443, sport, ack, synack),    // another target port
        ] {
            assert!(is_invalid(m.as_ref(), &forged));
        }
        let genuine = tcp_answer(80, sport, ack, synack);
        assert!(is_invalid(other_key(ModuleKind::TcpSyn).as_ref(), &genuine));
        // A plain ACK is not a reply to a SYN at all.
        let plain = tcp_answer(80, sport, ack, TcpFlags::ACK);
        assert!(matches!(classify(m.as_ref(), &plain), Verdict::NotOurs));
    }

    #[test]
    fn patched_checksums_hold_for_many_targets() {
        // Addresses with high words near 0xffff exercise the end-around carries.
        let m = module(ModuleKind::TcpSyn);
        let u = module(ModuleKind::Udp);
        for i in 0..2000u32 {
            let bits = u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            let target = Ipv6Addr::from(bits | if i % 3 == 0 { !0xffffu128 } else { 0 });
            let port = (i * 40503) as u16;
            let frame = sent_to(m.as_ref(), target, port);
            let seg = tcp::Packet::new_checked(&frame[L4_AT..]).unwrap();
            assert!(seg.verify_checksum(&v6(OURS, target)), "TCP to {target}");
            let frame = sent_to(u.as_ref(), target, port);
            let l4_end = L4_AT + udp::HEADER_LEN + 5;
            let dgram = udp::Packet::new_checked(&frame[L4_AT..l4_end]).unwrap();
            assert!(dgram.verify_checksum(&v6(OURS, target)), "UDP to {target}");
            assert_ne!(
                dgram.checksum(),
                0,
                "UDP over IPv6 must not send a zero checksum"
            );
        }
    }

    #[test]
    fn rst_frames_are_well_formed() {
        let t = RstTemplate6::new(&setup());
        let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
        let n = t.write(&mut buf, TARGET, 80, 40000, 0xdead_beef);
        let ip = ipv6::Packet::new_checked(&buf[IP_AT..n]).unwrap();
        assert_eq!((ip.dst_addr(), ip.next_header()), (TARGET, IpProtocol::TCP));
        let seg = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(seg.verify_checksum(&v6(OURS, TARGET)));
        assert_eq!(
            (
                seg.src_port(),
                seg.dst_port(),
                seg.seq_number(),
                seg.flags()
            ),
            (40000, 80, 0xdead_beef, TcpFlags::RST)
        );
    }

    // ---- icmp_echo ---------------------------------------------------------------------------

    /// The echo request as sent (checksum verified) and the reply a target would give to it.
    fn echo_and_reply(m: &dyn ProbeModule6) -> (Vec<u8>, Vec<u8>) {
        let ip = sent(m, 0, IpProtocol::ICMPV6);
        let request = &ip[ipv6::HEADER_LEN..];
        let packet = icmpv6::Packet::new_checked(request).unwrap();
        assert!(packet.verify_checksum(&OURS, &TARGET), "ICMPv6 checksum");
        assert_eq!(packet.msg_type(), icmpv6::Message::ECHO_REQUEST);
        assert_eq!(&packet.payload()[..4], &SENT_AT.to_be_bytes());
        let mut echo = request.to_vec();
        icmpv6::Repr::EchoReply {
            ident: packet.echo_ident(),
            seq_no: packet.echo_seq_no(),
            data_len: ECHO_DATA,
        }
        .emit(
            &mut icmpv6::Packet::new_unchecked(&mut echo[..]),
            &TARGET,
            &OURS,
        );
        (ip, ip_packet(TARGET, IpProtocol::ICMPV6, &echo))
    }

    #[test]
    fn echo_reply_validates_and_forgery_does_not() {
        let m = module(ModuleKind::IcmpEcho);
        let (_, reply) = echo_and_reply(m.as_ref());
        let Verdict::Valid(r) = classify(m.as_ref(), &reply) else {
            panic!("genuine echo reply rejected")
        };
        assert_eq!(
            (r.saddr, r.classification, r.success, r.rtt_us, r.icmp_type),
            (IpAddr::V6(TARGET), "echoreply", true, Some(250), Some(129))
        );
        assert!(is_invalid(other_key(ModuleKind::IcmpEcho).as_ref(), &reply));
        let mut forged = reply.clone();
        forged[ipv6::HEADER_LEN + 5] ^= 1; // another identifier
        assert!(is_invalid(m.as_ref(), &forged));
        let mut forged = reply;
        forged[ipv6::HEADER_LEN + 7] ^= 1; // another sequence number
        assert!(is_invalid(m.as_ref(), &forged));
    }

    #[test]
    fn echo_errors_validate_through_the_quoted_request() {
        let m = module(ModuleKind::IcmpEcho);
        let (request, _) = echo_and_reply(m.as_ref());
        let exceeded = icmpv6::Repr::TimeExceeded {
            code: 0,
            data_len: request.len(),
        };
        let Verdict::Valid(r) = classify(m.as_ref(), &icmp_error(ROUTER, exceeded, &request))
        else {
            panic!("time exceeded rejected")
        };
        assert_eq!(
            (
                r.saddr,
                r.classification,
                r.success,
                r.icmp_type,
                r.icmp_code
            ),
            (IpAddr::V6(TARGET), "timxceed", false, Some(3), Some(0))
        );
        let mut forged = request.clone();
        forged[ipv6::HEADER_LEN + 4] ^= 1; // another identifier quoted
        assert!(is_invalid(
            m.as_ref(),
            &icmp_error(ROUTER, exceeded, &forged)
        ));
        // Other ICMPv6 errors (here a parameter problem) are not replies to this module.
        let param = icmpv6::Repr::Other {
            msg_type: 4,
            code: 0,
            rest_of_header: 0,
            data_len: request.len(),
        };
        let problem = icmp_error(ROUTER, param, &request);
        assert!(matches!(classify(m.as_ref(), &problem), Verdict::NotOurs));
    }

    // ---- udp and dns -------------------------------------------------------------------------

    fn udp_answer(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut seg = vec![0u8; udp::HEADER_LEN + payload.len()];
        seg[udp::HEADER_LEN..].copy_from_slice(payload);
        udp::Repr {
            src_port: sport,
            dst_port: dport,
            payload_len: payload.len(),
        }
        .emit(
            &mut udp::Packet::new_unchecked(&mut seg[..]),
            &v6(TARGET, OURS),
        );
        ip_packet(TARGET, IpProtocol::UDP, &seg)
    }

    /// The datagram to TARGET:`port` as sent (checksum verified): the IPv6 packet.
    fn udp_sent(m: &dyn ProbeModule6, port: u16) -> Vec<u8> {
        let ip = sent(m, port, IpProtocol::UDP);
        let dgram = udp::Packet::new_checked(&ip[ipv6::HEADER_LEN..]).unwrap();
        assert!(dgram.verify_checksum(&v6(OURS, TARGET)));
        assert_eq!(dgram.dst_port(), port);
        ip
    }

    fn udp_sport(ip: &[u8]) -> u16 {
        udp::Packet::new_checked(&ip[ipv6::HEADER_LEN..])
            .unwrap()
            .src_port()
    }

    #[test]
    fn udp_reply_and_port_unreachable_validate() {
        let m = module(ModuleKind::Udp);
        let ip = udp_sent(m.as_ref(), 9999);
        assert_eq!(&ip[ipv6::HEADER_LEN + udp::HEADER_LEN..], b"hello");
        let sport = udp_sport(&ip);
        let answer = udp_answer(9999, sport, b"hi");
        assert!(
            matches!(classify(m.as_ref(), &answer), Verdict::Valid(r) if r.classification == "udp" && r.udp_len == Some(2) && r.dport == sport)
        );
        assert!(is_invalid(m.as_ref(), &udp_answer(9999, sport ^ 1, b"hi")));
        assert!(is_invalid(other_key(ModuleKind::Udp).as_ref(), &answer));

        let unreach = icmpv6::Repr::DstUnreachable {
            code: 4,
            data_len: ip.len(),
        };
        let Verdict::Valid(r) = classify(m.as_ref(), &icmp_error(TARGET, unreach, &ip)) else {
            panic!("port unreachable rejected")
        };
        assert_eq!(
            (r.saddr, r.sport, r.dport, r.classification, r.success),
            (IpAddr::V6(TARGET), 9999, sport, "unreach", false)
        );
        assert_eq!((r.icmp_type, r.icmp_code), (Some(1), Some(4)));
        let mut forged = ip.clone();
        forged[ipv6::HEADER_LEN + 1] ^= 1; // another quoted source port
        assert!(is_invalid(
            m.as_ref(),
            &icmp_error(TARGET, unreach, &forged)
        ));
    }

    #[test]
    fn dns_response_id_must_match() {
        let m = module(ModuleKind::Dns);
        let ip = udp_sent(m.as_ref(), 53);
        let query = &ip[ipv6::HEADER_LEN + udp::HEADER_LEN..];
        assert_ne!(dns::Packet::new_checked(query).unwrap().id(), 0);
        let mut answer = query.to_vec();
        answer[2] |= 0x80; // QR: response
        answer[3] = 0x83; // NXDOMAIN
        let sport = udp_sport(&ip);
        let Verdict::Valid(r) = classify(m.as_ref(), &udp_answer(53, sport, &answer)) else {
            panic!("genuine DNS response rejected")
        };
        assert_eq!(
            (r.classification, r.dns_rcode, r.dns_answers),
            ("dns", Some(3), Some(0))
        );
        answer[0] ^= 0xff; // another query id
        assert!(is_invalid(m.as_ref(), &udp_answer(53, sport, &answer)));
        // The query itself, reflected back, is not a response.
        assert!(is_invalid(m.as_ref(), &udp_answer(53, sport, query)));
    }

    #[test]
    fn modules_are_named_and_filters_name_our_address() {
        for kind in ModuleKind::ALL {
            let m = module(kind);
            assert_eq!(m.name(), kind.name());
            assert!(m
                .bpf_filter()
                .starts_with("ip6 and dst host 2001:db8:ffff::1 and "));
        }
        let big = ModuleOptions {
            payload: vec![0; 1500],
            ..options()
        };
        assert!(build6(ModuleKind::Udp, setup(), &big).is_err());
        let bad_name = ModuleOptions {
            dns_name: "a..b".into(),
            ..options()
        };
        assert!(build6(ModuleKind::Dns, setup(), &bad_name).is_err());
    }

    #[test]
    fn filter_strings() {
        let filters: Vec<String> = ModuleKind::ALL
            .into_iter()
            .map(|k| module(k).bpf_filter())
            .collect();
        for f in &filters {
            println!("{f}");
        }
        assert_eq!(
            filters[0],
            "ip6 and dst host 2001:db8:ffff::1 and tcp and dst portrange 61000-65535 and (ip6[53] & 0x04 != 0 or ip6[53] & 0x12 = 0x12)"
        );
    }
}
