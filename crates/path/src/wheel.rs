//! When each held frame is due: a timing wheel over the store's slots.
//!
//! Time is cut into ticks of 2^14 ns (16.4 µs); the wheel has 2^16 buckets, one per tick, so one
//! turn is 1.07 s. A frame due at tick T goes into bucket T mod 2^16, at the end of its chain
//! (chains are linked through an array indexed by slot: no allocation). The cursor walks the
//! ticks up to now, skipping empty buckets with a bitmap; each bucket it passes gives up the
//! frames whose due time has come, in the order they went in, to the ready list, and keeps the
//! others (a frame due more than a turn ahead, or later in the current tick) for a later visit.
//! So no frame is ever released before its due time, and frames due in the same tick leave in
//! the order they arrived.

const TICK_SHIFT: u32 = 14;
const BUCKETS: u64 = 1 << 16;
const MASK: u64 = BUCKETS - 1;
const NIL: u32 = u32::MAX;

pub(crate) struct Wheel {
    /// Per slot: its due time (ns) and the next slot of its chain.
    due: Vec<u64>,
    next: Vec<u32>,
    /// Per bucket: the first and last slot of its chain.
    first: Vec<u32>,
    last: Vec<u32>,
    /// A bit per bucket: its chain is not empty.
    busy: Vec<u64>,
    /// The tick the wheel has reached (its bucket may still hold frames due later in it).
    cursor: u64,
    /// Frames whose time has come, in the order they are to leave.
    ready_first: u32,
    ready_last: u32,
    ready_len: usize,
    /// Frames in buckets (not counting the ready list).
    waiting: u64,
}

impl Wheel {
    /// A wheel for slots 0..slots.
    pub(crate) fn new(slots: usize) -> Wheel {
        Wheel {
            due: vec![0; slots],
            next: vec![0; slots],
            first: vec![NIL; BUCKETS as usize],
            last: vec![NIL; BUCKETS as usize],
            busy: vec![0; (BUCKETS / 64) as usize],
            cursor: 0,
            ready_first: NIL,
            ready_last: NIL,
            ready_len: 0,
            waiting: 0,
        }
    }

    /// Schedules `slot` to leave at `due_ns` (at once if that has passed).
    pub(crate) fn insert(&mut self, slot: u32, due_ns: u64) {
        self.due[slot as usize] = due_ns;
        let tick = (due_ns >> TICK_SHIFT).max(self.cursor);
        let bucket = (tick & MASK) as usize;
        self.append(bucket, slot);
        self.waiting += 1;
    }

    fn append(&mut self, bucket: usize, slot: u32) {
        self.next[slot as usize] = NIL;
        match self.last[bucket] {
            NIL => self.first[bucket] = slot,
            last => self.next[last as usize] = slot,
        }
        self.last[bucket] = slot;
        self.busy[bucket / 64] |= 1 << (bucket % 64);
    }

    fn is_busy(&self, tick: u64) -> bool {
        let bucket = (tick & MASK) as usize;
        self.busy[bucket / 64] & (1 << (bucket % 64)) != 0
    }

    /// The first tick in `from..=to` (at most a turn apart) whose bucket is busy.
    fn next_busy(&self, from: u64, to: u64) -> Option<u64> {
        let mut tick = from;
        while tick <= to {
            let bucket = tick & MASK;
            let word = self.busy[(bucket / 64) as usize] >> (bucket % 64);
            if word != 0 {
                let found = tick + u64::from(word.trailing_zeros());
                return (found <= to).then_some(found);
            }
            tick += 64 - bucket % 64;
        }
        None
    }

    /// Moves every frame due by `now_ns` to the ready list.
    pub(crate) fn advance(&mut self, now_ns: u64) {
        let now_tick = now_ns >> TICK_SHIFT;
        if self.waiting == 0 {
            self.cursor = self.cursor.max(now_tick);
            return;
        }
        if now_tick >= self.cursor + BUCKETS {
            // A turn or more since the last visit: every bucket once, in time order from here.
            for k in 0..BUCKETS {
                if self.is_busy(self.cursor + k) {
                    self.drain(((self.cursor + k) & MASK) as usize, now_ns);
                }
            }
            self.cursor = now_tick;
            return;
        }
        loop {
            if self.is_busy(self.cursor) {
                self.drain((self.cursor & MASK) as usize, now_ns);
            }
            if self.cursor >= now_tick {
                return;
            }
            self.cursor = self
                .next_busy(self.cursor + 1, now_tick)
                .unwrap_or(now_tick);
        }
    }

    /// Takes the frames of `bucket` due by `now_ns` to the ready list, in order, and keeps the
    /// rest in order.
    fn drain(&mut self, bucket: usize, now_ns: u64) {
        let mut slot = self.first[bucket];
        self.first[bucket] = NIL;
        self.last[bucket] = NIL;
        self.busy[bucket / 64] &= !(1 << (bucket % 64));
        while slot != NIL {
            let next = self.next[slot as usize];
            if self.due[slot as usize] <= now_ns {
                self.waiting -= 1;
                self.next[slot as usize] = NIL;
                match self.ready_last {
                    NIL => self.ready_first = slot,
                    last => self.next[last as usize] = slot,
                }
                self.ready_last = slot;
                self.ready_len += 1;
            } else {
                self.append(bucket, slot);
            }
            slot = next;
        }
    }

