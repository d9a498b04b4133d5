//! `sonde capture -r` keeps exactly the packets tcpdump keeps.
//!
//! A deterministic corpus (tests/capture_corpus/) is written to a pcap file once; then for
//! every expression of tests/capture_expressions.txt and each backend's filter path
//! (`ring`: libpcap's classic BPF; `xdp`: sonde's eBPF translation run by the kernel), the
//! packets sonde writes must equal the packets `tcpdump -r corpus -w out EXPRESSION` writes:
//! same count, bytes, original lengths and timestamps. Also checks the one-line errors for an
//! expression that does not compile, a file cut mid-packet and a file that is not a capture.
//!
//! File-based only: nothing is sent. Skipped (with a reason) when tcpdump is not installed.

mod capture_corpus;

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pcap_file::pcap::PcapReader;
use pcap_file::TsResolution;

const SONDE: &str = env!("CARGO_BIN_EXE_sonde");
const BACKENDS: [&str; 2] = ["ring", "xdp"];

/// One packet as read back from a pcap file, its stamp in nanoseconds.
#[derive(PartialEq, Eq)]
struct Packet {
    ts_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

/// A file's packets.
struct Capture {
    packets: Vec<Packet>,
}

fn read_capture(path: &Path) -> Result<Capture, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = PcapReader::new(BufReader::new(file))
        .map_err(|e| format!("{}: not a pcap file: {e}", path.display()))?;
    let resolution_ns = match reader.header().ts_resolution {
        TsResolution::MicroSecond => 1_000,
        TsResolution::NanoSecond => 1,
    };
    let mut packets = Vec::new();
    while let Some(raw) = reader.next_raw_packet() {
        let raw = raw.map_err(|e| format!("{}: packet {}: {e}", path.display(), packets.len()))?;
        let ts_ns = u64::from(raw.ts_sec) * 1_000_000_000 + u64::from(raw.ts_frac) * resolution_ns;
        packets.push(Packet {
            ts_ns,
            orig_len: raw.orig_len,
            data: raw.data.into_owned(),
        });
    }
    Ok(Capture { packets })
}

/// Where the two outputs first differ, or None when they hold the same packets. The corpus
/// has microsecond stamps, which both tcpdump's microsecond file and sonde's nanosecond file
/// carry exactly, so stamps are compared to the nanosecond.
fn first_difference(expected: &Capture, got: &Capture) -> Option<String> {
    for (i, (e, g)) in expected.packets.iter().zip(&got.packets).enumerate() {
        if e.ts_ns != g.ts_ns {
            return Some(format!(
                "packet {i}: stamp {} ns, tcpdump {} ns",
                g.ts_ns, e.ts_ns
            ));
        }
        if e.orig_len != g.orig_len {
            return Some(format!(
                "packet {i}: original length {}, tcpdump {}",
                g.orig_len, e.orig_len
            ));
        }
        if e.data != g.data {
            return Some(format!(
                "packet {i}: {} bytes captured, tcpdump {} (orig len {}, stamp {} ns){}",
                g.data.len(),
                e.data.len(),
                e.orig_len,
                e.ts_ns,
                if g.data.len() == e.data.len() {
                    ", contents differ"
                } else {
                    ""
                }
            ));
        }
    }
    if expected.packets.len() != got.packets.len() {
        let n = expected.packets.len().min(got.packets.len());
        let extra = if got.packets.len() > n {
            "sonde"
        } else {
            "tcpdump"
        };
        return Some(format!(
            "{} packets, tcpdump {}; from index {n} only {extra} has packets",
            got.packets.len(),
            expected.packets.len()
        ));
    }
    None
}

