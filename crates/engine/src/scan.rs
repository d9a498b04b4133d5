//! The scan mode: stateless probes. One pinned sender thread per queue walks its part of the
//! permutation and writes probes straight into its transmit ring; one receiver thread reads
//! the kernel-filtered replies, validates and classifies them with the probe module, drops
//! duplicates and writes rows; the calling thread shows the status line.
//!
//! Where a packet is built: `sonde_scan::probe` (`Probe::write`); sent: [`Sender::run`];
//! received: [`Receiver::run`] (timed by `arrival`); classified: `Probe::classify`, then
//! [`Receiver::handle`].

use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;
use sonde_io::{AnyRx, AnyTx, BackendKind, FrameTx, LinkCounters, LinkDrops};
use sonde_meter::metrics::Page;
use sonde_meter::output_file::IfExists;
use sonde_meter::stages::{self, Role, Stage};
use sonde_meter::{peak_rss_bytes, Counter, CpuTimes, Stopwatch};
use sonde_scan::dedup::Dedup;
use sonde_scan::output::{OutputFilter, RowWriter};
use sonde_scan::probe::{tcp_ack_number, ModuleKind, Probe, ProbeSetup, RstTemplate, Verdict};

use crate::checkpoint::{Checkpoint, ThreadCheckpoint};
use crate::feed::Feed;
use crate::pace::Pacer;
use crate::plan::{pin_to_cpu, RunPlan};
use crate::queues::{open_queues, ReplyFilter};
use crate::status::{per_second, to_stderr, Phase, StatusLine, StatusSource, Tick};
use crate::stop::{Stop, StopReason};

pub mod outran;
use outran::{ByTime, Outran};

/// A scan, ready to run.
pub struct ScanPlan {
    pub run: RunPlan,
    pub probe: Probe,
    /// What the probe was built from (the RST template needs it too).
    pub setup: ProbeSetup,
    pub filter: OutputFilter,
}

/// Counters the threads share with the status line.
#[derive(Default)]
pub struct Counts {
    pub sent: Counter,
    pub received: Counter,
    pub valid: Counter,
    pub invalid: Counter,
    pub hits: Counter,
    pub repeats: Counter,
    pub drops: Counter,
    /// Later IP fragments of replies (they carry no ports, so cannot be validated).
    pub fragments: Counter,
    /// CPU time of the sender threads and of the receiver thread, user and system, in ns:
    /// what each stage costs on its own.
    pub sender_user_ns: Counter,
    pub sender_sys_ns: Counter,
    pub receiver_user_ns: Counter,
    pub receiver_sys_ns: Counter,
    /// When sending began, µs of the run's clock (unset before): the origin of the senders'
    /// and the receiver's counts by send time. Both are taken on that one clock (a probe
    /// carries its sender's reading), so an answer is counted in its probe's bucket exactly.
    pub send_origin_us: OnceLock<u64>,
    /// The probes sent by time since then, each sender's added as it ends (see `outran`).
    pub sent_by_time: Mutex<ByTime>,
}

impl Counts {
    fn add_cpu(user: &Counter, sys: &Counter, start: CpuTimes) {
        let spent = CpuTimes::thread_now().since(&start);
        user.add(spent.user.as_nanos() as u64);
        sys.add(spent.system.as_nanos() as u64);
    }
}

/// What a scan reports at the end (`--summary-json`).
#[derive(Serialize, Clone, Debug)]
pub struct ScanSummary {
    pub targets: u64,
    pub sent: u64,
    pub wall_s: f64,
    pub send_wall_s: f64,
    pub pps: f64,
    pub received: u64,
    pub valid: u64,
    pub invalid: u64,
    pub hits: u64,
    pub repeats: u64,
    pub drops: u64,
    pub fragments: u64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// Per stage: the sender threads' CPU per probe sent, and the receiver thread's per reply
    /// received (user and system, ns).
    pub sender_user_ns_per_probe: f64,
    pub sender_sys_ns_per_probe: f64,
    pub receiver_user_ns_per_reply: f64,
    pub receiver_sys_ns_per_reply: f64,
    pub peak_rss_bytes: u64,
    pub dedup_reserved_bytes: u64,
    pub interrupted: bool,
    pub module: String,
    pub backend: String,
    pub rx_backend: String,
    pub rate_target_pps: f64,
    /// Where the checkpoint went, when the scan was interrupted.
    pub checkpoint: Option<String>,
    /// The scanner's interface, and what it dropped itself during the run, by its own
    /// counters (deltas; all of its traffic, not only the scan's; null where they could not
    /// be read).
    pub iface: String,
    pub iface_tx_dropped: Option<u64>,
    pub iface_rx_dropped: Option<u64>,
    pub iface_rx_missed_errors: Option<u64>,
    pub iface_rx_fifo_errors: Option<u64>,
    /// One line naming the cause of every loss counted (the path outrun, sonde's receive
    /// drops and the interface's), and what to do; null when nothing was lost.
    pub losses: Option<String>,
    /// When the share of probes answered fell while sending (see `scan::outran`): the shares
    /// and round trips early and late, the rate sent and the rate the path carried.
    pub outran: Option<Outran>,
}

