//! `sonde lab`: up, down, exec, status, truth (and the hidden server the lab runs).

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use ipnet::Ipv4Net;
use sonde_lab::{LabConfig, Responder, Sink};

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Create a lab: scanner and lab namespaces, veth pair, kernel (or XDP) responder, nftables;
    /// or with --bridge hosts A and B joined through a middle namespace.
    Up(Box<UpArgs>),
    /// Remove everything a lab made (also after a crash half-way through `up`).
    Down(NameArg),
    /// Run a program inside the lab's scanner namespace: sonde lab exec -- zmap ...
    Exec {
        #[command(flatten)]
        name: NameArg,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<String>,
    },
    /// Show a lab's addresses, interfaces and population.
    Status {
        #[command(flatten)]
        name: NameArg,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the ground truth as CSV: addr,port,answer,service, what each address will answer
    /// (with no loss).
    ///
    /// One block of rows per address, IPv4 population then IPv6, ascending: each port of
    /// --ports (0 is ICMP echo: echo or none; the others TCP: synack or rst), then each UDP
    /// port of --udp-ports (dns where a DNS server answers, unreach for ICMP port unreachable).
    /// Every row of an address that does not answer says none. `service` says who answers: http or
    /// https (nginx, lab up --http), silent (the handshake completes, then nothing is ever
    /// sent), dns (unbound, lab up --dns), ssh, smtp, imap, pop3, ftp, tls13 or tls10 (lab up
    /// --services), banner (the small one-line server), or empty.
    ///
    /// With --format ndjson each row is a JSON object with addr, port, proto (icmp, tcp, udp),
    /// answer and service, and for a live server "expect": the grab fields it shows, by name
    /// (banner, ssh_banner, smtp_banner, imap_banner, pop3_banner, ssh_host_key_sha256,
    /// tls_cert_sha256, tls_version, tls_cipher), which `lab score` checks where results have them.
    Truth {
        #[command(flatten)]
        name: NameArg,
        /// csv (addr,port,answer,service) or ndjson (with each server's expected fields).
        #[arg(long, default_value = "csv")]
        format: TruthFormatArg,
        /// Ports to list: 0 for ICMP echo, the others TCP (default: 0 and the lab's open TCP
        /// ports).
        #[arg(long, value_delimiter = ',')]
        ports: Option<Vec<u16>>,
        /// UDP ports to list too (default: none).
        #[arg(long, value_delimiter = ',')]
        udp_ports: Vec<u16>,
        /// The DNS tree's truth instead (lab up --dns-tree), one JSON object a line per (name,
        /// type): name, type, rcode (NOERROR, NXDOMAIN, SERVFAIL), chain (the CNAME targets in
        /// order) and answers (the data of the asked type at the end of the chain, sorted).
        #[arg(long, conflicts_with_all = ["format", "ports", "udp_ports"])]
        dns: bool,
    },
    /// Score scan or grab results (csv, ndjson or parquet) against the lab's ground truth.
    ///
    /// A scan prints one line: `found N of M (P %), false positives F [tcp_syn: synack on port
    /// 80 within 198.18.0.0/16]`: of the M (address, port) pairs where the truth holds the
    /// answer, N are in the results; F result pairs are not in the truth. When the truth holds
    /// nothing to find, it says so and fails instead.
    ///
    /// Grab results (a status column, with saddr, sport, http_body or http_body_sha256,
    /// http_path, tls_cert_sha256) print: `completed N of M live (P %), bodies correct B of C
    /// (P %), wrong bodies W, silent seen as data-timeout S of T (P %), false positives F[,
    /// certificates correct X of Y][, fields correct R of N (P %), wrong fields W, missing fields
    /// E (banner 16/16, …)] [grab: port 80 within …]`. Live targets answer and are not
    /// silent; a body is correct when it is `sonde lab <address>\n` (GET /) or has the lab's
    /// big_sha256 (http_path /big); a false positive is a success where nothing serves.
    /// Fields are those `lab truth --format ndjson` expects of each server (banner,
    /// ssh_banner, smtp_banner, imap_banner, pop3_banner, ssh_host_key_sha256, tls_cert_sha256,
    /// tls_version, tls_cipher), checked where a row has them; an empty value in a column the
    /// file has is missing.
    Score(super::score::ScoreArgs),
    /// List the labs on this machine.
    List,
    /// The lab's TCP server (started by `lab up` inside the lab namespace): accept and close,
    /// or with --silent accept and hold (the silent hosts' connections, on one port).
    #[command(name = "__serve", hide = true)]
    Serve {
        #[arg(long, value_delimiter = ',')]
        ports: Vec<u16>,
        #[arg(long)]
        silent: bool,
        /// The DNS tree's slow server instead, holding each query this many milliseconds.
        #[arg(long, value_name = "MS", conflicts_with_all = ["ports", "silent"])]
        slow_dns: Option<u64>,
    },
    /// The lab's delay line (started by `lab up` with a path, inside the path namespace): told
    /// what to do by DIR/spec.json, it rewrites DIR/stats.json every 100 ms.
    #[command(name = "__path", hide = true)]
    Path {
        #[arg(long)]
        dir: std::path::PathBuf,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TruthFormatArg {
    Csv,
    Ndjson,
}

#[derive(Args)]
struct NameArg {
    /// Lab name (unique per lab; namespaces are sonde-NAME-scan and sonde-NAME-net, or
    /// sonde-NAME-a, -mid and -b for a bridge lab).
    #[arg(long, default_value = "lab")]
    name: String,
}

#[derive(Args)]
struct UpArgs {
    #[command(flatten)]
    name: NameArg,
    /// Target population, a prefix inside 198.18.0.0/15.
    #[arg(long, default_value = "198.18.0.0/16")]
    population: Ipv4Net,
    /// An IPv6 population too: a prefix inside 2001:2::/48, /110 or longer.
    #[arg(long)]
    population6: Option<ipnet::Ipv6Net>,
    /// Share of the population that answers (0.0 to 1.0), chosen by a keyed hash of --seed.
    #[arg(long, default_value_t = 0.1)]
    responsive: f64,
    /// TCP ports with a listening server (SYN-ACK); other ports answer RST. A small server
    /// says one line on them, "SONDE-LAB <address> <port>", and closes (nginx serves 80 and
    /// 443 with --http). Default: 80,443; 80 with --responder xdp --http.
    #[arg(long, value_delimiter = ',')]
    tcp_open: Option<Vec<u16>>,
    /// Seed of the keyed hash that picks the responsive addresses.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// TX/RX queues on each side of the veth pair (default 2; 1 for a bridge lab, whose
    /// every veth end gets this many).
    #[arg(long)]
    queues: Option<u32>,
    /// What receives on the lab side: the kernel (real answers) or an XDP drop program
    /// (pure-transmit measurements).
    #[arg(long, default_value = "kernel")]
    sink: Sink,
    /// Share of packets dropped at random in each direction (0.0 to 1.0): on the way to the
    /// population (before its kernel sees them) and on the way back from it (after its TCP
    /// sent them, so clients see retransmissions and out-of-order data).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Run a DNS server (unbound) on port 53 of every responsive address; it knows example.com
    /// (A, AAAA) and lab.example (TXT), and answers NXDOMAIN for everything else.
    #[arg(long)]
    dns: bool,
    /// Run nginx on ports 80 and 443 (TLS, a self-signed certificate made now; `lab status`
    /// shows its SHA-256) of every responsive address, IPv4 and IPv6; 80 and 443 are open then.
    /// `GET /` answers "sonde lab <address>\n" (the address connected to), `GET /big` a
    /// 1 MiB body (length and SHA-256 in `lab status`), anything else 404. With --responder
    /// xdp the XDP program serves port 80 itself (GET / only, nginx's reply byte for byte) and
    /// 443 is not opened.
    #[arg(long)]
    http: bool,
    /// Share of the responsive hosts (0.0 to 1.0) that complete the TCP handshake on every
    /// open port and then never send anything; a keyed hash of the address and --seed picks
    /// them (`lab truth` marks them silent).
    #[arg(long, default_value_t = 0.0)]
    silent_share: f64,
    /// Who answers the probes: the lab's kernel (IP input, nftables, its TCP/ICMP/UDP code and
    /// the servers), or xdp: an XDP program on the lab's end of the veth that answers TCP SYNs
    /// (SYN-ACK on the open ports, RST|ACK elsewhere), ICMP echo requests and UDP (ICMP port
    /// unreachable) of the responsive addresses itself, so the targets cost next to nothing.
    /// With --http it is also the web server on port 80, with no state (the SYN-ACK's sequence
    /// number is a keyed cookie): `GET /` gets nginx's reply and FIN in one segment. On the
    /// other open ports only the handshake's first half exists; --loss and --silent-share do
    /// not apply, nor 443 with --http; --dns still answers on 53.
    #[arg(long, default_value = "kernel")]
    responder: Responder,
    /// CPUs the lab's side runs on, e.g. 1 or 2-3: receive processing of the lab's end of the
    /// veth (RPS) and its transmit queues (XPS), and the lab's servers. Scanners of the lab run
    /// their senders on the other CPUs. Default: none, so the lab's work runs on whichever CPU
    /// sent the probe.
    #[arg(long, value_name = "LIST")]
    target_cpus: Option<String>,
    /// Real servers on every responsive address, from Debian's packages, each with a
    /// certificate (or host key) made now: ssh (sshd on 22), smtp (exim, STARTTLS, on 25),
    /// imap and pop3 (dovecot, STARTTLS/STLS, on 143 and 110), ftp (vsftpd, AUTH TLS, on 21),
    /// tls13 (nginx, TLS 1.3 only, on
    /// 8443) and tls10 (nginx, TLS 1.0 only with RSA key exchange, on 9443); the two TLS ones
    /// answer `GET /` as nginx does on 80. Their ports are open. `lab status` and `lab truth
    /// --format ndjson` show what each shows (greeting, certificate SHA-256, TLS version).
    #[arg(long, value_name = "LIST")]
    services: Option<String>,
    /// A bridge lab instead, for tools that sit in the path: host A (sonde-NAME-a, ax0,
    /// 198.19.254.1/24, 2001:2:0:fe::1/64) and host B (sonde-NAME-b, bx0, 198.19.254.2,
    /// 2001:2:0:fe::2) joined through sonde-NAME-mid, where a Linux bridge mbr forwards between
    /// ma and mb. Offloads are off on the hosts' ends, so the wire carries 1500-byte frames with
    /// complete checksums. B runs iperf3 servers on ports 5201-5204 (on --target-cpus if given).
    /// The population options do not apply and are refused with it.
    #[arg(long, conflicts_with_all = [
        "population", "population6", "responsive", "tcp_open", "seed", "sink",
        "loss", "dns", "http", "silent_share", "responder", "services", "dns_tree",
    ])]
    bridge: bool,
    /// A DNS tree of N second-level zones generated from --seed, with real servers in the
    /// lab: NSD for the root (198.19.53.1), the test. and example. TLDs (.2, .3) and the zones
    /// d0.test., d1.example., d2.test., … (.10-.13); a lame delegation (lame.test., .20: REFUSED)
    /// and a slow one (slow.test., .21); unbound as the recursive resolver on 198.19.53.64-79
    /// with the root as its only hint. `lab truth --dns` gives every answer; docs/lab.md says
    /// what each zone holds.
    #[arg(long, value_name = "N")]
    dns_tree: Option<u64>,
    /// Hosts h0 … h{H-1} in each zone of the DNS tree.
    #[arg(long, value_name = "H", requires = "dns_tree", default_value_t = sonde_lab::dns_tree::DEFAULT_HOSTS)]
    dns_hosts: u32,
    /// How long the DNS tree's slow server (slow.test.) holds each query, in milliseconds.
    #[arg(long, value_name = "D", requires = "dns_tree", default_value_t = sonde_lab::dns_tree::DEFAULT_SLOW_MS)]
    dns_slow_ms: u64,
    /// xdp: an XDP program on the lab's end of the veth answers the DNS tree too, on every
    /// address of 198.19.54.0/24 (UDP port 53), as a recursive resolver would (RA set, CNAME
    /// chains followed) but at line rate, from the same formulas as the truth; `big` TXT gets
    /// TC (the answerer has no TCP), and it answers slow.test. at once. It runs with either
    /// --responder.
    #[arg(long, value_name = "xdp", requires = "dns_tree")]
    dns_answerer: Option<DnsAnswerer>,
    /// none: no NSD, slow server or unbound for the DNS tree, only the XDP answerer (with
    /// --dns-answerer xdp), so the tree may have any number of zones (NSD's limit is a
    /// million records). Default: nsd.
    #[arg(
        long,
        value_name = "nsd|none",
        requires = "dns_tree",
        default_value = "nsd"
    )]
    dns_servers: DnsServers,
    #[command(flatten)]
    path: PathArgs,
}

