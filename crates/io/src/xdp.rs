//! AF_XDP through xsk-rs (libxdp): frames live in a UMEM shared with the kernel; transmitting is
//! writing a frame into the UMEM and posting its descriptor on the TX ring, then one wake-up
//! system call (only when the kernel asks for it: `XDP_USE_NEED_WAKEUP`).
//!
//! Opening tries zero-copy first and falls back to copy mode, and tries native (driver) XDP
//! before generic (SKB) mode, as the driver allows. Receiving uses either libxdp's default
//! program, which redirects every frame of the queue to the socket ([`XdpRx::open`]), sonde's
//! own reply filter, which redirects only the scan's replies and passes the rest to the OS stack
//! ([`XdpRx::open_filtered`], see `xdp_filter.rs`), or a tcpdump expression translated to eBPF,
//! which redirects what it matches and passes the rest ([`XdpRx::open_cbpf`]: sonde-bpf
//! writes it, `xdp_filter.rs` loads it).

use sonde_meter::stages::{self, Stage};
use std::ffi::CString;
use std::fmt;
use std::io;
use std::num::NonZeroU32;
use std::os::fd::{AsRawFd, RawFd};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::packet_socket::timeout_ms;
use crate::xdp_filter::{take_stamp, Attached, FilterSpec, XdpProgram};
use crate::{FrameRx, FrameTx, IoConfig, RxDrops, MAX_FRAME};

const FRAME_SIZE: u32 = 2048;
/// Linux ≥ 6.17 lets a copy-mode socket send more than 32 frames per wake-up
/// (`XDP_MAX_TX_SKB_BUDGET` in `<linux/if_xdp.h>`); older kernels refuse it and keep 32.
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;
/// Bound on wake-ups spent draining one batch in copy mode.
const MAX_KICKS_PER_BATCH: usize = 256;
/// Right after an AF_XDP socket closes its queue can be busy for a moment: the kernel frees the
/// queue only after an RCU grace period and a work-queue run, which on a loaded 2-vCPU VM once
/// took over a second (CI, 2026-11-23). Opening retries a busy queue this often, this long
/// apart, in all (not per attach mode tried).
const BUSY_RETRIES: u32 = 60;
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// How to attach: native (driver) XDP, generic (SKB) XDP, or native with fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    Auto,
    Native,
    Generic,
}

impl FromStr for XdpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(XdpMode::Auto),
            "native" | "drv" => Ok(XdpMode::Native),
            "generic" | "skb" => Ok(XdpMode::Generic),
            _ => Err(format!(
                "unknown XDP mode \"{s}\": choose auto, native or generic"
            )),
        }
    }
}

/// One way of binding a socket, tried in order until the kernel accepts one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    pub(crate) native: bool,
    pub(crate) zero_copy: bool,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.native { "native" } else { "generic" };
        let copy = if self.zero_copy { "zero-copy" } else { "copy" };
        write!(f, "{mode} XDP, {copy} mode")
    }
}

fn attempts(mode: XdpMode) -> Vec<Attempt> {
    let native = [
        Attempt {
            native: true,
            zero_copy: true,
        },
        Attempt {
            native: true,
            zero_copy: false,
        },
    ];
    let generic = [Attempt {
        native: false,
        zero_copy: false,
    }];
    match mode {
        XdpMode::Auto => native.into_iter().chain(generic).collect(),
        XdpMode::Native => native.to_vec(),
        XdpMode::Generic => generic.to_vec(),
    }
}

/// Which XDP program steers received frames to a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steering {
    /// None: a transmit-only socket; libxdp loads nothing and all traffic reaches the OS.
    None,
    /// libxdp loads its default program, which redirects every frame of the queue.
    Libxdp,
    /// sonde's own program (its reply filter or a capture expression), already attached
    /// natively or in generic mode; the socket binds in the matching mode (a generic-mode
    /// program needs a copy-mode socket).
    Own { native: bool },
}

pub(crate) fn queue_size(n: u32) -> QueueSize {
    QueueSize::new(n.next_power_of_two()).expect("a power of two is a valid queue size")
}

/// A socket's transmit side: the TX ring and the UMEM's completion ring.
struct TxRings {
    tx: TxQueue,
    comp: CompQueue,
}

/// A socket's receive side: the RX ring and the UMEM's fill ring.
struct RxRings {
    rx: RxQueue,
    fill: FillQueue,
}

