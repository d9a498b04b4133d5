//! Brings real labs up and down (needs root, `ip` and `nft`; otherwise each
//! test prints a skip line and passes). Every packet here goes from a lab's
//! scanner namespace to its own population in 198.18.0.0/15 (or 2001:2::/48);
//! every lab gets a
//! unique name and is removed by a guard, also when a test panics.

use std::io::ErrorKind;
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpStream, UdpSocket,
};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    recv, recvfrom, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, SockFlag,
    SockProtocol, SockType, SockaddrIn, SockaddrIn6,
};
use nix::sys::time::TimeVal;
use sonde_lab::{LabConfig, LabStatus, Sink};

const SERVER: &str = env!("CARGO_BIN_EXE_sonde-lab-serve");

fn can_run() -> bool {
    let tool_ok = |tool: &str, arg: &str| {
        let s = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        s.map(|s| s.success()).unwrap_or(false)
    };
    let ok = nix::unistd::geteuid().is_root() && tool_ok("ip", "-V") && tool_ok("nft", "-v");
    if !ok {
        eprintln!("skipped: needs root, ip (iproute2) and nft (nftables)");
    }
    ok
}

/// A lab name unique to this process and call, within the 20-character limit.
fn unique_name(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{}-{}{tag}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Takes the lab down when dropped, so a failing test leaves nothing behind.
struct Guard(String);

impl Drop for Guard {
    fn drop(&mut self) {
        if sonde_lab::list().contains(&self.0) {
            if let Err(e) = sonde_lab::down(&self.0) {
                eprintln!("cleanup of lab {} failed: {e}", self.0);
            }
        }
    }
}

fn assert_gone(name: &str) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains(&format!("sonde-{name}-")),
        "namespaces left: {text}"
    );
    assert!(!sonde_lab::list().contains(&name.to_string()));
}

/// Runs `f` on a thread that has entered the lab's scanner namespace.
fn in_scan<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            sonde_lab::enter_scan_ns(name).unwrap();
            assert_eq!(sonde_lab::current_lab().as_deref(), Some(name));
            f()
        })
        .join()
        .unwrap()
    })
}

/// One ICMP or ICMPv6 echo over a raw socket (the `ping` program may not be
/// installed): true if the reply comes within a second.
fn ping(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => ping4(a),
        IpAddr::V6(a) => ping6(a),
    }
}

fn ping4(addr: Ipv4Addr) -> bool {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Icmp,
    )
    .unwrap();
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000)).unwrap();
    let id = (std::process::id() as u16).to_be_bytes();
    let mut pkt = [
        8, 0, 0, 0, id[0], id[1], 0, 1, b's', b'o', b'n', b'd', b'e', 0, 0, 0,
    ];
    let sum = checksum(&pkt).to_be_bytes();
    pkt[2..4].copy_from_slice(&sum);
    let to = SockaddrIn::from(SocketAddrV4::new(addr, 0));
    sendto(fd.as_raw_fd(), &pkt, &to, MsgFlags::empty()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let Ok(n) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
            continue;
        };
        let ihl = usize::from(buf[0] & 0x0f) * 4;
        let src = Ipv4Addr::new(buf[12], buf[13], buf[14], buf[15]);
        let icmp = &buf[ihl..n];
        if src == addr && icmp.len() >= 8 && icmp[0] == 0 && icmp[4..6] == id {
            return true;
        }
    }
    false
}

/// ICMPv6 echo: the kernel fills in the checksum of raw ICMPv6 sockets, and
/// what they receive starts at the ICMPv6 header.
fn ping6(addr: Ipv6Addr) -> bool {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::IcmpV6,
    )
    .unwrap();
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000)).unwrap();
    let id = (std::process::id() as u16).to_be_bytes();
    let pkt = [
        128, 0, 0, 0, id[0], id[1], 0, 1, b's', b'o', b'n', b'd', b'e', 0, 0, 0,
    ];
    let to = SockaddrIn6::from(SocketAddrV6::new(addr, 0, 0, 0));
    sendto(fd.as_raw_fd(), &pkt, &to, MsgFlags::empty()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let Ok((n, Some(from))) = recvfrom::<SockaddrIn6>(fd.as_raw_fd(), &mut buf) else {
            continue;
        };
        let icmp = &buf[..n];
        if from.ip() == addr && icmp.len() >= 8 && icmp[0] == 129 && icmp[4..6] == id {
            return true;
        }
    }
    false
}

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(c[1]))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// "synack", "rst" or "none": what a TCP connect to addr:port meets.
fn connect(addr: IpAddr, port: u16) -> &'static str {
    let to = SocketAddr::new(addr, port);
    match TcpStream::connect_timeout(&to, Duration::from_millis(700)) {
        Ok(_) => "synack",
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => "rst",
        Err(_) => "none",
    }
}

