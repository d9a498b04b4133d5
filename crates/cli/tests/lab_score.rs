//! `sonde lab score`: real scans of every module in csv, ndjson and parquet scored without
//! flags, `--within` several prefixes, hand-written results with known mistakes, grab results,
//! and one-line errors for bad input (nothing expected, missing file, unknown module …).
//! Needs root for the labs; each lab has a unique name and is removed by its guard.

use std::net::IpAddr;

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

/// The line a successful score prints.
fn score_line(lab: &Lab, args: &[&str]) -> String {
    let out = lab.score_output(args);
    assert!(out.status.success(), "score {args:?}: {}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    text.trim_end().to_string()
}

/// The one-line error of a score that must fail.
fn score_error(lab: &Lab, args: &[&str]) -> String {
    let out = lab.score_output(args);
    assert!(!out.status.success(), "score {args:?} succeeded");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = stderr(&out);
    err.lines().next().unwrap_or_default().to_string()
}

/// (found, expected, false positives) of a scan score line.
fn counts(line: &str) -> (u64, u64, u64) {
    let w: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        (w[0], w[2], w[6], w[7]),
        ("found", "of", "false", "positives"),
        "{line}"
    );
    (
        w[1].parse().unwrap(),
        w[3].parse().unwrap(),
        w[8].parse().unwrap(),
    )
}

/// Addresses of the truth rows with `port` and `answer` (and `service`, if given).
fn truth_addrs(lab: &Lab, args: &[&str], port: u16, answer: &str) -> Vec<String> {
    lab.truth(args)
        .into_iter()
        .filter(|r| r[1] == port.to_string() && r[2] == answer)
        .map(|r| r[0].clone())
        .collect()
}

fn inside(addr: &str, prefix: &str) -> bool {
    let net: ipnet::IpNet = prefix.parse().unwrap();
    net.contains(&addr.parse::<IpAddr>().unwrap())
}

#[test]
fn real_scans_of_every_module_and_format_score_without_flags() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.48.0/22",
        "--responsive",
        "0.3",
        "--tcp-open",
        "80",
        "--dns",
    ]);
    let scanned = "198.18.49.0/24";
    let scan = |file: &str, extra: &[&str]| {
        let path = lab.file(file);
        let mut args = vec![scanned, "-c", "1", "-o", &path];
        args.extend_from_slice(extra);
        if !extra.contains(&"-r") {
            args.extend_from_slice(&["-r", "0"]);
        }
        let out = lab.scan(&args);
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        path
    };
    let files = [
        (scan("syn.csv", &["-p", "80"]), "tcp_syn: synack on port 80"),
        (
            scan("syn.ndjson", &["-p", "80", "-O", "ndjson"]),
            "tcp_syn: synack on port 80",
        ),
        (
            scan("syn.parquet", &["-p", "80", "-O", "parquet"]),
            "tcp_syn: synack on port 80",
        ),
        (
            scan("echo.parquet", &["-M", "icmp_echo", "-O", "parquet"]),
            "icmp_echo: echo",
        ),
        (
            scan(
                "udp.ndjson",
                &[
                    "-M",
                    "udp",
                    "-p",
                    "9999",
                    "--payload-hex",
                    "6869",
                    "-O",
                    "ndjson",
                    "--output-filter",
                    "classification = unreach",
                ],
            ),
            "udp: unreach/dns on port 9999",
        ),
        (
            scan(
                "dns.csv",
                &[
                    "-M",
                    "dns",
                    "-p",
                    "53",
                    "--dns-name",
                    "example.com",
                    "-r",
                    "20000",
                ],
            ),
            "dns: dns on port 53",
        ),
    ];
    let responsive = truth_addrs(&lab, &[], 0, "echo");
    let in_scan = responsive.iter().filter(|a| inside(a, scanned)).count() as u64;
    assert!(in_scan > 0);
    for (path, what) in &files {
        // Scored against the scanned range: everything found, nothing false.
        let line = score_line(&lab, &["--within", scanned, path]);
        assert_eq!(counts(&line), (in_scan, in_scan, 0), "{path}: {line}");
        assert!(
            line.ends_with(&format!("[{what} within {scanned}]")),
            "{path}: {line}"
        );
        // Against the whole lab it says so, and hints at the range the results cover.
        let out = lab.score_output(&[path]);
        assert!(out.status.success(), "{}", stderr(&out));
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            counts(&line),
            (in_scan, responsive.len() as u64, 0),
            "{line}"
        );
        assert!(line.contains("within 198.18.48.0/22]"), "{line}");
        assert!(stderr(&out).contains("--within"), "{}", stderr(&out));
    }
    // The legacy flags still score any module's file as "the host answered".
    for (path, _) in &files {
        let line = score_line(
            &lab,
            &["--within", scanned, "--port", "0", "--answer", "echo", path],
        );
        assert_eq!(counts(&line), (in_scan, in_scan, 0), "{path}: {line}");
    }
    // --answer echo alone means port 0: no more "0 of 0".
    let line = score_line(
        &lab,
        &["--within", scanned, "--answer", "echo", &files[3].0],
    );
    assert_eq!(counts(&line), (in_scan, in_scan, 0), "{line}");
}

