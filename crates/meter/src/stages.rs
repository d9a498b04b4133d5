//! The stage clock: where the time of sonde's own per-packet paths goes (`sonde profile`).
//!
//! Hot loops call [`mark`] at the end of each stage. When profiling is off that is one relaxed
//! load of a flag and a branch that always goes the same way: no clock is read, nothing is
//! written. When it is on, each mark reads a cycle counter and charges the time since the
//! previous mark of the same thread (a *lap*) to the stage that just ended, in counters of the
//! thread's own (no lock, no allocation, no system call). Laps telescope: every tick between the
//! first and the last mark of a thread is charged to exactly one stage.
//!
//! System calls are timed differently ([`call`]): a call may sleep (a receiver waiting for
//! replies), so instead of the cycle counter it reads the thread's CPU clock before and after,
//! which counts only what the thread spent on a CPU — the kernel's work for the call.
//!
//! A lap longer than [`MAX_LAP_NS`] is not charged but counted apart: no stage of one packet
//! takes that long, so the thread was preempted (or took an interrupt burst) inside it.
//!
//! Each thread says which path it runs ([`begin_thread`]) and hands its counters over when it
//! ends ([`end_thread`]); [`take`] collects them per path. [`enable`] calibrates the counter
//! against the wall clock and measures what one mark and one timed call cost on their own;
//! [`Tally::ns`] subtracts that from every lap and call, and [`Breakdown`] checks the stages
//! against the CPU per packet of a run without instrumentation.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};

/// A stage of sonde's transmit or receive path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Transmit: the loop around the batches (pacing, counters, bookkeeping).
    Pacing,
    /// Transmit: taking targets from the permutation and turning indexes into addresses.
    Targets,
    /// Transmit: the validation cookie (keyed hash of the target) and the fields it makes.
    Cookie,
    /// Transmit: copying the template and storing the changed words.
    Patch,
    /// Transmit: finishing the checksums from the template's partial sums.
    Checksum,
    /// Transmit: the backend's work per frame and per batch around the frames (descriptors,
    /// slot status, message headers).
    Enqueue,
    /// Transmit: the kick, a system call (thread CPU time).
    Kick,
    /// Transmit: taking back completed frames (AF_XDP's completion ring).
    Completion,
    /// Receive: waiting for and fetching frames, system calls (thread CPU time).
    RxCall,
    /// Receive: the user side of fetching frames (rings, descriptors) and the loop around it.
    Poll,
    /// Receive: reading the clocks for the batch.
    Timestamp,
    /// Receive: the Ethernet and IP headers.
    Parse,
    /// Receive: the transport header, the cookie check, classification, target check.
    Validate,
    /// Receive: the duplicate check.
    Dedup,
    /// Receive: the output filter and the row writer.
    Output,
    /// Receive: the writes of the output file, system calls (thread CPU time).
    Write,
    /// Capture: copying a packet into the batch handed to the writer.
    Copy,
    /// Capture: ordering the batches and formatting each packet's record into the output
    /// buffer (the writer thread).
    Format,
    /// Capture: handing batches between threads, system calls (thread CPU time of the
    /// channel's waits and wake-ups).
    Handover,
    /// Calibration only: back-to-back marks.
    Calibrate,
    /// Calibration only: empty timed calls.
    CalibrateCall,
}

const STAGES: usize = 21;

impl Stage {
    /// The transmit path's stages, in the order a packet meets them.
    pub const TX: [Stage; 8] = [
        Stage::Pacing,
        Stage::Targets,
        Stage::Cookie,
        Stage::Patch,
        Stage::Checksum,
        Stage::Enqueue,
        Stage::Kick,
        Stage::Completion,
    ];
    /// The receive path's stages, in the order a packet meets them.
    pub const RX: [Stage; 8] = [
        Stage::RxCall,
        Stage::Poll,
        Stage::Timestamp,
        Stage::Parse,
        Stage::Validate,
        Stage::Dedup,
        Stage::Output,
        Stage::Write,
    ];