/// The lab's truth as (addr, port, answer) rows.
fn truth_rows(name: &str, ports: Option<&[u16]>) -> Vec<(IpAddr, u16, String)> {
    let mut out = Vec::new();
    let n = sonde_lab::truth(name, ports, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("addr,port,answer,service"));
    let rows: Vec<_> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
            )
        })
        .collect();
    assert_eq!(rows.len() as u64, n);
    rows
}

fn check_status(st: &LabStatus, name: &str) {
    assert_eq!(st.name, name);
    assert_eq!(st.scan_ns, format!("sonde-{name}-scan"));
    assert_eq!(st.net_ns, format!("sonde-{name}-net"));
    assert_eq!((st.scan_if.as_str(), st.net_if.as_str()), ("sx0", "nx0"));
    assert_eq!(st.scan_ip, Ipv4Addr::new(198, 19, 255, 1));
    assert_eq!(st.gateway_ip, Ipv4Addr::new(198, 19, 255, 254));
    for mac in [&st.scan_mac, &st.gateway_mac] {
        assert_eq!(mac.len(), 17, "{mac}");
        assert_eq!(mac.matches(':').count(), 5, "{mac}");
    }
    assert_eq!(sonde_lab::status(name).unwrap(), *st);
}

#[test]
fn kernel_sink_answers_as_the_truth_says() {
    if !can_run() {
        return;
    }
    let name = unique_name("k");
    let guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.7.0/26".parse().unwrap(),
        responsive: 0.5,
        tcp_open: vec![80],
        seed: 42,
        ..LabConfig::default()
    };
    let server = [SERVER.to_string()];
    let st = sonde_lab::up(&cfg, &server).unwrap();
    check_status(&st, &name);
    assert!(st.server_pid.is_some());
    assert_eq!(st.population, "198.18.7.0/26");
    assert!(sonde_lab::list().contains(&name));

    let again = sonde_lab::up(&cfg, &server).unwrap_err().to_string();
    assert!(again.contains("already exists"), "{again}");
    assert_eq!(
        sonde_lab::status(&name).unwrap(),
        st,
        "a failed second up changed the lab"
    );

    let rows = truth_rows(&name, Some(&[0, 80, 22]));
    let echo: Vec<IpAddr> = rows.iter().filter(|r| r.2 == "echo").map(|r| r.0).collect();
    assert_eq!(echo.len() as u64, st.responsive_count);
    let silent = rows
        .iter()
        .find(|r| r.1 == 0 && r.2 == "none")
        .expect("a silent address")
        .0;
    let (on, off) = (echo[0], silent);

    assert_eq!(sonde_lab::current_lab(), None);
    let run = |argv: &[&str]| {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        sonde_lab::exec(&name, &argv).unwrap().code()
    };
    assert_eq!(run(&["sh", "-c", "exit 3"]), Some(3));
    assert_eq!(
        run(&["sh", "-c", "ip -o link show sx0 >/dev/null"]),
        Some(0)
    );

    let before = sonde_lab::received(&name).unwrap();
    let sent_before = sonde_lab::scan_counters(&name).unwrap().tx_packets;
    let seen = in_scan(&name, || {
        [
            (on, 0, if ping(on) { "echo" } else { "none" }),
            (off, 0, if ping(off) { "echo" } else { "none" }),
            (on, 80, connect(on, 80)),
            (on, 22, connect(on, 22)),
            (off, 80, connect(off, 80)),
        ]
    });
    for (addr, port, got) in seen {
        let want = rows.iter().find(|r| r.0 == addr && r.1 == port).unwrap();
        assert_eq!(got, want.2, "{addr} port {port}");
    }
    assert!(sonde_lab::received(&name).unwrap() > before);
    assert!(sonde_lab::scan_counters(&name).unwrap().tx_packets > sent_before);
    assert!(sonde_lab::net_counters(&name).unwrap().tx_packets > 0);

    sonde_lab::down(&name).unwrap();
    assert_gone(&name);
    let missing = sonde_lab::down(&name).unwrap_err().to_string();
    assert!(missing.contains("does not exist"), "{missing}");
    drop(guard);
}

