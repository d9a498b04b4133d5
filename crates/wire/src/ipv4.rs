//! IPv4 headers (RFC 791).
//!
//! The payload is bounded by the total-length field, not by the buffer, so
//! Ethernet padding after a short packet is never mistaken for payload.

use core::fmt;
use std::net::Ipv4Addr;

use crate::bytes::{read_array, read_u16, write_u16};
use crate::checksum;
use crate::{ChecksumMode, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

mod field {
    use crate::bytes::Field;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC: Field = 12..16;
    pub const DST: Field = 16..20;
    pub const OPTIONS: usize = 20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// An IP protocol number, shared by the IPv4 protocol and IPv6 next-header
/// fields.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Protocol(pub u8);

impl Protocol {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: Protocol = Protocol(0);
    /// ICMP for IPv4.
    pub const ICMP: Protocol = Protocol(1);
    /// TCP.
    pub const TCP: Protocol = Protocol(6);
    /// UDP.
    pub const UDP: Protocol = Protocol(17);
    /// IPv6 routing header.
    pub const IPV6_ROUTE: Protocol = Protocol(43);
    /// IPv6 fragment header.
    pub const IPV6_FRAG: Protocol = Protocol(44);
    /// ICMP for IPv6.
    pub const ICMPV6: Protocol = Protocol(58);
    /// IPv6 "no next header".
    pub const IPV6_NONXT: Protocol = Protocol(59);
    /// IPv6 destination options.
    pub const IPV6_OPTS: Protocol = Protocol(60);

    fn name(self) -> Option<&'static str> {
        Some(match self {
            Protocol::HOPOPT => "HOPOPT",
            Protocol::ICMP => "ICMP",
            Protocol::TCP => "TCP",
            Protocol::UDP => "UDP",
            Protocol::IPV6_ROUTE => "IPv6-Route",
            Protocol::IPV6_FRAG => "IPv6-Frag",
            Protocol::ICMPV6 => "ICMPv6",
            Protocol::IPV6_NONXT => "IPv6-NoNxt",
            Protocol::IPV6_OPTS => "IPv6-Opts",
            _ => return None,
        })
    }
}

impl From<u8> for Protocol {
    fn from(value: u8) -> Self {
        Protocol(value)
    }
}

impl From<Protocol> for u8 {
    fn from(value: Protocol) -> Self {
        value.0
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol({self})")
    }
}

/// A view of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if the lengths
    /// in the header disagree with it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Wraps the copy of a datagram quoted inside an ICMP error, which
    /// usually ends before its total length: like [`Packet::new_checked`] but
    /// without requiring the buffer to reach the total length. The payload is
    /// then whatever was quoted.
    pub fn new_quoted(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_header()?;
        Ok(packet)
    }

    /// Checks the version, and that the header length and total length are
    /// consistent with each other and with the buffer, so that no accessor
    /// can panic.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if usize::from(self.total_len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Everything [`Packet::check_len`] checks but the buffer reaching the
    /// total length.
    fn check_header(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 || self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if self.header_len() > len {
            return Err(Error::Truncated);
        }
        if usize::from(self.total_len()) < self.header_len() {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 once checked).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated services code point.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit congestion notification bits.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// True for any fragment, first or not.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        read_array::<4>(self.buffer.as_ref(), field::SRC).into()
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        read_array::<4>(self.buffer.as_ref(), field::DST).into()
    }

    /// Options bytes, between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// Where the payload ends: the total length, or the end of a quoted
    /// copy that stops short of it.
    fn payload_end(&self) -> usize {
        usize::from(self.total_len()).min(self.buffer.as_ref().len())
    }

    /// The payload, up to the total length (trailing padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.payload_end()]
    }

    /// True when the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0x0f) | (version << 4);
    }

    /// Sets the header length in bytes; must be a multiple of 4 up to 60.
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len.is_multiple_of(4) && (HEADER_LEN..=60).contains(&len));
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (6 bits).
    pub fn set_dscp(&mut self, dscp: u8) {
        let byte = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *byte = (*byte & 0x03) | (dscp << 2);
    }

    /// Sets the ECN bits (2 bits).
    pub fn set_ecn(&mut self, ecn: u8) {
        let byte = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *byte = (*byte & 0xfc) | (ecn & 0x03);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, ident: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    fn set_flag_bits(&mut self, mask: u16, on: bool) {
        let old = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let new = if on { old | mask } else { old & !mask };
        write_u16(self.buffer.as_mut(), field::FLG_OFF, new);
    }

    /// Sets the don't-fragment flag.
    pub fn set_dont_frag(&mut self, on: bool) {
        self.set_flag_bits(FLAG_DF, on);
    }

    /// Sets the more-fragments flag.
    pub fn set_more_frags(&mut self, on: bool) {
        self.set_flag_bits(FLAG_MF, on);
    }

    /// Sets the fragment offset in bytes (rounded down to 8).
    pub fn set_frag_offset(&mut self, offset: u16) {
        let old = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        write_u16(
            self.buffer.as_mut(),
            field::FLG_OFF,
            (old & !OFFSET_MASK) | (offset >> 3),
        );
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the payload protocol.
    pub fn set_protocol(&mut self, protocol: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.0;
    }

    /// Sets the checksum field as is.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.octets());
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(sum);
    }

    /// Mutable options bytes.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[field::OPTIONS..end]
    }

    /// Mutable payload, up to the total length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..self.payload_end();
        &mut self.buffer.as_mut()[range]
    }
}

