//! Measurement: what every tool reports about itself — wall time, CPU time (getrusage, since
//! hardware counters are often unavailable in VMs), packet rates, line-rate share, and a
//! summary that prints as text or one JSON object.
//!
//! Takes counts, times and CPU usage from every tool; gives summaries (text or JSON), stage
//! profiles and output files opened safely. Uses no other sonde crate: every crate that measures
//! uses this one.

pub mod fit;
pub mod metrics;
pub mod output_file;
pub mod stages;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;
use serde::Serialize;

/// Bytes a frame occupies on an Ethernet wire beyond its own: FCS (4), preamble and start
/// delimiter (8) and the inter-frame gap (12).
pub const WIRE_OVERHEAD: u64 = 24;

/// CPU time of this process so far (all threads).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTimes {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTimes {
    /// This process's CPU time (all threads).
    pub fn now() -> CpuTimes {
        Self::of(UsageWho::RUSAGE_SELF)
    }

    /// The calling thread's CPU time: what one stage of a pipeline (a sender, a receiver)
    /// costs on its own.
    pub fn thread_now() -> CpuTimes {
        Self::of(UsageWho::RUSAGE_THREAD)
    }

    fn of(who: UsageWho) -> CpuTimes {
        match getrusage(who) {
            Ok(usage) => CpuTimes {
                user: timeval(usage.user_time()),
                system: timeval(usage.system_time()),
            },
            Err(_) => CpuTimes::default(),
        }
    }

    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }

    pub fn total(&self) -> Duration {
        self.user + self.system
    }
}

fn timeval(tv: TimeVal) -> Duration {
    Duration::new(tv.tv_sec().max(0) as u64, tv.tv_usec().max(0) as u32 * 1000)
}

/// Times the scheduler took the CPU from the calling thread so far (its involuntary context
/// switches): a thread that never blocks is switched out only to run something else.
pub fn involuntary_switches() -> u64 {
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |u| u.involuntary_context_switches().max(0) as u64)
}

/// Peak resident set size of this process, in bytes.
pub fn peak_rss_bytes() -> u64 {
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |u| u.max_rss().max(0) as u64 * 1024)
}

/// Wall clock and CPU time from one starting point.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    wall: Instant,
    cpu: CpuTimes,
}

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch {
            wall: Instant::now(),
            cpu: CpuTimes::now(),
        }
    }

    pub fn wall(&self) -> Duration {
        self.wall.elapsed()
    }

    pub fn cpu(&self) -> CpuTimes {
        CpuTimes::now().since(&self.cpu)
    }
}

/// A packet counter shared between a worker and the status line, on its own cache line so
/// workers do not slow each other down.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// For gauges (e.g. connections open now) that one thread updates and others read.
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
}

/// Parses a link speed such as `1g`, `10g`, `100m`, `2.5g` into Gbit/s.
pub fn parse_link(text: &str) -> Result<f64, String> {
    let t = text.trim().to_ascii_lowercase();
    let (number, scale) = match t.strip_suffix('g') {
        Some(n) => (n, 1.0),
        None => match t.strip_suffix('m') {
            Some(n) => (n, 1e-3),
            None => (t.as_str(), 1.0),
        },
    };
    match number.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * scale),
        _ => Err(format!(
            "invalid link speed \"{text}\": use a number with m or g, like 1g, 10g or 100m"
        )),
    }
}

/// What a transmit run reports; `blast` prints it and writes it as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct TxSummary {
    pub packets: u64,
    pub wall_s: f64,
    pub pps: f64,
    /// Line bits per second, frames counted with FCS, preamble and gap.
    pub gbps: f64,
    pub link_gbps: f64,
    pub link_percent: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub cpu_ns_per_packet: f64,
    pub backend: String,
    pub batch: usize,
    pub threads: usize,
    pub frame_size: usize,
    pub how: String,
}

impl TxSummary {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        packets: u64,
        wall: Duration,
        cpu: CpuTimes,
        frame_size: usize,
        link_gbps: f64,
        backend: &str,
        batch: usize,
        threads: usize,
        how: &str,
    ) -> TxSummary {
        let wall_s = wall.as_secs_f64().max(1e-9);
        let pps = packets as f64 / wall_s;
        let gbps = pps * ((frame_size as u64 + WIRE_OVERHEAD) * 8) as f64 / 1e9;
        let cpu_ns_per_packet = if packets == 0 {
            0.0
        } else {
            cpu.total().as_nanos() as f64 / packets as f64
        };
        TxSummary {
            packets,
            wall_s,
            pps,
            gbps,
            link_gbps,
            link_percent: 100.0 * gbps / link_gbps,
            cpu_user_s: cpu.user.as_secs_f64(),
            cpu_sys_s: cpu.system.as_secs_f64(),
            cpu_ns_per_packet,
            backend: backend.to_string(),
            batch,
            threads,
            frame_size,
            how: how.to_string(),
        }
    }

    /// The human summary, a few aligned lines.
    pub fn to_text(&self) -> String {
        format!(
            "sent      {} frames of {} bytes in {:.3} s ({}, batch {}, {} thread{}; {})\n\
             rate      {} pps, {:.3} Gbit/s on the wire = {:.1} % of {} Gbit/s\n\
             cpu       user {:.3} s, system {:.3} s = {:.1} ns per packet",
            self.packets,
            self.frame_size,
            self.wall_s,
            self.backend,
            self.batch,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.how,
            human_rate(self.pps),
            self.gbps,
            self.link_percent,
            self.link_gbps,
            self.cpu_user_s,
            self.cpu_sys_s,
            self.cpu_ns_per_packet
        )
    }
}

/// `1234567.0` → `"1.235 M"`.
pub fn human_rate(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.3} M", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1} k", pps / 1e3)
    } else {
        format!("{pps:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_speeds_parse() {
        assert_eq!(parse_link("10g").unwrap(), 10.0);
        assert_eq!(parse_link("100M").unwrap(), 0.1);
        assert_eq!(parse_link("2.5g").unwrap(), 2.5);
        assert!(parse_link("fast").unwrap_err().contains("fast"));
        assert!(parse_link("-1g").is_err());
    }

    #[test]
    fn line_rate_counts_preamble_and_gap() {
        // 10 GbE carries 14.88 Mpps of minimum frames: 60 bytes + FCS + preamble + gap = 84.
        let s = TxSummary::new(
            14_880_952,
            Duration::from_secs(1),
            CpuTimes::default(),
            60,
            10.0,
            "x",
            64,
            1,
            "",
        );
        assert!((s.link_percent - 100.0).abs() < 0.01, "{}", s.link_percent);
    }

    #[test]
    fn cpu_time_moves_forward() {
        let sw = Stopwatch::start();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(sw.cpu().total() > Duration::ZERO);
        assert!(peak_rss_bytes() > 0);
    }
}
