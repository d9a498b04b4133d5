//! `sonde dns`: resolve names at line rate, through resolvers or from the root (the engine's
//! dns module does the work; here are its arguments, its plan and its summary).

use std::io::BufReader;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};
use sonde_craft::cookie::PortRange;
use sonde_dns::{NameBuf, Type};
use sonde_engine::dns::{self, frame::Link, Ask, Asks, DnsPlan, DnsStats, Mode, Source};
use sonde_engine::host::{check_source_ports, Host, HostRequest};
use sonde_engine::queues::{open_queues_on, QueuesOn, ReplyFilter};
use sonde_engine::status::{human_seconds, per_second, to_stderr};
use sonde_engine::stop::Stop;
use sonde_engine::targets::{blocklist_in_force, LabScope, TargetRequest, SYSTEM_BLOCKLIST};
use sonde_io::{BackendKind, FilterSpec, IoConfig, TcpTake, XdpMode};
use sonde_meter::output_file::IfExists;
use sonde_meter::CpuTimes;
use sonde_scan::output::{open_writer_with, OpenMode, OutputFormat};

use crate::runargs::{self, enter_lab, number_from, rate_value, seconds_value};

/// Every address a lab uses: its servers and its population, all of them benchmarking space.
const LAB_SPACE: &str = "198.18.0.0/15";

