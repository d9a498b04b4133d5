//! `sonde grab` in the lab, scored against the truth: HTTP over each backend (sonde's TCP on
//! AF_XDP and on a packet ring, and kernel sockets), TLS certificates, banners, 1 % loss each
//! way, silent hosts, no RST from the host's own kernel on its own address, Ctrl-C and resume,
//! and one-line errors for bad input. Needs root; each lab has a unique name and is removed by
//! its guard, also on failure.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab, SONDE};

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

/// Every target of `count` has exactly one row in `path` (no target twice, none missing).
fn one_row_per_target(path: &str, count: usize) {
    let rows = rows(path);
    let targets: HashSet<(String, String)> = rows
        .iter()
        .map(|r| (r["saddr"].to_string(), r["sport"].to_string()))
        .collect();
    assert_eq!((rows.len(), targets.len()), (count, count), "{path}");
}

/// `sonde grab --lab L ARGS -q -r 0`.
fn grab(lab: &Lab, args: &[&str]) -> std::process::Output {
    let mut all = vec!["grab", "--lab", &lab.name, "-q", "-r", "0"];
    all.extend_from_slice(args);
    sonde(&all)
}

/// The scanner namespace's count of RSTs its kernel has sent (/proc/net/snmp, Tcp OutRsts).
fn kernel_rsts(lab: &Lab) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("sonde-{}-scan", lab.name),
            "cat",
            "/proc/net/snmp",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tcp: Vec<&str> = text.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let values: Vec<&str> = tcp[1].split_whitespace().collect();
    let at = names.iter().position(|n| *n == "OutRsts").unwrap();
    values[at].parse().unwrap()
}

