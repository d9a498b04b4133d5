//! The bridge lab: two hosts joined through a middle namespace, A — mid — B, where
//! `sonde intercept` is tested and measured.
//!
//! ```text
//!  sonde-N-a            sonde-N-mid                 sonde-N-b
//!  ax0 198.19.254.1 ─── ma ─┐            ┌─ mb ─── bx0 198.19.254.2
//!      2001:2:0:fe::1       └─ mbr (bridge)┘          2001:2:0:fe::2   iperf3 -s on 5201-5204
//! ```
//!
//! mid has no address and no route: its Linux bridge `mbr` forwards between `ma` and `mb`, which
//! is the "kernel forwarding in the middle" to compare with (and what carries A's traffic to B
//! when sonde is not running). A and B share one /24 and one /64 inside the lab's benchmarking
//! space and have no route beyond them. Like the rest of the lab, everything is made by `ip` and
//! `ethtool` commands that can be read here and repeated by hand; what `up` made is recorded in
//! `/run/sonde/lab/bridges/N/bridge.json`, beside the iperf3 servers' pid and log files.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use crate::cmd::{in_ns, ip_line, run};
use crate::config::validate_name;
use crate::cpus::{check_target_cpus, cpu_list, online_cpus};
pub use crate::netns::{a_ns, b_ns, bridge_exists as exists, mid_ns};
use crate::netns::{all_ns, net_ns, ns_exists, scan_ns};
use crate::path::{PathConfig, PathStatus};
use crate::state::Started;
use crate::{path, server, state};

/// Host A's addresses (on `ax0`).
pub const A_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 1);
pub const A_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xfe, 0, 0, 0, 1);
/// Host B's addresses (on `bx0`), where the iperf3 servers listen.
pub const B_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 2);
pub const B_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xfe, 0, 0, 0, 2);
/// Prefix lengths of the shared link: 198.19.254.0/24 and 2001:2:0:fe::/64.
pub const PREFIX_V4: u8 = 24;
pub const PREFIX_V6: u8 = 64;
/// Fixed, locally administered MACs of A and B (02:00 + the IPv4 address), so frames in
/// captures are recognisable.
pub const A_MAC: &str = "02:00:c6:13:fe:01";
pub const B_MAC: &str = "02:00:c6:13:fe:02";
/// Interfaces: `ax0` in A, its peer `ma` in mid; `bx0` in B, its peer `mb` in mid; and the
/// bridge `mbr` in mid with `ma` and `mb` as its ports.
pub const A_IF: &str = "ax0";
pub const MID_A_IF: &str = "ma";
pub const MID_B_IF: &str = "mb";
pub const B_IF: &str = "bx0";
pub const MID_BRIDGE: &str = "mbr";
/// The ports of the four iperf3 servers on B (one test at a time each, so four for four
/// concurrent clients).
pub const IPERF_PORTS: [u16; 4] = [5201, 5202, 5203, 5204];

/// Most queues a bridge lab's veth ends get.
const MAX_BRIDGE_QUEUES: u32 = 64;

fn one_queue() -> u32 {
    1
}

/// What to bring up.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct BridgeConfig {
    pub name: String,
    /// CPUs the iperf3 servers on B run on (under `taskset`); None: anywhere.
    pub target_cpus: Option<Vec<usize>>,
    /// Receive and transmit queues of every veth end, 1 to 64.
    pub queues: u32,
    /// A path between A and mid (see path/mod.rs), and the command of its delay line.
    pub path: Option<PathConfig>,
    pub path_cmd: Vec<String>,
}

/// A bridge lab that is up, as recorded in `/run/sonde/lab/bridges/<name>/bridge.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BridgeStatus {
    pub name: String,
    /// Always "bridge": which kind of lab this is.
    pub shape: String,
    pub a_ns: String,
    pub mid_ns: String,
    pub b_ns: String,
    pub a_if: String,
    pub mid_a_if: String,
    pub mid_b_if: String,
    pub mid_bridge: String,
    pub b_if: String,
    pub a_ip: Ipv4Addr,
    pub a_ip6: Ipv6Addr,
    pub b_ip: Ipv4Addr,
    pub b_ip6: Ipv6Addr,
    pub a_mac: String,
    pub b_mac: String,
    pub iperf_ports: Vec<u16>,
    /// The iperf3 servers' pids, in the order of `iperf_ports` (empty while `up` is under way).
    pub iperf_pids: Vec<u32>,
    pub target_cpus: Option<Vec<usize>>,
    /// Receive and transmit queues of every veth end.
    #[serde(default = "one_queue")]
    pub queues: u32,
    /// The processes `up` started, so `down` can stop each even if B's namespace lost its name.
    #[serde(default)]
    pub(crate) started: Vec<Started>,
    /// The path between A and mid, if the lab has one (ax0 — ps … pn — ma).
    #[serde(default)]
    pub path: Option<PathStatus>,
}

