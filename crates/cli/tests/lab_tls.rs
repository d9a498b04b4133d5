//! `sonde grab -M tls` and `-M https` in the lab, scored against its truth: the lab's nginx on
//! 443 speaks TLS 1.3; every live host's certificate SHA-256 and HTTPS body must be right,
//! over sonde's own TCP and over kernel sockets. Also the one-line errors of TLS input. Needs
//! root; each lab has a unique name and is removed by its guard, also on failure.

mod common;
use common::{can_run_labs, grab_score, sonde, stderr, Lab};

fn rows(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `sonde grab --lab L ARGS -q -r 0`.
fn grab(lab: &Lab, args: &[&str]) -> std::process::Output {
    let mut all = vec!["grab", "--lab", &lab.name, "-q", "-r", "0"];
    all.extend_from_slice(args);
    sonde(&all)
}

#[test]
fn https_and_tls_get_every_live_host_with_its_certificate() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/25",
        "--responsive",
        "0.5",
        "--http",
        "--tcp-open",
        "80,443",
    ]);
    let cert = lab.status()["tls_cert_sha256"]
        .as_str()
        .expect("the lab's certificate hash")
        .to_string();
    let mut live_hosts = 0;
    for backend in ["xdp", "kernel"] {
        for app in ["https", "tls"] {
            let out_file = lab.file(&format!("{app}-{backend}.ndjson"));
            let out = grab(
                &lab,
                &[
                    "198.18.0.0/25",
                    "-p",
                    "443",
                    "-M",
                    app,
                    "--backend",
                    backend,
                    "-o",
                    &out_file,
                ],
            );
            assert!(out.status.success(), "{app} {backend}: {}", stderr(&out));
            let score = lab.score(&[&out_file]);
            let (done, live, bodies, wrong, fp) = grab_score(&score);
            assert!(live > 0, "{score}");
            live_hosts = live;
            assert!(
                done == live && wrong == 0 && fp == 0,
                "{app} {backend}: {score}"
            );
            if app == "https" {
                assert_eq!(bodies, live, "{app} {backend}: every body right: {score}");
            }
            assert!(score.contains("certificates correct"), "{score}");
            let rows = rows(&out_file);
            let ok: Vec<_> = rows.iter().filter(|r| r["status"] == "success").collect();
            assert_eq!(ok.len() as u64, live);
            for r in ok {
                assert_eq!(r["tls_cert_sha256"], cert.as_str(), "{r}");
                assert_eq!(r["tls_path"], "rustls", "{r}");
                assert_eq!(r["tls_version"], "TLSv1.3", "{r}");
                assert!(r["tls_kx_group"].is_string(), "{r}");
                assert!(
                    r["tls_ja3s"]
                        .as_str()
                        .is_some_and(|j| j.starts_with("771,")),
                    "{r}"
                );
                // The lab's own CA signed it: no default root knows it.
                assert_eq!(r["tls_chain_valid"], false, "{r}");
                assert!(r["tls_chain_error"].is_string(), "{r}");
                if app == "https" {
                    assert_eq!(r["tls_alpn"], "http/1.1", "{r}");
                    assert_eq!(r["http_status"], 200, "{r}");
                    let want = format!("sonde lab {}\n", r["saddr"].as_str().unwrap());
                    assert_eq!(r["http_body"], want.as_str(), "{r}");
                }
            }
        }
    }
    // A request path of 1200 bytes: the client's second flight (its Finished and the request)
    // ends past byte 1400 of what it sends (the ClientHello is about 250 bytes); closed by
    // FIN. Every live host answers it, whole: 404 (nginx serves only / and the big file).
    let path = format!("/{}", "a".repeat(1200));
    let out_file = lab.file("https-long-path.ndjson");
    let out = grab(
        &lab,
        &[
            "198.18.0.0/25",
            "-p",
            "443",
            "-M",
            "https",
            "--http-path",
            &path,
            "--close",
            "fin",
            "-o",
            &out_file,
        ],
    );
    assert!(out.status.success(), "long path: {}", stderr(&out));
    let rows = rows(&out_file);
    let ok: Vec<_> = rows.iter().filter(|r| r["status"] == "success").collect();
    assert_eq!(ok.len() as u64, live_hosts, "{rows:?}");
    for r in ok {
        assert_eq!(r["http_status"], 404, "{r}");
    }
}

