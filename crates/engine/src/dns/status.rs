//! The status line of a dns run, once a second.

use crate::status::{per_second, Phase, StatusLine, StatusSource, Tick};
use sonde_meter::metrics::Page;
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
    Ok(StatusLine::new(
        DnsStatus::default(),
        plan.quiet,
        plan.status_file.as_deref(),
        IfExists::force(plan.overwrite),
    )?
    .publishing(plan.metrics.clone()))
}

impl StatusSource for DnsStatus {
    fn csv_header(&self) -> &'static str {
        "lookups_read,rows,rows_per_s,queries,queries_per_s,in_flight,retries,timeouts,invalid"
    }

    fn sample(&mut self, tick: &Tick) -> (String, String) {
        let s = &self.stats;
        // The last line comes right after the one before: the whole run's rates, not the
        // rows and queries of the last few milliseconds.
        let (rows, sent, dt) = match tick.phase {
            Phase::Done => (s.rows, s.queries_sent, tick.elapsed),
            _ => (
                s.rows - self.last_rows,
                s.queries_sent - self.last_sent,
                tick.dt,
            ),
        };
        let rows_rate = rows as f64 / dt.max(1e-9);
        let sent_rate = sent as f64 / dt.max(1e-9);
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

    fn metrics(&self, page: &mut Page) {
        let s = &self.stats;
        page.counter(
            "sonde_sent_total",
            "Queries sent (what -r paces), retries included",
            s.queries_sent,
        );
        page.counter("sonde_dns_rows_total", "Lookups ended, a row each", s.rows);
        let by_status: Vec<(&str, u64)> =
            s.by_status.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        page.counters(
            "sonde_dns_rows_by_status_total",
            "Rows by status: the answer's rcode, TIMEOUT or ERROR",
            "status",
            &by_status,
        );
        page.counter("sonde_dns_retries_total", "Queries sent again", s.retries);
        let i = &s.invalid;
        page.counters(
            "sonde_dns_invalid_total",
            "Answers not taken, by why (as the summary's invalid counts them)",
            "reason",
            &[
                ("not_ours", i.not_ours),
                ("wrong_server", i.wrong_server),
                ("wrong_question", i.wrong_question),
                ("malformed", i.malformed.values().sum()),
                ("checksum", i.checksum),
            ],
        );
        page.gauge(
            "sonde_dns_in_flight",
            "Lookups waiting for an answer",
            self.in_flight as f64,
        );
        page.counter(
            "sonde_dns_lookups_read_total",
            "Lookups read from the input",
            self.read,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(elapsed: f64, dt: f64, phase: Phase) -> Tick {
        Tick { elapsed, dt, phase }
    }

    #[test]
    fn the_last_line_gives_the_whole_runs_rates() {
        let mut status = DnsStatus::default();
        let mut stats = DnsStats {
            rows: 900,
            queries_sent: 1_000,
            ..DnsStats::default()
        };
        status.update(&stats, 0, 1_000);
        let (text, _) = status.sample(&tick(1.0, 1.0, Phase::Sending { done: 0.9 }));
        assert!(
            text.starts_with("900 rows at 900 /s; 1000 queries at 1.0 kq/s"),
            "{text}"
        );
        // 100 more rows 10 ms later, and the run ends: 1,000 rows in 2 s, not 100 in 10 ms
        // nor none at all.
        stats.rows = 1_000;
        status.update(&stats, 0, 1_000);
        let (text, csv) = status.sample(&tick(2.0, 0.01, Phase::Done));
        assert!(csv.starts_with("1000,1000,500,1000,500,"), "{csv}");
        assert!(
            text.starts_with("1000 rows at 500 /s; 1000 queries at 500 q/s"),
            "{text}"
        );
    }
}
