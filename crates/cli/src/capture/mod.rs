//! `sonde capture`: tcpdump-compatible capture. `live` reads an interface, `offline` reads a
//! file (`-r`); both filter with a tcpdump expression compiled by libpcap and write pcapng or
//! pcap.

mod lines;
mod live;
mod offline;
mod profile;
mod summary;

use std::path::Path;

use anyhow::Context;
use clap::Args;
use sonde_meter::output_file::{self, IfExists};

/// The bad input that makes `sonde capture` exit with status 2 (tcpdump's convention for an
/// expression that does not compile).
#[derive(Debug)]
pub struct BadExpression(pub String);

impl std::fmt::Display for BadExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadExpression {}

/// Capture packets into a pcapng or pcap file, filtered in the kernel (tcpdump expressions).
///
/// Live: `sonde capture -i IFACE [EXPRESSION] -w FILE`. The expression is tcpdump's, compiled
/// by libpcap; with `--backend ring` (the default) the kernel runs it (JIT-compiled) on the
/// AF_PACKET socket before the one copy into a shared ring, and sonde reads whole blocks of
/// packets with no system call while they are full. With `--backend xdp` sonde translates it
/// into an XDP program that runs before the kernel allocates anything: the frames it matches
/// are taken to sonde's AF_XDP sockets and NO LONGER REACH THE HOST'S OWN STACK (use it for
/// traffic no local socket needs, e.g. a mirror port), the rest pass untouched. XDP sees only
/// what arrives, not what the host sends. `--backend pcap` is libpcap, as tcpdump.
///
/// Live, the expression is compiled for the interface as tcpdump compiles it (its link type,
/// VLAN tags the kernel took off), and the file gets the interface's link type.
///
/// Offline: `sonde capture -r FILE [EXPRESSION] -w OUT` reads a pcap or pcapng file of any
/// link type, keeps what the expression (compiled for that link type) selects and writes it
/// with the file's link type (like `tcpdump -r FILE -w OUT EXPRESSION`); with `--backend xdp`
/// the verdicts come from the kernel running sonde's XDP translation. Without -w, each packet
/// kept is printed on one line, as `tcpdump -nr FILE` prints it.
///
/// Files: `.pcap` is classic pcap with nanosecond stamps; anything else, and `-w -`
/// (stdout, e.g. `| tcpdump -nr -`), is pcapng (nanosecond stamps, interface name and snap
/// length, and received/dropped counts at the end). An existing file is kept unless --force.
/// Ctrl-C, SIGTERM, a hangup, SIGQUIT, -c, --duration, a full disk or a closed pipe all end
/// with a valid file.
///
/// Drops are told by cause, live and at the end: by the kernel (before the ring), by the
/// ring (sonde did not read fast enough), and by sonde (its writer or the disk fell behind:
/// counted, never silent).
#[derive(Args)]
pub struct CaptureArgs {
    /// The interface to capture on (`any`: every interface, with --backend pcap).
    #[arg(short = 'i', long, value_name = "IFACE", conflicts_with = "read")]
    iface: Option<String>,
    /// Read packets from this pcap or pcapng file (`-` for stdin) instead of an interface.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    read: Option<String>,
    /// Where to write: FILE.pcapng, FILE.pcap, or `-` for stdout (pcapng). An existing file is
    /// kept unless --force; a device such as /dev/null is written as it is. Needed live; with
    /// -r and no -w, each packet is printed on one line instead.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: Option<String>,
    /// Overwrite the files this capture writes (-w, rotated files, --summary-json, --profile)
    /// if they exist.
    #[arg(long)]
    force: bool,
    /// Bytes kept of each packet (the rest is cut; the file records the length on the wire);
    /// 0 keeps whole packets (262144 bytes), as tcpdump's `-s 0`.
    #[arg(short = 's', long, default_value_t = 262_144, value_name = "SNAPLEN", value_parser = crate::runargs::number_from(0u32, 262_144))]
    snaplen: u32,
    /// Stop after writing this many packets (at least 1).
    #[arg(short = 'c', long, value_name = "COUNT")]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = crate::runargs::seconds_value)]
    duration: Option<f64>,
    /// How packets reach sonde.
    #[arg(long, value_enum, default_value_t = Backend::Ring)]
    backend: Backend,
    /// Capture threads: rings in a PACKET_FANOUT group (flow hash) or AF_XDP queues shared out;
    /// one output file in timestamp order within a merge window of about 130 ms.
    #[arg(long, default_value_t = 1, value_parser = crate::runargs::number_from(1u32, 64))]
    threads: u32,
    /// MiB of ring shared with the kernel per thread (ring, pcap); the writer queue adds
    /// 32 MiB per thread.
    #[arg(long, default_value_t = 64, value_name = "M", value_parser = crate::runargs::number_from(2u64, 4096))]
    buffer_mb: u64,
    /// Start a new file (NAME.1.EXT, NAME.2.EXT, …) after this many MiB.
    #[arg(long, value_name = "M", value_parser = crate::runargs::number_at_least(1u64))]
    rotate_mb: Option<u64>,
    /// Write the run's figures here as JSON.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<String>,
    /// No live status line.
    #[arg(short, long)]
    quiet: bool,
    /// Where each captured packet's CPU goes: a table of stages (ring poll and its system
    /// calls, timestamp, copy, hand-over, format, write) with the instrumentation's own cost
    /// measured and taken out, the filter's cost in the kernel, and a stacked-bar PNG written
    /// to this file. Not with --backend pcap (libpcap's loop cannot be instrumented).
    #[arg(long, value_name = "PNG")]
    profile: Option<String>,
    /// Capture in the network namespace of lab NAME (its side of the link is `nx0`).
    #[arg(long, value_name = "NAME")]
    lab: Option<String>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
    /// The filter, in tcpdump's syntax (several words are joined, as tcpdump does).
    #[arg(value_name = "EXPRESSION")]
    expression: Vec<String>,
}

