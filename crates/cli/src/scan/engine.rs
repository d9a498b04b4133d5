//! The scan run: one pinned sender thread per queue walking its part of the permutation, one
//! receiver thread reading the kernel-filtered replies, and the main thread showing status.
//! On SIGINT/SIGTERM the senders stop, the receiver keeps going for the cooldown, every output
//! is flushed and a checkpoint is written.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;
use sonde_io::{AnyRx, AnyTx, BackendKind, FrameRx, FrameTx, IoConfig};
use sonde_meter::{peak_rss_bytes, Counter, Stopwatch};
use sonde_scan::dedup::Dedup;
use sonde_scan::output::{open_writer, RowWriter};
use sonde_scan::probe::{RstTemplate, Verdict};
use sonde_scan::targets::{Cursor, Part, Permutation};
use sonde_scan::validate::PortRange;
use sonde_wire::{ethernet, ipv4, ipv6, EtherType};

use super::checkpoint::{Checkpoint, ThreadCheckpoint};
use super::status::StatusLine;
use super::ScanPlan;
use crate::tx::{pin_to_cpu, Pacer};

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
}

/// What a scan reports at the end (`--summary-json`).
#[derive(Serialize)]
struct Summary {
    targets: u64,
    sent: u64,
    wall_s: f64,
    send_wall_s: f64,
    pps: f64,
    received: u64,
    valid: u64,
    invalid: u64,
    hits: u64,
    repeats: u64,
    drops: u64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
    peak_rss_bytes: u64,
    dedup_reserved_bytes: u64,
    interrupted: bool,
    module: String,
    backend: String,
    rate_target_pps: f64,
}

pub fn run(plan: ScanPlan) -> anyhow::Result<()> {
    let plan = Arc::new(plan);
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .context("installing the Ctrl-C handler")?;
    }
    announce(&plan);
    let writer = open_writer(plan.format, plan.output.as_deref(), plan.fields.clone())?;
    let counts = Arc::new(Counts::default());
    let clock = Instant::now();
    let receiving = Arc::new(AtomicBool::new(true));
    let (queues, receivers) = open_io(&plan)?;
    let receiver = Receiver::open(&plan, receivers, writer, counts.clone(), clock)?;
    let senders = open_senders(&plan, queues)?;
    let watch = Stopwatch::start();
    let send_start = Instant::now();
    let states: Arc<Mutex<Vec<Option<ThreadCheckpoint>>>> =
        Arc::new(Mutex::new(vec![None; senders.len()]));

    let rx_thread = {
        let receiving = receiving.clone();
        std::thread::spawn(move || receiver.run(&receiving))
    };
    let mut status = StatusLine::new(&plan, counts.clone())?;
    let send_result = std::thread::scope(|scope| {
        let handles: Vec<_> = senders
            .into_iter()
            .enumerate()
            .map(|(t, (tx, cursor, pending, taken))| {
                let (plan, stop, counts, states) = (&plan, &stop, &counts, &states);
                scope.spawn(move || {
                    let mut s = Sender {
                        plan,
                        tx,
                        cursor,
                        pending,
                        taken,
                        clock,
                        pacer: Pacer::new(plan.rate / plan.threads as f64),
                    };
                    let r = s.run(t, stop, &counts.sent);
                    states.lock().expect("checkpoint lock")[t] = Some(s.checkpoint());
                    r.map(|()| Instant::now())
                })
            })
            .collect();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            status.tick(false)?;
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("sender thread panicked"))
            .collect::<anyhow::Result<Vec<Instant>>>()
    });
    // The send phase ends when the last sender finishes (each stamps its own end).
    let send_end = send_result
        .as_ref()
        .ok()
        .and_then(|ends| ends.iter().max().copied())
        .unwrap_or_else(Instant::now);
    let send_wall = send_end.duration_since(send_start);
    let interrupted = stop.load(Ordering::Relaxed);
    cooldown(&plan, &stop, &mut status)?;
    receiving.store(false, Ordering::Release);
    let (writer, dedup) = rx_thread.join().expect("receiver thread panicked")?;
    writer.finish().context("finishing the output")?;
    status.tick(true)?;
    send_result?;
    if interrupted {
        save_checkpoint(&plan, &states, counts.sent.get())?;
    }
    let cpu = watch.cpu();
    let summary = Summary {
        targets: plan.space.len(),
        sent: counts.sent.get(),
        wall_s: watch.wall().as_secs_f64(),
        send_wall_s: send_wall.as_secs_f64(),
        pps: counts.sent.get() as f64 / send_wall.as_secs_f64().max(1e-9),
        received: counts.received.get(),
        valid: counts.valid.get(),
        invalid: counts.invalid.get(),
        hits: counts.hits.get(),
        repeats: counts.repeats.get(),
        drops: counts.drops.get(),
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        peak_rss_bytes: peak_rss_bytes(),
        dedup_reserved_bytes: dedup.reserved_bytes(),
        interrupted,
        module: plan.module.name().into(),
        backend: plan.backend.name().into(),
        rate_target_pps: plan.rate,
    };
    report(&plan, &summary)?;
    Ok(())
}

