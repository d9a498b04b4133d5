//! Where captured packets go: a pcapng or classic pcap file (or stdout), written in large
//! buffered pieces, rotated by size, and always left valid.
//!
//! Packets are serialised into an in-memory buffer and written to the file only in whole
//! pieces of [`COMMIT_BYTES`]. The file therefore ends at a block boundary after every write
//! that succeeded; when one fails (the disk is full, the pipe closed), the file is cut back to
//! the last such boundary, so what it holds is valid and complete up to there.
//!
//! Files are opened by [`sonde_meter::output_file`]: an existing one only as [`IfExists`]
//! allows (`--force`), never through a symbolic link, a device or FIFO as it is.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

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
use sonde_meter::output_file::{self, IfExists, Output};
use sonde_meter::stages::{self, Stage};

/// Bytes collected in memory before each write to the file.
pub const COMMIT_BYTES: usize = 4 << 20;
/// A run of records at least this long is written to the file straight from where it lies.
const DIRECT_BYTES: usize = 64 << 10;

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
    /// The link type (a LINKTYPE_ value: 1 for Ethernet, 101 for raw IP), with any FCS bits
    /// above it as a classic pcap header carries them (pcapng has `if_fcslen` for those).
    pub linktype: u32,
}

impl FileInfo {
    /// The link type without the bits above it.
    fn link(&self) -> DataLink {
        DataLink::from(self.linktype & LINKTYPE_MASK)
    }

    /// The FCS length the bits above the link type give, if they give one.
    fn fcs_len(&self) -> Option<u8> {
        (self.linktype & FCS_LENGTH_PRESENT != 0).then_some((self.linktype >> 28) as u8)
    }
}

/// A classic pcap header's link type field: the link type in the low 26 bits, then a flag that
/// an FCS length follows and, in the top 4 bits, that length in 16-bit words.
const LINKTYPE_MASK: u32 = 0x03FF_FFFF;
const FCS_LENGTH_PRESENT: u32 = 0x0400_0000;

/// A file's closing statistics block (pcapng only): `isb_ifrecv` is the file's packets plus
/// what was lost while it was open, `isb_ifdrop` what was lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct EndCounts {
    received: u64,
    dropped: u64,
}

/// Writes packets to one file (or a rotated series, or stdout).
pub struct CaptureWriter {
    info: FileInfo,
    /// `None`: stdout.
    path: Option<PathBuf>,
    rotate_bytes: Option<u64>,
    /// What to do with a file that exists (the first, and each rotated one).
    if_exists: IfExists,
    files_opened: u32,
    file: FileOut,
    /// Packets written to every file so far (some perhaps still buffered: see `commit`).
    pub packets: u64,
    /// Packets known to be in the files.
    committed_packets: u64,
    packets_at_file_start: u64,
    /// Bytes of packet data written to every file so far (captured lengths).
    pub bytes: u64,
    /// The capture's drops so far when the current file was opened, for its statistics block.
    dropped_at_file_start: u64,
}

enum FileOut {
    Ng(PcapNgWriter<Sink>),
    /// Classic pcap: pcap-file's file header, then sonde's records, little-endian.
    Pcap(Sink),
}

impl CaptureWriter {
    /// Creates `path` (`-` for stdout) and writes the file header. With `rotate_mb`, a new
    /// file is started once one holds that many MiB: `NAME.1.EXT`, `NAME.2.EXT`, ….
    /// `if_exists` says what to do with a regular file already there (refuse, or --force).
    pub fn create(
        path: &str,
        info: FileInfo,
        rotate_mb: Option<u64>,
        if_exists: IfExists,
    ) -> anyhow::Result<Self> {
        let path = (path != "-").then(|| PathBuf::from(path));
        let sink = Sink::open(path.as_deref(), if_exists)?;
        let file = FileOut::start(sink, &info)
            .with_context(|| format!("writing the file header of {}", shown(path.as_deref())))?;
        Ok(CaptureWriter {
            info,
            path,
            rotate_bytes: rotate_mb.map(|mb| mb << 20),
            if_exists,
            files_opened: 1,
            file,
            packets: 0,
            committed_packets: 0,
            packets_at_file_start: 0,
            bytes: 0,
            dropped_at_file_start: 0,
        })
    }

