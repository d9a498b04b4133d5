//! `sonde profile tx|rx|scan`: where the CPU time of sonde's own per-packet paths goes, stage
//! by stage, in ns per packet, for each batch size asked for.
//!
//! For each batch size real scans of the lab run, the same way `sonde scan` runs them, in
//! alternating pairs (`--runs`): without instrumentation (the sender's and receiver's thread
//! CPU per packet, user + system from getrusage, is what the stages must add up to), then with
//! the stage clock on (`sonde_meter::stages`): its laps, less the clock's own calibrated cost,
//! give the user stages; its timed system calls the kernel's work for them; what the
//! instrumented threads spent beyond all that is the kernel's rest. Out come a table on stdout,
//! `profile-<path>.csv`, `profile-<path>.json` (with the check) and a stacked-bar PNG.

use std::fmt::Write as _;
use std::path::{Path as FsPath, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser};
use serde::Serialize;
use sonde_engine::scan::ScanSummary;
use sonde_io::BackendKind;
use sonde_meter::output_file::{self, IfExists};
use sonde_meter::stages::{self, Breakdown, Calibration, Role, Stage, Tally};
use sonde_plot::stages as plot;
use sonde_scan::probe::ModuleKind;

use crate::runargs;
use crate::scan::ScanArgs;

#[derive(Args)]
pub struct StagesArgs {
    /// The lab whose population is scanned (sonde profile sends only inside a lab).
    #[arg(long)]
    lab: String,
    /// Targets (default: the lab's population).
    targets: Vec<String>,
    /// Transmit backend: xdp, ring, mmsg, sendto, pcap.
    #[arg(long, default_value = "xdp", value_parser = runargs::backend_parser())]
    backend: BackendKind,
    /// Receive backend: ring, xdp, mmsg, pcap.
    #[arg(long, default_value = "ring", value_parser = runargs::rx_backend_parser())]
    rx_backend: BackendKind,
    /// Batch sizes, comma separated: one stacked bar each. They are the sender's (scan
    /// --batch); the receiver always takes up to 256 frames per receiver and call.
    #[arg(long, default_value = "1,8,64")]
    batch: String,
    /// Probes per run (targets are probed again, up to 16 times, when there are fewer).
    #[arg(long, default_value_t = 200_000)]
    count: u64,
    /// Probe module: tcp_syn, icmp_echo, udp, dns.
    #[arg(short = 'M', long = "probe-module", default_value = "tcp_syn")]
    module: ModuleKind,
    /// Ports (default 80).
    #[arg(short = 'p', long)]
    ports: Option<String>,
    /// Send rate in probes per second; 0 = as fast as possible. Default: full speed for tx
    /// and scan; 200000 for rx, a rate a lab on one CPU answers in full, so the receiver is
    /// not starved by the sender on the same CPU.
    #[arg(short = 'r', long, allow_negative_numbers = true, value_parser = crate::runargs::rate_value)]
    rate: Option<f64>,
    /// Runs without and with instrumentation per batch size (alternating; each side pooled).
    #[arg(long, default_value_t = 3, value_parser = crate::runargs::number_from(1u32, 20))]
    runs: u32,
    /// Seconds to keep receiving after the last probe.
    #[arg(long, default_value_t = 1.0)]
    cooldown: f64,
    /// Where the CSV, JSON and PNG go.
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Tx,
    Rx,
    Scan,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Tx => "tx",
            Path::Rx => "rx",
            Path::Scan => "scan",
        }
    }
}

/// One batch size's result.
#[derive(Serialize)]
struct BatchProfile {
    batch: u32,
    /// Stage and ns per packet, the kernel's rest last: the bar, bottom to top.
    stages: Vec<(String, f64)>,
    sum_ns: f64,
    /// CPU per packet of the run without instrumentation (user + system).
    measured_ns: f64,
    ratio: f64,
    within_10_percent: bool,
    /// CPU per packet of the instrumented run, and what the clock's own cost taken out was.
    instrumented_ns: f64,
    overhead_ns: f64,
    /// Laps not charged because they took over 50 µs (preemptions), as a share of all laps.
    dropped_lap_share: f64,
    /// Packets of the uninstrumented and the instrumented runs, all of them (probes sent, or
    /// replies received for rx).
    packets: u64,
    packets_instrumented: u64,
    /// Packets of one instrumented run (the runs' average).
    packets_per_run: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    path: &'static str,
    backend: &'static str,
    rx_backend: &'static str,
    module: &'static str,
    cpus: usize,
    calibration: CalibrationJson,
    batches: &'a [BatchProfile],
}

