//! Where captured packets go: a pcapng or classic pcap file (or stdout), written in large
//! buffered pieces, rotated by size, and always left valid.
//!
//! Packets are serialised into an in-memory buffer and written to the file only in whole
//! pieces of [`COMMIT_BYTES`]. The file therefore ends at a block boundary after every write
//! that succeeded; when one fails (the disk is full, the pipe closed), the file is cut back to
//! the last such boundary, so what it holds is valid and complete up to there.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use pcap_file::pcap::PcapHeader;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, TsResolution};
use sonde_meter::stages::{self, Stage};

/// Bytes collected in memory before each write to the file.
pub const COMMIT_BYTES: usize = 4 << 20;

/// The file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// pcapng: one interface (nanosecond timestamps), enhanced packet blocks, and interface
    /// statistics (received, dropped) at the end.
    PcapNg,
    /// Classic pcap with the nanosecond magic (`a1b23c4d`).
    Pcap,
}

impl Format {
    /// `.pcap` files are classic pcap; everything else (and stdout) is pcapng.
    pub fn for_path(path: &str) -> Format {
        if path.ends_with(".pcap") {
            Format::Pcap
        } else {
            Format::PcapNg
        }
    }
}

/// What the file says about the capture.
#[derive(Clone, Debug)]
pub struct FileInfo {
    pub format: Format,
    /// The interface name written into the pcapng interface block (`if_name`).
    pub iface: String,
    pub snaplen: u32,
}

/// The capture's running totals, from which each file's closing statistics block (pcapng
/// only) is made: `isb_ifrecv` is the file's packets plus what was lost while it was open,
/// `isb_ifdrop` what was lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndCounts {
    /// Packets the capture saw.
    pub received: u64,
    /// Packets lost anywhere: in the kernel, its ring, or sonde's writer (`isb_ifdrop`).
    pub dropped: u64,
}

/// Writes packets to one file (or a rotated series, or stdout).
pub struct CaptureWriter {
    info: FileInfo,
    /// `None`: stdout.
    path: Option<PathBuf>,
    rotate_bytes: Option<u64>,
    files_opened: u32,
    file: FileOut,
    /// Packets written to every file so far (some perhaps still buffered: see `commit`).
    pub packets: u64,
    /// Packets known to be in the files.
    committed_packets: u64,
    packets_at_file_start: u64,
    /// Bytes of packet data written to every file so far (captured lengths).
    pub bytes: u64,
    /// The counts at the start of the current file, for its statistics block.
    counts_at_file_start: EndCounts,
}

enum FileOut {
    Ng(PcapNgWriter<Sink>),
    /// Classic pcap: pcap-file's file header, then sonde's records, little-endian.
    Pcap(Sink),
}

impl CaptureWriter {
    /// Creates `path` (`-` for stdout) and writes the file header. With `rotate_mb`, a new
    /// file is started once one holds that many MiB: `NAME.1.EXT`, `NAME.2.EXT`, ….
    pub fn create(path: &str, info: FileInfo, rotate_mb: Option<u64>) -> anyhow::Result<Self> {
        let path = (path != "-").then(|| PathBuf::from(path));
        let sink = Sink::open(path.as_deref())?;
        let file = FileOut::start(sink, &info)
            .with_context(|| format!("writing the file header of {}", shown(path.as_deref())))?;
        Ok(CaptureWriter {
            info,
            path,
            rotate_bytes: rotate_mb.map(|mb| mb << 20),
            files_opened: 1,
            file,
            packets: 0,
            committed_packets: 0,
            packets_at_file_start: 0,
            bytes: 0,
            counts_at_file_start: EndCounts::default(),
        })
    }

    /// Writes one packet. `counts` are the capture's running totals, which a rotation writes
    /// into the closing file's statistics block.
    pub fn write(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        counts: EndCounts,
    ) -> Result<(), WriteFailed> {
        let data = &data[..data.len().min(self.info.snaplen as usize)];
        let timestamp = Duration::from_nanos(ts_ns);
        let wire_len = wire_len.max(data.len() as u32);
        // Into the memory buffer: only a malformed block can fail here.
        self.file
            .packet(timestamp, wire_len, data)
            .map_err(|error| WriteFailed { error, lost: 0 })?;
        self.packets += 1;
        self.bytes += data.len() as u64;
        let file_bytes = self.sink().committed + self.sink().pending() as u64;
        if self.rotate_bytes.is_some_and(|limit| file_bytes >= limit) {
            self.rotate(counts)?;
        } else if self.sink().pending() >= COMMIT_BYTES {
            self.commit()?;
        }
        Ok(())
    }

    /// Writes what is buffered to the file. On failure the packets that were only buffered
    /// are lost: [`CaptureWriter::packets`] goes back to what the file holds, and the call
    /// returns how many were lost with the error.
    pub fn commit(&mut self) -> Result<(), WriteFailed> {
        match self.sink_mut().commit() {
            Ok(()) => {
                self.committed_packets = self.packets;
                Ok(())
            }
            Err(error) => {
                let lost = self.packets - self.committed_packets;
                self.packets = self.committed_packets;
                Err(WriteFailed { error, lost })
            }
        }
    }

