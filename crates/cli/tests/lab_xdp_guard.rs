//! What sonde's XDP reply filter leaves to the host (issue 17): while a scan of each module
//! receives through `--rx-backend xdp`, the scanner namespace's own traffic still works, in
//! both families: its `ping`, UDP from a port inside sonde's source-port range (a DNS query to
//! the lab's server, IPv4 only: the lab's unbound does not answer over IPv6; and an echo from
//! the lab's gateway), TCP connections (from an ephemeral port and from one inside the range),
//! and path-MTU discovery: a fragmentation-needed (IPv4) or packet-too-big (IPv6) about one of
//! its TCP connections reaches its kernel, whose route to the peer then shows the lower MTU.
//!
//! The scans cover one half of the lab's population, the host's traffic goes to the other, so
//! each scan is still scored exactly. The ICMP errors are written by the test in the lab's net
//! namespace (raw sockets, from the lab's gateway address, quoting the connection's segment
//! with a sequence number its kernel accepts); everything stays in the lab's namespaces and
//! goes to lab addresses. Needs root; the lab is uniquely named and removed by a guard.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::socket::{
    self, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn,
    SockaddrIn6, SockaddrStorage,
};
use nix::sys::time::{TimeVal, TimeValLike};

use common::{can_run_labs, stderr, Lab, SONDE};

const SCAN_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
const SCAN_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
/// The lab's population: the scans cover the first half, the host talks to the second.
const POPULATION: &str = "198.18.0.0/23";
const POPULATION6: &str = "2001:2::/119";
const SCANNED: &str = "198.18.0.0/24";
const SCANNED6: &str = "2001:2::/120";
/// Where the host's own traffic goes: the other half.
const HOST_SIDE: (Ipv4Addr, Ipv6Addr) = (
    Ipv4Addr::new(198, 18, 1, 0),
    Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0x100),
);
/// An open port of the lab's small server (says one line, closes).
const OPEN_PORT: u16 = 443;
/// The port of the test's own server in the lab, which keeps connections open.
const HOLD_PORT: u16 = 7443;
/// The lab's gateway addresses (on nx0), where the test's UDP echo server listens.
const GATEWAY: (Ipv4Addr, Ipv6Addr) = (
    Ipv4Addr::new(198, 19, 255, 254),
    Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 0xfe),
);
const ECHO_PORT: u16 = 7007;
/// The MTU the ICMP errors announce (IPv6's minimum, below the veth's 1500).
const PATH_MTU: u16 = 1280;
/// Ports inside sonde's source-port range (61000-65535) that the host's own sockets use, one
/// per scan and use.
const HOST_UDP_PORT: u16 = 63_100;
const HOST_TCP_PORT: u16 = 63_200;

/// The scans: name, then the arguments after the targets.
const SCANS: [(&str, &[&str]); 4] = [
    ("tcp_syn", &["-p", "80"]),
    (
        "udp",
        &[
            "-M",
            "udp",
            "-p",
            "9999",
            "--payload-hex",
            "68656c6c6f",
            "-f",
            "saddr,sport,classification",
            "--output-filter",
            "classification = unreach",
        ],
    ),
    (
        "dns",
        &[
            "-M",
            "dns",
            "-p",
            "53",
            "--dns-name",
            "example.com",
            "--dns-type",
            "A",
        ],
    ),
    ("icmp_echo", &["-M", "icmp_echo"]),
];

/// The responsive addresses of the host's half, in both families.
struct HostSide {
    v4: Vec<Ipv4Addr>,
    v6: Vec<Ipv6Addr>,
}

impl HostSide {
    fn of(lab: &Lab) -> HostSide {
        let status = lab.status();
        let seed = status["seed"].as_u64().expect("seed");
        let share = status["responsive"].as_f64().expect("responsive");
        let v4: Vec<_> = (1..=254u32)
            .map(|i| Ipv4Addr::from(u32::from(HOST_SIDE.0) + i))
            .filter(|&a| sonde_lab::is_responsive(seed, a, share))
            .collect();
        let v6: Vec<_> = (1..=254u128)
            .map(|i| Ipv6Addr::from(u128::from(HOST_SIDE.1) + i))
            .filter(|&a| sonde_lab::is_responsive6(seed, a, share))
            .collect();
        assert!(
            v4.len() > SCANS.len() && v6.len() > SCANS.len(),
            "too few responsive hosts: {v4:?} {v6:?}"
        );
        HostSide { v4, v6 }
    }

