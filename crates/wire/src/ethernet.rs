//! Ethernet II frames: MAC addresses, EtherTypes and the 14-byte header.
//!
//! VLAN tags are not parsed: a tagged frame simply reports
//! [`EtherType::Vlan`] and the tag is the start of its payload.

use core::fmt;
use core::str::FromStr;

use crate::bytes::{read_array, read_u16, write_u16};
use crate::{Error, Result};

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;

mod field {
    use crate::bytes::Field;

    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// `00:00:00:00:00:00`, e.g. the unknown target of an ARP request.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The address as bytes, in wire order.
    pub const fn octets(&self) -> [u8; 6] {
        self.0
    }

    /// True for `ff:ff:ff:ff:ff:ff`.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the group bit is set (broadcast included).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True for an individual (non-group) address.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// True when the locally-administered bit is set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// True for `00:00:00:00:00:00`.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(octets: [u8; 6]) -> Self {
        MacAddr(octets)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MacAddr({self})")
    }
}

/// A string that is not a MAC address. Only produced while parsing
/// configuration, so it keeps a copy of the input for the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseMacAddrError {
    input: String,
}

impl ParseMacAddrError {
    /// The rejected input.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for ParseMacAddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid MAC address {:?}: expected six hex pairs like 02:00:00:00:00:01",
            self.input
        )
    }
}

impl std::error::Error for ParseMacAddrError {}

impl FromStr for MacAddr {
    type Err = ParseMacAddrError;

    /// Accepts six two-digit hex pairs separated consistently by `:` or `-`,
    /// in either case.
    fn from_str(s: &str) -> core::result::Result<Self, Self::Err> {
        parse_mac(s.as_bytes()).ok_or_else(|| ParseMacAddrError {
            input: s.to_owned(),
        })
    }
}

fn parse_mac(text: &[u8]) -> Option<MacAddr> {
    if text.len() != 17 {
        return None;
    }
    let separator = text[2];
    if separator != b':' && separator != b'-' {
        return None;
    }
    let mut octets = [0u8; 6];
    for (i, octet) in octets.iter_mut().enumerate() {
        let at = 3 * i;
        if i > 0 && text[at - 1] != separator {
            return None;
        }
        *octet = hex_digit(text[at])? << 4 | hex_digit(text[at + 1])?;
    }
    Some(MacAddr(octets))
}

