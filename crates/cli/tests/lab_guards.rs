//! Guards that fail closed (issue 17): a hangup (a dropped SSH session) ends a scan, a grab and
//! a capture as Ctrl-C does, with complete output, while `nohup` still keeps a run going;
//! output files never overwrite a file silently and never follow a planted link, but write to
//! /dev/null and stdout; an opt-out list that cannot be read stops the scan; the latency
//! reflector refuses to answer on the host's own interface unasked. Lab tests need root; each
//! lab has a unique name and is removed by its guard, also on failure.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{can_run_labs, sonde, stderr, Lab, SONDE};

/// Starts `sonde ARGS` in the background with its stderr on a pipe (it is not run with -q, so
/// the status line writes there every second), SIGHUP at its default even when the tests run
/// under `nohup` (sonde honours an ignored SIGHUP; `env` execs, so the pid is sonde's).
fn spawn(args: &[&str], cwd: &Path) -> Child {
    Command::new("env")
        .args(["--default-signal=HUP", SONDE])
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sonde")
}

/// A dropped SSH session: the terminal goes away (its reader is gone, so writing to stderr
/// fails from now on) and the process gets SIGHUP. Then waits, bounded, for it to end.
fn hang_up(mut child: Child) -> Output {
    drop(child.stderr.take());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    wait_bounded(child, Duration::from_secs(30))
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sonde did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting output")
}

fn json(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Rows in a parquet file, read from its footer (which a killed writer never wrote).
fn parquet_rows(path: &str) -> i64 {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(path).unwrap();
    let reader = SerializedFileReader::new(file)
        .unwrap_or_else(|e| panic!("{path} is not a readable parquet file: {e}"));
    reader.metadata().file_metadata().num_rows()
}

#[test]
fn a_hangup_ends_a_scan_with_every_row_and_the_parquet_footer() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/16",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    let (out, summary) = (lab.file("hup.parquet"), lab.file("hup.json"));
    let child = spawn(
        &[
            "scan",
            "--lab",
            &lab.name,
            "--no-default-blocklist",
            "198.18.0.0/16",
            "-p",
            "80",
            "-r",
            "5000",
            "-c",
            "2",
            "-O",
            "parquet",
            "-f",
            "saddr",
            "--output-filter",
            "success = 1 && repeat = 0",
            "-o",
            &out,
            "--summary-json",
            &summary,
        ],
        &lab.dir,
    );
    // 13 s of sending at 5,000 pps: the hangup comes well before the end.
    std::thread::sleep(Duration::from_millis(2500));
    let done = hang_up(child);
    assert_eq!(
        done.status.code(),
        Some(130),
        "the scan died: {:?}",
        done.status
    );
    let s = json(&summary);
    assert_eq!(s["interrupted"], true, "{s}");
    assert!(
        s["sent"].as_u64().unwrap() < 65536,
        "the hangup did not stop sending: {s}"
    );
    let hits = s["hits"].as_i64().unwrap();
    assert!(hits > 0, "{s}");
    assert_eq!(parquet_rows(&out), hits, "rows lost: {s}");
    // The checkpoint went next to the output (never into the working folder) and is final.
    let checkpoint = json(&format!("{out}.checkpoint.json"));
    assert_eq!(checkpoint["receiving_done"], true, "{checkpoint}");
    assert_eq!(checkpoint["complete"], false, "{checkpoint}");
    assert!(!lab.dir.join("sonde-scan.checkpoint.json").exists());
}

#[test]
fn a_hangup_ends_a_grab_with_every_row_and_the_parquet_footer() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "1.0",
        "--http",
        "--tcp-open",
        "80",
    ]);
    let (out, summary) = (lab.file("hup.parquet"), lab.file("hup.json"));
    let child = spawn(
        &[
            "grab",
            "--lab",
            &lab.name,
            "198.18.0.0/20",
            "-p",
            "80",
            "-r",
            "500",
            "-O",
            "parquet",
            "-o",
            &out,
            "--summary-json",
            &summary,
        ],
        &lab.dir,
    );
    // 8 s of new connections at 500/s: the hangup comes well before the end.
    std::thread::sleep(Duration::from_millis(2500));
    let done = hang_up(child);
    assert_eq!(
        done.status.code(),
        Some(130),
        "the grab died: {:?}",
        done.status
    );
    let s = json(&summary);
    assert_eq!(s["interrupted"], true, "{s}");
    let rows = s["completed"].as_i64().unwrap() + s["syn_timeouts"].as_i64().unwrap();
    assert!(rows > 0 && rows < 4096, "{s}");
    assert_eq!(parquet_rows(&out), rows, "rows lost: {s}");
    let checkpoint = json(&format!("{out}.checkpoint.json"));
    assert_eq!(checkpoint["receiving_done"], true, "{checkpoint}");
    assert_eq!(checkpoint["complete"], false, "{checkpoint}");
}

