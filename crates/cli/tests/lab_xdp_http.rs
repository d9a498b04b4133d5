//! `lab up --responder xdp --http`: the lab's XDP responder as its web server on port 80, with
//! no state. Every client — sonde grab over each backend, curl, and ZGrab2 where it is built —
//! gets every responsive host's body byte for byte and `lab score` reads 100 % with 0 wrong;
//! the replies read as nginx's do in a lab with nginx; the kernel's connections close cleanly;
//! what the XDP server cannot serve is reset, and what it cannot be asked for is refused in one
//! line. Needs root; each lab has a unique name and is removed by its guard, also on failure.

use std::collections::HashSet;
use std::net::IpAddr;

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab};

const POP4: &str = "198.18.0.0/24";
const POP6: &str = "2001:2::/120";
const TARGETS: usize = 256 + 256;
/// The packet ring's spare sources on the link (the XDP server answers any link host).
const RING_SRC: &str = "198.19.255.2";
const RING_SRC6: &str = "2001:2:0:ffff::2";
/// Where the coordinator builds ZGrab2; $ZGRAB2 overrides it.
const ZGRAB2: &str = "/tmp/zgrab2/zgrab2";

fn xdp_lab() -> Lab {
    Lab::up(&[
        "--population",
        POP4,
        "--population6",
        POP6,
        "--responsive",
        "0.5",
        "--seed",
        "5",
        "--responder",
        "xdp",
        "--http",
    ])
}

fn rows(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The live hosts on port 80, as the truth says: every one served by "http".
fn live_hosts(lab: &Lab) -> Vec<IpAddr> {
    let truth = lab.truth(&["--ports", "80"]);
    assert_eq!(truth.len(), TARGETS);
    truth
        .iter()
        .filter(|r| r[2] == "synack")
        .map(|r| {
            assert_eq!(r[3], "http", "{r:?}");
            r[0].parse().unwrap()
        })
        .collect()
}

/// `sonde lab exec` in `lab`: (exit status, stdout).
fn exec(lab: &Lab, argv: &[&str]) -> (bool, Vec<u8>) {
    let mut all = vec!["lab", "exec", "--name", &lab.name, "--"];
    all.extend_from_slice(argv);
    let out = sonde(&all);
    (out.status.success(), out.stdout)
}

/// A counter of the scanner namespace's kernel TCP (/proc/net/snmp).
fn scan_tcp_counter(lab: &Lab, name: &str) -> u64 {
    let (ok, out) = exec(lab, &["cat", "/proc/net/snmp"]);
    assert!(ok);
    let text = String::from_utf8(out).unwrap();
    let tcp: Vec<&str> = text.lines().filter(|l| l.starts_with("Tcp:")).collect();
    let names: Vec<&str> = tcp[0].split_whitespace().collect();
    let values: Vec<&str> = tcp[1].split_whitespace().collect();
    let at = names.iter().position(|n| *n == name).unwrap();
    values[at].parse().unwrap()
}

fn url(addr: &IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => format!("http://{a}/"),
        IpAddr::V6(a) => format!("http://[{a}]/"),
    }
}

#[test]
fn every_client_gets_every_body_from_the_xdp_server() {
    if !can_run_labs() {
        return;
    }
    let lab = xdp_lab();
    let status = lab.status();
    assert_eq!(status["http"], true);
    assert_eq!(status["responder"], "xdp");
    assert!(status["nginx_pid"].is_null(), "no nginx: {status}");
    assert_eq!(
        status["tcp_open"],
        serde_json::json!([80]),
        "443 stays closed"
    );
    let live = live_hosts(&lab);
    let (v4, v6) = (
        live.iter().filter(|a| a.is_ipv4()).count(),
        live.iter().filter(|a| a.is_ipv6()).count(),
    );
    assert!(v4 > 64 && v6 > 64, "live: {v4} IPv4, {v6} IPv6");

    grab_with_every_backend(&lab, &live);
    curl_gets_every_body_and_closes_cleanly(&lab, &live);
    zgrab2_gets_every_body(&lab, &live);
    what_it_cannot_serve_is_reset(&lab, &live);
}

