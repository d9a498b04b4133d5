//! What a lab is made of (`LabConfig`), what a running lab looks like
//! (`LabStatus`), and the checks on both before anything is created.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use anyhow::{anyhow, bail, Result};
use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::cpus::{check_target_cpus, online_cpus};
use crate::dns_tree::{DnsTreeConfig, DnsTreeStatus};
use crate::path::{PathConfig, PathStatus};

/// The only IPv4 space the lab may use (RFC 2544, benchmarking).
pub(crate) const LAB_SPACE: Ipv4Net = net(198, 18, 0, 0, 15);
/// The link between the namespaces (inside `LAB_SPACE`, as the rule asks).
pub(crate) const LINK_NET: Ipv4Net = net(198, 19, 255, 0, 24);
pub(crate) const SCAN_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
pub(crate) const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);
/// The only IPv6 space the lab may use (RFC 5180, benchmarking).
pub(crate) const LAB_SPACE6: Ipv6Net = net6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48);
/// The IPv6 link between the namespaces (inside `LAB_SPACE6`); populations
/// may not overlap it.
pub(crate) const LINK_NET6: Ipv6Net = net6([0x2001, 2, 0, 0xffff, 0, 0, 0, 0], 64);
pub(crate) const SCAN_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
pub(crate) const GATEWAY_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 0xfe);
/// Narrowest IPv6 population prefix length allowed: /110 has 262,144 addresses (twice the
/// widest IPv4 population, a /15), so the truth stays enumerable, and with a /15 a grab can
/// hold more than 250,000 connections open at once across a long path.
const MIN_PREFIX6: u8 = 110;
pub(crate) const SCAN_IF: &str = "sx0";
pub(crate) const NET_IF: &str = "nx0";
/// With loss: an interface of the net namespace that stays down, where nftables sends the
/// packets from the population it loses (see nft.rs).
pub(crate) const LOSS_SINK_IF: &str = "lz0";
/// Veth queue limit: far more than these hosts have cores, and the kernel's
/// own limit for veth is in the thousands.
const MAX_QUEUES: u32 = 1024;
/// Longest lab name: short enough for every name derived from it.
const MAX_NAME: usize = 20;
/// The ports nginx serves with `http`: plain HTTP and HTTPS.
pub const HTTP_PORT: u16 = 80;
pub const HTTPS_PORT: u16 = 443;
/// The DNS server's port (UDP, and TCP: unbound answers both).
pub const DNS_PORT: u16 = 53;
/// Where the silent server listens (127.0.0.1 and ::1 only, so no scan can reach it there;
/// nftables' tproxy hands it the silent hosts' connections). A wildcard listener on the same
/// port would clash, so it may not be an open port.
pub(crate) const SILENT_PORT: u16 = 65534;

