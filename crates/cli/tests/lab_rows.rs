//! Scan and grab rows as their users read them, in one small lab (a /26, HTTP on 80 and HTTPS
//! on 443): an output's format follows its name; a grab's `status` is the protocol's outcome
//! (ZGrab2's words) and `tcp_status` the connection's; scan and grab rows join on (saddr,
//! sport), in DuckDB too, where grab's headers and chain are a MAP and a LIST; a scan's rows
//! reach a pipe as they are found, so `scan -o - | grab -I -` works, and a reader that goes away
//! ends the scan with a true line; the status line's total is exact. Needs root; the lab is
//! removed by its guard, also on failure.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, stderr, Lab, SONDE};

const POPULATION: &str = "198.18.0.0/26";

fn lab() -> Lab {
    Lab::up(&[
        "--population",
        POPULATION,
        "--responsive",
        "0.5",
        "--http",
        "--tcp-open",
        "80,443",
    ])
}

/// The live (synack) addresses of `port`, from the truth.
fn live(lab: &Lab, port: &str) -> HashSet<String> {
    lab.truth(&["--ports", "80,443"])
        .into_iter()
        .filter(|r| r[1] == port && r[2] == "synack")
        .map(|r| r[0].clone())
        .collect()
}

/// `sonde ARGS` in the lab's scratch folder (where a checkpoint would land), checked.
fn run(lab: &Lab, args: &[&str]) -> std::process::Output {
    let out = Command::new(SONDE)
        .args(args)
        .current_dir(&lab.dir)
        .output()
        .expect("running sonde");
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    out
}

fn ndjson(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {e}: {l}")))
        .collect()
}

/// The csv file's header and rows, each a map from column to cell.
fn csv_rows(path: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader.headers().unwrap().clone();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            header
                .iter()
                .zip(r.iter())
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

/// The Python that has DuckDB (as lab_shards.rs finds it).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SONDE_PYTHON") {
        return p.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3")
}

