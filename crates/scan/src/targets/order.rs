//! The scan order: a pseudo-random permutation of `0..len` from a walk of a cyclic multiplicative
//! group, split by cycle position among shards (machines) and threads, resumable from a tiny state.
//!
//! With p the smallest prime above `len` and g a generator of (Z/pZ)*, the sequence
//! `start · g^k mod p` for k = 0..p-2 visits every value 1..=p-1 exactly once; value v stands for
//! index v - 1 and values above `len` are skipped (at most a prime gap's worth: a few hundred even
//! near 2^48). Nothing per target is stored: a cursor is a handful of integers.

use anyhow::{bail, ensure, Result};
use serde::{Deserialize, Serialize};

use super::modular::{is_generator, mul_mod, next_prime_above, pow_mod, prime_factors, Montgomery};

/// A seeded permutation of `0..len`.
#[derive(Clone, Debug)]
pub struct Permutation {
    len: u64,
    generator: u64,
    /// The cycle element at position 0.
    start: u64,
    mont: Montgomery,
}

impl Permutation {
    /// Largest supported length; keeps the prime below 2^63 for `Montgomery`. A whole-Internet
    /// IPv4 scan of every port is 2^48.
    pub const MAX_LEN: u64 = 1 << 62;

    /// Panics unless `1 <= len <= MAX_LEN` (`TargetSpace` guarantees both).
    pub fn new(len: u64, seed: u64) -> Self {
        assert!(
            (1..=Self::MAX_LEN).contains(&len),
            "permutation length {len} is not in 1..=2^62"
        );
        // At least 3, so the modulus is odd for Montgomery; for len = 1 the walk skips value 2.
        let p = next_prime_above(len.max(2));
        let mut mix = SplitMix64(seed);
        let generator = find_generator(p, mix.next());
        let start = 1 + mix.next() % (p - 1);
        Self {
            len,
            generator,
            start,
            mont: Montgomery::new(p),
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a permutation has at least one index.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The prime modulus p; the cycle has p - 1 positions.
    pub fn prime(&self) -> u64 {
        self.mont.modulus()
    }

    pub fn generator(&self) -> u64 {
        self.generator
    }

    fn cycle_len(&self) -> u64 {
        self.prime() - 1
    }

    /// The whole permutation, one cursor.
    pub fn iter(&self) -> Cursor {
        self.cursor(Part::WHOLE)
    }

    /// The indexes of one shard's thread: cycle positions `offset, offset + stride, …`.
    pub fn cursor(&self, part: Part) -> Cursor {
        let owned = part.positions_in(self.cycle_len());
        let p = self.prime();
        Cursor {
            len: self.len,
            mont: self.mont,
            step: self.mont.form_of(pow_mod(self.generator, part.stride(), p)),
            element: self.element_at(part.offset()),
            consumed: 0,
            owned,
            part,
        }
    }

    /// `start · g^position mod p`; g^(p-1) = 1, so the exponent is taken mod p - 1.
    fn element_at(&self, position: u128) -> u64 {
        let exponent = (position % u128::from(self.cycle_len())) as u64;
        let p = self.prime();
        mul_mod(self.start, pow_mod(self.generator, exponent, p), p)
    }
}

/// A generator of (Z/pZ)*: the first one at or after a seed-chosen candidate in 2..p, wrapping.
/// Generators make up φ(p-1)/(p-1) of the group (rarely below a tenth), so the search is short.
fn find_generator(p: u64, random: u64) -> u64 {
    let factors = prime_factors(p - 1);
    let mut candidate = 2 + random % (p - 2);
    while !is_generator(candidate, p, &factors) {
        candidate = if candidate + 1 < p { candidate + 1 } else { 2 };
    }
    candidate
}

/// SplitMix64: turns one seed into independent-looking words for the generator and the start.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Which share of the cycle a cursor walks: shard `shard` of `shards` machines, thread `thread`
/// of `threads` within it. Cycle positions ≡ shard + shards · thread (mod shards · threads) —
/// ZMap's split — so all parts together own every position once, whatever the divisibility.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    shard: u32,
    shards: u32,
    thread: u32,
    threads: u32,
}

impl Part {
    pub const WHOLE: Part = Part {
        shard: 0,
        shards: 1,
        thread: 0,
        threads: 1,
    };

