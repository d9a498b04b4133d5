//! IPv6 fixed headers (RFC 8200).
//!
//! Extension headers are not walked: [`Packet::next_header`] tells what
//! follows the fixed header, and the payload starts right after it. The
//! payload is bounded by the payload-length field, so link-layer padding is
//! ignored.

use std::net::Ipv6Addr;

use crate::bytes::{read_array, read_u16, read_u32, write_u16, write_u32};
use crate::ipv4::Protocol;
use crate::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

mod field {
    use crate::bytes::Field;

    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Field = 8..24;
    pub const DST: Field = 24..40;
    pub const PAYLOAD: usize = 40;
}

const FLOW_MASK: u32 = 0x000f_ffff;

/// A view of an IPv6 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than the header or the payload length claims.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Wraps the copy of a packet quoted inside an ICMPv6 error, which may
    /// end before its payload length: only the fixed header must be present,
    /// and the payload is then whatever was quoted.
    pub fn new_quoted(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_header()?;
        Ok(packet)
    }

    /// Checks the version and that the buffer holds the header and the
    /// payload length it claims.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if HEADER_LEN + usize::from(self.payload_len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn check_header(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// Version field (6 once checked).
    pub fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }

    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// 20-bit flow label.
    pub fn flow_label(&self) -> u32 {
        self.first_word() & FLOW_MASK
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// What follows the fixed header.
    pub fn next_header(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        read_array::<16>(self.buffer.as_ref(), field::SRC).into()
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_array::<16>(self.buffer.as_ref(), field::DST).into()
    }

    /// Where the payload ends: the payload length, or the end of a quoted
    /// copy that stops short of it.
    fn payload_end(&self) -> usize {
        (field::PAYLOAD + usize::from(self.payload_len())).min(self.buffer.as_ref().len())
    }

    /// The payload, bounded by the payload-length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..self.payload_end()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_first_word(&mut self, word: u32) {
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, word);
    }

    /// Sets the version field.
    pub fn set_version(&mut self, version: u8) {
        let word = (self.first_word() & 0x0fff_ffff) | (u32::from(version) << 28);
        self.set_first_word(word);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, class: u8) {
        let word = (self.first_word() & 0xf00f_ffff) | (u32::from(class) << 20);
        self.set_first_word(word);
    }

    /// Sets the flow label (low 20 bits of `label`).
    pub fn set_flow_label(&mut self, label: u32) {
        let word = (self.first_word() & !FLOW_MASK) | (label & FLOW_MASK);
        self.set_first_word(word);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, next: Protocol) {
        self.buffer.as_mut()[field::NXT_HDR] = next.0;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.octets());
    }

    /// Mutable payload, bounded by the payload-length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }
}

/// The fixed IPv6 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// What follows the fixed header.
    pub next_header: Protocol,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// 20-bit flow label; routers hash it for ECMP, so probes may set it.
    pub flow_label: u32,
}

impl Repr {
    /// Reads the fixed header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Header length: [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header, leaving the payload untouched.
    ///
    /// # Panics
    /// If the buffer is shorter than the header or `payload_len` exceeds
    /// 65535 (jumbograms are not supported).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let payload_len =
            u16::try_from(self.payload_len).expect("IPv6 payload longer than 65535 bytes");
        packet.set_first_word(0);
        packet.set_version(6);
        packet.set_traffic_class(self.traffic_class);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::*;

    const FIXTURES: [&[u8]; 6] = [
        &IPV6_TCP_SYN,
        &IPV6_UDP_DNS,
        &IPV6_ICMP_ECHO_REQUEST,
        &IPV6_ICMP_ECHO_REPLY,
        &IPV6_NEIGHBOR_SOLICIT,
        &IPV6_NEIGHBOR_ADVERT,
    ];

    #[test]
    fn parses_tcp_syn_header() {
        let packet = Packet::new_checked(&IPV6_TCP_SYN[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0);
        assert_eq!(packet.flow_label(), 0x12345);
        assert_eq!(packet.payload_len(), 40);
        assert_eq!(packet.next_header(), Protocol::TCP);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(
            packet.src_addr(),
            "2001:db8::a".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            packet.dst_addr(),
            "2001:db8::7".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(packet.payload(), &IPV6_TCP_SYN[40..]);
    }

    #[test]
    fn all_fixtures_round_trip() {
        for fixture in FIXTURES {
            let repr = Repr::parse(&Packet::new_checked(fixture).unwrap()).unwrap();
            assert_eq!(repr.buffer_len(), fixture.len());
            let mut buf = fixture.to_vec();
            buf[..HEADER_LEN].fill(0xff);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(&buf[..], fixture);
        }
    }

    #[test]
    fn setters_keep_neighbouring_bits() {
        let mut buf = IPV6_TCP_SYN;
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_traffic_class(0xb8);
        assert_eq!(
            (
                packet.version(),
                packet.traffic_class(),
                packet.flow_label()
            ),
            (6, 0xb8, 0x12345)
        );
        packet.set_flow_label(0xfff_ffff);
        assert_eq!(
            (
                packet.version(),
                packet.traffic_class(),
                packet.flow_label()
            ),
            (6, 0xb8, 0xf_ffff)
        );
        packet.payload_mut()[0] = 0;
        assert_eq!(packet.into_inner()[40], 0);
    }

    #[test]
    fn payload_ignores_trailing_bytes() {
        let mut padded = IPV6_ICMP_ECHO_REQUEST.to_vec();
        padded.extend_from_slice(&[0; 10]);
        let packet = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(packet.payload(), &IPV6_ICMP_ECHO_REQUEST[40..]);
    }

    #[test]
    fn quoted_packet_may_stop_short() {
        let quoted = &IPV6_TCP_SYN[..48];
        assert_eq!(Packet::new_checked(quoted), Err(Error::Truncated));
        let packet = Packet::new_quoted(quoted).unwrap();
        assert_eq!((packet.payload_len(), packet.payload().len()), (40, 8));
        assert_eq!(Packet::new_quoted(&quoted[..39]), Err(Error::Truncated));
    }

    #[test]
    fn hostile_lengths_are_rejected() {
        let mut buf = IPV6_TCP_SYN;
        buf[0] = 0x45;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Malformed));
        let mut buf = IPV6_TCP_SYN;
        buf[5] = 41;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Truncated));
        for len in 0..IPV6_TCP_SYN.len() {
            assert_eq!(
                Packet::new_checked(&IPV6_TCP_SYN[..len]),
                Err(Error::Truncated)
            );
        }
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for fixture in FIXTURES {
            for_each_mutation(fixture, |bytes| {
                if let Ok(quoted) = Packet::new_quoted(bytes) {
                    assert!(quoted.payload().len() <= usize::from(quoted.payload_len()));
                }
                let Ok(packet) = Packet::new_checked(bytes) else {
                    return;
                };
                let _ = (
                    packet.version(),
                    packet.traffic_class(),
                    packet.flow_label(),
                );
                let _ = (
                    packet.payload_len(),
                    packet.next_header(),
                    packet.hop_limit(),
                );
                let _ = (packet.src_addr(), packet.dst_addr(), packet.payload());
                let repr = Repr::parse(&packet).unwrap();
                let mut out = vec![0; repr.buffer_len()];
                repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                assert_eq!(&out[..HEADER_LEN], &bytes[..HEADER_LEN]);
            });
        }
    }
}
