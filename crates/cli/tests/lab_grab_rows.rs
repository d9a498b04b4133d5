//! `sonde grab` in the lab, on what real servers do outside it: one row per target when SYN-ACKs
//! come late or twice (loss makes the lab's kernel resend them), checksums verified on every
//! frame the lab sends (full checksums, as from a NIC: `lab up` turns transmit checksum offload
//! off on nx0), and a corrupted segment injected into the scanner's interface counted and not
//! delivered. Needs root; each lab has a unique name and is removed by its guard, also on
//! failure. Every frame stays in the lab's namespaces: the injector runs in the lab's network
//! namespace and writes to nx0, whose other end is the scanner's sx0.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sonde_io::{AnyRx, AnyTx, BackendKind, FrameRx, FrameTx, IoConfig};
use sonde_wire::{ethernet, ipv4, tcp, ChecksumMode, EtherType, IpPair, IpProtocol, TcpFlags};

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

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

/// `sonde grab --lab L -p 80 -q ARGS -o OUT --summary-json SUMMARY` (with `-r 0` unless ARGS
/// pace it): the rows (asserted one per target of `count`) and the summary.
fn grab(
    lab: &Lab,
    name: &str,
    count: usize,
    args: &[&str],
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let (out_file, summary) = (
        lab.file(&format!("{name}.ndjson")),
        lab.file(&format!("{name}.json")),
    );
    let mut all = vec!["grab", "--lab", &lab.name, "-p", "80", "-q"];
    if !args.contains(&"-r") {
        all.extend_from_slice(&["-r", "0"]);
    }
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", &out_file, "--summary-json", &summary, "--force"]);
    let out = sonde(&all);
    assert!(out.status.success(), "{name}: {}", stderr(&out));
    let rows = rows(&out_file);
    assert_one_row_per_target(name, &rows, count);
    (rows, json(&summary))
}

/// Exactly `count` rows, no target twice.
fn assert_one_row_per_target(name: &str, rows: &[serde_json::Value], count: usize) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in rows {
        *seen
            .entry(format!("{}:{}", r["saddr"], r["sport"]))
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "{name}: targets with several rows: {twice:?}"
    );
    assert_eq!(rows.len(), count, "{name}: one row per target");
}

/// Rows whose connection ended `status` (the TCP outcome, which the summary counts).
fn count(rows: &[serde_json::Value], status: &str) -> usize {
    rows.iter().filter(|r| r["tcp_status"] == status).count()
}

fn in_net_ns(lab: &Lab, args: &[&str]) -> Output {
    let ns = format!("sonde-{}-net", lab.name);
    let mut all = vec!["netns", "exec", ns.as_str()];
    all.extend_from_slice(args);
    let out = Command::new("ip").args(&all).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    out
}

fn nx0_tx_checksumming(lab: &Lab) -> String {
    let out = in_net_ns(lab, &["ethtool", "-k", "nx0"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    sonde_lab::bridge::offload_state(&text, "tx-checksumming")
        .unwrap_or("not shown")
        .to_string()
}

#[test]
fn checksums_of_the_labs_frames_are_verified_and_partial_ones_handled() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/26",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80",
    ]);
    assert_eq!(
        nx0_tx_checksumming(&lab),
        "off",
        "lab up left tx offload on"
    );
    let targets = "198.18.0.0/26";
    let ring = ["--backend", "ring", "-S", "198.19.255.2"];
    // Every frame verified, none bad, none taken unverified.
    for (name, backend) in [("xdp", &["--backend", "xdp"][..]), ("ring", &ring[..])] {
        let mut args = vec![targets];
        args.extend_from_slice(backend);
        let (rows, s) = grab(&lab, name, 64, &args);
        assert_eq!(count(&rows, "success"), 64, "{name}: {s}");
        assert_eq!(s["checksums_verified"], true, "{name}");
        assert_eq!(s["bad_checksums"], 0, "{name}: {s}");
        assert_eq!(s["partial_checksums"], 0, "{name}: {s}");
    }
    // With the offload back on, the lab's frames reach sx0 with partial checksums: over
    // AF_XDP they fail the check (so it is real), a packet ring marks them and they are
    // taken, and --no-verify-checksums takes them over AF_XDP.
    in_net_ns(&lab, &["ethtool", "-K", "nx0", "tx", "on"]);
    assert_eq!(nx0_tx_checksumming(&lab), "on");
    let (rows, s) = grab(&lab, "xdp-partial", 64, &[targets, "--syn-retries", "0"]);
    assert_eq!(count(&rows, "syn-timeout"), 64, "{s}");
    assert!(s["bad_checksums"].as_u64().unwrap() >= 64, "{s}");
    let mut args = vec![targets];
    args.extend_from_slice(&ring);
    let (rows, s) = grab(&lab, "ring-partial", 64, &args);
    assert_eq!(count(&rows, "success"), 64, "{s}");
    assert_eq!(s["bad_checksums"], 0, "{s}");
    assert!(s["partial_checksums"].as_u64().unwrap() >= 64, "{s}");
    let (rows, s) = grab(
        &lab,
        "xdp-unverified",
        64,
        &[targets, "--no-verify-checksums"],
    );
    assert_eq!(count(&rows, "success"), 64, "{s}");
    assert_eq!(s["checksums_verified"], false, "{s}");
}

