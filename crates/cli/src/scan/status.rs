//! The ZMap-style status line, once a second on stderr (and, with --status-file, as a CSV row):
//! elapsed, % done, send rate, receive rate, drops, hit rate, time left.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_meter::human_rate;

use super::engine::Counts;
use super::ScanPlan;

pub struct StatusLine {
    counts: Arc<Counts>,
    start: Instant,
    last: Instant,
    last_sent: u64,
    last_received: u64,
    total: u64,
    quiet: bool,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

impl StatusLine {
    pub fn new(plan: &ScanPlan, counts: Arc<Counts>) -> anyhow::Result<StatusLine> {
        let file = match &plan.status_file {
            Some(path) => {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .with_context(|| format!("creating {}", path.display()))?,
                );
                writeln!(f, "elapsed_s,sent,send_pps,received,recv_pps,valid,invalid,hits,repeats,drops,percent_done")?;
                Some(f)
            }
            None => None,
        };
        let mut total = plan.space.len() / u64::from(plan.shard.1).max(1);
        if let Some(n) = plan.max_targets {
            total = total.min(n);
        }
        let now = Instant::now();
        Ok(StatusLine {
            counts,
            start: now,
            last: now,
            last_sent: 0,
            last_received: 0,
            total: total * u64::from(plan.probes),
            quiet: plan.quiet,
            file,
        })
    }

    /// Prints a line if a second has passed (or `force`).
    pub fn tick(&mut self, force: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let dt = now.duration_since(self.last);
        if dt < Duration::from_secs(1) && !force {
            return Ok(());
        }
        let c = &self.counts;
        let (sent, received) = (c.sent.get(), c.received.get());
        let dt_s = dt.as_secs_f64().max(1e-6);
        let send_pps = (sent - self.last_sent) as f64 / dt_s;
        let recv_pps = (received - self.last_received) as f64 / dt_s;
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let done = if self.total == 0 {
            100.0
        } else {
            100.0 * sent as f64 / self.total as f64
        };
        let hit_rate = if sent == 0 {
            0.0
        } else {
            100.0 * c.hits.get() as f64 / sent as f64
        };
        let left = if send_pps > 0.0 && sent < self.total {
            format!("{:.0} s left", (self.total - sent) as f64 / send_pps)
        } else {
            "receiving".into()
        };
        if !self.quiet {
            eprintln!(
                "{:>4.0} s {:>5.1}% ({left}); send: {sent} {}p/s; recv: {received} {}p/s; valid {}, invalid {}; drops: {}; hits: {hit_rate:.2}%",
                elapsed,
                done.min(100.0),
                human_rate(send_pps),
                human_rate(recv_pps),
                c.valid.get(),
                c.invalid.get(),
                c.drops.get()
            );
        }
        if let Some(f) = &mut self.file {
            writeln!(
                f,
                "{elapsed:.3},{sent},{send_pps:.0},{received},{recv_pps:.0},{},{},{},{},{},{done:.2}",
                c.valid.get(),
                c.invalid.get(),
                c.hits.get(),
                c.repeats.get(),
                c.drops.get()
            )?;
            f.flush()?;
        }
        (self.last, self.last_sent, self.last_received) = (now, sent, received);
        Ok(())
    }
}
