//! Probe modules: each prepares its frame once (a [`Patcher`] template), patches it per target
//! with the fields validation needs, names the in-kernel filter that lets only possible replies
//! through, and validates and classifies what comes back.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use sonde_craft::{Patcher, Word};
use sonde_wire::checksum::pseudo_header_v4;
use sonde_wire::{
    dns, ethernet, icmpv4, ipv4, tcp, udp, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
    TcpOption,
};

use crate::reply::Reply;
use crate::validate::{source_port, PortRange, Validator};

const IP_AT: usize = ethernet::HEADER_LEN;
const L4_AT: usize = IP_AT + ipv4::HEADER_LEN;
const IP_DST: usize = IP_AT + 16;
const IP_CHECKSUM: usize = IP_AT + 10;
const MIN_FRAME: usize = 60;

/// What every probe of a scan shares.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSetup {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub validator: Validator,
    pub ttl: u8,
}

/// Module-specific options from the command line.
#[derive(Clone, Debug, Default)]
pub struct ModuleOptions {
    /// UDP payload (`--payload-hex`, `--payload-file`).
    pub payload: Vec<u8>,
    /// DNS query name and type (`--dns-name`, `--dns-type`).
    pub dns_name: String,
    pub dns_type: u16,
}

/// What a received packet turned out to be.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the common case is Valid; boxing it would allocate per reply
pub enum Verdict {
    /// Not a reply to this scan at all (other traffic to our address).
    NotOurs,
    /// Looks like a reply to this scan but fails validation: spoofed, stale, or another scan's.
    Invalid,
    /// A genuine reply; `repeat` and `timestamp_us` are the engine's to fill. Returned by value:
    /// no allocation per received packet.
    Valid(Reply),
}

/// A probe module.
pub trait ProbeModule: Send + Sync {
    fn name(&self) -> &'static str;
    /// Length of every probe frame.
    fn frame_len(&self) -> usize;
    /// Writes the probe for (`target`, `port`) into `buf` and returns its length; `now_us` is
    /// stamped where the reply will carry it back (TCP timestamp, ICMP echo data) for RTTs.
    fn write(&self, buf: &mut [u8], target: Ipv4Addr, port: u16, now_us: u32) -> usize;
    /// A pcap filter expression that passes every frame that can be a reply (the kernel runs it).
    fn bpf_filter(&self) -> String;
    /// Validates and classifies an IPv4 packet addressed to us.
    fn classify(&self, ip: &ipv4::Packet<&[u8]>, now_us: u32) -> Verdict;
}

/// The modules, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    TcpSyn,
    IcmpEcho,
    Udp,
    Dns,
}

impl ModuleKind {
    pub const ALL: [ModuleKind; 4] = [
        ModuleKind::TcpSyn,
        ModuleKind::IcmpEcho,
        ModuleKind::Udp,
        ModuleKind::Dns,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModuleKind::TcpSyn => "tcp_syn",
            ModuleKind::IcmpEcho => "icmp_echo",
            ModuleKind::Udp => "udp",
            ModuleKind::Dns => "dns",
        }
    }

    /// Whether probes carry a port (ICMP does not: its targets use port 0).
    pub fn uses_ports(self) -> bool {
        self != ModuleKind::IcmpEcho
    }
}

impl fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModuleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ModuleKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ModuleKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown probe module \"{s}\": known modules are {}",
                    known.join(", ")
                )
            })
    }
}

/// Prepares the module's template.
pub fn build(
    kind: ModuleKind,
    setup: ProbeSetup,
    options: &ModuleOptions,
) -> Result<Box<dyn ProbeModule>, String> {
    Ok(match kind {
        ModuleKind::TcpSyn => Box::new(TcpSyn::new(setup)),
        ModuleKind::IcmpEcho => Box::new(IcmpEcho::new(setup)),
        ModuleKind::Udp => Box::new(UdpProbe::new(setup, options.payload.clone(), None)?),
        ModuleKind::Dns => {
            let mut query =
                vec![
                    0u8;
                    dns::query_len(&options.dns_name)
                        .map_err(|_| format!("invalid DNS name \"{}\"", options.dns_name))?
                ];
            dns::emit_query(&mut query, 0, &options.dns_name, options.dns_type)
                .map_err(|e| format!("DNS query for \"{}\": {e}", options.dns_name))?;
            Box::new(UdpProbe::new(setup, query, Some(0))?)
        }
    })
}

