//! `sonde bench`: `tx` sweeps backends × batch sizes × threads and plots them; `floor` runs the
//! bare AF_XDP descriptor loop that blast is measured against.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use clap::{Args, Subcommand};
use sonde_craft::ProbeKind;
use sonde_io::{BackendKind, FrameTx};
use sonde_meter::output_file::IfExists;
use sonde_meter::{human_rate, parse_link, Counter, Stopwatch, TxSummary};
use sonde_plot::sweep::SweepRow;

use super::blast::{check_summary, enter_lab, plan, write_json, LabTarget};
use sonde_engine::tx::{self, Limit};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Sweep backends × batch sizes × threads; write a CSV and two PNG plots.
    Tx(TxArgs),
    /// The bare AF_XDP loop: post descriptors of frames built once, no per-frame work.
    Floor(FloorArgs),
    /// Draw the PNG of bench/compare-capture's medians CSV: loss and CPU per tool by sent rate.
    PlotCapture(PlotArgs),
    /// Draw the PNG of bench/compare-intercept's medians CSV: throughput by verdict batch size.
    PlotIntercept(PlotArgs),
}

/// A comparison's medians CSV, and the chart to draw of it.
#[derive(Args)]
struct PlotArgs {
    /// The medians CSV the comparison wrote (OUT.csv, not OUT.raw.csv).
    csv: PathBuf,
    /// The PNG to write.
    png: PathBuf,
}

#[derive(Args)]
struct TxArgs {
    #[command(flatten)]
    target: LabTarget,
    /// Backends to sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "xdp,ring,mmsg,sendto,pcap"
    )]
    backends: Vec<BackendKind>,
    /// Batch sizes to sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024,4096")]
    batches: Vec<usize>,
    /// Thread counts to sweep.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<usize>,
    /// Frames per measurement.
    #[arg(long, default_value_t = 300_000)]
    count: u64,
    /// Passes over the whole sweep; each point reports its median (passes are interleaved so
    /// drift on a noisy machine hits every point alike).
    #[arg(long, default_value_t = 3, value_parser = crate::runargs::number_from(1u32, 50))]
    runs: u32,
    /// Folder for bench-tx.csv, bench-tx-pps.png and bench-tx-cpu.png.
    #[arg(long, default_value = "out")]
    out: PathBuf,
}

#[derive(Args)]
struct FloorArgs {
    #[command(flatten)]
    target: LabTarget,
    /// Frames to post.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Descriptors posted per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Link speed for the line-rate share.
    #[arg(long, default_value = "10g", value_parser = parse_link)]
    link: f64,
    /// Write the summary as one JSON object to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Overwrite --summary-json if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Tx(a) => bench_tx(a),
        BenchCommand::Floor(a) => bench_floor(a),
        BenchCommand::PlotCapture(a) => plot(a, sonde_plot::capture::plot_file),
        BenchCommand::PlotIntercept(a) => plot(a, sonde_plot::intercept::plot_file),
    }
}

