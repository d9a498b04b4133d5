//! `--metrics` watched by a real Prometheus (Debian's `prometheus`, from scripts/setup): it
//! runs in the lab's scanner namespace, where `sonde … --lab L` serves its page, and scrapes a
//! scan, a grab, a blast and a dns run. promtool checks a scraped page, and the last values Prometheus
//! kept equal the summaries, field for field. Nothing binds or scrapes in the root namespace.
//! Needs root; the lab has a unique name and is removed by its guard, Prometheus killed by its
//! own, also on failure.

use std::collections::HashMap;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, stderr, Lab, SONDE};

/// Where sonde serves, and where Prometheus listens: inside the lab's scanner namespace,
/// which is the test's own, so fixed ports cannot meet another test's.
const METRICS: &str = "127.0.0.1:9464";
const PROMETHEUS: &str = "127.0.0.1:9090";

fn scanner_ns(lab: &Lab) -> String {
    let ns = format!("sonde-{}-scan", lab.name);
    assert!(!lab.name.is_empty(), "a namespace name, never the root one");
    ns
}

/// `ip netns exec NS ARGS…`: a command in the lab's namespace, never the root one.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("running a command in the lab namespace")
}

/// Prometheus in the lab's scanner namespace, scraping sonde's page every second; killed when
/// dropped.
struct Prometheus {
    child: Child,
    ns: String,
}

impl Prometheus {
    fn start(lab: &Lab) -> Prometheus {
        let ns = scanner_ns(lab);
        let config = lab.file("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: sonde\n    static_configs:\n      - targets: ['{METRICS}']\n"
            ),
        )
        .unwrap();
        let log = std::fs::File::create(lab.file("prometheus.log")).unwrap();
        let child = in_ns(
            &ns,
            &[
                "prometheus",
                &format!("--config.file={config}"),
                &format!("--storage.tsdb.path={}", lab.file("tsdb")),
                &format!("--web.listen-address={PROMETHEUS}"),
            ],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting prometheus (scripts/setup installs it)");
        let prometheus = Prometheus { child, ns };
        // Ready once it has scraped the (still empty) target: `up` has a sample.
        let deadline = Instant::now() + Duration::from_secs(60);
        while prometheus.query("up{job=\"sonde\"}").is_empty() {
            assert!(Instant::now() < deadline, "prometheus did not start");
            std::thread::sleep(Duration::from_millis(300));
        }
        prometheus
    }

    /// An instant query through promtool: each series' labels and value.
    fn query(&self, expr: &str) -> Vec<(HashMap<String, String>, f64)> {
        let url = format!("http://{PROMETHEUS}");
        let out = run(in_ns(
            &self.ns,
            &["promtool", "query", "instant", "-o", "json", &url, expr],
        ));
        if !out.status.success() {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let value = json_number(s["value"][1].as_str().unwrap());
                (labels, value)
            })
            .collect()
    }

    /// The one value `expr` gives.
    fn value(&self, expr: &str) -> f64 {
        let r = self.query(expr);
        assert_eq!(r.len(), 1, "{expr}: {r:?}");
        r[0].1
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A number as serde_json reads it: the summary file's numbers are read with the same parser,
/// which is not always correctly rounded, so the same text must go through it to compare.
fn json_number(text: &str) -> f64 {
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not a number: {text}"))
}

/// One sample of a page: its name, labels (unescaped) and value as written.
struct Sample {
    name: String,
    labels: HashMap<String, String>,
    value: String,
}

/// The samples of a page in the Prometheus text format.
fn parse_page(page: &str) -> Vec<Sample> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, rest) = series.split_once('{').unwrap();
            let mut labels = HashMap::new();
            let mut chars = rest.strip_suffix('}').unwrap().chars();
            loop {
                let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                if key.is_empty() {
                    break;
                }
                assert_eq!(chars.next(), Some('"'), "{line}");
                let mut value = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('n') => value.push('\n'),
                            Some(c) => value.push(c),
                            None => panic!("{line}"),
                        },
                        c => value.push(c),
                    }
                }
                labels.insert(key.trim_start_matches(',').to_string(), value);
            }
            Sample {
                name: name.to_string(),
                labels,
                value: value.to_string(),
            }
        })
        .collect()
}

/// A summary's leaves by dotted name: numbers (booleans as 0 or 1) and texts; nulls left out.
fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&name, v, out);
            }
        }
        serde_json::Value::Null => {}
        v => out.push((prefix.to_string(), v.clone())),
    }
}

