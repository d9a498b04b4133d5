//! `sonde`: a line-rate packet engine for Internet-wide measurement on one Linux host.

mod capture;
mod cmd;
mod grab;
mod intercept;
mod latency;
mod plot;
mod profile;
mod progress;
mod runargs;
mod scan;
mod tx;

use clap::{Parser, Subcommand};

/// A line-rate packet engine for Internet-wide measurement on one Linux host.
///
/// sonde hands the kernel batches of ready frames through shared rings (AF_XDP, AF_PACKET
/// rings), keeps per-packet work to a template patch and an incremental checksum, and measures
/// where the time goes. Everything it sends in tests and demos stays inside a lab of network
/// namespaces (`sonde lab up`), addressed to 198.18.0.0/15.
#[derive(Parser)]
#[command(name = "sonde", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, inspect and remove a lab: network namespaces with a known population.
    Lab(cmd::lab::LabArgs),
    /// Transmit frames as fast as a backend allows (or at --rate), and report pps and CPU.
    Blast(cmd::blast::BlastArgs),
    /// Stateless scanning, ZMap-style: SYN, ICMP echo, UDP and DNS probes, validated replies.
    Scan(Box<scan::ScanArgs>),
    /// Connect, send one request, read the reply, close — to every target, from user space
    /// (TCP client in sonde; HTTP, banners, payloads, TLS certificates).
    Grab(Box<grab::GrabArgs>),
    /// Sweeps and floors: `bench tx` (backends × batch sizes), `bench floor` (bare AF_XDP).
    Bench(cmd::bench::BenchArgs),
    /// Round-trip times under fixed packet rates: a reflector and a paced, timestamping client;
    /// percentiles, loss, heat maps.
    Latency(latency::LatencyArgs),
    /// Where the cost of a packet goes: sonde's stages, and a stack's start and stop latency.
    Profile(profile::ProfileArgs),
    /// Capture packets into pcapng/pcap, filtered in the kernel (tcpdump expressions), with
    /// every drop counted by cause; or filter a capture file (-r).
    Capture(Box<capture::CaptureArgs>),
    /// A user-space packet filter on the path (NFQUEUE, or a bump in the wire between two
    /// interfaces): rules by tcpdump expression, batched verdicts, each flow kept in order.
    Intercept(intercept::InterceptArgs),
}

/// Prints a line on stdout; a closed pipe (`sonde ... | head`) ends output quietly instead of
/// panicking.
pub fn say(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Lab(args) => cmd::lab::run(args),
        Command::Blast(args) => cmd::blast::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Scan(args) => scan::run(*args),
        Command::Grab(args) => grab::run(*args),
        Command::Latency(args) => latency::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Capture(args) => capture::run(*args),
        Command::Intercept(args) => intercept::run(args),
    };
    if let Err(err) = result {
        // One line: the context chain joined, no backtrace.
        // Not eprintln!: after a hangup the terminal is gone, and a panic would abort.
        sonde_engine::status::to_stderr(format_args!("sonde: error: {err:#}"));
        // tcpdump's status for an expression that does not compile.
        let bad_expression = err.downcast_ref::<capture::BadExpression>().is_some();
        std::process::exit(if bad_expression { 2 } else { 1 });
    }
}
