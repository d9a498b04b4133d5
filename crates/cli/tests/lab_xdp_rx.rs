//! Lab integration of sonde's XDP reply filter: an AF_XDP receiver opened with
//! `AnyRx::open_filtered` on the scanner's interface gets the replies addressed to the scan's
//! address and source ports, and nothing else; everything else still reaches the scanner
//! namespace's kernel. Needs root (namespaces, BPF, AF_XDP); without it the test says so and
//! passes vacuously. The lab gets a unique name and is removed by a guard, also on failure.

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use nix::sys::time::{TimeVal, TimeValLike};
use sonde_io::{AnyRx, BackendKind, FilterSpec, FrameRx, IoConfig, XdpMode};

const SONDE: &str = env!("CARGO_BIN_EXE_sonde");
const SCAN_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
/// Local ports inside sonde's source-port range (the filter takes replies to them)…
const IN_RANGE: u16 = 45_678;
/// …and outside it (replies go to the kernel); one more per round.
const OUT_OF_RANGE: u16 = 61_234;

fn can_run_labs() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let ip = Command::new("ip").arg("-V").output().is_ok();
    if !(root && ip) {
        eprintln!("skipping lab test: needs root and iproute2");
    }
    root && ip
}

fn sonde(args: &[&str]) -> Output {
    Command::new(SONDE)
        .args(args)
        .output()
        .expect("running sonde")
}

/// A lab that removes itself when dropped.
struct Lab {
    name: String,
}

impl Lab {
    fn up(extra: &[&str]) -> Lab {
        let name = format!("x{}", std::process::id());
        let mut args = vec!["lab", "up", "--name", &name];
        args.extend_from_slice(extra);
        let out = sonde(&args);
        let lab = Lab { name: name.clone() };
        assert!(
            out.status.success(),
            "lab up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = sonde(&["lab", "down", "--name", &self.name]);
    }
}

/// A TCP connection from `local` to `remote`, giving up after `timeout`.
fn connect_from(local: u16, remote: SocketAddrV4, timeout: Duration) -> nix::Result<TcpStream> {
    let fd: OwnedFd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    // A blocking connect gives up after the send timeout (with EINPROGRESS).
    let tv = TimeVal::milliseconds(timeout.as_millis() as i64);
    socket::setsockopt(&fd, sockopt::SendTimeout, &tv)?;
    let me = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, local));
    socket::bind(fd.as_raw_fd(), &me)?;
    socket::connect(fd.as_raw_fd(), &SockaddrIn::from(remote))?;
    Ok(TcpStream::from(fd))
}

/// A received IPv4/TCP frame's (source, source port, destination, destination port, flags).
fn tcp_of(frame: &[u8]) -> Option<(Ipv4Addr, u16, Ipv4Addr, u16, u8)> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[23] != 6 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let tcp = frame.get(14 + ihl..14 + ihl + 14)?;
    let addr = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
    let port = |o: usize| u16::from_be_bytes([tcp[o], tcp[o + 1]]);
    Some((addr(26), port(0), addr(30), port(2), tcp[13]))
}

/// Everything the receiver gets within `window`.
fn drain(rx: &mut AnyRx, window: Duration) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let end = Instant::now() + window;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        rx.rx_batch(64, left.min(Duration::from_millis(50)), |f| {
            frames.push(f.to_vec())
        })
        .expect("rx_batch");
    }
    frames
}

