//! Bridge mode: a bump in the wire between two interfaces, over one of two backends.
//!
//! `ring`: each thread owns a receive ring on each side (a member of a flow-hash fanout group
//! when there are several threads) and a transmit ring on each side; a frame taken from one
//! side is copied once, into the other side's transmit slot, where the filter sees (and may
//! rewrite) it before it is sent.
//!
//! `xdp`: an [`XdpBridge`] (two AF_XDP sockets over one UMEM) on every receive queue, queue i
//! of one interface paired with queue i of the other; thread t serves queues t, t + T, ... (T
//! threads), so every frame either interface receives has a socket, whatever --threads says.
//! The filter sees a frame where the kernel received it, and the same UMEM frame leaves by the
//! other side: no copy in user space.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sonde_io::{IoConfig, QueueCounts, RingRx, RingTx, XdpBridge, XdpMode};

use crate::counters::{BatchTally, ThreadCounters};
use crate::filter::{Filter, Link, Packet, Verdict};
use crate::flow::{flow_hash, OrderCheck};

/// How a bridge runs.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    pub iface_a: String,
    pub iface_b: String,
    pub threads: usize,
    /// Most frames taken from one side before the other side is served.
    pub batch: usize,
    pub backend: Backend,
}

/// How frames are taken off one side and put on the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// TPACKET_V3 packet rings, one copy per frame.
    Ring,
    /// AF_XDP, one UMEM shared by both sides per queue, no copy; every receive queue bound.
    Xdp(XdpMode),
}

/// UMEM frames of each thread's AF_XDP bridge (8 MiB; every ring has as many entries).
const XDP_FRAMES: u32 = 4096;

/// Order is a property of each direction: a flow's packets A to B and its packets B to A are
/// stamped by different rings, so each direction is checked on its own.
#[derive(Default)]
pub struct Directions {
    pub a_to_b: OrderCheck,
    pub b_to_a: OrderCheck,
}

/// One thread's sockets.
pub enum BridgePorts {
    Ring(RingPorts),
    /// The bridges of the thread's queues, and the thread's index.
    Xdp(Vec<XdpBridge>, usize),
}

/// Packet rings: receive on A and B, transmit on A and B.
pub struct RingPorts {
    /// Which thread these are (for the order check).
    thread: usize,
    rx_a: RingRx,
    rx_b: RingRx,
    tx_a: RingTx,
    tx_b: RingTx,
}

/// Opens every thread's sockets up front, so a bad interface fails before anything runs.
pub fn open(cfg: &BridgeConfig) -> anyhow::Result<Vec<BridgePorts>> {
    match cfg.backend {
        Backend::Ring => Ok(open_rings(cfg)?
            .into_iter()
            .map(BridgePorts::Ring)
            .collect()),
        Backend::Xdp(mode) => open_xdp(cfg, mode),
    }
}

/// An AF_XDP bridge on every receive queue, queue q served by thread q % threads. A queue
/// without a socket would have its frames dropped unseen (libxdp's program is per interface,
/// and the netdev table drops what it passes), so every queue is bound or nothing runs.
fn open_xdp(cfg: &BridgeConfig, mode: XdpMode) -> anyhow::Result<Vec<BridgePorts>> {
    let a = (cfg.iface_a.as_str(), sonde_io::queue_counts(&cfg.iface_a)?);
    let b = (cfg.iface_b.as_str(), sonde_io::queue_counts(&cfg.iface_b)?);
    let queues = xdp_queues(a, b, cfg.threads)?;
    let mut per_thread: Vec<Vec<XdpBridge>> = (0..cfg.threads).map(|_| Vec::new()).collect();
    for queue in 0..queues {
        let bridge = XdpBridge::open(&cfg.iface_a, &cfg.iface_b, queue, XDP_FRAMES, mode)?;
        per_thread[queue as usize % cfg.threads].push(bridge);
    }
    Ok(per_thread
        .into_iter()
        .enumerate()
        .map(|(thread, bridges)| BridgePorts::Xdp(bridges, thread))
        .collect())
}

