//! ICMPv6 (RFC 4443) and the neighbor discovery messages (RFC 4861) a packet
//! engine needs to resolve IPv6 neighbors itself.
//!
//! As for ICMPv4 the payload is the rest of the buffer (wrap the IPv6
//! payload), but the checksum also covers the IPv6 pseudo-header, so checksum
//! operations take the source and destination addresses.

use core::fmt;
use std::net::Ipv6Addr;

use crate::bytes::{read_array, read_u16, read_u32, write_u16, write_u32};
use crate::checksum::IpPair;
use crate::ethernet::MacAddr;
use crate::ipv4::Protocol;
use crate::{ChecksumMode, Error, Result};

/// Length of the common header, rest-of-header word included.
pub const HEADER_LEN: usize = 8;
/// Length of a neighbor solicitation or advertisement before its options.
pub const NEIGHBOR_LEN: usize = 24;

mod field {
    use crate::bytes::Field;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQ_NO: Field = 6..8;
    pub const NEIGHBOR_FLAGS: usize = 4;
    pub const PAYLOAD: usize = 8;
    pub const TARGET: Field = 8..24;
    pub const NDP_OPTIONS: usize = 24;
}

/// NDP option types carrying a link-layer address.
mod ndp_option {
    pub const SOURCE_LLADDR: u8 = 1;
    pub const TARGET_LLADDR: u8 = 2;
    /// Length of a link-layer address option for Ethernet: one 8-byte unit.
    pub const LLADDR_LEN: usize = 8;
}

/// An ICMPv6 message type.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Message(pub u8);

impl Message {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: Message = Message(1);
    /// Packet too big.
    pub const PKT_TOO_BIG: Message = Message(2);
    /// Time exceeded.
    pub const TIME_EXCEEDED: Message = Message(3);
    /// Parameter problem.
    pub const PARAM_PROBLEM: Message = Message(4);
    /// Echo request.
    pub const ECHO_REQUEST: Message = Message(128);
    /// Echo reply.
    pub const ECHO_REPLY: Message = Message(129);
    /// Router solicitation.
    pub const ROUTER_SOLICIT: Message = Message(133);
    /// Router advertisement.
    pub const ROUTER_ADVERT: Message = Message(134);
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: Message = Message(135);
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: Message = Message(136);
    /// Redirect.
    pub const REDIRECT: Message = Message(137);

    /// True for error messages (types below 128), whose payload quotes the
    /// packet at fault.
    pub const fn is_error(self) -> bool {
        self.0 < 128
    }

    /// True for the messages with a target address at bytes 8..24.
    pub fn has_target(self) -> bool {
        matches!(
            self,
            Message::NEIGHBOR_SOLICIT | Message::NEIGHBOR_ADVERT | Message::REDIRECT
        )
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Message({})", self.0)
    }
}

/// Flags of a neighbor advertisement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NeighborFlags(pub u8);

impl NeighborFlags {
    /// The sender is a router.
    pub const ROUTER: NeighborFlags = NeighborFlags(0x80);
    /// Sent in response to a solicitation.
    pub const SOLICITED: NeighborFlags = NeighborFlags(0x40);
    /// Override an existing cache entry.
    pub const OVERRIDE: NeighborFlags = NeighborFlags(0x20);

    /// True when every flag of `other` is set.
    pub const fn contains(self, other: NeighborFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for NeighborFlags {
    type Output = NeighborFlags;
    fn bitor(self, rhs: NeighborFlags) -> NeighborFlags {
        NeighborFlags(self.0 | rhs.0)
    }
}

/// A view of an ICMPv6 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the buffer holds the common header, and the target address for
    /// the messages that have one.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || (self.msg_type().has_target() && len < NEIGHBOR_LEN) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    pub fn msg_type(&self) -> Message {
        Message(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The type-specific second word: the MTU of a packet-too-big, the
    /// pointer of a parameter problem.
    pub fn rest_of_header(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REST)
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ_NO)
    }

    /// MTU of a packet-too-big message.
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Flags of a neighbor advertisement.
    pub fn neighbor_flags(&self) -> NeighborFlags {
        NeighborFlags(self.buffer.as_ref()[field::NEIGHBOR_FLAGS] & 0xe0)
    }

    /// Target address of a neighbor solicitation, advertisement or redirect;
    /// `None` for other types (or a buffer too short to hold one).
    pub fn target_addr(&self) -> Option<Ipv6Addr> {
        if !self.msg_type().has_target() {
            return None;
        }
        let bytes = self.buffer.as_ref().get(field::TARGET)?;
        Some(read_array::<16>(bytes, 0..16).into())
    }

