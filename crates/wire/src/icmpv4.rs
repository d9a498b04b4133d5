//! ICMP for IPv4 (RFC 792): echo, and the error messages traceroute-style
//! measurements read.
//!
//! ICMP carries no length field, so the view's payload is the rest of the
//! buffer: wrap the IPv4 payload. For error messages the payload is the
//! quoted original datagram (its IP header and at least 8 bytes more), which
//! is usually truncated: wrap it with [`crate::ipv4::Packet::new_quoted`].

use core::fmt;

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::checksum;
use crate::{ChecksumMode, Error, Result};

/// Length of the header, rest-of-header word included.
pub const HEADER_LEN: usize = 8;

mod field {
    use crate::bytes::Field;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const REST: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQ_NO: Field = 6..8;
    /// Next-hop MTU of a "fragmentation needed" unreachable (RFC 1191).
    pub const NEXT_HOP_MTU: Field = 6..8;
    pub const PAYLOAD: usize = 8;
}

/// An ICMPv4 message type.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Message(pub u8);

impl Message {
    /// Echo reply.
    pub const ECHO_REPLY: Message = Message(0);
    /// Destination unreachable.
    pub const DST_UNREACHABLE: Message = Message(3);
    /// Redirect.
    pub const REDIRECT: Message = Message(5);
    /// Echo request.
    pub const ECHO_REQUEST: Message = Message(8);
    /// Time exceeded.
    pub const TIME_EXCEEDED: Message = Message(11);
    /// Parameter problem.
    pub const PARAM_PROBLEM: Message = Message(12);
    /// Timestamp request.
    pub const TIMESTAMP: Message = Message(13);
    /// Timestamp reply.
    pub const TIMESTAMP_REPLY: Message = Message(14);

    /// True for error messages, whose payload quotes the datagram at fault.
    pub fn is_error(self) -> bool {
        matches!(
            self,
            Message::DST_UNREACHABLE
                | Message::REDIRECT
                | Message::TIME_EXCEEDED
                | Message::PARAM_PROBLEM
        ) || self.0 == 4 // source quench, deprecated but still an error
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Message({})", self.0)
    }
}

/// Codes of destination-unreachable messages.
pub mod unreachable {
    /// Network unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable: what a UDP traceroute probe elicits at the target.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU.
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// A view of an ICMPv4 message.
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

    /// Wraps `buffer` after checking it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the buffer holds the 8-byte header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
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

    /// The type-specific second word of the header.
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

    /// Next-hop MTU of a fragmentation-needed unreachable.
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::NEXT_HOP_MTU)
    }

    /// Everything after the 8-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }

    /// The quoted original datagram, for error messages only.
    pub fn original_datagram(&self) -> Option<&[u8]> {
        self.msg_type().is_error().then(|| self.payload())
    }

    /// True when the checksum over the whole message is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
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

    /// Sets the next-hop MTU.
    pub fn set_next_hop_mtu(&mut self, mtu: u16) {
        write_u16(self.buffer.as_mut(), field::NEXT_HOP_MTU, mtu);
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }

    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let checksum = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(checksum);
    }
}

/// An ICMPv4 message header; the payload (echo data, quoted datagram) is
/// only counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Type 8, code 0.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data length.
        data_len: usize,
    },
    /// Type 0, code 0.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echo data length.
        data_len: usize,
    },
    /// Type 3.
    DstUnreachable {
        /// Reason; see [`mod@unreachable`].
        code: u8,
        /// Next-hop MTU (code 4), else usually 0.
        next_hop_mtu: u16,
        /// Length of the quoted datagram.
        data_len: usize,
    },
    /// Type 11; code 0 is TTL exceeded in transit.
    TimeExceeded {
        /// 0: TTL exceeded, 1: reassembly time exceeded.
        code: u8,
        /// Length of the quoted datagram.
        data_len: usize,
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
    /// Reads a message, verifying its checksum if `checksums` says so.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        checksums: ChecksumMode,
    ) -> Result<Repr> {
        packet.check_len()?;
        if checksums.verify() && !packet.verify_checksum() {
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
            (Message::DST_UNREACHABLE, code) => Repr::DstUnreachable {
                code,
                next_hop_mtu: packet.next_hop_mtu(),
                data_len,
            },
            (Message::TIME_EXCEEDED, code) => Repr::TimeExceeded { code, data_len },
            (Message(msg_type), code) => Repr::Other {
                msg_type,
                code,
                rest_of_header: packet.rest_of_header(),
                data_len,
            },
        })
    }

    /// Header length: [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header plus payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data_len()
    }

    /// Payload length.
    pub const fn data_len(&self) -> usize {
        match *self {
            Repr::EchoRequest { data_len, .. }
            | Repr::EchoReply { data_len, .. }
            | Repr::DstUnreachable { data_len, .. }
            | Repr::TimeExceeded { data_len, .. }
            | Repr::Other { data_len, .. } => data_len,
        }
    }

    /// Writes the header, then the checksum over the payload already in the
    /// buffer (which should be `buffer_len()` bytes).
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let (msg_type, code, rest) = match *self {
            Repr::EchoRequest { ident, seq_no, .. } => {
                (Message::ECHO_REQUEST, 0, echo_word(ident, seq_no))
            }
            Repr::EchoReply { ident, seq_no, .. } => {
                (Message::ECHO_REPLY, 0, echo_word(ident, seq_no))
            }
            Repr::DstUnreachable {
                code, next_hop_mtu, ..
            } => (Message::DST_UNREACHABLE, code, u32::from(next_hop_mtu)),
            Repr::TimeExceeded { code, .. } => (Message::TIME_EXCEEDED, code, 0),
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
        packet.fill_checksum();
    }
}

