//! `sonde profile scan` in a small lab: every stage of both paths in the CSV, finite and not
//! negative, the stacked-bar PNG written, and the check of stages + kernel against the CPU
//! measured without instrumentation printed and in the JSON. (The 10 % figure itself is
//! timing, measured by hand, not asserted here.) The lab is removed by its guard.

mod common;

use common::{can_run_labs, sonde, stderr, Lab};

const TX_STAGES: [&str; 9] = [
    "loop",
    "targets",
    "cookie",
    "patch",
    "checksum",
    "enqueue",
    "kick syscall",
    "completion",
    "kernel (rest)",
];
const RX_STAGES: [&str; 9] = [
    "poll syscall",
    "poll",
    "timestamp",
    "parse",
    "validate",
    "dedup",
    "output",
    "write syscall",
    "kernel (rest)",
];

#[test]
fn profile_scan_writes_every_stage_a_plot_and_the_check() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/22", "--responsive", "0.5"]);
    let out = lab.file("profile");
    let run = sonde(&[
        "profile",
        "scan",
        "--lab",
        &lab.name,
        "--batch",
        "1,16",
        "--count",
        "8000",
        "--cooldown",
        "0.5",
        "--backend",
        "mmsg",
        "--out",
        &out,
    ]);
    assert!(run.status.success(), "profile scan: {}", stderr(&run));
    let table = String::from_utf8_lossy(&run.stdout);
    assert!(
        table.contains("measured CPU (plain)") && table.contains("ratio"),
        "{table}"
    );
    // The check ends the table with a plain mark, and every run sent --count probes.
    let last = table.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("check passed") || last.starts_with("check FAILED"),
        "{table}"
    );
    let per_run = table
        .lines()
        .find(|l| l.starts_with("packets per run"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        per_run.split_whitespace().skip(3).all(|n| n == "8000"),
        "{per_run}"
    );

    let csv = std::fs::read_to_string(format!("{out}/profile-scan.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("batch,stage,ns_per_packet"));
    let rows: Vec<(u32, String, f64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 3, "{l}");
            (
                f[0].parse().unwrap(),
                f[1].to_string(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    for batch in [1, 16] {
        let wanted = TX_STAGES
            .iter()
            .map(|s| format!("tx {s}"))
            .chain(RX_STAGES.iter().map(|s| format!("rx {s}")));
        for stage in wanted {
            let row = rows.iter().find(|(b, s, _)| *b == batch && *s == stage);
            let (_, _, ns) = row.unwrap_or_else(|| panic!("batch {batch}: no {stage} in\n{csv}"));
            assert!(ns.is_finite() && *ns >= 0.0, "batch {batch}, {stage}: {ns}");
        }
        let total: f64 = rows.iter().filter(|(b, ..)| *b == batch).map(|r| r.2).sum();
        assert!(total > 0.0, "batch {batch}: nothing measured");
    }

    let png = std::fs::metadata(format!("{out}/profile-scan.png")).unwrap();
    assert!(png.len() > 1000, "the PNG is {} bytes", png.len());

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{out}/profile-scan.json")).unwrap())
            .unwrap();
    let batches = json["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 2);
    for b in batches {
        let (sum, measured, ratio) = (
            b["sum_ns"].as_f64().unwrap(),
            b["measured_ns"].as_f64().unwrap(),
            b["ratio"].as_f64().unwrap(),
        );
        assert!(sum > 0.0 && measured > 0.0, "{b}");
        assert!((ratio - sum / measured).abs() < 1e-9, "{b}");
        assert!(b["within_10_percent"].is_boolean(), "{b}");
        assert!(b["packets_instrumented"].as_u64().unwrap() > 0, "{b}");
    }
}

#[test]
fn an_unwritable_out_is_one_line_naming_it() {
    // Checked before the lab is looked up: no lab needed, nothing sent.
    let run = sonde(&[
        "profile",
        "tx",
        "--lab",
        "nonexistent",
        "--out",
        "/proc/sonde-cannot-write-here",
    ]);
    assert!(!run.status.success());
    let err = stderr(&run);
    assert!(
        err.contains("--out /proc/sonde-cannot-write-here") && err.trim().lines().count() == 1,
        "{err}"
    );
}
