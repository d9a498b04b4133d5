//! ARP for IPv4 over Ethernet (RFC 826).
//!
//! The view reads the generic header of any ARP packet, but its address
//! accessors assume the Ethernet/IPv4 layout, which is the only one [`Repr`]
//! accepts.

use std::net::Ipv4Addr;

use crate::bytes::{read_array, read_u16, write_u16};
use crate::ethernet::MacAddr;
use crate::{Error, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// Hardware type for Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// Protocol type for IPv4 (its EtherType).
pub const PTYPE_IPV4: u16 = 0x0800;

mod field {
    use crate::bytes::Field;

    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    /// End of the fixed part, before the variable-length addresses.
    pub const ADDRS: usize = 8;
    // Offsets of the addresses when hlen = 6 and plen = 4.
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
}

/// The ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// 1: who-has.
    Request,
    /// 2: is-at.
    Reply,
    /// Any other operation code.
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(value: u16) -> Self {
        match value {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => Operation::Unknown(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(value: Operation) -> Self {
        match value {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(other) => other,
        }
    }
}

/// A view of an ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than [`PACKET_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking it holds the addresses its header
    /// announces and the Ethernet/IPv4 layout the accessors read.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the buffer is long enough for every accessor.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::ADDRS {
            return Err(Error::Truncated);
        }
        let addrs = 2 * (usize::from(self.hardware_len()) + usize::from(self.protocol_len()));
        if len < field::ADDRS + addrs || len < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 for Ethernet).
    pub fn hardware_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type (0x0800 for IPv4).
    pub fn protocol_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PTYPE)
    }

    /// Hardware address length in bytes.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length in bytes.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation.
    pub fn operation(&self) -> Operation {
        read_u16(self.buffer.as_ref(), field::OPER).into()
    }

    /// True when the header announces Ethernet/IPv4 addresses.
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == HTYPE_ETHERNET
            && self.protocol_type() == PTYPE_IPV4
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }

    /// Sender hardware address (Ethernet/IPv4 layout).
    pub fn sender_mac(&self) -> MacAddr {
        MacAddr(read_array(self.buffer.as_ref(), field::SHA))
    }

    /// Sender protocol address (Ethernet/IPv4 layout).
    pub fn sender_ip(&self) -> Ipv4Addr {
        read_array::<4>(self.buffer.as_ref(), field::SPA).into()
    }

    /// Target hardware address (Ethernet/IPv4 layout).
    pub fn target_mac(&self) -> MacAddr {
        MacAddr(read_array(self.buffer.as_ref(), field::THA))
    }

    /// Target protocol address (Ethernet/IPv4 layout).
    pub fn target_ip(&self) -> Ipv4Addr {
        read_array::<4>(self.buffer.as_ref(), field::TPA).into()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::HTYPE, value);
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::PTYPE, value);
    }

    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Sets the protocol address length.
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, value: Operation) {
        write_u16(self.buffer.as_mut(), field::OPER, value.into());
    }

    /// Sets the sender hardware address.
    pub fn set_sender_mac(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&addr.0);
    }

    /// Sets the sender protocol address.
    pub fn set_sender_ip(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&addr.octets());
    }

    /// Sets the target hardware address.
    pub fn set_target_mac(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&addr.0);
    }

    /// Sets the target protocol address.
    pub fn set_target_ip(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&addr.octets());
    }
}

/// An Ethernet/IPv4 ARP request or reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Request or reply.
    pub operation: Operation,
    /// Who sends this packet.
    pub sender_mac: MacAddr,
    /// IPv4 address of the sender.
    pub sender_ip: Ipv4Addr,
    /// Hardware address sought (zero in a request).
    pub target_mac: MacAddr,
    /// IPv4 address sought, or the requester's in a reply.
    pub target_ip: Ipv4Addr,
}

impl Repr {
    /// A who-has `target_ip` request from `sender_mac`/`sender_ip`.
    pub fn request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Repr {
        Repr {
            operation: Operation::Request,
            sender_mac,
            sender_ip,
            target_mac: MacAddr::ZERO,
            target_ip,
        }
    }