#[derive(Serialize)]
struct CalibrationJson {
    ticks_per_ns: f64,
    mark_ns: f64,
    call_ns: f64,
}

pub fn run(path: Path, args: StagesArgs) -> anyhow::Result<()> {
    let batches = parse_batches(&args.batch)?;
    prepare_out(&args.out)?;
    let lab = sonde_lab::status(&args.lab)?;
    let targets = match args.targets.is_empty() {
        true => vec![lab.population.clone()],
        false => args.targets.clone(),
    };
    let size = population_size(&lab.population).filter(|_| args.targets.is_empty());
    let (probes, targets_per_run) = run_size(args.count, size);
    if probes * targets_per_run != args.count && size.is_some() {
        eprintln!(
            "sonde profile: {} probes per run ({targets_per_run} targets × {probes}), the nearest to --count {} the lab's population allows",
            probes * targets_per_run,
            args.count
        );
    }
    let mut profiles = Vec::new();
    let mut calibration = None;
    for &batch in &batches {
        let scan = scan_args(path, &args, &targets, size, batch)?;
        // Plain and instrumented runs alternate, so a slow spell of a shared machine falls on
        // both; each side is pooled over its runs.
        let (mut plain, mut profiled) = (Pooled::default(), Pooled::default());
        let mut cal = None;
        for _ in 0..args.runs {
            plain.add(&run_scan(&scan, &args.out)?);
            let batch_cal = stages::enable(sonde_io::cycle_counter());
            cal.get_or_insert(batch_cal);
            let run = run_scan(&scan, &args.out);
            stages::disable();
            profiled.add(&run?);
        }
        let cal = cal.expect("at least one run");
        calibration.get_or_insert(cal);
        let (tx, rx) = (stages::take(Role::Tx), stages::take(Role::Rx));
        let mut p = profile(path, batch, &plain, &profiled, &tx, &rx, &cal);
        p.packets_per_run = p.packets_instrumented / u64::from(args.runs.max(1));
        profiles.push(p);
    }
    let cal = calibration.expect("at least one batch size");
    let report = Report {
        path: path.name(),
        backend: args.backend.name(),
        rx_backend: args.rx_backend.name(),
        module: args.module.name(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        calibration: CalibrationJson {
            ticks_per_ns: cal.ticks_per_ns,
            mark_ns: cal.mark_ticks / cal.ticks_per_ns,
            call_ns: cal.call_ns,
        },
        batches: &profiles,
    };
    print!("{}", table(&report));
    write_outputs(&report, &args.out)
}

/// `1,8,64` → [1, 8, 64].
fn parse_batches(text: &str) -> anyhow::Result<Vec<u32>> {
    let sizes: Vec<u32> = text
        .split(',')
        .map(|t| match t.trim().parse::<u32>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(n),
            _ => Err(anyhow!(
                "invalid --batch \"{text}\": give batch sizes from 1 to 4096, comma separated, like 1,8,64"
            )),
        })
        .collect::<anyhow::Result<_>>()?;
    if sizes.is_empty() {
        bail!("invalid --batch \"{text}\": give at least one batch size");
    }
    Ok(sizes)
}

/// Makes sure `--out` is a folder that can be written, before any scan runs.
fn prepare_out(out: &FsPath) -> anyhow::Result<()> {
    // A new file of this process's own (never through a link someone planted in the folder).
    let probe = out.join(format!(".sonde-profile-write-test.{}", std::process::id()));
    let unwritable = |e: &dyn std::fmt::Display| {
        anyhow!(
            "cannot write to --out {}: {e}; give a folder you can write",
            out.display()
        )
    };
    std::fs::create_dir_all(out).map_err(|e| unwritable(&e))?;
    output_file::open(&probe, IfExists::Refuse).map_err(|e| unwritable(&e))?;
    std::fs::remove_file(&probe).map_err(|e| unwritable(&e))
}

/// How many addresses an IPv4 prefix holds.
fn population_size(prefix: &str) -> Option<u64> {
    let net: ipnet::Ipv4Net = prefix.parse().ok()?;
    Some(1u64 << (32 - u32::from(net.prefix_len())))
}