/// Runs the scan until every target is probed (or `stop`), then receives for the cooldown,
/// writes every row to `writer` and finishes it.
///
/// On every way out the output is finished (as far as the disk allows) and, when targets are
/// left, the checkpoint counts only what the output holds: when the rows could not all be
/// written, the senders' positions as they stood a cooldown before the output last held every
/// row (see [`Progress`]). A failure is returned after that, naming the checkpoint.
pub fn run(
    plan: ScanPlan,
    writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<ScanSummary> {
    let plan = Arc::new(plan);
    let counts = Arc::new(Counts::default());
    // One clock for senders and receiver: a probe carries the sender's reading and its reply
    // is compared with the receiver's, so any offset between two clocks would enter every RTT.
    let clock = Instant::now();
    let io = open_queues(&plan.run, &ReplyFilter::for_probe(&plan.run, &plan.probe))?;
    let receiver = Receiver::open(&plan, io.receivers, writer, counts.clone(), clock)?;
    let feeds = (0..plan.run.threads)
        .map(|t| Feed::open(&plan.run.feed_spec(), t, plan.run.resumed_thread(t)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let total: u64 = feeds.iter().map(Feed::left).sum();
    let watch = Stopwatch::start();
    let progress = Mutex::new(feeds.iter().map(Progress::start).collect::<Vec<_>>());
    let receiving = Stop::manual();
    let rx_thread = {
        let (receiving, stop) = (receiving.clone(), stop.clone());
        std::thread::spawn(move || receiver.run(&receiving, &stop))
    };
    // Opened here, in the namespace the run is in (a lab's scanner namespace), before sending.
    let link = LinkWatch::open(&plan.run.iface);
    let source = ScanStatus::new(counts.clone(), total, link);
    let mut status = StatusLine::new(
        source,
        plan.run.quiet,
        plan.run.status_file.as_deref(),
        IfExists::force(plan.run.overwrite),
    )?
    .publishing(plan.run.metrics.clone());
    let mut failure = Failure::default();
    let send_start = Instant::now();
    let _ = counts
        .send_origin_us
        .set(send_start.duration_since(clock).as_micros() as u64);
    let send_result = send(
        &plan,
        (clock, send_start),
        io.senders.into_iter().zip(feeds).collect(),
        stop,
        &counts,
        &progress,
        &mut status,
    );
    let send_wall = send_result
        .as_ref()
        .ok()
        .and_then(|ends| ends.iter().max().copied())
        .unwrap_or_else(Instant::now)
        .duration_since(send_start);
    failure.note(send_result);
    let reason = stop.reason();
    let interrupted = reason != StopReason::None;
    let progress = progress.into_inner().expect("checkpoint lock");
    let pps = counts.sent.get() as f64 / send_wall.as_secs_f64().max(1e-9);
    status.source_mut().send_ended(pps);
    if interrupted {
        status.source_mut().stopped_early();
        let (states, sent) = at_stop(&progress);
        failure.note(save_checkpoint(&plan, &states, sent, false, false));
    }
    if !matches!(reason, StopReason::ReceiverFailed | StopReason::Failed) {
        failure.note(cooldown(&plan, stop, &mut status));
    }
    // Replies received until now are with the writer.
    let received_until = Instant::now();
    receiving.set(StopReason::Signal);
    let rx = rx_thread.join().expect("receiver thread panicked");
    let rx_failed = rx.error.is_some();
    if let Some(e) = rx.error {
        // The checkpoint this failure writes is named below, with the error.
        let line = receiver_failure(&e, counts.sent.get(), total);
        failure.note::<()>(Err(e.context(line)));
    }
    let finished = rx.writer.finish().context("finishing the output");
    let all_written = !rx_failed && finished.is_ok();
    failure.note(finished);
    // The last line reads the interface's counters once more; the summary takes that reading.
    failure.note(status.tick(Phase::Done, true));
    let link = status.source().link_seen;
    let resumed = plan.run.resume.is_some();
    let (states, sent) = match rx.durable {
        // A failure skipped the cooldown: the last probes' replies had no time to come.
        _ if all_written && reason == StopReason::Failed => {
            before(&progress, received_until, plan.run.cooldown)
        }
        _ if all_written => at_stop(&progress),
        Some(at) => before(&progress, at, plan.run.cooldown),
        None => at_start(&progress),
    };
    let checkpoint = if interrupted || failure.is_some() || !all_written {
        failure.note(save_checkpoint(&plan, &states, sent, true, false));
        Some(plan.run.checkpoint.display().to_string())
    } else {
        if resumed {
            failure.note(mark_complete(&plan, &states, sent));
        }
        None
    };
    if let Some(e) = failure.take() {
        return Err(e.context(format!("checkpoint: {}", plan.run.checkpoint.display())));
    }
    let cpu = watch.cpu();
    let outran = match counts.sent_by_time.lock() {
        Ok(sent) => outran::judge(&sent, &rx.answers),
        Err(_) => None,
    };
    let losses = loss_line(
        counts.drops.get(),
        &plan.run.iface,
        link.as_ref(),
        plan.run.backend,
    );
    Ok(ScanSummary {
        targets: plan.run.space.len(),
        sent: counts.sent.get(),
        wall_s: watch.wall().as_secs_f64(),
        send_wall_s: send_wall.as_secs_f64(),
        pps,
        received: counts.received.get(),
        valid: counts.valid.get(),
        invalid: counts.invalid.get(),
        hits: counts.hits.get(),
        repeats: counts.repeats.get(),
        drops: counts.drops.get(),
        fragments: counts.fragments.get(),
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        sender_user_ns_per_probe: per(counts.sender_user_ns.get(), counts.sent.get()),
        sender_sys_ns_per_probe: per(counts.sender_sys_ns.get(), counts.sent.get()),
        receiver_user_ns_per_reply: per(counts.receiver_user_ns.get(), counts.received.get()),
        receiver_sys_ns_per_reply: per(counts.receiver_sys_ns.get(), counts.received.get()),
        peak_rss_bytes: peak_rss_bytes(),
        dedup_reserved_bytes: rx.dedup.reserved_bytes(),
        interrupted,
        module: plan.probe.name().into(),
        backend: plan.run.backend.name().into(),
        rx_backend: plan.run.rx_backend.name().into(),
        rate_target_pps: plan.run.rate,
        checkpoint,
        iface: plan.run.iface.clone(),
        iface_tx_dropped: link.map(|l| l.tx_dropped),
        iface_rx_dropped: link.map(|l| l.rx_dropped),
        iface_rx_missed_errors: link.map(|l| l.rx_missed_errors),
        iface_rx_fifo_errors: link.map(|l| l.rx_fifo_errors),
        losses: with_outran(losses, outran.as_ref().map(outran::outran_text)),
        outran,
    })
}

/// The first error of a run that goes on to finish what it can.
#[derive(Default)]
struct Failure(Option<anyhow::Error>);

impl Failure {
    /// Keeps `result`'s error if it is the first.
    fn note<T>(&mut self, result: anyhow::Result<T>) {
        if let Err(e) = result {
            self.0.get_or_insert(e);
        }
    }

    fn is_some(&self) -> bool {
        self.0.is_some()
    }

    fn take(&mut self) -> Option<anyhow::Error> {
        self.0.take()
    }
}

/// Where one sender stood as the run went: at its start, now and then while sending (every
/// [`SNAPSHOT_EVERY`], as far back as a checkpoint may need to go), and at its stop. Each with
/// the probes it had sent by then.
#[derive(Clone)]
struct Progress {
    start: ThreadCheckpoint,
    snapshots: std::collections::VecDeque<(Instant, ThreadCheckpoint, u64)>,
    stop: Option<(Instant, ThreadCheckpoint, u64)>,
}

/// How often a sender notes where it stands.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);
/// How far back, beyond the cooldown, a sender's snapshots are kept: the output's last known
/// good moment is at most a flush interval and the time to stop before the end.
const SNAPSHOTS_KEPT: Duration = Duration::from_secs(10);

impl Progress {
    fn start(feed: &Feed) -> Progress {
        Progress {
            start: feed.checkpoint(),
            snapshots: std::collections::VecDeque::new(),
            stop: None,
        }
    }

    /// Notes where `feed` stands at `now` (`sent` probes so far), and forgets snapshots no
    /// checkpoint can need any more: all but the newest one older than the cooldown and
    /// [`SNAPSHOTS_KEPT`].
    fn snapshot(&mut self, now: Instant, feed: &Feed, sent: u64, cooldown: Duration) {
        self.snapshots.push_back((now, feed.checkpoint(), sent));
        let horizon = now.checked_sub(cooldown + SNAPSHOTS_KEPT);
        while let Some(horizon) = horizon {
            match self.snapshots.get(1) {
                Some((at, _, _)) if *at <= horizon => self.snapshots.pop_front(),
                _ => break,
            };
        }
    }
}

/// Each sender's position where it stopped, and the probes sent.
fn at_stop(progress: &[Progress]) -> (Vec<ThreadCheckpoint>, u64) {
    let stops = progress.iter().filter_map(|p| p.stop.clone());
    let (states, sent): (Vec<_>, Vec<_>) = stops.map(|(_, state, n)| (state, n)).unzip();
    (states, sent.iter().sum())
}

/// Each sender's position when the run began (nothing of this run is known to be written).
fn at_start(progress: &[Progress]) -> (Vec<ThreadCheckpoint>, u64) {
    (progress.iter().map(|p| p.start.clone()).collect(), 0)
}

/// Each sender's position `cooldown` seconds before `durable`, when the output last held every
/// row: every probe sent by then had its whole cooldown of replies written.
fn before(progress: &[Progress], durable: Instant, cooldown: f64) -> (Vec<ThreadCheckpoint>, u64) {
    let until = durable.checked_sub(Duration::from_secs_f64(cooldown));
    let mut sent = 0;
    let states = progress
        .iter()
        .map(|p| {
            let newest = p
                .stop
                .iter()
                .chain(p.snapshots.iter().rev())
                .find(|(at, _, _)| until.is_some_and(|u| *at <= u));
            match newest {
                Some((_, state, n)) => {
                    sent += n;
                    state.clone()
                }
                None => p.start.clone(),
            }
        })
        .collect();
    (states, sent)
}
/// The scanner interface's own loss counters, and their reading when the run began.
pub(crate) struct LinkWatch {
    counters: LinkCounters,
    start: LinkDrops,
}

impl LinkWatch {
    /// None if the interface's counters cannot be read (the summary then says null).
    pub(crate) fn open(iface: &str) -> Option<LinkWatch> {
        let mut counters = LinkCounters::open(iface).ok()?;
        let start = counters.read().ok()?;
        Some(LinkWatch { counters, start })
    }

    /// What the interface dropped since the run began (one netlink round trip).
    pub(crate) fn since_start(&mut self) -> Option<LinkDrops> {
        Some(self.counters.read().ok()?.since(&self.start))
    }
}

/// One line naming the cause of every loss seen, with what to do about it; None when no
/// counter moved. `drops` are sonde's receive drops; `link` what interface `iface` dropped
/// itself; `backend` sent the probes.
pub(crate) fn loss_line(
    drops: u64,
    iface: &str,
    link: Option<&LinkDrops>,
    backend: BackendKind,
) -> Option<String> {
    let mut causes = Vec::new();
    let l = link.copied().unwrap_or_default();
    if l.tx_dropped > 0 {
        let tries = match backend {
            // tpacket_snd hands a frame the device dropped back to the ring as still to
            // send, and tries it again.
            BackendKind::Ring => {
                ", and the packet ring sends such a frame again, so some count repeated tries"
            }
            _ => "",
        };
        causes.push(format!(
            "{iface} dropped {} probes on the way out (tx_dropped): the targets' side or the link could not take them that fast{tries}; lower -r or use fewer --threads",
            l.tx_dropped
        ));
    }
    if l.rx_dropped > 0 {
        causes.push(format!(
            "{iface} dropped {} frames on the way in (rx_dropped): the kernel's receive backlog was full (or no one wanted them), so replies came faster than this host took them in; lower -r",
            l.rx_dropped
        ));
    }
    if l.rx_missed_errors + l.rx_fifo_errors > 0 {
        causes.push(format!(
            "{iface}'s NIC missed {} frames on the way in (rx_missed_errors {}, rx_fifo_errors {}): its receive ring was full; lower -r, or receive on more queues",
            l.rx_missed_errors + l.rx_fifo_errors,
            l.rx_missed_errors,
            l.rx_fifo_errors
        ));
    }
    if drops > 0 {
        causes.push(format!(
            "sonde's receiver dropped {drops} replies (its ring was full: it fell behind); lower -r"
        ));
    }
    (!causes.is_empty()).then(|| format!("lost: {}", causes.join("; also ")))
}

/// The loss line with the path's word first, when it was outrun.
pub(crate) fn with_outran(line: Option<String>, outran: Option<String>) -> Option<String> {
    match (outran, line) {
        (None, line) => line,
        (Some(o), None) => Some(format!("lost: {o}")),
        (Some(o), Some(l)) => Some(format!(
            "lost: {o}; also {}",
            l.trim_start_matches("lost: ")
        )),
    }
}

fn per(ns: u64, n: u64) -> f64 {
    ns as f64 / n.max(1) as f64
}

/// Runs the sender threads, one per (queue, feed) lane, to the end (or the stop), ticking the
/// status line meanwhile; returns when each sender finished. `clock` is the receiver's.
fn send(
    plan: &ScanPlan,
    (clock, send_start): (Instant, Instant),
    lanes: Vec<(AnyTx, Feed)>,
    stop: &Stop,
    counts: &Counts,
    progress: &Mutex<Vec<Progress>>,
    status: &mut StatusLine<ScanStatus>,
) -> anyhow::Result<Vec<Instant>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(t, (tx, feed))| {
                scope.spawn(move || {
                    let mut sender = Sender {
                        plan,
                        tx,
                        feed,
                        clock,
                        pacer: Pacer::new(
                            plan.run.rate / f64::from(plan.run.threads),
                            plan.run.batch,
                        ),
                        sent: 0,
                        origin_us: send_start.duration_since(clock).as_micros() as u64,
                        by_time: ByTime::default(),
                    };
                    let start = CpuTimes::thread_now();
                    stages::begin_thread(Role::Tx);
                    let result = sender.run(t, stop, &counts.sent, progress);
                    stages::end_thread();
                    Counts::add_cpu(&counts.sender_user_ns, &counts.sender_sys_ns, start);
                    let end = (Instant::now(), sender.feed.checkpoint(), sender.sent);
                    progress.lock().expect("checkpoint lock")[t].stop = Some(end);
                    if let Ok(mut all) = counts.sent_by_time.lock() {
                        all.merge(&sender.by_time);
                    }
                    if result.is_err() {
                        // The other senders stop too: the run ends here.
                        stop.set(StopReason::Failed);
                    }
                    result.map(|()| Instant::now())
                })
            })
            .collect();
        let mut status_error = None;
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            let done = status.source().done_fraction();
            if status_error.is_none() {
                if let Err(e) = status.tick(Phase::Sending { done }, false) {
                    stop.set(StopReason::Failed);
                    status_error = Some(e.context("writing the status file"));
                }
            }
        }
        let ends = handles
            .into_iter()
            .map(|h| h.join().expect("sender thread panicked"))
            .collect::<anyhow::Result<Vec<Instant>>>();
        match status_error {
            Some(e) => Err(e),
            None => ends,
        }
    })
}

