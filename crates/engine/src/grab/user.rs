//! Grab over sonde's own TCP client. Each engine thread (`--threads N`, one by default, the
//! reference design's one core) owns its connections: its share of the targets, its own engine
//! on its own lane of source ports, its transmit queue and the receive queues given to it.
//! Each pass it receives, runs the timers, re-sends unanswered SYNs (statelessly: only the
//! target's index waits), opens new connections as the table has room and the pace allows,
//! and sends every segment of the pass in one batch. A reply that lands on another thread's
//! queue is handed to its owner without a lock ([`super::dispatch`]). The calling thread
//! keeps the status line, answers Ctrl-C, and adds the threads' figures up at the end.
//!
//! With AF_XDP (`xdp`), sonde's XDP program takes every segment to sonde's ports before the
//! kernel sees it, so this works on the host's own address; with a packet ring (`ring`), the
//! source must be an address the kernel does not own, and sonde answers ARP for it.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sonde_craft::cookie::PortLane;
use sonde_io::{AnyRx, AnyTx, FrameTx, RxChecksum};
use sonde_meter::output_file::IfExists;
use sonde_meter::{peak_rss_bytes, Stopwatch};
use sonde_scan::dedup::Dedup;
use sonde_scan::output::{RowRenderer, RowWriter};
use sonde_scan::reply::Value;
use sonde_tcp::{App, Engine, Outcome, ReplyCursor, Rx, Session, Stats, Status, SynRetries};
use sonde_wire::{arp, ethernet, EtherType, MacAddr};

use super::dispatch::Mailbox;
use super::marks::TargetMarks;
use super::outran::{self, AnswerCounts, Figures, RetriedSample};
use super::{
    success_rate, GrabApp, GrabCounts, GrabPlan, GrabRow, GrabStatus, GrabSummary, LoopStats,
};
use crate::checkpoint::{Checkpoint, ThreadCheckpoint};
use crate::feed::Feed;
use crate::pace::Pacer;
use crate::plan::pin_to_cpu;
use crate::queues::{open_queues, ReplyFilter};
use crate::status::{to_stderr, Phase, StatusLine};
use crate::stop::{Stop, StopReason};

/// How often the receivers' drop counters are read.
const DROPS_EVERY: Duration = Duration::from_millis(100);
/// The most frames a pass reads from each receiver.
const RX_BATCH: usize = 256;
/// The longest a pass waits for a frame when nothing else is due.
const MAX_WAIT: Duration = Duration::from_millis(100);
/// Waits shorter than this are spun through: falling asleep and waking up costs about as much.
const SPIN_BELOW: Duration = Duration::from_micros(50);
/// With receivers that stamp arrivals, frames wake a waiting loop at most this often, and new
/// SYNs leave in bursts of up to this much of the pace: at a modest pace every wake-up (a
/// context switch and a timer, tens of µs on a virtual machine) would otherwise cost more than
/// the frame it brings. Replies wait at most this long to be answered; their times come from
/// their stamps. (At `-r 1000` over nginx: 1 ms used 4.5-7 % of a core, 2 ms 2.7-3.8 %.)
const GATHER: Duration = Duration::from_millis(2);
/// How often the calling thread updates the status line and looks for Ctrl-C.
const STATUS_EVERY: Duration = Duration::from_millis(100);
/// At a second Ctrl-C, how long a thread may wait for room in its transmit ring to send the
/// open connections' RSTs.
const CLOSING_FOR: Duration = Duration::from_millis(200);
/// How often a text output's rows are handed to the file (one write a second).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// One engine thread's queues: its transmit queue and the receivers it reads.
pub struct GrabIo {
    pub tx: AnyTx,
    pub rxs: Vec<AnyRx>,
}

impl GrabIo {
    /// Opens the plan's queues on its interface, the receivers filtered to our segments (and
    /// ARP requests when we answer them): one [`GrabIo`] per thread. Thread `t` sends on queue
    /// `t` and reads the queues `q` with `q % threads == t` (over AF_XDP its own queue's pair;
    /// a packet ring's one receiver goes to the first thread).
    pub fn open<A: GrabApp>(plan: &GrabPlan<A>) -> anyhow::Result<Vec<GrabIo>> {
        let v4 = plan.run.space.ipv4_addresses() > 0;
        let v6 = plan.run.space.ipv6_addresses() > 0;
        let mut filter = ReplyFilter::for_tcp_client(&plan.run, v4, v6);
        if plan.arp_for.is_some() {
            filter.expr = format!("({}) or arp", filter.expr);
        }
        let queues = open_queues(&plan.run, &filter)?;
        let mut ios: Vec<GrabIo> = queues
            .senders
            .into_iter()
            .map(|tx| GrabIo {
                tx,
                rxs: Vec::new(),
            })
            .collect();
        anyhow::ensure!(!ios.is_empty(), "grab needs one transmit queue");
        let threads = ios.len();
        for (q, rx) in queues.receivers.into_iter().enumerate() {
            ios[q % threads].rxs.push(rx);
        }
        Ok(ios)
    }
}