/// Distance: a path between the scanner (host A of a bridge lab) and the lab network (mid),
/// made when any of these is given. Each holds frames in both directions, independently.
#[derive(Args)]
#[command(
    next_help_heading = "Distance: a path between the scanner (or A) and the lab (or mid), made when any of these is given"
)]
struct PathArgs {
    /// The round trip the path adds, e.g. 100ms, 1s, 250us: every frame, each way, is held half
    /// of it (plus its jitter) before it leaves.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    rtt: Option<u64>,
    /// The standard deviation of a round trip, e.g. 10ms: each frame's one-way hold gets a
    /// normal deviate of standard deviation JITTER/√2, cut at three of those either way and
    /// never below zero. Frames leave in due order, so jitter reorders them.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    jitter: Option<u64>,
    /// Share of frames (0.0 to 1.0) that skip the hold and leave at once, overtaking those held.
    #[arg(long, value_name = "P")]
    reorder: Option<f64>,
    /// Share of frames (0.0 to 1.0) sent twice; the copy is held on its own draws.
    #[arg(long, value_name = "P")]
    duplicate: Option<f64>,
    /// Share of frames (0.0 to 1.0) with one bit flipped after the Ethernet header, where a
    /// checksum covers it.
    #[arg(long, value_name = "P")]
    corrupt: Option<f64>,
    /// A bottleneck of this rate each way, e.g. 100mbit, 1gbit (frame bytes from the Ethernet
    /// header on, as tc counts them).
    #[arg(long, value_name = "RATE", value_parser = rate)]
    bottleneck: Option<u64>,
    /// Frames the bottleneck's queue holds (the one being sent included); one more is dropped.
    #[arg(long, value_name = "FRAMES", requires = "bottleneck")]
    bottleneck_queue: Option<u32>,
    /// Frames the path holds at most each way (default 524288; 512 bytes of store a frame,
    /// backed as used); one more is dropped and counted.
    #[arg(long, value_name = "FRAMES")]
    path_frames: Option<u32>,
}