/// One sender thread: its feed, its queue, its pace.
struct Sender<'a> {
    plan: &'a ScanPlan,
    tx: AnyTx,
    feed: Feed,
    clock: Instant,
    pacer: Pacer,
    /// Probes this sender has sent.
    sent: u64,
    /// When sending began, µs of `clock`, and the probes sent by time since (see `outran`).
    origin_us: u64,
    by_time: ByTime,
}

impl Sender<'_> {
    fn run(
        &mut self,
        thread: usize,
        stop: &Stop,
        sent: &Counter,
        progress: &Mutex<Vec<Progress>>,
    ) -> anyhow::Result<()> {
        pin_to_cpu(self.plan.run.sender_cpu(thread));
        Pacer::tighten_timers();
        let cooldown = Duration::from_secs_f64(self.plan.run.cooldown);
        let mut noted = Instant::now();
        loop {
            let now = Instant::now();
            if now.duration_since(noted) >= SNAPSHOT_EVERY {
                noted = now;
                if let Ok(mut progress) = progress.lock() {
                    progress[thread].snapshot(now, &self.feed, self.sent, cooldown);
                }
            }
            if !self.pacer.wait(stop.flag()) {
                break;
            }
            stages::mark(Stage::Pacing);
            self.feed.fill(self.pacer.burst());
            stages::mark(Stage::Targets);
            if self.feed.pending().is_empty() {
                break;
            }
            let elapsed_us = self.clock.elapsed().as_micros() as u64;
            let now_us = elapsed_us as u32;
            let (space, probe, pending) =
                (&self.plan.run.space, &self.plan.probe, self.feed.pending());
            let n = self.tx.tx_batch(pending.len(), |i, buf| {
                // `sonde profile`: what came since the last mark is the backend's work.
                stages::mark(Stage::Enqueue);
                let (addr, port) = space.target_at(pending[i]);
                stages::mark(Stage::Targets);
                probe.write(buf, addr, port, now_us)
            })?;
            self.feed.accept(n);
            self.by_time
                .sent(elapsed_us.saturating_sub(self.origin_us), n as u64);
            self.pacer.charge(n);
            sent.add(n as u64);
            self.sent += n as u64;
        }
        self.pacer.finish(stop.flag());
        self.tx.flush()?;
        Ok(())
    }
}

