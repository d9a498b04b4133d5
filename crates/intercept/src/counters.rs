//! What each thread did, written by that thread once per batch and read by the status line
//! and the summary.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use crate::rules::bump;

/// One thread's totals (plain stores by the owning thread; anyone may read).
#[derive(Default, Debug)]
pub struct ThreadCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub passed: AtomicU64,
    pub dropped: AtomicU64,
    pub rewritten: AtomicU64,
    /// Verdict batches (stack) or receive batches (bridge) handled.
    pub batches: AtomicU64,
    pub reordered: AtomicU64,
    /// Packets lost before sonde saw them, where the source tells (ring drops, queue drops).
    pub lost: AtomicU64,
}

/// The same totals in plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub packets: u64,
    pub bytes: u64,
    pub passed: u64,
    pub dropped: u64,
    pub rewritten: u64,
    pub batches: u64,
    pub reordered: u64,
    pub lost: u64,
}

/// One batch's tally, added to a thread's counters in one go.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchTally {
    pub packets: u64,
    pub bytes: u64,
    pub passed: u64,
    pub dropped: u64,
    pub rewritten: u64,
    pub reordered: u64,
}

impl ThreadCounters {
    pub fn add_batch(&self, t: &BatchTally) {
        if t.packets == 0 {
            return;
        }
        bump(&self.packets, t.packets);
        bump(&self.bytes, t.bytes);
        bump(&self.passed, t.passed);
        bump(&self.dropped, t.dropped);
        bump(&self.rewritten, t.rewritten);
        bump(&self.reordered, t.reordered);
        bump(&self.batches, 1);
    }

    pub fn totals(&self) -> Totals {
        Totals {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            passed: self.passed.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            rewritten: self.rewritten.load(Relaxed),
            batches: self.batches.load(Relaxed),
            reordered: self.reordered.load(Relaxed),
            lost: self.lost.load(Relaxed),
        }
    }
}

impl Totals {
    /// The sum over threads.
    pub fn sum<'a>(threads: impl IntoIterator<Item = &'a ThreadCounters>) -> Totals {
        threads
            .into_iter()
            .map(ThreadCounters::totals)
            .fold(Totals::default(), |a, b| Totals {
                packets: a.packets + b.packets,
                bytes: a.bytes + b.bytes,
                passed: a.passed + b.passed,
                dropped: a.dropped + b.dropped,
                rewritten: a.rewritten + b.rewritten,
                batches: a.batches + b.batches,
                reordered: a.reordered + b.reordered,
                lost: a.lost + b.lost,
            })
    }

    /// Packets per batch, on average.
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.packets as f64 / self.batches as f64
        }
    }
}

impl BatchTally {
    /// Counts one packet of `bytes` with its verdict.
    pub fn count(&mut self, bytes: u32, verdict: crate::Verdict, reordered: bool) {
        self.packets += 1;
        self.bytes += u64::from(bytes);
        match verdict {
            crate::Verdict::Pass => self.passed += 1,
            crate::Verdict::Drop => self.dropped += 1,
            crate::Verdict::Rewritten => {
                self.passed += 1;
                self.rewritten += 1;
            }
        }
        self.reordered += u64::from(reordered);
    }
}
