//! TCP segments (RFC 9293) with the options sonde cares about: MSS, window
//! scale, SACK (RFC 2018) and timestamps (RFC 7323).
//!
//! A TCP header carries no length of its own, so the view's payload is the
//! rest of the buffer: wrap the IP payload, not the whole IP packet.

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::checksum::IpPair;
use crate::ipv4::Protocol;
use crate::{ChecksumMode, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Longest header the 4-bit data offset can describe.
pub const MAX_HEADER_LEN: usize = 60;
const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;

mod field {
    use crate::bytes::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const SEQ: Field = 4..8;
    pub const ACK: Field = 8..12;
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Field = 14..16;
    pub const CHECKSUM: Field = 16..18;
    pub const URGENT: Field = 18..20;
    pub const OPTIONS: usize = 20;
}

/// The eight TCP control bits.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(pub u8);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x02);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x04);
    /// Push.
    pub const PSH: Flags = Flags(0x08);
    /// The acknowledgment number is significant.
    pub const ACK: Flags = Flags(0x10);
    /// The urgent pointer is significant.
    pub const URG: Flags = Flags(0x20);
    /// ECN echo.
    pub const ECE: Flags = Flags(0x40);
    /// Congestion window reduced.
    pub const CWR: Flags = Flags(0x80);

    const NAMES: [&'static str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];

    /// No flag set.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True when no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when any flag of `other` is set.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Sets the flags of `other`.
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    /// Clears the flags of `other`.
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }

    /// Sets or clears the flags of `other`.
    pub fn set(&mut self, other: Flags, on: bool) {
        if on {
            self.insert(other)
        } else {
            self.remove(other)
        }
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Flags {
    type Output = Flags;
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl fmt::Display for Flags {
    /// Set flags joined by `|`, e.g. `SYN|ACK`; `-` when none is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut first = true;
        for (bit, name) in Self::NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flags({self})")
    }
}

mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMPS: u8 = 8;
}

/// Up to four SACK blocks as (left edge, right edge), filled from the front.
pub type SackBlocks = [Option<(u32, u32)>; 4];

/// One TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list; what follows is padding.
    End,
    /// Padding between options.
    Nop,
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift count.
    WindowScale(u8),
    /// SACK permitted (SYN only).
    SackPermitted,
    /// Selective acknowledgment blocks; emit at least one.
    SackRange(SackBlocks),
    /// Timestamps.
    Timestamps {
        /// The sender's clock.
        tsval: u32,
        /// The echoed peer clock.
        tsecr: u32,
    },
    /// An option this crate does not interpret.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Bytes after kind and length.
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Reads the option at the start of `buf`, returning it and its length.
    /// Fails on a length byte below 2, past the end of `buf`, or wrong for a
    /// known kind.
    pub fn parse(buf: &'a [u8]) -> Result<(TcpOption<'a>, usize)> {
        let (&kind, rest) = buf.split_first().ok_or(Error::Truncated)?;
        match kind {
            kind::END => return Ok((TcpOption::End, 1)),
            kind::NOP => return Ok((TcpOption::Nop, 1)),
            _ => {}
        }
        let len = usize::from(*rest.first().ok_or(Error::Truncated)?);
        if len < 2 {
            return Err(Error::Malformed);
        }
        let data = buf.get(2..len).ok_or(Error::Truncated)?;
        let option = match (kind, data.len()) {
            (kind::MSS, 2) => TcpOption::Mss(read_u16(data, 0..2)),
            (kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(data[0]),
            (kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
            (kind::SACK, n) if n % 8 == 0 && (8..=32).contains(&n) => {
                let mut blocks = [None; 4];
                for (slot, block) in blocks.iter_mut().zip(data.chunks_exact(8)) {
                    *slot = Some((read_u32(block, 0..4), read_u32(block, 4..8)));
                }
                TcpOption::SackRange(blocks)
            }
            (kind::TIMESTAMPS, 8) => TcpOption::Timestamps {
                tsval: read_u32(data, 0..4),
                tsecr: read_u32(data, 4..8),
            },
            (
                kind::MSS
                | kind::WINDOW_SCALE
                | kind::SACK_PERMITTED
                | kind::SACK
                | kind::TIMESTAMPS,
                _,
            ) => return Err(Error::Malformed),
            (kind, _) => TcpOption::Unknown { kind, data },
        };
        Ok((option, len))
    }

    /// Bytes this option takes on the wire.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::End | TcpOption::Nop => 1,
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(blocks) => 2 + 8 * blocks.iter().flatten().count(),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buf` and returns its length.
    ///
    /// # Panics
    /// If `buf` is shorter than [`TcpOption::buffer_len`], or an unknown
    /// option's data exceeds 253 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        buf[0] = self.kind();
        if len == 1 {
            return 1;
        }
        buf[1] = u8::try_from(len).expect("TCP option longer than 255 bytes");
        let data = &mut buf[2..];
        match *self {
            TcpOption::Mss(mss) => write_u16(data, 0..2, mss),
            TcpOption::WindowScale(shift) => data[0] = shift,
            TcpOption::SackRange(blocks) => {
                for (chunk, (left, right)) in data.chunks_exact_mut(8).zip(blocks.iter().flatten())
                {
                    write_u32(chunk, 0..4, *left);
                    write_u32(chunk, 4..8, *right);
                }
            }
            TcpOption::Timestamps { tsval, tsecr } => {
                write_u32(data, 0..4, tsval);
                write_u32(data, 4..8, tsecr);
            }
            TcpOption::Unknown { data: bytes, .. } => data.copy_from_slice(bytes),
            TcpOption::End | TcpOption::Nop | TcpOption::SackPermitted => {}
        }
        len
    }

    /// The option's kind byte.
    pub fn kind(&self) -> u8 {
        match *self {
            TcpOption::End => kind::END,
            TcpOption::Nop => kind::NOP,
            TcpOption::Mss(_) => kind::MSS,
            TcpOption::WindowScale(_) => kind::WINDOW_SCALE,
            TcpOption::SackPermitted => kind::SACK_PERMITTED,
            TcpOption::SackRange(_) => kind::SACK,
            TcpOption::Timestamps { .. } => kind::TIMESTAMPS,
            TcpOption::Unknown { kind, .. } => kind,
        }
    }
}

/// Writes `options` back to back, padding the rest of `buf` with End bytes.
fn emit_options<'a, 'b: 'a>(options: impl IntoIterator<Item = &'a TcpOption<'b>>, buf: &mut [u8]) {
    let mut at = 0;
    for option in options {
        at += option.emit(&mut buf[at..]);
    }
    buf[at..].fill(kind::END);
}

/// Iterator over the options of a header; see [`Packet::iter_options`].
///
/// Yields an `Err` for a malformed option and then stops, and stops after
/// [`TcpOption::End`], so it never reads padding or runs past the header.
#[derive(Clone, Debug)]
pub struct OptionsIter<'a> {
    rest: &'a [u8],
}

impl<'a> OptionsIter<'a> {
    /// Iterates over raw option bytes.
    pub fn new(options: &'a [u8]) -> Self {
        OptionsIter { rest: options }
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse(self.rest) {
            Ok((TcpOption::End, _)) => {
                self.rest = &[];
                Some(Ok(TcpOption::End))
            }
            Ok((option, len)) => {
                self.rest = &self.rest[len..];
                Some(Ok(option))
            }
            Err(err) => {
                self.rest = &[];
                Some(Err(err))
            }
        }
    }
}

/// A view of a TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is
    /// shorter than the data offset claims.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the data offset is at least 5 words and within the buffer.
    /// Options are checked lazily by [`Packet::iter_options`].
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if self.header_len() > len {
            return Err(Error::Truncated);
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

    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ)
    }

    /// Acknowledgment number (meaningful when ACK is set).
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK)
    }

    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// Control bits.
    pub fn flags(&self) -> Flags {
        Flags(self.buffer.as_ref()[field::FLAGS])
    }

    /// Receive window, unscaled.
    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// Raw option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// Parsed options.
    pub fn iter_options(&self) -> OptionsIter<'_> {
        OptionsIter::new(self.options())
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Sequence space the segment occupies: payload plus one for each of SYN
    /// and FIN.
    pub fn segment_len(&self) -> usize {
        let flags = self.flags();
        self.payload().len()
            + usize::from(flags.contains(Flags::SYN))
            + usize::from(flags.contains(Flags::FIN))
    }

    /// True when the checksum matches under the pseudo-header of `ips`.
    pub fn verify_checksum(&self, ips: &IpPair) -> bool {
        ips.segment_checksum(Protocol::TCP.0, self.buffer.as_ref()) == 0
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

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, seq: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ, seq);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, ack: u32) {
        write_u32(self.buffer.as_mut(), field::ACK, ack);
    }

    /// Sets the header length in bytes, a multiple of 4 from 20 to 60. The
    /// reserved bits sharing the byte are cleared.
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len.is_multiple_of(4) && (HEADER_LEN..=MAX_HEADER_LEN).contains(&len));
        self.buffer.as_mut()[field::DATA_OFFSET] = ((len / 4) as u8) << 4;
    }

    /// Sets the control bits.
    pub fn set_flags(&mut self, flags: Flags) {
        self.buffer.as_mut()[field::FLAGS] = flags.0;
    }

    /// Sets the receive window.
    pub fn set_window_len(&mut self, window: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, window);
    }

    /// Sets the checksum field as is.
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, urgent: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, urgent);
    }

    /// Mutable option bytes.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[field::OPTIONS..end]
    }

    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes and stores the checksum over the whole buffer under the
    /// pseudo-header of `ips`.
    pub fn fill_checksum(&mut self, ips: &IpPair) {
        self.set_checksum(0);
        let checksum = ips.segment_checksum(Protocol::TCP.0, self.buffer.as_ref());
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

/// The options a [`Repr`] emits, collected without allocating.
#[derive(Default)]
struct OptionList {
    items: [Option<TcpOption<'static>>; 10],
    count: usize,
    /// Wire length of the options so far.
    len: usize,
}

impl OptionList {
    fn push(&mut self, options: &[TcpOption<'static>]) {
        for option in options {
            self.items[self.count] = Some(*option);
            self.count += 1;
            self.len += option.buffer_len();
        }
    }

    fn iter(&self) -> impl Iterator<Item = &TcpOption<'static>> {
        self.items[..self.count].iter().flatten()
    }
}

/// A TCP header with its commonly used options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number; `Some` exactly when the ACK flag is set, and on
    /// emit it decides the ACK flag whatever `flags` says.
    pub ack_number: Option<u32>,
    /// Control bits.
    pub flags: Flags,
    /// Receive window, unscaled.
    pub window_len: u16,
    /// Window scale option.
    pub window_scale: Option<u8>,
    /// MSS option.
    pub max_seg_size: Option<u16>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// SACK blocks, filled from the front.
    pub sack_ranges: [Option<(u32, u32)>; 3],
    /// Timestamps option as (tsval, tsecr).
    pub timestamp: Option<(u32, u32)>,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Repr {
    /// Reads a segment carried between `ips`, verifying its checksum if
    /// `checksums` says so. Options are read as Linux reads them: unknown ones
    /// and known ones of the wrong length are skipped, as are SACK blocks
    /// beyond three; a length byte below 2 or past the header ends the walk,
    /// keeping what was read. No option makes the segment invalid.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        ips: &IpPair,
        checksums: ChecksumMode,
    ) -> Result<Repr> {
        packet.check_len()?;
        if checksums.verify() && !packet.verify_checksum(ips) {
            return Err(Error::Checksum);
        }
        let flags = packet.flags();
        let mut repr = Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: flags.contains(Flags::ACK).then(|| packet.ack_number()),
            flags,
            window_len: packet.window_len(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload_len: packet.payload().len(),
        };
        let mut rest = packet.options();
        while !rest.is_empty() {
            match TcpOption::parse(rest) {
                Ok((TcpOption::End, _)) => break,
                Ok((option, len)) => {
                    repr.apply_option(option);
                    rest = &rest[len..];
                }
                // A known kind with the wrong length: its length byte still says where the
                // next option starts.
                Err(_) => match rest.get(1).map(|&len| usize::from(len)) {
                    Some(len) if (2..=rest.len()).contains(&len) => rest = &rest[len..],
                    _ => break,
                },
            }
        }
        Ok(repr)
    }

    fn apply_option(&mut self, option: TcpOption<'_>) {
        match option {
            TcpOption::Mss(mss) => self.max_seg_size = Some(mss),
            TcpOption::WindowScale(shift) => self.window_scale = Some(shift),
            TcpOption::SackPermitted => self.sack_permitted = true,
            TcpOption::Timestamps { tsval, tsecr } => self.timestamp = Some((tsval, tsecr)),
            TcpOption::SackRange(blocks) => {
                let free = self.sack_ranges.iter_mut().filter(|slot| slot.is_none());
                for (slot, block) in free.zip(blocks.iter().flatten()) {
                    *slot = Some(*block);
                }
            }
            TcpOption::End | TcpOption::Nop | TcpOption::Unknown { .. } => {}
        }
    }

    /// The options in the order and 4-byte-aligned NOP layout Linux uses,
    /// with as many SACK blocks as still fit in 40 bytes.
    fn wire_options(&self) -> OptionList {
        use TcpOption::{Nop, SackPermitted, Timestamps};
        let mut list = OptionList::default();
        if let Some(mss) = self.max_seg_size {
            list.push(&[TcpOption::Mss(mss)]);
        }
        match (self.sack_permitted, self.timestamp) {
            (true, Some((tsval, tsecr))) => {
                list.push(&[SackPermitted, Timestamps { tsval, tsecr }])
            }
            (false, Some((tsval, tsecr))) => list.push(&[Nop, Nop, Timestamps { tsval, tsecr }]),
            (true, None) => list.push(&[Nop, Nop, SackPermitted]),
            (false, None) => {}
        }
        if let Some(shift) = self.window_scale {
            list.push(&[Nop, TcpOption::WindowScale(shift)]);
        }
        let room = (MAX_OPTIONS_LEN - list.len).saturating_sub(4) / 8;
        let mut blocks = [None; 4];
        let ranges = self.sack_ranges.iter().flatten().take(room);
        for (slot, range) in blocks.iter_mut().zip(ranges) {
            *slot = Some(*range);
        }
        if blocks[0].is_some() {
            list.push(&[Nop, Nop, TcpOption::SackRange(blocks)]);
        }
        list
    }

    /// Header length including options.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.wire_options().len
    }

    /// Header plus payload length.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len
    }

    /// Writes the header and options, then the checksum over the whole
    /// buffer (which should be `buffer_len()` bytes with the payload already
    /// in place) under the pseudo-header of `ips`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::header_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, ips: &IpPair) {
        let mut flags = self.flags;
        flags.set(Flags::ACK, self.ack_number.is_some());
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number.unwrap_or(0));
        packet.set_header_len(self.header_len());
        packet.set_flags(flags);
        packet.set_window_len(self.window_len);
        packet.set_urgent_at(0);
        emit_options(self.wire_options().iter(), packet.options_mut());
        packet.fill_checksum(ips);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4;
    use crate::ipv6;
    use crate::testdata::*;

    /// The TCP segment inside an IPv4 fixture and its addresses.
    fn segment_v4(fixture: &[u8]) -> (&[u8], IpPair) {
        let ip = ipv4::Packet::new_checked(fixture).unwrap();
        let ips = IpPair::V4 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
        };
        (&fixture[ip.header_len()..usize::from(ip.total_len())], ips)
    }

    fn segment_v6(fixture: &[u8]) -> (&[u8], IpPair) {
        let ip = ipv6::Packet::new_checked(fixture).unwrap();
        let ips = IpPair::V6 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
        };
        (&fixture[ipv6::HEADER_LEN..], ips)
    }

    fn fixtures() -> [(&'static [u8], IpPair); 4] {
        [
            segment_v4(&IPV4_TCP_SYN),
            segment_v4(&IPV4_TCP_SYNACK),
            segment_v4(&IPV4_TCP_PSH_SACK),
            segment_v6(&IPV6_TCP_SYN),
        ]
    }

    #[test]
    fn parses_syn_view() {
        let (segment, ips) = segment_v4(&IPV4_TCP_SYN);
        let packet = Packet::new_checked(segment).unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (43512, 80));
        assert_eq!(packet.seq_number(), 0x6b8b4567);
        assert_eq!(packet.ack_number(), 0);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.flags(), Flags::SYN);
        assert_eq!(packet.window_len(), 64240);
        assert_eq!(packet.checksum(), 0x9f26);
        assert_eq!(packet.urgent_at(), 0);
        assert_eq!(packet.options().len(), 20);
        assert!(packet.payload().is_empty());
        assert_eq!(packet.segment_len(), 1);
        assert!(packet.verify_checksum(&ips));
        let options: Vec<_> = packet.iter_options().collect::<Result<_>>().unwrap();
        assert_eq!(
            options,
            [
                TcpOption::Mss(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamps {
                    tsval: 0x2a1b3c4d,
                    tsecr: 0
                },
                TcpOption::Nop,
                TcpOption::WindowScale(7),
            ]
        );
    }

    #[test]
    fn parses_syn_and_synack_reprs() {
        let (segment, ips) = segment_v4(&IPV4_TCP_SYN);
        let syn = Repr::parse(
            &Packet::new_checked(segment).unwrap(),
            &ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        assert_eq!(
            syn,
            Repr {
                src_port: 43512,
                dst_port: 80,
                seq_number: 0x6b8b4567,
                ack_number: None,
                flags: Flags::SYN,
                window_len: 64240,
                window_scale: Some(7),
                max_seg_size: Some(1460),
                sack_permitted: true,
                sack_ranges: [None; 3],
                timestamp: Some((0x2a1b3c4d, 0)),
                payload_len: 0,
            }
        );
        let (segment, ips) = segment_v4(&IPV4_TCP_SYNACK);
        let synack = Repr::parse(
            &Packet::new_checked(segment).unwrap(),
            &ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        assert_eq!(synack.flags, Flags::SYN | Flags::ACK);
        assert_eq!(synack.flags.to_string(), "SYN|ACK");
        assert_eq!(synack.ack_number, Some(syn.seq_number + 1));
        assert_eq!(synack.timestamp, Some((0x11223344, 0x2a1b3c4d)));
        assert_eq!(synack.window_len, 65160);
    }

    #[test]
    fn parses_data_segment_with_sack() {
        let (segment, ips) = segment_v4(&IPV4_TCP_PSH_SACK);
        let packet = Packet::new_checked(segment).unwrap();
        assert_eq!(packet.payload(), b"GET / HTTP/1.1\r\nHost: example\r\n\r\n");
        assert_eq!(packet.segment_len(), packet.payload().len());
        let repr = Repr::parse(&packet, &ips, ChecksumMode::Verify).unwrap();
        assert_eq!(repr.flags, Flags::PSH | Flags::ACK);
        assert_eq!(
            repr.sack_ranges,
            [Some((0x327b23c7 + 1000, 0x327b23c7 + 2448)), None, None]
        );
        assert_eq!(repr.timestamp, Some((0x2a1b3d00, 0x11223344)));
        assert_eq!(repr.payload_len, 33);
    }

    #[test]
    fn parses_ipv6_syn() {
        let (segment, ips) = segment_v6(&IPV6_TCP_SYN);
        let repr = Repr::parse(
            &Packet::new_checked(segment).unwrap(),
            &ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        assert_eq!(
            (repr.dst_port, repr.max_seg_size, repr.window_scale),
            (443, Some(1440), Some(7))
        );
        let IpPair::V6 { src, dst } = ips else {
            unreachable!()
        };
        assert!(Packet::new_checked(segment)
            .unwrap()
            .verify_checksum_v6(&src, &dst));
    }

    #[test]
    fn emit_round_trips_every_fixture() {
        for (segment, ips) in fixtures() {
            let repr = Repr::parse(
                &Packet::new_checked(segment).unwrap(),
                &ips,
                ChecksumMode::Verify,
            )
            .unwrap();
            assert_eq!(repr.buffer_len(), segment.len());
            let mut buf = segment.to_vec();
            buf[..repr.header_len()].fill(0xaa);
            repr.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
            assert_eq!(&buf[..], segment, "{repr:?}");
        }
    }

    #[test]
    fn checksum_fill_and_verify_v4_v6() {
        for (segment, ips) in fixtures() {
            let mut buf = segment.to_vec();
            let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
            let good = packet.checksum();
            packet.set_checksum(0);
            assert!(!packet.verify_checksum(&ips));
            packet.fill_checksum(&ips);
            assert_eq!(packet.checksum(), good);
            packet.payload_mut().iter_mut().for_each(|b| *b ^= 1);
            let damaged = Packet::new_checked(&buf[..]).unwrap();
            if !damaged.payload().is_empty() {
                let result = Repr::parse(&damaged, &ips, ChecksumMode::Verify);
                assert_eq!(result, Err(Error::Checksum));
                assert!(Repr::parse(&damaged, &ips, ChecksumMode::Ignore).is_ok());
            }
        }
        let (segment, _) = segment_v4(&IPV4_TCP_SYN);
        let mut buf = segment.to_vec();
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        let (src, dst) = (Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 7));
        packet.fill_checksum_v4(src, dst);
        assert!(packet.verify_checksum_v4(src, dst));
        assert!(!packet.verify_checksum_v4(dst, Ipv4Addr::new(198, 51, 100, 8)));
    }

    #[test]
    fn incremental_seq_rewrite_matches_fill() {
        let (segment, ips) = segment_v4(&IPV4_TCP_PSH_SACK);
        let mut buf = segment.to_vec();
        let mut packet = Packet::new_checked(&mut buf[..]).unwrap();
        let old = packet.seq_number();
        packet.set_seq_number(old.wrapping_add(0x8000_0001));
        let updated = crate::checksum::update32(packet.checksum(), old, packet.seq_number());
        packet.fill_checksum(&ips);
        assert_eq!(packet.checksum(), updated);
    }

    #[test]
    fn emit_without_options_and_with_everything() {
        let ips = IpPair::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        };
        let bare = Repr {
            src_port: 1,
            dst_port: 2,
            seq_number: 3,
            ack_number: Some(4),
            flags: Flags::RST,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload_len: 0,
        };
        assert_eq!(bare.header_len(), HEADER_LEN);
        let mut buf = vec![0xff; bare.buffer_len()];
        bare.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(packet.flags(), Flags::RST | Flags::ACK);
        assert_eq!(
            Repr::parse(&packet, &ips, ChecksumMode::Verify)
                .unwrap()
                .flags,
            Flags::RST | Flags::ACK
        );

        // Every option at once does not fit: SACK blocks are dropped until it does.
        let full = Repr {
            window_scale: Some(14),
            max_seg_size: Some(9000),
            sack_permitted: true,
            sack_ranges: [Some((1, 2)), Some((3, 4)), Some((5, 6))],
            timestamp: Some((7, 8)),
            payload_len: 3,
            ..bare
        };
        assert!(full.header_len() <= MAX_HEADER_LEN);
        let mut buf = vec![0; full.buffer_len()];
        full.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
        let parsed = Repr::parse(
            &Packet::new_checked(&buf[..]).unwrap(),
            &ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        assert_eq!(parsed.sack_ranges, [Some((1, 2)), Some((3, 4)), None]);
        assert_eq!(full.header_len(), MAX_HEADER_LEN);
        assert_eq!(
            parsed,
            Repr {
                sack_ranges: parsed.sack_ranges,
                flags: Flags::RST | Flags::ACK,
                ..full
            }
        );

        // Timestamps alone leave room for three blocks.
        let sacks = Repr {
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            ..full
        };
        let mut buf = vec![0; sacks.buffer_len()];
        sacks.emit(&mut Packet::new_unchecked(&mut buf[..]), &ips);
        let parsed = Repr::parse(
            &Packet::new_checked(&buf[..]).unwrap(),
            &ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        assert_eq!(parsed.sack_ranges, full.sack_ranges);
        assert_eq!(sacks.header_len(), 20 + 12 + 28);
    }

    #[test]
    fn option_parsing_edge_cases() {
        fn parse_all(bytes: &[u8]) -> Vec<Result<TcpOption<'_>>> {
            OptionsIter::new(bytes).collect()
        }
        // Length 0 and 1 would loop forever or underflow in a naive parser.
        assert_eq!(parse_all(&[2, 0, 5, 0xb4]), [Err(Error::Malformed)]);
        assert_eq!(
            parse_all(&[1, 0x22, 1]),
            [Ok(TcpOption::Nop), Err(Error::Malformed)]
        );
        // Length past the end, and a kind byte without its length.
        assert_eq!(parse_all(&[8, 10, 0, 0]), [Err(Error::Truncated)]);
        assert_eq!(
            parse_all(&[1, 2]),
            [Ok(TcpOption::Nop), Err(Error::Truncated)]
        );
        // Known kinds with the wrong length.
        assert_eq!(parse_all(&[2, 3, 5]), [Err(Error::Malformed)]);
        assert_eq!(parse_all(&[5, 2]), [Err(Error::Malformed)]);
        assert_eq!(
            parse_all(&[5, 9, 0, 0, 0, 0, 0, 0, 0]),
            [Err(Error::Malformed)]
        );
        // End stops the walk even if garbage follows.
        assert_eq!(parse_all(&[0, 2, 0]), [Ok(TcpOption::End)]);
        // Unknown options are passed through.
        assert_eq!(
            parse_all(&[0xfe, 4, 0xab, 0xcd, 30, 2]),
            [
                Ok(TcpOption::Unknown {
                    kind: 0xfe,
                    data: &[0xab, 0xcd]
                }),
                Ok(TcpOption::Unknown {
                    kind: 30,
                    data: &[]
                })
            ]
        );
    }

    /// `Repr::parse` reads options as Linux does: a known option of the wrong length is
    /// skipped and the rest still count; a length byte that cannot be followed ends the walk.
    /// The segment stays valid either way.
    #[test]
    fn repr_skips_options_of_the_wrong_length() {
        let ips = IpPair::V4 {
            src: Ipv4Addr::UNSPECIFIED,
            dst: Ipv4Addr::UNSPECIFIED,
        };
        let syn = segment_v4(&IPV4_TCP_SYN).0;
        let whole = Repr::parse(
            &Packet::new_checked(syn).unwrap(),
            &ips,
            ChecksumMode::Ignore,
        )
        .unwrap();
        assert!(whole.max_seg_size.is_some() && whole.timestamp.is_some());
        // The MSS option (the first) claims 3 bytes, as no MSS option may: it is skipped
        // whole and the options after it are read. Its fourth byte is then read as the next
        // kind, so the option's own last byte becomes a NOP here.
        let mut segment = syn.to_vec();
        assert_eq!(segment[20..22], [2, 4], "the fixture starts with MSS");
        segment[21] = 3;
        segment[23] = 1;
        let parsed = Repr::parse(
            &Packet::new_checked(&segment[..]).unwrap(),
            &ips,
            ChecksumMode::Ignore,
        )
        .unwrap();
        assert_eq!(parsed.max_seg_size, None);
        assert_eq!(
            (parsed.timestamp, parsed.window_scale, parsed.sack_permitted),
            (whole.timestamp, whole.window_scale, whole.sack_permitted)
        );
        // Length 0 cannot be skipped: the walk ends there, the segment is still read.
        segment[21] = 0;
        let parsed = Repr::parse(
            &Packet::new_checked(&segment[..]).unwrap(),
            &ips,
            ChecksumMode::Ignore,
        )
        .unwrap();
        assert_eq!((parsed.max_seg_size, parsed.timestamp), (None, None));
        assert_eq!(parsed.seq_number, whole.seq_number);
    }

    #[test]
    fn options_emit_round_trip() {
        let options = [
            TcpOption::Mss(1220),
            TcpOption::WindowScale(2),
            TcpOption::SackPermitted,
            TcpOption::SackRange([Some((1, 2)), Some((3, 4)), None, None]),
            TcpOption::Timestamps { tsval: 5, tsecr: 6 },
            TcpOption::Unknown {
                kind: 34,
                data: &[9, 9],
            },
            TcpOption::Nop,
            TcpOption::End,
        ];
        let len: usize = options.iter().map(TcpOption::buffer_len).sum();
        let mut buf = vec![0xcc; len];
        emit_options(&options, &mut buf);
        let parsed: Vec<_> = OptionsIter::new(&buf).collect::<Result<_>>().unwrap();
        assert_eq!(parsed, options);
    }

    #[test]
    fn hostile_headers_are_rejected() {
        let segment = segment_v4(&IPV4_TCP_SYN).0;
        let mut buf = segment.to_vec();
        buf[12] = 0x40; // data offset 4 words
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Malformed));
        buf[12] = 0x00;
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Malformed));
        buf[12] = 0xf0; // 60 bytes > 40 available
        assert_eq!(Packet::new_checked(&buf[..]), Err(Error::Truncated));
        for len in 0..segment.len() {
            assert_eq!(
                Packet::new_checked(&segment[..len]),
                Err(Error::Truncated),
                "len {len}"
            );
        }
    }

    #[test]
    fn flags_helpers() {
        let mut flags = Flags::empty();
        assert_eq!(flags.to_string(), "-");
        flags.insert(Flags::FIN | Flags::ACK);
        assert!(flags.contains(Flags::FIN) && flags.intersects(Flags::ACK | Flags::SYN));
        assert!(!flags.contains(Flags::FIN | Flags::SYN));
        flags.remove(Flags::FIN);
        flags |= Flags::ECE | Flags::CWR;
        assert_eq!(format!("{flags:?}"), "Flags(ACK|ECE|CWR)");
        assert_eq!((flags & Flags::ACK).bits(), 0x10);
    }

    #[test]
    fn hostile_inputs_never_panic() {
        for (segment, ips) in fixtures() {
            for_each_mutation(segment, |bytes| exercise(bytes, &ips));
        }
    }

    fn exercise(bytes: &[u8], ips: &IpPair) {
        let Ok(packet) = Packet::new_checked(bytes) else {
            return;
        };
        let _ = (
            packet.src_port(),
            packet.dst_port(),
            packet.seq_number(),
            packet.ack_number(),
        );
        let _ = (
            packet.header_len(),
            packet.flags(),
            packet.window_len(),
            packet.checksum(),
        );
        let _ = (
            packet.urgent_at(),
            packet.options(),
            packet.payload(),
            packet.segment_len(),
        );
        let _ = packet.verify_checksum(ips);
        assert!(packet.iter_options().count() <= packet.options().len());
        let Ok(repr) = Repr::parse(&packet, ips, ChecksumMode::Ignore) else {
            return;
        };
        let mut out = vec![0; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), ips);
        let again = Repr::parse(
            &Packet::new_checked(&out[..]).unwrap(),
            ips,
            ChecksumMode::Verify,
        )
        .unwrap();
        // Only SACK blocks that no longer fit beside the other options may be lost.
        let kept = again.sack_ranges.iter().flatten().count();
        assert_eq!(again.sack_ranges[..kept], repr.sack_ranges[..kept]);
        assert_eq!(
            again,
            Repr {
                sack_ranges: again.sack_ranges,
                ..repr
            }
        );
    }
}