    /// NDP options after the target address, for the messages that have one.
    pub fn ndp_options(&self) -> Option<&[u8]> {
        if !self.msg_type().has_target() {
            return None;
        }
        self.buffer.as_ref().get(field::NDP_OPTIONS..)
    }

    /// Everything after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// The quoted original packet, for error messages only.
    pub fn original_packet(&self) -> Option<&[u8]> {
        self.msg_type().is_error().then(|| self.payload())
    }

    /// True when the checksum matches under the pseudo-header of `src` and
    /// `dst`.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        pair(src, dst).segment_checksum(Protocol::ICMPV6.0, self.buffer.as_ref()) == 0
    }
}

fn pair(src: &Ipv6Addr, dst: &Ipv6Addr) -> IpPair {
    IpPair::V6 {
        src: *src,
        dst: *dst,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, msg_type: Message) {
        self.buffer.as_mut()[field::TYPE] = msg_type.0;
    }

    /// Sets the message code.
    pub fn set_msg_code(&mut self, code: u8) {
        self.buffer.as_mut()[field::CODE] = code;
    }

    /// Sets the checksum field as is.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the whole second word of the header.
    pub fn set_rest_of_header(&mut self, rest: u32) {
        write_u32(self.buffer.as_mut(), field::REST, rest);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, ident: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, ident);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, seq_no: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ_NO, seq_no);
    }

    /// Sets the neighbor advertisement flags, clearing the reserved bits.
    pub fn set_neighbor_flags(&mut self, flags: NeighborFlags) {
        self.set_rest_of_header(u32::from(flags.0 & 0xe0) << 24);
    }

    /// Sets the target address.
    ///
    /// # Panics
    /// If the buffer is shorter than [`NEIGHBOR_LEN`].
    pub fn set_target_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::TARGET].copy_from_slice(&addr.octets());
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }

    /// Computes and stores the checksum under the pseudo-header of `src` and
    /// `dst`.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let checksum = pair(src, dst).segment_checksum(Protocol::ICMPV6.0, self.buffer.as_ref());
        self.set_checksum(checksum);
    }
}

/// Finds the Ethernet link-layer address option of `kind` in NDP options.
/// Options of length zero are malformed (RFC 4861 section 4.6); others of
/// the wrong kind or size are skipped.
fn find_lladdr(mut options: &[u8], kind: u8) -> Result<Option<MacAddr>> {
    let mut found = None;
    while !options.is_empty() {
        let [option_kind, units, ..] = *options else {
            return Err(Error::Truncated);
        };
        let len = usize::from(units) * 8;
        if len == 0 {
            return Err(Error::Malformed);
        }
        let option = options.get(..len).ok_or(Error::Truncated)?;
        if option_kind == kind && len == ndp_option::LLADDR_LEN {
            found = Some(MacAddr(read_array(option, 2..8)));
        }
        options = &options[len..];
    }
    Ok(found)
}

/// An ICMPv6 message header; echo data and quoted packets are only counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Type 128, code 0.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data length.
        data_len: usize,
    },
    /// Type 129, code 0.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data length.
        data_len: usize,
    },
    /// Type 1.
    DstUnreachable {
        /// Reason (4 is port unreachable).
        code: u8,
        /// Length of the quoted packet.
        data_len: usize,
    },
    /// Type 2.
    PacketTooBig {
        /// MTU of the next hop.
        mtu: u32,
        /// Length of the quoted packet.
        data_len: usize,
    },
    /// Type 3; code 0 is hop limit exceeded in transit.
    TimeExceeded {
        /// 0: hop limit exceeded, 1: reassembly time exceeded.
        code: u8,
        /// Length of the quoted packet.
        data_len: usize,
    },
    /// Type 135.
    NeighborSolicit {
        /// Address being resolved.
        target_addr: Ipv6Addr,
        /// Source link-layer address option.
        source_lladdr: Option<MacAddr>,
    },
    /// Type 136.
    NeighborAdvert {
        /// Router, solicited and override flags.
        flags: NeighborFlags,
        /// Address being advertised.
        target_addr: Ipv6Addr,
        /// Target link-layer address option.
        target_lladdr: Option<MacAddr>,
    },
    /// Any other type or code, kept verbatim.
    Other {
        /// Message type.
        msg_type: u8,
        /// Message code.
        code: u8,
        /// Second header word.
        rest_of_header: u32,
        /// Payload length.
        data_len: usize,
    },
}