/// `-I address:port,name`: each name is its own connection and row (two names for one address
/// make two rounds), carrying the name; the rest as any https row.
#[test]
fn names_per_target_each_get_a_connection_and_a_row() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/26",
        "--responsive",
        "0.5",
        "--http",
        "--tcp-open",
        "80,443",
    ]);
    let live: Vec<String> = lab
        .truth(&["--ports", "443"])
        .into_iter()
        .filter(|r| r[1] == "443" && r[2] == "synack")
        .map(|r| r[0].clone())
        .collect();
    assert!(live.len() >= 3, "{live:?}");
    let lines = [
        format!("{}:443,a.sonde.test", live[0]),
        format!("{}:443,b.sonde.test", live[0]),
        format!("{}:443,c.sonde.test", live[1]),
        format!("{}:443", live[2]),
    ];
    let input = lab.file("names.txt");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    for backend in ["xdp", "kernel"] {
        let out_file = lab.file(&format!("names-{backend}.ndjson"));
        let out = grab(
            &lab,
            &[
                "-I",
                &input,
                "-M",
                "https",
                "--backend",
                backend,
                "-o",
                &out_file,
            ],
        );
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let mut got: Vec<(String, serde_json::Value)> = rows(&out_file)
            .into_iter()
            .map(|r| {
                assert_eq!(r["status"], "success", "{r}");
                let want = format!("sonde lab {}\n", r["saddr"].as_str().unwrap());
                assert_eq!(r["http_body"], want.as_str(), "{r}");
                assert_eq!(r["tls_path"], "rustls", "{r}");
                (r["saddr"].as_str().unwrap().to_string(), r["name"].clone())
            })
            .collect();
        got.sort_by_key(|(addr, name)| (addr.clone(), name.to_string()));
        let mut want = vec![
            (live[0].clone(), serde_json::json!("a.sonde.test")),
            (live[0].clone(), serde_json::json!("b.sonde.test")),
            (live[1].clone(), serde_json::json!("c.sonde.test")),
            (live[2].clone(), serde_json::Value::Null),
        ];
        want.sort_by_key(|(addr, name)| (addr.clone(), name.to_string()));
        assert_eq!(got, want, "{backend}");
    }
}