#[test]
fn http_over_every_backend_gets_every_live_host_byte_for_byte() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "0.3",
        "--silent-share",
        "0.05",
        "--http",
        "--tcp-open",
        "80,443",
    ]);
    for (backend, extra) in [
        ("xdp", &[][..]),
        ("ring", &["-S", "198.19.255.2"][..]),
        ("kernel", &[][..]),
    ] {
        let (out_file, summary) = (
            lab.file(&format!("{backend}.ndjson")),
            lab.file(&format!("{backend}.json")),
        );
        let mut args = vec![
            "198.18.0.0/20",
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
        args.extend_from_slice(extra);
        let before = kernel_rsts(&lab);
        let out = grab(&lab, &args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let score = lab.score(&[&out_file]);
        eprintln!("{backend}: {score}");
        let (done, live, correct, wrong, fp) = grab_score(&score);
        assert!(live > 1000 && done == live, "{backend}: {score}");
        assert_eq!((correct, wrong, fp), (done, 0, 0), "{backend}: {score}");
        assert!(score.contains("silent seen as data-timeout"), "{score}");
        // One row per target, each target once.
        let rows = rows(&out_file);
        let targets: HashSet<String> = rows.iter().map(|r| r["saddr"].to_string()).collect();
        assert_eq!((rows.len(), targets.len()), (4096, 4096), "{backend}");
        let s = json(&summary);
        for key in [
            "targets",
            "syn_sent",
            "established",
            "completed",
            "success",
            "timeouts",
            "resets",
            "retransmits_received",
            "sack_blocks_sent",
            "ooo_segments",
            "conn_per_s",
            "wall_s",
            "cpu_user_s",
            "cpu_sys_s",
            "cpu_us_per_conn",
            "peak_outstanding",
            "peak_rss_bytes",
        ] {
            assert!(s.get(key).is_some(), "{backend}: summary lacks {key}");
        }
        if backend == "xdp" {
            // sonde's XDP program took every segment of sonde's connections: the host's kernel
            // never saw a SYN-ACK it did not expect, so it reset nothing.
            assert_eq!(
                kernel_rsts(&lab),
                before,
                "the kernel sent RSTs during an xdp grab"
            );
        }
    }
    // The counter does move when the kernel sees SYN-ACKs: a SYN scan on a packet ring.
    let before = kernel_rsts(&lab);
    let scan = lab.scan(&[
        "198.18.0.0/24",
        "-p",
        "80",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &lab.file("s.csv"),
    ]);
    assert!(scan.status.success(), "{}", stderr(&scan));
    assert!(
        kernel_rsts(&lab) > before,
        "the kernel's RST counter did not move"
    );
}

#[test]
fn tls_banner_and_big_bodies_under_loss() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/22",
        "--responsive",
        "0.5",
        "--http",
        "--tcp-open",
        "80,443,22",
        "--loss",
        "0.01",
    ]);
    // Certificates, with 1 % of the packets lost each way.
    let tls = lab.file("tls.ndjson");
    let out = grab(
        &lab,
        &["198.18.0.0/22", "-p", "443", "-M", "tls", "-o", &tls],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&tls]);
    let (done, live, _, wrong, fp) = grab_score(&score);
    assert!(
        done * 1000 >= live * 999 && wrong == 0 && fp == 0,
        "tls: {score}"
    );
    assert!(score.contains("certificates correct"), "{score}");
    one_row_per_target(&tls, 1024);
    for r in rows(&tls).iter().filter(|r| r["status"] == "success") {
        assert_eq!(r["tls_version"], "TLSv1.3", "{r}");
    }

    // Banners: the lab's small server says one line naming the address and port.
    let banners = lab.file("banner.ndjson");
    let out = grab(
        &lab,
        &["198.18.0.0/22", "-p", "22", "-M", "banner", "-o", &banners],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    one_row_per_target(&banners, 1024);
    let rows = rows(&banners);
    let ok: Vec<_> = rows.iter().filter(|r| r["status"] == "success").collect();
    let live = lab
        .truth(&["--ports", "22"])
        .iter()
        .filter(|r| r[1] == "22" && r[2] == "synack")
        .count();
    assert!(
        ok.len() * 1000 >= live * 999,
        "banners: {} of {live}",
        ok.len()
    );
    for r in &ok {
        let saddr = r["saddr"].as_str().unwrap();
        assert_eq!(r["banner"], format!("SONDE-LAB {saddr} 22\r\n"), "{r}");
    }

    // A 1 MiB body per host, each checked by its hash, with loss: retransmissions and
    // out-of-order segments are repaired (SACK).
    let (big, summary) = (lab.file("big.ndjson"), lab.file("big.json"));
    let out = grab(
        &lab,
        &[
            "198.18.0.0/24",
            "-p",
            "80",
            "--http-path",
            "/big",
            "--max-bytes",
            "2000000",
            "-o",
            &big,
            "--summary-json",
            &summary,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&["--within", "198.18.0.0/24", &big]);
    let (done, live, correct, wrong, _) = grab_score(&score);
    assert!(
        live > 50 && done == live && correct == done && wrong == 0,
        "/big: {score}"
    );
    one_row_per_target(&big, 256);
    let s = json(&summary);
    assert!(s["ooo_segments"].as_u64().unwrap() > 0, "{s}");
    assert!(s["sack_blocks_sent"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn an_interrupted_grab_resumes_with_nothing_lost_or_twice() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80,443",
    ]);
    let (first, second, checkpoint) = (
        lab.file("a.ndjson"),
        lab.file("b.ndjson"),
        lab.file("ck.json"),
    );
    let common = [
        "198.18.0.0/20",
        "-p",
        "80",
        "-r",
        "1500",
        "--seed",
        "5",
        "--checkpoint",
        &checkpoint,
    ];
    let mut args = vec!["grab", "--lab", &lab.name, "-q", "-o", &first];
    args.extend_from_slice(&common);
    let child = Command::new(SONDE)
        .args(&args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "interrupted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut args = vec![
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "-o",
        &second,
        "--resume",
        &checkpoint,
    ];
    args.extend_from_slice(&common);
    let out = sonde(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let (a, b) = (rows(&first), rows(&second));
    let addrs = |rows: &[serde_json::Value]| -> HashSet<String> {
        rows.iter()
            .map(|r| r["saddr"].as_str().unwrap().to_string())
            .collect()
    };
    let (sa, sb) = (addrs(&a), addrs(&b));
    eprintln!("{} rows before the interrupt, {} after", a.len(), b.len());
    assert!(
        !a.is_empty() && !b.is_empty(),
        "the interrupt did not split the grab"
    );
    assert_eq!(
        (sa.len(), sb.len()),
        (a.len(), b.len()),
        "a target twice within a part"
    );
    assert!(sa.is_disjoint(&sb), "targets grabbed twice");
    assert_eq!(a.len() + b.len(), 4096, "targets missed");
    assert!(a.iter().chain(&b).all(|r| r["status"] == "success"));
}

#[test]
fn bad_grab_input_gets_one_clear_line() {
    let missing = "/nonexistent/sonde-payload.bin";
    let cases: [(&[&str], &str); 8] = [
        (
            &["grab", "198.18.0.0/24", "--http-path", "no-slash"],
            "--http-path",
        ),
        (
            &[
                "grab",
                "198.18.0.0/24",
                "-M",
                "payload",
                "--payload-file",
                missing,
            ],
            missing,
        ),
        (&["grab", "198.18.0.0/24", "-p", "80,70000"], "70000"),
        (
            &["grab", "198.18.0.0/24", "--max-outstanding", "0"],
            "--max-outstanding",
        ),
        (&["grab", "198.18.0.0/24", "-M", "gopher"], "gopher"),
        (
            &[
                "grab",
                "198.18.0.0/24",
                "--syn-timeout",
                "100",
                "--syn-retries",
                "5",
            ],
            "--syn-timeout",
        ),
        (&["grab", "198.18.0.0/24", "--syn-timeout", "0"], "seconds"),
        (&["grab", "--lab", "x", "0.0.0.0/7"], "--confirm-large-scan"),
    ];
    for (args, needle) in cases {
        let out = sonde(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.contains("error") && first.contains(needle),
            "{args:?}: {err}"
        );
    }
}

/// What follows `marker` in `line`, up to the next `;` or `,` (e.g. "105 success (15 conn/s)").
fn clause<'a>(line: &'a str, marker: &str) -> &'a str {
    let at = line
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in {line}"));
    let rest = &line[at..];
    rest.split([';', ',']).next().unwrap().trim()
}