/// An Ethernet + IPv4 frame with destination, IP checksum and everything past the IP header
/// zeroed; `l4_len` bytes of transport follow, and the frame is padded to the Ethernet minimum.
fn base_frame(setup: &ProbeSetup, protocol: IpProtocol, l4_len: usize) -> Vec<u8> {
    let mut frame = vec![0u8; (L4_AT + l4_len).max(MIN_FRAME)];
    let eth = ethernet::Repr {
        src_addr: setup.src_mac,
        dst_addr: setup.dst_mac,
        ethertype: EtherType::Ipv4,
    };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
    let ip = ipv4::Repr {
        src_addr: setup.src_ip,
        dst_addr: Ipv4Addr::UNSPECIFIED,
        protocol,
        payload_len: l4_len,
        ttl: setup.ttl,
        ident: 54321,
        dont_frag: false,
    };
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut frame[IP_AT..]));
    frame[IP_CHECKSUM..IP_CHECKSUM + 2].fill(0);
    frame
}

/// The two destination-address words, covered by the IP checksum and (if `in_l4`) the pseudo-header.
fn dst_words(dst: Ipv4Addr, in_l4: bool) -> [Word; 2] {
    let [a, b, c, d] = dst.octets();
    [
        Word {
            at: IP_DST,
            value: u16::from_be_bytes([a, b]),
            in_ip: true,
            in_l4,
        },
        Word {
            at: IP_DST + 2,
            value: u16::from_be_bytes([c, d]),
            in_ip: true,
            in_l4,
        },
    ]
}

pub(crate) fn hi(v: u32) -> u16 {
    (v >> 16) as u16
}
pub(crate) fn lo(v: u32) -> u16 {
    v as u16
}

