//! Reading a capture file (`-r`) as libpcap reads it, so that `sonde capture -r` takes every
//! file `tcpdump -r` takes, with the same packets: classic pcap (micro- or nanosecond, either
//! byte order, versions 2.0 to 2.4, the 24-byte records of Kuznetzov's patched format) and
//! pcapng (enhanced, simple and obsolete packet blocks, any timestamp resolution and offset),
//! of any link type.
//!
//! What libpcap forgives, sonde forgives too: a snap length of 0 or beyond the link type's
//! maximum means that maximum; a record longer than the snap length is cut to it (classic pcap);
//! a captured length above the wire length, or a microsecond field of a second or more, passes
//! as it is; FCS bits above the link type are kept apart from it; pcapng options may end
//! without an end-of-options marker; a simple packet block's padding is not packet data. What
//! libpcap refuses (a record longer than any packet of its link type, an interface of another
//! link type than the first, a block whose two lengths differ), sonde refuses with one line.
//!
//! Every field is read through bounds-checked views: hostile input ends in an error, never a
//! panic (fuzzed: `fuzz/capture_read`), and no allocation exceeds what the input holds.

use std::fs::File;
use std::io::{self, BufReader, Read};

use anyhow::{anyhow, Context};

/// A packet read from a file.
pub struct FilePacket<'a> {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub data: &'a [u8],
}

/// What the file says of itself (its first interface, for pcapng).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// The link type (a LINKTYPE_ value), without the FCS bits.
    pub linktype: u32,
    /// The bits a classic pcap header carries above the link type (the FCS length), as they
    /// were: written back unchanged.
    pub linktype_ext: u32,
    /// The snapshot length, as libpcap takes it: 0 and values beyond the link type's largest
    /// packet mean that largest packet.
    pub snaplen: u32,
}

impl FileHeader {
    /// The header's link type field: the link type and the FCS bits.
    pub fn linktype_field(&self) -> u32 {
        self.linktype | self.linktype_ext
    }
}

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_RAW: packets start with their IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;

/// The largest packet libpcap takes for a link type (its `max_snaplen_for_dlt`): 256 KiB, more
/// for the few link types whose packets are bigger.
pub fn max_snaplen(linktype: u32) -> u32 {
    match linktype {
        231 => 128 << 20, // D-Bus
        279 => 8 << 20,   // EBHSCR
        249 => 1 << 20,   // USBPcap
        _ => 256 << 10,
    }
}

/// The snapshot length libpcap uses for a file that declares `snaplen`.
fn adjusted_snaplen(linktype: u32, snaplen: u32) -> u32 {
    let max = max_snaplen(linktype);
    if snaplen == 0 || snaplen > max {
        max
    } else {
        snaplen
    }
}

/// A problem with the file itself; [`read_file`] names the file in it. (Errors of the callbacks
/// pass through as they are.)
#[derive(Debug)]
struct BadFile(String);

impl std::fmt::Display for BadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadFile {}

fn bad(text: impl Into<String>) -> anyhow::Error {
    BadFile(text.into()).into()
}

/// Opens `path` (`-` for stdin) and calls `on_header` once, then `on_packet` for each packet in
/// order, until it returns false. Returns how many packets it read. A truncated or corrupt file
/// is an error that names the file and the packet where reading stopped; the packets before it
/// have been handed over. Hostile input ends in an error, never a panic.
pub fn read_file(
    path: &str,
    on_header: impl FnMut(FileHeader) -> anyhow::Result<()>,
    on_packet: impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let input: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).with_context(|| format!("cannot read {path}"))?)
    };
    read_stream(input, on_header, on_packet).map_err(|e| {
        if e.is::<BadFile>() {
            e.context(path.to_string())
        } else {
            e
        }
    })
}

