//! sonde as its users expect (issue 32): what a ZMap, ZGrab2 or tcpdump user tried with only the
//! README, the guide and --help, each fixed and checked here. The errors in the user's words
//! need no lab; the rest runs in labs, which need root, each with a unique name and removed by
//! its guard, also on failure.

use std::process::Output;

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

/// The one error line of a command that fails.
fn error_line(out: &Output) -> String {
    assert!(!out.status.success(), "it succeeded: {}", stderr(out));
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn a_missing_input_file_is_named_as_dash_i() {
    let missing = "/nonexistent/sonde-targets.txt";
    for args in [
        &["scan", "-I", missing, "-p", "80", "--dryrun"][..],
        &["grab", "-I", missing, "-M", "http"],
        &["grab", "-I", "/", "-M", "http"],
    ] {
        let err = error_line(&sonde(args));
        assert!(err.contains(&format!("-I {}", args[2])), "{args:?}: {err}");
        assert!(!err.contains("os error"), "{args:?}: {err}");
    }
    let err = error_line(&sonde(&["scan", "-I", missing, "--dryrun"]));
    assert!(err.contains("no such file"), "{err}");
}

/// The lab's CA signs its servers' certificates: given it, a grab validates them, by address
/// (a small population is named address by address) and by name; `lab status` says where the
/// CA is and shows the services in words.
#[test]
fn the_labs_certificates_validate_against_its_ca() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/26",
        "--responsive",
        "0.5",
        "--http",
        "--services",
        "tls13,ssh",
    ]);
    let status = lab.status();
    let ca = status["tls_ca"].as_str().expect("tls_ca in lab status");
    assert!(std::path::Path::new(ca).is_file(), "{ca}");
    let live: Vec<String> = lab
        .truth(&["--ports", "443"])
        .into_iter()
        .filter(|r| r[2] == "synack")
        .map(|r| r[0].clone())
        .collect();
    assert!(live.len() >= 2, "{live:?}");
    let names = lab.file("names.txt");
    let lines = [
        format!("{}:443,www.sonde.test", live[0]),
        format!("{}:443,elsewhere.example", live[1]),
        format!("{}:8443", live[1]),
    ];
    std::fs::write(&names, lines.join("\n") + "\n").unwrap();
    let by_address = lab.file("by-address.ndjson");
    let by_name = lab.file("by-name.ndjson");
    let runs = [
        (vec!["198.18.0.0/26", "-p", "443"], &by_address),
        (vec!["-I", &names], &by_name),
    ];
    for (targets, out_file) in runs {
        let mut args = vec!["grab", "--lab", &lab.name, "-q", "-r", "0", "-M", "https"];
        args.extend(["--root-cas", ca, "-o", out_file.as_str()]);
        args.extend(targets);
        let out = sonde(&args);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let rows = |path: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let answered: Vec<_> = rows(&by_address)
        .into_iter()
        .filter(|r| r["status"] == "success")
        .collect();
    assert_eq!(answered.len(), live.len());
    for r in &answered {
        assert_eq!(r["tls_chain_valid"], true, "{r}");
    }
    for r in rows(&by_name) {
        let name = r["name"].as_str().unwrap_or_default().to_string();
        if name == "elsewhere.example" {
            assert_eq!(r["tls_chain_valid"], false, "{r}");
            let why = r["tls_chain_error"].as_str().unwrap();
            assert!(
                why.starts_with(
                    "the certificate does not name elsewhere.example: it names sonde.test"
                ),
                "{r}"
            );
        } else {
            // www.sonde.test on 443, and the tls13 service by its address on 8443.
            assert_eq!(r["tls_chain_valid"], true, "{r}");
        }
    }
    // Without the CA, why not is said in words.
    let out_file = lab.file("no-ca.ndjson");
    let out = sonde(&[
        "grab", "--lab", &lab.name, "-q", "-r", "0", "-M", "https", "-p", "443", &live[0], "-o",
        &out_file,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let row = &rows(&out_file)[0];
    assert_eq!(row["tls_chain_valid"], false, "{row}");
    assert!(
        row["tls_chain_error"]
            .as_str()
            .unwrap()
            .contains("no trusted root"),
        "{row}"
    );
    // lab status: the CA's place, and the services as lines of words.
    let out = sonde(&["lab", "status", "--name", &lab.name]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("tls_ca") && l.ends_with(ca)),
        "{text}"
    );
    assert!(!text.contains("{\""), "{text}");
    assert!(text.contains("ssh on 22 (pid "), "{text}");
    assert!(text.contains("tls13 on 8443 (pid "), "{text}");
}

/// A sonde command running in the background, what it says (stdout and stderr) in a file,
/// killed and reaped on drop.
struct Background {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Background {
    fn start(args: &[&str], log: std::path::PathBuf) -> Background {
        let file = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(common::SONDE)
            .args(args)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("starting sonde");
        Background { child, log }
    }

    /// Waits (at most 10 s) until it says `text`.
    fn wait_for(&self, text: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.said().contains(text) {
            assert!(
                std::time::Instant::now() < deadline,
                "never said {text:?}: {}",
                self.said()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for its end (it ends by itself) and gives what it said.
    fn finish(mut self) -> String {
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{}", self.said());
        self.said()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With --lab, every command says which namespace it runs in (the scanner's for scan, grab and
/// latency run, the lab's network for capture and latency reflect), on its first line and
/// beside its --metrics address; an interface that is not there is looked for elsewhere.
#[test]
fn lab_commands_say_where_they_run() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/28",
        "--responsive",
        "1",
        "--http",
    ]);
    let (scan_ns, net_ns) = (
        format!("sonde-{}-scan (lab {}'s scanner side)", lab.name, lab.name),
        format!("sonde-{}-net (lab {}'s network side)", lab.name, lab.name),
    );
    let hits = lab.file("hits.csv");
    let out = sonde(&[
        "scan",
        "--lab",
        &lab.name,
        "198.18.0.0/28",
        "-p",
        "80",
        "-r",
        "0",
        "-c",
        "1",
        "-o",
        &hits,
        "--metrics",
        "127.0.0.1:0",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("on sx0 in {scan_ns} at")), "{err}");
    let metrics = err
        .lines()
        .find(|l| l.contains("metrics at"))
        .expect("a metrics line");
    assert!(metrics.contains(&format!("in {scan_ns}")), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "ip netns exec sonde-{}-scan curl -s http://127.0.0.1:",
            lab.name
        )),
        "{metrics}"
    );
    let out = sonde(&[
        "grab",
        "--lab",
        &lab.name,
        "-I",
        &hits,
        "-M",
        "http",
        "-r",
        "0",
        "-o",
        &lab.file("pages.ndjson"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("on sx0 in {scan_ns},")),
        "{}",
        stderr(&out)
    );

    // The lab's side has nx0, the scanner's sx0: each is looked for where the command runs.
    let err = error_line(&sonde(&[
        "scan",
        "--lab",
        &lab.name,
        "-i",
        "nx0",
        "198.18.0.0/28",
        "-p",
        "80",
    ]));
    assert!(
        err.contains(&format!(
            "no interface named \"nx0\" in {scan_ns}; nx0 is in {net_ns}"
        )),
        "{err}"
    );
    let err = error_line(&sonde(&[
        "capture",
        "--lab",
        &lab.name,
        "-i",
        "sx0",
        "-w",
        &lab.file("x.pcap"),
    ]));
    assert!(
        err.contains(&format!(
            "no interface named \"sx0\" in {net_ns}; sx0 is in {scan_ns}"
        )),
        "{err}"
    );

    // latency: the reflector in the lab's network, the client in the scanner's.
    let reflect = Background::start(
        &["latency", "reflect", "--lab", &lab.name, "--duration", "5"],
        lab.dir.join("reflect.log"),
    );
    reflect.wait_for("echoing");
    let out = sonde(&[
        "latency",
        "run",
        "--lab",
        &lab.name,
        "--to",
        "198.19.255.254:7007",
        "--rates",
        "1k",
        "--duration",
        "0.5",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&format!("from {scan_ns}")), "{table}");
    assert!(
        reflect.said().contains(&format!("on nx0 in {net_ns}")),
        "{}",
        reflect.said()
    );
}

/// The lines `sonde capture -r FILE` prints without -w, one a packet, as tcpdump -nr does.
fn capture_lines(file: &str) -> Vec<String> {
    let out = sonde(&["capture", "-r", file]);
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A capture on the scanner's own interface sees none of sonde's probes sent with the xdp and
/// ring backends (they skip the kernel's packet taps), and says so; the lab's side sees every
/// one, and so does the scanner's side when they go through sendmmsg. Files read back print a
/// line a packet; `-i any` captures with libpcap.
#[test]
fn captures_of_sondes_own_probes_are_where_they_arrive() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24", "--responsive", "0"]);
    let syns = "tcp[tcpflags] == tcp-syn and dst port 80";
    for backend in ["xdp", "ring", "mmsg"] {
        let (ours, theirs) = (
            lab.file(&format!("sx0-{backend}.pcap")),
            lab.file(&format!("nx0-{backend}.pcap")),
        );
        let scanner_side = Background::start(
            &[
                "lab",
                "exec",
                "--name",
                &lab.name,
                "--",
                common::SONDE,
                "capture",
                "-i",
                "sx0",
                "-w",
                &ours,
                "--duration",
                "3",
                syns,
            ],
            lab.dir.join(format!("sx0-{backend}.log")),
        );
        let lab_side = Background::start(
            &[
                "capture",
                "--lab",
                &lab.name,
                "-i",
                "nx0",
                "-w",
                &theirs,
                "--duration",
                "3",
                syns,
            ],
            lab.dir.join(format!("nx0-{backend}.log")),
        );
        scanner_side.wait_for("capture: listening on sx0");
        lab_side.wait_for("capture: listening on nx0");
        let out = lab.scan(&[
            "198.18.0.0/24",
            "-p",
            "80",
            "-r",
            "0",
            "-c",
            "0.5",
            "--backend",
            backend,
            "-o",
            &lab.file(&format!("hits-{backend}.csv")),
        ]);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let note = scanner_side.finish();
        assert!(
            note.contains(
                "capture: note: a capture on sx0 sees none of the probes sonde sends from it"
            ) && note.contains(&format!("sonde capture --lab {} -i nx0", lab.name)),
            "{note}"
        );
        lab_side.finish();
        let (seen_here, seen_there) = (capture_lines(&ours).len(), capture_lines(&theirs).len());
        assert_eq!(
            seen_there, 256,
            "{backend}: the lab's side sees every probe"
        );
        let expected_here = if backend == "mmsg" { 256 } else { 0 };
        assert_eq!(
            seen_here, expected_here,
            "{backend}: on the scanner's own interface"
        );
    }
    // A line a packet, as tcpdump -nr prints them.
    let lines = capture_lines(&lab.file("nx0-xdp.pcap"));
    let first = &lines[0];
    assert!(
        first.contains(" IP 198.19.255.1.") && first.contains(".80: Flags [S], seq "),
        "{first}"
    );

    // -i any: libpcap's device of every interface, cooked headers and all.
    let err = error_line(&sonde(&[
        "capture",
        "--lab",
        &lab.name,
        "-i",
        "any",
        "-w",
        &lab.file("any.pcap"),
    ]));
    assert!(err.contains("--backend pcap"), "{err}");
    let any = lab.file("any.pcap");
    let capture = Background::start(
        &[
            "capture",
            "--lab",
            &lab.name,
            "-i",
            "any",
            "--backend",
            "pcap",
            "-w",
            &any,
            "--duration",
            "2",
            "icmp",
        ],
        lab.dir.join("any.log"),
    );
    capture.wait_for("capture: listening on any");
    let out = lab.scan(&["198.18.0.0/28", "-M", "icmp_echo", "-r", "0", "-c", "0.2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    capture.finish();
    let lines = capture_lines(&any);
    assert_eq!(lines.len(), 16, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("ICMP echo request")),
        "{lines:?}"
    );
    // Line for line what tcpdump prints (in UTC, as sonde prints the time).
    let tcpdump = std::process::Command::new("tcpdump")
        .args(["-nr", &any])
        .env("TZ", "UTC")
        .output();
    if let Some(out) = tcpdump.ok().filter(|o| o.status.success()) {
        let theirs: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(lines, theirs);
    }
}
