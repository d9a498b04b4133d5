//! `sonde grab`: connect, send one request, read the reply, close — to every target, from user
//! space. This module turns the command line into the engine's `GrabPlan` and reports; the
//! engine runs it (`sonde_engine::grab`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use sonde_apps::{AnyApp, AppKind, AppOptions, TlsVersion};
use sonde_engine::grab::rounds::Retry;
use sonde_engine::grab::{all_fields, GrabPlan, GrabSummary};
use sonde_engine::status::{human_seconds, per_second, to_stderr};
use sonde_engine::stop::Stop;
use sonde_io::BackendKind;
use sonde_meter::output_file::IfExists;
use sonde_scan::output::{open_writer_with_metadata, OutputFormat};
use sonde_scan::Field;
use sonde_tcp::CloseMode;

use crate::runargs::{self, Place, RunArgs};

mod names;

/// How grab moves its segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrabBackend {
    /// sonde's TCP over AF_XDP; its XDP program takes sonde's segments before the kernel.
    Xdp,
    /// sonde's TCP over AF_PACKET rings, from an address the kernel does not own.
    Ring,
    /// The kernel's sockets (connect, epoll): the baseline.
    Kernel,
}

fn grab_backend_parser() -> impl TypedValueParser<Value = GrabBackend> {
    PossibleValuesParser::new(["xdp", "ring", "kernel"]).map(|s| match s.as_str() {
        "ring" => GrabBackend::Ring,
        "kernel" => GrabBackend::Kernel,
        _ => GrabBackend::Xdp,
    })
}

/// `-M`'s parser: an app; a probe module of `sonde scan` is pointed there.
fn app_value(text: &str) -> Result<AppKind, String> {
    text.parse().map_err(|unknown: String| {
        match text.parse::<sonde_scan::probe::ModuleKind>() {
            Ok(module) => format!("{module} is a probe module of sonde scan, not an app of grab: sonde scan -M {module} (grab connects and talks: http, tls, ssh, …)"),
            Err(_) => unknown,
        }
    })
}

fn close_parser() -> impl TypedValueParser<Value = CloseMode> {
    PossibleValuesParser::new(["rst", "fin"]).map(|s| match s.as_str() {
        "fin" => CloseMode::Fin,
        _ => CloseMode::Rst,
    })
}