    /// 0-based `shard < shards` and `thread < threads`.
    pub fn new(shard: u32, shards: u32, thread: u32, threads: u32) -> Result<Self> {
        let part = Self {
            shard,
            shards,
            thread,
            threads,
        };
        part.check()?;
        Ok(part)
    }

    fn check(&self) -> Result<()> {
        ensure!(
            self.shard < self.shards,
            "shard {} is not in 0..{} (shards are numbered from 0)",
            self.shard,
            self.shards
        );
        ensure!(
            self.thread < self.threads,
            "thread {} is not in 0..{}",
            self.thread,
            self.threads
        );
        Ok(())
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }
    pub fn shards(&self) -> u32 {
        self.shards
    }
    pub fn thread(&self) -> u32 {
        self.thread
    }
    pub fn threads(&self) -> u32 {
        self.threads
    }

    /// The first cycle position this part owns.
    fn offset(&self) -> u128 {
        u128::from(self.shard) + u128::from(self.shards) * u128::from(self.thread)
    }

    fn stride(&self) -> u64 {
        u64::from(self.shards) * u64::from(self.threads)
    }

    /// How many of positions 0..cycle_len are ≡ offset (mod stride).
    fn positions_in(&self, cycle_len: u64) -> u64 {
        let offset = self.offset();
        if offset >= u128::from(cycle_len) {
            return 0;
        }
        (cycle_len - 1 - offset as u64) / self.stride() + 1
    }
}

/// Walks one part of a permutation, yielding indexes in `0..len`. Iterating costs one Montgomery
/// multiplication per cycle position and allocates nothing.
#[derive(Clone, Debug)]
pub struct Cursor {
    len: u64,
    mont: Montgomery,
    /// g^stride in Montgomery form, so `mont.mul(element, step)` is the plain next element.
    step: u64,
    /// The element at the next position to look at (plain).
    element: u64,
    consumed: u64,
    owned: u64,
    part: Part,
}

/// A cursor's progress, for checkpoints: enough to continue exactly where it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorState {
    pub part: Part,
    /// The permutation's length, to refuse a checkpoint from a different target space.
    pub len: u64,
    /// The cycle element at the next position to visit.
    pub element: u64,
    /// Cycle positions of this part already visited (yielded or skipped).
    pub consumed: u64,
}

impl Cursor {
    pub fn state(&self) -> CursorState {
        CursorState {
            part: self.part,
            len: self.len,
            element: self.element,
            consumed: self.consumed,
        }
    }

    /// Continues from a checkpoint. The element is recomputed from the position and must match,
    /// which catches a resume with a different seed or target space.
    pub fn from_state(permutation: &Permutation, state: CursorState) -> Result<Cursor> {
        state.part.check()?;
        if state.len != permutation.len() {
            bail!(
                "the checkpoint is for {} indexes but this scan has {}: targets, ports or \
                 allow/blocklists changed",
                state.len,
                permutation.len()
            );
        }
        let mut cursor = permutation.cursor(state.part);
        ensure!(
            state.consumed <= cursor.owned,
            "the checkpoint says {} positions are done but this part has only {}",
            state.consumed,
            cursor.owned
        );
        let position =
            state.part.offset() + u128::from(state.part.stride()) * u128::from(state.consumed);
        ensure!(
            permutation.element_at(position) == state.element,
            "the checkpoint does not match this scan's order: was the seed changed?"
        );
        cursor.element = state.element;
        cursor.consumed = state.consumed;
        Ok(cursor)
    }

    pub fn part(&self) -> Part {
        self.part
    }

    /// Cycle positions this cursor owns in all (including ones whose values are skipped).
    pub fn positions(&self) -> u64 {
        self.owned
    }

    /// Cycle positions visited so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    pub fn is_done(&self) -> bool {
        self.consumed >= self.owned
    }
}

impl Iterator for Cursor {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        while self.consumed < self.owned {
            let value = self.element;
            self.element = self.mont.mul(value, self.step);
            self.consumed += 1;
            if value <= self.len {
                return Some(value - 1);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.owned - self.consumed).ok();
        (0, left)
    }
}

impl std::iter::FusedIterator for Cursor {}
