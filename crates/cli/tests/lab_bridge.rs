//! The bridge lab (`sonde lab up --bridge`): A reaches B through mid's Linux bridge over IPv4
//! and IPv6; iperf3 on B passes data; the wire carries what a physical link carries (offloads
//! off on the hosts' ends, and a capture in mid sees only frames of at most 1514 bytes with
//! complete IPv4 and TCP checksums); `lab down` leaves no namespace and no iperf3; the population
//! options are refused with --bridge; and a half-made bridge lab is listed and removed. Every
//! packet goes from A's namespace to B's lab addresses (198.19.254.2, 2001:2:0:fe::2) and back.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use common::{can_run_labs, sonde, stderr, Lab};
use pcap_file::pcap::PcapReader;
use sonde_lab::bridge;

/// The tools this test runs besides `ip`; without one it says so and passes vacuously.
fn tools_present() -> bool {
    let missing: Vec<&str> = [
        ("iperf3", "--version"),
        ("ethtool", "--version"),
        ("ping", "-V"),
        ("tcpdump", "--version"),
        ("timeout", "--version"),
    ]
    .into_iter()
    .filter(|(tool, arg)| {
        Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
    })
    .map(|(tool, _)| tool)
    .collect();
    if !missing.is_empty() {
        eprintln!("skipping bridge lab test: {missing:?} missing (run scripts/setup)");
    }
    missing.is_empty()
}

/// `timeout SECS ip netns exec NS args…`, bounded so a hung tool cannot hang the test.
fn in_ns(ns: &str, secs: u32, args: &[&str]) -> Output {
    Command::new("timeout")
        .arg(secs.to_string())
        .args(["ip", "netns", "exec", ns])
        .args(args)
        .output()
        .expect("running ip netns exec")
}

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tcpdump in mid, killed on drop.
struct Capture(Child);

