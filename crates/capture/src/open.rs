//! Opening a live capture's sources: one per capture thread, for the backend asked for, with
//! the fallbacks said in one line on stderr (an expression the XDP translation cannot express,
//! or an interface that is not Ethernet, is captured on the ring instead).

use anyhow::bail;
use sonde_io::{AnyRx, IoConfig};

use crate::source::{self, Source};

/// Where a live capture reads packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Backend {
    /// AF_PACKET TPACKET_V3 ring; the kernel runs the filter.
    Ring,
    /// AF_XDP behind sonde's XDP translation of the filter (takes matches off the host stack).
    Xdp,
    /// libpcap, as tcpdump uses it.
    Pcap,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ring => "ring",
            Backend::Xdp => "xdp",
            Backend::Pcap => "pcap",
        }
    }
}

/// The sources asked for.
pub struct Wanted {
    pub backend: Backend,
    /// Capture threads (xdp: no more than the interface's queues).
    pub threads: usize,
    /// Each ring's (or libpcap's) buffer.
    pub ring_bytes: usize,
    /// libpcap's snap length (rings and XDP take whole frames and cut in the writer).
    pub snaplen: u32,
}

/// What the interface's frames start with, as libpcap says (its DLT).
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub dlt: i32,
}

impl Link {
    /// The link of `iface`, if `backend` can capture it: libpcap captures any; sonde's ring
    /// reads frames as the kernel hands a raw packet socket, so Ethernet or, on a TUN device,
    /// the IP header (libpcap's RAW); for others libpcap would take a cooked view sonde does
    /// not reproduce.
    pub fn of(iface: &str, dlt: i32, backend: Backend) -> anyhow::Result<Link> {
        use sonde_io::filter::{DLT_ETHERNET, DLT_RAW};
        if backend != Backend::Pcap && dlt != DLT_ETHERNET && dlt != DLT_RAW {
            bail!(
                "{iface} has link type {} ({}), which --backend {} does not capture: use --backend pcap",
                dlt_name(dlt),
                sonde_io::filter::linktype_of_dlt(dlt),
                backend.name()
            );
        }
        Ok(Link { dlt })
    }

    fn is_ethernet(self) -> bool {
        self.dlt == sonde_io::filter::DLT_ETHERNET
    }
}

fn dlt_name(dlt: i32) -> String {
    sonde_io::filter::dlt_name(dlt)
}

/// One source per thread. `xdp` opens one AF_XDP socket per queue of the interface and shares
/// them out over the threads (no more threads than queues); an expression the XDP translation
/// cannot express, or an interface that is not Ethernet, falls back to `ring`, said in one
/// line.
///
/// Gives the sources, the backend they use and, in words, where the filter runs.
pub fn open_sources(
    wanted: &Wanted,
    iface: &str,
    expr: &str,
    program: &[libc::sock_filter],
    link: Link,
) -> anyhow::Result<(Vec<Source>, Backend, String)> {
    let (ring_bytes, threads) = (wanted.ring_bytes, wanted.threads);
    match wanted.backend {
        Backend::Pcap => {
            if threads > 1 {
                bail!("--backend pcap captures with one thread (libpcap has no fanout here)");
            }
            let source = source::open_pcap(iface, expr, wanted.snaplen, ring_bytes)?;
            Ok((
                vec![source],
                Backend::Pcap,
                "libpcap (kernel classic BPF)".into(),
            ))
        }
        Backend::Xdp if !link.is_ethernet() => {
            eprintln!(
                "sonde: {iface} is not Ethernet (link type {}): XDP capture reads Ethernet frames; capturing with --backend ring, filtered by the kernel's classic BPF",
                dlt_name(link.dlt)
            );
            open_rings(iface, program, threads, ring_bytes)
        }
        Backend::Xdp => match open_xdp(iface, program, threads) {
            Ok(sources) => Ok((
                sources,
                Backend::Xdp,
                "XDP translation (before the copy)".into(),
            )),
            Err(XdpError::Unsupported(why)) => {
                eprintln!("sonde: {why}; capturing with --backend ring, filtered by the kernel's classic BPF");
                open_rings(iface, program, threads, ring_bytes)
            }
            Err(XdpError::Other(e)) => Err(e),
        },
        Backend::Ring => open_rings(iface, program, threads, ring_bytes),
    }
}

fn open_rings(
    iface: &str,
    program: &[libc::sock_filter],
    threads: usize,
    ring_bytes: usize,
) -> anyhow::Result<(Vec<Source>, Backend, String)> {
    // A fanout group id unique to this process (the kernel's are per network namespace).
    let group = (threads > 1).then(|| std::process::id() as u16);
    let sources = (0..threads)
        .map(|_| source::open_ring(iface, program, ring_bytes, group))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((
        sources,
        Backend::Ring,
        "kernel classic BPF on the packet socket (JIT)".into(),
    ))
}

enum XdpError {
    Unsupported(String),
    Other(anyhow::Error),
}

fn open_xdp(
    iface: &str,
    program: &[libc::sock_filter],
    threads: usize,
) -> Result<Vec<Source>, XdpError> {
    if sonde_io::cbpf_xdp::reads_vlan_tag(program) && sonde_io::cbpf_xdp::may_hide_vlan_tags(iface)
    {
        return Err(XdpError::Unsupported(format!(
            "the expression reads VLAN tags, which {iface} may take off before XDP sees them (rx-vlan-offload on; ethtool -K {iface} rxvlan off lets XDP see them)"
        )));
    }
    let queues = sonde_io::queue_count(iface).map_err(XdpError::Other)? as usize;
    let threads = threads.min(queues);
    let mut per_thread: Vec<Vec<AnyRx>> = (0..threads).map(|_| Vec::new()).collect();
    for queue in 0..queues {
        let mut cfg = IoConfig::new(iface);
        cfg.queue = queue as u32;
        cfg.batch = 256;
        let rx =
            AnyRx::open_xdp_cbpf(&cfg, program).map_err(|e| match e
                .downcast_ref::<sonde_io::cbpf_xdp::Unsupported>()
            {
                Some(why) => XdpError::Unsupported(why.to_string()),
                None => XdpError::Other(e),
            })?;
        per_thread[queue % threads].push(rx);
    }
    Ok(per_thread.into_iter().map(Source::Xdp).collect())
}
