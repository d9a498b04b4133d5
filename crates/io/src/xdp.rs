//! AF_XDP through xsk-rs (libxdp): frames live in a UMEM shared with the kernel; transmitting is
//! writing a frame into the UMEM and posting its descriptor on the TX ring, then one wake-up
//! system call (only when the kernel asks for it: `XDP_USE_NEED_WAKEUP`).
//!
//! Opening tries zero-copy first and falls back to copy mode, and tries native (driver) XDP
//! before generic (SKB) mode, as the driver allows. Receiving uses libxdp's default program,
//! which redirects the queue's frames to the socket.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail};
use xsk_rs::config::{
    BindFlags, FrameSize, Interface, LibxdpFlags, QueueSize, SocketConfig, UmemConfig, XdpFlags,
};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

use crate::{FrameRx, FrameTx, IoConfig, MAX_FRAME};

const FRAME_SIZE: u32 = 2048;
/// Linux ≥ 6.17 lets a copy-mode socket send more than 32 frames per wake-up
/// (`XDP_MAX_TX_SKB_BUDGET` in `<linux/if_xdp.h>`); older kernels refuse it and keep 32.
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;
/// Bound on wake-ups spent draining one batch in copy mode.
const MAX_KICKS_PER_BATCH: usize = 256;

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
struct Attempt {
    native: bool,
    zero_copy: bool,
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

fn queue_size(n: u32) -> QueueSize {
    QueueSize::new(n.next_power_of_two()).expect("a power of two is a valid queue size")
}

/// An open AF_XDP socket with its UMEM and all four rings.
struct XskPort {
    umem: Umem,
    tx: TxQueue,
    rx: RxQueue,
    fill: FillQueue,
    comp: CompQueue,
    frames: Vec<FrameDesc>,
    how: String,
}

impl XskPort {
    /// Opens a socket on `cfg.queue` with `frames` UMEM frames. Without `receive`, libxdp loads
    /// no XDP program, so incoming traffic keeps reaching the OS stack.
    fn open(cfg: &IoConfig, frames: u32, receive: bool) -> anyhow::Result<XskPort> {
        crate::packet_socket::ifindex(&cfg.iface)?;
        let mut last_err = String::new();
        for attempt in attempts(cfg.xdp_mode) {
            // Right after a native-mode socket closes the queue can be busy for a moment.
            for _ in 0..20 {
                match Self::try_open(cfg, frames, receive, attempt) {
                    Ok(port) => return Ok(port),
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        last_err = e.to_string();
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => bail!(
                        "AF_XDP on {}: permission denied: needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (run as root); or try --backend ring",
                        cfg.iface
                    ),
                    Err(e) => {
                        last_err = format!("{attempt}: {e}");
                        break;
                    }
                }
            }
        }
        Err(anyhow!(
            "the kernel refused an AF_XDP socket on {} queue {} ({last_err}); try --backend ring",
            cfg.iface,
            cfg.queue
        ))
    }