/// A reply row with the fields every module fills the same way.
fn reply(
    ip: &ipv4::Packet<&[u8]>,
    sport: u16,
    classification: &'static str,
    success: bool,
) -> Reply {
    Reply {
        saddr: IpAddr::V4(ip.src_addr()),
        sport,
        daddr: IpAddr::V4(ip.dst_addr()),
        dport: 0,
        classification,
        success,
        repeat: false,
        ttl: ip.ttl(),
        ipid: ip.ident(),
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

pub(crate) fn ephemeral_range() -> String {
    PortRange::DEFAULT.to_string()
}

// ---------------------------------------------------------------------------------------------

/// `tcp_syn`: a SYN with Linux's usual options (MSS, SACK-permitted, timestamps, window scale).
/// The sequence number and source port come from the validation token; the timestamp carries
/// the send time, which the peer echoes, so SYN-ACKs give RTTs without any per-probe state.
struct TcpSyn {
    setup: ProbeSetup,
    patcher: Patcher,
    tsval_at: usize,
}

impl TcpSyn {
    fn new(setup: ProbeSetup) -> TcpSyn {
        let syn = tcp::Repr {
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
        };
        let l4_len = syn.buffer_len();
        let mut frame = base_frame(&setup, IpProtocol::TCP, l4_len);
        let ips = IpPair::V4 {
            src: setup.src_ip,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        syn.emit(
            &mut tcp::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + l4_len]),
            &ips,
        );
        frame[L4_AT + 16..L4_AT + 18].fill(0);
        let tsval_at = L4_AT
            + tcp::HEADER_LEN
            + timestamp_offset(&frame[L4_AT + tcp::HEADER_LEN..L4_AT + l4_len]);
        let pseudo = pseudo_header_v4(
            setup.src_ip,
            Ipv4Addr::UNSPECIFIED,
            IpProtocol::TCP.0,
            l4_len as u16,
        );
        let patcher = Patcher::new(
            frame,
            Some(IP_AT..L4_AT),
            L4_AT..L4_AT + l4_len,
            L4_AT + 16,
            pseudo,
            false,
        );
        TcpSyn {
            setup,
            patcher,
            tsval_at,
        }
    }
}

/// Where the TSval of the timestamps option starts within `options`.
pub(crate) fn timestamp_offset(options: &[u8]) -> usize {
    let mut at = 0;
    while at + 1 < options.len() {
        match options[at] {
            8 => return at + 2,
            0 | 1 => at += 1,
            _ => at += options[at + 1].max(2) as usize,
        }
    }
    unreachable!("the SYN template always carries a timestamps option")
}

impl ProbeModule for TcpSyn {
    fn name(&self) -> &'static str {
        "tcp_syn"
    }
    fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: Ipv4Addr, port: u16, now_us: u32) -> usize {
        let token =
            self.setup
                .validator
                .token(IpAddr::V4(self.setup.src_ip), IpAddr::V4(target), port);
        let seq = token as u32;
        let [d0, d1] = dst_words(target, true);
        let words = [
            d0,
            d1,
            Word::l4(L4_AT, source_port(token)),
            Word::l4(L4_AT + 2, port),
            Word::l4(L4_AT + 4, hi(seq)),
            Word::l4(L4_AT + 6, lo(seq)),
            Word::l4(self.tsval_at, hi(now_us)),
            Word::l4(self.tsval_at + 2, lo(now_us)),
        ];
        self.patcher.write(buf, &words)
    }

    fn bpf_filter(&self) -> String {
        format!(
            "ip and dst host {} and tcp and dst portrange {} and (tcp[13] & 0x04 != 0 or tcp[13] & 0x12 = 0x12)",
            self.setup.src_ip,
            ephemeral_range()
        )
    }

    fn classify(&self, ip: &ipv4::Packet<&[u8]>, now_us: u32) -> Verdict {
        if ip.protocol() != IpProtocol::TCP {
            return Verdict::NotOurs;
        }
        let Ok(seg) = tcp::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        let flags = seg.flags();
        let class = if flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
            "synack"
        } else if flags.contains(TcpFlags::RST) {
            "rst"
        } else {
            return Verdict::NotOurs;
        };
        let token = self.setup.validator.token(
            IpAddr::V4(self.setup.src_ip),
            IpAddr::V4(ip.src_addr()),
            seg.src_port(),
        );
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

pub(crate) fn read_options(seg: &tcp::Packet<&[u8]>, r: &mut Reply, now_us: u32) {
    for option in seg.iter_options().map_while(Result::ok) {
        match option {
            TcpOption::Mss(v) => r.tcp_mss = Some(v),
            TcpOption::WindowScale(v) => r.tcp_wscale = Some(v),
            TcpOption::SackPermitted => r.tcp_sack_ok = true,
            TcpOption::Timestamps { tsval, tsecr } => {
                r.tcp_ts = Some(tsval);
                // A zero echo means the peer echoed nothing, not a send time of zero.
                if tsecr != 0 {
                    r.rtt_us = Some(u64::from(now_us.wrapping_sub(tsecr)));
                }
            }
            _ => {}
        }
    }
}

/// The RST a scanner sends for each SYN-ACK, so the target drops its half-open connection
/// (needed when the source address is not the host's own, whose kernel would reset it anyway).
#[derive(Clone, Debug)]
pub struct RstTemplate {
    patcher: Patcher,
}

