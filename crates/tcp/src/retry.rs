//! Stateless SYN retries: the indexes of targets whose SYN went out, each due again after a
//! backoff unless the target answered in between.
//!
//! Attempt `k` of every target waits the same delay (`first_us << k`), so one FIFO per attempt
//! keeps them in due order. Each FIFO holds the bare indexes (8 bytes a SYN in flight) plus
//! run-length records of their due times — one record for all SYNs of one millisecond.

use std::collections::VecDeque;

/// One attempt's queue.
#[derive(Default)]
struct Level {
    indexes: VecDeque<u64>,
    /// (due time in µs, how many of the next indexes share it), in due order.
    runs: VecDeque<(u64, u32)>,
}

impl Level {
    fn push(&mut self, index: u64, due_us: u64) {
        self.indexes.push_back(index);
        // SYNs of the same millisecond share a record (due at the latest of them).
        match self.runs.back_mut() {
            Some((due, count)) if due_us / 1000 == *due / 1000 && *count < u32::MAX => {
                *due = due_us.max(*due);
                *count += 1;
            }
            _ => self.runs.push_back((due_us, 1)),
        }
    }

    /// The next index due by `now_us`.
    fn pop_due(&mut self, now_us: u64) -> Option<u64> {
        let (due, count) = self.runs.front_mut()?;
        if *due > now_us {
            return None;
        }
        *count -= 1;
        if *count == 0 {
            self.runs.pop_front();
        }
        self.indexes.pop_front()
    }

    /// Puts back an index just popped from the front, still due at `due_us`.
    fn unpop(&mut self, index: u64, due_us: u64) {
        self.indexes.push_front(index);
        match self.runs.front_mut() {
            Some((due, count)) if *due == due_us => *count += 1,
            _ => self.runs.push_front((due_us, 1)),
        }
    }

    fn front_due(&self) -> Option<u64> {
        self.runs.front().map(|run| run.0)
    }

    fn memory_bytes(&self) -> usize {
        self.indexes.capacity() * 8 + self.runs.capacity() * 16
    }
}

/// Stateless SYN retries: the indexes of targets whose SYN went out, each due again after a
/// backoff (1 s, then 2 s, 4 s, …) unless the target answered in between. Holding only the
/// index (8 bytes a SYN in flight), it is the "no state until a SYN-ACK" rule applied to
/// retries too.
pub struct SynRetries {
    /// `levels[k]`: targets whose attempt `k` is the last sent.
    levels: Vec<Level>,
    first_us: u64,
    /// Indexes held in `levels`.
    queued: usize,
    /// Of those, targets that have answered ([`SynRetries::answered`]): their indexes wait out
    /// their due time, but they are no longer in flight.
    answered_queued: usize,
}

impl SynRetries {
    /// `retries` extra SYNs per target, the first `first_us` after the SYN, doubling.
    pub fn new(retries: u8, first_us: u64) -> SynRetries {
        SynRetries {
            levels: (0..=retries).map(|_| Level::default()).collect(),
            first_us,
            queued: 0,
            answered_queued: 0,
        }
    }

    fn delay(&self, attempt: usize) -> u64 {
        self.first_us.saturating_mul(1u64 << attempt.min(40))
    }

    /// Records that the SYN (attempt 0) to target `index` left at `now_us`.
    pub fn sent(&mut self, index: u64, now_us: u64) {
        let due = now_us.saturating_add(self.delay(0));
        self.levels[0].push(index, due);
        self.queued += 1;
    }

    /// From a target's first SYN to its give-up, `first_us · (2^(retries+1) − 1)`: the longest
    /// its SYN-ACK can take to count (the engine's [`crate::Config::syn_span_us`]).
    pub fn span_us(&self) -> u64 {
        (0..self.levels.len())
            .map(|attempt| self.delay(attempt))
            .fold(0, u64::saturating_add)
    }

    /// A target whose SYN is queued here answered (its first answer: the caller's record of
    /// answered targets says so): from now on it is a connection or a row, not a SYN in
    /// flight, though its index stays queued until due (and is skipped then). Without this, a
    /// target that answered at once would hold its backpressure slot for the whole first
    /// delay (1 s).
    pub fn answered(&mut self) {
        self.answered_queued = (self.answered_queued + 1).min(self.queued);
    }

    /// SYNs in flight (sent, not answered, not yet given up): for backpressure.
    pub fn in_flight(&self) -> usize {
        self.queued - self.answered_queued
    }

    /// When the next retry or give-up is due (µs), if any.
    pub fn next_due(&self) -> Option<u64> {
        self.levels.iter().filter_map(Level::front_due).min()
    }

    /// Bytes held (the queues' capacities).
    pub fn memory_bytes(&self) -> usize {
        self.levels.iter().map(Level::memory_bytes).sum()
    }