/// The shared run options in grab's words: `-r` paces new connections, `--threads` runs
/// engine threads that each own their connections, and what grab has no use for (a cooldown:
/// it waits for every connection to end) is not offered.
#[derive(Args)]
#[command(
    after_help = crate::EXIT_STATUS_HELP,
    mut_arg("rate", |a| a.help("New connections per second (first SYNs; retries are not counted, so a target that never answers gets 1 + --syn-retries SYNs); 0 = as fast as possible")),
    mut_arg("cooldown", |a| a.hide(true)),
    mut_arg("threads", |a| a.help("Engine threads, each pinned, on a queue of its own (give --queues N or more), owning its share of the targets and of the source ports; a reply that lands at another thread is handed to its owner. --max-outstanding and -r are split between them")),
)]
pub struct GrabArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Ports to connect to: lists and ranges, e.g. 80,443,8000-8100. Default: the ports an -I
    /// file names (addr:port lines, or `sonde scan` output), else the app's usual port (80;
    /// tls and https 443, ssh 22, smtp 25, imap 143, pop3 110, ftp 21).
    #[arg(short = 'p', long)]
    ports: Option<String>,
    /// Application: http (GET and the reply), banner (what the server says first), payload
    /// (send bytes, read the reply), tls (a full TLS handshake: version, cipher, certificates),
    /// https (http inside TLS), ssh (identification and the KEXINIT's algorithm lists), smtp
    /// (greeting and EHLO; with --starttls the upgrade to TLS), imap and pop3 (greeting and
    /// capabilities; with --starttls the upgrade to TLS), ftp (greeting and FEAT; with
    /// --starttls AUTH TLS and the upgrade).
    #[arg(short = 'M', long = "app", default_value = "http", value_parser = app_value)]
    app: AppKind,
    /// HTTP path to GET.
    #[arg(long, default_value = "/")]
    http_path: String,
    /// HTTP Host header (default: the target's address).
    #[arg(long)]
    http_host: Option<String>,
    /// An extra HTTP header line, "Name: value" (repeatable).
    #[arg(short = 'H', long = "http-header")]
    http_headers: Vec<String>,
    /// Bytes to send, as hex (payload app).
    #[arg(long, conflicts_with = "payload_file")]
    payload_hex: Option<String>,
    /// Bytes to send, from a file (payload app).
    #[arg(long)]
    payload_file: Option<PathBuf>,
    /// TLS server name (SNI) to send (tls app; default: --http-host when it is a name).
    #[arg(long)]
    tls_sni: Option<String>,
    /// Highest TLS version offered: 1.0, 1.1, 1.2, 1.3. 1.2 and 1.3 make a full handshake
    /// (rustls); 1.0 and 1.1 send only the first-flight ClientHello and read the server's
    /// first flight.
    #[arg(long, default_value = "1.3")]
    tls_max: TlsVersion,
    /// PEM file of root CA certificates that certificate chains are validated against
    /// (tls, https; default: the Mozilla roots of webpki-roots).
    #[arg(long)]
    root_cas: Option<PathBuf>,
    /// smtp, imap, pop3, ftp: upgrade to TLS with STARTTLS (STLS, AUTH TLS) when the server offers it (the tls fields then).
    #[arg(long)]
    starttls: bool,
    /// Send the request in the handshake's final ACK instead of right after it.
    #[arg(long)]
    request_in_ack: bool,
    /// How to close: rst (the server keeps no TIME_WAIT) or fin (graceful).
    #[arg(long, default_value = "rst", value_parser = close_parser())]
    close: CloseMode,
    /// Keep at most this many reply bytes per connection, then close it.
    #[arg(long, default_value_t = 256 * 1024)]
    max_bytes: usize,
    /// Connections open at once at most; new SYNs wait when the table is full.
    #[arg(long, default_value_t = 100_000)]
    max_outstanding: usize,
    /// MiB that the sessions of tls, https, ssh, smtp, imap, pop3 and ftp may hold at once:
    /// fewer connections are open at once than --max-outstanding when their sessions would
    /// hold more (a TLS session is planned at 16 KiB: 32768 at once by default).
    #[arg(long, default_value_t = 512)]
    session_memory: usize,
    /// Extra SYNs to a target that has not answered (after --syn-timeout, then twice that, …).
    #[arg(long, default_value_t = 2, value_parser = crate::runargs::number_from(0u8, 8))]
    syn_retries: u8,
    /// Seconds before a SYN's first retry (each further one waits twice the last). Keep it
    /// above the path's round trip: on a longer path every retry races its answer and costs
    /// the target a second SYN-ACK.
    #[arg(long, default_value_t = 1.0, value_parser = crate::runargs::seconds_value)]
    syn_timeout: f64,
    /// Seconds from the handshake to the first reply byte.
    #[arg(long, default_value_t = 5.0)]
    first_byte_timeout: f64,
    /// Seconds between reply bytes.
    #[arg(long, default_value_t = 5.0)]
    idle_timeout: f64,
    /// Seconds for a whole connection.
    #[arg(long, default_value_t = 15.0)]
    total_timeout: f64,
    /// xdp (sonde's TCP over AF_XDP, on the host's own address), ring (sonde's TCP over a
    /// packet ring; needs -S with an address the kernel does not own), kernel (the kernel's
    /// sockets: the baseline).
    #[arg(long, default_value = "xdp", value_parser = grab_backend_parser())]
    backend: GrabBackend,
    /// Take received segments without verifying their TCP and IPv4 checksums. Only for a host
    /// whose capture point sees checksums the sender left partial for offload to finish (a
    /// veth peer with transmit checksum offload on, read over AF_XDP): frames from a NIC carry
    /// full checksums, and a packet ring marks partial ones, which are then taken anyway.
    #[arg(long)]
    no_verify_checksums: bool,
    /// Output fields, comma separated (* for all; see --list-fields).
    #[arg(short = 'f', long)]
    fields: Option<String>,
    /// List the output fields of the chosen app and exit.
    #[arg(long)]
    list_fields: bool,
    /// Output format: ndjson, csv, parquet. Default: the one -o's name says (.csv; .ndjson,
    /// .jsonl, .json; .parquet, .pq), else ndjson (stdout, -, or another name). A -O that
    /// contradicts the name is refused.
    #[arg(short = 'O', long)]
    output_format: Option<OutputFormat>,
}