    /// The capture path's stages (capture threads, then the writer), in the order a packet
    /// meets them.
    pub const CAPTURE: [Stage; 7] = [
        Stage::RxCall,
        Stage::Poll,
        Stage::Timestamp,
        Stage::Copy,
        Stage::Handover,
        Stage::Format,
        Stage::Write,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Pacing => "loop",
            Stage::Targets => "targets",
            Stage::Cookie => "cookie",
            Stage::Patch => "patch",
            Stage::Checksum => "checksum",
            Stage::Enqueue => "enqueue",
            Stage::Kick => "kick syscall",
            Stage::Completion => "completion",
            Stage::RxCall => "poll syscall",
            Stage::Poll => "poll",
            Stage::Timestamp => "timestamp",
            Stage::Parse => "parse",
            Stage::Validate => "validate",
            Stage::Dedup => "dedup",
            Stage::Output => "output",
            Stage::Write => "write syscall",
            Stage::Copy => "copy",
            Stage::Format => "format",
            Stage::Handover => "hand-over syscalls",
            Stage::Calibrate => "calibrate",
            Stage::CalibrateCall => "calibrate call",
        }
    }

    /// Whether the stage is a system call, timed by the thread's CPU clock (in ns) rather
    /// than by laps of the cycle counter.
    pub fn is_call(self) -> bool {
        matches!(
            self,
            Stage::Kick | Stage::RxCall | Stage::Write | Stage::Handover | Stage::CalibrateCall
        )
    }
}

/// Which path a thread runs; its counters are collected per path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Tx = 0,
    Rx = 1,
    Calibrate = 2,
}

/// A lap longer than this is taken for a preemption and not charged to its stage.
pub const MAX_LAP_NS: u64 = 50_000;

/// What a thread (or a path) counted: per stage, laps in counter ticks or calls in CPU ns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Per stage: ticks of the counter (laps), or CPU ns (calls).
    pub ticks: [u64; STAGES],
    /// Per stage: how many laps or calls were charged.
    pub laps: [u64; STAGES],
    /// Laps over [`MAX_LAP_NS`], not charged, and their ticks.
    pub dropped_laps: u64,
    pub dropped_ticks: u64,
}

/// The counter's rate and what the instrumentation itself costs, measured by [`enable`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub ticks_per_ns: f64,
    /// Ticks one lap takes with no work in it: the cost of one mark.
    pub mark_ticks: f64,
    /// CPU ns one timed call takes with an empty call: the cost of the two clock reads.
    pub call_ns: f64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        for s in 0..STAGES {
            self.ticks[s] += other.ticks[s];
            self.laps[s] += other.laps[s];
        }
        self.dropped_laps += other.dropped_laps;
        self.dropped_ticks += other.dropped_ticks;
    }

    /// Nanoseconds spent in `stage`, the instrumentation's own cost taken out (never below 0:
    /// a stage cheaper than the calibration's spread shows as 0).
    pub fn ns(&self, stage: Stage, cal: &Calibration) -> f64 {
        let (ticks, laps) = (
            self.ticks[stage as usize] as f64,
            self.laps[stage as usize] as f64,
        );
        let ns = if stage.is_call() {
            ticks - laps * cal.call_ns
        } else {
            (ticks - laps * cal.mark_ticks) / cal.ticks_per_ns
        };
        ns.max(0.0)
    }

    /// What the instrumentation itself cost in `stage`, in ns (what [`Tally::ns`] took out).
    pub fn overhead_ns(&self, stage: Stage, cal: &Calibration) -> f64 {
        let laps = self.laps[stage as usize] as f64;
        if stage.is_call() {
            laps * cal.call_ns
        } else {
            laps * cal.mark_ticks / cal.ticks_per_ns
        }
    }
}

