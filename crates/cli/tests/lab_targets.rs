//! Where the lab's targets run: `lab up --target-cpus` (the lab's side on its own CPUs, sonde on
//! the others) and `lab up --responder xdp` (an XDP program answers), against the kernel
//! responder on the same population: the same truth, the same scores, the same replies.
//! Needs root for the labs; each lab has a unique name and is removed by its guard.

use std::collections::BTreeSet;
use std::process::Command;

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

const POP4: &str = "198.18.60.0/22";
const POP6: &str = "2001:2::/120";

fn lab_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--population",
        POP4,
        "--population6",
        POP6,
        "--responsive",
        "0.3",
        "--tcp-open",
        "80",
        "--seed",
        "11",
    ];
    args.extend_from_slice(extra);
    args
}

/// The rows of a scan's CSV output, each reduced to `fields`, as a set.
fn rows(path: &str, fields: &[&str]) -> BTreeSet<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at: Vec<usize> = fields
        .iter()
        .map(|f| header.iter().position(|h| h == f).expect(f))
        .collect();
    lines
        .map(|l| {
            let cols: Vec<&str> = l.split(',').collect();
            at.iter().map(|&i| cols[i].to_string()).collect()
        })
        .collect()
}

/// A scan compared: (file, scan arguments, score arguments, fields of a reply that must read
/// the same from both responders).
type Compared = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const SCANS: &[Compared] = &[
    (
        "syn.csv",
        &["-p", "80,81"],
        &["--port", "80"],
        &[
            "saddr",
            "sport",
            "classification",
            "ttl",
            "window",
            "tcp_mss",
            "tcp_wscale",
            "tcp_sack_ok",
        ],
    ),
    (
        "echo.csv",
        &["-M", "icmp_echo"],
        &[],
        &["saddr", "classification", "ttl"],
    ),
    (
        "udp.csv",
        &[
            "-M",
            "udp",
            "-p",
            "9999",
            "--payload-hex",
            "6869",
            "--output-filter",
            "classification = unreach",
        ],
        &[],
        &["saddr", "sport", "classification", "ttl"],
    ),
];

/// Scans the lab with every module of `SCANS`: (score line, reply rows) of each.
fn scan_all(lab: &Lab) -> Vec<(String, BTreeSet<Vec<String>>)> {
    SCANS
        .iter()
        .map(|(file, scan, score, fields)| {
            let path = lab.file(file);
            let mut args = vec![POP4, POP6, "-r", "20000", "--cooldown", "2", "-o", &path];
            args.extend_from_slice(scan);
            let out = lab.scan(&args);
            assert!(out.status.success(), "{file}: {}", stderr(&out));
            let mut score_args = score.to_vec();
            score_args.push(&path);
            (lab.score(&score_args), rows(&path, fields))
        })
        .collect()
}

#[test]
fn the_xdp_responder_gives_the_kernels_truth_scores_and_replies() {
    if !can_run_labs() {
        return;
    }
    let kernel = Lab::up(&lab_args(&[]));
    let xdp = Lab::up(&lab_args(&["--responder", "xdp"]));
    assert_eq!(xdp.status()["responder"], "xdp");
    assert_eq!(kernel.status()["responder"], "kernel");
    assert_eq!(
        kernel.truth(&["--ports", "80"]),
        xdp.truth(&["--ports", "80"])
    );
    let from_kernel = scan_all(&kernel);
    let from_xdp = scan_all(&xdp);
    for (((k_score, k_rows), (x_score, x_rows)), (file, ..)) in
        from_kernel.iter().zip(&from_xdp).zip(SCANS)
    {
        assert!(
            k_score.contains("(100.000 %), false positives 0"),
            "{file}: {k_score}"
        );
        assert_eq!(k_score, x_score, "{file}");
        assert!(!k_rows.is_empty(), "{file}");
        let only_kernel: Vec<_> = k_rows.difference(x_rows).take(3).collect();
        let only_xdp: Vec<_> = x_rows.difference(k_rows).take(3).collect();
        assert!(
            only_kernel.is_empty() && only_xdp.is_empty(),
            "{file}: kernel only {only_kernel:?}, xdp only {only_xdp:?}"
        );
    }
    let name = xdp.name.clone();
    drop(xdp);
    assert_gone(&name);
}

/// The online CPUs, as `lab up` reads them.
fn online() -> Vec<usize> {
    sonde_lab::online_cpus().unwrap()
}

