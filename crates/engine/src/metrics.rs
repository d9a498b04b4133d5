//! A run's Prometheus exporter (`--metrics ADDR:PORT`, `--metrics-linger S` of scan, grab,
//! capture, intercept and blast): bound where the command runs (in a lab's scanner namespace
//! with `--lab`), fed by the run's status line, given the summary at the end, and kept up for
//! the linger.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sonde_meter::metrics::{Exporter, Labels, Page, Progress, Publisher};

use crate::status::to_stderr;
use crate::stop::Stop;

/// What the series of a run are labelled with, and its target rate.
pub struct RunLabels<'a> {
    pub command: &'a str,
    pub module: &'a str,
    pub backend: &'a str,
    pub shard: u32,
    pub target_rate: f64,
}

/// A run's exporter, when --metrics asked for one.
pub struct Metrics {
    exporter: Option<Exporter>,
    linger: Duration,
}

impl Metrics {
    /// Binds the exporter (before anything is sent or any output made, so a taken port fails
    /// the command at once, leaving nothing behind) and says where it listens, unless `quiet`.
    /// `addr`: where to serve (None: no exporter); `hosts`: names besides the address that the
    /// page is served for (`--metrics-host`); `linger_s`: seconds to stay up after the end.
    pub fn start(
        addr: Option<SocketAddr>,
        hosts: &[String],
        linger_s: f64,
        run: RunLabels,
        quiet: bool,
    ) -> anyhow::Result<Metrics> {
        let exporter = match addr {
            None => None,
            Some(addr) => {
                let labels = Labels::new(run.command, run.module, run.backend, run.shard);
                let exporter = Exporter::bind(addr, labels, run.target_rate, hosts).with_context(|| {
                    format!("cannot serve --metrics on {addr}: give a free address and port of this host (inside the lab's scanner namespace with --lab)")
                })?;
                if !quiet {
                    to_stderr(format_args!(
                        "{}: metrics at http://{}/metrics",
                        run.command,
                        exporter.local_addr()
                    ));
                }
                Some(exporter)
            }
        };
        Ok(Metrics {
            exporter,
            linger: Duration::from_secs_f64(linger_s),
        })
    }

    /// Where the exporter listens (None without --metrics).
    pub fn address(&self) -> Option<SocketAddr> {
        self.exporter.as_ref().map(Exporter::local_addr)
    }

    /// What the run's status line publishes to (None without --metrics).
    pub fn publisher(&self) -> Option<Publisher> {
        self.exporter.as_ref().map(Exporter::publisher)
    }

    /// The run has ended: the page gains `summary` (as --summary-json writes it), and stays
    /// up for the linger (a stop signal cuts it short).
    pub fn end(self, summary: &impl Serialize) -> anyhow::Result<()> {
        let Some(exporter) = self.exporter else {
            return Ok(());
        };
        exporter
            .publisher()
            .publish_summary(&serde_json::to_value(summary)?);
        if !self.linger.is_zero() {
            let stop = Stop::on_signals()?;
            exporter.linger(self.linger, || stop.is_set());
        }
        Ok(())
    }
}

/// How often the commands that keep their own status (blast, capture, intercept) publish.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The live page of a command that keeps its own status line (blast, capture, intercept):
/// where the run is, from the counter it follows, and the command's own series.
pub struct LivePage {
    publisher: Publisher,
    started: Instant,
    last: (Instant, u64),
}

impl LivePage {
    pub fn new(publisher: Publisher) -> LivePage {
        let now = Instant::now();
        LivePage {
            publisher,
            started: now,
            last: (now, 0),
        }
    }

    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Whether a second has passed since the last page.
    pub fn due(&self) -> bool {
        self.last.0.elapsed() >= PUBLISH_EVERY
    }

    /// Publishes a page: `counted` (frames sent or captured; its rate since the last page),
    /// `done` (0 to 1, NaN without a set end), whether the run goes on, and `series`.
    pub fn publish(
        &mut self,
        counted: u64,
        done: f64,
        running: bool,
        series: impl FnOnce(&mut Page),
    ) {
        let now = Instant::now();
        let dt = now.duration_since(self.last.0).as_secs_f64().max(1e-6);
        let rate = counted.saturating_sub(self.last.1) as f64 / dt;
        self.last = (now, counted);
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let seconds_left = match (running, done) {
            (false, _) => 0.0,
            (true, d) if d > 0.0 && d < 1.0 => elapsed * (1.0 - d) / d,
            _ => f64::NAN,
        };
        let mut page = self.publisher.live_page();
        page.progress(&Progress {
            rate,
            done: if running { done } else { 1.0 },
            seconds_left,
            elapsed,
            running,
        });
        series(&mut page);
        self.publisher.publish(page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `name` on `page`.
    fn value(page: &str, name: &str) -> f64 {
        let prefix = format!("{name}{{");
        let line = page.lines().find(|l| l.starts_with(&prefix)).unwrap();
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }

    #[test]
    fn a_live_page_tells_the_time_left_from_the_share_done() {
        let publisher = Publisher::unserved(Labels::new("blast", "syn", "xdp", 0), 0.0);
        let mut live = LivePage::new(publisher.clone());
        std::thread::sleep(Duration::from_millis(20));
        live.publish(100, 0.25, true, |page| {
            page.counter("sonde_sent_total", "Frames sent", 100)
        });
        let page = publisher.current();
        let (elapsed, left) = (
            value(&page, "sonde_elapsed_seconds"),
            value(&page, "sonde_seconds_left"),
        );
        // A quarter done in `elapsed`: three times as long to go.
        assert!((left - 3.0 * elapsed).abs() < 1e-9, "{page}");
        assert!(value(&page, "sonde_rate") > 0.0);
        assert_eq!(value(&page, "sonde_sent_total"), 100.0);
        live.publish(100, f64::NAN, true, |_| {});
        assert!(value(&publisher.current(), "sonde_seconds_left").is_nan());
        live.publish(100, 0.5, false, |_| {});
        let last = publisher.current();
        assert_eq!(value(&last, "sonde_running"), 0.0);
        assert_eq!(value(&last, "sonde_done_ratio"), 1.0);
        assert_eq!(value(&last, "sonde_seconds_left"), 0.0);
    }
}