#[test]
fn bad_tls_input_gets_one_clear_line() {
    let junk = std::env::temp_dir().join(format!("sonde-junk-roots-{}.pem", std::process::id()));
    std::fs::write(&junk, "no certificate here\n").unwrap();
    let junk = junk.to_str().unwrap().to_string();
    let names = std::env::temp_dir().join(format!("sonde-bad-names-{}.txt", std::process::id()));
    std::fs::write(&names, "198.18.0.1:443,ok.test\n198.18.0.2:443,bad name!\n").unwrap();
    let names = names.to_str().unwrap().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["grab", "-I", &names, "-M", "https"], ":2:"),
        (
            &[
                "grab",
                "198.18.0.0/24",
                "-M",
                "tls",
                "--root-cas",
                "/nonexistent/roots.pem",
            ],
            "/nonexistent/roots.pem",
        ),
        (
            &["grab", "198.18.0.0/24", "-M", "https", "--root-cas", &junk],
            "--root-cas",
        ),
        (&["grab", "198.18.0.0/24", "-M", "smtps"], "smtps"),
    ];
    for (args, needle) in cases {
        let out = sonde(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("error") && err.contains(needle),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_file(&junk);
    let _ = std::fs::remove_file(&names);
}

/// The server that stays in the past, started in the lab's network namespace only, ended when
/// dropped.
struct OldServer(std::process::Child);

impl Drop for OldServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A self-signed certificate made with `openssl req` in the lab's folder: its key file, its PEM
/// file and the SHA-256 of its DER (what `tls_cert_sha256` must say).
fn self_signed(lab: &Lab, name: &str, newkey: &[&str]) -> (String, String, String) {
    let (key, cert) = (
        lab.file(&format!("{name}.key")),
        lab.file(&format!("{name}.pem")),
    );
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-newkey"])
        .args(newkey)
        .args(["-keyout", &key, "-out", &cert])
        .args(["-subj", &format!("/CN={name}.sonde.test")])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let der = std::process::Command::new("openssl")
        .args(["x509", "-in", &cert, "-outform", "DER"])
        .output()
        .unwrap()
        .stdout;
    let sha = sonde_lab::sha256_hex(&der);
    (key, cert, sha)
}

/// GnuTLS's own server (`gnutls-serv`, another TLS stack than nginx's and OpenSSL's), limited to
/// TLS 1.3 and then to TLS 1.2, inside the lab's namespace: `-M https` makes the full handshake
/// with it (rustls, not the first-flight path), reads its certificate and its HTTP answer.
#[test]
fn a_gnutls_server_is_grabbed_in_full_over_tls_1_3_and_1_2() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/30", "--responsive", "1"]);
    let (key, cert, want) = self_signed(
        &lab,
        "gnutls",
        &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    );
    let namespace = format!("sonde-{}-net", lab.name);
    for (version, priority) in [
        ("TLSv1.3", "NORMAL:-VERS-ALL:+VERS-TLS1.3"),
        ("TLSv1.2", "NORMAL:-VERS-ALL:+VERS-TLS1.2"),
    ] {
        let _server = OldServer(
            std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &namespace,
                    "gnutls-serv",
                    "--http",
                    "--quiet",
                ])
                .args(["--port", "5556", "--priority", priority])
                .args(["--x509certfile", &cert, "--x509keyfile", &key])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let out_file = lab.file(&format!("gnutls-{version}.ndjson"));
        let out = grab(
            &lab,
            &[
                "198.18.0.0/30",
                "-p",
                "5556",
                "-M",
                "https",
                "-o",
                &out_file,
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let rows = rows(&out_file);
        assert_eq!(rows.len(), 4, "one row per target: {rows:?}");
        for r in rows {
            assert_eq!(r["status"], "success", "{r}");
            assert_eq!(r["tls_path"], "rustls", "{r}");
            assert_eq!(r["tls_version"], version, "{r}");
            assert_eq!(r["tls_cert_sha256"], want.as_str(), "{r}");
            assert_eq!(r["http_status"], 200, "{r}");
        }
    }
}

/// A server of TLS 1.0 and RSA key exchange only (`openssl s_server -tls1`) refuses the full
/// handshake's hello (protocol_version); `-M tls` then makes a second connection with the
/// first-flight hello and reads its certificate.
#[test]
fn a_tls_1_0_only_server_yields_its_certificate_by_a_second_connection() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/30", "--responsive", "1"]);
    let (key, cert, want) = self_signed(&lab, "old", &["rsa:2048"]);
    let namespace = format!("sonde-{}-net", lab.name);
    let _server = OldServer(
        std::process::Command::new("ip")
            .args(["netns", "exec", &namespace, "openssl", "s_server", "-quiet"])
            .args([
                "-accept",
                "9443",
                "-tls1",
                "-cipher",
                "AES128-SHA:@SECLEVEL=0",
            ])
            .args(["-cert", &cert, "-key", &key])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let out_file = lab.file("old.ndjson");
    let out = grab(
        &lab,
        &["198.18.0.0/30", "-p", "9443", "-M", "tls", "-o", &out_file],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = rows(&out_file);
    assert_eq!(rows.len(), 4, "one row per target: {rows:?}");
    for r in rows {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["tls_path"], "first-flight", "{r}");
        assert_eq!(r["tls_version"], "TLSv1.0", "{r}");
        assert_eq!(r["tls_cipher"], "TLS_RSA_WITH_AES_128_CBC_SHA", "{r}");
        assert_eq!(r["tls_cert_sha256"], want.as_str(), "{r}");
    }
}

/// `openssl s_client` in the lab's scanner namespace, to 198.18.0.1:`port` with SNI `sni`:
/// the version, the cipher (IANA name) and the SHA-256 of the leaf it got, each if any. A
/// try that gets no certificate is made again (at most three in all: `s_server` serves one
/// connection at a time, and a loaded machine may keep it past the first try's time).
fn s_client(lab: &Lab, port: u16, sni: &str) -> [Option<String>; 3] {
    let mut got = s_client_once(lab, port, sni);
    for _ in 0..2 {
        if got[2].is_some() {
            break;
        }
        got = s_client_once(lab, port, sni);
    }
    got
}

fn s_client_once(lab: &Lab, port: u16, sni: &str) -> [Option<String>; 3] {
    let scanner = format!("sonde-{}-scan", lab.name);
    let out = std::process::Command::new("ip")
        .args([
            "netns", "exec", &scanner, "timeout", "10", "openssl", "s_client",
        ])
        .args([
            "-connect",
            &format!("198.18.0.1:{port}"),
            "-servername",
            sni,
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let after = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
            .filter(|v| !v.is_empty() && v != "(NONE)" && v != "0000")
    };
    // "New, TLSv1.3, Cipher is NAME" comes right after the handshake; the session block's
    // "Protocol  :" and "Cipher    :" lines only once a TLS 1.3 server's ticket was read, which
    // s_client, its input at an end, does not always wait for.
    let (new_version, new_cipher) = text
        .lines()
        .find_map(|l| {
            let (version, cipher) = l.trim().strip_prefix("New, ")?.split_once(", Cipher is ")?;
            Some((version.to_string(), cipher.trim().to_string()))
        })
        .filter(|(_, cipher)| cipher != "(NONE)")
        .unzip();
    let version = after("Protocol  :").or(new_version);
    let cipher = after("Cipher    :").or(new_cipher).map(|name| {
        let std = std::process::Command::new("openssl")
            .args(["ciphers", "-stdname", &name])
            .output()
            .unwrap();
        // Lines of "IANA-NAME - OPENSSL-NAME VERSION …" (TLS 1.3's suites listed too).
        let std = String::from_utf8_lossy(&std.stdout).into_owned();
        std.lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|words| words.get(2) == Some(&name.as_str()))
            .map_or(name.clone(), |words| words[0].to_string())
    });
    let pem = text.find("-----BEGIN CERTIFICATE-----").and_then(|start| {
        let end = text[start..].find("-----END CERTIFICATE-----")?;
        Some(text[start..start + end + "-----END CERTIFICATE-----".len()].to_string())
    });
    let sha = pem.map(|pem| {
        let mut x509 = std::process::Command::new("openssl")
            .args(["x509", "-outform", "DER"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        x509.stdin
            .take()
            .unwrap()
            .write_all(pem.as_bytes())
            .unwrap();
        sonde_lab::sha256_hex(&x509.wait_with_output().unwrap().stdout)
    });
    [version, cipher, sha]
}

/// A server in the lab's network namespace (all its addresses), ended when dropped.
fn serve(lab: &Lab, command: &[&str]) -> OldServer {
    let namespace = format!("sonde-{}-net", lab.name);
    OldServer(
        std::process::Command::new("ip")
            .args(["netns", "exec", &namespace])
            .args(command)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// lighttpd's configuration: TLS 1.2 on `dhe_port` with DHE suites only, and on `cbc_port`
/// with AES-CBC suites of SHA-256 MACs only.
fn lighttpd_conf(lab: &Lab, cert: &str, key: &str, dhe_port: u16, cbc_port: u16) -> String {
    let conf = lab.file("lighttpd.conf");
    let tls = |ciphers: &str| {
        format!(
            "ssl.engine = \"enable\"\nssl.pemfile = \"{cert}\"\nssl.privkey = \"{key}\"\n\
             ssl.openssl.ssl-conf-cmd = (\"MinProtocol\" => \"TLSv1.2\", \
             \"MaxProtocol\" => \"TLSv1.2\", \"CipherString\" => \"{ciphers}\")\n"
        )
    };
    let text = format!(
        "server.document-root = \"{}\"\nserver.port = {dhe_port}\nserver.modules = (\"mod_openssl\")\n{}\
         $SERVER[\"socket\"] == \":{cbc_port}\" {{\n{}}}\n",
        lab.dir.display(),
        tls("DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-SHA256"),
        tls("ECDHE-RSA-AES128-SHA256:AES256-SHA256"),
    );
    std::fs::write(&conf, text).unwrap();
    conf
}

/// TLS as servers speak it, each row compared with `openssl s_client` from the same namespace:
/// a warning alert before the ServerHello (unrecognized_name, `s_server -servername`), DHE
/// suites only and AES-CBC-SHA256 suites only (lighttpd), FFDHE groups only (`s_server
/// -groups ffdhe2048`: with TLS 1.2 allowed a TLS 1.2 hello gets the certificate; TLS 1.3 only
/// is the limit the row names). And the bound on sessions at once (`--session-memory`), over
/// the lab's nginx. One lab for all.
#[test]
fn servers_of_warnings_dhe_cbc_sha256_and_ffdhe_show_what_openssl_sees() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/25",
        "--responsive",
        "1",
        "--http",
        "--tcp-open",
        "443",
    ]);
    let (key, cert, rsa_sha) = self_signed(&lab, "rsa", &["rsa:2048"]);
    let (ec_key, ec_cert, _) = self_signed(
        &lab,
        "ec",
        &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    );
    let s_server = |port: &str, extra: &[&str]| {
        let mut command = vec!["openssl", "s_server", "-quiet", "-accept", port];
        command.extend_from_slice(&["-cert", &cert, "-key", &key]);
        command.extend_from_slice(extra);
        serve(&lab, &command)
    };
    let _warning = s_server(
        "7001",
        &[
            "-tls1_2",
            "-servername",
            "good.sonde.test",
            "-cert2",
            &ec_cert,
            "-key2",
            &ec_key,
        ],
    );
    let _ffdhe = s_server("7002", &["-groups", "ffdhe2048"]);
    let _ffdhe13 = s_server("7003", &["-tls1_3", "-groups", "ffdhe2048"]);
    let conf = lighttpd_conf(&lab, &cert, &key, 7004, 7005);
    let _lighttpd = serve(&lab, &["lighttpd", "-D", "-f", &conf]);
    std::thread::sleep(std::time::Duration::from_millis(1000));

    let out_file = lab.file("servers.ndjson");
    let out = grab(
        &lab,
        &[
            "198.18.0.1",
            "-p",
            "7001-7005",
            "-M",
            "tls",
            "--tls-sni",
            "bad.sonde.test",
            "-o",
            &out_file,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = rows(&out_file);
    assert_eq!(rows.len(), 5, "one row per port: {rows:?}");
    let row = |port: u16| rows.iter().find(|r| r["sport"] == port).unwrap();
    let sees = |port| s_client(&lab, port, "bad.sonde.test");
    let str_of = |v: &serde_json::Value| v.as_str().map(str::to_string);

    // Each server whose certificate openssl gets: the same certificate, version and cipher.
    for port in [7001, 7004, 7005] {
        let r = row(port);
        let [version, cipher, sha] = sees(port);
        assert_eq!(sha.as_deref(), Some(rsa_sha.as_str()), "{port}: openssl");
        assert_eq!(str_of(&r["tls_cert_sha256"]), sha, "{port}: {r}");
        assert_eq!(str_of(&r["tls_version"]), version, "{port}: {r}");
        assert_eq!(str_of(&r["tls_cipher"]), cipher, "{port}: {r}");
        assert!(r["tls_ja3s"].is_string(), "{port}: {r}");
    }
    // The warning did not stop the full handshake, and is named.
    assert_eq!(row(7001)["tls_path"], "rustls");
    assert_eq!(row(7001)["tls_alert"], "unrecognized_name");
    assert!(row(7004)["tls_cipher"]
        .as_str()
        .is_some_and(|c| c.starts_with("TLS_DHE_RSA_")));
    assert!(row(7005)["tls_cipher"]
        .as_str()
        .is_some_and(|c| c.ends_with("_CBC_SHA256")));
    // FFDHE only, TLS 1.2 allowed: the TLS 1.2 hello of the second connection gets the
    // certificate openssl gets (over TLS 1.3 with FFDHE).
    let [_, _, sha] = sees(7002);
    assert_eq!(str_of(&row(7002)["tls_cert_sha256"]), sha, "{}", row(7002));
    assert_eq!(row(7002)["tls_version"], "TLSv1.2", "{}", row(7002));
    // TLS 1.3 with FFDHE only: openssl gets a certificate, sonde cannot, and says why.
    let [version, _, sha] = sees(7003);
    assert_eq!((version.as_deref(), sha.is_some()), (Some("TLSv1.3"), true));
    let r = row(7003);
    assert_eq!(r["tls_cert_sha256"], serde_json::Value::Null, "{r}");
    assert!(
        r["tls_error"].as_str().is_some_and(|e| e.contains("FFDHE")),
        "{r}"
    );

    // Sessions at once: 1 MiB of 16 KiB sessions is 64, under 128 live hosts.
    let out_file = lab.file("bounded.ndjson");
    let summary = lab.file("bounded.json");
    let out = sonde(&[
        "grab",
        "--lab",
        &lab.name,
        "-r",
        "0",
        "198.18.0.0/25",
        "-p",
        "443",
        "-M",
        "tls",
        "--session-memory",
        "1",
        "-o",
        &out_file,
        "--summary-json",
        &summary,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("at most 64 connections open at once"), "{err}");
    assert!(
        err.contains("at most 64 tls sessions at once, about 16 KiB each"),
        "{err}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(summary["sessions"]["at_once"], 64, "{summary}");
    assert_eq!(summary["sessions"]["bytes_each"], 16384, "{summary}");
    let peak = summary["peak_outstanding"].as_u64().unwrap();
    assert!(peak > 0 && peak <= 64, "{summary}");
    let bounded = self::rows(&out_file);
    assert_eq!(bounded.len(), 128);
    assert!(bounded.iter().all(|r| r["tls_cert_sha256"].is_string()));
}
