//! Receive buffers: a pool of reply buffers, one taken by a connection when its first data
//! arrives (never for connections that send none) and returned when its outcome is drained.
//! A buffer also keeps the few things only some connections need, so that the table entry
//! stays small: a FIN that came ahead of a gap, the quick ACKs given at the start, and the
//! zero-window probes sent, the time the retransmission schedule last started over (a
//! connection probing or restarting it takes a buffer before any data).
//!
//! A buffer holds the reply at offsets from the peer's first data byte: `[0, in_order)` is the
//! reply received in order; data ahead of a gap is written at its offset too and tracked as up
//! to [`MAX_RANGES`] ranges, most recently touched first (the order SACK blocks are reported
//! in). When the gap fills, the ranges merge into the in-order prefix.
//!
//! Buffers are recycled: a buffer's `Vec` keeps its capacity, so steady state allocates
//! nothing; growth up to `max_bytes` is amortised (doubling), and a returned buffer larger
//! than [`KEEP_BYTES`] is shrunk so that one large reply does not pin memory for ever. The pool
//! counts the bytes its buffers hold; `limit` caps that sum (connections then advertise a
//! smaller or zero window — see the engine).

use crate::app::{ReplyCursor, Session};

/// Disjoint out-of-order ranges a buffer tracks; a segment that would need one more is
/// dropped (counted as out of order), and the peer retransmits it.
pub(crate) const MAX_RANGES: usize = 4;
/// Capacity a returned buffer keeps at most.
pub(crate) const KEEP_BYTES: usize = 16 * 1024;

#[derive(Default)]
pub(crate) struct RxBuf {
    pub data: Vec<u8>,
    pub in_order: u32,
    /// Out-of-order ranges `[start, end)`, most recent first; `ranges[..n_ranges]` are valid.
    ranges: [(u32, u32); MAX_RANGES],
    n_ranges: u8,
    /// Our clock (µs, low 32 bits) when the first in-order byte arrived.
    pub first_byte_us: Option<u32>,
    /// Our clock when new data last arrived (the idle timeout runs from it).
    pub last_rx_us: u32,
    pub retransmits: u32,
    pub ooo_segments: u32,
    /// The offset of a FIN that arrived ahead of a gap: it counts once the data before it is
    /// in order.
    pub fin_at: Option<u32>,
    /// In-order data segments ACKed at once at the start of the reply (quick ACKs).
    pub quick_acks: u8,
    /// Zero-window probes sent since the retransmission schedule last started over: they back
    /// the timer off without using up `max_retransmits`.
    pub probes: u8,
    /// Where the app's completeness check stopped in `data` (it reads each byte once); for a
    /// session, the bytes it has been handed.
    pub cursor: ReplyCursor,
    /// The app's session, for an app that talks in turns (the buffer is then taken when the
    /// connection opens, not at its first data).
    pub session: Option<Box<dyn Session>>,
    /// Every byte the session has sent, from the first: retransmissions are cut from here.
    pub sent: Vec<u8>,
    /// Our clock (µs, low 32 bits) when the retransmission schedule last started over (an ACK
    /// that advanced, new bytes sent with nothing in flight, a session's first bytes): it
    /// runs from then. None: from the SYN-ACK.
    pub flight_us: Option<u32>,
}

/// What one segment's data did to a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placed {
    /// New bytes were stored (in order or not).
    pub new_data: bool,
    /// The in-order prefix grew.
    pub advanced: bool,
    /// In-order data arrived while gaps existed (ACK at once).
    pub filled_hole: bool,
    /// New data arrived ahead of a gap (placed, or dropped for want of a range).
    pub out_of_order: bool,
    /// Some of the data had been received already.
    pub duplicate: bool,
}

