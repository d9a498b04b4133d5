//! Lab integration of `sonde profile stack`: a short run (three sizes, three sends each) in a
//! lab of its own, checked for a row per (path, protocol, size) with sane latencies, the
//! fragments and segments all seen, the fits printed, the PNG written and the scanner
//! interface's offloads given back. And the one-line errors for bad input. Needs root for the
//! lab part; without it that test says so and passes vacuously. No timing thresholds.

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

const SIZES: [usize; 3] = [64, 4096, 65507];

/// The TSO and GSO lines of `ethtool -k sx0` in the lab's scanner namespace.
fn offloads(lab: &Lab) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &format!("sonde-{}-scan", lab.name)])
        .args(["ethtool", "-k", "sx0"])
        .output()
        .expect("ethtool");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("tcp-segmentation-offload")
                || l.starts_with("generic-segmentation-offload")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_short_stack_profile_measures_every_path_protocol_and_size() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24"]);
    let before = offloads(&lab);
    assert_eq!(before.len(), 2, "ethtool -k sx0: {before:?}");
    let out_dir = lab.file("stack");
    let json = lab.file("stack.json");
    let sizes = SIZES.map(|s| s.to_string()).join(",");
    let out = sonde(&[
        "profile",
        "stack",
        "--lab",
        &lab.name,
        "--sizes",
        &sizes,
        "--reps",
        "3",
        "--out",
        &out_dir,
        "--summary-json",
        &json,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}\n{stdout}", stderr(&out));
    assert_eq!(offloads(&lab), before, "offloads restored after the run");

    let mut rows = csv::Reader::from_path(format!("{out_dir}/stack.csv")).unwrap();
    let headers = rows.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2 * 2 * SIZES.len(), "{rows:?}");
    for path in ["kernel", "sonde"] {
        for proto in ["udp", "tcp"] {
            for size in SIZES {
                let what = format!("{path} {proto} {size}");
                let found: Vec<_> = rows
                    .iter()
                    .filter(|r| {
                        r[col("path")] == *path
                            && r[col("proto")] == *proto
                            && r[col("size_bytes")] == *size.to_string()
                    })
                    .collect();
                assert_eq!(found.len(), 1, "{what}: rows {found:?}");
                let row = found[0];
                let num = |name: &str| row[col(name)].parse::<f64>().unwrap();
                let (start, stop) = (num("start_us"), num("stop_us"));
                assert!(start.is_finite() && stop.is_finite(), "{what}: {row:?}");
                assert!(
                    0.0 <= start && start <= stop,
                    "{what}: start {start} stop {stop}"
                );
                assert!(num("reps") >= 1.0, "{what}: {row:?}");
                // Every fragment and segment passed the tap: UDP as 1480-byte fragments of
                // the datagram, TCP in segments of at most 1460 bytes (offloads off).
                let frames = num("frames") as usize;
                match proto {
                    "udp" => assert_eq!(frames, (size + 8).div_ceil(1480), "{what}"),
                    _ => assert!(frames >= size.div_ceil(1460), "{what}: {frames} frames"),
                }
                // The kernel's own timestamps exist for its path only.
                let stamped = !row[col("sw_us")].is_empty() && !row[col("sched_us")].is_empty();
                assert_eq!(stamped, path == "kernel", "{what}: {row:?}");
            }
        }
    }
    let samples = std::fs::read_to_string(format!("{out_dir}/stack-samples.csv")).unwrap();
    assert!(samples.lines().count() > rows.len(), "{samples}");

    let png = std::fs::read(format!("{out_dir}/stack.png")).unwrap();
    assert!(
        png.len() > 1000 && png.starts_with(b"\x89PNG"),
        "{} bytes",
        png.len()
    );

    for path in ["kernel", "sonde"] {
        for proto in ["udp", "tcp"] {
            let block = stdout
                .split("\n\n")
                .find(|b| b.starts_with(&format!("{path} {proto}:")))
                .unwrap_or_else(|| panic!("no {path} {proto} table in:\n{stdout}"));
            for line in ["start = ", "stop  = "] {
                assert!(
                    block
                        .lines()
                        .any(|l| l.trim_start().starts_with(line.trim_start())
                            && l.contains("·x")
                            && l.ends_with(')')),
                    "{path} {proto}: no {line:?} line in:\n{block}"
                );
            }
        }
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let fits = summary["fits"].as_array().unwrap();
    assert_eq!(fits.len(), 4, "{summary}");
    for fit in fits {
        for line in ["start", "stop"] {
            assert!(fit[line]["slope"].as_f64().unwrap().is_finite(), "{fit}");
            assert_eq!(fit[line]["points"], SIZES.len(), "{fit}");
        }
    }
    let cost = &summary["instrumentation"];
    for key in [
        "clock_read_ns",
        "kernel_tap_ns_per_frame",
        "lab_tap_ns_per_frame",
    ] {
        let v = cost[key].as_f64().unwrap_or(-1.0);
        assert!(v.is_finite() && v >= 0.0, "{key}: {cost}");
    }
    assert!(cost["tap_gap_ns"].as_f64().unwrap().is_finite(), "{cost}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let dir = std::env::temp_dir().join(format!("sonde-stack-errors-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--sizes", "64,0"], "0 bytes"),
        (&["--sizes", "64,70000"], "65507"),
        (&["--sizes", "64,big"], "\"big\""),
        (&["--out", "/proc/sonde-cannot-write-here"], "--out"),
        (&["--lab", "nolabhere"], "not up"),
    ];
    for (args, expect) in cases {
        let mut all = vec!["profile", "stack"];
        all.extend_from_slice(args);
        for (flag, default) in [("--lab", "nolabhere"), ("--out", out)] {
            if !args.contains(&flag) {
                all.extend([flag, default]);
            }
        }
        let o = sonde(&all);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