/// Runs the grab to its end (or `stop`): every target ends as one row in `writer`.
pub fn run<A: GrabApp>(
    plan: GrabPlan<A>,
    writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<GrabSummary> {
    let ios = GrabIo::open(&plan)?;
    run_on(plan, ios, writer, stop)
}

/// What the threads share: the row writer (locked once per pass that ends connections, never
/// per frame), the phase the calling thread sets, one clock, and each thread's feed position
/// when it stopped opening connections (for the checkpoint).
struct Shared {
    writer: Mutex<Box<dyn RowWriter + Send>>,
    /// The targets of the text rows handed to the writer since it last flushed them to the
    /// file (every [`FLUSH_EVERY`]): if the output then fails, their rows may be lost, and
    /// the checkpoint puts them back. None for parquet, which is whole only once finished.
    unflushed: Option<Mutex<Vec<u64>>>,
    phase: AtomicU8,
    clock: Instant,
    drained: Mutex<Vec<Option<ThreadCheckpoint>>>,
    /// Each thread tells the calling thread when it has nothing left of its own to do, and
    /// when it ends.
    events: mpsc::Sender<ThreadEvent>,
    /// Set once every thread had nothing left to do: until then an idle thread keeps serving
    /// (a late reply to one of its ports still gets its RST while the run goes on).
    all_idle: AtomicBool,
    /// The threads' wake-ups, to end their waits when the phase changes.
    wakes: Vec<Arc<sonde_io::Wake>>,
}

enum ThreadEvent {
    Idle,
    Ended { failed: bool },
}

/// Open new connections; finish the open ones and open none; end every one now.
const RUN: u8 = 0;
const DRAIN: u8 = 1;
const ABORT: u8 = 2;

impl Shared {
    fn phase(&self) -> u8 {
        self.phase.load(Ordering::Relaxed)
    }

    /// Sets the phase, and wakes every sleeping thread to see it.
    fn set_phase(&self, phase: u8) {
        self.phase.store(phase, Ordering::Relaxed);
        self.wake_all();
    }

    /// Every thread had nothing left to do: they end (woken to see it).
    fn end_all_idle(&self) {
        self.all_idle.store(true, Ordering::Relaxed);
        self.wake_all();
    }

    fn wake_all(&self) {
        for wake in &self.wakes {
            wake.notify();
        }
    }

    /// Hands a text output's rows to the file: the targets of the rows written so far are
    /// then safe.
    fn flush_text_rows(&self) -> anyhow::Result<()> {
        let Some(unflushed) = &self.unflushed else {
            return Ok(());
        };
        let mut writer = self.writer()?;
        writer.flush_rows().context("writing the output")?;
        drop(writer);
        if let Ok(mut targets) = unflushed.lock() {
            targets.clear();
        }
        Ok(())
    }

    /// The rows of `targets` are with the writer (not yet, perhaps, in the file).
    fn written(&self, targets: &[u64]) {
        if let Some(Ok(mut unflushed)) = self.unflushed.as_ref().map(Mutex::lock) {
            unflushed.extend_from_slice(targets);
        }
    }

    fn publish_feed(&self, lane: usize, feed: &Feed) {
        if let Ok(mut drained) = self.drained.lock() {
            drained[lane] = Some(feed.checkpoint());
        }
    }

    /// The row writer, locked.
    fn writer(&self) -> anyhow::Result<std::sync::MutexGuard<'_, Box<dyn RowWriter + Send>>> {
        self.writer
            .lock()
            .map_err(|_| anyhow::anyhow!("another grab thread failed while writing"))
    }
}

/// What a thread hands back at its end.
struct ThreadEnd {
    /// Its queues, closed only after the summary's figures are taken: closing an AF_XDP socket
    /// waits for the kernel (tens of ms each on a veth), which is not the grab's time.
    io: GrabIo,
    stats: Stats,
    loop_stats: LoopStats,
    feed: ThreadCheckpoint,
    syn_retransmitted: u64,
    syn_timeouts: u64,
    invalid: u64,
    partial_checksums: u64,
    drops: u64,
    handover_dropped: u64,
    engine_bytes: u64,
    /// Its handles on the records of targets (see [`Marks`]), for their size.
    marks: Marks,
    left_open: u64,
    answers: AnswerCounts,
}

/// [`run`] over queues already open, one [`GrabIo`] per thread (tests give them ends of
/// in-memory links, with a scripted peer at the other).
pub fn run_on<A: GrabApp>(
    plan: GrabPlan<A>,
    ios: Vec<GrabIo>,
    writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<GrabSummary> {
    let threads = ios.len();
    anyhow::ensure!(
        threads == plan.run.threads.max(1) as usize,
        "{threads} sets of queues for {} threads",
        plan.run.threads
    );
    let mailboxes = Mailbox::for_threads(threads, plan.tcp.ports)
        .context("creating the wake-ups between grab threads")?;
    let renderers: Vec<_> = (0..threads).map(|_| writer.renderer()).collect();
    let (events, done_rx) = mpsc::channel();
    let shared = Shared {
        // Text rows can be handed to the file at any time; parquet's would each be a row group.
        unflushed: writer.renderer().map(|_| Mutex::new(Vec::new())),
        writer: Mutex::new(writer),
        phase: AtomicU8::new(RUN),
        clock: Instant::now(),
        drained: Mutex::new(vec![None; threads]),
        events,
        all_idle: AtomicBool::new(false),
        wakes: mailboxes.iter().filter_map(Mailbox::wake).collect(),
    };
    let mut loopers = Vec::with_capacity(threads);
    let marks = Marks::for_threads(&plan, threads);
    let parts = ios.into_iter().zip(mailboxes).zip(renderers).zip(marks);
    for (lane, (((io, mailbox), renderer), marks)) in parts.enumerate() {
        loopers.push(Looper::new(&plan, lane, io, mailbox, renderer, marks)?);
    }
    let total = loopers.iter().map(|l| l.feed.left()).sum();
    // Where each thread's targets stood before this run wrote anything.
    let starts: Vec<ThreadCheckpoint> = loopers.iter().map(|l| l.feed.checkpoint()).collect();
    let counts: Vec<Arc<GrabCounts>> = loopers.iter().map(|l| l.counts.clone()).collect();
    let mut status = StatusLine::new(
        GrabStatus::new(counts.clone(), total),
        plan.run.quiet,
        plan.run.status_file.as_deref(),
        IfExists::force(plan.run.overwrite),
    )?
    .publishing(plan.run.metrics.clone());
    // Opened here, in the namespace the run is in (a lab's scanner namespace).
    let mut link = crate::scan::LinkWatch::open(&plan.run.iface);
    let watch = Stopwatch::start();
    let (ends, status_error) = std::thread::scope(|scope| {
        let handles: Vec<_> = loopers
            .into_iter()
            .map(|mut looper| {
                let (shared, plan) = (&shared, &plan);
                scope.spawn(move || {
                    pin_to_cpu(plan.run.sender_cpu(looper.lane));
                    Pacer::tighten_timers();
                    let outcome = looper.run(shared);
                    if outcome.is_err() {
                        // Its connections end now; a target whose row cannot be written is
                        // put back for a resume (see `write_rows`).
                        let _ = looper.abort(shared);
                    }
                    shared.publish_feed(looper.lane, &looper.feed);
                    let failed = outcome.is_err();
                    let _ = shared.events.send(ThreadEvent::Ended { failed });
                    outcome.map(|()| looper.end())
                })
            })
            .collect();
        let status_error = coordinate(&plan, &shared, stop, &mut status, &done_rx, threads);
        let ends: Vec<anyhow::Result<ThreadEnd>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a grab thread panicked")))
            })
            .collect();
        (ends, status_error)
    });
    // Whatever failed, the output is finished and the checkpoint written before the error is
    // returned: every thread published where its targets stand, a failed one included.
    let mut failure = None;
    let ends: Vec<ThreadEnd> = ends
        .into_iter()
        .filter_map(|end| end.map_err(|e| failure.get_or_insert(e)).ok())
        .collect();
    if let Err(e) = status_error {
        failure.get_or_insert(e.context("writing the status file"));
    }
    let interrupted = stop.reason() != StopReason::None;
    let finished = match shared.writer.into_inner() {
        Ok(writer) => writer.finish().context("finishing the output"),
        Err(_) => Err(anyhow::anyhow!(
            "the row writer was left locked by a failed thread"
        )),
    };
    let mut feeds: Vec<ThreadCheckpoint> = match shared.drained.into_inner() {
        Ok(drained) => drained.into_iter().flatten().collect(),
        Err(_) => ends.iter().map(|e| e.feed.clone()).collect(),
    };
    if let Err(e) = finished {
        failure.get_or_insert(e);
        // Rows the file may not hold: their targets go back for a resume (a parquet file
        // holds none without its footer).
        match shared.unflushed.map(Mutex::into_inner) {
            Some(Ok(unflushed)) if !feeds.is_empty() => {
                feeds[0].pending.splice(0..0, unflushed);
            }
            _ => feeds = starts,
        }
    }
    let checkpoint = if interrupted || failure.is_some() {
        let saved = save_checkpoint(&plan, &feeds, &counts, true, false);
        if let Err(e) = saved {
            failure.get_or_insert(e);
        }
        Some(plan.run.checkpoint.display().to_string())
    } else {
        if plan.run.resume.is_some() {
            save_checkpoint(&plan, &feeds, &counts, true, true)?;
        }
        None
    };
    if let Some(e) = failure {
        return Err(e.context(format!("checkpoint: {}", plan.run.checkpoint.display())));
    }
    let link = link.as_mut().and_then(crate::scan::LinkWatch::since_start);
    let summary = summarize(&plan, &ends, &watch, interrupted, checkpoint, link);
    // Now the queues close (see `ThreadEnd::io`).
    drop(ends.into_iter().map(|end| end.io).collect::<Vec<_>>());
    status.source_mut().run_ended(summary.conn_per_s);
    if interrupted {
        status.source_mut().stopped_early();
    }
    status.tick(Phase::Done, true)?;
    Ok(summary)
}

