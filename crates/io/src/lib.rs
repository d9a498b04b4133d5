//! Batched packet I/O.
//!
//! Every backend hands the kernel *batches* of frames that the caller builds in place, in the
//! backend's own buffers (ring slots, UMEM frames, or pre-allocated message buffers), so the
//! per-frame user work is only what the caller's `fill` closure does. The backends differ in how
//! many system calls and copies one batch costs:
//!
//! | backend  | transmit path                                           | syscalls per batch |
//! |----------|---------------------------------------------------------|--------------------|
//! | `xdp`    | AF_XDP: descriptors into a shared TX ring, UMEM frames  | one kick per ≤ budget frames |
//! | `ring`   | AF_PACKET TPACKET_V3 TX ring, `PACKET_QDISC_BYPASS`     | one              |
//! | `mmsg`   | raw AF_PACKET socket, `sendmmsg`                        | one              |
//! | `sendto` | raw AF_PACKET socket, one `sendto` per frame            | one per frame    |
//! | `pcap`   | libpcap `pcap_sendpacket`, one call per frame           | one per frame    |
//! | `mem`    | in-process queue, for tests                             | none             |
//!
//! All `unsafe` code of sonde lives in this crate; each block carries a `// SAFETY:` line.

pub mod filter;
mod libpcap;
pub mod mem;
mod mmsg;
mod packet_socket;
mod ring;
mod sendto;
pub mod xdp;
mod xdp_filter;

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

pub use xdp::XdpMode;
pub use xdp_filter::{FilterSpec, TcpTake};

/// Largest frame any backend accepts (a full Ethernet frame without FCS).
pub const MAX_FRAME: usize = 1514;

/// Batch transmit: frames are written straight into the backend's buffers.
pub trait FrameTx {
    /// Builds up to `count` frames in place and hands them to the kernel.
    ///
    /// `fill(i, buf)` writes frame `i` (0-based within this batch) into `buf`, which is at least
    /// [`MAX_FRAME`] bytes long, and returns the frame's length. `fill` is called exactly once for
    /// each accepted frame, in order; the return value says how many were accepted (fewer than
    /// `count` when the ring is full: call again).
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        fill: F,
    ) -> io::Result<usize>;

    /// Waits (bounded) until frames handed over have left user-visible queues.
    fn flush(&mut self) -> io::Result<()>;
}

/// Batch receive.
pub trait FrameRx {
    /// Calls `on_frame` for up to `max` received frames, waiting at most `timeout` for the
    /// first one. Returns how many frames were passed to `on_frame`.
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        on_frame: F,
    ) -> io::Result<usize>;
}

/// The backends, selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Xdp,
    Ring,
    Mmsg,
    Sendto,
    Pcap,
    Mem,
}

impl BackendKind {
    /// Every backend, fastest first.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Xdp,
        BackendKind::Ring,
        BackendKind::Mmsg,
        BackendKind::Sendto,
        BackendKind::Pcap,
        BackendKind::Mem,
    ];
    /// The backends that reach a real interface.
    pub const NETWORK: [BackendKind; 5] = [
        BackendKind::Xdp,
        BackendKind::Ring,
        BackendKind::Mmsg,
        BackendKind::Sendto,
        BackendKind::Pcap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Xdp => "xdp",
            BackendKind::Ring => "ring",
            BackendKind::Mmsg => "mmsg",
            BackendKind::Sendto => "sendto",
            BackendKind::Pcap => "pcap",
            BackendKind::Mem => "mem",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown backend \"{s}\": choose one of xdp, ring, mmsg, sendto, pcap, mem")
            })
    }
}

/// Where and how to open a backend.
#[derive(Clone, Debug)]
pub struct IoConfig {
    /// Interface name (ignored by `mem`).
    pub iface: String,
    /// Hardware/veth queue this opener serves (AF_XDP binds to it; others use it for fanout).
    pub queue: u32,
    /// Largest batch the caller will ask for; sizes pre-allocated buffers.
    pub batch: usize,
    /// Frames in the TX ring / UMEM (rounded to a power of two).
    pub ring_frames: u32,
    /// AF_XDP attach mode.
    pub xdp_mode: XdpMode,
}

