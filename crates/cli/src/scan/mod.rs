//! `sonde scan`: stateless scanning. This module turns the command line into a [`ScanPlan`];
//! `engine` runs it (pinned senders + one receiver), `dryrun` prints it instead.

mod checkpoint;
mod dryrun;
mod engine;
mod setup;
mod status;

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use sonde_io::{BackendKind, XdpMode};
use sonde_scan::output::{select_fields, OutputFilter, OutputFormat};
use sonde_scan::probe::{self, ModuleKind, ModuleOptions, ProbeSetup};
use sonde_scan::probe6::{self, ProbeSetup6};
use sonde_scan::targets::{
    default_blocklist, parse_ports, parse_targets, read_target_file, shard_from_env, PrefixSet,
    TargetSpace,
};
use sonde_scan::validate::Validator;
use sonde_wire::MacAddr;

pub use checkpoint::Checkpoint;

/// A scan of more addresses than this (a /8) needs --confirm-large-scan.
const LARGE_SCAN: u64 = 1 << 24;

#[derive(Args)]
pub struct ScanArgs {
    /// Targets: CIDR prefixes, ranges (a.b.c.d-e.f.g.h) and addresses, IPv4 or IPv6.
    targets: Vec<String>,
    /// Read targets from a file, one per line (# comments). IPv6 is scanned from such lists.
    #[arg(short = 'I', long = "input-file")]
    input_file: Option<PathBuf>,
    /// Ports: lists and ranges, e.g. 80,443,8000-8100 (ignored by icmp_echo).
    #[arg(short = 'p', long, default_value = "80")]
    ports: String,
    /// Allowlist file: only these prefixes are scanned.
    #[arg(short = 'w', long)]
    allowlist: Option<PathBuf>,
    /// Blocklist file: never scan these prefixes (replaces the default blocklist).
    #[arg(short = 'b', long)]
    blocklist: Option<PathBuf>,
    /// Do not apply the default blocklist (IANA special-purpose registries). The lab needs this:
    /// its 198.18.0.0/15 is one of them.
    #[arg(long)]
    no_default_blocklist: bool,
    /// Probe module: tcp_syn, icmp_echo, udp, dns.
    #[arg(short = 'M', long = "probe-module", default_value = "tcp_syn")]
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
    /// Send rate in packets per second; 0 = as fast as possible.
    #[arg(short = 'r', long, default_value_t = 10_000.0)]
    rate: f64,
    /// Send rate as bandwidth (10M, 1G; counted with Ethernet framing); overrides --rate.
    #[arg(short = 'B', long)]
    bandwidth: Option<String>,
    /// Probes per target.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    probes: u32,
    /// Seconds to keep receiving after the last probe.
    #[arg(short = 'c', long, default_value_t = 8.0)]
    cooldown: f64,
    /// Seed of the target order and (unless the key is random) the validation key.
    #[arg(long)]
    seed: Option<u64>,
    /// Split the scan into N shards (machines); with --shard I this run does shard I (0-based).
    /// Without them, a Slurm array or Kubernetes indexed job sets the shard.
    #[arg(long)]
    shards: Option<u32>,
    #[arg(long)]
    shard: Option<u32>,
    /// Sender threads (each pinned, on its own queue); they split this shard further.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// Stop after this many targets (of this shard).
    #[arg(short = 'n', long)]
    max_targets: Option<u64>,
    /// Output fields, comma separated (* for all); see --list-fields.
    #[arg(short = 'f', long)]
    fields: Option<String>,
    /// List the output fields and exit.
    #[arg(long)]
    list_fields: bool,
    /// Output format: csv, ndjson, parquet.
    #[arg(short = 'O', long, default_value = "csv")]
    output_format: OutputFormat,
    /// Output file (default: stdout; parquet needs a file).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Which replies to write, e.g. "success = 1 && repeat = 0"; default "success = 1".
    #[arg(long)]
    output_filter: Option<String>,
    /// The lab to scan in (sonde scans only inside a lab).
    #[arg(long)]
    lab: Option<String>,
    /// Interface (default: the one the default route uses).
    #[arg(short = 'i', long)]
    iface: Option<String>,
    /// Source address (default: the interface's).
    #[arg(short = 'S', long)]
    source_ip: Option<std::net::Ipv4Addr>,
    /// IPv6 source address (default: the interface's global one), for IPv6 targets.
    #[arg(long)]
    source_ip6: Option<std::net::Ipv6Addr>,
    /// Gateway MAC (default: from the neighbour table, resolved by ARP if missing).
    #[arg(short = 'G', long)]
    gateway_mac: Option<MacAddr>,
    /// Transmit backend.
    #[arg(long, default_value = "xdp")]
    backend: BackendKind,
    /// Receive backend (filtered in the kernel by classic BPF).
    #[arg(long, default_value = "ring")]
    rx_backend: BackendKind,
    /// AF_XDP attach mode: auto, native, generic.
    #[arg(long, default_value = "auto")]
    xdp_mode: XdpMode,
    /// Frames per batch.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch: u32,
    /// Print the frames that would be sent, decoded, and send nothing.
    #[arg(long)]
    dryrun: bool,
    /// Needed to scan more than a /8 (16,777,216 addresses).
    #[arg(long)]
    confirm_large_scan: bool,
    /// Continue an interrupted scan from its checkpoint (same targets and options).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Where an interrupted scan writes its checkpoint.
    #[arg(long, default_value = "sonde-scan.checkpoint.json")]
    checkpoint: PathBuf,
    /// Append the status line, once a second, to this CSV file.
    #[arg(long)]
    status_file: Option<PathBuf>,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// No status line.
    #[arg(short, long)]
    quiet: bool,
}

