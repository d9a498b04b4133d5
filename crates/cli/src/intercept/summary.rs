//! The end of a run: one table on stdout and, with --summary-json, the same as JSON.

use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;
use sonde_intercept::{Rule, RuleCounter, Totals};
use sonde_meter::CpuTimes;

use super::Common;

/// One rule's matches over all threads.
#[derive(Serialize)]
pub struct RuleLine {
    pub rule: String,
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
}

impl RuleLine {
    pub fn collect(rules: &[Rule], per_thread: &[std::sync::Arc<[RuleCounter]>]) -> Vec<RuleLine> {
        rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let sum = |f: fn(&RuleCounter) -> u64| per_thread.iter().map(|t| f(&t[i])).sum();
                RuleLine {
                    rule: rule.text.clone(),
                    packets: sum(|c| c.packets.load(Relaxed)),
                    bytes: sum(|c| c.bytes.load(Relaxed)),
                    dropped: sum(|c| c.dropped.load(Relaxed)),
                }
            })
            .collect()
    }
}

#[derive(Serialize)]
pub struct Summary<'a> {
    pub mode: &'a str,
    /// How packets were taken and sent (e.g. the AF_XDP attach mode the kernel accepted).
    pub io: String,
    pub threads: u16,
    pub batch: u16,
    pub fail_open: bool,
    pub wall_s: f64,
    #[serde(flatten)]
    pub totals: Totals,
    pub mean_batch: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub cpu_ns_per_packet: f64,
    pub rules: Vec<RuleLine>,
    pub per_thread: Vec<Totals>,
}

impl<'a> Summary<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: &'a str,
        io: String,
        common: &Common,
        totals: Totals,
        per_thread: &[Totals],
        rules: Vec<RuleLine>,
        wall: Duration,
        cpu: CpuTimes,
    ) -> Summary<'a> {
        let cpu_ns = cpu.total().as_nanos() as f64;
        Summary {
            mode,
            io,
            threads: common.threads,
            batch: common.batch,
            fail_open: common.fail_open,
            wall_s: wall.as_secs_f64(),
            totals,
            mean_batch: totals.mean_batch(),
            cpu_user_s: cpu.user.as_secs_f64(),
            cpu_sys_s: cpu.system.as_secs_f64(),
            cpu_ns_per_packet: if totals.packets > 0 {
                cpu_ns / totals.packets as f64
            } else {
                0.0
            },
            rules,
            per_thread: per_thread.to_vec(),
        }
    }

    pub fn print(&self) {
        let t = &self.totals;
        crate::say(format!(
            "intercept {}: {} packets ({} bytes) in {:.1} s: passed {}, dropped {}, rewritten {}; lost {}; reordered {}",
            self.mode, t.packets, t.bytes, self.wall_s, t.passed, t.dropped, t.rewritten, t.lost, t.reordered
        ));
        crate::say(format!(
            "  {} batches, {:.1} packets each; CPU {:.2} s user + {:.2} s sys = {:.0} ns per packet",
            t.batches, self.mean_batch, self.cpu_user_s, self.cpu_sys_s, self.cpu_ns_per_packet
        ));
        crate::say(format!("  through {}", self.io));
        for r in &self.rules {
            crate::say(format!(
                "  rule \"{}\": {} packets, {} dropped",
                r.rule, r.packets, r.dropped
            ));
        }
        if self.per_thread.len() > 1 {
            for (i, th) in self.per_thread.iter().enumerate() {
                crate::say(format!(
                    "  thread {i}: {} packets, {} batches",
                    th.packets, th.batches
                ));
            }
        }
    }

    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| anyhow::anyhow!("--summary-json {}: {e}", path.display()))
    }
}