pub fn run(args: GrabArgs) -> anyhow::Result<()> {
    let app = AnyApp::build(args.app, &app_options(&args)?).map_err(anyhow::Error::msg)?;
    runargs::check_input_file(&args.run)?;
    let names = names::read(&args.run)?;
    let app = match &names {
        Some(names) => app.with_names(Arc::new(names.round(0))),
        None => app,
    };
    // A name is a session's SNI and Host: its sessions must still fit.
    app.check_sessions().map_err(anyhow::Error::msg)?;
    if args.list_fields {
        for f in all_fields(&app) {
            crate::say(format!("{:<22} {}", f.name, f.help));
        }
        return Ok(());
    }
    check_limits(&args)?;
    let format = OutputFormat::resolve(
        args.output_format,
        args.run.output.as_deref(),
        OutputFormat::Ndjson,
    )?;
    let fields = select(&app, args.fields.as_deref())?;
    runargs::check_input(&args.run, false)?;
    let place = Place::enter(&args.run)?;
    let ports = args.ports.as_deref();
    let (plan, notes) = grab_plan(&args, &args.run, ports, &place, app.clone(), fields.clone())?;
    let mode = runargs::output_mode(&args.run, &plan.run, format == OutputFormat::Parquet)?;
    // Bound before the output is made: a taken port leaves no empty file behind.
    let metrics = args
        .run
        .metrics
        .start(metric_labels(&args, &plan), args.run.quiet)?;
    let metadata = crate::scan::run_metadata(&plan.run);
    let writer = open_writer_with_metadata(
        format,
        args.run.output.as_deref(),
        fields.clone(),
        mode,
        &metadata.key_values(),
    )?;
    if !args.run.quiet {
        announce(&args, &plan, &notes);
    }
    let stop = Stop::on_signals()?;
    let legacy_retry =
        args.app == AppKind::Tls && args.tls_max >= TlsVersion::Tls12 && args.run.resume.is_none();
    let Some(names) = names.filter(|n| n.most_per_target() > 1) else {
        if !legacy_retry {
            let summary = run_plan(&args, plan, writer, &stop, &metrics)?;
            return finish(&args, &summary, metrics);
        }
        // A server that refuses the full handshake's hello has its row wait for a second
        // connection with another hello: the first-flight hello alone for a TLS 1.0/1.1-only
        // server (protocol_version), a TLS 1.2 hello for a TLS 1.3 server whose groups rustls
        // lacks (handshake_failure before any ServerHello).
        let writer = names::SharedWriter::new(writer);
        let refused = names::Refused::default();
        let mut summary = run_plan(&args, plan, writer.holding_back(&refused), &stop, &metrics)?;
        let retries: Vec<_> = [
            (Retry::FirstFlight, TlsVersion::Tls11),
            (Retry::Tls12, TlsVersion::Tls12),
        ]
        .into_iter()
        .map(|(retry, tls_max)| (refused.take(retry), retry, tls_max))
        .filter(|(targets, ..)| !targets.is_empty() && !stop.is_set())
        .collect();
        if retries.is_empty() {
            writer.round(1, true).finish()?;
        }
        for (i, (targets, retry, tls_max)) in retries.iter().enumerate() {
            let round_args = names::target_list(&args.run, targets);
            let options = AppOptions {
                tls_max: *tls_max,
                tls_retry: *retry == Retry::Tls12,
                ..app_options(&args)?
            };
            let again = AnyApp::build(AppKind::Tls, &options).map_err(anyhow::Error::msg)?;
            // The held-back targets' own ports only (the file's address:port lines), not -p.
            let (plan, _) = grab_plan(&args, &round_args, None, &place, again, fields.clone())?;
            // Round 0 of the writer: its rows carry no name, and none is held back.
            let last = i + 1 == retries.len();
            let round = run_plan(&args, plan, writer.round(0, last), &stop, &metrics)?;
            summary.add_round(&round);
        }
        return finish(&args, &summary, metrics);
    };
    // Several names for one target: a connection is its address and port, so each further
    // name goes in a round of its own, over the targets that have one, into the same output.
    let rounds = names.most_per_target();
    let writer = names::SharedWriter::new(writer);
    let mut summary = run_plan(&args, plan, writer.round(0, false), &stop, &metrics)?;
    for round in 1..rounds {
        if stop.is_set() {
            break;
        }
        let round_args = names::round_targets(&args.run, &names, round);
        let app = app.clone().with_names(Arc::new(names.round(round)));
        let (plan, _) = grab_plan(&args, &round_args, ports, &place, app, fields.clone())?;
        let last = run_plan(
            &args,
            plan,
            writer.round(round, round + 1 == rounds),
            &stop,
            &metrics,
        )?;
        summary.add_round(&last);
    }
    finish(&args, &summary, metrics)
}

