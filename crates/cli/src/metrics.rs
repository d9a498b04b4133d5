//! `--metrics ADDR:PORT` and `--metrics-linger S`, as scan, grab, dns, capture, intercept and
//! blast take them. The exporter itself (bound where the command runs, fed by the status line,
//! given the summary, kept up for the linger) is `sonde_engine::metrics`.

use std::net::SocketAddr;

use clap::Args;
pub use sonde_engine::metrics::{LivePage, Metrics, RunLabels};

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
    /// With --metrics: a host name the page is also served for (repeatable). Requests naming
    /// another host than the address listened on (or localhost, on a loopback address) are
    /// refused (421), so a web page cannot read the metrics through a name rebound to it.
    #[arg(long, value_name = "NAME", requires = "metrics", value_parser = host_name)]
    pub metrics_host: Vec<String>,
}

fn host_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    match ok {
        true => Ok(name.to_string()),
        false => Err("give a host name, like metrics.example.org (no port)".into()),
    }
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

impl MetricsArgs {
    /// Binds the exporter these arguments ask for (see [`Metrics::start`]) and, unless `quiet`,
    /// says where: the address, and the network namespace it listens in (a lab's, with --lab),
    /// with the command that reaches it from a shell.
    pub fn start(&self, run: RunLabels, quiet: bool) -> anyhow::Result<Metrics> {
        let command = run.command;
        let metrics = Metrics::start(
            self.metrics,
            &self.metrics_host,
            self.metrics_linger,
            run,
            true,
        )?;
        if let (Some(addr), false) = (metrics.address(), quiet) {
            sonde_engine::status::to_stderr(format_args!("{command}: {}", where_served(addr)));
        }
        Ok(metrics)
    }
}

/// Where the exporter at `addr` is, in words: its page, the namespace it listens in, and how
/// to scrape it from a shell.
fn where_served(addr: SocketAddr) -> String {
    let url = format!("http://{addr}/metrics");
    match sonde_lab::current_ns() {
        Some(_) => format!(
            "metrics at {url} in {}; from a shell: {}",
            sonde_lab::where_am_i(),
            sonde_lab::run_here(&format!("curl -s {url}"))
        ),
        None => format!("metrics at {url} in {}", sonde_lab::where_am_i()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_and_linger_are_refused_in_words() {
        assert_eq!(
            socket_address("127.0.0.1:9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert!(socket_address("[::1]:9464").is_ok());
        let no_port = socket_address("127.0.0.1").unwrap_err();
        assert!(no_port.contains("127.0.0.1:9464"), "{no_port}");
        assert!(linger_seconds("2.5").is_ok());
        assert!(linger_seconds("-1").is_err());
        assert!(linger_seconds("NaN").is_err());
        assert_eq!(host_name(" sonde.lab ").unwrap(), "sonde.lab");
        assert!(host_name("sonde.lab:9464").is_err() && host_name("").is_err());
    }
}
