//! `sonde grab --threads 2` in the lab: each engine thread owns its connections (its share of
//! the targets and a lane of the source ports) and a reply that lands on the other thread's
//! queue is handed over. Checked: every live host's body, one row per target over AF_XDP and a
//! packet ring, the summary and the status file adding up to the rows, Ctrl-C and resume, and
//! the refused combinations. Needs root; each lab has a unique name and is removed by its
//! guard, also on failure.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab, SONDE};

fn rows(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(rows: &[serde_json::Value], status: &str) -> u64 {
    rows.iter().filter(|r| r["tcp_status"] == status).count() as u64
}

/// The addresses of `rows`, checking that none comes twice.
fn targets(rows: &[serde_json::Value]) -> HashSet<String> {
    let set: HashSet<String> = rows
        .iter()
        .map(|r| r["saddr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(set.len(), rows.len(), "a target has two rows");
    set
}

#[test]
fn two_threads_grab_every_host_once_and_their_figures_add_up() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/21",
        "--responsive",
        "0.4",
        "--http",
        "--queues",
        "2",
    ]);
    for (backend, extra) in [("xdp", &[][..]), ("ring", &["-S", "198.19.255.2"][..])] {
        let (out_file, summary, status) = (
            lab.file(&format!("{backend}.ndjson")),
            lab.file(&format!("{backend}.json")),
            lab.file(&format!("{backend}.status.csv")),
        );
        let mut args = vec![
            "grab",
            "--lab",
            &lab.name,
            "-q",
            "198.18.0.0/21",
            "-p",
            "80",
            "--threads",
            "2",
            "--backend",
            backend,
            "--syn-retries",
            "0",
            "-o",
            &out_file,
            "--summary-json",
            &summary,
            "--status-file",
            &status,
        ];
        args.extend_from_slice(extra);
        let out = sonde(&args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let score = lab.score(&[&out_file]);
        eprintln!("{backend}: {score}");
        let (done, live, correct, wrong, fp) = grab_score(&score);
        assert!(live > 500 && done == live, "{backend}: {score}");
        assert_eq!((correct, wrong, fp), (done, 0, 0), "{backend}: {score}");
        let rows = rows(&out_file);
        assert_eq!(targets(&rows).len(), 2048, "{backend}: one row per target");
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
        assert_eq!(s["threads"], 2, "{s}");
        assert_eq!(s["success"].as_u64(), Some(count(&rows, "success")), "{s}");
        assert_eq!(
            s["syn_timeouts"].as_u64(),
            Some(count(&rows, "syn-timeout")),
            "{s}"
        );
        assert_eq!(s["handover_dropped"], 0, "{s}");
        // The status file's last line counts every row, over both threads.
        let text = std::fs::read_to_string(&status).unwrap();
        let last = text.lines().last().unwrap();
        let header = text.lines().next().unwrap();
        let at = |name: &str| header.split(',').position(|c| c == name).unwrap();
        let fields: Vec<&str> = last.split(',').collect();
        assert_eq!(fields[at("finished")], "2048", "{last}");
        assert_eq!(
            fields[at("success")].parse::<u64>().unwrap(),
            count(&rows, "success"),
            "{last}"
        );
    }
}

#[test]
fn a_two_thread_grab_interrupted_resumes_with_nothing_lost_or_twice() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "1.0",
        "--http",
        "--queues",
        "2",
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
        "--threads",
        "2",
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
        stderr(&out)
    );
    let ck: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).unwrap()).unwrap();
    assert_eq!(ck["threads"].as_array().map(Vec::len), Some(2), "{ck}");
    // Resuming with another thread count is refused in one line.
    let mut other = vec!["grab", "--lab", &lab.name, "-q", "-o", &second];
    other.extend_from_slice(&common);
    other.extend_from_slice(&["--resume", &checkpoint, "--threads", "1"]);
    let refused = sonde(&other);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--threads"),
        "{}",
        stderr(&refused)
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
    eprintln!("{} rows before the interrupt, {} after", a.len(), b.len());
    assert!(
        !a.is_empty() && !b.is_empty(),
        "the interrupt did not split the grab"
    );
    let (sa, sb) = (targets(&a), targets(&b));
    assert!(sa.is_disjoint(&sb), "targets grabbed twice");
    assert_eq!(a.len() + b.len(), 4096, "targets missed");
    assert!(a.iter().chain(&b).all(|r| r["status"] == "success"));
}

#[test]
fn threads_the_grab_cannot_run_are_refused_in_one_line() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28", "--http", "--queues", "2"]);
    for (args, says) in [
        (
            &["--threads", "2", "--backend", "kernel"][..],
            "kernel backend runs one thread",
        ),
        (&["--threads", "3"][..], "more than the 2 queues"),
        (
            &["--threads", "4", "--source-ports", "61000-61002"][..],
            "needs at least 4 source ports",
        ),
    ] {
        let mut all = vec![
            "grab",
            "--lab",
            &lab.name,
            "-q",
            "198.18.0.0/28",
            "-p",
            "80",
        ];
        all.extend_from_slice(args);
        let out = sonde(&all);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