/// The calling thread's part: the status line, Ctrl-C (the first stops new connections and
/// records where each thread's targets stand; the second ends every connection), until every
/// thread has ended. A thread that fails makes the others end at once.
fn coordinate<A: GrabApp>(
    plan: &GrabPlan<A>,
    shared: &Shared,
    stop: &Stop,
    status: &mut StatusLine<GrabStatus>,
    events: &mpsc::Receiver<ThreadEvent>,
    threads: usize,
) -> anyhow::Result<()> {
    let (mut running, mut idle) = (threads, 0);
    let mut drain_saved = false;
    let mut error = None;
    let mut flushed = Instant::now();
    while running > 0 {
        if flushed.elapsed() >= FLUSH_EVERY && error.is_none() {
            flushed = Instant::now();
            if let Err(e) = shared.flush_text_rows() {
                shared.set_phase(ABORT);
                error = Some(e);
            }
        }
        match events.recv_timeout(STATUS_EVERY) {
            Ok(ThreadEvent::Idle) => {
                idle += 1;
                if idle == threads {
                    shared.end_all_idle();
                }
            }
            Ok(ThreadEvent::Ended { failed }) => {
                running -= 1;
                if failed {
                    shared.set_phase(ABORT);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if stop.is_set() {
            match shared.phase() {
                RUN => {
                    shared.set_phase(DRAIN);
                    stop.rearm();
                    if !plan.run.quiet {
                        to_stderr("grab: no new connections; finishing the open ones (Ctrl-C again to end them now)");
                    }
                }
                _ => shared.set_phase(ABORT),
            }
        }
        if shared.phase() == DRAIN && !drain_saved {
            drain_saved = save_drained(plan, shared, status.source().counts())?;
        }
        let done = status.source().done_fraction();
        if let Err(e) = status.tick(Phase::Sending { done }, false) {
            shared.set_phase(ABORT);
            error.get_or_insert(e);
        }
    }
    error.map_or(Ok(()), Err)
}

/// Once every thread has stopped opening connections, a checkpoint of where their targets
/// stand (kept if the run is killed while it finishes the open ones). True once saved.
fn save_drained<A: GrabApp>(
    plan: &GrabPlan<A>,
    shared: &Shared,
    counts: &[Arc<GrabCounts>],
) -> anyhow::Result<bool> {
    let feeds: Option<Vec<ThreadCheckpoint>> = match shared.drained.lock() {
        Ok(drained) => drained.iter().cloned().collect(),
        Err(_) => None,
    };
    match feeds {
        Some(feeds) => save_checkpoint(plan, &feeds, counts, false, false).map(|()| true),
        None => Ok(false),
    }
}

/// Saves the checkpoint; a complete one (a resumed run that went to its end) also over the
/// checkpoint it resumed, when that is another file.
fn save_checkpoint<A: GrabApp>(
    plan: &GrabPlan<A>,
    feeds: &[ThreadCheckpoint],
    counts: &[Arc<GrabCounts>],
    receiving_done: bool,
    complete: bool,
) -> anyhow::Result<()> {
    let run = &plan.run;
    let checkpoint = Checkpoint {
        tool: "grab".into(),
        seed: run.seed,
        key: run.key,
        module: plan.app.name().into(),
        targets: run.space.len(),
        shard: run.shard,
        probes: run.probes,
        sent: run.sent_before() + counts.iter().map(|c| c.syn_sent.get()).sum::<u64>(),
        threads: feeds.to_vec(),
        receiving_done,
        complete,
    };
    match complete {
        true => crate::checkpoint::save_complete(
            &checkpoint,
            &run.checkpoint,
            run.resumed_from.as_deref(),
        ),
        false => checkpoint.save(&run.checkpoint),
    }
}

/// The threads' figures added up into the run's summary.
fn summarize<A: GrabApp>(
    plan: &GrabPlan<A>,
    ends: &[ThreadEnd],
    watch: &Stopwatch,
    interrupted: bool,
    checkpoint: Option<String>,
    link: Option<sonde_io::LinkDrops>,
) -> GrabSummary {
    let mut stats = Stats::default();
    let mut loop_stats = LoopStats::default();
    let mut answers = AnswerCounts::default();
    let sum = |f: fn(&ThreadEnd) -> u64| ends.iter().map(f).sum::<u64>();
    for end in ends {
        stats += &end.stats;
        loop_stats += &end.loop_stats;
        answers.merge(&end.answers);
    }
    let sample = RetriedSample::sample_share(plan.run.space.len());
    let figures = Figures {
        answers: &answers,
        established: stats.established,
        retransmits_sent: stats.retransmits_sent,
        retransmits_received: stats.retransmits_received,
    };
    let drops = sum(|e| e.drops);
    let losses = outran::grab_loss_line(
        &figures,
        sample,
        drops,
        &plan.run.iface,
        link.as_ref(),
        plan.run.backend,
    );
    let wall = watch.wall().as_secs_f64();
    let conn_per_s = success_rate(stats.success, wall);
    let cpu = watch.cpu();
    let cpu_s = cpu.total().as_secs_f64();
    GrabSummary {
        targets: plan.run.space.len(),
        syn_sent: stats.syn_sent,
        syn_retransmitted: sum(|e| e.syn_retransmitted),
        established: stats.established,
        completed: stats.completed,
        success: stats.success,
        refused: stats.refused,
        syn_timeouts: sum(|e| e.syn_timeouts),
        timeouts: stats.timeouts,
        resets: stats.resets,
        closed: stats.closed,
        unreachable: stats.unreachable,
        icmp_soft_errors: stats.icmp_soft_errors,
        mss_lowered: stats.mss_lowered,
        icmp_ignored: stats.icmp_ignored,
        retransmits_received: stats.retransmits_received,
        retransmits_sent: stats.retransmits_sent,
        sack_blocks_sent: stats.sack_blocks_sent,
        ooo_segments: stats.ooo_segments,
        table_full: stats.table_full,
        invalid: stats.invalid + sum(|e| e.invalid),
        late_segments: stats.late,
        checksums_verified: plan.tcp.verify_checksums,
        bad_checksums: stats.bad_checksums,
        partial_checksums: sum(|e| e.partial_checksums),
        drops,
        handover_dropped: sum(|e| e.handover_dropped),
        conn_per_s,
        wall_s: wall,
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        cpu_us_per_conn: cpu_s * 1e6 / (stats.success.max(1)) as f64,
        peak_outstanding: stats.peak_outstanding,
        peak_rss_bytes: peak_rss_bytes(),
        engine_bytes: sum(|e| e.engine_bytes),
        answered_bytes: TargetMarks::reserved_bytes(
            ends.iter()
                .flat_map(|e| std::iter::once(&e.marks.answered).chain(&e.marks.sent)),
        ),
        left_open: sum(|e| e.left_open),
        interrupted,
        app: plan.app.name().into(),
        backend: plan.run.backend.name().into(),
        threads: ends.len() as u32,
        checkpoint,
        loop_stats: Some(loop_stats),
        answered_first_syn: answers.first_try,
        answered_after_retry: answers.after_retry,
        answered_first_syn_after_retry: answers.raced,
        syn_retries_raced: outran::raced_line(&answers, sample, plan.syn_timeout_us as f64 / 1e6),
        answer_sample: sample,
        first_syn_per_s: outran::first_syn_rate(&answers),
        path_syn_per_s: outran::path_rate(&answers),
        iface_tx_dropped: link.map(|l| l.tx_dropped),
        iface_rx_dropped: link.map(|l| l.rx_dropped),
        losses,
    }
}

/// The plan's app, lent to the engine (which lives no longer than the plan).
struct AppRef<'a, A>(&'a A);

impl<A: App> App for AppRef<'_, A> {
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        self.0.write_request(buf, addr, port)
    }
    fn max_request_len(&self) -> usize {
        self.0.max_request_len()
    }
    fn is_complete(&self, received: &[u8]) -> bool {
        self.0.is_complete(received)
    }
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        self.0.is_complete_after(received, cursor)
    }
    fn max_sent_len(&self) -> usize {
        self.0.max_sent_len()
    }
    fn open_session(
        &self,
        addr: IpAddr,
        port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        self.0.open_session(addr, port, first)
    }
}

