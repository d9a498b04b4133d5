//! Stack mode: the host's own packets, from NFQUEUE. Each thread owns one queue (the kernel's
//! `--queue-balance` puts every packet of a flow in the same queue), takes up to a batch of
//! packets with one system call and gives all their verdicts with one more.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use sonde_io::nfqueue::{NfQueue, NfVerdict, NfqConfig};

use crate::counters::{BatchTally, ThreadCounters};
use crate::filter::{Filter, Link, Packet, Verdict};
use crate::flow::{flow_hash, OrderCheck};

/// How stack mode runs.
#[derive(Clone, Debug)]
pub struct StackConfig {
    /// The queues, one thread each.
    pub queues: Vec<u16>,
    pub batch: usize,
    pub fail_open: bool,
    /// Whether the kernel may queue whole GSO packets (off when a rule rewrites ports, which
    /// needs the complete checksum the kernel fills in only for segmented packets).
    pub gso: bool,
    /// Bytes of each packet copied up (see [`NfqConfig::copy_bytes`]); the whole packet when
    /// a filter may rewrite it.
    pub copy_bytes: u32,
}

/// One thread's queue, and which thread it is (for the order check).
pub struct StackPort {
    queue: NfQueue,
    thread: usize,
}

/// Binds every queue up front, so a queue already bound fails before anything runs.
pub fn open(cfg: &StackConfig) -> anyhow::Result<Vec<StackPort>> {
    cfg.queues
        .iter()
        .enumerate()
        .map(|(thread, &queue)| {
            let queue = NfQueue::open(&NfqConfig {
                queue,
                batch: cfg.batch,
                max_len: 4096,
                fail_open: cfg.fail_open,
                gso: cfg.gso,
                copy_bytes: cfg.copy_bytes,
            })?;
            Ok(StackPort { queue, thread })
        })
        .collect()
}

/// Gives verdicts until `stop` is set. `order` is shared by the threads; packets are stamped
/// with their batch's time, so it catches a flow whose packets two threads handled at once.
pub fn run_thread(
    port: StackPort,
    filter: &mut dyn Filter,
    stop: &AtomicBool,
    counters: &ThreadCounters,
    order: &OrderCheck,
    start: Instant,
) -> anyhow::Result<()> {
    let StackPort { mut queue, thread } = port;
    while !stop.load(Relaxed) {
        let now_ns = start.elapsed().as_nanos() as u64;
        let mut tally = BatchTally::default();
        queue.process_batch(Duration::from_millis(20), |qp| {
            let verdict = filter.decide(&mut Packet {
                data: qp.payload,
                link: Link::RawIp,
                wire_len: qp.wire_len,
                now_ns,
            });
            let reordered =
                flow_hash(qp.payload, Link::RawIp).is_some_and(|f| order.sent(f, now_ns, thread));
            tally.count(qp.wire_len, verdict, reordered);
            match verdict {
                Verdict::Pass => NfVerdict::Accept,
                Verdict::Drop => NfVerdict::Drop,
                Verdict::Rewritten => NfVerdict::AcceptRewritten,
            }
        })?;
        counters.add_batch(&tally);
    }
    Ok(())
}
