//! The status line of a dns run, once a second.

use crate::status::{per_second, StatusLine, StatusSource, Tick};
use sonde_meter::output_file::IfExists;

use super::{DnsPlan, DnsStats};

#[derive(Default)]
pub struct DnsStatus {
    stats: DnsStats,
    in_flight: usize,
    read: u64,
    last_rows: u64,
    last_sent: u64,
}

impl DnsStatus {
    pub fn update(&mut self, stats: &DnsStats, in_flight: usize, read: u64) {
        self.stats = stats.clone();
        self.in_flight = in_flight;
        self.read = read;
    }
}

pub(super) fn line(plan: &DnsPlan) -> anyhow::Result<StatusLine<DnsStatus>> {
    StatusLine::new(
        DnsStatus::default(),
        plan.quiet,
        plan.status_file.as_deref(),
        IfExists::force(plan.overwrite),
    )
}

impl StatusSource for DnsStatus {
    fn csv_header(&self) -> &'static str {
        "lookups_read,rows,rows_per_s,queries,queries_per_s,in_flight,retries,timeouts,invalid"
    }

    fn sample(&mut self, tick: &Tick) -> (String, String) {
        let s = &self.stats;
        let rows_rate = (s.rows - self.last_rows) as f64 / tick.dt.max(1e-9);
        let sent_rate = (s.queries_sent - self.last_sent) as f64 / tick.dt.max(1e-9);
        (self.last_rows, self.last_sent) = (s.rows, s.queries_sent);
        let timeouts = s.by_status.get("TIMEOUT").copied().unwrap_or(0);
        let text = format!(
            "{} rows at {}; {} queries at {}; {} in flight; {} retries, {} timeouts, {} invalid",
            s.rows,
            per_second(rows_rate, ""),
            s.queries_sent,
            per_second(sent_rate, "q"),
            self.in_flight,
            s.retries,
            timeouts,
            s.invalid.total()
        );
        let csv = format!(
            "{},{},{rows_rate:.0},{},{sent_rate:.0},{},{},{timeouts},{}",
            self.read,
            s.rows,
            s.queries_sent,
            self.in_flight,
            s.retries,
            s.invalid.total()
        );
        (text, csv)
    }

    fn seconds_left(&self) -> Option<f64> {
        None
    }

    fn paced(&self) -> u64 {
        self.stats.queries_sent
    }
}
