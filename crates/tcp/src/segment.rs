//! Frames in and out: [`parse`] reads a received Ethernet frame with `sonde-wire`'s checked
//! views into a [`Seg`] (never panicking on hostile input), and [`render`] writes one segment
//! as a whole Ethernet + IPv4/IPv6 + TCP frame straight into a transmit buffer, with correct
//! IPv4 header and TCP checksums.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sonde_craft::cookie::PortRange;
use sonde_wire::{
    ethernet, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
};

use crate::conn::{addr_to_key, is_mapped};

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
    Ours(Seg<'a>),
}

/// Reads `frame`: ours when it is TCP to one of our addresses and a port of our range.
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
            if ip.protocol() != IpProtocol::TCP || Some(ip.dst_addr()) != link.src_ip {
                return Parsed::NotOurs;
            }
            if ip.is_fragment() {
                return Parsed::Invalid;
            }
            if link.verify_checksums && !ip.verify_checksum() {
                return Parsed::Invalid;
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
    let ips = ip_pair(addr, ours);
    let checksums = if link.verify_checksums {
        ChecksumMode::Verify
    } else {
        ChecksumMode::Ignore
    };
    let Ok(repr) = tcp::Repr::parse(&packet, &ips, checksums) else {
        return Parsed::Invalid;
    };
    Parsed::Ours(Seg {
        addr,
        key: addr_to_key(addr),
        ours,
        port: repr.src_port,
        our_port: repr.dst_port,
        tcp: repr,
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

/// Writes the frame carrying `tcp` (whose `payload_len` is `payload.len()`) from `ours` to
/// `target` into `buf`, and returns its length.
///
/// # Panics
/// If `buf` is shorter than the frame (transmit buffers hold 1514 bytes, which every segment
/// the engine builds fits: at most 14 + 40 + 60 + 1400 bytes).
pub(crate) fn render(
    link: &Link,
    ours: IpAddr,
    target: IpAddr,
    tcp: &tcp::Repr,
    payload: &[u8],
    buf: &mut [u8],
) -> usize {
    debug_assert_eq!(tcp.payload_len, payload.len());
    let tcp_len = tcp.buffer_len();
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
    frame[l4 + tcp.header_len()..].copy_from_slice(payload);
    tcp.emit(
        &mut tcp::Packet::new_unchecked(&mut frame[l4..]),
        &ip_pair(ours, target),
    );
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

/// A bare TCP header: no options, no payload.
pub(crate) fn bare(src_port: u16, dst_port: u16, seq: u32, ack: Option<u32>) -> tcp::Repr {
    tcp::Repr {
        src_port,
        dst_port,
        seq_number: seq,
        ack_number: ack,
        flags: TcpFlags::empty(),
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload_len: 0,
    }
}
