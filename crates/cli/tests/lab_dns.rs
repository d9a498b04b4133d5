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
