//! `sonde grab` with ICMP errors on the path (issue 19 item 8), against the lab's kernel:
//! - targets whose SYNs the lab rejects (nftables `reject with icmp type host-unreachable`,
//!   `icmpv6 type addr-unreachable`) end at once as `unreachable` rows with that type and code,
//!   over both receive paths (AF_XDP behind sonde's XDP filter, and a packet ring behind its
//!   classic BPF filter), before any SYN retry; one row per target, the rest scoring as before;
//! - a request too big for the path (the lab drops its packets over 1280 bytes and says so, as
//!   a router with a 1280-byte link would: fragmentation needed, or Packet Too Big over IPv6)
//!   gets through: sonde lowers the connection's MSS and resends in segments that fit, as the
//!   lab side sees on its own end of the link.
//!
//! Needs root; each lab has a unique name and is removed by its guard, also on failure. Every
//! packet stays in the lab's namespaces, to lab addresses.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    self, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType, SockaddrIn,
    SockaddrIn6,
};
use nix::sys::time::{TimeVal, TimeValLike};

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab};

/// Sources of the packet-ring runs: addresses of the link the scanner's kernel does not own.
const RING_SRC: &str = "198.19.255.2";
const RING_SRC6: &str = "2001:2:0:ffff::2";
/// The link MTU the lab plays a router of, and the request that does not fit it.
const PATH_MTU: usize = 1280;
const REQUEST_LEN: usize = 1400;

