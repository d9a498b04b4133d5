//! `lab up --rtt … --jitter … --reorder … --duplicate … --corrupt … --bottleneck …`: the lab's
//! path, sonde's own delay line between the scanner and the lab. A ping's round trip is the set
//! one (IPv4 and IPv6, under --target-cpus) and its replies keep their order; jitter spreads
//! round trips as stated and reorders; --reorder sends its share ahead; flipped bits are caught
//! by grab's checksums with every row still right; duplicates make no second row; the
//! bottleneck holds its rate; overflowing the path shows in its drop counters; `lab down`
//! removes every part of it, also after the delay line was killed. Needs root; every lab has a
//! unique name and is removed by its guard, also on failure. Every packet stays in the lab's
//! namespaces (ping, iperf3, scan and grab run in the scanner namespace, iperf3's server in the
//! lab's).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab};

/// `ip netns exec NS ARGS…`, checked.
fn in_ns(ns: &str, args: &[&str]) -> Output {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{ns}: {args:?}: {}", stderr(&out));
    out
}

/// One ping reply: its sequence number and round trip (ms), in the order they arrived.
struct Reply {
    seq: u32,
    ms: f64,
}

/// `ping -n -c COUNT -i INTERVAL ADDR` in namespace `ns`: the replies as they arrived.
fn ping(ns: &str, addr: &str, count: u32, interval: &str) -> Vec<Reply> {
    let count = count.to_string();
    let out = in_ns(
        ns,
        &["ping", "-n", "-c", &count, "-i", interval, "-W", "2", addr],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let replies: Vec<Reply> = text
        .lines()
        .filter_map(|l| {
            let seq = l.split("icmp_seq=").nth(1)?.split_whitespace().next()?;
            let ms = l.split("time=").nth(1)?.split_whitespace().next()?;
            Some(Reply {
                seq: seq.parse().ok()?,
                ms: ms.parse().ok()?,
            })
        })
        .collect();
    assert!(!replies.is_empty(), "no replies from {addr}: {text}");
    replies
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Share of replies that arrived after a reply to a later request.
fn late_share(replies: &[Reply]) -> f64 {
    let mut highest = 0;
    let mut late = 0;
    for r in replies {
        if r.seq < highest {
            late += 1;
        }
        highest = highest.max(r.seq);
    }
    late as f64 / replies.len() as f64
}

fn scan_ns(lab: &Lab) -> String {
    format!("sonde-{}-scan", lab.name)
}

/// The path's counters from `lab status --json`: `path_counters` (running, counters…).
fn path_counters(lab: &Lab) -> serde_json::Value {
    let st = lab.status();
    assert!(st["path"].is_object(), "no path in lab status: {st}");
    st["path_counters"].clone()
}

/// The counters of one direction (`to_lab`, `to_scanner`), once they show `frames_in` of at
/// least `min_in`. The delay line writes them every 100 ms, so the first read waits out two
/// writes: counters read as a run ends would miss its last frames (a grab once counted 6 bad
/// checksums against 5 flips written so far).
fn flow(lab: &Lab, direction: &str, min_in: u64) -> serde_json::Value {
    std::thread::sleep(Duration::from_millis(250));
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let c = path_counters(lab);
        let f = c["counters"][direction].clone();
        if f["frames_in"].as_u64().unwrap_or(0) >= min_in || Instant::now() > end {
            assert_eq!(c["running"], true, "{c}");
            return f;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every frame accounted for: in + duplicated = out + held + the path's own drops.
fn assert_accounted(f: &serde_json::Value) {
    let n = |k: &str| f[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {f}"));
    assert_eq!(
        n("frames_in") + n("duplicated"),
        n("frames_out") + n("held") + n("queue_full") + n("hold_full") + n("too_long"),
        "{f}"
    );
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Rows of an ndjson file.
fn rows(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `sonde grab --lab L -p 80 TARGETS -q -o OUT --summary-json S`: rows and summary.
fn grab(lab: &Lab, name: &str, targets: &str) -> (Vec<serde_json::Value>, serde_json::Value) {
    let (rows, summary, _) = grab_with(lab, name, targets, &["-q"]);
    (rows, summary)
}

/// `sonde grab --lab L -p 80 TARGETS -o OUT --summary-json S EXTRA…`: rows, summary, stderr.
fn grab_with(
    lab: &Lab,
    name: &str,
    targets: &str,
    extra: &[&str],
) -> (Vec<serde_json::Value>, serde_json::Value, String) {
    let (out_file, summary) = (
        lab.file(&format!("{name}.ndjson")),
        lab.file(&format!("{name}.json")),
    );
    let mut args = vec![
        "grab",
        "--lab",
        &lab.name,
        "-p",
        "80",
        targets,
        "-o",
        &out_file,
        "--summary-json",
        &summary,
        "--force",
    ];
    args.extend_from_slice(extra);
    let out = sonde(&args);
    assert!(out.status.success(), "{name}: {}", stderr(&out));
    (rows(&out_file), json(&summary), stderr(&out))
}

/// No (address, port) twice among `rows`.
fn assert_no_target_twice(rows: &[serde_json::Value]) {
    let mut seen = std::collections::HashSet::new();
    for r in rows {
        let key = format!("{}:{}", r["saddr"], r["dport"]);
        assert!(seen.insert(key.clone()), "{key} has two rows");
    }
}

/// `lab score` of a grab's results: every live target completed with the right body, and no
/// false positive.
fn assert_grab_scores_all(lab: &Lab, results: &str, live: u64) {
    let line = lab.score(&["--port", "80", results]);
    let (completed, of, correct, wrong, false_positives) = grab_score(&line);
    assert_eq!((completed, of), (live, live), "{line}");
    assert_eq!((correct, wrong, false_positives), (live, 0, 0), "{line}");
}

#[test]
fn a_ping_takes_the_set_round_trip_in_order_over_both_families() {
    if !can_run_labs() {
        return;
    }
    let online = sonde_lab::online_cpus().unwrap();
    let mut args = vec![
        "--population",
        "198.18.0.0/28",
        "--population6",
        "2001:2::/124",
        "--responsive",
        "1.0",
        "--tcp-open",
        "80",
        "--rtt",
        "20ms",
    ];
    let cpu = online.last().unwrap().to_string();
    if online.len() > 1 {
        args.extend(["--target-cpus", cpu.as_str()]);
    }
    let lab = Lab::up(&args);
    let ns = scan_ns(&lab);
    for addr in ["198.18.0.1", "2001:2::1"] {
        let replies = ping(&ns, addr, 20, "0.01");
        let ms: Vec<f64> = replies.iter().map(|r| r.ms).collect();
        let (lowest, middle) = (ms.iter().copied().fold(f64::MAX, f64::min), median(&ms));
        // Never early, and the set 20 ms to within 1 ms.
        assert!(lowest >= 20.0, "{addr}: {ms:?}");
        assert!(
            (middle - 20.0).abs() <= 1.0,
            "{addr}: median {middle} of {ms:?}"
        );
        assert_eq!(
            late_share(&replies),
            0.0,
            "{addr}: order kept without jitter"
        );
    }
    // The truth is unchanged by the path: a scan across it finds every open port.
    let out_file = lab.file("scan.csv");
    let out = lab.scan(&["198.18.0.0/28", "-p", "80", "-o", &out_file, "--force"]);
    assert!(out.status.success(), "scan: {}", stderr(&out));
    let line = lab.score(&["--port", "80", &out_file]);
    assert!(
        line.starts_with("found 16 of 16 (100") && line.contains("false positives 0"),
        "{line}"
    );
    let c = path_counters(&lab);
    assert_eq!(c["running"], true, "{c}");
    for direction in ["to_lab", "to_scanner"] {
        let f = flow(&lab, direction, 40);
        assert_accounted(&f);
        assert_eq!(u(&f["queue_full"]) + u(&f["hold_full"]), 0, "{f}");
    }
    // Text status says it in words.
    let out = sonde(&["lab", "status", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("rtt 20ms") && text.contains("running") && text.contains("path to lab"),
        "{text}"
    );
    // `lab down` leaves nothing of the path.
    let pid = lab.status()["path"]["pid"].as_u64().unwrap();
    let out = sonde(&["lab", "down", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_path_gone(&lab, pid);
}

/// Nothing of lab's path is left: no namespace of the lab, no delay line, no folder.
fn assert_path_gone(lab: &Lab, pid: u64) {
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("sonde-{}-", lab.name)))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    assert!(
        !Path::new(&format!("/run/sonde/lab/{}-path", lab.name)).exists(),
        "the path's folder is left"
    );
    let end = Instant::now() + Duration::from_secs(3);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the delay line (pid {pid}) still runs"
    );
}

#[test]
fn jitter_spreads_round_trips_as_set_and_reorders() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/30",
        "--responsive",
        "1.0",
        "--rtt",
        "20ms",
        "--jitter",
        "4ms",
    ]);
    let replies = ping(&scan_ns(&lab), "198.18.0.1", 300, "0.005");
    assert!(replies.len() >= 295, "{} replies", replies.len());
    let ms: Vec<f64> = replies.iter().map(|r| r.ms).collect();
    let (mean, sd) = mean_sd(&ms);
    // A round trip's standard deviation is the jitter; 300 samples put it within ±20 %
    // (its standard error is 4 %); the mean is the round trip (scheduling adds a little).
    assert!((mean - 20.0).abs() <= 1.0, "mean {mean}");
    assert!((sd / 4.0 - 1.0).abs() <= 0.2, "sd {sd}");
    // Each way is cut at 3 × 4/√2 ms, so a round trip lies within 20 ± 17 ms.
    assert!(ms.iter().all(|m| *m >= 3.0 && *m <= 38.0), "{ms:?}");
    // Requests 5 ms apart (or more, on a busy machine) with round trips spread by 4 ms: some
    // replies arrive after a later one's (about a fifth at 5 ms: two round trips differ by more
    // than 5 ms with probability P(Z > 5/5.66) = 0.19; 6 % at 9 ms).
    let late = late_share(&replies);
    assert!((0.01..=0.35).contains(&late), "late share {late}");
}

#[test]
fn reorder_sends_its_share_ahead() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/30",
        "--responsive",
        "1.0",
        "--rtt",
        "100ms",
        "--reorder",
        "0.2",
    ]);
    let replies = ping(&scan_ns(&lab), "198.18.0.1", 400, "0.002");
    assert!(replies.len() >= 395, "{} replies", replies.len());
    // A reply is early when its request or itself skipped the hold (a round trip of 50 ms, or
    // none): 1 - 0.8² = 36 % of them. (400 samples: standard error 2.4 %.)
    let early = replies.iter().filter(|r| r.ms < 75.0).count() as f64 / replies.len() as f64;
    assert!((early - 0.36).abs() <= 0.08, "early share {early}");
    // Requests 2 ms apart, 100 ms held: an early one overtakes several. The hold is long so
    // that this holds on a busy machine too, where ping's requests go out 20 ms apart (at a
    // 20 ms hold, such a run once saw only 8 % of replies overtaken).
    assert!(late_share(&replies) > 0.1, "{}", late_share(&replies));
    for direction in ["to_lab", "to_scanner"] {
        let f = flow(&lab, direction, 395);
        let share = u(&f["reordered"]) as f64 / u(&f["frames_in"]) as f64;
        assert!((share - 0.2).abs() <= 0.06, "{direction}: {share} {f}");
        assert_accounted(&f);
    }
}

#[test]
fn flipped_bits_are_caught_by_grab_and_its_rows_stay_right() {
    if !can_run_labs() {
        return;
    }
    // With loss too: the path combines with the lab's own drops.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/27",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80",
        "--loss",
        "0.02",
        "--rtt",
        "2ms",
        "--corrupt",
        "0.05",
    ]);
    let (rows, s) = grab(&lab, "corrupt", "198.18.0.0/27");
    assert_no_target_twice(&rows);
    assert_eq!(rows.len(), 32, "{s}");
    let bad = u(&s["bad_checksums"]);
    let f = flow(&lab, "to_scanner", 1);
    let flipped = u(&f["corrupted"]);
    // Flips toward the scanner are caught by its checksum check (an IPv4 header's or TCP's);
    // the lab's kernel drops the others (and the sender sends again).
    assert!(
        bad > 0 && bad <= flipped,
        "bad {bad}, flipped {flipped}: {s}"
    );
    assert!(u(&flow(&lab, "to_lab", 1)["corrupted"]) > 0);
    assert_grab_scores_all(&lab, &lab.file("corrupt.ndjson"), 32);
    assert_accounted(&f);
}