    /// Writes one packet. `dropped` is how many packets the capture has lost so far (in the
    /// kernel, its ring or sonde), which a rotation writes into the closing file's statistics
    /// block.
    pub fn write(
        &mut self,
        ts_ns: u64,
        wire_len: u32,
        data: &[u8],
        dropped: u64,
    ) -> Result<(), WriteFailed> {
        let format = self.record_format();
        format.append(&mut self.sink_mut().buf, ts_ns, wire_len, &[data]);
        self.packets += 1;
        self.bytes += data.len().min(format.snaplen as usize) as u64;
        self.after_records(dropped)
    }

    /// How this file's records are made (for capture threads to make them).
    pub fn record_format(&self) -> RecordFormat {
        RecordFormat {
            format: self.info.format,
            snaplen: self.info.snaplen,
        }
    }

    /// Writes `records` finished records (made with [`CaptureWriter::record_format`]) that
    /// lie back to back in `run`, holding `bytes` bytes of packet data. A long run goes to the
    /// file in one write, without passing through the buffer; with `--rotate-mb` a run must
    /// be a single record, so a file ends where it should.
    pub fn write_run(
        &mut self,
        run: &[u8],
        records: u64,
        bytes: u64,
        dropped: u64,
    ) -> Result<(), WriteFailed> {
        debug_assert!(self.rotate_bytes.is_none() || records == 1);
        if run.len() >= DIRECT_BYTES {
            // Whatever fails, this run's packets are lost too.
            self.commit().map_err(|f| WriteFailed {
                lost: f.lost + records,
                ..f
            })?;
            if let Err(error) = self.sink_mut().write_direct(run) {
                return Err(WriteFailed {
                    error,
                    lost: records,
                });
            }
            self.packets += records;
            self.committed_packets = self.packets;
        } else {
            self.sink_mut().buf.extend_from_slice(run);
            self.packets += records;
        }
        self.bytes += bytes;
        self.after_records(dropped)
    }

    /// Whether runs must be handed over one record at a time (files rotate by size).
    pub fn rotates(&self) -> bool {
        self.rotate_bytes.is_some()
    }

