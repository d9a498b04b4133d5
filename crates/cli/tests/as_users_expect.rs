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