fn hex_digit(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// The EtherType field, with the values sonde handles named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x86DD.
    Ipv6,
    /// 0x8100, an 802.1Q tag follows.
    Vlan,
    /// Anything else. `From<u16>` never produces this for the named values.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(value: u16) -> Self {
        match value {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(value: EtherType) -> Self {
        match value {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(other) => other,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Unknown(value) => write!(f, "0x{value:04x}"),
            named => fmt::Debug::fmt(named, f),
        }
    }
}

/// A view of an Ethernet II frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps `buffer` after checking it holds a full header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks the buffer is long enough for every accessor.
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

    /// Header length; always [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Destination MAC address.
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(read_array(self.buffer.as_ref(), field::DST))
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> MacAddr {
        MacAddr(read_array(self.buffer.as_ref(), field::SRC))
    }

    /// EtherType field.
    pub fn ethertype(&self) -> EtherType {
        read_u16(self.buffer.as_ref(), field::ETHERTYPE).into()
    }

    /// Everything after the header, including any trailing padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.0);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, addr: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.0);
    }

    /// Sets the EtherType field.
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, ethertype.into());
    }

    /// Mutable access to everything after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// The header of an Ethernet II frame. The payload is not part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source MAC address.
    pub src_addr: MacAddr,
    /// Destination MAC address.
    pub dst_addr: MacAddr,
    /// EtherType of the payload.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the header of `frame`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Header length: [`HEADER_LEN`].
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes [`Repr::emit`] writes: the header only.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `frame`, leaving the payload untouched.
    ///
    /// # Panics
    /// If the frame is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{for_each_mutation, ARP_REQUEST_FRAME};

    #[test]
    fn parses_arp_request_frame() {
        let frame = Frame::new_checked(&ARP_REQUEST_FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), MacAddr::BROADCAST);
        assert_eq!(frame.src_addr(), MacAddr([2, 0, 0, 0, 0, 0x0a]));
        assert_eq!(frame.ethertype(), EtherType::Arp);
        // The 28-byte ARP body plus 18 bytes of padding to the 60-byte minimum.
        assert_eq!(frame.payload().len(), 46);
        assert_eq!(&frame.payload()[..4], &[0x00, 0x01, 0x08, 0x00]);
    }

    #[test]
    fn emit_round_trips() {
        let repr = Repr::parse(&Frame::new_checked(&ARP_REQUEST_FRAME[..]).unwrap()).unwrap();
        let mut buf = ARP_REQUEST_FRAME;
        buf[..HEADER_LEN].fill(0);
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ARP_REQUEST_FRAME);
        assert_eq!(repr.buffer_len(), HEADER_LEN);
    }

    #[test]
    fn setters_and_payload_mut() {
        let mut buf = [0u8; 20];
        let mut frame = Frame::new_checked(&mut buf[..]).unwrap();
        frame.set_ethertype(EtherType::Unknown(0x88b5));
        frame.payload_mut()[0] = 0xaa;
        assert_eq!(frame.ethertype(), EtherType::Unknown(0x88b5));
        assert_eq!(frame.into_inner()[HEADER_LEN], 0xaa);
    }

    #[test]
    fn vlan_tagged_frame_does_not_panic() {
        let mut buf = ARP_REQUEST_FRAME;
        buf[12..14].copy_from_slice(&[0x81, 0x00]);
        let frame = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(frame.ethertype(), EtherType::Vlan);
    }

    #[test]
    fn short_frames_are_truncated() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Frame::new_checked(&ARP_REQUEST_FRAME[..len]),
                Err(Error::Truncated)
            );
        }
        assert!(Frame::new_checked(&ARP_REQUEST_FRAME[..HEADER_LEN])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn ethertype_conversions() {
        for value in [0x0800, 0x0806, 0x86dd, 0x8100, 0x88cc, 0] {
            assert_eq!(u16::from(EtherType::from(value)), value);
        }
        assert_eq!(EtherType::from(0x86dd), EtherType::Ipv6);
        assert_eq!(EtherType::Unknown(0x88cc).to_string(), "0x88cc");
        assert_eq!(EtherType::Ipv4.to_string(), "Ipv4");
    }

    #[test]
    fn mac_parse_and_display() {
        let mac: MacAddr = "02:00:00:00:00:01".parse().unwrap();
        assert_eq!(mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!(
            "AA-bb-CC-dd-EE-ff".parse::<MacAddr>().unwrap().to_string(),
            "aa:bb:cc:dd:ee:ff"
        );
        assert_eq!(mac.to_string(), "02:00:00:00:00:01");
        assert!(mac.is_unicast() && mac.is_local() && !mac.is_multicast());
        assert!(MacAddr::BROADCAST.is_broadcast() && MacAddr::BROADCAST.is_multicast());
        assert!(MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]).is_multicast());
        assert!(MacAddr::ZERO.is_zero() && !MacAddr::ZERO.is_local());
    }

    #[test]
    fn mac_parse_rejects_bad_input() {
        for bad in [
            "",
            "zz:00:00:00:00:01",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "02:00-00:00:00:01",
            "02.00.00.00.00.01",
            "2:0:0:0:0:1",
            "020000000001",
            "+2:00:00:00:00:01",
            "02:00:00:00:00:0é",
            "02:00:00:00:00:01 ",
        ] {
            let err = bad.parse::<MacAddr>().unwrap_err();
            assert_eq!(err.input(), bad);
            let message = err.to_string();
            assert!(message.contains(&format!("{bad:?}")), "{message}");
            assert!(message.contains("expected six hex pairs like 02:00:00:00:00:01"));
        }
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for_each_mutation(&ARP_REQUEST_FRAME, |bytes| {
            if let Ok(frame) = Frame::new_checked(bytes) {
                let _ = (
                    frame.dst_addr(),
                    frame.src_addr(),
                    frame.ethertype(),
                    frame.payload(),
                );
                assert!(Repr::parse(&frame).is_ok());
            } else {
                assert!(bytes.len() < HEADER_LEN);
            }
        });
    }
}
