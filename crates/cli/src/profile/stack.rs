//! `sonde profile stack`: its arguments, and the harness's lines, tables, files and chart (the
//! measuring lives in `sonde_profile::stack`).

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use sonde_meter::output_file::IfExists;
use sonde_profile::stack::{self, parse_sizes, Outputs, PathKind, Proto, StackConfig};

#[derive(Args)]
pub struct StackArgs {
    /// The lab to run in (found by itself inside `sonde lab exec`). The payloads go from its
    /// scanner namespace to 198.19.255.254, the lab's gateway address, port 9 (discard).
    #[arg(long)]
    lab: Option<String>,
    /// Payload sizes in bytes, comma-separated; a k suffix is ×1024. UDP takes at most 65507.
    #[arg(long, default_value = "64,128,256,512,1k,2k,4k,8k,16k,32k,65507")]
    sizes: String,
    /// Protocols, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "udp,tcp")]
    proto: Vec<Proto>,
    /// Send paths, comma-separated: kernel (sockets) and sonde (frames through the ring
    /// backend).
    #[arg(long, value_delimiter = ',', default_value = "kernel,sonde")]
    path: Vec<PathKind>,
    /// Measured sends per size, path and protocol (after a short warm-up).
    #[arg(long, default_value_t = 20, value_parser = crate::runargs::number_from(1u32, 10000))]
    reps: u32,
    /// Folder for stack.csv (medians), stack-samples.csv (every send) and stack.png.
    #[arg(long, default_value = "sonde-stack")]
    out: PathBuf,
    /// Write the summary (medians, fits, instrumentation costs) as one JSON object here.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Overwrite --summary-json if it exists.
    #[arg(long)]
    force: bool,
    /// Leave TSO and GSO of the scanner's interface as they are. By default they are off for
    /// the run (and restored after it), so TCP leaves as MTU-sized segments as on a wire,
    /// not as one 64 KB super-packet that veth passes whole.
    #[arg(long)]
    keep_offloads: bool,
}

pub fn run(args: StackArgs) -> anyhow::Result<()> {
    let sizes = parse_sizes(&args.sizes, &args.proto)?;
    crate::cmd::blast::check_summary(args.summary_json.as_deref(), IfExists::force(args.force))?;
    let outputs = Outputs::create(&args.out)?;
    let lab = match (args.lab, sonde_lab::current_lab()) {
        (Some(name), _) => name,
        (None, Some(name)) => name,
        (None, None) => bail!(
            "sonde profile stack runs in a lab: give --lab NAME (start one with: sonde lab up --name NAME)"
        ),
    };
    let config = StackConfig {
        lab,
        sizes,
        protos: args.proto,
        paths: args.path,
        reps: args.reps,
        keep_offloads: args.keep_offloads,
    };
    let measured = stack::run(&config, crate::say)?;
    print!("{}", stack::tables(&measured.points, &measured.fits));
    outputs.write(&measured)?;
    sonde_plot::stack::draw(&measured.points, &measured.fits, &outputs.png)?;
    crate::say(format!(
        "wrote {}, {} and {}",
        outputs.csv.display(),
        outputs.samples.display(),
        outputs.png.display()
    ));
    if let Some(file) = &args.summary_json {
        crate::cmd::blast::write_json(file, &measured.summary(), IfExists::force(args.force))?;
    }
    Ok(())
}