impl RxBuf {
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges[..usize::from(self.n_ranges)]
    }

    /// Bytes held beyond the in-order prefix (out-of-order data and the gaps between).
    pub fn held_beyond(&self) -> u32 {
        self.data.len() as u32 - self.in_order
    }

    /// Stores `bytes` at offset `start` (≥ 0), where `end = start + len` lies within the
    /// window (the caller trimmed it). Bytes before `in_order` are dropped as duplicates.
    fn place(&mut self, start: u32, bytes: &[u8]) -> Placed {
        let end = start + bytes.len() as u32;
        let mut placed = Placed::default();
        if start < self.in_order {
            placed.duplicate = true;
        }
        let start = start.max(self.in_order);
        if start >= end {
            return placed;
        }
        let bytes = &bytes[bytes.len() - (end - start) as usize..];
        if start == self.in_order {
            self.write(start, bytes);
            placed.new_data = true;
            placed.advanced = true;
            placed.filled_hole = self.n_ranges > 0;
            self.in_order = end;
            self.merge_into_prefix();
        } else if self.covered(start, end) {
            placed.duplicate = true;
        } else {
            placed.out_of_order = true;
            if self.add_range(start, end) {
                self.write(start, bytes);
                placed.new_data = true;
            }
        }
        placed
    }

    fn write(&mut self, start: u32, bytes: &[u8]) {
        let (start, end) = (start as usize, start as usize + bytes.len());
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[start..end].copy_from_slice(bytes);
    }

    fn covered(&self, start: u32, end: u32) -> bool {
        self.ranges().iter().any(|&(s, e)| s <= start && end <= e)
    }

    /// Adds `[start, end)` merged with the ranges it touches, in front; false when it is
    /// disjoint from all and no range is free.
    fn add_range(&mut self, mut start: u32, mut end: u32) -> bool {
        let touches = |&(s, e): &(u32, u32)| s <= end && start <= e;
        if !self.ranges().iter().any(touches) && usize::from(self.n_ranges) == MAX_RANGES {
            return false;
        }
        let mut kept = [(0, 0); MAX_RANGES];
        let mut n = 0;
        for &(s, e) in self.ranges() {
            if s <= end && start <= e {
                start = start.min(s);
                end = end.max(e);
            } else {
                kept[n] = (s, e);
                n += 1;
            }
        }
        self.ranges[0] = (start, end);
        self.ranges[1..=n].copy_from_slice(&kept[..n]);
        self.n_ranges = (n + 1) as u8;
        true
    }

    /// Moves ranges that now touch the in-order prefix into it.
    fn merge_into_prefix(&mut self) {
        loop {
            let Some(i) = self.ranges().iter().position(|&(s, _)| s <= self.in_order) else {
                return;
            };
            self.in_order = self.in_order.max(self.ranges[i].1);
            let n = usize::from(self.n_ranges);
            self.ranges.copy_within(i + 1..n, i);
            self.n_ranges -= 1;
        }
    }

    fn reset(&mut self) {
        self.data.clear();
        self.in_order = 0;
        self.n_ranges = 0;
        self.first_byte_us = None;
        self.last_rx_us = 0;
        self.retransmits = 0;
        self.ooo_segments = 0;
        self.fin_at = None;
        self.quick_acks = 0;
        self.probes = 0;
        self.cursor = ReplyCursor::default();
        self.session = None;
        self.sent.clear();
        self.flight_us = None;
    }
}

pub(crate) struct Pool {
    bufs: Vec<RxBuf>,
    free: Vec<u32>,
    /// Bytes held by buffers in use (their lengths).
    used: usize,
    /// Sum of the buffers' capacities (in use or free).
    capacity: usize,
    limit: usize,
}

impl Pool {
    pub fn new(limit: usize) -> Pool {
        Pool {
            bufs: Vec::new(),
            free: Vec::new(),
            used: 0,
            capacity: 0,
            limit,
        }
    }