/// The page's report equals the summary field for field: every number exactly as the JSON
/// writes it, every text as a label, nothing else.
fn page_matches_summary(page: &[Sample], summary: &serde_json::Value, command: &str) {
    let mut fields = Vec::new();
    leaves("", summary, &mut fields);
    let report: Vec<&Sample> = page
        .iter()
        .filter(|s| s.name.starts_with("sonde_report"))
        .collect();
    assert_eq!(report.len(), fields.len(), "one series per non-null field");
    for (field, value) in &fields {
        let sample = report
            .iter()
            .find(|s| s.labels["field"] == *field)
            .unwrap_or_else(|| panic!("{command}: no series for {field}"));
        assert_eq!(sample.labels["command"], command);
        match value {
            serde_json::Value::String(text) => {
                assert_eq!(sample.name, "sonde_report_text", "{field}");
                assert_eq!(&sample.labels["value"], text, "{field}");
            }
            serde_json::Value::Bool(b) => {
                assert_eq!(sample.value, if *b { "1" } else { "0" }, "{field}")
            }
            number => assert_eq!(
                json_number(&sample.value),
                number.as_f64().unwrap(),
                "{field}"
            ),
        }
    }
}

/// What Prometheus kept last of `command`'s report equals the summary, field for field.
fn prometheus_kept_summary(prom: &Prometheus, summary: &serde_json::Value, command: &str) {
    let mut fields = Vec::new();
    leaves("", summary, &mut fields);
    let kept: HashMap<String, f64> = prom
        .query(&format!(
            "last_over_time(sonde_report{{command=\"{command}\"}}[10m])"
        ))
        .into_iter()
        .map(|(labels, v)| (labels["field"].clone(), v))
        .collect();
    let texts = prom.query(&format!(
        "last_over_time(sonde_report_text{{command=\"{command}\"}}[10m])"
    ));
    for (field, value) in &fields {
        match value {
            serde_json::Value::String(text) => assert!(
                texts
                    .iter()
                    .any(|(l, _)| l["field"] == *field && l["value"] == *text),
                "{command} {field}: {texts:?}"
            ),
            serde_json::Value::Bool(b) => assert_eq!(kept[field], f64::from(u8::from(*b))),
            number => assert_eq!(
                kept.get(field).copied(),
                number.as_f64(),
                "{command} {field}"
            ),
        }
    }
}