impl Repr {
    /// Reads a message carried from `src` to `dst`, verifying its checksum if
    /// `checksums` says so. Neighbor messages with a non-zero code or a
    /// zero-length option are [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        checksums: ChecksumMode,
    ) -> Result<Repr> {
        packet.check_len()?;
        if checksums.verify() && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let data_len = packet.payload().len();
        let (ident, seq_no) = (packet.echo_ident(), packet.echo_seq_no());
        Ok(match (packet.msg_type(), packet.msg_code()) {
            (Message::ECHO_REQUEST, 0) => Repr::EchoRequest {
                ident,
                seq_no,
                data_len,
            },
            (Message::ECHO_REPLY, 0) => Repr::EchoReply {
                ident,
                seq_no,
                data_len,
            },
            (Message::DST_UNREACHABLE, code) => Repr::DstUnreachable { code, data_len },
            (Message::PKT_TOO_BIG, 0) => Repr::PacketTooBig {
                mtu: packet.mtu(),
                data_len,
            },
            (Message::TIME_EXCEEDED, code) => Repr::TimeExceeded { code, data_len },
            (Message::NEIGHBOR_SOLICIT | Message::NEIGHBOR_ADVERT, code) if code != 0 => {
                return Err(Error::Malformed)
            }
            (Message::NEIGHBOR_SOLICIT, _) => Repr::NeighborSolicit {
                target_addr: packet.target_addr().ok_or(Error::Truncated)?,
                source_lladdr: find_lladdr(
                    packet.ndp_options().ok_or(Error::Truncated)?,
                    ndp_option::SOURCE_LLADDR,
                )?,
            },
            (Message::NEIGHBOR_ADVERT, _) => Repr::NeighborAdvert {
                flags: packet.neighbor_flags(),
                target_addr: packet.target_addr().ok_or(Error::Truncated)?,
                target_lladdr: find_lladdr(
                    packet.ndp_options().ok_or(Error::Truncated)?,
                    ndp_option::TARGET_LLADDR,
                )?,
            },
            (Message(msg_type), code) => Repr::Other {
                msg_type,
                code,
                rest_of_header: packet.rest_of_header(),
                data_len,
            },
        })
    }

    /// Header length: 24 for neighbor messages, 8 otherwise.
    pub const fn header_len(&self) -> usize {
        match self {
            Repr::NeighborSolicit { .. } | Repr::NeighborAdvert { .. } => NEIGHBOR_LEN,
            _ => HEADER_LEN,
        }
    }

    /// Bytes [`Repr::emit`] covers: header, link-layer option, and payload.
    pub const fn buffer_len(&self) -> usize {
        let lladdr = match self {
            Repr::NeighborSolicit {
                source_lladdr: lladdr,
                ..
            }
            | Repr::NeighborAdvert {
                target_lladdr: lladdr,
                ..
            } => lladdr,
            Repr::EchoRequest { data_len, .. }
            | Repr::EchoReply { data_len, .. }
            | Repr::DstUnreachable { data_len, .. }
            | Repr::PacketTooBig { data_len, .. }
            | Repr::TimeExceeded { data_len, .. }
            | Repr::Other { data_len, .. } => return HEADER_LEN + *data_len,
        };
        match lladdr {
            Some(_) => NEIGHBOR_LEN + ndp_option::LLADDR_LEN,
            None => NEIGHBOR_LEN,
        }
    }

    /// Writes the header (and for neighbor messages the target and
    /// link-layer option), then the checksum over the payload already in the
    /// buffer (which should be `buffer_len()` bytes) under the pseudo-header
    /// of `src` and `dst`.
    ///
    /// # Panics
    /// If the buffer is shorter than the header and link-layer option.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
    ) {
        let echo = |ident: u16, seq_no: u16| u32::from(ident) << 16 | u32::from(seq_no);
        let (msg_type, code, rest) = match *self {
            Repr::EchoRequest { ident, seq_no, .. } => {
                (Message::ECHO_REQUEST, 0, echo(ident, seq_no))
            }
            Repr::EchoReply { ident, seq_no, .. } => (Message::ECHO_REPLY, 0, echo(ident, seq_no)),
            Repr::DstUnreachable { code, .. } => (Message::DST_UNREACHABLE, code, 0),
            Repr::PacketTooBig { mtu, .. } => (Message::PKT_TOO_BIG, 0, mtu),
            Repr::TimeExceeded { code, .. } => (Message::TIME_EXCEEDED, code, 0),
            Repr::NeighborSolicit { .. } => (Message::NEIGHBOR_SOLICIT, 0, 0),
            Repr::NeighborAdvert { flags, .. } => {
                (Message::NEIGHBOR_ADVERT, 0, u32::from(flags.0 & 0xe0) << 24)
            }
            Repr::Other {
                msg_type,
                code,
                rest_of_header,
                ..
            } => (Message(msg_type), code, rest_of_header),
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        packet.set_rest_of_header(rest);
        match *self {
            Repr::NeighborSolicit {
                target_addr,
                source_lladdr: lladdr,
            }
            | Repr::NeighborAdvert {
                target_addr,
                target_lladdr: lladdr,
                ..
            } => {
                packet.set_target_addr(target_addr);
                let kind = if msg_type == Message::NEIGHBOR_SOLICIT {
                    ndp_option::SOURCE_LLADDR
                } else {
                    ndp_option::TARGET_LLADDR
                };
                if let Some(mac) = lladdr {
                    let option =
                        &mut packet.buffer.as_mut()[field::NDP_OPTIONS..][..ndp_option::LLADDR_LEN];
                    option[0] = kind;
                    option[1] = 1;
                    option[2..].copy_from_slice(&mac.0);
                }
            }
            _ => {}
        }
        packet.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6;
    use crate::testdata::*;

    /// The ICMPv6 message inside an IPv6 fixture, and its addresses.
    fn message(fixture: &[u8]) -> (&[u8], Ipv6Addr, Ipv6Addr) {
        let ip = ipv6::Packet::new_checked(fixture).unwrap();
        assert_eq!(ip.next_header(), Protocol::ICMPV6);
        (&fixture[ipv6::HEADER_LEN..], ip.src_addr(), ip.dst_addr())
    }

    const FIXTURES: [&[u8]; 4] = [
        &IPV6_ICMP_ECHO_REQUEST,
        &IPV6_ICMP_ECHO_REPLY,
        &IPV6_NEIGHBOR_SOLICIT,
        &IPV6_NEIGHBOR_ADVERT,
    ];

    fn addr(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    #[test]
    fn parses_echo_request() {
        let (bytes, src, dst) = message(&IPV6_ICMP_ECHO_REQUEST);
        let packet = Packet::new_checked(bytes).unwrap();
        assert_eq!(
            (packet.msg_type(), packet.msg_code()),
            (Message::ECHO_REQUEST, 0)
        );
        assert_eq!((packet.echo_ident(), packet.echo_seq_no()), (0x42, 7));
        assert_eq!(packet.payload().len(), 24);
        assert_eq!(
            (
                packet.target_addr(),
                packet.ndp_options(),
                packet.original_packet()
            ),
            (None, None, None)
        );
        assert!(packet.verify_checksum(&src, &dst));
        assert!(!packet.verify_checksum(&src, &addr("2001:db8::8")));
        assert_eq!(
            Repr::parse(&packet, &src, &dst, ChecksumMode::Verify),
            Ok(Repr::EchoRequest {
                ident: 0x42,
                seq_no: 7,
                data_len: 24
            })
        );
    }

    #[test]
    fn parses_neighbor_discovery() {
        let (bytes, src, dst) = message(&IPV6_NEIGHBOR_SOLICIT);
        let packet = Packet::new_checked(bytes).unwrap();
        assert_eq!(packet.target_addr(), Some(addr("2001:db8::7")));
        assert_eq!(packet.ndp_options().map(<[u8]>::len), Some(8));
        assert_eq!(
            Repr::parse(&packet, &src, &dst, ChecksumMode::Verify),
            Ok(Repr::NeighborSolicit {
                target_addr: addr("2001:db8::7"),
                source_lladdr: Some(MacAddr([2, 0, 0, 0, 0, 0x0a])),
            })
        );
        let (bytes, src, dst) = message(&IPV6_NEIGHBOR_ADVERT);
        let packet = Packet::new_checked(bytes).unwrap();
        let repr = Repr::parse(&packet, &src, &dst, ChecksumMode::Verify).unwrap();
        assert_eq!(
            repr,
            Repr::NeighborAdvert {
                flags: NeighborFlags::SOLICITED | NeighborFlags::OVERRIDE,
                target_addr: addr("2001:db8::7"),
                target_lladdr: Some(MacAddr([2, 0, 0, 0, 0, 0x07])),
            }
        );
        assert!(packet.neighbor_flags().contains(NeighborFlags::SOLICITED));
        assert!(!packet.neighbor_flags().contains(NeighborFlags::ROUTER));
    }

    #[test]
    fn emit_round_trips() {
        for fixture in FIXTURES {
            let (bytes, src, dst) = message(fixture);
            let repr = Repr::parse(
                &Packet::new_checked(bytes).unwrap(),
                &src,
                &dst,
                ChecksumMode::Verify,
            )
            .unwrap();
            assert_eq!(repr.buffer_len(), bytes.len());
            let mut buf = bytes.to_vec();
            buf[..repr.header_len()].fill(0x77);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &src, &dst);
            assert_eq!(&buf[..], bytes, "{repr:?}");
        }
    }

    #[test]
    fn error_messages_round_trip() {
        let (src, dst) = (addr("2001:db8::1"), addr("2001:db8::a"));
        let quoted = &IPV6_TCP_SYN[..48];
        let reprs = [
            Repr::DstUnreachable {
                code: 4,
                data_len: quoted.len(),
            },
            Repr::PacketTooBig {
                mtu: 1280,
                data_len: quoted.len(),
            },
            Repr::TimeExceeded {
                code: 0,
                data_len: quoted.len(),
            },
            Repr::Other {
                msg_type: 4,
                code: 1,
                rest_of_header: 40,
                data_len: quoted.len(),
            },
            Repr::NeighborSolicit {
                target_addr: dst,
                source_lladdr: None,
            },
        ];
        for repr in reprs {
            let mut buf = vec![0; repr.buffer_len()];
            buf[repr.header_len()..]
                .copy_from_slice(&quoted[..repr.buffer_len() - repr.header_len()]);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &src, &dst);
            let packet = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(
                Repr::parse(&packet, &src, &dst, ChecksumMode::Verify),
                Ok(repr)
            );
            if packet.msg_type().is_error() {
                let original = ipv6::Packet::new_quoted(packet.original_packet().unwrap()).unwrap();
                assert_eq!(original.flow_label(), 0x12345);
            }
        }
    }

    #[test]
    fn malformed_neighbor_messages() {
        let (bytes, src, dst) = message(&IPV6_NEIGHBOR_SOLICIT);
        for len in 0..NEIGHBOR_LEN {
            assert_eq!(Packet::new_checked(&bytes[..len]), Err(Error::Truncated));
        }
        let check = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut buf = bytes.to_vec();
            edit(&mut buf);
            let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
            packet.fill_checksum(&src, &dst);
            Repr::parse(
                &Packet::new_checked(&buf[..]).unwrap(),
                &src,
                &dst,
                ChecksumMode::Verify,
            )
        };
        assert_eq!(
            check(&|b| b[25] = 0),
            Err(Error::Malformed),
            "option length 0"
        );
        assert_eq!(
            check(&|b| b[25] = 2),
            Err(Error::Truncated),
            "option past the end"
        );
        assert_eq!(
            check(&|b| b.truncate(25)),
            Err(Error::Truncated),
            "option without length"
        );
        assert_eq!(check(&|b| b[1] = 1), Err(Error::Malformed), "non-zero code");
        let unknown_option = check(&|b| b[24] = 14).unwrap();
        assert_eq!(
            unknown_option,
            Repr::NeighborSolicit {
                target_addr: addr("2001:db8::7"),
                source_lladdr: None
            }
        );
    }

    #[test]
    fn bad_checksum_is_rejected() {
        let (bytes, src, dst) = message(&IPV6_ICMP_ECHO_REPLY);
        let mut buf = bytes.to_vec();
        buf[20] ^= 0x10;
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            Repr::parse(&packet, &src, &dst, ChecksumMode::Verify),
            Err(Error::Checksum)
        );
        assert!(Repr::parse(&packet, &src, &dst, ChecksumMode::Ignore).is_ok());
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for fixture in FIXTURES {
            let (bytes, src, dst) = message(fixture);
            for_each_mutation(bytes, |bytes| {
                let Ok(packet) = Packet::new_checked(bytes) else {
                    return;
                };
                let _ = (
                    packet.msg_type(),
                    packet.msg_code(),
                    packet.checksum(),
                    packet.rest_of_header(),
                );
                let _ = (
                    packet.echo_ident(),
                    packet.echo_seq_no(),
                    packet.mtu(),
                    packet.neighbor_flags(),
                );
                let _ = (
                    packet.target_addr(),
                    packet.ndp_options(),
                    packet.payload(),
                    packet.original_packet(),
                );
                let _ = packet.verify_checksum(&src, &dst);
                let Ok(repr) = Repr::parse(&packet, &src, &dst, ChecksumMode::Ignore) else {
                    return;
                };
                let mut out = vec![0; repr.buffer_len()];
                repr.emit(&mut Packet::new_unchecked(&mut out[..]), &src, &dst);
                let again = Packet::new_checked(&out[..]).unwrap();
                assert_eq!(
                    Repr::parse(&again, &src, &dst, ChecksumMode::Verify),
                    Ok(repr)
                );
            });
        }
    }
}