impl PathArgs {
    /// The path these flags ask for, or None when none is given.
    fn config(&self) -> Option<sonde_lab::path::PathConfig> {
        let given = self.rtt.is_some()
            || self.jitter.is_some()
            || self.reorder.is_some()
            || self.duplicate.is_some()
            || self.corrupt.is_some()
            || self.bottleneck.is_some()
            || self.path_frames.is_some();
        let d = sonde_lab::path::PathConfig::default();
        given.then(|| sonde_lab::path::PathConfig {
            rtt_ns: self.rtt.unwrap_or(0),
            jitter_ns: self.jitter.unwrap_or(0),
            reorder: self.reorder.unwrap_or(0.0),
            duplicate: self.duplicate.unwrap_or(0.0),
            corrupt: self.corrupt.unwrap_or(0.0),
            bottleneck_bps: self.bottleneck,
            bottleneck_queue: self.bottleneck_queue.unwrap_or(d.bottleneck_queue),
            frames: self.path_frames.unwrap_or(d.frames),
        })
    }
}

fn duration(text: &str) -> Result<u64, String> {
    sonde_lab::path::parse_duration(text).map_err(|e| e.to_string())
}

fn rate(text: &str) -> Result<u64, String> {
    sonde_lab::path::parse_rate(text).map_err(|e| e.to_string())
}