#[test]
fn grab_status_line_and_summary_count_the_same_connections() {
    if !can_run_labs() {
        return;
    }
    // A quarter of the hosts answer; the rest end as "no answer" after the SYN timeout, well
    // after the successes: the figures must not change meaning when they land.
    let lab = Lab::up(&[
        "--population",
        "198.18.72.0/24",
        "--responsive",
        "0.25",
        "--tcp-open",
        "80",
    ]);
    let (out_file, summary) = (lab.file("g.ndjson"), lab.file("g.json"));
    let out = sonde(&[
        "grab",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "198.18.72.0/24",
        "-p",
        "80",
        "-M",
        "banner",
        "-r",
        "0",
        "--syn-retries",
        "0",
        "-o",
        &out_file,
        "--summary-json",
        &summary,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let s = json(&summary);
    let success = s["success"].as_u64().unwrap();
    assert!(success > 0 && success < 256, "{s}");
    // The plan line counts connections.
    let plan = err.lines().next().unwrap();
    assert!(
        plan.contains("256 addresses × 1 port = 256 connections") && !plan.contains("probe"),
        "{plan}"
    );
    // The last status line and the summary say the same: every connection done, and the
    // same successes at the same rate.
    let status: Vec<&str> = err.lines().filter(|l| l.contains("; done ")).collect();
    let last = status
        .last()
        .unwrap_or_else(|| panic!("no status line: {err}"));
    let summary_line = err
        .lines()
        .find(|l| l.starts_with("grab: 256 connections in "))
        .unwrap_or_else(|| panic!("no summary line: {err}"));
    assert!(last.contains("done 256 of 256 connections"), "{last}");
    let successes = format!("{success} success (");
    assert_eq!(
        clause(last, &successes),
        clause(summary_line, &successes),
        "{last}\n{summary_line}"
    );
    // No share that flips when the timeouts land: counts only.
    for line in &status {
        assert!(!line.contains('%') || line.contains("% ("), "{line}");
        assert!(
            !line.contains("success ") || !line.contains(" %;"),
            "{line}"
        );
    }
}

#[test]
fn grab_help_speaks_of_connections_and_hides_what_grab_ignores() {
    let out = sonde(&["grab", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let rate = help
        .split("--rate")
        .nth(1)
        .and_then(|r| r.split("\n  -").next())
        .unwrap_or_default();
    assert!(
        rate.contains("connections per second") && !rate.contains("packets"),
        "{rate}"
    );
    assert!(!help.contains("--cooldown"), "grab -h offers --cooldown");
    let threads = help.split("--threads").nth(1).unwrap_or_default();
    assert!(threads.contains("owning its share"), "{threads}");
    assert!(!help.contains("of one scan"), "{help}");
}