    /// The reply to this request from the host owning `target_ip`, whose
    /// hardware address is `my_mac`.
    pub fn reply(&self, my_mac: MacAddr) -> Repr {
        Repr {
            operation: Operation::Reply,
            sender_mac: my_mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// Reads an Ethernet/IPv4 request or reply.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.is_ethernet_ipv4() {
            return Err(Error::Unsupported);
        }
        let operation = packet.operation();
        if let Operation::Unknown(_) = operation {
            return Err(Error::Unsupported);
        }
        Ok(Repr {
            operation,
            sender_mac: packet.sender_mac(),
            sender_ip: packet.sender_ip(),
            target_mac: packet.target_mac(),
            target_ip: packet.target_ip(),
        })
    }

    /// Header length: the whole packet, [`PACKET_LEN`].
    pub const fn header_len(&self) -> usize {
        PACKET_LEN
    }

    /// Bytes [`Repr::emit`] writes: [`PACKET_LEN`].
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet.
    ///
    /// # Panics
    /// If the buffer is shorter than [`PACKET_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_hardware_type(HTYPE_ETHERNET);
        packet.set_protocol_type(PTYPE_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_sender_mac(self.sender_mac);
        packet.set_sender_ip(self.sender_ip);
        packet.set_target_mac(self.target_mac);
        packet.set_target_ip(self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::{self, Frame};
    use crate::testdata::{for_each_mutation, ARP_REPLY, ARP_REQUEST_FRAME};

    const HOST_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x0a]);
    const ROUTER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x01]);
    const HOST_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
    const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

    fn request_body() -> &'static [u8] {
        &ARP_REQUEST_FRAME[ethernet::HEADER_LEN..]
    }

    #[test]
    fn parses_request_inside_padded_frame() {
        let frame = Frame::new_checked(&ARP_REQUEST_FRAME[..]).unwrap();
        let packet = Packet::new_checked(frame.payload()).unwrap();
        assert!(packet.is_ethernet_ipv4());
        assert_eq!(packet.operation(), Operation::Request);
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr, Repr::request(HOST_MAC, HOST_IP, ROUTER_IP));
    }

    #[test]
    fn request_and_reply_emit_match_fixtures() {
        let request = Repr::request(HOST_MAC, HOST_IP, ROUTER_IP);
        let mut buf = [0u8; PACKET_LEN];
        request.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &request_body()[..PACKET_LEN]);

        let reply = request.reply(ROUTER_MAC);
        reply.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ARP_REPLY);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&ARP_REPLY[..]).unwrap()),
            Ok(reply)
        );
        assert_eq!(reply.buffer_len(), PACKET_LEN);
    }

    #[test]
    fn rejects_short_and_foreign_packets() {
        for len in 0..PACKET_LEN {
            assert_eq!(
                Packet::new_checked(&ARP_REPLY[..len]),
                Err(Error::Truncated)
            );
        }
        // Announced address lengths larger than the buffer.
        let mut buf = ARP_REPLY;
        buf[4] = 16;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Truncated));
        // Well-formed but not Ethernet/IPv4: the view works, Repr declines.
        let mut buf = ARP_REPLY;
        buf[2..4].copy_from_slice(&[0x86, 0xdd]);
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Err(Error::Unsupported));
        let mut buf = ARP_REPLY;
        buf[7] = 3;
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.operation(), Operation::Unknown(3));
        assert_eq!(Repr::parse(&packet), Err(Error::Unsupported));
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for_each_mutation(request_body(), |bytes| {
            if let Ok(packet) = Packet::new_checked(bytes) {
                let _ = (
                    packet.hardware_type(),
                    packet.protocol_type(),
                    packet.operation(),
                );
                let _ = (
                    packet.sender_mac(),
                    packet.sender_ip(),
                    packet.target_mac(),
                    packet.target_ip(),
                );
                if let Ok(repr) = Repr::parse(&packet) {
                    let mut out = [0u8; PACKET_LEN];
                    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                    assert_eq!(&out[..], &bytes[..PACKET_LEN]);
                }
            }
        });
    }
}