    fn try_open(
        cfg: &IoConfig,
        frames: u32,
        receive: bool,
        attempt: Attempt,
    ) -> io::Result<XskPort> {
        let ring = queue_size(frames);
        let umem_cfg = UmemConfig::builder()
            .frame_size(FrameSize::new(FRAME_SIZE).map_err(|e| io::Error::other(e.to_string()))?)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let count = NonZeroU32::new(ring.get()).expect("queue sizes are non-zero");
        let (umem, descs) =
            Umem::new(umem_cfg, count, false).map_err(|e| io::Error::other(e.to_string()))?;
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
        if !receive {
            libxdp |= LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD;
        }
        let sock_cfg = SocketConfig::builder()
            .rx_queue_size(ring)
            .tx_queue_size(ring)
            .bind_flags(bind)
            .xdp_flags(xdp_flags)
            .libxdp_flags(libxdp)
            .build();
        let name = Interface::new(CString::new(cfg.iface.as_str()).map_err(io::Error::other)?);
        // SAFETY: the UMEM is fresh and not shared, so the program-load/double-free caveat of
        // sharing does not apply.
        let (tx, rx, rings) =
            unsafe { Socket::new(sock_cfg, &umem, &name, cfg.queue) }.map_err(socket_error)?;
        let (fill, comp) = rings.ok_or_else(|| io::Error::other("UMEM rings missing"))?;
        let budget = set_tx_budget(&tx, ring.get());
        let how = format!("AF_XDP, {attempt}{budget}");
        Ok(XskPort {
            umem,
            tx,
            rx,
            fill,
            comp,
            frames: descs,
            how,
        })
    }
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
fn set_tx_budget(tx: &TxQueue, frames: u32) -> &'static str {
    let fd = tx.fd().as_raw_fd();
    match crate::packet_socket::set_option(fd, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &frames) {
        Ok(()) => ", tx budget raised",
        Err(_) => "",
    }
}

/// The AF_XDP transmit queue.
pub struct XdpTx {
    port: XskPort,
    free: Vec<FrameDesc>,
    posted: Vec<FrameDesc>,
    completed: Vec<FrameDesc>,
    ring: u32,
}

impl XdpTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let mut port = XskPort::open(cfg, cfg.ring_frames, false)?;
        let free = std::mem::take(&mut port.frames);
        let ring = free.len() as u32;
        Ok(XdpTx {
            port,
            posted: Vec::with_capacity(free.len()),
            completed: vec![FrameDesc::default(); free.len()],
            free,
            ring,
        })
    }

    pub fn describe(&self) -> String {
        self.port.how.clone()
    }

    /// Takes back the frames whose transmission the kernel has completed.
    fn reclaim(&mut self) {
        // SAFETY: `completed` holds descriptors of this socket's own UMEM.
        let n = unsafe { self.port.comp.consume(&mut self.completed) };
        self.free.extend_from_slice(&self.completed[..n]);
    }

    /// Wakes the kernel until it has taken every posted descriptor off the TX ring (copy mode
    /// sends at most a budget of frames per wake-up), or until the bound is reached. The
    /// completion ring is as large as the UMEM, so it cannot fill up in between.
    fn kick(&mut self) -> io::Result<()> {
        for _ in 0..MAX_KICKS_PER_BATCH {
            if !self.port.tx.needs_wakeup() || self.port.tx.nb_free_exact() >= self.ring {
                break;
            }
            self.port.tx.wakeup()?;
        }
        Ok(())
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
            let mut data = unsafe { self.port.umem.data_mut(desc) };
            let mut cursor = data.cursor();
            cursor.set_pos(0);
            io::Write::write_all(&mut cursor, &frame[..len])?;
        }
        let (frames, mut head, mut in_flight, mut sent) = (ring.len(), 0usize, 0usize, 0u64);
        while sent < count {
            // SAFETY: `completed` holds descriptors of this socket's own UMEM.
            in_flight -= unsafe { self.port.comp.consume(&mut self.completed) };
            let n = (batch as u64)
                .min(count - sent)
                .min((frames - in_flight) as u64) as usize;
            let n = n.min(frames - head);
            // SAFETY: these frames are not in flight and still hold the pre-built frame.
            let produced = unsafe { self.port.tx.produce(&ring[head..head + n]) };
            head = (head + produced) % frames;
            in_flight += produced;
            sent += produced as u64;
            self.kick()?;
        }
        while in_flight > 0 {
            self.port.tx.wakeup()?;
            // SAFETY: as above.
            in_flight -= unsafe { self.port.comp.consume(&mut self.completed) };
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
        let room = self.port.tx.nb_free(count as u32) as usize;
        let n = count.min(self.free.len()).min(room);
        if n == 0 {
            self.kick()?;
            return Ok(0);
        }
        for i in 0..n {
            let mut desc = self.free.pop().expect("n ≤ free.len()");
            {
                // SAFETY: the descriptor came off the free list: neither ring owns the frame.
                let mut data = unsafe { self.port.umem.data_mut(&mut desc) };
                data.cursor().set_pos(MAX_FRAME);
                let len = fill(i, data.contents_mut());
                data.cursor().set_pos(len);
            }
            self.posted.push(desc);
        }
        // SAFETY: the posted frames were just written and are owned by no ring.
        let produced = unsafe { self.port.tx.produce(&self.posted) };
        debug_assert_eq!(produced, n, "nb_free promised room for the batch");
        self.posted.clear();
        self.kick()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.free.len() < self.ring as usize && std::time::Instant::now() < deadline {
            self.port.tx.wakeup()?;
            self.reclaim();
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// The AF_XDP receive queue: frames arrive through libxdp's redirect program.
pub struct XdpRx {
    port: XskPort,
    received: Vec<FrameDesc>,
}

impl XdpRx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let mut port = XskPort::open(cfg, cfg.ring_frames, true)?;
        let frames = std::mem::take(&mut port.frames);
        // SAFETY: all frames are fresh and owned by no ring; the fill ring is as large as the UMEM.
        let filled = unsafe { port.fill.produce(&frames) };
        if filled != frames.len() {
            bail!(
                "AF_XDP fill ring on {} took {filled} of {} frames",
                cfg.iface,
                frames.len()
            );
        }
        let received = vec![FrameDesc::default(); frames.len()];
        Ok(XdpRx { port, received })
    }
}

impl FrameRx for XdpRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let max = max.min(self.received.len());
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `received` only ever holds descriptors of this socket's UMEM.
        let n = unsafe {
            self.port
                .rx
                .poll_and_consume(&mut self.received[..max], ms)?
        };
        for desc in &self.received[..n] {
            // SAFETY: the kernel handed these frames to us; nothing else accesses them now.
            let data = unsafe { self.port.umem.data(desc) };
            on_frame(data.contents());
        }
        // SAFETY: the frames are read and handed back for reuse.
        let mut back = 0;
        while back < n {
            back += unsafe { self.port.fill.produce(&self.received[back..n]) };
        }
        if self.port.fill.needs_wakeup() {
            self.port.fill.wakeup(self.port.rx.fd_mut(), 0)?;
        }
        Ok(n)
    }
}