/// An open AF_XDP socket with its UMEM and all four rings.
pub(crate) struct XskPort {
    umem: Umem,
    txr: TxRings,
    rxr: RxRings,
    frames: Vec<FrameDesc>,
    how: String,
}

impl XskPort {
    /// Opens a socket on `cfg.queue` with rings of `frames` entries and a UMEM of `frames`
    /// frames, or twice that with `both` (one half for each direction); `steering` says which
    /// program (if any) libxdp loads and, for sonde's own, which attach mode the socket must
    /// match.
    pub(crate) fn open(
        cfg: &IoConfig,
        frames: u32,
        both: bool,
        steering: Steering,
    ) -> anyhow::Result<XskPort> {
        crate::packet_socket::ifindex(&cfg.iface)?;
        let mode = match steering {
            Steering::Own { native: true } => XdpMode::Native,
            Steering::Own { native: false } => XdpMode::Generic,
            Steering::None | Steering::Libxdp => cfg.xdp_mode,
        };
        open_first_accepted(&[&cfg.iface], cfg.queue, mode, |attempt| {
            Self::try_open(cfg, frames, both, steering, attempt).map_err(|e| (0, e))
        })
    }

    fn try_open(
        cfg: &IoConfig,
        frames: u32,
        both: bool,
        steering: Steering,
        attempt: Attempt,
    ) -> io::Result<XskPort> {
        let ring = queue_size(frames);
        let count = ring.get() * if both { 2 } else { 1 };
        let (umem, descs) = new_umem(ring, count)?;
        // SAFETY: the UMEM is fresh and not shared, so the program-load/double-free caveat of
        // sharing does not apply.
        let (tx, rx, rings) =
            unsafe { bind_socket(&umem, &cfg.iface, cfg.queue, ring, steering, attempt)? };
        let (fill, comp) = rings.ok_or_else(|| io::Error::other("UMEM rings missing"))?;
        let budget = set_tx_budget(&tx, ring.get());
        let how = format!("AF_XDP, {attempt}{budget}");
        Ok(XskPort {
            umem,
            txr: TxRings { tx, comp },
            rxr: RxRings { rx, fill },
            frames: descs,
            how,
        })
    }

    /// The socket's descriptor (what an XSKMAP entry holds).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.rxr.rx.fd().as_raw_fd()
    }
}

/// Tries each way of binding that `mode` allows, in order (see [`attempts`]), until
/// `try_open` succeeds; a busy queue is retried for a while first. `try_open` binds sockets on
/// `ifaces` (all on `queue`) and says on which of them it failed, so the error names it: one
/// line, with what to do.
pub(crate) fn open_first_accepted<T>(
    ifaces: &[&str],
    queue: u32,
    mode: XdpMode,
    mut try_open: impl FnMut(Attempt) -> Result<T, (usize, io::Error)>,
) -> anyhow::Result<T> {
    let (mut last_err, mut failed_on, mut busy, mut busy_retries) = (String::new(), 0, false, 0);
    for attempt in attempts(mode) {
        loop {
            match try_open(attempt) {
                Ok(opened) => return Ok(opened),
                Err((side, e)) if e.raw_os_error() == Some(libc::EBUSY) => {
                    (last_err, failed_on, busy) = (format!("{attempt}: {e}"), side, true);
                    if busy_retries == BUSY_RETRIES {
                        break;
                    }
                    busy_retries += 1;
                    std::thread::sleep(BUSY_WAIT);
                }
                Err((side, e)) if e.raw_os_error() == Some(libc::EPERM) => bail!(
                    "AF_XDP on {}: permission denied: needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (run as root); or try --backend ring",
                    ifaces[side]
                ),
                Err((side, e)) => {
                    (last_err, failed_on, busy) = (format!("{attempt}: {e}"), side, false);
                    break;
                }
            }
        }
    }
    let iface = ifaces[failed_on];
    if busy {
        let waited = u64::from(busy_retries) * BUSY_WAIT.as_millis() as u64;
        return Err(crate::iface::busy_queue_error(iface, queue, waited));
    }
    if let Some(e) = crate::iface::missing_queue_error(iface, queue) {
        return Err(e);
    }
    Err(anyhow!(
        "the kernel refused an AF_XDP socket on {iface} queue {queue} ({last_err}); try --backend ring"
    ))
}

