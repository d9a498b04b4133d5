//! The command-line options `scan` and `grab` share (targets, blocklists, order, shards, rate,
//! host, backends, checkpoint, output file), and their resolution into the engine's
//! [`RunPlan`]: the lab or the real network, the guardrails, the seed and key.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sonde_craft::cookie::{PortRange, Validator};
use sonde_engine::checkpoint::{self, Checkpoint, RunIdentity};
use sonde_engine::host::{check_source_ports, Host, HostRequest};
use sonde_engine::plan::RunPlan;
use sonde_engine::targets::{plan_targets, LabScope, TargetRequest, SYSTEM_BLOCKLIST};
use sonde_io::{BackendKind, XdpMode};
use sonde_lab::LabStatus;
use sonde_meter::output_file::{self, IfExists};
use sonde_scan::targets::{parse_ports, shard_from_env, TargetSpace};
use sonde_wire::MacAddr;

pub fn backend_parser() -> impl TypedValueParser<Value = BackendKind> {
    PossibleValuesParser::new(["xdp", "ring", "mmsg", "sendto", "pcap"])
        .map(|s| s.parse::<BackendKind>().expect("a listed backend"))
}

pub fn rx_backend_parser() -> impl TypedValueParser<Value = BackendKind> {
    PossibleValuesParser::new(["ring", "xdp", "mmsg", "pcap"])
        .map(|s| s.parse::<BackendKind>().expect("a listed backend"))
}