fn tcpdump_available() -> bool {
    Command::new("tcpdump")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sonde_capture(input: &Path, output: &Path, backend: &str, expr: &str) -> Output {
    Command::new(SONDE)
        .args(["capture", "-r"])
        .arg(input)
        .arg("-w")
        .arg(output)
        .args(["--backend", backend, "-q", expr])
        .output()
        .expect("run sonde")
}

fn tcpdump_filter(input: &Path, output: &Path, expr: &str) -> Output {
    Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(input)
        .arg("-w")
        .arg(output)
        .arg(expr)
        .output()
        .expect("run tcpdump")
}

fn expressions() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/capture_expressions.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// A scratch directory, removed at the end unless the test failed (then kept to look at).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sonde-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn write_corpus(dir: &Path) -> PathBuf {
    let frames = capture_corpus::frames();
    let path = dir.join("corpus.pcap");
    capture_corpus::write_pcap(&path, &frames).expect("write corpus");
    let kinds: Vec<String> = capture_corpus::counts_by_kind(&frames)
        .into_iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("corpus: {} frames ({})", frames.len(), kinds.join(", "));
    path
}

#[test]
fn sonde_keeps_what_tcpdump_keeps() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-filters");
    let corpus = write_corpus(&scratch.0);
    let total = read_capture(&corpus)
        .expect("read corpus back")
        .packets
        .len();
    let expected_out = scratch.0.join("tcpdump.pcap");
    let sonde_out = scratch.0.join("sonde.pcap");

    let mut failures = Vec::new();
    let mut agreed = [0usize; BACKENDS.len()];
    let exprs = expressions();
    assert!(exprs.len() >= 50, "only {} expressions", exprs.len());
    println!(
        "{:<64} {:>7} {:>7} {:>7}",
        "expression", "tcpdump", "ring", "xdp"
    );
    for expr in &exprs {
        let td = tcpdump_filter(&corpus, &expected_out, expr);
        if !td.status.success() {
            failures.push(format!(
                "{expr:?}: tcpdump rejects it (fix the list): {}",
                String::from_utf8_lossy(&td.stderr).trim()
            ));
            continue;
        }
        let expected = read_capture(&expected_out).expect("read tcpdump's output");
        let mut row = format!("{expr:<64} {:>7}", expected.packets.len());
        for (b, backend) in BACKENDS.iter().enumerate() {
            let _ = std::fs::remove_file(&sonde_out);
            let run = sonde_capture(&corpus, &sonde_out, backend, expr);
            if !run.status.success() {
                failures.push(format!(
                    "{expr:?} [{backend}]: sonde exited with {}: {}",
                    run.status,
                    String::from_utf8_lossy(&run.stderr).trim()
                ));
                row += &format!(" {:>7}", "error");
                continue;
            }
            match read_capture(&sonde_out) {
                Err(e) => {
                    failures.push(format!("{expr:?} [{backend}]: {e}"));
                    row += &format!(" {:>7}", "bad");
                }
                Ok(got) => {
                    row += &format!(" {:>7}", got.packets.len());
                    match first_difference(&expected, &got) {
                        Some(diff) => failures.push(format!("{expr:?} [{backend}]: {diff}")),
                        None => agreed[b] += 1,
                    }
                }
            }
        }
        println!("{row}");
    }
    for (b, backend) in BACKENDS.iter().enumerate() {
        println!(
            "{backend}: {}/{} expressions kept exactly what tcpdump kept (corpus of {total} frames)",
            agreed[b],
            exprs.len()
        );
    }
    assert!(
        failures.is_empty(),
        "sonde capture disagrees with tcpdump:\n  {}",
        failures.join("\n  ")
    );
}