/// Draws a comparison's chart and says where.
fn plot(args: PlotArgs, draw: fn(&Path, &Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    draw(&args.csv, &args.png)?;
    crate::say(format!("wrote {}", args.png.display()));
    Ok(())
}

fn bench_tx(args: TxArgs) -> anyhow::Result<()> {
    let lab = enter_lab(&args.target)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut points = Vec::new();
    for &backend in &args.backends {
        for &threads in &args.threads {
            for &batch in &args.batches {
                points.push((backend, threads, batch));
            }
        }
    }
    let mut samples: Vec<Vec<SweepRow>> = vec![Vec::new(); points.len()];
    for pass in 1..=args.runs {
        eprintln!("pass {pass} of {}", args.runs);
        for (i, &(backend, threads, batch)) in points.iter().enumerate() {
            let row = measure(&args, &lab, backend, threads, batch)?;
            eprintln!(
                "  {:<7} batch {:>5}  threads {}  {:>10}pps  {:>7.1} ns/pkt CPU",
                backend,
                batch,
                threads,
                human_rate(row.pps),
                row.cpu_ns_per_packet
            );
            samples[i].push(row);
        }
    }
    let rows: Vec<SweepRow> = samples.into_iter().map(median_row).collect();
    let csv_path = args.out.join("bench-tx.csv");
    let mut w = csv::Writer::from_path(&csv_path)
        .with_context(|| format!("writing {}", csv_path.display()))?;
    for r in &rows {
        w.serialize(r)?;
    }
    w.flush()?;
    let title = format!("median of {}", args.runs);
    sonde_plot::sweep::sweep(
        &rows,
        &args.out.join("bench-tx-pps.png"),
        "packets per second",
        &title,
        |r| r.pps,
    )?;
    sonde_plot::sweep::sweep(
        &rows,
        &args.out.join("bench-tx-cpu.png"),
        "CPU ns per packet",
        &title,
        |r| r.cpu_ns_per_packet,
    )?;
    for r in &rows {
        crate::say(format!(
            "{:<7} batch {:>5}  threads {}  {:>10}pps  {:>7.1} ns/pkt CPU  (median of {})",
            r.backend,
            r.batch,
            r.threads,
            human_rate(r.pps),
            r.cpu_ns_per_packet,
            args.runs
        ));
    }
    print_ratio(&rows, "xdp", "sendto", 64);
    crate::say(format!(
        "wrote {}, bench-tx-pps.png and bench-tx-cpu.png in {}",
        csv_path.display(),
        args.out.display()
    ));
    Ok(())
}

/// One measurement of one sweep point.
fn measure(
    args: &TxArgs,
    lab: &sonde_lab::LabStatus,
    backend: BackendKind,
    threads: usize,
    batch: usize,
) -> anyhow::Result<SweepRow> {
    let p = plan(
        &args.target,
        lab,
        backend,
        batch,
        threads,
        Limit::Count(args.count),
        0.0,
        ProbeKind::TcpSyn,
    )?;
    let o = tx::run(&p, &AtomicBool::new(false), &Counter::default())?;
    let s = TxSummary::new(
        o.packets,
        o.wall,
        o.cpu,
        p.template.frame_len(),
        10.0,
        backend.name(),
        batch,
        threads,
        &o.how,
    );
    Ok(SweepRow {
        backend: backend.name().into(),
        batch,
        threads,
        packets: s.packets,
        wall_s: s.wall_s,
        pps: s.pps,
        cpu_ns_per_packet: s.cpu_ns_per_packet,
        cpu_user_s: s.cpu_user_s,
        cpu_sys_s: s.cpu_sys_s,
    })
}

/// The sample with the median packet rate (its CPU figures come with it).
fn median_row(mut samples: Vec<SweepRow>) -> SweepRow {
    samples.sort_by(|a, b| a.pps.total_cmp(&b.pps));
    samples.swap_remove(samples.len() / 2)
}

/// Prints how much faster backend `a` is than `b` at one batch size (one thread).
fn print_ratio(rows: &[SweepRow], a: &str, b: &str, batch: usize) {
    let find = |name: &str| {
        rows.iter()
            .find(|r| r.backend == name && r.batch == batch && r.threads == 1)
    };
    if let (Some(ra), Some(rb)) = (find(a), find(b)) {
        crate::say(format!(
            "{a} vs {b} at batch {batch}: {:.2}x the packet rate, {:.2}x less CPU per packet ({} vs {} pps)",
            ra.pps / rb.pps,
            rb.cpu_ns_per_packet / ra.cpu_ns_per_packet,
            human_rate(ra.pps),
            human_rate(rb.pps)
        ));
    }
}

fn bench_floor(args: FloorArgs) -> anyhow::Result<()> {
    check_summary(args.summary_json.as_deref(), IfExists::force(args.force))?;
    let lab = enter_lab(&args.target)?;
    let p = plan(
        &args.target,
        &lab,
        BackendKind::Xdp,
        args.batch,
        1,
        Limit::Count(args.count),
        0.0,
        ProbeKind::TcpSyn,
    )?;
    let mut frame = vec![0u8; sonde_io::MAX_FRAME];
    let (addr, port) = p.targets.clone().next_target();
    let len = p.template.write(&mut frame, addr, port);
    // On the CPU a sender of `blast` would use (the lab's targets may have the others).
    sonde_engine::plan::pin_to_cpu(sonde_engine::plan::thread_cpu(p.cpus.as_deref(), 0));
    let mut tx = sonde_io::xdp::XdpTx::open(&p.io)?;
    let how = format!("{} (bare descriptor loop)", tx.describe());
    let watch = Stopwatch::start();
    let sent = tx.post_prebuilt(&frame[..len], args.count, args.batch)?;
    tx.flush()?;
    let s = TxSummary::new(
        sent,
        watch.wall(),
        watch.cpu(),
        len,
        args.link,
        "xdp-floor",
        args.batch,
        1,
        &how,
    );
    crate::say(s.to_text());
    if let Some(path) = &args.summary_json {
        write_json(path, &s, IfExists::force(args.force))?;
    }
    Ok(())
}