const fn net(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn net6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// What to bring up.
#[derive(Clone, Debug, PartialEq)]
pub struct LabConfig {
    pub name: String,
    /// The target population; must lie inside 198.18.0.0/15.
    pub population: Ipv4Net,
    /// Share of the population that answers at all (0.0..=1.0).
    pub responsive: f64,
    /// Ports with a listening server on every responsive address.
    pub tcp_open: Vec<u16>,
    /// Key of the responsiveness hash.
    pub seed: u64,
    /// TX and RX queues of each veth end.
    pub queues: u32,
    pub sink: Sink,
    /// Share of packets to the population dropped at random (0.0..1.0).
    pub loss: f64,
    /// An IPv6 population besides the IPv4 one: a prefix inside 2001:2::/48,
    /// /110 or longer, not overlapping the link 2001:2:0:ffff::/64. The same
    /// seed, share, ports and loss apply. None: the lab is IPv4 only.
    pub population6: Option<Ipv6Net>,
    /// Run a DNS server (unbound) on port 53 of every responsive address.
    pub dns: bool,
    /// Run nginx on ports 80 (HTTP) and 443 (HTTPS) of every responsive address; they count
    /// as open whether or not `tcp_open` lists them. With `Responder::Xdp` the XDP program
    /// serves HTTP on port 80 itself instead, and 443 is not opened (TLS stays with nginx).
    pub http: bool,
    /// Share of the responsive addresses (0.0..=1.0) that complete the TCP handshake on every
    /// open port and then never send anything (a keyed hash of the address, salted apart from
    /// responsiveness, picks them).
    pub silent_share: f64,
    /// Who answers the probes: the lab's kernel, or an XDP program on nx0.
    pub responder: Responder,
    /// CPUs the lab's side runs on (RPS and XPS of nx0, the lab's servers), leaving the others
    /// to the scanner; None: wherever the kernel runs it (the sending CPU, for veth).
    pub target_cpus: Option<Vec<usize>>,
    /// Real servers on every responsive address (sshd, exim, dovecot, vsftpd, nginx for TLS 1.3 and
    /// TLS 1.0), each on its port ([`LabService::port`]), which counts as open.
    pub services: Vec<LabService>,
    /// Distance between the scanner and the lab: a delay line in a namespace of its own between
    /// sx0 and nx0 (see path.rs). None: sx0 and nx0 are one veth pair.
    pub path: Option<PathConfig>,
    /// A DNS tree (root, TLDs, second-level zones, resolvers) on 198.19.53.0/24; see dns_tree.
    pub dns_tree: Option<DnsTreeConfig>,
}

impl LabConfig {
    /// Every TCP port that answers SYN-ACK: `tcp_open`, plus 80 and 443 with `http` (80 alone
    /// when the XDP program serves HTTP), ascending.
    pub fn open_ports(&self) -> Vec<u16> {
        let mut ports = self.tcp_open.clone();
        if self.xdp_http() {
            ports.push(HTTP_PORT);
        } else if self.http {
            ports.extend([HTTP_PORT, HTTPS_PORT]);
        }
        ports.extend(self.services.iter().map(|s| s.port()));
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Whether the XDP program is the lab's web server (`--responder xdp --http`), not nginx.
    pub fn xdp_http(&self) -> bool {
        self.http && self.responder == Responder::Xdp
    }

    /// Whether the XDP program answers the DNS tree on 198.19.54.0/24 (`--dns-answerer xdp`).
    pub fn xdp_dns(&self) -> bool {
        self.dns_tree.is_some_and(|t| t.answerer)
    }

    /// The open ports the lab's small accept-and-close server serves: all but nginx's (or the
    /// XDP server's) and the services'.
    pub fn served_ports(&self) -> Vec<u16> {
        let nginx = |p: &u16| self.http && (*p == HTTP_PORT || *p == HTTPS_PORT);
        let service = |p: &u16| self.services.iter().any(|s| s.port() == *p);
        self.open_ports()
            .into_iter()
            .filter(|p| !nginx(p) && !service(p))
            .collect()
    }
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            name: "lab".to_string(),
            population: net(198, 18, 0, 0, 16),
            responsive: 0.1,
            tcp_open: vec![80, 443],
            seed: 1,
            queues: 2,
            sink: Sink::Kernel,
            loss: 0.0,
            population6: None,
            dns: false,
            http: false,
            silent_share: 0.0,
            responder: Responder::Kernel,
            target_cpus: None,
            services: Vec::new(),
            path: None,
            dns_tree: None,
        }
    }
}

/// Who answers the scanner's probes on the lab side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Responder {
    /// The lab's kernel: IP input, nftables, its TCP, ICMP and UDP code, and the servers.
    Kernel,
    /// An XDP program on nx0 (xdp/responder.c) answers SYN, ICMP echo and UDP probes to the
    /// responsive addresses with XDP_TX and drops what goes to the others (and with `http` serves
    /// HTTP on port 80, statelessly); everything else still goes to the kernel.
    Xdp,
}

impl FromStr for Responder {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "kernel" => Ok(Responder::Kernel),
            "xdp" => Ok(Responder::Xdp),
            _ => Err(anyhow!("unknown responder {s:?} (use kernel or xdp)")),
        }
    }
}

impl fmt::Display for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Responder::Kernel => "kernel",
            Responder::Xdp => "xdp",
        })
    }
}

/// What receives the scanner's frames on the lab side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sink {
    /// The lab-side kernel stack answers (SYN-ACK, RST, echo reply).
    Kernel,
    /// An XDP program on nx0 drops every frame: pure transmit measurements.
    Drop,
}

impl FromStr for Sink {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "kernel" => Ok(Sink::Kernel),
            "drop" => Ok(Sink::Drop),
            _ => Err(anyhow!("unknown sink {s:?} (use kernel or drop)")),
        }
    }
}

impl fmt::Display for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sink::Kernel => "kernel",
            Sink::Drop => "drop",
        })
    }
}

