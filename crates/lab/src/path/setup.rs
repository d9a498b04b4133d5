//! Making a lab's path, starting its delay line, reading its counters and removing it (the
//! types and flags are in mod.rs).

use std::fs;
use std::path::PathBuf;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::{
    path_ns, PathConfig, PathCounters, PathReport, PathSpec, PathStatus, NET_SIDE_IF, SCAN_SIDE_IF,
};
use crate::cmd::{in_ns, ip_line, spawn_error};
use crate::netns::ns_exists;
use crate::state::{Started, STATE_DIR};
use crate::{cpus, server};

/// Their MACs (never seen on the wire: the delay line sends the frames it holds, not its own).
const SCAN_SIDE_MAC: &str = "02:00:c6:13:ff:10";
const NET_SIDE_MAC: &str = "02:00:c6:13:ff:11";

/// The folder of lab `name`'s path (either kind of lab).
pub(crate) fn dir(name: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{name}-path"))
}

/// Whether anything of lab `name`'s path is left: its namespace or folder.
pub(crate) fn exists(name: &str) -> bool {
    ns_exists(&path_ns(name)) || dir(name).exists()
}

/// Sysctls of the path namespace: no forwarding and no IPv6 on its interfaces. It has no
/// address, so its kernel never sends anything of its own.
const PATH_SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward=0",
    "net.ipv6.conf.all.forwarding=0",
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
];

/// One end of the path: a namespace, the interface in it, and that interface's MAC (None: the
/// kernel's).
pub(crate) struct End<'a> {
    pub ns: &'a str,
    pub ifname: &'a str,
    pub mac: Option<&'a str>,
}

/// Makes the path namespace and its two veth pairs, `scan.ifname` — ps and pn — `net.ifname`,
/// each end created directly in its namespace, `queues` queues each. ps and pn are up with GRO
/// off (so frames are read as they crossed the wire); the outer ends are left for the caller to
/// address and bring up.
pub(crate) fn make_links(name: &str, queues: u32, scan: &End, net: &End) -> Result<()> {
    let path = path_ns(name);
    ip_line(&format!("netns add {path}"))?;
    sysctl(&path, PATH_SYSCTLS)?;
    ip_line(&format!("-n {path} link set dev lo up"))?;
    let q = format!("numtxqueues {queues} numrxqueues {queues}");
    // `name` before each name: `ip` takes a bare word for a keyword it abbreviates ("ma" for
    // "master").
    let mac = |m: Option<&str>| m.map_or(String::new(), |m| format!("address {m}"));
    ip_line(&format!(
        "link add name {} netns {} {} {q} type veth peer name {SCAN_SIDE_IF} netns {path} address {SCAN_SIDE_MAC} {q}",
        scan.ifname,
        scan.ns,
        mac(scan.mac)
    ))?;
    ip_line(&format!(
        "link add name {} netns {} {} {q} type veth peer name {NET_SIDE_IF} netns {path} address {NET_SIDE_MAC} {q}",
        net.ifname,
        net.ns,
        mac(net.mac)
    ))?;
    for ifname in [SCAN_SIDE_IF, NET_SIDE_IF] {
        in_ns(&path, "ethtool", &["-K", ifname, "gro", "off"])?;
        check_off(&path, ifname, &["generic-receive-offload"])?;
        ip_line(&format!("-n {path} link set dev {ifname} up"))?;
    }
    Ok(())
}

/// The offloads a host's end of a path turns off, so the delay line reads what a 1500-byte wire
/// carries: no 64 KB TSO/GSO frames (larger than the frames it holds) and complete checksums
/// (a partial one would reach the other side as a bad one).
pub(crate) fn host_offloads_off(ns: &str, ifname: &str) -> Result<()> {
    in_ns(
        ns,
        "ethtool",
        &["-K", ifname, "tso", "off", "gso", "off", "tx", "off"],
    )?;
    check_off(
        ns,
        ifname,
        &[
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "tx-checksumming",
        ],
    )
}