/// One thread's records of targets, on bitmaps the threads share ([`TargetMarks`]).
pub(in crate::grab) struct Marks {
    /// Targets that answered (SYN-ACK or RST) or were given up on, by index: their SYNs are not
    /// sent again, and a late answer gets an RST (or is ignored), never a second row.
    answered: TargetMarks,
    /// For a resumed run, the targets this run has sent a SYN to (when the space fits a
    /// bitmap). The run keeps its checkpoint's key, so a late SYN-ACK or RST answering the run
    /// before it (a target that run already wrote a row for) validates as well: it must find
    /// no target of this run, or that target would get a second row.
    sent: Option<TargetMarks>,
}

impl Marks {
    /// Each of `threads` threads' handles on the run's records.
    pub(in crate::grab) fn for_threads<A: GrabApp>(
        plan: &GrabPlan<A>,
        threads: usize,
    ) -> Vec<Marks> {
        let space = &plan.run.space;
        let fits = space.len() <= Dedup::MAX_BITMAP_TARGETS;
        let mut sent = (plan.run.resume.is_some() && fits)
            .then(|| TargetMarks::for_threads(space, threads).into_iter());
        TargetMarks::for_threads(space, threads)
            .into_iter()
            .map(|answered| Marks {
                answered,
                sent: sent.as_mut().and_then(Iterator::next),
            })
            .collect()
    }
}

/// One engine thread's state.
pub(in crate::grab) struct Looper<'p, A: GrabApp> {
    plan: &'p GrabPlan<A>,
    /// This thread's index: its port lane, its feed's part, its queue.
    lane: usize,
    engine: Engine<AppRef<'p, A>>,
    retries: SynRetries,
    /// Targets that answered or were given up on (see [`Marks`]).
    answered: TargetMarks,
    /// In a resumed run, the targets this run sent SYNs to: an answer for any other target
    /// answers the run before (see [`Marks`]).
    sent: Option<TargetMarks>,
    pacer: Pacer,
    clock: Instant,
    tx: AnyTx,
    rxs: Vec<AnyRx>,
    mailbox: Mailbox,
    /// This thread's share of `--max-outstanding` (connections and SYNs in flight).
    max_outstanding: usize,
    /// This thread's wake-up, when other threads hand it frames.
    wake: Option<Arc<sonde_io::Wake>>,
    feed: Feed,
    counts: Arc<GrabCounts>,
    /// ARP requests to answer this pass.
    arps: Vec<arp::Repr>,
    /// Targets whose SYN is due again this pass.
    resend: Vec<u64>,
    /// Targets whose first SYN leaves this pass (or the next, when the ring was full).
    fresh: VecDeque<u64>,
    /// Targets whose last SYN went unanswered.
    timed_out: Vec<u64>,
    app_values: Vec<Value>,
    /// This thread's renderer of the writer's rows (text formats), and its rows of a pass.
    renderer: Option<Box<dyn RowRenderer>>,
    rendered: Vec<u8>,
    /// The targets of the rows of the pass being written (put back if they cannot be).
    row_targets: Vec<u64>,
    /// When the receivers' drop counters were last read (a system call for AF_XDP).
    drops_read: Instant,
    syn_retransmitted: u64,
    syn_timeouts: u64,
    invalid: u64,
    /// Frames taken unverified because the kernel marked their checksum partial.
    partial_checksums: u64,
    loop_stats: LoopStats,
    /// Connections whose closing segment a second Ctrl-C could not send.
    left_open: u64,
    /// When the loop last woke from a wait, and how long it lets frames gather before a frame
    /// may wake it again (none unless every receiver stamps arrivals).
    last_wake: Instant,
    gather: Duration,
    /// Which (sampled) targets had their SYN sent again, and what the answers and first SYNs
    /// were (see `outran`).
    retried: RetriedSample,
    answers: AnswerCounts,
}