#[derive(Args)]
#[command(after_help = DNS_HELP)]
pub struct DnsArgs {
    /// Names to look up (with -I, added before the file's).
    pub names: Vec<String>,
    /// Names from a file, one per line: `name`, or `name,type` to ask that type only (#
    /// comments); `-` reads standard input.
    #[arg(short = 'I', long = "input-file")]
    pub input_file: Option<PathBuf>,
    /// The reverse names (in-addr.arpa) of every address of an IPv4 prefix, asked for PTR.
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["input_file", "names"])]
    pub ptr: Option<Ipv4Net>,
    /// Types to ask for each name, comma separated: A, AAAA, MX, NS, TXT, CNAME, SOA, PTR, CAA,
    /// TYPE65…
    #[arg(short = 't', long = "type", default_value = "A", value_delimiter = ',')]
    pub types: Vec<Type>,
    /// Recursive resolvers to spread the lookups over, in turn (repeatable or comma separated).
    #[arg(long, value_delimiter = ',')]
    pub resolver: Vec<Ipv4Addr>,
    /// Resolvers from a file, one address per line (# comments).
    #[arg(long)]
    pub resolvers: Option<PathBuf>,
    /// At most this many queries a second to any one resolver (the total rate is capped at
    /// this times the resolvers; lookups go to them in turn).
    #[arg(long, value_parser = rate_value)]
    pub per_resolver_rate: Option<f64>,
    /// Walk from the root's servers down the referrals instead of asking resolvers (zone cuts
    /// are cached for the whole run).
    #[arg(long, conflicts_with_all = ["resolver", "resolvers"])]
    pub iterative: bool,
    /// The root servers to start from (--iterative; repeatable). In a lab with a DNS tree, the
    /// lab's root by default. sonde has no built-in root hints: IANA's are in named.root.
    #[arg(long, value_delimiter = ',', requires = "iterative")]
    pub root: Vec<Ipv4Addr>,
    /// With --iterative: every query of each walk in the row's `trace`.
    #[arg(long, requires = "iterative")]
    pub trace: bool,
    /// Queries a second (retries and every step of a walk count); 0 = as fast as possible.
    #[arg(short = 'r', long, default_value_t = 1_000.0, value_parser = rate_value)]
    pub rate: f64,
    /// Lookups in flight at once.
    #[arg(long, default_value_t = 10_000, value_parser = number_from(1u32, 1 << 22))]
    pub max_outstanding: u32,
    /// Times a query is sent again after a timeout (to the next resolver), a SERVFAIL or a
    /// REFUSED; in --iterative, timeouts at one step (to the zone's next server).
    #[arg(long, default_value_t = 2, value_parser = number_from(0u32, 20))]
    pub retries: u32,
    /// Seconds to wait for each answer.
    #[arg(long, default_value_t = 2.0, value_parser = seconds_value)]
    pub timeout: f64,
    /// UDP payload size stated in EDNS0; 0 sends no OPT record (answers then stop at 512 bytes).
    #[arg(long, default_value_t = sonde_dns::DEFAULT_UDP_PAYLOAD)]
    pub udp_payload: u16,
    /// Blocklist file: never send to servers in these prefixes (repeatable; added to the
    /// default and to /etc/sonde/blocklist.conf).
    #[arg(short = 'b', long = "blocklist")]
    pub blocklists: Vec<PathBuf>,
    /// Do not apply the default blocklist (IANA special-purpose ranges; a lab's are lifted).
    #[arg(long)]
    pub no_default_blocklist: bool,
    /// Split the lookups into N shards (by input position), e.g. one per machine.
    #[arg(long)]
    pub shards: Option<u32>,
    /// Which shard this run does, 0 to N-1.
    #[arg(long)]
    pub shard: Option<u32>,
    /// Output file (default: stdout); parquet needs a file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Output format: ndjson (default), csv, parquet; default from -o's extension.
    #[arg(short = 'O', long)]
    pub output_format: Option<OutputFormat>,
    /// Overwrite output files that exist.
    #[arg(long, conflicts_with = "append")]
    pub force: bool,
    /// Append rows to the output file (ndjson, csv): to finish a --resume'd run in it.
    #[arg(long)]
    pub append: bool,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Append the status line, once a second, to this CSV file.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
    /// Where an interrupted run writes its checkpoint (default: next to -o, as
    /// FILE.checkpoint.json; else sonde-dns.checkpoint.json).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Continue an interrupted run from its checkpoint (the same command, another -o or
    /// --append).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// The lab to run in.
    #[arg(long)]
    pub lab: Option<String>,
    /// Interface (default: the default route's, or the lab's).
    #[arg(short = 'i', long)]
    pub iface: Option<String>,
    /// Source address (default: the interface's).
    #[arg(short = 'S', long)]
    pub source_ip: Option<Ipv4Addr>,
    /// Gateway MAC (default: from the neighbour table).
    #[arg(short = 'G', long)]
    pub gateway_mac: Option<sonde_wire::MacAddr>,
    /// Source ports, FIRST-LAST: their (port, ID) pairs number the lookups in flight.
    #[arg(long, default_value = "61000-65535")]
    pub source_ports: PortRange,
    /// Transmit backend: xdp, ring, mmsg, sendto.
    #[arg(long, default_value = "xdp", value_parser = runargs::backend_parser())]
    pub backend: BackendKind,
    /// Receive backend: xdp (the reply filter takes answers beside the OS stack), ring, mmsg.
    #[arg(long, default_value = "xdp", value_parser = runargs::rx_backend_parser())]
    pub rx_backend: BackendKind,
    /// AF_XDP attach mode: auto, native, generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: XdpMode,
    /// Frames per batch handed to the kernel.
    #[arg(long, default_value_t = 64, value_parser = number_from(1u32, 4096))]
    pub batch: u32,
    /// Do not verify the IPv4 and UDP checksums of answers.
    #[arg(long)]
    pub no_verify_checksums: bool,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
}

const DNS_HELP: &str = "Examples (in a lab brought up with `sonde lab up --name L --dns-tree 100`):
  sonde dns --lab L --resolver 198.19.53.64 www.d1.example mail.d2.test --type A,AAAA
  sonde dns --lab L --resolvers resolvers.txt -I names.txt -r 50000 -o rows.ndjson
  sonde dns --lab L --iterative --trace -I names.txt -o walk.ndjson
  sonde dns --lab L --resolver 198.19.54.1 --ptr 198.18.0.0/16 -r 0 -o ptr.parquet
