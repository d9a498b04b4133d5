//! One run of the latency client: messages at a fixed rate for a fixed time, every echo timed.
//!
//! Pacing is a schedule, not a sleep: message `i` is due at `start + i / rate`, and the loop
//! spins (reading echoes between sends) until it is. A loop that was held up (the CPU was taken
//! from it) sends what fell due at once, at most a burst at a time, so the achieved rate stays
//! the target rate and the late messages carry the time they really left.
//!
//! What a run cannot hide: a rate it did not reach, messages lost, and a client that did not
//! have its CPU (its thread's CPU time against the wall: a loop that spins holds the CPU all
//! along unless the scheduler runs something else there, and then every RTT includes the
//! wait). [`RunReport::notes`] says each in words.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::link::{Clock, EchoLink};
use crate::message::Stamp;
use crate::stats::{Percentiles, RttRecorder, Sample};
use crate::tracker::{Arrival, SeqTracker};

/// Messages sent at once, at most, by a loop catching up with its schedule.
const CATCH_UP_BURST: usize = 64;

/// A run reached its rate when it sent at least this share of it.
pub const RATE_REACHED: f64 = 0.98;

/// A client that had its CPU less than this share of a run's time was contended: the
/// scheduler ran something else where it spins.
pub const CONTENDED_BELOW: f64 = 0.9;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct RunSpec {
    /// Messages per second.
    pub rate: f64,
    pub duration: Duration,
    /// How long to wait for the last echoes after the last message.
    pub drain: Duration,
}

impl RunSpec {
    pub fn messages(&self) -> u64 {
        (self.rate * self.duration.as_secs_f64()).round().max(1.0) as u64
    }
}

/// Everything one run measured.
pub struct RunResult {
    pub report: RunReport,
    pub rtts: RttRecorder,
}

/// The figures of one run, as printed and written to the summary.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub target_pps: f64,
    /// Messages sent, divided by the time from the first to the last send (times
    /// (sent - 1) / sent, so a perfect schedule reads exactly the target).
    pub achieved_pps: f64,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    /// Echoes of messages this run never sent (e.g. of an earlier run).
    pub foreign: u64,
    /// Frames the kernel dropped before the client read them (its receive rings were full):
    /// part of `lost`, told apart. None on the kernel socket path, which cannot tell.
    pub rx_drops: Option<u64>,
    #[serde(flatten)]
    pub rtt: Percentiles,
    /// Whether Ctrl-C ended the run before its time.
    pub interrupted: bool,
    /// Whether it sent at RATE_REACHED of the target rate or more.
    pub rate_reached: bool,
    /// How much of the run the client's thread had its CPU.
    pub client_cpu: ClientCpu,
}

/// The client thread's hold on its CPU during a run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ClientCpu {
    /// Its CPU time over the run's wall time (about 1 for a loop that spins undisturbed).
    pub share: f64,
    /// Times the scheduler took the CPU from it.
    pub involuntary_switches: u64,
}

impl ClientCpu {
    /// Whether the client had its CPU less than CONTENDED_BELOW of the time.
    pub fn contended(&self) -> bool {
        self.share < CONTENDED_BELOW
    }
}

impl RunReport {
    /// What the figures cannot be taken as, in words: a rate not reached, messages lost, a
    /// contended client. Empty when nothing is to be said.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.rate_reached && !self.interrupted {
            notes.push(format!(
                "rate not reached: {:.1} % of it",
                100.0 * self.achieved_pps / self.target_pps
            ));
        }
        if self.lost > 0 {
            notes.push(format!(
                "{} lost ({:.2} %)",
                self.lost,
                100.0 * self.lost as f64 / self.sent.max(1) as f64
            ));
        }
        if self.client_cpu.contended() {
            notes.push(format!(
                "client on its CPU {:.0} % of the time",
                100.0 * self.client_cpu.share
            ));
        }
        notes
    }
}