impl RstTemplate {
    pub fn new(setup: &ProbeSetup) -> RstTemplate {
        let rst = tcp::Repr {
            src_port: 0,
            dst_port: 0,
            seq_number: 0,
            ack_number: None,
            flags: TcpFlags::RST,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload_len: 0,
        };
        let mut frame = base_frame(setup, IpProtocol::TCP, tcp::HEADER_LEN);
        let ips = IpPair::V4 {
            src: setup.src_ip,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        rst.emit(
            &mut tcp::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + tcp::HEADER_LEN]),
            &ips,
        );
        frame[L4_AT + 16..L4_AT + 18].fill(0);
        let pseudo = pseudo_header_v4(
            setup.src_ip,
            Ipv4Addr::UNSPECIFIED,
            IpProtocol::TCP.0,
            tcp::HEADER_LEN as u16,
        );
        let patcher = Patcher::new(
            frame,
            Some(IP_AT..L4_AT),
            L4_AT..L4_AT + tcp::HEADER_LEN,
            L4_AT + 16,
            pseudo,
            false,
        );
        RstTemplate { patcher }
    }

    /// The RST answering a SYN-ACK from `target:port` to our `sport`; `seq` is the ACK number
    /// the SYN-ACK carried.
    pub fn write(
        &self,
        buf: &mut [u8],
        target: Ipv4Addr,
        port: u16,
        sport: u16,
        seq: u32,
    ) -> usize {
        let [d0, d1] = dst_words(target, true);
        let words = [
            d0,
            d1,
            Word::l4(L4_AT, sport),
            Word::l4(L4_AT + 2, port),
            Word::l4(L4_AT + 4, hi(seq)),
            Word::l4(L4_AT + 6, lo(seq)),
        ];
        self.patcher.write(buf, &words)
    }
}

// ---------------------------------------------------------------------------------------------

/// `icmp_echo`: an echo request whose identifier and sequence number come from the validation
/// token and whose data carries the send time (echoed back, so replies give RTTs).
struct IcmpEcho {
    setup: ProbeSetup,
    patcher: Patcher,
}

const ECHO_DATA: usize = 8;

impl IcmpEcho {
    fn new(setup: ProbeSetup) -> IcmpEcho {
        let l4_len = 8 + ECHO_DATA;
        let mut frame = base_frame(&setup, IpProtocol::ICMP, l4_len);
        let echo = icmpv4::Repr::EchoRequest {
            ident: 0,
            seq_no: 0,
            data_len: ECHO_DATA,
        };
        echo.emit(&mut icmpv4::Packet::new_unchecked(
            &mut frame[L4_AT..L4_AT + l4_len],
        ));
        frame[L4_AT + 2..L4_AT + 4].fill(0);
        let patcher = Patcher::new(
            frame,
            Some(IP_AT..L4_AT),
            L4_AT..L4_AT + l4_len,
            L4_AT + 2,
            0,
            false,
        );
        IcmpEcho { setup, patcher }
    }

    fn ids(&self, target: Ipv4Addr) -> (u16, u16) {
        let token =
            self.setup
                .validator
                .token(IpAddr::V4(self.setup.src_ip), IpAddr::V4(target), 0);
        ((token >> 32) as u16, (token >> 48) as u16)
    }
}

impl ProbeModule for IcmpEcho {
    fn name(&self) -> &'static str {
        "icmp_echo"
    }
    fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: Ipv4Addr, _port: u16, now_us: u32) -> usize {
        let (ident, seq) = self.ids(target);
        let [d0, d1] = dst_words(target, false);
        let data = L4_AT + 8;
        let words = [
            d0,
            d1,
            Word::l4(L4_AT + 4, ident),
            Word::l4(L4_AT + 6, seq),
            Word::l4(data, hi(now_us)),
            Word::l4(data + 2, lo(now_us)),
        ];
        self.patcher.write(buf, &words)
    }

    fn bpf_filter(&self) -> String {
        format!(
            "ip and dst host {} and icmp and (icmp[0] = 0 or icmp[0] = 3 or icmp[0] = 11)",
            self.setup.src_ip
        )
    }

    fn classify(&self, ip: &ipv4::Packet<&[u8]>, now_us: u32) -> Verdict {
        if ip.protocol() != IpProtocol::ICMP {
            return Verdict::NotOurs;
        }
        let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        let (kind, code) = (icmp.msg_type(), icmp.msg_code());
        if kind == icmpv4::Message::ECHO_REPLY {
            if self.ids(ip.src_addr()) != (icmp.echo_ident(), icmp.echo_seq_no()) {
                return Verdict::Invalid;
            }
            let mut r = reply(ip, 0, "echoreply", true);
            let data = icmp.payload();
            if data.len() >= 4 {
                let sent = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                r.rtt_us = Some(u64::from(now_us.wrapping_sub(sent)));
            }
            r.icmp_type = Some(kind.0);
            r.icmp_code = Some(code);
            return Verdict::Valid(r);
        }
        // An error about one of our echo requests quotes it: validate the quoted identifiers.
        let Some((quoted_dst, quoted)) = quoted_datagram(ip.payload(), IpProtocol::ICMP) else {
            return Verdict::NotOurs;
        };
        if quoted.len() < 8
            || self.ids(quoted_dst)
                != (
                    u16::from_be_bytes([quoted[4], quoted[5]]),
                    u16::from_be_bytes([quoted[6], quoted[7]]),
                )
        {
            return Verdict::Invalid;
        }
        let mut r = reply(ip, 0, icmp_error_class(kind), false);
        r.saddr = IpAddr::V4(quoted_dst);
        r.icmp_type = Some(kind.0);
        r.icmp_code = Some(code);
        Verdict::Valid(r)
    }
}

