//! `--metrics ADDR:PORT` and `--metrics-linger S`, as scan, grab, capture, intercept and blast
//! take them: the exporter is bound where the command runs (in a lab's scanner namespace with
//! `--lab`), fed by the run's status line, given the summary at the end, and kept up for the
//! linger.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use sonde_engine::status::to_stderr;
use sonde_engine::stop::Stop;
use sonde_meter::metrics::{Exporter, Labels, Publisher};

#[derive(Args, Clone, Debug, Default)]
pub struct MetricsArgs {
    /// Serve live metrics in the Prometheus text format at http://ADDR:PORT/metrics while the
    /// command runs, and the summary's fields once it ends (off unless given; it listens there
    /// only, e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR:PORT", value_parser = socket_address)]
    pub metrics: Option<SocketAddr>,
    /// With --metrics: keep serving for S seconds after the end, so a scraper catches the
    /// last values (the summary).
    #[arg(long, value_name = "S", default_value_t = 0.0, requires = "metrics", value_parser = linger_seconds)]
    pub metrics_linger: f64,
}

fn socket_address(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| "give an address and a port, like 127.0.0.1:9464 or [::1]:9464".into())
}

fn linger_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if (0.0..=86_400.0).contains(&s) => Ok(s),
        _ => Err("give seconds from 0 to 86400".into()),
    }
}

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
    /// Binds the exporter (before anything is sent, so a taken port fails the command at once)
    /// and says where it listens, unless `quiet`.
    pub fn start(args: &MetricsArgs, run: RunLabels, quiet: bool) -> anyhow::Result<Metrics> {
        let exporter = match args.metrics {
            None => None,
            Some(addr) => {
                let labels = Labels::new(run.command, run.module, run.backend, run.shard);
                let exporter = Exporter::bind(addr, labels, run.target_rate).with_context(|| {
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
            linger: Duration::from_secs_f64(args.metrics_linger),
        })
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