/// The summary printed, and the last figures published (`--metrics`).
fn finish(
    args: &GrabArgs,
    summary: &GrabSummary,
    metrics: crate::metrics::Metrics,
) -> anyhow::Result<()> {
    report(args, summary)?;
    metrics.end(summary)?;
    match summary.interrupted {
        true => Err(crate::Interrupted.into()),
        false => Ok(()),
    }
}

fn run_plan(
    args: &GrabArgs,
    mut plan: GrabPlan<AnyApp>,
    writer: Box<dyn sonde_scan::output::RowWriter + Send>,
    stop: &Stop,
    metrics: &crate::metrics::Metrics,
) -> anyhow::Result<GrabSummary> {
    plan.run.metrics = metrics.publisher();
    match args.backend {
        GrabBackend::Kernel => sonde_engine::grab::kernel::run(plan, writer, stop),
        _ => sonde_engine::grab::run(plan, writer, stop),
    }
}

/// The plan of a grab of the targets `run_args` names (the command line's, or one round's of
/// several names per target, or a retry's) over `ports` (`-p`; `None`: the input's), with
/// `app`.
fn grab_plan(
    args: &GrabArgs,
    run_args: &RunArgs,
    ports: Option<&str>,
    place: &Place,
    app: AnyApp,
    fields: Vec<&'static Field>,
) -> anyhow::Result<(GrabPlan<AnyApp>, Vec<String>)> {
    let ports = runargs::Ports::Given(ports, args.app.default_port());
    let resolved = runargs::resolve(run_args, place, ports, false)?;
    let mut notes = resolved.notes.clone();
    let v6 = resolved.space.ipv6_addresses() > 0;
    let arp_for = match args.backend {
        GrabBackend::Ring if resolved.host.source_is_local => bail!(
            "--backend ring needs a source address the kernel does not own (it would reset every connection): give -S with a free address on {}'s network; sonde answers ARP for it",
            resolved.host.iface
        ),
        GrabBackend::Ring => Some(resolved.host.src_ip),
        _ => None,
    };
    let validator = resolved.validator;
    let (src_mac, gateway_mac) = (resolved.host.src_mac, resolved.host.gateway_mac);
    let backends = match args.backend {
        GrabBackend::Xdp | GrabBackend::Kernel => (BackendKind::Xdp, BackendKind::Xdp),
        GrabBackend::Ring => (BackendKind::Ring, BackendKind::Ring),
    };
    check_threads(args)?;
    let rate = runargs::checked_rate(args.run.rate)?;
    let run = resolved.run_plan("grab", run_args, place, rate, 1, v6, backends)?;
    runargs::check_resume(&run, run_args, "grab", args.app.name())?;
    let mut tcp = sonde_tcp::Config::new(src_mac, gateway_mac, validator);
    tcp.src_ip = run.src_ip;
    tcp.src_ip6 = run.src_ip6;
    tcp.ports = run.ports;
    tcp.max_outstanding = args.max_outstanding;
    if let Some(sessions) = Sessions::of(args).filter(|s| s.at_once < args.max_outstanding) {
        tcp.max_outstanding = sessions.at_once;
        notes.push(format!(
            "at most {} connections open at once, not --max-outstanding {}: their {} sessions take about {} KiB each, and --session-memory allows {} MiB",
            sessions.at_once,
            args.max_outstanding,
            args.app,
            sessions.bytes_each / 1024,
            args.session_memory
        ));
    }
    tcp.max_bytes = args.max_bytes;
    tcp.request_in_ack = args.request_in_ack;
    tcp.close = args.close;
    tcp.first_byte_timeout_us = seconds_us(args.first_byte_timeout, "--first-byte-timeout")?;
    tcp.idle_timeout_us = seconds_us(args.idle_timeout, "--idle-timeout")?;
    tcp.total_timeout_us = seconds_us(args.total_timeout, "--total-timeout")?;
    tcp.verify_checksums = !args.no_verify_checksums;
    let plan = GrabPlan {
        run,
        tcp,
        app,
        syn_retries: args.syn_retries,
        syn_timeout_us: seconds_us(args.syn_timeout, "--syn-timeout")?,
        arp_for,
        fields,
    };
    Ok((plan, notes))
}