#[test]
fn duplicated_segments_make_no_second_row() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/27",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80",
        "--rtt",
        "2ms",
        "--duplicate",
        "1.0",
    ]);
    let (grabbed, s) = grab(&lab, "dup", "198.18.0.0/27");
    assert_no_target_twice(&grabbed);
    assert_eq!(grabbed.len(), 32, "{s}");
    assert_grab_scores_all(&lab, &lab.file("dup.ndjson"), 32);
    // Every frame was sent twice, both ways.
    for direction in ["to_lab", "to_scanner"] {
        let f = flow(&lab, direction, 32);
        assert_eq!(f["duplicated"], f["frames_in"], "{direction}: {f}");
        assert_accounted(&f);
    }
    // A scan across it: every SYN-ACK comes twice; the second is a repeat (scan's `repeat`
    // column), never a second result.
    let out_file = lab.file("scan.ndjson");
    let out = lab.scan(&[
        "198.18.0.0/27",
        "-p",
        "80",
        "-O",
        "ndjson",
        "-o",
        &out_file,
        "--force",
    ]);
    assert!(out.status.success(), "scan: {}", stderr(&out));
    let line = lab.score(&["--port", "80", &out_file]);
    assert!(
        line.starts_with("found 32 of 32 (100") && line.contains("false positives 0"),
        "{line}"
    );
    let firsts: Vec<serde_json::Value> = rows(&out_file)
        .into_iter()
        .filter(|r| r["repeat"] == 0 || r["repeat"] == false)
        .collect();
    assert_no_target_twice(&firsts);
    assert_eq!(firsts.len(), 32, "one first row per host");
}

