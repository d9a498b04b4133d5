//! The lab's real servers (`lab up --http --silent-share`): nginx's exact bodies over IPv4 and
//! IPv6, the large body, the TLS certificate, silent hosts, and that `lab down` stops nginx —
//! also after a crash half-way through `up`. Needs root; every connection is made from the
//! lab's scanner namespace to its own population, and each lab is removed by its guard.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, sonde, stderr, Lab, SONDE};

/// What a connection to (addr, port) met, in the truth's terms.
#[derive(Debug, PartialEq)]
enum Seen {
    /// No handshake within the timeout.
    Nothing,
    /// The handshake completed, and then no byte and no close for SILENCE.
    Silent,
    /// The server closed at once without sending anything.
    Closed,
    /// One line, then the close (the lab's small server).
    Banner(Vec<u8>),
    /// An HTTP reply: status code and body.
    Http(u16, Vec<u8>),
}

const CONNECT: Duration = Duration::from_secs(1);
const SILENCE: Duration = Duration::from_secs(2);

/// Connects, sends `GET path`, and reads the reply until the server closes (or is silent).
fn get(addr: IpAddr, port: u16, path: &str) -> Seen {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::new(addr, port), CONNECT) else {
        return Seen::Nothing;
    };
    s.set_read_timeout(Some(SILENCE)).unwrap();
    // A peer that closed at once may reset this write; what the read gets is what counts.
    let _ = s.write_all(format!("GET {path} HTTP/1.1\r\nHost: lab\r\n\r\n").as_bytes());
    let mut reply = Vec::new();
    match s.read_to_end(&mut reply) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            assert!(
                reply.is_empty(),
                "{addr}:{port} sent part of a reply, then stalled"
            );
            Seen::Silent
        }
        Err(e) if e.kind() == ErrorKind::ConnectionReset && reply.is_empty() => Seen::Closed,
        // The small server says its line and closes without reading our GET, so its kernel
        // resets: what was read before the reset is the reply.
        Err(e) if e.kind() == ErrorKind::ConnectionReset && reply.starts_with(b"SONDE-LAB ") => {
            Seen::Banner(reply)
        }
        Err(e) => panic!("{addr}:{port}: {e}"),
        Ok(0) => Seen::Closed,
        Ok(_) if reply.starts_with(b"SONDE-LAB ") => Seen::Banner(reply),
        Ok(_) => parse_http(&reply),
    }
}

fn parse_http(reply: &[u8]) -> Seen {
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP header");
    let head = String::from_utf8_lossy(&reply[..split]);
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    Seen::Http(code, reply[split + 4..].to_vec())
}

/// The truth's rows as (addr, port, answer, service).
fn rows(lab: &Lab, args: &[&str]) -> Vec<(IpAddr, u16, String, String)> {
    lab.truth(args)
        .into_iter()
        .map(|r| {
            assert_eq!(r.len(), 4, "{r:?}");
            (
                r[0].parse().unwrap(),
                r[1].parse().unwrap(),
                r[2].clone(),
                r[3].clone(),
            )
        })
        .collect()
}

/// Up to `n` addresses of `family` (4 or 6) whose row for `port` has `answer` and `service`.
fn pick(
    rows: &[(IpAddr, u16, String, String)],
    family: u8,
    port: u16,
    answer: &str,
    service: &str,
    n: usize,
) -> Vec<IpAddr> {
    rows.iter()
        .filter(|r| r.0.is_ipv4() == (family == 4) && r.1 == port)
        .filter(|r| r.2 == answer && r.3 == service)
        .map(|r| r.0)
        .take(n)
        .collect()
}

