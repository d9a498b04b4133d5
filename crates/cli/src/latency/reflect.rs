//! `sonde latency reflect`: the far end of a latency run.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use sonde_engine::stop::Stop;
use sonde_latency::{hold_port, reflect_frames, reflect_kernel, EchoMatch};

use super::{open_frames, Path};
use crate::say;

#[derive(Args)]
pub struct ReflectArgs {
    /// The lab whose network namespace the reflector runs in (where its targets live). It
    /// answers there on the lab's interface, for every address the lab owns; with the lab's
    /// --target-cpus it runs on the lab's CPU.
    #[arg(long)]
    lab: Option<String>,
    /// How datagrams are read and echoed: kernel (a UDP socket), ring (AF_PACKET rings), xdp
    /// (AF_XDP).
    #[arg(long, value_enum, default_value = "ring")]
    backend: Path,
    /// UDP port to echo.
    #[arg(short, long, default_value_t = 7007)]
    port: u16,
    /// Only datagrams to this address (xdp: default the interface's address; others: any).
    /// Needed outside a lab in the host's own network namespace, where the reflector answers
    /// on the host's interface.
    #[arg(long)]
    addr: Option<Ipv4Addr>,
    /// Interface for ring and xdp (default: the lab's).
    #[arg(short = 'i', long)]
    iface: Option<String>,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long, allow_negative_numbers = true, value_parser = crate::runargs::seconds_value)]
    duration: Option<f64>,
    /// Print nothing but errors.
    #[arg(short, long)]
    quiet: bool,
}

pub fn run(args: ReflectArgs) -> anyhow::Result<()> {
    if args.port == 0 {
        bail!("-p 0 is not a port: give the UDP port to echo, e.g. -p 7007");
    }
    let until = match args.duration {
        Some(s) if !(s > 0.0 && s.is_finite()) => {
            bail!("--duration {s} is not a number of seconds above 0")
        }
        Some(s) => Some(Instant::now() + Duration::from_secs_f64(s)),
        None => None,
    };
    let lab = args.lab.as_deref().map(sonde_lab::status).transpose()?;
    if lab.is_none() {
        check_outside_lab(&args)?;
    }
    if let Some(lab) = &lab {
        sonde_lab::enter_net_ns(&lab.name)?;
        if let Some(&cpu) = lab.target_cpus.as_deref().and_then(|c| c.first()) {
            sonde_engine::plan::pin_to_cpu(cpu);
        }
    }
    let stop = Stop::on_signals()?;
    let iface = match (&args.iface, &lab) {
        (Some(i), _) => i.clone(),
        (None, Some(lab)) => lab.net_if.clone(),
        (None, None) if args.backend == Path::Kernel => String::new(),
        (None, None) => sonde_engine::host::default_route_iface()?,
    };
    let addr = match (args.addr, args.backend) {
        (Some(a), _) => Some(a),
        (None, Path::Xdp) => {
            sonde_lab::check_interface(&iface)?;
            Some(sonde_engine::host::iface_ipv4(&iface)?)
        }
        (None, _) => None,
    };
    let local = SocketAddrV4::new(addr.unwrap_or(Ipv4Addr::UNSPECIFIED), args.port);
    let where_ = format!(" in {}", sonde_lab::where_am_i());
    let count = if args.backend == Path::Kernel {
        note(
            &args,
            format!("echoing UDP {local} on a kernel socket{where_}"),
        );
        reflect_kernel(local, stop.flag(), until).with_context(|| format!("echoing on {local}"))?
    } else {
        sonde_lab::check_interface(&iface)?;
        let (mut tx, mut rxs) = open_frames(args.backend, &iface, local)?;
        // The kernel sees the datagrams too (unless AF_XDP took them): a socket holding the port
        // keeps it from answering each with ICMP port unreachable.
        let _held = hold_port(local)?;
        note(
            &args,
            format!(
                "echoing UDP {local} on {iface}{where_} ({}; {} receiver(s))",
                tx.describe(),
                rxs.len()
            ),
        );
        let matching = EchoMatch {
            port: args.port,
            addr,
        };
        reflect_frames(&mut tx, &mut rxs, matching, stop.flag(), until)
            .with_context(|| format!("echoing on {iface}"))?
    };
    let losses = if args.backend == Path::Kernel {
        String::new()
    } else {
        format!(
            "; {} dropped by the kernel before they were read, {} given up on a full transmit queue",
            count.rx_dropped, count.queue_full
        )
    };
    note(&args, format!("echoed {} datagrams{losses}", count.echoed));
    Ok(())
}

/// Without --lab, in the host's own network namespace, the reflector would answer on the host's
/// interface for any of its addresses: it does so only for an address given with --addr, and
/// says so. In another namespace (`ip netns exec`, `sonde lab exec`) it runs as asked.
fn check_outside_lab(args: &ReflectArgs) -> anyhow::Result<()> {
    if !in_host_namespace() {
        return Ok(());
    }
    let Some(addr) = args.addr else {
        bail!(
            "without --lab, sonde latency reflect would answer on this host's own interface (its root network namespace): give --lab NAME, or --addr A to answer only datagrams to the host's address A"
        );
    };
    note(
        args,
        format!("no --lab: answering on this host's own interface, datagrams to {addr} only"),
    );
    Ok(())
}

/// True when this thread is in the network namespace of process 1: the host's own (or the
/// container's), not a lab's. Where process 1's cannot be looked at (from inside `ip netns
/// exec`, the kernel may refuse), a namespace named in /run/netns is not the host's; anything
/// else that cannot be told counts as the host's, the side that asks for more.
fn in_host_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |m: std::fs::Metadata| (m.dev(), m.ino());
    let Ok(me) = std::fs::metadata("/proc/thread-self/ns/net").map(id) else {
        return true;
    };
    if let Ok(init) = std::fs::metadata("/proc/1/ns/net").map(id) {
        return me == init;
    }
    let named = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten();
    !named
        .filter_map(|entry| std::fs::metadata(entry.path()).ok())
        .any(|m| id(m) == me)
}

fn note(args: &ReflectArgs, text: String) {
    if !args.quiet {
        say(format!("sonde latency reflect: {text}"));
    }
}
