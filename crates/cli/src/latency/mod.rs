//! `sonde latency`: round-trip times under fixed packet rates. `reflect` echoes datagrams (in
//! the lab's network namespace), `run` sends timestamped messages at each rate and reports
//! percentiles, loss, reordering and duplicates, with a heat map per rate.

mod reflect;
mod run;

use std::net::SocketAddrV4;

use clap::{Args, Subcommand, ValueEnum};
use sonde_io::{AnyRx, AnyTx, BackendKind};

#[derive(Args)]
pub struct LatencyArgs {
    #[command(subcommand)]
    what: LatencyCmd,
}

#[derive(Subcommand)]
enum LatencyCmd {
    /// Echo every UDP datagram to a port back to its sender (run it in the lab's network
    /// namespace: --lab NAME).
    Reflect(reflect::ReflectArgs),
    /// Send timestamped messages to a reflector at each rate and time every echo.
    Run(Box<run::RunArgs>),
}

pub fn run(args: LatencyArgs) -> anyhow::Result<()> {
    match args.what {
        LatencyCmd::Reflect(a) => reflect::run(a),
        LatencyCmd::Run(a) => run::run(*a),
    }
}

/// How messages travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Path {
    /// The kernel's UDP socket path (send/recv system calls).
    Kernel,
    /// sonde's frames on AF_PACKET: a TX ring with qdisc bypass, a per-frame RX ring.
    Ring,
    /// sonde's frames on AF_XDP (one socket per queue).
    Xdp,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Kernel => "kernel",
            Path::Ring => "ring",
            Path::Xdp => "xdp",
        }
    }
}

/// A frame path's transmit queue and its receivers (`sonde_latency::open_frames`).
fn open_frames(
    path: Path,
    iface: &str,
    local: SocketAddrV4,
) -> anyhow::Result<(AnyTx, Vec<AnyRx>)> {
    let backend = match path {
        Path::Kernel => unreachable!("the kernel path opens a socket, not frames"),
        Path::Ring => BackendKind::Ring,
        Path::Xdp => BackendKind::Xdp,
    };
    sonde_latency::open_frames(backend, iface, local)
}