/// The labels of a grab's series (`--metrics`).
fn metric_labels<'a>(args: &GrabArgs, plan: &'a GrabPlan<AnyApp>) -> crate::metrics::RunLabels<'a> {
    crate::metrics::RunLabels {
        command: "grab",
        module: plan.app.kind().name(),
        backend: match args.backend {
            GrabBackend::Xdp => "xdp",
            GrabBackend::Ring => "ring",
            GrabBackend::Kernel => "kernel",
        },
        shard: plan.run.shard.0,
        target_rate: plan.run.rate,
    }
}

fn app_options(args: &GrabArgs) -> anyhow::Result<AppOptions> {
    let payload = match (&args.payload_hex, &args.payload_file) {
        (Some(hex), _) => crate::scan::parse_hex(hex)?,
        (None, Some(path)) => std::fs::read(path)
            .with_context(|| format!("cannot read --payload-file {}", path.display()))?,
        (None, None) => Vec::new(),
    };
    Ok(AppOptions {
        http_path: args.http_path.clone(),
        http_host: args.http_host.clone(),
        http_headers: args.http_headers.clone(),
        payload,
        tls_sni: args.tls_sni.clone(),
        tls_max: args.tls_max,
        tls_root_cas: args.root_cas.clone(),
        starttls: args.starttls,
        ..AppOptions::default()
    })
}

fn check_limits(args: &GrabArgs) -> anyhow::Result<()> {
    // A target's SYNs wait syn_timeout · (2^(retries+1) − 1) for an answer in all; the engine
    // keeps 32-bit µs timestamps, so every wait stays within 30 minutes.
    let span = args.syn_timeout * f64::from((2u32 << args.syn_retries) - 1);
    if span > 1800.0 {
        bail!(
            "--syn-timeout {} with --syn-retries {} waits {span:.0} s for an answer: at most 1800 s (30 minutes); lower either",
            args.syn_timeout,
            args.syn_retries
        );
    }
    if args.max_outstanding == 0 {
        bail!("--max-outstanding 0 would never open a connection: give 1 or more");
    }
    if args.max_bytes == 0 {
        bail!("--max-bytes 0 would keep nothing of any reply: give 1 or more");
    }
    if args.session_memory == 0 && args.app.session_bytes(args.starttls).is_some() {
        bail!(
            "--session-memory 0 would hold no {} session: give 1 (MiB) or more",
            args.app
        );
    }
    Ok(())
}

/// The sessions a grab keeps at once, for an app that talks in turns: what one holds while
/// it waits, and how many `--session-memory` holds.
#[derive(Clone, Copy, Debug, serde::Serialize)]
struct Sessions {
    bytes_each: usize,
    at_once: usize,
    budget_bytes: usize,
}

impl Sessions {
    fn of(args: &GrabArgs) -> Option<Sessions> {
        let bytes_each = args.app.session_bytes(args.starttls)?;
        let budget_bytes = args.session_memory.saturating_mul(1024 * 1024);
        Some(Sessions {
            bytes_each,
            at_once: (budget_bytes / bytes_each).clamp(1, args.max_outstanding),
            budget_bytes,
        })
    }
}

/// The summary as `--summary-json` writes it: the engine's, and the sessions' bound.
#[derive(serde::Serialize)]
struct SummaryJson<'a> {
    #[serde(flatten)]
    summary: &'a GrabSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    sessions: Option<Sessions>,
}

fn seconds_us(seconds: f64, flag: &str) -> anyhow::Result<u64> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("invalid {flag} {seconds}: give a positive number of seconds");
    }
    Ok((seconds * 1e6) as u64)
}

/// The selected output fields: `-f`, `*`, or every field (a grab row is one per target, so
/// the default keeps them all).
fn select(app: &AnyApp, spec: Option<&str>) -> anyhow::Result<Vec<&'static Field>> {
    let known: Vec<&'static Field> = all_fields(app).collect();
    let Some(list) = spec.map(str::trim).filter(|s| *s != "*") else {
        return Ok(known);
    };
    list.split(',')
        .map(str::trim)
        .map(|name| {
            known
                .iter()
                .copied()
                .find(|f| f.name == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = known.iter().map(|f| f.name).collect();
                    anyhow::anyhow!(
                        "unknown field \"{name}\" for grab -M {}: known fields are {}",
                        app.kind().name(),
                        names.join(", ")
                    )
                })
        })
        .collect()
}