/// [`read_file`] of a stream (errors do not name it).
pub fn read_stream(
    mut input: impl Read,
    mut on_header: impl FnMut(FileHeader) -> anyhow::Result<()>,
    mut on_packet: impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut magic = [0u8; 4];
    input
        .read_exact(&mut magic)
        .map_err(|_| bad("too short to be a capture file"))?;
    let mut input = Input {
        inner: BufReader::with_capacity(1 << 20, input),
        buf: Vec::new(),
    };
    if u32::from_le_bytes(magic) == PCAPNG_SHB {
        return pcapng::read(&mut input, &mut on_header, &mut on_packet);
    }
    match pcap::Format::of(magic) {
        Some(format) => pcap::read(&mut input, format, &mut on_header, &mut on_packet),
        None => Err(bad("not a pcap or pcapng file")),
    }
}

/// The block type of a pcapng section header block (the same in either byte order).
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;

/// The file, and one buffer reused for every record or block.
struct Input<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

/// What an attempt to read a fixed number of bytes found.
enum Got {
    All,
    /// The input ended before the first byte.
    Nothing,
    /// The input ended after some of them.
    Part,
}

impl<R: Read> Input<R> {
    /// Fills `out` from the input.
    fn fill(&mut self, out: &mut [u8]) -> anyhow::Result<Got> {
        let mut done = 0;
        while done < out.len() {
            match self.inner.read(&mut out[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(anyhow!("reading failed: {e}")),
            }
        }
        Ok(match done {
            n if n == out.len() => Got::All,
            0 => Got::Nothing,
            _ => Got::Part,
        })
    }

    /// Reads `len` bytes into the buffer: false if the input ended first. The buffer grows only
    /// as the bytes arrive, so a length the file lies about costs no more than the file.
    fn fill_buf(&mut self, len: usize) -> anyhow::Result<bool> {
        self.buf.clear();
        let got = (&mut self.inner)
            .take(len as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| anyhow!("reading failed: {e}"))?;
        Ok(got == len)
    }
}

/// A bounds-checked little view of a header or block: every read says whether the bytes were
/// there, in the file's byte order.
#[derive(Clone, Copy)]
struct View<'a> {
    bytes: &'a [u8],
    swapped: bool,
}

