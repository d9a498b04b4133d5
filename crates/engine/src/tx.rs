//! The transmit engine behind `sonde blast` and `sonde bench`: one pinned sender thread per
//! queue, each filling batches straight into its backend's buffers from a frame template.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_craft::{Targets, Template};
use sonde_io::{AnyTx, BackendKind, FrameTx, IoConfig};
use sonde_meter::{Counter, CpuTimes, Stopwatch};

use crate::pace::Pacer;
use crate::plan::{pin_to_cpu, thread_cpu};

/// When a run ends.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Count(u64),
    Duration(Duration),
}

/// Everything one transmit run needs.
#[derive(Clone)]
pub struct TxPlan {
    pub backend: BackendKind,
    pub io: IoConfig,
    pub threads: usize,
    /// Queues of the interface; thread `t` sends on queue `t % queues`.
    pub queues: u32,
    pub limit: Limit,
    /// Packets per second over all threads; 0 = unlimited.
    pub rate: f64,
    pub template: Template,
    pub targets: Targets,
    /// The CPUs the senders run on (thread `t` on `cpus[t % len]`); None: CPU `t % online`.
    /// A lab with `--target-cpus` leaves the other CPUs to its scanners.
    pub cpus: Option<Vec<usize>>,
}

/// What a run measured.
pub struct TxOutcome {
    pub packets: u64,
    pub wall: Duration,
    pub cpu: CpuTimes,
    pub how: String,
}

/// Runs the plan until its limit or until `stop` is set; `progress` counts frames as they go.
pub fn run(plan: &TxPlan, stop: &AtomicBool, progress: &Counter) -> anyhow::Result<TxOutcome> {
    let queues = open_queues(plan)?;
    let how = queues[0].describe();
    let watch = Stopwatch::start();
    let deadline = match plan.limit {
        Limit::Duration(d) => Some(Instant::now() + d),
        Limit::Count(_) => None,
    };
    let sent: anyhow::Result<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = queues
            .into_iter()
            .enumerate()
            .map(|(t, tx)| {
                let worker = Worker::new(plan, t, deadline);
                scope.spawn(move || {
                    worker.run(tx, thread_cpu(plan.cpus.as_deref(), t), stop, progress)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("sender thread panicked"))
            .sum()
    });
    Ok(TxOutcome {
        packets: sent?,
        wall: watch.wall(),
        cpu: watch.cpu(),
        how,
    })
}

fn open_queues(plan: &TxPlan) -> anyhow::Result<Vec<AnyTx>> {
    (0..plan.threads)
        .map(|t| {
            let mut io = plan.io.clone();
            io.queue = t as u32 % plan.queues.max(1);
            AnyTx::open(plan.backend, &io).with_context(|| {
                format!(
                    "opening {} on {} queue {}",
                    plan.backend, io.iface, io.queue
                )
            })
        })
        .collect()
}

/// One sender thread's share of the plan.
struct Worker {
    template: Template,
    targets: Targets,
    batch: usize,
    quota: Option<u64>,
    deadline: Option<Instant>,
    pacer: Pacer,
}

impl Worker {
    fn new(plan: &TxPlan, t: usize, deadline: Option<Instant>) -> Worker {
        let threads = plan.threads as u64;
        let quota = match plan.limit {
            Limit::Count(n) => Some(n / threads + u64::from((t as u64) < n % threads)),
            Limit::Duration(_) => None,
        };
        Worker {
            template: plan.template.clone(),
            targets: plan.targets.split(t, plan.threads),
            batch: plan.io.batch.max(1),
            quota,
            deadline,
            pacer: Pacer::new(plan.rate / threads as f64, plan.io.batch.max(1)),
        }
    }

    fn run(
        mut self,
        mut tx: AnyTx,
        cpu: usize,
        stop: &AtomicBool,
        progress: &Counter,
    ) -> anyhow::Result<u64> {
        pin_to_cpu(cpu);
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let burst = self.batch.min(self.pacer.burst());
            let want = match self.quota {
                Some(q) => (q - sent).min(burst as u64) as usize,
                None => burst,
            };
            if want == 0 || self.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if !self.pacer.wait(stop) {
                break;
            }
            let (template, targets) = (&self.template, &mut self.targets);
            let n = tx.tx_batch(want, |_, buf| {
                let (addr, port) = targets.next_target();
                template.write(buf, addr, port)
            })?;
            self.pacer.charge(n);
            sent += n as u64;
            progress.add(n as u64);
        }
        tx.flush()?;
        Ok(sent)
    }
}