/// The one line sonde wrote to stderr (besides the -q summary line, if any, on stdout).
fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn an_expression_that_does_not_compile_exits_2_with_libpcaps_message() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-bad-expr");
    let corpus = write_corpus(&scratch.0);
    for expr in [
        "ip and and",
        "vlan 5000",
        "net 198.18.0.1/15",
        "tcp[tcpflags] & tcp-bogus != 0",
        // libpcap's optimizer proves it can never match (tcp[] is IPv4 only).
        "ip6 and tcp and tcp[13] & 2 != 0",
        // A savefile of Ethernet frames does not say which way they went.
        "inbound",
        "outbound and udp",
    ] {
        // tcpdump prints libpcap's message after its own name.
        let td = tcpdump_filter(&corpus, &scratch.0.join("td.pcap"), expr);
        assert!(!td.status.success(), "tcpdump accepted {expr:?}");
        let td_err = String::from_utf8_lossy(&td.stderr);
        let libpcap_message = td_err
            .lines()
            .find_map(|l| l.strip_prefix("tcpdump: "))
            .unwrap_or_else(|| panic!("no libpcap message from tcpdump for {expr:?}: {td_err}"))
            .trim()
            .to_string();
        for backend in BACKENDS {
            let out = sonde_capture(&corpus, &scratch.0.join("out.pcap"), backend, expr);
            let lines = stderr_lines(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{expr:?} [{backend}]: {lines:?}"
            );
            assert_eq!(
                lines.len(),
                1,
                "{expr:?} [{backend}]: one line expected: {lines:?}"
            );
            assert!(
                lines[0].contains(&libpcap_message),
                "{expr:?} [{backend}]: {:?} does not carry libpcap's {libpcap_message:?}",
                lines[0]
            );
        }
    }
}

#[test]
fn a_file_cut_mid_packet_is_reported_as_truncated() {
    let scratch = Scratch::new("capture-cut-file");
    let corpus = write_corpus(&scratch.0);
    let bytes = std::fs::read(&corpus).expect("read corpus");
    // The first packet's record ends at 24 (file header) + 16 (record header) + its length;
    // cutting the file inside the second half of it leaves a record promising more bytes.
    let first_len = u32::from_le_bytes(bytes[32..36].try_into().unwrap()) as usize;
    let cut = scratch.0.join("cut.pcap");
    let cut_at = bytes.len() - 700;
    assert!(cut_at > 40 + first_len);
    std::fs::write(&cut, &bytes[..cut_at]).expect("write cut file");
    let cut_in_header = scratch.0.join("cut-in-record-header.pcap");
    std::fs::write(&cut_in_header, &bytes[..24 + 16 + first_len + 7]).expect("write cut file");
    for (n, path) in [&cut, &cut_in_header].into_iter().enumerate() {
        for backend in BACKENDS {
            // A file of its own for each run: an existing output is kept, not overwritten.
            let written = scratch.0.join(format!("out-{n}-{backend}.pcap"));
            let out = sonde_capture(path, &written, backend, "ip");
            let lines = stderr_lines(&out);
            assert!(
                !out.status.success(),
                "{} [{backend}]: exit 0",
                path.display()
            );
            let errors: Vec<&String> = lines.iter().collect();
            assert_eq!(
                errors.len(),
                1,
                "{} [{backend}]: one error line expected: {lines:?}",
                path.display()
            );
            let name = path.to_str().unwrap();
            assert!(
                errors[0].contains(name) && errors[0].contains("truncated"),
                "{} [{backend}]: the error should name the file and say truncated: {:?}",
                path.display(),
                errors[0]
            );
        }
    }
}

#[test]
fn a_file_that_is_not_a_capture_is_one_line_error() {
    let scratch = Scratch::new("capture-not-pcap");
    let path = scratch.0.join("notes.pcap");
    std::fs::write(&path, "these are notes, not packets\n".repeat(10)).expect("write file");
    let empty = scratch.0.join("empty.pcap");
    std::fs::write(&empty, b"").expect("write file");
    for input in [&path, &empty] {
        for backend in BACKENDS {
            let out = sonde_capture(input, &scratch.0.join("out.pcap"), backend, "ip");
            let lines = stderr_lines(&out);
            assert!(
                !out.status.success(),
                "{} [{backend}]: exit 0",
                input.display()
            );
            let errors: Vec<&String> = lines.iter().collect();
            assert_eq!(
                errors.len(),
                1,
                "{} [{backend}]: one error line expected: {lines:?}",
                input.display()
            );
            assert!(
                errors[0].contains(input.to_str().unwrap()),
                "{} [{backend}]: the error should name the file: {:?}",
                input.display(),
                errors[0]
            );
        }
    }
}