impl BridgeStatus {
    fn new(cfg: &BridgeConfig) -> BridgeStatus {
        BridgeStatus {
            name: cfg.name.clone(),
            shape: "bridge".into(),
            a_ns: a_ns(&cfg.name),
            mid_ns: mid_ns(&cfg.name),
            b_ns: b_ns(&cfg.name),
            a_if: A_IF.into(),
            mid_a_if: MID_A_IF.into(),
            mid_b_if: MID_B_IF.into(),
            mid_bridge: MID_BRIDGE.into(),
            b_if: B_IF.into(),
            a_ip: A_V4,
            a_ip6: A_V6,
            b_ip: B_V4,
            b_ip6: B_V6,
            a_mac: A_MAC.into(),
            b_mac: B_MAC.into(),
            iperf_ports: IPERF_PORTS.to_vec(),
            iperf_pids: Vec::new(),
            target_cpus: cfg.target_cpus.clone(),
            queues: cfg.queues,
            started: Vec::new(),
            path: None,
        }
    }
}

/// Sysctls of A and B, set before their interfaces exist so these get the defaults: no
/// forwarding (the safety rule), and no IPv6 link-local address, so no DAD, router
/// solicitation or MLD for it: the wire carries the hosts' traffic and their ARP/ND only.
const HOST_SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward=0",
    "net.ipv6.conf.all.forwarding=0",
    "net.ipv6.conf.default.addr_gen_mode=1",
    "net.ipv6.conf.default.accept_dad=0",
    "net.ipv6.conf.default.router_solicitations=0",
    "net.ipv6.conf.default.accept_ra=0",
];

/// Sysctls of mid: no IP forwarding and no IPv6 at all on its interfaces. mid has no address,
/// so its kernel never sends anything of its own; the bridge forwards at layer 2 regardless.
const MID_SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward=0",
    "net.ipv6.conf.all.forwarding=0",
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
];

/// How long `up` waits for an iperf3 server to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// Creates bridge lab `cfg.name` and starts the iperf3 servers on B. On any failure everything
/// made so far is removed again.
pub fn up(cfg: &BridgeConfig) -> Result<BridgeStatus> {
    let name = &cfg.name;
    validate_name(name)?;
    if exists(name)
        || ns_exists(&scan_ns(name))
        || ns_exists(&net_ns(name))
        || state::exists(name)
        || path::exists(name)
    {
        bail!("lab {name:?} already exists (remove it with: sonde lab down --name {name})");
    }
    if let Some(cpus) = &cfg.target_cpus {
        check_target_cpus(cpus, &online_cpus()?)?;
    }
    if let Some(p) = &cfg.path {
        p.validate()?;
        if cfg.path_cmd.is_empty() {
            bail!("lab {name:?} has a path but no command to run its delay line");
        }
    }
    if !(1..=MAX_BRIDGE_QUEUES).contains(&cfg.queues) {
        bail!(
            "--queues {} for a bridge lab: choose 1 to {MAX_BRIDGE_QUEUES}",
            cfg.queues
        );
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("bringing up a lab needs root (network namespaces); run as root");
    }
    require_iperf3()?;
    build(cfg).map_err(|e| {
        let cleanup = match teardown(name) {
            Ok(()) => "everything made so far was removed".to_string(),
            Err(t) => format!("cleaning up failed too: {t}"),
        };
        anyhow!("cannot bring up bridge lab {name:?}: {e} ({cleanup})")
    })
}

/// The status of bridge lab `name` as `up` recorded it, after checking it is whole.
pub fn status(name: &str) -> Result<BridgeStatus> {
    validate_name(name)?;
    if !exists(name) {
        bail!("lab {name:?} is not up (start it with: sonde lab up --name {name} --bridge)");
    }
    let whole = all_ns(name).iter().all(|ns| ns_exists(ns));
    let path_whole = |st: &BridgeStatus| st.path.is_none() || ns_exists(&path::path_ns(name));
    match load(name)? {
        Some(st) if whole && path_whole(&st) && !st.iperf_pids.is_empty() => Ok(st),
        _ => {
            bail!("bridge lab {name:?} is half-made; remove it with: sonde lab down --name {name}")
        }
    }
}

