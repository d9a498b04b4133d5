//! Frames in and out: [`parse`] reads a received Ethernet frame with `sonde-wire`'s checked
//! views into a [`Seg`] (or, for an ICMP error quoting one of our segments, an [`IcmpError`]:
//! see segment/icmp.rs), never panicking on hostile input; and [`render`] writes one segment
//! as a whole Ethernet + IPv4/IPv6 + TCP frame straight into a transmit buffer, with correct
//! IPv4 header and TCP checksums.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sonde_craft::cookie::PortRange;
use sonde_wire::{
    ethernet, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
    TcpOption,
};

pub(crate) mod icmp;

use crate::conn::{addr_to_key, is_mapped};
use icmp::IcmpError;

/// Our side of every frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Option<Ipv4Addr>,
    pub src_ip6: Option<Ipv6Addr>,
    pub ttl: u8,
    pub ports: PortRange,
    pub verify_checksums: bool,
}

impl Link {
    /// Our address in the family of `target`.
    pub fn ours(&self, target: IpAddr) -> Option<IpAddr> {
        match target {
            IpAddr::V4(_) => self.src_ip.map(IpAddr::V4),
            IpAddr::V6(v6) if !is_mapped(&v6) => self.src_ip6.map(IpAddr::V6),
            IpAddr::V6(_) => None,
        }
    }
}

/// A received segment of ours, as the state machine needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg<'a> {
    /// The peer (the target) and its table key.
    pub addr: IpAddr,
    pub key: [u8; 16],
    /// Our address (the frame's destination).
    pub ours: IpAddr,
    /// The peer's port and ours.
    pub port: u16,
    pub our_port: u16,
    pub tcp: tcp::Repr,
    pub payload: &'a [u8],
}

impl Seg<'_> {
    pub fn has(&self, flag: TcpFlags) -> bool {
        self.tcp.flags.contains(flag)
    }
}

/// What a received frame is.
pub(crate) enum Parsed<'a> {
    NotOurs,
    Invalid,
    /// Ours, but its TCP or IPv4 header checksum does not verify.
    BadChecksum,
    Ours(Seg<'a>),
    /// An ICMP error quoting a segment from one of our addresses and ports.
    Icmp(IcmpError),
}

/// The port on our side of `frame`, read from its headers alone (no checksum, no address or
/// range check): a TCP segment's destination port, or the source port of the TCP segment an
/// ICMP or ICMPv6 error quotes. Grab's threads hand a frame to the thread whose port lane this
/// port is in before any of them parses it whole.
pub fn our_port_of(frame: &[u8]) -> Option<u16> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    let packet = frame.get(ethernet::HEADER_LEN..)?;
    let (protocol, payload) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(packet).ok()?;
            (ip.protocol(), packet.get(ip.header_len()..)?)
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(packet).ok()?;
            (ip.next_header(), packet.get(ipv6::HEADER_LEN..)?)
        }
        _ => return None,
    };
    let port_at = |bytes: &[u8], at: usize| match bytes.get(at..at + 2) {
        Some(&[a, b]) => Some(u16::from_be_bytes([a, b])),
        _ => None,
    };
    match protocol {
        IpProtocol::TCP => port_at(payload, 2),
        IpProtocol::ICMP => {
            let quoted = ipv4::Packet::new_quoted(payload.get(icmp::ICMP_HEADER_LEN..)?).ok()?;
            let tcp = payload.get(icmp::ICMP_HEADER_LEN + quoted.header_len()..)?;
            port_at(tcp, 0)
        }
        IpProtocol::ICMPV6 => {
            let quoted = payload.get(icmp::ICMP_HEADER_LEN..)?;
            ipv6::Packet::new_quoted(quoted).ok()?;
            port_at(quoted.get(ipv6::HEADER_LEN..)?, 0)
        }
        _ => None,
    }
}