/// Keeps receiving for the cooldown; a second Ctrl-C ends it early.
fn cooldown(
    plan: &ScanPlan,
    stop: &Stop,
    status: &mut StatusLine<ScanStatus>,
) -> anyhow::Result<()> {
    let interrupted = stop.is_set();
    stop.rearm();
    let until = Instant::now() + Duration::from_secs_f64(plan.run.cooldown);
    if interrupted && !plan.run.quiet {
        to_stderr(format_args!(
            "scan: sending stopped; receiving for {:.0} s more (Ctrl-C again to stop now)",
            plan.run.cooldown
        ));
    }
    while Instant::now() < until && !stop.is_set() {
        std::thread::sleep(Duration::from_millis(50));
        status.tick(Phase::Cooldown { until }, false)?;
    }
    Ok(())
}

/// What a failed receiver did to the run, in one true line: why (the output's reader went
/// away, or another failure), whether every probe had been sent or where sending stopped, and
/// the checkpoint when one was written.
fn receiver_failure(error: &anyhow::Error, sent: u64, total: u64) -> String {
    let broken_pipe = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    let why = if broken_pipe {
        "the output's reader went away (broken pipe)"
    } else {
        "the receiver failed"
    };
    if sent >= total {
        format!("{why}; all {sent} probes had been sent")
    } else {
        format!("{why}, so sending stopped after {sent} of {total} probes")
    }
}