fn json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn rows(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `sonde grab --lab L ARGS -q -r 0`.
fn grab(lab: &Lab, args: &[&str]) -> std::process::Output {
    let mut all = vec!["grab", "--lab", &lab.name, "-q", "-r", "0"];
    all.extend_from_slice(args);
    sonde(&all)
}

fn net_ns(lab: &Lab) -> String {
    format!("sonde-{}-net", lab.name)
}

/// Loads an nftables script into the lab's net namespace (its tables go with the namespace).
fn nft(lab: &Lab, script: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &net_ns(lab), "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "nft: {}\n{script}", stderr(&out));
}

/// Lets the lab reach RING_SRC6 (sonde answers ARP for a ring's IPv4 source, not neighbour
/// discovery): a permanent neighbour entry for it, at the scanner's MAC.
fn lab_knows_ring_src6(lab: &Lab) {
    let scan_ns = format!("sonde-{}-scan", lab.name);
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &scan_ns,
            "cat",
            "/sys/class/net/sx0/address",
        ])
        .output()
        .unwrap();
    let mac = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(mac.len(), 17, "the scanner's MAC: {mac:?}");
    let ns = net_ns(lab);
    let status = Command::new("ip")
        .args([
            "-n", &ns, "-6", "neigh", "replace", RING_SRC6, "lladdr", &mac,
        ])
        .args(["dev", "nx0", "nud", "permanent"])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn rejected_targets_end_unreachable_at_once_on_both_receive_paths() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--population6",
        "2001:2::/120",
        "--responsive",
        "0.5",
        "--http",
        "--tcp-open",
        "80",
    ]);
    let live: Vec<IpAddr> = lab
        .truth(&["--ports", "80"])
        .iter()
        .filter(|r| r[1] == "80" && r[2] == "synack")
        .map(|r| r[0].parse().unwrap())
        .collect();
    // Some live hosts of each family reject every TCP segment with an ICMP error, as a
    // firewall in front of them would.
    let v4: Vec<IpAddr> = live
        .iter()
        .filter(|a| a.is_ipv4())
        .take(6)
        .copied()
        .collect();
    let v6: Vec<IpAddr> = live
        .iter()
        .filter(|a| a.is_ipv6())
        .take(4)
        .copied()
        .collect();
    assert_eq!((v4.len(), v6.len()), (6, 4), "live hosts: {live:?}");
    let list = |addrs: &[IpAddr]| {
        addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    nft(
        &lab,
        &format!(
            "table inet sonde_reject {{\n\
             chain input {{ type filter hook input priority -10; policy accept;\n\
             ip daddr {{ {} }} meta l4proto tcp reject with icmp type host-unreachable\n\
             ip6 daddr {{ {} }} meta l4proto tcp reject with icmpv6 type addr-unreachable\n\
             }}\n}}\n",
            list(&v4),
            list(&v6)
        ),
    );
    // (type, code) each rejected target's row must carry.
    let rejected: HashMap<String, (u64, u64)> = v4
        .iter()
        .map(|a| (a.to_string(), (3, 1)))
        .chain(v6.iter().map(|a| (a.to_string(), (1, 3))))
        .collect();
    lab_knows_ring_src6(&lab);
    let targets = 256 + 256;
    for (backend, extra) in [
        ("xdp", vec![]),
        ("ring", vec!["-S", RING_SRC, "--source-ip6", RING_SRC6]),
    ] {
        // The whole population.
        let (out_file, summary) = (
            lab.file(&format!("{backend}.ndjson")),
            lab.file(&format!("{backend}.json")),
        );
        let mut args = vec![
            "198.18.0.0/24",
            "2001:2::/120",
            "-p",
            "80",
            "--backend",
            backend,
            "--first-byte-timeout",
            "2",
            "-o",
            &out_file,
            "--summary-json",
            &summary,
        ];
        args.extend_from_slice(&extra);
        let out = grab(&lab, &args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let rows = rows(&out_file);
        let seen: HashSet<String> = rows.iter().map(|r| r["saddr"].to_string()).collect();
        assert_eq!(
            (rows.len(), seen.len()),
            (targets, targets),
            "{backend}: one row each"
        );
        let mut unreachable = HashMap::new();
        for r in &rows {
            let addr = r["saddr"].as_str().unwrap().to_string();
            if r["status"] == "unreachable" {
                let code = (
                    r["icmp_type"].as_u64().unwrap(),
                    r["icmp_code"].as_u64().unwrap(),
                );
                unreachable.insert(addr, code);
            } else {
                assert!(r["icmp_type"].is_null() && r["icmp_code"].is_null(), "{r}");
                assert!(!rejected.contains_key(&addr), "{backend}: {r}");
            }
        }
        assert_eq!(unreachable, rejected, "{backend}: the unreachable rows");
        let s = json(&summary);
        assert_eq!(s["unreachable"], rejected.len() as u64, "{backend}: {s}");
        // Every other live host is grabbed as before, body for body.
        let score = lab.score(&[&out_file]);
        eprintln!("{backend}: {score}");
        let (done, live_scored, correct, wrong, fp) = grab_score(&score);
        assert_eq!(live_scored, live.len() as u64, "{score}");
        assert_eq!(
            done,
            live_scored - rejected.len() as u64,
            "{backend}: {score}"
        );
        assert_eq!((correct, wrong, fp), (done, 0, 0), "{backend}: {score}");

        // Only the rejected targets: each row comes before the first SYN retry (1 s), which
        // never leaves.
        let (only, only_summary) = (
            lab.file(&format!("{backend}-rejected.ndjson")),
            lab.file(&format!("{backend}-rejected.json")),
        );
        let addrs: Vec<String> = rejected.keys().cloned().collect();
        let mut args: Vec<&str> = addrs.iter().map(String::as_str).collect();
        args.extend_from_slice(&["-p", "80", "--backend", backend]);
        args.extend_from_slice(&["-o", &only, "--summary-json", &only_summary]);
        args.extend_from_slice(&extra);
        let out = grab(&lab, &args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let rows = self::rows(&only);
        assert_eq!(rows.len(), rejected.len(), "{backend}");
        assert!(
            rows.iter().all(|r| r["status"] == "unreachable"),
            "{rows:?}"
        );
        let s = json(&only_summary);
        assert_eq!(s["syn_retransmitted"], 0, "{backend}: {s}");
        assert_eq!(s["unreachable"], rejected.len() as u64, "{backend}: {s}");
    }
}

/// A data segment from the scanner to the target, as the lab saw it arrive.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The IP packet's length: what the path's MTU bounds.
    ip_len: usize,
    seq: u32,
    len: usize,
}

/// The IP packet of an Ethernet frame from the scanner to `target`:80 carrying TCP data: the
/// packet's bytes (to quote) and what was seen.
fn data_to(frame: &[u8], target: IpAddr) -> Option<(&[u8], Seen)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    let (dst, ip_len, header_len, tcp_protocol): (IpAddr, usize, usize, bool) = match ethertype {
        0x0800 => {
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            let dst = Ipv4Addr::from(dst);
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            (dst.into(), total, usize::from(ip[0] & 0x0f) * 4, ip[9] == 6)
        }
        0x86dd => {
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            (Ipv6Addr::from(dst).into(), 40 + payload, 40, ip[6] == 6)
        }
        _ => return None,
    };
    let tcp = ip.get(header_len..ip_len)?;
    let dport = u16::from_be_bytes([*tcp.get(2)?, *tcp.get(3)?]);
    if dst != target || !tcp_protocol || dport != 80 {
        return None;
    }
    let seq = u32::from_be_bytes(tcp.get(4..8)?.try_into().ok()?);
    let len = tcp.len().checked_sub(usize::from(tcp.get(12)? >> 4) * 4)?;
    (len > 0).then_some((&ip[..ip_len], Seen { ip_len, seq, len }))
}