/// The start of the reply the injector sends, intact.
const GOOD: &[u8] = b"SONDE-INJECTED\r\n";
/// The same segment damaged on the way: other bytes under GOOD's checksum.
const BAD: &[u8] = b"BOGUS-INJECTED\r\n";

/// What the injector learned from the scanner's handshake ACK.
struct Handshake {
    frame: Vec<u8>,
    seq: u32,
    ack: u32,
    sport: u16,
    scanner: Ipv4Addr,
}

/// The scanner's handshake ACK to `target`:80 (an ACK alone, no data), if `frame` is one.
fn handshake_ack(frame: &[u8], target: Ipv4Addr) -> Option<Handshake> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = ipv4::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).ok()?;
    if ip.protocol() != IpProtocol::TCP || ip.dst_addr() != target {
        return None;
    }
    let start = ethernet::HEADER_LEN + ip.header_len();
    let seg =
        tcp::Packet::new_checked(&frame[start..ethernet::HEADER_LEN + usize::from(ip.total_len())])
            .ok()?;
    let alone = seg.flags() == TcpFlags::ACK && seg.payload().is_empty();
    (alone && seg.dst_port() == 80).then(|| Handshake {
        frame: frame.to_vec(),
        seq: seg.seq_number(),
        ack: seg.ack_number(),
        sport: seg.src_port(),
        scanner: ip.src_addr(),
    })
}

/// The server's first data segment on the handshake's connection, carrying `sent` under the
/// checksum of `intact`.
fn reply(h: &Handshake, target: Ipv4Addr, intact: &[u8], sent: &[u8]) -> Vec<u8> {
    let seg = tcp::Repr {
        src_port: 80,
        dst_port: h.sport,
        seq_number: h.ack,
        ack_number: Some(h.seq),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window_len: 502,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload_len: intact.len(),
    };
    let eth = ethernet::Frame::new_checked(&h.frame[..]).unwrap();
    let l4 = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let mut f = vec![0; l4 + seg.buffer_len()];
    ethernet::Repr {
        src_addr: eth.dst_addr(),
        dst_addr: eth.src_addr(),
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    ipv4::Repr {
        src_addr: target,
        dst_addr: h.scanner,
        protocol: IpProtocol::TCP,
        payload_len: seg.buffer_len(),
        ttl: 64,
        ident: 7,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ));
    let data = l4 + seg.header_len();
    f[data..].copy_from_slice(intact);
    let ips = IpPair::V4 {
        src: target,
        dst: h.scanner,
    };
    seg.emit(&mut tcp::Packet::new_unchecked(&mut f[l4..]), &ips);
    let ok = tcp::Packet::new_checked(&f[l4..]).unwrap();
    assert!(tcp::Repr::parse(&ok, &ips, ChecksumMode::Verify).is_ok());
    f[data..].copy_from_slice(sent);
    f
}

