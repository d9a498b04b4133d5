//! `sonde blast`: transmit frames from a template as fast as a backend allows, inside a lab.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use sonde_craft::{ProbeKind, Targets, Template, TemplateSpec};
use sonde_io::{BackendKind, IoConfig, XdpMode};
use sonde_lab::LabStatus;
use sonde_meter::output_file::{self, IfExists};
use sonde_meter::{parse_link, Counter, TxSummary};
use sonde_wire::MacAddr;

use crate::metrics::{LivePage, MetricsArgs, RunLabels};
use crate::progress::Status;
use sonde_engine::tx::{self, Limit, TxPlan};

/// Where and how to transmit: shared by `blast` and `bench`.
#[derive(Args, Clone)]
pub struct LabTarget {
    /// The lab to send in (sonde enters its scanner namespace). Not needed when already
    /// running inside one, e.g. through `sonde lab exec`.
    #[arg(long)]
    pub lab: Option<String>,
    /// Interface to send on (default: the lab's scanner interface).
    #[arg(short = 'i', long)]
    pub iface: Option<String>,
    /// Next-hop MAC address (default: the gateway's entry in the neighbour table).
    #[arg(long)]
    pub dst_mac: Option<MacAddr>,
    /// Frame size in bytes without FCS, 60 to 1514.
    #[arg(long, default_value_t = 60, value_parser = crate::runargs::number_from(60u16, 1514))]
    pub size: u16,
    /// Destination TCP/UDP ports, cycled through with the addresses (default: the lab's open ports).
    #[arg(long, value_delimiter = ',')]
    pub ports: Option<Vec<u16>>,
    /// AF_XDP attach mode: auto (native, falling back to generic), native, or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: XdpMode,
}

#[derive(Args)]
pub struct BlastArgs {
    #[command(flatten)]
    target: LabTarget,
    /// I/O backend: xdp, ring, mmsg, sendto, pcap (mem is for tests).
    #[arg(long, default_value = "xdp")]
    backend: BackendKind,
    /// Frames handed to the kernel per batch.
    #[arg(long, default_value_t = 64, value_parser = crate::runargs::number_from(1u32, 4096))]
    batch: u32,
    /// Sender threads, one per queue, each pinned to a CPU.
    #[arg(long, default_value_t = 1, value_parser = crate::runargs::number_from(1u32, 64))]
    threads: u32,
    /// Frames to send (default 1,000,000 unless --duration is given).
    #[arg(long, conflicts_with = "duration")]
    count: Option<u64>,
    /// Seconds to send for.
    #[arg(long, allow_negative_numbers = true, value_parser = crate::runargs::seconds_value)]
    duration: Option<f64>,
    /// Packets per second over all threads; 0 = unlimited.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Frame template: syn (TCP SYN) or udp.
    #[arg(long, default_value = "syn")]
    probe: ProbeKind,
    /// Link speed for the line-rate share: 1g, 10g, 25g, 100g, …
    #[arg(long, default_value = "10g", value_parser = parse_link)]
    link: f64,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Overwrite --summary-json if it exists.
    #[arg(long)]
    force: bool,
    /// No live status line.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
}

pub fn run(args: BlastArgs) -> anyhow::Result<()> {
    let summary_mode = IfExists::force(args.force);
    check_summary(args.summary_json.as_deref(), summary_mode)?;
    let limit = match (args.count, args.duration) {
        (_, Some(d)) if d > 0.0 && d.is_finite() => Limit::Duration(Duration::from_secs_f64(d)),
        (_, Some(_)) => bail!("--duration must be a positive number of seconds"),
        (Some(n), None) => Limit::Count(n),
        (None, None) => Limit::Count(1_000_000),
    };
    if !(args.rate >= 0.0 && args.rate.is_finite()) {
        bail!("--rate must be 0 (unlimited) or a positive number of packets per second");
    }
    let lab = enter_lab(&args.target)?;
    let plan = plan(
        &args.target,
        &lab,
        args.backend,
        args.batch as usize,
        args.threads as usize,
        limit,
        args.rate,
        args.probe,
    )?;
    let labels = RunLabels {
        command: "blast",
        module: match args.probe {
            ProbeKind::TcpSyn => "syn",
            ProbeKind::Udp => "udp",
        },
        backend: plan.backend.name(),
        shard: 0,
        target_rate: args.rate,
    };
    let metrics = args.metrics.start(labels, args.quiet)?;
    let live = metrics.publisher().map(LivePage::new);
    let summary = run_with_status(&plan, args.link, args.quiet, live)?;
    crate::say(summary.to_text());
    if let Some(path) = &args.summary_json {
        write_json(path, &summary, summary_mode)?;
    }
    metrics.end(&summary)
}

/// Enters the lab's scanner namespace (or checks that we are in one) and returns its status.
/// This is where the safety rule is enforced: sonde transmits only inside a lab.
pub fn enter_lab(target: &LabTarget) -> anyhow::Result<LabStatus> {
    enter_named_lab(target.lab.as_deref())
}

