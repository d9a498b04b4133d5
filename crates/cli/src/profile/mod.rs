//! `sonde profile`: where the cost of a packet goes — per-stage breakdowns of sonde's own
//! transmit and receive paths (`tx`, `rx`, `scan`), and the start and stop latency of a
//! protocol stack against payload size (`stack`).

mod stack;
pub(crate) mod stages;

use clap::{Args, Subcommand};

#[derive(Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    what: ProfileCmd,
}

#[derive(Subcommand)]
enum ProfileCmd {
    /// The transmit path, stage by stage, in ns per packet.
    Tx(stages::StagesArgs),
    /// The receive path, stage by stage, in ns per packet.
    Rx(stages::StagesArgs),
    /// A scan's transmit and receive paths together.
    Scan(stages::StagesArgs),
    /// Start and stop latency of the kernel's and sonde's send paths against payload size.
    Stack(stack::StackArgs),
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    match args.what {
        ProfileCmd::Tx(a) => stages::run(stages::Path::Tx, a),
        ProfileCmd::Rx(a) => stages::run(stages::Path::Rx, a),
        ProfileCmd::Scan(a) => stages::run(stages::Path::Scan, a),
        ProfileCmd::Stack(a) => stack::run(a),
    }
}
