//! The delay line as a process: read the spec, open both directions' rings, run a thread per
//! direction, and rewrite the counters every 100 ms until killed (`lab down` sends SIGTERM).

use std::convert::Infallible;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use sonde_io::{AnyTx, BackendKind, FrameTx, IoConfig, RingRx};
use sonde_lab::path::{PathCounters, PathFlow, PathSpec, STATS_FILE};

use crate::line::Line;

/// Frames read off the receive ring before the due ones are sent.
const BATCH: usize = 256;
/// Frames sent with one `sendmmsg`, at most.
const SEND_BATCH: usize = 256;
/// A due time this close is waited for without sleeping.
const SPIN_NS: u64 = 20_000;
/// The longest sleep: nothing is due, and no frame arrives.
const IDLE_NS: u64 = 50_000_000;
/// How often a direction hands its counters over, and reads its ring's drops.
const PUBLISH_NS: u64 = 1_000_000;
const RING_DROPS_NS: u64 = 100_000_000;
/// How often the counters are written.
const WRITE_EVERY: Duration = Duration::from_millis(100);
/// Requested timer slack of the forwarding threads (ns): how late the kernel may wake them.
const TIMER_SLACK_NS: u64 = 1_000;

/// Runs the delay line of `dir/spec.json` until killed.
pub fn run(dir: &Path) -> Result<Infallible> {
    let spec_file = dir.join("spec.json");
    let text = fs::read_to_string(&spec_file)
        .with_context(|| format!("reading {}", spec_file.display()))?;
    let spec: PathSpec =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", spec_file.display()))?;
    spec.config.validate()?;
    let clock = Clock::start();
    // Both directions' rings first, so a bad interface fails before anything runs.
    let to_lab = Ends::open(&spec.scan_side, &spec.net_side)?;
    let to_scanner = Ends::open(&spec.net_side, &spec.scan_side)?;
    let flows: Arc<[Mutex<PathFlow>; 2]> = Arc::default();
    let base = [tx_dropped(&spec.net_side), tx_dropped(&spec.scan_side)];
    let mut threads = Vec::new();
    for (i, ends) in [to_lab, to_scanner].into_iter().enumerate() {
        let line = Line::new(&spec.config, spec.seed ^ i as u64);
        let flows = Arc::clone(&flows);
        let name = ["path to lab", "path to scanner"][i];
        let handle = thread::Builder::new()
            .name(name.into())
            .spawn(move || forward(ends, line, clock, &flows[i]))
            .map_err(|e| anyhow!("cannot start the {name} thread: {e}"))?;
        threads.push(handle);
    }
    loop {
        let mut counters = PathCounters {
            written_unix_ms: unix_ns() / 1_000_000,
            to_lab: lock(&flows[0]),
            to_scanner: lock(&flows[1]),
        };
        counters.to_lab.link_dropped = tx_dropped(&spec.net_side).saturating_sub(base[0]);
        counters.to_scanner.link_dropped = tx_dropped(&spec.scan_side).saturating_sub(base[1]);
        write_stats(dir, &counters)?;
        check_threads(&mut threads)?;
        thread::sleep(WRITE_EVERY);
    }
}