impl IoConfig {
    pub fn new(iface: &str) -> Self {
        IoConfig {
            iface: iface.to_string(),
            queue: 0,
            batch: 64,
            ring_frames: 4096,
            xdp_mode: XdpMode::Auto,
        }
    }
}

/// A transmit queue of any backend; static dispatch per batch.
pub enum AnyTx {
    Xdp(Box<xdp::XdpTx>),
    Ring(ring::RingTx),
    Mmsg(mmsg::MmsgTx),
    Sendto(sendto::SendtoTx),
    Pcap(libpcap::PcapTx),
    Mem(mem::MemPort),
}

impl AnyTx {
    /// Opens a transmit queue of backend `kind` (`mem` opens a loop-back pair's sending end).
    pub fn open(kind: BackendKind, cfg: &IoConfig) -> anyhow::Result<AnyTx> {
        Ok(match kind {
            BackendKind::Xdp => AnyTx::Xdp(Box::new(xdp::XdpTx::open(cfg)?)),
            BackendKind::Ring => AnyTx::Ring(ring::RingTx::open(cfg)?),
            BackendKind::Mmsg => AnyTx::Mmsg(mmsg::MmsgTx::open(cfg)?),
            BackendKind::Sendto => AnyTx::Sendto(sendto::SendtoTx::open(cfg)?),
            BackendKind::Pcap => AnyTx::Pcap(libpcap::PcapTx::open(cfg)?),
            BackendKind::Mem => AnyTx::Mem(mem::pair(cfg.ring_frames as usize).0),
        })
    }

    /// A short description of how the queue was opened (e.g. AF_XDP mode), for summaries.
    pub fn describe(&self) -> String {
        match self {
            AnyTx::Xdp(x) => x.describe(),
            AnyTx::Ring(_) => "AF_PACKET TPACKET_V3 tx ring, qdisc bypass".into(),
            AnyTx::Mmsg(_) => "AF_PACKET sendmmsg".into(),
            AnyTx::Sendto(_) => "AF_PACKET sendto per frame".into(),
            AnyTx::Pcap(_) => "libpcap pcap_sendpacket per frame".into(),
            AnyTx::Mem(_) => "in-memory queue".into(),
        }
    }
}

impl FrameTx for AnyTx {
    #[inline]
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        fill: F,
    ) -> io::Result<usize> {
        match self {
            AnyTx::Xdp(t) => t.tx_batch(count, fill),
            AnyTx::Ring(t) => t.tx_batch(count, fill),
            AnyTx::Mmsg(t) => t.tx_batch(count, fill),
            AnyTx::Sendto(t) => t.tx_batch(count, fill),
            AnyTx::Pcap(t) => t.tx_batch(count, fill),
            AnyTx::Mem(t) => t.tx_batch(count, fill),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            AnyTx::Xdp(t) => t.flush(),
            AnyTx::Ring(t) => t.flush(),
            AnyTx::Mmsg(t) => t.flush(),
            AnyTx::Sendto(t) => t.flush(),
            AnyTx::Pcap(t) => t.flush(),
            AnyTx::Mem(t) => t.flush(),
        }
    }
}

/// One AF_XDP socket on `cfg.queue` that both transmits and receives, as a transmit queue and
/// a receive queue that may live in different threads; the receive queue gets only what `spec`
/// takes (sonde's XDP reply filter, as [`AnyRx::open_filtered`] opens for `xdp`). The kernel
/// allows one AF_XDP socket per queue, so a queue that transmits with `xdp` receives with `xdp`
/// only this way: opening both separately fails with "Device or resource busy".
pub fn open_xdp_pair(cfg: &IoConfig, spec: &FilterSpec) -> anyhow::Result<(AnyTx, AnyRx)> {
    let (tx, rx) = xdp::open_pair(cfg, spec)?;
    Ok((AnyTx::Xdp(Box::new(tx)), AnyRx::Xdp(Box::new(rx))))
}

/// A receive queue of any backend.
pub enum AnyRx {
    Xdp(Box<xdp::XdpRx>),
    Ring(ring::RingRx),
    Mmsg(mmsg::MmsgRx),
    Pcap(libpcap::PcapRx),
    Mem(mem::MemPort),
}