impl Capture {
    /// Captures the first `count` frames crossing `ifname` in `ns` into `file`; returns once
    /// tcpdump says it is listening.
    fn start(ns: &str, ifname: &str, file: &str, count: u32) -> Capture {
        let mut child = Command::new("timeout")
            .args([
                "20", "ip", "netns", "exec", ns, "tcpdump", "-n", "-i", ifname,
            ])
            .args(["-s", "262144", "-U", "-c", &count.to_string(), "-w", file])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tcpdump");
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening on"), "tcpdump: {line}");
        Capture(child)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The ones' complement sum of `bytes` (odd length padded with a zero byte), folded to 16 bits.
fn ones_sum(mut sum: u32, bytes: &[u8]) -> u32 {
    for pair in bytes.chunks(2) {
        let hi = u32::from(pair[0]) << 8;
        sum += hi | pair.get(1).copied().map_or(0, u32::from);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// Whether an Ethernet frame carrying IPv4 TCP has a correct IP header checksum and a correct,
/// complete TCP checksum; None if the frame is not IPv4 TCP.
fn ipv4_tcp_checksums_ok(frame: &[u8]) -> Option<bool> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[9] != 6 || ihl < 20 || total < ihl + 20 || total > ip.len() {
        return None;
    }
    let header_ok = ones_sum(0, &ip[..ihl]) == 0xffff;
    let segment = &ip[ihl..total];
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&ip[12..20]);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    let tcp_ok = ones_sum(ones_sum(0, &pseudo), segment) == 0xffff;
    Some(header_ok && tcp_ok)
}

#[test]
fn checksum_check_tells_good_from_bad() {
    // 198.19.254.1:5000 -> 198.19.254.2:5201 SYN, checksums computed by hand with ones_sum.
    let mut frame = vec![0u8; 14 + 20 + 20];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut frame[14..34];
    ip.copy_from_slice(&[
        0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 198, 19, 254, 1, 198, 19, 254, 2,
    ]);
    let c = !(ones_sum(0, ip) as u16);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let tcp = &mut frame[34..54];
    tcp.copy_from_slice(&[
        0x13, 0x88, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    let pseudo = [198, 19, 254, 1, 198, 19, 254, 2, 0, 6, 0, 20];
    let c = !(ones_sum(ones_sum(0, &pseudo), &frame[34..54]) as u16);
    frame[50..52].copy_from_slice(&c.to_be_bytes());
    assert_eq!(ipv4_tcp_checksums_ok(&frame), Some(true));
    // A partial checksum (the pseudo-header sum only, as with tx offload on) is not complete.
    let partial = ones_sum(0, &pseudo) as u16;
    frame[50..52].copy_from_slice(&partial.to_be_bytes());
    assert_eq!(ipv4_tcp_checksums_ok(&frame), Some(false));
    frame[12] = 0x86;
    assert_eq!(ipv4_tcp_checksums_ok(&frame), None);
}

/// Sizes of the frames in a pcap file, and how many were IPv4 TCP with good and bad checksums.
fn read_frames(path: &str) -> (Vec<u32>, usize, usize) {
    let mut reader = PcapReader::new(BufReader::new(File::open(path).unwrap())).unwrap();
    let (mut sizes, mut good, mut bad) = (Vec::new(), 0, 0);
    while let Some(raw) = reader.next_raw_packet() {
        let raw = raw.unwrap();
        sizes.push(raw.orig_len);
        assert_eq!(raw.orig_len as usize, raw.data.len(), "frame cut short");
        match ipv4_tcp_checksums_ok(&raw.data) {
            Some(true) => good += 1,
            Some(false) => bad += 1,
            None => {}
        }
    }
    (sizes, good, bad)
}

/// `iperf3 -c ADDR -p PORT -t SECS --json` from A: the report, after checking it succeeded.
fn iperf3_from_a(lab: &Lab, extra: &[&str], addr: &str, port: u16, secs: u32) -> serde_json::Value {
    let (port, t) = (port.to_string(), secs.to_string());
    let mut args = vec!["iperf3", "-c", addr, "-p", &port, "-t", &t, "--json"];
    args.extend_from_slice(extra);
    let out = in_ns(&bridge::a_ns(&lab.name), secs + 15, &args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 output is not JSON ({e}): {}", stderr(&out)));
    assert!(out.status.success(), "iperf3 failed: {report}");
    assert!(report.get("error").is_none(), "iperf3: {}", report["error"]);
    let end = &report["end"];
    let sent = end["sum_sent"]["bytes"].as_u64().unwrap();
    let received = end["sum_received"]["bytes"].as_u64().unwrap();
    assert!(
        received > 0 && sent >= received,
        "sent {sent}, received {received}"
    );
    eprintln!(
        "iperf3 {addr}:{port}: {:.2} Gbit/s received, {} retransmits",
        end["sum_received"]["bits_per_second"].as_f64().unwrap() / 1e9,
        end["sum_sent"]["retransmits"]
    );
    report
}

#[test]
fn bridge_lab_carries_what_a_physical_link_carries() {
    if !can_run_labs() || !tools_present() {
        return;
    }
    let lab = Lab::up(&["--bridge"]);
    let name = lab.name.clone();
    let (a, mid, b) = (
        bridge::a_ns(&name),
        bridge::mid_ns(&name),
        bridge::b_ns(&name),
    );
    let listed = netns_list();
    for ns in [&a, &mid, &b] {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns.as_str())),
            "{ns} missing: {listed}"
        );
    }
    let list = String::from_utf8_lossy(&sonde(&["lab", "list"]).stdout).into_owned();
    assert!(
        list.lines().any(|l| l == format!("{name} bridge")),
        "{list}"
    );
    let status = lab.status();
    assert_eq!(status["shape"], "bridge");
    assert_eq!(status["b_ip"], bridge::B_V4.to_string());
    assert_eq!(status["iperf_pids"].as_array().unwrap().len(), 4);

    // mid is a plain bridge with no address; A has no route but its link.
    let mid_addrs = in_ns(
        &mid,
        5,
        &["ip", "-j", "addr", "show", "dev", bridge::MID_BRIDGE],
    );
    let mid_addrs: serde_json::Value = serde_json::from_slice(&mid_addrs.stdout).unwrap();
    assert_eq!(
        mid_addrs[0]["addr_info"].as_array().map(Vec::len),
        Some(0),
        "{mid_addrs}"
    );
    let routes = String::from_utf8_lossy(&in_ns(&a, 5, &["ip", "route"]).stdout).into_owned();
    assert!(!routes.contains("default"), "{routes}");

    for (flag, addr) in [
        ("-4", bridge::B_V4.to_string()),
        ("-6", bridge::B_V6.to_string()),
    ] {
        let out = in_ns(
            &a,
            10,
            &["ping", flag, "-c", "3", "-i", "0.2", "-w", "5", &addr],
        );
        assert!(
            out.status.success(),
            "ping {addr} from A: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    for (ns, ifname) in [(&a, bridge::A_IF), (&b, bridge::B_IF)] {
        let out = in_ns(ns, 5, &["ethtool", "-k", ifname]);
        let text = String::from_utf8_lossy(&out.stdout);
        for feature in bridge::HOST_OFFLOADS {
            assert_eq!(
                bridge::offload_state(&text, feature),
                Some("off"),
                "{feature} on {ifname}"
            );
        }
    }

    // iperf3 over IPv4 while mid captures what crosses ma: every frame at most 1514 bytes (1500
    // and the Ethernet header), every TCP segment with its checksums complete.
    let pcap = lab.file("mid.pcap");
    let capture = Capture::start(&mid, bridge::MID_A_IF, &pcap, 3000);
    iperf3_from_a(&lab, &[], &bridge::B_V4.to_string(), 5201, 2);
    let mut capture = capture;
    let status = capture.0.wait().unwrap();
    assert!(
        status.success(),
        "tcpdump did not get 3000 frames in time: {status}"
    );
    let (sizes, good, bad) = read_frames(&pcap);
    assert_eq!(sizes.len(), 3000);
    let largest = sizes.iter().max().copied().unwrap();
    assert!(largest <= 1514, "a {largest}-byte frame crossed mid");
    assert!(
        sizes.contains(&1514),
        "no full-size frame in a bulk transfer: largest {largest}"
    );
    assert_eq!(
        bad, 0,
        "{bad} IPv4 TCP frames with incomplete checksums ({good} good)"
    );
    assert!(good >= 2900, "only {good} of 3000 frames were IPv4 TCP");

    // Another server, over IPv6.
    iperf3_from_a(&lab, &["-6"], &bridge::B_V6.to_string(), 5202, 1);

    let out = sonde(&["lab", "down", "--name", &name]);
    assert!(out.status.success(), "lab down: {}", stderr(&out));
    let listed = netns_list();
    assert!(
        !listed.contains(&format!("sonde-{name}-")),
        "namespaces left: {listed}"
    );
    let state_dir = format!("/run/sonde/lab/bridges/{name}/");
    assert!(
        !std::path::Path::new(&state_dir).exists(),
        "{state_dir} left"
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("iperf3") && c.contains(&state_dir))
        .collect();
    assert!(left.is_empty(), "iperf3 left running: {left:?}");
    let list = String::from_utf8_lossy(&sonde(&["lab", "list"]).stdout).into_owned();
    assert!(
        !list
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")) || l == name),
        "{list}"
    );
}

#[test]
fn bridge_refuses_population_options_and_removes_a_half_made_lab() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::named();
    let name = lab.name.clone();
    let out = sonde(&["lab", "up", "--name", &name, "--bridge", "--http"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--bridge") && err.contains("--http"), "{err}");
    assert!(!netns_list().contains(&format!("sonde-{name}-")));

    // What a crash half-way through `up` could leave: mid alone.
    let mid = bridge::mid_ns(&name);
    let made = Command::new("ip")
        .args(["netns", "add", &mid])
        .status()
        .unwrap();
    assert!(made.success());
    let list = String::from_utf8_lossy(&sonde(&["lab", "list"]).stdout).into_owned();
    assert!(
        list.lines().any(|l| l == format!("{name} bridge")),
        "{list}"
    );
    let out = sonde(&["lab", "status", "--name", &name]);
    assert!(
        !out.status.success() && stderr(&out).contains("half-made"),
        "{}",
        stderr(&out)
    );
    let out = sonde(&["lab", "down", "--name", &name]);
    assert!(out.status.success(), "lab down: {}", stderr(&out));
    assert!(!netns_list().contains(&mid), "{mid} left");
}