/// A UMEM of `count` frames whose fill and completion rings have `ring` entries, and the
/// descriptors of all its frames.
pub(crate) fn new_umem(ring: QueueSize, count: u32) -> io::Result<(Umem, Vec<FrameDesc>)> {
    let umem_cfg = UmemConfig::builder()
        .frame_size(FrameSize::new(FRAME_SIZE).map_err(|e| io::Error::other(e.to_string()))?)
        .fill_queue_size(ring)
        .comp_queue_size(ring)
        .build()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let count = NonZeroU32::new(count).ok_or_else(|| io::Error::other("a UMEM of no frames"))?;
    Umem::new(umem_cfg, count, false).map_err(|e| io::Error::other(e.to_string()))
}

/// A bound socket's TX and RX rings, and its UMEM rings when its (interface, queue) pair is new.
pub(crate) type BoundSocket = (TxQueue, RxQueue, Option<(FillQueue, CompQueue)>);

/// An AF_XDP socket on `iface` queue `queue`, over `umem`, bound as `attempt` says, with RX and
/// TX rings of `ring` entries, close-on-exec; `steering` as for [`XskPort::open`]. The fill and
/// completion rings come with it when this (interface, queue) pair is new to the UMEM.
///
/// # Safety
///
/// If `umem` already has a socket on this (interface, queue) pair, `steering` must not be
/// [`Steering::Libxdp`] (xsk-rs: libxdp would free its program twice).
pub(crate) unsafe fn bind_socket(
    umem: &Umem,
    iface: &str,
    queue: u32,
    ring: QueueSize,
    steering: Steering,
    attempt: Attempt,
) -> io::Result<BoundSocket> {
    let mut bind = BindFlags::XDP_USE_NEED_WAKEUP;
    bind |= if attempt.zero_copy {
        BindFlags::XDP_ZEROCOPY
    } else {
        BindFlags::XDP_COPY
    };
    let xdp_flags = if attempt.native {
        XdpFlags::XDP_FLAGS_DRV_MODE
    } else {
        XdpFlags::XDP_FLAGS_SKB_MODE
    };
    let mut libxdp = LibxdpFlags::empty();
    if steering != Steering::Libxdp {
        libxdp |= LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD;
    }
    let sock_cfg = SocketConfig::builder()
        .rx_queue_size(ring)
        .tx_queue_size(ring)
        .bind_flags(bind)
        .xdp_flags(xdp_flags)
        .libxdp_flags(libxdp)
        .build();
    let name = Interface::new(CString::new(iface).map_err(io::Error::other)?);
    // SAFETY: the caller promises that libxdp loads no program on a pair already bound.
    let (tx, rx, rings) =
        unsafe { Socket::new(sock_cfg, umem, &name, queue) }.map_err(socket_error)?;
    // libxdp opens the socket without SOCK_CLOEXEC: a child process started by any thread
    // would inherit it and keep the queue busy until it exits.
    crate::packet_socket::set_cloexec(tx.fd().as_raw_fd())?;
    Ok((tx, rx, rings))
}

/// xsk-rs reports errors as text plus an optional OS error; keep the errno for retry decisions.
fn socket_error(e: xsk_rs::socket::SocketCreateError) -> io::Error {
    let text = e.to_string();
    match std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>()) {
        Some(os) if os.raw_os_error().is_some() => {
            io::Error::from_raw_os_error(os.raw_os_error().unwrap_or(0))
        }
        _ => io::Error::other(text),
    }
}

/// Raises how many frames one copy-mode wake-up may send; returns a note for the summary.
pub(crate) fn set_tx_budget(tx: &TxQueue, frames: u32) -> &'static str {
    let fd = tx.fd().as_raw_fd();
    match crate::packet_socket::set_option(fd, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &frames) {
        Ok(()) => ", tx budget raised",
        Err(_) => "",
    }
}

/// The AF_XDP transmit queue.
pub struct XdpTx {
    umem: Umem,
    rings: TxRings,
    /// The receive rings of a transmit-only socket, unused but kept with it.
    _idle: Option<RxRings>,
    how: String,
    free: Vec<FrameDesc>,
    posted: Vec<FrameDesc>,
    completed: Vec<FrameDesc>,
    ring: u32,
}