fn icmp_error_class(kind: icmpv4::Message) -> &'static str {
    if kind == icmpv4::Message::TIME_EXCEEDED {
        "timxceed"
    } else {
        "unreach"
    }
}

/// For an ICMP error (the bytes of its ICMP message) quoting one of our datagrams of
/// `protocol`: the quoted destination (the probe's target) and the quoted transport bytes.
fn quoted_datagram(icmp_bytes: &[u8], protocol: IpProtocol) -> Option<(Ipv4Addr, &[u8])> {
    let icmp = icmpv4::Packet::new_checked(icmp_bytes).ok()?;
    let kind = icmp.msg_type();
    if kind != icmpv4::Message::DST_UNREACHABLE && kind != icmpv4::Message::TIME_EXCEEDED {
        return None;
    }
    let quoted = icmp_bytes.get(8..)?;
    let inner = ipv4::Packet::new_quoted(quoted).ok()?;
    if inner.protocol() != protocol {
        return None;
    }
    Some((inner.dst_addr(), quoted.get(inner.header_len()..)?))
}

// ---------------------------------------------------------------------------------------------

/// `udp` (and `dns`): a datagram with a fixed payload; the source port comes from the validation
/// token, and for DNS the query id too (`id_at`: offset of the id within the payload).
struct UdpProbe {
    setup: ProbeSetup,
    patcher: Patcher,
    dns_id_at: Option<usize>,
}