/// Reads `frame`: ours when it is TCP to one of our addresses and a port of our range, or an
/// ICMP error to our address about such a segment of ours.
pub(crate) fn parse<'a>(frame: &'a [u8], link: &Link) -> Parsed<'a> {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return Parsed::NotOurs;
    };
    // Slices are taken from `frame` itself (the views' accessors borrow the view).
    let packet = &frame[ethernet::HEADER_LEN..];
    let (addr, ours, segment) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let Ok(ip) = ipv4::Packet::new_checked(packet) else {
                return Parsed::NotOurs;
            };
            if ip.protocol() == IpProtocol::ICMP && Some(ip.dst_addr()) == link.src_ip {
                return icmp::parse_v4(&ip, link);
            }
            if ip.protocol() != IpProtocol::TCP || Some(ip.dst_addr()) != link.src_ip {
                return Parsed::NotOurs;
            }
            if ip.is_fragment() {
                return Parsed::Invalid;
            }
            if link.verify_checksums && !ip.verify_checksum() {
                return Parsed::BadChecksum;
            }
            let payload = &packet[ip.header_len()..usize::from(ip.total_len())];
            (
                IpAddr::V4(ip.src_addr()),
                IpAddr::V4(ip.dst_addr()),
                payload,
            )
        }
        EtherType::Ipv6 => {
            let Ok(ip) = ipv6::Packet::new_checked(packet) else {
                return Parsed::NotOurs;
            };
            if ip.next_header() == IpProtocol::ICMPV6 && Some(ip.dst_addr()) == link.src_ip6 {
                return icmp::parse_v6(&ip, link);
            }
            // Extension headers before TCP are not followed: no sane reply carries them.
            if ip.next_header() != IpProtocol::TCP || Some(ip.dst_addr()) != link.src_ip6 {
                return Parsed::NotOurs;
            }
            let src = ip.src_addr();
            if is_mapped(&src) {
                return Parsed::Invalid;
            }
            let payload =
                &packet[ipv6::HEADER_LEN..ipv6::HEADER_LEN + usize::from(ip.payload_len())];
            (IpAddr::V6(src), IpAddr::V6(ip.dst_addr()), payload)
        }
        _ => return Parsed::NotOurs,
    };
    let Ok(packet) = tcp::Packet::new_checked(segment) else {
        return Parsed::NotOurs;
    };
    if !link.ports.contains(packet.dst_port()) {
        return Parsed::NotOurs;
    }
    // Header and options as wire reads them (a malformed option makes the segment invalid; the
    // peer's SACK blocks are read but the client never uses them).
    let checksums = if link.verify_checksums {
        ChecksumMode::Verify
    } else {
        ChecksumMode::Ignore
    };
    let tcp = match tcp::Repr::parse(&packet, &ip_pair(addr, ours), checksums) {
        Ok(tcp) => tcp,
        Err(sonde_wire::Error::Checksum) => return Parsed::BadChecksum,
        Err(_) => return Parsed::Invalid,
    };
    Parsed::Ours(Seg {
        addr,
        key: addr_to_key(addr),
        ours,
        port: tcp.src_port,
        our_port: tcp.dst_port,
        tcp,
        payload: &segment[packet.header_len()..],
    })
}

fn ip_pair(src: IpAddr, dst: IpAddr) -> IpPair {
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpPair::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpPair::V6 { src, dst },
        _ => unreachable!("both addresses of a packet are of its family"),
    }
}

/// The TCP header of a segment to send. Options follow Linux's layout: on a SYN, MSS,
/// SACK-permitted, timestamps, NOP, window scale (20 bytes); otherwise NOP, NOP, timestamps
/// and NOP, NOP, SACK blocks (at most 40 bytes with three blocks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    /// Sets the ACK flag.
    pub ack: Option<u32>,
    pub flags: TcpFlags,
    pub window: u16,
    /// A SYN's MSS and window scale (SACK-permitted and timestamps go with them).
    pub syn: Option<(u16, u8)>,
    /// (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    pub sacks: [Option<(u32, u32)>; 3],
}

impl Header {
    pub fn new(src_port: u16, dst_port: u16, seq: u32, ack: Option<u32>, flags: TcpFlags) -> Self {
        Header {
            src_port,
            dst_port,
            seq,
            ack,
            flags,
            window: 0,
            syn: None,
            timestamps: None,
            sacks: [None; 3],
        }
    }

