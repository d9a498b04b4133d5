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

/// A SYN scan's filter, except that it does not spare the host's sockets: these tests make
/// kernel connections from sonde's ports to stand in for its probes.
fn tcp_spec() -> FilterSpec {
    FilterSpec {
        ipv4: Some(SCAN_IP),
        ipv6: None,
        tcp: TcpTake::SynAckOrRst,
        udp: false,
        icmp: false,
        icmp6: false,
        ports: (OURS.first, OURS.last),
        echo_id: None,
        spare_host_sockets: false,
        stamp_arrivals: false,
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
fn run_in_scan_ns(lab: &LabFacts) {
    let (target, macs) = (lab.targets[0], lab.macs);
    sonde_lab::enter_scan_ns(&lab.name).expect("entering the scanner namespace");
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

/// What a test needs to know of its lab.
struct LabFacts {
    name: String,
    /// The responsive addresses of 198.18.0.0/24 (the lab server accepts on port 80 there).
    targets: Vec<Ipv4Addr>,
    macs: Macs,
    /// The namespace that owns the population (where the lab server runs).
    net_ns: String,
}

/// Runs `work(lab)` in a thread of its own, with a lab of `queues` queues that is brought down
/// (and checked to be gone) whatever happens.
fn with_lab(queues: &str, work: fn(&LabFacts)) {
    let lab = Lab::up(&["--queues", queues]);
    let name = lab.name.clone();
    let status = sonde(&["lab", "status", "--name", &name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("lab status --json");
    let seed = v["seed"].as_u64().expect("seed");
    let share = v["responsive"].as_f64().expect("responsive");
    let targets: Vec<Ipv4Addr> = (1..=254)
        .map(|i| Ipv4Addr::new(198, 18, 0, i))
        .filter(|&a| sonde_lab::is_responsive(seed, a, share))
        .collect();
    assert!(
        !targets.is_empty(),
        "no responsive address in 198.18.0.0/24"
    );
    let facts = LabFacts {
        name,
        targets,
        macs: (
            mac(v["scan_mac"].as_str().expect("scan_mac")),
            mac(v["gateway_mac"].as_str().expect("gateway_mac")),
        ),
        net_ns: v["net_ns"].as_str().expect("net_ns").to_string(),
    };
    let result = std::thread::spawn(move || work(&facts)).join();
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

fn two_queues(lab: &LabFacts) {
    let target = lab.targets[0];
    sonde_lab::enter_scan_ns(&lab.name).expect("entering the scanner namespace");
    let open = |queue: u32, spec: &FilterSpec| {
        let mut cfg = IoConfig::new("sx0");
        cfg.queue = queue;
        AnyRx::open_filtered(BackendKind::Xdp, &cfg, spec, "")
    };
    assert_eq!(sonde_io::queue_count("sx0").expect("sx0's queue count"), 2);
    let rx0 = open(0, &tcp_spec()).expect("queue 0");
    let rx1 = open(1, &tcp_spec()).expect("queue 1");
    let err = open(2, &tcp_spec()).err().expect("sx0 has no queue 2");
    assert!(
        format!("{err:#}").contains("no queue 2 (sx0 has 2 queues)"),
        "{err:#}"
    );
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
    // Both receivers served by one thread, neither waited on while the other has frames.
    let mut rxs = vec![rx0, rx1];
    let mut seen = [Vec::new(), Vec::new()];
    let end = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < end {
        sonde_io::rx_many(&mut rxs, 64, Duration::from_millis(50), |q, f| {
            if let Some((src, 80, SCAN_IP, dport, 0x12)) = tcp_of(f) {
                if src == target && !seen[q].contains(&dport) {
                    seen[q].push(dport);
                }
            }
        })
        .expect("rx_many");
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
    let drops: Vec<_> = rxs.iter_mut().map(AnyRx::take_drop_counts).collect();
    assert!(drops.iter().all(|d| d.total() == 0), "{drops:?}");

    // The filter stays while a receiver of the interface is open.
    let rx1 = rxs.pop().expect("two receivers");
    drop(rxs);
    assert!(link_details().contains("prog/xdp"), "{}", link_details());
    drop(rx1);
    assert!(!link_details().contains("prog/xdp"), "{}", link_details());
}

#[test]
fn a_syn_scan_filter_leaves_the_hosts_own_connections_alone() {
    if can_run_labs() {
        with_lab("1", host_connections);
    }
}

/// How many ordinary connections the host makes while sonde's SYN-scan filter is on.
const HOST_CONNECTIONS: usize = 50;
/// A port the test's own echo server listens on in the lab's net namespace.
const ECHO_PORT: u16 = 7007;

/// The filter decides what the host's kernel still sees: with a SYN scan's spec on sonde's own
/// ports, the host's connections (from its ephemeral ports) all work and the receiver sees none
/// of their packets; with `TcpTake::All` on a range that covers the ephemeral ports, the same
/// connections stall, unless the filter spares the host's sockets; and on one established
/// connection from sonde's ports the SYN scan's choice, and `TcpTake::All` sparing the host's
/// sockets, leave its data to the kernel where `TcpTake::All` without sparing takes it.
fn host_connections(lab: &LabFacts) {
    let echo = echo_server(&lab.net_ns);
    sonde_lab::enter_scan_ns(&lab.name).expect("entering the scanner namespace");
    let ephemeral = local_port_range();
    assert!(
        !OURS.overlaps(&ephemeral),
        "sonde's ports {OURS} overlap the ephemeral ports {ephemeral}"
    );
    ordinary_connections_work(lab, ephemeral);
    a_wide_filter_stalls_them(lab, ephemeral);
    the_tcp_choice_decides_on_an_open_connection(lab.targets[0]);
    echo.join().expect("the echo server");
}

/// A filtered AF_XDP receiver on sx0 taking `tcp` segments to `ports`, those of the host's
/// own sockets too unless `spare`.
fn open_tcp(tcp: TcpTake, ports: PortRange, spare: bool) -> AnyRx {
    let spec = FilterSpec {
        tcp,
        ports: (ports.first, ports.last),
        spare_host_sockets: spare,
        stamp_arrivals: false,
        ..tcp_spec()
    };
    AnyRx::open_filtered(BackendKind::Xdp, &IoConfig::new("sx0"), &spec, "")
        .expect("opening the filtered AF_XDP receiver")
}

/// Linux's ephemeral ports in this namespace (`net.ipv4.ip_local_port_range`).
fn local_port_range() -> PortRange {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("reading ip_local_port_range");
    let mut it = text.split_whitespace().map(|p| p.parse().expect("a port"));
    PortRange::new(it.next().expect("first"), it.next().expect("last")).expect("a port range")
}

/// 1. SYN-scan spec on sonde's ports: every kernel connection connects and closes cleanly,
///    and the receiver gets none of their packets (and loses none: no drops).
fn ordinary_connections_work(lab: &LabFacts, ephemeral: PortRange) {
    let mut rx = open_tcp(TcpTake::SynAckOrRst, OURS, false);
    let mut ports = Vec::new();
    for i in 0..HOST_CONNECTIONS {
        let remote = SocketAddrV4::new(lab.targets[i % lab.targets.len()], 80);
        let mut s = TcpStream::connect_timeout(&remote.into(), Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("connection {i} to {remote}: {e}"));
        let port = s.local_addr().unwrap().port();
        assert!(ephemeral.contains(port), "port {port} is not ephemeral");
        // The lab server says one line and closes: the line and its FIN must reach the kernel.
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut line = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut line)
            .unwrap_or_else(|e| panic!("connection {i} from port {port}: {e}"));
        assert!(line.starts_with(b"SONDE-LAB "), "connection {i}: {line:?}");
        ports.push(port);
    }
    // The last ACK of each close must reach the kernel too: no socket stays half closed.
    let end = Instant::now() + Duration::from_secs(3);
    while !half_closed(&ports).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(half_closed(&ports), Vec::<u16>::new(), "stuck in LAST_ACK");
    let frames = drain(&mut rx, Duration::from_millis(300));
    assert!(
        frames.is_empty(),
        "the SYN-scan filter took {} frames of the host's connections, e.g. {:?}",
        frames.len(),
        tcp_of(&frames[0])
    );
    assert_eq!(rx.take_drops(), 0);
    eprintln!("{HOST_CONNECTIONS} kernel connections connected and closed; AF_XDP saw none");

    // The receiver was live all along: a SYN-ACK to one of sonde's ports is taken.
    let target = lab.targets[0];
    let sport = OURS.first + 1234;
    let res = connect_from(sport, SocketAddrV4::new(target, 80), Duration::from_secs(1));
    assert!(
        res.is_err(),
        "the kernel completed a handshake from {sport}"
    );
    let frames = drain(&mut rx, Duration::from_millis(300));
    let synacks = frames
        .iter()
        .filter_map(|f| tcp_of(f))
        .filter(|&t| t == (target, 80, SCAN_IP, sport, 0x12))
        .count();
    assert!(
        synacks >= 1,
        "no SYN-ACK to {sport} ({} frames)",
        frames.len()
    );
}

/// 2. `TcpTake::All` on a range covering the ephemeral ports: the same kind of connection
///    stalls, because its SYN-ACK goes to AF_XDP; unless the filter spares the host's sockets
///    (asks the kernel first), as sonde's own filters do.
fn a_wide_filter_stalls_them(lab: &LabFacts, ephemeral: PortRange) {
    let wide = PortRange::new(ephemeral.first, OURS.last).expect("a range");
    let mut rx = open_tcp(TcpTake::All, wide, true);
    let mut ports = Vec::new();
    // The sockets stay open until the frames are counted: one closed at once (its line unread)
    // resets and is gone, and the server's FIN still in flight then has no socket to spare.
    let mut held = Vec::new();
    for i in 0..5 {
        let remote = SocketAddrV4::new(lab.targets[i % lab.targets.len()], 80);
        let (port, res) = connect_ephemeral(remote, Duration::from_secs(3));
        held.push(
            res.unwrap_or_else(|e| {
                panic!("sparing filter: connection from {port} to {remote}: {e}")
            }),
        );
        ports.push(port);
    }
    // Only these connections' frames count: the lab's server may still be resending its
    // SYN-ACK to the port of the handshake above that AF_XDP took (no socket has it now).
    let frames = drain(&mut rx, Duration::from_millis(300));
    let theirs: Vec<_> = frames
        .iter()
        .filter_map(|f| tcp_of(f))
        .filter(|&(_, _, _, dport, _)| ports.contains(&dport))
        .collect();
    assert!(
        theirs.is_empty(),
        "the sparing filter took {} frames of the host's connections: {theirs:?} (of {} frames)",
        theirs.len(),
        frames.len()
    );
    drop(rx);
    drop(held);
    eprintln!("with TcpTake::All on {wide}, sparing the host's sockets: 5 connections completed");

    let mut rx = open_tcp(TcpTake::All, wide, false);
    let mut ports = Vec::new();
    for i in 0..5 {
        let remote = SocketAddrV4::new(lab.targets[i % lab.targets.len()], 80);
        let (port, res) = connect_ephemeral(remote, Duration::from_millis(500));
        assert!(res.is_err(), "connection from {port} to {remote} completed");
        ports.push(port);
    }
    let frames = drain(&mut rx, Duration::from_millis(300));
    for port in &ports {
        assert!(
            frames
                .iter()
                .filter_map(|f| tcp_of(f))
                .any(|(_, sport, dst, dport, flags)| sport == 80
                    && dst == SCAN_IP
                    && dport == *port
                    && flags == 0x12),
            "no SYN-ACK to port {port} on AF_XDP ({} frames)",
            frames.len()
        );
    }
    eprintln!("with TcpTake::All on {wide}: 5 connections stalled, their SYN-ACKs on AF_XDP");
}

/// 3. One connection from sonde's ports, established before any filter: its data reaches the
///    kernel under the SYN scan's choice, and AF_XDP under `TcpTake::All` (the kernel gets it
///    again once that receiver is gone).
fn the_tcp_choice_decides_on_an_open_connection(target: Ipv4Addr) {
    let sport = OURS.first + 2345;
    let remote = SocketAddrV4::new(target, ECHO_PORT);
    let mut s = connect_from(sport, remote, Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("connect from {sport} to {remote}: {e}"));
    let mut echo = |msg: &[u8], wait: Duration| {
        std::io::Write::write_all(&mut s, msg).expect("write");
        s.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0u8; 16];
        std::io::Read::read(&mut s, &mut buf).map(|n| buf[..n].to_vec())
    };
    let to_sport = |frames: &[Vec<u8>]| {
        frames
            .iter()
            .filter(|f| tcp_of(f).is_some_and(|t| t.3 == sport))
            .count()
    };

    let mut rx = open_tcp(TcpTake::SynAckOrRst, OURS, false);
    assert_eq!(echo(b"one", Duration::from_secs(3)).expect("echo"), b"one");
    let frames = drain(&mut rx, Duration::from_millis(200));
    assert_eq!(to_sport(&frames), 0, "the SYN-scan filter took data");
    drop(rx);

    // TcpTake::All sparing the host's sockets (what grab runs): the connection is the
    // host's, so its data still reaches the kernel.
    let mut rx = open_tcp(TcpTake::All, OURS, true);
    let spared = echo(b"mine", Duration::from_secs(3)).expect("echo past a sparing filter");
    assert_eq!(spared, b"mine");
    let frames = drain(&mut rx, Duration::from_millis(200));
    assert_eq!(
        to_sport(&frames),
        0,
        "the sparing filter took the host's data"
    );
    drop(rx);

    let mut rx = open_tcp(TcpTake::All, OURS, false);
    let stalled = echo(b"two", Duration::from_millis(700));
    assert!(
        stalled.is_err(),
        "the kernel got data TcpTake::All should take"
    );
    let frames = drain(&mut rx, Duration::from_millis(200));
    let with_payload = frames
        .iter()
        .any(|f| tcp_of(f).is_some_and(|t| t.3 == sport) && f.windows(3).any(|w| w == b"two"));
    assert!(with_payload, "the echoed data did not reach AF_XDP");
    drop(rx);
    // The server retransmits; now the kernel gets it.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut s, &mut buf).expect("the retransmitted echo");
    assert_eq!(&buf[..n], b"two");
    eprintln!(
        "open connection from {sport}: data to the kernel with SynAckOrRst, to AF_XDP with All"
    );
}

/// A connection from a port the kernel picks (bound first, so the port is known even when the
/// connection fails), giving up after `timeout`.
fn connect_ephemeral(remote: SocketAddrV4, timeout: Duration) -> (u16, nix::Result<TcpStream>) {
    let fd: OwnedFd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("a socket");
    let any = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    socket::bind(fd.as_raw_fd(), &any).expect("bind to an ephemeral port");
    let me: SockaddrIn = socket::getsockname(fd.as_raw_fd()).expect("getsockname");
    let tv = TimeVal::milliseconds(timeout.as_millis() as i64);
    socket::setsockopt(&fd, sockopt::SendTimeout, &tv).expect("SO_SNDTIMEO");
    let res = socket::connect(fd.as_raw_fd(), &SockaddrIn::from(remote)).map(|()| fd.into());
    (me.port(), res)
}

/// Those of `ports` whose TCP sockets (in this thread's namespace) are still closing: in
/// CLOSE_WAIT or LAST_ACK.
fn half_closed(ports: &[u16]) -> Vec<u16> {
    let table = std::fs::read_to_string("/proc/thread-self/net/tcp").expect("reading net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1)?;
            let state = cols.nth(1)?;
            let port = u16::from_str_radix(local.split(':').nth(1)?, 16).ok()?;
            // 08: CLOSE_WAIT, 09: LAST_ACK
            (ports.contains(&port) && matches!(state, "08" | "09")).then_some(port)
        })
        .collect()
}

/// An echo server on ECHO_PORT in namespace `net_ns`, in a thread of its own, for one
/// connection; it stops by itself after 30 s at most.
fn echo_server(net_ns: &str) -> std::thread::JoinHandle<()> {
    let path = format!("/run/netns/{net_ns}");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).expect("the lab's net namespace");
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let listener = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT))
            .expect("listening in the lab");
        listener.set_nonblocking(true).unwrap();
        ready_tx.send(()).unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("no connection to the echo server: {e}"),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 64];
        while Instant::now() < end {
            match std::io::Read::read(&mut conn, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => std::io::Write::write_all(&mut conn, &buf[..n]).expect("echo"),
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the echo server did not start");
    server
}
