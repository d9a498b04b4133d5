//! The arithmetic of `sonde profile tx|rx|scan`: where the CPU time of sonde's own per-packet paths goes, stage
//! by stage, in ns per packet, for each batch size asked for.
//!
//! For each batch size real scans of the lab run, the same way `sonde scan` runs them, in
//! alternating pairs (`--runs`): without instrumentation (the sender's and receiver's thread
//! CPU per packet, user + system from getrusage, is what the stages must add up to), then with
//! the stage clock on (`sonde_meter::stages`): its laps, less the clock's own calibrated cost,
//! give the user stages; its timed system calls the kernel's work for them; what the
//! instrumented threads spent beyond all that is the kernel's rest. Out come a table on stdout,
//! `profile-<path>.csv`, `profile-<path>.json` (with the check) and a stacked-bar PNG.
//!
//! Here: pooling the runs' CPU ([`Pooled`]), each batch size's bars ([`profile`]), the
//! [`Report`], its table, CSV and JSON. `sonde profile` parses the arguments, runs the scans
//! and draws the chart (`sonde_plot::stages`).

use std::fmt::Write as _;
use std::path::Path as FsPath;

use serde::Serialize;
use sonde_engine::scan::ScanSummary;
use sonde_meter::output_file::{self, IfExists};
use sonde_meter::stages::{Breakdown, Calibration, Stage, Tally};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Tx,
    Rx,
    Scan,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Tx => "tx",
            Path::Rx => "rx",
            Path::Scan => "scan",
        }
    }
}

/// One batch size's result.
#[derive(Serialize)]
pub struct BatchProfile {
    pub batch: u32,
    /// Stage and ns per packet, the kernel's rest last: the bar, bottom to top.
    pub stages: Vec<(String, f64)>,
    pub sum_ns: f64,
    /// CPU per packet of the run without instrumentation (user + system).
    pub measured_ns: f64,
    pub ratio: f64,
    pub within_10_percent: bool,
    /// CPU per packet of the instrumented run, and what the clock's own cost taken out was.
    pub instrumented_ns: f64,
    pub overhead_ns: f64,
    /// Laps not charged because they took over 50 µs (preemptions), as a share of all laps.
    pub dropped_lap_share: f64,
    /// Packets of the uninstrumented and the instrumented runs, all of them (probes sent, or
    /// replies received for rx).
    pub packets: u64,
    pub packets_instrumented: u64,
    /// Packets of one instrumented run (the runs' average).
    pub packets_per_run: u64,
}

#[derive(Serialize)]
pub struct Report<'a> {
    pub path: &'static str,
    pub backend: &'static str,
    pub rx_backend: &'static str,
    pub module: &'static str,
    pub cpus: usize,
    pub calibration: CalibrationJson,
    pub batches: &'a [BatchProfile],
}

#[derive(Serialize)]
pub struct CalibrationJson {
    pub ticks_per_ns: f64,
    pub mark_ns: f64,
    pub call_ns: f64,
}

/// How many addresses an IPv4 prefix holds.
pub fn population_size(prefix: &str) -> Option<u64> {
    let net: ipnet::Ipv4Net = prefix.parse().ok()?;
    Some(1u64 << (32 - u32::from(net.prefix_len())))
}

/// Probes per target, and targets per run, for runs of `count` probes over a population of
/// `population` addresses (None: the targets the user gave, probed once each up to `count`).
/// A population smaller than `count` is probed again (at most 16 times) and the run stops at
/// `count` probes; when `count` is no multiple of the probes per target, at the multiple below.
pub fn run_size(count: u64, population: Option<u64>) -> (u64, u64) {
    match population {
        Some(size) if size < count => {
            let probes = count.div_ceil(size).min(MAX_PROBES);
            (probes, (count / probes).min(size))
        }
        _ => (1, count),
    }
}

/// `sonde scan --probes`' limit.
const MAX_PROBES: u64 = 16;

/// Runs of one kind pooled: packets and the sender's and receiver's CPU over all of them.
#[derive(Default)]
pub struct Pooled {
    sent: u64,
    received: u64,
    sender_ns: f64,
    receiver_ns: f64,
}

impl Pooled {
    pub fn add(&mut self, s: &ScanSummary) {
        self.sent += s.sent;
        self.received += s.received;
        self.sender_ns += (s.sender_user_ns_per_probe + s.sender_sys_ns_per_probe) * s.sent as f64;
        self.receiver_ns +=
            (s.receiver_user_ns_per_reply + s.receiver_sys_ns_per_reply) * s.received as f64;
    }

    fn sender_per_probe(&self) -> f64 {
        self.sender_ns / self.sent.max(1) as f64
    }

    fn receiver_per_reply(&self) -> f64 {
        self.receiver_ns / self.received.max(1) as f64
    }
}

