//! What sonde leaves on the host and in the operator's files when a run is cut short or goes
//! wrong, and what another user of the host can do to it: a resumed run goes on exactly once,
//! an interrupted one exits 130, a full disk or a failed status file leaves finished outputs
//! and a checkpoint from which a resume misses nothing, a FIFO at `-o` neither hangs the run
//! nor hands rows to another user, and a link planted by `nobody` where grab used to write its
//! round lists is never written through. Every packet stays in each test's own lab; the small
//! disks are tmpfs mounts on the test's scratch folder, unmounted on drop.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{can_run_labs, sonde, stderr, Lab, SmallDisk, SONDE};
use nix::sys::signal::Signal;

/// `sonde ARGS` running in the background, its stderr kept.
fn spawn(args: &[&str]) -> Child {
    Command::new(SONDE)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sonde")
}

fn signal(child: &Child, sig: Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// Waits for `child` to end within `limit` (killed, and the test failed, if it does not).
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("sonde did not end within {limit:?}: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting output")
}

fn json(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The addresses of a csv output's whole rows (a row cut short by a full disk is not one).
fn csv_addresses(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.last().is_some_and(|l| !l.ends_with('\n')) {
        lines.pop();
    }
    let mut lines = lines.into_iter().map(str::trim_end);
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let column = header.split(',').position(|c| c == "saddr").unwrap();
    lines
        .filter_map(|l| l.split(',').nth(column).map(str::to_string))
        .filter(|a| a.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// The `saddr` of every row of an ndjson output (whole lines only).
fn ndjson_addresses(path: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|row| row["saddr"].as_str().map(str::to_string))
        .collect()
}

/// The `saddr` of every row of a parquet file; panics if it is not readable (a writer that
/// was dropped unfinished leaves no footer).
fn parquet_addresses(path: &str) -> Vec<String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(path).unwrap();
    let reader = SerializedFileReader::new(file)
        .unwrap_or_else(|e| panic!("{path} is not a readable parquet file: {e}"));
    let mut out = Vec::new();
    for row in reader.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        for (name, field) in row.get_column_iter() {
            if name == "saddr" {
                out.push(field.to_string().trim_matches('"').to_string());
            }
        }
    }
    out
}

/// The addresses the lab's truth says answer on port 80.
fn live_on_80(lab: &Lab) -> BTreeSet<String> {
    lab.truth(&["--ports", "80"])
        .into_iter()
        .filter(|r| r[2] == "synack")
        .map(|r| r[0].clone())
        .collect()
}

/// The last status line that shows a percentage, on `err`.
fn last_percent(err: &str) -> f64 {
    let line = err
        .lines()
        .rev()
        .find(|l| l.contains("% ("))
        .unwrap_or_else(|| panic!("no status line in {err}"));
    let before = line.split("% (").next().unwrap();
    before.split_whitespace().last().unwrap().parse().unwrap()
}

fn assert_one_line(out: &Output) -> String {
    let err = stderr(out);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    errors[0].to_string()
}