/// The ICMP error a router with a PATH_MTU link sends about `packet` (an IPv4 or IPv6 packet
/// it could not forward): fragmentation needed (with its checksum) or Packet Too Big (the
/// kernel fills in an ICMPv6 socket's checksum), quoting as much of it as a router does.
fn too_big_about(packet: &[u8], v6: bool) -> Vec<u8> {
    let mut message = if v6 {
        let mut m = vec![2, 0, 0, 0];
        m.extend_from_slice(&(PATH_MTU as u32).to_be_bytes());
        m
    } else {
        let mut m = vec![3, 4, 0, 0, 0, 0];
        m.extend_from_slice(&(PATH_MTU as u16).to_be_bytes());
        m
    };
    let quote = if v6 { PATH_MTU - 48 } else { 576 - 28 };
    message.extend_from_slice(&packet[..packet.len().min(quote)]);
    if !v6 {
        let sum = checksum(&message);
        message[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    message
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

/// What the lab's router side saw: the data segments in order, and the index of the first
/// one seen after its ICMP error left.
type RouterResult = Result<(Vec<Seen>, Option<usize>), String>;

/// The lab playing a router with a PATH_MTU link in front of `target`: in the lab's net
/// namespace, a packet socket watches the data segments arriving for `target`:80 (the lab's
/// nftables drops those over PATH_MTU) and the first one too big gets the ICMP error about it,
/// sent to its source with a raw socket. Runs until `stop` (60 s at most); returns the data
/// segments seen, in order, and the index of the first one seen after the error left.
fn lab_router(
    lab: String,
    target: IpAddr,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<()>,
) -> std::thread::JoinHandle<RouterResult> {
    std::thread::spawn(move || {
        sonde_lab::enter_net_ns(&lab).map_err(|e| e.to_string())?;
        let watch = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(|e| format!("a packet socket: {e}"))?;
        let tv = TimeVal::milliseconds(100);
        socket::setsockopt(&watch, sockopt::ReceiveTimeout, &tv).map_err(|e| e.to_string())?;
        let v6 = target.is_ipv6();
        let (family, protocol) = if v6 {
            (AddressFamily::Inet6, SockProtocol::IcmpV6)
        } else {
            (AddressFamily::Inet, SockProtocol::Icmp)
        };
        let icmp = socket::socket(family, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol)
            .map_err(|e| format!("a raw ICMP socket: {e}"))?;
        ready.send(()).map_err(|e| e.to_string())?;
        let (mut seen, mut error_at) = (Vec::new(), None);
        let end = Instant::now() + Duration::from_secs(60);
        let mut buf = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) && Instant::now() < end {
            let Ok(n) = socket::recv(watch.as_raw_fd(), &mut buf, MsgFlags::empty()) else {
                continue;
            };
            let Some((packet, segment)) = data_to(&buf[..n], target) else {
                continue;
            };
            seen.push(segment);
            if error_at.is_some() || segment.ip_len <= PATH_MTU {
                continue;
            }
            let message = too_big_about(packet, v6);
            let sent = if v6 {
                let src: [u8; 16] = packet[8..24].try_into().unwrap();
                let to = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::from(src), 0, 0, 0));
                socket::sendto(icmp.as_raw_fd(), &message, &to, MsgFlags::empty())
            } else {
                let src = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
                let to = SockaddrIn::from(SocketAddrV4::new(src, 0));
                socket::sendto(icmp.as_raw_fd(), &message, &to, MsgFlags::empty())
            };
            sent.map_err(|e| format!("sending the ICMP error: {e}"))?;
            error_at = Some(seen.len());
        }
        Ok((seen, error_at))
    })
}

