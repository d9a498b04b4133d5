//! `sonde`: a line-rate packet engine for Internet-wide measurement on one Linux host.
//!
//! The command line, and only that: it takes each command's arguments (clap), calls the library
//! crate that does the work, and prints what comes back (status lines, summaries, JSON). Uses the
//! library crates below it (docs/layout.md draws them): sonde-engine (scan, grab), sonde-capture,
//! sonde-latency, sonde-intercept, sonde-lab (and its scoring), sonde-path (the lab's delay
//! line), sonde-profile, sonde-plot (every chart), sonde-meter, sonde-io, and sonde-scan, -tcp,
//! -apps, -craft and -wire for the types they share.

mod capture;
mod cmd;
mod dns;
mod grab;
mod intercept;
mod latency;
mod metrics;
mod profile;
mod progress;
mod runargs;
mod scan;

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
    /// Resolve names at line rate: through resolvers, or iteratively from the root; a row per
    /// (name, type) with its answers.
    Dns(Box<dns::DnsArgs>),
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

/// A scan or grab stopped by a signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) before its end. It
/// has said so, with its checkpoint; sonde exits with [`INTERRUPTED`], so `sonde scan … &&
/// next` does not go on with half a scan.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The exit status of an interrupted scan or grab: 130, as a shell gives a command that
/// Ctrl-C ended (128 + SIGINT).
pub const INTERRUPTED: i32 = 130;

/// The exit statuses a scan and a grab end with, for their --help.
pub const EXIT_STATUS_HELP: &str = "Exit status: 0 when the run went to its end; 130 when a signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) stopped it first (its checkpoint says where: finish it with --resume); 1 on an error (rows and checkpoint are still written as far as they can be); 2 on a usage error.";

/// Prints a line on stdout; a closed pipe (`sonde ... | head`) ends output quietly instead of
/// panicking.
pub fn say(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    let result = match cli.command {
        Command::Lab(args) => cmd::lab::run(args),
        Command::Blast(args) => cmd::blast::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Scan(args) => scan::run(*args),
        Command::Grab(args) => grab::run(*args),
        Command::Dns(args) => dns::run(*args),
        Command::Latency(args) => latency::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Capture(args) => capture::run(*args),
        Command::Intercept(args) => intercept::run(args),
    };
    if let Err(err) = result {
        if err.downcast_ref::<Interrupted>().is_some() {
            std::process::exit(INTERRUPTED);
        }
        // One line: the context chain joined, no backtrace.
        // Not eprintln!: after a hangup the terminal is gone, and a panic would abort.
        sonde_engine::status::to_stderr(format_args!("sonde: error: {err:#}"));
        // tcpdump's status for an expression that does not compile.
        let bad_expression = err.downcast_ref::<capture::BadExpression>().is_some();
        std::process::exit(if bad_expression { 2 } else { 1 });
    }
}

/// Help and version as clap prints them; a usage error in sonde's one line (`sonde: error: …`,
/// clap's first paragraph joined), with clap's exit status: no tips that would turn a value
/// into something else.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let mut line = one_line(&e.render().to_string());
    let command = std::env::args().nth(1).unwrap_or_default();
    if let Some(hint) = peer_hint(&command, &e) {
        line.push_str(": ");
        line.push_str(hint);
    }
    eprintln!("sonde: error: {line}");
    std::process::exit(e.exit_code());
}

/// What sonde offers in place of a peer's option it does not take (ZMap's spellings that
/// sonde takes as they are need no hint).
fn peer_hint(command: &str, e: &clap::Error) -> Option<&'static str> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument || !matches!(command, "scan" | "grab") {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    // `--max-results=5` is reported whole.
    let name = arg.split('=').next().unwrap_or(arg);
    Some(match name {
        "-N" | "--max-results" => {
            "sonde has no cap on results (ZMap's -N); -n N (--max-targets) stops after N targets"
        }
        "-t" | "--max-runtime" => {
            "sonde has no time cap (ZMap's -t); -n N at -r R sends for N/R seconds, and Ctrl-C stops with a checkpoint to --resume"
        }
        "--output-module" => "sonde's is -O (--output-format): csv, ndjson, parquet",
        "--blocklist-file" | "--blacklist-file" => "sonde's is -b FILE (--blocklist)",
        "--allowlist-file" | "--whitelist-file" => "sonde's is -w FILE (--allowlist)",
        "--target-port" | "--target-ports" => "sonde's is -p (--ports)",
        "--cooldown-time" => "sonde's is -c SECONDS (--cooldown)",
        "--output-fields" => "sonde's is -f (--fields)",
        "--senders" => "sonde's is --threads (-T)",
        _ => return None,
    })
}