#[derive(Args, Clone)]
pub struct RunArgs {
    /// Targets: CIDR prefixes, ranges (a.b.c.d-e.f.g.h) and addresses, IPv4 or IPv6.
    pub targets: Vec<String>,
    /// Read targets from a file, one per line (# comments), or from sonde's scan or grab rows
    /// (csv or ndjson; their sport is the port); `-` reads standard input (sonde scan -o - |
    /// sonde grab -I -). IPv6 is scanned from such lists.
    #[arg(short = 'I', long = "input-file")]
    pub input_file: Option<PathBuf>,
    /// Targets handed over in memory in place of -I (a grab round's): never through a file.
    #[arg(skip)]
    pub input_list: Option<sonde_scan::targets::TargetList>,
    /// Allowlist file: only these prefixes are probed.
    #[arg(short = 'w', long)]
    pub allowlist: Option<PathBuf>,
    /// Blocklist file (opt-out list): never probe these prefixes. Repeatable; added to the
    /// default blocklist and to /etc/sonde/blocklist.conf, which always applies when present.
    #[arg(short = 'b', long = "blocklist")]
    pub blocklists: Vec<PathBuf>,
    /// Do not apply the default blocklist (the IANA special-purpose registries, which include
    /// the benchmarking ranges a lab uses: inside a lab its population is lifted anyway).
    #[arg(long)]
    pub no_default_blocklist: bool,
    /// Needed to probe more than a /8 (16,777,216 addresses).
    #[arg(long)]
    pub confirm_large_scan: bool,
    /// Send rate in packets per second over all threads; 0 = as fast as possible.
    #[arg(short = 'r', long, default_value_t = 10_000.0, allow_negative_numbers = true, value_parser = rate_value)]
    pub rate: f64,
    /// Seed of the target order. Every shard of a run must share it (--shards needs it).
    /// ZMap's -e.
    #[arg(short = 'e', long)]
    pub seed: Option<u64>,
    /// Split the run into N shards, e.g. one per machine; each covers its share exactly once
    /// when all use the same --seed. Without --shards/--shard, a Slurm array or Kubernetes
    /// indexed job sets them.
    #[arg(long)]
    pub shards: Option<u32>,
    /// Which shard this run does, 0 to N-1 (with --shards N).
    #[arg(long)]
    pub shard: Option<u32>,
    /// Sender threads, each pinned and on its own queue of the interface; they split this
    /// shard further (ZMap's -T, --sender-threads).
    #[arg(short = 'T', long, visible_alias = "sender-threads", default_value_t = 1, value_parser = number_from(1u32, 64))]
    pub threads: u32,
    /// Stop after this many targets (of this shard).
    #[arg(short = 'n', long)]
    pub max_targets: Option<u64>,
    /// Seconds to keep receiving after the last probe.
    #[arg(short = 'c', long, default_value_t = 8.0)]
    pub cooldown: f64,
    /// Output file (default: stdout, or `-`; parquet needs a file; a device such as /dev/null
    /// is written as it is; another user's FIFO only with --force).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Overwrite output files that exist (rows, --summary-json, --status-file, checkpoint).
    #[arg(long, conflicts_with = "append")]
    pub force: bool,
    /// Append to the output file if it exists (csv, ndjson): e.g. to finish a --resume'd scan
    /// into the same file.
    #[arg(long)]
    pub append: bool,
    /// The lab to run in (sonde enters its scanner namespace); found by itself when sonde
    /// already runs inside one (sonde lab exec). Without a lab, sonde sends from this host's
    /// interface: see "Scanning real networks responsibly" in the README.
    #[arg(long)]
    pub lab: Option<String>,
    /// Interface (default: the one the default route uses, or the lab's).
    #[arg(short = 'i', long)]
    pub iface: Option<String>,
    /// Source address (default: the interface's).
    #[arg(short = 'S', long)]
    pub source_ip: Option<std::net::Ipv4Addr>,
    /// IPv6 source address (default: the interface's global one), for IPv6 targets.
    #[arg(long)]
    pub source_ip6: Option<std::net::Ipv6Addr>,
    /// Gateway MAC (default: from the neighbour table, resolved by ARP if missing).
    #[arg(short = 'G', long)]
    pub gateway_mac: Option<MacAddr>,
    /// Source ports, FIRST-LAST. The default is the range Linux never hands out to its own
    /// connections, so replies are never confused with the host's traffic; a range that
    /// overlaps net.ipv4.ip_local_port_range is refused.
    #[arg(long, default_value = "61000-65535")]
    pub source_ports: PortRange,
    /// AF_XDP attach mode: auto (native, falling back to generic), native, generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: XdpMode,
    /// Frames per batch handed to the kernel.
    #[arg(long, default_value_t = 64, value_parser = number_from(1u32, 4096))]
    pub batch: u32,
    /// Continue an interrupted run from its checkpoint: give the same command (options the
    /// checkpoint fixes may be left out) and another -o, or --append.
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Where an interrupted run writes its checkpoint (default: the one --resume names; else
    /// next to -o FILE, as FILE.checkpoint.json; with rows on stdout,
    /// sonde-scan.checkpoint.json or sonde-grab.checkpoint.json in the working folder).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Append the status line, once a second, to this CSV file.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Print nothing but errors (no plan line, no status, no summary).
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// Checks what can be checked before anything else (before entering a lab): the targets
/// parse, and more than a /8 is confirmed.
pub fn check_input(args: &RunArgs, dryrun: bool) -> anyhow::Result<()> {
    check_input_file(args)?;
    let large_ok = args.confirm_large_scan || dryrun;
    sonde_engine::targets::read_targets(&args.targets, args.input_file.as_deref(), large_ok)
        .map(drop)
}

/// Refuses an -I file that cannot be read, in one line that names -I (`-I -`, standard input,
/// is read as it comes).
pub fn check_input_file(args: &RunArgs) -> anyhow::Result<()> {
    let Some(path) = args.input_file.as_deref().filter(|p| *p != Path::new("-")) else {
        return Ok(());
    };
    let unreadable = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Some("it is a folder".to_string()),
        Ok(_) => std::fs::File::open(path).err().map(|e| io_words(&e)),
        Err(e) => Some(io_words(&e)),
    };
    match unreadable {
        Some(why) => bail!(
            "cannot read -I {}: {why}; give a file of targets (one address, prefix or address:port a line, or sonde scan output)",
            path.display()
        ),
        None => Ok(()),
    }
}

/// An I/O error in words, without Rust's "(os error 2)".
pub fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let text = e.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            let mut chars = text.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_lowercase().chain(chars).collect()
            })
        }
    }
}

/// The CPUs a lab with `--target-cpus` leaves to its scanners; None for a lab without.
pub fn lab_sender_cpus(lab: &LabStatus) -> Option<Vec<usize>> {
    lab.target_cpus.as_ref()?;
    Some(sonde_lab::sender_cpus(lab))
}

