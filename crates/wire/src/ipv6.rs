//! IPv6 fixed headers (RFC 8200), and the walk over extension headers to the
//! upper-layer header.
//!
//! [`Packet::next_header`] tells what follows the fixed header and
//! [`Packet::payload`] starts right after it; [`Packet::upper_layer`] walks
//! the hop-by-hop, routing, fragment and destination-options headers (at most
//! [`MAX_EXTENSION_HEADERS`]) to the transport header and reports the fragment
//! header on the way. The payload is bounded by the payload-length field, so
//! link-layer padding is ignored.

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

/// Most extension headers [`Packet::upper_layer`] walks: more is not a packet
/// any host sends in earnest, and the bound keeps the walk short.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Length of a fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// The fields of a fragment header (RFC 8200 section 4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentHeader {
    /// Where this fragment's data starts in the fragmentable part of the
    /// original packet, in bytes (a multiple of 8).
    pub offset: u16,
    /// More fragments follow (the M flag).
    pub more: bool,
    /// Identification shared by the fragments of one packet.
    pub ident: u32,
}

impl FragmentHeader {
    /// Reads a fragment header; `header` holds its [`FRAGMENT_HEADER_LEN`]
    /// bytes.
    fn read(header: &[u8]) -> FragmentHeader {
        let word = read_u16(header, 2..4);
        FragmentHeader {
            offset: word & 0xfff8,
            more: word & 1 != 0,
            ident: read_u32(header, 4..8),
        }
    }
}

/// Where the upper-layer header starts, past the extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// The header after the last extension header walked: TCP, UDP,
    /// ICMPv6, or any header this walk does not know (AH, ESP, no next
    /// header). For a fragment other than the first it is the protocol the
    /// reassembled packet carries, whose middle this fragment holds.
    pub protocol: Protocol,
    /// Offset of that header (or of a later fragment's data) from the start
    /// of the IPv6 packet; at most [`HEADER_LEN`] plus the payload length.
    pub offset: usize,
    /// The fragment header, when the packet is a fragment.
    pub fragment: Option<FragmentHeader>,
}