#[test]
fn the_comparison_sees_each_kind_of_difference() {
    let packet = |ts_ns, orig_len, data: &[u8]| Packet {
        ts_ns,
        orig_len,
        data: data.to_vec(),
    };
    let expected = Capture {
        packets: vec![packet(1_000, 60, &[1, 2, 3]), packet(2_000, 70, &[4, 5])],
    };
    let same = Capture {
        packets: vec![packet(1_000, 60, &[1, 2, 3]), packet(2_000, 70, &[4, 5])],
    };
    assert_eq!(first_difference(&expected, &same), None);
    let variants = [
        (vec![packet(1_000, 60, &[1, 2, 3])], "1 packets, tcpdump 2"),
        (
            vec![packet(1_000, 60, &[1, 2, 3]), packet(2_001, 70, &[4, 5])],
            "packet 1: stamp",
        ),
        (
            vec![packet(1_000, 61, &[1, 2, 3]), packet(2_000, 70, &[4, 5])],
            "packet 0: original length",
        ),
        (
            vec![packet(1_000, 60, &[1, 2, 3]), packet(2_000, 70, &[4, 6])],
            "contents differ",
        ),
        (
            vec![packet(1_000, 60, &[1, 2]), packet(2_000, 70, &[4, 5])],
            "packet 0: 2 bytes",
        ),
    ];
    for (packets, what) in variants {
        let diff = first_difference(&expected, &Capture { packets }).expect("a difference");
        assert!(diff.contains(what), "{diff:?} should say {what:?}");
    }
}

// ---- Framings and link types: sonde reads what tcpdump reads, and writes what it writes ----

/// A pcap file as libpcap (tcpdump's library) reads it back: its header's snap length and link
/// type field (FCS bits included), and its packets (stamp in ns, wire length, bytes).
#[derive(Debug, PartialEq, Eq)]
struct AsLibpcapReads {
    snaplen: u32,
    linktype: u32,
    packets: Vec<(u64, u32, Vec<u8>)>,
}

fn libpcap_read(path: &Path) -> Result<AsLibpcapReads, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let field = |at: usize| -> Result<u32, String> {
        let b: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("{}: no pcap header", path.display()))?;
        // Both writers write in this machine's (little-endian) byte order.
        Ok(u32::from_le_bytes(b))
    };
    let (snaplen, linktype) = (field(16)?, field(20)?);
    let mut cap = pcap::Capture::from_file_with_precision(path, pcap::Precision::Nano)
        .map_err(|e| format!("libpcap cannot read {}: {e}", path.display()))?;
    let mut packets = Vec::new();
    loop {
        match cap.next_packet() {
            Ok(p) => packets.push((
                p.header.ts.tv_sec as u64 * 1_000_000_000 + p.header.ts.tv_usec as u64,
                p.header.len,
                p.data.to_vec(),
            )),
            Err(pcap::Error::NoMorePackets) => break,
            Err(e) => return Err(format!("libpcap stopped reading {}: {e}", path.display())),
        }
    }
    Ok(AsLibpcapReads {
        snaplen,
        linktype,
        packets,
    })
}

