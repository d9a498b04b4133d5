//! `sonde scan`: stateless scanning. This module turns the command line into the engine's
//! [`ScanPlan`] and reports; `sonde_engine::scan` runs it, `dryrun` prints it instead.

mod dryrun;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use sonde_engine::plan::RunPlan;
use sonde_engine::scan::{ScanPlan, ScanSummary};
use sonde_engine::status::{human_seconds, to_stderr};
use sonde_engine::stop::Stop;
use sonde_io::BackendKind;
use sonde_meter::output_file::IfExists;
use sonde_scan::output::{
    open_writer_with_metadata, select_fields, OutputFilter, OutputFormat, RunMetadata,
};
use sonde_scan::probe::{ModuleKind, ModuleOptions, Probe, ProbeSetup};

use crate::metrics::RunLabels;
use crate::runargs::{self, Place, RunArgs};

#[derive(Args)]
#[command(after_help = crate::EXIT_STATUS_HELP)]
pub struct ScanArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Ports: lists and ranges, e.g. 80,443,8000-8100 (ignored by icmp_echo). Default: the
    /// ports an -I file names (addr:port lines, sonde output), else 80.
    #[arg(short = 'p', long)]
    ports: Option<String>,
    /// Probe module: tcp_syn, icmp_echo, udp, dns (ZMap's tcp_synscan and icmp_echoscan are
    /// taken too; see --list-probe-modules).
    #[arg(short = 'M', long = "probe-module", default_value = "tcp_syn", value_parser = module_value)]
    module: ModuleKind,
    /// UDP payload as hex (udp module).
    #[arg(long, conflicts_with = "payload_file")]
    payload_hex: Option<String>,
    /// UDP payload from a file (udp module).
    #[arg(long)]
    payload_file: Option<PathBuf>,
    /// Name to query (dns module).
    #[arg(long, default_value = "example.com")]
    dns_name: String,
    /// Query type (dns module): A, AAAA, NS, MX, TXT, SOA, PTR, CNAME, ANY.
    #[arg(long, default_value = "A")]
    dns_type: String,
    /// Send rate as bandwidth (10M, 1G; counted with Ethernet framing); overrides --rate.
    #[arg(short = 'B', long)]
    bandwidth: Option<String>,
    /// Probes per target (ZMap's -P).
    #[arg(short = 'P', long, default_value_t = 1, value_parser = crate::runargs::number_from(1u32, 16))]
    probes: u32,
    /// Output fields, comma separated (* for all); default: the module's set (--list-fields).
    #[arg(short = 'f', long)]
    fields: Option<String>,
    /// List the output fields (and each module's default set) and exit.
    #[arg(long, visible_alias = "list-output-fields")]
    list_fields: bool,
    /// List the probe modules and exit.
    #[arg(long)]
    list_probe_modules: bool,
    /// Output format: csv, ndjson, parquet. Default: the one -o's name says (.csv; .ndjson,
    /// .jsonl, .json; .parquet, .pq), else csv (stdout, -, or another name). A -O that
    /// contradicts the name is refused.
    #[arg(short = 'O', long)]
    output_format: Option<OutputFormat>,
    /// Which replies to write, e.g. "success = 1 && repeat = 0"; default "success = 1".
    #[arg(long)]
    output_filter: Option<String>,
    /// Print the frames that would be sent, decoded, and send nothing (ZMap's -d).
    #[arg(short = 'd', long)]
    dryrun: bool,
    /// Transmit backend: xdp (AF_XDP), ring (AF_PACKET TX ring), mmsg (sendmmsg), sendto (one
    /// call per frame), pcap (libpcap).
    #[arg(long, default_value = "xdp", value_parser = runargs::backend_parser())]
    backend: BackendKind,
    /// Receive backend, filtered in the kernel: ring, mmsg and pcap attach a classic BPF
    /// program to a packet socket (the kernel still sees every reply); xdp runs sonde's XDP
    /// reply filter, which takes the replies before the kernel's stack sees them.
    #[arg(long, default_value = "ring", value_parser = runargs::rx_backend_parser())]
    rx_backend: BackendKind,
}