/// Enters the scanner namespace of lab `named`, or recognises the lab sonde already runs in
/// (`sonde lab exec`); None outside any lab.
pub fn enter_lab(named: Option<&str>) -> anyhow::Result<Option<LabStatus>> {
    Ok(match (named, sonde_lab::current_lab()) {
        (Some(name), _) => {
            let status = sonde_lab::status(name)?;
            sonde_lab::enter_scan_ns(name)?;
            Some(status)
        }
        (None, Some(name)) => Some(sonde_lab::status(&name)?),
        (None, None) => None,
    })
}

/// Where the run happens: a lab (and which), or the host's own network.
pub struct Place {
    pub lab: Option<LabStatus>,
}

impl Place {
    /// Enters the lab named by --lab (or recognises the one sonde runs in). A dry run without
    /// --lab stays where it is.
    pub fn enter(args: &RunArgs) -> anyhow::Result<Place> {
        Ok(Place {
            lab: enter_lab(args.lab.as_deref())?,
        })
    }

    /// The CPUs left for sonde's threads: those the lab's targets do not run on, when the lab
    /// was brought up with `--target-cpus`; otherwise any.
    pub fn sender_cpus(&self) -> Option<Vec<usize>> {
        lab_sender_cpus(self.lab.as_ref()?)
    }

    pub fn scope(&self) -> Option<LabScope> {
        let lab = self.lab.as_ref()?;
        Some(LabScope {
            name: lab.name.clone(),
            population: lab.population.parse().ok()?,
            population6: lab.population6.as_deref().and_then(|p| p.parse().ok()),
        })
    }
}

/// What `RunArgs` resolve to before the tool adds its own part.
pub struct Resolved {
    pub space: TargetSpace,
    pub notes: Vec<String>,
    pub host: Host,
    pub seed: u64,
    pub validator: Validator,
    pub shard: (u32, u32),
    pub resume: Option<Checkpoint>,
}

/// The ports of a run: as given with -p, or those the input file names, or a default.
pub enum Ports<'a> {
    /// The tool probes no ports (ICMP): port 0.
    None,
    /// -p as given (`None`: not given), and the default.
    Given(Option<&'a str>, u16),
}

/// Resolves targets, shard, seed, key and host. `dryrun` sends nothing, so it may skip ARP.
pub fn resolve(
    args: &RunArgs,
    place: &Place,
    ports: Ports,
    dryrun: bool,
) -> anyhow::Result<Resolved> {
    let resume = args.resume.as_deref().map(Checkpoint::load).transpose()?;
    let probes_ports = !matches!(ports, Ports::None);
    let (ports, default_ports) = match ports {
        Ports::None => (Some(vec![0]), vec![0]),
        Ports::Given(text, default) => (text.map(port_list).transpose()?, vec![default]),
    };
    let request = TargetRequest {
        tokens: args.targets.clone(),
        input_file: args.input_file.clone(),
        input_list: args.input_list.clone(),
        ports,
        default_ports,
        allowlist: args.allowlist.clone(),
        blocklists: args.blocklists.clone(),
        default_blocklist: !args.no_default_blocklist,
        system_blocklist: Some(PathBuf::from(SYSTEM_BLOCKLIST)),
        lab: place.scope(),
    };
    let plan = plan_targets(&request)?;
    if probes_ports && plan.space.ports().contains(&0) {
        bail!("the input file names port 0, which cannot be probed: give -p PORTS, or leave those lines out");
    }
    let shard = match (&resume, args.shards, args.shard) {
        // The checkpoint knows the shard; a scheduler's variables may not: a Slurm task
        // resubmitted alone (`sbatch --array=2`) is the one task of an array of one.
        (Some(c), None, None) => c.shard,
        _ => shard_from_env(args.shards, args.shard)?.unwrap_or((0, 1)),
    };
    let seed = match (&resume, args.seed) {
        (Some(c), _) => c.seed,
        (None, Some(s)) => s,
        (None, None) if shard.1 > 1 => bail!(
            "--shards {} needs --seed: every shard must walk the same order, or targets are missed and probed twice",
            shard.1
        ),
        (None, None) => Validator::random()?.key()[0],
    };
    // The key validates replies: random for every run, never derived from the seed (which is
    // small and shared), kept by a resumed run.
    let validator = match &resume {
        Some(c) => Validator::new(c.key),
        None => Validator::random().context("drawing the validation key")?,
    };
    let host_request = HostRequest {
        iface: args.iface.clone(),
        source_ip: args.source_ip,
        source_ip6: args.source_ip6,
        gateway_mac: args.gateway_mac,
        quiet_network: dryrun,
    };
    let lab_iface = place.lab.as_ref().map(|l| l.scan_if.as_str());
    if let Some(iface) = &args.iface {
        sonde_lab::check_interface(iface)?;
    }
    let host = Host::resolve(&host_request, lab_iface)?;
    if !dryrun {
        check_source_ports(args.source_ports)?;
    }
    let mut notes = plan.notes;
    if let (Some(lab), Some(cpus)) = (&place.lab, place.sender_cpus()) {
        let targets = lab.target_cpus.as_deref().unwrap_or_default();
        notes.push(format!(
            "the lab's targets run on CPU {}, sonde on CPU {}",
            sonde_lab::cpu_list(targets),
            sonde_lab::cpu_list(&cpus)
        ));
    }
    Ok(Resolved {
        space: plan.space,
        notes,
        host,
        seed,
        validator,
        shard,
        resume,
    })
}

