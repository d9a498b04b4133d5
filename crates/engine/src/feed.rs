//! Where a sender's targets come from: its part of the permutation (shard × thread), the
//! targets it took but has not handed to the kernel yet, and its `--max-targets` quota. A feed
//! is what a checkpoint saves, so an interrupted run resumes with no target missed and none
//! probed twice.

use anyhow::Result;
use sonde_scan::targets::{Cursor, Part, Permutation};

use crate::checkpoint::ThreadCheckpoint;

/// One sender thread's targets, as indexes into the target space.
pub struct Feed {
    cursor: Cursor,
    /// Taken from the cursor and not yet accepted by the kernel, in order (a target appears
    /// `probes` times in a row).
    pending: Vec<u64>,
    /// Targets taken from the cursor so far (each counted once, whatever `probes` says).
    taken: u64,
    /// At most this many targets for this thread (`--max-targets` split over the threads).
    limit: Option<u64>,
    probes: usize,
}

/// Up to this many cycle positions left, [`Feed::left`] walks them to count the targets
/// exactly (a few milliseconds at most).
pub const EXACT_COUNT_POSITIONS: u64 = 1 << 22;

/// What identifies a thread's part of a run.
#[derive(Clone, Copy, Debug)]
pub struct FeedSpec {
    pub targets: u64,
    pub seed: u64,
    pub shard: (u32, u32),
    pub threads: u32,
    pub probes: u32,
    pub max_targets: Option<u64>,
}

impl Feed {
    /// Thread `thread`'s feed, fresh or from its checkpoint.
    pub fn open(spec: &FeedSpec, thread: u32, resume: Option<&ThreadCheckpoint>) -> Result<Feed> {
        let permutation = Permutation::new(spec.targets, spec.seed);
        let (cursor, pending, taken) = match resume {
            Some(state) => (
                Cursor::from_state(&permutation, state.cursor)?,
                state.pending.clone(),
                state.taken,
            ),
            None => {
                let part = Part::new(spec.shard.0, spec.shard.1, thread, spec.threads)?;
                (permutation.cursor(part), Vec::new(), 0)
            }
        };
        let threads = u64::from(spec.threads);
        let limit = spec
            .max_targets
            .map(|n| n / threads + u64::from(u64::from(thread) < n % threads));
        Ok(Feed {
            cursor,
            pending,
            taken,
            limit,
            probes: spec.probes.max(1) as usize,
        })
    }

    /// Takes targets from the cursor until `want` probes are pending (each target `probes`
    /// times), within the quota.
    pub fn fill(&mut self, want: usize) {
        let want = want.max(self.probes);
        while self.pending.len() + self.probes <= want && self.quota_left() {
            let Some(index) = self.cursor.next() else {
                break;
            };
            self.taken += 1;
            self.pending.extend(std::iter::repeat_n(index, self.probes));
        }
    }

    /// The probes waiting to be sent, oldest first.
    pub fn pending(&self) -> &[u64] {
        &self.pending
    }

    /// The kernel accepted the first `n` pending probes.
    pub fn accept(&mut self, n: usize) {
        self.pending.drain(..n.min(self.pending.len()));
    }

    /// The next target, one at a time (grab opens connections as the table has room).
    pub fn next_target(&mut self) -> Option<u64> {
        if self.pending.is_empty() {
            self.fill(1);
        }
        if self.pending.is_empty() {
            None
        } else {
            Some(self.pending.remove(0))
        }
    }

    /// Puts targets back in front of the queue (grab: SYNs that were due again when the run
    /// was interrupted), so a resumed run sends them.
    pub fn put_back(&mut self, targets: impl IntoIterator<Item = u64>) {
        let mut back: Vec<u64> = targets.into_iter().collect();
        back.append(&mut self.pending);
        self.pending = back;
    }