#[test]
fn the_bottleneck_holds_its_rate_and_drops_the_tail() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/30",
        "--responsive",
        "1.0",
        "--bottleneck",
        "20mbit",
        "--bottleneck-queue",
        "50",
    ]);
    let net_ns = format!("sonde-{}-net", lab.name);
    // iperf3's server on the lab's side of the link (one test, then it exits; `lab down` ends
    // it otherwise).
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &net_ns,
            "iperf3",
            "-s",
            "-1",
            "-B",
            "198.19.255.254",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Twice the bottleneck's rate, in 1000-byte datagrams (1042-byte frames), for 3 s.
    let client = std::thread::spawn({
        let ns = scan_ns(&lab);
        move || {
            Command::new("ip")
                .args(["netns", "exec", &ns, "iperf3", "-c", "198.19.255.254", "-u"])
                .args(["-b", "40M", "-l", "1000", "-t", "3"])
                .output()
                .unwrap()
        }
    });
    // What reached the lab in the middle second of the run, by its kernel's count (bytes of
    // frames from the Ethernet header on, as the bottleneck counts them).
    std::thread::sleep(Duration::from_millis(1000));
    let (t0, b0) = (
        Instant::now(),
        sonde_lab::net_counters(&lab.name).unwrap().rx_bytes,
    );
    std::thread::sleep(Duration::from_millis(1000));
    let (t1, b1) = (
        Instant::now(),
        sonde_lab::net_counters(&lab.name).unwrap().rx_bytes,
    );
    let out = client.join().unwrap();
    assert!(out.status.success(), "iperf3: {}", stderr(&out));
    let _ = server.wait();
    let bps = (b1 - b0) as f64 * 8.0 / (t1 - t0).as_secs_f64();
    assert!(
        (bps / 20e6 - 1.0).abs() <= 0.05,
        "{bps} bit/s through 20mbit"
    );
    let f = flow(&lab, "to_lab", 1000);
    assert!(u(&f["queue_full"]) > 1000, "the queue overflowed: {f}");
    assert_accounted(&f);
}

