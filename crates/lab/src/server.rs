//! The lab's TCP servers (`serve`: accept, one line, close; `serve_silent`: accept and hold), and
//! starting and stopping them (and the other servers a lab runs) from `up` and `down`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn, SockaddrIn6,
};
use nix::sys::time::TimeVal;
use nix::unistd::Pid;

use crate::cmd::{ip_line, spawn_error};
use crate::state::Started;

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(20);
/// The silent server holds at most this many connections (closing the oldest beyond it) …
const MAX_HELD: usize = 131_072;
/// … each for at most this long: far beyond any client's data timeout.
const HOLD_FOR: Duration = Duration::from_secs(120);
/// Descriptors a server needs besides its connections (listeners, stdio, libraries).
const SPARE_FILES: usize = 1024;
/// How often an idle silent server looks for connections to let go.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// Listens on 0.0.0.0:P and [::]:P (IPV6_V6ONLY) for each of `ports`, and
/// forever accepts, says one line (`banner_line`) and closes. The lab runs it inside its net
/// namespace, where the kernel owns every population address, so one listener
/// per port and family serves them all. A kernel without IPv6
/// (EAFNOSUPPORT) gets the IPv4 listeners only.
pub fn serve(ports: &[u16]) -> Result<Infallible> {
    let mut ports = ports.to_vec();
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        bail!("the lab server needs at least one port");
    }
    let mut listeners = Vec::with_capacity(2 * ports.len());
    for &p in &ports {
        listeners.extend(listener(p, false, Bind::Any)?);
        listeners.extend(listener(p, true, Bind::Any)?);
    }
    let workers: Vec<_> = listeners
        .into_iter()
        .map(|l| thread::spawn(move || accept_forever(&l)))
        .collect();
    for w in workers {
        // accept_forever never returns; a join only ends if a thread panicked.
        let _ = w.join();
    }
    bail!("the lab server's accept threads stopped")
}

/// Holds every connection to `port` on 127.0.0.1 and ::1 open without reading or writing, so
/// the peer's handshake completes and then nothing ever comes back. nftables' tproxy hands this
/// listener the connections to the lab's silent hosts (hence IP_TRANSPARENT, which tproxy
/// requires of the socket it picks); bound to loopback, nothing else reaches it. At most
/// MAX_HELD connections are held (fewer if the open-file limit cannot be raised that far),
/// each for at most HOLD_FOR; then the oldest are closed.
pub fn serve_silent(port: u16) -> Result<Infallible> {
    let files = raise_open_files((MAX_HELD + SPARE_FILES) as u64);
    let max_held = usize::try_from(files)
        .unwrap_or(usize::MAX)
        .saturating_sub(SPARE_FILES)
        .clamp(1, MAX_HELD);
    let mut listeners = Vec::with_capacity(2);
    listeners.extend(listener(port, false, Bind::LoopbackTransparent)?);
    listeners.extend(listener(port, true, Bind::LoopbackTransparent)?);
    let held = Arc::new(Mutex::new(VecDeque::new()));
    let workers: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let held = Arc::clone(&held);
            thread::spawn(move || hold_forever(&l, &held, max_held))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    bail!("the silent server's accept threads stopped")
}

/// Raises this process's open-file limit to `want` if it can: up to the hard limit always, and
/// beyond it with CAP_SYS_RESOURCE. Returns the soft limit it has then. Children inherit it.
pub(crate) fn raise_open_files(want: u64) -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft >= want {
        return soft;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_ok() {
        return want;
    }
    let best = want.min(hard);
    if setrlimit(Resource::RLIMIT_NOFILE, best, hard).is_ok() {
        best
    } else {
        soft
    }
}

/// Accepts and keeps connections (in arrival order, with their arrival time), closing those
/// beyond `max_held` or older than HOLD_FOR. The listener's receive timeout wakes it at least
/// every EXPIRE_EVERY, so old connections go even when none arrive.
fn hold_forever(l: &TcpListener, held: &Mutex<VecDeque<(Instant, TcpStream)>>, max_held: usize) {
    let timeout = TimeVal::new(EXPIRE_EVERY.as_secs() as i64, 0);
    let _ = setsockopt(l, sockopt::ReceiveTimeout, &timeout);
    loop {
        let accepted = l.accept();
        let now = Instant::now();
        let Ok(mut held) = held.lock() else { return };
        if let Ok((stream, _)) = accepted {
            held.push_back((now, stream));
        }
        while held.len() > max_held
            || held
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > HOLD_FOR)
        {
            held.pop_front();
        }
    }
}

/// Where a listener binds.
#[derive(Clone, Copy, PartialEq)]
enum Bind {
    /// 0.0.0.0 / [::]: every local address, so the whole population.
    Any,
    /// 127.0.0.1 / [::1], transparent (for tproxy).
    LoopbackTransparent,
}