/// Stops the iperf3 servers and everything else running in the three namespaces, deletes the
/// namespaces (which takes the veth pairs and the bridge with them) and the state folder.
/// Best effort: keeps going past failures and reports the first. Works on a half-made lab.
pub(crate) fn teardown(name: &str) -> Result<()> {
    let mut first_error = None;
    let mut note = |r: Result<()>| {
        if let Err(e) = r {
            first_error.get_or_insert(e);
        }
    };
    if let Ok(Some(st)) = load(name) {
        for started in &st.started {
            server::stop_if_same(started);
        }
    }
    for ns in all_ns(name) {
        if ns_exists(&ns) {
            note(server::stop_all(&ns));
        }
    }
    note(path::teardown(name));
    for ns in all_ns(name) {
        if ns_exists(&ns) {
            note(ip_line(&format!("netns del {ns}")).map(drop));
        }
    }
    note(state::remove_bridge_dir(name));
    first_error.map_or(Ok(()), Err)
}

fn build(cfg: &BridgeConfig) -> Result<BridgeStatus> {
    let name = &cfg.name;
    let (a, mid, b) = (a_ns(name), mid_ns(name), b_ns(name));
    let mut st = BridgeStatus::new(cfg);
    // Recorded first, so `list` and `down` know the shape of a lab that fails half-way.
    save(&st)?;
    for (ns, sysctls) in [(&a, HOST_SYSCTLS), (&mid, MID_SYSCTLS), (&b, HOST_SYSCTLS)] {
        ip_line(&format!("netns add {ns}"))?;
        sysctl(ns, sysctls)?;
        ip_line(&format!("-n {ns} link set dev lo up"))?;
    }
    // Each veth pair is created with its ends directly in their namespaces: nothing of the
    // lab ever exists in the root namespace.
    let q = st.queues;
    let queues = format!("numtxqueues {q} numrxqueues {q}");
    if cfg.path.is_some() {
        let a_end = path::End {
            ns: &a,
            ifname: A_IF,
            mac: Some(A_MAC),
        };
        let mid_end = path::End {
            ns: &mid,
            ifname: MID_A_IF,
            mac: None,
        };
        path::make_links(name, q, &a_end, &mid_end)?;
    } else {
        ip_line(&format!(
            "link add {A_IF} netns {a} address {A_MAC} {queues} type veth peer name {MID_A_IF} netns {mid} {queues}"
        ))?;
    }
    ip_line(&format!(
        "link add {B_IF} netns {b} address {B_MAC} {queues} type veth peer name {MID_B_IF} netns {mid} {queues}"
    ))?;
    make_bridge(&mid)?;
    address_host(&a, A_IF, A_V4, A_V6)?;
    address_host(&b, B_IF, B_V4, B_V6)?;
    wire_offloads_off(&a, &mid, &b)?;
    for ns in [&a, &b] {
        let ifname = if ns == &a { A_IF } else { B_IF };
        ip_line(&format!("-n {ns} link set dev {ifname} up"))?;
    }
    let cpus = cfg.target_cpus.as_deref();
    if let Some(p) = &cfg.path {
        // A bridge lab has no seed of its own; its path draws from seed 1.
        let started = path::start(name, p, 1, &cfg.path_cmd, cpus, q)?;
        st.started.push(path::started(&started));
        st.path = Some(started);
        save(&st)?;
    }
    for port in IPERF_PORTS {
        let pid = start_iperf3(name, &b, port, cpus)?;
        st.iperf_pids.push(pid);
        st.started
            .extend(server::started(pid, &format!("iperf3 -s -p {port}")));
    }
    save(&st)?;
    Ok(st)
}

/// The bridge `mbr` in mid with `ma` and `mb` as ports, all up. No STP and no forwarding delay
/// (a port forwards as soon as it is up), and no multicast snooping, so the bridge floods
/// multicast (IPv6 neighbour discovery) like a plain wire instead of learning groups.
fn make_bridge(mid: &str) -> Result<()> {
    ip_line(&format!(
        "-n {mid} link add {MID_BRIDGE} type bridge stp_state 0 forward_delay 0 mcast_snooping 0"
    ))?;
    for port in [MID_A_IF, MID_B_IF] {
        ip_line(&format!("-n {mid} link set dev {port} master {MID_BRIDGE}"))?;
        ip_line(&format!("-n {mid} link set dev {port} up"))?;
    }
    ip_line(&format!("-n {mid} link set dev {MID_BRIDGE} up"))?;
    Ok(())
}