/// How many queues an AF_XDP bridge binds between interfaces `a` and `b` (name, queue
/// counts): every receive queue of each. A frame received on queue i leaves by transmit queue
/// i of the other side, so both need the same receive queues and a transmit queue for each;
/// and each thread needs a queue of its own. Anything else is refused in one line.
fn xdp_queues(
    (a, qa): (&str, QueueCounts),
    (b, qb): (&str, QueueCounts),
    threads: usize,
) -> anyhow::Result<u32> {
    if qa.rx != qb.rx {
        bail!(
            "--backend xdp pairs receive queue i of {a} with queue i of {b}, but {a} has {} receive queues and {b} has {}: give both the same count (ethtool -L) or use --backend ring",
            qa.rx,
            qb.rx
        );
    }
    for (name, q) in [(a, qa), (b, qb)] {
        if q.tx < q.rx {
            bail!(
                "--backend xdp sends what arrives on receive queue i out of transmit queue i of the other side, but {name} has {} receive and only {} transmit queues: give it as many transmit queues (ethtool -L) or use --backend ring",
                q.rx,
                q.tx
            );
        }
    }
    let queues = qa.rx;
    if threads > queues as usize {
        bail!(
            "--threads {threads} with --backend xdp needs {threads} queues on {a} and {b}, which have {queues} in common (one AF_XDP socket per queue): use --threads {queues} or --backend ring"
        );
    }
    Ok(queues)
}

impl BridgePorts {
    /// How the sockets were opened, for summaries.
    pub fn describe(&self) -> String {
        match self {
            BridgePorts::Ring(_) => "TPACKET_V3 packet rings, one copy per frame".into(),
            BridgePorts::Xdp(bridges, _) => {
                let how = bridges
                    .first()
                    .map_or_else(String::new, XdpBridge::describe);
                let n = bridges.len();
                format!(
                    "{how}; {n} queue{} on this thread",
                    if n == 1 { "" } else { "s" }
                )
            }
        }
    }
}

fn open_rings(cfg: &BridgeConfig) -> anyhow::Result<Vec<RingPorts>> {
    let group =
        |salt: u16| (cfg.threads > 1).then(|| (std::process::id() as u16).wrapping_add(salt));
    (0..cfg.threads)
        .map(|thread| {
            let tx = |iface: &str| {
                let mut io = IoConfig::new(iface);
                io.ring_frames = 4096;
                RingTx::open(&io).with_context(|| format!("transmit ring on {iface}"))
            };
            Ok(RingPorts {
                thread,
                rx_a: RingRx::open_forwarding(&cfg.iface_a, group(0))?,
                rx_b: RingRx::open_forwarding(&cfg.iface_b, group(1))?,
                tx_a: tx(&cfg.iface_a)?,
                tx_b: tx(&cfg.iface_b)?,
            })
        })
        .collect()
}

/// Forwards both ways until `stop` is set; the filter decides on every frame.
pub fn run_thread(
    ports: BridgePorts,
    filter: &mut dyn Filter,
    batch: usize,
    stop: &AtomicBool,
    counters: &ThreadCounters,
    order: &Arc<Directions>,
    start: Instant,
) -> anyhow::Result<()> {
    let thread = match &ports {
        BridgePorts::Ring(p) => p.thread,
        BridgePorts::Xdp(_, thread) => *thread,
    };
    // The rings stamp frames with the wall clock; the order check takes time since the start.
    let epoch_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .saturating_sub(start.elapsed().as_nanos() as u64);
    let mut worker = Worker {
        filter,
        batch,
        counters,
        thread,
        epoch_ns,
    };
    match ports {
        BridgePorts::Ring(p) => worker.run_rings(p, stop, order, start),
        BridgePorts::Xdp(bridges, _) => worker.run_xdp(bridges, stop, order, start),
    }
}