/// What the receive path needs of a thread to take one frame (borrowed apart from the
/// receivers and the mailbox, which hand the frames over).
struct Taker<'l, 'p, A: GrabApp> {
    engine: &'l mut Engine<AppRef<'p, A>>,
    answered: &'l mut TargetMarks,
    retries: &'l mut SynRetries,
    sent: &'l Option<TargetMarks>,
    arps: &'l mut Vec<arp::Repr>,
    plan: &'p GrabPlan<A>,
    invalid: &'l mut u64,
    partial_checksums: &'l mut u64,
    retried: &'l RetriedSample,
    answers: &'l mut AnswerCounts,
}

impl<A: GrabApp> Taker<'_, '_, A> {
    /// One frame of this thread's, received at `now` (µs of the loop's clock).
    fn take(&mut self, frame: &[u8], now: u64, partial_checksum: bool) {
        if let Some(ip) = self.plan.arp_for {
            if let Some(asker) = arp_request_for(frame, ip) {
                self.arps.push(asker);
                return;
            }
        }
        let space = &self.plan.run.space;
        let (answered, sent) = (&*self.answered, self.sent);
        // A late SYN-ACK of a target that already answered, was given up on, or belongs to
        // the run this one resumes gets an RST, not a connection (and a late RST no row).
        let seen = |addr, port| {
            space.index_of(addr, port).is_some_and(|i| {
                answered.contains(i) || sent.as_ref().is_some_and(|s| !s.contains(i))
            })
        };
        let rx = if partial_checksum {
            *self.partial_checksums += 1;
            self.engine.on_frame_partial_with(frame, now, seen)
        } else {
            self.engine.on_frame_with(frame, now, seen)
        };
        match rx {
            Rx::Answered { addr, port } => match space.index_of(addr, port) {
                // Its first answer: a connection or a row now, no longer a SYN in flight.
                Some(index) => {
                    if !self.answered.check_and_insert(index) {
                        self.retries.answered();
                        if self.retried.sampled(index) {
                            // An echo at least the retry's wait old answers the first SYN.
                            let raced = self
                                .engine
                                .answer_rtt_us()
                                .is_some_and(|rtt| u64::from(rtt) >= self.plan.syn_timeout_us);
                            self.answers
                                .answered(self.retried.contains(index), raced, now);
                        }
                    }
                }
                None => *self.invalid += 1,
            },
            // The engine counts these itself (`Stats::invalid`, its ICMP counters).
            Rx::Invalid | Rx::NotOurs | Rx::Segment | Rx::Late | Rx::Icmp => {}
        }
    }
}