    /// Frames ready to leave.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready_len
    }

    /// The next frame to leave, and its due time, without taking it.
    pub(crate) fn peek_ready(&self) -> Option<(u32, u64)> {
        (self.ready_first != NIL).then(|| (self.ready_first, self.due[self.ready_first as usize]))
    }

    /// Takes the frame `peek_ready` showed.
    pub(crate) fn pop_ready(&mut self) {
        let slot = self.ready_first;
        if slot == NIL {
            return;
        }
        self.ready_first = self.next[slot as usize];
        self.ready_len -= 1;
        if self.ready_first == NIL {
            self.ready_last = NIL;
        }
    }

    /// When to look again (ns): now (0) if frames are ready, else the earliest due time in the
    /// current tick's bucket or the start of the next busy tick; None if nothing is held.
    pub(crate) fn next_due(&self) -> Option<u64> {
        if self.ready_first != NIL {
            return Some(0);
        }
        if self.waiting == 0 {
            return None;
        }
        let mut best = None::<u64>;
        let mut slot = self.first[(self.cursor & MASK) as usize];
        while slot != NIL {
            let due = self.due[slot as usize];
            best = Some(best.map_or(due, |b| b.min(due)));
            slot = self.next[slot as usize];
        }
        if let Some(tick) = self.next_busy(self.cursor + 1, self.cursor + BUCKETS - 1) {
            let start = tick << TICK_SHIFT;
            best = Some(best.map_or(start, |b| b.min(start)));
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Advances to `now` and takes every ready frame.
    fn take(w: &mut Wheel, now: u64) -> Vec<u32> {
        w.advance(now);
        let mut out = Vec::new();
        while let Some((slot, due)) = w.peek_ready() {
            assert!(due <= now, "slot {slot} due {due} released at {now}");
            out.push(slot);
            w.pop_ready();
        }
        out
    }

    #[test]
    fn frames_leave_at_their_time_never_before() {
        let mut w = Wheel::new(16);
        w.insert(0, 1_000_000);
        w.insert(1, 1_000_001);
        w.insert(2, 3_000_000);
        assert_eq!(take(&mut w, 999_999), Vec::<u32>::new());
        assert_eq!(w.next_due(), Some(1_000_000));
        assert_eq!(take(&mut w, 1_000_000), [0]);
        assert_eq!(w.next_due(), Some(1_000_001));
        assert_eq!(take(&mut w, 2_000_000), [1]);
        // The next busy tick starts at most a tick before the due time.
        let next = w.next_due().unwrap();
        assert!(
            next <= 3_000_000 && 3_000_000 - next < 1 << TICK_SHIFT,
            "{next}"
        );
        assert_eq!(take(&mut w, 3_000_000), [2]);
        assert_eq!(w.next_due(), None);
    }

    #[test]
    fn due_order_wins_over_insertion_order_between_ticks() {
        let mut w = Wheel::new(16);
        w.insert(0, 500_000);
        w.insert(1, 100_000);
        w.insert(2, 300_000);
        assert_eq!(take(&mut w, 1_000_000), [1, 2, 0]);
    }

    #[test]
    fn frames_due_in_the_past_leave_at_once() {
        let mut w = Wheel::new(16);
        assert!(take(&mut w, 5_000_000).is_empty());
        w.insert(3, 1_000);
        assert_eq!(w.next_due(), Some(1_000));
        assert_eq!(take(&mut w, 5_000_000), [3]);
    }

    #[test]
    fn frames_beyond_a_turn_wait_for_their_turn() {
        let mut w = Wheel::new(16);
        let turn = BUCKETS << TICK_SHIFT;
        w.insert(0, 10_000 + 3 * turn);
        w.insert(1, 20_000);
        assert_eq!(take(&mut w, 20_000), [1]);
        // Walk time forward in steps shorter than a turn: the far frame stays until its time.
        let mut now = 20_000;
        while now < 3 * turn {
            now += turn / 3;
            let got = take(&mut w, now.min(3 * turn));
            assert!(got.is_empty(), "released at {now}");
        }
        assert_eq!(take(&mut w, 10_000 + 3 * turn), [0]);
    }

    #[test]
    fn a_long_stall_releases_everything_due_in_time_order() {
        let mut w = Wheel::new(64);
        for slot in 0..50u32 {
            // Due from 1 ms to 50 ms, inserted in reverse.
            w.insert(49 - slot, u64::from(50 - slot) * 1_000_000);
        }
        let turn = BUCKETS << TICK_SHIFT;
        let got = take(&mut w, 2 * turn);
        assert_eq!(got, (0..50).collect::<Vec<u32>>());
    }

    #[test]
    fn slots_are_reused_after_leaving() {
        let mut w = Wheel::new(2);
        for round in 0..1000u64 {
            let due = round * 50_000;
            w.insert((round % 2) as u32, due);
            assert_eq!(take(&mut w, due), [(round % 2) as u32]);
        }
        assert_eq!(w.next_due(), None);
    }
}
