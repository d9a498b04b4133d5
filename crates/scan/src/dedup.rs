//! Duplicate suppression: an answer counted once, later copies reported as `repeat`.
//!
//! Answers are keyed by their target's index in the [`TargetSpace`] (`TargetSpace::index_of`
//! of the answering address and port), so the state is sized to the scan: one bit per target,
//! a /24 on one port is 32 bytes and the whole IPv4 space on one port 512 MiB. The bitmap is
//! allocated zeroed (`calloc`, which the kernel backs lazily), so only the pages of targets that
//! answer become resident.
//!
//! Spaces of more than [`Dedup::MAX_BITMAP_TARGETS`] targets (2^34: a 2 GiB bitmap, e.g. all of
//! IPv4 on five ports) keep a bounded window of recent keys instead: a duplicate further back
//! than the window is reported again, and memory stays bounded.

use std::collections::{HashSet, VecDeque};

use crate::targets::TargetSpace;

pub enum Dedup {
    /// One bit per target index.
    Bitmap(Vec<u64>),
    /// The most recent `capacity` keys.
    Window {
        seen: HashSet<u64>,
        order: VecDeque<u64>,
        capacity: usize,
    },
}

impl Dedup {
    /// Largest space deduplicated exactly, with a bitmap (2 GiB of address space).
    pub const MAX_BITMAP_TARGETS: u64 = 1 << 34;
    /// Keys a window remembers.
    pub const WINDOW: usize = 1 << 20;

    /// A bitmap of `space.len()` bits, or a window of [`Dedup::WINDOW`] keys for a space of
    /// more than [`Dedup::MAX_BITMAP_TARGETS`] targets.
    pub fn for_space(space: &TargetSpace) -> Dedup {
        if space.len() <= Self::MAX_BITMAP_TARGETS {
            Dedup::Bitmap(vec![0u64; space.len().div_ceil(64) as usize])
        } else {
            Dedup::window(Self::WINDOW)
        }
    }

    /// A window of the `capacity` most recent keys, reserved up front so that recording a key
    /// never allocates.
    pub fn window(capacity: usize) -> Dedup {
        let capacity = capacity.max(1);
        Dedup::Window {
            seen: HashSet::with_capacity(capacity + 1),
            order: VecDeque::with_capacity(capacity + 1),
            capacity,
        }
    }

    /// Records the target `index` (below the space's length); true if it was seen before.
    #[inline]
    pub fn check_and_insert(&mut self, index: u64) -> bool {
        match self {
            Dedup::Bitmap(bits) => {
                let (word, bit) = ((index >> 6) as usize, 1u64 << (index & 63));
                // Indexes come from the space the bitmap was sized for; one past it (a caller's
                // mistake) is never reported as a repeat rather than panicking.
                let Some(word) = bits.get_mut(word) else {
                    return false;
                };
                let seen = *word & bit != 0;
                *word |= bit;
                seen
            }
            Dedup::Window {
                seen,
                order,
                capacity,
            } => {
                if !seen.insert(index) {
                    return true;
                }
                order.push_back(index);
                if order.len() > *capacity {
                    if let Some(old) = order.pop_front() {
                        seen.remove(&old);
                    }
                }
                false
            }
        }
    }

    /// Whether target `index` has been recorded (within the window, for a window).
    #[inline]
    pub fn contains(&self, index: u64) -> bool {
        match self {
            Dedup::Bitmap(bits) => bits
                .get((index >> 6) as usize)
                .is_some_and(|w| w & (1u64 << (index & 63)) != 0),
            Dedup::Window { seen, .. } => seen.contains(&index),
        }
    }