/// A path's cost per packet: the stages, the kernel's share outside them, and the check of
/// their sum against the CPU per packet of a run without instrumentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    /// Stage name and ns per packet, in path order; the timed system calls (the kernel's work
    /// for them) included.
    pub stages: Vec<(&'static str, f64)>,
    /// CPU per packet of the instrumented run that no stage and no timed call saw: the
    /// kernel's work outside sonde's system calls (interrupts, softirqs and page faults
    /// between marks are inside a lap already; what is left is the thread's start and end and
    /// laps dropped as preempted).
    pub kernel_rest_ns: f64,
    /// Stages + kernel rest.
    pub sum_ns: f64,
    /// User + system CPU per packet of the run without instrumentation.
    pub measured_ns: f64,
    /// `sum_ns / measured_ns`.
    pub ratio: f64,
}

impl Breakdown {
    /// `stages` in ns per packet (from [`Tally::ns`] divided by packets, the instrumentation's
    /// cost taken out); `instrumented_ns` the same thread's CPU per packet (getrusage, user +
    /// system) and `overhead_ns` what was taken out; `measured_ns` the CPU per packet of the
    /// run without instrumentation. Only thread CPU totals are used, never getrusage's split of
    /// them into user and system time, which Linux samples by tick and which can be far off for
    /// a thread that makes a system call every microsecond.
    pub fn new(
        stages: &[(Stage, f64)],
        instrumented_ns: f64,
        overhead_ns: f64,
        measured_ns: f64,
    ) -> Breakdown {
        let staged: f64 = stages.iter().map(|(_, ns)| ns).sum();
        let kernel_rest_ns = (instrumented_ns - overhead_ns - staged).max(0.0);
        let sum_ns = staged + kernel_rest_ns;
        Breakdown {
            stages: stages.iter().map(|&(s, ns)| (s.name(), ns)).collect(),
            kernel_rest_ns,
            sum_ns,
            measured_ns,
            ratio: if measured_ns > 0.0 {
                sum_ns / measured_ns
            } else {
                f64::NAN
            },
        }
    }

    /// Whether the sum is within `tolerance` (0.1 = 10 %) of the measured CPU per packet.
    pub fn within(&self, tolerance: f64) -> bool {
        (self.ratio - 1.0).abs() <= tolerance
    }
}

// ---------------------------------------------------------------------------------------------

static ON: AtomicBool = AtomicBool::new(false);
static MAX_LAP_TICKS: AtomicU64 = AtomicU64::new(u64::MAX);
static COUNTER: OnceLock<fn() -> u64> = OnceLock::new();
static TOTALS: Mutex<[Option<Tally>; 3]> = Mutex::new([None, None, None]);

/// One thread's counters.
struct Counters {
    role: Cell<Option<Role>>,
    last: Cell<u64>,
    ticks: [Cell<u64>; STAGES],
    laps: [Cell<u64>; STAGES],
    dropped_laps: Cell<u64>,
    dropped_ticks: Cell<u64>,
}

thread_local! {
    static THREAD: Counters = const {
        Counters {
            role: Cell::new(None),
            last: Cell::new(0),
            ticks: [const { Cell::new(0) }; STAGES],
            laps: [const { Cell::new(0) }; STAGES],
            dropped_laps: Cell::new(0),
            dropped_ticks: Cell::new(0),
        }
    };
}

impl Counters {
    fn charge(&self, stage: Stage, amount: u64) {
        let s = stage as usize;
        self.ticks[s].set(self.ticks[s].get() + amount);
        self.laps[s].set(self.laps[s].get() + 1);
    }

    fn lap(&self, stage: Stage, now: u64) {
        if self.role.get().is_none() {
            return;
        }
        let lap = now.wrapping_sub(self.last.get());
        self.last.set(now);
        if lap > MAX_LAP_TICKS.load(Ordering::Relaxed) {
            self.dropped_laps.set(self.dropped_laps.get() + 1);
            self.dropped_ticks.set(self.dropped_ticks.get() + lap);
        } else {
            self.charge(stage, lap);
        }
    }

    fn take(&self) -> Tally {
        let mut t = Tally::default();
        for s in 0..STAGES {
            t.ticks[s] = self.ticks[s].take();
            t.laps[s] = self.laps[s].take();
        }
        t.dropped_laps = self.dropped_laps.take();
        t.dropped_ticks = self.dropped_ticks.take();
        t
    }
}