/// What one thread forwards with: its filter, batch size, counters and index.
struct Worker<'a> {
    filter: &'a mut dyn Filter,
    batch: usize,
    counters: &'a ThreadCounters,
    thread: usize,
    /// The wall-clock time of the run's start (ns since 1970), for the rings' stamps.
    epoch_ns: u64,
}

/// How often an AF_XDP bridge's drop counters are read (one system call per socket).
const DROPS_EVERY_NS: u64 = 100_000_000;

impl Worker<'_> {
    fn run_rings(
        &mut self,
        mut ports: RingPorts,
        stop: &AtomicBool,
        order: &Directions,
        start: Instant,
    ) -> anyhow::Result<()> {
        let fds = [ports.rx_a.raw_fd(), ports.rx_b.raw_fd()];
        while !stop.load(Relaxed) {
            let now_ns = start.elapsed().as_nanos() as u64;
            let there = self.forward(&mut ports.rx_a, &mut ports.tx_b, &order.a_to_b, now_ns)?;
            let back = self.forward(&mut ports.rx_b, &mut ports.tx_a, &order.b_to_a, now_ns)?;
            if there + back == 0 {
                sonde_io::poll_any(&fds, Duration::from_millis(20))?;
            }
        }
        Ok(())
    }

    /// Moves up to a batch of frames from `rx` to `tx` (one send for all); returns how many
    /// arrived.
    fn forward(
        &mut self,
        rx: &mut RingRx,
        tx: &mut RingTx,
        order: &OrderCheck,
        now_ns: u64,
    ) -> anyhow::Result<usize> {
        let mut tally = BatchTally::default();
        let (mut lost, mut posted) = (0, 0);
        let (filter, thread, epoch_ns) = (&mut *self.filter, self.thread, self.epoch_ns);
        let got = rx.rx_packets(self.batch, Duration::ZERO, |p| {
            let len = p.data.len();
            if len < p.wire_len as usize || len > RingTx::SLOT_BYTES {
                lost += 1; // cut short by the ring, or larger than a transmit slot
                return;
            }
            let mut verdict = Verdict::Drop;
            let room = tx.fill_next(|slot| {
                let frame = &mut slot[..len];
                frame.copy_from_slice(p.data);
                verdict = filter.decide(&mut Packet {
                    data: frame,
                    link: Link::Ethernet,
                    wire_len: p.wire_len,
                    now_ns,
                });
                (verdict != Verdict::Drop).then_some(len)
            });
            if !room {
                lost += 1;
                return;
            }
            let reordered = verdict != Verdict::Drop
                && flow_hash(p.data, Link::Ethernet)
                    .is_some_and(|f| order.sent(f, p.ts_ns.saturating_sub(epoch_ns), thread));
            posted += usize::from(verdict != Verdict::Drop);
            tally.count(p.wire_len, verdict, reordered);
        })?;
        if posted > 0 {
            tx.send_posted()?;
        }
        self.counters.add_batch(&tally);
        if lost > 0 {
            crate::rules::bump(&self.counters.lost, lost);
        }
        Ok(got)
    }

    /// Serves every bridge (queue) of this thread in turn, both directions each, until `stop`.
    fn run_xdp(
        &mut self,
        mut bridges: Vec<XdpBridge>,
        stop: &AtomicBool,
        order: &Directions,
        start: Instant,
    ) -> anyhow::Result<()> {
        let fds: Vec<_> = bridges.iter().flat_map(XdpBridge::raw_fds).collect();
        let mut stamps: Vec<Stamps> = bridges.iter().map(|_| Stamps::default()).collect();
        let mut drops_read_ns = 0;
        while !stop.load(Relaxed) {
            let now_ns = start.elapsed().as_nanos() as u64;
            let mut moved = 0;
            for (bridge, stamps) in bridges.iter_mut().zip(&mut stamps) {
                let (a, b) = (&order.a_to_b, &order.b_to_a);
                moved += self.forward_xdp(bridge, 0, stamps.batch(0, now_ns), a, now_ns)?;
                moved += self.forward_xdp(bridge, 1, stamps.batch(1, now_ns), b, now_ns)?;
            }
            if now_ns - drops_read_ns >= DROPS_EVERY_NS {
                self.count_drops(&mut bridges);
                drops_read_ns = now_ns;
            }
            if moved == 0 {
                sonde_io::poll_any(&fds, Duration::from_millis(20))?;
            }
        }
        self.count_drops(&mut bridges);
        Ok(())
    }

    /// Adds what the bridges lost since the last reading to the thread's `lost` counter.
    fn count_drops(&self, bridges: &mut [XdpBridge]) {
        let lost = bridges.iter_mut().map(XdpBridge::drops).sum();
        crate::rules::bump(&self.counters.lost, lost);
    }

    /// Judges up to a batch of frames that arrived on `from` in place and sends those that
    /// pass on from the other side (one kick for all); returns how many arrived. `stamp` is
    /// the next arrival stamp of this side, advanced past the frames judged.
    fn forward_xdp(
        &mut self,
        bridge: &mut XdpBridge,
        from: usize,
        stamp: &mut u64,
        order: &OrderCheck,
        now_ns: u64,
    ) -> anyhow::Result<usize> {
        let mut tally = BatchTally::default();
        let (filter, thread) = (&mut *self.filter, self.thread);
        let (arrived, _) = bridge.forward(from, self.batch, |frame| {
            *stamp += 1;
            // The flow as it arrived: a rewrite may change its ports.
            let flow = flow_hash(frame, Link::Ethernet);
            let wire_len = frame.len() as u32;
            let verdict = filter.decide(&mut Packet {
                data: frame,
                link: Link::Ethernet,
                wire_len,
                now_ns,
            });
            let reordered =
                verdict != Verdict::Drop && flow.is_some_and(|f| order.sent(f, *stamp, thread));
            tally.count(wire_len, verdict, reordered);
            verdict != Verdict::Drop
        })?;
        self.counters.add_batch(&tally);
        Ok(arrived)
    }
}

