//! `sonde capture -r FILE`: keep what the expression selects from a capture file, through the
//! chosen backend's filter path: libpcap's classic BPF interpreter (what the kernel runs for
//! `ring` and libpcap for `pcap`) or, for `xdp`, sonde's XDP translation run by the kernel.

use std::cell::RefCell;
use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use sonde_capture::output::{CaptureWriter, FileInfo, Format};
use sonde_capture::read::{read_file, FilePacket};
use sonde_capture::verdicts::Verdicts;
use sonde_io::filter::{linktype_of_dlt, Compiler};

use super::{compile, Backend, CaptureArgs};
use crate::capture::summary::OfflineSummary;

/// How each packet is judged.
enum Judge {
    Cbpf(Vec<libc::sock_filter>),
    Xdp(Box<XdpJudge>),
}

/// The XDP translation, loaded and run by the kernel on each packet. The kernel's test run
/// needs at least 14 bytes, shows the program at most one page of a frame, and judges `len`
/// as the bytes it was given: packets shorter or longer than that, and those whose captured
/// length differs from their wire length (cut by the snap length, or recorded longer than on
/// the wire) are judged by the classic program instead, and counted. The translation does not
/// depend on the link type: the program reads the file's packets as they are.
struct XdpJudge {
    program: Verdicts,
    cbpf: Vec<libc::sock_filter>,
    judged_by_cbpf: u64,
}

impl Judge {
    /// The judge of a file: the expression compiled by `compiler`, for the file's link type.
    fn new(
        backend: Backend,
        compiler: &Compiler,
        expr: &str,
        snaplen: u32,
    ) -> anyhow::Result<Judge> {
        let cbpf = compile(compiler, expr, snaplen)?;
        if backend != Backend::Xdp {
            return Ok(Judge::Cbpf(cbpf));
        }
        match Verdicts::load(&cbpf) {
            Ok(program) => Ok(Judge::Xdp(Box::new(XdpJudge {
                program,
                cbpf,
                judged_by_cbpf: 0,
            }))),
            Err(e) => {
                eprintln!("sonde: {e:#}; judging with the classic BPF program in user space");
                Ok(Judge::Cbpf(cbpf))
            }
        }
    }

    fn keeps(&mut self, data: &[u8], wire_len: u32) -> anyhow::Result<bool> {
        match self {
            Judge::Cbpf(p) => Ok(sonde_io::filter::matches(p, data, wire_len)),
            Judge::Xdp(x) => {
                if !x.program.can_judge(data) || data.len() as u32 != wire_len {
                    x.judged_by_cbpf += 1;
                    return Ok(sonde_io::filter::matches(&x.cbpf, data, wire_len));
                }
                x.program
                    .matches(data)
                    .context("running the XDP translation")
            }
        }
    }

    fn path(&self) -> String {
        match self {
            Judge::Cbpf(_) => "classic BPF (libpcap's interpreter)".into(),
            Judge::Xdp(x) if x.judged_by_cbpf > 0 => format!(
                "XDP translation (kernel test runs); {} packets too short or long for a test run, or not captured whole, judged by classic BPF",
                x.judged_by_cbpf
            ),
            Judge::Xdp(_) => "XDP translation (kernel test runs)".into(),
        }
    }
}

/// Where the packets kept go: a capture file, or lines on stdout.
enum Kept {
    File(CaptureWriter),
    Lines {
        out: std::io::BufWriter<std::io::Stdout>,
        dlt: i32,
    },
}

impl Kept {
    /// Writes one packet; false once stdout is closed (`| head`): reading can stop.
    fn write(&mut self, p: &FilePacket, out: &str) -> anyhow::Result<bool> {
        match self {
            Kept::File(writer) => {
                // A file read back loses nothing.
                writer
                    .write(p.ts_ns, p.wire_len, p.data, 0)
                    .with_context(|| format!("writing {out}"))?;
                Ok(true)
            }
            Kept::Lines { out, dlt } => {
                let line = super::lines::line(p.ts_ns, *dlt, p.data, p.wire_len);
                Ok(writeln!(out, "{line}").is_ok())
            }
        }
    }
}

/// What reading needs once the file has said what it holds.
struct Open {
    judge: Judge,
    kept: Kept,
}

pub fn run(args: &CaptureArgs, file: &str, expr: &str, out: Option<&str>) -> anyhow::Result<()> {
    let shown_out = out.unwrap_or("stdout");
    let started = Instant::now();
    let open: RefCell<Option<Open>> = RefCell::new(None);
    let (mut kept, mut seen) = (0u64, 0u64);
    let read = read_file(
        file,
        |header| {
            // As tcpdump: the expression compiled for the file's link type, and the output
            // written with that link type (libpcap's number for it), its FCS bits, and the
            // file's snap length.
            let compiler = Compiler::for_file(header.linktype_field(), header.snaplen)?;
            let judge = Judge::new(args.backend, &compiler, expr, args.snaplen)?;
            let kept = match out {
                Some(out) => {
                    let info = FileInfo {
                        format: Format::for_path(out),
                        iface: format!("file {file}"),
                        snaplen: header.snaplen.min(args.snaplen),
                        linktype: linktype_of_dlt(compiler.dlt()) | header.linktype_ext,
                    };
                    let if_exists = super::if_exists(args);
                    Kept::File(CaptureWriter::create(out, info, args.rotate_mb, if_exists)?)
                }
                None => Kept::Lines {
                    out: std::io::BufWriter::new(std::io::stdout()),
                    dlt: compiler.dlt(),
                },
            };
            *open.borrow_mut() = Some(Open { judge, kept });
            Ok(())
        },
        |p| {
            seen += 1;
            let mut open = open.borrow_mut();
            let Open { judge, kept: sink } = open
                .as_mut()
                .context("a packet came before the file described its interface")?;
            if !judge.keeps(p.data, p.wire_len)? {
                return Ok(true);
            }
            if !sink.write(p, shown_out)? {
                return Ok(false);
            }
            kept += 1;
            Ok(args.count.is_none_or(|c| kept < c))
        },
    );
    // Whatever happened, what was kept is written out with its statistics block.
    let (files, path) = match open.into_inner() {
        Some(Open {
            kept: Kept::File(mut writer),
            judge,
        }) => {
            let files = writer.files();
            writer
                .finish(0)
                .with_context(|| format!("writing {shown_out}"))?;
            (files, judge.path())
        }
        Some(Open {
            kept: Kept::Lines { mut out, .. },
            judge,
        }) => {
            let _ = out.flush();
            (vec![shown_out.to_string()], judge.path())
        }
        None => (Vec::new(), String::new()),
    };
    read?;
    OfflineSummary::new(args, file, kept, seen, started.elapsed(), path, files).finish(args)
}