#[test]
fn hand_written_results_count_misses_false_positives_and_within() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.52.0/24",
        "--population6",
        "2001:2::/120",
        "--responsive",
        "0.4",
        "--tcp-open",
        "80,443",
    ]);
    let open80 = truth_addrs(&lab, &[], 80, "synack");
    let quiet: Vec<String> = truth_addrs(&lab, &[], 80, "none");
    let (a, b) = ("198.18.52.0/26", "2001:2::/121");
    let expected: Vec<&String> = open80
        .iter()
        .filter(|x| inside(x, a) || inside(x, b))
        .collect();
    assert!(expected.len() > 3);
    let wrong = quiet.iter().find(|x| inside(x, a)).unwrap();
    let outside = open80
        .iter()
        .find(|x| !inside(x, a) && !inside(x, b))
        .unwrap();
    // All expected rows but the first, one row at an address that does not answer, one at 443 (not scored),
    // one outside the prefixes (left out), and an RST row (not an answer that counts).
    let mut csv = String::from("saddr,sport,classification,success\n");
    let mut ndjson = String::new();
    let mut row = |addr: &str, port: u16, class: &str, ok: bool| {
        csv.push_str(&format!("{addr},{port},{class},{}\n", u8::from(ok)));
        ndjson.push_str(&format!(
            "{{\"saddr\":\"{addr}\",\"sport\":{port},\"classification\":\"{class}\",\"success\":{ok}}}\n"
        ));
    };
    for addr in &expected[1..] {
        row(addr, 80, "synack", true);
    }
    row(wrong, 80, "synack", true);
    row(expected[0], 443, "synack", true);
    row(outside, 80, "synack", true);
    row(expected[0], 80, "rst", false);
    let (csv_path, nd_path) = (lab.file("hand.csv"), lab.file("hand.ndjson"));
    std::fs::write(&csv_path, csv).unwrap();
    std::fs::write(&nd_path, ndjson).unwrap();
    let within = format!("{a},{b}");
    for path in [&csv_path, &nd_path] {
        let line = score_line(&lab, &["--within", &within, "--port", "80", path]);
        let n = expected.len() as u64;
        assert_eq!(counts(&line), (n - 1, n, 1), "{line}");
        assert!(line.ends_with(&format!("within {a}, {b}]")), "{line}");
        // Without --within, the row outside counts as found, and both ports are scored.
        let line = score_line(&lab, &[path]);
        let all = open80.len() as u64 * 2;
        assert_eq!(counts(&line), (n + 1, all, 1), "{line}");
        assert!(line.contains("on ports 80,443"), "{line}");
    }
    // A bare address list (ZMap's -f saddr) needs --port; with it, every row is a synack.
    let bare = lab.file("bare.csv");
    let rows: Vec<String> = expected.iter().map(|a| a.to_string()).collect();
    std::fs::write(&bare, format!("saddr\n{}\n", rows.join("\n"))).unwrap();
    let err = score_error(&lab, &[&bare]);
    assert!(
        err.contains("no sport column") && err.contains("--port"),
        "{err}"
    );
    let line = score_line(&lab, &["--port", "80", "--within", &within, &bare]);
    let n = expected.len() as u64;
    assert_eq!(counts(&line), (n, n, 0), "{line}");
}

