//! Scan integration in the lab: accuracy against ground truth at full speed, resume after an
//! interrupt at a random point, the ICMP and UDP modules, and the bad-input errors. Needs root
//! for the lab tests; each lab has a unique name and is removed by a guard, also on failure.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{can_run_labs, sonde, stderr, Lab, SONDE};

fn json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The `saddr` column of a scan's CSV output.
fn addresses(path: &str) -> Vec<String> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader
        .records()
        .map(|r| r.unwrap()[0].to_string())
        .collect()
}

#[test]
fn scan_at_full_speed_finds_the_truth_and_nothing_else() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/16",
        "--responsive",
        "0.1",
        "--tcp-open",
        "80,443",
    ]);
    let (results, summary) = (lab.file("r.csv"), lab.file("s.json"));
    let out = lab.scan(&[
        "198.18.0.0/16",
        "-p",
        "80",
        "-r",
        "0",
        "-c",
        "2",
        "-o",
        &results,
        "--summary-json",
        &summary,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = lab.score(&["--port", "80", &results]);
    let s = json(&summary);
    eprintln!("{text} at {} pps", s["pps"]);
    let expected = s["hits"].as_u64().unwrap();
    assert!(text.contains("false positives 0"), "{text}");
    let found: u64 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let truth: u64 = text.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(found * 1000 >= truth * 999, "found {found} of {truth}");
    assert_eq!(expected, found, "hits counted = rows found");
    assert_eq!(s["invalid"], 0);
    assert_eq!(s["sent"], 65536);
    for key in [
        "targets",
        "sent",
        "wall_s",
        "send_wall_s",
        "pps",
        "received",
        "valid",
        "invalid",
        "hits",
        "repeats",
        "cpu_user_s",
        "cpu_sys_s",
    ] {
        assert!(s.get(key).is_some(), "summary lacks {key}");
    }
}

#[test]
fn af_xdp_receive_behind_the_reply_filter_finds_the_truth() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/18",
        "--responsive",
        "0.1",
        "--queues",
        "2",
    ]);
    for threads in ["1", "2"] {
        let (results, summary) = (
            lab.file(&format!("x{threads}.csv")),
            lab.file(&format!("x{threads}.json")),
        );
        let out = lab.scan(&[
            "198.18.0.0/18",
            "-p",
            "80",
            "-r",
            "0",
            "-c",
            "1",
            "--threads",
            threads,
            "--rx-backend",
            "xdp",
            "-o",
            &results,
            "--summary-json",
            &summary,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let score = lab.score(&["--port", "80", &results]);
        assert!(
            score.contains("(100.000 %), false positives 0"),
            "{threads} threads: {score}"
        );
        // sonde resets the SYN-ACKs the kernel no longer sees, so none is retransmitted.
        let s = json(&summary);
        assert_eq!(s["repeats"], 0, "{s}");
    }
}

#[test]
fn resume_after_an_interrupt_loses_and_repeats_nothing() {
    if !can_run_labs() {
        return;
    }
    // Every address answers, so every probe shows up as exactly one row.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/18",
        "--responsive",
        "1.0",
        "--tcp-open",
        "80",
    ]);
    let (first, second, checkpoint) = (lab.file("a.csv"), lab.file("b.csv"), lab.file("ck.json"));
    let common = [
        "198.18.0.0/18",
        "-p",
        "80",
        "-r",
        "8000",
        "-c",
        "1",
        "--seed",
        "99",
        "--checkpoint",
        &checkpoint,
    ];
    let mut args: Vec<&str> = vec![
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "-q",
        "-o",
        &first,
    ];
    args.extend_from_slice(&common);
    let mut child = Command::new(SONDE)
        .args(&args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A random moment within the 2-second send phase.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let at = Duration::from_millis(300 + u64::from(nanos % 1400));
    eprintln!("interrupting after {at:?}");
    std::thread::sleep(at);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "interrupted scan: {status}");
    assert!(Path::new(&checkpoint).exists(), "no checkpoint written");

    // Resuming into the first output would overwrite its rows: refused, naming --append.
    let mut into_first: Vec<&str> = vec![
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "-q",
        "-o",
        &first,
        "--resume",
        &checkpoint,
    ];
    into_first.extend_from_slice(&common);
    let refused = sonde(&into_first);
    assert!(
        !refused.status.success(),
        "the first output was overwritten"
    );
    assert!(
        stderr(&refused).contains("--append"),
        "{}",
        stderr(&refused)
    );
    let mut args: Vec<&str> = vec![
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "-q",
        "-o",
        &second,
        "--resume",
        &checkpoint,
    ];
    args.extend_from_slice(&common);
    let out = sonde(&args);
    assert!(out.status.success(), "{}", stderr(&out));

    let (a, b) = (addresses(&first), addresses(&second));
    eprintln!("{} rows before the interrupt, {} after", a.len(), b.len());
    let (sa, sb): (HashSet<_>, HashSet<_>) = (a.iter().collect(), b.iter().collect());
    assert_eq!(sa.len(), a.len(), "a repeat within the first part");
    assert_eq!(sb.len(), b.len(), "a repeat within the second part");
    assert!(
        sa.is_disjoint(&sb),
        "probed twice: {:?}",
        sa.intersection(&sb).take(5).collect::<Vec<_>>()
    );
    assert_eq!(a.len() + b.len(), 16384, "targets missed");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "the interrupt did not split the scan"
    );
}