fn announce(plan: &ScanPlan) {
    let source = match (&plan.module6, plan.space.ipv4_addresses()) {
        (Some(_), 0) => plan.source6.map_or("?".into(), |s| s.to_string()),
        (Some(_), _) => format!(
            "{} and {}",
            plan.setup.src_ip,
            plan.source6.map_or("?".into(), |s| s.to_string())
        ),
        (None, _) => plan.setup.src_ip.to_string(),
    };
    let probes = plan.space.len() / u64::from(plan.shard.1) * u64::from(plan.probes);
    let how_long = if plan.rate > 0.0 {
        format!("about {:.0} s", probes as f64 / plan.rate)
    } else {
        "as fast as possible".into()
    };
    let rate = if plan.rate > 0.0 {
        format!("{:.0} pps", plan.rate)
    } else {
        "unlimited rate".into()
    };
    eprintln!(
        "scan: {} (shard {} of {}): about {probes} probes with {} at {rate}, {how_long}, from {} on {}",
        plan.space.describe(),
        plan.shard.0,
        plan.shard.1,
        plan.module.name(),
        source,
        plan.iface
    );
}

type SenderParts = (AnyTx, Cursor, Vec<u64>, u64);

/// The scan's I/O: one transmit queue per sender thread and the receivers. With
/// `--rx-backend xdp` each queue gets an AF_XDP receiver behind sonde's reply filter (an AF_XDP
/// socket sees only its own queue), sharing the socket with that queue's sender when it
/// transmits over AF_XDP too (one socket per queue is all the kernel allows). Any other receiver
/// is one packet socket with the classic BPF filter, which sees every queue.
fn open_io(plan: &ScanPlan) -> anyhow::Result<(Vec<AnyTx>, Vec<AnyRx>)> {
    let queues = plan.queues.max(1);
    let spec = filter_spec(plan);
    let expr = plan.bpf_filter();
    let mut shared: Vec<Option<AnyTx>> = (0..queues).map(|_| None).collect();
    let mut receivers = Vec::new();
    if plan.rx_backend == BackendKind::Xdp {
        for q in 0..queues {
            let io = io_config(plan, q);
            if plan.backend == BackendKind::Xdp && q < plan.threads {
                let (tx, rx) = sonde_io::open_xdp_pair(&io, &spec)?;
                shared[q as usize] = Some(tx);
                receivers.push(rx);
            } else {
                receivers.push(AnyRx::open_filtered(BackendKind::Xdp, &io, &spec, &expr)?);
            }
        }
    } else {
        let rx = AnyRx::open_filtered(plan.rx_backend, &io_config(plan, 0), &spec, &expr)
            .with_context(|| {
                format!("opening the {} receiver on {}", plan.rx_backend, plan.iface)
            })?;
        receivers.push(rx);
    }
    let senders = (0..plan.threads)
        .map(|t| {
            let q = t % queues;
            match shared[q as usize].take() {
                Some(tx) => Ok(tx),
                None => AnyTx::open(plan.backend, &io_config(plan, q)).with_context(|| {
                    format!("opening {} on {} queue {q}", plan.backend, plan.iface)
                }),
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((senders, receivers))
}

fn io_config(plan: &ScanPlan, queue: u32) -> IoConfig {
    let mut io = IoConfig::new(&plan.iface);
    io.queue = queue;
    io.batch = plan.batch.max(256);
    io.xdp_mode = plan.xdp_mode;
    io
}

/// What the XDP reply filter lets through: the module's protocols, to our addresses, at our
/// source ports.
fn filter_spec(plan: &ScanPlan) -> sonde_io::FilterSpec {
    use sonde_scan::probe::ModuleKind::*;
    let v4 = plan.space.ipv4_addresses() > 0;
    let v6 = plan.module6.is_some();
    let (tcp, udp) = (
        if plan.module_kind == TcpSyn {
            sonde_io::TcpTake::SynAckOrRst
        } else {
            sonde_io::TcpTake::None
        },
        matches!(plan.module_kind, Udp | Dns),
    );
    let icmp = plan.module_kind != TcpSyn;
    sonde_io::FilterSpec {
        ipv4: v4.then_some(plan.setup.src_ip),
        ipv6: if v6 { plan.source6 } else { None },
        tcp,
        udp,
        icmp: icmp && v4,
        icmp6: icmp && v6,
        ports: (PortRange::DEFAULT.first, PortRange::DEFAULT.last),
    }
}

/// Each sender's cursor (fresh, or from the checkpoint), beside its transmit queue.
fn open_senders(plan: &ScanPlan, queues: Vec<AnyTx>) -> anyhow::Result<Vec<SenderParts>> {
    let permutation = Permutation::new(plan.space.len(), plan.seed);
    queues
        .into_iter()
        .zip(0..plan.threads)
        .map(|(tx, t)| {
            let (cursor, pending, taken) = match &plan.resume {
                Some(c) => {
                    let state = &c.threads[t as usize];
                    (
                        Cursor::from_state(&permutation, state.cursor)?,
                        state.pending.clone(),
                        state.taken,
                    )
                }
                None => (
                    permutation.cursor(Part::new(plan.shard.0, plan.shard.1, t, plan.threads)?),
                    Vec::new(),
                    0,
                ),
            };
            Ok((tx, cursor, pending, taken))
        })
        .collect()
}

/// One sender thread.
struct Sender<'a> {
    plan: &'a ScanPlan,
    tx: AnyTx,
    cursor: Cursor,
    /// Targets taken from the cursor and not yet accepted by the kernel, in order.
    pending: Vec<u64>,
    /// Targets taken from the cursor so far (each counted once, whatever --probes says).
    taken: u64,
    clock: Instant,
    pacer: Pacer,
}

impl Sender<'_> {
    fn run(&mut self, thread: usize, stop: &AtomicBool, sent: &Counter) -> anyhow::Result<()> {
        pin_to_cpu(thread % std::thread::available_parallelism().map_or(1, |n| n.get()));
        let limit = self.plan.max_targets.map(|n| {
            n / u64::from(self.plan.threads)
                + u64::from((thread as u64) < n % u64::from(self.plan.threads))
        });
        while !stop.load(Ordering::Relaxed) {
            self.top_up(limit);
            if self.pending.is_empty() {
                break;
            }
            self.pacer.wait(self.pending.len());
            let now_us = self.clock.elapsed().as_micros() as u32;
            let (plan, pending) = (self.plan, &self.pending);
            let n = self.tx.tx_batch(pending.len(), |i, buf| {
                let (addr, port) = plan.space.target_at(pending[i]);
                plan.write_probe(buf, addr, port, now_us)
            })?;
            self.pending.drain(..n);
            sent.add(n as u64);
        }
        self.pacer.finish();
        self.tx.flush()?;
        Ok(())
    }

    /// Fills the batch from the cursor (each target --probes times), within --max-targets.
    fn top_up(&mut self, limit: Option<u64>) {
        let probes = self.plan.probes as usize;
        while self.pending.len() + probes <= self.plan.batch.max(probes)
            && limit.is_none_or(|l| self.taken < l)
        {
            let Some(index) = self.cursor.next() else {
                break;
            };
            self.taken += 1;
            self.pending.extend(std::iter::repeat_n(index, probes));
        }
    }

    fn checkpoint(&self) -> ThreadCheckpoint {
        ThreadCheckpoint {
            cursor: self.cursor.state(),
            pending: self.pending.clone(),
            taken: self.taken,
        }
    }
}

/// Keeps receiving for the cooldown; a second Ctrl-C ends it early.
fn cooldown(plan: &ScanPlan, stop: &AtomicBool, status: &mut StatusLine) -> anyhow::Result<()> {
    stop.store(false, Ordering::Relaxed);
    let end = Instant::now() + Duration::from_secs_f64(plan.cooldown);
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        status.tick(false)?;
    }
    Ok(())
}