Rows: one per (name, type): status (the rcode, TIMEOUT or ERROR), answers (CNAMEs first),
server, attempts, rtt_us, tcp. Exit status: 0 at the end; 130 when a signal stopped it (finish
with --resume CHECKPOINT); 1 on an error; 2 on a usage error.";

/// What an interrupted dns run leaves to finish it.
#[derive(Serialize, Deserialize)]
struct DnsCheckpoint {
    tool: String,
    /// Every lookup numbered below was started; those not finished are in `unfinished`.
    next_index: u64,
    unfinished: Vec<(u64, String, String)>,
}

#[derive(Serialize)]
struct Summary {
    mode: &'static str,
    servers: usize,
    #[serde(flatten)]
    stats: DnsStats,
    bad_lines: u64,
    wall_s: f64,
    lookups_per_s: f64,
    cpu_user_s: f64,
    cpu_sys_s: f64,
    cpu_us_per_lookup: f64,
    bytes_per_lookup_in_flight: usize,
    max_rss_bytes: u64,
    interrupted: bool,
    checkpoint: Option<String>,
}

pub fn run(args: DnsArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let lab = enter_lab(args.lab.as_deref())?;
    let scope = lab.as_ref().map(|l| LabScope {
        name: l.name.clone(),
        population: LAB_SPACE.parse().expect("the lab's space parses"),
        population6: None,
    });
    let (block, block_notes) = blocklist_in_force(&TargetRequest {
        blocklists: args.blocklists.clone(),
        default_blocklist: !args.no_default_blocklist,
        system_blocklist: Some(PathBuf::from(SYSTEM_BLOCKLIST)),
        lab: scope.clone(),
        ..TargetRequest::default()
    })?;
    let in_lab = lab.is_some();
    let lab_space: Ipv4Net = LAB_SPACE.parse().expect("the lab's space parses");
    let allowed =
        move |a: Ipv4Addr| !block.contains(IpAddr::V4(a)) && (!in_lab || lab_space.contains(&a));
    let mode = match args.iterative {
        true => Mode::Iterative(roots(&args, lab.as_ref())?),
        false => Mode::Resolvers(resolvers(&args)?),
    };
    let servers = match &mode {
        Mode::Iterative(s) | Mode::Resolvers(s) => s.clone(),
    };
    if let Some(refused) = servers.iter().find(|s| !allowed(**s)) {
        match in_lab && !lab_space.contains(refused) {
            true => bail!("{refused} is outside the lab ({LAB_SPACE}): inside a lab sonde sends to lab addresses only"),
            false => bail!("{refused} is on a blocklist in force ({}): sonde does not send to it", block_notes.join("; ")),
        }
    }
    let host = Host::resolve(
        &HostRequest {
            iface: args.iface.clone(),
            source_ip: args.source_ip,
            source_ip6: None,
            gateway_mac: args.gateway_mac,
            quiet_network: false,
        },
        lab.as_ref().map(|l| l.scan_if.as_str()),
    )?;
    check_source_ports(args.source_ports)?;
    let resume = args.resume.as_deref().map(load_checkpoint).transpose()?;
    let shard = runargs_shard(&args)?;
    let mut asks = Asks::new(source(&args)?, args.types.clone(), shard);
    if let Some(c) = &resume {
        asks.skip_below = c.next_index;
        for (index, name, qtype) in &c.unfinished {
            asks.redo.push_back(Ask {
                index: *index,
                name: NameBuf::from_text(name).map_err(|e| anyhow!("checkpoint: {name}: {e}"))?,
                qtype: qtype.parse()?,
            });
        }
    }
    let rate = match (&mode, args.per_resolver_rate) {
        (Mode::Resolvers(r), Some(cap)) if args.rate == 0.0 => cap * r.len() as f64,
        (Mode::Resolvers(r), Some(cap)) => args.rate.min(cap * r.len() as f64),
        _ => args.rate,
    };
    let metrics = args.metrics.start(
        crate::metrics::RunLabels {
            command: "dns",
            module: mode_name(&args),
            backend: args.backend.name(),
            shard: shard.0,
            target_rate: rate,
        },
        args.quiet,
    )?;
    let plan = DnsPlan {
        mode,
        rate,
        max_outstanding: args.max_outstanding,
        retries: args.retries,
        timeout: Duration::from_secs_f64(args.timeout),
        udp_payload: (args.udp_payload > 0).then_some(args.udp_payload.max(512)),
        link: Link {
            src_mac: host.src_mac,
            gateway_mac: host.gateway_mac,
            src_ip: host.src_ip,
        },
        ports: args.source_ports,
        key: sonde_craft::cookie::Validator::random()?.key(),
        batch: args.batch as usize,
        trace: args.trace,
        verify_checksums: !args.no_verify_checksums,
        allowed: Arc::new(allowed),
        quiet: args.quiet,
        status_file: args.status_file.clone(),
        overwrite: args.force,
        metrics: metrics.publisher(),
    };
    let checkpoint = args
        .checkpoint
        .clone()
        .or_else(|| args.resume.clone())
        .unwrap_or_else(|| sonde_engine::checkpoint::default_path("dns", args.output.as_deref()));
    let format = OutputFormat::resolve(
        args.output_format,
        args.output.as_deref(),
        OutputFormat::Ndjson,
    )?;
    let mode_open = open_mode(&args, format)?;
    let mut writer = open_writer_with(
        format,
        args.output.as_deref(),
        dns::default_fields(args.trace),
        mode_open,
    )?;
    let filter = reply_filter(&host, args.source_ports);
    let io = |q: u32| {
        let mut io = IoConfig::new(&host.iface);
        io.queue = q;
        io.batch = (args.batch as usize).max(256);
        io.xdp_mode = args.xdp_mode;
        io
    };
    let queue_count = match &lab {
        Some(l) => l.queues,
        None => sonde_io::queue_counts(&host.iface).map_or(1, |n| n.rx),
    };
    let mut queues = open_queues_on(
        &QueuesOn {
            iface: &host.iface,
            queues: queue_count,
            threads: 1,
            backend: args.backend,
            rx_backend: args.rx_backend,
            io_config: &io,
        },
        &filter,
    )?;
    if !args.quiet {
        announce(&args, &plan, &servers, &block_notes);
    }
    let stop = Stop::on_signals()?;
    let (start, cpu0) = (Instant::now(), CpuTimes::now());
    let result = dns::run(
        &plan,
        &mut queues.senders[0],
        &mut queues.receivers,
        &mut asks,
        writer.as_mut(),
        &stop,
    );
    let finished = writer.finish();
    let outcome = result?;
    finished?;
    let (wall, cpu) = (start.elapsed().as_secs_f64(), CpuTimes::now().since(&cpu0));
    let saved = match outcome.stopped {
        true => Some(save_checkpoint(&checkpoint, &outcome)?),
        false => None,
    };
    let cpu_s = cpu.user.as_secs_f64() + cpu.system.as_secs_f64();
    let summary = Summary {
        mode: mode_name(&args),
        servers: servers.len(),
        bad_lines: asks.bad_count,
        wall_s: wall,
        lookups_per_s: outcome.stats.rows as f64 / wall.max(1e-9),
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        cpu_us_per_lookup: cpu_s * 1e6 / outcome.stats.rows.max(1) as f64,
        bytes_per_lookup_in_flight: outcome.bytes_per_lookup,
        max_rss_bytes: max_rss_bytes(),
        interrupted: outcome.stopped,
        checkpoint: saved.clone(),
        stats: outcome.stats,
    };
    report(&args, &summary, &asks)?;
    metrics.end(&summary)?;
    match summary.interrupted {
        true => Err(crate::Interrupted.into()),
        false => Ok(()),
    }
}

