//! The bottleneck: a link of a given rate with a drop-tail queue of N frames in front of it.
//!
//! It is arithmetic done as each frame arrives, no queue of frames of its own: a frame that
//! arrives at `t` starts to be sent when the link is free (when the frame before it has left,
//! or at `t`), takes `length × 8 / rate`, and its departure is when its last bit has left. The
//! queue holds the frames that have arrived and not yet left, the one being sent included; a
//! frame that finds N there is dropped. The departures (N at most) are the only state. Times
//! are kept in picoseconds, so rounding never adds up to a rate error (a 64-byte frame takes
//! 51.2 ns at 10 gbit).

use std::collections::VecDeque;

pub(crate) struct Bottleneck {
    ps_per_byte: f64,
    /// Departure times (ps) of the frames in the queue, oldest first.
    departures: VecDeque<u64>,
    limit: usize,
    /// When the link is next free (ps).
    free_ps: u64,
}

impl Bottleneck {
    /// A link of `bps` bits per second behind a queue of `limit` frames.
    pub(crate) fn new(bps: u64, limit: u32) -> Bottleneck {
        Bottleneck {
            ps_per_byte: 8e12 / bps as f64,
            departures: VecDeque::with_capacity(limit as usize),
            limit: limit as usize,
            free_ps: 0,
        }
    }

    /// A frame of `len` bytes arriving at `now_ns`: when it will have left (ns, rounded up), or
    /// None when the queue is full and it is dropped.
    pub(crate) fn admit(&mut self, now_ns: u64, len: usize) -> Option<u64> {
        let now_ps = now_ns.saturating_mul(1000);
        while self.departures.front().is_some_and(|&d| d <= now_ps) {
            self.departures.pop_front();
        }
        if self.departures.len() >= self.limit {
            return None;
        }
        let start = self.free_ps.max(now_ps);
        let departure = start + (len as f64 * self.ps_per_byte).round() as u64;
        self.free_ps = departure;
        self.departures.push_back(departure);
        Some(departure.div_ceil(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_leave_at_the_rate_one_after_another() {
        // 100 mbit: a 1250-byte frame takes 100 µs.
        let mut b = Bottleneck::new(100_000_000, 1000);
        let departures: Vec<u64> = (0..10).map(|_| b.admit(0, 1250).unwrap()).collect();
        let want: Vec<u64> = (1..=10).map(|i| i * 100_000).collect();
        assert_eq!(departures, want);
        // An idle link sends at once.
        assert_eq!(b.admit(5_000_000, 1250), Some(5_100_000));
    }

    #[test]
    fn the_rate_holds_over_many_small_frames() {
        // 10 gbit, 64-byte frames: 51.2 ns each; a million of them take 51.2 ms.
        let mut b = Bottleneck::new(10_000_000_000, 2_000_000);
        let mut last = 0;
        for _ in 0..1_000_000 {
            last = b.admit(0, 64).unwrap();
        }
        assert_eq!(last, 51_200_000);
    }

    #[test]
    fn a_full_queue_drops_the_tail_and_drains_at_the_rate() {
        // 8 mbit: a 1000-byte frame takes 1 ms. A queue of 3.
        let mut b = Bottleneck::new(8_000_000, 3);
        let at_once: Vec<Option<u64>> = (0..5).map(|_| b.admit(0, 1000)).collect();
        assert_eq!(
            at_once,
            [
                Some(1_000_000),
                Some(2_000_000),
                Some(3_000_000),
                None,
                None
            ]
        );
        // At 1 ms the first has left: room for one, which leaves after the third.
        assert_eq!(b.admit(1_000_000, 1000), Some(4_000_000));
        assert_eq!(b.admit(1_000_000, 1000), None);
        // Once all have left the link is idle again.
        assert_eq!(b.admit(10_000_000, 1000), Some(11_000_000));
    }
}