/// What the truth says a connection to (addr, port) meets.
fn expected(rows: &[(IpAddr, u16, String, String)], addr: IpAddr, port: u16) -> Seen {
    let row = rows
        .iter()
        .find(|r| r.0 == addr && r.1 == port)
        .unwrap_or_else(|| panic!("no truth row for {addr}:{port}"));
    match (row.2.as_str(), row.3.as_str()) {
        ("none", _) => Seen::Nothing,
        ("synack", "silent") => Seen::Silent,
        ("synack", "http") => Seen::Http(200, format!("sonde lab {addr}\n").into_bytes()),
        ("synack", "banner") => Seen::Banner(format!("SONDE-LAB {addr} {port}\r\n").into_bytes()),
        ("synack", "") => Seen::Closed,
        other => panic!("unexpected truth {other:?} for {addr}:{port}"),
    }
}

fn hex_of(v: &serde_json::Value, key: &str) -> String {
    let s = v[key]
        .as_str()
        .unwrap_or_else(|| panic!("status has no {key}: {v}"));
    assert!(
        s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}: {s}"
    );
    s.to_string()
}

/// The SHA-256 of the certificate the server at addr:443 presents, read with `openssl
/// s_client` run inside the lab's scanner namespace.
fn presented_certificate(lab: &Lab, addr: IpAddr) -> String {
    let target = SocketAddr::new(addr, 443).to_string();
    let script = format!(
        "openssl s_client -connect '{target}' </dev/null 2>/dev/null | openssl x509 -outform DER | sha256sum"
    );
    let out = Command::new(SONDE)
        .args([
            "lab", "exec", "--name", &lab.name, "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `GET /` over TLS on addr:443 with `openssl s_client`, from the scanner namespace: the reply.
fn get_over_tls(lab: &Lab, addr: IpAddr) -> Seen {
    let target = SocketAddr::new(addr, 443).to_string();
    let script = format!(
        "printf 'GET / HTTP/1.1\\r\\nHost: lab\\r\\n\\r\\n' | openssl s_client -quiet -ign_eof -connect '{target}' 2>/dev/null"
    );
    let out = Command::new(SONDE)
        .args([
            "lab", "exec", "--name", &lab.name, "--", "sh", "-c", &script,
        ])
        .output()
        .unwrap();
    parse_http(&out.stdout)
}

#[test]
fn nginx_serves_exact_bodies_over_both_families_and_silent_hosts_say_nothing() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.40.0/26",
        "--population6",
        "2001:2::/122",
        "--responsive",
        "0.5",
        "--tcp-open",
        "22",
        "--http",
        "--silent-share",
        "0.3",
        "--seed",
        "11",
    ]);
    let st = lab.status();
    assert_eq!(st["http"], true, "{st}");
    assert!(st["nginx_pid"].as_u64().is_some(), "{st}");
    // --http opens 80 and 443; the small server keeps 22 only.
    assert_eq!(st["tcp_open"], serde_json::json!([22, 80, 443]));
    let server = st["server_pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{server}/cmdline")).unwrap();
    assert!(
        cmdline.ends_with(b"--ports\x0022\x00"),
        "{}",
        String::from_utf8_lossy(&cmdline)
    );
    let cert = hex_of(&st, "tls_cert_sha256");
    let big_sha = hex_of(&st, "big_sha256");
    let big_len = st["big_len"].as_u64().unwrap();
    assert!(big_len >= 1 << 20, "{big_len}");
    assert_eq!(st["big_path"], "/big");
    assert!(st["silent_count"].as_u64().unwrap() > 0, "{st}");

    let truth = rows(&lab, &[]);
    let mut sample = Vec::new();
    for family in [4, 6] {
        sample.extend(pick(&truth, family, 80, "synack", "http", 3));
        sample.extend(pick(&truth, family, 80, "synack", "silent", 1));
        sample.extend(pick(&truth, family, 80, "none", "", 1));
    }
    assert_eq!(
        sample.len(),
        10,
        "the seed gives every kind in both families"
    );
    let (live4, live6) = (sample[0], sample[5]);
    let silent = pick(&truth, 4, 80, "synack", "silent", 1)[0];
    let seen = lab.in_scan(|| {
        let mut seen = Vec::new();
        for &addr in &sample {
            seen.push((addr, 80, get(addr, 80, "/")));
        }
        // The small server's port: closed at once by a live host, silent on a silent one.
        seen.push((live4, 22, get(live4, 22, "/")));
        seen.push((silent, 22, get(silent, 22, "/")));
        let big = [live4, live6].map(|a| get(a, 80, "/big"));
        (seen, big)
    });
    let (seen, big) = seen;
    for (addr, port, got) in seen {
        assert_eq!(got, expected(&truth, addr, port), "{addr} port {port}");
    }
    for reply in big {
        let Seen::Http(200, body) = reply else {
            panic!("/big: {reply:?}")
        };
        assert_eq!(body.len() as u64, big_len);
        assert_eq!(sonde_lab::sha256_hex(&body), big_sha);
        assert_eq!(body, sonde_lab::big_body());
    }
    // TLS on 443 presents the recorded certificate and serves the same body.
    for addr in [live4, live6] {
        assert_eq!(presented_certificate(&lab, addr), cert, "{addr}");
        let want = Seen::Http(200, format!("sonde lab {addr}\n").into_bytes());
        assert_eq!(get_over_tls(&lab, addr), want, "{addr}");
    }
}