#[test]
fn icmp_and_udp_modules_find_the_responsive_hosts() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.16.0/20",
        "--responsive",
        "0.3",
        "--tcp-open",
        "80",
    ]);
    let echo = lab.file("echo.csv");
    let out = lab.scan(&[
        "198.18.16.0/20",
        "-M",
        "icmp_echo",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &echo,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&["--port", "0", "--answer", "echo", &echo]);
    assert!(
        score.contains("(100.000 %), false positives 0"),
        "icmp_echo: {score}"
    );

    // A closed UDP port: every responsive host answers ICMP port unreachable.
    let unreach = lab.file("udp.csv");
    let out = lab.scan(&[
        "198.18.16.0/20",
        "-M",
        "udp",
        "-p",
        "9999",
        "--payload-hex",
        "68656c6c6f",
        "-r",
        "0",
        "-c",
        "1",
        "-f",
        "saddr,sport,classification",
        "--output-filter",
        "classification = unreach",
        "-o",
        &unreach,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&["--port", "0", "--answer", "echo", &unreach]);
    assert!(
        score.contains("(100.000 %), false positives 0"),
        "udp: {score}"
    );
}

#[test]
fn ipv6_and_mixed_scans_find_the_truth() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--population6",
        "2001:2::/116",
        "--responsive",
        "0.3",
        "--tcp-open",
        "80",
    ]);
    let syn = lab.file("syn6.csv");
    let out = lab.scan(&["2001:2::/116", "-p", "80", "-r", "0", "-c", "1", "-o", &syn]);
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&["--port", "80", "--within", "2001:2::/116", &syn]);
    assert!(
        score.contains("(100.000 %), false positives 0"),
        "tcp_syn over IPv6: {score}"
    );
    // One scan over both families, from a hit list file.
    let list = lab.file("targets.txt");
    std::fs::write(&list, "# both families\n2001:2::/116\n198.18.0.0/24\n").unwrap();
    let echo = lab.file("echo.csv");
    let out = lab.scan(&[
        "-I",
        &list,
        "-M",
        "icmp_echo",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &echo,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&["--port", "0", "--answer", "echo", &echo]);
    assert!(
        score.contains("(100.000 %), false positives 0"),
        "icmp_echo over both families: {score}"
    );
}

#[test]
fn dns_module_gets_answers_from_every_responsive_address() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.32.0/22",
        "--responsive",
        "0.25",
        "--tcp-open",
        "80",
        "--dns",
    ]);
    let out_csv = lab.file("dns.csv");
    let out = lab.scan(&[
        "198.18.32.0/22",
        "-M",
        "dns",
        "-p",
        "53",
        "--dns-name",
        "example.com",
        "--dns-type",
        "A",
        "-r",
        "20000",
        "-c",
        "1",
        "-f",
        "saddr,sport,success,classification,dns_rcode,dns_answers",
        "-o",
        &out_csv,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut reader = csv::Reader::from_path(&out_csv).unwrap();
    let rows: Vec<_> = reader.records().map(|r| r.unwrap()).collect();
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!((&row[3], &row[4], &row[5]), ("dns", "0", "1"), "{row:?}");
    }
    // Every responsive address answered, and nothing else did.
    let score = lab.score(&["--port", "0", "--answer", "echo", &out_csv]);
    assert!(
        score.contains("(100.000 %), false positives 0"),
        "dns: {score}"
    );
}