impl UdpProbe {
    fn new(
        setup: ProbeSetup,
        payload: Vec<u8>,
        dns_id_at: Option<usize>,
    ) -> Result<UdpProbe, String> {
        let l4_len = udp::HEADER_LEN + payload.len();
        if L4_AT + l4_len > sonde_craft::MAX_FRAME {
            return Err(format!(
                "UDP payload of {} bytes does not fit in one frame (at most {})",
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
        let ips = IpPair::V4 {
            src: setup.src_ip,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        dgram.emit(
            &mut udp::Packet::new_unchecked(&mut frame[L4_AT..L4_AT + l4_len]),
            &ips,
        );
        frame[L4_AT + 6..L4_AT + 8].fill(0);
        if let Some(at) = dns_id_at {
            frame[payload_at + at..payload_at + at + 2].fill(0);
        }
        let pseudo = pseudo_header_v4(
            setup.src_ip,
            Ipv4Addr::UNSPECIFIED,
            IpProtocol::UDP.0,
            l4_len as u16,
        );
        let patcher = Patcher::new(
            frame,
            Some(IP_AT..L4_AT),
            L4_AT..L4_AT + l4_len,
            L4_AT + 6,
            pseudo,
            true,
        );
        Ok(UdpProbe {
            setup,
            patcher,
            dns_id_at: dns_id_at.map(|at| payload_at + at),
        })
    }

    fn token(&self, target: Ipv4Addr, port: u16) -> u64 {
        self.setup
            .validator
            .token(IpAddr::V4(self.setup.src_ip), IpAddr::V4(target), port)
    }

    fn classify_udp(&self, ip: &ipv4::Packet<&[u8]>) -> Verdict {
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
        if self.dns_id_at.is_some() {
            let Ok(msg) = dns::Packet::new_checked(dgram.payload()) else {
                return Verdict::Invalid;
            };
            if msg.id() != (token >> 16) as u16 || !msg.is_response() {
                return Verdict::Invalid;
            }
            r.classification = "dns";
            r.dns_rcode = Some(msg.rcode());
            r.dns_answers = Some(msg.answer_count());
        }
        Verdict::Valid(r)
    }

    fn classify_icmp(&self, ip: &ipv4::Packet<&[u8]>) -> Verdict {
        let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
            return Verdict::NotOurs;
        };
        let Some((target, quoted)) = quoted_datagram(ip.payload(), IpProtocol::UDP) else {
            return Verdict::NotOurs;
        };
        let Ok(head) = udp::Packet::new_quoted(quoted) else {
            return Verdict::Invalid;
        };
        if head.src_port() != source_port(self.token(target, head.dst_port())) {
            return Verdict::Invalid;
        }
        let mut r = reply(
            ip,
            head.dst_port(),
            icmp_error_class(icmp.msg_type()),
            false,
        );
        r.saddr = IpAddr::V4(target);
        r.dport = head.src_port();
        r.icmp_type = Some(icmp.msg_type().0);
        r.icmp_code = Some(icmp.msg_code());
        Verdict::Valid(r)
    }
}

impl ProbeModule for UdpProbe {
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
    fn write(&self, buf: &mut [u8], target: Ipv4Addr, port: u16, _now_us: u32) -> usize {
        let token = self.token(target, port);
        let [d0, d1] = dst_words(target, true);
        let sport = Word::l4(L4_AT, source_port(token));
        let dport = Word::l4(L4_AT + 2, port);
        match self.dns_id_at {
            Some(at) => self.patcher.write(
                buf,
                &[d0, d1, sport, dport, Word::l4(at, (token >> 16) as u16)],
            ),
            None => self.patcher.write(buf, &[d0, d1, sport, dport]),
        }
    }

    fn bpf_filter(&self) -> String {
        format!(
            "ip and dst host {} and ((udp and dst portrange {}) or (icmp and (icmp[0] = 3 or icmp[0] = 11)))",
            self.setup.src_ip,
            ephemeral_range()
        )
    }

    fn classify(&self, ip: &ipv4::Packet<&[u8]>, _now_us: u32) -> Verdict {
        match ip.protocol() {
            IpProtocol::UDP => self.classify_udp(ip),
            IpProtocol::ICMP => self.classify_icmp(ip),
            _ => Verdict::NotOurs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
    const TARGET: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 9);

    fn setup() -> ProbeSetup {
        ProbeSetup {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip: OURS,
            validator: Validator::from_seed(42),
            ttl: 64,
        }
    }

    fn module(kind: ModuleKind) -> Box<dyn ProbeModule> {
        let options = ModuleOptions {
            payload: b"hello".to_vec(),
            dns_name: "example.com".into(),
            dns_type: 1,
        };
        build(kind, setup(), &options).unwrap()
    }

    /// The probe frame as sent: parsed back with every checksum verified.
    fn sent(m: &dyn ProbeModule, port: u16) -> Vec<u8> {
        let mut buf = vec![0u8; 1514];
        let n = m.write(&mut buf, TARGET, port, 1_000_000);
        buf.truncate(n);
        buf
    }

    /// An IPv4 packet from `src` to us carrying `l4` (with its checksum already right).
    fn ip_packet(src: Ipv4Addr, protocol: IpProtocol, l4: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 20 + l4.len()];
        buf[20..].copy_from_slice(l4);
        let r = ipv4::Repr {
            src_addr: src,
            dst_addr: OURS,
            protocol,
            payload_len: l4.len(),
            ttl: 61,
            ident: 7,
            dont_frag: true,
        };
        r.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..]));
        buf
    }

    fn classify(m: &dyn ProbeModule, packet: &[u8]) -> Verdict {
        m.classify(&ipv4::Packet::new_checked(packet).unwrap(), 1_000_250)
    }