/// Where sonde's output of `input` through `expr` differs from tcpdump's, for each backend, or
/// where one refused what the other took. Returns the failures and how many packets tcpdump
/// kept (None: it refused the expression).
fn against_tcpdump(input: &Path, expr: &str, dir: &Path) -> (Vec<String>, Option<usize>) {
    let theirs = dir.join("tcpdump.pcap");
    let ours = dir.join("sonde.pcap");
    let _ = std::fs::remove_file(&theirs);
    // tcpdump writes stamps at the precision it reads them: microsecond files stay in
    // microseconds (libpcap would wrap a nanosecond field made of a microsecond field past a
    // second), everything else is read and written in nanoseconds.
    let micro = std::fs::read(input).is_ok_and(|b| b.starts_with(&0xA1B2_C3D4u32.to_le_bytes()));
    let precision = if micro { "micro" } else { "nano" };
    let mut td = Command::new("tcpdump");
    td.args(["-n", "--time-stamp-precision", precision, "-r"])
        .arg(input)
        .arg("-w")
        .arg(&theirs);
    if !expr.is_empty() {
        td.arg(expr);
    }
    let td = td.output().expect("run tcpdump");
    let expected = td.status.success().then(|| libpcap_read(&theirs));
    let mut failures = Vec::new();
    for backend in BACKENDS {
        let _ = std::fs::remove_file(&ours);
        let mut run = Command::new(SONDE);
        run.args(["capture", "-r"])
            .arg(input)
            .arg("-w")
            .arg(&ours)
            .args(["--backend", backend, "-q"]);
        if !expr.is_empty() {
            run.arg(expr);
        }
        let run = run.output().expect("run sonde");
        let what = format!("{expr:?} [{backend}]");
        match &expected {
            None if run.status.code() == Some(2) => {}
            None => failures.push(format!(
                "{what}: tcpdump refused it ({}), sonde exited with {}",
                String::from_utf8_lossy(&td.stderr).trim(),
                run.status
            )),
            Some(Err(e)) => failures.push(format!("{what}: tcpdump's output: {e}")),
            Some(Ok(_)) if !run.status.success() => failures.push(format!(
                "{what}: sonde exited with {}: {}",
                run.status,
                String::from_utf8_lossy(&run.stderr).trim()
            )),
            Some(Ok(want)) => match libpcap_read(&ours) {
                Err(e) => failures.push(format!("{what}: {e}")),
                Ok(got) if (got.snaplen, got.linktype) != (want.snaplen, want.linktype) => failures
                    .push(format!(
                        "{what}: header snap length {} link type {:#x}, tcpdump's {} {:#x}",
                        got.snaplen, got.linktype, want.snaplen, want.linktype
                    )),
                Ok(got) => {
                    if let Some(i) = (0..want.packets.len().max(got.packets.len()))
                        .find(|&i| want.packets.get(i) != got.packets.get(i))
                    {
                        failures.push(format!(
                            "{what}: {} packets, tcpdump {}; packet {i} differs: sonde {:?}, tcpdump {:?}",
                            got.packets.len(),
                            want.packets.len(),
                            got.packets.get(i).map(|p| (p.0, p.1, p.2.len())),
                            want.packets.get(i).map(|p| (p.0, p.1, p.2.len())),
                        ));
                    }
                }
            },
        }
    }
    let kept = match expected {
        Some(Ok(want)) => Some(want.packets.len()),
        _ => None,
    };
    (failures, kept)
}

#[test]
fn every_framing_tcpdump_reads_is_read_the_same() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-framings");
    let frames = capture_corpus::frames();
    let mut failures = Vec::new();
    for (name, bytes) in capture_corpus::files::framing_cases(&frames) {
        let input = scratch.0.join("case.pcap");
        std::fs::write(&input, &bytes).unwrap();
        for expr in [
            "",
            "udp",
            "tcp or icmp",
            "greater 100",
            "less 80",
            "ether[0] & 1 = 0",
        ] {
            let (diff, kept) = against_tcpdump(&input, expr, &scratch.0);
            if expr.is_empty() {
                assert!(
                    kept.is_some_and(|n| n > 100),
                    "{name}: tcpdump should read the whole file: {kept:?}"
                );
            }
            println!("{name:<56} {expr:<20} tcpdump kept {kept:?}");
            failures.extend(diff.into_iter().map(|d| format!("{name}: {d}")));
        }
    }
    assert!(failures.is_empty(), "\n  {}", failures.join("\n  "));
}