/// One thread's path: its counters, packets, and CPU per packet of the runs with and
/// without instrumentation.
struct Part<'a> {
    stages: &'a [Stage],
    tally: &'a Tally,
    packets: u64,
    instrumented_ns: f64,
    measured_ns: f64,
}

/// The breakdown of one path of one batch size, per packet, and the overhead taken out.
fn breakdown(part: &Part, cal: &Calibration) -> (Breakdown, f64) {
    let n = part.packets.max(1) as f64;
    let mut per_packet: Vec<(Stage, f64)> = part
        .stages
        .iter()
        .map(|&s| (s, part.tally.ns(s, cal) / n))
        .collect();
    // The receiver also sends the RSTs for SYN-ACKs the kernel does not see: its transmit
    // stages, if any, count as output (user) and write syscall (kernel).
    if part.stages == Stage::RX {
        for s in Stage::TX {
            let ns = part.tally.ns(s, cal) / n;
            let into = if s.is_call() {
                Stage::Write
            } else {
                Stage::Output
            };
            if let Some(row) = per_packet.iter_mut().find(|(st, _)| *st == into) {
                row.1 += ns;
            }
        }
    }
    let overhead: f64 = Stage::TX
        .iter()
        .chain(Stage::RX.iter())
        .map(|&s| part.tally.overhead_ns(s, cal))
        .sum::<f64>()
        / n;
    let b = Breakdown::new(
        &per_packet,
        part.instrumented_ns,
        overhead,
        part.measured_ns,
    );
    (b, overhead)
}

/// One batch size's bars and check, from its plain and instrumented runs and the stage
/// clock's tallies.
pub fn profile(
    path: Path,
    batch: u32,
    plain: &Pooled,
    profiled: &Pooled,
    tx: &Tally,
    rx: &Tally,
    cal: &Calibration,
) -> BatchProfile {
    let tx_part = Part {
        stages: &Stage::TX,
        tally: tx,
        packets: profiled.sent,
        instrumented_ns: profiled.sender_per_probe(),
        measured_ns: plain.sender_per_probe(),
    };
    let rx_part = Part {
        stages: &Stage::RX,
        tally: rx,
        packets: profiled.received,
        instrumented_ns: profiled.receiver_per_reply(),
        measured_ns: plain.receiver_per_reply(),
    };
    // Each part with the weight of its packets per reported packet and the prefix of its
    // stage names. The scan as a whole is reported per probe sent: the receiver's cost per
    // reply weighed by replies per probe.
    let replies_per_probe = profiled.received as f64 / profiled.sent.max(1) as f64;
    let parts = match path {
        Path::Tx => vec![(tx_part, 1.0, "")],
        Path::Rx => vec![(rx_part, 1.0, "")],
        Path::Scan => vec![(tx_part, 1.0, "tx "), (rx_part, replies_per_probe, "rx ")],
    };
    let mut stages = Vec::new();
    let (mut sum_ns, mut measured_ns, mut overhead_ns, mut instrumented_ns) = (0.0, 0.0, 0.0, 0.0);
    let (mut laps, mut dropped) = (0, 0);
    for (part, weight, prefix) in &parts {
        let (b, overhead) = breakdown(part, cal);
        for (name, ns) in &b.stages {
            stages.push((format!("{prefix}{name}"), ns * weight));
        }
        stages.push((format!("{prefix}kernel (rest)"), b.kernel_rest_ns * weight));
        sum_ns += b.sum_ns * weight;
        measured_ns += b.measured_ns * weight;
        overhead_ns += overhead * weight;
        instrumented_ns += part.instrumented_ns * weight;
        laps += part.tally.laps.iter().sum::<u64>();
        dropped += part.tally.dropped_laps;
    }
    let ratio = sum_ns / measured_ns.max(f64::MIN_POSITIVE);
    BatchProfile {
        batch,
        stages,
        sum_ns,
        measured_ns,
        ratio,
        within_10_percent: (ratio - 1.0).abs() <= 0.10,
        instrumented_ns,
        overhead_ns,
        dropped_lap_share: dropped as f64 / (laps + dropped).max(1) as f64,
        packets: match path {
            Path::Rx => plain.received,
            _ => plain.sent,
        },
        packets_instrumented: match path {
            Path::Rx => profiled.received,
            _ => profiled.sent,
        },
        // Set by the caller, which knows how many runs were pooled.
        packets_per_run: 0,
    }
}