impl AnyRx {
    /// Opens a receive queue. `sendto` has no receive side of its own: it receives like `mmsg`
    /// (one `recvmmsg` per batch), the closest plain-socket path.
    pub fn open(kind: BackendKind, cfg: &IoConfig) -> anyhow::Result<AnyRx> {
        Ok(match kind {
            BackendKind::Xdp => AnyRx::Xdp(Box::new(xdp::XdpRx::open(cfg)?)),
            BackendKind::Ring => AnyRx::Ring(ring::RingRx::open(cfg)?),
            BackendKind::Mmsg | BackendKind::Sendto => AnyRx::Mmsg(mmsg::MmsgRx::open(cfg)?),
            BackendKind::Pcap => AnyRx::Pcap(libpcap::PcapRx::open(cfg)?),
            BackendKind::Mem => AnyRx::Mem(mem::pair(cfg.ring_frames as usize).1),
        })
    }

    /// Opens a receive queue that gets only the scan's replies, filtered in the kernel: for
    /// `xdp`, sonde's XDP reply filter takes what `spec` describes and passes every other frame
    /// to the OS stack; every other backend opens as [`AnyRx::open`] and attaches the tcpdump
    /// expression `expr` (which should describe the same frames) with [`AnyRx::set_filter`].
    /// An `xdp` receiver gets only the frames of `cfg.queue` (open one per queue, with the same
    /// `spec`; they share the interface's one program) and cannot share its queue with an `xdp`
    /// transmitter: see [`open_xdp_pair`].
    pub fn open_filtered(
        kind: BackendKind,
        cfg: &IoConfig,
        spec: &FilterSpec,
        expr: &str,
    ) -> anyhow::Result<AnyRx> {
        if kind == BackendKind::Xdp {
            return Ok(AnyRx::Xdp(Box::new(xdp::XdpRx::open_filtered(cfg, spec)?)));
        }
        let mut rx = Self::open(kind, cfg)?;
        rx.set_filter(expr)?;
        Ok(rx)
    }
}

impl AnyRx {
    /// A short description of how the queue was opened (e.g. AF_XDP mode), for summaries.
    pub fn describe(&self) -> String {
        match self {
            AnyRx::Xdp(r) => r.describe(),
            AnyRx::Ring(_) => "AF_PACKET TPACKET_V3 rx ring".into(),
            AnyRx::Mmsg(_) => "AF_PACKET recvmmsg".into(),
            AnyRx::Pcap(_) => "libpcap".into(),
            AnyRx::Mem(_) => "in-memory queue".into(),
        }
    }

    /// Frames the kernel dropped for this receiver since the last call (ring full, socket
    /// buffer full); 0 where the backend cannot tell.
    pub fn take_drops(&mut self) -> u64 {
        match self {
            AnyRx::Ring(r) => packet_socket::take_drops(r.raw_fd()),
            AnyRx::Mmsg(r) => packet_socket::take_drops(r.raw_fd()),
            _ => 0,
        }
    }

    /// Lets only frames matching the tcpdump expression `expr` through, filtered in the kernel.
    /// An AF_XDP receiver cannot take an expression: open it with [`AnyRx::open_filtered`].
    pub fn set_filter(&mut self, expr: &str) -> anyhow::Result<()> {
        match self {
            AnyRx::Ring(r) => filter::attach(r.raw_fd(), &filter::compile(expr)?),
            AnyRx::Mmsg(r) => filter::attach(r.raw_fd(), &filter::compile(expr)?),
            AnyRx::Pcap(r) => r.set_filter(expr),
            AnyRx::Xdp(_) => anyhow::bail!(
                "an AF_XDP receiver is filtered by sonde's XDP reply filter, which is attached when it opens: open it with AnyRx::open_filtered, not set_filter"
            ),
            AnyRx::Mem(_) => Ok(()),
        }
    }
}

impl FrameRx for AnyRx {
    #[inline]
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        on_frame: F,
    ) -> io::Result<usize> {
        match self {
            AnyRx::Xdp(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Ring(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Mmsg(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Pcap(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Mem(r) => r.rx_batch(max, timeout, on_frame),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_round_trip() {
        for k in BackendKind::ALL {
            assert_eq!(k.name().parse::<BackendKind>().unwrap(), k);
        }
        let err = "dpdk".parse::<BackendKind>().unwrap_err();
        assert!(err.contains("dpdk") && err.contains("xdp"), "{err}");
    }
}