/// (pid, start time) of every process in the lab's net namespace.
fn lab_processes(lab: &Lab) -> Vec<(u32, String)> {
    let out = Command::new("ip")
        .args(["netns", "pids", &format!("sonde-{}-net", lab.name)])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter_map(|pid| Some((pid, start_time(pid)?)))
        .collect()
}

/// Field 22 of /proc/PID/stat, if the process runs (a zombie has finished).
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    (fields.first() != Some(&"Z")).then(|| fields.get(19).map(|s| s.to_string()))?
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Waits (bounded) until none of `procs` runs any more.
fn assert_all_ended(procs: &[(u32, String)]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let alive = || -> Vec<u32> {
        procs
            .iter()
            .filter(|(pid, t)| start_time(*pid).as_ref() == Some(t))
            .map(|p| p.0)
            .collect()
    };
    while !alive().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(alive(), Vec::<u32>::new(), "processes outlived lab down");
}

fn assert_no_namespaces(lab: &Lab) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains(&format!("sonde-{}-", lab.name)),
        "namespaces left: {text}"
    );
}

#[test]
fn down_stops_nginx_and_every_other_server() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.41.0/28",
        "--responsive",
        "1",
        "--tcp-open",
        "8080",
        "--http",
        "--silent-share",
        "0.5",
        "--dns",
    ]);
    let procs = lab_processes(&lab);
    let names: Vec<String> = procs.iter().map(|p| comm(p.0)).collect();
    // nginx's master and its workers, the small server, the silent server, unbound.
    assert!(
        names.iter().filter(|n| *n == "nginx").count() >= 2,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "sonde").count(),
        2,
        "{names:?}"
    );
    assert!(names.contains(&"unbound".to_string()), "{names:?}");
    let out = sonde(&["lab", "down", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_all_ended(&procs);
    assert_no_namespaces(&lab);
    assert!(!std::path::Path::new(&format!("/run/sonde/lab/{}-http", lab.name)).exists());
}

#[test]
fn down_after_a_crash_half_way_through_up_stops_nginx() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.42.0/28", "--http"]);
    let procs = lab_processes(&lab);
    assert!(procs.iter().any(|p| comm(p.0) == "nginx"));
    // What a crash after nginx started and before `up` saved the state leaves behind.
    std::fs::remove_file(format!("/run/sonde/lab/{}.json", lab.name)).unwrap();
    let out = sonde(&["lab", "status", "--name", &lab.name]);
    assert!(stderr(&out).contains("half-made"), "{}", stderr(&out));
    let out = sonde(&["lab", "down", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_all_ended(&procs);
    assert_no_namespaces(&lab);
}

#[test]
fn truth_into_a_closed_pipe_ends_quietly() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/16", "--tcp-open", "80"]);
    // Like `sonde lab truth | head -3`: read three lines, then close the pipe.
    let mut child = Command::new(SONDE)
        .args(["lab", "truth", "--name", &lab.name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    assert!(first.starts_with(b"addr,port,answer,service\n"));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stderr(&out), "");
}