/// Runs `spec` over `link` as run number `run`.
pub fn measure(
    link: &mut dyn EchoLink,
    run: u32,
    spec: &RunSpec,
    clock: &Clock,
    stop: &AtomicBool,
) -> io::Result<RunResult> {
    let total = spec.messages();
    let period_ns = 1e9 / spec.rate;
    link.take_rx_drops(); // only this run's drops count
    let (cpu_start, switches_start) = (
        sonde_meter::CpuTimes::thread_now(),
        sonde_meter::involuntary_switches(),
    );
    let start = clock.now_ns();
    let mut echoes = Echoes::new(run, total, start);
    let (mut next, mut first_sent, mut last_sent) = (0u64, start, start);
    let drain_ns = spec.drain.as_nanos() as u64;
    loop {
        // A stop is honoured before anything more is sent (a preempted loop may owe a burst).
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = clock.now_ns();
        let mut burst = 0;
        while next < total
            && burst < CATCH_UP_BURST
            && now >= start + (next as f64 * period_ns) as u64
        {
            if !link.send(run, next, clock)? {
                break;
            }
            last_sent = clock.now_ns();
            if next == 0 {
                first_sent = last_sent;
            }
            next += 1;
            burst += 1;
        }
        link.poll(clock, &mut |stamp, read_ns| echoes.take(stamp, read_ns))?;
        let all_back = echoes.tracker.received == total;
        if next == total && (all_back || clock.now_ns() > last_sent + drain_ns) {
            break;
        }
    }
    let achieved_pps = if next > 1 {
        (next - 1) as f64 * 1e9 / (last_sent - first_sent).max(1) as f64
    } else {
        0.0
    };
    let wall_ns = clock.now_ns().saturating_sub(start).max(1);
    let client_cpu = ClientCpu {
        share: sonde_meter::CpuTimes::thread_now()
            .since(&cpu_start)
            .total()
            .as_nanos() as f64
            / wall_ns as f64,
        involuntary_switches: sonde_meter::involuntary_switches().saturating_sub(switches_start),
    };
    let Echoes {
        tracker,
        rtts,
        foreign,
        ..
    } = echoes;
    let report = RunReport {
        target_pps: spec.rate,
        achieved_pps,
        sent: next,
        received: tracker.received,
        lost: tracker.lost(next),
        reordered: tracker.reordered,
        duplicates: tracker.duplicates,
        foreign: foreign + tracker.unknown,
        rx_drops: link.take_rx_drops(),
        rtt: Percentiles::of(&rtts.hist),
        interrupted: stop.load(Ordering::Relaxed),
        // One message has no rate to speak of.
        rate_reached: next <= 1 || achieved_pps >= RATE_REACHED * spec.rate,
        client_cpu,
    };
    Ok(RunResult { report, rtts })
}

/// The echoes of one run: which came back, and when.
struct Echoes {
    run: u32,
    start: u64,
    tracker: SeqTracker,
    rtts: RttRecorder,
    foreign: u64,
}

impl Echoes {
    fn new(run: u32, total: u64, start: u64) -> Echoes {
        Echoes {
            run,
            start,
            tracker: SeqTracker::new(total),
            rtts: RttRecorder::with_capacity(total as usize),
            foreign: 0,
        }
    }

    fn take(&mut self, stamp: Stamp, read_ns: u64) {
        if stamp.run != self.run {
            self.foreign += 1;
        } else if self.tracker.record(stamp.seq) == Arrival::First {
            self.rtts.record(Sample {
                sent_ns: stamp.sent_ns.saturating_sub(self.start),
                rtt_ns: read_ns.saturating_sub(stamp.sent_ns),
            });
        }
    }
}