fn save_checkpoint(
    plan: &ScanPlan,
    states: &Mutex<Vec<Option<ThreadCheckpoint>>>,
    sent: u64,
) -> anyhow::Result<()> {
    let threads: Vec<ThreadCheckpoint> = states
        .lock()
        .expect("checkpoint lock")
        .iter()
        .flatten()
        .cloned()
        .collect();
    let before = plan.resume.as_ref().map_or(0, |c| c.sent);
    let checkpoint = Checkpoint {
        seed: plan.seed,
        key: plan.setup.validator.key(),
        module: plan.module_kind.name().into(),
        targets: plan.space.len(),
        shard: plan.shard,
        probes: plan.probes,
        sent: before + sent,
        threads,
    };
    checkpoint.save(&plan.checkpoint)?;
    eprintln!(
        "scan interrupted: checkpoint written to {}; finish with the same command plus --resume {} (and another -o)",
        plan.checkpoint.display(),
        plan.checkpoint.display()
    );
    Ok(())
}

fn report(plan: &ScanPlan, s: &Summary) -> anyhow::Result<()> {
    if !plan.quiet {
        eprintln!(
            "scan: sent {} probes in {:.2} s ({:.0} pps), {} replies: {} valid, {} invalid, {} hits, {} repeats; cpu {:.2} s user, {:.2} s system",
            s.sent, s.send_wall_s, s.pps, s.received, s.valid, s.invalid, s.hits, s.repeats, s.cpu_user_s, s.cpu_sys_s
        );
    }
    if let Some(path) = &plan.summary_json {
        crate::cmd::blast::write_json(path, s)?;
    }
    Ok(())
}

