//! The connection table: a dense slab of [`Conn`] entries reserved once, and an open-addressing
//! index of `u32` slots keyed by (target address, target port) — our address per family is
//! fixed, and our port follows from the cookie, so that pair is the 4-tuple.
//!
//! - **Index slots** hold `slab index + 1` in the low bits; the bits left over (8 with 10 M
//!   connections) hold a few bits of the key's hash (a tag) and the entry's distance from its
//!   home slot (saturated); 0 is empty. Linear probing; a probe compares a key only when the
//!   slot's distance and tag match the key's, so foreign entries are skipped without touching
//!   the slab. Deletion shifts the following entries back (no tombstones).
//! - **Load factor** at most 2/3: 1.5 slots per connection, 6 bytes of index per connection
//!   when the table is full; with the 56-byte entry and the slab's small quarantine reserve,
//!   under 63 bytes per connection in all.
//! - **Free list** through the entries' `timer_next`. A freed entry first waits in a
//!   quarantine until the transmit queue is empty: segments already queued for it are rendered
//!   from it, so it must not be reused before.

use crate::conn::{Bits, Conn, NIL};

/// Slots per connection the index is sized for: load factor at most 2/3.
const SLOTS_PER_ENTRY_NUM: usize = 3;
const SLOTS_PER_ENTRY_DEN: usize = 2;

/// The largest `max_outstanding` the index's 32-bit slots can address.
pub(crate) const MAX_CAPACITY: usize = 1 << 30;

/// The empty slot a missing key would take, and its distance from the key's home.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacancy {
    pos: usize,
    tag: u32,
    disp: usize,
}

pub(crate) struct Table {
    pub slab: Vec<Conn>,
    /// Entries the slab holds at most (live, quarantined and free).
    cap: usize,
    /// Live entries at most.
    max_live: usize,
    live: usize,
    free_head: u32,
    quarantine: Vec<u32>,
    slots: Vec<u32>,
    idx_bits: u32,
    tag_bits: u32,
    disp_max: u32,
    seed: [u64; 2],
}

impl Table {
    /// A table for `max_live` connections; `seed` keys the hash.
    pub fn new(max_live: usize, seed: [u64; 2]) -> Table {
        // The quarantine holds entries freed during one pass; a small reserve covers it.
        let cap = max_live + max_live / 256 + 64;
        let n = (cap * SLOTS_PER_ENTRY_NUM / SLOTS_PER_ENTRY_DEN).max(16);
        // `cap` < 2^31 (MAX_CAPACITY), so at least one bit is left for the displacement.
        let idx_bits = u32::BITS - (cap as u32).leading_zeros();
        let spare = u32::BITS - idx_bits;
        let disp_bits = spare.div_ceil(2).min(6);
        Table {
            slab: Vec::with_capacity(cap),
            cap,
            max_live,
            live: 0,
            free_head: NIL,
            quarantine: Vec::new(),
            // Zeroed memory is empty slots, so the pages are only touched as they fill.
            slots: vec![0; n],
            idx_bits,
            tag_bits: spare - disp_bits,
            disp_max: (1u32 << disp_bits) - 1,
            seed,
        }
    }

    pub fn live(&self) -> usize {
        self.live
    }

    pub fn memory_bytes(&self) -> usize {
        self.slab.capacity() * std::mem::size_of::<Conn>()
            + self.slots.capacity() * std::mem::size_of::<u32>()
            + self.quarantine.capacity() * std::mem::size_of::<u32>()
    }