impl XdpTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let port = XskPort::open(cfg, cfg.ring_frames, false, Steering::None)?;
        Ok(Self::new(
            port.umem,
            port.txr,
            Some(port.rxr),
            port.how,
            port.frames,
        ))
    }

    fn new(
        umem: Umem,
        rings: TxRings,
        idle: Option<RxRings>,
        how: String,
        free: Vec<FrameDesc>,
    ) -> Self {
        let ring = free.len() as u32;
        XdpTx {
            umem,
            rings,
            _idle: idle,
            how,
            posted: Vec::with_capacity(free.len()),
            completed: vec![FrameDesc::default(); free.len()],
            free,
            ring,
        }
    }

    pub fn describe(&self) -> String {
        self.how.clone()
    }

    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.rings.tx.fd().as_raw_fd()
    }

    /// Takes back the frames whose transmission the kernel has completed.
    fn reclaim(&mut self) {
        // SAFETY: `completed` holds descriptors of this socket's own UMEM.
        let n = unsafe { self.rings.comp.consume(&mut self.completed) };
        self.free.extend_from_slice(&self.completed[..n]);
    }

    /// Wakes the kernel until it has taken every posted descriptor off the TX ring (copy mode
    /// sends at most a budget of frames per wake-up), or until the bound is reached. The
    /// completion ring is as large as the UMEM, so it cannot fill up in between.
    fn kick(&mut self) -> io::Result<()> {
        for _ in 0..MAX_KICKS_PER_BATCH {
            if !self.rings.tx.needs_wakeup() || self.rings.tx.nb_free_exact() >= self.ring {
                break;
            }
            self.rings.tx.wakeup()?;
        }
        Ok(())
    }

    /// [`XdpTx::kick`] as one system-call stage for `sonde profile`: the wake-ups of a batch are
    /// timed together, so the clock's own cost does not slow the loop between them (slowed,
    /// it would find the ring drained sooner and wake the kernel less often).
    fn timed_kick(&mut self) -> io::Result<()> {
        stages::call(Stage::Enqueue, Stage::Kick, || self.kick())
    }

    /// The bare floor: posts descriptors of frames written once up front, with no per-frame
    /// work at all, until `count` frames have been handed over. This is what the ring itself
    /// allows; `blast` is measured against it.
    ///
    /// Completions of one TX queue come back in posting order, so the pre-built descriptors
    /// (lengths included: the completion ring does not carry them) are simply reused round-robin,
    /// with never more in flight than there are frames.
    pub fn post_prebuilt(&mut self, frame: &[u8], count: u64, batch: usize) -> io::Result<u64> {
        let len = frame.len().min(MAX_FRAME);
        let mut ring = std::mem::take(&mut self.free);
        for desc in ring.iter_mut() {
            // SAFETY: every free descriptor belongs to this UMEM and is not in any ring.
            let mut data = unsafe { self.umem.data_mut(desc) };
            let mut cursor = data.cursor();
            cursor.set_pos(0);
            io::Write::write_all(&mut cursor, &frame[..len])?;
        }
        let (frames, mut head, mut in_flight, mut sent) = (ring.len(), 0usize, 0usize, 0u64);
        while sent < count {
            // SAFETY: `completed` holds descriptors of this socket's own UMEM.
            in_flight -= unsafe { self.rings.comp.consume(&mut self.completed) };
            let n = (batch as u64)
                .min(count - sent)
                .min((frames - in_flight) as u64) as usize;
            let n = n.min(frames - head);
            // SAFETY: these frames are not in flight and still hold the pre-built frame.
            let produced = unsafe { self.rings.tx.produce(&ring[head..head + n]) };
            head = (head + produced) % frames;
            in_flight += produced;
            sent += produced as u64;
            self.kick()?;
        }
        while in_flight > 0 {
            self.rings.tx.wakeup()?;
            // SAFETY: as above.
            in_flight -= unsafe { self.rings.comp.consume(&mut self.completed) };
        }
        self.free = ring;
        Ok(sent)
    }
}