/// The receiving side: kernel-filtered frames in, validated rows out.
struct Receiver {
    rxs: Vec<AnyRx>,
    rst: Option<(AnyTx, RstTemplate)>,
    plan_module: Arc<ScanPlan>,
    writer: Box<dyn RowWriter + Send>,
    dedup: Dedup,
    counts: Arc<Counts>,
    clock: Instant,
    resets: Vec<(std::net::Ipv4Addr, u16, u16, u32)>,
}

impl Receiver {
    fn open(
        plan: &Arc<ScanPlan>,
        rxs: Vec<AnyRx>,
        writer: Box<dyn RowWriter + Send>,
        counts: Arc<Counts>,
        clock: Instant,
    ) -> anyhow::Result<Receiver> {
        let io = io_config(plan, 0);
        // When the source address is the host's own and the kernel sees the SYN-ACKs, it resets
        // them itself; behind the XDP reply filter it never sees them, so sonde must.
        let kernel_resets = plan.source_is_local && plan.rx_backend != BackendKind::Xdp;
        let rst = match plan.module_kind {
            sonde_scan::probe::ModuleKind::TcpSyn if !kernel_resets => Some((
                AnyTx::open(BackendKind::Mmsg, &io)?,
                RstTemplate::new(&plan.setup),
            )),
            _ => None,
        };
        let v4_only = plan.space.ipv6_addresses() == 0;
        Ok(Receiver {
            rxs,
            rst,
            plan_module: plan.clone(),
            writer,
            dedup: Dedup::for_scan(plan.space.ports().len(), v4_only, 1 << 20),
            counts,
            clock,
            resets: Vec::with_capacity(256),
        })
    }

