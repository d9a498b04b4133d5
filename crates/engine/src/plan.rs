//! What every run (scan or grab) needs, resolved and checked before anything is sent.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use sonde_craft::cookie::PortRange;
use sonde_io::{BackendKind, IoConfig, XdpMode};
use sonde_scan::targets::TargetSpace;
use sonde_wire::MacAddr;

use crate::checkpoint::{Checkpoint, ThreadCheckpoint};
use crate::feed::FeedSpec;

/// The shared part of a run's plan.
pub struct RunPlan {
    pub space: TargetSpace,
    /// Orders the targets (the permutation); never the validation key.
    pub seed: u64,
    /// The validation key, random for every run (a resumed run keeps its checkpoint's).
    pub key: [u64; 2],
    pub shard: (u32, u32),
    /// Sender threads, each pinned, each on its own queue.
    pub threads: u32,
    /// Probes per target.
    pub probes: u32,
    pub max_targets: Option<u64>,
    /// Packets per second over all threads; 0 = as fast as possible.
    pub rate: f64,
    pub batch: usize,
    /// Seconds to keep receiving after the last probe.
    pub cooldown: f64,
    pub iface: String,
    pub src_mac: MacAddr,
    pub gateway_mac: MacAddr,
    pub src_ip: Option<Ipv4Addr>,
    pub src_ip6: Option<Ipv6Addr>,
    /// The IPv4 source is the interface's own, so its kernel answers what it sees.
    pub source_is_local: bool,
    /// Queues of the interface.
    pub queues: u32,
    /// The CPUs sonde's threads may use: `None`, any (senders spread over all CPUs, the
    /// receiver where the scheduler puts it); `Some`, only these (a lab whose targets run on
    /// the other CPUs says which are left for the scanner).
    pub cpus: Option<Vec<usize>>,
    pub backend: BackendKind,
    pub rx_backend: BackendKind,
    pub xdp_mode: XdpMode,
    pub ports: PortRange,
    pub resume: Option<Checkpoint>,
    /// The file `resume` was read from (`--resume`).
    pub resumed_from: Option<PathBuf>,
    pub checkpoint: PathBuf,
    pub status_file: Option<PathBuf>,
    /// `--force`: an output file that exists may be overwritten (the status file is opened by
    /// the run; the command checks the others before it starts).
    pub overwrite: bool,
    pub quiet: bool,
    /// Where the status line publishes its figures for `--metrics` (None: nowhere).
    pub metrics: Option<sonde_meter::metrics::Publisher>,
}

impl RunPlan {
    pub fn feed_spec(&self) -> FeedSpec {
        FeedSpec {
            targets: self.space.len(),
            seed: self.seed,
            shard: self.shard,
            threads: self.threads,
            probes: self.probes,
            max_targets: self.max_targets,
        }
    }

    /// Thread `t`'s state in the checkpoint being resumed, if any.
    pub fn resumed_thread(&self, t: u32) -> Option<&ThreadCheckpoint> {
        self.resume.as_ref().map(|c| &c.threads[t as usize])
    }

    /// Where and how to open queue `queue`.
    pub fn io_config(&self, queue: u32) -> IoConfig {
        let mut io = IoConfig::new(&self.iface);
        io.queue = queue;
        io.batch = self.batch.max(256);
        io.xdp_mode = self.xdp_mode;
        io
    }

    /// Probes sent before this run (by the runs this one resumes).
    pub fn sent_before(&self) -> u64 {
        self.resume.as_ref().map_or(0, |c| c.sent)
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

/// The CPU of sender thread `t`: the `t`-th of `cpus` (round robin), or CPU `t % online` with
/// no set.
pub fn thread_cpu(cpus: Option<&[usize]>, t: usize) -> usize {
    match cpus {
        Some(cpus) if !cpus.is_empty() => cpus[t % cpus.len()],
        _ => t % std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

impl RunPlan {
    /// The CPU of sender thread `t`.
    pub fn sender_cpu(&self, t: usize) -> usize {
        thread_cpu(self.cpus.as_deref(), t)
    }

    /// Confines the calling (receiving) thread to the run's CPUs, when the run has a set.
    pub fn confine_receiver(&self) {
        if let Some(cpus) = self.cpus.as_deref().filter(|c| !c.is_empty()) {
            let mut set = nix::sched::CpuSet::new();
            for &cpu in cpus {
                let _ = set.set(cpu);
            }
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
    }
}
