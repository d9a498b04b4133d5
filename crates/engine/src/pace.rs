//! Pacing to a packet rate. Packets leave in bursts of at most 100 µs worth of the rate (one at
//! a time at 10,000 pps, a whole batch only from 640,000 pps up), each burst due when the
//! previous one's share of time has passed. Only what the ring accepted is charged, a sender
//! that fell far behind does not burst to catch up, and every wait ends within 50 ms of a stop
//! request (Ctrl-C), sending nothing more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest single sleep, so a stop request is seen quickly even at `-r 1`.
const STOP_CHECK: Duration = Duration::from_millis(50);
/// Waits shorter than this spin (sleeping would overshoot them).
const SPIN_BELOW: Duration = Duration::from_micros(100);
/// A sender this far behind its schedule restarts the schedule instead of bursting.
const MAX_LAG: Duration = Duration::from_millis(100);
/// A burst carries at most this much time's worth of the rate.
const BURST_TIME: f64 = 100e-6;

pub struct Pacer {
    seconds_per_packet: f64,
    burst: usize,
    next: Instant,
}

impl Pacer {
    /// `rate` packets per second (0: unlimited), in bursts of at most `batch`.
    pub fn new(rate: f64, batch: usize) -> Pacer {
        Pacer::with_burst_time(rate, batch, Duration::from_secs_f64(BURST_TIME))
    }

    /// [`Pacer::new`] with bursts of up to `burst_time` worth of the rate (grab, which sleeps
    /// between bursts, takes longer ones than a scan's 100 µs: each wake-up costs CPU).
    pub fn with_burst_time(rate: f64, batch: usize, burst_time: Duration) -> Pacer {
        let batch = batch.max(1);
        let (seconds_per_packet, burst) = if rate > 0.0 {
            let burst = (rate * burst_time.as_secs_f64())
                .ceil()
                .clamp(1.0, batch as f64) as usize;
            (1.0 / rate, burst)
        } else {
            (0.0, batch)
        };
        Pacer {
            seconds_per_packet,
            burst,
            next: Instant::now(),
        }
    }

    /// The most packets to hand over at once.
    pub fn burst(&self) -> usize {
        self.burst
    }

    /// Makes this thread's sleeps precise (the default timer slack adds ~50 µs to each).
    pub fn tighten_timers() {
        let _ = nix::sys::prctl::set_timerslack(1);
    }

    /// Waits until the next burst is due. Returns false, at once or within 50 ms, when `stop`
    /// is set: the caller sends nothing more.
    pub fn wait(&mut self, stop: &AtomicBool) -> bool {
        if self.seconds_per_packet == 0.0 {
            return !stop.load(Ordering::Relaxed);
        }
        let now = Instant::now();
        if now > self.next + MAX_LAG {
            self.next = now;
        }
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            let Some(ahead) = self
                .next
                .checked_duration_since(now)
                .filter(|a| !a.is_zero())
            else {
                return true;
            };
            if ahead < SPIN_BELOW {
                std::hint::spin_loop();
            } else {
                std::thread::sleep((ahead - SPIN_BELOW / 2).min(STOP_CHECK));
            }
        }
    }

    /// Whether the next burst is due now, without waiting: for a loop that must keep
    /// receiving while it paces what it sends.
    pub fn is_due(&mut self) -> bool {
        if self.seconds_per_packet == 0.0 {
            return true;
        }
        let now = Instant::now();
        if now > self.next + MAX_LAG {
            self.next = now;
        }
        now >= self.next
    }

    /// How long until the next burst is due (zero when it is, or when unpaced): how long a
    /// loop that has nothing else to do may sleep.
    pub fn until_due(&self) -> Duration {
        if self.seconds_per_packet == 0.0 {
            return Duration::ZERO;
        }
        self.next.saturating_duration_since(Instant::now())
    }

    /// `packets` left (only what the kernel accepted): the next burst is due that much later.
    pub fn charge(&mut self, packets: usize) {
        if self.seconds_per_packet > 0.0 {
            self.next += Duration::from_secs_f64(packets as f64 * self.seconds_per_packet);
        }
    }

    /// Waits out the last burst's share of time, so a paced run lasts count / rate.
    pub fn finish(&mut self, stop: &AtomicBool) {
        self.wait(stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_are_at_most_100_microseconds_of_the_rate() {
        assert_eq!(Pacer::new(1.0, 64).burst(), 1);
        assert_eq!(Pacer::new(10_000.0, 64).burst(), 1);
        assert_eq!(Pacer::new(100_000.0, 64).burst(), 10);
        assert_eq!(Pacer::new(10e6, 64).burst(), 64);
        assert_eq!(Pacer::new(0.0, 64).burst(), 64);
    }

    #[test]
    fn a_stop_ends_a_long_wait_at_once() {
        let stop = AtomicBool::new(false);
        let mut p = Pacer::new(1.0, 64);
        assert!(p.wait(&stop), "the first packet is due at once");
        p.charge(1);
        stop.store(true, Ordering::Relaxed);
        let start = Instant::now();
        assert!(!p.wait(&stop));
        assert!(start.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn only_what_was_accepted_is_charged() {
        let stop = AtomicBool::new(false);
        let mut p = Pacer::new(1000.0, 64);
        assert!(p.wait(&stop));
        p.charge(0); // the ring took nothing: the burst is still due now
        let start = Instant::now();
        assert!(p.wait(&stop));
        assert!(start.elapsed() < Duration::from_millis(1));
    }
}
