//! UDP datagrams (RFC 768), with IPv4 and IPv6 checksums.
//!
//! The payload is bounded by the UDP length field, so bytes after the
//! datagram in the buffer (link padding) are ignored, and the checksum covers
//! exactly the datagram.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{read_u16, write_u16};
use crate::checksum::IpPair;
use crate::ipv4::Protocol;
use crate::{ChecksumMode, Error, Result};

/// Length of the header.
pub const HEADER_LEN: usize = 8;

mod field {
    use crate::bytes::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
    pub const PAYLOAD: usize = 8;
}

/// A view of a UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than the length field claims.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Wraps the UDP header quoted inside an ICMP error, whose datagram is
    /// usually cut after the header: like [`Packet::new_checked`] but without
    /// requiring the buffer to reach the length field. The payload is then
    /// whatever was quoted.
    pub fn new_quoted(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_header()?;
        Ok(packet)
    }

    /// Checks the length field covers the header and fits in the buffer.
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if usize::from(self.len()) > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn check_header(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if usize::from(self.len()) < HEADER_LEN {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field: header plus payload.
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field; 0 means "none" over IPv4.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Where the datagram ends: the length field, or the end of a quoted
    /// copy that stops short of it.
    fn end(&self) -> usize {
        usize::from(self.len()).min(self.buffer.as_ref().len())
    }

    /// The payload, bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..self.end()]
    }

    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.end()]
    }

    /// True when the checksum matches under the pseudo-header of `ips`. A
    /// zero checksum passes over IPv4 (checksum not computed) and fails over
    /// IPv6, where it is mandatory.
    pub fn verify_checksum(&self, ips: &IpPair) -> bool {
        if self.checksum() == 0 {
            return matches!(ips, IpPair::V4 { .. });
        }
        ips.segment_checksum(Protocol::UDP.0, self.datagram()) == 0
    }

    /// [`Packet::verify_checksum`] for IPv4.
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.verify_checksum(&IpPair::V4 { src, dst })
    }

    /// [`Packet::verify_checksum`] for IPv6.
    pub fn verify_checksum_v6(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        self.verify_checksum(&IpPair::V6 {
            src: *src,
            dst: *dst,
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the length field.
    pub fn set_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum field as is (0 to send no checksum over IPv4).
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Mutable payload, bounded by the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.end();
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }

    /// Computes and stores the checksum under the pseudo-header of `ips`. A
    /// computed 0 is sent as 0xFFFF, since 0 would mean "no checksum".
    pub fn fill_checksum(&mut self, ips: &IpPair) {
        self.set_checksum(0);
        let checksum = match ips.segment_checksum(Protocol::UDP.0, self.datagram()) {
            0 => 0xffff,
            sum => sum,
        };
        self.set_checksum(checksum);
    }

    /// [`Packet::fill_checksum`] for IPv4.
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.fill_checksum(&IpPair::V4 { src, dst });
    }

    /// [`Packet::fill_checksum`] for IPv6.
    pub fn fill_checksum_v6(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.fill_checksum(&IpPair::V6 {
            src: *src,
            dst: *dst,
        });
    }
}