#[test]
fn nothing_expected_and_bad_input_are_one_line_errors() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.56.0/24",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    let results = lab.file("r.csv");
    let addr = truth_addrs(&lab, &[], 80, "synack")[0].clone();
    std::fs::write(
        &results,
        format!("saddr,sport,classification\n{addr},80,synack\n"),
    )
    .unwrap();
    let cases: [(Vec<&str>, &str); 7] = [
        (
            vec!["--port", "81", "--within", "198.18.56.0/26", &results],
            "the truth has no synack rows for port 81 within 198.18.56.0/26: check --port/--module",
        ),
        (
            vec!["--answer", "echo", "--port", "80", &results],
            "the truth has no echo rows for port 80",
        ),
        (
            vec!["--within", "198.18.99.0/24", &results],
            "the truth has no synack rows for port 80 within 198.18.99.0/24",
        ),
        (
            vec!["/nonexistent/r.csv"],
            "cannot read results /nonexistent/r.csv",
        ),
        (vec!["--module", "tcp_ack", &results], "tcp_ack"),
        (vec!["--module", "udp", &results], "give --port"),
        (
            vec!["--format", "ndjson", &results],
            "is not an NDJSON file",
        ),
    ];
    for (args, needle) in &cases {
        let err = score_error(&lab, args);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let write = |name: &str, text: &str| {
        let path = lab.file(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let no_saddr = write("x.csv", "addr,port\n198.18.56.1,80\n");
    assert!(score_error(&lab, &[&no_saddr]).contains("has no saddr column"));
    let no_saddr_nd = write("x.ndjson", "{\"ip\":\"198.18.56.1\"}\n");
    assert!(score_error(&lab, &[&no_saddr_nd]).contains("has no saddr column"));
    let bad_addr = write("y.csv", "saddr,sport\nnot-an-address,80\n");
    let err = score_error(&lab, &[&bad_addr]);
    assert!(
        err.contains("line 2") && err.contains("not an IP address"),
        "{err}"
    );
    let mixed = write(
        "m.csv",
        &format!("saddr,sport,classification\n{addr},80,synack\n{addr},0,echoreply\n"),
    );
    let err = score_error(&lab, &[&mixed]);
    assert!(
        err.contains("mixes answers of the modules") && err.contains("--module"),
        "{err}"
    );
    // Told the module, the mixed file scores.
    let line = score_line(
        &lab,
        &[
            "--module",
            "icmp_echo",
            "--within",
            &format!("{addr}/32"),
            &mixed,
        ],
    );
    assert_eq!(counts(&line), (1, 1, 0), "{line}");
}

#[test]
fn grab_results_score_completed_bodies_silence_and_certificates() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.60.0/26",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
        "--http",
        "--silent-share",
        "0.3",
        "--seed",
        "5",
    ]);
    let st = lab.status();
    let cert = st["tls_cert_sha256"].as_str().unwrap().to_string();
    let big = st["big_sha256"].as_str().unwrap().to_string();
    let truth = lab.truth(&[]);
    let of = |port: &str, service: &str| -> Vec<String> {
        truth
            .iter()
            .filter(|r| r[1] == port && r[2] == "synack" && r[3] == service)
            .map(|r| r[0].clone())
            .collect()
    };
    let (http, https, silent) = (of("80", "http"), of("443", "https"), of("80", "silent"));
    let nobody = truth.iter().find(|r| r[2] == "none").unwrap()[0].clone();
    assert!(http.len() >= 4 && silent.len() >= 2, "{http:?} {silent:?}");
    let body = |addr: &str| format!("sonde lab {addr}\\n");
    let mut lines = Vec::new();
    let mut grab = |addr: &str, port: u16, status: &str, extra: String| {
        lines.push(format!(
            "{{\"saddr\":\"{addr}\",\"sport\":{port},\"status\":\"{status}\"{extra}}}"
        ));
    };
    // Port 80: every live host but one completes; one body is wrong; one fetched /big.
    for (i, addr) in http.iter().enumerate().skip(1) {
        let extra = match i {
            1 => format!(",\"http_status\":200,\"http_body\":\"{}\"", body(&http[2])),
            2 => format!(
                ",\"http_status\":200,\"http_path\":\"/big\",\"http_body_sha256\":\"{big}\""
            ),
            _ => format!(",\"http_status\":200,\"http_body\":\"{}\"", body(addr)),
        };
        grab(addr, 80, "success", extra);
    }
    grab(&http[0], 80, "data-timeout", String::new());
    // Silent hosts: all but one time out waiting for data.
    for addr in &silent[1..] {
        grab(addr, 80, "data-timeout", String::new());
    }
    grab(&silent[0], 80, "reset", String::new());
    // A success where nothing answers: a false positive.
    grab(&nobody, 80, "success", ",\"http_body\":\"x\"".to_string());
    // Port 443: every live host completes; one certificate is wrong.
    for (i, addr) in https.iter().enumerate() {
        let c = if i == 0 {
            "00".repeat(32)
        } else {
            cert.clone()
        };
        grab(
            addr,
            443,
            "success",
            format!(
                ",\"http_status\":200,\"http_body\":\"{}\",\"tls_cert_sha256\":\"{c}\"",
                body(addr)
            ),
        );
    }
    let path = lab.file("grab.ndjson");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let n80 = http.len();
    let line = score_line(&lab, &["--port", "80", &path]);
    let done = n80 - 1;
    let pct = |a: usize, b: usize| format!("{:.3}", 100.0 * a as f64 / b as f64);
    let want = format!(
        "completed {done} of {n80} live ({}), bodies correct {} of {done} ({}), wrong bodies 1, \
         silent seen as data-timeout {} of {} ({}), false positives 1, certificates correct 0 of 0 \
         [grab: port 80 within 198.18.60.0/26]",
        pct(done, n80) + " %",
        done - 1,
        pct(done - 1, done) + " %",
        silent.len() - 1,
        silent.len(),
        pct(silent.len() - 1, silent.len()) + " %",
    );
    assert_eq!(line, want);

    // Both ports from the file's sport column.
    let line = score_line(&lab, &[&path]);
    let live = n80 + https.len();
    let done = live - 1;
    assert!(
        line.starts_with(&format!(
            "completed {done} of {live} live ({} %), bodies correct {} of {done} ",
            pct(done, live),
            done - 1
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "certificates correct {} of {} ",
            https.len() - 1,
            https.len()
        )),
        "{line}"
    );
    assert!(
        line.ends_with("[grab: port 80,443 within 198.18.60.0/26]"),
        "{line}"
    );
}

