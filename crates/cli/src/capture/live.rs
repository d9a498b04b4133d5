//! `sonde capture -i IFACE`: opens one source per capture thread, runs the capture with a live
//! status line until Ctrl-C, the count or the duration, and reports.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sonde_capture::live::{Counters, Plan};
use sonde_capture::open::{open_sources, Link, Wanted};
use sonde_capture::output::{CaptureWriter, FileInfo, Format};
use sonde_io::filter::{Compiler, ANY_DEVICE};

use super::summary::{per_packet, Summary};
use super::{compile, Backend, CaptureArgs};
use crate::metrics::{LivePage, RunLabels};

/// Chunks (1 MiB each) in flight per capture thread between it and the writer.
const CHUNKS_PER_THREAD: usize = 32;

pub fn run(args: &CaptureArgs, iface: &str, expr: &str, out: &str) -> anyhow::Result<()> {
    if let Some(lab) = &args.lab {
        sonde_lab::enter_net_ns(lab)?;
    }
    if iface == ANY_DEVICE {
        if args.backend != Backend::Pcap {
            bail!("-i any is libpcap's device of every interface at once: give --backend pcap with it");
        }
    } else {
        sonde_lab::check_interface(iface)?;
        sonde_io::queue_count(iface)?;
    }
    if args.profile.is_some() && args.backend == Backend::Pcap {
        bail!("--profile instruments sonde's own ring and XDP paths, not libpcap's: use --backend ring or xdp");
    }
    // As tcpdump: compiled for this interface (its link type, and the VLAN tags the kernel
    // takes off frames), and written with its link type.
    let compiler = Compiler::for_interface(iface)?;
    let link = Link::of(iface, compiler.dlt(), args.backend)?;
    let program = compile(&compiler, expr, args.snaplen)?;
    drop(compiler);
    let calibration = args.profile.as_ref().map(|_| super::profile::start());
    let wanted = Wanted {
        backend: args.backend,
        threads: args.threads as usize,
        ring_bytes: (args.buffer_mb as usize) << 20,
        snaplen: args.snaplen,
    };
    let (sources, backend, filter) = open_sources(&wanted, iface, expr, &program, link)?;
    let threads = sources.len() as u32;
    if !args.quiet {
        eprintln!(
            "capture: listening on {iface} in {}, {} backend, {threads} thread(s), snapshot length {} bytes",
            sonde_lab::where_am_i(),
            backend.name(),
            args.snaplen
        );
    }
    if let Some(note) = own_probes_note(iface) {
        eprintln!("capture: note: {note}");
    }
    let info = FileInfo {
        format: Format::for_path(out),
        iface: iface.to_string(),
        snaplen: args.snaplen,
        linktype: sonde_io::filter::linktype_of_dlt(link.dlt),
    };
    let labels = RunLabels {
        command: "capture",
        module: "live",
        backend: backend.name(),
        shard: 0,
        target_rate: 0.0,
    };
    // Bound before the file is made: a taken port leaves no empty file behind.
    let metrics = args.metrics.start(labels, args.quiet)?;
    let writer = CaptureWriter::create(out, info, args.rotate_mb, super::if_exists(args))?;
    let stop = Arc::new(AtomicBool::new(false));
    sonde_engine::stop::set_on_stop_signals(&stop)?;
    let counters = Arc::new(Counters::default());
    let iface_drops_start = iface_rx_dropped(iface);
    let plan = Plan::new(sources, args.count, CHUNKS_PER_THREAD);
    let cpu_start = sonde_meter::CpuTimes::now();
    let started = Instant::now();
    let capture = {
        let (counters, stop) = (counters.clone(), stop.clone());
        std::thread::spawn(move || sonde_capture::live::run(plan, writer, counters, stop))
    };
    let deadline = args
        .duration
        .map(|s| started + Duration::from_secs_f64(s.max(0.0)));
    let ends = Ends {
        deadline,
        count: args.count,
        started,
    };
    let live = metrics.publisher().map(LivePage::new);
    watch(&counters, &stop, &ends, args.quiet, live, || {
        capture.is_finished()
    });
    let ending = capture
        .join()
        .map_err(|_| anyhow::anyhow!("the capture panicked"))??;
    let wall = started.elapsed();
    let cpu = sonde_meter::CpuTimes::now().since(&cpu_start);
    let iface_drops = iface_rx_dropped(iface).saturating_sub(iface_drops_start);
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let captured = load(&counters.captured);
    let summary = Summary {
        captured,
        kernel_drops: load(&counters.kernel_drops) + iface_drops,
        ring_drops: load(&counters.ring_drops),
        writer_drops: load(&counters.writer_drops),
        received: load(&counters.received),
        bytes: load(&counters.bytes),
        seconds: wall.as_secs_f64(),
        pps: captured as f64 / wall.as_secs_f64().max(1e-9),
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        cpu_ns_per_packet: per_packet(cpu, captured),
        ts_source: ending.ts_source.name().into(),
        backend: backend.name().into(),
        threads,
        filter,
        files: ending.files,
        stopped_by: ending.write_error,
    };
    if let (Some(png), Some(cal)) = (&args.profile, &calibration) {
        let mut profile = super::profile::Profile::collect(cal, captured, cpu);
        if out != "-" {
            profile.time_filter(&program, &summary.files[0]);
        }
        eprint!("{}", profile.table(backend.name()));
        super::profile::plot(&profile, backend.name(), std::path::Path::new(png))?;
    }
    summary.finish(args)?;
    metrics.end(&summary)
}

