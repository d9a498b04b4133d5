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
        .arg("-r")
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
    for path in [&cut, &cut_in_header] {
        for backend in BACKENDS {
            let out = sonde_capture(path, &scratch.0.join("out.pcap"), backend, "ip");
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
