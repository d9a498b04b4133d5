//! One output stream from several capture threads, in timestamp order.
//!
//! Each thread's packets arrive in its own order (its ring's), in chunks that also carry a
//! watermark: the thread's clock at hand-over minus [`SLACK_NS`], below which it will send
//! nothing more. The merge writes the earliest packet among the threads' oldest chunks once
//! every other thread either has packets waiting, has ended, or has a watermark past it. A
//! thread with nothing to say still sends an empty chunk every [`HEARTBEAT`], so the merge
//! holds a packet back for at most about `HEARTBEAT + SLACK_NS`: that is the merge window.
//! Packets whose stamps are more than [`SLACK_NS`] older than the moment their thread read them
//! can come out of order relative to other threads (never within one thread).

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crate::chunk::Chunk;

/// How long a capture thread may go without handing a chunk over.
pub const HEARTBEAT: Duration = Duration::from_millis(50);
/// How far a packet's stamp may lag behind the moment its thread reads it: the ring hands over
/// a partly filled block after `source::BLOCK_TIMEOUT_MS` (50 ms); the rest is margin for a
/// busy CPU.
pub const SLACK_NS: u64 = 80_000_000;

pub struct Merge {
    queues: Vec<VecDeque<Chunk>>,
    /// Next record of each thread's oldest chunk.
    cursor: Vec<usize>,
    watermark: Vec<u64>,
    ended: Vec<bool>,
}

impl Merge {
    pub fn new(threads: usize) -> Merge {
        Merge {
            queues: (0..threads).map(|_| VecDeque::new()).collect(),
            cursor: vec![0; threads],
            watermark: vec![0; threads],
            ended: vec![false; threads],
        }
    }

    /// Takes a chunk from a capture thread.
    pub fn add(&mut self, chunk: Chunk) {
        let t = chunk.thread;
        self.watermark[t] = self.watermark[t].max(chunk.watermark_ns);
        self.ended[t] |= chunk.last;
        self.queues[t].push_back(chunk);
    }

    /// Whether every thread has ended and every packet has been written.
    pub fn finished(&self) -> bool {
        self.ended.iter().all(|&e| e) && self.queues.iter().all(|q| q.is_empty())
    }

    /// Emits, in timestamp order, every packet whose place is settled, as runs of records that
    /// lie back to back in one chunk (`emit(chunk, from, to)`: records `from..to`); emptied
    /// chunks go back through `recycle`. With one thread a run is the rest of a chunk. Stops
    /// at the first error of `emit`.
    pub fn drain(
        &mut self,
        mut emit: impl FnMut(&Chunk, usize, usize) -> io::Result<()>,
        mut recycle: impl FnMut(Chunk),
    ) -> io::Result<()> {
        loop {
            self.recycle_spent(&mut recycle);
            let Some((t, ts)) = self.earliest() else {
                return Ok(());
            };
            if !self.settled(t, ts) {
                return Ok(());
            }
            let limit = self.others_limit(t);
            let chunk = &self.queues[t][0];
            let from = self.cursor[t];
            let mut to = from + 1;
            while to < chunk.len() && chunk.record(to).ts_ns <= limit {
                to += 1;
            }
            self.cursor[t] = to;
            emit(chunk, from, to)?;
        }
    }

    /// Hands back every chunk left, written or not (after an error or when the count is
    /// reached); returns how many packets they still held.
    pub fn discard(&mut self, mut recycle: impl FnMut(Chunk)) -> u64 {
        let mut left = 0;
        for (t, queue) in self.queues.iter_mut().enumerate() {
            for (i, chunk) in queue.drain(..).enumerate() {
                let skip = if i == 0 { self.cursor[t] } else { 0 };
                left += (chunk.len() - skip) as u64;
                recycle(chunk);
            }
            self.cursor[t] = 0;
        }
        left
    }