pub fn run(args: ScanArgs) -> anyhow::Result<()> {
    if args.list_fields {
        return list_fields();
    }
    if args.list_probe_modules {
        list_probe_modules();
        return Ok(());
    }
    output_format(&args)?;
    runargs::check_input(&args.run, args.dryrun)?;
    // A dry run in a lab (--lab, or through `lab exec`) is held to the lab's population too.
    let place = Place::enter(&args.run)?;
    let (mut plan, fields, notes) = prepare(&args, &place)?;
    if args.dryrun {
        return dryrun::run(&plan);
    }
    let metrics = args
        .run
        .metrics
        .start(metric_labels(&plan), args.run.quiet)?;
    plan.run.metrics = metrics.publisher();
    let summary = execute(&args, plan, fields, &notes)?;
    report(&args, &summary)?;
    metrics.end(&summary)?;
    match summary.interrupted {
        true => Err(crate::Interrupted.into()),
        false => Ok(()),
    }
}

/// The labels of a scan's series (`--metrics`).
fn metric_labels(plan: &ScanPlan) -> RunLabels<'_> {
    RunLabels {
        command: "scan",
        module: plan.probe.name(),
        backend: plan.run.backend.name(),
        shard: plan.run.shard.0,
        target_rate: plan.run.rate,
    }
}

/// Runs a scan as `sonde scan` would, and returns its summary without reporting it (`sonde
/// profile` runs scans this way).
pub(crate) fn run_for_summary(args: &ScanArgs) -> anyhow::Result<ScanSummary> {
    runargs::check_input(&args.run, false)?;
    let place = Place::enter(&args.run)?;
    let (plan, fields, notes) = prepare(args, &place)?;
    execute(args, plan, fields, &notes)
}

/// The plan, the output fields and the notes for the plan line.
fn prepare(
    args: &ScanArgs,
    place: &Place,
) -> anyhow::Result<(ScanPlan, Vec<&'static sonde_scan::Field>, Vec<String>)> {
    let ports = match args.module.uses_ports() {
        true => runargs::Ports::Given(args.ports.as_deref(), 80),
        false => runargs::Ports::None,
    };
    let resolved = runargs::resolve(&args.run, place, ports, args.dryrun)?;
    let notes = resolved.notes.clone();
    let setup = ProbeSetup {
        src_mac: resolved.host.src_mac,
        dst_mac: resolved.host.gateway_mac,
        src_ip: Some(resolved.host.src_ip),
        src_ip6: resolved.host.src_ip6,
        validator: resolved.validator,
        ports: args.run.source_ports,
        ttl: 64,
    };
    let v6 = resolved.space.ipv6_addresses() > 0;
    let setup = ProbeSetup {
        src_ip6: setup.src_ip6.filter(|_| v6),
        ..setup
    };
    let probe =
        Probe::build(args.module, &setup, &module_options(args)?).map_err(anyhow::Error::msg)?;
    let rate = send_rate(args, probe.frame_len())?;
    let backends = (args.backend, args.rx_backend);
    let run = resolved.run_plan("scan", &args.run, place, rate, args.probes, v6, backends)?;
    runargs::check_resume(&run, &args.run, "scan", args.module.name())?;
    let filter = match &args.output_filter {
        Some(text) => OutputFilter::parse(text)?,
        None => OutputFilter::parse("success = 1")?,
    };
    let plan = ScanPlan {
        run,
        probe,
        setup,
        filter,
    };
    let fields = select_fields(args.fields.as_deref(), args.module)?;
    Ok((plan, fields, notes))
}

/// Opens the output, announces the plan and runs it.
fn execute(
    args: &ScanArgs,
    plan: ScanPlan,
    fields: Vec<&'static sonde_scan::Field>,
    notes: &[String],
) -> anyhow::Result<ScanSummary> {
    let format = output_format(args)?;
    let mode = runargs::output_mode(&args.run, &plan.run, format == OutputFormat::Parquet)?;
    let metadata = run_metadata(&plan.run);
    let writer = open_writer_with_metadata(
        format,
        args.run.output.as_deref(),
        fields,
        mode,
        &metadata.key_values(),
    )?;
    if !args.run.quiet {
        announce(&plan, notes);
    }
    let stop = Stop::on_signals()?;
    sonde_engine::scan::run(plan, writer, &stop)
}

