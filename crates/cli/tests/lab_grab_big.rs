//! `sonde grab` of replies longer than `--max-bytes` (issue 19): the lab's 1 MiB `/big` with
//! the default `--max-bytes` (256 KiB) ends `success` with exactly 262,144 bytes, marked
//! `truncated`, as soon as the last byte is in. Before, every row ended `data-timeout` 56 bytes
//! short: the scaled window, rounded down near the cap, shut, and the idle timeout ran out.
//! With and without 1 % loss each way. Needs root; each lab has a unique name and is removed by
//! its guard, also on failure.

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

/// `sonde grab`'s default `--max-bytes`.
const MAX_BYTES: u64 = 256 * 1024;
const TARGETS: &str = "198.18.0.0/28";

fn lab_with(extra: &[&str]) -> Lab {
    let mut args = vec![
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "1.0",
        "--http",
    ];
    args.extend_from_slice(extra);
    Lab::up(&args)
}

/// `GET /big` from every target, default `--max-bytes`: the rows.
fn grab_big(lab: &Lab, extra: &[&str]) -> Vec<serde_json::Value> {
    let out_file = lab.file("big.ndjson");
    let mut args = vec![
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "-r",
        "0",
        TARGETS,
        "-p",
        "80",
        "-M",
        "http",
        "--http-path",
        "/big",
        "-o",
        &out_file,
    ];
    args.extend_from_slice(extra);
    let out = sonde(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every target's row: `success`, exactly `MAX_BYTES`, `truncated`, the body's start byte for
/// byte, and the end less than `within_us` after the first byte.
fn check_rows(rows: &[serde_json::Value], within_us: u64) {
    assert_eq!(rows.len(), 16, "one row per target");
    let targets: std::collections::HashSet<&str> =
        rows.iter().filter_map(|r| r["saddr"].as_str()).collect();
    assert_eq!(targets.len(), 16, "no target twice");
    let big = sonde_lab::big_body();
    for r in rows {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["bytes"].as_u64(), Some(MAX_BYTES), "{r}");
        assert_eq!(r["truncated"], true, "{r}");
        assert_eq!(r["http_truncated"], true, "the body is cut: {r}");
        let body_len = r["http_body_len"].as_u64().unwrap() as usize;
        assert!(body_len > 0 && (body_len as u64) < MAX_BYTES, "{r}");
        assert_eq!(
            r["http_body_sha256"].as_str(),
            Some(sonde_lab::sha256_hex(&big[..body_len]).as_str()),
            "the first {body_len} bytes of /big"
        );
        let (first, total) = (
            r["t_first_byte_us"].as_u64().unwrap(),
            r["t_total_us"].as_u64().unwrap(),
        );
        assert!(
            total - first < within_us,
            "{} ms from the first byte to the end: {r}",
            (total - first) / 1000
        );
    }
}

#[test]
fn replies_longer_than_max_bytes_end_at_max_bytes_at_once() {
    if !can_run_labs() {
        return;
    }
    // 256 KiB over veth take milliseconds: a second is slack for a loaded machine, and far
    // below the 5 s idle timeout the stalled rows waited for.
    let lab = lab_with(&[]);
    check_rows(&grab_big(&lab, &[]), 1_000_000);
    drop(lab);

    // 1 % loss each way: the server retransmits, but the end still comes with the last byte,
    // never after the idle timeout (20 s here, so that a stall would show).
    let lab = lab_with(&["--loss", "0.01"]);
    let rows = grab_big(&lab, &["--idle-timeout", "20", "--total-timeout", "60"]);
    check_rows(&rows, 10_000_000);
}