/// The CPUs a process may run on, from /proc.
fn affinity(pid: u64) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn target_cpus_take_the_labs_side_and_leave_sonde_the_rest() {
    if !can_run_labs() {
        return;
    }
    let cpus = online();
    if cpus.len() < 2 {
        eprintln!("skipping: one online CPU");
        return;
    }
    let last = cpus[cpus.len() - 1];
    let host_before = host_queue_cpus();
    let lab = Lab::up(&lab_args(&["--target-cpus", &last.to_string()]));
    let status = lab.status();
    assert_eq!(status["target_cpus"], serde_json::json!([last]));
    // Every queue of the lab's veth end, in the lab's namespace, is steered there.
    let ns = status["net_ns"].as_str().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        .arg("grep -H . /sys/class/net/nx0/queues/*/*_cpus")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mask = format!("{:x}", 1u64 << last);
    assert_eq!(text.lines().count(), 4, "{text}"); // rx and tx of the lab's two queues
    for line in text.lines() {
        let value = line
            .rsplit(':')
            .next()
            .unwrap()
            .trim_start_matches(['0', ',']);
        assert_eq!(value, mask, "{line}");
    }
    // The lab's server runs there only.
    let server = status["server_pid"].as_u64().unwrap();
    assert_eq!(affinity(server), last.to_string());
    // A scan says where everything runs, and still finds everything.
    let path = lab.file("syn.csv");
    let out = sonde(&[
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        POP4,
        "-p",
        "80",
        "-r",
        "20000",
        "--cooldown",
        "2",
        "-o",
        &path,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rest: Vec<String> = cpus
        .iter()
        .filter(|&&c| c != last)
        .map(usize::to_string)
        .collect();
    let note = format!("the lab's targets run on CPU {last}, sonde on CPU ");
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains(&note))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains(&rest[0]), "{line}");
    let score = lab.score(&["--port", "80", "--within", POP4, &path]);
    assert!(score.contains("(100.000 %), false positives 0"), "{score}");
    // Down leaves the host's own queues as they were: the lab only ever steered its own.
    let name = lab.name.clone();
    drop(lab);
    assert_gone(&name);
    // One queue has no transmit queues to choose between: RPS alone.
    let single = Lab::up(&["--queues", "1", "--target-cpus", &last.to_string()]);
    assert_eq!(single.status()["target_cpus"], serde_json::json!([last]));
    drop(single);
    assert_eq!(host_queue_cpus(), host_before);
}

/// The RPS and XPS settings of every interface of this (the host's) namespace.
fn host_queue_cpus() -> String {
    let out = Command::new("sh")
        .args([
            "-c",
            "grep -H . /sys/class/net/*/queues/*/*_cpus 2>/dev/null; true",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// No namespace of lab `name` is left (and with them went its veth and any XDP program on it).
fn assert_gone(name: &str) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(&format!("sonde-{name}-")), "left: {text}");
}

#[test]
fn bad_target_cpus_and_responders_get_one_line_errors() {
    if !can_run_labs() {
        return;
    }
    let cpus = online();
    let every = format!("{}-{}", cpus[0], cpus[cpus.len() - 1]);
    let lab = Lab::named();
    for (args, want) in [
        (vec!["--target-cpus", "4095"], "CPU 4095 is not online"),
        (
            vec!["--target-cpus", &every],
            "leave at least one for the scanner",
        ),
        (vec!["--target-cpus", "one"], "is not a CPU list"),
        (vec!["--target-cpus", "3-1"], "is not a CPU list"),
        (
            vec!["--responder", "xdp", "--loss", "0.1"],
            "--loss would not apply",
        ),
        (
            vec!["--responder", "xdp", "--http", "--tcp-open", "80,443"],
            "TLS on port 443",
        ),
        (vec!["--responder", "dpdk"], "unknown responder"),
    ] {
        let mut all = vec!["lab", "up", "--name", &lab.name];
        all.extend_from_slice(&args);
        let out = sonde(&all);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !sonde_lab::list().contains(&lab.name),
            "{args:?} left a lab"
        );
    }
}

#[test]
fn port_0_is_refused_by_scan_and_grab_in_one_line() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.76.0/28", "--tcp-open", "80"]);
    let list = lab.file("pairs.txt");
    std::fs::write(&list, "198.18.76.1:0\n198.18.76.2:0\n").unwrap();
    let out_file = lab.file("out.csv");
    for (tool, extra) in [
        ("scan", &["-p", "0"][..]),
        ("scan", &["-p", "0-10"]),
        ("scan", &["-I", &list]),
        ("scan", &["-M", "udp", "-p", "0"]),
        ("grab", &["-p", "0"]),
        ("grab", &["-I", &list]),
    ] {
        let mut args = vec![tool, "--lab", &lab.name, "--no-default-blocklist", "-q"];
        if !extra.contains(&"-I") {
            args.push("198.18.76.0/28");
        }
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", &out_file]);
        let out = sonde(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("sonde: error: ") && err.contains("port 0"),
            "{args:?}: {err}"
        );
        assert!(
            !std::path::Path::new(&out_file).exists(),
            "{args:?} wrote rows"
        );
    }
    // A module that means no port still scans (icmp_echo's port 0 is the host).
    let out = sonde(&[
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "-q",
        "198.18.76.0/28",
        "-M",
        "icmp_echo",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &out_file,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn bad_numbers_get_one_line_in_words() {
    for (args, needle) in [
        (&["scan", "-r", "-5", "198.18.0.0/24"][..], "--rate"),
        (&["grab", "-r", "-5", "198.18.0.0/24"], "--rate"),
        (
            &["latency", "run", "--to", "198.18.0.1:7", "--rates", "-5"],
            "--rates",
        ),
        (&["scan", "--threads", "0", "198.18.0.0/24"], "from 1 to 64"),
        (&["scan", "--dryrun", "198.18.0.0/33"], "from 0 to 32"),
    ] {
        let out = sonde(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("sonde: error: ") && err.contains(needle) && !err.contains("..="),
            "{args:?}: {err}"
        );
    }
}