/// Whether profiling is on.
#[inline(always)]
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Ends the stage `stage` of the calling thread: charges it the time since the thread's
/// previous mark. Off, this is one load and one branch.
#[inline(always)]
pub fn mark(stage: Stage) {
    if is_on() {
        mark_on(stage);
    }
}

#[cold]
#[inline(never)]
fn mark_on(stage: Stage) {
    let now = ticks();
    THREAD.with(|t| t.lap(stage, now));
}

/// Runs the system call `f`: ends the user stage `before` as [`mark`] does, then charges the
/// thread CPU time the call took to `stage`. Time the call slept is not charged to anything.
#[inline(always)]
pub fn call<T>(before: Stage, stage: Stage, f: impl FnOnce() -> T) -> T {
    if !is_on() {
        return f();
    }
    let start = call_begin(before);
    let out = f();
    call_end(stage, start);
    out
}

#[cold]
#[inline(never)]
fn call_begin(before: Stage) -> u64 {
    mark_on(before);
    thread_cpu_ns()
}

#[cold]
#[inline(never)]
fn call_end(stage: Stage, start: u64) {
    let spent = thread_cpu_ns().saturating_sub(start);
    THREAD.with(|t| {
        if t.role.get().is_some() {
            t.charge(stage, spent);
        }
        t.last.set(ticks());
    });
}

/// The calling thread runs `role`'s path from now on (a no-op while profiling is off).
pub fn begin_thread(role: Role) {
    if is_on() {
        THREAD.with(|t| {
            t.take();
            t.role.set(Some(role));
            t.last.set(ticks());
        });
    }
}

/// Hands the calling thread's counters to its path's totals (a no-op while profiling is off
/// or when the thread did not [`begin_thread`]).
pub fn end_thread() {
    let Some((role, tally)) = THREAD.with(|t| Some((t.role.take()?, t.take()))) else {
        return;
    };
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    totals[role as usize]
        .get_or_insert_with(Tally::default)
        .add(&tally);
}

/// What the threads of `role` counted since the last call (their ended threads).
pub fn take(role: Role) -> Tally {
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    totals[role as usize].take().unwrap_or_default()
}