impl<'p, A: GrabApp> Looper<'p, A> {
    pub(in crate::grab) fn new(
        plan: &'p GrabPlan<A>,
        lane: usize,
        io: GrabIo,
        mailbox: Mailbox,
        renderer: Option<Box<dyn RowRenderer>>,
        marks: Marks,
    ) -> anyhow::Result<Looper<'p, A>> {
        let threads = plan.run.threads.max(1);
        let feed = Feed::open(
            &plan.run.feed_spec(),
            lane as u32,
            plan.run.resumed_thread(lane as u32),
        )?;
        let retries = SynRetries::new(plan.syn_retries, plan.syn_timeout_us);
        // The table and the receive memory are split between the threads.
        let share = |whole: usize| whole.div_ceil(threads as usize);
        let tcp = sonde_tcp::Config {
            syn_span_us: retries.span_us(),
            port_lane: PortLane {
                index: lane as u16,
                count: threads as u16,
            },
            max_outstanding: share(plan.tcp.max_outstanding),
            rx_memory_limit: share(plan.tcp.rx_memory_limit),
            // One budget of challenge ACKs for the run, not one per thread.
            challenge_budget: plan.tcp.challenge_budget.clone(),
            ..plan.tcp.clone()
        };
        let max_outstanding = tcp.max_outstanding;
        let engine = Engine::new(tcp, AppRef(&plan.app)).map_err(anyhow::Error::msg)?;
        let io_stamps = io.rxs.iter().all(AnyRx::stamps_arrivals);
        Ok(Looper {
            plan,
            lane,
            engine,
            retries,
            answered: marks.answered,
            sent: marks.sent,
            // Each thread keeps its share of the pace.
            pacer: Pacer::with_burst_time(
                plan.run.rate / f64::from(threads),
                plan.run.batch,
                GATHER,
            ),
            clock: Instant::now(),
            tx: io.tx,
            rxs: io.rxs,
            max_outstanding,
            wake: mailbox.wake(),
            mailbox,
            feed,
            counts: Arc::new(GrabCounts::default()),
            arps: Vec::new(),
            resend: Vec::new(),
            fresh: VecDeque::new(),
            timed_out: Vec::new(),
            app_values: Vec::new(),
            renderer,
            rendered: Vec::new(),
            row_targets: Vec::new(),
            drops_read: Instant::now(),
            syn_retransmitted: 0,
            syn_timeouts: 0,
            invalid: 0,
            partial_checksums: 0,
            loop_stats: LoopStats::default(),
            left_open: 0,
            last_wake: Instant::now(),
            gather: if io_stamps { GATHER } else { Duration::ZERO },
            retried: RetriedSample::for_space(plan.run.space.len()),
            answers: AnswerCounts::default(),
        })
    }

    /// The engine's counters (for the tests).
    #[cfg(test)]
    pub(in crate::grab) fn engine_stats(&self) -> &Stats {
        self.engine.stats()
    }

    pub(in crate::grab) fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    /// Passes until every target of this thread has ended. Once the calling thread says
    /// drain, no new target starts, and the SYNs in flight and the open connections are seen
    /// through (bounded by their timeouts); abort ends everything at once.
    fn run(&mut self, shared: &Shared) -> anyhow::Result<()> {
        self.clock = shared.clock;
        let mut draining = false;
        let mut said_idle = false;
        let alone = shared.wakes.is_empty();
        loop {
            match shared.phase() {
                DRAIN if !draining => {
                    draining = true;
                    let fresh: Vec<u64> = self.fresh.drain(..).collect();
                    self.feed.put_back(fresh);
                    shared.publish_feed(self.lane, &self.feed);
                }
                ABORT => return self.abort(shared),
                _ => {}
            }
            self.pass(!draining, shared)?;
            let idle = self.feed_exhausted(draining)
                && self.fresh.is_empty()
                && self.resend.is_empty()
                && self.retries.in_flight() == 0
                && self.engine.outstanding() == 0
                && self.engine.tx_pending() == 0;
            self.publish_figures();
            if idle && alone {
                return Ok(());
            }
            if idle && !said_idle {
                said_idle = true;
                let _ = shared.events.send(ThreadEvent::Idle);
            }
            if said_idle && shared.all_idle.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    fn feed_exhausted(&self, draining: bool) -> bool {
        draining || self.feed.is_done()
    }

    /// One pass: receive, timers, SYN retries, new SYNs, one transmit batch, rows. Each
    /// part's wall time is added to the loop's counters.
    fn pass(&mut self, open_new: bool, shared: &Shared) -> anyhow::Result<()> {
        let start = Instant::now();
        let received = self.receive(open_new)?;
        let received_at = Instant::now();
        let now = self.now_us();
        self.engine.on_tick(now);
        self.poll_retries(now);
        let new = if open_new { self.room() } else { 0 };
        let timed_at = Instant::now();
        let sent = self.transmit(new, now)?;
        let sent_at = Instant::now();
        let rows = self.write_rows(shared)?;
        let l = &mut self.loop_stats;
        l.receive_s += (received_at - start).as_secs_f64();
        l.timers_s += (timed_at - received_at).as_secs_f64();
        l.transmit_s += (sent_at - timed_at).as_secs_f64();
        l.rows_s += sent_at.elapsed().as_secs_f64();
        l.passes += 1;
        l.idle_passes += u64::from(received + sent + rows == 0);
        Ok(())
    }

    /// New SYNs this pass may send: table room, SYNs in flight, the pace.
    fn room(&mut self) -> usize {
        let cap = self.max_outstanding;
        let in_flight = self.retries.in_flight();
        let l = &mut self.loop_stats;
        l.peak_syns_in_flight = l.peak_syns_in_flight.max(in_flight as u64);
        let busy = self.engine.outstanding() + in_flight;
        let room = cap.saturating_sub(busy).min(self.pacer.burst());
        if room == 0 {
            l.passes_table_full += 1;
            return 0;
        }
        if !self.pacer.is_due() {
            l.passes_pace_not_due += 1;
            return 0;
        }
        room
    }

    /// How long this pass's receive may wait for a frame: nothing, while something is ready
    /// to send; else until the earliest of the pace's next SYN (when the table has room for
    /// it), a connection's timer and a SYN retry, at most `MAX_WAIT`. A wait shorter than
    /// `SPIN_BELOW` is not worth a sleep: the loop spins through it.
    fn idle_wait(&mut self, open_new: bool) -> Duration {
        let ready = self.engine.tx_pending() > 0
            || !self.arps.is_empty()
            || !self.resend.is_empty()
            || !self.fresh.is_empty();
        if ready {
            return Duration::ZERO;
        }
        let now = self.now_us();
        let mut until = now + MAX_WAIT.as_micros() as u64;
        let cap = self.max_outstanding;
        let has_room = self.engine.outstanding() + self.retries.in_flight() < cap;
        if open_new && has_room && !self.feed.is_done() {
            until = until.min(now + self.pacer.until_due().as_micros() as u64);
        }
        for due in [self.engine.next_deadline_us(), self.retries.next_due()] {
            until = until.min(due.unwrap_or(u64::MAX));
        }
        let wait = Duration::from_micros(until.saturating_sub(now));
        if wait < SPIN_BELOW {
            Duration::ZERO
        } else {
            wait
        }
    }

    /// Of a `wait`, sleeps through the part that falls within `gather` of the last wake-up
    /// (frames arriving meanwhile wait in the ring and are read together, dated by their
    /// stamps) and returns the rest, the part a frame may cut short. A deadline is never slept
    /// past: `wait` ends at the earliest one.
    fn gather_frames(&mut self, wait: Duration) -> Duration {
        let hold = self
            .gather
            .saturating_sub(self.last_wake.elapsed())
            .min(wait);
        if hold < SPIN_BELOW {
            return wait;
        }
        std::thread::sleep(hold);
        wait - hold
    }

    /// SYNs due again (unless their target answered), and targets that never answered.
    fn poll_retries(&mut self, now: u64) {
        let Looper {
            retries,
            answered,
            resend,
            timed_out,
            retried,
            ..
        } = self;
        let before = timed_out.len();
        retries.poll(
            now,
            |index| answered.contains(index),
            |index| {
                resend.push(index);
                retried.mark(index);
                true
            },
            |index| timed_out.push(index),
        );
        // Given up: from now on an answer is late (an RST, or nothing), never a second row.
        for &index in &timed_out[before..] {
            answered.check_and_insert(index);
        }
    }

    /// Everything of this pass in one batch: ARP replies, the engine's segments, SYNs due
    /// again, then up to `new` first SYNs.
    pub(in crate::grab) fn transmit(&mut self, new: usize, now: u64) -> anyhow::Result<usize> {
        // Targets a full ring left over from the last pass go first.
        while self.fresh.len() < new {
            match self.feed.next_target() {
                Some(index) => self.fresh.push_back(index),
                None => break,
            }
        }
        let queued =
            self.arps.len() + self.engine.tx_pending() + self.resend.len() + self.fresh.len();
        if queued == 0 {
            return Ok(0);
        }
        let Looper {
            tx,
            engine,
            arps,
            resend,
            fresh,
            retries,
            plan,
            sent: sent_this_run,
            ..
        } = self;
        let space = &plan.run.space;
        let src_mac = plan.run.src_mac;
        let (mut resent, mut opened) = (0, 0);
        let mut sent = 0;
        while sent < queued {
            let n = tx.tx_batch(queued - sent, |_, buf| {
                if let Some(request) = arps.pop() {
                    return write_arp_reply(buf, src_mac, &request);
                }
                if engine.tx_pending() > 0 {
                    return engine.write_tx(buf, now);
                }
                let index = match resend.pop() {
                    Some(index) => {
                        resent += 1;
                        index
                    }
                    None => {
                        let index = fresh.pop_front().expect("counted in queued");
                        retries.sent(index, now);
                        if let Some(sent) = sent_this_run {
                            sent.check_and_insert(index);
                        }
                        opened += 1;
                        index
                    }
                };
                let (addr, port) = space.target_at(index);
                engine.write_syn(buf, addr, port, now)
            })?;
            if n == 0 {
                self.loop_stats.transmit_ring_full += 1;
                break;
            }
            sent += n;
        }
        self.loop_stats.first_syns += opened as u64;
        self.answers.first_syn_sent(opened as u64, now);
        self.loop_stats.syn_passes += u64::from(opened > 0);
        // -r paces new connections only: charging retries too made the rate fall with the
        // round trip (at 1 s or more, retries fire before the answers come and took the place
        // of new SYNs: a 5 s path opened 12 K connections/s at -r 30000).
        self.pacer.charge(opened);
        self.syn_retransmitted += resent as u64;
        self.counts.syn_sent.add((opened + resent) as u64);
        Ok(sent)
    }

    /// Takes what the receivers and the other threads have for this thread: frames of its
    /// own connections go to its engine, the others' are handed to their owners.
    pub(in crate::grab) fn receive(&mut self, open_new: bool) -> anyhow::Result<usize> {
        // No more frames than the rings to the other threads have room for: a frame for
        // another thread is never dropped for want of room (back-pressure: the rest wait in
        // the receive queue; this pass still takes what the others handed over).
        let receivers = self.rxs.len().max(1);
        let batch = (self.mailbox.room() / receivers).min(RX_BATCH);
        let full_batch = (self.mailbox.room_when_empty() / receivers).min(RX_BATCH);
        let held_back = !self.rxs.is_empty() && batch < full_batch;
        self.loop_stats.handover_held_back += u64::from(held_back);
        // Nothing may be read: no wait (it would end at once), the next pass looks again.
        let mut wait = if held_back && batch == 0 {
            Duration::ZERO
        } else {
            self.idle_wait(open_new)
        };
        if !wait.is_zero() && !self.mailbox.fall_asleep() {
            wait = Duration::ZERO;
        }
        let waited = (!wait.is_zero()).then(Instant::now);
        let wait = self.gather_frames(wait);
        let Looper {
            rxs,
            mailbox,
            wake,
            engine,
            answered,
            retries,
            sent,
            arps,
            plan,
            clock,
            invalid,
            partial_checksums,
            retried,
            answers,
            ..
        } = self;
        let mut taker = Taker {
            engine,
            answered,
            retries,
            sent,
            arps,
            plan,
            invalid,
            partial_checksums,
            retried,
            answers,
        };
        // The clocks are read once per receiver's batch, when its first frame is handed over:
        // a reading from before the wait would date the replies early (and shorten RTTs). A
        // frame the kernel stamped on arrival (packet rings; AF_XDP behind the reply filter)
        // is dated by its stamp: the loop reads frames in batches, after they arrived.
        let mut stamp: Option<(usize, u64, u64)> = None;
        let mut handed = 0;
        let n = sonde_io::rx_many_meta_or_wake(
            rxs,
            batch,
            wait,
            wake.as_deref(),
            |queue, frame, meta| {
                let (now_us, now_epoch_ns) = match stamp {
                    Some((q, now_us, epoch_ns)) if q == queue => (now_us, epoch_ns),
                    _ => {
                        let (_, now_us, epoch_ns) = *stamp.insert(read_clocks(queue, *clock));
                        (now_us, epoch_ns)
                    }
                };
                let age_us = crate::arrival::stamp_age_us(now_epoch_ns, meta.stamp_ns);
                let now = now_us.saturating_sub(age_us.unwrap_or(0));
                let partial = meta.checksum == RxChecksum::Partial;
                match mailbox.other_owner(frame) {
                    Some(owner) => mailbox.hand_over(owner, frame, now, partial),
                    None => {
                        // What reached the host before this frame on other threads' queues
                        // goes first: a connection's frames on two queues stay in order.
                        handed += mailbox.take_handed_until(now, |h| {
                            taker.take(h.frame, h.now_us, h.partial_checksum)
                        });
                        taker.take(frame, now, partial)
                    }
                }
            },
        )?;
        mailbox.wake_owners();
        handed += mailbox.take_handed(|h| taker.take(h.frame, h.now_us, h.partial_checksum));
        self.loop_stats.frames_received += n as u64;
        if let Some(start) = waited {
            self.mailbox.wake_up();
            self.last_wake = Instant::now();
            self.loop_stats.waits += 1;
            self.loop_stats.wait_s += start.elapsed().as_secs_f64();
        }
        if self.drops_read.elapsed() >= DROPS_EVERY {
            self.drops_read = Instant::now();
            let drops: u64 = self.rxs.iter_mut().map(AnyRx::take_drops).sum();
            self.counts.drops.add(drops);
        }
        Ok(n + handed)
    }

    /// One row per connection that ended, and per target that never answered. Text rows are
    /// rendered (the app's fields read) by this thread, and the shared writer is locked once to
    /// copy them; a writer with no renderer (parquet) takes them one by one under the lock.
    fn write_rows(&mut self, shared: &Shared) -> anyhow::Result<usize> {
        if !self.engine.has_outcomes() && self.timed_out.is_empty() {
            return Ok(0);
        }
        self.row_targets.clear();
        let written = match self.renderer.take() {
            Some(mut renderer) => {
                let mut rendered = std::mem::take(&mut self.rendered);
                let rows = self.each_row(|row| renderer.render(row, &mut rendered));
                let copied = rows.and_then(|rows| {
                    shared.writer()?.write_rendered(&rendered)?;
                    Ok(rows)
                });
                rendered.clear();
                (self.renderer, self.rendered) = (Some(renderer), rendered);
                copied
            }
            None => {
                let mut writer = shared.writer()?;
                let rows = self.each_row(|row| writer.write(row));
                rows.and_then(|rows| writer.end_batch().map(|()| rows))
            }
        };
        match written {
            Ok(_) => shared.written(&self.row_targets),
            // These rows may not be in the file: a resume gives their targets another go.
            Err(_) => self
                .feed
                .put_back(self.row_targets.drain(..).collect::<Vec<_>>()),
        }
        written.context("writing the output")
    }

    /// Hands `emit` each row of this pass: the connections that ended, then the targets given
    /// up on. Every row is counted even when `emit` fails; the first failure is returned.
    fn each_row(
        &mut self,
        mut emit: impl FnMut(&dyn sonde_scan::output::Row) -> anyhow::Result<()>,
    ) -> anyhow::Result<usize> {
        let epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut rows = 0;
        let mut error = None;
        let Looper {
            engine,
            plan,
            app_values,
            counts,
            row_targets,
            ..
        } = self;
        engine.drain_replies(|outcome, bytes, session| {
            row_targets.extend(plan.run.space.index_of(outcome.addr, outcome.port));
            let described = outcome.status == Status::Success || !bytes.is_empty();
            let mut app_outcome = None;
            *app_values = if described {
                let (values, said) = plan.app.describe_reply(bytes, session);
                app_outcome = Some(said);
                values
            } else {
                Vec::new()
            };
            let row = GrabRow {
                outcome,
                app_outcome,
                name: plan.app.target_name(outcome.addr, outcome.port),
                app_fields: plan.app.fields(),
                app_values,
                timestamp_us: epoch_us,
            };
            counts.finished.add(1);
            if outcome.status == Status::Success {
                counts.success.add(1);
            }
            rows += 1;
            if let Err(e) = emit(&row) {
                error.get_or_insert(e);
            }
        });
        for index in std::mem::take(&mut self.timed_out) {
            self.row_targets.push(index);
            let (addr, port) = self.plan.run.space.target_at(index);
            let outcome = Outcome {
                addr,
                port,
                sport: 0,
                status: Status::SynTimeout,
                rtt_us: None,
                t_first_byte_us: None,
                t_total_us: 0,
                bytes: 0,
                truncated: false,
                retransmits_received: 0,
                ooo_segments: 0,
                icmp: None,
            };
            let row = GrabRow {
                outcome: &outcome,
                app_outcome: None,
                name: self.plan.app.target_name(addr, port),
                app_fields: self.plan.app.fields(),
                app_values: &[],
                timestamp_us: epoch_us,
            };
            self.syn_timeouts += 1;
            self.counts.finished.add(1);
            rows += 1;
            if let Err(e) = emit(&row) {
                error.get_or_insert(e);
            }
        }
        error.map_or(Ok(rows), Err)
    }

    /// Hands the loop's own figures to the status line (the calling thread adds every
    /// thread's up).
    fn publish_figures(&self) {
        let c = &self.counts;
        c.outstanding.set(self.engine.outstanding() as u64);
        c.retransmits.set(self.engine.stats().retransmits_received);
        c.syn_retransmitted.set(self.syn_retransmitted);
        c.syn_timeouts.set(self.syn_timeouts);
        c.invalid.set(self.engine.stats().invalid + self.invalid);
    }

    /// Ends every connection now, putting unanswered targets back for a resume: each open
    /// connection's RST goes out before the thread ends (its server would hold it open
    /// otherwise), and those that could not be sent are counted (`left_open`).
    fn abort(&mut self, shared: &Shared) -> anyhow::Result<()> {
        let now = self.now_us();
        self.engine.abort_all(now);
        // No SYN leaves now: the retries due are put back below, with the rest.
        self.resend.clear();
        let (mut due, mut last) = (Vec::new(), Vec::new());
        let answered = &self.answered;
        self.retries.poll(
            u64::MAX,
            |index| answered.contains(index),
            |index| {
                due.push(index);
                true
            },
            |index| last.push(index),
        );
        let fresh: Vec<u64> = self.fresh.drain(..).collect();
        self.feed.put_back(due.into_iter().chain(last).chain(fresh));
        self.send_closing()?;
        self.write_rows(shared).map(|_| ())
    }

    /// Sends what [`Engine::abort_all`] queued (the open connections' RSTs), waiting out a full
    /// transmit ring for at most `CLOSING_FOR`; what is still queued then is counted as
    /// connections left open on their servers.
    fn send_closing(&mut self) -> anyhow::Result<()> {
        let until = Instant::now() + CLOSING_FOR;
        while self.engine.tx_pending() > 0 && Instant::now() < until {
            let now = self.now_us();
            if self.transmit(0, now)? == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        self.left_open = self.engine.tx_pending() as u64;
        self.tx.flush().context("sending the connections' RSTs")?;
        Ok(())
    }

    /// The thread's figures, for the run's summary.
    fn end(self) -> ThreadEnd {
        let mut loop_stats = self.loop_stats;
        loop_stats.handed_over = self.mailbox.handed;
        ThreadEnd {
            io: GrabIo {
                tx: self.tx,
                rxs: self.rxs,
            },
            stats: self.engine.stats().clone(),
            loop_stats,
            feed: self.feed.checkpoint(),
            syn_retransmitted: self.syn_retransmitted,
            syn_timeouts: self.syn_timeouts,
            invalid: self.invalid,
            partial_checksums: self.partial_checksums,
            drops: self.counts.drops.get(),
            handover_dropped: self.mailbox.dropped,
            engine_bytes: self.engine.memory_bytes() as u64,
            marks: Marks {
                answered: self.answered,
                sent: self.sent,
            },
            left_open: self.left_open,
            answers: self.answers,
        }
    }
}

/// Receiver `queue`'s batch: the loop's clock (µs) and the wall clock (ns since the Unix
/// epoch, as arrival stamps are), read now.
fn read_clocks(queue: usize, clock: Instant) -> (usize, u64, u64) {
    let epoch_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (queue, clock.elapsed().as_micros() as u64, epoch_ns)
}

/// An ARP request asking who has `ip`.
fn arp_request_for(frame: &[u8], ip: Ipv4Addr) -> Option<arp::Repr> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Arp {
        return None;
    }
    let request = arp::Repr::parse(&arp::Packet::new_checked(eth.payload()).ok()?).ok()?;
    (request.operation == arp::Operation::Request && request.target_ip == ip).then_some(request)
}

/// "The address asked for is at `our_mac`", to the asker.
fn write_arp_reply(buf: &mut [u8], our_mac: MacAddr, request: &arp::Repr) -> usize {
    let reply = request.reply(our_mac);
    let len = ethernet::HEADER_LEN + reply.buffer_len();
    let frame_len = len.max(60);
    buf[..frame_len].fill(0);
    ethernet::Repr {
        src_addr: our_mac,
        dst_addr: request.sender_mac,
        ethertype: EtherType::Arp,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut buf[..frame_len]));
    reply.emit(&mut arp::Packet::new_unchecked(
        &mut buf[ethernet::HEADER_LEN..len],
    ));
    frame_len
}
