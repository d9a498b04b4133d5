//! Grab over sonde's own TCP client: one engine thread owns every connection (the reference
//! design's one core). Each pass it receives from every queue, runs the timers, re-sends
//! unanswered SYNs (statelessly: only the target's index waits), opens new connections as the
//! table has room and the pace allows, and sends every segment of the pass in one batch.
//!
//! With AF_XDP (`xdp`), sonde's XDP program takes every segment to sonde's ports before the
//! kernel sees it, so this works on the host's own address; with a packet ring (`ring`), the
//! source must be an address the kernel does not own, and sonde answers ARP for it.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sonde_io::{AnyRx, AnyTx, FrameTx, RxChecksum};
use sonde_meter::output_file::IfExists;
use sonde_meter::{peak_rss_bytes, Stopwatch};
use sonde_scan::dedup::Dedup;
use sonde_scan::output::RowWriter;
use sonde_scan::reply::Value;
use sonde_tcp::{App, Engine, Outcome, ReplyCursor, Rx, Session, Status, SynRetries};
use sonde_wire::{arp, ethernet, EtherType, MacAddr};

use super::{
    success_rate, GrabApp, GrabCounts, GrabPlan, GrabRow, GrabStatus, GrabSummary, LoopStats,
};
use crate::checkpoint::Checkpoint;
use crate::feed::Feed;
use crate::pace::Pacer;
use crate::plan::pin_to_cpu;
use crate::queues::{open_queues, ReplyFilter};
use crate::status::{to_stderr, Phase, StatusLine};
use crate::stop::{Stop, StopReason};

/// How often the receivers' drop counters are read.
const DROPS_EVERY: Duration = Duration::from_millis(100);
/// The longest a pass waits for a frame when nothing else is due: the status line and the
/// drop counters are read at least this often.
const MAX_WAIT: Duration = Duration::from_millis(100);
/// Waits shorter than this are spun through: falling asleep and waking up costs about as much.
const SPIN_BELOW: Duration = Duration::from_micros(50);
/// With receivers that stamp arrivals, frames wake a waiting loop at most this often, and new
/// SYNs leave in bursts of up to this much of the pace: at a modest pace every wake-up (a
/// context switch and a timer, tens of µs on a virtual machine) would otherwise cost more than
/// the frame it brings. Replies wait at most this long to be answered; their times come from
/// their stamps. (At `-r 1000` over nginx: 1 ms used 4.5-7 % of a core, 2 ms 2.7-3.8 %.)
const GATHER: Duration = Duration::from_millis(2);

/// The queues a grab runs on: one transmit queue and the receivers.
pub struct GrabIo {
    pub tx: AnyTx,
    pub rxs: Vec<AnyRx>,
}

impl GrabIo {
    /// Opens the plan's queues on its interface, the receivers filtered to our segments (and
    /// ARP requests when we answer them).
    pub fn open<A: GrabApp>(plan: &GrabPlan<A>) -> anyhow::Result<GrabIo> {
        let v4 = plan.run.space.ipv4_addresses() > 0;
        let v6 = plan.run.space.ipv6_addresses() > 0;
        let mut filter = ReplyFilter::for_tcp_client(&plan.run, v4, v6);
        if plan.arp_for.is_some() {
            filter.expr = format!("({}) or arp", filter.expr);
        }
        let queues = open_queues(&plan.run, &filter)?;
        let tx = queues
            .senders
            .into_iter()
            .next()
            .context("grab needs one transmit queue")?;
        Ok(GrabIo {
            tx,
            rxs: queues.receivers,
        })
    }
}