fn mode_name(args: &DnsArgs) -> &'static str {
    match args.iterative {
        true => "iterative",
        false => "resolvers",
    }
}

fn check_args(args: &DnsArgs) -> anyhow::Result<()> {
    if args.names.is_empty() && args.input_file.is_none() && args.ptr.is_none() {
        bail!("no names: give names, -I FILE (one per line) or --ptr PREFIX");
    }
    if !args.iterative && args.resolver.is_empty() && args.resolvers.is_none() {
        bail!("no resolvers: give --resolver ADDR (or --resolvers FILE), or --iterative to walk from the root");
    }
    if args.ptr.is_some_and(|p| p.prefix_len() < 8) {
        bail!(
            "--ptr {}: more than a /8 of reverse names; split it",
            args.ptr.unwrap_or_default()
        );
    }
    Ok(())
}

fn runargs_shard(args: &DnsArgs) -> anyhow::Result<(u32, u32)> {
    match (args.shards, args.shard) {
        (None, None) => Ok((0, 1)),
        (Some(n), Some(i)) if n > 0 && i < n => Ok((i, n)),
        (Some(n), Some(i)) => bail!(
            "--shard {i} is not one of 0 to {} (--shards {n})",
            n.saturating_sub(1)
        ),
        _ => bail!("--shards and --shard go together"),
    }
}