    /// Bytes the structure reserves: the bitmap's full size (resident or not), or the window's
    /// hash table (a key and a control byte per bucket) and queue.
    pub fn reserved_bytes(&self) -> u64 {
        match self {
            Dedup::Bitmap(bits) => bits.len() as u64 * 8,
            Dedup::Window { seen, order, .. } => {
                let buckets = (seen.capacity() * 8 / 7).next_power_of_two();
                (buckets * (8 + 1) + order.capacity() * 8) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::{parse_targets, PrefixSet};

    pub(super) fn space(targets: &[&str], ports: &[u16]) -> TargetSpace {
        let targets = parse_targets(targets).unwrap();
        TargetSpace::new(&targets, None, &PrefixSet::new(), ports).unwrap()
    }

    #[test]
    fn a_slash_24_reserves_32_bytes() {
        let s = space(&["198.18.0.0/24"], &[80]);
        let d = Dedup::for_space(&s);
        assert_eq!(d.reserved_bytes(), 32);
        let s = space(&["198.18.0.0/24"], &[22, 80, 443]);
        assert_eq!(Dedup::for_space(&s).reserved_bytes(), 96);
    }

    #[test]
    fn contains_reads_without_recording() {
        for mut d in [
            Dedup::for_space(&space(&["198.18.0.0/24"], &[80])),
            Dedup::window(4),
        ] {
            assert!(!d.contains(7));
            assert!(!d.contains(7), "a read records nothing");
            d.check_and_insert(7);
            assert!(d.contains(7) && !d.contains(6) && !d.contains(1 << 40));
        }
    }

    #[test]
    fn bitmap_counts_each_target_once() {
        let s = space(&["198.18.0.0/24", "2001:2::1"], &[80, 443]);
        let mut d = Dedup::for_space(&s);
        assert!(matches!(d, Dedup::Bitmap(_)));
        let key = |a: &str, port| s.index_of(a.parse().unwrap(), port).unwrap();
        let a = key("198.18.0.1", 80);
        assert!(!d.check_and_insert(a));
        assert!(d.check_and_insert(a));
        assert!(!d.check_and_insert(key("198.18.0.1", 443)));
        assert!(!d.check_and_insert(key("2001:2::1", 443)));
        assert!(d.check_and_insert(key("2001:2::1", 443)));
        assert!(!d.check_and_insert(0));
        assert!(d.check_and_insert(0));
        assert!(
            !d.check_and_insert(s.len() + 64),
            "past the space: never a repeat"
        );
    }

    #[test]
    fn window_forgets_beyond_its_capacity() {
        let mut d = Dedup::window(2);
        assert!(!d.check_and_insert(1));
        assert!(!d.check_and_insert(2));
        assert!(d.check_and_insert(1));
        assert!(!d.check_and_insert(3)); // pushes 1 out
        assert!(!d.check_and_insert(1));
    }

    #[test]
    fn spaces_too_large_for_a_bitmap_keep_a_window() {
        // All of IPv4 on five ports: 5 · 2^32 > 2^34 targets.
        let s = space(&["0.0.0.0/0"], &[1, 2, 3, 4, 5]);
        let d = Dedup::for_space(&s);
        assert!(matches!(d, Dedup::Window { capacity, .. } if capacity == Dedup::WINDOW));
        assert!(d.reserved_bytes() < 64 << 20, "{}", d.reserved_bytes());
    }
}

#[cfg(test)]
mod memory {
    use super::tests::space;
    use super::*;

    /// Resident set size of this process, from /proc (Linux).
    fn rss_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    }

    /// A full single-port IPv4 scan's dedup state, every page of it touched (as if answers came
    /// from all over the address space), stays well under 1 GiB: it is 512 MiB.
    #[test]
    fn full_ipv4_bitmap_stays_under_one_gib() {
        let s = space(&["0.0.0.0/0"], &[80]);
        let before = rss_bytes();
        let mut d = Dedup::for_space(&s);
        for page in 0..(1u64 << 32) / (4096 * 8) {
            let addr = std::net::Ipv4Addr::from((page * 4096 * 8) as u32);
            let index = s.index_of(addr.into(), 80).unwrap();
            assert!(!d.check_and_insert(index));
        }
        let grown = rss_bytes().saturating_sub(before);
        assert!(
            grown >= 500 << 20,
            "every page touched: {} MiB resident",
            grown >> 20
        );
        assert!(grown < 1 << 30, "{} MiB", grown >> 20);
        assert_eq!(d.reserved_bytes(), 512 << 20);
    }
}