    /// Ends the file: the statistics block (pcapng), then everything buffered.
    pub fn finish(&mut self, counts: EndCounts) -> Result<(), WriteFailed> {
        self.close_file(counts)
    }

    /// The files written, in order.
    pub fn files(&self) -> Vec<String> {
        (0..self.files_opened)
            .map(|i| shown(self.nth_path(i).as_deref()))
            .collect()
    }

    /// Closes the current file and starts the next one (stdout is never rotated).
    fn rotate(&mut self, counts: EndCounts) -> Result<(), WriteFailed> {
        if self.path.is_none() {
            return self.commit();
        }
        self.close_file(counts)?;
        let next = self.nth_path(self.files_opened);
        let opened = Sink::open(next.as_deref())
            .map_err(io::Error::other)
            .and_then(|sink| FileOut::start(sink, &self.info));
        self.file = opened.map_err(|error| WriteFailed { error, lost: 0 })?;
        self.files_opened += 1;
        self.counts_at_file_start = counts;
        self.packets_at_file_start = self.packets;
        Ok(())
    }

    fn close_file(&mut self, counts: EndCounts) -> Result<(), WriteFailed> {
        // What the capture saw while this file was open: its packets, and what was lost.
        let dropped = counts.dropped - self.counts_at_file_start.dropped.min(counts.dropped);
        let since = EndCounts {
            received: self.packets - self.packets_at_file_start + dropped,
            dropped,
        };
        // The packets are committed first: if the statistics block then does not fit, the
        // file still ends with every packet.
        self.commit()?;
        self.file
            .statistics(since)
            .map_err(|error| WriteFailed { error, lost: 0 })?;
        self.commit()
    }

    fn nth_path(&self, n: u32) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        if n == 0 {
            return Some(path.clone());
        }
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let name = match path.extension() {
            Some(ext) => format!("{stem}.{n}.{}", ext.to_string_lossy()),
            None => format!("{stem}.{n}"),
        };
        Some(path.with_file_name(name))
    }

    fn sink(&self) -> &Sink {
        match &self.file {
            FileOut::Ng(w) => w.get_ref(),
            FileOut::Pcap(sink) => sink,
        }
    }

    fn sink_mut(&mut self) -> &mut Sink {
        match &mut self.file {
            FileOut::Ng(w) => w.get_mut(),
            FileOut::Pcap(sink) => sink,
        }
    }
}

/// Writing failed (a full disk, a closed pipe): the files end at the last packet written
/// before, and `lost` packets that were buffered did not make it.
#[derive(Debug)]
pub struct WriteFailed {
    pub error: io::Error,
    pub lost: u64,
}

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for WriteFailed {}

fn shown(path: Option<&Path>) -> String {
    path.map_or_else(|| "stdout".into(), |p| p.display().to_string())
}

impl FileOut {
    fn start(sink: Sink, info: &FileInfo) -> io::Result<FileOut> {
        match info.format {
            Format::PcapNg => {
                // Little-endian, as `append_epb` writes the packets.
                let mut w =
                    PcapNgWriter::with_endianness(sink, Endianness::Little).map_err(to_io)?;
                let idb = InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen: info.snaplen,
                    options: vec![
                        InterfaceDescriptionOption::IfName(Cow::Owned(info.iface.clone())),
                        InterfaceDescriptionOption::IfTsResol(9),
                    ],
                };
                w.write_pcapng_block(idb).map_err(to_io)?;
                Ok(FileOut::Ng(w))
            }
            Format::Pcap => {
                let header = PcapHeader {
                    snaplen: info.snaplen,
                    datalink: DataLink::ETHERNET,
                    ts_resolution: TsResolution::NanoSecond,
                    endianness: Endianness::Little,
                    ..PcapHeader::default()
                };
                let mut sink = sink;
                header.write_to(&mut sink).map_err(to_io)?;
                Ok(FileOut::Pcap(sink))
            }
        }
    }

    fn packet(&mut self, timestamp: Duration, wire_len: u32, data: &[u8]) -> io::Result<()> {
        match self {
            FileOut::Ng(w) => append_epb(w.get_mut(), timestamp, wire_len, data),
            FileOut::Pcap(sink) => append_pcap_record(sink, timestamp, wire_len, data),
        }
        Ok(())
    }

    fn statistics(&mut self, counts: EndCounts) -> io::Result<()> {
        let FileOut::Ng(w) = self else {
            return Ok(());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let isb = InterfaceStatisticsBlock {
            interface_id: 0,
            timestamp: now,
            options: vec![
                InterfaceStatisticsOption::IsbIfRecv(counts.received),
                InterfaceStatisticsOption::IsbIfDrop(counts.dropped),
            ],
        };
        w.write_pcapng_block(isb).map(drop).map_err(to_io)
    }
}