fn source(args: &DnsArgs) -> anyhow::Result<Source> {
    if let Some(net) = args.ptr {
        return Ok(Source::Ptr {
            net: net.trunc(),
            next: 0,
        });
    }
    let given = args.names.clone();
    let Some(path) = &args.input_file else {
        return Ok(Source::Names(given.into_iter()));
    };
    let file: Box<dyn std::io::Read + Send> = match path.to_str() {
        Some("-") => Box::new(std::io::stdin()),
        _ => Box::new(
            std::fs::File::open(path)
                .with_context(|| format!("cannot read names from {}", path.display()))?,
        ),
    };
    let head = given.join("\n") + if given.is_empty() { "" } else { "\n" };
    let chained = std::io::Read::chain(std::io::Cursor::new(head), file);
    Ok(Source::Lines(Box::new(BufReader::with_capacity(
        1 << 16,
        chained,
    ))))
}

fn resolvers(args: &DnsArgs) -> anyhow::Result<Vec<Ipv4Addr>> {
    let mut all = args.resolver.clone();
    if let Some(path) = &args.resolvers {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read resolvers from {}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            all.push(line.parse().map_err(|_| {
                anyhow!(
                    "{} line {}: `{line}` is no IPv4 address",
                    path.display(),
                    i + 1
                )
            })?);
        }
    }
    if all.is_empty() {
        bail!("no resolvers: the list is empty");
    }
    Ok(all)
}

fn roots(args: &DnsArgs, lab: Option<&sonde_lab::LabStatus>) -> anyhow::Result<Vec<Ipv4Addr>> {
    if !args.root.is_empty() {
        return Ok(args.root.clone());
    }
    match lab.and_then(|l| l.dns_tree.as_ref()) {
        Some(tree) => Ok(vec![tree.root]),
        None => bail!("--iterative needs --root ADDR (sonde has no built-in root hints; in a lab, bring it up with --dns-tree N)"),
    }
}

fn reply_filter(host: &Host, ports: PortRange) -> ReplyFilter {
    ReplyFilter {
        spec: FilterSpec {
            ipv4: Some(host.src_ip),
            ipv6: None,
            tcp: TcpTake::None,
            udp: true,
            icmp: false,
            icmp6: false,
            ports: (ports.first, ports.last),
            echo_id: None,
            spare_host_sockets: true,
            stamp_arrivals: false,
        },
        expr: format!(
            "udp and dst host {} and src port 53 and dst portrange {ports}",
            host.src_ip
        ),
    }
}