/// In the lab's network namespace: waits (at most 20 s) for the scanner's handshake ACK to
/// `target` on nx0, then sends the scanner the reply's first segment corrupted, and 300 ms
/// later intact. Returns whether it saw the handshake.
fn inject(lab: String, target: Ipv4Addr) -> bool {
    sonde_lab::enter_net_ns(&lab).expect("entering the lab's network namespace");
    let cfg = IoConfig::new("nx0");
    let mut rx = AnyRx::open(BackendKind::Mmsg, &cfg).unwrap();
    let mut tx = AnyTx::open(BackendKind::Mmsg, &cfg).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    let mut handshake = None;
    while handshake.is_none() && Instant::now() < end {
        rx.rx_batch(64, Duration::from_millis(100), |f| {
            if handshake.is_none() {
                handshake = handshake_ack(f, target);
            }
        })
        .unwrap();
    }
    let Some(h) = handshake else {
        return false;
    };
    for (i, sent) in [BAD, GOOD].into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let frame = reply(&h, target, GOOD, sent);
        let n = tx
            .tx_batch(1, |_, buf| {
                buf[..frame.len()].copy_from_slice(&frame);
                frame.len()
            })
            .unwrap();
        assert_eq!(n, 1);
    }
    true
}

#[test]
fn a_corrupted_segment_injected_into_the_scanners_interface_is_counted_and_not_delivered() {
    if !can_run_labs() {
        return;
    }
    // Every host completes the handshake and says nothing: the injector speaks for it.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/29",
        "--responsive",
        "1.0",
        "--silent-share",
        "1.0",
        "--tcp-open",
        "80",
    ]);
    let target = Ipv4Addr::new(198, 18, 0, 3);
    let ring = ["--backend", "ring", "-S", "198.19.255.2"];
    for (name, backend) in [("xdp", &["--backend", "xdp"][..]), ("ring", &ring[..])] {
        let injector = {
            let lab = lab.name.clone();
            std::thread::spawn(move || inject(lab, target))
        };
        // The injector's socket is open before the first SYN leaves.
        std::thread::sleep(Duration::from_millis(300));
        let mut args = vec!["198.18.0.3", "-M", "banner", "--first-byte-timeout", "5"];
        args.extend_from_slice(backend);
        let (rows, s) = grab(&lab, name, 1, &args);
        assert!(injector.join().unwrap(), "{name}: no handshake seen on nx0");
        let row = &rows[0];
        assert_eq!(row["saddr"], IpAddr::V4(target).to_string());
        assert_eq!(row["tcp_status"], "success", "{name}: {row}");
        assert_eq!(
            row["banner"],
            String::from_utf8_lossy(GOOD).as_ref(),
            "{name}: the corrupted segment was delivered"
        );
        assert_eq!(s["bad_checksums"], 1, "{name}: {s}");
    }
}

#[test]
fn one_row_per_target_when_loss_makes_syn_acks_late_and_twice() {
    if !can_run_labs() {
        return;
    }
    // With 30 % loss each way the lab's kernel resends SYN-ACKs whose handshake ACK was lost
    // (duplicates on open connections), and resends others after grab gave up on their
    // target (one SYN, given up after 1 s; Linux resends at 1 s, 3 s, 7 s …): the pace keeps
    // grab running while they arrive.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/23",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80",
        "--loss",
        "0.3",
    ]);
    let (rows, s) = grab(
        &lab,
        "loss",
        512,
        &[
            "198.18.0.0/23",
            "-r",
            "100",
            "--syn-retries",
            "0",
            "--first-byte-timeout",
            "2",
            "--idle-timeout",
            "2",
        ],
    );
    eprintln!(
        "{} success, {} syn-timeout, {} invalid (late answers among them), {} late segments",
        count(&rows, "success"),
        count(&rows, "syn-timeout"),
        s["invalid"],
        s["late_segments"]
    );
    assert!(
        count(&rows, "success") > 0 && count(&rows, "syn-timeout") > 0,
        "{s}"
    );
    assert_eq!(s["bad_checksums"], 0, "{s}");
}
