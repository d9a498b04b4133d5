//! Batched packet I/O.
//!
//! Takes frames the caller writes in place, or an interface and a filter to receive with; gives
//! batches of received frames with their metadata and drop counts. Uses sonde-meter (stage clocks)
//! and sonde-bpf (the eBPF it loads for tcpdump expressions), with xsk-rs (AF_XDP), libbpf-sys
//! (loading programs) and pcap (libpcap).
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
//! Receiving is the mirror image: [`FrameRx::rx_batch`] hands over what one receiver holds,
//! [`rx_many`] serves several (one per queue) from one thread without starving any, and
//! [`AnyRx::take_drop_counts`] says what the kernel dropped and why. For `xdp`, sonde's own XDP
//! program decides what is received at all ([`FilterSpec`]), or a tcpdump expression translated
//! to eBPF does ([`cbpf_xdp`], [`AnyRx::open_xdp_cbpf`]); [`queue_count`] says how many queues
//! (so AF_XDP sockets) an interface has.
//!
//! [`NfQueue`] is the other way in, for `sonde intercept stack`: the host's own packets from
//! an NFQUEUE rule, decided in batches (one `recvmmsg` and one `sendmsg` per batch).
//!
//! Every socket this crate opens is close-on-exec (also those libxdp and libpcap open without
//! it), so a child process never holds one, or an AF_XDP socket's queue. (libpcap 1.10 also
//! opens an eventfd without it, out of the pcap crate's reach; it holds nothing.)
//!
//! All `unsafe` code of sonde lives in this crate; each block carries a `// SAFETY:` line.

pub mod cbpf_xdp;
pub mod filter;
mod iface;
mod libbpf;
mod libpcap;
mod many;
pub mod mem;
mod mmsg;
pub mod nfqueue;
pub mod nfqueue_msg;
mod packet_socket;
mod ring;
mod ring_frames;
mod sendto;
#[cfg(test)]
mod test_support;
pub mod tun;
mod wake;
pub mod xdp;
mod xdp_bridge;
mod xdp_filter;

use std::fmt;
use std::io;
use std::ops::AddAssign;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::time::Duration;

pub use iface::{queue_count, queue_counts, LinkCounters, LinkDrops, QueueCounts};
pub use many::{rx_many, rx_many_meta, rx_many_meta_or_wake, rx_many_stamped, RxMeta};
pub use nfqueue::{
    queue_counters, BatchStats, NfQueue, NfVerdict, NfqConfig, QueueCounters, QueuedPacket,
    SkipCounts,
};
pub use packet_socket::{poll_any, poll_any_precise};
pub use ring::{CaptureRing, RingRx, RingTx, RxPacket};
pub use wake::Wake;
pub use xdp::XdpMode;
pub use xdp_bridge::{detach_bridge_program, XdpBridge, BRIDGE_PROGRAM};
pub use xdp_filter::{FilterSpec, TcpTake};

/// Largest frame any backend accepts (a full Ethernet frame without FCS).
pub const MAX_FRAME: usize = 1514;