    /// Nothing pending and nothing left to take.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty() && (self.cursor.is_done() || !self.quota_left())
    }

    /// How many probes this feed has still to hand out: exact when at most
    /// [`EXACT_COUNT_POSITIONS`] cycle positions are left (they are walked: a lab, a hit list),
    /// else the positions left, which overcount by the skipped ones (a prime gap's worth over
    /// the whole cycle: a few hundred at most, in millions).
    pub fn left(&self) -> u64 {
        let positions = self.cursor.positions() - self.cursor.consumed();
        let positions = if positions <= EXACT_COUNT_POSITIONS {
            self.cursor.clone().count() as u64
        } else {
            positions
        };
        let targets = match self.limit {
            Some(l) => positions.min(l.saturating_sub(self.taken)),
            None => positions,
        };
        targets * self.probes as u64 + self.pending.len() as u64
    }

    fn quota_left(&self) -> bool {
        self.limit.is_none_or(|l| self.taken < l)
    }

    pub fn checkpoint(&self) -> ThreadCheckpoint {
        ThreadCheckpoint {
            cursor: self.cursor.state(),
            pending: self.pending.clone(),
            taken: self.taken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(threads: u32, max_targets: Option<u64>, probes: u32) -> FeedSpec {
        FeedSpec {
            targets: 1000,
            seed: 3,
            shard: (0, 1),
            threads,
            probes,
            max_targets,
        }
    }

    fn drain(feed: &mut Feed, batch: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while !feed.is_done() {
            feed.fill(batch);
            out.extend_from_slice(feed.pending());
            let n = feed.pending().len();
            feed.accept(n);
        }
        out
    }

    #[test]
    fn threads_split_the_space_exactly() {
        let mut all: Vec<u64> = (0..3)
            .flat_map(|t| drain(&mut Feed::open(&spec(3, None, 1), t, None).unwrap(), 64))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn quota_and_probes() {
        let mut feeds: Vec<Feed> = (0..2)
            .map(|t| Feed::open(&spec(2, Some(7), 2), t, None).unwrap())
            .collect();
        let got: Vec<Vec<u64>> = feeds.iter_mut().map(|f| drain(f, 5)).collect();
        assert_eq!(
            (got[0].len(), got[1].len()),
            (8, 6),
            "7 targets, twice each"
        );
        assert!(got[0].chunks(2).all(|p| p[0] == p[1]));
    }

    #[test]
    fn a_checkpoint_resumes_where_it_stopped_with_nothing_lost() {
        let mut feed = Feed::open(&spec(1, None, 1), 0, None).unwrap();
        let mut first = Vec::new();
        for _ in 0..5 {
            feed.fill(64);
            first.extend_from_slice(&feed.pending()[..10]);
            feed.accept(10);
        }
        let state = feed.checkpoint();
        let mut rest = drain(
            &mut Feed::open(&spec(1, None, 1), 0, Some(&state)).unwrap(),
            64,
        );
        rest.extend(first);
        rest.sort_unstable();
        assert_eq!(rest, (0..1000).collect::<Vec<_>>());
    }

    /// The count a status line shows as "of N": exact, though the cycle has more positions
    /// than the space has targets (6596 targets walk a cycle of 6598).
    #[test]
    fn what_is_left_is_exact() {
        for (targets, threads) in [(6596, 1), (6596, 3), (1000, 2), (257, 1)] {
            let spec = FeedSpec {
                targets,
                threads,
                ..spec(threads, None, 1)
            };
            let mut feeds: Vec<Feed> = (0..threads)
                .map(|t| Feed::open(&spec, t, None).unwrap())
                .collect();
            let left: u64 = feeds.iter().map(Feed::left).sum();
            assert_eq!(left, targets, "{targets} targets, {threads} threads");
            // Part way through, too (what a resumed run announces).
            feeds[0].fill(64);
            feeds[0].accept(10);
            let left: u64 = feeds.iter().map(Feed::left).sum();
            assert_eq!(left, targets - 10, "{targets} targets, {threads} threads");
        }
    }

    #[test]
    fn one_at_a_time_and_put_back() {
        let mut feed = Feed::open(&spec(1, Some(3), 1), 0, None).unwrap();
        let a = feed.next_target().unwrap();
        let b = feed.next_target().unwrap();
        feed.put_back([a]);
        assert_eq!(feed.next_target(), Some(a));
        let c = feed.next_target().unwrap();
        assert_eq!(feed.next_target(), None);
        assert!(feed.is_done() && a != b && b != c);
    }
}
