//! Lab integration of sonde's XDP reply filter: an AF_XDP receiver opened with
//! `AnyRx::open_filtered` on the scanner's interface gets the replies addressed to the scan's
//! address and source ports, and nothing else; everything else still reaches the scanner
//! namespace's kernel. Needs root (namespaces, BPF, AF_XDP); without it the test says so and
//! passes vacuously. The lab gets a unique name and is removed by a guard, also on failure.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use nix::sys::time::{TimeVal, TimeValLike};
use sonde_craft::cookie::PortRange;
use sonde_io::{AnyRx, BackendKind, FilterSpec, FrameRx, FrameTx, IoConfig, TcpTake, XdpMode};

use common::{can_run_labs, sonde, Lab};

const SCAN_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
/// sonde's own source ports, which the filter takes replies to.
const OURS: PortRange = PortRange::DEFAULT;
/// Local ports inside sonde's source-port range (the filter takes replies to them)…
const IN_RANGE: u16 = 62_345;
/// …and outside it, in Linux's ephemeral range (replies go to the kernel); one more per round.
const OUT_OF_RANGE: u16 = 45_678;

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

/// (the scanner's MAC, the lab gateway's MAC)
type Macs = ([u8; 6], [u8; 6]);

fn tcp_spec() -> FilterSpec {
    FilterSpec {
        ipv4: Some(SCAN_IP),
        ipv6: None,
        tcp: TcpTake::SynAckOrRst,
        udp: false,
        icmp: false,
        icmp6: false,
        ports: (OURS.first, OURS.last),
    }
}

fn mac(text: &str) -> [u8; 6] {
    let mut m = [0; 6];
    for (b, part) in m.iter_mut().zip(text.split(':')) {
        *b = u8::from_str_radix(part, 16).expect("a MAC address");
    }
    m
}

/// The Internet checksum of `parts`, concatenated (each of even length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        for pair in part.chunks(2) {
            sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet/IPv4/TCP SYN from the scan's address and `sport` to `dst`:80.
