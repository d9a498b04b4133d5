//! `sonde latency`: round-trip times under fixed packet rates. `reflect` echoes datagrams (in
//! the lab's network namespace), `run` sends timestamped messages at each rate and reports
//! percentiles, loss, reordering and duplicates, with a heat map per rate.

mod reflect;
mod run;

use std::net::SocketAddrV4;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use sonde_io::{AnyRx, AnyTx, BackendKind, FilterSpec, IoConfig, TcpTake};

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

/// A frame path's transmit queue and one receiver per queue frames can arrive on, taking only
/// UDP datagrams to `local` (for `xdp` its XDP filter, for `ring` a BPF filter).
fn open_frames(
    path: Path,
    iface: &str,
    local: SocketAddrV4,
) -> anyhow::Result<(AnyTx, Vec<AnyRx>)> {
    // The default ring sizes (4096 frames each way): a few milliseconds of a stalled reader at
    // 40 K/s must fit (256 frames lost echoes in every multi-millisecond stall).
    let mut cfg = IoConfig::new(iface);
    match path {
        Path::Kernel => unreachable!("the kernel path opens a socket, not frames"),
        Path::Ring => {
            let tx = AnyTx::open(BackendKind::Ring, &cfg)?;
            let mut rx = AnyRx::open_per_frame(&cfg)?;
            let mut expr = format!("udp dst port {}", local.port());
            if !local.ip().is_unspecified() {
                expr += &format!(" and dst host {}", local.ip());
            }
            rx.set_filter(&expr)?;
            Ok((tx, vec![rx]))
        }
        Path::Xdp => {
            let spec = FilterSpec {
                ipv4: Some(*local.ip()),
                ipv6: None,
                tcp: TcpTake::None,
                udp: true,
                icmp: false,
                icmp6: false,
                ports: (local.port(), local.port()),
                echo_id: None,
                // The port is held by a kernel socket of ours (hold_port), which would win.
                spare_host_sockets: false,
                stamp_arrivals: false,
            };
            let (tx, rx0) = sonde_io::open_xdp_pair(&cfg, &spec)?;
            let mut rxs = vec![rx0];
            let queues = sonde_io::queue_count(iface).context("counting queues")?;
            for q in 1..queues {
                cfg.queue = q;
                rxs.push(AnyRx::open_filtered(BackendKind::Xdp, &cfg, &spec, "")?);
            }
            Ok((tx, rxs))
        }
    }
}