/// `sonde lab __path`, for a lab's path: the program and its leading arguments.
fn path_command() -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("finding the sonde binary")?;
    Ok(vec![
        exe.display().to_string(),
        "lab".into(),
        "__path".into(),
    ])
}

pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.command {
        LabCommand::Up(up) => lab_up(*up),
        LabCommand::Down(n) => {
            sonde_lab::down(&n.name)?;
            eprintln!("lab \"{}\" removed", n.name);
            Ok(())
        }
        LabCommand::Exec { name, argv } => {
            let status = sonde_lab::exec(&name.name, &argv)?;
            std::process::exit(status.code().unwrap_or(1));
        }
        LabCommand::Status { name, json } => lab_status(&name.name, json),
        LabCommand::Truth {
            name, dns: true, ..
        } => print_dns_truth(&name.name),
        LabCommand::Truth {
            name,
            format,
            ports,
            udp_ports,
            ..
        } => {
            let format = match format {
                TruthFormatArg::Csv => sonde_lab::TruthFormat::Csv,
                TruthFormatArg::Ndjson => sonde_lab::TruthFormat::Ndjson,
            };
            print_truth(&name.name, ports.as_deref(), &udp_ports, format)
        }
        LabCommand::Score(args) => super::score::run(args),
        LabCommand::List => {
            // A name per line; a bridge lab's is followed by " bridge".
            for name in sonde_lab::list() {
                if sonde_lab::bridge::exists(&name) {
                    crate::say(format!("{name} bridge"));
                } else {
                    crate::say(name);
                }
            }
            Ok(())
        }
        LabCommand::Serve {
            slow_dns: Some(ms), ..
        } => match sonde_lab::serve_slow(std::time::Duration::from_millis(ms))? {},
        LabCommand::Serve { ports, silent, .. } => match (silent, ports.as_slice()) {
            (false, _) => match sonde_lab::serve(&ports)? {},
            (true, &[port]) => match sonde_lab::serve_silent(port)? {},
            (true, _) => anyhow::bail!("the silent server takes one port"),
        },
        LabCommand::Path { dir } => match sonde_path::run(&dir)? {},
    }
}