/// A listener on 0.0.0.0:`port`, or with `v6` on [::]:`port` for IPv6 only
/// (so it never competes with the IPv4 one); loopback instead with `Bind::LoopbackTransparent`.
/// None if the kernel has no IPv6.
fn listener(port: u16, v6: bool, bind_to: Bind) -> Result<Option<TcpListener>> {
    let family = if v6 { "IPv6" } else { "IPv4" };
    let fail =
        |what: &str, e: nix::Error| anyhow!("lab server: cannot {what} {family} port {port}: {e}");
    let domain = if v6 {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd = match socket(domain, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) {
        Ok(fd) => fd,
        Err(nix::Error::EAFNOSUPPORT) if v6 => return Ok(None),
        Err(e) => return Err(fail("open a socket for", e)),
    };
    setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| fail("set SO_REUSEADDR on", e))?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let loopback = bind_to == Bind::LoopbackTransparent;
    if loopback {
        // IP_TRANSPARENT marks IPv6 sockets too (it is a flag of the shared inet socket).
        setsockopt(&fd, sockopt::IpTransparent, &true)
            .map_err(|e| fail("set IP_TRANSPARENT on", e))?;
    }
    if v6 {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true).map_err(|e| fail("set IPV6_V6ONLY on", e))?;
        let ip = if loopback {
            Ipv6Addr::LOCALHOST
        } else {
            Ipv6Addr::UNSPECIFIED
        };
        let addr = SockaddrIn6::from(SocketAddrV6::new(ip, port, 0, 0));
        match bind(raw, &addr) {
            // A namespace whose loopback has no ::1 (IPv6 disabled) has no IPv6 to serve.
            Err(nix::Error::EADDRNOTAVAIL) if loopback => return Ok(None),
            r => r.map_err(|e| fail("bind", e))?,
        }
    } else {
        let ip = if loopback {
            Ipv4Addr::LOCALHOST
        } else {
            Ipv4Addr::UNSPECIFIED
        };
        let addr = SockaddrIn::from(SocketAddrV4::new(ip, port));
        bind(raw, &addr).map_err(|e| fail("bind", e))?;
    }
    // The largest accept queue: Linux caps -1 at net.core.somaxconn, which
    // `up` raises, so handshake bursts from scanners are not refused.
    listen(&fd, Backlog::MAXALLOWABLE).map_err(|e| fail("listen on", e))?;
    Ok(Some(TcpListener::from(fd)))
}

/// Accepts, says one line naming the address and port (`banner_line`), and
/// closes (dropping the stream sends FIN). A fresh socket's send buffer is
/// empty, so the write does not block. Errors such as ECONNABORTED or EMFILE
/// are transient for a server that holds nothing.
fn accept_forever(l: &TcpListener) {
    loop {
        match l.accept() {
            Ok((mut stream, _)) => {
                if let Ok(local) = stream.local_addr() {
                    let line = crate::truth::banner_line(local.ip(), local.port());
                    let _ = std::io::Write::write_all(&mut stream, line.as_bytes());
                }
            }
            Err(_) => thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// `ip netns exec NS [taskset -c CPUS] setsid`, to which a server's command line is added: it
/// runs in namespace `ns`, detached (its own session), and only on `cpus` if given (every thread
/// and child it makes inherits that).
///
/// `ip netns exec`, `taskset` and `setsid` all exec (setsid only forks when the caller leads a
/// process group, and a spawned child does not), so the pid of the spawned child is the server's.
pub(crate) fn detached_in(ns: &str, cpus: Option<&[usize]>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    if let Some(cpus) = cpus {
        c.args(["taskset", "-c", &crate::cpus::cpu_list(cpus)]);
    }
    c.arg("setsid");
    c
}

/// Starts `cmd` in namespace `ns` (on `cpus`, see `detached_in`), stdio to /dev/null, and waits
/// until it listens on every port (over IPv6 too if `v6`). Returns its pid. `what` names it in
/// errors ("the lab server").
pub(crate) fn start(
    ns: &str,
    cpus: Option<&[usize]>,
    cmd: &[String],
    ports: &[u16],
    v6: bool,
    what: &str,
) -> Result<u32> {
    let mut child = detached_in(ns, cpus)
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let pid = child.id();
    if let Err(e) = wait_listening(&mut child, ports, v6, what) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    // Reap it when it ends, so a long-lived caller (a test) keeps no zombie;
    // when the caller exits first, init adopts it.
    thread::spawn(move || child.wait());
    Ok(pid)
}

/// Polls the server's view of TCP sockets (/proc/PID/net/tcp{,6} shows the
/// namespace the process is in) until every port has a listener: an IPv4 or
/// IPv6 one (as before), and with `v6` an IPv6 one as well.
fn wait_listening(child: &mut Child, ports: &[u16], v6: bool, server: &str) -> Result<()> {
    let start = Instant::now();
    let what = if v6 { " over IPv4 and IPv6" } else { "" };
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("{server} exited ({status}) before listening on {ports:?}{what}; run it by hand to see why");
        }
        let (four, six) = (
            listening_ports(child.id(), "tcp"),
            listening_ports(child.id(), "tcp6"),
        );
        let ready = ports
            .iter()
            .all(|p| six.contains(p) || (!v6 && four.contains(p)));
        if ready {
            return Ok(());
        }
        if start.elapsed() > READY_TIMEOUT {
            bail!("{server} did not listen on all of {ports:?}{what} within {READY_TIMEOUT:?}");
        }
        thread::sleep(POLL);
    }
}

/// Local ports in LISTEN state (st 0A) in /proc/PID/net/`file` (tcp or tcp6)
/// of the network namespace of `pid`.
pub(crate) fn listening_ports(pid: u32, file: &str) -> Vec<u16> {
    let mut ports = Vec::new();
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) else {
        return ports;
    };
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(3) != Some(&"0A") {
            continue;
        }
        let port = fields.get(1).and_then(|a| a.rsplit_once(':'));
        if let Some(p) = port.and_then(|(_, p)| u16::from_str_radix(p, 16).ok()) {
            ports.push(p);
        }
    }
    ports
}

