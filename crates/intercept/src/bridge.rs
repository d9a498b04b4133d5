//! Bridge mode: a bump in the wire between two interfaces. Each thread owns a receive ring on
//! each side (a member of a flow-hash fanout group when there are several threads) and a
//! transmit ring on each side; a frame taken from one side is copied once, into the other
//! side's transmit slot, where the filter sees (and may rewrite) it before it is sent.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_io::{IoConfig, RingRx, RingTx};

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
}

/// Order is a property of each direction: a flow's packets A to B and its packets B to A are
/// stamped by different rings, so each direction is checked on its own.
#[derive(Default)]
pub struct Directions {
    pub a_to_b: OrderCheck,
    pub b_to_a: OrderCheck,
}

/// One thread's sockets: receive on A and B, transmit on A and B.
pub struct BridgePorts {
    /// Which thread these are (for the order check).
    thread: usize,
    rx_a: RingRx,
    rx_b: RingRx,
    tx_a: RingTx,
    tx_b: RingTx,
}

/// Opens every thread's sockets up front, so a bad interface fails before anything runs.
pub fn open(cfg: &BridgeConfig) -> anyhow::Result<Vec<BridgePorts>> {
    let group =
        |salt: u16| (cfg.threads > 1).then(|| (std::process::id() as u16).wrapping_add(salt));
    (0..cfg.threads)
        .map(|thread| {
            let tx = |iface: &str| {
                let mut io = IoConfig::new(iface);
                io.ring_frames = 4096;
                RingTx::open(&io).with_context(|| format!("transmit ring on {iface}"))
            };
            Ok(BridgePorts {
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
    mut ports: BridgePorts,
    filter: &mut dyn Filter,
    batch: usize,
    stop: &AtomicBool,
    counters: &ThreadCounters,
    order: &Arc<Directions>,
    start: Instant,
) -> anyhow::Result<()> {
    let fds = [ports.rx_a.raw_fd(), ports.rx_b.raw_fd()];
    let mut worker = Worker {
        filter,
        batch,
        counters,
        thread: ports.thread,
    };
    while !stop.load(Relaxed) {
        let now_ns = start.elapsed().as_nanos() as u64;
        let there = worker.forward(&mut ports.rx_a, &mut ports.tx_b, &order.a_to_b, now_ns)?;
        let back = worker.forward(&mut ports.rx_b, &mut ports.tx_a, &order.b_to_a, now_ns)?;
        if there + back == 0 {
            sonde_io::poll_any(&fds, Duration::from_millis(20))?;
        }
    }
    Ok(())
}

/// What one thread forwards with: its filter, batch size, counters and index.
struct Worker<'a> {
    filter: &'a mut dyn Filter,
    batch: usize,
    counters: &'a ThreadCounters,
    thread: usize,
}

impl Worker<'_> {
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
        let (filter, thread) = (&mut *self.filter, self.thread);
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
                    .is_some_and(|f| order.sent(f, p.ts_ns, thread));
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
}