/// The truth on stdout; a reader that stops early (`| head`) ends it quietly.
fn print_truth(
    name: &str,
    ports: Option<&[u16]>,
    udp_ports: &[u16],
    format: sonde_lab::TruthFormat,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let written = sonde_lab::truth_as(name, ports, udp_ports, format, &mut out)
        .and_then(|_| out.flush().context("writing the truth"));
    match written {
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

/// The DNS tree's truth on stdout, as `print_truth` does.
fn print_dns_truth(name: &str) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let lab = sonde_lab::status(name)?;
    let written = sonde_lab::dns_tree::truth(name, lab.dns_tree.as_ref(), &mut out)
        .and_then(|_| out.flush().context("writing the truth"));
    match written {
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn lab_up(up: UpArgs) -> anyhow::Result<()> {
    let shares = [up.responsive, up.loss, up.silent_share];
    if !shares.iter().all(|s| (0.0..=1.0).contains(s)) {
        anyhow::bail!("--responsive, --loss and --silent-share are shares between 0.0 and 1.0");
    }
    let target_cpus = match up.target_cpus.as_deref() {
        Some(list) => Some(
            sonde_lab::parse_cpu_list(list).map_err(|e| anyhow::anyhow!("--target-cpus: {e}"))?,
        ),
        None => None,
    };
    let path = up.path.config();
    if let Some(p) = &path {
        p.validate()?;
    }
    if up.bridge {
        return bridge_up(up.name.name, target_cpus, up.queues.unwrap_or(1), path);
    }
    let services = match up.services.as_deref() {
        Some(list) => {
            sonde_lab::parse_services(list).map_err(|e| anyhow::anyhow!("--services: {e}"))?
        }
        None => Vec::new(),
    };
    let cfg = LabConfig {
        name: up.name.name,
        population: up.population,
        population6: up.population6,
        dns: up.dns,
        responsive: up.responsive,
        tcp_open: up.tcp_open.unwrap_or_else(|| {
            if up.http && up.responder == Responder::Xdp {
                vec![80]
            } else {
                vec![80, 443]
            }
        }),
        seed: up.seed,
        queues: up.queues.unwrap_or(2),
        sink: up.sink,
        loss: up.loss,
        http: up.http,
        silent_share: up.silent_share,
        responder: up.responder,
        target_cpus,
        services,
        path,
        dns_tree: up.dns_tree.map(|zones| sonde_lab::DnsTreeConfig {
            zones,
            hosts: up.dns_hosts,
            slow_ms: up.dns_slow_ms,
            answerer: up.dns_answerer == Some(DnsAnswerer::Xdp),
            servers: up.dns_servers == DnsServers::Nsd,
        }),
    };
    let exe = std::env::current_exe().context("finding the sonde binary")?;
    let server = vec![exe.display().to_string(), "lab".into(), "__serve".into()];
    let status = sonde_lab::up_with_path(&cfg, &server, &path_command()?)?;
    let mut extra = String::new();
    if status.http && status.nginx_pid.is_some() {
        extra.push_str(", nginx on 80 and 443");
    } else if status.http {
        extra.push_str(", the XDP responder's HTTP server on 80");
    }
    if !status.services.is_empty() {
        let names: Vec<String> = status
            .services
            .iter()
            .map(|s| format!("{} on {}", s.service, s.port))
            .collect();
        extra.push_str(&format!(", {}", names.join(", ")));
    }
    if status.silent_count > 0 {
        extra.push_str(&format!(", {} silent", status.silent_count));
    }
    if let Some(mode) = &status.responder_mode {
        extra.push_str(&format!(", XDP responder ({mode})"));
    }
    if let Some(cpus) = &status.target_cpus {
        let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
        extra.push_str(&format!(", lab on CPU {}", list.join(",")));
    }
    if let Some(p) = &status.path {
        extra.push_str(&format!(", path {} in {}", p.config, p.ns));
    }
    if let Some(tree) = &status.dns_tree {
        extra.push_str(&format!(", {}", dns_tree_text(tree)));
    }
    let mut population = status.population.clone();
    if let Some(six) = &status.population6 {
        population.push_str(&format!(" and {six}"));
    }
    eprintln!(
        "lab \"{}\" is up: population {population} ({} addresses answer{extra}), scanner {} on {} in {}",
        status.name,
        status.responsive_count,
        status.scan_ip,
        status.scan_if,
        status.scan_ns
    );
    Ok(())
}

fn bridge_up(
    name: String,
    target_cpus: Option<Vec<usize>>,
    queues: u32,
    path: Option<sonde_lab::path::PathConfig>,
) -> anyhow::Result<()> {
    let path_cmd = if path.is_some() {
        path_command()?
    } else {
        Vec::new()
    };
    let cfg = sonde_lab::bridge::BridgeConfig {
        name,
        target_cpus,
        queues,
        path,
        path_cmd,
    };
    let st = sonde_lab::bridge::up(&cfg)?;
    let ports = &st.iperf_ports;
    let mut pinned = String::new();
    if let Some(cpus) = &st.target_cpus {
        pinned = format!(" on CPU {}", sonde_lab::cpu_list(cpus));
    }
    if let Some(p) = &st.path {
        pinned.push_str(&format!(
            ", path {} in {} between A and mid",
            p.config, p.ns
        ));
    }
    eprintln!(
        "bridge lab \"{}\" is up: A {} on {} in {} — bridge {} in {} — B {} on {} in {}, \
         iperf3 on ports {}-{}{pinned}",
        st.name,
        st.a_ip,
        st.a_if,
        st.a_ns,
        st.mid_bridge,
        st.mid_ns,
        st.b_ip,
        st.b_if,
        st.b_ns,
        ports.first().copied().unwrap_or_default(),
        ports.last().copied().unwrap_or_default(),
    );
    Ok(())
}

fn lab_status(name: &str, json: bool) -> anyhow::Result<()> {
    let (mut value, path) = if sonde_lab::bridge::exists(name) {
        let st = sonde_lab::bridge::status(name)?;
        (serde_json::to_value(&st)?, st.path)
    } else {
        let st = sonde_lab::status(name)?;
        (serde_json::to_value(&st)?, st.path)
    };
    let report = path.as_ref().map(sonde_lab::path::report);
    if let (Some(r), Some(object)) = (&report, value.as_object_mut()) {
        object.insert("path_counters".into(), serde_json::to_value(r)?);
    }
    if json {
        crate::say(serde_json::to_string(&value)?);
    } else {
        for (key, v) in value.as_object().into_iter().flatten() {
            let lines = match (key.as_str(), v) {
                ("path" | "path_counters", _) => continue,
                ("services", serde_json::Value::Array(services)) => service_lines(services),
                ("dns_tree", serde_json::Value::Object(_)) => {
                    let tree: sonde_lab::DnsTreeStatus = serde_json::from_value(v.clone())?;
                    vec![dns_tree_text(&tree)]
                }
                _ => status_value(v).into_iter().collect(),
            };
            for (i, text) in lines.iter().enumerate() {
                let key = if i == 0 { key.as_str() } else { "" };
                crate::say(format!("{key:<17} {text}"));
            }
        }
        if let (Some(p), Some(r)) = (&path, &report) {
            print_path(p, r);
        }
    }
    match report {
        Some(r) if !r.running => anyhow::bail!(
            "lab {name:?}'s path is not forwarding: its delay line (pid {}) is not running; remove the lab with: sonde lab down --name {name}",
            r.pid
        ),
        _ => Ok(()),
    }
}

/// The path of `lab status`, in words: what it does, whether its delay line runs, and what it
/// counted each way.
fn print_path(p: &sonde_lab::path::PathStatus, r: &sonde_lab::path::PathReport) {
    let mut state = if r.running { "running" } else { "NOT RUNNING" }.to_string();
    // Rewritten every 100 ms while it runs: older counters mean it is stuck.
    if let Some(age) = r.age_ms.filter(|a| *a > 1000) {
        state.push_str(&format!(", counters written {:.1} s ago", age as f64 / 1e3));
    }
    crate::say(format!(
        "{:<17} {} in {} ({} — {}), delay line pid {} {state}",
        "path", p.config, p.ns, p.scan_side_if, p.net_side_if, p.pid
    ));
    let Some(c) = &r.counters else { return };
    for (what, f) in [("to lab", &c.to_lab), ("to scanner", &c.to_scanner)] {
        crate::say(format!(
            "{:<17} {} in, {} out, {} held (peak {}), {} dropped (queue full {}, hold full {}, \
             too long {}, receive ring full {}, link {}), {} duplicated, {} corrupted, \
             {} reordered, late by {:.1} µs at most ({:.1} µs mean)",
            format!("path {what}"),
            f.frames_in,
            f.frames_out,
            f.held,
            f.held_peak,
            f.dropped(),
            f.queue_full,
            f.hold_full,
            f.too_long,
            f.rx_ring_full,
            f.link_dropped,
            f.duplicated,
            f.corrupted,
            f.reordered,
            f.late_max_ns as f64 / 1e3,
            f.late_mean_ns as f64 / 1e3,
        ));
    }
}

/// `--dns-answerer`: what answers the DNS tree besides its servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DnsAnswerer {
    Xdp,
}

/// `--dns-servers`: whether the DNS tree's real servers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DnsServers {
    Nsd,
    None,
}

/// The DNS tree in words, for `lab up` and `lab status`.
fn dns_tree_text(tree: &sonde_lab::DnsTreeStatus) -> String {
    if tree.resolvers.is_empty() {
        return format!(
            "DNS tree of {} zones ({} hosts each) with no servers, XDP answerer on {}",
            tree.zones,
            tree.hosts,
            tree.answerers.as_deref().unwrap_or("none")
        );
    }
    let first = tree
        .resolvers
        .first()
        .map(|r| r.to_string())
        .unwrap_or_default();
    let last = tree
        .resolvers
        .last()
        .map(|r| r.octets()[3])
        .unwrap_or_default();
    let mut text = format!(
        "DNS tree of {} zones ({} hosts each), root {}, resolvers {first}-{last}, slow server {} ms",
        tree.zones, tree.hosts, tree.root, tree.slow_ms
    );
    if let Some(answerers) = &tree.answerers {
        text.push_str(&format!(", XDP answerer on {answerers}"));
    }
    text
}

/// The services of `lab status`, one line each: what serves on which port, what it shows
/// (greeting, TLS version and cipher, certificate, host key); "none" when there is none.
fn service_lines(services: &[serde_json::Value]) -> Vec<String> {
    if services.is_empty() {
        return vec!["none".into()];
    }
    services
        .iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().map(str::to_string);
            let mut parts = vec![format!(
                "{} on {} (pid {})",
                text("service").unwrap_or_default(),
                s["port"],
                s["pid"]
            )];
            if let Some(banner) = text("banner") {
                parts.push(format!("greeting {:?}", banner.trim_end()));
            }
            if let (Some(version), Some(cipher)) = (text("tls_version"), text("tls_cipher")) {
                parts.push(format!("{version} {cipher}"));
            }
            if let Some(cert) = text("cert") {
                let sha = text("cert_sha256").unwrap_or_default();
                parts.push(format!("certificate {cert} (SHA-256 {sha})"));
            }
            if let Some(key) = text("host_key_sha256") {
                parts.push(format!("host key SHA-256 {key}"));
            }
            parts.join(", ")
        })
        .collect()
}

