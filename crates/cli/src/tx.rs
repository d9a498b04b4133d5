//! The transmit engine behind `blast` and `bench`: one pinned sender thread per queue, each
//! filling batches straight into its backend's buffers from a frame template.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_craft::{Targets, Template};
use sonde_io::{AnyTx, BackendKind, FrameTx, IoConfig};
use sonde_meter::{Counter, CpuTimes, Stopwatch};

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
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
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
                scope.spawn(move || worker.run(tx, t % cpus, stop, progress))
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
            pacer: Pacer::new(plan.rate / threads as f64),
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
            let want = match self.quota {
                Some(q) => (q - sent).min(self.batch as u64) as usize,
                None => self.batch,
            };
            if want == 0 || self.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            self.pacer.wait(want);
            let (template, targets) = (&self.template, &mut self.targets);
            let n = tx.tx_batch(want, |_, buf| {
                let (addr, port) = targets.next_target();
                template.write(buf, addr, port)
            })?;
            sent += n as u64;
            progress.add(n as u64);
        }
        tx.flush()?;
        Ok(sent)
    }
}

/// Pins the calling thread to one CPU, so a sender keeps its caches and never migrates.
pub fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        // Pinning is an optimisation: a refusal (e.g. a restricted cpuset) is not an error.
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// Paces batches to a packet rate: each batch is due `batch / rate` seconds after the last, so
/// the rate is smooth at batch granularity; a sender that fell far behind does not burst.
pub struct Pacer {
    seconds_per_packet: f64,
    next: Instant,
}

impl Pacer {
    pub fn new(rate: f64) -> Pacer {
        let seconds_per_packet = if rate > 0.0 { 1.0 / rate } else { 0.0 };
        Pacer {
            seconds_per_packet,
            next: Instant::now(),
        }
    }

    pub fn wait(&mut self, packets: usize) {
        if self.seconds_per_packet == 0.0 {
            return;
        }
        let now = Instant::now();
        if now > self.next + Duration::from_millis(100) {
            self.next = now;
        }
        if self.next > now {
            let ahead = self.next - now;
            if ahead > Duration::from_micros(200) {
                std::thread::sleep(ahead);
            } else {
                while Instant::now() < self.next {
                    std::hint::spin_loop();
                }
            }
        }
        self.next += Duration::from_secs_f64(packets as f64 * self.seconds_per_packet);
    }

    /// Waits out the last batch's slot, so a paced run lasts count / rate.
    pub fn finish(&mut self) {
        if self.seconds_per_packet > 0.0 {
            if let Some(left) = self.next.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
        }
    }
}