#[test]
fn a_hangup_ends_a_capture_with_every_packet_written() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24"]);
    let (out, summary) = (lab.file("hup.pcapng"), lab.file("hup.json"));
    let child = spawn(
        &[
            "capture",
            "--lab",
            &lab.name,
            "-i",
            "nx0",
            "-w",
            &out,
            "--summary-json",
            &summary,
            "udp dst port 53",
        ],
        &lab.dir,
    );
    // Time to open the socket, then about 400 KB: far less than one 4 MiB write, so every
    // packet is still in memory when the hangup comes.
    std::thread::sleep(Duration::from_millis(800));
    let sent = sonde(&[
        "blast",
        "--lab",
        &lab.name,
        "--probe",
        "udp",
        "--backend",
        "ring",
        "--count",
        "2000",
        "--size",
        "200",
        "--rate",
        "20000",
        "--ports",
        "53",
        "-q",
    ]);
    assert!(sent.status.success(), "blast: {}", stderr(&sent));
    std::thread::sleep(Duration::from_millis(300));
    let done = hang_up(child);
    assert!(done.status.success(), "the capture died: {:?}", done.status);
    let captured = json(&summary)["captured"].as_u64().unwrap();
    assert!(captured >= 2000, "captured {captured} of 2000");
    // Read back by libpcap, to the last packet.
    let mut cap = pcap::Capture::from_file(&out).expect("libpcap reads the file");
    let mut read = 0;
    loop {
        match cap.next_packet() {
            Ok(_) => read += 1,
            Err(pcap::Error::NoMorePackets) => break,
            Err(e) => panic!("libpcap stopped reading after {read} packets: {e}"),
        }
    }
    assert_eq!(read, captured);
}

/// `nohup sonde …` asks for the run to outlive the session: the hangup is not a stop.
#[test]
fn under_nohup_a_hangup_does_not_stop_a_scan() {
    if !can_run_labs() || Command::new("nohup").arg("--version").output().is_err() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "0.5",
        "--tcp-open",
        "80",
    ]);
    let summary = lab.file("nohup.json");
    let child = Command::new("nohup")
        .arg(SONDE)
        .args(["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"])
        .args(["198.18.0.0/20", "-p", "80", "-r", "2000", "-c", "1"])
        .args(["-o", &lab.file("nohup.csv"), "--summary-json", &summary])
        .current_dir(&lab.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting nohup sonde");
    // 2 s of sending: the hangup comes in the middle (nohup has exec'd sonde by then).
    std::thread::sleep(Duration::from_millis(800));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let done = wait_bounded(child, Duration::from_secs(30));
    assert!(done.status.success(), "{}", stderr(&done));
    let s = json(&summary);
    assert_eq!(s["interrupted"], false, "{s}");
    assert_eq!(s["sent"], 4096, "{s}");
}

/// A scan in `lab` writing `-o out` (and `extra`), quietly, at once, in the lab's folder (where
/// a checkpoint for rows on stdout or /dev/null would go).
fn scan_to(lab: &Lab, out: &str, extra: &[&str]) -> Output {
    Command::new(SONDE)
        .args(["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"])
        .args(["198.18.0.0/28", "-p", "80", "-r", "0", "-c", "0", "-o", out])
        .args(extra)
        .current_dir(&lab.dir)
        .output()
        .expect("running sonde")
}

#[test]
fn scan_outputs_refuse_links_and_existing_files_and_take_dev_null() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24", "--tcp-open", "80"]);
    // /dev/null is written as it is (it was refused as an existing file), and stays a device.
    for format in ["csv", "ndjson", "parquet"] {
        let out = scan_to(&lab, "/dev/null", &["-O", format]);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
    }
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &null.file_type()
    ));
    // `-o -` is stdout.
    let out = scan_to(&lab, "-", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("saddr"));

    // A link planted where the rows, the summary or the status file go is never written
    // through, not even with --force; its target is unchanged.
    let victim = lab.file("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = lab.file("planted");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fresh = lab.file("fresh.csv");
    let planted: [(&str, Vec<&str>); 3] = [
        (&link, vec![]),
        (&fresh, vec!["--summary-json", &link]),
        (&fresh, vec!["--status-file", &link]),
    ];
    for (out, extra) in planted {
        for force in [false, true] {
            let mut extra = extra.clone();
            if force {
                extra.push("--force");
            }
            let done = scan_to(&lab, out, &extra);
            let err = stderr(&done);
            assert!(!done.status.success(), "{extra:?}: written through a link");
            assert!(err.contains("symbolic link"), "{extra:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                !Path::new(&fresh).exists(),
                "{extra:?}: refused after writing rows"
            );
        }
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");

    // An existing summary is refused before the scan, not after it; --force overwrites it.
    let summary = lab.file("s.json");
    std::fs::write(&summary, "an earlier run\n").unwrap();
    let done = scan_to(&lab, &fresh, &["--summary-json", &summary]);
    let err = stderr(&done);
    assert!(!done.status.success());
    assert!(
        err.contains("--summary-json") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!Path::new(&fresh).exists(), "the scan ran before refusing");
    let done = scan_to(&lab, &fresh, &["--summary-json", &summary, "--force"]);
    assert!(done.status.success(), "{}", stderr(&done));
    assert!(json(&summary)["sent"].as_u64().unwrap() > 0);
    // And the rows file itself, as before.
    let done = scan_to(&lab, &fresh, &[]);
    assert!(!done.status.success());
    assert!(stderr(&done).contains("--append"), "{}", stderr(&done));
}

#[test]
fn another_runs_checkpoint_is_not_overwritten_silently() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24", "--tcp-open", "80"]);
    let out = lab.file("rows.csv");
    let checkpoint = format!("{out}.checkpoint.json");
    std::fs::write(&checkpoint, "an interrupted run's\n").unwrap();
    let done = scan_to(&lab, &out, &[]);
    let err = stderr(&done);
    assert!(!done.status.success(), "ran over another run's checkpoint");
    assert!(err.contains("--resume") && err.contains("--force"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap(),
        "an interrupted run's\n"
    );
    let done = scan_to(&lab, &out, &["--checkpoint", &lab.file("other.json")]);
    assert!(done.status.success(), "{}", stderr(&done));
}

/// A pcap file of one Ethernet frame, for offline captures (no network needed).
fn one_frame_pcap(path: &str) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).unwrap();
    let mut w = PcapWriter::with_header(file, PcapHeader::default()).unwrap();
    let frame = [0u8; 60];
    w.write_packet(&PcapPacket::new(Duration::from_secs(1), 60, &frame))
        .unwrap();
}