/// A status value as a person reads it: strings bare, lists comma separated; None for what
/// the lab does not have (JSON null), which is left out.
fn status_value(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().filter_map(status_value).collect();
            Some(items.join(", "))
        }
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_read_as_lines_not_json() {
        let services = serde_json::json!([
            {"service": "ssh", "port": 22, "pid": 7, "banner": "SSH-2.0-OpenSSH_9.2p1\r\n",
             "cert": null, "cert_sha256": null, "host_key_sha256": "8ef2", "tls_version": null,
             "tls_cipher": null},
            {"service": "tls13", "port": 8443, "pid": 9, "banner": null,
             "cert": "/run/sonde/lab/x-services/tls13-cert.pem", "cert_sha256": "5404",
             "host_key_sha256": null, "tls_version": "TLSv1.3",
             "tls_cipher": "TLS_AES_128_GCM_SHA256"},
        ]);
        let lines = service_lines(services.as_array().unwrap());
        assert_eq!(
            lines,
            [
                "ssh on 22 (pid 7), greeting \"SSH-2.0-OpenSSH_9.2p1\", host key SHA-256 8ef2",
                "tls13 on 8443 (pid 9), TLSv1.3 TLS_AES_128_GCM_SHA256, certificate /run/sonde/lab/x-services/tls13-cert.pem (SHA-256 5404)",
            ]
        );
        assert_eq!(service_lines(&[]), ["none"]);
    }
}
