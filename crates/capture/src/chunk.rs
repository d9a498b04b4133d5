//! Packets in transit from a capture thread to the writer: a chunk is one preallocated buffer
//! of finished file records (header and bytes, as `output::RecordFormat` makes them), filled
//! by a capture thread and handed over whole. The hot path copies each packet once and
//! allocates nothing, and the writer moves runs of records to the file as they lie. Each capture thread owns a fixed
//! pool of chunks that the writer hands back after writing them; when the pool is empty the
//! disk (or the writer) is behind, and the capture thread counts the packets it cannot keep as
//! dropped by sonde.

use std::sync::mpsc::{Receiver, SyncSender};

use crate::output::RecordFormat;

/// Bytes of records in one chunk.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Records in one chunk (enough for 64-byte frames filling the buffer).
pub const CHUNK_RECORDS: usize = CHUNK_BYTES / 64;

/// Where one packet's record is in its chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub ts_ns: u64,
    /// Bytes of the packet kept in the record.
    pub data_len: u32,
    offset: u32,
    len: u32,
}

/// A batch of captured packets.
#[derive(Debug)]
pub struct Chunk {
    /// The capture thread that filled it.
    pub thread: usize,
    bytes: Vec<u8>,
    records: Vec<Record>,
    /// Every packet this thread will ever send later has a timestamp at or after this (as far
    /// as the merge can tell: see `merge`).
    pub watermark_ns: u64,
    /// The last chunk of its thread.
    pub last: bool,
}

impl Chunk {
    /// A chunk whose memory is already touched (so the capture never takes a page fault on
    /// it).
    pub fn new(thread: usize) -> Chunk {
        // Written, not just allocated (`vec![0; n]` would map zero pages lazily).
        let mut bytes = Vec::with_capacity(CHUNK_BYTES);
        bytes.resize(CHUNK_BYTES, 0xA5);
        bytes.clear();
        let mut records = vec![Record::default(); CHUNK_RECORDS];
        records.clear();
        Chunk {
            thread,
            bytes,
            records,
            watermark_ns: 0,
            last: false,
        }
    }

    /// Writes a packet's record (its bytes are `parts`, in order); false (and nothing written)
    /// if it does not fit. A packet larger than a whole chunk is cut to fit (snap lengths are
    /// far below that).
    pub fn push(
        &mut self,
        format: &RecordFormat,
        ts_ns: u64,
        wire_len: u32,
        parts: &[&[u8]],
    ) -> bool {
        let room = CHUNK_BYTES - RecordFormat::MAX_OVERHEAD;
        let format = RecordFormat {
            snaplen: format.snaplen.min(room as u32),
            ..*format
        };
        let data_len = parts
            .iter()
            .map(|p| p.len())
            .sum::<usize>()
            .min(format.snaplen as usize);
        if self.records.len() == self.records.capacity()
            || self.bytes.len() + data_len + RecordFormat::MAX_OVERHEAD > self.bytes.capacity()
        {
            return false;
        }
        let offset = self.bytes.len();
        format.append(&mut self.bytes, ts_ns, wire_len, parts);
        self.records.push(Record {
            ts_ns,
            data_len: data_len as u32,
            offset: offset as u32,
            len: (self.bytes.len() - offset) as u32,
        });
        true
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn record(&self, i: usize) -> Record {
        self.records[i]
    }

    /// The records `from..to`, back to back as they lie, and the packet bytes they hold.
    pub fn run(&self, from: usize, to: usize) -> (&[u8], u64) {
        if from >= to {
            return (&[], 0);
        }
        let (first, last) = (self.records[from], self.records[to - 1]);
        let bytes = self.records[from..to]
            .iter()
            .map(|r| u64::from(r.data_len))
            .sum();
        (
            &self.bytes[first.offset as usize..(last.offset + last.len) as usize],
            bytes,
        )
    }

    /// Empties the chunk for reuse (keeps its memory).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
        self.watermark_ns = 0;
        self.last = false;
    }
}

/// A capture thread's side of the hand-over: its pool of empty chunks and the channel to the
/// writer.
pub struct ChunkPort {
    pub free: Receiver<Chunk>,
    pub to_writer: SyncSender<Chunk>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Format;

    const PCAP: RecordFormat = RecordFormat {
        format: Format::Pcap,
        snaplen: 262_144,
    };

    #[test]
    fn records_go_in_whole_or_not_at_all() {
        let mut c = Chunk::new(3);
        assert!(c.push(&PCAP, 7, 100, &[&[1, 2], &[3, 4, 5]]));
        let r = c.record(0);
        assert_eq!((r.ts_ns, r.data_len), (7, 5));
        let (run, bytes) = c.run(0, 1);
        assert_eq!((run.len(), bytes), (16 + 5, 5));
        assert_eq!(&run[16..], &[1, 2, 3, 4, 5]);
        let whole = RecordFormat {
            snaplen: u32::MAX,
            ..PCAP
        };
        let big = vec![0u8; CHUNK_BYTES - 40];
        assert!(
            !c.push(&whole, 8, 0, &[&big]),
            "does not fit after the first"
        );
        assert_eq!(c.len(), 1);
        c.clear();
        assert!(c.push(&whole, 8, 0, &[&big]));
        assert_eq!(c.record(0).data_len as usize, CHUNK_BYTES - 40);
    }

    #[test]
    fn runs_are_the_records_back_to_back() {
        let mut c = Chunk::new(0);
        for i in 0..5u8 {
            assert!(c.push(&PCAP, u64::from(i), 3, &[&[i; 3]]));
        }
        let (run, bytes) = c.run(1, 4);
        assert_eq!((run.len(), bytes), (3 * 19, 9));
        assert_eq!(&run[16..19], &[1, 1, 1]);
        assert_eq!(&run[19 + 19 + 16..], &[3, 3, 3]);
        assert_eq!(c.run(2, 2).0.len(), 0);
    }

    #[test]
    fn a_full_record_table_refuses_more() {
        let mut c = Chunk::new(0);
        for i in 0..CHUNK_RECORDS {
            assert!(c.push(&PCAP, i as u64, 1, &[&[0]]));
        }
        assert!(!c.push(&PCAP, 0, 1, &[&[0]]));
    }
}