/// `ip -d link show sx0` in the current namespace.
fn link_details() -> String {
    let out = Command::new("ip")
        .args(["-d", "link", "show", "dev", "sx0"])
        .output()
        .expect("running ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The socket work, in the scanner namespace (this thread only): one round per attach mode.
fn run_in_scan_ns(lab: &str, target: Ipv4Addr) {
    sonde_lab::enter_scan_ns(lab).expect("entering the scanner namespace");
    let rounds = [
        (XdpMode::Auto, "native XDP"),
        (XdpMode::Generic, "generic XDP"),
    ];
    for (round, (mode, how)) in rounds.into_iter().enumerate() {
        assert!(
            !link_details().contains("prog/xdp"),
            "an XDP program is already on sx0"
        );
        round_trip(target, mode, how, round as u16);
        assert!(
            !link_details().contains("prog/xdp"),
            "the reply filter stayed on sx0 after the receiver was dropped: {}",
            link_details()
        );
    }
}

fn round_trip(target: Ipv4Addr, mode: XdpMode, how: &str, round: u16) {
    let (in_range, out_of_range) = (IN_RANGE + round, OUT_OF_RANGE + round);
    let mut cfg = IoConfig::new("sx0");
    cfg.xdp_mode = mode;
    let spec = FilterSpec {
        ipv4: Some(SCAN_IP),
        ipv6: None,
        tcp: true,
        udp: false,
        icmp: false,
        icmp6: false,
        ports: (32768, 60999),
    };
    let expr = format!("ip and dst host {SCAN_IP} and tcp and dst portrange 32768-60999");
    let mut rx = AnyRx::open_filtered(BackendKind::Xdp, &cfg, &spec, &expr)
        .expect("opening the filtered AF_XDP receiver");
    let desc = rx.describe();
    eprintln!("receiver: {desc}");
    assert!(
        desc.contains("sonde reply filter") && desc.contains(how),
        "{desc}"
    );
    assert!(link_details().contains("prog/xdp"), "{}", link_details());
    let err = rx.set_filter(&expr).unwrap_err().to_string();
    assert!(err.contains("open_filtered"), "{err}");
    let remote = SocketAddrV4::new(target, 80);

    // 1. From a port inside the range: the SYN-ACK goes to the AF_XDP socket, so the kernel
    // never completes the handshake.
    let inside = connect_from(in_range, remote, Duration::from_millis(1500));
    assert!(
        inside.is_err(),
        "the kernel completed a connection from port {in_range}: the filter let the SYN-ACK through"
    );
    let frames = drain(&mut rx, Duration::from_millis(300));
    let synacks = frames
        .iter()
        .filter_map(|f| tcp_of(f))
        .filter(|&t| t == (target, 80, SCAN_IP, in_range, 0x12))
        .count();
    assert!(
        synacks >= 1,
        "no SYN-ACK from {remote} reached the AF_XDP socket ({} frames did)",
        frames.len()
    );
    for f in &frames {
        let (_, _, dst, dport, _) = tcp_of(f).expect("only TCP is taken");
        assert!(
            dst == SCAN_IP && (32768..=60999).contains(&dport),
            "{dst}:{dport}"
        );
    }
    eprintln!(
        "port {in_range}: connect failed as expected ({}), {synacks} SYN-ACK(s) on AF_XDP",
        inside.unwrap_err()
    );

    // 2. From a port outside the range: the kernel gets the SYN-ACK and connects.
    let outside = connect_from(out_of_range, remote, Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("connect from port {out_of_range} to {remote}: {e}"));
    assert_eq!(outside.peer_addr().unwrap(), remote.into());
    drop(outside);

    // 3. ICMP echo: not taken, so the kernel gets the reply.
    match Command::new("ping")
        .args(["-n", "-c", "1", "-W", "2", &target.to_string()])
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "ping {target}: {}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(e) => eprintln!("skipping the ping check: {e}"),
    }
    let late = drain(&mut rx, Duration::from_millis(300));
    for f in &late {
        let (_, _, _, dport, _) = tcp_of(f).expect("only TCP is taken");
        assert_ne!(
            dport, out_of_range,
            "a frame of the out-of-range connection reached AF_XDP"
        );
    }
}

fn our_namespaces(lab: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("sonde-{lab}-")))
        .map(str::to_string)
        .collect()
}

#[test]
fn xdp_reply_filter_takes_replies_and_passes_the_rest() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--queues", "1"]);
    let name = lab.name.clone();
    let status = sonde(&["lab", "status", "--name", &name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("lab status --json");
    let seed = v["seed"].as_u64().expect("seed");
    let share = v["responsive"].as_f64().expect("responsive");
    let target = (1..=254)
        .map(|i| Ipv4Addr::new(198, 18, 0, i))
        .find(|&a| sonde_lab::is_responsive(seed, a, share))
        .expect("a responsive address in 198.18.0.0/24");
    let result = std::thread::spawn(move || run_in_scan_ns(&name, target)).join();
    let name = lab.name.clone();
    drop(lab);
    assert!(
        our_namespaces(&name).is_empty(),
        "namespaces left behind: {:?}",
        our_namespaces(&name)
    );
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