#[test]
fn ipv6_population_answers_as_the_truth_says() {
    if !can_run() {
        return;
    }
    let name = unique_name("6");
    let _guard = Guard(name.clone());
    let seed = 42;
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.8.0/29".parse().unwrap(),
        population6: Some("2001:2::/120".parse().unwrap()),
        responsive: 0.5,
        tcp_open: vec![80],
        seed,
        ..LabConfig::default()
    };
    let server = [SERVER.to_string()];
    let st = sonde_lab::up(&cfg, &server).unwrap();
    check_status(&st, &name);
    assert_eq!(st.population6.as_deref(), Some("2001:2::/120"));
    assert_eq!(st.scan_ip6, Some("2001:2:0:ffff::1".parse().unwrap()));
    assert_eq!(st.gateway_ip6, Some("2001:2:0:ffff::fe".parse().unwrap()));

    // Truth: the 8 IPv4 addresses, then the 256 IPv6 ones ascending.
    let rows = truth_rows(&name, Some(&[0, 80, 22]));
    assert_eq!(rows.len(), 3 * (8 + 256));
    // Both populations count among the addresses that answer.
    let echo = rows.iter().filter(|r| r.2 == "echo").count();
    assert_eq!(st.responsive_count, echo as u64);
    assert!(rows.iter().any(|r| r.0.is_ipv6() && r.2 == "echo"));
    let v6: Vec<_> = rows[3 * 8..].iter().collect();
    assert!(rows[..3 * 8].iter().all(|r| r.0.is_ipv4()));
    for (i, chunk) in v6.chunks(3).enumerate() {
        let addr =
            Ipv6Addr::from(u128::from(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0)) + i as u128);
        let on = sonde_lab::is_responsive6(seed, addr, 0.5);
        let want = if on {
            ["echo", "synack", "rst"]
        } else {
            ["none", "none", "none"]
        };
        for (row, (port, answer)) in chunk
            .iter()
            .zip([(0, want[0]), (80, want[1]), (22, want[2])])
        {
            assert_eq!(
                (row.0, row.1, row.2.as_str()),
                (IpAddr::V6(addr), port, answer)
            );
        }
    }
    let pick = |answer: &str, n: usize| -> Vec<IpAddr> {
        v6.iter()
            .filter(|r| r.1 == 0 && r.2 == answer)
            .map(|r| r.0)
            .take(n)
            .collect()
    };
    let (on, off) = (pick("echo", 3), pick("none", 2));
    assert_eq!((on.len(), off.len()), (3, 2), "share 0.5 of 256 has both");
    let on4 = rows.iter().find(|r| r.1 == 0 && r.2 == "echo").map(|r| r.0);

    let seen = in_scan(&name, || {
        let mut seen = Vec::new();
        for &a in &on {
            seen.push((a, 0, if ping(a) { "echo" } else { "none" }));
        }
        for &a in &off {
            seen.push((a, 0, if ping(a) { "echo" } else { "none" }));
        }
        seen.push((on[0], 80, connect(on[0], 80)));
        seen.push((on[1], 22, connect(on[1], 22)));
        seen.push((off[0], 80, connect(off[0], 80)));
        // IPv4 still answers as before in the same lab.
        if let Some(a) = on4 {
            seen.push((a, 80, connect(a, 80)));
        }
        seen
    });
    for (addr, port, got) in seen {
        let want = rows.iter().find(|r| r.0 == addr && r.1 == port).unwrap();
        assert_eq!(got, want.2, "{addr} port {port}");
    }

    sonde_lab::down(&name).unwrap();
    assert_gone(&name);
}

