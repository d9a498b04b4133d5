//! `sonde latency run`: the client. One run per rate, each for --duration seconds, every echo
//! timed on one clock; a table on stdout, and in --out a heat map per rate, the percentile
//! chart, the summary and (with --samples) every sample.

use std::io::{BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::{Path as FsPath, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use serde::Serialize;
use sonde_engine::host::{Host, HostRequest};
use sonde_engine::stop::Stop;
use sonde_latency::{
    hold_port, measure, reflector_answers, Clock, EchoLink, FrameEnds, FrameLink, KernelLink,
    RunReport, RunResult, RunSpec, HEADER_LEN,
};
use sonde_meter::output_file::{self, IfExists};
use sonde_wire::MacAddr;

use super::{open_frames, Path};
use crate::say;
use sonde_plot::latency::{self as plot, thousands, HeatTitle, RateCurve};

/// Largest payload that fits one 1500-byte IPv4 packet: 1500 - 20 (IPv4) - 8 (UDP).
const MAX_SIZE: usize = 1472;
const TS_SOURCE: &str =
    "software: user-space CLOCK_MONOTONIC, read right before the send and right after the read";

#[derive(Args)]
pub struct RunArgs {
    /// The reflector: ADDR:PORT (in a lab, an address of the lab).
    #[arg(long)]
    to: SocketAddrV4,
    /// Messages per second, one run each, in order: e.g. 10k,20k,30k,40k (k = thousand).
    #[arg(long, value_delimiter = ',', value_parser = parse_rate, default_value = "10k,20k,30k,40k", allow_negative_numbers = true)]
    rates: Vec<f64>,
    /// Seconds per rate.
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true, value_parser = crate::runargs::seconds_value)]
    duration: f64,
    /// UDP payload bytes per message: at least 24 (the message header), at most 1472 (one
    /// 1500-byte packet).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// How messages travel: kernel (UDP socket), ring (AF_PACKET rings), xdp (AF_XDP).
    #[arg(long, value_enum, default_value = "ring")]
    backend: Path,
    /// The lab to run in (sonde enters its scanner namespace); found by itself inside one.
    #[arg(long)]
    lab: Option<String>,
    /// Interface for ring and xdp (default: the lab's, or the default route's).
    #[arg(short = 'i', long)]
    iface: Option<String>,
    /// Next-hop MAC for ring and xdp (default: the gateway's, from the neighbour table).
    #[arg(short = 'G', long)]
    gateway_mac: Option<MacAddr>,
    /// Write the heat maps, the percentile chart and latency-summary.json here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write every sample (rate, send time, RTT) to latency-samples.csv in --out.
    #[arg(long, requires = "out")]
    samples: bool,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Overwrite --summary-json if it exists.
    #[arg(long)]
    force: bool,
    /// Seconds to wait for the reflector's first echo before giving up.
    #[arg(long, default_value_t = 3.0)]
    wait: f64,
    /// Milliseconds to wait for the last echoes after the last message of a rate.
    #[arg(long, default_value_t = 500)]
    drain_ms: u64,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (digits, scale) = match t.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1e3),
        None => (t, 1.0),
    };
    let v: f64 = digits.parse().map_err(|_| {
        format!("{text:?} is not a rate: give messages per second, e.g. 20k or 20000")
    })?;
    let v = v * scale;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!(
            "{text:?}: a rate must be above 0 messages per second"
        ));
    }
    if v > 10e6 {
        return Err(format!(
            "{text:?}: above 10M messages per second is not a latency run"
        ));
    }
    Ok(v)
}