#[test]
fn overflowing_the_path_shows_in_its_counters_and_down_cleans_up_after_a_kill() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/30",
        "--responsive",
        "1.0",
        "--rtt",
        "200ms",
        "--path-frames",
        "16",
    ]);
    // 100 requests sent at once (preloaded), each held 100 ms: 100 at once, more than 16.
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &scan_ns(&lab),
            "ping",
            "-n",
            "-q",
            "-c",
            "100",
        ])
        .args(["-l", "100", "-W", "1", "198.18.0.1"])
        .output()
        .unwrap();
    assert!(!out.stdout.is_empty(), "{}", stderr(&out));
    let f = flow(&lab, "to_lab", 100);
    assert!(u(&f["hold_full"]) > 0 && u(&f["held_peak"]) == 16, "{f}");
    assert_accounted(&f);
    let out = sonde(&["lab", "status", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("hold full") && !text.contains("NOT RUNNING"),
        "{text}"
    );
    // Killed: status says so and fails; down removes every part of the lab.
    let pid = lab.status()["path"]["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sonde(&["lab", "status", "--name", &lab.name, "--json"]);
    assert!(!out.status.success(), "status of a dead path succeeded");
    assert!(stderr(&out).contains("not running"), "{}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["path_counters"]["running"], false, "{st}");
    let out = sonde(&["lab", "down", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_path_gone(&lab, pid);
}

#[test]
fn the_xdp_responder_serves_across_a_path() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/27",
        "--responsive",
        "1.0",
        "--responder",
        "xdp",
        "--http",
        "--rtt",
        "10ms",
        "--jitter",
        "1ms",
    ]);
    let (rows, _) = grab(&lab, "xdp", "198.18.0.0/27");
    assert_no_target_twice(&rows);
    assert_grab_scores_all(&lab, &lab.file("xdp.ndjson"), 32);
    let replies = ping(&scan_ns(&lab), "198.18.0.1", 20, "0.01");
    let ms: Vec<f64> = replies.iter().map(|r| r.ms).collect();
    assert!((median(&ms) - 10.0).abs() <= 1.5, "{ms:?}");
}

#[test]
fn a_bridge_lab_has_its_path_between_a_and_mid() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--bridge", "--rtt", "20ms"]);
    let a = format!("sonde-{}-a", lab.name);
    let replies = ping(&a, "198.19.254.2", 20, "0.01");
    let ms: Vec<f64> = replies.iter().map(|r| r.ms).collect();
    assert!(ms.iter().all(|m| *m >= 20.0), "{ms:?}");
    assert!((median(&ms) - 20.0).abs() <= 1.0, "{ms:?}");
    let replies = ping(&a, "2001:2:0:fe::2", 10, "0.01");
    assert!(replies.iter().all(|r| r.ms >= 20.0));
    let st = lab.status();
    assert_eq!(st["shape"], "bridge");
    assert_eq!(st["path_counters"]["running"], true, "{st}");
    let f = flow(&lab, "to_lab", 30);
    assert_accounted(&f);
}