/// The run of a tool over a /24 at 40 new targets a second, interrupted with Ctrl-C at about
/// 40 %: it exits 130, its status line says how far it got, its checkpoint is not complete; a
/// resume finishes it (exit 0) and marks the checkpoint complete; the same resume again is
/// refused in one line, sending nothing. Between them the two runs found every live address
/// once.
fn interrupt_resume_and_resume_again(tool: &str, extra: &[&str]) {
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    // The file's name picks its format: rows of a scan in CSV, a grab's in NDJSON.
    let ext = if tool == "scan" { "csv" } else { "ndjson" };
    let (first, rest, again) = (
        lab.file(&format!("first.{ext}")),
        lab.file(&format!("rest.{ext}")),
        lab.file(&format!("again.{ext}")),
    );
    let checkpoint = format!("{first}.checkpoint.json");
    let base = [
        tool,
        "--lab",
        &lab.name,
        "--no-default-blocklist",
        "198.18.0.0/24",
        "-p",
        "80",
        "-r",
        "40",
    ];
    let run = |more: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(more.iter().map(|s| s.to_string()));
        args
    };
    let args = run(&["-o", &first]);
    let child = spawn(&args.iter().map(String::as_str).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(2600));
    signal(&child, Signal::SIGINT);
    let out = wait_bounded(child, Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{tool} interrupted: {err}");
    let shown = last_percent(&err);
    assert!(
        shown < 90.0,
        "{tool}: the last line says {shown} % done: {err}"
    );
    let ck = json(&checkpoint);
    assert_eq!(ck["complete"], false, "{ck}");

    let args = run(&["--resume", &checkpoint, "-o", &rest, "-q"]);
    let out = sonde(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{tool} resumed: {}", stderr(&out));
    let ck = json(&checkpoint);
    assert_eq!(ck["complete"], true, "{ck}");

    let args = run(&["--resume", &checkpoint, "-o", &again, "-q"]);
    let out = sonde(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1), "{tool} resumed again");
    let line = assert_one_line(&out);
    assert!(line.contains("complete"), "{line}");
    assert!(!Path::new(&again).exists(), "{again} was made");

    let (a, b) = match tool {
        "scan" => (csv_addresses(&first), csv_addresses(&rest)),
        _ => {
            let success = |path: &str| -> Vec<String> {
                let text = std::fs::read_to_string(path).unwrap();
                text.lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    // tcp_status: the connection opened (status is what the banner read found)
                    .filter(|r| r["tcp_status"] == "success")
                    .map(|r| r["saddr"].as_str().unwrap().to_string())
                    .collect()
            };
            (success(&first), success(&rest))
        }
    };
    let both: BTreeSet<String> = a.iter().chain(&b).cloned().collect();
    assert_eq!(
        both.len(),
        a.len() + b.len(),
        "{tool}: an address found twice"
    );
    assert_eq!(both, live_on_80(&lab), "{tool}: found between the two runs");
}

#[test]
fn an_interrupted_scan_exits_130_and_resumes_exactly_once() {
    if !can_run_labs() {
        return;
    }
    interrupt_resume_and_resume_again("scan", &["--cooldown", "1"]);
}

#[test]
fn an_interrupted_grab_exits_130_and_resumes_exactly_once() {
    if !can_run_labs() {
        return;
    }
    interrupt_resume_and_resume_again("grab", &["--syn-retries", "0"]);
}

/// A disk that fills under the rows: the scan fails in one line, and its checkpoint counts
/// only what the file holds, so a resume into another file misses no live address.
#[test]
fn a_full_disk_under_a_scan_loses_no_target_to_the_resume() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "1",
        "--tcp-open",
        "80",
    ]);
    // About 40 bytes a row: room for some 1,500 of the 4,096.
    let disk = SmallDisk::mount(&lab, 64);
    let (out, checkpoint, rest) = (
        disk.file("rows.csv"),
        lab.file("ck.json"),
        lab.file("rest.csv"),
    );
    let scan = lab.scan(&[
        "198.18.0.0/20",
        "-p",
        "80",
        "-r",
        "2000",
        "--cooldown",
        "1",
        "-o",
        &out,
        "--checkpoint",
        &checkpoint,
    ]);
    assert_eq!(scan.status.code(), Some(1), "{}", stderr(&scan));
    assert_one_line(&scan);
    let ck = json(&checkpoint);
    assert_eq!(ck["complete"], false, "{ck}");
    let resumed = lab.scan(&[
        "198.18.0.0/20",
        "-p",
        "80",
        "--resume",
        &checkpoint,
        "-o",
        &rest,
        "--cooldown",
        "1",
    ]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let found: BTreeSet<String> = csv_addresses(&out)
        .into_iter()
        .chain(csv_addresses(&rest))
        .collect();
    let live = live_on_80(&lab);
    let missed = live.difference(&found).count();
    assert_eq!(missed, 0, "{missed} of {} live addresses lost", live.len());
}