/// Everything a scan run needs, resolved and checked.
pub struct ScanPlan {
    pub space: TargetSpace,
    pub module: Box<dyn probe::ProbeModule>,
    /// The IPv6 form of the module, when the targets include IPv6 addresses.
    pub module6: Option<Box<dyn probe6::ProbeModule6>>,
    pub source6: Option<std::net::Ipv6Addr>,
    pub module_kind: ModuleKind,
    pub setup: ProbeSetup,
    pub iface: String,
    /// The source address belongs to the interface (so its kernel resets SYN-ACKs itself).
    pub source_is_local: bool,
    pub queues: u32,
    pub seed: u64,
    pub shard: (u32, u32),
    pub threads: u32,
    pub probes: u32,
    pub rate: f64,
    pub batch: usize,
    pub backend: BackendKind,
    pub rx_backend: BackendKind,
    pub xdp_mode: XdpMode,
    pub cooldown: f64,
    pub max_targets: Option<u64>,
    pub fields: Vec<&'static sonde_scan::Field>,
    pub filter: OutputFilter,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    pub resume: Option<Checkpoint>,
    pub checkpoint: PathBuf,
    pub status_file: Option<PathBuf>,
    pub summary_json: Option<PathBuf>,
    pub quiet: bool,
}

pub fn run(args: ScanArgs) -> anyhow::Result<()> {
    if args.list_fields {
        for f in sonde_scan::FIELDS {
            crate::say(format!("{:<16} {}", f.name, f.help));
        }
        return Ok(());
    }
    let resume = args.resume.as_deref().map(Checkpoint::load).transpose()?;
    let space = target_space(&args)?;
    let seed = match (&resume, args.seed) {
        (Some(c), _) => c.seed,
        (None, Some(s)) => s,
        (None, None) => Validator::random()?.key()[0],
    };
    let shard = shard_from_env(args.shards, args.shard)?.unwrap_or((0, 1));
    check_scale(&args, &space)?;
    let lab = if args.dryrun && args.lab.is_none() {
        None
    } else {
        Some(crate::cmd::blast::enter_named_lab(args.lab.as_deref())?)
    };
    let host = setup::resolve(&args, lab.as_ref())?;
    let validator = match &resume {
        Some(c) => Validator::new(c.key),
        None => match args.seed {
            Some(s) => Validator::from_seed(s),
            None => Validator::random()?,
        },
    };
    let setup = ProbeSetup {
        src_mac: host.src_mac,
        dst_mac: host.gateway_mac,
        src_ip: host.src_ip,
        validator,
        ttl: 64,
    };
    let options = module_options(&args)?;
    let module = probe::build(args.module, setup, &options).map_err(anyhow::Error::msg)?;
    let module6 = match (space.ipv6_addresses(), host.src_ip6) {
        (0, _) => None,
        (_, Some(src_ip)) => {
            let setup6 = ProbeSetup6 {
                src_mac: host.src_mac,
                dst_mac: host.gateway_mac,
                src_ip,
                validator,
                hop_limit: 64,
            };
            Some(probe6::build6(args.module, setup6, &options).map_err(anyhow::Error::msg)?)
        }
        (_, None) => bail!(
            "IPv6 targets, but {} has no global IPv6 address: give one with --source-ip6",
            host.iface
        ),
    };
    let frame_len = module
        .frame_len()
        .max(module6.as_ref().map_or(0, |m| m.frame_len()));
    let rate = send_rate(&args, frame_len)?;
    let plan = ScanPlan {
        space,
        module,
        module6,
        source6: host.src_ip6,
        module_kind: args.module,
        setup,
        source_is_local: host.source_is_local,
        iface: host.iface,
        queues: lab.as_ref().map_or(1, |l| l.queues),
        seed,
        shard,
        threads: args.threads,
        probes: args.probes,
        rate,
        batch: args.batch as usize,
        backend: args.backend,
        rx_backend: args.rx_backend,
        xdp_mode: args.xdp_mode,
        cooldown: args.cooldown.max(0.0),
        max_targets: args.max_targets,
        fields: select_fields(args.fields.as_deref())?,
        filter: match &args.output_filter {
            Some(text) => OutputFilter::parse(text)?,
            None => OutputFilter::parse("success = 1")?,
        },
        format: args.output_format,
        output: args.output.clone(),
        resume,
        checkpoint: args.checkpoint.clone(),
        status_file: args.status_file.clone(),
        summary_json: args.summary_json.clone(),
        quiet: args.quiet,
    };
    if let Some(c) = &plan.resume {
        c.check_matches(&plan)?;
    }
    if args.dryrun {
        return dryrun::run(&plan);
    }
    engine::run(plan)
}