/// The rows' format: -O, else -o's name, else csv.
fn output_format(args: &ScanArgs) -> anyhow::Result<OutputFormat> {
    OutputFormat::resolve(
        args.output_format,
        args.run.output.as_deref(),
        OutputFormat::Csv,
    )
}

/// What the output file records about this run (parquet keeps it in its footer).
pub(crate) fn run_metadata(run: &RunPlan) -> RunMetadata {
    let start_time_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    RunMetadata {
        command_line: std::env::args().collect(),
        seed: run.seed,
        shard: run.shard,
        version: env!("CARGO_PKG_VERSION").to_string(),
        start_time_us,
    }
}

fn list_fields() -> anyhow::Result<()> {
    for f in sonde_scan::FIELDS {
        let modules: Vec<&str> = ModuleKind::ALL
            .iter()
            .filter(|k| k.default_fields().contains(&f.name))
            .map(|k| k.name())
            .collect();
        crate::say(format!(
            "{:<16} {}  [default for: {}]",
            f.name,
            f.help,
            if modules.is_empty() {
                "none".to_string()
            } else {
                modules.join(", ")
            }
        ));
    }
    Ok(())
}

fn list_probe_modules() {
    for kind in ModuleKind::ALL {
        let what = match kind {
            ModuleKind::TcpSyn => "a TCP SYN to each port; SYN-ACK (open) or RST (closed) answers",
            ModuleKind::IcmpEcho => "an ICMP echo request to each address; echo replies answer",
            ModuleKind::Udp => "a UDP datagram (--payload-hex, --payload-file) to each port; UDP or ICMP port unreachable answers",
            ModuleKind::Dns => "a DNS query (--dns-name, --dns-type) to each port; DNS answers",
        };
        let zmap = match kind.zmap_name() {
            same if same == kind.name() => String::new(),
            other => format!(" (ZMap's {other})"),
        };
        crate::say(format!("{:<10} {what}{zmap}", kind.name()));
    }
}

/// `-M`'s parser: a probe module by sonde's or ZMap's name; an app of `sonde grab` is pointed
/// there.
fn module_value(text: &str) -> Result<ModuleKind, String> {
    use sonde_apps::AppKind;
    text.parse().map_err(|unknown: String| {
        let apps: Vec<&str> = AppKind::ALL.iter().map(|k| k.name()).collect();
        match text.parse::<AppKind>() {
            Ok(app) => format!("{app} is an app of sonde grab, not a probe module of scan: sonde grab -M {app} (scan's modules: tcp_syn, icmp_echo, udp, dns)"),
            // A typo of one of grab's apps: say so, when no module of scan is nearer.
            Err(_) if !unknown.contains("did you mean") => {
                match sonde_scan::nearest::nearest(text, &apps) {
                    Some(app) => format!("{unknown} (or did you mean sonde grab -M {app}?)"),
                    None => unknown,
                }
            }
            Err(_) => unknown,
        }
    })
}

/// The plan line: what will be probed, how, from where, how fast and for how long.
fn announce(plan: &ScanPlan, notes: &[String]) {
    let run = &plan.run;
    let source = match (run.src_ip6, run.space.ipv4_addresses()) {
        (Some(six), 0) => six.to_string(),
        (Some(six), _) => format!(
            "{} and {six}",
            run.src_ip.map_or("?".into(), |s| s.to_string())
        ),
        (None, _) => run.src_ip.map_or("?".into(), |s| s.to_string()),
    };
    let probes = probes_to_send(run);
    let (rate, how_long) = if run.rate > 0.0 {
        (
            format!("{:.0} pps", run.rate),
            format!("about {}", human_seconds(probes as f64 / run.rate)),
        )
    } else {
        ("full speed".into(), "as fast as the host allows".into())
    };
    let shard = if run.shard.1 > 1 {
        format!(", shard {} of {}", run.shard.0, run.shard.1)
    } else {
        String::new()
    };
    eprintln!(
        "scan: {}{shard}, {} from {source} on {} in {} at {rate}: {how_long}",
        run.space.describe(),
        plan.probe.name(),
        run.iface,
        sonde_lab::where_am_i()
    );
    if let Some(c) = &run.resume {
        eprintln!(
            "scan: resuming {}: about {probes} probes left ({} sent before)",
            run.checkpoint.display(),
            c.sent
        );
    }
    for note in notes {
        eprintln!("scan: {note}");
    }
}

