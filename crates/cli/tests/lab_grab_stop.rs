//! Stopping `sonde grab` (issue 30): the first Ctrl-C opens no new connection and finishes the
//! open ones; the second ends them at once, and each still gets its RST, so the servers do not
//! keep them. Against the lab's silent hosts, which complete the handshake and then hold the
//! connection open, saying nothing: the lab's side counts the connections its servers hold.
//! Needs root; the lab has a unique name and is removed by its guard, also on failure.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, Lab, SONDE};

const TARGETS: &str = "198.18.0.0/29";
const HOSTS: usize = 8;

/// Connections to port 80 the lab's servers hold (established), as its kernel lists them.
fn held(lab: &Lab) -> usize {
    let out = Command::new("timeout")
        .args(["10", "ip", "netns", "exec"])
        .arg(format!("sonde-{}-net", lab.name))
        .args(["ss", "-Htn", "state", "established", "( sport = :80 )"])
        .output()
        .expect("running ss in the lab");
    assert!(
        out.status.success(),
        "ss: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Waits up to `limit` for `held(lab)` to reach `want`; returns the last count.
fn wait_held(lab: &Lab, want: usize, limit: Duration) -> usize {
    let start = Instant::now();
    loop {
        let n = held(lab);
        if n == want || start.elapsed() > limit {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn interrupt(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// Waits up to `limit` for `child` to end (killed past it); its output.
fn wait_bounded(mut child: Child, limit: Duration) -> (std::process::Output, Duration) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (out, start.elapsed())
}

#[test]
fn a_second_ctrl_c_ends_at_once_and_resets_every_open_connection() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        TARGETS,
        "--responsive",
        "1.0",
        "--silent-share",
        "1.0",
        "--tcp-open",
        "80",
        "--queues",
        "2",
    ]);
    let ring = ["--backend", "ring", "-S", "198.19.255.2"];
    let runs: [(&str, &[&str]); 3] = [
        ("xdp", &["--backend", "xdp"]),
        ("ring", &ring),
        ("xdp, 2 threads", &["--backend", "xdp", "--threads", "2"]),
    ];
    for (name, extra) in runs {
        assert_eq!(
            wait_held(&lab, 0, Duration::from_secs(5)),
            0,
            "{name}: held before"
        );
        let (out_file, summary) = (lab.file("rows.ndjson"), lab.file("summary.json"));
        let mut args = vec![
            "grab",
            "--lab",
            &lab.name,
            TARGETS,
            "-p",
            "80",
            "-M",
            "banner",
            "--first-byte-timeout",
            "60",
            "-o",
            &out_file,
            "--summary-json",
            &summary,
            "--force",
        ];
        args.extend_from_slice(extra);
        let child = Command::new(SONDE)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let open = wait_held(&lab, HOSTS, Duration::from_secs(10));
        // The first Ctrl-C finishes the open connections (they would wait out the minute);
        // the second ends them.
        interrupt(&child);
        std::thread::sleep(Duration::from_millis(300));
        interrupt(&child);
        let (out, took) = wait_bounded(child, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            open, HOSTS,
            "{name}: the servers never held every connection: {err}"
        );
        // Stopped by a signal: 130, as a shell reports a command Ctrl-C ended.
        assert_eq!(out.status.code(), Some(130), "{name}: {err}");
        assert!(took < Duration::from_secs(3), "{name}: {took:?} to end");
        // Each server got its RST: none holds its connection any more.
        let left = wait_held(&lab, 0, Duration::from_secs(2));
        eprintln!("{name}: {left} of {HOSTS} connections still held after the second Ctrl-C");
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
        assert_eq!(left, 0, "{name}: {left} of {HOSTS} left open; {s}\n{err}");
        assert_eq!(s["left_open"], 0, "{name}: {s}");
        assert_eq!(s["interrupted"], true, "{name}: {s}");
        let rows = std::fs::read_to_string(&out_file).unwrap();
        assert_eq!(rows.lines().count(), HOSTS, "{name}: {rows}");
        assert!(!err.contains("left open"), "{name}: {err}");
    }
}