impl FrameTx for XdpTx {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        self.reclaim();
        stages::mark(Stage::Completion);
        let room = self.rings.tx.nb_free(count as u32) as usize;
        let n = count.min(self.free.len()).min(room);
        if n == 0 {
            self.timed_kick()?;
            return Ok(0);
        }
        for i in 0..n {
            let mut desc = self.free.pop().expect("n ≤ free.len()");
            {
                // SAFETY: the descriptor came off the free list: neither ring owns the frame.
                let mut data = unsafe { self.umem.data_mut(&mut desc) };
                data.cursor().set_pos(MAX_FRAME);
                // The UMEM frame is larger than what `fill` was given: clamp to that.
                let len = fill(i, data.contents_mut()).min(MAX_FRAME);
                data.cursor().set_pos(len);
            }
            self.posted.push(desc);
        }
        // SAFETY: the posted frames were just written and are owned by no ring.
        let produced = unsafe { self.rings.tx.produce(&self.posted) };
        debug_assert_eq!(produced, n, "nb_free promised room for the batch");
        self.posted.clear();
        self.timed_kick()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.free.len() < self.ring as usize && std::time::Instant::now() < deadline {
            self.rings.tx.wakeup()?;
            self.reclaim();
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// The AF_XDP receive queue: frames arrive through libxdp's redirect program (every frame of
/// the queue) or sonde's reply filter (only the scan's replies).
pub struct XdpRx {
    /// Declared first so the program leaves the interface before the socket closes.
    filter: Option<Arc<Attached>>,
    umem: Umem,
    rings: RxRings,
    /// The transmit rings of a receive-only socket, unused but kept with it.
    _idle: Option<TxRings>,
    how: String,
    received: Vec<FrameDesc>,
    /// The socket's drop counters (cumulative, as the kernel keeps them) when last read.
    drops_seen: RxDrops,
}

impl XdpRx {
    /// Receives every frame of `cfg.queue`, through libxdp's default program: the OS stack no
    /// longer sees that queue's traffic while the receiver is open.
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let port = XskPort::open(cfg, cfg.ring_frames, false, Steering::Libxdp)?;
        Self::new(
            port.umem,
            port.rxr,
            Some(port.txr),
            port.how,
            port.frames,
            None,
            &cfg.iface,
        )
    }

    /// Receives only what `spec` takes, through sonde's XDP reply filter; every other frame
    /// goes on to the OS stack. The program attaches natively first and in generic (SKB) mode
    /// if the driver refuses (as `cfg.xdp_mode` allows), and the socket binds in the mode that
    /// attached. An AF_XDP socket gets only the frames of its own queue: open one receiver per
    /// queue that replies can arrive on (with the same `spec`: they share the one program of
    /// the interface), or replies on the others go to the OS stack. The program is detached
    /// when the last receiver of the interface is dropped.
    ///
    /// The kernel allows one AF_XDP socket per queue: to transmit with AF_XDP on the same queue,
    /// use [`open_pair`] instead.
    pub fn open_filtered(cfg: &IoConfig, spec: &FilterSpec) -> anyhow::Result<Self> {
        Self::open_steered(cfg, &XdpProgram::reply(spec)?)
    }

    /// Receives only the frames that the classic BPF `program` (a tcpdump expression compiled
    /// for Ethernet, e.g. by [`crate::filter::compile`]) matches, run in XDP before any copy to
    /// user space; every other frame goes on to the OS stack untouched. The program is
    /// translated to eBPF ([`sonde_bpf::translate`]); one it cannot translate, or that
    /// the kernel's verifier refuses, is an error starting "this expression cannot run in XDP"
    /// (then filter in user space instead). Attach modes, queues and sharing as for
    /// [`XdpRx::open_filtered`]: open one receiver per queue, all with the same `program`.
    pub fn open_cbpf(cfg: &IoConfig, program: &[libc::sock_filter]) -> anyhow::Result<Self> {
        Self::open_steered(cfg, &XdpProgram::expression(program))
    }

    /// Receives what `program` steers to the socket of `cfg.queue`.
    fn open_steered(cfg: &IoConfig, program: &XdpProgram) -> anyhow::Result<Self> {
        let (port, filter) = open_filtered_port(cfg, program, false)?;
        let fd = port.raw_fd();
        let rx = Self::new(
            port.umem,
            port.rxr,
            Some(port.txr),
            port.how,
            port.frames,
            Some(filter),
            &cfg.iface,
        )?;
        rx.steer_here(cfg.queue, fd)?;
        Ok(rx)
    }

    /// How the receiver was opened (AF_XDP mode, which program), for summaries.
    pub fn describe(&self) -> String {
        self.how.clone()
    }

    /// Hands every UMEM frame given to the kernel for receiving.
    fn new(
        umem: Umem,
        mut rings: RxRings,
        idle: Option<TxRings>,
        how: String,
        frames: Vec<FrameDesc>,
        filter: Option<Arc<Attached>>,
        iface: &str,
    ) -> anyhow::Result<Self> {
        // SAFETY: all frames are fresh and owned by no ring; the fill ring is as large as the
        // number of frames given.
        let filled = unsafe { rings.fill.produce(&frames) };
        if filled != frames.len() {
            bail!(
                "AF_XDP fill ring on {iface} took {filled} of {} frames",
                frames.len()
            );
        }
        Ok(XdpRx {
            filter,
            umem,
            rings,
            _idle: idle,
            how,
            received: vec![FrameDesc::default(); frames.len()],
            drops_seen: RxDrops::default(),
        })
    }

    /// The socket's descriptor, readable while received frames wait in its RX ring.
    pub fn raw_fd(&self) -> RawFd {
        self.rings.rx.fd().as_raw_fd()
    }

    /// What the kernel dropped for this socket since the last call (`XDP_STATISTICS`); zeros if
    /// it cannot tell.
    pub fn take_drops(&mut self) -> RxDrops {
        let Ok(stats) = self.rings.rx.fd().xdp_statistics() else {
            return RxDrops::default();
        };
        let now = RxDrops {
            ring_full: stats.rx_ring_full(),
            no_buffer: stats.rx_dropped(),
            invalid: stats.rx_invalid_descs(),
            fill_ring_empty: stats.rx_fill_ring_empty_descs(),
        };
        let new = now.since(&self.drops_seen);
        self.drops_seen = now;
        new
    }

    /// Whether the filter this receiver is behind stamps each frame's arrival.
    pub fn stamps_arrivals(&self) -> bool {
        self.filter.as_ref().is_some_and(|f| f.stamp_mark.is_some())
    }

    /// The reply filter this receiver is behind (tests inject frames through it).
    #[cfg(test)]
    pub(crate) fn filter(&self) -> Arc<Attached> {
        self.filter.clone().expect("a filtered receiver")
    }

    /// Puts the socket `fd` into the reply filter's map: from now on its frames arrive here.
    fn steer_here(&self, queue: u32, fd: RawFd) -> anyhow::Result<()> {
        let filter = self
            .filter
            .as_ref()
            .expect("a filtered receiver has a filter");
        filter.add_socket(queue, fd)
    }
}

/// One AF_XDP socket on `cfg.queue` that both transmits and receives, split into its two
/// halves (which may live in different threads): the receive half gets what `spec` takes,
/// through sonde's XDP reply filter, exactly as [`XdpRx::open_filtered`]. The kernel allows one
/// AF_XDP socket per queue, so this is how a queue that transmits with AF_XDP also receives
/// with it. The UMEM holds `cfg.ring_frames` frames for each direction.
pub fn open_pair(cfg: &IoConfig, spec: &FilterSpec) -> anyhow::Result<(XdpTx, XdpRx)> {
    let (mut port, filter) = open_filtered_port(cfg, &XdpProgram::reply(spec)?, true)?;
    let fd = port.raw_fd();
    let rx_frames = port.frames.split_off(port.frames.len() / 2);
    let how = format!("{} (shared with a receiver)", port.how);
    let tx = XdpTx::new(port.umem.clone(), port.txr, None, how, port.frames);
    let rx = XdpRx::new(
        port.umem,
        port.rxr,
        None,
        format!("{} (shared with a sender)", port.how),
        rx_frames,
        Some(filter),
        &cfg.iface,
    )?;
    rx.steer_here(cfg.queue, fd)?;
    Ok((tx, rx))
}

/// Opens a socket bound in the mode of `program` on `cfg.iface`: the one already attached by
/// this process (the receivers of an interface's queues share it), or a new one attached
/// natively or in generic mode (as `cfg.xdp_mode` allows, native first); `both` as for
/// [`XskPort::open`]. The socket is not in the program's map yet: the caller adds it once its
/// fill ring is stocked.
fn open_filtered_port(
    cfg: &IoConfig,
    program: &XdpProgram,
    both: bool,
) -> anyhow::Result<(XskPort, Arc<Attached>)> {
    let ifindex = crate::packet_socket::ifindex(&cfg.iface)?;
    if cfg.queue >= crate::xdp_filter::MAX_QUEUES {
        bail!(
            "{} serves queues 0 to {}, not {}",
            program.name(),
            crate::xdp_filter::MAX_QUEUES - 1,
            cfg.queue
        );
    }
    let modes: &[bool] = match cfg.xdp_mode {
        XdpMode::Auto => &[true, false],
        XdpMode::Native => &[true],
        XdpMode::Generic => &[false],
    };
    let (filter, mut port) =
        crate::xdp_filter::attach_shared(ifindex, &cfg.iface, program, modes, |native| {
            XskPort::open(cfg, cfg.ring_frames, both, Steering::Own { native })
        })?;
    port.how.push_str(match program {
        XdpProgram::Reply(_) => ", sonde reply filter",
        XdpProgram::Expression(_) => ", capture expression in XDP",
    });
    Ok((port, filter))
}

impl XdpRx {
    /// [`FrameRx::rx_batch`] with each frame's arrival time when the filter stamped it (ns
    /// since the Unix epoch, as a packet ring's stamps): `on_frame(frame, stamp)`. The stamp's
    /// trailer is never part of the frame handed over.
    pub fn rx_stamped<F: FnMut(&[u8], Option<u64>)>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let max = max.min(self.received.len());
        // SAFETY: `received` only ever holds descriptors of this socket's UMEM.
        let mut n = unsafe { self.rings.rx.consume(&mut self.received[..max]) };
        // Only an empty ring is waited on (a zero timeout never makes a system call here).
        if n == 0
            && max > 0
            && !timeout.is_zero()
            && stages::call(Stage::Poll, Stage::RxCall, || {
                self.rings.rx.poll(timeout_ms(timeout))
            })?
        {
            // SAFETY: as above.
            n = unsafe { self.rings.rx.consume(&mut self.received[..max]) };
        }
        let mark = self.filter.as_ref().and_then(|f| f.stamp_mark);
        // Both clocks read once per batch, at its first stamped frame.
        let mut clocks: Option<(u64, u64)> = None;
        for desc in &self.received[..n] {
            // SAFETY: the kernel handed these frames to us; nothing else accesses them now.
            let data = unsafe { self.umem.data(desc) };
            let frame = data.contents();
            match mark.and_then(|mark| take_stamp(frame, mark)) {
                Some((frame, stamp)) => {
                    let (mono, epoch) = *clocks.get_or_insert_with(read_clocks);
                    on_frame(
                        frame,
                        Some(epoch.saturating_sub(mono.saturating_sub(stamp))),
                    );
                }
                None => on_frame(frame, None),
            }
        }
        // SAFETY: the frames are read and handed back for reuse.
        let mut back = 0;
        while back < n {
            back += unsafe { self.rings.fill.produce(&self.received[back..n]) };
        }
        // Only frames handed back can need the kernel's attention: an empty pass makes no
        // system call (a receiver polled in a loop would otherwise make one per pass).
        if n > 0 && self.rings.fill.needs_wakeup() {
            let (fill, rx) = (&mut self.rings.fill, &mut self.rings.rx);
            stages::call(Stage::Poll, Stage::RxCall, || fill.wakeup(rx.fd_mut(), 0))?;
        }
        Ok(n)
    }
}