    /// A buffer for a connection whose first data arrived (a recycled one when possible).
    pub fn take(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            return i;
        }
        self.bufs.push(RxBuf::default());
        (self.bufs.len() - 1) as u32
    }

    pub fn get(&self, i: u32) -> &RxBuf {
        &self.bufs[i as usize]
    }

    pub fn get_mut(&mut self, i: u32) -> &mut RxBuf {
        &mut self.bufs[i as usize]
    }

    /// Bytes buffers may still grow by before the pool's limit.
    pub fn headroom(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// Places a segment's data in buffer `i`, keeping the pool's byte counts.
    pub fn place(&mut self, i: u32, start: u32, bytes: &[u8]) -> Placed {
        let buf = &mut self.bufs[i as usize];
        let (len, capacity) = (buf.data.len(), buf.data.capacity());
        let placed = buf.place(start, bytes);
        self.used += buf.data.len() - len;
        self.capacity = self.capacity + buf.data.capacity() - capacity;
        placed
    }

    /// Returns buffer `i` to the pool.
    pub fn release(&mut self, i: u32) {
        let buf = &mut self.bufs[i as usize];
        self.used -= buf.data.len();
        let capacity = buf.data.capacity();
        buf.reset();
        if capacity > KEEP_BYTES {
            buf.data.shrink_to(KEEP_BYTES);
        }
        self.capacity = self.capacity - capacity + buf.data.capacity();
        self.free.push(i);
    }

    pub fn in_use(&self) -> usize {
        self.bufs.len() - self.free.len()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bufs.capacity() * std::mem::size_of::<RxBuf>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn in_order_out_of_order_and_fill() {
        let data = reply(1000);
        let mut pool = Pool::new(usize::MAX);
        let b = pool.take();
        let p = pool.place(b, 0, &data[..100]);
        assert!(p.advanced && p.new_data && !p.filled_hole && !p.out_of_order);
        let p = pool.place(b, 300, &data[300..400]);
        assert!(p.out_of_order && p.new_data && !p.advanced);
        let p = pool.place(b, 500, &data[500..600]);
        assert!(p.out_of_order);
        assert_eq!(pool.get(b).ranges(), [(500, 600), (300, 400)]);
        // A segment touching the older range moves it in front, merged.
        pool.place(b, 400, &data[400..450]);
        assert_eq!(pool.get(b).ranges(), [(300, 450), (500, 600)]);
        // A duplicate inside a range changes nothing.
        let p = pool.place(b, 310, &data[310..320]);
        assert!(p.duplicate && !p.new_data && !p.out_of_order);
        // The gap fills: everything up to 450 is in order, then up to 600 after 450..500.
        let p = pool.place(b, 100, &data[100..300]);
        assert!(p.advanced && p.filled_hole);
        assert_eq!(pool.get(b).in_order, 450);
        assert_eq!(pool.get(b).ranges(), [(500, 600)]);
        let p = pool.place(b, 440, &data[440..500]); // overlaps the prefix
        assert!(p.duplicate && p.advanced);
        assert_eq!(pool.get(b).in_order, 600);
        assert!(pool.get(b).ranges().is_empty());
        assert_eq!(&pool.get(b).data[..600], &data[..600]);
        assert_eq!(pool.headroom(), usize::MAX - 600);
        pool.release(b);
        assert_eq!(pool.headroom(), usize::MAX);
        assert_eq!(pool.take(), b, "recycled");
    }

    #[test]
    fn ranges_are_bounded() {
        let data = reply(2000);
        let mut pool = Pool::new(usize::MAX);
        let b = pool.take();
        for k in 0..MAX_RANGES as u32 {
            assert!(pool.place(b, 100 + 200 * k, &data[..10]).new_data);
        }
        let p = pool.place(b, 1500, &data[..10]);
        assert!(p.out_of_order && !p.new_data, "no fifth range");
        // Extending an existing range still works.
        assert!(pool.place(b, 110, &data[..10]).new_data);
        assert_eq!(pool.get(b).ranges()[0], (100, 120));
    }

    #[test]
    fn large_buffers_shrink_when_returned() {
        let mut pool = Pool::new(usize::MAX);
        let b = pool.take();
        pool.place(b, 0, &vec![1; 100_000]);
        assert!(pool.memory_bytes() >= 100_000);
        pool.release(b);
        assert!(pool.get(b).data.capacity() <= KEEP_BYTES);
        assert!(pool.memory_bytes() < 100_000);
    }
}