    /// The hash of a key: a folded 128-bit multiply, keyed.
    pub fn hash(&self, addr: &[u8; 16], port: u16) -> u64 {
        let word = |range: std::ops::Range<usize>| {
            u64::from_le_bytes(addr[range].try_into().expect("8 bytes"))
        };
        let h = fold_mul(word(0..8) ^ self.seed[0], word(8..16) ^ self.seed[1]);
        fold_mul(h ^ u64::from(port), 0x9e37_79b9_7f4a_7c15)
    }

    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, pos: usize) -> usize {
        if pos + 1 == self.slots.len() {
            0
        } else {
            pos + 1
        }
    }

    fn distance(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.slots.len() - from
        }
    }

    /// A slot: `disp | tag | idx + 1`, from the high bits down.
    fn encode(&self, idx: u32, tag: u32, disp: usize) -> u32 {
        let disp = (disp as u32).min(self.disp_max);
        (idx + 1) | (tag << self.idx_bits) | (disp << (self.idx_bits + self.tag_bits))
    }

    /// The tag of a hash: low bits (the home comes from the high ones).
    fn tag(&self, hash: u64) -> u32 {
        (hash as u32) & ((1 << self.tag_bits) - 1)
    }

    fn slot_idx(&self, slot: u32) -> u32 {
        (slot & ((1 << self.idx_bits) - 1)) - 1
    }

    fn slot_tag(&self, slot: u32) -> u32 {
        (slot >> self.idx_bits) & ((1 << self.tag_bits) - 1)
    }

    fn slot_disp(&self, slot: u32) -> u32 {
        slot >> (self.idx_bits + self.tag_bits)
    }

    /// The displacement of the entry in `slot` at `pos`, exact even when saturated.
    fn exact_disp(&self, pos: usize, slot: u32) -> usize {
        let disp = self.slot_disp(slot);
        if disp < self.disp_max {
            return disp as usize;
        }
        let conn = &self.slab[self.slot_idx(slot) as usize];
        self.distance(self.home(self.hash(&conn.addr, conn.port)), pos)
    }

    /// The live entry for the key: its slab index and its index position. On a miss, where
    /// the key would go ([`Table::index_at`]), so a new connection costs no second probe.
    pub fn find(&self, addr: &[u8; 16], port: u16) -> Result<(u32, usize), Vacancy> {
        let hash = self.hash(addr, port);
        let tag = self.tag(hash);
        let mut pos = self.home(hash);
        let mut dist = 0u32;
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                return Err(Vacancy {
                    pos,
                    tag,
                    disp: dist as usize,
                });
            }
            // Same home (or a saturated distance that may hide it) and tag: compare the key.
            if self.slot_disp(slot) == dist.min(self.disp_max) && self.slot_tag(slot) == tag {
                let idx = self.slot_idx(slot);
                let conn = &self.slab[idx as usize];
                if conn.port == port && conn.addr == *addr {
                    return Ok((idx, pos));
                }
            }
            pos = self.next(pos);
            dist = dist.saturating_add(1);
        }
    }

    /// A free entry for a new connection, or None when `max_live` are live (or the slab is
    /// exhausted by the quarantine). The entry must then be filled and [`Table::index`]ed.
    pub fn alloc(&mut self) -> Option<u32> {
        if self.live >= self.max_live {
            return None;
        }
        let idx = if self.free_head != NIL {
            let idx = self.free_head;
            self.free_head = self.slab[idx as usize].timer_next;
            idx
        } else if self.slab.len() < self.cap {
            self.slab.push(Conn::blank());
            (self.slab.len() - 1) as u32
        } else {
            return None;
        };
        self.live += 1;
        Some(idx)
    }

    /// Adds entry `idx` (its key already set) to the index at the vacancy [`Table::find`]
    /// returned for its key; nothing may have been indexed or freed in between.
    pub fn index_at(&mut self, idx: u32, vacancy: Vacancy) {
        debug_assert_eq!(self.slots[vacancy.pos], 0);
        self.slots[vacancy.pos] = self.encode(idx, vacancy.tag, vacancy.disp);
    }

    /// Frees live entry `idx`: out of the index now; reusable at once if `unreferenced` (no
    /// queued segment refers to it), else once [`Table::release`] runs. `hint` is its index
    /// position if known (from [`Table::find`]).
    pub fn free(&mut self, idx: u32, hint: Option<usize>, unreferenced: bool) {
        let pos = match hint {
            Some(pos) if self.slots[pos] != 0 && self.slot_idx(self.slots[pos]) == idx => pos,
            _ => self.position_of(idx),
        };
        self.remove_at(pos);
        self.slab[idx as usize].bits.set(Bits::DEAD, true);
        self.live -= 1;
        if unreferenced {
            self.slab[idx as usize].timer_next = self.free_head;
            self.free_head = idx;
        } else {
            self.quarantine.push(idx);
        }
    }

    /// Makes the quarantined entries reusable (the transmit queue holds none of them now).
    pub fn release(&mut self) {
        for idx in self.quarantine.drain(..) {
            self.slab[idx as usize].timer_next = self.free_head;
            self.free_head = idx;
        }
    }

    fn position_of(&self, idx: u32) -> usize {
        let conn = &self.slab[idx as usize];
        let mut pos = self.home(self.hash(&conn.addr, conn.port));
        while self.slots[pos] == 0 || self.slot_idx(self.slots[pos]) != idx {
            debug_assert!(self.slots[pos] != 0, "entry {idx} is not indexed");
            pos = self.next(pos);
        }
        pos
    }

    /// Empties slot `hole` and shifts back the entries after it that may move closer to home.
    fn remove_at(&mut self, mut hole: usize) {
        let mut pos = self.next(hole);
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                break;
            }
            let disp = self.exact_disp(pos, slot);
            let gap = self.distance(hole, pos);
            if disp >= gap {
                let (idx, tag) = (self.slot_idx(slot), self.slot_tag(slot));
                self.slots[hole] = self.encode(idx, tag, disp - gap);
                hole = pos;
            }
            pos = self.next(pos);
        }
        self.slots[hole] = 0;
    }

    /// Live entries' slab indexes.
    pub fn live_indexes(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .filter(|&&slot| slot != 0)
            .map(|&slot| self.slot_idx(slot))
    }

    /// Slots of the index (for tests of the load factor).
    #[cfg(test)]
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }
}

