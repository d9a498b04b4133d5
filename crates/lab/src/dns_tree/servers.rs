//! The DNS tree's servers in the lab's network namespace: the zone files written from
//! [`spec`](super::spec), four NSDs (the root on 198.19.53.1; the TLDs on .2 and .3; every
//! second-level zone on .10-.13 and, without a zone for `lame.test.`, on .20; `slow.test.` on
//! 127.0.0.1:5353 behind the slow server on .21), the slow server, and unbound as the
//! recursive resolver on .64-.79 with the root server as its only hint.
//!
//! Everything lives in the lab's `-dns` folder of the state directory (zones, configurations,
//! logs), so `down` removes it with the lab.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::spec::{
    resolvers, Tld, Tree, Zone, EXAMPLE_SERVER, FIXED_RECORDS, LAME_SERVER, ROOT_NS, ROOT_SERVER,
    SLD_SERVERS, SLOW_SERVER, TEST_SERVER,
};
use crate::cmd::spawn_error;
use crate::{server, state};

/// Where the NSD of `slow.test.` listens, for the slow server only.
pub const SLOW_UPSTREAM: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 5353);
/// How long a server may take to start, beyond the time its zones take to load.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Records NSD loads a second at least (it loaded 45,000 a second on 2 vCPUs, see
/// `MAX_RECORDS`), for the time it may take.
const RECORDS_PER_SECOND: u64 = 15_000;
const POLL: Duration = Duration::from_millis(20);

/// The processes started, each with what it is.
pub(crate) struct Running {
    pub servers: Vec<(u32, String)>,
}

/// One NSD: what it is called, where it listens, which zones it serves.
struct Nsd {
    role: &'static str,
    listen: Vec<String>,
    zones: Vec<Zone>,
}

/// Writes the zones and configurations of `tree` for lab `name` and starts every server in
/// namespace `ns` (on `cpus` if given); `slow_cmd` is the slow server's command line. On an
/// error the caller removes the namespace, and with it whatever did start.
pub(crate) fn start(
    name: &str,
    ns: &str,
    tree: &Tree,
    slow_cmd: &[String],
    cpus: Option<&[usize]>,
) -> Result<Running> {
    let dir = state::scratch_dir(name, "-dns")?;
    let mut servers = Vec::new();
    for nsd in nsds(tree) {
        write_zones(&dir, tree, &nsd.zones)?;
        let conf = dir.join(format!("nsd-{}.conf", nsd.role));
        write(&conf, &nsd_config(&dir, &nsd))?;
        let records = nsd.zones.len() as u64 * (FIXED_RECORDS + u64::from(tree.hosts()));
        let timeout = START_TIMEOUT + Duration::from_secs(records / RECORDS_PER_SECOND);
        let pid = start_nsd(
            ns,
            cpus,
            &conf,
            &dir.join(format!("nsd-{}.log", nsd.role)),
            timeout,
        )
        .map_err(|e| anyhow!("NSD of the {} zones: {e}", nsd.role))?;
        servers.push((pid, format!("nsd ({})", nsd.role)));
    }
    let pid = start_slow(ns, cpus, slow_cmd)?;
    servers.push((pid, "slow DNS server".to_string()));
    let hints = dir.join("root.hints");
    write(&hints, &root_hints())?;
    let conf = dir.join("unbound.conf");
    write(&conf, &unbound_config(&dir, &hints))?;
    let pid = start_unbound(ns, cpus, &conf)?;
    servers.push((pid, "unbound (the tree's resolver)".to_string()));
    Ok(Running { servers })
}

/// The four NSDs and what each serves.
fn nsds(tree: &Tree) -> Vec<Nsd> {
    let all = |addrs: &[Ipv4Addr]| addrs.iter().map(Ipv4Addr::to_string).collect();
    let mut sld_addrs = SLD_SERVERS.to_vec();
    sld_addrs.push(LAME_SERVER);
    vec![
        Nsd {
            role: "root",
            listen: all(&[ROOT_SERVER]),
            zones: vec![Zone::Root],
        },
        Nsd {
            role: "tld",
            listen: all(&[TEST_SERVER, EXAMPLE_SERVER]),
            zones: vec![Zone::Tld(Tld::Test), Zone::Tld(Tld::Example)],
        },
        Nsd {
            role: "sld",
            listen: all(&sld_addrs),
            zones: (0..tree.zones()).map(Zone::Sld).collect(),
        },
        Nsd {
            role: "slow",
            listen: vec![format!("{}@{}", SLOW_UPSTREAM.ip(), SLOW_UPSTREAM.port())],
            zones: vec![Zone::Slow],
        },
    ]
}

/// A zone's file name in the zones folder (`root.zone`, `d3.example.zone`).
fn zone_file(zone: Zone) -> String {
    match zone {
        Zone::Root => "root.zone".to_string(),
        z => format!("{}zone", z.origin()),
    }
}