fn save_checkpoint(
    plan: &ScanPlan,
    threads: &[ThreadCheckpoint],
    sent: u64,
    receiving_done: bool,
    complete: bool,
) -> anyhow::Result<()> {
    checkpoint(plan, threads, sent, receiving_done, complete).save(&plan.run.checkpoint)
}

fn checkpoint(
    plan: &ScanPlan,
    threads: &[ThreadCheckpoint],
    sent: u64,
    receiving_done: bool,
    complete: bool,
) -> Checkpoint {
    Checkpoint {
        tool: "scan".into(),
        seed: plan.run.seed,
        key: plan.run.key,
        module: plan.probe.name().into(),
        targets: plan.run.space.len(),
        shard: plan.run.shard,
        probes: plan.run.probes,
        sent: plan.run.sent_before() + sent,
        threads: threads.to_vec(),
        receiving_done,
        complete,
    }
}

/// A resumed run went to its end: its checkpoint (and the one it resumed, when that is another
/// file) says so, and is never resumed again.
fn mark_complete(plan: &ScanPlan, threads: &[ThreadCheckpoint], sent: u64) -> anyhow::Result<()> {
    let done = checkpoint(plan, threads, sent, true, true);
    crate::checkpoint::save_complete(
        &done,
        &plan.run.checkpoint,
        plan.run.resumed_from.as_deref(),
    )
}

/// The receiving side: kernel-filtered frames in, validated rows out.
struct Receiver {
    rxs: Vec<AnyRx>,
    /// The RSTs for SYN-ACKs the kernel does not see (or whose source it does not own).
    rst: Option<(AnyTx, RstTemplate)>,
    plan: Arc<ScanPlan>,
    writer: Box<dyn RowWriter + Send>,
    dedup: Dedup,
    counts: Arc<Counts>,
    clock: Instant,
    resets: Vec<(IpAddr, u16, u16, u32)>,
    /// When the receivers' drop counters were last read (a system call for AF_XDP).
    drops_read: Instant,
    /// A text output's rows go to the file every [`FLUSH_EVERY`], so the run knows when the
    /// file last held every row so far; a parquet file is whole only once finished (None).
    flushed: Option<Instant>,
    /// First answers by when their probes left (see `outran`).
    answers: ByTime,
}

/// How often the receivers' drop counters are read.
const DROPS_EVERY: Duration = Duration::from_millis(100);
/// How often a text output's rows are handed to the file (one write a second).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What the receiving thread hands back: the writer (to be finished, whatever happened), the
/// dedup table, its error if it failed, and when the output last held every row received
/// (None: not known, as for a parquet file before its footer).
struct RxEnd {
    writer: Box<dyn RowWriter + Send>,
    dedup: Dedup,
    error: Option<anyhow::Error>,
    durable: Option<Instant>,
    answers: ByTime,
}

impl Receiver {
    fn open(
        plan: &Arc<ScanPlan>,
        rxs: Vec<AnyRx>,
        writer: Box<dyn RowWriter + Send>,
        counts: Arc<Counts>,
        clock: Instant,
    ) -> anyhow::Result<Receiver> {
        // When the source address is the host's own and the kernel sees the SYN-ACKs, it resets
        // them itself; behind the XDP reply filter it never sees them, so sonde must.
        let run = &plan.run;
        let kernel_resets = run.source_is_local && run.rx_backend != BackendKind::Xdp;
        let rst = match plan.probe.kind() {
            ModuleKind::TcpSyn if !kernel_resets => Some((
                AnyTx::open(BackendKind::Mmsg, &run.io_config(0))?,
                RstTemplate::new(&plan.setup),
            )),
            _ => None,
        };
        // Text rows can be handed to the file at any time; parquet's would each be a row group.
        let flushed = writer.renderer().map(|_| Instant::now());
        Ok(Receiver {
            rxs,
            rst,
            plan: plan.clone(),
            writer,
            dedup: Dedup::for_space(&run.space),
            counts,
            clock,
            resets: Vec::with_capacity(256),
            drops_read: Instant::now(),
            flushed,
            answers: ByTime::default(),
        })
    }