fn echo_word(ident: u16, seq_no: u16) -> u32 {
    u32::from(ident) << 16 | u32::from(seq_no)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::{self, Protocol};
    use crate::testdata::*;
    use std::net::Ipv4Addr;

    fn message(fixture: &[u8]) -> &[u8] {
        let ip = ipv4::Packet::new_checked(fixture).unwrap();
        assert_eq!(ip.protocol(), Protocol::ICMP);
        &fixture[ip.header_len()..]
    }

    const FIXTURES: [&[u8]; 3] = [
        &IPV4_ICMP_ECHO_REQUEST,
        &IPV4_ICMP_ECHO_REPLY,
        &IPV4_ICMP_TIME_EXCEEDED,
    ];

    #[test]
    fn parses_echo_request_and_reply() {
        let request = Packet::new_checked(message(&IPV4_ICMP_ECHO_REQUEST)).unwrap();
        assert_eq!(
            (request.msg_type(), request.msg_code()),
            (Message::ECHO_REQUEST, 0)
        );
        assert_eq!((request.echo_ident(), request.echo_seq_no()), (0x1234, 1));
        assert_eq!(request.rest_of_header(), 0x1234_0001);
        assert_eq!(request.payload(), (0x10..0x28).collect::<Vec<u8>>());
        assert_eq!(request.original_datagram(), None);
        assert!(request.verify_checksum());
        let reply = Packet::new_checked(message(&IPV4_ICMP_ECHO_REPLY)).unwrap();
        assert_eq!(
            Repr::parse(&reply, ChecksumMode::Verify),
            Ok(Repr::EchoReply {
                ident: 0x1234,
                seq_no: 1,
                data_len: 24
            })
        );
        // Request and reply differ only in type, so their checksums differ by 8 << 8.
        assert_eq!(
            checksum::update16(request.checksum(), 0x0800, 0x0000),
            reply.checksum()
        );
    }

    #[test]
    fn time_exceeded_quotes_the_probe() {
        let packet = Packet::new_checked(message(&IPV4_ICMP_TIME_EXCEEDED)).unwrap();
        let repr = Repr::parse(&packet, ChecksumMode::Verify).unwrap();
        assert_eq!(
            repr,
            Repr::TimeExceeded {
                code: 0,
                data_len: 28
            }
        );
        let quoted = packet.original_datagram().unwrap();
        // The quote is the probe's full IP header plus the 8-byte UDP header.
        let probe = ipv4::Packet::new_quoted(quoted).unwrap();
        assert_eq!(probe.ttl(), 1);
        assert_eq!(probe.ident(), 0x4242);
        assert_eq!(probe.dst_addr(), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(probe.protocol(), Protocol::UDP);
        let udp = crate::udp::Packet::new_unchecked(probe.payload());
        assert_eq!((udp.src_port(), udp.dst_port()), (33434, 33435));
    }

    #[test]
    fn emit_round_trips() {
        for fixture in FIXTURES {
            let message = message(fixture);
            let repr =
                Repr::parse(&Packet::new_checked(message).unwrap(), ChecksumMode::Verify).unwrap();
            assert_eq!(repr.buffer_len(), message.len());
            let mut buf = message.to_vec();
            buf[..HEADER_LEN].fill(0x55);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(&buf[..], message);
        }
    }

    #[test]
    fn other_types_round_trip() {
        let reprs = [
            Repr::DstUnreachable {
                code: unreachable::FRAG_NEEDED,
                next_hop_mtu: 1400,
                data_len: 28,
            },
            Repr::Other {
                msg_type: 12,
                code: 0,
                rest_of_header: 0x1400_0000,
                data_len: 28,
            },
            Repr::Other {
                msg_type: 8,
                code: 1,
                rest_of_header: 7,
                data_len: 0,
            },
        ];
        for repr in reprs {
            let mut buf = vec![0xab; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
            let packet = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(Repr::parse(&packet, ChecksumMode::Verify), Ok(repr));
        }
    }

    #[test]
    fn bad_checksum_and_short_buffers() {
        let mut buf = message(&IPV4_ICMP_ECHO_REQUEST).to_vec();
        buf[10] ^= 0xff;
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert!(!packet.verify_checksum());
        assert_eq!(
            Repr::parse(&packet, ChecksumMode::Verify),
            Err(Error::Checksum)
        );
        assert!(Repr::parse(&packet, ChecksumMode::Ignore).is_ok());
        for len in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&buf[..len]), Err(Error::Truncated));
        }
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for fixture in FIXTURES {
            for_each_mutation(message(fixture), |bytes| {
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
                    packet.next_hop_mtu(),
                );
                let _ = (
                    packet.payload(),
                    packet.original_datagram(),
                    packet.verify_checksum(),
                );
                let repr = Repr::parse(&packet, ChecksumMode::Ignore).unwrap();
                let mut out = bytes.to_vec();
                repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                let again = Packet::new_checked(&out[..]).unwrap();
                assert_eq!(Repr::parse(&again, ChecksumMode::Verify), Ok(repr));
            });
        }
    }
}