#[test]
fn drop_sink_counts_what_it_drops() {
    if !can_run() {
        return;
    }
    let name = unique_name("d");
    let _guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.9.0/28".parse().unwrap(),
        responsive: 1.0,
        tcp_open: vec![],
        sink: Sink::Drop,
        ..LabConfig::default()
    };
    let st = sonde_lab::up(&cfg, &[]).unwrap();
    check_status(&st, &name);
    assert_eq!(st.server_pid, None);
    let mode = st.xdp_mode.clone().expect("xdp mode recorded");
    assert!(mode == "xdpdrv" || mode == "xdpgeneric", "{mode}");

    const N: u64 = 1000;
    let before = sonde_lab::net_counters(&name).unwrap();
    let answered = in_scan(&name, || {
        let udp = UdpSocket::bind("198.19.255.1:0").unwrap();
        for i in 0..N {
            udp.send_to(b"sonde", (Ipv4Addr::new(198, 18, 9, (i % 16) as u8), 9))
                .unwrap();
        }
        ping(Ipv4Addr::new(198, 18, 9, 1).into())
    });
    assert!(!answered, "the drop sink let an echo request through");
    let after = sonde_lab::net_counters(&name).unwrap();
    let received = sonde_lab::received(&name).unwrap();
    assert_eq!(received, after.rx_packets);
    // N datagrams and the echo request, all counted though all dropped.
    assert!(received - before.rx_packets > N, "{before:?} -> {after:?}");
    if mode == "xdpdrv" {
        assert!(
            after.xdp_drops - before.xdp_drops > N,
            "{before:?} -> {after:?}"
        );
    }
}

#[test]
fn failed_up_leaves_nothing() {
    if !can_run() {
        return;
    }
    let name = unique_name("f");
    let _guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        tcp_open: vec![80],
        ..LabConfig::default()
    };
    // A server that exits at once: up gets far, then must undo it all.
    let e = sonde_lab::up(&cfg, &["false".to_string()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("exited") && e.contains("removed"), "{e}");
    assert_gone(&name);

    let outside = LabConfig {
        population: "10.0.0.0/24".parse().unwrap(),
        ..cfg
    };
    let e = sonde_lab::up(&outside, &[]).unwrap_err().to_string();
    assert!(e.contains("outside 198.18.0.0/15"), "{e}");
    assert_gone(&name);

    let e = sonde_lab::down(&unique_name("m")).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
    assert!(sonde_lab::status(&unique_name("m")).is_err());
}

#[test]
fn down_cleans_up_after_a_crash_half_way() {
    if !can_run() {
        return;
    }
    let name = unique_name("c");
    let _guard = Guard(name.clone());
    // What a crash after the first steps of `up` leaves: namespaces, no state.
    for ns in [format!("sonde-{name}-scan"), format!("sonde-{name}-net")] {
        assert!(Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap()
            .success());
    }
    assert!(sonde_lab::list().contains(&name));
    let e = sonde_lab::status(&name).unwrap_err().to_string();
    assert!(e.contains("half-made"), "{e}");
    sonde_lab::down(&name).unwrap();
    assert_gone(&name);
}

/// Sends `n` ICMP echo requests to `addr` at once (sequence numbers 0..n) and counts the
/// distinct replies that arrive within a second of the last.
fn ping_burst(addr: Ipv4Addr, n: u16) -> usize {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Icmp,
    )
    .unwrap();
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000)).unwrap();
    let id = (std::process::id() as u16 ^ 0x5a5a).to_be_bytes();
    let to = SockaddrIn::from(SocketAddrV4::new(addr, 0));
    for seq in 0..n {
        let s = seq.to_be_bytes();
        let mut pkt = [8, 0, 0, 0, id[0], id[1], s[0], s[1], b'l', b'o', b's', b's'];
        let sum = checksum(&pkt).to_be_bytes();
        pkt[2..4].copy_from_slice(&sum);
        sendto(fd.as_raw_fd(), &pkt, &to, MsgFlags::empty()).unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut buf = [0u8; 1500];
    while Instant::now() < deadline {
        let Ok(len) = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
            continue;
        };
        let ihl = usize::from(buf[0] & 0x0f) * 4;
        let icmp = &buf[ihl..len];
        if icmp.len() >= 8 && icmp[0] == 0 && icmp[4..6] == id {
            seen.insert(u16::from_be_bytes([icmp[6], icmp[7]]));
        }
    }
    seen.len()
}

