//! `sonde dns` in a lab: hostile answers are counted and never reported.

mod common;

use std::process::{Child, Command, Stdio};

use common::*;

/// A child process killed and reaped on drop, also when an assertion fails.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server on 198.18.0.77:53 that answers every query five times: with another ID, about
/// another name, from another address (198.18.0.78), cut short, and last the true answer
/// (A 198.18.9.9). Bounded: it answers `n` queries, or stops after 20 s without one.
const HOSTILE: &str = r#"
import socket, sys
n = int(sys.argv[1])
a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); a.bind(("198.18.0.77", 53))
b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); b.bind(("198.18.0.78", 53))
a.settimeout(20)
print("ready", flush=True)
for _ in range(n):
    try:
        q, peer = a.recvfrom(2048)
    except socket.timeout:
        break
    end = q.index(b"\x00", 12) + 5
    question = q[12:end]
    head = b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00"
    answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + bytes([198, 18, 9, 9])
    good = q[:2] + head + question + answer
    other_id = bytes([q[0] ^ 0x5a, q[1]]) + head + question + answer
    other_name = q[:2] + head + question[:1] + b"x" + question[2:] + answer
    cut = q[:2] + b"\x81\x80\x00\x01\x00\x05\x00\x00\x00\x00" + question
    a.sendto(other_id, peer)
    a.sendto(other_name, peer)
    b.sendto(good, peer)
    a.sendto(cut, peer)
    a.sendto(good, peer)
"#;

#[test]
fn forged_ids_wrong_questions_other_servers_and_cut_messages_are_counted_not_reported() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24", "--responsive", "1"]);
    let names: Vec<String> = (0..20).map(|i| format!("n{i}.hostile.test")).collect();
    let mut server = Killed(
        Command::new("ip")
            .args(["netns", "exec", &format!("sonde-{}-net", lab.name)])
            .args(["python3", "-c", HOSTILE, &names.len().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 in the lab"),
    );
    let mut ready = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready.trim(), "ready");
    let (rows, summary) = (lab.file("rows.ndjson"), lab.file("summary.json"));
    let mut args = vec!["dns", "--lab", &lab.name, "-q", "--resolver", "198.18.0.77"];
    args.extend(["--timeout", "3", "-o", &rows, "--summary-json", &summary]);
    args.extend(names.iter().map(String::as_str));
    let out = sonde(&args);
    assert!(out.status.success(), "sonde dns: {}", stderr(&out));
    let text = std::fs::read_to_string(&rows).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), names.len());
    for row in &rows {
        assert_eq!(row["status"], "NOERROR", "{row}");
        assert_eq!(row["server"], "198.18.0.77", "{row}");
        assert_eq!(row["attempts"], 1, "{row}");
        let answers = row["answers"].as_array().unwrap();
        assert_eq!(answers.len(), 1, "{row}");
        assert_eq!(answers[0]["data"], "198.18.9.9", "{row}");
        assert_eq!(answers[0]["name"], row["name"], "{row}");
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let n = names.len() as u64;
    let invalid = &s["invalid"];
    // The copy from another address may come after the true answer (two sockets): it is then
    // late for a lookup that ended, and refused as that.
    let (wrong_server, late) = (
        invalid["wrong_server"].as_u64().unwrap(),
        s["late"].as_u64().unwrap(),
    );
    assert_eq!(wrong_server + late, n, "{s}");
    assert_eq!(invalid["wrong_question"], n, "{s}");
    assert_eq!(invalid["malformed"]["count_past_end"], n, "{s}");
    // Another ID names no query of ours (or, by a chance of one in thousands, another
    // lookup's, whose question differs).
    let other_id = invalid["not_ours"].as_u64().unwrap();
    assert!(other_id >= n - 1, "{s}");
    assert_eq!(s["replies"], n, "{s}");
}

/// Every (name, type) of the lab's truth, as `name,type` lines.
fn truth_names(lab: &Lab) -> String {
    let out = sonde(&["lab", "truth", "--name", &lab.name, "--dns"]);
    assert!(out.status.success(), "lab truth --dns: {}", stderr(&out));
    let mut names = String::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        names += &format!(
            "{},{}\n",
            row["name"].as_str().unwrap(),
            row["type"].as_str().unwrap()
        );
    }
    names
}

