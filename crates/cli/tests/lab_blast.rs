//! Lab integration: bring a lab up, push 100,000 frames through every backend, check on the lab
//! side that they arrived, bring it down. Needs root (namespaces, raw sockets); without it each
//! test says so and passes vacuously. Every lab gets a unique name and is removed by a guard,
//! also when an assertion fails.

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

const FRAMES: u64 = 100_000;

#[test]
fn every_backend_delivers_100k_frames_to_the_lab() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--sink", "drop", "--queues", "2"]);
    for backend in ["xdp", "ring", "mmsg", "sendto", "pcap"] {
        let before = sonde_lab::received(&lab.name).expect("lab counters");
        let json = std::env::temp_dir().join(format!("{}-{backend}.json", lab.name));
        let count = FRAMES.to_string();
        let out = sonde(&[
            "blast",
            "--lab",
            &lab.name,
            "--backend",
            backend,
            "--count",
            &count,
            "--quiet",
            "--summary-json",
            json.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let after = sonde_lab::received(&lab.name).expect("lab counters");
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(summary["packets"], FRAMES, "{backend}: summary {summary}");
        for key in [
            "wall_s",
            "pps",
            "gbps",
            "cpu_user_s",
            "cpu_sys_s",
            "cpu_ns_per_packet",
            "backend",
            "batch",
            "threads",
        ] {
            assert!(summary.get(key).is_some(), "{backend}: summary lacks {key}");
        }
        let arrived = after - before;
        // Nothing else is sent on the link (permanent neighbours, no IPv6), but allow a handful.
        assert!(
            (FRAMES..FRAMES + 20).contains(&arrived),
            "{backend}: {arrived} frames arrived of {FRAMES}"
        );
    }
}

#[test]
fn two_threads_split_the_count_over_both_queues() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--sink", "drop", "--queues", "2"]);
    let before = sonde_lab::received(&lab.name).unwrap();
    let out = sonde(&[
        "blast",
        "--lab",
        &lab.name,
        "--backend",
        "ring",
        "--threads",
        "2",
        "--count",
        "100001",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let arrived = sonde_lab::received(&lab.name).unwrap() - before;
    assert!((100_001..100_021).contains(&arrived), "{arrived}");
}

#[test]
fn the_kernel_sink_answers_a_paced_blast() {
    if !can_run_labs() {
        return;
    }
    // Real lab: SYNs to responsive addresses on port 80 get SYN-ACKs back on the scanner side.
    let lab = Lab::up(&["--population", "198.18.0.0/20", "--responsive", "0.5"]);
    let before = sonde_lab::scan_counters(&lab.name).unwrap().rx_packets;
    let out = sonde(&[
        "blast",
        "--lab",
        &lab.name,
        "--backend",
        "xdp",
        "--count",
        "4096",
        "--rate",
        "20000",
        "--ports",
        "80",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let replies = sonde_lab::scan_counters(&lab.name).unwrap().rx_packets - before;
    // About half of 4096 addresses answer (keyed hash); each answers once or more (SYN-ACK
    // retransmits are possible), the other half never.
    assert!((1500..6000).contains(&replies), "{replies} replies");
}

#[test]
fn blast_refuses_to_send_outside_a_lab() {
    let out = sonde(&["blast", "--count", "1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("only inside a lab") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn bad_input_gets_one_clear_line() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["blast", "--lab", "x", "--dst-mac", "02:00:zz:00:00:01"],
            "02:00:zz:00:00:01",
        ),
        (&["blast", "--lab", "x", "--backend", "dpdk"], "dpdk"),
        (
            &["lab", "up", "--name", "x", "--population", "198.18.0.0/33"],
            "198.18.0.0/33",
        ),
        (&["blast", "--lab", "x", "--size", "59"], "59"),
    ];
    for (args, needle) in cases {
        let out = sonde(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn lab_lifecycle_errors_are_clear() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--sink", "drop"]);
    let again = sonde(&["lab", "up", "--name", &lab.name]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    let missing = sonde(&["lab", "down", "--name", "nosuchlab"]);
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("nosuchlab"),
        "{}",
        stderr(&missing)
    );
    let outside = sonde(&[
        "lab",
        "up",
        "--name",
        &format!("{}o", lab.name),
        "--population",
        "10.0.0.0/24",
    ]);
    assert!(
        !outside.status.success() && stderr(&outside).contains("198.18.0.0/15"),
        "{}",
        stderr(&outside)
    );
    let status = sonde(&["lab", "status", "--name", &lab.name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for key in [
        "scan_ns",
        "net_ns",
        "scan_if",
        "scan_ip",
        "gateway_ip",
        "gateway_mac",
        "population",
        "responsive",
        "seed",
    ] {
        assert!(v.get(key).is_some(), "status lacks {key}: {v}");
    }
}