/// A lab that is up: everything a tool needs to use it, as stored in
/// `/run/sonde/lab/<name>.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LabStatus {
    pub name: String,
    pub scan_ns: String,
    pub net_ns: String,
    pub scan_if: String,
    pub net_if: String,
    pub scan_ip: Ipv4Addr,
    pub scan_mac: String,
    pub gateway_ip: Ipv4Addr,
    pub gateway_mac: String,
    pub population: String,
    pub responsive: f64,
    /// How many addresses answer, IPv4 and IPv6 populations together.
    pub responsive_count: u64,
    pub tcp_open: Vec<u16>,
    pub seed: u64,
    pub queues: u32,
    pub sink: String,
    pub loss: f64,
    pub server_pid: Option<u32>,
    /// With `Sink::Drop`: how the XDP program attached ("xdpdrv" or
    /// "xdpgeneric").
    #[serde(default)]
    pub xdp_mode: Option<String>,
    /// The IPv6 population, if the lab has one.
    #[serde(default)]
    pub population6: Option<String>,
    /// The scanner's IPv6 address (2001:2:0:ffff::1), with an IPv6 population.
    #[serde(default)]
    pub scan_ip6: Option<Ipv6Addr>,
    /// The IPv6 gateway (2001:2:0:ffff::fe, on nx0), with an IPv6 population.
    #[serde(default)]
    pub gateway_ip6: Option<Ipv6Addr>,
    /// The DNS server's pid, when the lab runs one (`dns`).
    #[serde(default)]
    pub dns_pid: Option<u32>,
    /// Whether nginx serves ports 80 and 443 (`http`); they are in `tcp_open` then.
    #[serde(default)]
    pub http: bool,
    /// The nginx master's pid, with `http`.
    #[serde(default)]
    pub nginx_pid: Option<u32>,
    /// Connections nginx can hold at once (its workers' connection slots; the open-file limit
    /// bounds them where `up` cannot raise it), with `http`.
    #[serde(default)]
    pub nginx_connections: Option<u64>,
    /// SHA-256 of the DER certificate nginx presents on 443 (lowercase hex), with `http`.
    #[serde(default)]
    pub tls_cert_sha256: Option<String>,
    /// The PEM certificate of the lab's CA, which signs every TLS server's certificate (nginx's
    /// with `http`, the services'): what `grab --root-cas` takes to validate them.
    #[serde(default)]
    pub tls_ca: Option<String>,
    /// The certificate's PEM file, with `http`.
    #[serde(default)]
    pub tls_cert: Option<String>,
    /// The path of the large body (`/big`), its length and SHA-256, with `http`.
    #[serde(default)]
    pub big_path: Option<String>,
    #[serde(default)]
    pub big_len: Option<u64>,
    #[serde(default)]
    pub big_sha256: Option<String>,
    /// Share of the responsive addresses that accept on the open ports and never send.
    #[serde(default)]
    pub silent_share: f64,
    /// How many addresses are silent (IPv4 and IPv6 populations together).
    #[serde(default)]
    pub silent_count: u64,
    /// The silent server's pid, when some address is silent.
    #[serde(default)]
    pub silent_pid: Option<u32>,
    /// Who answers: "kernel" or "xdp" (`Responder`).
    #[serde(default = "kernel_responder")]
    pub responder: String,
    /// With the XDP responder: how it is attached to nx0 ("xdpgeneric" or "xdpdrv").
    #[serde(default)]
    pub responder_mode: Option<String>,
    /// The CPUs the lab's side runs on (`LabConfig::target_cpus`), ascending.
    #[serde(default)]
    pub target_cpus: Option<Vec<usize>>,
    /// The services `up` started (`LabConfig::services`), with what each shows.
    #[serde(default)]
    pub services: Vec<ServiceStatus>,
    /// The path between the scanner and the lab (`LabConfig::path`), if the lab has one.
    #[serde(default)]
    pub path: Option<PathStatus>,
    /// The DNS tree (`LabConfig::dns_tree`), if the lab has one.
    #[serde(default)]
    pub dns_tree: Option<DnsTreeStatus>,
}

fn kernel_responder() -> String {
    Responder::Kernel.to_string()
}

/// Checks a lab name: 1 to 20 of `a-z`, `0-9` and `-`, not starting with `-`.
pub fn validate_name(name: &str) -> Result<()> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if name.is_empty() || name.len() > MAX_NAME || !ok_chars || name.starts_with('-') {
        bail!(
            "bad lab name {name:?}: use 1 to {MAX_NAME} characters of a-z, 0-9 and '-', not starting with '-'"
        );
    }
    Ok(())
}

