//! `grab -M imap`, `-M pop3` and `-M ftp` with `--starttls` against the lab's dovecot and vsftpd:
//! the greeting, the capabilities and, after STARTTLS/STLS/AUTH TLS, the certificate, scored
//! against the truth.

mod common;

use common::{can_run_labs, grab_score, sonde, stderr, Lab};

/// The number after `label` in a score line ("wrong fields 0" → 0).
fn after(line: &str, label: &str) -> u64 {
    let rest = line
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no {label:?} in: {line}"));
    let word = rest.split_whitespace().next().unwrap();
    word.trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or_else(|_| panic!("{label:?} in: {line}"))
}

/// The rows of an ndjson grab output that succeeded.
fn successes(file: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|row| row["status"] == "success")
        .collect()
}

#[test]
fn imap_and_pop3_upgrade_and_show_the_truth_s_certificate() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28", "--services", "imap,pop3"]);
    for (port, module, capability) in [("143", "imap", "STARTTLS"), ("110", "pop3", "STLS")] {
        let file = lab.file(&format!("{module}.ndjson"));
        let out = sonde(&[
            "grab",
            "--lab",
            &lab.name,
            "-q",
            "198.18.0.0/28",
            "-p",
            port,
            "-M",
            module,
            "--starttls",
            "-o",
            &file,
        ]);
        assert!(out.status.success(), "{module}: {}", stderr(&out));
        let score = lab.score(&[&file]);
        let (done, live, _, _, fp) = grab_score(&score);
        assert!(live > 0 && done == live && fp == 0, "{module}: {score}");
        assert_eq!(after(&score, "wrong fields "), 0, "{module}: {score}");
        assert_eq!(after(&score, "missing fields "), 0, "{module}: {score}");
        // The greeting and the certificate after the upgrade were checked on every live host.
        for field in [format!("{module}_banner"), "tls_cert_sha256".to_string()] {
            assert!(
                score.contains(&format!("{field} {live}/{live}")),
                "{module}: {score}"
            );
        }
        let rows = successes(&file);
        assert_eq!(rows.len() as u64, live, "{module}");
        for row in rows {
            let list = row[format!("{module}_capabilities")].as_str().unwrap();
            assert!(list.contains(capability), "{module}: {row}");
            assert!(row["tls_version"].as_str().unwrap().starts_with("TLSv1."));
        }
    }
}

/// `grab -M ftp --starttls` against the lab's vsftpd, on its default port (21) over IPv4 and
/// IPv6: the greeting, FEAT's features and, after AUTH TLS, the certificate.
#[test]
fn ftp_upgrades_with_auth_tls_and_shows_the_truth_s_certificate() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/28",
        "--population6",
        "2001:2::/124",
        "--services",
        "ftp",
    ]);
    for (family, targets) in [("v4", "198.18.0.0/28"), ("v6", "2001:2::/124")] {
        let file = lab.file(&format!("ftp-{family}.ndjson"));
        let out = sonde(&[
            "grab",
            "--lab",
            &lab.name,
            "-q",
            targets,
            "-M",
            "ftp",
            "--starttls",
            "-o",
            &file,
        ]);
        assert!(out.status.success(), "{family}: {}", stderr(&out));
        let score = lab.score(&["--within", targets, &file]);
        let (done, live, _, _, fp) = grab_score(&score);
        assert!(live > 0 && done == live && fp == 0, "{family}: {score}");
        assert_eq!(after(&score, "wrong fields "), 0, "{family}: {score}");
        assert_eq!(after(&score, "missing fields "), 0, "{family}: {score}");
        for field in ["ftp_banner", "tls_cert_sha256"] {
            assert!(
                score.contains(&format!("{field} {live}/{live}")),
                "{family}: {score}"
            );
        }
        let rows = successes(&file);
        assert_eq!(rows.len() as u64, live, "{family}");
        for row in rows {
            assert_eq!(row["sport"], 21, "{row}");
            let features = row["ftp_features"].as_str().unwrap();
            assert!(features.lines().any(|f| f == "AUTH TLS"), "{row}");
            assert!(row["ftp_starttls"].as_str().unwrap().starts_with("234 "));
            assert!(row["tls_version"].as_str().unwrap().starts_with("TLSv1."));
        }
    }
}
