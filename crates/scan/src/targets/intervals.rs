//! Sorted, merged, non-overlapping closed intervals of integers: the algebra behind `PrefixSet`,
//! `TargetSpec` and `TargetSpace`. Intervals are closed (`[start, end]`) so that the last address
//! (`255.255.255.255`, `ffff:…:ffff`) needs no `end + 1` that would overflow.

use std::fmt::Debug;

/// An address as an integer: `u32` for IPv4, `u128` for IPv6.
pub trait Point: Copy + Ord + Debug {
    fn succ(self) -> Option<Self>;
    fn pred(self) -> Option<Self>;
    /// How many points `[start, end]` holds; saturates at `u128::MAX` (only `::/0` would overflow).
    fn span(start: Self, end: Self) -> u128;
}

impl Point for u32 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn pred(self) -> Option<Self> {
        self.checked_sub(1)
    }
    fn span(start: Self, end: Self) -> u128 {
        u128::from(end - start) + 1
    }
}

impl Point for u128 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
    fn pred(self) -> Option<Self> {
        self.checked_sub(1)
    }
    fn span(start: Self, end: Self) -> u128 {
        (end - start).saturating_add(1)
    }
}

/// A set of integers as sorted closed intervals; no two overlap or touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intervals<T>(Vec<(T, T)>);

impl<T> Default for Intervals<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Point> Intervals<T> {
    /// From intervals in any order, overlapping or not; each must have `start <= end`.
    pub fn from_unsorted(mut intervals: Vec<(T, T)>) -> Self {
        debug_assert!(intervals.iter().all(|&(s, e)| s <= e));
        intervals.sort_unstable();
        let mut merged: Vec<(T, T)> = Vec::with_capacity(intervals.len());
        for (start, end) in intervals {
            match merged.last_mut() {
                Some(last) if touches(last.1, start) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Self(merged)
    }

    pub fn as_slice(&self) -> &[(T, T)] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of points in the set, saturating at `u128::MAX`.
    pub fn count(&self) -> u128 {
        self.0
            .iter()
            .fold(0u128, |sum, &(s, e)| sum.saturating_add(T::span(s, e)))
    }

    /// Binary search: the first interval not wholly below `x` is the only one that can hold it.
    pub fn contains(&self, x: T) -> bool {
        let i = self.0.partition_point(|&(_, end)| end < x);
        self.0.get(i).is_some_and(|&(start, _)| start <= x)
    }

    pub fn union(&self, other: &Self) -> Self {
        Self::from_unsorted([self.as_slice(), other.as_slice()].concat())
    }

    /// Two-pointer sweep; pieces of one interval of `self` never touch pieces of another.
    pub fn intersect(&self, other: &Self) -> Self {
        let (a, b) = (&self.0, &other.0);
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::new();
        while i < a.len() && j < b.len() {
            let low = a[i].0.max(b[j].0);
            let high = a[i].1.min(b[j].1);
            if low <= high {
                out.push((low, high));
            }
            // The interval that ends first can meet nothing further on.
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        Self(out)
    }

    pub fn subtract(&self, other: &Self) -> Self {
        let removed = &other.0;
        let mut out = Vec::new();
        let mut first = 0;
        for &(start, end) in &self.0 {
            // Removals wholly below this interval are below every later one too.
            while first < removed.len() && removed[first].1 < start {
                first += 1;
            }
            subtract_one(start, end, &removed[first..], &mut out);
        }
        Self(out)
    }
}

/// Pushes what is left of `[start, end]` after removing `removed`, whose first interval does not
/// end before `start`.
fn subtract_one<T: Point>(start: T, end: T, removed: &[(T, T)], out: &mut Vec<(T, T)>) {
    // `rest` is where the not-yet-removed remainder of [start, end] begins, if any is left.
    let mut rest = Some(start);
    for &(r_start, r_end) in removed.iter().take_while(|&&(s, _)| s <= end) {
        let Some(from) = rest else { break };
        if r_start > from {
            out.push((
                from,
                r_start
                    .pred()
                    .expect("r_start > from, so it has a predecessor"),
            ));
        }
        rest = r_end.succ().filter(|&next| next <= end);
    }
    if let Some(from) = rest {
        out.push((from, end));
    }
}

/// Whether an interval starting at `start` overlaps or directly follows one ending at `end`.
fn touches<T: Point>(end: T, start: T) -> bool {
    match end.succ() {
        Some(next) => start <= next,
        None => true,
    }
}

/// Splits `[start, end]` of a `bits`-wide address space into the fewest CIDR blocks, as
/// (base, prefix length); used to show sets as the prefixes people write.
pub fn cidr_blocks(start: u128, end: u128, bits: u32) -> Vec<(u128, u8)> {
    let mut blocks = Vec::new();
    let mut base = start;
    loop {
        // The largest block aligned at `base` that does not run past `end`.
        let mut host_bits = base.trailing_zeros().min(bits);
        while host_bits > 0 && block_end(base, host_bits) > end {
            host_bits -= 1;
        }
        blocks.push((base, (bits - host_bits) as u8));
        match block_end(base, host_bits).checked_add(1) {
            Some(next) if next <= end => base = next,
            _ => return blocks,
        }
    }
}

fn block_end(base: u128, host_bits: u32) -> u128 {
    base | u128::MAX.checked_shr(128 - host_bits).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_blocks_of_ranges() {
        assert_eq!(cidr_blocks(0, u32::MAX.into(), 32), vec![(0, 0)]);
        assert_eq!(cidr_blocks(0, u128::MAX, 128), vec![(0, 0)]);
        assert_eq!(cidr_blocks(5, 5, 32), vec![(5, 32)]);
        // 1..=6 = 1/32, 2/31, 4/31, 6/32
        assert_eq!(
            cidr_blocks(1, 6, 32),
            vec![(1, 32), (2, 31), (4, 31), (6, 32)]
        );
    }

    #[test]
    fn merge_touching_at_the_top() {
        let set = Intervals::from_unsorted(vec![(u32::MAX, u32::MAX), (0, 3), (4, u32::MAX - 1)]);
        assert_eq!(set.as_slice(), &[(0, u32::MAX)]);
        assert_eq!(set.count(), 1 << 32);
    }
}