/// Arrival stamps for the order check. AF_XDP gives no arrival time, so a frame's stamp is the
/// time its batch was taken (ns since the start) plus its place in the batch, never below the
/// side's last stamp: increasing on each side, and comparable between threads to within a
/// batch.
#[derive(Default)]
struct Stamps {
    next: [u64; 2],
}

impl Stamps {
    /// The first stamp of a batch from `side`; the batch's frames take the following ones.
    fn batch(&mut self, side: usize, now_ns: u64) -> &mut u64 {
        let next = &mut self.next[side];
        *next = (*next).max(now_ns);
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(rx: u32, tx: u32) -> QueueCounts {
        QueueCounts { rx, tx }
    }

    #[test]
    fn an_xdp_bridge_binds_every_receive_queue_or_refuses_in_one_line() {
        let q = |a, b, threads| xdp_queues(("ma", a), ("mb", b), threads);
        assert_eq!(
            q(counts(4, 4), counts(4, 4), 1).unwrap(),
            4,
            "one thread, 4 queues"
        );
        assert_eq!(q(counts(4, 4), counts(4, 8), 3).unwrap(), 4);
        assert_eq!(q(counts(1, 1), counts(1, 1), 1).unwrap(), 1);
        let refused = |r: anyhow::Result<u32>, needle: &str| {
            let e = format!("{:#}", r.unwrap_err());
            assert!(e.contains(needle) && !e.contains('\n'), "{needle}: {e}");
        };
        refused(
            q(counts(4, 4), counts(2, 2), 1),
            "ma has 4 receive queues and mb has 2",
        );
        refused(
            q(counts(4, 2), counts(4, 4), 1),
            "ma has 4 receive and only 2 transmit",
        );
        refused(q(counts(2, 2), counts(2, 2), 3), "which have 2 in common");
    }
}