/// Checks everything in a config before anything is created.
pub(crate) fn validate(cfg: &LabConfig) -> Result<()> {
    validate_name(&cfg.name)?;
    if !LAB_SPACE.contains(&cfg.population) {
        bail!(
            "population {} is outside {LAB_SPACE}: the lab only uses benchmarking addresses (e.g. 198.18.0.0/16)",
            cfg.population
        );
    }
    if let Some(p6) = cfg.population6 {
        validate_population6(p6)?;
    }
    if !(0.0..=1.0).contains(&cfg.responsive) {
        bail!("responsive share {} is not between 0 and 1", cfg.responsive);
    }
    if !(0.0..1.0).contains(&cfg.loss) {
        bail!("loss {} is not in [0, 1)", cfg.loss);
    }
    if !(0.0..=1.0).contains(&cfg.silent_share) {
        bail!("silent share {} is not between 0 and 1", cfg.silent_share);
    }
    if cfg.silent_share > 0.0 && cfg.open_ports().contains(&SILENT_PORT) {
        bail!("TCP port {SILENT_PORT} is the silent server's own port; it cannot be an open port with a silent share");
    }
    if cfg.dns && cfg.open_ports().contains(&DNS_PORT) {
        bail!("TCP port {DNS_PORT} is the DNS server's with --dns; leave it out of the open ports");
    }
    if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
        bail!("queues {} is not between 1 and {MAX_QUEUES}", cfg.queues);
    }
    if cfg.tcp_open.contains(&0) {
        bail!("TCP port 0 cannot be opened; use ports 1 to 65535");
    }
    if cfg.responder == Responder::Xdp {
        validate_xdp_responder(cfg)?;
    }
    if let Some(cpus) = &cfg.target_cpus {
        check_target_cpus(cpus, &online_cpus()?)?;
    }
    if let Some(path) = &cfg.path {
        path.validate()?;
    }
    if let Some(tree) = &cfg.dns_tree {
        tree.validate()?;
        if cfg.sink == Sink::Drop {
            bail!("--sink drop drops every frame to the lab, the DNS tree's too; use --sink kernel with --dns-tree");
        }
        if cfg.dns {
            bail!("--dns runs unbound on port 53 of every address of the lab, which the DNS tree's servers need for their own; use --dns-tree alone (its resolvers are 198.19.53.64-79)");
        }
    }
    if let Some(p) = cfg
        .tcp_open
        .iter()
        .enumerate()
        .find_map(|(i, p)| cfg.tcp_open[..i].contains(p).then_some(p))
    {
        bail!("TCP port {p} is given twice in the open ports");
    }
    Ok(())
}

/// What the XDP responder cannot do: it answers before nftables and the servers would see a
/// probe, so random loss and the silent hosts would not apply; and nx0 has one XDP program, so
/// not the drop sink as well. With `--http` it serves plain HTTP on port 80 itself; TLS on 443
/// (and nginx's `/big`) stay with nginx.
fn validate_xdp_responder(cfg: &LabConfig) -> Result<()> {
    if cfg.http && cfg.tcp_open.contains(&HTTPS_PORT) {
        bail!("--responder xdp --http serves plain HTTP on port 80 only: TLS on port {HTTPS_PORT} (and /big) stay with nginx; leave {HTTPS_PORT} out of --tcp-open, or use --responder kernel");
    }
    if let Some(s) = cfg.services.first() {
        bail!("--responder xdp answers the open ports' handshakes itself, so the {s} server would never see a connection; use --responder kernel with --services");
    }
    let clash = if cfg.loss > 0.0 {
        "--loss"
    } else if cfg.silent_share > 0.0 {
        "--silent-share"
    } else if cfg.sink == Sink::Drop {
        "--sink drop"
    } else {
        return Ok(());
    };
    bail!("--responder xdp answers probes before the lab's kernel sees them, so {clash} would not apply; use --responder kernel with {clash}")
}

/// Checks an IPv6 population: inside 2001:2::/48, at most 262,144 addresses,
/// and clear of the link prefix.
pub(crate) fn validate_population6(p: Ipv6Net) -> Result<()> {
    if !LAB_SPACE6.contains(&p) {
        bail!(
            "IPv6 population {p} is outside {LAB_SPACE6}: the lab only uses benchmarking addresses (e.g. 2001:2::/112)"
        );
    }
    if p.prefix_len() < MIN_PREFIX6 {
        bail!(
            "IPv6 population {p} is too wide: use /{MIN_PREFIX6} or longer (at most 262,144 addresses)"
        );
    }
    if LINK_NET6.contains(&p) {
        bail!("IPv6 population {p} overlaps the lab's link {LINK_NET6}; pick another prefix");
    }
    Ok(())
}