fn grab_with_every_backend(lab: &Lab, live: &[IpAddr]) {
    let live: HashSet<String> = live.iter().map(IpAddr::to_string).collect();
    for (backend, extra) in [
        ("xdp", &[][..]),
        ("ring", &["-S", RING_SRC, "--source-ip6", RING_SRC6][..]),
        ("kernel", &[][..]),
    ] {
        let out_file = lab.file(&format!("{backend}.ndjson"));
        let mut args = vec![
            "grab",
            "--lab",
            &lab.name,
            "-q",
            "-r",
            "0",
            POP4,
            POP6,
            "-p",
            "80",
            "-M",
            "http",
            "--backend",
            backend,
            "--first-byte-timeout",
            "2",
            "-o",
            &out_file,
        ];
        args.extend_from_slice(extra);
        let out = sonde(&args);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let score = lab.score(&["--within", &format!("{POP4},{POP6}"), &out_file]);
        eprintln!("{backend}: {score}");
        let (done, total, correct, wrong, fp) = grab_score(&score);
        assert_eq!(total as usize, live.len(), "{backend}: {score}");
        assert_eq!(
            (done, correct, wrong, fp),
            (total, total, 0, 0),
            "{backend}: {score}"
        );
        // One row per target; a success exactly where the truth has a live host, its body the
        // host's own.
        let rows = rows(&out_file);
        let targets: HashSet<String> = rows.iter().map(|r| r["saddr"].to_string()).collect();
        assert_eq!((rows.len(), targets.len()), (TARGETS, TARGETS), "{backend}");
        for r in &rows {
            let addr = r["saddr"].as_str().unwrap();
            let success = r["status"] == "success";
            assert_eq!(success, live.contains(addr), "{backend}: {r}");
            if success {
                let body = sonde_lab::http_body(addr.parse().unwrap());
                assert_eq!(
                    r["http_body"].as_str(),
                    Some(body.as_str()),
                    "{backend}: {r}"
                );
                assert_eq!(r["http_status"], 200, "{backend}: {r}");
            }
        }
    }
}

/// curl, in the scanner namespace, fetches every live host in one run (a connection each), and
/// the scanner's kernel neither retransmits nor resets: every segment was answered, and its
/// connections closed (its FIN acked) with none left open.
fn curl_gets_every_body_and_closes_cleanly(lab: &Lab, live: &[IpAddr]) {
    let urls: Vec<String> = live.iter().map(url).collect();
    let (retrans, resets) = (
        scan_tcp_counter(lab, "RetransSegs"),
        scan_tcp_counter(lab, "OutRsts"),
    );
    let mut argv = vec!["/usr/bin/curl", "-sS", "-g", "-m", "5"];
    argv.extend(urls.iter().map(String::as_str));
    let (ok, out) = exec(lab, &argv);
    assert!(ok, "curl failed");
    let want: String = live.iter().map(|a| sonde_lab::http_body(*a)).collect();
    assert_eq!(String::from_utf8_lossy(&out), want, "curl's bodies");
    assert_eq!(
        scan_tcp_counter(lab, "RetransSegs"),
        retrans,
        "curl retransmitted"
    );
    assert_eq!(
        scan_tcp_counter(lab, "OutRsts"),
        resets,
        "curl's kernel reset"
    );
    let (ok, sockets) = exec(lab, &["ss", "-Htan", "dport = :80"]);
    assert!(ok);
    let sockets = String::from_utf8_lossy(&sockets);
    assert!(sockets.trim().is_empty(), "connections left: {sockets}");
}

/// ZGrab2 (not packaged; built from source), if it is there: every live host's body, no
/// success elsewhere.
fn zgrab2_gets_every_body(lab: &Lab, live: &[IpAddr]) {
    let zgrab2 = std::env::var("ZGRAB2").unwrap_or_else(|_| ZGRAB2.to_string());
    if !std::path::Path::new(&zgrab2).is_file() {
        eprintln!("skipping ZGrab2: {zgrab2} is not there (set ZGRAB2=/path/to/zgrab2)");
        return;
    }
    let targets = lab.file("targets.txt");
    let all: Vec<String> = lab
        .truth(&["--ports", "80"])
        .iter()
        .map(|r| r[0].clone())
        .collect();
    std::fs::write(&targets, all.join("\n") + "\n").unwrap();
    let blocklist = lab.file("empty-blocklist");
    std::fs::write(&blocklist, "").unwrap();
    let out_file = lab.file("zgrab2.json");
    let (ok, _) = exec(
        lab,
        &[
            "timeout",
            "120",
            &zgrab2,
            "http",
            "--port",
            "80",
            "--endpoint",
            "/",
            "--connect-timeout",
            "3s",
            "-b",
            &blocklist,
            "-f",
            &targets,
            "-o",
            &out_file,
            "-l",
            "/dev/null",
            "-m",
            "/dev/null",
            "-u",
            "/dev/null",
        ],
    );
    assert!(ok, "zgrab2 failed");
    let rows = rows(&out_file);
    assert_eq!(rows.len(), TARGETS, "a line per target");
    let mut served = HashSet::new();
    for r in &rows {
        let addr: IpAddr = r["ip"].as_str().unwrap().parse().unwrap();
        let http = &r["data"]["http"];
        if http["status"] == "success" {
            let body = &http["result"]["response"]["body"];
            assert_eq!(
                body.as_str(),
                Some(sonde_lab::http_body(addr).as_str()),
                "{r}"
            );
            served.insert(addr);
        }
    }
    let want: HashSet<IpAddr> = live.iter().copied().collect();
    assert_eq!(served, want, "ZGrab2's successes are the live hosts");
}

