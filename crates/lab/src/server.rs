//! The lab's TCP server (`serve`), and starting and stopping it from `up` and
//! `down`.

use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6, TcpListener};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn, SockaddrIn6,
};
use nix::unistd::Pid;

use crate::cmd::{ip_line, spawn_error};

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(20);

/// Listens on 0.0.0.0:P and [::]:P (IPV6_V6ONLY) for each of `ports` and
/// accepts and closes connections forever. The lab runs it inside its net
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
        listeners.extend(listener(p, false)?);
        listeners.extend(listener(p, true)?);
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

/// A listener on 0.0.0.0:`port`, or with `v6` on [::]:`port` for IPv6 only
/// (so it never competes with the IPv4 one). None if the kernel has no IPv6.
fn listener(port: u16, v6: bool) -> Result<Option<TcpListener>> {
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
    if v6 {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true).map_err(|e| fail("set IPV6_V6ONLY on", e))?;
        let addr = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
        bind(raw, &addr).map_err(|e| fail("bind", e))?;
    } else {
        let addr = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        bind(raw, &addr).map_err(|e| fail("bind", e))?;
    }
    // The largest accept queue: Linux caps -1 at net.core.somaxconn, which
    // `up` raises, so handshake bursts from scanners are not refused.
    listen(&fd, Backlog::MAXALLOWABLE).map_err(|e| fail("listen on", e))?;
    Ok(Some(TcpListener::from(fd)))
}

/// Accepts and closes (dropping the stream sends FIN). Errors such as
/// ECONNABORTED or EMFILE are transient for a server that holds nothing.
fn accept_forever(l: &TcpListener) {
    loop {
        if l.accept().is_err() {
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Starts `cmd` in namespace `ns`, detached (own session via setsid, stdio to
/// /dev/null), and waits until it listens on every port (over IPv6 too if
/// `v6`). Returns its pid.
///
/// `ip netns exec` and `setsid` both exec (setsid only forks when the caller
/// leads a process group, and a spawned child does not), so the pid of the
/// spawned child is the server's.
pub(crate) fn start(ns: &str, cmd: &[String], ports: &[u16], v6: bool) -> Result<u32> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "setsid"])
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| spawn_error("ip", &e))?;
    let pid = child.id();
    if let Err(e) = wait_listening(&mut child, ports, v6) {
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
fn wait_listening(child: &mut Child, ports: &[u16], v6: bool) -> Result<()> {
    let start = Instant::now();
    let what = if v6 { " over IPv4 and IPv6" } else { "" };
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the lab server exited ({status}) before listening on {ports:?}{what}; run it by hand to see why");
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
            bail!(
                "the lab server did not listen on all of {ports:?}{what} within {READY_TIMEOUT:?}"
            );
        }
        thread::sleep(POLL);
    }
}

/// Local ports in LISTEN state (st 0A) in /proc/PID/net/`file` (tcp or tcp6)
/// of the network namespace of `pid`.
fn listening_ports(pid: u32, file: &str) -> Vec<u16> {
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
/// Processes in the lab's net namespace are the lab's by construction.
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

/// Pids whose network namespace is `ns` (a zombie has none, so it is done).
fn ns_pids(ns: &str) -> Result<Vec<i32>> {
    let text = ip_line(&format!("netns pids {ns}"))?;
    Ok(text
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

fn signal_all(pids: &[i32], sig: Signal) {
    for &pid in pids {
        // ESRCH (already gone) is what we want anyway.
        let _ = kill(Pid::from_raw(pid), sig);
    }
}