    fn sack_count(&self) -> usize {
        self.sacks.iter().flatten().count()
    }

    fn len(&self) -> usize {
        if self.syn.is_some() {
            return tcp::HEADER_LEN + 20;
        }
        let ts = if self.timestamps.is_some() { 12 } else { 0 };
        let sacks = match self.sack_count() {
            0 => 0,
            n => 4 + 8 * n,
        };
        tcp::HEADER_LEN + ts + sacks
    }

    /// Writes the header into `segment` (header and payload, payload in place) and the
    /// checksum over it.
    fn emit(&self, segment: &mut [u8], ips: &IpPair) {
        let len = self.len();
        let mut packet = tcp::Packet::new_unchecked(&mut *segment);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq);
        packet.set_ack_number(self.ack.unwrap_or(0));
        packet.set_header_len(len);
        let mut flags = self.flags;
        flags.set(TcpFlags::ACK, self.ack.is_some());
        packet.set_flags(flags);
        packet.set_window_len(self.window);
        packet.set_urgent_at(0);
        let options = packet.options_mut();
        let mut at = 0;
        let mut put = |option: TcpOption| at += option.emit(&mut options[at..]);
        if let Some((mss, ws)) = self.syn {
            let (tsval, tsecr) = self.timestamps.unwrap_or((0, 0));
            put(TcpOption::Mss(mss));
            put(TcpOption::SackPermitted);
            put(TcpOption::Timestamps { tsval, tsecr });
            put(TcpOption::Nop);
            put(TcpOption::WindowScale(ws));
        } else {
            if let Some((tsval, tsecr)) = self.timestamps {
                put(TcpOption::Nop);
                put(TcpOption::Nop);
                put(TcpOption::Timestamps { tsval, tsecr });
            }
            if self.sack_count() > 0 {
                let mut blocks = [None; 4];
                blocks[..3].copy_from_slice(&self.sacks);
                put(TcpOption::Nop);
                put(TcpOption::Nop);
                put(TcpOption::SackRange(blocks));
            }
        }
        packet.fill_checksum(ips);
    }
}

/// Writes the frame carrying `tcp` and `payload` from `ours` to `target` into `buf`, and
/// returns its length.
///
/// # Panics
/// If `buf` is shorter than the frame (transmit buffers hold 1514 bytes, which every segment
/// the engine builds fits: at most 14 + 40 + 60 + 1400 bytes).
pub(crate) fn render(
    link: &Link,
    ours: IpAddr,
    target: IpAddr,
    tcp: &Header,
    payload: &[u8],
    buf: &mut [u8],
) -> usize {
    let header_len = tcp.len();
    let tcp_len = header_len + payload.len();
    let (ethertype, ip_len) = match target {
        IpAddr::V4(_) => (EtherType::Ipv4, ipv4::HEADER_LEN),
        IpAddr::V6(_) => (EtherType::Ipv6, ipv6::HEADER_LEN),
    };
    let l4 = ethernet::HEADER_LEN + ip_len;
    let len = l4 + tcp_len;
    let frame = &mut buf[..len];
    ethernet::Repr {
        src_addr: link.src_mac,
        dst_addr: link.dst_mac,
        ethertype,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut *frame));
    frame[l4 + header_len..].copy_from_slice(payload);
    tcp.emit(&mut frame[l4..], &ip_pair(ours, target));
    let ip = &mut frame[ethernet::HEADER_LEN..];
    match (ours, target) {
        (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => ipv4::Repr {
            src_addr,
            dst_addr,
            protocol: IpProtocol::TCP,
            payload_len: tcp_len,
            ttl: link.ttl,
            ident: 0,
            dont_frag: true,
        }
        .emit(&mut ipv4::Packet::new_unchecked(ip)),
        (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => ipv6::Repr {
            src_addr,
            dst_addr,
            next_header: IpProtocol::TCP,
            payload_len: tcp_len,
            hop_limit: link.ttl,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(ip)),
        _ => unreachable!("our address is of the target's family"),
    }
    len
}