impl Resolved {
    /// The engine's plan from the resolved parts and the shared options.
    #[allow(clippy::too_many_arguments)]
    pub fn run_plan(
        self,
        tool: &str,
        args: &RunArgs,
        place: &Place,
        rate: f64,
        probes: u32,
        v6: bool,
        (backend, rx_backend): (BackendKind, BackendKind),
    ) -> anyhow::Result<RunPlan> {
        if v6 && self.host.src_ip6.is_none() {
            bail!(
                "IPv6 targets, but {} has no global IPv6 address: give one with --source-ip6",
                self.host.iface
            );
        }
        // Receivers bind every receive queue; each sender needs a queue both ways.
        let (queues, sender_queues) = match &place.lab {
            Some(lab) => (lab.queues, lab.queues),
            None => match sonde_io::queue_counts(&self.host.iface) {
                Ok(n) => (n.rx, n.rx.min(n.tx)),
                Err(_) => (1, 1),
            },
        };
        if args.threads > sender_queues {
            bail!(
                "--threads {} is more than the {sender_queues} queues of {}: each sender needs a queue of its own (use --threads {sender_queues} or fewer)",
                args.threads,
                self.host.iface
            );
        }
        Ok(RunPlan {
            space: self.space,
            seed: self.seed,
            key: self.validator.key(),
            shard: self.shard,
            threads: args.threads,
            probes,
            max_targets: args.max_targets,
            rate,
            batch: args.batch as usize,
            cooldown: args.cooldown.max(0.0),
            src_mac: self.host.src_mac,
            gateway_mac: self.host.gateway_mac,
            src_ip: Some(self.host.src_ip),
            src_ip6: self.host.src_ip6.filter(|_| v6),
            source_is_local: self.host.source_is_local,
            iface: self.host.iface,
            queues,
            cpus: place.sender_cpus(),
            backend,
            rx_backend,
            xdp_mode: args.xdp_mode,
            ports: args.source_ports,
            resume: self.resume,
            resumed_from: args.resume.clone(),
            // A resumed run updates the checkpoint it resumes, unless told otherwise.
            checkpoint: args
                .checkpoint
                .clone()
                .or_else(|| args.resume.clone())
                .unwrap_or_else(|| checkpoint::default_path(tool, args.output.as_deref())),
            status_file: args.status_file.clone(),
            overwrite: args.force,
            quiet: args.quiet,
            metrics: None,
        })
    }
}

/// Checks a resumed run against its checkpoint, naming any option that conflicts.
pub fn check_resume(
    plan: &RunPlan,
    args: &RunArgs,
    tool: &str,
    module: &str,
) -> anyhow::Result<()> {
    let Some(c) = &plan.resume else {
        return Ok(());
    };
    c.check_matches(&RunIdentity {
        tool,
        module,
        targets: plan.space.len(),
        shard: plan.shard,
        probes: plan.probes,
        threads: plan.threads,
        seed: args.seed,
    })
}