#[test]
fn a_scan_of_one_family_is_scored_on_that_family_and_both_count_as_answering() {
    if !can_run_labs() {
        return;
    }
    // As the README's lab: an IPv4 and an IPv6 population, then an IPv4 scan.
    let lab = Lab::named();
    let up = sonde(&[
        "lab",
        "up",
        "--name",
        &lab.name,
        "--population",
        "198.18.62.0/24",
        "--population6",
        "2001:2::/120",
        "--responsive",
        "0.4",
        "--tcp-open",
        "80",
    ]);
    assert!(up.status.success(), "lab up: {}", stderr(&up));
    let echo = truth_addrs(&lab, &[], 0, "echo");
    let (v4, v6): (Vec<&String>, Vec<&String>) =
        echo.iter().partition(|a| inside(a, "198.18.0.0/15"));
    assert!(!v4.is_empty() && !v6.is_empty());
    // `lab up` and `lab status` count both populations' answering addresses.
    let answering = format!("({} addresses answer", echo.len());
    assert!(stderr(&up).contains(&answering), "{}", stderr(&up));
    assert!(
        stderr(&up).contains("198.18.62.0/24 and 2001:2::/120"),
        "{}",
        stderr(&up)
    );
    assert_eq!(lab.status()["responsive_count"], echo.len() as u64);

    let results = lab.file("v4.csv");
    let out = lab.scan(&[
        "198.18.62.0/24",
        "-p",
        "80",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &results,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let open = truth_addrs(&lab, &[], 80, "synack");
    let open4 = open.iter().filter(|a| inside(a, "198.18.0.0/15")).count() as u64;
    let out = lab.score_output(&[&results]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
    assert_eq!(counts(&line), (open4, open4, 0), "{line}");
    assert!(line.ends_with("within 198.18.62.0/24]"), "{line}");
    // One line says what was left out, and how to score it.
    let err = stderr(&out);
    let note: Vec<&str> = err.lines().collect();
    assert_eq!(note.len(), 1, "{note:?}");
    assert!(
        note[0].contains("2001:2::/120") && note[0].contains("--within"),
        "{note:?}"
    );
    // Asked for both, both count.
    let line = score_line(&lab, &["--within", "198.18.62.0/24,2001:2::/120", &results]);
    assert_eq!(counts(&line), (open4, open.len() as u64, 0), "{line}");
}

#[test]
fn truth_status_and_exec_speak_plainly() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.63.0/28",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80,443",
    ]);
    // --ports 80 lists port 80 and nothing else; port 0 (echo) only when asked for.
    let rows = lab.truth(&["--ports", "80"]);
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|r| r[1] == "80"), "{rows:?}");
    let rows = lab.truth(&["--ports", "0,80"]);
    assert_eq!(rows.len(), 32);
    assert!(
        rows.iter().any(|r| r[1] == "0" && r[2] == "echo"),
        "{rows:?}"
    );
    // The default: echo and the open ports.
    assert_eq!(lab.truth(&[]).len(), 48);
    // Status text has no raw JSON nulls or lists.
    let out = sonde(&["lab", "status", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("null"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["tcp_open", "80,", "443"]),
        "{text}"
    );

    // A program that is not there: sonde's one error line, not ip's words.
    let out = sonde(&[
        "lab",
        "exec",
        "--name",
        &lab.name,
        "--",
        "sonde-no-such-program",
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("sonde: error: ") && err.contains("sonde-no-such-program"),
        "{err}"
    );

    // A bridge lab has no truth, and says so rather than "not up".
    let bridge = Lab::named();
    let up = sonde(&["lab", "up", "--name", &bridge.name, "--bridge"]);
    assert!(up.status.success(), "{}", stderr(&up));
    let out = sonde(&["lab", "truth", "--name", &bridge.name]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("bridge lab") && !err.contains("not up"),
        "{err}"
    );
    let out = sonde(&["lab", "status", "--name", &bridge.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("null"));
}
