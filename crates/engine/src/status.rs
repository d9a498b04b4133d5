//! The live status line, once a second on stderr (and with `--status-file`, as a CSV row): the
//! same frame for every tool — elapsed time, progress, time left or the cooldown's countdown —
//! around what the tool itself reports (a [`StatusSource`]).

use std::fmt::Display;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use sonde_meter::metrics::{Page, Progress, Publisher};
use sonde_meter::output_file::{self, IfExists, Output};

/// Where a run is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Sending; the fraction done (0..=1).
    Sending { done: f64 },
    /// Sending has ended; still receiving until the deadline.
    Cooldown { until: Instant },
    /// The run has ended: the last line, with the final figures.
    Done,
}

/// One status tick, as a source sees it.
pub struct Tick {
    /// Seconds since the run started.
    pub elapsed: f64,
    /// Seconds since the previous tick.
    pub dt: f64,
    pub phase: Phase,
}

/// What a tool reports on its status line.
pub trait StatusSource {
    /// The CSV header of its columns (after `elapsed_s,phase,percent_done`).
    fn csv_header(&self) -> &'static str;
    /// Its part of the line as text, and the same figures as a CSV row. Rates are the source's
    /// to compute (it knows which counters matter, and when its own sending ended).
    fn sample(&mut self, tick: &Tick) -> (String, String);
    /// Seconds of sending left at the current pace, if the source can tell.
    fn seconds_left(&self) -> Option<f64>;
    /// What the pace (`-r`) counts so far: probes, SYNs. Its rate is the current rate that
    /// `--metrics` reports.
    fn paced(&self) -> u64 {
        0
    }
    /// The share of the work done once sending has ended (the cooldown's and the last
    /// line's): all of it, unless the run stopped early, when it is what was done.
    fn share_done_at_end(&self) -> f64 {
        1.0
    }
    /// Its series for `--metrics`: the counters it already reads for the line (called right
    /// after [`StatusSource::sample`], once a tick, never on a hot path).
    fn metrics(&self, _page: &mut Page) {}
}

/// Where a status line publishes its figures for `--metrics`, and the paced count at the last
/// tick.
struct MetricsFeed {
    publisher: Publisher,
    last_paced: u64,
}

pub struct StatusLine<S: StatusSource> {
    source: S,
    start: Instant,
    last: Instant,
    quiet: bool,
    file: Option<std::io::BufWriter<Output>>,
    last_text: String,
    metrics: Option<MetricsFeed>,
}

impl<S: StatusSource> StatusLine<S> {
    /// A status line on stderr (unless `quiet`), and in `file` as CSV, opened as every output
    /// is (`if_exists`: refused if it exists, unless --force).
    pub fn new(
        source: S,
        quiet: bool,
        file: Option<&Path>,
        if_exists: IfExists,
    ) -> anyhow::Result<Self> {
        let file = match file {
            Some(path) => {
                let mut f = std::io::BufWriter::new(output_file::open(path, if_exists)?);
                writeln!(f, "elapsed_s,phase,percent_done,{}", source.csv_header())?;
                Some(f)
            }
            None => None,
        };
        let now = Instant::now();
        Ok(StatusLine {
            source,
            start: now,
            last: now,
            quiet,
            file,
            last_text: String::new(),
            metrics: None,
        })
    }