    /// The hosts of round `round` in both families: one for ping, DNS and TCP, and one whose
    /// path MTU no earlier round has lowered.
    fn round(&self, round: usize) -> [(IpAddr, IpAddr); 2] {
        [
            (self.v4[0].into(), self.v4[1 + round].into()),
            (self.v6[0].into(), self.v6[1 + round].into()),
        ]
    }
}

/// A scan running in the background, and its status file; killed if the test fails first.
struct Running(Option<Child>, String);

impl Running {
    /// Waits for the scan to end (it ends by itself: bounded targets, rate and cooldown).
    fn finish(mut self) -> std::process::Output {
        self.0
            .take()
            .expect("a running scan")
            .wait_with_output()
            .expect("waiting for sonde")
    }

    fn has_ended(&mut self) -> bool {
        let child = self.0.as_mut().expect("a running scan");
        child.try_wait().expect("polling sonde").is_some()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `sonde scan` of both halves' scanned prefixes in the lab, receiving through AF_XDP,
/// slowly enough to last several seconds (512 targets at 50 per second).
fn start_scan(lab: &Lab, module: &str, module_args: &[&str]) -> Running {
    let targets = lab.file("targets.txt");
    std::fs::write(&targets, format!("{SCANNED}\n{SCANNED6}\n")).unwrap();
    let (results, status) = (
        lab.file(&format!("{module}.csv")),
        lab.file(&format!("{module}-status.csv")),
    );
    let mut args = vec![
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "-q",
        "-I",
        &targets,
        "--rx-backend",
        "xdp",
        "-r",
        "50",
        "-c",
        "2",
        "-o",
        &results,
        "--status-file",
        &status,
    ];
    args.extend_from_slice(module_args);
    let child = Command::new(SONDE)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sonde scan");
    Running(Some(child), status)
}

/// `ip -d link show dev sx0`, from the calling thread's namespace.
fn link_details() -> String {
    let out = Command::new("ip")
        .args(["-d", "link", "show", "dev", "sx0"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the scan's XDP reply filter is on sx0 (checked from the scanner namespace).
fn filter_attached(lab: &Lab) -> bool {
    lab.in_scan(|| link_details().contains("prog/xdp"))
}

/// Waits until the scan receives: its filter is attached and has its AF_XDP sockets (the scan
/// creates its status file once every receiver is open; before, the filter passes what it
/// would take). Fails if the scan ends first or takes over 30 s.
fn wait_for_filter(lab: &Lab, scan: &mut Running) {
    let end = Instant::now() + Duration::from_secs(30);
    while !(std::path::Path::new(&scan.1).exists() && filter_attached(lab)) {
        assert!(
            !scan.has_ended(),
            "the scan ended before its filter was seen"
        );
        assert!(Instant::now() < end, "the scan's XDP filter never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ping` of `target` from the scanner namespace: three echoes, all answered.
fn ping(lab: &Lab, target: IpAddr) -> Result<(), String> {
    let family = if target.is_ipv6() { "-6" } else { "-4" };
    let out = lab.in_scan(|| {
        Command::new("ping")
            .args([family, "-n", "-c", "3", "-i", "0.2", "-W", "3"])
            .arg(target.to_string())
            .output()
            .expect("running ping")
    });
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ping {target}: {}",
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// A datagram from port `port` (inside sonde's range) of the scanner namespace to `peer`, whose
/// answer must come back (three tries): `ask` is the query, `answers` tells its answer.
fn udp_exchange(
    lab: &Lab,
    port: u16,
    peer: SocketAddr,
    ask: &[u8],
    answers: impl Fn(&[u8]) -> bool + Send + Sync,
) -> Result<(), String> {
    lab.in_scan(|| {
        let any: IpAddr = if peer.is_ipv6() {
            Ipv6Addr::UNSPECIFIED.into()
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        };
        let socket = UdpSocket::bind((any, port)).map_err(|e| format!("bind {port}: {e}"))?;
        socket.connect(peer).map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        for _ in 0..3 {
            socket.send(ask).map_err(|e| e.to_string())?;
            let mut buf = [0u8; 512];
            while let Ok(n) = socket.recv(&mut buf) {
                if answers(&buf[..n]) {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no answer from {peer} to port {port} in three tries"
        ))
    })
}

/// A DNS query for example.com A with id `id`.
fn dns_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(b"\x07example\x03com\x00\x00\x01\x00\x01");
    q
}

/// A DNS query from port `port` (inside sonde's range) of the scanner namespace to the lab's
/// DNS server at `server`, which must answer it.
fn dns_from(lab: &Lab, port: u16, server: IpAddr) -> Result<(), String> {
    let id = 0x5eed ^ port;
    let answer = move |m: &[u8]| m.len() >= 12 && m[..2] == id.to_be_bytes() && m[2] & 0x80 != 0;
    udp_exchange(lab, port, (server, 53).into(), &dns_query(id), answer)
}

/// A datagram from port `port` (inside sonde's range) of the scanner namespace to the lab's
/// gateway (of `family`'s address), which the test's echo server must return.
fn echo_from(lab: &Lab, port: u16, v6: bool) -> Result<(), String> {
    let gateway: IpAddr = if v6 {
        GATEWAY.1.into()
    } else {
        GATEWAY.0.into()
    };
    let message = format!("sonde host traffic {port}").into_bytes();
    let expected = message.clone();
    let answer = move |m: &[u8]| m == expected.as_slice();
    udp_exchange(lab, port, (gateway, ECHO_PORT).into(), &message, answer)
}

/// A TCP connection from the scanner namespace to `remote`, from `local_port` (0: one the
/// kernel picks), giving up after `timeout`.
fn connect(local_port: u16, remote: SocketAddr, timeout: Duration) -> nix::Result<TcpStream> {
    let family = if remote.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let fd: OwnedFd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    // A blocking connect gives up after the send timeout.
    let tv = TimeVal::milliseconds(timeout.as_millis() as i64);
    socket::setsockopt(&fd, sockopt::SendTimeout, &tv)?;
    if local_port != 0 {
        match remote {
            SocketAddr::V4(_) => socket::bind(
                fd.as_raw_fd(),
                &SockaddrIn::from(std::net::SocketAddrV4::new(
                    Ipv4Addr::UNSPECIFIED,
                    local_port,
                )),
            )?,
            SocketAddr::V6(_) => socket::bind(
                fd.as_raw_fd(),
                &SockaddrIn6::from(std::net::SocketAddrV6::new(
                    Ipv6Addr::UNSPECIFIED,
                    local_port,
                    0,
                    0,
                )),
            )?,
        }
    }
    socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(remote))?;
    Ok(TcpStream::from(fd))
}

/// A TCP connection from the scanner namespace (from `local_port`, 0: an ephemeral one) to the
/// lab's small server at `target`, which must say its line.
fn tcp_line(lab: &Lab, local_port: u16, target: IpAddr) -> Result<(), String> {
    lab.in_scan(|| {
        let remote = SocketAddr::new(target, OPEN_PORT);
        let mut s = connect(local_port, remote, Duration::from_secs(3))
            .map_err(|e| format!("connect from port {local_port} to {remote}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut line = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut line)
            .map_err(|e| format!("reading from {remote}: {e}"))?;
        if line.starts_with(b"SONDE-LAB ") {
            Ok(())
        } else {
            Err(format!("{remote} said {line:?}"))
        }
    })
}

/// A server on HOLD_PORT in the lab's net namespace that accepts connections and holds them
/// open until `stop` (or 5 minutes at most).
fn hold_server(lab: &str, stop: &'static AtomicBool) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let name = lab.to_string();
    let server = std::thread::spawn(move || {
        sonde_lab::enter_net_ns(&name).expect("entering the lab's net namespace");
        let listener = std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, HOLD_PORT))
            .expect("listening in the lab");
        listener.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        let end = Instant::now() + Duration::from_secs(300);
        let mut held = Vec::new();
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            match listener.accept() {
                Ok((conn, _)) => held.push(conn),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the hold server did not start");
    server
}

/// A UDP echo server on ECHO_PORT of the lab's gateway addresses (in the lab's net namespace),
/// until `stop` (or 5 minutes at most).
fn udp_echo_server(lab: &str, stop: &'static AtomicBool) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let name = lab.to_string();
    let server = std::thread::spawn(move || {
        sonde_lab::enter_net_ns(&name).expect("entering the lab's net namespace");
        let sockets: Vec<UdpSocket> = [IpAddr::from(GATEWAY.0), IpAddr::from(GATEWAY.1)]
            .into_iter()
            .map(|ip| {
                let s = UdpSocket::bind((ip, ECHO_PORT)).expect("binding the echo server");
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        ready_tx.send(()).unwrap();
        let end = Instant::now() + Duration::from_secs(300);
        let mut buf = [0u8; 1500];
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            let mut idle = true;
            for s in &sockets {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    let _ = s.send_to(&buf[..n], from);
                    idle = false;
                }
            }
            if idle {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the echo server did not start");
    server
}

/// The Internet checksum of `bytes`.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|p| u32::from(u16::from_be_bytes([p[0], *p.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The first 20 bytes of a TCP segment from `sport` to HOLD_PORT with sequence number `seq`
/// (an ACK), as an ICMP error quotes it.
fn quoted_tcp(sport: u16, seq: u32) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&HOLD_PORT.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x10;
    t
}

/// ICMP fragmentation needed (type 3 code 4, next-hop MTU PATH_MTU) about the scanner's
/// 1500-byte segment to `target`.
fn frag_needed(target: Ipv4Addr, sport: u16, seq: u32) -> Vec<u8> {
    let mut ip = vec![0x45, 0, 0x05, 0xdc, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&SCAN_IP.octets());
    ip.extend_from_slice(&target.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut msg = vec![3, 4, 0, 0, 0, 0];
    msg.extend_from_slice(&PATH_MTU.to_be_bytes());
    msg.extend_from_slice(&ip);
    msg.extend_from_slice(&quoted_tcp(sport, seq));
    let c = checksum(&msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    msg
}

/// ICMPv6 packet too big (type 2, MTU PATH_MTU) about the scanner's 1500-byte segment to
/// `target` (the kernel fills in the checksum of a raw ICMPv6 socket).
fn packet_too_big(target: Ipv6Addr, sport: u16, seq: u32) -> Vec<u8> {
    let mut msg = vec![2, 0, 0, 0];
    msg.extend_from_slice(&u32::from(PATH_MTU).to_be_bytes());
    msg.extend_from_slice(&[0x60, 0, 0, 0]);
    msg.extend_from_slice(&1460u16.to_be_bytes());
    msg.extend_from_slice(&[6, 64]);
    msg.extend_from_slice(&SCAN_IP6.octets());
    msg.extend_from_slice(&target.octets());
    msg.extend_from_slice(&quoted_tcp(sport, seq));
    msg
}

/// In the lab's net namespace: watches for the SYN from the scanner's port (sent through
/// `port`) to `target`:HOLD_PORT, then sends the ICMP error about that connection with the
/// sequence number the scanner's kernel expects (its ISN + 1: nothing is sent on it). Says on
/// `ready` when it watches; returns what went wrong, if anything.
fn lab_side_icmp(
    lab: String,
    target: IpAddr,
    ready: mpsc::Sender<()>,
    port: mpsc::Receiver<u16>,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(move || {
        sonde_lab::enter_net_ns(&lab).map_err(|e| e.to_string())?;
        let family = if target.is_ipv6() {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let raw = |proto| {
            socket::socket(family, SockType::Raw, SockFlag::SOCK_CLOEXEC, proto)
                .map_err(|e| format!("a raw socket: {e}"))
        };
        let watch = raw(SockProtocol::Tcp)?;
        let tv = TimeVal::milliseconds(200);
        socket::setsockopt(&watch, sockopt::ReceiveTimeout, &tv).map_err(|e| e.to_string())?;
        ready.send(()).map_err(|e| e.to_string())?;
        let sport = port
            .recv_timeout(Duration::from_secs(10))
            .map_err(|e| format!("no connection to watch: {e}"))?;
        let isn = syn_seq(&watch, target, sport)?;
        let (msg, proto) = match target {
            IpAddr::V4(t) => (
                frag_needed(t, sport, isn.wrapping_add(1)),
                SockProtocol::Icmp,
            ),
            IpAddr::V6(t) => (
                packet_too_big(t, sport, isn.wrapping_add(1)),
                SockProtocol::IcmpV6,
            ),
        };
        let icmp = raw(proto)?;
        let sent = match target {
            IpAddr::V4(_) => socket::sendto(
                icmp.as_raw_fd(),
                &msg,
                &SockaddrIn::from(std::net::SocketAddrV4::new(SCAN_IP, 0)),
                MsgFlags::empty(),
            ),
            IpAddr::V6(_) => socket::sendto(
                icmp.as_raw_fd(),
                &msg,
                &SockaddrIn6::from(std::net::SocketAddrV6::new(SCAN_IP6, 0, 0, 0)),
                MsgFlags::empty(),
            ),
        };
        sent.map_err(|e| format!("sending the ICMP error: {e}"))?;
        Ok(())
    })
}

/// The sequence number of the SYN from the scanner's `sport` to `target`:HOLD_PORT, read from
/// the raw TCP socket `watch` (IPv4 raw sockets see the IP header, IPv6 ones only TCP).
fn syn_seq(watch: &OwnedFd, target: IpAddr, sport: u16) -> Result<u32, String> {
    let end = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 2048];
    while Instant::now() < end {
        let Ok((n, from)) = socket::recvfrom::<SockaddrStorage>(watch.as_raw_fd(), &mut buf) else {
            continue;
        };
        let (src, tcp) = match target {
            IpAddr::V4(_) => {
                let ihl = usize::from(buf[0] & 0x0f) * 4;
                let src = Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]);
                let dst = Ipv4Addr::new(buf[16], buf[17], buf[18], buf[19]);
                if IpAddr::from(dst) != target {
                    continue;
                }
                (IpAddr::from(src), &buf[ihl.min(n)..n])
            }
            IpAddr::V6(_) => {
                let src = from
                    .as_ref()
                    .and_then(|a| a.as_sockaddr_in6())
                    .map(|a| a.ip());
                let Some(src) = src else { continue };
                (IpAddr::from(src), &buf[..n])
            }
        };
        if tcp.len() < 14 {
            continue;
        }
        let port = |o: usize| u16::from_be_bytes([tcp[o], tcp[o + 1]]);
        let syn_only = tcp[13] & 0x12 == 0x02;
        let ours = src == IpAddr::from(SCAN_IP) || src == IpAddr::from(SCAN_IP6);
        if ours && syn_only && port(0) == sport && port(2) == HOLD_PORT {
            return Ok(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]));
        }
    }
    Err(format!(
        "no SYN from port {sport} to {target}:{HOLD_PORT} seen in the lab"
    ))
}

/// The path MTU the scanner namespace's kernel has learned for `target` (`ip route get`'s
/// `mtu`), if any.
fn learned_mtu(target: IpAddr) -> Option<u16> {
    let out = Command::new("ip")
        .args(["route", "get"])
        .arg(target.to_string())
        .output()
        .expect("running ip");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    words.find(|&w| w == "mtu")?;
    words.next()?.parse().ok()
}

/// Path-MTU discovery for one of the scanner namespace's TCP connections: the connection to
/// `target` is held open, the lab sends an ICMP error about it announcing PATH_MTU, and the
/// scanner's kernel must learn that MTU (its route to `target` shows it).
fn path_mtu_learned(lab: &Lab, target: IpAddr) -> Result<(), String> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (port_tx, port_rx) = mpsc::channel();
    let lab_side = lab_side_icmp(lab.name.clone(), target, ready_tx, port_rx);
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "the lab side did not start".to_string())?;
    let scanner_side = lab.in_scan(|| {
        if let Some(mtu) = learned_mtu(target) {
            return Err(format!("the route to {target} has mtu {mtu} already"));
        }
        let remote = SocketAddr::new(target, HOLD_PORT);
        let conn = connect(0, remote, Duration::from_secs(3))
            .map_err(|e| format!("connect to {remote}: {e}"))?;
        let sport = conn.local_addr().map_err(|e| e.to_string())?.port();
        port_tx.send(sport).map_err(|e| e.to_string())?;
        // Give the error time to arrive (it is sent once the lab has seen the SYN).
        let end = Instant::now() + Duration::from_secs(6);
        while Instant::now() < end {
            if learned_mtu(target) == Some(PATH_MTU) {
                drop(conn);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(conn);
        Err(format!(
            "the scanner's kernel did not learn mtu {PATH_MTU} for {target} (route: {:?})",
            learned_mtu(target)
        ))
    });
    let lab_result = lab_side.join().expect("the lab side panicked");
    lab_result.and(scanner_side)
}

/// The scanner namespace's own traffic during scan round `round`, in both families: each
/// check's failure, if any.
fn host_traffic(lab: &Lab, hosts: &HostSide, round: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, (peer, mtu_peer)) in hosts.round(round).into_iter().enumerate() {
        let n = (round * 4 + i * 2) as u16;
        let v6 = peer.is_ipv6();
        let mut checks = vec![
            ("ping", ping(lab, peer)),
            (
                "udp echo from sonde's range",
                echo_from(lab, HOST_UDP_PORT + n, v6),
            ),
            ("tcp from an ephemeral port", tcp_line(lab, 0, peer)),
            (
                "tcp from sonde's range",
                tcp_line(lab, HOST_TCP_PORT + n, peer),
            ),
            ("path MTU", path_mtu_learned(lab, mtu_peer)),
        ];
        if !v6 {
            checks.push((
                "dns from sonde's range",
                dns_from(lab, HOST_UDP_PORT + n + 1, peer),
            ));
        }
        for (what, result) in checks {
            match result {
                Ok(()) => eprintln!("  {peer}: {what}: ok"),
                Err(e) => failures.push(format!("{what}: {e}")),
            }
        }
    }
    failures
}

/// The score line of a scan's `results` and whether it found every responsive target of the
/// scanned halves, and nothing else (the IPv4 half for dns: the lab's unbound does not answer
/// over IPv6).
fn scored_in_full(lab: &Lab, module: &str, results: &str) -> (String, bool) {
    let within = if module == "dns" {
        SCANNED.to_string()
    } else {
        format!("{SCANNED},{SCANNED6}")
    };
    let mut args = vec!["--within", within.as_str()];
    if module != "tcp_syn" {
        args.extend_from_slice(&["--port", "0", "--answer", "echo"]);
    }
    args.push(results);
    let score = lab.score(&args);
    let full = score.contains("(100.000 %), false positives 0");
    (score, full)
}

#[test]
fn the_hosts_own_traffic_works_during_xdp_scans_of_every_module() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        POPULATION,
        "--population6",
        POPULATION6,
        "--responsive",
        "0.5",
        "--tcp-open",
        "80,443",
        "--dns",
    ]);
    let hosts = HostSide::of(&lab);
    static STOP: AtomicBool = AtomicBool::new(false);
    let server = hold_server(&lab.name, &STOP);
    let echo = udp_echo_server(&lab.name, &STOP);
    let mut failures = Vec::new();
    for (round, (module, args)) in SCANS.into_iter().enumerate() {
        eprintln!("{module} scan on xdp:");
        let results = lab.file(&format!("{module}.csv"));
        let mut scan = start_scan(&lab, module, args);
        wait_for_filter(&lab, &mut scan);
        let during = host_traffic(&lab, &hosts, round);
        let still_on = filter_attached(&lab);
        let out = scan.finish();
        assert!(out.status.success(), "{module} scan: {}", stderr(&out));
        // (Failed checks wait out their timeouts: the scan may be over by then.)
        assert!(
            still_on || !during.is_empty(),
            "{module}: the scan's filter was gone before the checks ended: slow the scan down"
        );
        let (score, full) = scored_in_full(&lab, module, &results);
        eprintln!("  {score}");
        if !full {
            failures.push(format!("{module}: the scan itself lost replies: {score}"));
        }
        failures.extend(during.into_iter().map(|f| format!("{module}: {f}")));
    }
    STOP.store(true, Ordering::Relaxed);
    server.join().expect("the hold server");
    echo.join().expect("the echo server");
    assert!(
        failures.is_empty(),
        "during xdp scans:\n{}",
        failures.join("\n")
    );
}