/// A host's IPv4 and IPv6 address on its interface: connected routes only (no default route
/// anywhere), the IPv6 one `nodad` so it works at once.
fn address_host(ns: &str, ifname: &str, v4: Ipv4Addr, v6: Ipv6Addr) -> Result<()> {
    let conf = format!("net.ipv6.conf.{ifname}");
    sysctl(
        ns,
        &[
            &format!("{conf}.accept_dad=0"),
            &format!("{conf}.router_solicitations=0"),
            &format!("{conf}.accept_ra=0"),
        ],
    )?;
    ip_line(&format!("-n {ns} addr add {v4}/{PREFIX_V4} dev {ifname}"))?;
    ip_line(&format!(
        "-n {ns} -6 addr add {v6}/{PREFIX_V6} dev {ifname} nodad"
    ))?;
    Ok(())
}

/// The hosts' ends send what a physical link carries. veth would otherwise pass 64 KB TSO/GSO
/// super-frames with only a partial (pseudo-header) checksum straight through the bridge; a
/// bump in the wire that reads and writes raw frames in mid (sonde intercept on AF_PACKET)
/// would then see and forward frames no real 1500-byte link carries, with checksums that are
/// not yet complete. So on ax0 and bx0 segmentation (TSO, GSO), GRO and transmit checksum
/// offload are off: every frame leaving a host is MTU-sized with its checksums filled in. GRO is
/// off on ma and mb too, so mid's receive path never merges frames back into one.
fn wire_offloads_off(a: &str, mid: &str, b: &str) -> Result<()> {
    let host_off = ["tso", "off", "gso", "off", "gro", "off", "tx", "off"];
    for (ns, ifname) in [(a, A_IF), (b, B_IF)] {
        let mut args = vec!["-K", ifname];
        args.extend_from_slice(&host_off);
        in_ns(ns, "ethtool", &args)?;
        check_offloads_off(ns, ifname, HOST_OFFLOADS)?;
    }
    for ifname in [MID_A_IF, MID_B_IF] {
        in_ns(mid, "ethtool", &["-K", ifname, "gro", "off"])?;
        check_offloads_off(mid, ifname, &["generic-receive-offload"])?;
    }
    Ok(())
}

/// The features `ethtool -k` must show off on ax0 and bx0 (its names for tso, gso, gro, tx).
pub const HOST_OFFLOADS: &[&str] = &[
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "tx-checksumming",
];

/// Fails unless `ethtool -k` shows each of `features` off on `ifname` (a kernel may refuse
/// to change a fixed feature without ethtool failing).
pub(crate) fn check_offloads_off(ns: &str, ifname: &str, features: &[&str]) -> Result<()> {
    let text = in_ns(ns, "ethtool", &["-k", ifname])?;
    for feature in features {
        let state = offload_state(&text, feature);
        if state != Some("off") {
            bail!(
                "{feature} of {ifname} in {ns} is {} after ethtool -K, not off",
                state.unwrap_or("not shown")
            );
        }
    }
    Ok(())
}

/// The state ("on", "off") of `feature` in `ethtool -k` output ("tx-checksumming: off").
pub fn offload_state<'a>(ethtool_k: &'a str, feature: &str) -> Option<&'a str> {
    ethtool_k.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(':')?;
        (key == feature).then(|| value.split_whitespace().next().unwrap_or(""))
    })
}

/// Fails with one line if iperf3 cannot be run.
fn require_iperf3() -> Result<()> {
    let ran = Command::new("iperf3")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match ran {
        Ok(_) => Ok(()),
        Err(e) => bail!("a bridge lab runs iperf3 servers, but iperf3 cannot be run ({e}); install it with scripts/setup"),
    }
}

/// The pid and log files of the iperf3 server on `port`.
fn iperf3_files(name: &str, port: u16) -> (PathBuf, PathBuf) {
    let dir = state::bridge_dir(name);
    (
        dir.join(format!("iperf3-{port}.pid")),
        dir.join(format!("iperf3-{port}.log")),
    )
}