fn syn(macs: Macs, dst: Ipv4Addr, sport: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(54);
    f.extend_from_slice(&macs.1);
    f.extend_from_slice(&macs.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [
        0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    ip[12..16].copy_from_slice(&SCAN_IP.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&[&ip]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&sport.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&0x5eed_0001u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x02;
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    let pseudo = [&ip[12..20], &[0, 6, 0, 20]].concat();
    let c = checksum(&[&pseudo, &tcp]);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    f
}

/// The socket work, in the scanner namespace (this thread only): one round per attach mode,
/// then one socket that transmits and receives, then the other backends' path.
fn run_in_scan_ns(lab: &str, target: Ipv4Addr, macs: Macs) {
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
    pair_round_trip(target, macs, IN_RANGE + 10);
    assert!(!link_details().contains("prog/xdp"), "{}", link_details());

    // Every other backend opens plainly and takes the tcpdump expression.
    let expr = format!("ip and dst host {SCAN_IP} and tcp and dst portrange {OURS}");
    let ring = AnyRx::open_filtered(BackendKind::Ring, &IoConfig::new("sx0"), &tcp_spec(), &expr)
        .expect("a filtered ring receiver");
    assert!(!ring.describe().contains("reply filter"));
    assert!(!link_details().contains("prog/xdp"), "{}", link_details());
}

/// One AF_XDP socket, split: a SYN sent by its transmit half is answered by a SYN-ACK that
/// arrives at its receive half (what a scan with `--backend xdp --rx-backend xdp` does).
fn pair_round_trip(target: Ipv4Addr, macs: Macs, sport: u16) {
    let cfg = IoConfig::new("sx0");
    // Two sockets on one queue: the kernel refuses the second.
    let tx_only = sonde_io::AnyTx::open(BackendKind::Xdp, &cfg).expect("AF_XDP transmit");
    let mut busy = cfg.clone();
    busy.xdp_mode = XdpMode::Generic;
    let err = AnyRx::open_filtered(BackendKind::Xdp, &busy, &tcp_spec(), "")
        .err()
        .expect("a second AF_XDP socket on queue 0");
    assert!(format!("{err:#}").contains("busy"), "{err:#}");
    drop(tx_only);

    let (mut tx, mut rx) = sonde_io::open_xdp_pair(&cfg, &tcp_spec()).expect("an AF_XDP pair");
    eprintln!("pair: {} / {}", tx.describe(), rx.describe());
    let frame = syn(macs, target, sport);
    let sender = std::thread::spawn(move || {
        let sent = tx
            .tx_batch(1, |_, buf| {
                buf[..frame.len()].copy_from_slice(&frame);
                frame.len()
            })
            .expect("tx_batch");
        tx.flush().expect("flush");
        (sent, tx)
    });
    let (sent, _tx) = sender.join().expect("the sender thread");
    assert_eq!(sent, 1);
    let frames = drain(&mut rx, Duration::from_millis(1500));
    let synacks = frames
        .iter()
        .filter_map(|f| tcp_of(f))
        .filter(|&t| t == (target, 80, SCAN_IP, sport, 0x12))
        .count();
    assert!(
        synacks >= 1,
        "no SYN-ACK to the pair's SYN ({} frames arrived)",
        frames.len()
    );
    eprintln!("pair: {synacks} SYN-ACK(s) to a SYN sent on the same socket");
}

fn round_trip(target: Ipv4Addr, mode: XdpMode, how: &str, round: u16) {
    let (in_range, out_of_range) = (IN_RANGE + round, OUT_OF_RANGE + round);
    let mut cfg = IoConfig::new("sx0");
    cfg.xdp_mode = mode;
    let spec = tcp_spec();
    let expr = format!("ip and dst host {SCAN_IP} and tcp and dst portrange {OURS}");
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
        assert!(dst == SCAN_IP && OURS.contains(dport), "{dst}:{dport}");
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

/// Runs `work(lab, responsive target, (scan MAC, gateway MAC))` in a thread of its own, with a
/// lab of `queues` queues that is brought down (and checked to be gone) whatever happens.
fn with_lab(queues: &str, work: fn(&str, Ipv4Addr, Macs)) {
    let lab = Lab::up(&["--queues", queues]);
    let name = lab.name.clone();
    let status = sonde(&["lab", "status", "--name", &name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("lab status --json");
    let seed = v["seed"].as_u64().expect("seed");
    let share = v["responsive"].as_f64().expect("responsive");
    let target = (1..=254)
        .map(|i| Ipv4Addr::new(198, 18, 0, i))
        .find(|&a| sonde_lab::is_responsive(seed, a, share))
        .expect("a responsive address in 198.18.0.0/24");
    let macs = (
        mac(v["scan_mac"].as_str().expect("scan_mac")),
        mac(v["gateway_mac"].as_str().expect("gateway_mac")),
    );
    let result = std::thread::spawn(move || work(&name, target, macs)).join();
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

#[test]
fn xdp_reply_filter_takes_replies_and_passes_the_rest() {
    if can_run_labs() {
        with_lab("1", run_in_scan_ns);
    }
}

#[test]
fn receivers_of_two_queues_share_one_filter() {
    if can_run_labs() {
        with_lab("2", two_queues);
    }
}

fn two_queues(lab: &str, target: Ipv4Addr, _macs: Macs) {
    sonde_lab::enter_scan_ns(lab).expect("entering the scanner namespace");
    let open = |queue: u32, spec: &FilterSpec| {
        let mut cfg = IoConfig::new("sx0");
        cfg.queue = queue;
        AnyRx::open_filtered(BackendKind::Xdp, &cfg, spec, "")
    };
    let mut rx0 = open(0, &tcp_spec()).expect("queue 0");
    let mut rx1 = open(1, &tcp_spec()).expect("queue 1");
    let other = FilterSpec {
        ports: (1000, 2000),
        ..tcp_spec()
    };
    let err = open(1, &other).err().expect("a second spec on sx0");
    assert!(format!("{err:#}").contains("already on sx0"), "{err:#}");
    assert_eq!(link_details().matches("prog/xdp").count(), 1);

    // Handshakes from several ports: the lab spreads its replies over its queues, and every
    // SYN-ACK must reach one of the two sockets.
    let ports: Vec<u16> = (62_000..62_016).collect();
    let mut pending = Vec::new();
    for &port in &ports {
        let fd: OwnedFd = socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .unwrap();
        let me = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        socket::bind(fd.as_raw_fd(), &me).unwrap();
        let res = socket::connect(
            fd.as_raw_fd(),
            &SockaddrIn::from(SocketAddrV4::new(target, 80)),
        );
        assert_eq!(res, Err(nix::errno::Errno::EINPROGRESS));
        pending.push(fd);
    }
    let mut seen = [Vec::new(), Vec::new()];
    let end = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < end {
        for (q, rx) in [&mut rx0, &mut rx1].into_iter().enumerate() {
            rx.rx_batch(64, Duration::from_millis(20), |f| {
                if let Some((src, 80, SCAN_IP, dport, 0x12)) = tcp_of(f) {
                    if src == target && !seen[q].contains(&dport) {
                        seen[q].push(dport);
                    }
                }
            })
            .expect("rx_batch");
        }
    }
    eprintln!(
        "SYN-ACKs on queue 0: {}, on queue 1: {}",
        seen[0].len(),
        seen[1].len()
    );
    for port in &ports {
        assert!(
            seen[0].contains(port) || seen[1].contains(port),
            "the SYN-ACK to port {port} reached neither socket (queue 0: {:?}, queue 1: {:?})",
            seen[0],
            seen[1]
        );
    }
    drop(pending);

    // The filter stays while a receiver of the interface is open.
    drop(rx0);
    assert!(link_details().contains("prog/xdp"), "{}", link_details());
    drop(rx1);
    assert!(!link_details().contains("prog/xdp"), "{}", link_details());
}