    fn tcp_answer(sport: u16, dport: u16, ack: u32, flags: TcpFlags) -> Vec<u8> {
        let repr = tcp::Repr {
            src_port: sport,
            dst_port: dport,
            seq_number: 77,
            ack_number: Some(ack),
            flags,
            window_len: 64240,
            window_scale: Some(7),
            max_seg_size: Some(1460),
            sack_permitted: true,
            sack_ranges: [None; 3],
            timestamp: Some((5555, 1_000_000)),
            payload_len: 0,
        };
        let mut seg = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut tcp::Packet::new_unchecked(&mut seg[..]),
            &IpPair::V4 {
                src: TARGET,
                dst: OURS,
            },
        );
        ip_packet(TARGET, IpProtocol::TCP, &seg)
    }

    #[test]
    fn syn_probe_is_well_formed_and_its_synack_validates() {
        let m = module(ModuleKind::TcpSyn);
        let frame = sent(m.as_ref(), 80);
        let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr(), TARGET);
        let seg = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(seg.verify_checksum(&IpPair::V4 {
            src: OURS,
            dst: TARGET
        }));
        assert_eq!((seg.dst_port(), seg.flags()), (80, TcpFlags::SYN));
        let (sport, seq) = (seg.src_port(), seg.seq_number());

        let Verdict::Valid(r) = classify(
            m.as_ref(),
            &tcp_answer(
                80,
                sport,
                seq.wrapping_add(1),
                TcpFlags::SYN | TcpFlags::ACK,
            ),
        ) else {
            panic!("genuine SYN-ACK rejected")
        };
        assert_eq!(
            (r.saddr, r.sport, r.classification, r.success),
            (IpAddr::V4(TARGET), 80, "synack", true)
        );
        assert_eq!(
            (r.tcp_mss, r.tcp_wscale, r.tcp_sack_ok, r.tcp_ts, r.rtt_us),
            (Some(1460), Some(7), true, Some(5555), Some(250))
        );
        let Verdict::Valid(r) = classify(
            m.as_ref(),
            &tcp_answer(
                80,
                sport,
                seq.wrapping_add(1),
                TcpFlags::RST | TcpFlags::ACK,
            ),
        ) else {
            panic!("genuine RST rejected")
        };
        assert!(!r.success && r.classification == "rst");
    }

    #[test]
    fn forged_tcp_replies_are_invalid() {
        let m = module(ModuleKind::TcpSyn);
        let frame = sent(m.as_ref(), 80);
        let seg = tcp::Packet::new_checked(&frame[34..]).unwrap();
        let (sport, seq) = (seg.src_port(), seg.seq_number());
        let synack = TcpFlags::SYN | TcpFlags::ACK;
        for forged in [
            tcp_answer(80, sport, seq, synack), // wrong ack
            tcp_answer(80, sport ^ 1, seq.wrapping_add(1), synack), // wrong port
            tcp_answer(443, sport, seq.wrapping_add(1), synack), // another target port
        ] {
            assert!(matches!(classify(m.as_ref(), &forged), Verdict::Invalid));
        }
        // The same reply under another scan's key is invalid too.
        let other = build(
            ModuleKind::TcpSyn,
            ProbeSetup {
                validator: Validator::from_seed(43),
                ..setup()
            },
            &ModuleOptions::default(),
        )
        .unwrap();
        assert!(matches!(
            classify(
                other.as_ref(),
                &tcp_answer(80, sport, seq.wrapping_add(1), synack)
            ),
            Verdict::Invalid
        ));
        // A plain ACK is not a reply to a SYN at all.
        assert!(matches!(
            classify(
                m.as_ref(),
                &tcp_answer(80, sport, seq.wrapping_add(1), TcpFlags::ACK)
            ),
            Verdict::NotOurs
        ));
    }

    #[test]
    fn echo_reply_validates_and_forgery_does_not() {
        let m = module(ModuleKind::IcmpEcho);
        let frame = sent(m.as_ref(), 0);
        assert_eq!(frame.len(), 60);
        let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
        assert!(ip.verify_checksum());
        let mut echo = ip.payload().to_vec();
        assert_eq!(sonde_wire::checksum::checksum(&echo), 0, "ICMP checksum");
        echo[0] = 0; // request -> reply
        echo[2..4].fill(0);
        let c = sonde_wire::checksum::checksum(&echo);
        echo[2..4].copy_from_slice(&c.to_be_bytes());
        let Verdict::Valid(r) = classify(m.as_ref(), &ip_packet(TARGET, IpProtocol::ICMP, &echo))
        else {
            panic!("genuine echo reply rejected")
        };
        assert_eq!(
            (r.classification, r.success, r.rtt_us),
            ("echoreply", true, Some(250))
        );
        echo[5] ^= 1; // another identifier
        assert!(matches!(
            classify(m.as_ref(), &ip_packet(TARGET, IpProtocol::ICMP, &echo)),
            Verdict::Invalid
        ));
    }

    fn udp_answer(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut seg = vec![0u8; 8 + payload.len()];
        seg[8..].copy_from_slice(payload);
        udp::Repr {
            src_port: sport,
            dst_port: dport,
            payload_len: payload.len(),
        }
        .emit(
            &mut udp::Packet::new_unchecked(&mut seg[..]),
            &IpPair::V4 {
                src: TARGET,
                dst: OURS,
            },
        );
        ip_packet(TARGET, IpProtocol::UDP, &seg)
    }

    #[test]
    fn udp_reply_and_port_unreachable_validate() {
        let m = module(ModuleKind::Udp);
        let frame = sent(m.as_ref(), 9999);
        let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
        let dgram = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(dgram.verify_checksum(&IpPair::V4 {
            src: OURS,
            dst: TARGET
        }));
        assert_eq!(dgram.payload(), b"hello");
        let sport = dgram.src_port();
        assert!(
            matches!(classify(m.as_ref(), &udp_answer(9999, sport, b"hi")), Verdict::Valid(r) if r.classification == "udp" && r.udp_len == Some(2))
        );
        assert!(matches!(
            classify(m.as_ref(), &udp_answer(9999, sport ^ 1, b"hi")),
            Verdict::Invalid
        ));
        // ICMP port unreachable quoting the probe's IP header and first 8 bytes.
        let mut icmp = vec![3u8, 3, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&frame[14..14 + 28]);
        let c = sonde_wire::checksum::checksum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let Verdict::Valid(r) = classify(m.as_ref(), &ip_packet(TARGET, IpProtocol::ICMP, &icmp))
        else {
            panic!("port unreachable rejected")
        };
        assert_eq!(
            (r.classification, r.success, r.sport, r.icmp_code),
            ("unreach", false, 9999, Some(3))
        );
    }

    #[test]
    fn dns_response_id_must_match() {
        let m = module(ModuleKind::Dns);
        let frame = sent(m.as_ref(), 53);
        let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
        let dgram = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(dgram.verify_checksum(&IpPair::V4 {
            src: OURS,
            dst: TARGET
        }));
        let query = dns::Packet::new_checked(dgram.payload()).unwrap();
        let mut answer = dgram.payload().to_vec();
        answer[2] |= 0x80; // QR: response
        answer[3] = 0x83; // NXDOMAIN
        let Verdict::Valid(r) = classify(m.as_ref(), &udp_answer(53, dgram.src_port(), &answer))
        else {
            panic!("genuine DNS response rejected")
        };
        assert_eq!(
            (r.classification, r.dns_rcode, r.dns_answers),
            ("dns", Some(3), Some(0))
        );
        answer[0] ^= 0xff; // another query id
        assert!(matches!(
            classify(m.as_ref(), &udp_answer(53, dgram.src_port(), &answer)),
            Verdict::Invalid
        ));
        assert_ne!(query.id(), 0);
    }

    #[test]
    fn rst_frames_are_well_formed() {
        let t = RstTemplate::new(&setup());
        let mut buf = vec![0u8; 1514];
        let n = t.write(&mut buf, TARGET, 80, 40000, 0xdead_beef);
        let ip = ipv4::Packet::new_checked(&buf[14..n]).unwrap();
        assert!(ip.verify_checksum());
        let seg = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert!(seg.verify_checksum(&IpPair::V4 {
            src: OURS,
            dst: TARGET
        }));
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

    #[test]
    fn unknown_module_lists_the_known_ones() {
        let err = "tcp_ack".parse::<ModuleKind>().unwrap_err();
        assert!(
            err.contains("tcp_ack") && err.contains("tcp_syn, icmp_echo, udp, dns"),
            "{err}"
        );
    }
}