/// Length of the extension header of type `protocol` that starts `header`,
/// or `None` if `protocol` is not one this walk follows.
fn extension_len(protocol: Protocol, header: &[u8]) -> Option<Result<usize>> {
    match protocol {
        Protocol::HOPOPT | Protocol::IPV6_ROUTE | Protocol::IPV6_OPTS => Some(
            header
                .get(1)
                .map(|&units| 8 + 8 * usize::from(units))
                .ok_or(Error::Truncated),
        ),
        Protocol::IPV6_FRAG => Some(Ok(FRAGMENT_HEADER_LEN)),
        _ => None,
    }
}

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

    /// Walks the hop-by-hop, routing, fragment and destination-options
    /// headers to the upper-layer header. The walk stops after the fragment
    /// header of a fragment other than the first: what follows it is the
    /// middle of the packet, not headers.
    ///
    /// Errors: [`Error::Truncated`] when an extension header runs past the
    /// payload, [`Error::Malformed`] for a second fragment header, and
    /// [`Error::Unsupported`] past [`MAX_EXTENSION_HEADERS`].
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        let payload = self.payload();
        let mut walk = UpperLayer {
            protocol: self.next_header(),
            offset: HEADER_LEN,
            fragment: None,
        };
        for _ in 0..=MAX_EXTENSION_HEADERS {
            let rest = &payload[walk.offset - HEADER_LEN..];
            let Some(len) = extension_len(walk.protocol, rest) else {
                return Ok(walk);
            };
            let header = rest.get(..len?).ok_or(Error::Truncated)?;
            let this = walk.protocol;
            walk.protocol = Protocol(header[0]);
            walk.offset += header.len();
            if this == Protocol::IPV6_FRAG {
                if walk.fragment.is_some() {
                    return Err(Error::Malformed);
                }
                let fragment = FragmentHeader::read(header);
                walk.fragment = Some(fragment);
                if fragment.offset != 0 {
                    return Ok(walk);
                }
            }
        }
        Err(Error::Unsupported)
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

    /// DNS answer [2001:db8::7]:53 -> [2001:db8::a]:61000, first fragment:
    /// fragment header (offset 0, M set, ident 0xdeadbeef), then a UDP header
    /// whose length (1500) runs past this fragment, then 16 bytes of DNS.
    const FIRST_FRAGMENT: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x2c, 0x3a, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // fixed header
        0x11, 0x00, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef, // fragment: UDP, offset 0, M
        0x00, 0x35, 0xee, 0x48, 0x05, 0xdc, 0x12, 0x34, // UDP 53 -> 61000, length 1500
        0xbe, 0xef, 0x81, 0x80, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78,
        0x61,
    ];

    /// A later fragment of the same packet: offset 1448 (181 units), M clear,
    /// then 8 bytes from the middle of the answer.
    const LATER_FRAGMENT: [u8; 56] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x10, 0x2c, 0x3a, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // fixed header
        0x11, 0x00, 0x05, 0xa8, 0xde, 0xad, 0xbe, 0xef, // fragment: UDP, offset 1448
        0x11, 0x00, 0x00, 0x00, 0x3a, 0x00, 0x05, 0xa8, // data that looks like headers
    ];

    /// UDP behind a hop-by-hop header (8 bytes, PadN) and a destination
    /// options header (16 bytes, PadN).
    const OPTIONS_THEN_UDP: [u8; 72] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x40, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x0a, // fixed header: hop-by-hop
        0x3c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // hop-by-hop -> destination options
        0x11, 0x01, 0x01, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, // destination options (16 bytes) -> UDP
        0x00, 0x35, 0xee, 0x48, 0x00, 0x08, 0x00, 0x00, // UDP, no payload
    ];

    #[test]
    fn upper_layer_of_a_plain_packet_is_right_after_the_header() {
        for fixture in FIXTURES {
            let packet = Packet::new_checked(fixture).unwrap();
            let upper = packet.upper_layer().unwrap();
            assert_eq!(
                (upper.protocol, upper.offset, upper.fragment),
                (packet.next_header(), HEADER_LEN, None)
            );
        }
    }

    #[test]
    fn first_fragment_leads_to_its_transport_header() {
        let packet = Packet::new_checked(&FIRST_FRAGMENT[..]).unwrap();
        assert_eq!(packet.next_header(), Protocol::IPV6_FRAG);
        let upper = packet.upper_layer().unwrap();
        assert_eq!((upper.protocol, upper.offset), (Protocol::UDP, 48));
        assert_eq!(
            upper.fragment,
            Some(FragmentHeader {
                offset: 0,
                more: true,
                ident: 0xdead_beef
            })
        );
        assert_eq!(&FIRST_FRAGMENT[upper.offset..upper.offset + 2], &[0, 53]);
    }

    #[test]
    fn later_fragment_stops_after_the_fragment_header() {
        let packet = Packet::new_checked(&LATER_FRAGMENT[..]).unwrap();
        let upper = packet.upper_layer().unwrap();
        // The data after the fragment header starts with 0x11 and 0x3a bytes that would read as
        // further headers; the walk must not look at them.
        assert_eq!((upper.protocol, upper.offset), (Protocol::UDP, 48));
        assert_eq!(
            upper.fragment,
            Some(FragmentHeader {
                offset: 1448,
                more: false,
                ident: 0xdead_beef
            })
        );
    }

    #[test]
    fn options_headers_are_skipped() {
        let packet = Packet::new_checked(&OPTIONS_THEN_UDP[..]).unwrap();
        let upper = packet.upper_layer().unwrap();
        assert_eq!(
            (upper.protocol, upper.offset, upper.fragment),
            (Protocol::UDP, 64, None)
        );
        assert_eq!(&OPTIONS_THEN_UDP[64..66], &[0, 53]);
    }

    #[test]
    fn broken_extension_chains_are_errors() {
        // The destination options header claims 32 bytes but the payload ends 24 bytes on.
        let mut long = OPTIONS_THEN_UDP;
        long[49] = 3;
        let packet = Packet::new_checked(&long[..]).unwrap();
        assert_eq!(packet.upper_layer(), Err(Error::Truncated));
        // A payload length that cuts the hop-by-hop header short.
        let mut short = OPTIONS_THEN_UDP;
        short[5] = 1;
        let packet = Packet::new_checked(&short[..]).unwrap();
        assert_eq!(packet.upper_layer(), Err(Error::Truncated));
        // A second fragment header after a first fragment's.
        let mut twice = FIRST_FRAGMENT;
        twice[40] = Protocol::IPV6_FRAG.0;
        let packet = Packet::new_checked(&twice[..]).unwrap();
        assert_eq!(packet.upper_layer(), Err(Error::Malformed));
    }

    #[test]
    fn the_walk_is_bounded() {
        // Nine destination-options headers of 8 bytes each, then UDP: one too many.
        let chain = |headers: usize| {
            let mut buf = OPTIONS_THEN_UDP[..HEADER_LEN].to_vec();
            buf[6] = Protocol::IPV6_OPTS.0;
            for i in 0..headers {
                let next = if i + 1 == headers {
                    Protocol::UDP
                } else {
                    Protocol::IPV6_OPTS
                };
                buf.extend_from_slice(&[next.0, 0, 1, 4, 0, 0, 0, 0]);
            }
            buf.extend_from_slice(&OPTIONS_THEN_UDP[64..]);
            let len = (buf.len() - HEADER_LEN) as u16;
            Packet::new_unchecked(&mut buf[..]).set_payload_len(len);
            buf
        };
        let most = chain(MAX_EXTENSION_HEADERS);
        let upper = Packet::new_checked(&most[..]).unwrap().upper_layer();
        assert_eq!(
            upper.map(|u| (u.protocol, u.offset)),
            Ok((Protocol::UDP, HEADER_LEN + 8 * MAX_EXTENSION_HEADERS))
        );
        let too_many = chain(MAX_EXTENSION_HEADERS + 1);
        let packet = Packet::new_checked(&too_many[..]).unwrap();
        assert_eq!(packet.upper_layer(), Err(Error::Unsupported));
    }

    #[test]
    fn upper_layer_never_panics_and_stays_inside_the_payload() {
        for fixture in [&FIRST_FRAGMENT[..], &LATER_FRAGMENT, &OPTIONS_THEN_UDP] {
            for_each_mutation(fixture, |bytes| {
                let Ok(packet) = Packet::new_checked(bytes) else {
                    return;
                };
                if let Ok(upper) = packet.upper_layer() {
                    assert!(upper.offset <= HEADER_LEN + packet.payload().len());
                }
            });
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