impl<'a> View<'a> {
    fn u16(&self, at: usize) -> Option<u16> {
        let b: [u8; 2] = self.bytes.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if self.swapped {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn u32(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.swapped {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&self, at: usize) -> Option<u64> {
        let b: [u8; 8] = self.bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.swapped {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn slice(&self, at: usize, len: usize) -> Option<&'a [u8]> {
        self.bytes.get(at..at.checked_add(len)?)
    }
}

fn truncated(read: u64, what: &str) -> anyhow::Error {
    bad(format!(
        "truncated or corrupt after packet {read} (the file ends inside {what})"
    ))
}

fn corrupt(read: u64, what: impl std::fmt::Display) -> anyhow::Error {
    bad(format!("truncated or corrupt after packet {read} ({what})"))
}

/// Nanoseconds since the epoch of `sec` seconds and `frac_ns` nanoseconds; fields beyond what
/// 64 bits of nanoseconds hold (the year 2554) wrap, as libpcap's 32-bit fields do sooner.
fn nanos(sec: u64, frac_ns: u64) -> u64 {
    sec.wrapping_mul(1_000_000_000).wrapping_add(frac_ns)
}

mod pcap {
    use super::*;

    /// A classic pcap file's layout, from its magic number.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Format {
        pub swapped: bool,
        pub nano: bool,
        /// Kuznetzov's patched libpcap: 8 more bytes per record header.
        pub patched: bool,
    }

    impl Format {
        pub fn of(magic: [u8; 4]) -> Option<Format> {
            let (native, swapped) = (u32::from_le_bytes(magic), u32::from_be_bytes(magic));
            for (value, is_swapped) in [(native, false), (swapped, true)] {
                let (nano, patched) = match value {
                    0xA1B2_C3D4 => (false, false),
                    0xA1B2_3C4D => (true, false),
                    0xA1B2_CD34 => (false, true),
                    _ => continue,
                };
                return Some(Format {
                    swapped: is_swapped,
                    nano,
                    patched,
                });
            }
            None
        }

        fn record_header_len(self) -> usize {
            if self.patched {
                24
            } else {
                16
            }
        }
    }

    /// Whether a record's captured and wire lengths were written the other way round (old
    /// files: before version 2.3, and some of 2.3).
    #[derive(Clone, Copy)]
    enum Lengths {
        InOrder,
        Swapped,
        MaybeSwapped,
    }

    pub(super) fn read<R: Read>(
        input: &mut Input<R>,
        format: Format,
        on_header: &mut impl FnMut(FileHeader) -> anyhow::Result<()>,
        on_packet: &mut impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
    ) -> anyhow::Result<u64> {
        let mut rest = [0u8; 20];
        if !matches!(input.fill(&mut rest)?, Got::All) {
            return Err(bad("bad pcap header: the file ends inside it"));
        }
        let v = View {
            bytes: &rest,
            swapped: format.swapped,
        };
        let (major, minor) = (v.u16(0).unwrap_or(0), v.u16(2).unwrap_or(0));
        let lengths = match (major, minor) {
            (2, 0..=2) | (543, 0) => Lengths::Swapped,
            (2, 3) => Lengths::MaybeSwapped,
            (2, 4) => Lengths::InOrder,
            (0..=1, _) => return Err(bad("archaic pcap savefile format")),
            _ => {
                return Err(bad(format!(
                    "unsupported pcap savefile version {major}.{minor}"
                )))
            }
        };
        let field = v.u32(16).unwrap_or(0);
        let linktype = field & 0x03FF_FFFF;
        let mut snaplen = adjusted_snaplen(linktype, v.u32(12).unwrap_or(0));
        if format.patched && linktype == LINKTYPE_ETHERNET {
            // It may have captured in cooked mode, with an Ethernet header made up after.
            snaplen = snaplen.saturating_add(14).min(i32::MAX as u32);
        }
        let header = FileHeader {
            linktype,
            linktype_ext: field & !0x03FF_FFFF,
            snaplen,
        };
        on_header(header)?;
        let mut record = [0u8; 24];
        let record = &mut record[..format.record_header_len()];
        let mut n = 0;
        loop {
            match input.fill(record)? {
                Got::All => {}
                Got::Nothing => return Ok(n),
                Got::Part => return Err(truncated(n, "a record header")),
            }
            let r = View {
                bytes: record,
                swapped: format.swapped,
            };
            let (sec, frac) = (r.u32(0).unwrap_or(0), r.u32(4).unwrap_or(0));
            let (mut caplen, mut len) = (r.u32(8).unwrap_or(0), r.u32(12).unwrap_or(0));
            let swap = match lengths {
                Lengths::InOrder => false,
                Lengths::Swapped => true,
                Lengths::MaybeSwapped => caplen > len,
            };
            if swap {
                std::mem::swap(&mut caplen, &mut len);
            }
            if caplen > max_snaplen(linktype) {
                return Err(corrupt(
                    n,
                    format!(
                        "packet {} claims {caplen} bytes, more than any packet of its link type",
                        n + 1
                    ),
                ));
            }
            if !input.fill_buf(caplen as usize)? {
                return Err(truncated(n, "a packet"));
            }
            n += 1;
            // Longer than the snap length: libpcap hands over the first snaplen bytes.
            let kept = caplen.min(header.snaplen) as usize;
            let frac_ns = u64::from(frac) * if format.nano { 1 } else { 1_000 };
            let go_on = on_packet(&FilePacket {
                ts_ns: nanos(u64::from(sec), frac_ns),
                wire_len: len,
                data: &input.buf[..kept.min(input.buf.len())],
            })?;
            if !go_on {
                return Ok(n);
            }
        }
    }
}

mod pcapng {
    use super::*;

    const IDB: u32 = 1;
    const OBSOLETE_PB: u32 = 2;
    const SPB: u32 = 3;
    const EPB: u32 = 6;
    const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
    /// The longest section header block libpcap reads.
    const MAX_SHB: u32 = 1 << 20;

    /// One interface's timestamps: units per second (a power of 10 or of 2) and an offset in
    /// seconds.
    #[derive(Clone, Copy)]
    pub(super) struct Interface {
        pub per_second: u64,
        pub binary: bool,
        pub offset_s: i64,
    }

    impl Interface {
        pub fn ts_ns(&self, t: u64) -> u64 {
            let sec = (t / self.per_second).wrapping_add(self.offset_s as u64);
            let frac = t % self.per_second;
            let frac_ns = if self.binary || self.per_second > 1_000_000_000 {
                (u128::from(frac) * 1_000_000_000 / u128::from(self.per_second)) as u64
            } else {
                frac * (1_000_000_000 / self.per_second)
            };
            nanos(sec, frac_ns)
        }
    }

    /// What the reader knows while going through the file.
    struct State {
        swapped: bool,
        /// The first interface's link type and snapshot length: every packet is judged as one
        /// of it (libpcap refuses files whose interfaces differ).
        first: Option<FileHeader>,
        /// This section's interfaces.
        interfaces: Vec<Interface>,
        read: u64,
    }

    pub(super) fn read<R: Read>(
        input: &mut Input<R>,
        on_header: &mut impl FnMut(FileHeader) -> anyhow::Result<()>,
        on_packet: &mut impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
    ) -> anyhow::Result<u64> {
        let mut state = State {
            swapped: false,
            first: None,
            interfaces: Vec::new(),
            read: 0,
        };
        first_section(input, &mut state)?;
        loop {
            let mut head = [0u8; 8];
            match input.fill(&mut head)? {
                Got::All => {}
                Got::Nothing if state.first.is_some() => return Ok(state.read),
                Got::Nothing => {
                    return Err(bad("the pcapng file describes no interface"));
                }
                Got::Part => return Err(truncated(state.read, "a block header")),
            }
            let h = View {
                bytes: &head,
                swapped: state.swapped,
            };
            let (kind, total) = (h.u32(0).unwrap_or(0), h.u32(4).unwrap_or(0));
            read_body(input, &state, kind, total)?;
            let body = View {
                bytes: &input.buf[..input.buf.len().saturating_sub(4)],
                swapped: state.swapped,
            };
            match kind {
                PCAPNG_SHB => next_section(body, &mut state)?,
                IDB => {
                    let header = interface(body, &mut state)?;
                    if state.first.is_none() {
                        state.first = Some(header);
                        on_header(header)?;
                    }
                }
                EPB | SPB | OBSOLETE_PB => {
                    let packet = packet(body, kind, &state)?;
                    state.read += 1;
                    if !on_packet(&packet)? {
                        return Ok(state.read);
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads the rest of a block of `total` bytes (whose first 8 were read) into the buffer, and
    /// checks its lengths as libpcap does.
    fn read_body<R: Read>(
        input: &mut Input<R>,
        state: &State,
        kind: u32,
        total: u32,
    ) -> anyhow::Result<()> {
        let read = state.read;
        if total < 12 || !total.is_multiple_of(4) {
            return Err(corrupt(
                read,
                format!("a block of type {kind} has a length of {total}"),
            ));
        }
        let max = state.first.map_or(16 << 20, |f| {
            (16 << 20).max(max_snaplen(f.linktype) + (1 << 17) + 32)
        });
        if total > max {
            return Err(corrupt(
                read,
                format!("a block of {total} bytes, more than libpcap's {max}"),
            ));
        }
        if !input.fill_buf(total as usize - 8)? {
            return Err(truncated(read, "a block"));
        }
        let trailer = View {
            bytes: &input.buf,
            swapped: state.swapped,
        }
        .u32(total as usize - 12);
        if trailer != Some(total) {
            return Err(corrupt(
                read,
                format!("a block's length is {total} in its header and {trailer:?} at its end"),
            ));
        }
        Ok(())
    }

    /// The first section header: its byte order and version.
    fn first_section<R: Read>(input: &mut Input<R>, state: &mut State) -> anyhow::Result<()> {
        let mut head = [0u8; 8];
        if !matches!(input.fill(&mut head)?, Got::All) {
            return Err(bad("bad pcapng header: the file ends inside it"));
        }
        let magic = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        state.swapped = match magic {
            BYTE_ORDER_MAGIC => false,
            m if m.swap_bytes() == BYTE_ORDER_MAGIC => true,
            _ => return Err(bad("bad pcapng header: no byte-order magic")),
        };
        let total = View {
            bytes: &head,
            swapped: state.swapped,
        }
        .u32(0)
        .unwrap_or(0);
        if !(28..=MAX_SHB).contains(&total) {
            return Err(bad(format!(
                "bad pcapng header: a section header block of {total} bytes"
            )));
        }
        // The rest of the block: after its type, its length and the byte-order magic.
        if !total.is_multiple_of(4) || !input.fill_buf(total as usize - 12)? {
            return Err(bad("bad pcapng header: the file ends inside it"));
        }
        let v = View {
            bytes: &input.buf,
            swapped: state.swapped,
        };
        let (major, minor) = (v.u16(0).unwrap_or(0), v.u16(2).unwrap_or(0));
        if !(major == 1 && (minor == 0 || minor == 2)) {
            return Err(bad(format!(
                "unsupported pcapng savefile version {major}.{minor}"
            )));
        }
        if v.u32(total as usize - 16) != Some(total) {
            return Err(bad(
                "bad pcapng header: the section header block's two lengths differ",
            ));
        }
        Ok(())
    }

    /// A later section header: the same byte order and major version, new interfaces.
    fn next_section(body: View<'_>, state: &mut State) -> anyhow::Result<()> {
        let magic = body.u32(0);
        if magic == Some(BYTE_ORDER_MAGIC.swap_bytes()) {
            return Err(corrupt(
                state.read,
                "the file has sections with different byte orders",
            ));
        }
        if magic != Some(BYTE_ORDER_MAGIC) {
            return Err(corrupt(state.read, "a section header without its magic"));
        }
        if body.u16(4) != Some(1) {
            return Err(corrupt(state.read, "a section of another pcapng version"));
        }
        state.interfaces.clear();
        Ok(())
    }

    /// An interface description block: its timestamps; the link type and snapshot length, which
    /// must be those of the file's first interface.
    fn interface(body: View<'_>, state: &mut State) -> anyhow::Result<FileHeader> {
        let read = state.read;
        let too_short = || corrupt(read, "an interface description block is too short");
        let linktype = u32::from(body.u16(0).ok_or_else(too_short)?);
        let header = FileHeader {
            linktype,
            linktype_ext: 0,
            snaplen: adjusted_snaplen(linktype, body.u32(4).ok_or_else(too_short)?),
        };
        if let Some(first) = state.first {
            if first.linktype != linktype {
                return Err(corrupt(
                    read,
                    format!(
                        "an interface has link type {linktype}, the first one {}",
                        first.linktype
                    ),
                ));
            }
            if first.snaplen != header.snaplen {
                return Err(corrupt(
                    read,
                    format!(
                        "an interface has snapshot length {}, the first one {}",
                        header.snaplen, first.snaplen
                    ),
                ));
            }
        }
        let timestamps = interface_options(body, 8).map_err(|why| corrupt(read, why))?;
        state.interfaces.push(timestamps);
        Ok(header)
    }

    /// The timestamp options of an interface (`if_tsresol`, `if_tsoffset`), read up to the
    /// end-of-options marker or the end of the block, whichever comes first.
    fn interface_options(body: View<'_>, mut at: usize) -> Result<Interface, String> {
        let mut iface = Interface {
            per_second: 1_000_000,
            binary: false,
            offset_s: 0,
        };
        let (mut saw_resolution, mut saw_offset) = (false, false);
        while at < body.bytes.len() {
            let cut = || "an interface's options are cut short".to_string();
            let (code, len) = (
                body.u16(at).ok_or_else(cut)?,
                body.u16(at + 2).ok_or_else(cut)?,
            );
            let padded = usize::from(len).div_ceil(4) * 4;
            let value = body.slice(at + 4, padded).ok_or_else(cut)?;
            at += 4 + padded;
            match (code, len) {
                (0, 0) => break,
                (0, _) => return Err("an end-of-options marker with a length".into()),
                (9, 1) if !saw_resolution => {
                    saw_resolution = true;
                    let r = value[0];
                    let exp = u32::from(r & 0x7f);
                    if r & 0x80 != 0 {
                        if exp > 63 {
                            return Err(format!("a timestamp resolution of 2^-{exp}"));
                        }
                        iface.binary = true;
                        iface.per_second = 1 << exp;
                    } else {
                        if exp > 19 {
                            return Err(format!("a timestamp resolution of 10^-{exp}"));
                        }
                        iface.per_second = 10u64.pow(exp);
                    }
                }
                (14, 8) if !saw_offset => {
                    saw_offset = true;
                    let v = View {
                        bytes: value,
                        swapped: body.swapped,
                    };
                    iface.offset_s = v.u64(0).ok_or_else(cut)? as i64;
                }
                (9, _) | (14, _) => {
                    return Err(format!(
                        "an interface's timestamp option {code} is repeated or {len} bytes long"
                    ))
                }
                _ => {}
            }
        }
        Ok(iface)
    }

    /// An enhanced, simple or obsolete packet block.
    fn packet<'a>(body: View<'a>, kind: u32, state: &State) -> anyhow::Result<FilePacket<'a>> {
        let read = state.read;
        let too_short = || corrupt(read, format!("a block of type {kind} is too short"));
        let Some(first) = state.first else {
            return Err(corrupt(
                read,
                "a packet block before any interface description block",
            ));
        };
        let (interface, t, caplen, wire_len, data_at) = match kind {
            EPB => (
                body.u32(0).ok_or_else(too_short)?,
                timestamp(body, 4).ok_or_else(too_short)?,
                body.u32(12).ok_or_else(too_short)?,
                body.u32(16).ok_or_else(too_short)?,
                20,
            ),
            OBSOLETE_PB => (
                u32::from(body.u16(0).ok_or_else(too_short)?),
                timestamp(body, 4).ok_or_else(too_short)?,
                body.u32(12).ok_or_else(too_short)?,
                body.u32(16).ok_or_else(too_short)?,
                20,
            ),
            _ => {
                // A simple packet block gives only the wire length: the captured part is the
                // wire length up to the snapshot length, and what follows it is padding.
                let wire_len = body.u32(0).ok_or_else(too_short)?;
                (0, 0, wire_len.min(first.snaplen), wire_len, 4)
            }
        };
        let Some(iface) = state.interfaces.get(interface as usize) else {
            return Err(corrupt(
                read,
                format!(
                    "packet {} names interface {interface}, which the file never described",
                    read + 1
                ),
            ));
        };
        if caplen > first.snaplen {
            return Err(corrupt(
                read,
                format!(
                    "packet {} has {caplen} bytes, more than the snapshot length {}",
                    read + 1,
                    first.snaplen
                ),
            ));
        }
        let data = body.slice(data_at, caplen as usize).ok_or_else(too_short)?;
        Ok(FilePacket {
            ts_ns: if kind == SPB { 0 } else { iface.ts_ns(t) },
            wire_len,
            data,
        })
    }

    /// A packet block's 64-bit timestamp (high word first) at `at`.
    fn timestamp(body: View<'_>, at: usize) -> Option<u64> {
        Some(u64::from(body.u32(at)?) << 32 | u64::from(body.u32(at + 4)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet read: stamp, wire length, bytes.
    type Read = (u64, u32, Vec<u8>);

    /// The header and every packet of `file`, or the error.
    fn packets(file: &[u8]) -> anyhow::Result<(FileHeader, Vec<Read>)> {
        let mut header = None;
        let mut out = Vec::new();
        read_stream(
            file,
            |h| {
                header = Some(h);
                Ok(())
            },
            |p| {
                out.push((p.ts_ns, p.wire_len, p.data.to_vec()));
                Ok(true)
            },
        )?;
        Ok((header.expect("a header"), out))
    }

    fn pcap_file(
        magic: u32,
        snaplen: u32,
        link: u32,
        records: &[(u32, u32, u32, &[u8])],
    ) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&magic.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&snaplen.to_le_bytes());
        f.extend_from_slice(&link.to_le_bytes());
        for &(frac, caplen, len, data) in records {
            f.extend_from_slice(&1_700_000_000u32.to_le_bytes());
            f.extend_from_slice(&frac.to_le_bytes());
            f.extend_from_slice(&caplen.to_le_bytes());
            f.extend_from_slice(&len.to_le_bytes());
            f.extend_from_slice(data);
        }
        f
    }

    #[test]
    fn classic_pcap_framing_is_read_as_libpcap_reads_it() {
        let bytes: Vec<u8> = (0..100).collect();
        let file = pcap_file(
            0xA1B2_C3D4,
            60,
            0x1000_0001,
            &[
                // Longer than the snap length: cut to it.
                (5, 100, 100, &bytes),
                // Captured length above the wire length, microseconds past a second.
                (1_500_000, 40, 30, &bytes[..40]),
            ],
        );
        let (header, got) = packets(&file).unwrap();
        assert_eq!(header.linktype, 1);
        assert_eq!(header.linktype_ext, 0x1000_0000);
        assert_eq!(header.snaplen, 60);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].2, &bytes[..60]);
        assert_eq!(got[0].1, 100);
        assert_eq!(got[1].1, 30);
        assert_eq!(got[1].2.len(), 40);
        assert_eq!(got[1].0, 1_700_000_001_500_000_000);
        // A snap length of 0 means the largest packet.
        let (header, _) = packets(&pcap_file(0xA1B2_C3D4, 0, 101, &[])).unwrap();
        assert_eq!((header.linktype, header.snaplen), (101, 262_144));
        // A record longer than any packet is refused.
        let huge = pcap_file(0xA1B2_C3D4, 0, 1, &[(0, 300_000, 300_000, &[])]);
        assert!(packets(&huge).is_err());
    }

    #[test]
    fn pcapng_resolutions_become_nanoseconds() {
        let at = |per_second, binary| Interface {
            per_second,
            binary,
            offset_s: 0,
        };
        use pcapng::Interface;
        assert_eq!(at(1_000_000_000, false).ts_ns(5), 5);
        assert_eq!(at(1_000_000, false).ts_ns(5), 5_000);
        assert_eq!(at(1, false).ts_ns(5), 5_000_000_000);
        assert_eq!(at(1_000_000_000_000, false).ts_ns(5_000), 5);
        assert_eq!(at(1 << 20, true).ts_ns(1 << 20), 1_000_000_000);
    }

    #[test]
    fn hostile_lengths_end_in_errors() {
        for file in [
            &b"\x0a\x0d\x0d\x0a"[..],
            b"\x0a\x0d\x0d\x0a\xff\xff\xff\xff\x4d\x3c\x2b\x1a",
            b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00",
            b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00\0\0\0\0\0\0\0\0\xff\xff\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\x7f\xff\xff\xff\x7f",
        ] {
            assert!(packets(file).is_err(), "{file:?}");
        }
    }
}