    /// Rotates or commits as the buffer and the file have grown.
    fn after_records(&mut self, dropped: u64) -> Result<(), WriteFailed> {
        let file_bytes = self.sink().committed + self.sink().pending() as u64;
        if self.rotate_bytes.is_some_and(|limit| file_bytes >= limit) {
            self.rotate(dropped)?;
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

    /// Ends the file: the statistics block (pcapng), then everything buffered. `dropped` as
    /// for [`CaptureWriter::write`].
    pub fn finish(&mut self, dropped: u64) -> Result<(), WriteFailed> {
        self.close_file(dropped)
    }

    /// The files written, in order.
    pub fn files(&self) -> Vec<String> {
        (0..self.files_opened)
            .map(|i| shown(self.nth_path(i).as_deref()))
            .collect()
    }

    /// Closes the current file and starts the next one (stdout is never rotated).
    fn rotate(&mut self, dropped: u64) -> Result<(), WriteFailed> {
        if self.path.is_none() {
            return self.commit();
        }
        self.close_file(dropped)?;
        let next = self.nth_path(self.files_opened);
        let opened = Sink::open(next.as_deref(), self.if_exists)
            .map_err(io::Error::other)
            .and_then(|sink| FileOut::start(sink, &self.info));
        self.file = opened.map_err(|error| WriteFailed { error, lost: 0 })?;
        self.files_opened += 1;
        self.dropped_at_file_start = dropped;
        self.packets_at_file_start = self.packets;
        Ok(())
    }

    fn close_file(&mut self, dropped: u64) -> Result<(), WriteFailed> {
        // What the capture saw while this file was open: its packets, and what was lost.
        let dropped = dropped.saturating_sub(self.dropped_at_file_start);
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
                let mut options = vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(info.iface.clone())),
                    InterfaceDescriptionOption::IfTsResol(9),
                ];
                if let Some(words) = info.fcs_len() {
                    // if_fcslen counts bytes; the pcap header's field counts 16-bit words.
                    options.push(InterfaceDescriptionOption::IfFcsLen(
                        words.saturating_mul(2),
                    ));
                }
                let idb = InterfaceDescriptionBlock {
                    linktype: info.link(),
                    snaplen: info.snaplen,
                    options,
                };
                w.write_pcapng_block(idb).map_err(to_io)?;
                Ok(FileOut::Ng(w))
            }
            Format::Pcap => {
                let header = PcapHeader {
                    snaplen: info.snaplen,
                    datalink: DataLink::from(info.linktype),
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
// take one contiguous slice (a packet whose VLAN tag goes back in is three) and write field by
// field into a writer (the pcapng one twice, to learn the length first), which cost about a
// quarter of the writer's time per packet; the tests below check these records against
// pcap-file's own output byte for byte. Headers and statistics blocks go through pcap-file.

/// How each packet becomes a record of the file: the format and the snap length. Capture
/// threads write records with it straight into their chunks, so the writer only moves whole
/// runs of finished records to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordFormat {
    pub format: Format,
    pub snaplen: u32,
}

impl RecordFormat {
    /// The most a record adds to the packet's bytes (pcapng: 32 bytes and 3 of padding).
    pub const MAX_OVERHEAD: usize = 35;

    /// Appends the record of a packet whose bytes are `parts` (in order; cut at the snap
    /// length) and whose length on the wire is `wire_len` (written as given, even below the
    /// captured length: a file read back keeps what it said, as tcpdump -w does).
    pub fn append(&self, out: &mut Vec<u8>, ts_ns: u64, wire_len: u32, parts: &[&[u8]]) {
        let whole: usize = parts.iter().map(|p| p.len()).sum();
        let caplen = whole.min(self.snaplen as usize);
        match self.format {
            Format::PcapNg => {
                let padded = caplen.div_ceil(4) * 4;
                let total = (32 + padded) as u32;
                let words = [
                    EPB,
                    total,
                    0,
                    (ts_ns >> 32) as u32,
                    ts_ns as u32,
                    caplen as u32,
                    wire_len,
                ];
                append_words(out, &words);
                append_cut(out, parts, caplen);
                out.extend_from_slice(&[0u8; 3][..padded - caplen]);
                out.extend_from_slice(&total.to_le_bytes());
            }
            Format::Pcap => {
                let words = [
                    (ts_ns / 1_000_000_000) as u32,
                    (ts_ns % 1_000_000_000) as u32,
                    caplen as u32,
                    wire_len,
                ];
                append_words(out, &words);
                append_cut(out, parts, caplen);
            }
        }
    }
}

/// Block type of a pcapng enhanced packet block.
const EPB: u32 = 6;

fn append_words(out: &mut Vec<u8>, words: &[u32]) {
    let mut head = [0u8; 28];
    for (i, word) in words.iter().enumerate() {
        head[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    out.extend_from_slice(&head[..words.len() * 4]);
}

/// The first `len` bytes of `parts`, in order.
fn append_cut(out: &mut Vec<u8>, parts: &[&[u8]], mut len: usize) {
    for part in parts {
        let take = part.len().min(len);
        out.extend_from_slice(&part[..take]);
        len -= take;
    }
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
    fn open(path: Option<&Path>, if_exists: IfExists) -> anyhow::Result<Sink> {
        let target = match path {
            Some(p) => match output_file::open(p, if_exists)? {
                Output::File(file) => Target::File(file),
                Output::Stdout(out) => Target::Stdout(out),
            },
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
                self.cut_back();
                Err(err)
            }
        }
    }
}

impl Sink {
    /// Writes `run` (whole records) to the file directly; the buffer must be empty. On
    /// failure a file is cut back to its last complete block, as in `commit`.
    fn write_direct(&mut self, run: &[u8]) -> io::Result<()> {
        debug_assert!(self.buf.is_empty());
        let result = stages::call(Stage::Format, Stage::Write, || match &mut self.target {
            Target::File(f) => f.write_all(run),
            Target::Stdout(s) => s.lock().write_all(run).and_then(|_| s.flush()),
        });
        match result {
            Ok(()) => {
                self.committed += run.len() as u64;
                Ok(())
            }
            Err(err) => {
                self.cut_back();
                Err(err)
            }
        }
    }

    /// Cuts a partial write off the file, and writes on from there (not past a hole).
    fn cut_back(&mut self) {
        if let Target::File(f) = &mut self.target {
            let _ = f.set_len(self.committed);
            let _ = f.seek(io::SeekFrom::Start(self.committed));
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
    use std::time::Duration;

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
            let mut ours = Vec::new();
            let ng = RecordFormat {
                format: Format::PcapNg,
                snaplen: 262_144,
            };
            let (head, tail) = data.split_at(data.len().min(1));
            ng.append(&mut ours, ts.as_nanos() as u64, 1500, &[head, tail]);
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
            assert_eq!(ours, theirs, "frame of {} bytes", data.len());
        }
    }

    #[test]
    fn pcap_records_match_pcap_files_byte_for_byte() {
        for data in frames() {
            let ts = Duration::new(1_700_000_000, 999_999_999);
            let mut ours = Vec::new();
            let pcap = RecordFormat {
                format: Format::Pcap,
                snaplen: 262_144,
            };
            pcap.append(&mut ours, ts.as_nanos() as u64, 1500, &[&data]);
            let mut theirs = Vec::new();
            PcapPacket::new(ts, 1500, &data)
                .write_to::<_, LittleEndian>(&mut theirs, TsResolution::NanoSecond, 262_144)
                .unwrap();
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn records_are_cut_at_the_snap_length_and_keep_the_wire_length() {
        let data: Vec<u8> = (0..100).collect();
        let cut = RecordFormat {
            format: Format::Pcap,
            snaplen: 60,
        };
        let mut out = Vec::new();
        cut.append(&mut out, 5, 100, &[&data[..12], &[9, 9, 9, 9], &data[12..]]);
        assert_eq!(out.len(), 16 + 60);
        assert_eq!(&out[8..16], &[60, 0, 0, 0, 104 - 4, 0, 0, 0]);
        assert_eq!(&out[16 + 12..16 + 16], &[9, 9, 9, 9]);
    }

    /// `-w` never overwrites a capture silently (it used to), never writes through a planted
    /// link, and writes a device as it is.
    #[test]
    fn an_existing_capture_is_kept_without_force_and_a_link_is_never_followed() {
        let dir = std::env::temp_dir().join(format!("sonde-capture-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let info = || FileInfo {
            format: Format::PcapNg,
            iface: "test0".into(),
            snaplen: 262_144,
            linktype: 1,
        };
        let kept = dir.join("kept.pcapng");
        std::fs::write(&kept, "an earlier capture").unwrap();
        let path = kept.to_str().unwrap();
        let err = CaptureWriter::create(path, info(), None, IfExists::Refuse)
            .err()
            .expect("an existing capture was overwritten")
            .to_string();
        assert!(err.contains("--force"), "{err}");
        assert_eq!(std::fs::read(&kept).unwrap(), b"an earlier capture");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = dir.join("link.pcap");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for how in [IfExists::Refuse, IfExists::Overwrite] {
            let err = CaptureWriter::create(link.to_str().unwrap(), info(), None, how)
                .err()
                .expect("a link was followed")
                .to_string();
            assert!(err.contains("symbolic link"), "{err}");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let mut forced = CaptureWriter::create(path, info(), None, IfExists::Overwrite).unwrap();
        forced.write(1, 60, &[0u8; 60], 0).unwrap();
        forced.finish(0).unwrap();
        let bytes = std::fs::read(&kept).unwrap();
        assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "not a fresh pcapng");
        let mut null = CaptureWriter::create("/dev/null", info(), None, IfExists::Refuse).unwrap();
        null.write(1, 60, &[0u8; 60], 0).unwrap();
        null.finish(0).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
