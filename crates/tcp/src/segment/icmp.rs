//! ICMP errors about our segments: [`parse_v4`] and [`parse_v6`] read a received ICMP or
//! ICMPv6 message with `sonde-wire`'s checked views (never panicking on hostile input) and
//! return the TCP segment it quotes — ours when the quote is from one of our addresses and
//! ports — for the engine to validate against the cookie and the connection.
//!
//! Read: destination unreachable (ICMP type 3, ICMPv6 type 1), fragmentation needed (ICMP type
//! 3 code 4) and Packet Too Big (ICMPv6 type 2). Other errors are not: time exceeded and
//! parameter problems say nothing a grab acts on, and source quench and redirects are obsolete
//! or for routers (Linux ignores them too).

use std::net::IpAddr;

use sonde_wire::{icmpv4, icmpv6, ipv4, ipv6, IpProtocol};

use crate::conn::{addr_to_key, is_mapped};
use crate::segment::{Link, Parsed};
use crate::Icmp;

/// Linux's highest code of an ICMP destination unreachable (`NR_ICMP_UNREACH`); it ignores
/// higher ones, which no RFC defines.
const MAX_UNREACH_CODE: u8 = 15;

/// An ICMP or ICMPv6 error's header before its quote: type, code, checksum and 4 bytes.
pub(crate) const ICMP_HEADER_LEN: usize = 8;

/// What an ICMP error says about the path to the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// Destination unreachable (other than fragmentation needed).
    Unreachable,
    /// Fragmentation needed or Packet Too Big: the MTU of the next hop, as the message gives it
    /// (0 from routers older than RFC 1191).
    TooBig { mtu: u32 },
}

/// An ICMP or ICMPv6 error quoting a TCP segment from one of our addresses and ports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IcmpError {
    /// The quoted segment's destination (the target) and its table key.
    pub addr: IpAddr,
    pub key: [u8; 16],
    /// The quoted segment's source: our address.
    pub ours: IpAddr,
    /// The quoted destination port (the target's) and source port (ours).
    pub port: u16,
    pub our_port: u16,
    /// The quoted sequence number.
    pub seq: u32,
    pub kind: IcmpKind,
    /// Type and code as received.
    pub icmp: Icmp,
}

/// An ICMP message in an IPv4 packet to our address (`ip`, checked).
pub(crate) fn parse_v4(ip: &ipv4::Packet<&[u8]>, link: &Link) -> Parsed<'static> {
    // ICMP errors are small (at most 576 bytes): a fragment is no error of a router's.
    if ip.is_fragment() {
        return Parsed::NotOurs;
    }
    let Ok(message) = icmpv4::Packet::new_checked(ip.payload()) else {
        return Parsed::NotOurs;
    };
    if message.msg_type() != icmpv4::Message::DST_UNREACHABLE {
        return Parsed::NotOurs;
    }
    let kind = match message.msg_code() {
        icmpv4::unreachable::FRAG_NEEDED => IcmpKind::TooBig {
            mtu: u32::from(message.next_hop_mtu()),
        },
        code if code <= MAX_UNREACH_CODE => IcmpKind::Unreachable,
        _ => return Parsed::NotOurs,
    };
    let Ok(quoted) = ipv4::Packet::new_quoted(message.payload()) else {
        return Parsed::NotOurs;
    };
    // Ours are never fragmented: a later fragment is no quote of ours.
    if quoted.protocol() != IpProtocol::TCP || quoted.frag_offset() != 0 {
        return Parsed::NotOurs;
    }
    let icmp = Icmp {
        icmp_type: message.msg_type().0,
        icmp_code: message.msg_code(),
    };
    let parsed = quoted_segment(
        IpAddr::V4(quoted.dst_addr()),
        IpAddr::V4(quoted.src_addr()),
        quoted.payload(),
        kind,
        icmp,
        link,
    );
    // Checksums are checked once the quote shows the error is about us: a bad one is invalid.
    let checked = !link.verify_checksums || (ip.verify_checksum() && message.verify_checksum());
    match parsed {
        Parsed::Icmp(_) if !checked => Parsed::Invalid,
        parsed => parsed,
    }
}

/// An ICMPv6 message in an IPv6 packet to our address (`ip`, checked).
pub(crate) fn parse_v6(ip: &ipv6::Packet<&[u8]>, link: &Link) -> Parsed<'static> {
    let Ok(message) = icmpv6::Packet::new_checked(ip.payload()) else {
        return Parsed::NotOurs;
    };
    let kind = match message.msg_type() {
        icmpv6::Message::DST_UNREACHABLE => IcmpKind::Unreachable,
        icmpv6::Message::PKT_TOO_BIG => IcmpKind::TooBig { mtu: message.mtu() },
        _ => return Parsed::NotOurs,
    };
    let Ok(quoted) = ipv6::Packet::new_quoted(message.payload()) else {
        return Parsed::NotOurs;
    };
    // Our segments carry no extension headers: a quote with any is not of ours.
    if quoted.next_header() != IpProtocol::TCP {
        return Parsed::NotOurs;
    }
    let icmp = Icmp {
        icmp_type: message.msg_type().0,
        icmp_code: message.msg_code(),
    };
    let parsed = quoted_segment(
        IpAddr::V6(quoted.dst_addr()),
        IpAddr::V6(quoted.src_addr()),
        quoted.payload(),
        kind,
        icmp,
        link,
    );
    let bad_source = is_mapped(&ip.src_addr());
    let checked = !link.verify_checksums || message.verify_checksum(&ip.src_addr(), &ip.dst_addr());
    match parsed {
        Parsed::Icmp(_) if bad_source || !checked => Parsed::Invalid,
        parsed => parsed,
    }
}

/// The quoted TCP header's first 8 bytes (ports and sequence number: all a router must
/// quote, RFC 792), of a segment from `ours` to `target`: ours when `ours` is our address of
/// the target's family and the source port is in our range.
fn quoted_segment(
    target: IpAddr,
    ours: IpAddr,
    tcp: &[u8],
    kind: IcmpKind,
    icmp: Icmp,
    link: &Link,
) -> Parsed<'static> {
    let Some(&[s0, s1, d0, d1]) = tcp.get(..4) else {
        return Parsed::NotOurs;
    };
    let our_port = u16::from_be_bytes([s0, s1]);
    if !link.ports.contains(our_port) || link.ours(target) != Some(ours) {
        return Parsed::NotOurs;
    }
    let Some(&[q0, q1, q2, q3]) = tcp.get(4..8) else {
        return Parsed::Invalid;
    };
    Parsed::Icmp(IcmpError {
        addr: target,
        key: addr_to_key(target),
        ours,
        port: u16::from_be_bytes([d0, d1]),
        our_port,
        seq: u32::from_be_bytes([q0, q1, q2, q3]),
        kind,
        icmp,
    })
}