fn open_mode(args: &DnsArgs, format: OutputFormat) -> anyhow::Result<OpenMode> {
    let parquet = format == OutputFormat::Parquet;
    if let Some(path) = &args.summary_json {
        sonde_meter::output_file::check(path, IfExists::force(args.force))
            .with_context(|| "--summary-json".to_string())?;
    }
    runargs::rows_open_mode(args.output.as_deref(), args.force, args.append, parquet)
}

fn announce(args: &DnsArgs, plan: &DnsPlan, servers: &[Ipv4Addr], block_notes: &[String]) {
    let whom = match &plan.mode {
        Mode::Resolvers(_) => format!("through {} resolver(s)", servers.len()),
        Mode::Iterative(_) => format!("iteratively from {} root server(s)", servers.len()),
    };
    let rate = match plan.rate {
        r if r > 0.0 => per_second(r, "q"),
        _ => "as fast as possible".into(),
    };
    to_stderr(format_args!(
        "dns: {} lookups {whom}, at {rate}, {} in flight at most, {} retries, {} timeout; {}",
        dns::type_names(&args.types),
        plan.max_outstanding,
        plan.retries,
        human_seconds(plan.timeout.as_secs_f64()),
        block_notes.join("; ")
    ));
}

fn report(args: &DnsArgs, s: &Summary, asks: &Asks) -> anyhow::Result<()> {
    if !args.quiet {
        let st = &s.stats;
        let statuses: Vec<String> = st
            .by_status
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        to_stderr(format_args!(
            "dns: {} lookups in {} ({}): {}; {} queries, {} retries, {} over TCP, {} invalid replies, {} late; cpu {:.1} µs/lookup",
            st.rows,
            human_seconds(s.wall_s),
            per_second(s.lookups_per_s, ""),
            if statuses.is_empty() { "none".into() } else { statuses.join(", ") },
            st.queries_sent,
            st.retries,
            st.tcp_fallbacks,
            st.invalid.total(),
            st.late,
            s.cpu_us_per_lookup
        ));
        for bad in &asks.bad {
            to_stderr(format_args!("dns: skipped line {}: {}", bad.line, bad.why));
        }
        if asks.bad_count > asks.bad.len() as u64 {
            to_stderr(format_args!(
                "dns: skipped {} lines in all that are no names",
                asks.bad_count
            ));
        }
    }
    if let Some(path) = &s.checkpoint {
        to_stderr(format_args!(
            "dns interrupted: checkpoint written to {path}; finish with the same command plus --resume {path} (and another -o, or --append)"
        ));
    }
    if let Some(path) = &args.summary_json {
        crate::cmd::blast::write_json(path, s, IfExists::force(args.force))?;
    }
    Ok(())
}

fn load_checkpoint(path: &std::path::Path) -> anyhow::Result<DnsCheckpoint> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the checkpoint {}", path.display()))?;
    let c: DnsCheckpoint = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a checkpoint of sonde dns", path.display()))?;
    if c.tool != "dns" {
        bail!(
            "{} is a checkpoint of sonde {}, not of sonde dns",
            path.display(),
            c.tool
        );
    }
    Ok(c)
}

fn save_checkpoint(path: &std::path::Path, outcome: &dns::Outcome) -> anyhow::Result<String> {
    let c = DnsCheckpoint {
        tool: "dns".into(),
        next_index: outcome.next_index,
        unfinished: outcome
            .unfinished
            .iter()
            .map(|a| (a.index, a.name.to_string(), a.qtype.to_string()))
            .collect(),
    };
    sonde_engine::checkpoint::write_durably(path, &(serde_json::to_string_pretty(&c)? + "\n"))?;
    Ok(path.display().to_string())
}

/// The peak resident memory of this process (getrusage's maxrss, in KiB on Linux).
fn max_rss_bytes() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map_or(0, |u| u.max_rss() as u64 * 1024)
}
