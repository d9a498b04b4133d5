//! `sonde grab --backend kernel` under a low open-file limit: it holds no more sockets than the
//! limit allows, says so once, and still gives every target its row (it failed with EMFILE
//! when --max-outstanding, 100,000 by default, exceeded the limit). Needs root; the lab has a
//! unique name and is removed by its guard, also on failure.

use std::process::Command;

mod common;
use common::{can_run_labs, stderr, Lab, SONDE};

#[test]
fn the_kernel_backend_stays_under_the_open_file_limit() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "1.0",
        "--http",
    ]);
    let (rows, summary) = (lab.file("k.ndjson"), lab.file("k.json"));
    // sh sets the limit (soft and hard: sonde cannot raise it back) and execs sonde.
    let out = Command::new("sh")
        .args(["-c", "ulimit -n 200 && exec \"$0\" \"$@\"", SONDE])
        .args(["grab", "--lab", &lab.name, "198.18.0.0/24", "-p", "80"])
        .args([
            "-r",
            "0",
            "--backend",
            "kernel",
            "--max-outstanding",
            "100000",
        ])
        .args(["-o", &rows, "--summary-json", &summary])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let told: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("holds at most"))
        .collect();
    assert_eq!(told.len(), 1, "said once: {err}");
    assert!(told[0].contains("open-file limit is 200"), "{}", told[0]);
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    assert!(s["peak_outstanding"].as_u64().unwrap() < 200, "{s}");
    assert_eq!(s["success"].as_u64(), Some(256), "{s}");
    let score = lab.score(&[&rows]);
    assert!(score.contains("completed 256 of 256"), "{score}");
    assert_eq!(std::fs::read_to_string(&rows).unwrap().lines().count(), 256);
}