/// Sends a few messages (run `u32::MAX`) until one comes back or `wait` passes: whether a
/// reflector answers at all, before a run is measured against it.
pub fn reflector_answers(
    link: &mut dyn EchoLink,
    clock: &Clock,
    wait: Duration,
    stop: &AtomicBool,
) -> io::Result<bool> {
    let deadline = clock.now_ns() + wait.as_nanos() as u64;
    let mut answered = false;
    let mut seq = 0;
    let mut next_try = 0;
    while !answered && clock.now_ns() < deadline && !stop.load(Ordering::Relaxed) {
        if clock.now_ns() >= next_try {
            link.send(u32::MAX, seq, clock)?;
            seq += 1;
            next_try = clock.now_ns() + 100_000_000;
        }
        link.poll(clock, &mut |stamp, _| answered |= stamp.run == u32::MAX)?;
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(answered)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reflector in memory: echoes what was sent after `delay_ns`, dropping every `drop_every`th.
    struct Loop {
        queue: std::collections::VecDeque<(Stamp, u64)>,
        delay_ns: u64,
        drop_every: u64,
    }

    impl EchoLink for Loop {
        fn send(&mut self, run: u32, seq: u64, clock: &Clock) -> io::Result<bool> {
            let sent_ns = clock.now_ns();
            if self.drop_every == 0 || !(seq + 1).is_multiple_of(self.drop_every) {
                self.queue
                    .push_back((Stamp { run, seq, sent_ns }, sent_ns + self.delay_ns));
            }
            Ok(true)
        }
        fn poll(
            &mut self,
            clock: &Clock,
            on_echo: &mut dyn FnMut(Stamp, u64),
        ) -> io::Result<usize> {
            let now = clock.now_ns();
            let mut n = 0;
            while self.queue.front().is_some_and(|(_, due)| *due <= now) {
                let (stamp, _) = self.queue.pop_front().unwrap();
                on_echo(stamp, now);
                n += 1;
            }
            Ok(n)
        }
        fn describe(&self) -> String {
            "memory".into()
        }
    }

    #[test]
    fn a_run_sends_rate_times_duration_and_counts_what_did_not_come_back() {
        let mut link = Loop {
            queue: Default::default(),
            delay_ns: 50_000,
            drop_every: 10,
        };
        let spec = RunSpec {
            rate: 20_000.0,
            duration: Duration::from_millis(100),
            drain: Duration::from_millis(20),
        };
        let stop = AtomicBool::new(false);
        let r = measure(&mut link, 7, &spec, &Clock::new(), &stop).unwrap();
        let rep = r.report;
        assert_eq!(rep.sent, 2_000);
        assert_eq!(rep.lost, 200);
        assert_eq!(rep.received, 1_800);
        assert_eq!((rep.reordered, rep.duplicates, rep.foreign), (0, 0, 0));
        assert_eq!(rep.rx_drops, None, "a link that cannot tell says so");
        assert!(rep.rtt.p50_us >= 50.0, "{:?}", rep.rtt);
        assert_eq!(r.rtts.samples.len(), 1_800);
        // The schedule, not the loop's speed, sets the rate.
        assert!(
            rep.achieved_pps > 19_000.0 && rep.achieved_pps < 21_000.0,
            "{}",
            rep.achieved_pps
        );
    }

    #[test]
    fn a_stop_ends_the_run_and_says_so() {
        let mut link = Loop {
            queue: Default::default(),
            delay_ns: 0,
            drop_every: 0,
        };
        let spec = RunSpec {
            rate: 1_000.0,
            duration: Duration::from_secs(3600),
            drain: Duration::from_millis(10),
        };
        let stop = AtomicBool::new(true);
        let r = measure(&mut link, 0, &spec, &Clock::new(), &stop).unwrap();
        assert!(r.report.interrupted);
        assert!(r.report.sent <= 1);
        // An interrupted run is not "short of its rate".
        assert!(!r.report.notes().iter().any(|n| n.contains("rate")));
    }

    #[test]
    fn a_short_rate_losses_and_a_contended_client_are_told() {
        let mut link = Loop {
            queue: Default::default(),
            delay_ns: 0,
            drop_every: 0,
        };
        let spec = RunSpec {
            rate: 20_000.0,
            duration: Duration::from_millis(20),
            drain: Duration::from_millis(10),
        };
        let stop = AtomicBool::new(false);
        let mut report = measure(&mut link, 1, &spec, &Clock::new(), &stop)
            .unwrap()
            .report;
        // What the run measured of its own CPU is there to be told.
        assert!(report.client_cpu.share > 0.0);
        // The figures of the run the issue tells of: 17,411/s of 20,000, 4,437 lost, a client
        // on its CPU 40 % of the time.
        report.achieved_pps = 17_411.0;
        report.rate_reached = false;
        report.sent = 200_000;
        report.lost = 4_437;
        report.client_cpu = ClientCpu {
            share: 0.4,
            involuntary_switches: 900,
        };
        assert_eq!(
            report.notes(),
            [
                "rate not reached: 87.1 % of it",
                "4437 lost (2.22 %)",
                "client on its CPU 40 % of the time"
            ]
        );
        report.rate_reached = true;
        report.lost = 0;
        report.client_cpu.share = 0.99;
        assert!(report.notes().is_empty());
        assert!(!ClientCpu {
            share: CONTENDED_BELOW,
            involuntary_switches: 0
        }
        .contended());
    }
}