/// Turns profiling on, with `counter` as the cycle counter (the first counter given stays for
/// the process; a monotonic ns clock when none is), and calibrates.
pub fn enable(counter: Option<fn() -> u64>) -> Calibration {
    if let Some(c) = counter {
        let _ = COUNTER.set(c);
    }
    let ticks_per_ns = ticks_per_ns();
    MAX_LAP_TICKS.store((MAX_LAP_NS as f64 * ticks_per_ns) as u64, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    let (mark_ticks, call_ns) = instrumentation_cost();
    Calibration {
        ticks_per_ns,
        mark_ticks,
        call_ns,
    }
}

/// Turns profiling off.
pub fn disable() {
    ON.store(false, Ordering::Relaxed);
}

fn ticks() -> u64 {
    match COUNTER.get() {
        Some(read) => read(),
        None => monotonic_ns(),
    }
}

fn monotonic_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The counter's ticks per wall-clock ns, over 20 ms.
fn ticks_per_ns() -> f64 {
    let (t0, w0) = (ticks(), Instant::now());
    while w0.elapsed() < Duration::from_millis(20) {
        std::hint::spin_loop();
    }
    let (t1, wall) = (ticks(), w0.elapsed());
    t1.wrapping_sub(t0) as f64 / wall.as_nanos() as f64
}

/// The median over rounds of one mark's lap (ticks) and one empty timed call (CPU ns), each
/// measured on the calling thread as the hot loops use them.
fn instrumentation_cost() -> (f64, f64) {
    const ROUNDS: usize = 9;
    begin_thread(Role::Calibrate);
    let mut marks = [0.0; ROUNDS];
    let mut calls = [0.0; ROUNDS];
    for round in 0..ROUNDS {
        for _ in 0..20_000 {
            mark(Stage::Calibrate);
        }
        let t = THREAD.with(Counters::take);
        marks[round] = per_lap(&t, Stage::Calibrate);
        for _ in 0..2_000 {
            call(Stage::Calibrate, Stage::CalibrateCall, || ());
        }
        let t = THREAD.with(Counters::take);
        calls[round] = per_lap(&t, Stage::CalibrateCall);
    }
    THREAD.with(|t| t.role.set(None));
    (median(&mut marks), median(&mut calls))
}

fn per_lap(t: &Tally, stage: Stage) -> f64 {
    t.ticks[stage as usize] as f64 / t.laps[stage as usize].max(1) as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal() -> Calibration {
        Calibration {
            ticks_per_ns: 2.0,
            mark_ticks: 10.0,
            call_ns: 100.0,
        }
    }

    #[test]
    fn overhead_is_subtracted_per_lap_and_per_call() {
        let mut t = Tally::default();
        t.ticks[Stage::Patch as usize] = 1_000;
        t.laps[Stage::Patch as usize] = 20;
        t.ticks[Stage::Kick as usize] = 5_000;
        t.laps[Stage::Kick as usize] = 10;
        // (1000 ticks − 20 laps × 10 ticks) / 2 ticks per ns = 400 ns.
        assert_eq!(t.ns(Stage::Patch, &cal()), 400.0);
        assert_eq!(t.overhead_ns(Stage::Patch, &cal()), 100.0);
        // Calls are CPU ns already: 5000 − 10 × 100.
        assert_eq!(t.ns(Stage::Kick, &cal()), 4_000.0);
        // A stage cheaper than its marks shows as 0, never negative.
        t.ticks[Stage::Cookie as usize] = 50;
        t.laps[Stage::Cookie as usize] = 10;
        assert_eq!(t.ns(Stage::Cookie, &cal()), 0.0);
    }

    #[test]
    fn the_kernel_rest_is_what_the_instrumented_thread_spent_outside_every_stage() {
        let stages = [(Stage::Patch, 30.0), (Stage::Kick, 200.0)];
        // 400 ns of CPU per packet instrumented, of which 120 the clock's own: 50 unseen.
        let b = Breakdown::new(&stages, 400.0, 120.0, 290.0);
        assert_eq!(b.kernel_rest_ns, 50.0);
        assert_eq!(b.sum_ns, 280.0);
        assert!((b.ratio - 280.0 / 290.0).abs() < 1e-12);
        assert!(b.within(0.10));
        // Stages that add up to more than the thread spent (a lap held a preemption) leave no
        // rest, and the excess shows in the ratio.
        let b = Breakdown::new(
            &[(Stage::Patch, 30.0), (Stage::Kick, 300.0)],
            400.0,
            120.0,
            250.0,
        );
        assert_eq!(b.kernel_rest_ns, 0.0);
        assert!(!b.within(0.10), "ratio {}", b.ratio);
        assert_eq!(b.stages[1], ("kick syscall", 300.0));
    }

    #[test]
    fn off_marks_nothing_and_on_charges_every_lap_of_a_thread() {
        // Runs on its own thread: the switch is global, the counters are the thread's.
        std::thread::spawn(|| {
            mark(Stage::Targets);
            assert_eq!(THREAD.with(Counters::take), Tally::default());
            let cal = enable(None);
            assert!(cal.ticks_per_ns > 0.0 && cal.mark_ticks > 0.0, "{cal:?}");
            begin_thread(Role::Tx);
            for _ in 0..1000 {
                mark(Stage::Targets);
                std::hint::black_box((0..50u64).sum::<u64>());
                mark(Stage::Patch);
                call(Stage::Enqueue, Stage::Kick, || std::hint::black_box(1));
            }
            end_thread();
            disable();
            let t = take(Role::Tx);
            let charged = t.laps[Stage::Patch as usize] + t.dropped_laps;
            assert_eq!(charged, 1000);
            assert_eq!(t.laps[Stage::Kick as usize], 1000);
            assert!(t.ns(Stage::Patch, &cal).is_finite());
            assert_eq!(take(Role::Tx), Tally::default(), "take empties the totals");
        })
        .join()
        .unwrap();
    }
}