    /// Pops every retry due by `now_us`, skipping targets `answered` says have answered:
    /// `resend(index)` for one to send again (it is rescheduled with a doubled delay), and
    /// `gave_up(index)` for one whose last retry went unanswered (a `SynTimeout` row). Stops
    /// early when `resend` returns false (no room in this batch): the rest stay due.
    pub fn poll(
        &mut self,
        now_us: u64,
        mut answered: impl FnMut(u64) -> bool,
        mut resend: impl FnMut(u64) -> bool,
        mut gave_up: impl FnMut(u64),
    ) {
        let last = self.levels.len() - 1;
        // The last level first: giving up needs no room in the batch.
        for attempt in (0..=last).rev() {
            while let Some(due) = self.levels[attempt].front_due().filter(|&d| d <= now_us) {
                let index = self.levels[attempt]
                    .pop_due(now_us)
                    .expect("a due run has an index");
                if answered(index) {
                    self.queued -= 1;
                    self.answered_queued = self.answered_queued.saturating_sub(1).min(self.queued);
                } else if attempt == last {
                    self.queued -= 1;
                    self.answered_queued = self.answered_queued.min(self.queued);
                    gave_up(index);
                } else if resend(index) {
                    let next_due = now_us.saturating_add(self.delay(attempt + 1));
                    self.levels[attempt + 1].push(index, next_due);
                } else {
                    self.levels[attempt].unpop(index, due);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(
        retries: &mut SynRetries,
        now: u64,
        answered: &[u64],
        room: usize,
    ) -> (Vec<u64>, Vec<u64>) {
        let (mut resent, mut gave_up) = (Vec::new(), Vec::new());
        let mut left = room;
        retries.poll(
            now,
            |i| answered.contains(&i),
            |i| {
                if left == 0 {
                    return false;
                }
                left -= 1;
                resent.push(i);
                true
            },
            |i| gave_up.push(i),
        );
        (resent, gave_up)
    }

    #[test]
    fn backoff_doubles_and_gives_up() {
        let mut r = SynRetries::new(2, 1_000_000);
        r.sent(1, 0);
        r.sent(2, 500);
        r.sent(3, 2_000);
        assert_eq!(r.in_flight(), 3);
        assert_eq!(poll(&mut r, 999_999, &[], 10), (vec![], vec![]));
        // Target 2 answered; 1 and 3 are resent at their 1 s marks (1 and 2 share a run).
        assert_eq!(poll(&mut r, 1_000_600, &[2], 10), (vec![1], vec![]));
        assert_eq!(r.in_flight(), 2);
        assert_eq!(poll(&mut r, 1_002_000, &[2], 10), (vec![3], vec![]));
        // Second retry 2 s after the first.
        assert_eq!(poll(&mut r, 3_000_599, &[], 10), (vec![], vec![]));
        assert_eq!(poll(&mut r, 3_000_600, &[], 10), (vec![1], vec![]));
        // Target 1 is given up 4 s after its last retry; 3's second retry is overdue by then.
        assert_eq!(poll(&mut r, 7_000_600, &[], 10), (vec![3], vec![1]));
        assert_eq!(poll(&mut r, 100_000_000, &[], 10), (vec![], vec![3]));
        assert_eq!(r.in_flight(), 0);
        assert_eq!(r.next_due(), None);
        assert_eq!(r.span_us(), 7_000_000, "1 + 2 + 4 s");
    }

    #[test]
    fn answered_targets_leave_the_backpressure_at_once() {
        let mut r = SynRetries::new(1, 1_000_000);
        for i in 0..4 {
            r.sent(i, 0);
        }
        // Two answer long before their retry is due: only the other two are in flight.
        r.answered();
        r.answered();
        assert_eq!(r.in_flight(), 2);
        // Their indexes are skipped when due; the others are resent and stay in flight.
        assert_eq!(poll(&mut r, 1_000_000, &[0, 2], 10), (vec![1, 3], vec![]));
        assert_eq!(r.in_flight(), 2);
        r.answered();
        assert_eq!(r.in_flight(), 1);
        assert_eq!(poll(&mut r, 3_000_000, &[0, 1, 2], 10), (vec![], vec![3]));
        assert_eq!(r.in_flight(), 0);
        assert_eq!(r.next_due(), None);
        // An answer counted for no queued SYN (a stray SYN-ACK) never takes the count below 0.
        r.answered();
        r.sent(7, 4_000_000);
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn no_room_leaves_the_rest_due_in_order() {
        let mut r = SynRetries::new(1, 1000);
        for i in 0..5 {
            r.sent(i, 0);
        }
        assert_eq!(poll(&mut r, 1000, &[], 2), (vec![0, 1], vec![]));
        assert_eq!(r.next_due(), Some(1000));
        assert_eq!(poll(&mut r, 1000, &[], 0), (vec![], vec![]));
        assert_eq!(poll(&mut r, 1500, &[3], 10), (vec![2, 4], vec![]));
        assert_eq!(r.in_flight(), 4);
        assert_eq!(poll(&mut r, 5000, &[], 10), (vec![], vec![0, 1, 2, 4]));
    }

    #[test]
    fn zero_retries_give_up_after_the_first_delay() {
        let mut r = SynRetries::new(0, 1000);
        r.sent(9, 10);
        assert_eq!(poll(&mut r, 1009, &[], 10), (vec![], vec![]));
        assert_eq!(poll(&mut r, 1010, &[], 10), (vec![], vec![9]));
    }
}