/// What a capture on `iface` will not see, when sonde may be sending from it: a lab's
/// scanner namespace, or another sonde process in this namespace. sonde's xdp and ring
/// transmit (AF_XDP; a packet ring that bypasses the qdisc) skip the kernel's packet taps, so
/// no capture on the sending interface sees those probes; mmsg and sendto go through the taps.
fn own_probes_note(iface: &str) -> Option<String> {
    let lab = sonde_lab::current_lab();
    if lab.is_none() && !other_sonde_here() {
        return None;
    }
    let elsewhere = match lab {
        Some(lab) => format!(
            "capture them where they arrive, on the lab's side: sonde capture --lab {lab} -i nx0"
        ),
        None => "capture them where they arrive (the receiving host, or a mirror port)".into(),
    };
    Some(format!(
        "a capture on {iface} sees none of the probes sonde sends from it with its xdp or ring backends (they skip the kernel's packet taps; mmsg and sendto do not): {elsewhere}"
    ))
}

/// The commands of sonde that send probes or frames.
const SENDERS: [&str; 6] = ["scan", "grab", "blast", "bench", "latency", "profile"];

/// Whether another `sonde` process that sends (not the lab's own servers) runs in this
/// thread's network namespace.
fn other_sonde_here() -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |path: &std::path::Path| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    let Some(here) = id(std::path::Path::new("/proc/thread-self/ns/net")) else {
        return false;
    };
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|entry| {
        let pid = entry.file_name();
        let pid = pid.to_string_lossy();
        pid.bytes().all(|b| b.is_ascii_digit())
            && pid != me
            && std::fs::read_to_string(entry.path().join("comm")).is_ok_and(|c| c.trim() == "sonde")
            && std::fs::read(entry.path().join("cmdline")).is_ok_and(|line| {
                let command = line.split(|&b| b == 0).nth(1).unwrap_or_default();
                SENDERS.iter().any(|s| s.as_bytes() == command)
            })
            && id(&entry.path().join("ns/net")) == Some(here)
    })
}

/// When a capture ends by itself: at a deadline (--duration) or a count (-c).
struct Ends {
    deadline: Option<Instant>,
    count: Option<u64>,
    started: Instant,
}

impl Ends {
    /// The share done of a capture with `captured` packets (NaN when it ends only on a signal).
    fn done(&self, captured: u64) -> f64 {
        let by_time = self.deadline.map(|d| {
            let whole = d.duration_since(self.started).as_secs_f64();
            self.started.elapsed().as_secs_f64() / whole.max(1e-9)
        });
        let by_count = self.count.map(|n| captured as f64 / n.max(1) as f64);
        match (by_time, by_count) {
            (Some(t), Some(c)) => t.max(c).min(1.0),
            (Some(x), None) | (None, Some(x)) => x.min(1.0),
            (None, None) => f64::NAN,
        }
    }
}

/// The capture's page for `--metrics`: the counters its status line reads.
fn publish(live: &mut LivePage, counters: &Counters, ends: &Ends, running: bool) {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let captured = load(&counters.captured);
    live.publish(captured, ends.done(captured), running, |page| {
        page.counter(
            "sonde_received_total",
            "Packets the sources handed to sonde",
            load(&counters.received),
        );
        page.counter(
            "sonde_captured_total",
            "Packets written to the file",
            captured,
        );
        page.counter(
            "sonde_written_bytes_total",
            "Bytes of packet data written",
            load(&counters.bytes),
        );
        page.counters(
            "sonde_drops_total",
            "Packets lost, by cause: the kernel (before the ring), the ring (sonde read too slowly), sonde's writer (it or the disk fell behind)",
            "cause",
            &[
                ("kernel", load(&counters.kernel_drops)),
                ("ring", load(&counters.ring_drops)),
                ("writer", load(&counters.writer_drops)),
            ],
        );
    });
}

/// Draws the status line twice a second until the capture ends; sets `stop` at the deadline.
fn watch(
    counters: &Counters,
    stop: &AtomicBool,
    ends: &Ends,
    quiet: bool,
    mut live: Option<LivePage>,
    finished: impl Fn() -> bool,
) {
    let target = if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr_with_hz(2)
    };
    let bar = ProgressBar::with_draw_target(None, target);
    bar.set_style(ProgressStyle::with_template("{elapsed_precise} {msg}").expect("valid template"));
    let mut last = (Instant::now(), 0u64, 0u64);
    while !finished() {
        std::thread::sleep(Duration::from_millis(100));
        if ends.deadline.is_some_and(|d| Instant::now() >= d) {
            stop.store(true, Ordering::Relaxed);
        }
        if let Some(live) = live.as_mut().filter(|l| l.due()) {
            publish(live, counters, ends, true);
        }
        let dt = last.0.elapsed().as_secs_f64();
        if dt < 0.5 {
            continue;
        }
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let (captured, bytes) = (load(&counters.captured), load(&counters.bytes));
        let pps = (captured - last.1) as f64 / dt;
        let mbits = (bytes - last.2) as f64 * 8.0 / dt / 1e6;
        last = (Instant::now(), captured, bytes);
        bar.set_message(format!(
            "{captured} captured  {}pps  {mbits:.0} Mbit/s  drops: kernel {}, ring {}, sonde {}",
            sonde_meter::human_rate(pps),
            load(&counters.kernel_drops),
            load(&counters.ring_drops),
            load(&counters.writer_drops),
        ));
    }
    bar.finish_and_clear();
    if let Some(live) = &mut live {
        publish(live, counters, ends, false);
    }
}

/// The interface's receive drops (`ip -s link`, which reads them through netlink in this
/// network namespace); 0 if they cannot be read.
fn iface_rx_dropped(iface: &str) -> u64 {
    let Ok(out) = std::process::Command::new("ip")
        .args(["-j", "-s", "link", "show", "dev", iface])
        .output()
    else {
        return 0;
    };
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return 0;
    };
    json[0]["stats64"]["rx"]["dropped"].as_u64().unwrap_or(0)
}