    /// Publishes every tick's figures to `publisher` too (`--metrics`), starting now.
    pub fn publishing(mut self, publisher: Option<Publisher>) -> Self {
        self.metrics = publisher.map(|publisher| MetricsFeed {
            publisher,
            last_paced: self.source.paced(),
        });
        self.publish(0.0, 0.0, 1.0, Phase::Sending { done: 0.0 });
        self
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Prints a line if a second has passed since the last (or `force`). A forced line whose
    /// figures equal the last one's is not printed again.
    pub fn tick(&mut self, phase: Phase, force: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let dt = now.duration_since(self.last);
        if dt < Duration::from_secs(1) && !force {
            return Ok(());
        }
        let tick = Tick {
            elapsed: now.duration_since(self.start).as_secs_f64(),
            dt: dt.as_secs_f64().max(1e-6),
            phase,
        };
        let (text, row) = self.source.sample(&tick);
        let (phase_name, percent, where_) = match phase {
            Phase::Sending { done } => {
                let left = match self.source.seconds_left() {
                    Some(s) => format!("{} left", human_seconds(s)),
                    None => "sending".into(),
                };
                ("sending", 100.0 * done.clamp(0.0, 1.0), left)
            }
            Phase::Cooldown { until } => {
                let left = until.saturating_duration_since(now).as_secs_f64();
                (
                    "cooldown",
                    100.0 * self.source.share_done_at_end().clamp(0.0, 1.0),
                    format!("receiving, {} left", human_seconds(left)),
                )
            }
            Phase::Done => (
                "done",
                100.0 * self.source.share_done_at_end().clamp(0.0, 1.0),
                "done".to_string(),
            ),
        };
        let line = format!(
            "{:>5} {percent:>5.1}% ({where_}); {text}",
            human_seconds(tick.elapsed)
        );
        let repeat = force && text == self.last_text;
        if !self.quiet && !repeat {
            to_stderr(line);
        }
        self.last_text = text;
        if let Some(f) = &mut self.file {
            writeln!(f, "{:.3},{phase_name},{percent:.2},{row}", tick.elapsed)?;
            f.flush()?;
        }
        self.publish(tick.elapsed, percent / 100.0, tick.dt, phase);
        self.last = now;
        Ok(())
    }

    /// The tick's page for `--metrics`: where the run is, the current rate, and the source's
    /// own series.
    fn publish(&mut self, elapsed: f64, done: f64, dt: f64, phase: Phase) {
        let Some(feed) = &mut self.metrics else {
            return;
        };
        let paced = self.source.paced();
        let rate = paced.saturating_sub(feed.last_paced) as f64 / dt;
        feed.last_paced = paced;
        let seconds_left = match phase {
            Phase::Sending { .. } => self.source.seconds_left().unwrap_or(f64::NAN),
            Phase::Cooldown { until } => until
                .saturating_duration_since(Instant::now())
                .as_secs_f64(),
            Phase::Done => 0.0,
        };
        let mut page = feed.publisher.live_page();
        page.progress(&Progress {
            rate,
            done,
            seconds_left,
            elapsed,
            running: phase != Phase::Done,
        });
        self.source.metrics(&mut page);
        feed.publisher.publish(page);
    }
}

/// Writes one line to stderr, and goes on if it cannot: after a hangup (a dropped SSH session)
/// the terminal is gone, and `eprintln!` would abort sonde (its release build aborts on a
/// panic) before the run's output is finished.
pub fn to_stderr(line: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// `0.4 s`, `12 s`, `3 min 20 s`, `2 h 05 min`.
pub fn human_seconds(s: f64) -> String {
    if s < 9.95 {
        format!("{s:.1} s")
    } else if s < 60.0 {
        format!("{s:.0} s")
    } else if s < 3600.0 {
        format!("{} min {:02.0} s", (s / 60.0) as u64, s % 60.0)
    } else {
        format!(
            "{} h {:02} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// A rate with one unit style everywhere: `182 p/s`, `2.0 kp/s`, `1.23 Mp/s`.
pub fn per_second(rate: f64, unit: &str) -> String {
    if rate >= 1e6 {
        format!("{:.2} M{unit}/s", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1} k{unit}/s", rate / 1e3)
    } else {
        format!("{rate:.0} {unit}/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);
    impl StatusSource for Fixed {
        fn csv_header(&self) -> &'static str {
            "n"
        }
        fn sample(&mut self, _: &Tick) -> (String, String) {
            (format!("n {}", self.0), self.0.to_string())
        }
        fn seconds_left(&self) -> Option<f64> {
            Some(3.0)
        }
    }

    /// A source with metrics: `paced` probes so far.
    struct Counting {
        paced: u64,
    }
    impl StatusSource for Counting {
        fn csv_header(&self) -> &'static str {
            "n"
        }
        fn sample(&mut self, _: &Tick) -> (String, String) {
            (self.paced.to_string(), self.paced.to_string())
        }
        fn seconds_left(&self) -> Option<f64> {
            Some(7.0)
        }
        fn paced(&self) -> u64 {
            self.paced
        }
        fn metrics(&self, page: &mut Page) {
            page.counter("sonde_sent_total", "Probes sent", self.paced);
        }
    }

    /// The value of the series `name` (no extra labels) on `page`.
    fn value(page: &str, name: &str) -> String {
        let prefix = format!("{name}{{");
        let line = page.lines().find(|l| l.starts_with(&prefix)).unwrap();
        line.rsplit_once(' ').unwrap().1.to_string()
    }

    #[test]
    fn every_tick_publishes_where_the_run_is_and_the_sources_series() {
        use sonde_meter::metrics::Labels;
        let publisher = Publisher::unserved(Labels::new("scan", "tcp_syn", "xdp", 0), 500.0);
        let source = Counting { paced: 0 };
        let mut s = StatusLine::new(source, true, None, IfExists::Refuse)
            .unwrap()
            .publishing(Some(publisher.clone()));
        let first = publisher.current();
        assert_eq!(value(&first, "sonde_sent_total"), "0", "published at once");
        assert_eq!(value(&first, "sonde_target_rate"), "500");
        s.source_mut().paced = 40;
        s.tick(Phase::Sending { done: 0.25 }, true).unwrap();
        let page = publisher.current();
        assert_eq!(value(&page, "sonde_sent_total"), "40");
        assert_eq!(value(&page, "sonde_done_ratio"), "0.25");
        assert_eq!(value(&page, "sonde_seconds_left"), "7");
        assert_eq!(value(&page, "sonde_running"), "1");
        let rate: f64 = value(&page, "sonde_rate").parse().unwrap();
        assert!(rate > 0.0, "40 probes since the last page: {page}");
        s.tick(Phase::Done, true).unwrap();
        let last = publisher.current();
        assert_eq!(value(&last, "sonde_running"), "0");
        assert_eq!(value(&last, "sonde_done_ratio"), "1");
        assert_eq!(value(&last, "sonde_seconds_left"), "0");
        assert_eq!(value(&last, "sonde_rate"), "0", "nothing paced since");
        assert_eq!(last.matches("# TYPE sonde_sent_total counter").count(), 1);
    }

    /// A run stopped at 44 %: its cooldown and last lines said 100 %.
    struct StoppedAt(f64);
    impl StatusSource for StoppedAt {
        fn csv_header(&self) -> &'static str {
            "n"
        }
        fn sample(&mut self, _: &Tick) -> (String, String) {
            ("n".into(), "0".into())
        }
        fn seconds_left(&self) -> Option<f64> {
            None
        }
        fn share_done_at_end(&self) -> f64 {
            self.0
        }
    }

    #[test]
    fn a_run_stopped_early_ends_at_the_share_it_reached() {
        let path =
            std::env::temp_dir().join(format!("sonde-status-stop-{}.csv", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let labels = sonde_meter::metrics::Labels::new("scan", "tcp_syn", "xdp", 0);
        let publisher = Publisher::unserved(labels, 0.0);
        let mut s = StatusLine::new(StoppedAt(0.44), true, Some(&path), IfExists::Refuse)
            .unwrap()
            .publishing(Some(publisher.clone()));
        let until = Instant::now() + Duration::from_secs(1);
        s.tick(Phase::Cooldown { until }, true).unwrap();
        s.tick(Phase::Done, true).unwrap();
        drop(s);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains(",cooldown,44.00,"), "{text}");
        assert!(lines[2].contains(",done,44.00,"), "{text}");
        let page = publisher.current();
        let done = page
            .lines()
            .find(|l| l.starts_with("sonde_done_ratio{"))
            .unwrap();
        assert!(done.ends_with(" 0.44"), "{done}");
    }

    #[test]
    fn units_are_spaced_alike() {
        assert_eq!(per_second(182.0, "p"), "182 p/s");
        assert_eq!(per_second(2_000.0, "p"), "2.0 kp/s");
        assert_eq!(per_second(1_234_567.0, "p"), "1.23 Mp/s");
        assert_eq!(human_seconds(0.16), "0.2 s");
        assert_eq!(human_seconds(200.0), "3 min 20 s");
    }

    #[test]
    fn the_file_gets_every_tick_with_its_phase() {
        let path = std::env::temp_dir().join(format!("sonde-status-{}.csv", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut s = StatusLine::new(Fixed(5), true, Some(&path), IfExists::Refuse).unwrap();
        s.tick(Phase::Sending { done: 0.5 }, true).unwrap();
        let until = Instant::now() + Duration::from_secs(4);
        s.tick(Phase::Cooldown { until }, true).unwrap();
        drop(s);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "elapsed_s,phase,percent_done,n");
        assert!(lines[1].ends_with(",sending,50.00,5"), "{text}");
        assert!(lines[2].ends_with(",cooldown,100.00,5"), "{text}");
        // An existing status file is kept unless --force.
        let err = StatusLine::new(Fixed(6), true, Some(&path), IfExists::Refuse)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--force"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        StatusLine::new(Fixed(6), true, Some(&path), IfExists::Overwrite).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "elapsed_s,phase,percent_done,n\n"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
