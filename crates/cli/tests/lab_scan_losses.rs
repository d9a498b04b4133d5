//! The scan names the losses it can see (issue 20, item 4): what the scanner's interface
//! dropped itself is read from its own counters at the start and the end of the run, counted in
//! the summary and named, with its cause, in one line at the end. Here the lab's end of the veth
//! (`nx0`) is taken down, so the scanner's end (`sx0`) drops every probe on the way out; a run
//! with the link up first shows that nothing lost means nothing said. Needs root; the lab has a
//! unique name and is removed by a guard, also on failure.

use std::process::Command;

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

fn json(path: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `ip` with `args` (each names the lab's namespace itself); its stdout.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(out.status.success(), "ip {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A scan of the lab's /24 on port 80, not quiet (the status and summary lines are checked):
/// its output, and its summary.
fn scan(lab: &Lab, tag: &str, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    let (rows, summary) = (
        lab.file(&format!("{tag}.csv")),
        lab.file(&format!("{tag}.json")),
    );
    let mut args = vec![
        "scan",
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "198.18.0.0/24",
        "-p",
        "80",
        "-r",
        "10000",
        "-c",
        "1",
        "-o",
        &rows,
        "--summary-json",
        &summary,
    ];
    args.extend_from_slice(extra);
    let out = sonde(&args);
    assert!(out.status.success(), "scan {tag}: {}", stderr(&out));
    (out, json(&summary))
}

#[test]
fn probes_the_interface_drops_are_counted_and_named_by_cause() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "1",
        "--tcp-open",
        "80",
    ]);
    let net = format!("sonde-{}-net", lab.name);

    // The link up: every target answers, nothing is lost, and no line says otherwise.
    let (out, s) = scan(&lab, "up", &[]);
    let text = stderr(&out);
    assert_eq!(s["iface"], "sx0", "{s}");
    assert_eq!(s["sent"], 256);
    assert!(s["hits"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["iface_tx_dropped"], 0, "{s}");
    assert!(s["losses"].is_null(), "{s}");
    assert!(
        !text.contains("lost:") && !text.contains("interface out"),
        "{text}"
    );

    // The lab's end down: sx0 has no carrier, and its driver drops every frame handed to it.
    // (The gateway's MAC is given: with no carrier, ARP cannot find it.)
    let link = ip(&["-n", &net, "-o", "link", "show", "nx0"]);
    let mac = link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("nx0's MAC")
        .to_string();
    ip(&["-n", &net, "link", "set", "nx0", "down"]);
    let (out, s) = scan(&lab, "down", &["-G", &mac]);
    let text = stderr(&out);
    let sent = s["sent"].as_u64().unwrap();
    let dropped = s["iface_tx_dropped"]
        .as_u64()
        .expect("iface_tx_dropped read");
    assert_eq!(sent, 256);
    assert_eq!(s["received"], 0, "{s}");
    // Every probe was dropped; anything else sx0 tried to send adds to its count.
    assert!(
        dropped >= sent,
        "sx0 dropped {dropped} of {sent} probes: {s}"
    );
    let line = s["losses"].as_str().expect("a losses line");
    assert!(
        line.contains(&format!(
            "sx0 dropped {dropped} probes on the way out (tx_dropped)"
        )),
        "{line}"
    );
    assert!(line.contains("lower -r"), "{line}");
    assert!(text.contains(&format!("scan: {line}")), "{text}");
    // The last status line counts them too (the done line, unless it would repeat the one
    // before it word for word).
    let last = text
        .lines()
        .rfind(|l| l.contains("% ("))
        .unwrap_or_else(|| panic!("no status line: {text}"));
    assert!(
        last.contains(&format!("drops 0, interface out {dropped}, in ")),
        "{last}"
    );
}
