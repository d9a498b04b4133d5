//! `lab up --services`: real sshd, exim, dovecot, vsftpd and nginx (TLS 1.3 only, TLS 1.0 only) on
//! every responsive address, grabbed with today's modules and scored against the truth, checked
//! with real clients from the scanner namespace, and stopped by `lab down` even after they
//! were killed.

mod common;

use std::collections::HashSet;
use std::process::Command;

use common::{can_run_labs, grab_score, sonde, stderr, Lab};
use sonde_lab::sha256_hex;

const ALL: &str = "ssh,smtp,imap,pop3,ftp,tls13,tls10";

fn grab(lab: &Lab, args: &[&str]) -> std::process::Output {
    let mut all = vec!["grab", "--lab", &lab.name, "-q", "-r", "0"];
    all.extend_from_slice(args);
    sonde(&all)
}

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

/// Runs `sh -c script` in the lab's scanner namespace; its stdout and stderr together.
fn in_scan(lab: &Lab, script: &str) -> String {
    let ns = format!("sonde-{}-scan", lab.name);
    let out = Command::new("ip")
        .args(["netns", "exec", &ns, "timeout", "20", "sh", "-c", script])
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// SHA-256 (hex) of the DER certificate in the PEM text `out` (s_client's -showcerts output).
fn pem_sha256(out: &str) -> String {
    let begin = out
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = out[begin..].find("-----END CERTIFICATE-----").unwrap() + begin;
    let body: String = out[begin + 27..end].split_whitespace().collect();
    sha256_hex(&base64(&body))
}

fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | ALPHABET.iter().position(|a| *a == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// The truth's rows as JSON (lab truth --format ndjson).
fn truth_rows(lab: &Lab) -> Vec<serde_json::Value> {
    let out = sonde(&["lab", "truth", "--name", &lab.name, "--format", "ndjson"]);
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn services_answer_as_the_truth_says() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.44.0/27",
        "--responsive",
        "0.5",
        "--seed",
        "5",
        "--tcp-open",
        "7",
        "--http",
        "--services",
        ALL,
    ]);
    keys_are_private(&lab);
    let truth = truth_rows(&lab);
    let live_on = |port: u64| -> Vec<&serde_json::Value> {
        truth
            .iter()
            .filter(|r| r["port"] == port && r["answer"] == "synack")
            .collect()
    };
    for (port, service) in [
        (22, "ssh"),
        (25, "smtp"),
        (143, "imap"),
        (110, "pop3"),
        (21, "ftp"),
    ] {
        let live = live_on(port);
        assert!(live.len() > 4, "{port}: {live:?}");
        assert!(live.iter().all(|r| r["service"] == service), "{live:?}");
    }

    // Greetings with the banner module: every field the truth has for them is right (port 7:
    // the small server's line, beside the services).
    for (port, field) in [
        ("22", "ssh_banner"),
        ("25", "smtp_banner"),
        ("143", "imap_banner"),
        ("110", "pop3_banner"),
        ("21", "ftp_banner"),
        ("7", "SONDE-LAB"),
    ] {
        let file = lab.file(&format!("banner-{port}.ndjson"));
        let out = grab(
            &lab,
            &["198.18.44.0/27", "-M", "banner", "-p", port, "-o", &file],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let score = lab.score(&[&file]);
        let (done, live, _, _, fp) = grab_score(&score);
        assert!(live > 4 && done == live && fp == 0, "{port}: {score}");
        assert_eq!(after(&score, "wrong fields "), 0, "{port}: {score}");
        assert_eq!(after(&score, "missing fields "), 0, "{port}: {score}");
        assert!(score.contains(&format!("banner {live}/{live}")), "{score}");
        // The protocol module's field is not in the file: it is not counted.
        assert!(!score.contains(field), "{score}");
    }
    // The SMTP greeting names the address connected to; a wrong one is counted as wrong.
    let smtp = lab.file("banner-25.ndjson");
    let text = std::fs::read_to_string(&smtp).unwrap();
    let first = text.lines().find(|l| l.contains("\"success\"")).unwrap();
    let row: serde_json::Value = serde_json::from_str(first).unwrap();
    let saddr = row["saddr"].as_str().unwrap();
    assert_eq!(row["banner"], format!("220 sonde lab {saddr} ESMTP\r\n"));
    let forged = text.replacen(first, &first.replace(saddr, "198.18.44.99"), 1);
    let forged = forged.replacen("198.18.44.99", saddr, 1); // saddr itself stays right
    let bad = lab.file("banner-25-bad.ndjson");
    std::fs::write(&bad, forged).unwrap();
    let score = lab.score(&[&bad]);
    assert_eq!(after(&score, "wrong fields "), 1, "{score}");

    // TLS 1.0 only, RSA key exchange: today's tls module (offering up to 1.2) gets its
    // certificate, version and cipher.
    let tls10 = lab.file("tls10.ndjson");
    let out = grab(
        &lab,
        &["198.18.44.0/27", "-M", "tls", "-p", "9443", "-o", &tls10],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&tls10]);
    let (done, live, _, _, fp) = grab_score(&score);
    assert!(live > 4 && done == live && fp == 0, "{score}");
    assert!(
        score.contains(&format!("certificates correct {live} of {live}")),
        "{score}"
    );
    for field in ["tls_cert_sha256", "tls_version", "tls_cipher"] {
        assert!(score.contains(&format!("{field} {live}/{live}")), "{score}");
    }
    assert_eq!(after(&score, "wrong fields "), 0, "{score}");

    // TLS 1.3 only: the full handshake reads the certificate, which TLS 1.3 sends encrypted.
    let tls13 = lab.file("tls13.ndjson");
    let out = grab(
        &lab,
        &[
            "198.18.44.0/27",
            "-M",
            "tls",
            "--tls-max",
            "1.3",
            "-p",
            "8443",
            "-o",
            &tls13,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&tls13]);
    let (done, live, _, _, fp) = grab_score(&score);
    assert!(live > 4 && done == live && fp == 0, "{score}");
    for field in ["tls_cert_sha256", "tls_version", "tls_cipher"] {
        assert!(score.contains(&format!("{field} {live}/{live}")), "{score}");
    }
    assert_eq!(after(&score, "wrong fields "), 0, "{score}");

    // SSH: the identification and the host key the curve25519 key exchange shows, on every
    // live host.
    let ssh = lab.file("ssh.ndjson");
    let out = grab(
        &lab,
        &["198.18.44.0/27", "-M", "ssh", "-p", "22", "-o", &ssh],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&ssh]);
    let (done, live, _, _, fp) = grab_score(&score);
    assert!(live > 4 && done == live && fp == 0, "{score}");
    for field in ["ssh_banner", "ssh_host_key_sha256"] {
        assert!(score.contains(&format!("{field} {live}/{live}")), "{score}");
    }
    assert_eq!(after(&score, "wrong fields "), 0, "{score}");
    assert_eq!(after(&score, "missing fields "), 0, "{score}");

    // Port 80 still answers byte for byte beside them.
    let http = lab.file("http.ndjson");
    let out = grab(&lab, &["198.18.44.0/27", "-p", "80", "-o", &http]);
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&http]);
    let (done, live, correct, wrong, fp) = grab_score(&score);
    assert!(
        live > 4 && done == live && correct == live && wrong == 0 && fp == 0,
        "{score}"
    );

    real_clients_agree(&lab, &truth);
}