/// The CPUs a scanner in lab `status` should run its senders on: every online CPU but the lab's
/// target CPUs; every online CPU when the lab has none (or would leave none). If the online CPUs
/// cannot be read, CPUs 0..available_parallelism stand in for them.
pub fn sender_cpus(status: &LabStatus) -> Vec<usize> {
    let online = online_cpus().unwrap_or_else(|_| {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        (0..n).collect()
    });
    let targets = status.target_cpus.as_deref().unwrap_or(&[]);
    let rest: Vec<usize> = online
        .iter()
        .copied()
        .filter(|c| !targets.contains(c))
        .collect();
    if rest.is_empty() {
        online
    } else {
        rest
    }
}

// ---- the services `--services` names, and what `up` records of each (services.rs starts them)

/// One of the servers `--services` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LabService {
    Ssh,
    Smtp,
    Imap,
    Pop3,
    Ftp,
    Tls13,
    Tls10,
}

impl LabService {
    pub const ALL: [LabService; 7] = [
        LabService::Ssh,
        LabService::Smtp,
        LabService::Imap,
        LabService::Pop3,
        LabService::Ftp,
        LabService::Tls13,
        LabService::Tls10,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LabService::Ssh => "ssh",
            LabService::Smtp => "smtp",
            LabService::Imap => "imap",
            LabService::Pop3 => "pop3",
            LabService::Ftp => "ftp",
            LabService::Tls13 => "tls13",
            LabService::Tls10 => "tls10",
        }
    }

    /// The TCP port it listens on.
    pub fn port(self) -> u16 {
        match self {
            LabService::Ssh => 22,
            LabService::Smtp => 25,
            LabService::Imap => 143,
            LabService::Pop3 => 110,
            LabService::Ftp => 21,
            LabService::Tls13 => 8443,
            LabService::Tls10 => 9443,
        }
    }

    /// The grab field of a protocol module that holds its greeting line (e.g. `ssh_banner`).
    pub(crate) fn banner_field(self) -> Option<&'static str> {
        match self {
            LabService::Ssh => Some("ssh_banner"),
            LabService::Smtp => Some("smtp_banner"),
            LabService::Imap => Some("imap_banner"),
            LabService::Pop3 => Some("pop3_banner"),
            LabService::Ftp => Some("ftp_banner"),
            LabService::Tls13 | LabService::Tls10 => None,
        }
    }
}

impl fmt::Display for LabService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LabService {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        LabService::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                anyhow!("unknown service {s:?} (use ssh, smtp, imap, pop3, ftp, tls13 or tls10)")
            })
    }
}

/// `ssh,smtp,…` as services, in the order given; an unknown or repeated name is refused.
pub fn parse_services(list: &str) -> Result<Vec<LabService>> {
    let mut services = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let service: LabService = name.parse()?;
        if services.contains(&service) {
            bail!("service {name:?} is given twice");
        }
        services.push(service);
    }
    Ok(services)
}

/// Stands for the address a client connected to, in a recorded banner.
pub const ADDR_PLACEHOLDER: &str = "{addr}";

/// What `up` records of one running service, in the lab's state (`LabStatus::services`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ServiceStatus {
    pub service: LabService,
    pub port: u16,
    /// The pid of the server that serves it (dovecot serves imap and pop3, one nginx tls13 and
    /// tls10).
    pub pid: u32,
    /// What the server sends first, as it sent it to `up`'s probe, `{addr}` standing for the
    /// address connected to (smtp); None where the client speaks first (TLS).
    #[serde(default)]
    pub banner: Option<String>,
    /// SHA-256 (lowercase hex) of the DER certificate it shows: in the handshake (tls13,
    /// tls10), after STARTTLS/STLS (smtp, imap, pop3).
    #[serde(default)]
    pub cert_sha256: Option<String>,
    /// The certificate's PEM file.
    #[serde(default)]
    pub cert: Option<String>,
    /// SSH: SHA-256 (lowercase hex) of the host key's public key blob (what `ssh-keygen -l`
    /// shows in base64 after `SHA256:`).
    #[serde(default)]
    pub host_key_sha256: Option<String>,
    /// The TLS version and cipher (IANA name) every handshake ends with (tls13, tls10).
    #[serde(default)]
    pub tls_version: Option<String>,
    #[serde(default)]
    pub tls_cipher: Option<String>,
}