/// Probes this run will send (what is left of them, when resuming).
fn probes_to_send(run: &RunPlan) -> u64 {
    (0..run.threads)
        .filter_map(|t| {
            sonde_engine::feed::Feed::open(&run.feed_spec(), t, run.resumed_thread(t)).ok()
        })
        .map(|f| f.left())
        .sum()
}

fn report(args: &ScanArgs, s: &ScanSummary) -> anyhow::Result<()> {
    if !args.run.quiet {
        to_stderr(format_args!(
            "scan: sent {} probes in {} ({}), {} replies: {} valid, {} invalid, {} hits, {} repeats, {} drops; cpu {:.2} s user, {:.2} s system",
            s.sent,
            human_seconds(s.send_wall_s),
            sonde_engine::status::per_second(s.pps, "p"),
            s.received,
            s.valid,
            s.invalid,
            s.hits,
            s.repeats,
            s.drops,
            s.cpu_user_s,
            s.cpu_sys_s
        ));
        if let Some(losses) = &s.losses {
            to_stderr(format_args!("scan: {losses}"));
        }
    }
    if let Some(path) = &s.checkpoint {
        to_stderr(format_args!(
            "scan interrupted: checkpoint written to {path}; finish with the same command plus --resume {path} (and another -o, or --append)"
        ));
    }
    if let Some(path) = &args.run.summary_json {
        crate::cmd::blast::write_json(path, s, IfExists::force(args.run.force))?;
    }
    Ok(())
}

fn module_options(args: &ScanArgs) -> anyhow::Result<ModuleOptions> {
    let payload = match (&args.payload_hex, &args.payload_file) {
        (Some(hex), _) => parse_hex(hex)?,
        (None, Some(path)) => {
            std::fs::read(path).with_context(|| format!("reading payload {}", path.display()))?
        }
        (None, None) => Vec::new(),
    };
    let dns_type = sonde_wire::dns::qtype(&args.dns_type).ok_or_else(|| {
        let known: Vec<_> = sonde_wire::dns::QTYPES.iter().map(|(n, _)| *n).collect();
        anyhow::anyhow!(
            "unknown DNS type \"{}\": choose one of {}",
            args.dns_type,
            known.join(", ")
        )
    })?;
    Ok(ModuleOptions {
        payload,
        dns_name: args.dns_name.clone(),
        dns_type,
    })
}

pub fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
    let clean: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !clean.len().is_multiple_of(2) {
        bail!("invalid --payload-hex \"{text}\": an odd number of hex digits");
    }
    (0..clean.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&clean[i..i + 2], 16).map_err(|_| {
                anyhow::anyhow!(
                    "invalid --payload-hex \"{text}\": \"{}\" is not hex",
                    &clean[i..i + 2]
                )
            })
        })
        .collect()
}

/// Packets per second from --rate or --bandwidth.
fn send_rate(args: &ScanArgs, frame_len: usize) -> anyhow::Result<f64> {
    if let Some(bw) = &args.bandwidth {
        let bits = parse_bandwidth(bw)?;
        return Ok(bits / ((frame_len.max(60) as u64 + sonde_meter::WIRE_OVERHEAD) * 8) as f64);
    }
    runargs::checked_rate(args.run.rate)
}

/// `10M`, `1G`, `500k`, `1000000` → bits per second.
fn parse_bandwidth(text: &str) -> anyhow::Result<f64> {
    let t = text.trim();
    let (num, scale) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * scale),
        _ => bail!("invalid bandwidth \"{text}\": use bits per second like 10M or 1G"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_and_hex_parse_or_name_the_bad_token() {
        assert_eq!(parse_bandwidth("10M").unwrap(), 1e7);
        assert_eq!(parse_bandwidth("1g").unwrap(), 1e9);
        assert!(parse_bandwidth("fast")
            .unwrap_err()
            .to_string()
            .contains("fast"));
        assert_eq!(
            parse_hex("de ad BE ef").unwrap(),
            vec![0xde, 0xad, 0xbe, 0xef]
        );
        assert!(parse_hex("abc").unwrap_err().to_string().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().to_string().contains("zz"));
    }
}