fn lock(flow: &Mutex<PathFlow>) -> PathFlow {
    *flow.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails with a thread's error once one has ended (they run until the process ends).
fn check_threads(threads: &mut Vec<JoinHandle<Result<Infallible>>>) -> Result<()> {
    if let Some(i) = threads.iter().position(JoinHandle::is_finished) {
        let name = threads[i].thread().name().unwrap_or("path").to_string();
        match threads.swap_remove(i).join() {
            Ok(Err(e)) => bail!("the {name} thread stopped: {e:#}"),
            _ => bail!("the {name} thread stopped"),
        }
    }
    Ok(())
}

/// Writes the counters atomically (temporary file, then rename).
fn write_stats(dir: &Path, counters: &PathCounters) -> Result<()> {
    let path = dir.join(STATS_FILE);
    let tmp = dir.join(format!("{STATS_FILE}.tmp"));
    let text = serde_json::to_string_pretty(counters)? + "\n";
    fs::write(&tmp, text)
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// The veth's count of frames it could not hand to its peer (0 if unreadable).
fn tx_dropped(iface: &str) -> u64 {
    fs::read_to_string(format!("/sys/class/net/{iface}/statistics/tx_dropped"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The line's clock: ns of wall-clock time since the delay line started (the receive ring
/// stamps frames with wall-clock time).
#[derive(Clone, Copy)]
struct Clock {
    epoch_unix_ns: u64,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            epoch_unix_ns: unix_ns(),
        }
    }

    fn now(self) -> u64 {
        unix_ns().saturating_sub(self.epoch_unix_ns)
    }

    /// A frame's arrival from its receive stamp (`now` when it has none, and never later).
    fn arrival(self, stamp_unix_ns: u64, now: u64) -> u64 {
        if stamp_unix_ns == 0 {
            return now;
        }
        stamp_unix_ns.saturating_sub(self.epoch_unix_ns).min(now)
    }
}

/// A direction's sockets: a receive ring on one interface, a sending socket on the other.
struct Ends {
    rx: RingRx,
    tx: AnyTx,
}

impl Ends {
    fn open(from: &str, to: &str) -> Result<Ends> {
        let rx = RingRx::open_forwarding(from, None)
            .with_context(|| format!("a receive ring on {from}"))?;
        let mut io = IoConfig::new(to);
        io.batch = SEND_BATCH;
        let tx = AnyTx::open(BackendKind::Mmsg, &io)
            .with_context(|| format!("a sending socket on {to}"))?;
        Ok(Ends { rx, tx })
    }
}

/// Forwards one direction until an error: read what arrived, send what is due, sleep until the
/// next due time or arrival.
fn forward(
    mut ends: Ends,
    mut line: Line,
    clock: Clock,
    out: &Mutex<PathFlow>,
) -> Result<Infallible> {
    // A refusal only makes the wake-ups later (the default slack is 50 µs).
    let _ = nix::sys::prctl::set_timerslack(TIMER_SLACK_NS);
    let fd = ends.rx.raw_fd();
    let (mut ring_drops, mut publish_at, mut drops_at) = (0, 0, 0);
    loop {
        let now = clock.now();
        let got = ends.rx.rx_packets(BATCH, Duration::ZERO, |p| {
            if p.data.len() < p.wire_len as usize {
                line.admit_cut_short();
            } else {
                line.admit(clock.arrival(p.ts_ns, now), p.data);
            }
        })?;
        let now = clock.now();
        send_due(&mut line, &mut ends.tx, now)?;
        if now >= drops_at {
            ring_drops += ends.rx.take_counts().1;
            drops_at = now + RING_DROPS_NS;
        }
        // Handed over at most every PUBLISH_NS while busy, and before every sleep, so the
        // counters written are never older than a writing interval.
        let sleeping = got < BATCH;
        if now >= publish_at || sleeping {
            let mut flow = line.counts();
            flow.rx_ring_full = ring_drops;
            *out.lock().unwrap_or_else(|e| e.into_inner()) = flow;
            publish_at = now + PUBLISH_NS;
        }
        if !sleeping {
            continue;
        }
        let wait = line
            .next_due()
            .map_or(IDLE_NS, |due| due.saturating_sub(clock.now()))
            .min(IDLE_NS);
        if wait >= SPIN_NS {
            sonde_io::poll_any_precise(&[fd], Duration::from_nanos(wait))?;
        } else if wait > 0 {
            thread::yield_now();
        }
    }
}

/// Sends every due frame, a batch at a time.
fn send_due(line: &mut Line, tx: &mut AnyTx, now: u64) -> Result<()> {
    loop {
        let due = line.ready(now).min(SEND_BATCH);
        if due == 0 {
            return Ok(());
        }
        tx.tx_batch(due, |_, buf| line.send_next(now, buf))?;
    }
}
