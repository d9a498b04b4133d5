//! Which targets the grab has heard from (or given up on), and, in a resumed run, which this run
//! sent a SYN to: one bit per target of the space, in one bitmap every engine thread shares.
//!
//! The threads split the targets between them, but a thread's share is spread over the whole
//! space (its part of a random permutation), so a bitmap of its own would have to span the
//! whole space too: all of IPv4 on one port is 512 MiB a thread, 4 GiB at `--threads 8`. One
//! shared bitmap is 512 MiB whatever the threads; a bit is set with an atomic `or` and read
//! with a plain load (no lock, no system call). Only a target's owner (the thread that sent
//! its SYN, on whose port lane its answers come back) sets or reads its bit, so the relaxed
//! ordering is enough. The bitmap is allocated zeroed, so only the pages of targets that were
//! reached become resident.
//!
//! A space too large for a bitmap (over [`Dedup::MAX_BITMAP_TARGETS`]) keeps each thread's
//! recent targets in a window of its own, as [`Dedup`] does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sonde_scan::dedup::Dedup;
use sonde_scan::targets::TargetSpace;

/// One thread's handle on a set of targets.
pub(crate) enum TargetMarks {
    /// One bit per target index, shared by the threads.
    Shared(Arc<Box<[AtomicU64]>>),
    /// This thread's own window of recent targets (spaces too large for a bitmap).
    Own(Dedup),
}

impl TargetMarks {
    /// Handles for `threads` threads on one empty set of `space`'s targets.
    pub fn for_threads(space: &TargetSpace, threads: usize) -> Vec<TargetMarks> {
        if space.len() > Dedup::MAX_BITMAP_TARGETS {
            return (0..threads)
                .map(|_| TargetMarks::Own(Dedup::for_space(space)))
                .collect();
        }
        let words = space.len().div_ceil(64) as usize;
        let bits = Arc::new(bytemuck::zeroed_slice_box::<AtomicU64>(words));
        (0..threads)
            .map(|_| TargetMarks::Shared(bits.clone()))
            .collect()
    }

    /// Marks target `index`; true if it was marked before. An index past the space is never
    /// reported as marked.
    #[inline]
    pub fn check_and_insert(&mut self, index: u64) -> bool {
        match self {
            TargetMarks::Shared(bits) => {
                let (word, bit) = ((index >> 6) as usize, 1u64 << (index & 63));
                bits.get(word)
                    .is_some_and(|w| w.fetch_or(bit, Ordering::Relaxed) & bit != 0)
            }
            TargetMarks::Own(dedup) => dedup.check_and_insert(index),
        }
    }

    /// Whether target `index` is marked.
    #[inline]
    pub fn contains(&self, index: u64) -> bool {
        match self {
            TargetMarks::Shared(bits) => bits
                .get((index >> 6) as usize)
                .is_some_and(|w| w.load(Ordering::Relaxed) & (1u64 << (index & 63)) != 0),
            TargetMarks::Own(dedup) => dedup.contains(index),
        }
    }

    /// Bytes the handles of one set reserve together: a shared bitmap counted once (resident
    /// or not), each thread's window in full.
    pub fn reserved_bytes<'a>(handles: impl IntoIterator<Item = &'a TargetMarks>) -> u64 {
        let mut counted: Vec<*const Box<[AtomicU64]>> = Vec::new();
        let mut bytes = 0;
        for handle in handles {
            bytes += match handle {
                TargetMarks::Shared(bits) => {
                    let at = Arc::as_ptr(bits);
                    if counted.contains(&at) {
                        continue;
                    }
                    counted.push(at);
                    (bits.len() * 8) as u64
                }
                TargetMarks::Own(dedup) => dedup.reserved_bytes(),
            };
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_scan::targets::{parse_targets, PrefixSet};

    fn space(targets: &str, ports: &[u16]) -> TargetSpace {
        let spec = parse_targets(&[targets]).unwrap();
        TargetSpace::new(&spec, None, &PrefixSet::new(), ports).unwrap()
    }

    /// Issue 30: all of IPv4 on one port at `--threads 8` reserved a 512 MiB bitmap per
    /// thread, 4 GiB; the threads now share one.
    #[test]
    fn all_of_ipv4_at_eight_threads_reserves_one_bitmap() {
        let all = space("0.0.0.0/0", &[80]);
        let marks = TargetMarks::for_threads(&all, 8);
        assert_eq!(marks.len(), 8);
        assert_eq!(TargetMarks::reserved_bytes(&marks), 512 << 20);
        let per_thread: u64 = (0..8)
            .map(|_| Dedup::for_space(&all).reserved_bytes())
            .sum();
        assert_eq!(per_thread, 4 << 30, "what a bitmap per thread reserved");
    }

    #[test]
    fn a_mark_made_by_one_thread_is_seen_by_every_thread() {
        let s = space("198.18.0.0/24", &[80, 443]);
        let mut marks = TargetMarks::for_threads(&s, 3);
        assert!(!marks[1].check_and_insert(300));
        assert!(marks[1].check_and_insert(300), "marked before");
        assert!(marks.iter().all(|m| m.contains(300)));
        assert!(!marks[0].contains(299) && !marks[2].contains(301));
        assert!(!marks[2].check_and_insert(0));
        assert!(marks[0].contains(0));
        assert!(!marks[0].check_and_insert(511) && marks[2].contains(511));
        // Past the space: never marked, no panic.
        assert!(!marks[0].check_and_insert(512) && !marks[0].contains(512));
        assert_eq!(TargetMarks::reserved_bytes(&marks), 64);
    }

    #[test]
    fn a_space_too_large_for_a_bitmap_keeps_a_window_per_thread() {
        // All of IPv4 on five ports: 5 · 2^32 > 2^34 targets.
        let s = space("0.0.0.0/0", &[1, 2, 3, 4, 5]);
        let mut marks = TargetMarks::for_threads(&s, 2);
        assert!(matches!(marks[0], TargetMarks::Own(_)));
        assert!(!marks[0].check_and_insert(7) && marks[0].check_and_insert(7));
        assert!(!marks[1].contains(7), "windows are the thread's own");
        assert!(TargetMarks::reserved_bytes(&marks) < 2 * (64 << 20));
    }
}