/// The summary: what ran and every rate's figures.
#[derive(Serialize)]
struct Summary {
    to: String,
    backend: &'static str,
    path: String,
    size: usize,
    duration_s: f64,
    ts_source: &'static str,
    rates: Vec<RunReport>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    check(&args)?;
    let out = prepare_out(&args)?;
    let lab = enter_lab(&args)?;
    let stop = Stop::on_signals()?;
    let clock = Clock::new();
    let mut link = open_link(&args, lab.as_ref())?;
    let wait = Duration::from_secs_f64(args.wait);
    if !reflector_answers(link.as_mut(), &clock, wait, stop.flag())? {
        if stop.is_set() {
            bail!("interrupted before the reflector answered");
        }
        bail!(
            "no echo from {} within {} s: is `sonde latency reflect -p {}` running there, and does the path reach it?",
            args.to,
            args.wait,
            args.to.port()
        );
    }
    let describe = link.describe();
    if !args.quiet {
        say(format!(
            "sonde latency: {} over {} ({describe}) from {}; {} B payloads, {} s per rate; RTT timestamps {TS_SOURCE}",
            args.to,
            args.backend.name(),
            sonde_lab::where_am_i(),
            args.size,
            args.duration
        ));
        say(HEADER);
    }
    let mut results: Vec<RunResult> = Vec::new();
    for (i, &rate) in args.rates.iter().enumerate() {
        let spec = RunSpec {
            rate,
            duration: Duration::from_secs_f64(args.duration),
            drain: Duration::from_millis(args.drain_ms),
        };
        let result = measure(link.as_mut(), i as u32, &spec, &clock, stop.flag())
            .with_context(|| format!("measuring at {} pps", thousands(rate)))?;
        if !args.quiet {
            say(row(&result.report));
        }
        if let Some(warning) = contention_warning(&result.report) {
            sonde_engine::status::to_stderr(format_args!("sonde latency: warning: {warning}"));
        }
        results.push(result);
        if stop.is_set() {
            eprintln!("sonde latency: interrupted; the rates measured so far are reported");
            break;
        }
    }
    let summary = Summary {
        to: args.to.to_string(),
        backend: args.backend.name(),
        path: describe,
        size: args.size,
        duration_s: args.duration,
        ts_source: TS_SOURCE,
        rates: results.iter().map(|r| r.report.clone()).collect(),
    };
    write_outputs(&args, out.as_deref(), &summary, &results)
}

fn check(args: &RunArgs) -> anyhow::Result<()> {
    if !(args.duration > 0.0 && args.duration.is_finite()) {
        bail!(
            "--duration {} is not a number of seconds above 0",
            args.duration
        );
    }
    if !(HEADER_LEN..=MAX_SIZE).contains(&args.size) {
        bail!(
            "--size {}: a message needs {HEADER_LEN} to {MAX_SIZE} bytes ({HEADER_LEN} of header; at most one 1500-byte packet)",
            args.size
        );
    }
    if !(args.wait > 0.0 && args.wait.is_finite()) {
        bail!("--wait {} is not a number of seconds above 0", args.wait);
    }
    if args.to.port() == 0 {
        bail!("--to {}: port 0 is not a reflector's port", args.to);
    }
    crate::cmd::blast::check_summary(args.summary_json.as_deref(), IfExists::force(args.force))
}