/// Runs `sql` in DuckDB in `dir`; its rows, one line each, cells joined by `|`.
fn duckdb(dir: &Path, sql: &str) -> Vec<String> {
    let script = "import duckdb, sys\n\
        for row in duckdb.sql(sys.argv[1]).fetchall():\n    print('|'.join(str(c) for c in row))\n";
    let out = Command::new(python())
        .args(["-c", script, sql])
        .current_dir(dir)
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "duckdb: {sql}: {} (run scripts/setup for .venv, or set SONDE_PYTHON)",
        stderr(&out)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn rows_follow_their_names_say_the_protocol_s_outcome_and_join() {
    if !can_run_labs() {
        return;
    }
    let lab = lab();
    let (http, https) = (live(&lab, "80"), live(&lab, "443"));
    assert!(http.len() >= 8 && https.len() >= 8, "{http:?} {https:?}");
    let scan = |ports: &str, out: &str| {
        let mut args = vec!["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"];
        args.extend_from_slice(&[POPULATION, "-p", ports, "-r", "0", "-c", "1", "-o", out]);
        run(&lab, &args)
    };
    let grab = |args: &[&str]| {
        let mut all = vec!["grab", "--lab", &lab.name, "-q", "-r", "0"];
        all.extend_from_slice(args);
        run(&lab, &all)
    };

    // 1. The name says the format: a .parquet is parquet (lab score reads it), a .csv grab is
    // csv, and a -O that contradicts the name is refused before anything is sent.
    scan("80,443", "hits.parquet");
    let hits = lab.file("hits.parquet");
    let magic = std::fs::read(&hits).unwrap();
    assert!(
        magic.starts_with(b"PAR1"),
        "scan -o hits.parquet is not parquet"
    );
    let score = lab.score(&["--port", "80", &hits]);
    assert!(score.starts_with("found "), "{score}");
    scan("80", "hits.csv");
    grab(&["-I", "hits.csv", "-M", "http", "-o", "pages.csv"]);
    let pages = csv_rows(&lab.file("pages.csv"));
    assert_eq!(pages.len(), http.len(), "one csv row per live http host");
    let refused = Command::new(SONDE)
        .args([
            "scan",
            "--lab",
            &lab.name,
            POPULATION,
            "-O",
            "csv",
            "-o",
            "x.parquet",
        ])
        .current_dir(&lab.dir)
        .output()
        .unwrap();
    let why = stderr(&refused);
    assert!(!refused.status.success() && why.contains("-O csv"), "{why}");
    assert_eq!(why.trim().lines().count(), 1, "{why}");
    assert!(!Path::new(&lab.file("x.parquet")).exists());

    // 2. Scan and grab rows name the target's port sport: they join on (saddr, sport).
    let scanned: HashSet<(String, String)> = csv_rows(&lab.file("hits.csv"))
        .into_iter()
        .filter(|r| r["sport"] == "80")
        .map(|r| (r["saddr"].clone(), r["sport"].clone()))
        .collect();
    let grabbed: HashSet<(String, String)> = pages
        .iter()
        .map(|r| (r["saddr"].clone(), r["sport"].clone()))
        .collect();
    assert_eq!(
        grabbed, scanned,
        "grab rows join scan rows on (saddr, sport)"
    );
    assert!(pages
        .iter()
        .all(|r| r["dport"] != "80" && r["status"] == "success"));

    // 3. status is the protocol's outcome, tcp_status the connection's: TLS to a web server
    // and plain HTTP to an HTTPS port both connected, and neither spoke its protocol.
    let both: Vec<String> = http.intersection(&https).cloned().collect();
    assert!(!both.is_empty());
    let mut args: Vec<&str> = both.iter().map(String::as_str).collect();
    args.extend_from_slice(&["-p", "80", "-M", "tls", "-o", "tls-on-80.ndjson"]);
    grab(&args);
    let mut args: Vec<&str> = both.iter().map(String::as_str).collect();
    args.extend_from_slice(&["-p", "443", "-M", "http", "-o", "http-on-443.ndjson"]);
    grab(&args);
    for file in ["tls-on-80.ndjson", "http-on-443.ndjson"] {
        let rows = ndjson(&lab.file(file));
        assert_eq!(rows.len(), both.len(), "{file}");
        for r in &rows {
            assert_eq!(r["tcp_status"], "success", "{file}: {r}");
            assert_eq!(r["status"], "protocol-error", "{file}: {r}");
        }
    }

    // 4. In DuckDB: grab's parquet keeps the run's metadata, http_status is a USMALLINT, the
    // headers a MAP and the chain a LIST of structs, and the rows join the scan's.
    scan("443", "hits443.csv");
    grab(&["-I", "hits443.csv", "-M", "https", "-o", "https.parquet"]);
    let kv = duckdb(
        &lab.dir,
        "SELECT decode(value) FROM parquet_kv_metadata('https.parquet') \
         WHERE decode(key) = 'sonde.command_line'",
    );
    assert!(kv.len() == 1 && kv[0].contains("grab"), "{kv:?}");
    let types = duckdb(
        &lab.dir,
        "SELECT typeof(http_status), typeof(http_headers), typeof(tls_chain) \
         FROM 'https.parquet' LIMIT 1",
    );
    assert_eq!(types.len(), 1);
    let types: Vec<&str> = types[0].split('|').collect();
    assert_eq!(types[0], "USMALLINT", "{types:?}");
    assert!(types[1].starts_with("MAP(VARCHAR, VARCHAR)"), "{types:?}");
    assert!(
        types[2].starts_with("STRUCT(") && types[2].ends_with("[]"),
        "{types:?}"
    );
    let joined = duckdb(
        &lab.dir,
        "SELECT count(DISTINCT saddr), count(DISTINCT g.tls_chain[1].sha256), \
                count(DISTINCT saddr) FILTER (WHERE g.http_headers['server'] LIKE 'nginx%') \
         FROM 'hits.parquet' s JOIN 'https.parquet' g USING (saddr, sport) \
         WHERE g.status = 'success'",
    );
    let counts: Vec<usize> = joined[0].split('|').map(|c| c.parse().unwrap()).collect();
    assert_eq!(counts, [https.len(), 1, https.len()], "{joined:?}");
    // ndjson nests them as JSON, not as strings of JSON.
    grab(&["-I", "hits443.csv", "-M", "https", "-o", "https.ndjson"]);
    for r in ndjson(&lab.file("https.ndjson")) {
        assert!(r["http_headers"].is_object(), "{r}");
        assert!(r["tls_chain"].is_array(), "{r}");
        assert!(r["http_status"].is_u64(), "{r}");
    }
}

/// The lines a child writes to its stdout, each with the time it arrived.
fn timed_lines(child: &mut std::process::Child) -> std::thread::JoinHandle<Vec<(Instant, String)>> {
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map(|l| (Instant::now(), l.unwrap()))
            .collect()
    })
}

