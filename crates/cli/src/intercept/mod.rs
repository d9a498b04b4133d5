//! `sonde intercept`: a user-space packet filter on the path. `stack` takes the host's own
//! packets from NFQUEUE; `bridge` is a bump in the wire between two interfaces. Both decide by
//! the same rules, in batches, and send each flow on in the order it came.

mod run;
mod summary;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT};

/// The rule syntax and what happens when sonde dies, shown under every intercept help screen.
const RULES_HELP: &str = "\
Rules: ACTION [ARGUMENT] [EXPRESSION], one argument each; EXPRESSION is a tcpdump expression
(empty means every packet). The first rule that matches decides; a packet no rule matches
passes. Actions:
  pass                    let it through
  drop                    drop it
  count                   let it through (every rule counts its matches)
  rate-limit N/s          let N packets a second through, drop the rest
  rewrite F=V[,F=V...]    change fields, checksums fixed: ttl=0-255 (hop limit in IPv6),
                          dscp=0-63, sport=0-65535, dport=0-65535
Examples:
  sonde intercept stack --queue 0 --install-rule \"OUTPUT -d 198.19.254.2\" 'drop udp port 9'
  sonde intercept bridge -i ma -j mb 'rate-limit 1000/s icmp' 'rewrite ttl=9 tcp port 5201'