/// `ip netns exec B [taskset -c CPUS] iperf3 -s -p PORT -D --pidfile … --logfile …`: a daemon
/// listening on every address of B (IPv4 and IPv6, one dual-stack socket). Waits until it
/// listens; returns its pid.
fn start_iperf3(name: &str, b: &str, port: u16, cpus: Option<&[usize]>) -> Result<u32> {
    let (pidfile, logfile) = iperf3_files(name, port);
    let port_arg = port.to_string();
    let mut args = vec!["netns".to_string(), "exec".into(), b.into()];
    if let Some(cpus) = cpus {
        args.extend(["taskset".into(), "-c".into(), cpu_list(cpus)]);
    }
    args.extend([
        "iperf3".into(),
        "-s".into(),
        "-p".into(),
        port_arg,
        "-D".into(),
    ]);
    args.extend(["--pidfile".into(), pidfile.display().to_string()]);
    args.extend(["--logfile".into(), logfile.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // -D: iperf3 forks, its stdio goes to /dev/null and this command returns at once.
    run("ip", &args)?;
    let start = Instant::now();
    loop {
        let pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().trim_end_matches('\0').parse::<u32>().ok());
        if let Some(pid) = pid {
            if server::listening_ports(pid, "tcp6").contains(&port)
                || server::listening_ports(pid, "tcp").contains(&port)
            {
                return Ok(pid);
            }
        }
        if start.elapsed() > READY_TIMEOUT {
            let log = std::fs::read_to_string(&logfile).unwrap_or_default();
            let last = log
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            bail!(
                "the iperf3 server on port {port} did not listen within {READY_TIMEOUT:?} (its log {}: {last:?})",
                logfile.display()
            );
        }
        thread::sleep(POLL);
    }
}

/// `ip netns exec NS sysctl -q -w k=v …`
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let mut args = vec!["-q", "-w"];
    args.extend_from_slice(settings);
    in_ns(ns, "sysctl", &args).map(drop)
}

fn state_file(name: &str) -> PathBuf {
    state::bridge_file(name)
}

/// Writes the status atomically (temporary file, then rename).
fn save(st: &BridgeStatus) -> Result<()> {
    let dir = state::bridge_dir(&st.name);
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let path = state_file(&st.name);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(st)? + "\n";
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// The recorded status of bridge lab `name`, or None if it has no state file.
fn load(name: &str) -> Result<Option<BridgeStatus>> {
    let path = state_file(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("cannot read {}: {e}", path.display())),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        anyhow!(
            "{} is damaged ({e}); remove the lab with: sonde lab down --name {name}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_the_lab_space() {
        let v4: ipnet::Ipv4Net = "198.18.0.0/15".parse().unwrap();
        let v6: ipnet::Ipv6Net = "2001:2::/48".parse().unwrap();
        for a in [A_V4, B_V4] {
            assert!(v4.contains(&a), "{a}");
        }
        for a in [A_V6, B_V6] {
            assert!(v6.contains(&a), "{a}");
        }
        let link = ipnet::Ipv4Net::new(A_V4, PREFIX_V4).unwrap().trunc();
        assert!(link.contains(&B_V4));
        assert_eq!(link.to_string(), "198.19.254.0/24");
        let link6 = ipnet::Ipv6Net::new(A_V6, PREFIX_V6).unwrap().trunc();
        assert!(link6.contains(&B_V6));
        assert_eq!(link6.to_string(), "2001:2:0:fe::/64");
    }

    #[test]
    fn reads_ethtool_features() {
        let text = "Features for ax0:\nrx-checksumming: on\ntx-checksumming: off\n\
                    \ttx-checksum-ip-generic: off\ntcp-segmentation-offload: off\n\
                    generic-receive-offload: on [fixed]\n";
        assert_eq!(offload_state(text, "tx-checksumming"), Some("off"));
        assert_eq!(offload_state(text, "tcp-segmentation-offload"), Some("off"));
        assert_eq!(offload_state(text, "generic-receive-offload"), Some("on"));
        assert_eq!(offload_state(text, "generic-segmentation-offload"), None);
    }

    #[test]
    fn namespace_names() {
        assert_eq!(a_ns("x"), "sonde-x-a");
        assert_eq!(mid_ns("x"), "sonde-x-mid");
        assert_eq!(b_ns("x"), "sonde-x-b");
    }
}