/// openssl s_client and ssh-keyscan from the scanner namespace see what the truth says.
/// No user of the host but root (and exim's group, for exim's key) reads a service's private
/// key: the smtp key was 0644, read by `nobody`.
fn keys_are_private(lab: &Lab) {
    use std::os::unix::fs::MetadataExt;
    let dir = format!("/run/sonde/lab/{}-services", lab.name);
    let mut keys = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.ends_with("-key.pem") || name.ends_with("_key")) {
            continue;
        }
        keys += 1;
        let meta = entry.metadata().unwrap();
        assert_eq!(meta.mode() & 0o007, 0, "{name} is readable by all");
        assert_eq!(meta.uid(), 0, "{name} is not root's");
        if name == "smtp-key.pem" {
            let exim = nix::unistd::Group::from_name("Debian-exim")
                .unwrap()
                .unwrap();
            assert_eq!(meta.gid(), exim.gid.as_raw(), "{name}'s group");
            assert_eq!(meta.mode() & 0o777, 0o640, "{name}");
        }
    }
    assert!(keys >= 5, "{keys} keys in {dir}");
}

fn real_clients_agree(lab: &Lab, truth: &[serde_json::Value]) {
    let row = |port: u64| {
        truth
            .iter()
            .find(|r| r["port"] == port && r["answer"] == "synack")
            .unwrap()
    };
    let expect = |port: u64, field: &str| row(port)["expect"][field].as_str().unwrap().to_string();
    let addr = row(9443)["addr"].as_str().unwrap().to_string();

    // TLS 1.0 with RSA key exchange, and nothing newer.
    let out = in_scan(
        lab,
        &format!("echo | openssl s_client -tls1 -cipher 'AES128-SHA:@SECLEVEL=0' -connect {addr}:9443 -showcerts"),
    );
    assert!(out.contains("Protocol  : TLSv1\n"), "{out}");
    assert!(out.contains("Cipher    : AES128-SHA\n"), "{out}");
    assert_eq!(pem_sha256(&out), expect(9443, "tls_cert_sha256"));
    let out = in_scan(
        lab,
        &format!("echo | openssl s_client -tls1_2 -connect {addr}:9443"),
    );
    assert!(
        out.contains("Cipher is (NONE)"),
        "no handshake expected: {out}"
    );

    // TLS 1.3 only, answering GET / as port 80 does.
    let out = in_scan(
        lab,
        &format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | openssl s_client -ign_eof -connect {addr}:8443 -showcerts"),
    );
    assert!(out.contains("Protocol  : TLSv1.3"), "{out}");
    assert!(
        out.contains(&format!("\r\n\r\nsonde lab {addr}\n")),
        "{out}"
    );
    assert_eq!(pem_sha256(&out), expect(8443, "tls_cert_sha256"));
    let out = in_scan(
        lab,
        &format!("echo | openssl s_client -tls1_2 -connect {addr}:8443"),
    );
    assert!(
        out.contains("Cipher is (NONE)"),
        "no handshake expected: {out}"
    );

    // STARTTLS (AUTH TLS): each service shows its own certificate after the upgrade.
    for (port, proto) in [(25, "smtp"), (143, "imap"), (110, "pop3"), (21, "ftp")] {
        let out = in_scan(
            lab,
            &format!("echo | openssl s_client -starttls {proto} -connect {addr}:{port} -showcerts"),
        );
        assert_eq!(
            pem_sha256(&out),
            expect(port, "tls_cert_sha256"),
            "{proto}: {out}"
        );
    }

    // SSH: the identification string and the host key.
    let out = in_scan(lab, &format!("ssh-keyscan -t ed25519 {addr}"));
    let banner = expect(22, "ssh_banner");
    assert!(out.contains(&format!("{addr}:22 {banner}")), "{out}");
    let key = out
        .lines()
        .find(|l| l.starts_with(&format!("{addr} ssh-ed25519 ")))
        .unwrap_or_else(|| panic!("{out}"));
    let blob = base64(key.split_whitespace().nth(2).unwrap());
    assert_eq!(sha256_hex(&blob), expect(22, "ssh_host_key_sha256"));
}

