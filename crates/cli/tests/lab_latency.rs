//! `sonde latency` in a lab: a reflector in the lab's network namespace, the client in the
//! scanner namespace, on each path; and the errors a user meets first.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{can_run_labs, sonde, stderr, Lab, SONDE};

/// The lab side's address (nx0), which no nftables rule of the lab drops.
const REFLECTOR: &str = "198.19.255.254";

/// A reflector process, killed on drop (also when an assertion fails).
struct Reflector(Child);

impl Reflector {
    fn start(lab: &Lab, backend: &str, port: u16) -> Reflector {
        let child = Command::new(SONDE)
            .args([
                "latency",
                "reflect",
                "--lab",
                &lab.name,
                "--backend",
                backend,
            ])
            .args(["-p", &port.to_string(), "--duration", "60", "-q"])
            .stdout(Stdio::null())
            .spawn()
            .expect("starting the reflector");
        Reflector(child)
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(
    lab: &Lab,
    backend: &str,
    port: u16,
    rates: &str,
    secs: &str,
    extra: &[&str],
) -> std::process::Output {
    let to = format!("{REFLECTOR}:{port}");
    let mut args = vec![
        "latency",
        "run",
        "--lab",
        &lab.name,
        "--to",
        &to,
        "--backend",
        backend,
        "--rates",
        rates,
        "--duration",
        secs,
    ];
    args.extend_from_slice(extra);
    sonde(&args)
}

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the summary")).expect("JSON")
}

#[test]
fn ring_reflector_and_client_at_10k_pps_lose_nothing_and_draw_the_heat_map() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28"]);
    let _reflector = Reflector::start(&lab, "ring", 7007);
    let out_dir = lab.dir.join("out");
    let out = run(
        &lab,
        "ring",
        7007,
        "10k",
        "2",
        &["--out", out_dir.to_str().unwrap(), "--samples"],
    );
    assert!(out.status.success(), "latency run: {}", stderr(&out));
    let s = summary(&out_dir.join("latency-summary.json"));
    let r = &s["rates"][0];
    assert_eq!(r["sent"], 20_000, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["rx_drops"], 0, "the frame path tells its ring drops: {r}");
    for p in [
        "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us",
    ] {
        let v = r[p].as_f64().unwrap();
        assert!(v > 0.0 && v.is_finite(), "{p} = {v}");
    }
    assert!(r["p50_us"].as_f64() <= r["p99_us"].as_f64());
    assert!(r["p99_us"].as_f64() <= r["max_us"].as_f64());
    let achieved = r["achieved_pps"].as_f64().unwrap();
    assert!(
        (achieved - 10_000.0).abs() < 500.0,
        "achieved {achieved} pps"
    );
    assert!(s["ts_source"].as_str().unwrap().contains("software"));
    for png in ["latency-heatmap-10000.png", "latency-percentiles.png"] {
        let bytes = std::fs::read(out_dir.join(png)).expect(png);
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG"), "{png}");
    }
    let csv = std::fs::read_to_string(out_dir.join("latency-samples.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 20_000,
        "one line per echo and a header"
    );
}

#[test]
fn every_path_reaches_every_reflector() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28"]);
    for (port, reflector) in [(7101, "kernel"), (7102, "xdp"), (7103, "ring")] {
        let _reflector = Reflector::start(&lab, reflector, port);
        for client in ["kernel", "ring", "xdp"] {
            let json = lab.dir.join(format!("{reflector}-{client}.json"));
            let out = run(
                &lab,
                client,
                port,
                "2k",
                "0.5",
                &["-q", "--summary-json", json.to_str().unwrap()],
            );
            assert!(
                out.status.success(),
                "{client} → {reflector}: {}",
                stderr(&out)
            );
            let r = &summary(&json)["rates"][0];
            assert_eq!(r["sent"], 1_000, "{client} → {reflector}: {r}");
            assert_eq!(r["lost"], 0, "{client} → {reflector}: {r}");
            // The frame paths tell drops in their rings; the kernel socket path cannot.
            assert_eq!(r["rx_drops"].is_null(), client == "kernel", "{r}");
        }
    }
}

#[test]
fn bad_input_gets_one_clear_line() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28"]);
    // No reflector: a timeout after --wait, not a hang.
    let start = Instant::now();
    let out = run(&lab, "ring", 7999, "1k", "1", &["--wait", "1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("no echo from 198.19.255.254:7999 within 1 s"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    let cases: [(&[&str], &str); 6] = [
        (&["--rates", "0"], "above 0"),
        (&["--rates", "10k,-5k"], "above 0"),
        (&["--size", "10"], "--size 10"),
        (&["--size", "9000"], "--size 9000"),
        (&["--out", "/proc/version/x"], "cannot write to --out"),
        // Refused before any socket is opened: nothing is ever sent to it.
        (&["--to", "192.0.2.1:7"], "only the lab's addresses"),
    ];
    for (args, want) in cases {
        let mut all = vec!["latency", "run", "--lab", &lab.name, "--duration", "1"];
        if !args.contains(&"--to") {
            all.extend(["--to", "198.19.255.254:7007"]);
        }
        all.extend_from_slice(args);
        let out = sonde(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        // The first line says it all (clap adds a pointer to --help below its own).
        let err = stderr(&out);
        let first = err.lines().next().unwrap_or_default();
        assert!(first.contains(want), "{args:?}: {err}");
    }
}
