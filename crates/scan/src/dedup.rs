//! Duplicate suppression: an answer counted once, later copies reported as `repeat`.
//!
//! A single-port IPv4 scan keys by address in a bitmap of 2^32 bits (512 MiB of address space,
//! allocated zeroed and lazily, so only the pages of addresses that answer become resident).
//! Anything else (several ports, IPv6) keeps a bounded window of recent (address, port) keys: a
//! duplicate further back than the window is reported again — memory stays bounded.

use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;

pub enum Dedup {
    Bitmap(Vec<u64>),
    Window {
        seen: HashSet<(IpAddr, u16)>,
        order: VecDeque<(IpAddr, u16)>,
        capacity: usize,
    },
}

impl Dedup {
    /// The right structure for a scan of `ports` ports over IPv4 (`v4_only`) or mixed space.
    pub fn for_scan(ports: usize, v4_only: bool, window: usize) -> Dedup {
        if ports == 1 && v4_only {
            Dedup::Bitmap(vec![0u64; 1 << 26])
        } else {
            Dedup::Window {
                seen: HashSet::with_capacity(window.min(1 << 20)),
                order: VecDeque::new(),
                capacity: window.max(1),
            }
        }
    }

    /// Records the key; true if it was seen before.
    pub fn check_and_insert(&mut self, addr: IpAddr, port: u16) -> bool {
        match self {
            Dedup::Bitmap(bits) => match addr {
                IpAddr::V4(a) => {
                    let n = u32::from(a) as usize;
                    let (word, bit) = (n >> 6, 1u64 << (n & 63));
                    let seen = bits[word] & bit != 0;
                    bits[word] |= bit;
                    seen
                }
                IpAddr::V6(_) => false,
            },
            Dedup::Window {
                seen,
                order,
                capacity,
            } => {
                if !seen.insert((addr, port)) {
                    return true;
                }
                order.push_back((addr, port));
                if order.len() > *capacity {
                    if let Some(old) = order.pop_front() {
                        seen.remove(&old);
                    }
                }
                false
            }
        }
    }

    /// Bytes the structure reserves (the bitmap's full size, resident or not).
    pub fn reserved_bytes(&self) -> u64 {
        match self {
            Dedup::Bitmap(bits) => bits.len() as u64 * 8,
            Dedup::Window { capacity, .. } => *capacity as u64 * 64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_counts_each_address_once() {
        let mut d = Dedup::for_scan(1, true, 0);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        assert!(!d.check_and_insert(a, 80));
        assert!(d.check_and_insert(a, 80));
        assert!(!d.check_and_insert("255.255.255.255".parse().unwrap(), 80));
        assert!(!d.check_and_insert("0.0.0.0".parse().unwrap(), 80));
        assert_eq!(d.reserved_bytes(), 512 << 20);
    }

    #[test]
    fn window_forgets_beyond_its_capacity() {
        let mut d = Dedup::for_scan(2, true, 2);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "2001:2::1".parse().unwrap();
        assert!(!d.check_and_insert(a, 80));
        assert!(!d.check_and_insert(a, 443));
        assert!(d.check_and_insert(a, 80));
        assert!(!d.check_and_insert(b, 80)); // pushes (a, 80) out
        assert!(!d.check_and_insert(a, 80));
    }
}

#[cfg(test)]
mod memory {
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
        let before = rss_bytes();
        let mut d = Dedup::for_scan(1, true, 0);
        for page in 0..(1u64 << 32) / (4096 * 8) {
            let addr = std::net::Ipv4Addr::from((page * 4096 * 8) as u32);
            assert!(!d.check_and_insert(IpAddr::V4(addr), 80));
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