/// Every grab field the truth may expect of a service; the scorer reads these columns.
pub const EXPECT_FIELDS: &[&str] = &[
    "banner",
    "ssh_banner",
    "smtp_banner",
    "imap_banner",
    "pop3_banner",
    "ftp_banner",
    "ssh_host_key_sha256",
    "tls_cert_sha256",
    "tls_version",
    "tls_cipher",
];

impl ServiceStatus {
    /// The grab fields (name, expected value) this service shows to a client of `addr`:
    /// - `banner`: the greeting exactly, line end included (the `banner` module);
    /// - `ssh_banner`, `smtp_banner`, `imap_banner`, `pop3_banner`, `ftp_banner`: the same line (a protocol
    ///   module's; compared without its line end, see [`field_matches`]);
    /// - `ssh_host_key_sha256`, `tls_cert_sha256`, `tls_version`, `tls_cipher`.
    pub fn fields(&self, addr: std::net::IpAddr) -> Vec<(&'static str, String)> {
        let mut fields = Vec::new();
        if let Some(banner) = &self.banner {
            let line = banner.replace(ADDR_PLACEHOLDER, &addr.to_string());
            if let Some(name) = self.service.banner_field() {
                fields.push((name, trim_line_end(&line).to_string()));
            }
            fields.push(("banner", line));
        }
        let optional = [
            ("ssh_host_key_sha256", &self.host_key_sha256),
            ("tls_cert_sha256", &self.cert_sha256),
            ("tls_version", &self.tls_version),
            ("tls_cipher", &self.tls_cipher),
        ];
        for (name, value) in optional {
            if let Some(v) = value {
                fields.push((name, v.clone()));
            }
        }
        fields
    }
}

/// Whether a grab's value `got` of field `name` is the expected `want`: hashes compare without
/// regard to case, a protocol module's `*_banner` without a trailing line end, the rest exactly.
pub fn field_matches(name: &str, want: &str, got: &str) -> bool {
    if name.ends_with("_sha256") {
        want.eq_ignore_ascii_case(got)
    } else if name.ends_with("_banner") {
        trim_line_end(want) == trim_line_end(got)
    } else {
        want == got
    }
}

fn trim_line_end(line: &str) -> &str {
    line.trim_end_matches(['\r', '\n'])
}

impl ServiceStatus {
    /// A service about to start: its port, nothing yet known of what it shows.
    pub(crate) fn planned(service: LabService) -> ServiceStatus {
        ServiceStatus::started(service, 0)
    }