    /// Receives until `receiving` is set. A failure (e.g. the output cannot be written) stops
    /// the senders at once through `stop` and is handed back with the writer.
    fn run(mut self, receiving: &Stop, stop: &Stop) -> RxEnd {
        self.plan.run.confine_receiver();
        let start = CpuTimes::thread_now();
        stages::begin_thread(Role::Rx);
        let mut error = None;
        while !receiving.is_set() {
            if let Err(e) = self.pass().and_then(|()| self.flush_now_and_then()) {
                stop.set(StopReason::ReceiverFailed);
                error = Some(e);
                break;
            }
        }
        stages::end_thread();
        let counts = &self.counts;
        Counts::add_cpu(&counts.receiver_user_ns, &counts.receiver_sys_ns, start);
        let drops: u64 = self.rxs.iter_mut().map(AnyRx::take_drops).sum();
        self.counts.drops.add(drops);
        if error.is_none() {
            error = self.writer.flush_rows().err();
        }
        RxEnd {
            writer: self.writer,
            dedup: self.dedup,
            error,
            durable: self.flushed,
            answers: self.answers,
        }
    }

    /// Hands a text output's rows to the file once [`FLUSH_EVERY`] has passed, and notes when
    /// it did: every row received before then is in the file.
    fn flush_now_and_then(&mut self) -> anyhow::Result<()> {
        let Some(last) = self.flushed else {
            return Ok(());
        };
        if last.elapsed() < FLUSH_EVERY {
            return Ok(());
        }
        let now = Instant::now();
        self.writer.flush_rows()?;
        self.flushed = Some(now);
        Ok(())
    }

    /// One batch from the receivers (waiting up to 50 ms for it), handled.
    fn pass(&mut self) -> anyhow::Result<()> {
        // Clocks are read once per receiver's batch, when its first frame is handed over: not
        // before the wait for it, nor before another receiver's batch was taken, either of
        // which would date replies before their probes. A frame the kernel stamped on arrival
        // is timed by its stamp instead (see `arrival`).
        let mut stamp: Option<(usize, u64, u64)> = None;
        let mut error = None;
        let clock = self.clock;
        let Receiver {
            rxs,
            plan,
            writer,
            dedup,
            counts,
            resets,
            rst,
            answers,
            ..
        } = self;
        let mut handler = Handler {
            plan,
            writer: writer.as_mut(),
            dedup,
            resets,
            reset_synacks: rst.is_some(),
            answers,
            send_origin_us: counts.send_origin_us.get().copied(),
            counts,
        };
        let wait = Duration::from_millis(50);
        let handled = sonde_io::rx_many_stamped(rxs, 256, wait, |queue, frame, kernel_ns| {
            // `sonde profile`: what came since the last mark is the backend's work.
            stages::mark(Stage::Poll);
            let (_, now_us, now_epoch_ns) = match stamp {
                Some(s) if s.0 == queue => s,
                _ => *stamp.insert(read_clocks(queue, clock)),
            };
            let (at_us, epoch_us) = arrival(now_us, now_epoch_ns, kernel_ns);
            stages::mark(Stage::Timestamp);
            if let Err(e) = handler.handle(frame, at_us, epoch_us) {
                error.get_or_insert(e);
            }
        })?;
        if let Some(e) = error {
            return Err(e);
        }
        if handled > 0 {
            // Rows to a pipe leave now, one write per batch (a file's stay buffered).
            self.writer.end_batch()?;
        }
        self.counts.received.add(handled as u64);
        self.send_resets()?;
        if self.drops_read.elapsed() >= DROPS_EVERY {
            self.drops_read = Instant::now();
            let drops: u64 = self.rxs.iter_mut().map(AnyRx::take_drops).sum();
            self.counts.drops.add(drops);
        }
        Ok(())
    }

    fn send_resets(&mut self) -> anyhow::Result<()> {
        let Some((tx, template)) = &mut self.rst else {
            return Ok(());
        };
        let resets = &self.resets;
        let mut done = 0;
        while done < resets.len() {
            done += tx.tx_batch(resets.len() - done, |i, buf| {
                let (target, port, sport, seq) = resets[done + i];
                template.write(buf, target, port, sport, seq)
            })?;
        }
        self.resets.clear();
        Ok(())
    }
}

/// The batch of receiver `queue`: the senders' clock (µs) and the wall clock (ns since the
/// Unix epoch), read now.
fn read_clocks(queue: usize, clock: Instant) -> (usize, u64, u64) {
    let epoch_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (queue, clock.elapsed().as_micros() as u64, epoch_ns)
}

/// When a frame arrived, on the run's clock (µs since it began; probes carry its low 32 bits)
/// and in µs since the Unix epoch, from the batch's readings of both clocks (`now_us`,
/// `now_epoch_ns`) and the kernel's arrival stamp, if any (ns since the epoch). A packet ring hands frames over a block
/// at a time, up to a few milliseconds after they arrived: without its stamp every RTT would
/// carry that wait. A stamp from the future or more than a second old (the wall clock was set
/// meanwhile) is not trusted: then the batch's reading counts.
fn arrival(now_us: u64, now_epoch_ns: u64, kernel_ns: Option<u64>) -> (u64, u64) {
    match crate::arrival::stamp_age_us(now_epoch_ns, kernel_ns) {
        Some(age_us) => (now_us.saturating_sub(age_us), now_epoch_ns / 1000 - age_us),
        None => (now_us, now_epoch_ns / 1000),
    }
}

/// What handling one frame needs, borrowed from the receiver for one batch.
struct Handler<'a> {
    plan: &'a ScanPlan,
    writer: &'a mut dyn RowWriter,
    dedup: &'a mut Dedup,
    counts: &'a Counts,
    resets: &'a mut Vec<(IpAddr, u16, u16, u32)>,
    reset_synacks: bool,
    answers: &'a mut ByTime,
    /// When sending began, µs of the run's clock (None: not yet).
    send_origin_us: Option<u64>,
}