#[test]
fn capture_keeps_an_existing_file_without_force_and_never_follows_a_link() {
    let dir = std::env::temp_dir().join(format!("sonde-guards-cap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let input = file("in.pcap");
    one_frame_pcap(&input);
    let earlier = file("earlier.pcapng");
    std::fs::write(&earlier, "an earlier capture").unwrap();
    let capture = |out: &str, extra: &[&str]| {
        let mut args = vec!["capture", "-r", &input, "-w", out];
        args.extend_from_slice(extra);
        sonde(&args)
    };
    // It used to overwrite silently.
    let done = capture(&earlier, &[]);
    let err = stderr(&done);
    assert!(
        !done.status.success(),
        "an existing capture was overwritten"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(std::fs::read(&earlier).unwrap(), b"an earlier capture");
    let done = capture(&earlier, &["--force"]);
    assert!(done.status.success(), "{}", stderr(&done));
    assert_eq!(
        pcap::Capture::from_file(&earlier)
            .unwrap()
            .next_packet()
            .unwrap()
            .header
            .len,
        60
    );
    // A planted link: refused with and without --force, its target unchanged.
    let victim = file("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = file("link.pcapng");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let done = capture(&link, extra);
        let err = stderr(&done);
        assert!(!done.status.success(), "{extra:?}: written through a link");
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let summary = capture(&file("new.pcap"), &["--summary-json", &link]);
        assert!(
            !summary.status.success(),
            "{extra:?}: a summary through a link"
        );
        let _ = std::fs::remove_file(file("new.pcap"));
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // /dev/null and stdout are taken as they are.
    let done = capture("/dev/null", &[]);
    assert!(done.status.success(), "{}", stderr(&done));
    let done = capture("-", &[]);
    assert!(done.status.success(), "{}", stderr(&done));
    assert_eq!(
        &done.stdout[..4],
        &[0x0a, 0x0d, 0x0d, 0x0a],
        "pcapng on stdout"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_blocklist_that_cannot_be_read_stops_the_scan_in_one_line() {
    let dir = std::env::temp_dir().join(format!("sonde-guards-bl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dangling = dir.join("optout.conf");
    std::os::unix::fs::symlink(dir.join("moved-away.conf"), &dangling).unwrap();
    let out = sonde(&[
        "scan",
        "--dryrun",
        "--no-default-blocklist",
        "198.18.0.0/30",
        "-b",
        dangling.to_str().unwrap(),
        "-S",
        "198.19.255.1",
        "-G",
        "02:00:00:00:00:02",
        "-i",
        "lo",
    ]);
    let err = stderr(&out);
    assert!(!out.status.success(), "planned without the blocklist");
    assert!(
        err.starts_with("sonde: error: cannot read blocklist (-b)") && err.contains("moved-away"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_reflector_refuses_the_hosts_own_namespace_without_lab_or_addr() {
    // Refused before any socket is opened: nothing is answered from here.
    let out = sonde(&["latency", "reflect", "--duration", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "it answered on the host's interface");
    assert!(err.contains("--lab") && err.contains("--addr"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    if !can_run_labs() {
        return;
    }
    // In a lab's namespace, without --lab, it runs as asked.
    let lab = Lab::up(&["--population", "198.18.0.0/28"]);
    let out = Command::new("ip")
        .args(["netns", "exec", &format!("sonde-{}-net", lab.name), SONDE])
        .args(["latency", "reflect", "--backend", "kernel", "-p", "7977"])
        .args(["--duration", "0.5", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}