/// The table printed on stdout: one column per batch size.
pub fn table(report: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "sonde profile {}: {} (tx {}, rx {}), ns per {}; clock: one mark {:.1} ns, one timed call {:.0} ns (taken out)",
        report.path,
        report.module,
        report.backend,
        report.rx_backend,
        if report.path == "rx" { "reply" } else { "probe" },
        report.calibration.mark_ns,
        report.calibration.call_ns,
    );
    let _ = write!(t, "{:<22}", "stage \\ batch");
    for b in report.batches {
        let _ = write!(t, "{:>12}", b.batch);
    }
    t.push('\n');
    let names: Vec<&String> = report.batches[0].stages.iter().map(|(n, _)| n).collect();
    for (i, name) in names.iter().enumerate() {
        let _ = write!(t, "{name:<22}");
        for b in report.batches {
            let _ = write!(t, "{:>12.1}", b.stages[i].1);
        }
        t.push('\n');
    }
    type Cell = fn(&BatchProfile) -> String;
    let rows: [(&str, Cell); 7] = [
        ("= stages + kernel", |b| format!("{:.1}", b.sum_ns)),
        ("measured CPU (plain)", |b| format!("{:.1}", b.measured_ns)),
        ("ratio", |b| format!("{:.3}", b.ratio)),
        ("10 % check", |b| {
            check_mark(b.within_10_percent).to_string()
        }),
        ("CPU instrumented", |b| format!("{:.1}", b.instrumented_ns)),
        ("overhead taken out", |b| format!("{:.1}", b.overhead_ns)),
        ("packets per run", |b| b.packets_per_run.to_string()),
    ];
    for (label, cell) in rows {
        let _ = write!(t, "{label:<22}");
        for b in report.batches {
            let _ = write!(t, "{:>12}", cell(b));
        }
        t.push('\n');
    }
    t.push_str(&check_line(report.batches));
    t
}

fn check_mark(passed: bool) -> &'static str {
    if passed {
        "passed"
    } else {
        "FAILED"
    }
}

/// The check in one line: do the stages and the kernel's rest add up to the measured CPU
/// (within 10 %) for every batch size?
fn check_line(batches: &[BatchProfile]) -> String {
    let failed: Vec<String> = batches
        .iter()
        .filter(|b| !b.within_10_percent)
        .map(|b| format!("batch {}: ratio {:.3}", b.batch, b.ratio))
        .collect();
    if failed.is_empty() {
        "check passed: stages + kernel are within 10 % of the measured CPU for every batch size\n"
            .to_string()
    } else {
        format!(
            "check FAILED: stages + kernel are not within 10 % of the measured CPU ({})\n",
            failed.join("; ")
        )
    }
}

/// Writes `profile-<path>.csv` and `profile-<path>.json` into `out` (replaced on a second
/// run into the folder, never written through a link).
pub fn write_outputs(report: &Report, out: &FsPath) -> anyhow::Result<()> {
    let base = format!("profile-{}", report.path);
    let write = |name: String, bytes: Vec<u8>| {
        let file = out.join(name);
        output_file::write_whole(&file, &bytes, IfExists::Overwrite).map_err(anyhow::Error::from)
    };
    let mut csv = String::from("batch,stage,ns_per_packet\n");
    for b in report.batches {
        for (stage, ns) in &b.stages {
            let _ = writeln!(csv, "{},{stage},{ns:.3}", b.batch);
        }
    }
    write(format!("{base}.csv"), csv.into_bytes())?;
    write(format!("{base}.json"), serde_json::to_vec_pretty(report)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_send_the_count_asked_for() {
        // The README's `--count 100000` on a /16: 50,000 targets twice, not 65,536 twice.
        assert_eq!(run_size(100_000, Some(65_536)), (2, 50_000));
        assert_eq!(run_size(8_000, Some(1_024)), (8, 1_000));
        assert_eq!(run_size(1_000, Some(65_536)), (1, 1_000));
        assert_eq!(run_size(1_000, None), (1, 1_000));
        // Not a multiple: the multiple below; too few addresses: 16 times each at most.
        let (p, n) = run_size(100_001, Some(65_536));
        assert_eq!(p * n, 100_000);
        assert_eq!(run_size(1_000_000, Some(1_024)), (16, 1_024));
    }

    fn batch(n: u32, ratio: f64) -> BatchProfile {
        BatchProfile {
            batch: n,
            stages: Vec::new(),
            sum_ns: ratio * 100.0,
            measured_ns: 100.0,
            ratio,
            within_10_percent: (ratio - 1.0).abs() <= 0.10,
            instrumented_ns: 0.0,
            overhead_ns: 0.0,
            dropped_lap_share: 0.0,
            packets: 0,
            packets_instrumented: 0,
            packets_per_run: 0,
        }
    }

    #[test]
    fn the_check_says_passed_or_failed() {
        assert!(check_line(&[batch(1, 1.02), batch(8, 0.95)]).starts_with("check passed"));
        let failed = check_line(&[batch(1, 1.25), batch(8, 1.0)]);
        assert!(
            failed.starts_with("check FAILED") && failed.contains("batch 1: ratio 1.250"),
            "{failed}"
        );
        assert!(!failed.contains("batch 8"), "{failed}");
    }

    #[test]
    fn population_sizes() {
        assert_eq!(population_size("198.18.0.0/22"), Some(1024));
        assert_eq!(population_size("nonsense"), None);
    }
}