/// Targets ∩ allowlist − blocklist, × ports.
fn target_space(args: &ScanArgs) -> anyhow::Result<TargetSpace> {
    let mut tokens = args.targets.clone();
    if let Some(path) = &args.input_file {
        tokens.extend(read_target_file(path)?);
    }
    if tokens.is_empty() {
        bail!("no targets: give prefixes, ranges or addresses, or -I FILE");
    }
    let spec = parse_targets(&tokens)?;
    let allow = args
        .allowlist
        .as_deref()
        .map(PrefixSet::from_file)
        .transpose()?;
    let block = match (&args.blocklist, args.no_default_blocklist) {
        (Some(path), _) => PrefixSet::from_file(path)?,
        (None, true) => PrefixSet::new(),
        (None, false) => default_blocklist(),
    };
    let ports = if args.module.uses_ports() {
        parse_ports(&args.ports)?
    } else {
        vec![0]
    };
    TargetSpace::new(&spec, allow.as_ref(), &block, &ports)
}

/// Responsible scanning: a large scan must be asked for plainly.
fn check_scale(args: &ScanArgs, space: &TargetSpace) -> anyhow::Result<()> {
    if space.addresses() > LARGE_SCAN && !args.confirm_large_scan && !args.dryrun {
        bail!(
            "this scan covers {} addresses, more than a /8: add --confirm-large-scan if you mean it",
            space.addresses()
        );
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

fn parse_hex(text: &str) -> anyhow::Result<Vec<u8>> {
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
    if !(args.rate >= 0.0 && args.rate.is_finite()) {
        bail!(
            "invalid --rate {}: give packets per second, or 0 for as fast as possible",
            args.rate
        );
    }
    Ok(args.rate)
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

impl ScanPlan {
    /// Writes the probe for one target with the module of its address family.
    #[inline]
    pub fn write_probe(&self, buf: &mut [u8], addr: IpAddr, port: u16, now_us: u32) -> usize {
        match (addr, &self.module6) {
            (IpAddr::V4(a), _) => self.module.write(buf, a, port, now_us),
            (IpAddr::V6(a), Some(m)) => m.write(buf, a, port, now_us),
            // The plan is only built with an IPv6 module when the space holds IPv6 targets.
            (IpAddr::V6(_), None) => 0,
        }
    }

    /// The kernel filter: the module's replies, of every family the scan probes.
    pub fn bpf_filter(&self) -> String {
        match &self.module6 {
            Some(m6) if self.space.ipv4_addresses() > 0 => {
                format!("({}) or ({})", self.module.bpf_filter(), m6.bpf_filter())
            }
            Some(m6) => m6.bpf_filter(),
            None => self.module.bpf_filter(),
        }
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
