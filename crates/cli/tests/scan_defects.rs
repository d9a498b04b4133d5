//! The defects a review found in the scan engine, each with a test that fails without its fix:
//! shards without a seed, more threads than queues, a receiver that fails, Ctrl-C at a low
//! rate, a checkpoint that comes late, and an XDP scan that took the host's own traffic. Lab
//! tests need root; each lab has a unique name and is removed by its guard, also on failure.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, sonde, stderr, Lab, SmallDisk, SONDE};

/// `sonde scan --lab L --no-default-blocklist -q ARGS`, started in the background.
fn spawn_scan(lab: &Lab, args: &[&str]) -> Child {
    Command::new(SONDE)
        .args(["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn shards_without_a_seed_are_refused() {
    // Each shard would draw its own order: about (1-1/N)^N of the targets missed, as many twice.
    let out = sonde(&[
        "scan",
        "--dryrun",
        "--no-default-blocklist",
        "198.18.0.0/24",
        "--shards",
        "4",
        "--shard",
        "1",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--shards 4 needs --seed"), "{err}");
    let out = sonde(&[
        "scan",
        "--dryrun",
        "--no-default-blocklist",
        "198.18.0.0/24",
        "--shards",
        "4",
        "--shard",
        "1",
        "--seed",
        "3",
        "-q",
        "-S",
        "198.19.255.1",
        "-G",
        "02:00:00:00:00:02",
        "-i",
        "lo",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn more_threads_than_queues_are_refused_at_once() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--queues",
        "2",
        "--tcp-open",
        "80",
    ]);
    let start = Instant::now();
    let out = lab.scan(&["198.18.0.0/24", "--threads", "3", "-o", &lab.file("t.csv")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("--threads 3") && err.contains("2 queues"),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn a_failing_receiver_stops_the_senders_and_says_why() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/16",
        "--responsive",
        "1.0",
        "--tcp-open",
        "80",
    ]);
    // A 16 KiB disk takes the header (written at once) but fails the first flush of rows, at
    // 64 KiB: the receiver fails mid-run. (/dev/full now fails the header, before any probe.)
    let disk = SmallDisk::mount(&lab, 16);
    let summary = lab.file("s.json");
    let out = lab.scan(&[
        "198.18.0.0/16",
        "-p",
        "80",
        "-r",
        "20000",
        "-c",
        "1",
        "-o",
        &disk.file("rows.csv"),
        "--summary-json",
        &summary,
        "--checkpoint",
        &lab.file("full.checkpoint.json"),
    ]);
    assert!(!out.status.success(), "a scan whose output fails must fail");
    let err = stderr(&out);
    assert!(
        err.contains("the receiver failed, so sending stopped after"),
        "{err}"
    );
    let sent: u64 = err
        .split("stopped after ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    // At 20,000 pps the whole /16 takes 3.3 s; the 64 KiB output buffer fills long before.
    assert!(sent < 65536, "sent {sent}: the senders went on");
    assert!(!Path::new(&summary).exists(), "no summary of a failed scan");
}

#[test]
fn ctrl_c_at_one_probe_per_second_stops_at_once_and_sends_nothing_more() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "1.0",
        "--tcp-open",
        "80",
    ]);
    let (out_file, summary) = (lab.file("slow.csv"), lab.file("slow.json"));
    let child = spawn_scan(
        &lab,
        &[
            "198.18.0.0/24",
            "-p",
            "80",
            "-r",
            "1",
            "-c",
            "0",
            "-o",
            &out_file,
            "--summary-json",
            &summary,
        ],
    );
    std::thread::sleep(Duration::from_millis(1500));
    let asked = Instant::now();
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "interrupted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "Ctrl-C took {:?}",
        asked.elapsed()
    );
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let sent = s["sent"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&sent),
        "sent {sent} probes in 1.5 s at 1 pps"
    );
    // The checkpoint goes next to the output, not into the working folder (the test ran in
    // crates/cli, and its checkpoint ended up tracked by git there).
    let checkpoint = format!("{out_file}.checkpoint.json");
    assert!(
        Path::new(&checkpoint).exists(),
        "no checkpoint at {checkpoint}"
    );
}

#[test]
fn the_checkpoint_is_written_when_sending_stops_before_the_cooldown() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/18",
        "--responsive",
        "0.1",
        "--tcp-open",
        "80",
    ]);
    let checkpoint = lab.file("ck.json");
    let child = spawn_scan(
        &lab,
        &[
            "198.18.0.0/18",
            "-p",
            "80",
            "-r",
            "5000",
            "-c",
            "20",
            "-o",
            &lab.file("c.csv"),
            "--checkpoint",
            &checkpoint,
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    // A job scheduler's SIGTERM; its SIGKILL may follow within seconds.
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(1000));
    let early: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&checkpoint).expect("no checkpoint during the cooldown"),
    )
    .unwrap();
    assert_eq!(early["receiving_done"], false, "{early}");
    assert_eq!(early["complete"], false, "{early}");
    signal(&child, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait_with_output();
    assert!(early["threads"][0]["cursor"].is_object(), "{early}");
}

#[test]
fn an_xdp_scan_leaves_the_hosts_own_connections_alone() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    let live: Vec<std::net::IpAddr> = lab
        .truth(&["--ports", "80"])
        .iter()
        .filter(|r| r[1] == "80" && r[2] == "synack")
        .map(|r| r[0].parse().unwrap())
        .take(50)
        .collect();
    // A 3-second scan with sonde's XDP filter on the scanner's interface…
    let mut child = spawn_scan(
        &lab,
        &[
            "198.18.0.0/20",
            "-p",
            "80",
            "-r",
            "1500",
            "-c",
            "1",
            "--rx-backend",
            "xdp",
            "-o",
            &lab.file("x.csv"),
        ],
    );
    std::thread::sleep(Duration::from_millis(700));
    // …while the host's kernel opens ordinary connections to the lab (from its own ephemeral
    // ports) and reads what the lab's server says.
    let ok = lab.in_scan(|| {
        live.iter()
            .filter(|addr| {
                let Ok(mut s) = TcpStream::connect_timeout(
                    &SocketAddr::new(**addr, 80),
                    Duration::from_secs(1),
                ) else {
                    return false;
                };
                s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                let mut line = Vec::new();
                std::io::Read::read_to_end(&mut s, &mut line).is_ok()
                    && line.starts_with(b"SONDE-LAB")
            })
            .count()
    });
    let still_scanning = child.try_wait().unwrap().is_none();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        still_scanning,
        "the scan ended before the connections: the test proves nothing"
    );
    assert_eq!(
        ok,
        live.len(),
        "kernel connections failed during the xdp scan"
    );
}