#[test]
fn other_link_types_are_filtered_and_written_as_tcpdump_does() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-link-types");
    let frames = capture_corpus::frames();
    let mut failures = Vec::new();
    for link in capture_corpus::files::link_types() {
        let input = scratch.0.join("link.pcap");
        std::fs::write(&input, link.file(&frames)).unwrap();
        let mut some_kept_some = false;
        for expr in [
            "",
            "ip",
            "ip6",
            "udp",
            "tcp",
            "icmp or icmp6",
            "udp port 53",
            "tcp[tcpflags] & tcp-syn != 0",
            "host 198.18.0.1",
            "net 198.19.0.0/16",
            "ip6 and tcp",
            "greater 300",
            "arp",
            "inbound",
            "outbound",
            "ether host 02:00:5e:10:00:01",
            "wlan addr2 02:00:5e:10:00:aa",
            "link[0] = 0xff",
        ] {
            let (diff, kept) = against_tcpdump(&input, expr, &scratch.0);
            if expr.is_empty() {
                assert!(
                    kept.is_some_and(|n| n > 50),
                    "{}: tcpdump should read the whole file: {kept:?}",
                    link.name
                );
            }
            some_kept_some |= !expr.is_empty() && kept.is_some_and(|n| n > 0);
            println!("{:<18} {expr:<32} tcpdump kept {kept:?}", link.name);
            failures.extend(diff.into_iter().map(|d| format!("{}: {d}", link.name)));
        }
        assert!(some_kept_some, "{}: no expression kept anything", link.name);
    }
    assert!(failures.is_empty(), "\n  {}", failures.join("\n  "));
}

#[test]
fn count_0_is_refused_and_snaplen_0_keeps_whole_packets() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-zero-options");
    let corpus = write_corpus(&scratch.0);
    let out = scratch.0.join("out.pcap");
    let run = |extra: &[&str]| {
        let _ = std::fs::remove_file(&out);
        Command::new(SONDE)
            .args(["capture", "-q", "-r"])
            .arg(&corpus)
            .arg("-w")
            .arg(&out)
            .args(extra)
            .output()
            .expect("run sonde")
    };
    let zero = run(&["-c", "0"]);
    let lines = stderr_lines(&zero);
    assert!(!zero.status.success(), "-c 0 was accepted: {lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("-c 0"), "{lines:?}");
    assert!(!out.exists(), "-c 0 wrote a file");
    // -s 0: whole packets, as tcpdump writes them.
    let whole = run(&["-s", "0"]);
    assert!(whole.status.success(), "{:?}", stderr_lines(&whole));
    let (ours, theirs) = (scratch.0.join("sonde.pcap"), scratch.0.join("td.pcap"));
    std::fs::rename(&out, &ours).unwrap();
    assert!(tcpdump_filter(&corpus, &theirs, "").status.success());
    let (ours, theirs) = (libpcap_read(&ours).unwrap(), libpcap_read(&theirs).unwrap());
    assert_eq!(ours.packets, theirs.packets);
    assert_eq!(ours.snaplen, theirs.snaplen);
}

#[test]
fn a_file_read_is_summed_up_as_a_file_read() {
    if !tcpdump_available() {
        println!("SKIPPED: tcpdump is not installed (apt-get install tcpdump)");
        return;
    }
    let scratch = Scratch::new("capture-offline-summary");
    let corpus = write_corpus(&scratch.0);
    let total = read_capture(&corpus).unwrap().packets.len();
    let out = scratch.0.join("udp.pcap");
    let json = scratch.0.join("summary.json");
    let run = Command::new(SONDE)
        .args(["capture", "-r"])
        .arg(&corpus)
        .arg("-w")
        .arg(&out)
        .arg("--summary-json")
        .arg(&json)
        .arg("udp")
        .output()
        .expect("run sonde");
    let text = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{text}");
    let kept = read_capture(&out).unwrap().packets.len();
    let first = text.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "{kept} kept of {total} packets read from {}",
            corpus.display()
        ),
        "{text}"
    );
    for wrong in ["dropped", "kernel", "CPU", "pps"] {
        assert!(
            !text.contains(wrong),
            "{wrong:?} in a file read's summary: {text}"
        );
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(s["captured"], kept);
    assert_eq!(s["received"], total);
    assert!(
        s.get("kernel_drops").is_none() && s.get("cpu_ns_per_packet").is_none(),
        "{s}"
    );
}