#[test]
fn bad_scan_input_gets_one_clear_line() {
    let cases: [(&[&str], &str); 6] = [
        (&["scan", "--dryrun", "198.18.0.0/33"], "198.18.0.0/33"),
        (
            &["scan", "--dryrun", "198.18.0.0/24", "-p", "80,70000"],
            "70000",
        ),
        (
            &["scan", "--dryrun", "198.18.0.0/24", "-M", "tcp_ack"],
            "tcp_syn, icmp_echo, udp, dns",
        ),
        (&["scan", "--dryrun", "198.18.0.0/24"], "no targets left"),
        (
            &[
                "scan",
                "--dryrun",
                "--no-default-blocklist",
                "198.18.0.0/24",
                "-f",
                "saddr,bogus",
            ],
            "bogus",
        ),
        (
            &["scan", "--lab", "x", "--no-default-blocklist", "0.0.0.0/7"],
            "--confirm-large-scan",
        ),
    ];
    for (args, needle) in cases {
        let out = sonde(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        // The error is one line (clap may add its "try --help" hint on lines of its own).
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.contains("error") && first.contains(needle),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn dryrun_prints_every_frame_and_sends_nothing() {
    let out = sonde(&[
        "scan",
        "--dryrun",
        "--no-default-blocklist",
        "198.18.0.0/30",
        "-p",
        "80,443",
        "--seed",
        "5",
        "-q",
        "-G",
        "02:00:00:00:00:02",
        "-S",
        "198.19.255.1",
        "-i",
        "lo",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<_> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    let targets: HashSet<_> = lines
        .iter()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(targets.len(), 8, "each (address, port) once: {targets:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("tcp") && l.contains("198.19.255.1:")),
        "{text}"
    );
    let again = sonde(&[
        "scan",
        "--dryrun",
        "--no-default-blocklist",
        "198.18.0.0/30",
        "-p",
        "80,443",
        "--seed",
        "5",
        "-q",
        "-G",
        "02:00:00:00:00:02",
        "-S",
        "198.19.255.1",
        "-i",
        "lo",
    ]);
    // The validation key is random for every run (only the order comes from the seed), so
    // sequence numbers and source ports differ: compare the targets in order.
    let order = |o: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.split_whitespace().nth(2).unwrap().to_string())
            .collect()
    };
    assert_eq!(order(&again), order(&out), "same seed, same order");
    assert_ne!(
        again.stdout, out.stdout,
        "a new validation key for every run"
    );
}

/// The `q` quantile (0 to 1) of a scan's `rtt_us` column, in microseconds.
fn rtt_quantile_us(path: &str, q: f64) -> f64 {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let column = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "rtt_us")
        .expect("an rtt_us column");
    let mut rtts: Vec<u64> = reader
        .records()
        .filter_map(|r| r.unwrap()[column].parse().ok())
        .collect();
    assert!(!rtts.is_empty(), "no rtt_us in {path}");
    rtts.sort_unstable();
    rtts[((rtts.len() - 1) as f64 * q) as usize] as f64
}

/// The largest `rtt_us` of a scan.
fn max_rtt_us(path: &str) -> u64 {
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader
        .records()
        .filter_map(|r| r.unwrap()[1].parse().ok())
        .max()
        .unwrap_or(0)
}

/// `ping`'s average RTT to `addr` from the lab's scanner namespace, in microseconds.
fn ping_rtt_us(lab: &Lab, addr: &str) -> f64 {
    let ns = format!("sonde-{}-scan", lab.name);
    let out = Command::new("ip")
        .args([
            "netns", "exec", &ns, "ping", "-c", "5", "-i", "0.2", "-q", addr,
        ])
        .output()
        .expect("running ping");
    let text = String::from_utf8_lossy(&out.stdout);
    // rtt min/avg/max/mdev = 0.046/0.058/0.068/0.008 ms
    let figures = text
        .lines()
        .find(|l| l.contains("min/avg/max"))
        .and_then(|l| l.split('=').nth(1))
        .unwrap_or_else(|| panic!("no RTT line from ping: {text}"));
    let avg: f64 = figures.trim().split('/').nth(1).unwrap().parse().unwrap();
    avg * 1000.0
}

#[test]
fn scan_rtts_agree_with_ping() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.64.0/22",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    for (module, ports) in [("tcp_syn", &["-p", "80"][..]), ("icmp_echo", &[])] {
        let results = lab.file(&format!("{module}.csv"));
        let mut args = vec!["198.18.64.0/22", "-M", module, "-r", "2000", "-c", "1"];
        args.extend_from_slice(ports);
        args.extend_from_slice(&["-f", "saddr,rtt_us", "-o", &results]);
        let out = lab.scan(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let scan = rtt_quantile_us(&results, 0.5);
        let ping = ping_rtt_us(&lab, &addresses(&results)[0]);
        eprintln!("{module}: median rtt_us {scan}, ping {ping:.0} us");
        // The lab answers in tens of microseconds. Neither the set-up time (tens of
        // milliseconds) nor the packet ring's hand-over of a block (up to a few) may enter it.
        assert!(
            (scan - ping).abs() <= 2000.0,
            "{module}: median rtt_us {scan} against ping's {ping:.0} us"
        );
        // The packet ring hands replies over a block at a time, up to 4 ms late (a jiffy at
        // HZ=250): only the kernel's arrival stamps keep that out of most RTTs, not the median.
        let p90 = rtt_quantile_us(&results, 0.9);
        assert!(
            p90 <= ping + 2500.0,
            "{module}: 90th percentile rtt_us {p90} against ping's {ping:.0} us"
        );
        // No reply is dated before its probe (that would wrap to about 2^32 µs).
        assert!(max_rtt_us(&results) < 1_000_000, "{module}: {results}");
    }
}