/// How long `start` waits for the delay line to forward.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// Starts the delay line of lab `name` in its path namespace (on `cpus` if given, whose RPS
/// then takes the path's receive work too): `path_cmd --dir DIR`, told what to do by
/// `DIR/spec.json`. Returns once it has written its first counters, that is once its rings are
/// open and it forwards.
pub(crate) fn start(
    name: &str,
    config: &PathConfig,
    seed: u64,
    path_cmd: &[String],
    cpus: Option<&[usize]>,
    queues: u32,
) -> Result<PathStatus> {
    if path_cmd.is_empty() {
        bail!("lab {name:?} has a path but no command to run its delay line");
    }
    let ns = path_ns(name);
    if let Some(cpus) = cpus {
        for ifname in [SCAN_SIDE_IF, NET_SIDE_IF] {
            cpus::steer(&ns, ifname, cpus, queues)?;
        }
    }
    let dir = dir(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let spec = PathSpec {
        lab: name.to_string(),
        scan_side: SCAN_SIDE_IF.into(),
        net_side: NET_SIDE_IF.into(),
        seed,
        config: config.clone(),
    };
    let spec_file = dir.join("spec.json");
    fs::write(&spec_file, serde_json::to_string_pretty(&spec)? + "\n")
        .map_err(|e| anyhow!("cannot write {}: {e}", spec_file.display()))?;
    let log_file = dir.join("path.log");
    let log = fs::File::create(&log_file)
        .map_err(|e| anyhow!("cannot create {}: {e}", log_file.display()))?;
    let mut child = server::detached_in(&ns, cpus)
        .args(path_cmd)
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let pid = child.id();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let log = fs::read_to_string(&log_file).unwrap_or_default();
            let last = log
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            bail!("the path's delay line exited ({status}) before forwarding: {last}");
        }
        if dir.join(super::STATS_FILE).exists() {
            break;
        }
        if started.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the path's delay line did not start forwarding within {READY_TIMEOUT:?} (its log: {})",
                log_file.display()
            );
        }
        thread::sleep(POLL);
    }
    // Reap it when it ends, so a long-lived caller (a test) keeps no zombie.
    thread::spawn(move || child.wait());
    let start_ticks = server::started(pid, "path")
        .map(|s| s.start_ticks)
        .ok_or_else(|| anyhow!("the path's delay line (pid {pid}) ended as it started"))?;
    Ok(PathStatus {
        ns,
        scan_side_if: SCAN_SIDE_IF.into(),
        net_side_if: NET_SIDE_IF.into(),
        config: config.clone(),
        pid,
        start_ticks,
        dir: dir.display().to_string(),
    })
}

/// The delay line as a started process, for the state file's list.
pub(crate) fn started(st: &PathStatus) -> Started {
    Started {
        pid: st.pid,
        start_ticks: st.start_ticks,
        what: "path delay line".into(),
    }
}

/// Whether the recorded delay line of a lab (`LabStatus::path`, `BridgeStatus::path`) still
/// runs, and what it last counted.
pub fn report(st: &PathStatus) -> PathReport {
    let running = server::started(st.pid, "path").map(|s| s.start_ticks) == Some(st.start_ticks);
    let file = PathBuf::from(&st.dir).join(super::STATS_FILE);
    let counters = fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str::<PathCounters>(&t).ok());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    PathReport {
        running,
        pid: st.pid,
        age_ms: counters.map(|c| now_ms.saturating_sub(c.written_unix_ms)),
        counters,
    }
}

/// Removes lab `name`'s path: stops whatever runs in its namespace (the delay line), deletes
/// the namespace (and with it ps and pn, so the veth pairs) and the folder. Best effort, first
/// error returned; nothing to do when there is no path.
pub(crate) fn teardown(name: &str) -> Result<()> {
    let ns = path_ns(name);
    let mut result = Ok(());
    if ns_exists(&ns) {
        result = server::stop_all(&ns);
        result = result.and(ip_line(&format!("netns del {ns}")).map(drop));
    }
    let dir = dir(name);
    match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            result = result.and(Err(anyhow!("cannot remove {}: {e}", dir.display())));
        }
        _ => {}
    }
    result
}

/// Fails unless `ethtool -k` shows each of `features` off on `ifname` (a kernel may refuse to
/// change a fixed feature without ethtool failing).
fn check_off(ns: &str, ifname: &str, features: &[&str]) -> Result<()> {
    let text = in_ns(ns, "ethtool", &["-k", ifname])?;
    for feature in features {
        let state = text.lines().find_map(|line| {
            let (key, value) = line.trim().split_once(':')?;
            (key == *feature).then(|| value.split_whitespace().next().unwrap_or(""))
        });
        if state != Some("off") {
            bail!(
                "{feature} of {ifname} in {ns} is {} after ethtool -K, not off",
                state.unwrap_or("not shown")
            );
        }
    }
    Ok(())
}

/// `ip netns exec NS sysctl -q -w k=v …`
fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let mut args = vec!["-q", "-w"];
    args.extend_from_slice(settings);
    in_ns(ns, "sysctl", &args).map(drop)
}