/// A status file on a full disk stops a grab and a scan at once: each still finishes its
/// parquet output (its footer written) and writes a checkpoint, from which a resume finds
/// every live address the first run did not.
#[test]
fn a_failed_status_file_finishes_the_output_and_the_checkpoint() {
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
        "--http",
    ]);
    let disk = SmallDisk::mount(&lab, 64);
    disk.fill();
    for tool in ["scan", "grab"] {
        let (out, checkpoint, rest) = (
            lab.file(&format!("{tool}.parquet")),
            lab.file(&format!("{tool}.ck.json")),
            lab.file(&format!("{tool}-rest.ndjson")),
        );
        let base = [
            tool,
            "--lab",
            &lab.name,
            "-q",
            "--no-default-blocklist",
            "198.18.0.0/24",
            "-p",
            "80",
            "-r",
            "20",
        ];
        let tail: &[&str] = match tool {
            "scan" => &["--cooldown", "1"],
            _ => &["--syn-retries", "0"],
        };
        let mut first = base.to_vec();
        first.extend_from_slice(tail);
        let status = disk.file(&format!("{tool}-status.csv"));
        first.extend_from_slice(&[
            "-O",
            "parquet",
            "-o",
            &out,
            "--checkpoint",
            &checkpoint,
            "--status-file",
            &status,
        ]);
        let started = Instant::now();
        let failed = sonde(&first);
        assert_eq!(failed.status.code(), Some(1), "{tool}: {}", stderr(&failed));
        // 13 s of sending at 20 a second: it stopped long before.
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{tool} went on after its status file failed"
        );
        let line = assert_one_line(&failed);
        assert!(line.contains("status"), "{line}");
        let mut found = parquet_addresses(&out);
        let ck = json(&checkpoint);
        assert_eq!(ck["complete"], false, "{tool}: {ck}");
        let mut again = base.to_vec();
        again.extend_from_slice(tail);
        again.extend_from_slice(&["--resume", &checkpoint, "-O", "ndjson", "-o", &rest]);
        let resumed = sonde(&again);
        assert!(resumed.status.success(), "{tool}: {}", stderr(&resumed));
        found.extend(ndjson_addresses(&rest));
        let found: BTreeSet<String> = found.into_iter().collect();
        let live = live_on_80(&lab);
        let missed: Vec<&String> = live.difference(&found).collect();
        assert!(
            missed.is_empty(),
            "{tool}: {} live addresses lost",
            missed.len()
        );
    }
}

/// A grab whose output disk fills: every thread stops, the file holds whole rows, and the
/// checkpoint puts back every target whose row was not written, so a resume leaves no target
/// without a row.
#[test]
fn a_full_disk_under_a_grab_leaves_no_target_without_a_row() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/22",
        "--responsive",
        "1",
        "--http",
    ]);
    // About 45 bytes a row: room for some 350 of the 1,024.
    let disk = SmallDisk::mount(&lab, 16);
    let (out, checkpoint, rest) = (
        disk.file("rows.ndjson"),
        lab.file("ck.json"),
        lab.file("rest.ndjson"),
    );
    let base = [
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "--no-default-blocklist",
        "198.18.0.0/22",
        "-p",
        "80",
        "-r",
        "2000",
        "--syn-retries",
        "0",
        "-f",
        "saddr,status",
    ];
    let mut first = base.to_vec();
    first.extend_from_slice(&["-o", &out, "--checkpoint", &checkpoint]);
    let failed = sonde(&first);
    assert_eq!(failed.status.code(), Some(1), "{}", stderr(&failed));
    assert_one_line(&failed);
    let ck = json(&checkpoint);
    assert_eq!(ck["complete"], false, "{ck}");
    let mut again = base.to_vec();
    again.extend_from_slice(&["--resume", &checkpoint, "-o", &rest]);
    let resumed = sonde(&again);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let mut rows: BTreeMap<String, usize> = BTreeMap::new();
    for addr in ndjson_addresses(&out)
        .into_iter()
        .chain(ndjson_addresses(&rest))
    {
        *rows.entry(addr).or_default() += 1;
    }
    assert_eq!(rows.len(), 1024, "targets with a row");
}

