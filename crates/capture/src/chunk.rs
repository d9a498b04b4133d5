//! Packets in transit from a capture thread to the writer: a chunk is one preallocated buffer
//! of packet bytes and their records, filled by a capture thread and handed over whole, so the
//! hot path copies each packet once and allocates nothing. Each capture thread owns a fixed
//! pool of chunks that the writer hands back after writing them; when the pool is empty the
//! disk (or the writer) is behind, and the capture thread counts the packets it cannot keep as
//! dropped by sonde.

use std::sync::mpsc::{Receiver, SyncSender};

/// Bytes of packet data in one chunk.
pub const CHUNK_BYTES: usize = 1 << 20;
/// Records in one chunk (enough for 64-byte frames filling the buffer).
pub const CHUNK_RECORDS: usize = CHUNK_BYTES / 64;

/// Where one packet of a chunk is, and what is known of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub ts_ns: u64,
    pub wire_len: u32,
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

    /// Copies a packet in; false (and nothing copied) if it does not fit. A packet larger than
    /// a whole chunk is cut to [`CHUNK_BYTES`] (snap lengths are far below that).
    pub fn push(&mut self, ts_ns: u64, wire_len: u32, parts: &[&[u8]]) -> bool {
        let len: usize = parts
            .iter()
            .map(|p| p.len())
            .sum::<usize>()
            .min(CHUNK_BYTES);
        if self.records.len() == self.records.capacity()
            || self.bytes.len() + len > self.bytes.capacity()
        {
            return false;
        }
        let offset = self.bytes.len();
        for part in parts {
            let room = offset + len - self.bytes.len();
            self.bytes.extend_from_slice(&part[..part.len().min(room)]);
        }
        self.records.push(Record {
            ts_ns,
            wire_len,
            offset: offset as u32,
            len: len as u32,
        });
        true
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn record(&self, i: usize) -> (Record, &[u8]) {
        let r = self.records[i];
        (
            r,
            &self.bytes[r.offset as usize..(r.offset + r.len) as usize],
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

    #[test]
    fn packets_go_in_whole_or_not_at_all() {
        let mut c = Chunk::new(3);
        assert!(c.push(7, 100, &[&[1, 2], &[3, 4, 5]]));
        let (r, data) = c.record(0);
        assert_eq!((r.ts_ns, r.wire_len, data), (7, 100, &[1, 2, 3, 4, 5][..]));
        let big = vec![0u8; CHUNK_BYTES - 4];
        assert!(!c.push(8, 0, &[&big]), "does not fit after 5 bytes");
        assert_eq!(c.len(), 1);
        c.clear();
        assert!(c.push(8, 0, &[&big]));
        assert_eq!(c.record(0).1.len(), CHUNK_BYTES - 4);
    }

    #[test]
    fn a_full_record_table_refuses_more() {
        let mut c = Chunk::new(0);
        for i in 0..CHUNK_RECORDS {
            assert!(c.push(i as u64, 1, &[&[0]]));
        }
        assert!(!c.push(0, 1, &[&[0]]));
    }
}