    /// A service started as `pid`: its port, nothing yet known of what it shows.
    pub(crate) fn started(service: LabService, pid: u32) -> ServiceStatus {
        ServiceStatus {
            service,
            port: service.port(),
            pid,
            banner: None,
            cert_sha256: None,
            cert: None,
            host_key_sha256: None,
            tls_version: None,
            tls_cipher: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["lab", "a", "x-1", "0", "abcdefghij0123456789"] {
            validate_name(good).unwrap();
        }
        for bad in [
            "",
            "Lab",
            "a_b",
            "a.b",
            "-x",
            "a b",
            "abcdefghij0123456789x",
            "é",
        ] {
            let e = validate_name(bad).unwrap_err().to_string();
            assert!(e.contains("bad lab name"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn population_must_be_lab_space() {
        let mut cfg = LabConfig::default();
        validate(&cfg).unwrap();
        cfg.population = "198.18.0.0/15".parse().unwrap();
        validate(&cfg).unwrap();
        for bad in ["10.0.0.0/8", "198.16.0.0/14", "198.20.0.0/16", "0.0.0.0/0"] {
            cfg.population = bad.parse().unwrap();
            let e = validate(&cfg).unwrap_err().to_string();
            assert!(e.contains("outside 198.18.0.0/15"), "{e}");
        }
    }

    #[test]
    fn ipv6_link_is_lab_space() {
        assert!(LAB_SPACE6.contains(&LINK_NET6));
        assert!(LINK_NET6.contains(&SCAN_IP6) && LINK_NET6.contains(&GATEWAY_IP6));
    }

    #[test]
    fn population6_must_be_lab_space_and_narrow() {
        let mut cfg = LabConfig::default();
        assert_eq!(cfg.population6, None);
        for good in [
            "2001:2::/112",
            "2001:2::/120",
            "2001:2:0:1234::ff00/120",
            "2001:2::1/128",
        ] {
            cfg.population6 = Some(good.parse().unwrap());
            validate(&cfg).unwrap();
        }
        for (bad, why) in [
            ("2001:3::/112", "outside 2001:2::/48"),
            ("2001:db8::/120", "outside 2001:2::/48"),
            ("2001:2::/47", "outside 2001:2::/48"),
            ("2001:2:ffff::/112", "outside 2001:2::/48"),
            ("::/0", "outside 2001:2::/48"),
            ("2001:2::/48", "too wide"),
            ("2001:2::/109", "too wide"),
            ("2001:2:0:ffff::/112", "overlaps the lab's link"),
            ("2001:2:0:ffff::1/128", "overlaps the lab's link"),
        ] {
            cfg.population6 = Some(bad.parse().unwrap());
            let e = validate(&cfg).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn ranges() {
        let base = LabConfig::default();
        assert!(validate(&LabConfig {
            responsive: 1.5,
            ..base.clone()
        })
        .is_err());
        assert!(validate(&LabConfig {
            loss: 1.0,
            ..base.clone()
        })
        .is_err());
        assert!(validate(&LabConfig {
            queues: 0,
            ..base.clone()
        })
        .is_err());
        assert!(validate(&LabConfig {
            tcp_open: vec![0],
            ..base.clone()
        })
        .is_err());
        assert!(validate(&LabConfig {
            responsive: f64::NAN,
            ..base
        })
        .is_err());
    }

    #[test]
    fn old_status_files_still_load() {
        let old = r#"{"name":"lab","scan_ns":"sonde-lab-scan","net_ns":"sonde-lab-net",
            "scan_if":"sx0","net_if":"nx0","scan_ip":"198.19.255.1","scan_mac":"02:00:c6:13:ff:01",
            "gateway_ip":"198.19.255.254","gateway_mac":"02:00:c6:13:ff:fe",
            "population":"198.18.0.0/16","responsive":0.1,"responsive_count":6553,
            "tcp_open":[80],"seed":1,"queues":2,"sink":"kernel","loss":0.0,"server_pid":null}"#;
        let st: LabStatus = serde_json::from_str(old).unwrap();
        assert_eq!(
            (&st.population6, st.scan_ip6, st.gateway_ip6, &st.xdp_mode),
            (&None, None, None, &None)
        );
        let new = LabStatus {
            population6: Some("2001:2::/120".into()),
            scan_ip6: Some(SCAN_IP6),
            gateway_ip6: Some(GATEWAY_IP6),
            ..st
        };
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.contains(r#""scan_ip6":"2001:2:0:ffff::1""#), "{text}");
        assert_eq!(serde_json::from_str::<LabStatus>(&text).unwrap(), new);
    }

    #[test]
    fn sink_parse() {
        assert_eq!("kernel".parse::<Sink>().unwrap(), Sink::Kernel);
        assert_eq!("drop".parse::<Sink>().unwrap(), Sink::Drop);
        assert!("xdp".parse::<Sink>().is_err());
        assert_eq!(Sink::Drop.to_string(), "drop");
    }

    #[test]
    fn services_open_their_ports_and_need_the_kernel_responder() {
        let cfg = LabConfig {
            tcp_open: vec![22, 7],
            services: vec![LabService::Ssh, LabService::Tls10, LabService::Pop3],
            ..LabConfig::default()
        };
        assert_eq!(cfg.open_ports(), [7, 22, 110, 9443]);
        // sshd serves 22 even when --tcp-open names it; the small server keeps 7.
        assert_eq!(cfg.served_ports(), [7]);
        validate(&cfg).unwrap();
        let e = validate(&LabConfig {
            responder: Responder::Xdp,
            ..cfg
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--responder kernel with --services"), "{e}");
    }

    #[test]
    fn http_opens_80_and_443_and_the_small_server_keeps_the_rest() {
        let cfg = LabConfig {
            tcp_open: vec![8080, 80, 22],
            ..LabConfig::default()
        };
        assert_eq!(cfg.open_ports(), [22, 80, 8080]);
        assert_eq!(cfg.served_ports(), [22, 80, 8080]);
        let http = LabConfig { http: true, ..cfg };
        assert_eq!(http.open_ports(), [22, 80, 443, 8080]);
        assert_eq!(http.served_ports(), [22, 8080]);
        let only = LabConfig {
            tcp_open: vec![],
            http: true,
            ..LabConfig::default()
        };
        assert_eq!(only.open_ports(), [80, 443]);
        assert!(only.served_ports().is_empty());
    }

    #[test]
    fn silent_share_and_port_clashes_are_checked() {
        let base = LabConfig::default();
        for bad in [-0.1, 1.1, f64::NAN] {
            let e = validate(&LabConfig {
                silent_share: bad,
                ..base.clone()
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains("silent share"), "{e}");
        }
        validate(&LabConfig {
            silent_share: 1.0,
            ..base.clone()
        })
        .unwrap();
        let e = validate(&LabConfig {
            silent_share: 0.1,
            tcp_open: vec![SILENT_PORT],
            ..base.clone()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("silent server's own port"), "{e}");
        let e = validate(&LabConfig {
            dns: true,
            tcp_open: vec![53],
            ..base
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("DNS server's"), "{e}");
    }

    #[test]
    fn the_dns_tree_needs_the_kernel_sink_and_port_53_to_itself() {
        let tree = LabConfig {
            dns_tree: Some(DnsTreeConfig {
                zones: 10,
                hosts: 1,
                slow_ms: 300,
                answerer: false,
                servers: true,
            }),
            ..LabConfig::default()
        };
        validate(&tree).unwrap();
        for (bad, why) in [
            (
                LabConfig {
                    sink: Sink::Drop,
                    ..tree.clone()
                },
                "--sink kernel with --dns-tree",
            ),
            (
                LabConfig {
                    dns: true,
                    ..tree.clone()
                },
                "use --dns-tree alone",
            ),
        ] {
            let e = validate(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn the_xdp_web_server_opens_80_only_and_refuses_443() {
        let base = LabConfig {
            responder: Responder::Xdp,
            http: true,
            tcp_open: vec![22],
            ..LabConfig::default()
        };
        validate(&base).unwrap();
        assert!(base.xdp_http());
        assert_eq!(base.open_ports(), [22, 80]);
        assert_eq!(base.served_ports(), [22]);
        for tcp_open in [vec![80, 443], vec![443]] {
            let e = validate(&LabConfig {
                tcp_open,
                ..base.clone()
            })
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("TLS on port 443") && e.contains("--tcp-open"),
                "{e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        // 443 is only a banner port without --http, and nginx's with the kernel responder.
        validate(&LabConfig {
            http: false,
            tcp_open: vec![80, 443],
            ..base.clone()
        })
        .unwrap();
        let kernel = LabConfig {
            responder: Responder::Kernel,
            ..base.clone()
        };
        assert!(!kernel.xdp_http());
        assert_eq!(kernel.open_ports(), [22, 80, 443]);
        for (clash, cfg) in [
            (
                "--loss",
                LabConfig {
                    loss: 0.1,
                    ..base.clone()
                },
            ),
            (
                "--silent-share",
                LabConfig {
                    silent_share: 0.1,
                    ..base.clone()
                },
            ),
        ] {
            let e = validate(&cfg).unwrap_err().to_string();
            assert!(e.contains(clash), "{e}");
        }
    }

    #[test]
    fn http_status_fields_round_trip() {
        let old = r#"{"name":"lab","scan_ns":"a","net_ns":"b","scan_if":"sx0","net_if":"nx0",
            "scan_ip":"198.19.255.1","scan_mac":"m","gateway_ip":"198.19.255.254","gateway_mac":"g",
            "population":"198.18.0.0/16","responsive":0.1,"responsive_count":1,"tcp_open":[80],
            "seed":1,"queues":2,"sink":"kernel","loss":0.0,"server_pid":null}"#;
        let st: LabStatus = serde_json::from_str(old).unwrap();
        assert!(!st.http && st.nginx_pid.is_none() && st.silent_share == 0.0);
        let new = LabStatus {
            http: true,
            nginx_pid: Some(7),
            nginx_connections: Some(262_144),
            tls_cert_sha256: Some("ab".repeat(32)),
            tls_cert: Some("/run/sonde/lab/lab-http/cert.pem".into()),
            big_path: Some("/big".into()),
            big_len: Some(1 << 20),
            big_sha256: Some("cd".repeat(32)),
            silent_share: 0.1,
            silent_count: 5,
            silent_pid: Some(8),
            ..st
        };
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.contains(r#""http":true"#) && text.contains(r#""big_len":1048576"#));
        assert_eq!(serde_json::from_str::<LabStatus>(&text).unwrap(), new);
    }
}