/// The IPv4 header fields sonde sets and reads. Options, DSCP/ECN and
/// fragmentation are not represented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: Protocol,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Repr {
    /// Reads a packet, verifying its header checksum if `checksums` says so.
    /// Fragments are [`Error::Unsupported`]: a fragment's payload cannot be
    /// parsed on its own. Options are skipped.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        checksums: ChecksumMode,
    ) -> Result<Repr> {
        packet.check_len()?;
        if checksums.verify() && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        if packet.is_fragment() {
            return Err(Error::Unsupported);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: packet.payload().len(),
            ttl: packet.ttl(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
        })
    }

    /// Header length: [`HEADER_LEN`], as no options are emitted.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with its checksum, leaving the payload untouched.
    ///
    /// # Panics
    /// If the buffer is shorter than the header, or `buffer_len()` exceeds
    /// 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let total_len =
            u16::try_from(self.buffer_len()).expect("IPv4 packet longer than 65535 bytes");
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_dscp(0);
        packet.set_ecn(0);
        packet.set_total_len(total_len);
        packet.set_ident(self.ident);
        write_u16(packet.buffer.as_mut(), field::FLG_OFF, 0);
        packet.set_dont_frag(self.dont_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::*;

    const HOST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const SERVER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    const FIXTURES: [&[u8]; 7] = [
        &IPV4_TCP_SYN,
        &IPV4_TCP_SYNACK,
        &IPV4_TCP_PSH_SACK,
        &IPV4_ICMP_ECHO_REQUEST,
        &IPV4_ICMP_ECHO_REPLY,
        &IPV4_ICMP_TIME_EXCEEDED,
        &IPV4_UDP_DNS,
    ];

    #[test]
    fn parses_tcp_syn_header() {
        let packet = Packet::new_checked(&IPV4_TCP_SYN[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!((packet.dscp(), packet.ecn()), (0, 0));
        assert_eq!(packet.total_len(), 60);
        assert_eq!(packet.ident(), 0x1c46);
        assert!(packet.dont_frag() && !packet.more_frags() && !packet.is_fragment());
        assert_eq!(packet.frag_offset(), 0);
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), Protocol::TCP);
        assert_eq!(packet.checksum(), 0x3231);
        assert_eq!(packet.src_addr(), HOST);
        assert_eq!(packet.dst_addr(), SERVER);
        assert!(packet.options().is_empty());
        assert_eq!(packet.payload().len(), 40);
        assert!(packet.verify_checksum());
    }

    #[test]
    fn time_exceeded_from_router_has_dscp() {
        let packet = Packet::new_checked(&IPV4_ICMP_TIME_EXCEEDED[..]).unwrap();
        assert_eq!(packet.dscp(), 48, "CS6, network control");
        assert_eq!(packet.ttl(), 255);
        assert!(!packet.dont_frag());
        assert_eq!(packet.protocol(), Protocol::ICMP);
    }

    #[test]
    fn all_fixtures_round_trip() {
        for fixture in FIXTURES {
            let packet = Packet::new_checked(fixture).unwrap();
            assert!(packet.verify_checksum());
            let repr = Repr::parse(&packet, ChecksumMode::Verify).unwrap();
            assert_eq!(repr.buffer_len(), fixture.len());
            let mut buf = fixture.to_vec();
            buf[..HEADER_LEN].fill(0);
            let mut packet = Packet::new_unchecked(&mut buf[..]);
            repr.emit(&mut packet);
            // DSCP and ECN are not part of the Repr; restore them as a caller
            // wanting to mark packets would.
            let original = Packet::new_unchecked(fixture);
            packet.set_dscp(original.dscp());
            packet.set_ecn(original.ecn());
            packet.fill_checksum();
            assert_eq!(&buf[..], fixture, "{repr:?}");
        }
    }

    #[test]
    fn payload_ignores_ethernet_padding() {
        let mut padded = IPV4_TCP_SYN.to_vec();
        padded.extend_from_slice(&[0xee; 6]);
        let packet = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(packet.payload(), &IPV4_TCP_SYN[20..]);
        let repr = Repr::parse(&packet, ChecksumMode::Verify).unwrap();
        assert_eq!(repr.payload_len, 40);
    }

    #[test]
    fn options_are_exposed_and_skipped() {
        // The SYN header with a 4-byte NOP,NOP,NOP,EOL option block inserted.
        let mut buf = IPV4_TCP_SYN[..20].to_vec();
        buf.extend_from_slice(&[1, 1, 1, 0]);
        buf.extend_from_slice(&IPV4_TCP_SYN[20..]);
        let mut packet = Packet::new_unchecked(&mut buf[..]);
        packet.set_header_len(24);
        packet.set_total_len(64);
        packet.fill_checksum();
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.options(), &[1, 1, 1, 0]);
        assert_eq!(packet.payload(), &IPV4_TCP_SYN[20..]);
        assert_eq!(
            Repr::parse(&packet, ChecksumMode::Verify)
                .unwrap()
                .payload_len,
            40
        );
    }

    #[test]
    fn checksum_is_verified() {
        let mut buf = IPV4_UDP_DNS;
        buf[8] -= 1; // a router decremented the TTL without fixing the checksum
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert!(!packet.verify_checksum());
        assert_eq!(
            Repr::parse(&packet, ChecksumMode::Verify),
            Err(Error::Checksum)
        );
        assert!(Repr::parse(&packet, ChecksumMode::Ignore).is_ok());
    }

    #[test]
    fn incremental_ttl_update_matches_fill() {
        let mut buf = IPV4_UDP_DNS;
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        let old_word = u16::from_be_bytes([packet.ttl(), packet.protocol().0]);
        packet.set_ttl(packet.ttl() - 1);
        let new_word = u16::from_be_bytes([packet.ttl(), packet.protocol().0]);
        let updated = checksum::update16(packet.checksum(), old_word, new_word);
        packet.fill_checksum();
        assert_eq!(packet.checksum(), updated);
    }

    #[test]
    fn fragments_are_unsupported_by_repr() {
        let mut buf = IPV4_UDP_DNS;
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_more_frags(true);
        packet.set_frag_offset(1480);
        packet.fill_checksum();
        assert!(packet.more_frags() && packet.dont_frag());
        assert_eq!(packet.frag_offset(), 1480);
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert!(packet.is_fragment());
        assert_eq!(
            Repr::parse(&packet, ChecksumMode::Verify),
            Err(Error::Unsupported)
        );
    }

    #[test]
    fn quoted_datagram_may_stop_short() {
        let quoted = &IPV4_ICMP_TIME_EXCEEDED[28..];
        assert_eq!(Packet::new_checked(quoted), Err(Error::Truncated));
        let probe = Packet::new_quoted(quoted).unwrap();
        assert_eq!((probe.total_len(), probe.payload().len()), (40, 8));
        assert_eq!(
            Repr::parse(&probe, ChecksumMode::Verify),
            Err(Error::Truncated)
        );
        assert_eq!(Packet::new_quoted(&quoted[..19]), Err(Error::Truncated));
        let mut bad = quoted.to_vec();
        bad[3] = 4;
        assert_eq!(Packet::new_quoted(&bad[..]), Err(Error::Malformed));
    }

    #[test]
    fn hostile_lengths_are_rejected() {
        let with = |at: usize, value: u8| {
            let mut buf = IPV4_TCP_SYN;
            buf[at] = value;
            Packet::new_checked(buf).err()
        };
        assert_eq!(with(0, 0x44), Some(Error::Malformed), "IHL < 5");
        assert_eq!(with(0, 0x40), Some(Error::Malformed), "IHL 0");
        assert_eq!(with(0, 0x65), Some(Error::Malformed), "version 6");
        assert_eq!(with(3, 19), Some(Error::Malformed), "total length < header");
        assert_eq!(with(3, 61), Some(Error::Truncated), "total length > buffer");
        assert_eq!(
            with(2, 0xff),
            Some(Error::Truncated),
            "total length > buffer"
        );
        let mut short = IPV4_TCP_SYN[..22].to_vec();
        short[0] = 0x46; // IHL*4 = 24 > 22
        assert_eq!(Packet::new_checked(&short[..]), Err(Error::Truncated));
        for len in 0..IPV4_TCP_SYN.len() {
            assert_eq!(
                Packet::new_checked(&IPV4_TCP_SYN[..len]),
                Err(Error::Truncated)
            );
        }
    }

    #[test]
    fn emit_sets_dont_frag_and_protocol() {
        let repr = Repr {
            src_addr: HOST,
            dst_addr: SERVER,
            protocol: Protocol::UDP,
            payload_len: 8,
            ttl: 1,
            ident: 0xabcd,
            dont_frag: false,
        };
        let mut buf = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert!(packet.verify_checksum() && !packet.dont_frag());
        assert_eq!(Repr::parse(&packet, ChecksumMode::Verify), Ok(repr));
        assert_eq!(Protocol::UDP.to_string(), "UDP");
        assert_eq!(format!("{:?}", Protocol(253)), "Protocol(253)");
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for fixture in FIXTURES {
            for_each_mutation(fixture, |bytes| {
                if let Ok(quoted) = Packet::new_quoted(bytes) {
                    let _ = (quoted.options(), quoted.payload(), quoted.verify_checksum());
                }
                let Ok(packet) = Packet::new_checked(bytes) else {
                    return;
                };
                let _ = (
                    packet.version(),
                    packet.header_len(),
                    packet.dscp(),
                    packet.ecn(),
                );
                let _ = (
                    packet.total_len(),
                    packet.ident(),
                    packet.dont_frag(),
                    packet.more_frags(),
                );
                let _ = (
                    packet.frag_offset(),
                    packet.ttl(),
                    packet.protocol(),
                    packet.checksum(),
                );
                let _ = (
                    packet.src_addr(),
                    packet.dst_addr(),
                    packet.options(),
                    packet.payload(),
                );
                let _ = packet.verify_checksum();
                if let Ok(repr) = Repr::parse(&packet, ChecksumMode::Ignore) {
                    let mut out = vec![0; repr.buffer_len()];
                    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                    let again = Packet::new_checked(&out[..]).unwrap();
                    assert_eq!(Repr::parse(&again, ChecksumMode::Verify), Ok(repr));
                }
            });
        }
    }
}