fn write_zones(dir: &Path, tree: &Tree, zones: &[Zone]) -> Result<()> {
    for &zone in zones {
        let path = dir.join(zone_file(zone));
        let file =
            fs::File::create(&path).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        for record in tree.records(zone) {
            writeln!(w, "{}", record.zone_line())?;
        }
        w.flush()
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// An NSD configuration: in the foreground, as root, no chroot or database, one server
/// process, its files in `dir`.
fn nsd_config(dir: &Path, nsd: &Nsd) -> String {
    let d = dir.display();
    let role = nsd.role;
    let mut c = String::from("server:\n");
    for ip in &nsd.listen {
        let _ = writeln!(c, "  ip-address: {ip}");
    }
    for line in [
        "port: 53".to_string(),
        "username: \"\"".to_string(),
        "chroot: \"\"".to_string(),
        format!("zonesdir: \"{d}\""),
        "database: \"\"".to_string(),
        format!("pidfile: \"{d}/nsd-{role}.pid\""),
        format!("xfrdfile: \"{d}/nsd-{role}-xfrd.state\""),
        format!("zonelistfile: \"{d}/nsd-{role}-zone.list\""),
        format!("logfile: \"{d}/nsd-{role}.log\""),
        "server-count: 1".to_string(),
        "do-ip6: no".to_string(),
        "verbosity: 0".to_string(),
        "hide-version: yes".to_string(),
        "tcp-count: 1000".to_string(),
    ] {
        let _ = writeln!(c, "  {line}");
    }
    c.push_str("remote-control:\n  control-enable: no\n");
    for &zone in &nsd.zones {
        let _ = writeln!(
            c,
            "zone:\n  name: \"{}\"\n  zonefile: \"{}\"",
            zone.origin(),
            zone_file(zone)
        );
    }
    c
}

/// The resolver's only root hint: the lab's root server.
fn root_hints() -> String {
    format!(". 3600000 IN NS {ROOT_NS}\n{ROOT_NS} 3600000 IN A {ROOT_SERVER}\n")
}

/// unbound as a plain recursive resolver over the tree: on the 16 resolver addresses, IPv4
/// only, the root hints above instead of its built-in ones, no DNSSEC (the iterator alone, no
/// trust anchor), and `test.` served from the tree rather than from unbound's default local
/// zone for it (RFC 6761).
fn unbound_config(dir: &Path, hints: &Path) -> String {
    let mut c = String::from("server:\n");
    for r in resolvers() {
        let _ = writeln!(c, "  interface: {r}");
    }
    for line in [
        "port: 53".to_string(),
        "do-daemonize: no".to_string(),
        "use-syslog: no".to_string(),
        format!("logfile: \"{}/unbound.log\"", dir.display()),
        "pidfile: \"\"".to_string(),
        "chroot: \"\"".to_string(),
        "username: \"\"".to_string(),
        "directory: \"/\"".to_string(),
        "num-threads: 1".to_string(),
        "access-control: 0.0.0.0/0 allow".to_string(),
        "do-ip6: no".to_string(),
        format!("root-hints: \"{}\"", hints.display()),
        "module-config: \"iterator\"".to_string(),
        "local-zone: \"test.\" nodefault".to_string(),
        "msg-cache-size: 64m".to_string(),
        "rrset-cache-size: 128m".to_string(),
    ] {
        let _ = writeln!(c, "  {line}");
    }
    c
}

/// Starts NSD with `conf` and waits until its log says it started (after it loaded every
/// zone), at most `timeout`.
fn start_nsd(
    ns: &str,
    cpus: Option<&[usize]>,
    conf: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<u32> {
    let _ = fs::remove_file(log);
    let child = server::detached_in(ns, cpus)
        .args(["nsd", "-d", "-c"])
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let started = |_| fs::read_to_string(log).is_ok_and(|t| t.contains("nsd started"));
    wait_for(child, started, timeout).map_err(|e| {
        let said = fs::read_to_string(log).unwrap_or_default();
        let first_error = said.lines().find(|l| l.contains("error:"));
        match first_error {
            Some(line) => anyhow!("{e}; its log says: {line}"),
            None => anyhow!("{e} (is it installed? apt-get install nsd)"),
        }
    })
}

/// Starts the slow server and waits until it listens on its address.
fn start_slow(ns: &str, cpus: Option<&[usize]>, cmd: &[String]) -> Result<u32> {
    let Some((program, args)) = cmd.split_first() else {
        bail!("the DNS tree needs a command to run its slow server");
    };
    let child = server::detached_in(ns, cpus)
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let bound = |pid| udp_bound(pid, SocketAddrV4::new(SLOW_SERVER, 53));
    wait_for(child, bound, START_TIMEOUT).map_err(|e| anyhow!("the slow DNS server: {e}"))
}

/// Starts unbound and waits until it listens on the last resolver address (it binds them in
/// order).
fn start_unbound(ns: &str, cpus: Option<&[usize]>, conf: &Path) -> Result<u32> {
    let child = server::detached_in(ns, cpus)
        .args(["unbound", "-d", "-c"])
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let last = *resolvers().last().expect("16 resolvers");
    let bound = |pid| udp_bound(pid, SocketAddrV4::new(last, 53));
    wait_for(child, bound, START_TIMEOUT).map_err(|e| {
        anyhow!("unbound, the tree's resolver: {e} (is it installed? apt-get install unbound)")
    })
}

/// Polls `ready` (given the child's pid) until it holds (returns the pid, and reaps the child
/// when it ends), or the child exits, or `timeout` passes (kills it).
fn wait_for(mut child: Child, ready: impl Fn(u32) -> bool, timeout: Duration) -> Result<u32> {
    let start = Instant::now();
    let pid = child.id();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("it exited at once ({status})");
        }
        if ready(pid) {
            thread::spawn(move || child.wait());
            return Ok(pid);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("it did not start within {timeout:?}");
        }
        thread::sleep(POLL);
    }
}

/// Whether the namespace of process `pid` has a UDP socket bound to `addr`
/// (/proc/PID/net/udp writes the address as the hex of its bytes read as a native u32).
fn udp_bound(pid: u32, addr: SocketAddrV4) -> bool {
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(addr.ip().octets()),
        addr.port()
    );
    fs::read_to_string(format!("/proc/{pid}/net/udp")).is_ok_and(|t| {
        t.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    })
}