/// The page sonde serves now, fetched inside the lab's namespace (None if nothing answers).
fn scrape(ns: &str) -> Option<String> {
    let script = format!(
        "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://{METRICS}/metrics', timeout=5).read().decode())"
    );
    let out = run(in_ns(ns, &["python3", "-c", &script]));
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

/// `promtool check metrics` on a page: the format and the naming rules.
fn promtool_checks(ns: &str, page: &str) {
    use std::io::Write;
    let mut check = in_ns(ns, &["promtool", "check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{page}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
}

/// Runs `sonde COMMAND --lab L -q ARGS --metrics … --metrics-linger 4 --summary-json FILE`;
/// once the page holds the report, checks it with promtool and against the summary; returns
/// the summary when sonde has ended.
fn watched_run(lab: &Lab, command: &str, args: &[&str]) -> serde_json::Value {
    let ns = scanner_ns(lab);
    let summary_path = lab.file(&format!("{command}.json"));
    let mut child = Command::new(SONDE)
        .args([command, "--lab", &lab.name, "-q"])
        .args(args)
        .args(["--summary-json", &summary_path])
        .args(["--metrics", METRICS, "--metrics-linger", "4"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let page = loop {
        assert!(Instant::now() < deadline, "{command} did not end");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{command} ended before its report was scraped: {status}");
        }
        std::thread::sleep(Duration::from_millis(200));
        if std::fs::metadata(&summary_path).is_ok_and(|m| m.len() > 0) {
            // Nothing answering yet is seen again at the next turn (or ends the wait there).
            if let Some(page) = scrape(&ns).filter(|p| p.contains("sonde_report{")) {
                break page;
            }
        }
    };
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary_path).unwrap()).unwrap();
    promtool_checks(&ns, &page);
    let samples = parse_page(&page);
    page_matches_summary(&samples, &summary, command);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{command}: {}", stderr(&out));
    let live = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name && s.labels.get("cause").is_none_or(|c| c == "receiver"))
            .unwrap_or_else(|| panic!("{name} in {page}"))
            .value
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(live("sonde_running"), 0.0, "the page after the end");
    assert_eq!(live("sonde_done_ratio"), 1.0);
    if let Some(drops) = summary.get("drops") {
        assert_eq!(live("sonde_drops_total"), drops.as_f64().unwrap());
    }
    summary
}

#[test]
fn prometheus_scrapes_a_scan_a_grab_a_blast_and_a_dns_run_and_keeps_their_summaries() {
    if !can_run_labs() {
        return;
    }
    for tool in ["prometheus", "promtool"] {
        assert!(
            Command::new(tool).arg("--version").output().is_ok(),
            "{tool} is missing: run scripts/setup"
        );
    }
    // The tree's XDP answerer alone (no NSD, no unbound) answers the dns run.
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "0.5",
        "--http",
        "--dns-tree",
        "2",
        "--dns-hosts",
        "1",
        "--dns-answerer",
        "xdp",
        "--dns-servers",
        "none",
    ]);
    let prom = Prometheus::start(&lab);

    // About 2.5 s of sending and 1 s of cooldown: Prometheus sees it running.
    let scan_out = lab.file("scan.csv");
    let scan = watched_run(
        &lab,
        "scan",
        &[
            "--no-default-blocklist",
            "198.18.0.0/24",
            "-p",
            "80",
            "-r",
            "100",
            "--cooldown",
            "1",
            "-o",
            &scan_out,
        ],
    );
    assert!(scan["hits"].as_u64().unwrap() > 0, "{scan}");
    // The grab: every target, a silent one given up 1 s after its SYN.
    let grab_out = lab.file("grab.ndjson");
    let grab = watched_run(
        &lab,
        "grab",
        &[
            "--no-default-blocklist",
            "198.18.0.0/24",
            "-p",
            "80",
            "-r",
            "100",
            "--syn-retries",
            "0",
            "-o",
            &grab_out,
        ],
    );
    assert!(grab["success"].as_u64().unwrap() > 0, "{grab}");
    // blast keeps a status of its own (not the engine's status line): 300 frames at 100/s.
    let blast = watched_run(&lab, "blast", &["--count", "300", "--rate", "100"]);
    assert_eq!(blast["packets"], 300);
    // 200 lookups at 100 queries/s through the answerer: 2 s of sending.
    let names = lab.file("names.txt");
    let lines = [
        "www.d0.test,A",
        "mail.d1.example,A",
        "none.d0.test,A",
        "www.d1.example,AAAA",
    ];
    std::fs::write(&names, lines.repeat(50).join("\n") + "\n").unwrap();
    let dns_out = lab.file("dns.ndjson");
    let dns = watched_run(
        &lab,
        "dns",
        &[
            "--resolver",
            "198.19.54.1",
            "-I",
            &names,
            "-r",
            "100",
            "-o",
            &dns_out,
        ],
    );
    assert_eq!(dns["rows"], 200, "{dns}");
    assert_eq!(dns["by_status"]["NXDOMAIN"], 50, "{dns}");

    let runs = [
        ("scan", &scan, "sent"),
        ("grab", &grab, "syn_sent"),
        ("blast", &blast, "packets"),
        ("dns", &dns, "queries_sent"),
    ];
    for (command, summary, sent) in runs {
        prometheus_kept_summary(&prom, summary, command);
        let labels = format!("command=\"{command}\"");
        assert_eq!(
            prom.value(&format!("max_over_time(sonde_running{{{labels}}}[10m])")),
            1.0,
            "{command}: scraped while it ran"
        );
        assert_eq!(
            prom.value(&format!(
                "last_over_time(sonde_sent_total{{{labels}}}[10m])"
            )),
            summary[sent].as_f64().unwrap(),
            "{command}: the last count sent is the summary's"
        );
        assert_eq!(
            prom.value(&format!(
                "last_over_time(sonde_target_rate{{{labels}}}[10m])"
            )),
            100.0
        );
    }
    let hits = prom.value("last_over_time(sonde_hits_total{command=\"scan\"}[10m])");
    assert_eq!(hits, scan["hits"].as_f64().unwrap());
    let success = prom
        .value("last_over_time(sonde_connections_total{command=\"grab\",status=\"success\"}[10m])");
    assert_eq!(success, grab["success"].as_f64().unwrap());
    let nxdomain = prom.value(
        "last_over_time(sonde_dns_rows_by_status_total{command=\"dns\",status=\"NXDOMAIN\"}[10m])",
    );
    assert_eq!(nxdomain, 50.0);
    drop(prom);
}