impl Handler<'_> {
    /// One received frame: validate and classify, check it answers a target of this scan,
    /// count, deduplicate, reset a SYN-ACK, write.
    fn handle(&mut self, frame: &[u8], now_us: u64, epoch_us: u64) -> anyhow::Result<()> {
        // Probes carry the clock's low 32 bits.
        let verdict = self.plan.probe.classify(frame, now_us as u32);
        stages::mark(Stage::Validate);
        let mut reply = match verdict {
            Verdict::NotOurs => return Ok(()),
            Verdict::Fragment => {
                self.counts.fragments.add(1);
                return Ok(());
            }
            Verdict::Invalid => {
                self.counts.invalid.add(1);
                return Ok(());
            }
            Verdict::Valid(r) => r,
        };
        // A reply validates against the key, but only a target of this scan can send one.
        let index = self.plan.run.space.index_of(reply.saddr, reply.sport);
        stages::mark(Stage::Validate);
        let Some(index) = index else {
            self.counts.invalid.add(1);
            return Ok(());
        };
        self.counts.valid.add(1);
        reply.timestamp_us = epoch_us;
        reply.repeat = self.dedup.check_and_insert(index);
        stages::mark(Stage::Dedup);
        if reply.repeat {
            self.counts.repeats.add(1);
        } else if reply.success {
            self.counts.hits.add(1);
        }
        if let (false, Some(rtt), Some(origin)) = (reply.repeat, reply.rtt_us, self.send_origin_us)
        {
            if let Some(sent_us) = outran::sent_since(origin, now_us, rtt) {
                self.answers.answer(sent_us, rtt);
            }
        }
        if self.reset_synacks && reply.classification == "synack" && !reply.repeat {
            if let Some(ack) = tcp_ack_number(frame) {
                self.resets
                    .push((reply.saddr, reply.sport, reply.dport, ack));
            }
        }
        if self.plan.filter.matches(&reply) {
            self.writer.write(&reply)?;
        }
        stages::mark(Stage::Output);
        Ok(())
    }
}

/// The status line's word on the interface's own drops: nothing while there are none.
fn link_drops_text(link: Option<&LinkDrops>) -> String {
    match link {
        Some(l) if l.tx_dropped + l.rx_total() > 0 => {
            format!(", interface out {}, in {}", l.tx_dropped, l.rx_total())
        }
        _ => String::new(),
    }
}

/// The scan's part of the status line: send and receive rates, validation, drops (sonde's
/// and, once there are any, the interface's own), hit rate.
struct ScanStatus {
    counts: Arc<Counts>,
    total: u64,
    last_sent: u64,
    last_received: u64,
    send_rate: f64,
    /// The send phase's rate over its exact duration, once it has ended.
    final_pps: Option<f64>,
    /// The interface's own counters, read at every tick, and what they had added at the last.
    link: Option<LinkWatch>,
    link_seen: Option<LinkDrops>,
    /// Sending stopped before every probe was sent.
    stopped: bool,
}

impl ScanStatus {
    fn new(counts: Arc<Counts>, total: u64, link: Option<LinkWatch>) -> ScanStatus {
        ScanStatus {
            counts,
            total,
            last_sent: 0,
            last_received: 0,
            send_rate: 0.0,
            final_pps: None,
            link_seen: link.as_ref().map(|_| LinkDrops::default()),
            link,
            stopped: false,
        }
    }

    fn done_fraction(&self) -> f64 {
        if self.total == 0 {
            1.0
        } else {
            self.counts.sent.get() as f64 / self.total as f64
        }
    }

    fn send_ended(&mut self, pps: f64) {
        self.final_pps = Some(pps);
    }

    /// Sending stopped before the end (a signal, a failure): the last lines say how far it got.
    fn stopped_early(&mut self) {
        self.stopped = true;
    }
}