When sonde dies: by default traffic STOPS (stack: the NFQUEUE rule stays and has no reader,
so the kernel drops what it queues; bridge: the interfaces stay off the kernel's path), because
a filter that silently lets everything through when it fails gives wrong results without
telling. With --fail-open traffic goes on unfiltered (NFQUEUE's queue bypass, and a guard
process removes sonde's rules and tables). Exit, Ctrl-C, SIGTERM, SIGHUP and SIGQUIT always
remove everything sonde installed; after a crash without --fail-open, run
`sonde intercept cleanup` in the same network namespace. While it runs, sonde checks once a
second that its rules and table are in place, and stops with an error if one was removed.";

/// A user-space packet filter: take traffic off its path, decide in batches, send it on in order.
#[derive(Args)]
#[command(after_help = RULES_HELP)]
pub struct InterceptArgs {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// The host's own packets, from NFQUEUE: one queue per thread (the kernel's
    /// --queue-balance keeps each flow on one queue), B packets received with one system call
    /// and their B verdicts sent with one more.
    #[command(after_help = RULES_HELP)]
    Stack(StackArgs),
    /// A bump in the wire: every frame arriving on -i goes out of -j and back, through the
    /// rules; the kernel stops forwarding between them while sonde runs (an nftables netdev
    /// table drops at ingress, after sonde's packet rings have the frames; with --backend xdp
    /// the frames never reach it, and it keeps traffic stopped if sonde dies).
    #[command(after_help = RULES_HELP)]
    Bridge(BridgeArgs),
    /// Remove what a killed sonde intercept left in this network namespace: NFQUEUE rules
    /// with sonde's comment (every table, iptables and ip6tables), its netdev tables, and the
    /// AF_XDP bridge's XDP program on the interfaces those tables name. What a sonde intercept
    /// that still runs made is left alone (each rule and table names its process), unless
    /// --force.
    Cleanup {
        /// Remove the rules and tables of running sonde intercepts too (they then stop, with
        /// an error).
        #[arg(long)]
        force: bool,
    },
    /// (internal) The fail-open guard: undoes sonde's changes if sonde dies.
    #[command(hide = true)]
    Guard,
    /// (internal) Detach the AF_XDP bridge's XDP program from these interfaces.
    #[command(hide = true)]
    DetachXdp { ifaces: Vec<String> },
}

/// What both modes share.
#[derive(Args, Clone)]
struct Common {
    /// Rules, each one argument: 'drop tcp port 9' 'count udp' (the syntax is below).
    #[arg(value_name = "RULES")]
    rules: Vec<String>,
    /// Read rules from a file (one per line, # comments), before those on the command line.
    #[arg(long = "rules", value_name = "FILE")]
    rules_file: Option<PathBuf>,
    /// Threads; each flow is always handled by the same one.
    #[arg(long, default_value_t = 1, value_parser = crate::runargs::number_from(1u16, 64))]
    threads: u16,
    /// Most packets taken (and, in stack mode, given verdicts) with one system call.
    /// 1 is the per-packet baseline.
    #[arg(long, default_value_t = 64, value_parser = crate::runargs::number_from(1u16, 1024))]
    batch: u16,
    /// If sonde dies, let traffic through unfiltered (NFQUEUE's queue bypass, and a guard
    /// process removes sonde's rules and tables). The default stops traffic until
    /// `sonde intercept cleanup`.
    #[arg(long)]
    fail_open: bool,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = crate::runargs::seconds_value)]
    duration: Option<f64>,
    /// Write the summary as JSON to this file.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// No status line.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

#[derive(Args)]
struct StackArgs {
    /// NFQUEUE queue numbers, e.g. 0 or 0,1 (one thread each). With one queue and --threads T,
    /// the queues are N..N+T-1.
    #[arg(long, value_delimiter = ',', required = true, value_name = "N[,M...]")]
    queue: Vec<u16>,
    /// Install this iptables rule while sonde runs, as [-t TABLE] [-6] CHAIN MATCHES (sonde
    /// adds `-j NFQUEUE` with the queues, and --queue-bypass with --fail-open), e.g.
    /// "OUTPUT -d 198.19.254.2". TABLE is filter (the default), mangle, raw or security; the
    /// rule goes to ip6tables with -6 or an IPv6 address. Repeat for more. Without it, add the
    /// rule yourself: iptables -A OUTPUT ... -j NFQUEUE --queue-num N [--queue-bypass].
    #[arg(long, value_name = "CHAIN MATCHES", allow_hyphen_values = true)]
    install_rule: Vec<String>,
    /// Have the kernel segment large (GSO) packets before queueing them, so every verdict is
    /// for one wire-sized packet. By default a GSO packet (up to 64 KiB of one flow) is queued
    /// whole and judged once, which is cheaper; rules then see its first segment's headers.
    #[arg(long)]
    no_gso: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct BridgeArgs {
    /// One side of the wire.
    #[arg(short = 'i', value_name = "IF_A")]
    iface_a: String,
    /// The other side.
    #[arg(short = 'j', value_name = "IF_B")]
    iface_b: String,
    /// How frames are taken and sent: `ring`, TPACKET_V3 packet rings (one copy per frame);
    /// `xdp`, an AF_XDP socket on each interface over one shared UMEM, so a frame is judged
    /// where the kernel received it and leaves by the other side with no copy in user space
    /// (native XDP where the driver allows, else generic). A socket pair is bound on every
    /// receive queue, queue i of one side with queue i of the other, so both need the same
    /// number; thread t serves queues t, t + T, ... of T threads (at most one per queue).
    #[arg(long, value_enum, default_value_t = Backend::Ring)]
    backend: Backend,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    Ring,
    Xdp,
}

pub fn run(args: InterceptArgs) -> anyhow::Result<()> {
    match args.mode {
        Mode::Stack(a) => run::stack(a.queue, a.install_rule, !a.no_gso, a.common),
        Mode::Bridge(a) => {
            let backend = match a.backend {
                Backend::Ring => sonde_intercept::bridge::Backend::Ring,
                Backend::Xdp => sonde_intercept::bridge::Backend::Xdp(sonde_io::XdpMode::Auto),
            };
            run::bridge(a.iface_a, a.iface_b, backend, a.common)
        }
        Mode::Cleanup { force } => cleanup(force),
        Mode::Guard => {
            // The guard outlives sonde: a hang-up, Ctrl-C or quit meant for sonde is not for it.
            let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            for signal in [SIGHUP, SIGINT, SIGQUIT] {
                signal_hook::flag::register(signal, ignored.clone())?;
            }
            sonde_intercept::path::guard_main(std::io::stdin().lock())
        }
        Mode::DetachXdp { ifaces } => {
            // Every interface is tried; the first failure is reported.
            let results: Vec<_> = ifaces
                .iter()
                .map(|i| sonde_io::detach_bridge_program(i))
                .collect();
            results
                .into_iter()
                .find(Result::is_err)
                .unwrap_or(Ok(false))
                .map(drop)
        }
    }
}

/// `sonde intercept cleanup`: everything it can remove, then one line; fails (one line) if
/// anything could not be removed.
fn cleanup(force: bool) -> anyhow::Result<()> {
    let done = sonde_intercept::cleanup::cleanup(&mut sonde_intercept::cleanup::ThisHost, force);
    let spared = match done.spared.as_slice() {
        [] => String::new(),
        pids => format!(
            "; left those of running sonde intercept(s) (pid {}): --force removes them too",
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    crate::say(format!(
        "removed {} rule(s), table(s) and XDP program(s) sonde intercept had left{spared}",
        done.removed
    ));
    match done.failures.as_slice() {
        [] => Ok(()),
        [only] => anyhow::bail!("cleanup could not remove everything: {only}"),
        [first, rest @ ..] => anyhow::bail!(
            "cleanup could not remove everything: {first} (and {} more failure(s); run it again, or remove them by hand)",
            rest.len()
        ),
    }
}
