//! `sonde capture -r FILE`: keep what the expression selects from a capture file, through the
//! chosen backend's filter path: libpcap's classic BPF interpreter (what the kernel runs for
//! `ring` and libpcap for `pcap`) or, for `xdp`, sonde's XDP translation run by the kernel.

use std::cell::RefCell;
use std::time::Instant;

use anyhow::Context;
use sonde_capture::output::{CaptureWriter, FileInfo, Format};
use sonde_capture::read::read_file;

use super::{compile, Backend, CaptureArgs};
use crate::capture::summary::Summary;

/// How each packet is judged.
enum Judge {
    Cbpf(Vec<libc::sock_filter>),
    Xdp(Box<XdpJudge>),
}

/// The XDP translation, loaded and run by the kernel on each packet. The kernel's test run
/// needs at least an Ethernet header, shows the program at most one page of a frame, and
/// cannot show it bytes a file left out: such packets (shorter than 14 bytes, longer than
/// about 3.5 KB, or cut short by the snap length, where `len` would differ) are judged by the
/// classic program instead, and counted.
struct XdpJudge {
    program: super::xdp::Verdicts,
    cbpf: Vec<libc::sock_filter>,
    judged_by_cbpf: u64,
}

impl Judge {
    fn new(backend: Backend, expr: &str, snaplen: u32) -> anyhow::Result<Judge> {
        let cbpf = compile(expr, snaplen)?;
        if backend != Backend::Xdp {
            return Ok(Judge::Cbpf(cbpf));
        }
        match super::xdp::Verdicts::load(&cbpf) {
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
                if !x.program.can_judge(data) || (data.len() as u32) < wire_len {
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
                "XDP translation (kernel test runs); {} packets too short or cut by the snap length judged by classic BPF",
                x.judged_by_cbpf
            ),
            Judge::Xdp(_) => "XDP translation (kernel test runs)".into(),
        }
    }
}

pub fn run(args: &CaptureArgs, file: &str, expr: &str, out: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let cpu_start = sonde_meter::CpuTimes::now();
    let mut judge = Judge::new(args.backend, expr, args.snaplen)?;
    // Created when the file has said what it holds; both callbacks below reach it.
    let writer: RefCell<Option<CaptureWriter>> = RefCell::new(None);
    let (mut kept, mut seen) = (0u64, 0u64);
    let read = read_file(
        file,
        |header| {
            let info = FileInfo {
                format: Format::for_path(out),
                iface: format!("file {file}"),
                snaplen: header.snaplen.clamp(1, args.snaplen),
            };
            let if_exists = super::if_exists(args);
            *writer.borrow_mut() =
                Some(CaptureWriter::create(out, info, args.rotate_mb, if_exists)?);
            Ok(())
        },
        |p| {
            seen += 1;
            if !judge.keeps(p.data, p.wire_len)? {
                return Ok(true);
            }
            let mut writer = writer.borrow_mut();
            let w = writer
                .as_mut()
                .context("a packet came before the file described its interface")?;
            // A file read back loses nothing.
            w.write(p.ts_ns, p.wire_len, p.data, 0)
                .with_context(|| format!("writing {out}"))?;
            kept += 1;
            Ok(args.count.is_none_or(|c| kept < c))
        },
    );
    // Whatever happened, what was kept is written out with its statistics block.
    let files = match writer.into_inner() {
        Some(mut w) => {
            let files = w.files();
            w.finish(0).with_context(|| format!("writing {out}"))?;
            files
        }
        None => Vec::new(),
    };
    read?;
    let summary = Summary::offline(
        args,
        kept,
        seen,
        started.elapsed(),
        sonde_meter::CpuTimes::now().since(&cpu_start),
        judge.path(),
        files,
    );
    summary.finish(args)
}
