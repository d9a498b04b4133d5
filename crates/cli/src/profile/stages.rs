//! `sonde profile tx|rx|scan`: its arguments, the scans it runs (as `sonde scan` runs them,
//! in alternating plain and instrumented pairs for each batch size), the table printed and
//! the chart drawn. The arithmetic, the report and its CSV and JSON live in
//! `sonde_profile::stages`.

use std::path::{Path as FsPath, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser};
use sonde_engine::scan::ScanSummary;
use sonde_io::BackendKind;
use sonde_meter::output_file::{self, IfExists};
use sonde_meter::stages::{self, Role};
use sonde_plot::stages as plot;
pub use sonde_profile::stages::Path;
use sonde_profile::stages::{
    population_size, profile, run_size, table, write_outputs, CalibrationJson, Pooled, Report,
};
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
    write_outputs(&report, &args.out)?;
    draw(&report, &args.out)
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

/// The stacked-bar PNG, `profile-<path>.png`.
fn draw(report: &Report, out: &FsPath) -> anyhow::Result<()> {
    let png = out.join(format!("profile-{}.png", report.path));
    let title = format!(
        "sonde profile {}: CPU per packet by stage ({})",
        report.path,
        title_note(report)
    );
    plot::stacked_bars(
        &title,
        "measured CPU, no instrumentation",
        batches_view(report),
        &png,
    )
}

fn title_note(report: &Report) -> String {
    format!(
        "{} via {} / {}, {} CPUs",
        report.module, report.backend, report.rx_backend, report.cpus
    )
}

/// What the plot needs: per batch size, the stages bottom to top and the measured CPU.
fn batches_view<'a>(report: &'a Report) -> Vec<plot::Bar<'a>> {
    report
        .batches
        .iter()
        .map(|b| plot::Bar {
            batch: b.batch,
            stages: &b.stages,
            measured_ns: b.measured_ns,
        })
        .collect()
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
}