#[test]
fn across_a_path_longer_than_the_syn_wait_retries_race_and_nothing_is_sent_twice() {
    if !can_run_labs() {
        return;
    }
    // 1.1 s: every SYN's retry (at 1 s) leaves before its SYN-ACK comes, and the stateless
    // server answers both. The second SYN-ACK echoes the retry: a bare ACK, not the request
    // again; the answers count as first tries that raced their retries, not as losses.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/27",
        "--responsive",
        "1.0",
        "--responder",
        "xdp",
        "--http",
        "--rtt",
        "1100ms",
    ]);
    let run = |name: &str, extra: &[&str]| {
        let (rows, summary, err) = grab_with(&lab, name, "198.18.0.0/27", extra);
        assert_no_target_twice(&rows);
        assert_grab_scores_all(&lab, &lab.file(&format!("{name}.ndjson")), 32);
        (summary, err)
    };
    let (s, err) = run("raced", &[]);
    let count = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert!(count("syn_retransmitted") >= 32, "{s}");
    assert_eq!(count("retransmits_sent"), 0, "{s}");
    assert_eq!(count("answered_after_retry"), 0, "{s}");
    assert_eq!(count("answered_first_syn_after_retry"), 32, "{s}");
    assert!(s["losses"].is_null(), "{s}");
    assert!(
        err.contains("SYN retries raced their answers: 32 of 32") && !err.contains("lost:"),
        "{err}"
    );
    // With the wait above the round trip no SYN goes twice and nothing is said.
    let (s, err) = run("waited", &["--syn-timeout", "3"]);
    assert_eq!(s["syn_retransmitted"].as_u64(), Some(0), "{s}");
    assert!(s["syn_retries_raced"].is_null(), "{s}");
    assert!(!err.contains("raced"), "{err}");
}
