//! Flows: which packets belong together, and a check that each flow leaves in the order it
//! arrived.
//!
//! Order is kept by construction: the kernel hands every packet of a flow to the same thread
//! (NFQUEUE `--queue-balance` hashes the addresses; a `PACKET_FANOUT_HASH` group hashes the
//! flow), and each thread sends its packets on in the order its queue or ring gave them.
//! [`OrderCheck`] verifies the part that could fail — a flow handled by two threads at once —
//! rather than trusting it: it counts every packet sent on after a later-arrived packet of its
//! flow went out through another thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::filter::{ip_offset, Link};

/// A hash of a packet's flow (addresses, protocol and, for TCP/UDP/SCTP, ports), the same in
/// both directions; `None` for what is not IP.
pub fn flow_hash(data: &[u8], link: Link) -> Option<u32> {
    let ip = data.get(ip_offset(data, link)?..)?;
    let (src, dst, protocol, l4): (&[u8], &[u8], u8, usize) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let later_fragment = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff != 0;
            let l4 = if later_fragment { usize::MAX } else { ihl };
            (ip.get(12..16)?, ip.get(16..20)?, *ip.get(9)?, l4)
        }
        6 => (ip.get(8..24)?, ip.get(24..40)?, *ip.get(6)?, 40),
        _ => return None,
    };
    let ports = match protocol {
        6 | 17 | 132 => ip.get(l4..l4.saturating_add(4)),
        _ => None,
    };
    let (a, b) = match ports {
        Some(p) => (fold_bytes(src, &p[..2]), fold_bytes(dst, &p[2..])),
        None => (fold_bytes(src, &[]), fold_bytes(dst, &[])),
    };
    // Ordered, so A→B and B→A give the same key.
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    Some(mix(lo ^ mix(hi) ^ u64::from(protocol)) as u32)
}

fn fold_bytes(addr: &[u8], port: &[u8]) -> u64 {
    addr.iter()
        .chain(port)
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

/// A 64-bit finaliser (splitmix64's) so nearby keys spread over the whole range.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// For each flow (by hash bucket), the arrival stamp of the latest packet sent on and the
/// thread that sent it. Shared by every thread.
pub struct OrderCheck {
    buckets: Box<[AtomicU64]>,
}

/// Buckets in the table: two flows in one bucket can only look reordered if they are handled
/// by different threads with interleaved stamps, which a large table makes rare.
const BUCKETS: usize = 1 << 16;

/// Low bits of a bucket that hold the thread.
const THREAD_BITS: u32 = 8;

impl Default for OrderCheck {
    fn default() -> Self {
        OrderCheck {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl OrderCheck {
    /// Notes that thread `thread` sends on a packet of `flow` that arrived at `stamp` (ns, or a
    /// count, since the run began: below 2^56, common to the threads); true if another thread
    /// already sent on a packet of the flow that arrived later. Within one thread, sending
    /// order is arrival order by construction (the kernel may stamp two packets delivered at
    /// once by two CPUs out of their ring order, so stamps are not compared there); equal
    /// stamps are never counted.
    pub fn sent(&self, flow: u32, stamp: u64, thread: usize) -> bool {
        let stamp = stamp.min(MAX_STAMP);
        let thread = thread as u64 & THREAD_MASK;
        let bucket = &self.buckets[flow as usize % BUCKETS];
        let last = bucket.fetch_max((stamp << THREAD_BITS) | thread, Relaxed);
        last >> THREAD_BITS > stamp && last & THREAD_MASK != thread
    }
}

/// The largest stamp kept whole (2^56 ns is over two years).
const MAX_STAMP: u64 = (1 << (64 - THREAD_BITS)) - 1;
const THREAD_MASK: u64 = (1 << THREAD_BITS) - 1;

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn both_directions_of_a_flow_hash_alike_and_flows_differ() {
        let a = [198, 19, 254, 1];
        let b = [198, 19, 254, 2];
        let there = flow_hash(&tcp(a, 40000, b, 5201), Link::RawIp).unwrap();
        let back = flow_hash(&tcp(b, 5201, a, 40000), Link::RawIp).unwrap();
        assert_eq!(there, back);
        let other = flow_hash(&tcp(a, 40001, b, 5201), Link::RawIp).unwrap();
        assert_ne!(there, other);
        // Swapping only the ports is another flow.
        assert_ne!(
            there,
            flow_hash(&tcp(a, 5201, b, 40000), Link::RawIp).unwrap()
        );
    }

    #[test]
    fn many_flows_spread_evenly_over_two_threads() {
        let a = [198, 19, 254, 1];
        let b = [198, 19, 254, 2];
        let on_first = (0..1000u16)
            .filter(|p| {
                flow_hash(&tcp(a, 30000 + p, b, 5201), Link::RawIp)
                    .unwrap()
                    .is_multiple_of(2)
            })
            .count();
        assert!((400..=600).contains(&on_first), "{on_first}");
    }

    #[test]
    fn truncated_or_foreign_packets_have_no_flow_and_never_panic() {
        let p = tcp([1; 4], 1, [2; 4], 2);
        for len in 0..p.len() {
            let _ = flow_hash(&p[..len], Link::RawIp);
            let _ = flow_hash(&p[..len], Link::Ethernet);
        }
        assert_eq!(flow_hash(&[0x20; 40], Link::RawIp), None);
    }

    #[test]
    fn order_check_counts_a_flow_that_overtook_itself_through_another_thread() {
        let check = OrderCheck::default();
        assert!(!check.sent(7, 1, 0));
        assert!(!check.sent(7, 3, 0));
        assert!(
            !check.sent(7, 2, 0),
            "one thread's own order is its ring's, not its stamps'"
        );
        assert!(check.sent(7, 2, 1), "thread 1 sent 2 after thread 0 sent 3");
        assert!(!check.sent(7, 4, 1));
        assert!(
            !check.sent(8, 2, 1),
            "another flow is not reordered by flow 7"
        );
    }
}