/// The `sonde scan` command line of one run: full speed, quiet, a fixed seed so both runs of
/// a batch size probe the same targets in the same order.
fn scan_args(
    path: Path,
    args: &StagesArgs,
    targets: &[String],
    population: Option<u64>,
    batch: u32,
) -> anyhow::Result<ScanArgs> {
    let (probes, limit) = run_size(args.count, population);
    let mut argv: Vec<String> = ["scan", "--lab", &args.lab, "--no-default-blocklist", "-q"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = &args.out;
    let scratch = |name: &str| out.join(name).to_string_lossy().into_owned();
    argv.extend([
        "--rate".into(),
        args.rate
            .unwrap_or(if path == Path::Rx { 200_000.0 } else { 0.0 })
            .to_string(),
        "--seed".into(),
        "1".into(),
        "--batch".into(),
        batch.to_string(),
        "--probes".into(),
        probes.to_string(),
        "--backend".into(),
        args.backend.name().into(),
        "--rx-backend".into(),
        args.rx_backend.name().into(),
        "-M".into(),
        args.module.name().into(),
        "--cooldown".into(),
        args.cooldown.to_string(),
        "-o".into(),
        scratch(".sonde-profile-rows.csv"),
        "--force".into(),
        "--checkpoint".into(),
        scratch(".sonde-profile.checkpoint.json"),
    ]);
    argv.extend(["-n".into(), limit.to_string()]);
    if let Some(p) = &args.ports {
        argv.extend(["-p".into(), p.clone()]);
    }
    argv.extend(targets.iter().cloned());
    #[derive(Parser)]
    struct Scan {
        #[command(flatten)]
        args: ScanArgs,
    }
    Ok(Scan::try_parse_from(argv)
        .map_err(|e| anyhow!("sonde profile: {}", e.to_string().trim()))?
        .args)
}

/// Probes per target, and targets per run, for runs of `count` probes over a population of
/// `population` addresses (None: the targets the user gave, probed once each up to `count`).
/// A population smaller than `count` is probed again (at most 16 times) and the run stops at
/// `count` probes; when `count` is no multiple of the probes per target, at the multiple below.
fn run_size(count: u64, population: Option<u64>) -> (u64, u64) {
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

fn run_scan(scan: &ScanArgs, out: &FsPath) -> anyhow::Result<ScanSummary> {
    let summary = crate::scan::run_for_summary(scan);
    let _ = std::fs::remove_file(out.join(".sonde-profile-rows.csv"));
    let _ = std::fs::remove_file(out.join(".sonde-profile.checkpoint.json"));
    let summary = summary.context("the profiled scan failed")?;
    if summary.sent == 0 {
        bail!("the profiled scan sent nothing: check the targets and the lab");
    }
    Ok(summary)
}

/// Runs of one kind pooled: packets and the sender's and receiver's CPU over all of them.
#[derive(Default)]
struct Pooled {
    sent: u64,
    received: u64,
    sender_ns: f64,
    receiver_ns: f64,
}

impl Pooled {
    fn add(&mut self, s: &ScanSummary) {
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

fn profile(
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
fn table(report: &Report) -> String {
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

fn write_outputs(report: &Report, out: &FsPath) -> anyhow::Result<()> {
    let base = format!("profile-{}", report.path);
    let write = |name: String, bytes: Vec<u8>| {
        let file = out.join(name);
        // Replaced on a second run into the folder, never written through a link.
        output_file::write_whole(&file, &bytes, IfExists::Overwrite).map_err(anyhow::Error::from)
    };
    let mut csv = String::from("batch,stage,ns_per_packet\n");
    for b in report.batches {
        for (stage, ns) in &b.stages {
            let _ = writeln!(csv, "{},{stage},{ns:.3}", b.batch);
        }
    }
    write(format!("{base}.csv"), csv.into_bytes())?;
    write(format!("{base}.json"), serde_json::to_vec_pretty(report)?)?;
    let png = out.join(format!("{base}.png"));
    let title = format!(
        "sonde profile {}: CPU per packet by stage ({})",
        report.path,
        title_note(report)
    );
    plot::stacked_bars(
        &title,
        "measured CPU, no instrumentation",
        report.batches_view(),
        &png,
    )
}

fn title_note(report: &Report) -> String {
    format!(
        "{} via {} / {}, {} CPUs",
        report.module, report.backend, report.rx_backend, report.cpus
    )
}

impl Report<'_> {
    /// What the plot needs: per batch size, the stages bottom to top and the measured CPU.
    fn batches_view(&self) -> Vec<plot::Bar<'_>> {
        self.batches
            .iter()
            .map(|b| plot::Bar {
                batch: b.batch,
                stages: &b.stages,
                measured_ns: b.measured_ns,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_lists_parse_or_name_the_input() {
        assert_eq!(parse_batches("1,8, 64").unwrap(), vec![1, 8, 64]);
        for bad in ["", "0", "1,x", "5000"] {
            let e = parse_batches(bad).unwrap_err().to_string();
            assert!(e.contains("--batch"), "{e}");
        }
    }

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