/// Ends every process in namespace `ns` (the server, whatever it started, and
/// anything else left there): SIGTERM, then SIGKILL after STOP_TIMEOUT.
/// Processes in the lab's namespaces are the lab's by construction; sonde itself, and the
/// processes it runs under (a `lab down` from a shell inside the lab), are spared.
pub(crate) fn stop_all(ns: &str) -> Result<()> {
    let pids = ns_pids(ns)?;
    signal_all(&pids, Signal::SIGTERM);
    let start = Instant::now();
    while !ns_pids(ns)?.is_empty() {
        if start.elapsed() > STOP_TIMEOUT {
            signal_all(&ns_pids(ns)?, Signal::SIGKILL);
            break;
        }
        thread::sleep(POLL);
    }
    Ok(())
}

/// Sends SIGTERM to `pid` if it still runs `cmd` (the lab's server), and
/// not some later process that reused the pid.
pub(crate) fn stop_if_running(pid: u32, cmd: &[String]) {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return;
    };
    let argv: Vec<&[u8]> = raw.split(|&b| b == 0).filter(|a| !a.is_empty()).collect();
    let same = argv.len() == cmd.len() && argv.iter().zip(cmd).all(|(a, c)| *a == c.as_bytes());
    if same && !cmd.is_empty() {
        if let Ok(pid) = i32::try_from(pid) {
            signal_all(&[pid], Signal::SIGTERM);
        }
    }
}

/// The record of process `pid` (just started by `up`), if it still runs.
pub(crate) fn started(pid: u32, what: &str) -> Option<Started> {
    Some(Started {
        pid,
        start_ticks: start_ticks(pid)?,
        what: what.to_string(),
    })
}

/// Sends SIGTERM to the recorded process if it still runs (same pid, same start time).
pub(crate) fn stop_if_same(p: &Started) {
    if start_ticks(p.pid) == Some(p.start_ticks) {
        if let Ok(pid) = i32::try_from(p.pid) {
            signal_all(&[pid], Signal::SIGTERM);
        }
    }
}

/// When process `pid` started (field 22 of /proc/PID/stat, counted after the command name,
/// which may hold spaces and parentheses: the last ')' ends it).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_comm) = stat.rsplit_once(')')?;
    // after_comm starts at field 3 (state); field 22 is the 20th from there.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// Pids whose network namespace is `ns` (a zombie has none, so it is done), but for this
/// process and those it runs under.
fn ns_pids(ns: &str) -> Result<Vec<i32>> {
    let text = ip_line(&format!("netns pids {ns}"))?;
    let spared = this_and_ancestors();
    Ok(text
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| !spared.contains(p))
        .collect())
}

/// This process and its parent, its parent's parent, … up to init.
fn this_and_ancestors() -> Vec<i32> {
    let mut chain = Vec::new();
    let mut pid = std::process::id() as i32;
    while pid > 1 && !chain.contains(&pid) {
        chain.push(pid);
        pid = parent_of(pid).unwrap_or(0);
    }
    chain
}

/// Field 4 of /proc/PID/stat (after the command name, which may hold spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_comm) = stat.rsplit_once(')')?;
    after_comm.split_whitespace().nth(1)?.parse().ok()
}

fn signal_all(pids: &[i32], sig: Signal) {
    for &pid in pids {
        // ESRCH (already gone) is what we want anyway.
        let _ = kill(Pid::from_raw(pid), sig);
    }
}