/// The CPU's cycle counter, for the stage clock of `sonde profile`
/// (`sonde_meter::stages::enable`): on x86-64 the TSC, read in about 40 cycles; elsewhere none
/// (the stage clock then uses the monotonic clock).
pub fn cycle_counter() -> Option<fn() -> u64> {
    #[cfg(target_arch = "x86_64")]
    {
        fn tsc() -> u64 {
            // SAFETY: RDTSC only reads a register; every x86-64 CPU has it.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        Some(tsc)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Batch transmit: frames are written straight into the backend's buffers.
pub trait FrameTx {
    /// Builds up to `count` frames in place and hands them to the kernel.
    ///
    /// `fill(i, buf)` writes frame `i` (0-based within this batch) into `buf`, which is exactly
    /// [`MAX_FRAME`] bytes long, and returns the frame's length. A length beyond `buf` is clamped
    /// to it: the frame sent is then the whole buffer, and nothing past it is ever read. `fill`
    /// is called exactly once for each accepted frame, in order; the return value says how many
    /// were accepted (fewer than `count` when the ring is full: call again).
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
    /// first one. Returns how many frames were passed to `on_frame`. A zero `timeout` never
    /// waits (AF_XDP, `ring` and `mem` then make no system call at all). To serve several
    /// receivers from one thread, use [`rx_many`].
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        on_frame: F,
    ) -> io::Result<usize>;
}

/// What the kernel says of a received frame's checksums. Only AF_PACKET rings say anything
/// (`tp_status`); every other backend hands frames over as [`RxChecksum::Unknown`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxChecksum {
    /// Nothing said: the checksums are whatever arrived, and can be verified.
    #[default]
    Unknown,
    /// `TP_STATUS_CSUM_VALID`: the receiving device says it checked them. A claim, not a
    /// proof (a driver may assert it for frames it never checked), so a receiver that cares
    /// still verifies.
    Valid,
    /// `TP_STATUS_CSUMNOTREADY`: the frame was built on this host, or by a veth peer, with its
    /// checksum left for transmit offload to finish: the checksum field holds only the
    /// pseudo-header sum, so the frame cannot be verified, and it never crossed a wire that
    /// could corrupt it.
    Partial,
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

#[cfg(test)]
impl AnyTx {
    fn raw_fd(&self) -> RawFd {
        match self {
            AnyTx::Xdp(t) => t.raw_fd(),
            AnyTx::Ring(t) => t.raw_fd(),
            AnyTx::Mmsg(t) => t.raw_fd(),
            AnyTx::Sendto(t) => t.raw_fd(),
            AnyTx::Pcap(t) => t.raw_fd(),
            AnyTx::Mem(t) => t.raw_fd(),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            AnyTx::Xdp(_) => "xdp",
            AnyTx::Ring(_) => "ring",
            AnyTx::Mmsg(_) => "mmsg",
            AnyTx::Sendto(_) => "sendto",
            AnyTx::Pcap(_) => "pcap",
            AnyTx::Mem(_) => "mem",
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
    RingFrames(ring_frames::RingFrameRx),
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

    /// Opens an AF_PACKET receive ring that hands over each frame as soon as the kernel has
    /// copied it (TPACKET_V2, one status word per frame), for round-trip measurements: the
    /// `ring` backend's TPACKET_V3 blocks wait up to 2 ms for a partly filled block. Filter it
    /// with [`AnyRx::set_filter`].
    pub fn open_per_frame(cfg: &IoConfig) -> anyhow::Result<AnyRx> {
        Ok(AnyRx::RingFrames(ring_frames::RingFrameRx::open(cfg)?))
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
    /// Opens an AF_XDP receive queue on `cfg.queue` that gets only the frames the classic BPF
    /// `program` (a tcpdump expression compiled by [`filter::compile`]) matches, judged in XDP
    /// before any copy to user space; the rest go on to the OS stack. See
    /// [`xdp::XdpRx::open_cbpf`]: an error holding a [`cbpf_xdp::Unsupported`] means the
    /// expression cannot run in XDP (filter in user space instead).
    pub fn open_xdp_cbpf(cfg: &IoConfig, program: &[libc::sock_filter]) -> anyhow::Result<AnyRx> {
        Ok(AnyRx::Xdp(Box::new(xdp::XdpRx::open_cbpf(cfg, program)?)))
    }

    /// A short description of how the queue was opened (e.g. AF_XDP mode), for summaries.
    pub fn describe(&self) -> String {
        match self {
            AnyRx::Xdp(r) => r.describe(),
            AnyRx::Ring(_) => "AF_PACKET TPACKET_V3 rx ring".into(),
            AnyRx::RingFrames(_) => "AF_PACKET TPACKET_V2 rx ring (per frame)".into(),
            AnyRx::Mmsg(_) => "AF_PACKET recvmmsg".into(),
            AnyRx::Pcap(_) => "libpcap".into(),
            AnyRx::Mem(_) => "in-memory queue".into(),
        }
    }

    /// How many frames the kernel dropped for this receiver since the last call, in total
    /// ([`RxDrops::total`] of [`AnyRx::take_drop_counts`], which this resets too).
    pub fn take_drops(&mut self) -> u64 {
        self.take_drop_counts().total()
    }

    /// What the kernel dropped for this receiver since the last call, by cause: AF_XDP from
    /// `XDP_STATISTICS`, AF_PACKET (`ring`, `mmsg`) from `PACKET_STATISTICS`, libpcap from
    /// its statistics; zeros where the backend cannot tell (`mem`). One system call: call it
    /// once per status interval, not per batch.
    pub fn take_drop_counts(&mut self) -> RxDrops {
        let socket_full = |fd| RxDrops {
            ring_full: packet_socket::take_drops(fd),
            ..RxDrops::default()
        };
        match self {
            AnyRx::Xdp(r) => r.take_drops(),
            AnyRx::Ring(r) => socket_full(r.raw_fd()),
            AnyRx::RingFrames(r) => socket_full(r.raw_fd()),
            AnyRx::Mmsg(r) => socket_full(r.raw_fd()),
            AnyRx::Pcap(r) => r.take_drops(),
            AnyRx::Mem(_) => RxDrops::default(),
        }
    }

    /// Whether every frame comes with the kernel's arrival time ([`RxMeta::stamp_ns`]): a
    /// packet ring's frames, and AF_XDP's behind a reply filter that stamps arrivals (a frame
    /// the filter could not grow comes without). A reader may then read frames late, in
    /// batches, and still date them right.
    pub fn stamps_arrivals(&self) -> bool {
        match self {
            AnyRx::Ring(_) => true,
            AnyRx::Xdp(r) => r.stamps_arrivals(),
            _ => false,
        }
    }

    /// The descriptor `poll(2)` reports readable while frames wait for this receiver (the
    /// AF_XDP or packet socket, libpcap's descriptor, the in-memory queue's eventfd). It stays
    /// owned by the receiver. See [`rx_many`], which waits on several at once.
    pub fn raw_fd(&self) -> RawFd {
        match self {
            AnyRx::Xdp(r) => r.raw_fd(),
            AnyRx::Ring(r) => r.raw_fd(),
            AnyRx::RingFrames(r) => r.raw_fd(),
            AnyRx::Mmsg(r) => r.raw_fd(),
            AnyRx::Pcap(r) => r.raw_fd(),
            AnyRx::Mem(r) => r.raw_fd(),
        }
    }

    /// Lets only frames matching the tcpdump expression `expr` through, filtered in the kernel.
    /// An AF_XDP receiver cannot take an expression afterwards: open it with
    /// [`AnyRx::open_filtered`] or [`AnyRx::open_xdp_cbpf`].
    pub fn set_filter(&mut self, expr: &str) -> anyhow::Result<()> {
        match self {
            AnyRx::Ring(r) => filter::attach(r.raw_fd(), &filter::compile(expr)?),
            AnyRx::RingFrames(r) => filter::attach(r.raw_fd(), &filter::compile(expr)?),
            AnyRx::Mmsg(r) => filter::attach(r.raw_fd(), &filter::compile(expr)?),
            AnyRx::Pcap(r) => r.set_filter(expr),
            AnyRx::Xdp(_) => anyhow::bail!(
                "an AF_XDP receiver is filtered by the XDP program attached when it opens: open it with AnyRx::open_filtered or AnyRx::open_xdp_cbpf, not set_filter"
            ),
            AnyRx::Mem(_) => Ok(()),
        }
    }
}

/// Frames the kernel dropped for a receiver, by cause (see [`AnyRx::take_drop_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// The receiver did not keep up: its ring or socket buffer was full. AF_XDP: the RX ring
    /// (`rx_ring_full`); AF_PACKET and libpcap: the socket's ring or buffer (`tp_drops`).
    pub ring_full: u64,
    /// AF_XDP `rx_dropped`: the kernel had no free UMEM frame to copy the frame into (the fill
    /// ring was empty: frames were handed back too slowly), or the frame was larger than a UMEM
    /// frame.
    pub no_buffer: u64,
    /// AF_XDP `rx_invalid_descs`: frames dropped for an invalid descriptor (a bug, if ever).
    pub invalid: u64,
    /// AF_XDP `rx_fill_ring_empty_descs`: how often the kernel found the fill ring empty. A
    /// cause, not a count of lost frames, and not part of [`RxDrops::total`]: in copy mode each
    /// is a frame also counted in `no_buffer`; in zero-copy mode the driver left frames on the
    /// NIC, which counts what it drops in its own statistics (`ethtool -S`).
    pub fill_ring_empty: u64,
}

impl RxDrops {
    /// Frames lost: `ring_full + no_buffer + invalid`.
    pub fn total(&self) -> u64 {
        self.ring_full + self.no_buffer + self.invalid
    }

    /// What was added to cumulative counters since `earlier` (counters never go back; a reset
    /// socket counts as zero).
    pub(crate) fn since(&self, earlier: &RxDrops) -> RxDrops {
        RxDrops {
            ring_full: self.ring_full.saturating_sub(earlier.ring_full),
            no_buffer: self.no_buffer.saturating_sub(earlier.no_buffer),
            invalid: self.invalid.saturating_sub(earlier.invalid),
            fill_ring_empty: self.fill_ring_empty.saturating_sub(earlier.fill_ring_empty),
        }
    }
}

impl AddAssign for RxDrops {
    fn add_assign(&mut self, other: RxDrops) {
        self.ring_full += other.ring_full;
        self.no_buffer += other.no_buffer;
        self.invalid += other.invalid;
        self.fill_ring_empty += other.fill_ring_empty;
    }
}

impl fmt::Display for RxDrops {
    /// E.g. "12 (ring full 10, no UMEM frame 2)": the total, then each non-zero cause.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.total())?;
        let causes = [
            ("ring full", self.ring_full),
            ("no UMEM frame", self.no_buffer),
            ("invalid descriptor", self.invalid),
            ("fill ring found empty", self.fill_ring_empty),
        ];
        let mut sep = " (";
        for (what, n) in causes.into_iter().filter(|&(_, n)| n > 0) {
            write!(f, "{sep}{what} {n}")?;
            sep = ", ";
        }
        if sep == ", " {
            f.write_str(")")?;
        }
        Ok(())
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
            AnyRx::RingFrames(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Mmsg(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Pcap(r) => r.rx_batch(max, timeout, on_frame),
            AnyRx::Mem(r) => r.rx_batch(max, timeout, on_frame),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::test_support::in_private_netns;

    /// IEEE 802 local experimental ethertype: no protocol stack looks at these frames.
    const EXPERIMENTAL: u16 = 0x88b5;

    /// Fills `buf` with a frame of the experimental ethertype whose payload counts up from
    /// `seed`.
    fn pattern(buf: &mut [u8], seed: u8) {
        buf[..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb]);
        buf[12..14].copy_from_slice(&EXPERIMENTAL.to_be_bytes());
        for (i, b) in buf[14..].iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
    }

    /// Lengths a careless `fill` returns: one byte too many, and absurdly many.
    const OVERLONG: [usize; 2] = [MAX_FRAME + 1, usize::MAX];

    /// Sends one frame per length of OVERLONG, numbered from `seed`.
    fn send_overlong(tx: &mut impl FrameTx, seed: u8) {
        let mut sent = 0;
        while sent < OVERLONG.len() {
            sent += tx
                .tx_batch(OVERLONG.len() - sent, |i, buf| {
                    assert_eq!(buf.len(), MAX_FRAME, "fill gets MAX_FRAME bytes");
                    pattern(buf, seed + (sent + i) as u8);
                    OVERLONG[sent + i]
                })
                .expect("an overlong fill length is clamped, not an error");
        }
        tx.flush().unwrap();
    }

    /// Every frame must be exactly the MAX_FRAME bytes `fill` wrote, nothing past them.
    fn assert_clamped(frames: &[Vec<u8>], seed: u8, what: &str) {
        assert_eq!(frames.len(), OVERLONG.len(), "{what}: frames received");
        for (i, frame) in frames.iter().enumerate() {
            let mut want = vec![0; MAX_FRAME];
            pattern(&mut want, seed + i as u8);
            assert_eq!(frame.len(), MAX_FRAME, "{what}: frame {i}'s length");
            assert!(frame == &want, "{what}: frame {i}'s bytes differ");
        }
    }

    #[test]
    fn every_backend_descriptor_closes_on_exec() {
        // A child process started by any thread would otherwise hold the sockets (an AF_XDP
        // socket's queue stays busy until the child exits).
        in_private_netns(|| {
            let mut cfg = IoConfig::new("lo");
            cfg.xdp_mode = XdpMode::Generic;
            cfg.ring_frames = 64;
            let spec = FilterSpec {
                ipv4: Some(test_support::SCAN4),
                ipv6: None,
                tcp: TcpTake::All,
                udp: false,
                icmp: false,
                icmp6: false,
                ports: (61000, 65535),
                echo_id: None,
                spare_host_sockets: true,
                stamp_arrivals: false,
            };
            // Every backend open at once (AF_XDP as a pair: one socket per queue).
            let mut open: Vec<(AnyTx, AnyRx)> = BackendKind::NETWORK
                .into_iter()
                .filter(|&kind| kind != BackendKind::Xdp)
                .map(|kind| {
                    let tx = AnyTx::open(kind, &cfg).unwrap();
                    (tx, AnyRx::open(kind, &cfg).unwrap())
                })
                .collect();
            open.push(open_xdp_pair(&cfg, &spec).unwrap());
            let mem = mem::pair(4);
            let mut fds = vec![("mem", mem.0.raw_fd()), ("mem", mem.1.raw_fd())];
            for (tx, rx) in &open {
                fds.push((tx.kind_name(), tx.raw_fd()));
                fds.push((tx.kind_name(), rx.raw_fd()));
            }
            for (kind, fd) in fds {
                // SAFETY: F_GETFD takes and returns plain integers.
                let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
                assert!(flags >= 0, "{kind}: fd {fd} is not open");
                assert!(
                    flags & libc::FD_CLOEXEC != 0,
                    "{kind}: fd {fd} is inherited by children"
                );
            }
            drop((open, mem));
        });
    }

    #[test]
    fn every_backend_clamps_a_fill_length_beyond_the_buffer() {
        let (mut a, mut b) = mem::pair(8);
        send_overlong(&mut a, 0);
        let mut frames = Vec::new();
        b.rx_batch(8, Duration::ZERO, |f| frames.push(f.to_vec()))
            .unwrap();
        assert_clamped(&frames, 0, "mem");

        in_private_netns(|| {
            let mut cfg = IoConfig::new("lo");
            cfg.xdp_mode = XdpMode::Generic;
            cfg.ring_frames = 64;
            // A ring receiver reports each frame's whole length (up to 2 KiB here), so a frame
            // sent longer than MAX_FRAME would show.
            let mut rx = AnyRx::open(BackendKind::Ring, &cfg).unwrap();
            rx.set_filter(&format!("ether proto {EXPERIMENTAL}"))
                .unwrap();
            for (k, kind) in BackendKind::NETWORK.into_iter().enumerate() {
                let seed = 16 * k as u8;
                let mut tx = AnyTx::open(kind, &cfg).unwrap();
                send_overlong(&mut tx, seed);
                let mut frames = Vec::new();
                let end = Instant::now() + Duration::from_secs(3);
                while frames.len() < OVERLONG.len() && Instant::now() < end {
                    rx.rx_batch(8, Duration::from_millis(50), |f| frames.push(f.to_vec()))
                        .unwrap();
                }
                assert_clamped(&frames, seed, kind.name());
            }
        });
    }

    #[test]
    fn backend_names_round_trip() {
        for k in BackendKind::ALL {
            assert_eq!(k.name().parse::<BackendKind>().unwrap(), k);
        }
        let err = "dpdk".parse::<BackendKind>().unwrap_err();
        assert!(err.contains("dpdk") && err.contains("xdp"), "{err}");
    }
}