fn fold_mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn key(i: u32) -> ([u8; 16], u16) {
        let mut addr = [0u8; 16];
        addr[10] = 0xff;
        addr[11] = 0xff;
        addr[12..].copy_from_slice(&(0xc612_0000u32 + i / 3).to_be_bytes());
        (addr, 80 + (i % 3) as u16)
    }

    fn insert(table: &mut Table, i: u32) -> u32 {
        let (addr, port) = key(i);
        let vacancy = table.find(&addr, port).expect_err("not present");
        let idx = table.alloc().unwrap();
        table.slab[idx as usize] = Conn::blank();
        table.slab[idx as usize].addr = addr;
        table.slab[idx as usize].port = port;
        table.index_at(idx, vacancy);
        idx
    }

    #[test]
    fn insert_find_free_against_a_model() {
        let mut table = Table::new(5000, [1, 2]);
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut rng = 0x1234_5678u64;
        for step in 0..200_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % 8000) as u32;
            let (addr, port) = key(i);
            match (model.get(&i), table.find(&addr, port).ok()) {
                (Some(&idx), Some((found, pos))) => {
                    assert_eq!(idx, found, "step {step}");
                    if rng & 1 == 0 {
                        let hint = if rng & 2 == 0 { Some(pos) } else { None };
                        table.free(idx, hint, rng & 4 == 0);
                        model.remove(&i);
                    }
                }
                (None, None) => {
                    if table.live() < 5000 {
                        model.insert(i, insert(&mut table, i));
                    }
                }
                (expected, found) => panic!("step {step}: model {expected:?}, table {found:?}"),
            }
            if step % 64 == 0 {
                table.release();
            }
        }
        assert_eq!(table.live(), model.len());
        let mut live: Vec<u32> = table.live_indexes().collect();
        live.sort_unstable();
        let mut expected: Vec<u32> = model.values().copied().collect();
        expected.sort_unstable();
        assert_eq!(live, expected);
    }

    #[test]
    fn full_table_refuses_and_quarantine_delays_reuse() {
        let mut table = Table::new(100, [0, 0]);
        let first: Vec<u32> = (0..100).map(|i| insert(&mut table, i)).collect();
        assert!(table.alloc().is_none(), "max_live reached");
        table.free(first[7], None, false);
        let reused = insert(&mut table, 500);
        assert_ne!(reused, first[7], "a quarantined entry is not reused");
        table.free(reused, None, false);
        table.release();
        let again = insert(&mut table, 501);
        assert!(again == first[7] || again == reused);
        table.free(again, None, true);
        assert_eq!(
            insert(&mut table, 502),
            again,
            "an unreferenced entry is reused at once"
        );
        assert!(table.slot_count() * 2 >= table.cap * 3);
    }

    #[test]
    fn saturated_displacements_still_work() {
        // A tiny table whose slots keep 1 bit of displacement: every long run saturates.
        let mut table = Table::new(40, [9, 9]);
        table.disp_max = 1;
        let idx: Vec<u32> = (0..40).map(|i| insert(&mut table, i)).collect();
        for (i, &expect) in idx.iter().enumerate() {
            let (addr, port) = key(i as u32);
            assert_eq!(table.find(&addr, port).ok().map(|f| f.0), Some(expect));
        }
        for &gone in idx.iter().step_by(2) {
            table.free(gone, None, true);
        }
        for (i, &expect) in idx.iter().enumerate() {
            let (addr, port) = key(i as u32);
            let found = table.find(&addr, port).ok().map(|f| f.0);
            assert_eq!(found, (i % 2 == 1).then_some(expect), "key {i}");
        }
    }
}

#[cfg(test)]
mod probe_stats {
    use super::*;

    /// Keys shaped like a scan's (consecutive addresses times a few ports) spread as a random
    /// hash would: linear probing at load 2/3 has a mean displacement of about 1.
    #[test]
    fn displacements_stay_short_at_full_load() {
        let n = 200_000u32;
        let mut table = Table::new(n as usize, [0x1234, 0x5678]);
        for i in 0..n {
            let mut addr = [0u8; 16];
            addr[10] = 0xff;
            addr[11] = 0xff;
            addr[12..].copy_from_slice(&(0xc612_0000u32 + i % 50_000).to_be_bytes());
            let port = 1000 + (i / 50_000) as u16;
            let vacancy = table.find(&addr, port).unwrap_err();
            let idx = table.alloc().unwrap();
            table.slab[idx as usize].addr = addr;
            table.slab[idx as usize].port = port;
            table.index_at(idx, vacancy);
        }
        let (mut sum, mut max) = (0usize, 0usize);
        for pos in 0..table.slots.len() {
            if table.slots[pos] != 0 {
                let d = table.exact_disp(pos, table.slots[pos]);
                sum += d;
                max = max.max(d);
            }
        }
        let mean = sum as f64 / f64::from(n);
        assert!(mean < 1.5 && max < 200, "mean {mean:.2}, max {max}");
    }
}