    fn recycle_spent(&mut self, recycle: &mut impl FnMut(Chunk)) {
        for (t, queue) in self.queues.iter_mut().enumerate() {
            while queue.front().is_some_and(|c| self.cursor[t] >= c.len()) {
                recycle(queue.pop_front().expect("front exists"));
                self.cursor[t] = 0;
            }
        }
    }

    /// The thread whose next packet is the earliest, and that packet's stamp.
    fn earliest(&self) -> Option<(usize, u64)> {
        (0..self.queues.len())
            .filter_map(|t| {
                let chunk = self.queues[t].front()?;
                Some((t, chunk.record(self.cursor[t]).ts_ns))
            })
            .min_by_key(|&(_, ts)| ts)
    }

    /// The stamp up to which thread `t`'s packets can go out without passing another
    /// thread's: the earliest of the others' next packets, or of their watermarks where they
    /// have none waiting.
    fn others_limit(&self, t: usize) -> u64 {
        (0..self.queues.len())
            .filter(|&u| u != t && (!self.ended[u] || !self.queues[u].is_empty()))
            .map(|u| match self.queues[u].front() {
                Some(chunk) => chunk.record(self.cursor[u]).ts_ns,
                None => self.watermark[u],
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Whether no other thread can still send a packet stamped before `ts`.
    fn settled(&self, t: usize, ts: u64) -> bool {
        (0..self.queues.len()).all(|u| {
            u == t || !self.queues[u].is_empty() || self.ended[u] || self.watermark[u] >= ts
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Format, RecordFormat};

    fn chunk(thread: usize, stamps: &[u64], watermark: u64, last: bool) -> Chunk {
        let mut c = Chunk::new(thread);
        let format = RecordFormat {
            format: Format::Pcap,
            snaplen: 100,
        };
        for &ts in stamps {
            assert!(c.push(&format, ts, 1, &[&[thread as u8]]));
        }
        c.watermark_ns = watermark;
        c.last = last;
        c
    }

    fn drained(m: &mut Merge) -> Vec<u64> {
        let mut out = Vec::new();
        m.drain(
            |c, from, to| {
                out.extend((from..to).map(|i| c.record(i).ts_ns));
                Ok(())
            },
            drop,
        )
        .unwrap();
        out
    }

    #[test]
    fn one_thread_flows_straight_through_in_its_own_order() {
        let mut m = Merge::new(1);
        m.add(chunk(0, &[5, 3, 9], 0, false));
        assert_eq!(drained(&mut m), vec![5, 3, 9]);
        assert!(!m.finished());
        m.add(chunk(0, &[], 0, true));
        assert_eq!(drained(&mut m), Vec::<u64>::new());
        assert!(m.finished());
    }

    #[test]
    fn threads_interleave_by_timestamp_and_wait_for_a_silent_one() {
        let mut m = Merge::new(2);
        m.add(chunk(0, &[10, 30, 50], 0, false));
        // Thread 1 has said nothing yet: nothing is settled.
        assert_eq!(drained(&mut m), Vec::<u64>::new());
        m.add(chunk(1, &[20, 40], 0, false));
        // Thread 1's queue runs dry after 40; 50 waits for its watermark.
        assert_eq!(drained(&mut m), vec![10, 20, 30, 40]);
        m.add(chunk(1, &[], 45, false));
        assert_eq!(drained(&mut m), Vec::<u64>::new());
        m.add(chunk(1, &[], 60, false));
        assert_eq!(drained(&mut m), vec![50]);
        m.add(chunk(0, &[], 0, true));
        m.add(chunk(1, &[70], 0, true));
        assert_eq!(drained(&mut m), vec![70]);
        assert!(m.finished());
    }

    #[test]
    fn discarding_counts_what_was_left() {
        let mut m = Merge::new(2);
        m.add(chunk(0, &[1, 2, 3], 0, false));
        m.add(chunk(1, &[4], 0, false));
        assert_eq!(drained(&mut m), vec![1, 2, 3]);
        assert_eq!(m.discard(drop), 1);
    }
}