// The per-packet records are written here rather than through pcap-file's block writers: those
// take one contiguous slice and write field by field (the pcapng one twice, to learn the
// length first), which cost about a quarter of the writer's time per packet; the tests below
// check these against pcap-file's own output byte for byte. Headers and statistics blocks
// still go through pcap-file.

/// A pcapng enhanced packet block (interface 0, nanosecond stamp, no options), little-endian.
fn append_epb(out: &mut Sink, timestamp: Duration, wire_len: u32, data: &[u8]) {
    const EPB: u32 = 6;
    let padded = data.len().div_ceil(4) * 4;
    let total = (32 + padded) as u32;
    let ts = timestamp.as_nanos() as u64;
    let mut head = [0u8; 28];
    for (i, word) in [
        EPB,
        total,
        0,
        (ts >> 32) as u32,
        ts as u32,
        data.len() as u32,
        wire_len,
    ]
    .iter()
    .enumerate()
    {
        head[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    out.buf.extend_from_slice(&head);
    out.buf.extend_from_slice(data);
    out.buf.extend_from_slice(&[0u8; 3][..padded - data.len()]);
    out.buf.extend_from_slice(&total.to_le_bytes());
}

/// A classic pcap record header (nanosecond stamp) and the data, little-endian.
fn append_pcap_record(out: &mut Sink, timestamp: Duration, wire_len: u32, data: &[u8]) {
    let mut head = [0u8; 16];
    let words = [
        timestamp.as_secs() as u32,
        timestamp.subsec_nanos(),
        data.len() as u32,
        wire_len,
    ];
    for (i, word) in words.iter().enumerate() {
        head[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    out.buf.extend_from_slice(&head);
    out.buf.extend_from_slice(data);
}

fn to_io(err: pcap_file::PcapError) -> io::Error {
    match err {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

/// A file (or stdout) written in whole pieces from a memory buffer; see the module docs.
pub struct Sink {
    target: Target,
    buf: Vec<u8>,
    /// Bytes in the file that are known to be complete.
    committed: u64,
}

enum Target {
    File(File),
    Stdout(io::Stdout),
}

impl Sink {
    fn open(path: Option<&Path>) -> anyhow::Result<Sink> {
        let target = match path {
            Some(p) => Target::File(
                File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
            ),
            None => Target::Stdout(io::stdout()),
        };
        // Touched now, so writing into it never takes a page fault.
        let mut buf = Vec::with_capacity(COMMIT_BYTES + (256 << 10));
        buf.resize(buf.capacity(), 0xA5);
        buf.clear();
        Ok(Sink {
            target,
            buf,
            committed: 0,
        })
    }

    fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Writes the buffer out. On failure, a file is cut back to its last complete block.
    fn commit(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let (target, buf) = (&mut self.target, &self.buf);
        let result = stages::call(Stage::Format, Stage::Write, || match target {
            Target::File(f) => f.write_all(buf),
            Target::Stdout(s) => s.lock().write_all(buf).and_then(|_| s.flush()),
        });
        match result {
            Ok(()) => {
                self.committed += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(err) => {
                self.buf.clear();
                if let Target::File(f) = &mut self.target {
                    // Cut the partial write off, and write on from there (not past a hole).
                    let _ = f.set_len(self.committed);
                    let _ = f.seek(io::SeekFrom::Start(self.committed));
                }
                Err(err)
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use byteorder::LittleEndian;
    use pcap_file::pcap::PcapPacket;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;

    fn sink() -> Sink {
        Sink {
            target: Target::Stdout(io::stdout()),
            buf: Vec::new(),
            committed: 0,
        }
    }

    /// Frames of every padding remainder, and an empty one.
    fn frames() -> Vec<Vec<u8>> {
        (0..6)
            .map(|n| (0..60 + n).map(|b| b as u8).collect())
            .chain([vec![]])
            .collect()
    }

    #[test]
    fn enhanced_packet_blocks_match_pcap_files_byte_for_byte() {
        for (i, data) in frames().iter().enumerate() {
            let ts = Duration::new(1_700_000_000 + i as u64, 123_456_789);
            let mut ours = sink();
            append_epb(&mut ours, ts, 1500, data);
            let mut theirs = Vec::new();
            pcap_file::pcapng::Block::EnhancedPacket(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: ts,
                original_len: 1500,
                data: Cow::Borrowed(data),
                options: Vec::new(),
            })
            .write_to::<LittleEndian, _>(&mut theirs)
            .unwrap();
            assert_eq!(ours.buf, theirs, "frame of {} bytes", data.len());
        }
    }

    #[test]
    fn pcap_records_match_pcap_files_byte_for_byte() {
        for data in frames() {
            let ts = Duration::new(1_700_000_000, 999_999_999);
            let mut ours = sink();
            append_pcap_record(&mut ours, ts, 1500, &data);
            let mut theirs = Vec::new();
            PcapPacket::new(ts, 1500, &data)
                .write_to::<_, LittleEndian>(&mut theirs, TsResolution::NanoSecond, 262_144)
                .unwrap();
            assert_eq!(ours.buf, theirs);
        }
    }
}