/// The lab's processes: every pid in its net namespace.
fn net_pids(lab: &Lab) -> Vec<u32> {
    let ns = format!("sonde-{}-net", lab.name);
    let out = Command::new("ip")
        .args(["netns", "pids", &ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Whether `pid` still runs (a zombie has ended; only its parent's wait is missing).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn down_after_the_servers_were_killed_leaves_no_process() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.45.0/29",
        "--population6",
        "2001:2::4500/125",
        "--responsive",
        "1",
        "--tcp-open",
        "7",
        "--services",
        ALL,
    ]);
    // Over IPv6 too: the SMTP greeting names the IPv6 address connected to.
    let smtp6 = lab.file("smtp6.ndjson");
    let out = grab(
        &lab,
        &["2001:2::4500/125", "-M", "banner", "-p", "25", "-o", &smtp6],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let score = lab.score(&[&smtp6]);
    assert!(score.starts_with("completed 8 of 8 live"), "{score}");
    assert!(score.contains("banner 8/8"), "{score}");
    let status = lab.status();
    let services = status["services"].as_array().unwrap();
    let names: Vec<&str> = services
        .iter()
        .map(|s| s["service"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["ssh", "smtp", "imap", "pop3", "ftp", "tls13", "tls10"]
    );
    let servers: HashSet<u32> = services
        .iter()
        .map(|s| s["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        servers.len(),
        5,
        "sshd, exim, dovecot, vsftpd, nginx: {services:?}"
    );
    // Every server and its children live in the lab's net namespace, nowhere else.
    let net = std::fs::metadata(format!("/run/netns/sonde-{}-net", lab.name)).unwrap();
    let pids = net_pids(&lab);
    for pid in &servers {
        assert!(pids.contains(pid), "{pid} is not in the lab's namespace");
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&ns),
            std::os::unix::fs::MetadataExt::ino(&net)
        );
    }
    assert!(pids.len() > servers.len() + 1, "no children? {pids:?}");

    // A crash: the servers die at once, leaving their children.
    for pid in &servers {
        let ok = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let out = sonde(&["lab", "down", "--name", &lab.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let left: Vec<u32> = pids.iter().copied().filter(|p| runs(*p)).collect();
    assert!(left.is_empty(), "still running after down: {left:?}");
    let dir = format!("/run/sonde/lab/{}-services", lab.name);
    assert!(!std::path::Path::new(&dir).exists(), "{dir} is left");
}

#[test]
fn unknown_services_are_refused_in_one_line() {
    let lab = Lab::named();
    let out = sonde(&["lab", "up", "--name", &lab.name, "--services", "ssh,telnet"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(
        err,
        "sonde: error: --services: unknown service \"telnet\" (use ssh, smtp, imap, pop3, ftp, tls13 or tls10)\n"
    );
    assert!(!std::path::Path::new(&format!("/run/netns/sonde-{}-net", lab.name)).exists());
}