#[test]
fn a_request_too_big_for_the_path_gets_through_in_smaller_segments() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/28",
        "--population6",
        "2001:2::/124",
        "--responsive",
        "1",
        "--http",
        "--tcp-open",
        "80",
    ]);
    let (target, target6) = ("198.18.0.1", "2001:2::1");
    // The lab's end of the link drops what does not fit PATH_MTU, before its kernel sees it.
    nft(
        &lab,
        &format!(
            "table inet sonde_mtu {{\n\
             chain prerouting {{ type filter hook prerouting priority -400; policy accept;\n\
             ip daddr {target} tcp dport 80 ip length > {PATH_MTU} counter drop\n\
             ip6 daddr {target6} tcp dport 80 ip6 length > {} counter drop\n\
             }}\n}}\n",
            PATH_MTU - 40
        ),
    );
    lab_knows_ring_src6(&lab);
    // An HTTP request padded to REQUEST_LEN bytes: one segment at the lab's MSS of 1460.
    let head = "GET / HTTP/1.0\r\nHost: lab\r\nX-Pad: ";
    let pad = "p".repeat(REQUEST_LEN - head.len() - 4);
    let request = format!("{head}{pad}\r\n\r\n");
    assert_eq!(request.len(), REQUEST_LEN);
    let request_file = lab.file("request.bin");
    std::fs::write(&request_file, &request).unwrap();
    for (addr, backend, extra) in [
        (target, "xdp", vec![]),
        (target, "ring", vec!["-S", RING_SRC]),
        (target6, "xdp", vec![]),
        (
            target6,
            "ring",
            vec!["-S", RING_SRC, "--source-ip6", RING_SRC6],
        ),
    ] {
        let what = format!("{addr} over {backend}");
        let (out_file, summary) = (
            lab.file(&format!("mtu-{backend}-{}.ndjson", addr.len())),
            lab.file(&format!("mtu-{backend}-{}.json", addr.len())),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let router = lab_router(
            lab.name.clone(),
            addr.parse().unwrap(),
            stop.clone(),
            ready_tx,
        );
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the lab's router side did not start");
        let mut args = vec![
            addr,
            "-p",
            "80",
            "-M",
            "payload",
            "--payload-file",
            &request_file,
            "--backend",
            backend,
            "--first-byte-timeout",
            "5",
            "-o",
            &out_file,
            "--summary-json",
            &summary,
        ];
        args.extend_from_slice(&extra);
        let out = grab(&lab, &args);
        stop.store(true, Ordering::Relaxed);
        let (seen, error_at) = router.join().unwrap().unwrap();
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        eprintln!("{what}: the lab saw {seen:?}, the error after {error_at:?}");

        // The request went out whole first, too big: the lab said so.
        let error_at = error_at.unwrap_or_else(|| panic!("{what}: nothing too big: {seen:?}"));
        assert!(
            seen[0].ip_len > PATH_MTU && seen[0].len == REQUEST_LEN,
            "{seen:?}"
        );
        // Once segments fit the path, all do (a retransmission at the old size may have been
        // on its way before the error arrived), and together they carry the whole request.
        let first_fit = seen.iter().position(|s| s.ip_len <= PATH_MTU);
        let first_fit = first_fit.unwrap_or_else(|| panic!("{what}: none fits: {seen:?}"));
        assert!(first_fit >= error_at, "{what}: {seen:?}");
        let fitting = &seen[first_fit..];
        assert!(
            fitting.iter().all(|s| s.ip_len <= PATH_MTU),
            "{what}: {seen:?}"
        );
        let start = seen[0].seq;
        let mut covered = vec![false; REQUEST_LEN];
        for s in fitting {
            let from = s.seq.wrapping_sub(start) as usize;
            let to = (from + s.len).min(REQUEST_LEN);
            if let Some(span) = covered.get_mut(from..to) {
                span.fill(true);
            }
        }
        assert!(
            covered.iter().all(|&c| c),
            "{what}: not all resent: {seen:?}"
        );

        // And the server answered it: one row, a success with the lab's page.
        let rows = rows(&out_file);
        assert_eq!(rows.len(), 1, "{what}: {rows:?}");
        assert_eq!(rows[0]["status"], "success", "{what}: {}", rows[0]);
        let reply = hex_text(rows[0]["reply_hex"].as_str().unwrap());
        assert!(
            reply.contains(&format!("sonde lab {addr}")),
            "{what}: {reply}"
        );
        let s = json(&summary);
        assert_eq!(s["mss_lowered"], 1, "{what}: {s}");
    }
}

/// The text of hex-encoded bytes (lossy).
fn hex_text(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn the_lab_sees_what_the_path_lets_through() {
    // The helper that reads the lab's side parses frames exactly: a data segment to the
    // target's port 80, its IP length, and nothing else.
    let target: IpAddr = "198.18.0.1".parse().unwrap();
    let mut frame = vec![0u8; 14];
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 198, 19, 255, 1, 198, 18, 0, 1,
    ];
    let mut tcp = vec![0u8; 32];
    tcp[0..2].copy_from_slice(&61000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&7u32.to_be_bytes());
    tcp[12] = 8 << 4;
    let total = (20 + 32 + 100) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    frame.extend_from_slice(&ip);
    frame.extend_from_slice(&tcp);
    frame.extend_from_slice(&[0u8; 100]);
    let (packet, seen) = data_to(&frame, target).unwrap();
    assert_eq!(
        (packet.len(), seen.ip_len, seen.seq, seen.len),
        (152, 152, 7, 100)
    );
    assert!(data_to(&frame, "198.18.0.2".parse().unwrap()).is_none());
    assert!(data_to(&frame[..60], target).is_none(), "cut short");
    let message = too_big_about(packet, false);
    assert_eq!((message[0], message[1], checksum(&message)), (3, 4, 0));
    assert_eq!(
        u16::from_be_bytes([message[6], message[7]]),
        PATH_MTU as u16
    );
}