/// How the output file may be opened: an existing file is refused unless --force (overwrite)
/// or --append; a device such as /dev/null is written as it is; a symbolic link never. The
/// run's other files (summary, status file, checkpoint) are checked here too, so a run that
/// could not write one of them is refused before it starts.
pub fn output_mode(
    args: &RunArgs,
    run: &RunPlan,
    parquet: bool,
) -> anyhow::Result<sonde_scan::output::OpenMode> {
    let if_exists = IfExists::force(args.force);
    let sides = [
        ("--summary-json", &args.summary_json),
        ("--status-file", &run.status_file),
    ];
    for (option, path) in sides {
        if let Some(path) = path {
            output_file::check(path, if_exists).with_context(|| option.to_string())?;
        }
    }
    checkpoint::check_writable(&run.checkpoint, args.force, args.resume.as_deref())?;
    rows_open_mode(args.output.as_deref(), args.force, args.append, parquet)
}

/// How a rows file at `output` may be opened (the part of [`output_mode`] every tool with
/// rows shares): an existing file only with `force` or `append`, parquet never appended to.
pub fn rows_open_mode(
    output: Option<&std::path::Path>,
    force: bool,
    append: bool,
    parquet: bool,
) -> anyhow::Result<sonde_scan::output::OpenMode> {
    use sonde_scan::output::OpenMode;
    let Some(path) = output.filter(|p| !output_file::is_stdout(p)) else {
        return Ok(OpenMode::Create);
    };
    let regular = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file());
    match (regular, force, append) {
        (true, _, true) if parquet => Err(anyhow!(
            "cannot append to {}: parquet files cannot grow; write the rest to another file",
            path.display()
        )),
        (true, false, false) => Err(anyhow!(
            "output file {} exists: give another -o, or --append to add to it, or --force to overwrite it",
            path.display()
        )),
        // Whatever else is there (a link, a folder) is refused by the opening, in one line.
        (_, _, true) if !parquet => Ok(OpenMode::Append),
        (_, true, _) => Ok(OpenMode::Create),
        _ => Ok(OpenMode::CreateNew),
    }
}

/// Packets per second from --rate, checked.
pub fn checked_rate(rate: f64) -> anyhow::Result<f64> {
    if !(rate >= 0.0 && rate.is_finite()) {
        bail!("invalid --rate {rate}: give packets per second, or 0 for as fast as possible");
    }
    Ok(rate)
}

/// `--rate`'s parser: a number, 0 or more (a negative one reaches it as a number, not as a
/// flag, thanks to `allow_negative_numbers`), refused in one line.
pub fn rate_value(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate >= 0.0 && rate.is_finite() => Ok(rate),
        _ => Err("give a rate of 0 or more per second (0: as fast as possible)".into()),
    }
}

/// `--duration`'s parser: seconds above 0 (a negative number reaches it as a number, not as a
/// flag, with `allow_negative_numbers`), refused in one line.
pub fn seconds_value(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        _ => Err("durations are positive: give seconds above 0, e.g. 2 or 0.5".into()),
    }
}

/// A parser of whole numbers from `low` to `high`, whose refusal says so in words (clap's own
/// shows Rust's range syntax).
pub fn number_from<T>(low: T, high: T) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy + Send + Sync + 'static,
{
    move |text: &str| match text.trim().parse::<T>() {
        Ok(n) if low <= n && n <= high => Ok(n),
        _ => Err(format!("give a whole number from {low} to {high}")),
    }
}

/// A parser of whole numbers of `low` or more, whose refusal says so in words.
pub fn number_at_least<T>(low: T) -> impl Fn(&str) -> Result<T, String> + Clone
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy + Send + Sync + 'static,
{
    move |text: &str| match text.trim().parse::<T>() {
        Ok(n) if low <= n => Ok(n),
        _ => Err(format!("give a whole number of {low} or more")),
    }
}

/// The ports of -p: port 0 is no port a probe or a connection can reach (a module that probes
/// no port, as icmp_echo, takes no -p).
fn port_list(text: &str) -> anyhow::Result<Vec<u16>> {
    let ports = parse_ports(text)?;
    if ports.contains(&0) {
        bail!("-p {text}: port 0 cannot be probed; give ports from 1 to 65535");
    }
    Ok(ports)
}