/// A FIFO at -o that nothing reads used to hang the scan before its first probe; one made
/// by another user (`nobody`, reading it) got every row. Now the first is refused within
/// seconds and the second without --force, each in one line.
#[test]
fn a_fifo_at_o_neither_hangs_the_scan_nor_feeds_another_user() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28", "--tcp-open", "80"]);
    let fifo = lab.file("rows.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let scan = spawn(&[
        "scan",
        "--lab",
        &lab.name,
        "-q",
        "--no-default-blocklist",
        "198.18.0.0/28",
        "-p",
        "80",
        "-o",
        &fifo,
    ]);
    let out = wait_bounded(scan, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    let line = assert_one_line(&out);
    assert!(line.contains("nothing reads"), "{line}");

    // nobody's FIFO in a folder nobody may write to, read by nobody.
    std::fs::set_permissions(
        &lab.dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let theirs = lab.file("theirs.fifo");
    let made = Command::new("runuser")
        .args(["-u", "nobody", "--", "mkfifo", &theirs])
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) {
        // The scratch folder is root's: make it there, and give it to nobody.
        assert!(Command::new("mkfifo")
            .arg(&theirs)
            .status()
            .unwrap()
            .success());
        assert!(Command::new("chown")
            .args(["nobody", &theirs])
            .status()
            .unwrap()
            .success());
    }
    // cat runs as nobody itself (no runuser in between, whose kill would leave cat blocked on
    // the FIFO), on /dev/null, so even if it outlived the test it would hold no one's output
    // open; the guard ends it also when an assertion fails.
    let reader = Command::new("cat")
        .arg(&theirs)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _reader = KillOnDrop(reader);
    let scan = lab.scan(&["198.18.0.0/28", "-p", "80", "-o", &theirs]);
    assert_eq!(scan.status.code(), Some(1));
    let line = assert_one_line(&scan);
    assert!(
        line.contains("--force") && line.contains("another user"),
        "{line}"
    );
}

/// Debian's `nobody` (and nogroup).
const NOBODY: u32 = 65534;

/// A helper process ended (and reaped) when the test ends, passed or failed.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// grab wrote each round's targets (several names per target) to
/// /tmp/sonde-grab-names-PID-round-N.txt with File::create, through any link there: `nobody`
/// planted one at the next round's name, pointing at a root-only file, and root's grab
/// overwrote it. The lists stay in memory now.
#[test]
fn a_link_planted_by_nobody_is_never_written_through() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/28", "--http"]);
    let victim = lab.file("root-only");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let names = lab.file("names.txt");
    let lines: String = (1..=8)
        .flat_map(|i| {
            [
                format!("198.18.0.{i}:80,a{i}.example\n"),
                format!("198.18.0.{i}:80,b{i}.example\n"),
            ]
        })
        .collect();
    std::fs::write(&names, lines).unwrap();
    let out = lab.file("rows.ndjson");
    let grab = spawn(&[
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "--no-default-blocklist",
        "-I",
        &names,
        "-r",
        "4",
        "-o",
        &out,
    ]);
    let planted = std::env::temp_dir().join(format!("sonde-grab-names-{}-round-1.txt", grab.id()));
    let planted = planted.to_str().unwrap().to_string();
    let ln = Command::new("runuser")
        .args(["-u", "nobody", "--", "ln", "-s", &victim, &planted])
        .status()
        .unwrap();
    let done = wait_bounded(grab, Duration::from_secs(60));
    let _ = std::fs::remove_file(&planted);
    assert!(ln.success(), "nobody could not plant the link");
    assert!(done.status.success(), "{}", stderr(&done));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let rows = ndjson_addresses(&out);
    assert_eq!(rows.len(), 16, "a row per name");
}