/// A command in the lab's namespace, killed when dropped (a client that holds sonde's page).
struct Held(Child);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A client in `ns` that connects to `addr` and sends its request one byte every 1.5 s (or,
/// `idle`, nothing at all), for a minute.
fn slow_client(ns: &str, addr: &str, idle: bool) -> Held {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let script = format!(
        "import socket,time\n\
         s=socket.create_connection(('{host}',{port}))\n\
         for b in b'GET /metrics HTTP/1.1\\r\\nHost: {addr}\\r\\n\\r\\n':\n\
         \x20   time.sleep(1.5)\n\
         \x20   {send}\n\
         time.sleep(60)\n",
        send = if idle { "pass" } else { "s.send(bytes([b]))" }
    );
    Held(
        in_ns(ns, &["python3", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The status of `GET /metrics` at `addr` with `Host: host` (none: no Host line), fetched in
/// `ns`; None when nothing answered within 1 s.
fn status_for_host(ns: &str, addr: &str, host: Option<&str>) -> Option<u16> {
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let header = match host {
        Some(h) => format!("c.putheader('Host','{h}')"),
        None => String::new(),
    };
    let script = format!(
        "import http.client\n\
         c=http.client.HTTPConnection('{ip}',{port},timeout=1)\n\
         c.putrequest('GET','/metrics',skip_host=True)\n\
         {header}\n\
         c.endheaders()\n\
         print(c.getresponse().status)\n"
    );
    let out = run(in_ns(ns, &["python3", "-c", &script]));
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Clients that hold a connection (one sending a byte every 1.5 s, one sending nothing) used
/// to take the page from everyone else (5 of 5 scrapes failed), and to hold sonde after its run
/// until they went away. A page is answered only for the bound address or the names given
/// (`--metrics-host`), so a page in a browser cannot read it by DNS rebinding.
#[test]
fn slow_clients_cannot_hold_the_page_and_a_foreign_host_is_refused() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    let ns = scanner_ns(&lab);
    let summary = lab.file("scan.json");
    // About 10 s of sending at 25 pps, then 1 s of cooldown.
    let mut sonde = Held(
        Command::new(SONDE)
            .args(["scan", "--lab", &lab.name, "-q", "--no-default-blocklist"])
            .args(["198.18.0.0/24", "-p", "80", "-r", "25", "--cooldown", "1"])
            .args(["-o", &lab.file("scan.csv"), "--summary-json", &summary])
            .args(["--metrics", METRICS, "--metrics-host", "sonde.lab"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(&ns).is_none() {
        assert!(Instant::now() < deadline, "the page never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _holders = [
        slow_client(&ns, METRICS, false),
        slow_client(&ns, METRICS, false),
        slow_client(&ns, METRICS, true),
    ];
    std::thread::sleep(Duration::from_millis(500));
    let answered = (0..5)
        .filter(|_| {
            std::thread::sleep(Duration::from_millis(300));
            status_for_host(&ns, METRICS, Some(METRICS)) == Some(200)
        })
        .count();
    assert_eq!(
        answered, 5,
        "scrapes answered while slow clients held connections"
    );
    for (host, want) in [
        (Some("127.0.0.1"), 200),
        (Some("sonde.lab:9464"), 200),
        (Some("localhost:9464"), 200),
        (None, 200),
        (Some("rebound.example:9464"), 421),
        (Some("127.0.0.1.rebound.example"), 421),
    ] {
        assert_eq!(
            status_for_host(&ns, METRICS, host),
            Some(want),
            "Host: {host:?}"
        );
    }
    // The run ends while the slow clients still hold their connections: sonde does not wait
    // for them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::metadata(&summary).is_ok_and(|m| m.len() > 0) {
        assert!(Instant::now() < deadline, "the scan did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ended = Instant::now();
    let status = loop {
        if let Some(status) = sonde.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(5),
            "sonde waited on its metrics clients after the run"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}

/// A taken --metrics port used to fail a grab after its output was created: the empty file
/// was left behind, and the run again refused it as existing.
#[test]
fn a_taken_metrics_port_creates_no_output() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28", "--tcp-open", "80"]);
    let ns = scanner_ns(&lab);
    let (_, port) = METRICS.rsplit_once(':').unwrap();
    let _taken = Held(
        in_ns(
            &ns,
            &[
                "python3",
                "-c",
                &format!("import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',{port}))\ns.listen()\ntime.sleep(60)\n"),
            ],
        )
        .spawn()
        .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_for_host(&ns, METRICS, None).is_none()
        && !run(in_ns(&ns, &["ss", "-Htln", &format!("sport = :{port}")]))
            .stdout
            .starts_with(b"LISTEN")
    {
        assert!(Instant::now() < deadline, "the port was not taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = lab.file("grab.ndjson");
    let grab = common::sonde(&[
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "--no-default-blocklist",
        "198.18.0.0/28",
        "-o",
        &out,
        "--metrics",
        METRICS,
    ]);
    assert!(!grab.status.success());
    assert!(stderr(&grab).contains("--metrics"), "{}", stderr(&grab));
    assert!(
        !std::path::Path::new(&out).exists(),
        "grab created {out} first"
    );
}
