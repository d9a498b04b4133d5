//! `sonde grab` at a modest pace rests between its connections (issue 24): with `-r 1000`
//! over a /22 of the lab's nginx hosts, the engine thread sleeps until the next SYN, timer or
//! frame is due and lets frames gather, so it uses a small share of a core; the run ends as
//! its last row is out; and the RTTs stay true, because the frames read in batches are dated
//! by the kernel's arrival stamps (AF_XDP behind the reply filter, and the packet ring). Both
//! receive paths. Needs root; each lab has a unique name and is removed by its guard, also on
//! failure.

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

const TARGETS: &str = "198.18.0.0/22";
const HOSTS: usize = 1024;
const RATE: f64 = 1000.0;
/// Sources of the packet-ring run: an address of the link the scanner's kernel does not own.
const RING_SRC: &str = "198.19.255.2";

#[test]
fn a_paced_grab_rests_ends_with_its_last_row_and_keeps_true_rtts() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/22",
        "--responsive",
        "1.0",
        "--http",
    ]);
    for (backend, extra) in [("xdp", vec![]), ("ring", vec!["-S", RING_SRC])] {
        let (out_file, summary_file) = (
            lab.file(&format!("{backend}.ndjson")),
            lab.file(&format!("{backend}.json")),
        );
        let rate = RATE.to_string();
        let mut args = vec![
            "grab",
            "--lab",
            &lab.name,
            "-q",
            TARGETS,
            "-p",
            "80",
            "-M",
            "http",
            "-r",
            &rate,
            "--backend",
            backend,
            "-o",
            &out_file,
            "--summary-json",
            &summary_file,
        ];
        args.extend_from_slice(&extra);
        let out = sonde(&args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&out_file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let s: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&summary_file).unwrap()).unwrap();
        eprintln!("{backend}: {s}");
        assert_eq!(rows.len(), HOSTS, "{backend}: one row per target");
        assert!(rows.iter().all(|r| r["status"] == "success"), "{backend}");

        // The pace sets the length: 1,024 SYNs at 1,000 a second, and then the run ends with
        // its last connection (not a SYN retry's delay later).
        let wall = s["wall_s"].as_f64().unwrap();
        let pace = HOSTS as f64 / RATE;
        assert!(
            wall > pace * 0.9 && wall < pace + 0.5,
            "{backend}: {wall} s"
        );
        // A small share of one core (the issue asks for 5 %; the bound leaves room for a
        // loaded test machine). Spinning until the next SYN used 50-80 %.
        let cpu = s["cpu_user_s"].as_f64().unwrap() + s["cpu_sys_s"].as_f64().unwrap();
        assert!(cpu / wall < 0.25, "{backend}: {cpu} s of CPU in {wall} s");
        let l = &s["loop"];
        assert!(l["wait_s"].as_f64().unwrap() > wall / 2.0, "{backend}: {l}");

        // Replies read in batches still time right: the median RTT is the lab's (tens of µs),
        // not the wait for the batch (up to a millisecond).
        let mut rtts: Vec<u64> = rows.iter().filter_map(|r| r["rtt_us"].as_u64()).collect();
        rtts.sort_unstable();
        let median = rtts[rtts.len() / 2];
        assert!(median < 500, "{backend}: median rtt_us {median}");
    }
}