fn announce(args: &GrabArgs, plan: &GrabPlan<AnyApp>, notes: &[String]) {
    let run = &plan.run;
    let rate = if run.rate > 0.0 {
        format!("{:.0} new connections/s", run.rate)
    } else {
        "full speed".into()
    };
    eprintln!(
        "grab: {}, {} over {} from {} on {} in {}, at {rate}, at most {} open at once{}",
        run.space.describe_as("connection", "connections"),
        plan.app.kind().name(),
        match args.backend {
            GrabBackend::Xdp => "sonde's TCP on AF_XDP",
            GrabBackend::Ring => "sonde's TCP on a packet ring",
            GrabBackend::Kernel => "kernel sockets",
        },
        run.src_ip.map_or("?".into(), |s| s.to_string()),
        run.iface,
        sonde_lab::where_am_i(),
        plan.tcp.max_outstanding,
        match run.threads {
            0 | 1 => String::new(),
            n => format!(", {n} engine threads"),
        }
    );
    for note in notes {
        eprintln!("grab: {note}");
    }
}

/// Engine threads: one lane of source ports each, and sonde's own TCP only (the kernel
/// backend's sockets are served by one thread).
fn check_threads(args: &GrabArgs) -> anyhow::Result<()> {
    let threads = args.run.threads;
    if threads <= 1 {
        return Ok(());
    }
    if args.backend == GrabBackend::Kernel {
        bail!("--threads {threads} needs sonde's own TCP (--backend xdp or ring): the kernel backend runs one thread");
    }
    if threads > MAX_THREADS {
        bail!("--threads {threads}: grab runs at most {MAX_THREADS} engine threads");
    }
    let ports = args.run.source_ports;
    if threads > ports.len() {
        bail!(
            "--threads {threads} needs at least {threads} source ports; --source-ports {ports} has {}",
            ports.len()
        );
    }
    Ok(())
}

/// The most engine threads grab runs (the threads hand each other frames through a ring per
/// pair).
const MAX_THREADS: u32 = 64;

fn report(args: &GrabArgs, s: &GrabSummary) -> anyhow::Result<()> {
    if !args.run.quiet {
        // The kernel backend's sockets leave checksums to the kernel.
        let checksums = match (args.backend, s.checksums_verified) {
            (GrabBackend::Kernel, _) => String::new(),
            (_, true) => format!("; {} bad checksums", s.bad_checksums),
            (_, false) => "; checksums not verified".into(),
        };
        // Frames for another thread's connection lost on the way to it (issue 30).
        let lost = match s.handover_dropped {
            0 => String::new(),
            n => format!("; {n} frames lost between threads"),
        };
        to_stderr(format_args!(
            "grab: {} connections in {}: {} success ({}), {} refused, {} no answer, {} data timeouts, {} resets, {} closed; cpu {:.2} s user, {:.2} s system = {:.1} µs per success; peak {} open{checksums}{lost}",
            s.completed + s.syn_timeouts,
            human_seconds(s.wall_s),
            s.success,
            per_second(s.conn_per_s, "conn"),
            s.refused,
            s.syn_timeouts,
            s.timeouts,
            s.resets,
            s.closed,
            s.cpu_user_s,
            s.cpu_sys_s,
            s.cpu_us_per_conn,
            s.peak_outstanding
        ));
        if let Some(sessions) = Sessions::of(args) {
            to_stderr(format_args!(
                "grab: at most {} {} sessions at once, about {} KiB each ({} MiB in all, --session-memory)",
                sessions.at_once,
                args.app,
                sessions.bytes_each / 1024,
                sessions.at_once * sessions.bytes_each / (1024 * 1024)
            ));
        }
        // What was lost on the way, and how fast the run could have gone (the last line).
        if let Some(losses) = &s.losses {
            to_stderr(format_args!("grab: {losses}"));
        }
        if let Some(raced) = &s.syn_retries_raced {
            to_stderr(format_args!("grab: {raced}"));
        }
    }
    if s.left_open > 0 {
        to_stderr(format_args!(
            "grab: {} connections left open on their servers: their RSTs could not be sent before the end",
            s.left_open
        ));
    }
    if let Some(path) = &s.checkpoint {
        to_stderr(format_args!(
            "grab interrupted: checkpoint written to {path}; finish with the same command plus --resume {path} (and another -o, or --append)"
        ));
    }
    if let Some(path) = &args.run.summary_json {
        let json = SummaryJson {
            summary: s,
            sessions: Sessions::of(args),
        };
        crate::cmd::blast::write_json(path, &json, IfExists::force(args.run.force))?;
    }
    Ok(())
}
