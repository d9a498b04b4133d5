//! `sonde lab`: up, down, exec, status, truth (and the hidden server the lab runs).

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use ipnet::Ipv4Net;
use sonde_lab::{LabConfig, Sink};

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Create a lab: scanner and lab namespaces, veth pair, kernel responder, nftables.
    Up(UpArgs),
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
    /// Print the ground truth as CSV: addr,port,answer (synack, rst, echo, none).
    Truth {
        #[command(flatten)]
        name: NameArg,
        /// Ports to list (default: the lab's open TCP ports); port 0 rows are ICMP echo.
        #[arg(long, value_delimiter = ',')]
        ports: Option<Vec<u16>>,
    },
    /// Score scan results (CSV with saddr, sport, success) against the lab's ground truth:
    /// found % of the expected answers, and false positives.
    Score {
        #[command(flatten)]
        name: NameArg,
        /// The port that was scanned.
        #[arg(long, default_value_t = 80)]
        port: u16,
        /// The answer that counts as found: synack, rst or echo (port 0).
        #[arg(long, default_value = "synack")]
        answer: String,
        /// Count only the truth inside this prefix (the range that was scanned).
        #[arg(long)]
        within: Option<ipnet::IpNet>,
        /// The scan's CSV output.
        results: std::path::PathBuf,
    },
    /// List the labs on this machine.
    List,
    /// The lab's TCP server (started by `lab up` inside the lab namespace).
    #[command(name = "__serve", hide = true)]
    Serve {
        #[arg(long, value_delimiter = ',')]
        ports: Vec<u16>,
    },
}

#[derive(Args)]
struct NameArg {
    /// Lab name (unique per lab; namespaces are sonde-NAME-scan and sonde-NAME-net).
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
    /// An IPv6 population too: a prefix inside 2001:2::/48, /112 or longer.
    #[arg(long)]
    population6: Option<ipnet::Ipv6Net>,
    /// Share of the population that answers (0.0 to 1.0), chosen by a keyed hash of --seed.
    #[arg(long, default_value_t = 0.1)]
    responsive: f64,
    /// TCP ports with a listening server (SYN-ACK); other ports answer RST.
    #[arg(long, value_delimiter = ',', default_value = "80,443")]
    tcp_open: Vec<u16>,
    /// Seed of the keyed hash that picks the responsive addresses.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// TX/RX queues on each side of the veth pair.
    #[arg(long, default_value_t = 2)]
    queues: u32,
    /// What receives on the lab side: the kernel (real answers) or an XDP drop program
    /// (pure-transmit measurements).
    #[arg(long, default_value = "kernel")]
    sink: Sink,
    /// Share of packets to the population dropped at random (0.0 to 1.0).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Run a DNS server (unbound) on port 53 of every responsive address; it knows example.com
    /// (A, AAAA) and lab.example (TXT), and answers NXDOMAIN for everything else.
    #[arg(long)]
    dns: bool,
}

pub fn run(args: LabArgs) -> anyhow::Result<()> {
    match args.command {
        LabCommand::Up(up) => lab_up(up),
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
        LabCommand::Truth { name, ports } => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            sonde_lab::truth(&name.name, ports.as_deref(), &mut out)?;
            out.flush().context("writing the truth")?;
            Ok(())
        }
        LabCommand::Score {
            name,
            port,
            answer,
            within,
            results,
        } => {
            let score = score(&name.name, port, &answer, within, &results)?;
            crate::say(score.to_string());
            Ok(())
        }
        LabCommand::List => {
            for name in sonde_lab::list() {
                crate::say(name);
            }
            Ok(())
        }
        LabCommand::Serve { ports } => match sonde_lab::serve(&ports)? {},
    }
}

fn lab_up(up: UpArgs) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&up.responsive) || !(0.0..=1.0).contains(&up.loss) {
        anyhow::bail!("--responsive and --loss are shares between 0.0 and 1.0");
    }
    let cfg = LabConfig {
        name: up.name.name,
        population: up.population,
        population6: up.population6,
        dns: up.dns,
        responsive: up.responsive,
        tcp_open: up.tcp_open,
        seed: up.seed,
        queues: up.queues,
        sink: up.sink,
        loss: up.loss,
    };
    let exe = std::env::current_exe().context("finding the sonde binary")?;
    let ports: Vec<String> = cfg.tcp_open.iter().map(u16::to_string).collect();
    let server = vec![
        exe.display().to_string(),
        "lab".into(),
        "__serve".into(),
        "--ports".into(),
        ports.join(","),
    ];
    let status = sonde_lab::up(&cfg, &server)?;
    eprintln!(
        "lab \"{}\" is up: population {} ({} addresses answer), scanner {} on {} in {}",
        status.name,
        status.population,
        status.responsive_count,
        status.scan_ip,
        status.scan_if,
        status.scan_ns
    );
    Ok(())
}

fn lab_status(name: &str, json: bool) -> anyhow::Result<()> {
    let status = sonde_lab::status(name)?;
    if json {
        crate::say(serde_json::to_string(&status)?);
        return Ok(());
    }
    let value = serde_json::to_value(&status)?;
    for (key, v) in value.as_object().into_iter().flatten() {
        crate::say(format!("{key:<16} {}", v.to_string().trim_matches('"')));
    }
    Ok(())
}

/// Found and false-positive counts of a scan against the truth.
pub struct Score {
    pub expected: usize,
    pub found: usize,
    pub false_positives: usize,
}

impl std::fmt::Display for Score {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = if self.expected == 0 {
            100.0
        } else {
            100.0 * self.found as f64 / self.expected as f64
        };
        write!(
            f,
            "found {} of {} ({pct:.3} %), false positives {}",
            self.found, self.expected, self.false_positives
        )
    }
}

fn score(
    lab: &str,
    port: u16,
    answer: &str,
    within: Option<ipnet::IpNet>,
    results: &std::path::Path,
) -> anyhow::Result<Score> {
    let mut truth_csv = Vec::new();
    sonde_lab::truth(lab, Some(&[port]), &mut truth_csv)?;
    let mut expected = std::collections::HashSet::new();
    for row in csv::Reader::from_reader(truth_csv.as_slice()).records() {
        let row = row?;
        let inside = within.is_none_or(|net| {
            row[0]
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| net.contains(&a))
        });
        if inside && row.get(1) == Some(&port.to_string()) && row.get(2) == Some(answer) {
            expected.insert(row[0].to_string());
        }
    }
    let mut reader = csv::Reader::from_path(results)
        .with_context(|| format!("reading {}", results.display()))?;
    let headers = reader.headers()?.clone();
    let column = |name: &str| headers.iter().position(|h| h == name);
    let saddr = column("saddr")
        .ok_or_else(|| anyhow::anyhow!("{} has no saddr column", results.display()))?;
    let (sport, success) = (column("sport"), column("success"));
    let mut found = std::collections::HashSet::new();
    for row in reader.records() {
        let row = row?;
        let port_ok = sport.is_none_or(|i| row.get(i) == Some(&port.to_string()) || port == 0);
        if port_ok && success.is_none_or(|i| row.get(i) == Some("1")) {
            found.insert(row[saddr].to_string());
        }
    }
    Ok(Score {
        expected: expected.len(),
        found: found.intersection(&expected).count(),
        false_positives: found.difference(&expected).count(),
    })
}