/// Runs the grab to its end (or `stop`): every target ends as one row in `writer`.
pub fn run<A: GrabApp>(
    plan: GrabPlan<A>,
    writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<GrabSummary> {
    let io = GrabIo::open(&plan)?;
    run_on(plan, io, writer, stop)
}

/// [`run`] over queues already open (tests give it one end of an in-memory pair, with a
/// scripted peer at the other).
pub fn run_on<A: GrabApp>(
    plan: GrabPlan<A>,
    io: GrabIo,
    writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<GrabSummary> {
    let feed = Feed::open(&plan.run.feed_spec(), 0, plan.run.resumed_thread(0))?;
    let total = feed.left();
    let counts = Arc::new(GrabCounts::default());
    let retries = SynRetries::new(plan.syn_retries, plan.syn_timeout_us);
    let tcp = sonde_tcp::Config {
        syn_span_us: retries.span_us(),
        ..plan.tcp.clone()
    };
    let engine = Engine::new(tcp, AppRef(&plan.app)).map_err(anyhow::Error::msg)?;
    let status = StatusLine::new(
        GrabStatus::new(counts.clone(), total),
        plan.run.quiet,
        plan.run.status_file.as_deref(),
        IfExists::force(plan.run.overwrite),
    )?;
    let io_stamps = io.rxs.iter().all(AnyRx::stamps_arrivals);
    let mut looper = Looper {
        retries,
        answered: Dedup::for_space(&plan.run.space),
        sent: sent_this_run(&plan),
        pacer: Pacer::with_burst_time(plan.run.rate, plan.run.batch, GATHER),
        clock: Instant::now(),
        plan: &plan,
        engine,
        tx: io.tx,
        rxs: io.rxs,
        feed,
        writer,
        counts,
        status,
        arps: Vec::new(),
        resend: Vec::new(),
        fresh: VecDeque::new(),
        timed_out: Vec::new(),
        app_values: Vec::new(),
        drops_read: Instant::now(),
        syn_retransmitted: 0,
        syn_timeouts: 0,
        invalid: 0,
        partial_checksums: 0,
        loop_stats: LoopStats::default(),
        last_wake: Instant::now(),
        gather: if io_stamps { GATHER } else { Duration::ZERO },
    };
    let watch = Stopwatch::start();
    pin_to_cpu(plan.run.sender_cpu(0));
    Pacer::tighten_timers();
    let outcome = looper.run(stop);
    looper.tick_status_figures();
    let interrupted = stop.reason() != StopReason::None;
    let checkpoint = if interrupted {
        looper.save_checkpoint(true)?;
        Some(plan.run.checkpoint.display().to_string())
    } else {
        None
    };
    outcome?;
    let Looper {
        writer,
        engine,
        mut status,
        loop_stats,
        ..
    } = looper;
    writer.finish().context("finishing the output")?;
    let stats = engine.stats();
    let wall = watch.wall().as_secs_f64();
    let conn_per_s = success_rate(stats.success, wall);
    status.source_mut().run_ended(conn_per_s);
    status.tick(Phase::Done, true)?;
    let cpu = watch.cpu();
    let cpu_s = cpu.total().as_secs_f64();
    Ok(GrabSummary {
        targets: plan.run.space.len(),
        syn_sent: stats.syn_sent,
        syn_retransmitted: status.source().syn_retransmitted,
        established: stats.established,
        completed: stats.completed,
        success: stats.success,
        refused: stats.refused,
        syn_timeouts: status.source().syn_timeouts,
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
        invalid: stats.invalid + status.source().invalid,
        late_segments: stats.late,
        checksums_verified: plan.tcp.verify_checksums,
        bad_checksums: stats.bad_checksums,
        partial_checksums: status.source().partial_checksums,
        drops: status.source().counts.drops.get(),
        conn_per_s,
        wall_s: wall,
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        cpu_us_per_conn: cpu_s * 1e6 / (stats.success.max(1)) as f64,
        peak_outstanding: stats.peak_outstanding,
        peak_rss_bytes: peak_rss_bytes(),
        engine_bytes: engine.memory_bytes() as u64,
        interrupted,
        app: plan.app.name().into(),
        backend: plan.run.backend.name().into(),
        checkpoint,
        loop_stats: Some(loop_stats),
    })
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

/// For a resumed run, the targets this run has sent a SYN to (a bitmap, when the space fits
/// one). The run keeps its checkpoint's key, so a late SYN-ACK or RST answering the run before
/// it (a target that run already wrote a row for) validates as well: it must find no target
/// of this run, or that target would get a second row.
fn sent_this_run<A: GrabApp>(plan: &GrabPlan<A>) -> Option<Dedup> {
    let space = &plan.run.space;
    let fits = space.len() <= Dedup::MAX_BITMAP_TARGETS;
    (plan.run.resume.is_some() && fits).then(|| Dedup::for_space(space))
}

/// The engine thread's state.
struct Looper<'p, A: GrabApp> {
    plan: &'p GrabPlan<A>,
    engine: Engine<AppRef<'p, A>>,
    retries: SynRetries,
    /// Targets that answered (SYN-ACK or RST) or were given up on, by index: their SYNs are not
    /// sent again, and a late answer gets an RST (or is ignored), never a second row.
    answered: Dedup,
    /// In a resumed run, the targets this run sent SYNs to: an answer for any other target
    /// answers the run before (see [`sent_this_run`]).
    sent: Option<Dedup>,
    pacer: Pacer,
    clock: Instant,
    tx: AnyTx,
    rxs: Vec<AnyRx>,
    feed: Feed,
    writer: Box<dyn RowWriter + Send>,
    counts: Arc<GrabCounts>,
    status: StatusLine<GrabStatus>,
    /// ARP requests to answer this pass.
    arps: Vec<arp::Repr>,
    /// Targets whose SYN is due again this pass.
    resend: Vec<u64>,
    /// Targets whose first SYN leaves this pass (or the next, when the ring was full).
    fresh: VecDeque<u64>,
    /// Targets whose last SYN went unanswered.
    timed_out: Vec<u64>,
    app_values: Vec<Value>,
    /// When the receivers' drop counters were last read (a system call for AF_XDP).
    drops_read: Instant,
    syn_retransmitted: u64,
    syn_timeouts: u64,
    invalid: u64,
    /// Frames taken unverified because the kernel marked their checksum partial.
    partial_checksums: u64,
    loop_stats: LoopStats,
    /// When the loop last woke from a wait, and how long it lets frames gather before a frame
    /// may wake it again (none unless every receiver stamps arrivals).
    last_wake: Instant,
    gather: Duration,
}

impl<A: GrabApp> Looper<'_, A> {
    fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    /// Passes until every target has ended. After a stop request no new target starts, and
    /// the SYNs in flight and the open connections are seen through (bounded by their
    /// timeouts); a second request ends everything at once.
    fn run(&mut self, stop: &Stop) -> anyhow::Result<()> {
        let mut draining = false;
        loop {
            if stop.is_set() && !draining {
                draining = true;
                let fresh: Vec<u64> = self.fresh.drain(..).collect();
                self.feed.put_back(fresh);
                self.save_checkpoint(false)?;
                stop.rearm();
                if !self.plan.run.quiet {
                    to_stderr("grab: no new connections; finishing the open ones (Ctrl-C again to end them now)");
                }
            } else if stop.is_set() && draining {
                self.abort();
                return Ok(());
            }
            let busy = self.pass(!draining)?;
            let idle = self.feed_exhausted(draining)
                && self.fresh.is_empty()
                && self.resend.is_empty()
                && self.retries.in_flight() == 0
                && self.engine.outstanding() == 0
                && self.engine.tx_pending() == 0;
            if idle {
                return Ok(());
            }
            let ticked = Instant::now();
            self.tick_status()?;
            self.loop_stats.status_s += ticked.elapsed().as_secs_f64();
            if !busy {
                std::hint::spin_loop();
            }
        }
    }

    fn feed_exhausted(&self, draining: bool) -> bool {
        draining || self.feed.is_done()
    }

    /// One pass: receive, timers, SYN retries, new SYNs, one transmit batch, rows. Returns
    /// whether anything happened. Each part's wall time is added to the loop's counters.
    fn pass(&mut self, open_new: bool) -> anyhow::Result<bool> {
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
        let rows = self.write_rows()?;
        let l = &mut self.loop_stats;
        l.receive_s += (received_at - start).as_secs_f64();
        l.timers_s += (timed_at - received_at).as_secs_f64();
        l.transmit_s += (sent_at - timed_at).as_secs_f64();
        l.rows_s += sent_at.elapsed().as_secs_f64();
        l.passes += 1;
        l.frames_received += received as u64;
        let busy = received + sent + rows > 0;
        l.idle_passes += u64::from(!busy);
        Ok(busy)
    }

    /// New SYNs this pass may send: table room, SYNs in flight, the pace.
    fn room(&mut self) -> usize {
        let cap = self.plan.tcp.max_outstanding;
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
        let cap = self.plan.tcp.max_outstanding;
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

    fn receive(&mut self, open_new: bool) -> anyhow::Result<usize> {
        let wait = self.idle_wait(open_new);
        let waited = (!wait.is_zero()).then(Instant::now);
        let wait = self.gather_frames(wait);
        let Looper {
            rxs,
            engine,
            answered,
            retries,
            sent,
            arps,
            plan,
            clock,
            invalid,
            partial_checksums,
            ..
        } = self;
        // The clocks are read once per receiver's batch, when its first frame is handed over:
        // a reading from before the wait would date the replies early (and shorten RTTs). A
        // frame the kernel stamped on arrival (packet rings; AF_XDP behind the reply filter)
        // is dated by its stamp: the loop reads frames in batches, after they arrived.
        let mut stamp: Option<(usize, u64, u64)> = None;
        let arp_for = plan.arp_for;
        let space = &plan.run.space;
        let n = sonde_io::rx_many_meta(rxs, 256, wait, |queue, frame, meta| {
            let (now_us, now_epoch_ns) = match stamp {
                Some((q, now_us, epoch_ns)) if q == queue => (now_us, epoch_ns),
                _ => {
                    let (_, now_us, epoch_ns) = *stamp.insert(read_clocks(queue, *clock));
                    (now_us, epoch_ns)
                }
            };
            let age_us = crate::arrival::stamp_age_us(now_epoch_ns, meta.stamp_ns);
            let now = now_us.saturating_sub(age_us.unwrap_or(0));
            if let Some(ip) = arp_for {
                if let Some(asker) = arp_request_for(frame, ip) {
                    arps.push(asker);
                    return;
                }
            }
            // A late SYN-ACK of a target that already answered, was given up on, or belongs to
            // the run this one resumes gets an RST, not a connection (and a late RST no row).
            let seen = |addr, port| {
                space.index_of(addr, port).is_some_and(|i| {
                    answered.contains(i) || sent.as_ref().is_some_and(|s| !s.contains(i))
                })
            };
            let rx = if meta.checksum == RxChecksum::Partial {
                *partial_checksums += 1;
                engine.on_frame_partial_with(frame, now, seen)
            } else {
                engine.on_frame_with(frame, now, seen)
            };
            match rx {
                Rx::Answered { addr, port } => match space.index_of(addr, port) {
                    // Its first answer: a connection or a row now, no longer a SYN in flight.
                    Some(index) => {
                        if !answered.check_and_insert(index) {
                            retries.answered();
                        }
                    }
                    None => *invalid += 1,
                },
                // The engine counts these itself (`Stats::invalid`, its ICMP counters).
                Rx::Invalid | Rx::NotOurs | Rx::Segment | Rx::Late | Rx::Icmp => {}
            }
        })?;
        if let Some(start) = waited {
            self.last_wake = Instant::now();
            self.loop_stats.waits += 1;
            self.loop_stats.wait_s += start.elapsed().as_secs_f64();
        }
        if self.drops_read.elapsed() >= DROPS_EVERY {
            self.drops_read = Instant::now();
            let drops: u64 = self.rxs.iter_mut().map(AnyRx::take_drops).sum();
            self.counts.drops.add(drops);
        }
        Ok(n)
    }

    /// SYNs due again (unless their target answered), and targets that never answered.
    fn poll_retries(&mut self, now: u64) {
        let Looper {
            retries,
            answered,
            resend,
            timed_out,
            ..
        } = self;
        let before = timed_out.len();
        retries.poll(
            now,
            |index| answered.contains(index),
            |index| {
                resend.push(index);
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
    fn transmit(&mut self, new: usize, now: u64) -> anyhow::Result<usize> {
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
        self.loop_stats.syn_passes += u64::from(opened > 0);
        self.pacer.charge(opened + resent);
        self.syn_retransmitted += resent as u64;
        self.counts.syn_sent.add((opened + resent) as u64);
        Ok(sent)
    }

    /// One row per connection that ended, and per target that never answered.
    fn write_rows(&mut self) -> anyhow::Result<usize> {
        let epoch_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut rows = 0;
        let mut error = None;
        let Looper {
            engine,
            writer,
            plan,
            app_values,
            counts,
            ..
        } = self;
        engine.drain_replies(|outcome, bytes, session| {
            *app_values = if outcome.status == Status::Success || !bytes.is_empty() {
                plan.app.describe_session(bytes, session)
            } else {
                Vec::new()
            };
            let row = GrabRow {
                outcome,
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
            if let Err(e) = writer.write(&row) {
                error.get_or_insert(e);
            }
        });
        for index in std::mem::take(&mut self.timed_out) {
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
                name: self.plan.app.target_name(addr, port),
                app_fields: self.plan.app.fields(),
                app_values: &[],
                timestamp_us: epoch_us,
            };
            self.syn_timeouts += 1;
            self.counts.finished.add(1);
            rows += 1;
            if let Err(e) = self.writer.write(&row) {
                error.get_or_insert(e);
            }
        }
        match error {
            Some(e) => Err(e.context("writing the output")),
            None => Ok(rows),
        }
    }

    fn tick_status(&mut self) -> anyhow::Result<()> {
        self.tick_status_figures();
        let done = self.status.source().done_fraction();
        self.status.tick(Phase::Sending { done }, false)
    }

    /// Hands the loop's own figures to the status line (and so to the summary).
    fn tick_status_figures(&mut self) {
        self.counts
            .outstanding
            .set(self.engine.outstanding() as u64);
        let stats = self.engine.stats();
        self.counts.retransmits.set(stats.retransmits_received);
        let s = self.status.source_mut();
        s.syn_retransmitted = self.syn_retransmitted;
        s.syn_timeouts = self.syn_timeouts;
        s.invalid = self.invalid;
        s.partial_checksums = self.partial_checksums;
    }

    /// Ends every connection now, putting unanswered targets back for a resume.
    fn abort(&mut self) {
        let now = self.now_us();
        self.engine.abort_all(now);
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
        let _ = self.write_rows();
    }

    fn save_checkpoint(&self, complete: bool) -> anyhow::Result<()> {
        let run = &self.plan.run;
        Checkpoint {
            tool: "grab".into(),
            seed: run.seed,
            key: run.key,
            module: self.plan.app.name().into(),
            targets: run.space.len(),
            shard: run.shard,
            probes: run.probes,
            sent: run.sent_before() + self.counts.syn_sent.get(),
            threads: vec![self.feed.checkpoint()],
            complete,
        }
        .save(&run.checkpoint)
    }
}

/// An ARP request asking who has `ip`.
/// Receiver `queue`'s batch: the loop's clock (µs) and the wall clock (ns since the Unix
/// epoch, as arrival stamps are), read now.
fn read_clocks(queue: usize, clock: Instant) -> (usize, u64, u64) {
    let epoch_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (queue, clock.elapsed().as_micros() as u64, epoch_ns)
}

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