pub use sonde_capture::open::Backend;

/// What `-s 0` means: whole packets, as libpcap's largest snap length.
const WHOLE_PACKETS: u32 = 262_144;

pub fn run(mut args: CaptureArgs) -> anyhow::Result<()> {
    let expr = args.expression.join(" ");
    // A file read without -w is printed, a line a packet, as tcpdump -r prints it.
    let out = match (&args.write, &args.read) {
        (Some(out), _) => Some(out.clone()),
        (None, Some(_)) => None,
        (None, None) => {
            anyhow::bail!("say where to write: -w FILE.pcapng, -w FILE.pcap, or -w - for stdout")
        }
    };
    if args.count == Some(0) {
        anyhow::bail!("-c 0 would capture nothing: give a count of at least 1, or leave -c out");
    }
    if args.snaplen == 0 {
        args.snaplen = WHOLE_PACKETS;
    }
    check_outputs(&args, out.as_deref())?;
    if args.read.is_some() && args.metrics.metrics.is_some() {
        anyhow::bail!(
            "--metrics watches a live capture (-i IFACE): leave it out when reading a file with -r"
        );
    }
    match (&args.read, &args.iface) {
        (Some(file), _) => offline::run(&args, file, &expr, out.as_deref()),
        (None, Some(iface)) => live::run(&args, iface, &expr, out.as_deref().unwrap_or("-")),
        (None, None) => anyhow::bail!("say what to capture: -i IFACE, or -r FILE to read a file"),
    }
}

/// What to do with a file this capture would write that exists already.
fn if_exists(args: &CaptureArgs) -> IfExists {
    IfExists::force(args.force)
}

/// Refuses at once what could not be written (a file that exists, without --force; a symbolic
/// link; a missing folder), rather than after the capture.
fn check_outputs(args: &CaptureArgs, out: Option<&str>) -> anyhow::Result<()> {
    let files = [
        ("-w", out),
        ("--summary-json", args.summary_json.as_deref()),
        ("--profile", args.profile.as_deref()),
    ];
    for (option, file) in files {
        if let Some(file) = file {
            output_file::check(Path::new(file), if_exists(args)).context(option)?;
        }
    }
    Ok(())
}

/// Compiles `expr` with libpcap's `compiler` (for the interface or the file: what tcpdump
/// would run), an empty one keeping everything, with every accepting return capped at
/// `snaplen`.
fn compile(
    compiler: &sonde_io::filter::Compiler,
    expr: &str,
    snaplen: u32,
) -> anyhow::Result<Vec<libc::sock_filter>> {
    let mut program = if expr.trim().is_empty() {
        sonde_io::filter::accept_all()
    } else {
        compiler
            .compile(expr)
            .map_err(|e| BadExpression(e.to_string()))?
    };
    sonde_io::filter::cap_snaplen(&mut program, snaplen);
    Ok(program)
}