/// Creates --out and checks that it can be written, before anything is sent.
fn prepare_out(args: &RunArgs) -> anyhow::Result<Option<PathBuf>> {
    let Some(dir) = &args.out else {
        return Ok(None);
    };
    let unwritable = |e: std::io::Error| anyhow!("cannot write to --out {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    // A new file of this process's own (never through a link someone planted in the folder).
    let probe = dir.join(format!(".sonde-latency-write-test.{}", std::process::id()));
    output_file::open(&probe, IfExists::Refuse)
        .map_err(|e| anyhow!("cannot write to --out {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(Some(dir.clone()))
}

/// Enters the lab (named, or the one sonde runs in) and pins to the CPUs it leaves to
/// senders; in a lab only the lab's addresses may be measured.
fn enter_lab(args: &RunArgs) -> anyhow::Result<Option<sonde_lab::LabStatus>> {
    let lab = crate::runargs::enter_lab(args.lab.as_deref())?;
    if let Some(lab) = &lab {
        let benchmarking: ipnet::Ipv4Net = "198.18.0.0/15".parse().expect("a fixed prefix");
        if !benchmarking.contains(args.to.ip()) {
            bail!(
                "--to {}: inside lab {} only the lab's addresses (198.18.0.0/15) may be measured",
                args.to,
                lab.name
            );
        }
        if let Some(cpus) = crate::runargs::lab_sender_cpus(lab) {
            sonde_engine::plan::pin_to_cpu(cpus[0]);
        }
    }
    Ok(lab)
}

fn open_link(
    args: &RunArgs,
    lab: Option<&sonde_lab::LabStatus>,
) -> anyhow::Result<Box<dyn EchoLink>> {
    if args.backend == Path::Kernel {
        let link = KernelLink::open(args.to, args.size)
            .with_context(|| format!("opening a UDP socket to {}", args.to))?;
        return Ok(Box::new(link));
    }
    let req = HostRequest {
        iface: args.iface.clone(),
        gateway_mac: args.gateway_mac,
        ..HostRequest::default()
    };
    if let Some(iface) = &args.iface {
        sonde_lab::check_interface(iface)?;
    }
    let host = Host::resolve(&req, lab.map(|l| l.scan_if.as_str()))?;
    let guard = hold_port(SocketAddrV4::new(host.src_ip, 0))?;
    let src = match guard.local_addr()? {
        std::net::SocketAddr::V4(a) => a,
        other => bail!("the port guard bound an IPv6 address {other}"),
    };
    let (tx, rxs) = open_frames(args.backend, &host.iface, src)?;
    let ends = FrameEnds {
        src_mac: host.src_mac,
        dst_mac: host.gateway_mac,
        src,
        dst: args.to,
    };
    Ok(Box::new(FrameLink::new(tx, rxs, ends, args.size, guard)))
}

const HEADER: &str = "     rate   achieved      sent    lost  reord   dup      p50      p90      p99    p99.9   p99.99        max  (RTT, µs)";

fn row(r: &RunReport) -> String {
    format!(
        "{:>9} {:>10} {:>9} {:>7} {:>6} {:>5} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.1}{}",
        thousands(r.target_pps),
        thousands(r.achieved_pps),
        r.sent,
        r.lost,
        r.reordered,
        r.duplicates,
        r.rtt.p50_us,
        r.rtt.p90_us,
        r.rtt.p99_us,
        r.rtt.p999_us,
        r.rtt.p9999_us,
        r.rtt.max_us,
        if r.interrupted { "  (interrupted)" } else { "" }
    ) + &match r.rx_drops {
        Some(n) if n > 0 => format!("  ({n} of the lost dropped in the receive rings)"),
        _ => String::new(),
    } + &match r.notes().as_slice() {
        [] => String::new(),
        notes => format!("  ← {}", notes.join("; ")),
    }
}

/// What a contended client means for its figures, and what to do about it; None when it had
/// its CPU.
fn contention_warning(r: &RunReport) -> Option<String> {
    let cpu = r.client_cpu;
    cpu.contended().then(|| {
        format!(
            "at {} pps the client had its CPU only {:.0} % of the time ({} times the scheduler ran something else there): its RTTs include waits for a CPU, not only the path; give it a CPU of its own (a lab brought up with --target-cpus leaves the others to sonde) or a quieter machine, and compare with --backend kernel",
            thousands(r.target_pps),
            100.0 * cpu.share,
            cpu.involuntary_switches
        )
    })
}

fn write_outputs(
    args: &RunArgs,
    out: Option<&FsPath>,
    summary: &Summary,
    results: &[RunResult],
) -> anyhow::Result<()> {
    if let Some(path) = &args.summary_json {
        crate::cmd::blast::write_json(path, summary, IfExists::force(args.force))?;
    }
    let Some(dir) = out else {
        return Ok(());
    };
    // The folder's own files are replaced on a second run into it, never written through a
    // link.
    let json = serde_json::to_string_pretty(summary)?;
    output_file::write_whole(
        &dir.join("latency-summary.json"),
        json.as_bytes(),
        IfExists::Overwrite,
    )?;
    for r in results {
        let title = HeatTitle {
            rate: r.report.target_pps,
            path: args.backend.name(),
            size: args.size,
        };
        let png = dir.join(format!(
            "latency-heatmap-{}.png",
            r.report.target_pps.round()
        ));
        plot::heat_map(&r.rtts.samples, &title, &png)?;
    }
    let curves: Vec<RateCurve> = results
        .iter()
        .map(|r| RateCurve {
            rate: r.report.target_pps,
            hist: &r.rtts.hist,
        })
        .collect();
    let title = format!(
        "RTT percentiles to {} over {} ({} B payloads)",
        args.to,
        args.backend.name(),
        args.size
    );
    plot::percentiles(&curves, &title, &dir.join("latency-percentiles.png"))?;
    if args.samples {
        write_samples(&dir.join("latency-samples.csv"), results)?;
    }
    if !args.quiet {
        say(format!(
            "wrote latency-summary.json, latency-percentiles.png and a heat map per rate{} to {}",
            if args.samples {
                ", latency-samples.csv"
            } else {
                ""
            },
            dir.display()
        ));
    }
    Ok(())
}

fn write_samples(path: &FsPath, results: &[RunResult]) -> anyhow::Result<()> {
    let mut w = BufWriter::new(output_file::open(path, IfExists::Overwrite)?);
    writeln!(w, "rate_pps,sent_ns,rtt_ns")?;
    for r in results {
        for s in &r.rtts.samples {
            writeln!(w, "{},{},{}", r.report.target_pps, s.sent_ns, s.rtt_ns)?;
        }
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's report with `achieved` of 20,000 pps, `lost` of 200,000 and the client on its
    /// CPU `share` of the time.
    fn report(achieved: f64, lost: u64, share: f64) -> RunReport {
        RunReport {
            target_pps: 20_000.0,
            achieved_pps: achieved,
            sent: 200_000,
            received: 200_000 - lost,
            lost,
            reordered: 0,
            duplicates: 0,
            foreign: 0,
            rx_drops: Some(0),
            rtt: Default::default(),
            interrupted: false,
            rate_reached: achieved >= sonde_latency::client::RATE_REACHED * 20_000.0,
            client_cpu: sonde_latency::ClientCpu {
                share,
                involuntary_switches: 4_321,
            },
        }
    }

    #[test]
    fn a_row_flags_a_rate_not_reached_and_losses() {
        let short = row(&report(17_411.0, 4_437, 0.4));
        assert!(
            short.ends_with("← rate not reached: 87.1 % of it; 4437 lost (2.22 %); client on its CPU 40 % of the time"),
            "{short}"
        );
        let clean = row(&report(20_000.0, 0, 1.0));
        assert!(!clean.contains('←'), "{clean}");
        let warning = contention_warning(&report(17_411.0, 4_437, 0.4)).unwrap();
        assert!(
            warning.contains("40 %") && warning.contains("4321"),
            "{warning}"
        );
        assert!(warning.contains("--target-cpus"), "{warning}");
        assert_eq!(contention_warning(&report(20_000.0, 0, 0.97)), None);
    }

    #[test]
    fn rates_parse_with_k_and_refuse_zero_negative_and_garbage() {
        assert_eq!(parse_rate("10k"), Ok(10_000.0));
        assert_eq!(parse_rate("2.5K"), Ok(2_500.0));
        assert_eq!(parse_rate("40000"), Ok(40_000.0));
        for bad in ["0", "-5k", "fast", "", "nan", "inf"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
}