fn rows_of(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn row<'r>(rows: &'r [serde_json::Value], name: &str, rtype: &str) -> &'r serde_json::Value {
    rows.iter()
        .find(|r| r["name"] == name && r["type"] == rtype)
        .unwrap_or_else(|| panic!("no row for {name} {rtype}"))
}

#[test]
fn the_tree_resolves_as_its_truth_says_through_resolvers_from_the_root_and_after_a_resume() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/26",
        "--dns-tree",
        "6",
        "--dns-hosts",
        "1",
        "--dns-slow-ms",
        "200",
    ]);
    let names = lab.file("names.txt");
    std::fs::write(&names, truth_names(&lab)).unwrap();
    let all = std::fs::read_to_string(&names).unwrap().lines().count();
    let dns = |extra: &[&str]| {
        let mut args = vec!["dns", "--lab", &lab.name, "-q", "-I", &names];
        args.extend_from_slice(extra);
        sonde(&args)
    };
    let correct = format!("correct {all} of {all} (100.000 %)");

    // Through two of the lab's resolvers (unbound): every answer right, big TXT over TCP.
    let through = lab.file("through.ndjson");
    let out = dns(&["--resolver", "198.19.53.64,198.19.53.65", "-o", &through]);
    assert!(out.status.success(), "sonde dns: {}", stderr(&out));
    let score = lab.score(&[&through]);
    assert!(score.contains(&correct), "{score}");
    let rows = rows_of(&through);
    assert_eq!(row(&rows, "big.d1.example.", "TXT")["tcp"], true);
    assert_eq!(row(&rows, "www.lame.test.", "A")["status"], "SERVFAIL");

    // From the root, with every step traced.
    let walked = lab.file("walked.ndjson");
    let out = dns(&["--iterative", "--trace", "-o", &walked]);
    assert!(
        out.status.success(),
        "sonde dns --iterative: {}",
        stderr(&out)
    );
    let score = lab.score(&[&walked]);
    assert!(score.contains(&correct), "{score}");
    let rows = rows_of(&walked);
    let far = row(&rows, "far.d2.test.", "A");
    let steps: Vec<String> = far["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {} {}", s["zone"], s["result"], s["next"]).replace('"', ""))
        .collect();
    // far.d2.test. is a CNAME to www.d3.example.: its walk crosses zones (the cache may have
    // the zones already, so only the CNAME and the answer are sure to be there).
    assert!(
        steps.iter().any(|s| s == "d2.test. cname www.d3.example."),
        "{steps:?}"
    );
    assert!(
        steps.last().unwrap().starts_with("d3.example. NOERROR"),
        "{steps:?}"
    );
    let first = row(&rows, "d0.test.", "MX")["trace"][0].clone();
    assert_eq!(
        first["server"], "198.19.53.1",
        "the first walk starts at the root: {first}"
    );

    // Stopped by a signal half way, then resumed into the same file: every lookup once.
    let resumed = lab.file("resumed.ndjson");
    let checkpoint = lab.file("dns.checkpoint.json");
    let mut child = std::process::Command::new(SONDE)
        .args(["dns", "--lab", &lab.name, "-q", "-I", &names, "-r", "40"])
        .args([
            "--resolver",
            "198.19.53.66",
            "-o",
            &resumed,
            "--checkpoint",
            &checkpoint,
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let before = rows_of(&resumed).len();
    assert!(
        before > 0 && before < all,
        "{before} rows of {all} before the stop"
    );
    let out = dns(&[
        "--resolver",
        "198.19.53.66",
        "-o",
        &resumed,
        "--append",
        "--resume",
        &checkpoint,
    ]);
    assert!(out.status.success(), "resumed: {}", stderr(&out));
    let rows = rows_of(&resumed);
    assert_eq!(rows.len(), all, "every lookup once");
    let score = lab.score(&[&resumed]);
    assert!(score.contains(&correct), "{score}");
}