impl StatusSource for ScanStatus {
    fn csv_header(&self) -> &'static str {
        "sent,send_pps,received,recv_pps,valid,invalid,hits,repeats,drops,fragments,iface_tx_dropped,iface_rx_dropped,iface_rx_missed_errors,iface_rx_fifo_errors"
    }

    fn sample(&mut self, tick: &Tick) -> (String, String) {
        if let Some(now) = self.link.as_mut().and_then(LinkWatch::since_start) {
            self.link_seen = Some(now);
        }
        let c = &self.counts;
        let (sent, received) = (c.sent.get(), c.received.get());
        self.send_rate = match self.final_pps {
            Some(pps) => pps,
            None => (sent - self.last_sent) as f64 / tick.dt,
        };
        let recv_rate = (received - self.last_received) as f64 / tick.dt;
        (self.last_sent, self.last_received) = (sent, received);
        let hit_rate = 100.0 * c.hits.get() as f64 / sent.max(1) as f64;
        let send_label = if self.final_pps.is_some() {
            "sent"
        } else {
            "send"
        };
        let text = format!(
            "{send_label} {sent} at {}; recv {received} at {}; valid {}, invalid {}; drops {}{}; hits {hit_rate:.2} %",
            per_second(self.send_rate, "p"),
            per_second(recv_rate, "p"),
            c.valid.get(),
            c.invalid.get(),
            c.drops.get(),
            link_drops_text(self.link_seen.as_ref()),
        );
        let link = |f: fn(&LinkDrops) -> u64| {
            self.link_seen
                .as_ref()
                .map_or(String::new(), |l| f(l).to_string())
        };
        let row = format!(
            "{sent},{:.0},{received},{recv_rate:.0},{},{},{},{},{},{},{},{},{},{}",
            self.send_rate,
            c.valid.get(),
            c.invalid.get(),
            c.hits.get(),
            c.repeats.get(),
            c.drops.get(),
            c.fragments.get(),
            link(|l| l.tx_dropped),
            link(|l| l.rx_dropped),
            link(|l| l.rx_missed_errors),
            link(|l| l.rx_fifo_errors),
        );
        (text, row)
    }

    fn seconds_left(&self) -> Option<f64> {
        let left = self.total.saturating_sub(self.counts.sent.get());
        (self.send_rate > 0.0).then(|| left as f64 / self.send_rate)
    }

    fn paced(&self) -> u64 {
        self.counts.sent.get()
    }

    fn share_done_at_end(&self) -> f64 {
        match self.stopped {
            true => self.done_fraction(),
            false => 1.0,
        }
    }

    fn metrics(&self, page: &mut Page) {
        let c = &self.counts;
        page.counter("sonde_sent_total", "Probes sent", c.sent.get());
        page.counter(
            "sonde_received_total",
            "Frames the receiver took (after the kernel's filter)",
            c.received.get(),
        );
        page.counter(
            "sonde_valid_total",
            "Replies that validated and answer a target of this scan",
            c.valid.get(),
        );
        page.counter(
            "sonde_invalid_total",
            "Replies that did not validate",
            c.invalid.get(),
        );
        page.counter(
            "sonde_hits_total",
            "Valid first replies that count as a success",
            c.hits.get(),
        );
        page.counter(
            "sonde_repeats_total",
            "Valid replies from a target that had answered already",
            c.repeats.get(),
        );
        page.counter(
            "sonde_fragments_total",
            "Later IP fragments of replies (not validated)",
            c.fragments.get(),
        );
        let l = self.link_seen.unwrap_or_default();
        page.counters(
            "sonde_drops_total",
            "Frames lost, by cause: sonde's receiver ring, the interface out and in (tx_dropped, rx_dropped), the NIC's ring (rx_missed_errors + rx_fifo_errors)",
            "cause",
            &[
                ("receiver", c.drops.get()),
                ("interface_out", l.tx_dropped),
                ("interface_in", l.rx_dropped),
                ("nic_missed", l.rx_missed_errors + l.rx_fifo_errors),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{arrival, link_drops_text, loss_line, receiver_failure};
    use sonde_io::{BackendKind, LinkDrops};

    /// A receiver that failed says why in words that are true: a reader that went away is
    /// named, a run that had sent everything does not say sending stopped, and a checkpoint is
    /// named only when one was written.
    #[test]
    fn a_failed_receiver_s_line_is_true() {
        let gone = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the output");
        let line = receiver_failure(&gone, 256, 256);
        assert_eq!(
            line,
            "the output's reader went away (broken pipe); all 256 probes had been sent"
        );
        let line = receiver_failure(&gone, 100, 256);
        assert!(
            line.contains("went away (broken pipe), so sending stopped after 100 of 256 probes"),
            "{line}"
        );
        let full = anyhow::anyhow!("No space left on device");
        let line = receiver_failure(&full, 256, 256);
        assert!(line.starts_with("the receiver failed;") && !line.contains("checkpoint"));
    }

    #[test]
    fn the_loss_line_names_each_cause_that_counted_and_nothing_else() {
        let xdp = BackendKind::Xdp;
        let none = LinkDrops::default();
        assert_eq!(loss_line(0, "sx0", Some(&none), xdp), None);
        assert_eq!(loss_line(0, "sx0", None, xdp), None, "unreadable counters");
        assert_eq!(
            link_drops_text(Some(&none)),
            "",
            "the status line stays short"
        );
        let out = LinkDrops {
            tx_dropped: 6113,
            ..none
        };
        let line = loss_line(0, "sx0", Some(&out), xdp).unwrap();
        assert!(
            line.contains("sx0 dropped 6113 probes on the way out (tx_dropped)"),
            "{line}"
        );
        assert!(line.contains("lower -r or use fewer --threads"), "{line}");
        assert!(
            !line.contains("on the way in") && !line.contains("receiver"),
            "{line}"
        );
        assert!(!line.contains("again"), "AF_XDP does not resend: {line}");
        let ring = loss_line(0, "sx0", Some(&out), BackendKind::Ring).unwrap();
        assert!(ring.contains("sends such a frame again"), "{ring}");
        assert_eq!(link_drops_text(Some(&out)), ", interface out 6113, in 0");

        let all = LinkDrops {
            tx_dropped: 1,
            rx_dropped: 562,
            rx_missed_errors: 3,
            rx_fifo_errors: 4,
        };
        let line = loss_line(9, "eth1", Some(&all), xdp).unwrap();
        for part in [
            "eth1 dropped 1 probes on the way out (tx_dropped)",
            "eth1 dropped 562 frames on the way in (rx_dropped)",
            "missed 7 frames on the way in (rx_missed_errors 3, rx_fifo_errors 4)",
            "sonde's receiver dropped 9 replies",
        ] {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert_eq!(link_drops_text(Some(&all)), ", interface out 1, in 569");
        let ours = loss_line(2, "sx0", None, xdp).unwrap();
        assert!(
            ours.contains("receiver dropped 2 replies") && !ours.contains("sx0"),
            "{ours}"
        );
    }

    #[test]
    fn a_kernel_stamp_dates_the_frame_back() {
        let now_epoch_ns = 1_700_000_000_000_000_000;
        // Stamped 3.5 ms before the batch was read: the frame arrived 3,500 µs earlier.
        let stamped = Some(now_epoch_ns - 3_500_000);
        assert_eq!(
            arrival(10_000, now_epoch_ns, stamped),
            (6_500, now_epoch_ns / 1000 - 3_500)
        );
        // A frame that came before the run's clock began answers none of its probes: it is
        // dated at the clock's start, not 2^64 µs on.
        assert_eq!(arrival(1_000, now_epoch_ns, stamped).0, 0);
        // No stamp, a stamp from the future, or one too old to trust: the batch's reading.
        let batch = (10_000, now_epoch_ns / 1000);
        assert_eq!(arrival(10_000, now_epoch_ns, None), batch);
        assert_eq!(arrival(10_000, now_epoch_ns, Some(now_epoch_ns + 1)), batch);
        assert_eq!(
            arrival(10_000, now_epoch_ns, Some(now_epoch_ns - 2_000_000_000)),
            batch
        );
    }
}