/// The first paragraph of clap's message, on one line, without its `error: `.
fn one_line(message: &str) -> String {
    let words: Vec<&str> = message
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = words.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_number_parser_gives_its_field_type() {
        // clap checks a parser's type against its field only when parsing.
        for args in [
            &[
                "scan",
                "--threads",
                "2",
                "--batch",
                "8",
                "--probes",
                "2",
                "-r",
                "5",
                "x",
            ][..],
            &["grab", "--syn-retries", "1", "-r", "0", "x"],
            &["blast", "--size", "100", "--batch", "8", "--threads", "1"],
            &["bench", "tx", "--runs", "2"],
            &["profile", "tx", "--lab", "x", "--runs", "2", "-r", "1000"],
            &["profile", "stack", "--reps", "5"],
        ] {
            let argv = std::iter::once("sonde").chain(args.iter().copied());
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("{args:?}: {e}");
            }
        }
    }

    /// The error line of `sonde ARGS`.
    fn error_of(args: &[&str]) -> String {
        let argv = std::iter::once("sonde").chain(args.iter().copied());
        let e = Cli::try_parse_from(argv).err().expect("a usage error");
        one_line(&e.render().to_string())
    }

    #[test]
    fn usage_errors_are_one_line_in_words() {
        let rate = error_of(&["scan", "-r", "-5", "198.18.0.0/24"]);
        assert!(rate.contains("'-5'") && rate.contains("--rate"), "{rate}");
        assert!(rate.contains("0 or more"), "{rate}");
        let grab_rate = error_of(&["grab", "-r", "-5", "198.18.0.0/24"]);
        assert!(grab_rate.contains("0 or more"), "{grab_rate}");
        let rates = error_of(&["latency", "run", "--to", "198.18.0.1:7", "--rates", "-5"]);
        assert!(rates.contains("above 0"), "{rates}");
        let threads = error_of(&["scan", "--threads", "65", "198.18.0.0/24"]);
        assert!(threads.contains("from 1 to 64"), "{threads}");
        let snaplen = error_of(&["capture", "-i", "sx0", "-w", "x.pcap", "-s", "300000"]);
        assert!(snaplen.contains("from 0 to 262144"), "{snaplen}");
        let batch = error_of(&["intercept", "stack", "--batch", "0", "pass"]);
        assert!(batch.contains("from 1 to 1024"), "{batch}");
        let mut durations = Vec::new();
        for args in [
            &["capture", "-i", "sx0", "-w", "x.pcap", "--duration", "-1"][..],
            &["latency", "run", "--to", "198.18.0.1:7", "--duration", "-1"],
            &["latency", "reflect", "--duration", "0"],
            &["blast", "--duration", "-2"],
            &["intercept", "stack", "--duration", "-1", "pass"],
        ] {
            let duration = error_of(args);
            assert!(
                duration.contains("--duration") && duration.contains("durations are positive"),
                "{args:?}: {duration}"
            );
            durations.push(duration);
        }
        for e in [&rate, &grab_rate, &rates, &threads, &snaplen, &batch]
            .into_iter()
            .chain(&durations)
        {
            assert!(!e.contains("..="), "Rust range syntax: {e}");
            assert!(!e.contains('\n') && !e.contains("tip"), "{e}");
        }
        // A missing value names what is missing, on the same line.
        let missing = error_of(&["latency", "run"]);
        assert!(missing.contains("--to"), "{missing}");
    }

    fn parses(args: &[&str]) -> bool {
        let argv = std::iter::once("sonde").chain(args.iter().copied());
        Cli::try_parse_from(argv).is_ok()
    }

    #[test]
    fn zmaps_spellings_of_the_same_options_are_taken() {
        for args in [
            &[
                "scan",
                "-T",
                "2",
                "-P",
                "3",
                "-e",
                "7",
                "-d",
                "198.18.0.0/24",
            ][..],
            &["scan", "--sender-threads", "2", "198.18.0.0/24"],
            &["scan", "-M", "tcp_synscan", "198.18.0.0/24"],
            &["scan", "-M", "icmp_echoscan", "198.18.0.0/24"],
            &["scan", "--list-output-fields"],
            &["scan", "--list-probe-modules"],
            &["grab", "-T", "2", "198.18.0.0/24"],
        ] {
            assert!(parses(args), "{args:?}");
        }
    }

    /// The hint `sonde ARGS` adds to its usage error.
    fn hint_of(args: &[&str]) -> Option<&'static str> {
        let argv = std::iter::once("sonde").chain(args.iter().copied());
        let e = Cli::try_parse_from(argv).err().expect("a usage error");
        peer_hint(args[0], &e)
    }

    #[test]
    fn zmaps_other_options_point_to_sondes() {
        let results = hint_of(&["scan", "-N", "5", "198.18.0.0/24"]).unwrap();
        assert!(results.contains("--max-targets"), "{results}");
        let runtime = hint_of(&["scan", "-t", "60", "198.18.0.0/24"]).unwrap();
        assert!(
            runtime.contains("-n N") && runtime.contains("-r R"),
            "{runtime}"
        );
        let module = hint_of(&["scan", "--output-module", "csv", "x"]).unwrap();
        assert!(module.contains("-O"), "{module}");
        let blocklist = hint_of(&["grab", "--blocklist-file=b.txt", "x"]).unwrap();
        assert!(blocklist.contains("-b FILE"), "{blocklist}");
        // Not every command is ZMap's, and not every unknown option has a hint.
        assert_eq!(hint_of(&["capture", "-t", "-i", "lo", "-w", "x"]), None);
        assert_eq!(hint_of(&["scan", "--no-such-option", "x"]), None);
    }

    #[test]
    fn a_mistyped_module_or_app_is_named_and_pointed_to() {
        let app = error_of(&["grab", "-M", "htpp", "198.18.0.0/24"]);
        assert!(app.contains("did you mean http?"), "{app}");
        let module = error_of(&["scan", "-M", "tcp_sin", "198.18.0.0/24"]);
        assert!(module.contains("did you mean tcp_syn?"), "{module}");
        let scan_typo = error_of(&["scan", "-M", "htpp", "198.18.0.0/24"]);
        assert!(
            scan_typo.contains("did you mean sonde grab -M http?"),
            "{scan_typo}"
        );
        let scan_app = error_of(&["scan", "-M", "http", "198.18.0.0/24"]);
        assert!(scan_app.contains("sonde grab -M http"), "{scan_app}");
        let grab_module = error_of(&["grab", "-M", "tcp_syn", "198.18.0.0/24"]);
        assert!(
            grab_module.contains("sonde scan -M tcp_syn"),
            "{grab_module}"
        );
    }
}