/// [`enter_lab`] by name (`None`: the lab this process already runs in, if any).
pub fn enter_named_lab(lab: Option<&str>) -> anyhow::Result<LabStatus> {
    let name = match (lab, sonde_lab::current_lab()) {
        (Some(name), _) => {
            let status = sonde_lab::status(name)?;
            sonde_lab::enter_scan_ns(name)?;
            return Ok(status);
        }
        (None, Some(name)) => name,
        (None, None) => bail!(
            "sonde transmits only inside a lab: pass --lab NAME (create one with: sonde lab up --name NAME), or run through: sonde lab exec --name NAME -- sonde ..."
        ),
    };
    sonde_lab::status(&name)
}

/// Builds a transmit plan for the lab's population.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    target: &LabTarget,
    lab: &LabStatus,
    backend: BackendKind,
    batch: usize,
    threads: usize,
    limit: Limit,
    rate: f64,
    probe: ProbeKind,
) -> anyhow::Result<TxPlan> {
    let iface = target.iface.clone().unwrap_or_else(|| lab.scan_if.clone());
    let src_mac = sonde_engine::host::iface_mac(&iface)?;
    let dst_mac = match target.dst_mac {
        Some(mac) => mac,
        None => {
            sonde_engine::host::neighbour_mac(&iface, sonde_engine::host::default_gateway(&iface)?)?
        }
    };
    let src_ip: Ipv4Addr = lab.scan_ip;
    let population: ipnet::Ipv4Net = lab.population.parse().context("lab status: population")?;
    let ports = target.ports.clone().unwrap_or_else(|| {
        if lab.tcp_open.is_empty() {
            vec![80]
        } else {
            lab.tcp_open.clone()
        }
    });
    let spec = TemplateSpec {
        src_mac,
        dst_mac,
        src_ip,
        src_port: 40000,
        kind: probe,
        frame_size: target.size as usize,
    };
    let template = Template::new(&spec).map_err(anyhow::Error::msg)?;
    let targets = Targets::new(population.network(), population.prefix_len(), &ports)
        .map_err(anyhow::Error::msg)?;
    let mut io = IoConfig::new(&iface);
    io.batch = batch;
    io.xdp_mode = target.xdp_mode;
    Ok(TxPlan {
        backend,
        io,
        threads,
        queues: lab.queues,
        limit,
        rate,
        template,
        targets,
        cpus: crate::runargs::lab_sender_cpus(lab),
    })
}

/// Runs a plan with the live status line and Ctrl-C handling; returns its summary.
/// With `live` (`--metrics`), its page follows the run too.
pub fn run_with_status(
    plan: &TxPlan,
    link_gbps: f64,
    quiet: bool,
    mut live: Option<LivePage>,
) -> anyhow::Result<TxSummary> {
    let stop = Arc::new(AtomicBool::new(false));
    sonde_engine::stop::set_on_stop_signals(&stop)?;
    let total = match plan.limit {
        Limit::Count(n) => Some(n),
        Limit::Duration(_) => None,
    };
    let counter = Counter::default();
    let done = AtomicBool::new(false);
    let mut status = Status::new(total, quiet);
    let outcome = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let r = tx::run(plan, &stop, &counter);
            done.store(true, Ordering::Release);
            r
        });
        let frame = plan.template.frame_len() as u64;
        // Once a second while it runs, and once when it has ended.
        let mut publish = |running: bool| {
            let Some(live) = live.as_mut().filter(|l| !running || l.due()) else {
                return;
            };
            let sent = counter.get();
            let share = match (plan.limit, total) {
                (_, Some(n)) => sent as f64 / n.max(1) as f64,
                (Limit::Duration(d), None) => live.elapsed() / d.as_secs_f64().max(1e-9),
                _ => f64::NAN,
            };
            live.publish(sent, share.min(1.0), running, |page| {
                page.counter("sonde_sent_total", "Frames sent", sent);
                page.counter(
                    "sonde_sent_bytes_total",
                    "Bytes of the frames sent (without FCS, preamble and gap)",
                    sent * frame,
                );
            });
        };
        status.follow(&counter, || {
            publish(true);
            done.load(Ordering::Acquire)
        });
        let outcome = sender.join().expect("transmit thread panicked");
        publish(false);
        outcome
    });
    status.finish();
    let o = outcome?;
    Ok(TxSummary::new(
        o.packets,
        o.wall,
        o.cpu,
        plan.template.frame_len(),
        link_gbps,
        plan.backend.name(),
        plan.io.batch,
        plan.threads,
        &o.how,
    ))
}

/// Refuses, before a run starts, a --summary-json it could not write at its end (one that
/// exists, without --force; a symbolic link; a missing folder).
pub fn check_summary(path: Option<&Path>, if_exists: IfExists) -> anyhow::Result<()> {
    match path {
        Some(path) => output_file::check(path, if_exists).context("--summary-json"),
        None => Ok(()),
    }
}

/// Writes a summary as one JSON object (`-`: to stdout), opened as every output is.
pub fn write_json(
    path: &Path,
    value: &impl serde::Serialize,
    if_exists: IfExists,
) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)? + "\n";
    output_file::write_whole(path, text.as_bytes(), if_exists).context("--summary-json")
}