/// CLOCK_MONOTONIC (the filter's stamps) and the wall clock, both in ns, read together.
fn read_clocks() -> (u64, u64) {
    let mut mono = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the live local it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut mono) };
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mono = mono.tv_sec as u64 * 1_000_000_000 + mono.tv_nsec as u64;
    (mono, epoch)
}

impl FrameRx for XdpRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        self.rx_stamped(max, timeout, |frame, _| on_frame(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{in_private_netns, synack, SCAN4};
    use crate::{RxDrops, TcpTake};

    /// A generic-mode configuration on `lo` with rings of `frames` entries.
    fn lo(frames: u32) -> IoConfig {
        let mut cfg = IoConfig::new("lo");
        cfg.xdp_mode = XdpMode::Generic;
        cfg.ring_frames = frames;
        cfg
    }

    fn syn_scan() -> FilterSpec {
        FilterSpec {
            ipv4: Some(SCAN4),
            ipv6: None,
            tcp: TcpTake::SynAckOrRst,
            udp: false,
            icmp: false,
            icmp6: false,
            ports: (61000, 65535),
            echo_id: None,
            spare_host_sockets: true,
            stamp_arrivals: false,
        }
    }

    #[test]
    fn drops_are_counted_by_cause_and_taken_as_deltas() {
        in_private_netns(|| {
            let mut rx = XdpRx::open_filtered(&lo(64), &syn_scan()).unwrap();
            let filter = rx.filter();
            assert_eq!(rx.take_drops(), RxDrops::default());
            // 64 UMEM frames, none handed back: 64 of 100 replies fit, 36 are lost.
            filter.inject(&synack(SCAN4, 62000), 100).unwrap();
            let drops = rx.take_drops();
            eprintln!("100 frames into 64 UMEM frames: dropped {drops}");
            assert_eq!(drops.total(), 36, "{drops:?}");
            assert_eq!(drops.invalid, 0, "{drops:?}");
            assert!(
                drops.fill_ring_empty > 0 || drops.ring_full > 0,
                "the cause is missing: {drops:?}"
            );
            assert_eq!(rx.take_drops(), RxDrops::default(), "only what is new");
            assert_eq!(rx.rx_batch(1000, Duration::ZERO, |_| ()).unwrap(), 64);
            // Read frames go back to the fill ring: the next replies all arrive.
            filter.inject(&synack(SCAN4, 62001), 10).unwrap();
            let mut ports = Vec::new();
            let got = rx
                .rx_batch(1000, Duration::ZERO, |f| {
                    ports.push(u16::from_be_bytes([f[36], f[37]]))
                })
                .unwrap();
            assert_eq!((got, ports), (10, vec![62001; 10]));
            assert_eq!(rx.take_drops(), RxDrops::default());
        });
    }

    fn epoch_ns() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    #[test]
    fn a_stamping_filter_dates_each_frame_and_hands_it_over_whole() {
        in_private_netns(|| {
            let frame = synack(SCAN4, 62000);
            let spec = FilterSpec {
                stamp_arrivals: true,
                ..syn_scan()
            };
            let mut rx = XdpRx::open_filtered(&lo(64), &spec).unwrap();
            assert!(rx.stamps_arrivals());
            let before = epoch_ns();
            rx.filter().inject(&frame, 3).unwrap();
            let after = epoch_ns();
            std::thread::sleep(Duration::from_millis(20));
            let mut got = Vec::new();
            rx.rx_stamped(64, Duration::ZERO, |f, stamp| got.push((f.to_vec(), stamp)))
                .unwrap();
            assert_eq!(got.len(), 3);
            for (bytes, stamp) in got {
                assert_eq!(bytes, frame, "the trailer is taken off");
                // Dated when injected, not when read 20 ms later (1 ms of slack for the
                // two clocks' readings).
                let stamp = stamp.expect("stamped");
                assert!(
                    stamp + 1_000_000 >= before && stamp <= after + 1_000_000,
                    "{before} <= {stamp} <= {after}"
                );
            }
            // Read without stamps, the frame is still whole.
            rx.filter().inject(&frame, 1).unwrap();
            let mut plain = Vec::new();
            rx.rx_batch(64, Duration::ZERO, |f| plain.push(f.to_vec()))
                .unwrap();
            assert_eq!(plain, [frame]);
        });
        in_private_netns(|| {
            let mut rx = XdpRx::open_filtered(&lo(64), &syn_scan()).unwrap();
            assert!(!rx.stamps_arrivals());
            rx.filter().inject(&synack(SCAN4, 62000), 1).unwrap();
            let mut got = Vec::new();
            rx.rx_stamped(64, Duration::ZERO, |f, stamp| got.push((f.len(), stamp)))
                .unwrap();
            assert_eq!(got, [(synack(SCAN4, 62000).len(), None)]);
        });
    }

    #[test]
    fn a_zero_timeout_receive_returns_what_waits_and_never_blocks() {
        in_private_netns(|| {
            let mut rx = XdpRx::open_filtered(&lo(64), &syn_scan()).unwrap();
            assert_eq!(rx.rx_batch(64, Duration::ZERO, |_| ()).unwrap(), 0);
            rx.filter().inject(&synack(SCAN4, 62000), 3).unwrap();
            assert_eq!(rx.rx_batch(2, Duration::ZERO, |_| ()).unwrap(), 2);
            assert_eq!(rx.rx_batch(64, Duration::ZERO, |_| ()).unwrap(), 1);
            // The filter still decides: a reply to an ephemeral port never arrives.
            rx.filter().inject(&synack(SCAN4, 45000), 3).unwrap();
            assert_eq!(
                rx.rx_batch(64, Duration::from_millis(20), |_| ()).unwrap(),
                0
            );
        });
    }

    #[test]
    fn a_busy_or_missing_queue_is_named_in_one_line() {
        in_private_netns(|| {
            let first = XdpTx::open(&lo(64)).unwrap();
            let err = XdpTx::open(&lo(64))
                .err()
                .expect("a second socket on lo queue 0");
            let text = format!("{err:#}");
            eprintln!("{text}");
            assert!(
                text.contains("lo queue 0")
                    && text.contains("busy")
                    && text.contains("one per queue")
                    && text.contains("lo has 1 queue"),
                "{text}"
            );
            assert!(!text.contains('\n'), "{text}");
            drop(first);
            let mut beyond = lo(64);
            beyond.queue = 1;
            let err = XdpTx::open(&beyond).err().expect("lo has no queue 1");
            let text = format!("{err:#}");
            eprintln!("{text}");
            assert!(
                text.contains("no queue 1") && text.contains("lo has 1 queue"),
                "{text}"
            );
        });
    }
}
