//! A hashed timer wheel: 16,384 slots of 1 ms, each the head of an intrusive doubly linked
//! list through the slab's `timer_next`/`timer_prev`.
//!
//! Every live connection is armed exactly once, for the earliest of its deadlines (delayed
//! ACK, retransmission, first-byte/idle/total or close timeout). A deadline never lies more
//! than 16,383 ms ahead (a later one is armed at the horizon and re-evaluated then: the default
//! timeouts all fit), so a slot's list holds exactly the connections due at that tick, and an
//! entry stores its tick in 16 bits. Advancing the wheel costs one load per elapsed millisecond when nothing is due.
//! Arming a connection earlier unlinks it in O(1); a deadline that moves later (new data
//! pushing the idle timeout) is left alone and re-evaluated when the old one fires.

use crate::conn::{Conn, NIL, UNLINKED};

pub(crate) const SLOTS: u64 = 1 << 14;
/// `timer_prev` of the first entry of a slot list.
const HEAD: u32 = u32::MAX;

pub(crate) struct Wheel {
    heads: Vec<u32>,
    /// Bit `s` set: slot `s` holds entries.
    occupied: Vec<u64>,
    /// The last tick (ms) processed; every armed entry's tick is after it.
    cursor: u64,
    started: bool,
}

impl Wheel {
    pub fn new() -> Wheel {
        Wheel {
            heads: vec![NIL; SLOTS as usize],
            occupied: vec![0; SLOTS as usize / 64],
            cursor: 0,
            started: false,
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.heads.capacity() * std::mem::size_of::<u32>()
            + self.occupied.capacity() * std::mem::size_of::<u64>()
    }

    fn mark(&mut self, slot: usize, occupied: bool) {
        let bit = 1u64 << (slot % 64);
        if occupied {
            self.occupied[slot / 64] |= bit;
        } else {
            self.occupied[slot / 64] &= !bit;
        }
    }

    /// Sets the clock on first use: nothing before `now_ms` is ever due.
    pub fn start(&mut self, now_ms: u64) {
        if !self.started {
            self.started = true;
            self.cursor = now_ms;
        }
    }

    /// The tick `conn` is armed for, None if unarmed.
    pub fn armed_tick(&self, conn: &Conn) -> Option<u64> {
        if conn.timer_prev == UNLINKED {
            return None;
        }
        let ahead = u64::from(conn.timer_at.wrapping_sub(self.cursor as u16)) % SLOTS;
        Some(self.cursor + if ahead == 0 { SLOTS } else { ahead })
    }

    /// Arms unarmed entry `idx` for `tick` (ms), clamped into the wheel's horizon.
    pub fn link(&mut self, slab: &mut [Conn], idx: u32, tick: u64) {
        let tick = tick.clamp(self.cursor + 1, self.cursor + SLOTS - 1);
        let slot = (tick % SLOTS) as usize;
        let head = self.heads[slot];
        let conn = &mut slab[idx as usize];
        debug_assert_eq!(conn.timer_prev, UNLINKED, "entry {idx} armed twice");
        conn.timer_at = tick as u16;
        conn.timer_prev = HEAD;
        conn.timer_next = head;
        if head != NIL {
            slab[head as usize].timer_prev = idx;
        }
        self.heads[slot] = idx;
        self.mark(slot, true);
    }

    /// Disarms entry `idx` (nothing if unarmed).
    pub fn unlink(&mut self, slab: &mut [Conn], idx: u32) {
        let (prev, next, at) = {
            let conn = &slab[idx as usize];
            (conn.timer_prev, conn.timer_next, conn.timer_at)
        };
        if prev == UNLINKED {
            return;
        }
        if prev == HEAD {
            let slot = usize::from(at) % SLOTS as usize;
            self.heads[slot] = next;
            if next == NIL {
                self.mark(slot, false);
            }
        } else {
            slab[prev as usize].timer_next = next;
        }
        if next != NIL {
            slab[next as usize].timer_prev = prev;
        }
        let conn = &mut slab[idx as usize];
        conn.timer_prev = UNLINKED;
        conn.timer_next = NIL;
    }

    /// Arms `idx` for `tick` unless it is armed for an earlier one already.
    pub fn arm_by(&mut self, slab: &mut [Conn], idx: u32, tick: u64) {
        match self.armed_tick(&slab[idx as usize]) {
            Some(armed) if armed <= tick.max(self.cursor + 1) => {}
            _ => {
                self.unlink(slab, idx);
                self.link(slab, idx, tick);
            }
        }
    }

    /// The tick (ms) of the earliest armed entry, if any, without advancing: for a caller that
    /// decides how long it may sleep. At most one look at each bitmap word.
    pub fn next_tick(&self) -> Option<u64> {
        if !self.started {
            return None;
        }
        let mut distance = 0;
        while distance < SLOTS {
            let slot = ((self.cursor + 1 + distance) % SLOTS) as usize;
            let ahead = self.occupied[slot / 64] >> (slot % 64);
            if ahead != 0 {
                return Some(self.cursor + 1 + distance + u64::from(ahead.trailing_zeros()));
            }
            distance += 64 - slot as u64 % 64;
        }
        None
    }

    /// Advances towards `now_ms` to the next slot with entries, detaches its list and returns
    /// its first entry (follow `timer_next` until [`NIL`]; every entry of it is unarmed by
    /// [`Wheel::detach`] before its handler runs). None once the cursor reaches `now_ms`.
    pub fn next_due(&mut self, now_ms: u64) -> Option<u32> {
        // After a pause longer than a turn, one turn visits every slot once.
        if now_ms > self.cursor + SLOTS {
            self.cursor = now_ms - SLOTS;
        }
        while self.cursor < now_ms {
            // The next occupied slot after the cursor within this word of the bitmap.
            let slot = ((self.cursor + 1) % SLOTS) as usize;
            let ahead = self.occupied[slot / 64] >> (slot % 64);
            if ahead == 0 {
                self.cursor = now_ms.min(self.cursor + (64 - slot as u64 % 64));
                continue;
            }
            let tick = self.cursor + 1 + u64::from(ahead.trailing_zeros());
            if tick > now_ms {
                self.cursor = now_ms;
                break;
            }
            self.cursor = tick;
            let slot = (tick % SLOTS) as usize;
            let head = std::mem::replace(&mut self.heads[slot], NIL);
            self.mark(slot, false);
            return Some(head);
        }
        None
    }

    /// Takes `idx`, an entry of a list returned by [`Wheel::next_due`], off it and returns
    /// the entry after it.
    pub fn detach(slab: &mut [Conn], idx: u32) -> u32 {
        let conn = &mut slab[idx as usize];
        let next = conn.timer_next;
        conn.timer_prev = UNLINKED;
        conn.timer_next = NIL;
        if next != NIL {
            slab[next as usize].timer_prev = HEAD;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slab(n: usize) -> Vec<Conn> {
        (0..n).map(|_| Conn::blank()).collect()
    }

    fn fire_all(wheel: &mut Wheel, slab: &mut [Conn], now_ms: u64) -> Vec<(u32, u64)> {
        let mut fired = Vec::new();
        while let Some(mut idx) = wheel.next_due(now_ms) {
            while idx != NIL {
                let next = Wheel::detach(slab, idx);
                fired.push((idx, wheel.cursor));
                idx = next;
            }
        }
        fired.sort_unstable();
        fired
    }

    #[test]
    fn fires_at_the_tick_and_not_before() {
        let mut wheel = Wheel::new();
        wheel.start(1000);
        let mut slab = slab(4);
        wheel.link(&mut slab, 0, 1005);
        wheel.link(&mut slab, 1, 1005);
        wheel.link(&mut slab, 2, 1000 + 16_000);
        wheel.link(&mut slab, 3, 1000 + 200_000); // clamped to the horizon
        assert_eq!(wheel.armed_tick(&slab[2]), Some(17_000));
        assert_eq!(wheel.armed_tick(&slab[3]), Some(1000 + SLOTS - 1));
        assert!(fire_all(&mut wheel, &mut slab, 1004).is_empty());
        assert_eq!(
            fire_all(&mut wheel, &mut slab, 1005),
            [(0, 1005), (1, 1005)]
        );
        assert_eq!(wheel.armed_tick(&slab[0]), None);
        assert_eq!(fire_all(&mut wheel, &mut slab, 17_000), [(2, 17_000)]);
        assert_eq!(
            fire_all(&mut wheel, &mut slab, 1000 + SLOTS - 1),
            [(3, 1000 + SLOTS - 1)]
        );
    }

    #[test]
    fn unlink_and_rearm_earlier_only() {
        let mut wheel = Wheel::new();
        wheel.start(0);
        let mut slab = slab(3);
        for idx in 0..3 {
            wheel.link(&mut slab, idx, 50);
        }
        wheel.unlink(&mut slab, 1); // middle of the list
        wheel.unlink(&mut slab, 2); // head of the list
        wheel.unlink(&mut slab, 2); // twice is harmless
        wheel.arm_by(&mut slab, 0, 80); // later: stays at 50
        assert_eq!(wheel.armed_tick(&slab[0]), Some(50));
        wheel.arm_by(&mut slab, 1, 20);
        wheel.arm_by(&mut slab, 0, 10); // earlier: moves
        assert_eq!(fire_all(&mut wheel, &mut slab, 60), [(0, 10), (1, 20)]);
    }

    #[test]
    fn a_long_pause_fires_everything_once() {
        let mut wheel = Wheel::new();
        wheel.start(0);
        let mut slab = slab(3);
        wheel.link(&mut slab, 0, 10);
        wheel.link(&mut slab, 1, 10_000);
        wheel.link(&mut slab, 2, 16_383);
        let fired = fire_all(&mut wheel, &mut slab, 10_000_000);
        assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(fire_all(&mut wheel, &mut slab, 10_100_000).is_empty());
    }

    /// Random arming, re-arming and disarming against a model: every armed entry fires
    /// exactly at its tick, whatever steps the clock takes.
    #[test]
    fn fires_exactly_when_due_against_a_model() {
        let mut wheel = Wheel::new();
        wheel.start(5);
        let mut slab = slab(64);
        let mut due: Vec<Option<u64>> = vec![None; 64];
        let mut rng = 0x9e37_79b9u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 5;
        for _ in 0..20_000 {
            let idx = (next() % 64) as u32;
            match next() % 4 {
                0 => {
                    wheel.unlink(&mut slab, idx);
                    due[idx as usize] = None;
                }
                1 | 2 => {
                    let tick = now + 1 + next() % 3000;
                    wheel.unlink(&mut slab, idx);
                    wheel.link(&mut slab, idx, tick);
                    due[idx as usize] = Some(tick);
                }
                _ => {
                    now += next() % 700;
                    for (idx, at) in fire_all(&mut wheel, &mut slab, now) {
                        assert_eq!(due[idx as usize], Some(at), "entry {idx}");
                        due[idx as usize] = None;
                    }
                    for (idx, d) in due.iter().enumerate() {
                        assert!(d.is_none_or(|t| t > now), "entry {idx} missed");
                    }
                }
            }
            // What a sleeping loop is told: exactly the earliest armed tick.
            assert_eq!(wheel.next_tick(), due.iter().flatten().min().copied());
        }
    }

    #[test]
    fn the_next_tick_is_found_across_the_turn() {
        let mut wheel = Wheel::new();
        assert_eq!(wheel.next_tick(), None, "not started");
        wheel.start(SLOTS - 3);
        assert_eq!(wheel.next_tick(), None, "nothing armed");
        let mut slab = slab(2);
        // Past the end of the slots, in the first word again.
        wheel.link(&mut slab, 0, SLOTS + 70);
        assert_eq!(wheel.next_tick(), Some(SLOTS + 70));
        wheel.link(&mut slab, 1, SLOTS - 1);
        assert_eq!(wheel.next_tick(), Some(SLOTS - 1));
        assert_eq!(fire_all(&mut wheel, &mut slab, SLOTS), [(1, SLOTS - 1)]);
        assert_eq!(wheel.next_tick(), Some(SLOTS + 70));
    }
}