#[test]
fn a_scan_pipes_its_rows_as_found_into_a_grab_and_a_reader_that_leaves_ends_it_truly() {
    if !can_run_labs() {
        return;
    }
    let lab = lab();
    let http = live(&lab, "80");
    assert!(http.len() >= 8, "{http:?}");
    let scan_args = |cooldown: &'static str| {
        let mut args = vec!["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"];
        args.extend_from_slice(&[POPULATION, "-p", "80", "-r", "0", "-c", cooldown, "-o", "-"]);
        args
    };

    // 1. The rows reach the pipe as they are found: long before the cooldown ends.
    let mut child = Command::new(SONDE)
        .args(scan_args("3"))
        .current_dir(&lab.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = timed_lines(&mut child);
    let out = child.wait_with_output().unwrap();
    let ended = Instant::now();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = lines.join().unwrap();
    let found: HashSet<String> = lines
        .iter()
        .skip(1)
        .map(|(_, l)| l.split(',').next().unwrap().to_string())
        .collect();
    assert_eq!(found, http, "a row per live host");
    let first_row = lines[1].0;
    let ahead = ended.duration_since(first_row);
    assert!(
        ahead > Duration::from_millis(1500),
        "the first row came {ahead:?} before the end of a scan with 3 s of cooldown"
    );

    // 2. scan -o - | grab -I -: the grab reads the scan's rows from its standard input.
    let pipeline = format!(
        "{SONDE} {} | {SONDE} grab --lab {} -q -r 0 -I - -M http -o piped.ndjson",
        scan_args("1").join(" "),
        lab.name
    );
    let out = Command::new("sh")
        .args(["-ec", &pipeline])
        .current_dir(&lab.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{pipeline}: {}", stderr(&out));
    let rows = ndjson(&lab.file("piped.ndjson"));
    let grabbed: HashSet<String> = rows
        .iter()
        .map(|r| r["saddr"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        grabbed, http,
        "the piped grab reached every host the scan found"
    );
    assert!(rows
        .iter()
        .all(|r| r["status"] == "success" && r["sport"] == 80));

    // 3. A reader that goes away after the header: the scan ends with a line that says so,
    // and names no checkpoint it did not write.
    let mut child = Command::new(SONDE)
        .args(scan_args("1"))
        .current_dir(&lab.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut header = [0u8; 5];
    stdout.read_exact(&mut header).unwrap();
    assert_eq!(&header, b"saddr");
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let why = stderr(&out);
    assert!(!out.status.success(), "{why}");
    assert!(why.contains("the output's reader went away"), "{why}");
    let checkpoint = lab.dir.join("sonde-scan.checkpoint.json");
    assert_eq!(
        why.contains("checkpoint"),
        checkpoint.exists(),
        "the line names a checkpoint exactly when one was written: {why}"
    );
    assert!(
        why.contains("all 64 probes had been sent") || why.contains("sending stopped after"),
        "{why}"
    );
}

/// The status line's total is the number of targets, not the cycle's positions: 7 targets walk
/// a cycle of 10, and the last line said "done 7 of 10".
#[test]
fn the_last_status_line_counts_every_target_and_no_more() {
    if !can_run_labs() {
        return;
    }
    let lab = lab();
    let list: Vec<String> = (1..=7).map(|i| format!("198.18.0.{i}")).collect();
    std::fs::write(lab.file("seven.txt"), list.join("\n") + "\n").unwrap();
    let args = [
        "grab",
        "--lab",
        &lab.name,
        "-I",
        "seven.txt",
        "-p",
        "80",
        "-r",
        "0",
    ];
    let out = run(
        &lab,
        &[&args[..], &["-M", "http", "-o", "/dev/null"]].concat(),
    );
    let text = stderr(&out);
    let last = text
        .lines()
        .rfind(|l| l.contains("; done ") && l.contains(" connections;"))
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let of: u64 = last
        .split(" of ")
        .nth(1)
        .and_then(|after| after.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{last}"));
    assert_eq!(of, 7, "{last}");
    assert!(last.contains("done 7 of 7"), "{last}");
}