/// Requests the XDP server cannot serve are reset at once (no client waits for a timeout):
/// another path (nginx's /big), and TLS on 443, which is closed.
fn what_it_cannot_serve_is_reset(lab: &Lab, live: &[IpAddr]) {
    let some: Vec<String> = live.iter().take(8).map(IpAddr::to_string).collect();
    for (what, extra, status) in [
        ("/big", &["-p", "80", "--http-path", "/big"][..], "reset"),
        ("TLS", &["-p", "443", "-M", "tls"][..], "refused"),
    ] {
        let out_file = lab.file("cannot.ndjson");
        let mut args = vec!["grab", "--lab", &lab.name, "-q", "-r", "0", "--force"];
        args.extend(some.iter().map(String::as_str));
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", &out_file]);
        let out = sonde(&args);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let rows = rows(&out_file);
        assert_eq!(rows.len(), some.len(), "{what}");
        for r in rows {
            assert_eq!(r["tcp_status"], status, "{what}: {r}");
        }
    }
}

/// The same population with nginx (`--responder kernel --http`): the same truth on port 80, and
/// curl reads the same reply from both, Date aside (one from each clock), IPv4 and IPv6.
#[test]
fn replies_and_truth_are_nginxs() {
    if !can_run_labs() {
        return;
    }
    let xdp = xdp_lab();
    let nginx = Lab::up(&[
        "--population",
        POP4,
        "--population6",
        POP6,
        "--responsive",
        "0.5",
        "--seed",
        "5",
        "--http",
        "--tcp-open",
        "80",
    ]);
    let truth = |lab: &Lab| lab.truth(&["--ports", "0,80"]);
    assert_eq!(truth(&xdp), truth(&nginx), "the truth");
    let live = live_hosts(&xdp);
    let v4 = live.iter().find(|a| a.is_ipv4()).unwrap();
    let v6 = live.iter().find(|a| a.is_ipv6()).unwrap();
    for addr in [v4, v6] {
        let fetch = |lab: &Lab| {
            let (ok, out) = exec(
                lab,
                &["/usr/bin/curl", "-sS", "-g", "-i", "-m", "5", &url(addr)],
            );
            assert!(ok, "curl {addr} in {}", lab.name);
            without_date(&String::from_utf8(out).unwrap())
        };
        let (from_xdp, from_nginx) = (fetch(&xdp), fetch(&nginx));
        assert_eq!(from_xdp, from_nginx, "{addr}");
        assert!(
            from_xdp.ends_with(&format!("\r\n\r\n{}", sonde_lab::http_body(*addr))),
            "{from_xdp}"
        );
    }
}

/// A reply with its Date's value (29 bytes, IMF-fixdate) blanked, after checking its shape.
fn without_date(reply: &str) -> String {
    let at = reply.find("\r\nDate: ").expect("a Date header") + 8;
    let date = &reply[at..at + 29];
    assert!(
        date.ends_with(" GMT") && date.as_bytes()[3] == b',',
        "{date:?}"
    );
    format!("{}<date>{}", &reply[..at], &reply[at + 29..])
}

#[test]
fn what_the_xdp_server_cannot_do_is_refused_in_one_line() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::named();
    let xdp_http = ["--responder", "xdp", "--http"];
    for (extra, want) in [
        (&["--tcp-open", "80,443"][..], "TLS on port 443"),
        (&["--tcp-open", "443"][..], "TLS on port 443"),
        (&["--loss", "0.1"][..], "--loss would not apply"),
        (
            &["--silent-share", "0.1"][..],
            "--silent-share would not apply",
        ),
        (&["--sink", "drop"][..], "--sink drop would not apply"),
    ] {
        let mut args = vec!["lab", "up", "--name", &lab.name];
        args.extend_from_slice(&xdp_http);
        args.extend_from_slice(extra);
        let out = sonde(&args);
        assert!(!out.status.success(), "{extra:?} succeeded");
        let err = stderr(&out);
        assert!(err.contains(want), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(
            !sonde_lab::list().contains(&lab.name),
            "{extra:?} left a lab"
        );
    }
}