/// A UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Repr {
    /// Reads a datagram carried between `ips`, verifying its checksum if
    /// `checksums` says so.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        ips: &IpPair,
        checksums: ChecksumMode,
    ) -> Result<Repr> {
        packet.check_len()?;
        if checksums.verify() && !packet.verify_checksum(ips) {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.payload().len(),
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

    /// Writes the header, then the checksum over the payload already in the
    /// buffer under the pseudo-header of `ips`.
    ///
    /// # Panics
    /// If the buffer is shorter than `buffer_len()` or that exceeds 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, ips: &IpPair) {
        let len = u16::try_from(self.buffer_len()).expect("UDP datagram longer than 65535 bytes");
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.fill_checksum(ips);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::*;
    use crate::{ipv4, ipv6};

    fn datagram_v4(fixture: &[u8]) -> (&[u8], IpPair) {
        let ip = ipv4::Packet::new_checked(fixture).unwrap();
        let ips = IpPair::V4 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
        };
        (&fixture[ip.header_len()..], ips)
    }

    fn datagram_v6(fixture: &[u8]) -> (&[u8], IpPair) {
        let ip = ipv6::Packet::new_checked(fixture).unwrap();
        let ips = IpPair::V6 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
        };
        (&fixture[ipv6::HEADER_LEN..], ips)
    }

    /// The UDP probe quoted inside the ICMP time-exceeded fixture.
    fn quoted_probe() -> (&'static [u8], IpPair) {
        let quoted = &IPV4_ICMP_TIME_EXCEEDED[28..];
        let ips = IpPair::V4 {
            src: ipv4::Packet::new_unchecked(quoted).src_addr(),
            dst: ipv4::Packet::new_unchecked(quoted).dst_addr(),
        };
        (&quoted[20..], ips)
    }

    #[test]
    fn parses_dns_query() {
        let (datagram, ips) = datagram_v4(&IPV4_UDP_DNS);
        let packet = Packet::new_checked(datagram).unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (53000, 53));
        assert_eq!(packet.len(), 37);
        assert!(!packet.is_empty());
        assert_eq!(&packet.payload()[..4], &[0xbe, 0xef, 0x01, 0x00]);
        assert_eq!(&packet.payload()[12..20], b"\x07example");
        assert!(packet.verify_checksum(&ips));
        let repr = Repr::parse(&packet, &ips, ChecksumMode::Verify).unwrap();
        assert_eq!(
            repr,
            Repr {
                src_port: 53000,
                dst_port: 53,
                payload_len: 29
            }
        );
    }

    #[test]
    fn same_query_over_ipv6() {
        let (datagram, ips) = datagram_v6(&IPV6_UDP_DNS);
        let packet = Packet::new_checked(datagram).unwrap();
        let IpPair::V6 { src, dst } = ips else {
            unreachable!()
        };
        assert!(packet.verify_checksum_v6(&src, &dst));
        assert!(!packet.verify_checksum_v6(&src, &Ipv6Addr::LOCALHOST));
        let (datagram_v4, ips_v4) = datagram_v4(&IPV4_UDP_DNS);
        let over_v4 = Repr::parse(
            &Packet::new_checked(datagram_v4).unwrap(),
            &ips_v4,
            ChecksumMode::Verify,
        );
        assert_eq!(Repr::parse(&packet, &ips, ChecksumMode::Verify), over_v4);
    }

    #[test]
    fn emit_round_trips() {
        for (datagram, ips) in [datagram_v4(&IPV4_UDP_DNS), datagram_v6(&IPV6_UDP_DNS)] {
            let repr = Repr::parse(
                &Packet::new_checked(datagram).unwrap(),
                &ips,
                ChecksumMode::Verify,
            )
            .unwrap();
            assert_eq!(repr.buffer_len(), datagram.len());
            let mut buf = datagram.to_vec();
            buf[..HEADER_LEN].fill(0);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
            assert_eq!(&buf[..], datagram);
        }
    }

    #[test]
    fn quoted_probe_header() {
        let (quoted, _) = quoted_probe();
        assert_eq!(Packet::new_checked(quoted), Err(Error::Truncated));
        let probe = Packet::new_quoted(quoted).unwrap();
        assert_eq!(
            (probe.src_port(), probe.dst_port(), probe.len()),
            (33434, 33435, 20)
        );
        assert!(probe.payload().is_empty());
        let mut bad = quoted.to_vec();
        bad[5] = 7;
        assert_eq!(Packet::new_quoted(&bad[..]), Err(Error::Malformed));
    }

    #[test]
    fn zero_checksum_rules() {
        let (datagram, ips) = datagram_v4(&IPV4_UDP_DNS);
        let mut buf = datagram.to_vec();
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_checksum(0);
        assert!(packet.verify_checksum(&ips), "IPv4: zero means no checksum");
        let (datagram, ips) = datagram_v6(&IPV6_UDP_DNS);
        let mut buf = datagram.to_vec();
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        packet.set_checksum(0);
        assert!(!packet.verify_checksum(&ips), "IPv6: checksum is mandatory");
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            Repr::parse(&packet, &ips, ChecksumMode::Verify),
            Err(Error::Checksum)
        );
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose the payload so the datagram sums to 0xFFFF under its
        // pseudo-header: the checksum then computes to 0 and must become 0xFFFF.
        let ips = IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        };
        let repr = Repr {
            src_port: 1000,
            dst_port: 2000,
            payload_len: 2,
        };
        let mut buf = [0u8; 10];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
        let natural = Packet::new_unchecked(&buf[..]).checksum();
        // Adding the checksum value as payload makes the total sum all ones.
        buf[8..10].copy_from_slice(&natural.to_be_bytes());
        let mut packet = Packet::new_unchecked(&mut buf[..]);
        packet.fill_checksum(&ips);
        assert_eq!(packet.checksum(), 0xffff);
        assert!(packet.verify_checksum(&ips));
    }

    #[test]
    fn payload_bounded_by_length_field() {
        let (datagram, ips) = datagram_v4(&IPV4_UDP_DNS);
        let mut padded = datagram.to_vec();
        padded.extend_from_slice(&[0; 9]);
        let packet = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(packet.payload().len(), 29);
        assert!(packet.verify_checksum(&ips));
    }

    #[test]
    fn hostile_lengths_are_rejected() {
        let (datagram, _) = datagram_v4(&IPV4_UDP_DNS);
        let mut buf = datagram.to_vec();
        buf[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Malformed));
        buf[4..6].copy_from_slice(&38u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Truncated));
        for len in 0..datagram.len() {
            assert_eq!(Packet::new_checked(&datagram[..len]), Err(Error::Truncated));
        }
        let empty = Packet::new_checked(&[0, 1, 0, 2, 0, 8, 0, 0][..]).unwrap();
        assert!(empty.is_empty() && empty.payload().is_empty());
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for (datagram, ips) in [
            datagram_v4(&IPV4_UDP_DNS),
            datagram_v6(&IPV6_UDP_DNS),
            quoted_probe(),
        ] {
            for_each_mutation(datagram, |bytes| {
                if let Ok(quoted) = Packet::new_quoted(bytes) {
                    let _ = (quoted.payload(), quoted.verify_checksum(&ips));
                }
                let Ok(packet) = Packet::new_checked(bytes) else {
                    return;
                };
                let _ = (
                    packet.src_port(),
                    packet.dst_port(),
                    packet.len(),
                    packet.checksum(),
                );
                let _ = (
                    packet.payload(),
                    packet.is_empty(),
                    packet.verify_checksum(&ips),
                );
                let repr = Repr::parse(&packet, &ips, ChecksumMode::Ignore).unwrap();
                let mut out = packet.datagram().to_vec();
                repr.emit(&mut Packet::new_unchecked(&mut out[..]), &ips);
                let again = Packet::new_checked(&out[..]).unwrap();
                assert_eq!(Repr::parse(&again, &ips, ChecksumMode::Verify), Ok(repr));
            });
        }
    }
}