    fn run(mut self, receiving: &AtomicBool) -> anyhow::Result<(Box<dyn RowWriter + Send>, Dedup)> {
        let mut error = None;
        while receiving.load(Ordering::Acquire) && error.is_none() {
            // Clocks are read once per batch, when its first frame is handed over (not before
            // the wait for it, which would make RTTs negative).
            let mut stamp: Option<(u32, u64)> = None;
            let clock = self.clock;
            let Receiver {
                rxs,
                plan_module,
                writer,
                dedup,
                counts,
                resets,
                rst,
                ..
            } = &mut self;
            // One receiver waits; several (one per queue) are polled in turn.
            let wait = Duration::from_millis(if rxs.len() == 1 { 50 } else { 2 });
            let mut handled = 0;
            for rx in rxs.iter_mut() {
                handled += rx.rx_batch(256, wait, |frame| {
                    let (now_us, epoch_us) = *stamp.get_or_insert_with(|| {
                        let epoch = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .map_or(0, |d| d.as_micros() as u64);
                        (clock.elapsed().as_micros() as u32, epoch)
                    });
                    if let Err(e) = handle(
                        frame,
                        plan_module,
                        writer.as_mut(),
                        dedup,
                        counts,
                        resets,
                        rst.is_some(),
                        now_us,
                        epoch_us,
                    ) {
                        error.get_or_insert(e);
                    }
                })?;
            }
            self.counts.received.add(handled as u64);
            self.send_resets()?;
            let drops: u64 = self.rxs.iter_mut().map(AnyRx::take_drops).sum();
            self.counts.drops.add(drops);
        }
        if let Some(e) = error {
            return Err(e);
        }
        self.writer.flush_rows()?;
        Ok((self.writer, self.dedup))
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

/// Hands the frame's IP packet to the module of its family.
fn classify(eth: &ethernet::Frame<&[u8]>, plan: &ScanPlan, now_us: u32) -> Verdict {
    match (eth.ethertype(), &plan.module6) {
        (EtherType::Ipv4, _) => match ipv4::Packet::new_checked(eth.payload()) {
            Ok(ip) => plan.module.classify(&ip, now_us),
            Err(_) => Verdict::NotOurs,
        },
        (EtherType::Ipv6, Some(m6)) => match ipv6::Packet::new_checked(eth.payload()) {
            Ok(ip) => m6.classify(&ip, now_us),
            Err(_) => Verdict::NotOurs,
        },
        _ => Verdict::NotOurs,
    }
}

/// One received frame: parse, validate, count, deduplicate, write.
#[allow(clippy::too_many_arguments)]
fn handle(
    frame: &[u8],
    plan: &ScanPlan,
    writer: &mut dyn RowWriter,
    dedup: &mut Dedup,
    counts: &Counts,
    resets: &mut Vec<(std::net::Ipv4Addr, u16, u16, u32)>,
    reset_synacks: bool,
    now_us: u32,
    epoch_us: u64,
) -> anyhow::Result<()> {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return Ok(());
    };
    let mut reply = match classify(&eth, plan, now_us) {
        Verdict::NotOurs => return Ok(()),
        Verdict::Invalid => {
            counts.invalid.add(1);
            return Ok(());
        }
        Verdict::Valid(r) => r,
    };
    counts.valid.add(1);
    reply.timestamp_us = epoch_us;
    reply.repeat = dedup.check_and_insert(reply.saddr, reply.sport);
    if reply.repeat {
        counts.repeats.add(1);
    } else if reply.success {
        counts.hits.add(1);
    }
    if reset_synacks && reply.classification == "synack" && !reply.repeat {
        // IPv4 only: an IPv6 scan from a non-local source is not supported by the lab yet.
        let ack = ipv4::Packet::new_checked(eth.payload())
            .ok()
            .and_then(|ip| {
                sonde_wire::tcp::Packet::new_checked(ip.payload())
                    .ok()
                    .map(|t| t.ack_number())
            });
        if let (IpAddr::V4(target), Some(ack)) = (reply.saddr, ack) {
            resets.push((target, reply.sport, reply.dport, ack));
        }
    }
    if plan.filter.matches(&reply) {
        writer.write(&reply)?;
    }
    Ok(())
}
