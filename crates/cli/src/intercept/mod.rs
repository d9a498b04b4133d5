//! `sonde intercept`: a user-space packet filter on the path. `stack` takes the host's own
//! packets from NFQUEUE; `bridge` is a bump in the wire between two interfaces. Both decide by
//! the same rules, in batches, and send each flow on in the order it came.

mod run;
mod summary;

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

/// A user-space packet filter: take traffic off its path, decide in batches, send it on in order.
///
/// RULES are `ACTION [ARGUMENT] [EXPRESSION]`, EXPRESSION a tcpdump expression (libpcap
/// compiles it; empty means every packet). The first rule that matches decides; a packet no
/// rule matches passes. Actions: `pass`, `drop`, `count` (passes; every rule counts its
/// matches), `rate-limit N/s` (lets N packets a second through, drops the rest), `rewrite
/// ttl=N,dscp=N,sport=N,dport=N` (checksums fixed incrementally). Examples:
///
///   sonde intercept stack --queue 0 --install-rule "OUTPUT -d 198.19.254.2" 'drop udp port 9'
///   sonde intercept bridge -i ma -j mb 'rate-limit 1000/s icmp' 'rewrite ttl=9 tcp port 5201'
///
/// When sonde dies: by default traffic STOPS (stack: the NFQUEUE rule stays and has no reader,
/// so the kernel drops what it queues; bridge: the interfaces stay off the kernel's path),
/// because a filter that silently lets everything through when it fails gives wrong results
/// without telling. With --fail-open traffic goes on unfiltered (NFQUEUE's queue bypass, and
/// a guard process removes sonde's rules and tables). Exit and Ctrl-C always remove
/// everything sonde installed; after a crash without --fail-open, `sonde intercept cleanup`
/// does.
#[derive(Args)]
pub struct InterceptArgs {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// The host's own packets, from NFQUEUE: one queue per thread (the kernel's
    /// --queue-balance keeps each flow on one queue), B packets received with one system call
    /// and their B verdicts sent with one more.
    Stack(StackArgs),
    /// A bump in the wire: every frame arriving on -i goes out of -j and back, through the
    /// rules; the kernel stops forwarding between them while sonde runs (an nftables netdev
    /// table drops at ingress, after sonde's packet rings have the frames; with --backend xdp
    /// the frames never reach it, and it keeps traffic stopped if sonde dies).
    Bridge(BridgeArgs),
    /// Remove the NFQUEUE rules and netdev tables a killed sonde intercept left behind.
    Cleanup,
    /// (internal) The fail-open guard: undoes sonde's changes if sonde dies.
    #[command(hide = true)]
    Guard,
}

/// What both modes share.
#[derive(Args, Clone)]
struct Common {
    /// Rules, each one argument: 'drop tcp port 9' 'count udp'. See `sonde intercept --help`.
    #[arg(value_name = "RULES")]
    rules: Vec<String>,
    /// Read rules from a file (one per line, # comments), before those on the command line.
    #[arg(long = "rules", value_name = "FILE")]
    rules_file: Option<PathBuf>,
    /// Threads; each flow is always handled by the same one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Most packets taken (and, in stack mode, given verdicts) with one system call.
    /// 1 is the per-packet baseline.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: u16,
    /// Let traffic through unfiltered if sonde dies (see above); the default stops it.
    #[arg(long)]
    fail_open: bool,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Write the summary as JSON to this file.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// No status line.
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args)]
struct StackArgs {
    /// NFQUEUE queue numbers, e.g. 0 or 0,1 (one thread each). With one queue and --threads T,
    /// the queues are N..N+T-1.
    #[arg(long, value_delimiter = ',', required = true, value_name = "N[,M...]")]
    queue: Vec<u16>,
    /// Install this iptables rule while sonde runs, as CHAIN MATCHES (sonde adds `-j NFQUEUE`
    /// with the queues, and --queue-bypass with --fail-open), e.g. "OUTPUT -d 198.19.254.2".
    /// Repeat for more. Without it, add the rule yourself:
    /// iptables -A OUTPUT ... -j NFQUEUE --queue-num N [--queue-bypass].
    #[arg(long, value_name = "CHAIN MATCHES")]
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
    /// (native XDP where the driver allows, else generic; thread i serves queue i of both
    /// interfaces, so --threads can be at most their queue count).
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
        Mode::Cleanup => {
            let n = sonde_intercept::path::cleanup_leftovers()?;
            crate::say(format!(
                "removed {n} rule(s) and table(s) sonde intercept had left"
            ));
            Ok(())
        }
        Mode::Guard => sonde_intercept::path::guard_main(std::io::stdin().lock()),
    }
}