/// The counter of the nftables rule with `comment` in the lab's net namespace.
fn nft_counter(name: &str, comment: &str) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("sonde-{name}-net"),
            "nft",
            "list",
            "ruleset",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(&format!("comment \"{comment}\"")))
        .unwrap_or_else(|| panic!("no rule {comment:?} in:\n{text}"));
    let after = line.split("counter packets ").nth(1).unwrap();
    after.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn loss_drops_both_ways() {
    if !can_run() {
        return;
    }
    let name = unique_name("l");
    let _guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.10.0/28".parse().unwrap(),
        responsive: 1.0,
        tcp_open: vec![],
        loss: 0.3,
        ..LabConfig::default()
    };
    sonde_lab::up(&cfg, &[]).unwrap();
    const PINGS: u16 = 200;
    let answered = in_scan(&name, || ping_burst(Ipv4Addr::new(198, 18, 10, 3), PINGS));
    let (to, from) = (nft_counter(&name, "loss"), nft_counter(&name, "loss_out"));
    let answered_in = nft_counter(&name, "answered");
    eprintln!("{answered} of {PINGS} answered; lost {to} requests and {from} replies");
    // Every request either was lost on the way in or reached the kernel …
    assert_eq!(to + answered_in, u64::from(PINGS));
    // … and every reply it sent either was lost on the way out or came back.
    assert_eq!(answered_in, from + answered as u64);
    assert!(to > 0 && from > 0, "loss in one direction only");
    // The lost replies went to the sink interface, which counts them as dropped.
    let out = Command::new("ip")
        .args([
            "-n",
            &format!("sonde-{name}-net"),
            "-j",
            "-s",
            "link",
            "show",
            "lz0",
        ])
        .output()
        .unwrap();
    let link: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(link[0]["stats64"]["tx"]["dropped"], from);
}

#[test]
fn down_stops_the_servers_even_when_the_namespace_lost_its_name() {
    if !can_run() {
        return;
    }
    let name = unique_name("s");
    let _guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.11.0/28".parse().unwrap(),
        responsive: 1.0,
        tcp_open: vec![8080],
        silent_share: 0.5,
        ..LabConfig::default()
    };
    let st = sonde_lab::up(&cfg, &[SERVER.to_string()]).unwrap();
    assert!(st.silent_count > 0 && st.silent_count < 16, "{st:?}");
    let pids = [st.server_pid.unwrap(), st.silent_pid.unwrap()];
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
    };
    assert!(pids.iter().all(|p| running(*p)));
    // Someone removes the namespace's name by hand: its processes keep it alive, unnamed.
    assert!(Command::new("ip")
        .args(["netns", "del", &format!("sonde-{name}-net")])
        .status()
        .unwrap()
        .success());
    sonde_lab::down(&name).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| running(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pids.iter().any(|p| running(*p)), "a server outlived down");
    assert_gone(&name);
}

/// Whether process `pid` still runs (a zombie has ended).
fn still_runs(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    matches!(state, Some(s) if s != "Z" && s != "X")
}

/// A process left in the scanner namespace (an intercept, a shell of `lab exec`, run as any
/// user) used to outlive `down`: the namespace lost its name, and the process went on in it
/// with its rules and programs, where nothing could find it. `down` ends it, as it ends the
/// net namespace's.
#[test]
fn down_ends_what_runs_in_the_scanner_namespace() {
    if !can_run() {
        return;
    }
    let name = unique_name("p");
    let _guard = Guard(name.clone());
    let cfg = LabConfig {
        name: name.clone(),
        population: "198.18.9.0/29".parse().unwrap(),
        ..LabConfig::default()
    };
    sonde_lab::up(&cfg, &[SERVER.to_string()]).unwrap();
    let scan_ns = format!("sonde-{name}-scan");
    let mut left = Command::new("ip")
        .args(["netns", "exec", &scan_ns, "runuser", "-u", "nobody", "--"])
        .args(["sleep", "300"])
        .spawn()
        .unwrap();
    let pid = left.id();
    let deadline = Instant::now() + Duration::from_secs(5);
    let in_ns = || {
        let out = Command::new("ip")
            .args(["netns", "pids", &scan_ns])
            .output();
        let pids = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
        pids.split_whitespace().count() > 0
    };
    while !in_ns() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(in_ns(), "nothing runs in {scan_ns}");
    sonde_lab::down(&name).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while left.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = left.try_wait().unwrap().is_some();
    if !ended {
        let _ = left.kill();
        let _ = left.wait();
    }
    assert!(
        ended && !still_runs(pid),
        "down left a process of {scan_ns} running"
    );
    assert_gone(&name);
}
