//! `--metrics ADDR:PORT`: a run's figures in the Prometheus text format (version 0.0.4), served
//! over HTTP at `/metrics` while the command runs.
//!
//! Nothing here touches a hot path. A run's status line renders a [`Page`] from the counters
//! sonde already keeps, once a second, and hands it to the [`Publisher`]; the [`Exporter`]'s
//! own thread serves the latest page to whoever scrapes. At the end the page gains the summary
//! (the same value `--summary-json` writes, field for field), and the exporter may linger so a
//! scraper catches it.

use std::fmt::{Display, Write as _};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The labels every series of a run carries: which command, module, backend and shard.
#[derive(Clone, Debug)]
pub struct Labels {
    /// Rendered once: `command="scan",module="tcp_syn",…`.
    rendered: String,
}

impl Labels {
    pub fn new(command: &str, module: &str, backend: &str, shard: u32) -> Labels {
        let mut rendered = String::new();
        for (name, value) in [
            ("command", command),
            ("module", module),
            ("backend", backend),
            ("shard", &shard.to_string()),
        ] {
            if !rendered.is_empty() {
                rendered.push(',');
            }
            push_label(&mut rendered, name, value);
        }
        Labels { rendered }
    }
}

/// `name="value"`, the value escaped as the format asks (backslash, quote, newline).
fn push_label(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A help text on one line: backslashes and newlines escaped.
fn push_help(out: &mut String, help: &str) {
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample value as the format writes it: integers as they are, floats in Rust's shortest
/// round-trip form, and the special values as `NaN`, `+Inf`, `-Inf`.
pub struct Number(pub f64);

impl Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v.is_nan() => f.write_str("NaN"),
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

/// Where a run is, as every command reports it.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// What the pace counts (probes, SYNs, frames), per second, lately.
    pub rate: f64,
    /// Share of the work done, 0 to 1 (NaN for a run without an end, such as a capture).
    pub done: f64,
    /// Seconds left (NaN while unknown).
    pub seconds_left: f64,
    pub elapsed: f64,
    pub running: bool,
}

/// One scrape's text: metric families, each with its HELP and TYPE lines, every sample with
/// the run's labels.
pub struct Page {
    text: String,
    labels: String,
}

impl Page {
    pub fn new(labels: &Labels) -> Page {
        Page {
            text: String::with_capacity(4096),
            labels: labels.rendered.clone(),
        }
    }

    fn family(&mut self, name: &str, help: &str, kind: &str) {
        let _ = write!(self.text, "# HELP {name} ");
        push_help(&mut self.text, help);
        let _ = writeln!(self.text, "\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, extra: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        self.text.push('{');
        self.text.push_str(&self.labels);
        for (label, v) in extra {
            self.text.push(',');
            push_label(&mut self.text, label, v);
        }
        let _ = writeln!(self.text, "}} {value}");
    }

    /// A counter (its name should end in `_total`).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.family(name, help, "counter");
        self.sample(name, &[], value);
    }

    /// A counter split by one label: one series per `(label value, count)`.
    pub fn counters(&mut self, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
        self.family(name, help, "counter");
        for (v, n) in values {
            self.sample(name, &[(label, v)], n);
        }
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, help, "gauge");
        self.sample(name, &[], Number(value));
    }

    /// The gauges every command has: the current rate, the share done, the seconds left, the
    /// time so far, and whether it still runs.
    pub fn progress(&mut self, p: &Progress) {
        self.gauge(
            "sonde_rate",
            "What the pace (-r) counts, per second lately",
            p.rate,
        );
        self.gauge(
            "sonde_done_ratio",
            "Share of the work done (0 to 1; NaN when the run has no set end)",
            p.done,
        );
        self.gauge(
            "sonde_seconds_left",
            "Seconds left at the current pace, or of the cooldown (NaN while unknown)",
            p.seconds_left,
        );
        self.gauge(
            "sonde_elapsed_seconds",
            "Seconds since the run started",
            p.elapsed,
        );
        self.gauge(
            "sonde_running",
            "1 while the run goes on, 0 once it has ended",
            if p.running { 1.0 } else { 0.0 },
        );
    }

    /// The run's summary, field for field, as `--summary-json` writes it: every number and
    /// boolean (as 0 or 1) is a `sonde_report{field="…"}` series with the number exactly as
    /// the JSON has it; every string a `sonde_report_text{field="…",value="…"} 1` series.
    /// Fields of nested objects are named `outer.inner`; null fields (nothing to report)
    /// have no series.
    pub fn summary(&mut self, summary: &serde_json::Value) {
        let mut numbers = Vec::new();
        let mut texts = Vec::new();
        flatten("", summary, &mut numbers, &mut texts);
        self.family(
            "sonde_report",
            "The run's summary (--summary-json), one series per numeric or boolean field",
            "gauge",
        );
        for (field, value) in &numbers {
            self.sample("sonde_report", &[("field", field)], value);
        }
        self.family(
            "sonde_report_text",
            "The run's summary (--summary-json), one series per text field; its value is the label",
            "gauge",
        );
        for (field, value) in &texts {
            self.sample(
                "sonde_report_text",
                &[("field", field), ("value", value)],
                1,
            );
        }
    }

    /// Another page's families after this one's (they must not repeat a family of this one).
    pub fn append(&mut self, other: &str) {
        self.text.push_str(other);
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The summary's leaves: numbers (their JSON text) and strings, by dotted field name.
fn flatten(
    prefix: &str,
    value: &serde_json::Value,
    numbers: &mut Vec<(String, String)>,
    texts: &mut Vec<(String, String)>,
) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let name = match prefix {
                    "" => key.clone(),
                    p => format!("{p}.{key}"),
                };
                flatten(&name, v, numbers, texts);
            }
        }
        Value::Number(n) => numbers.push((prefix.into(), n.to_string())),
        Value::Bool(b) => numbers.push((prefix.into(), u8::from(*b).to_string())),
        Value::String(s) => texts.push((prefix.into(), s.clone())),
        // Null: nothing to report. Arrays: none in the summaries; their items by index.
        Value::Null => {}
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}.{i}"), v, numbers, texts);
            }
        }
    }
}

/// What the exporter's thread and the run share: the page to serve.
struct Shared {
    page: Mutex<String>,
    stop: AtomicBool,
    scrapes: AtomicU64,
}

/// The run's side of the exporter: makes pages with the run's labels and publishes them.
#[derive(Clone)]
pub struct Publisher {
    shared: Arc<Shared>,
    labels: Labels,
    target_rate: f64,
}

impl Publisher {
    /// A publisher no exporter serves: what a run publishes can still be read with
    /// [`Publisher::current`] (tests, in-process runs).
    pub fn unserved(labels: Labels, target_rate: f64) -> Publisher {
        Publisher {
            shared: Arc::new(Shared {
                page: Mutex::new(String::new()),
                stop: AtomicBool::new(false),
                scrapes: AtomicU64::new(0),
            }),
            labels,
            target_rate,
        }
    }

    /// The page an exporter would serve now.
    pub fn current(&self) -> String {
        self.shared
            .page
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A page that begins with what holds for the whole run (the target rate).
    pub fn live_page(&self) -> Page {
        let mut page = Page::new(&self.labels);
        page.gauge(
            "sonde_target_rate",
            "The rate asked for with -r, per second (0: as fast as possible)",
            self.target_rate,
        );
        page
    }

    pub fn publish(&self, page: Page) {
        *self.shared.page.lock().unwrap_or_else(|e| e.into_inner()) = page.text;
    }

    /// The last page published, with the summary's families after it: what the exporter
    /// serves once the run has ended.
    pub fn publish_summary(&self, summary: &serde_json::Value) {
        let mut page = Page::new(&self.labels);
        page.append(&self.shared.page.lock().unwrap_or_else(|e| e.into_inner()));
        page.summary(summary);
        self.publish(page);
    }
}

/// An HTTP server on its own thread that answers `GET /metrics` with the latest page. It
/// stops when dropped, without waiting for any client.
pub struct Exporter {
    addr: SocketAddr,
    publisher: Publisher,
    thread: Option<JoinHandle<()>>,
}

/// How long one client may take, from its connection to the page sent: one that trickles its
/// request, or sends none, is cut off then.
const CLIENT_DEADLINE: Duration = Duration::from_secs(2);
/// Clients served at once, each on a thread of its own; a connection beyond them is closed at
/// once (scrapers are few, and each client holds its place for [`CLIENT_DEADLINE`] at most).
const MAX_CLIENTS: usize = 8;
/// How long the idle server waits in `accept` before it looks at the stop flag: it wakes up
/// this rarely, so an unwatched exporter costs next to nothing, and ends this soon after a
/// drop.
const ACCEPT_WAIT: Duration = Duration::from_millis(250);

/// Whom the page is for: requests naming another host in `Host` are refused (421), so a page
/// in a browser cannot read the metrics through a name rebound to this address.
#[derive(Clone, Debug)]
pub struct Hosts {
    bound: std::net::IpAddr,
    names: Vec<String>,
}

impl Hosts {
    /// Requests for `bound` (any address of the host when unspecified, `0.0.0.0` or `::`;
    /// `localhost` too when it is a loopback or unspecified one), or for one of `names`.
    pub fn new(bound: std::net::IpAddr, names: &[String]) -> Hosts {
        Hosts {
            bound,
            names: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether a request whose `Host` header says `host` (None: it has none, as an HTTP/1.0
    /// client's; a browser always sends one) is answered.
    fn allow(&self, host: Option<&str>) -> bool {
        let Some(host) = host else {
            return true;
        };
        let name = strip_port(host).to_ascii_lowercase();
        let any = self.bound.is_unspecified();
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
        {
            return any || ip == self.bound;
        }
        (name == "localhost" && (any || self.bound.is_loopback())) || self.names.contains(&name)
    }
}

/// `name:port` → `name`, `[v6]:port` → `[v6]`; anything else as it is.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(v6, _)| &host[..v6.len() + 1]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

impl Exporter {
    /// Listens on `addr` (exactly there, nowhere else) and serves from a thread of its own,
    /// answering requests for `hosts` only.
    pub fn bind(
        addr: SocketAddr,
        labels: Labels,
        target_rate: f64,
        names: &[String],
    ) -> io::Result<Exporter> {
        let listener = TcpListener::bind(addr)?;
        // A listening socket's receive timeout bounds `accept` (Linux).
        let wait = nix::sys::time::TimeVal::new(0, ACCEPT_WAIT.as_micros() as _);
        nix::sys::socket::setsockopt(&listener, nix::sys::socket::sockopt::ReceiveTimeout, &wait)
            .map_err(io::Error::from)?;
        let addr = listener.local_addr()?;
        let publisher = Publisher::unserved(labels, target_rate);
        let hosts = Hosts::new(addr.ip(), names);
        let thread = {
            let shared = publisher.shared.clone();
            std::thread::Builder::new()
                .name("sonde-metrics".into())
                .spawn(move || serve(listener, shared, hosts))?
        };
        publisher.publish(publisher.live_page());
        Ok(Exporter {
            addr,
            publisher,
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen, when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn publisher(&self) -> Publisher {
        self.publisher.clone()
    }

    /// Scrapes answered so far.
    pub fn scrapes(&self) -> u64 {
        self.publisher.shared.scrapes.load(Ordering::Relaxed)
    }

    /// Keeps serving for `time`, or until `stop()` says so.
    pub fn linger(&self, time: Duration, stop: impl Fn() -> bool) {
        let end = Instant::now() + time;
        while Instant::now() < end && !stop() {
            std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
        }
    }
}

impl Drop for Exporter {
    /// Stops accepting (within [`ACCEPT_WAIT`]); a client still being served is left to its
    /// thread, which ends by its deadline or with the process, never waited for.
    fn drop(&mut self) {
        self.publisher.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The exporter's thread: accepts, and hands each client to a thread of its own, at most
/// [`MAX_CLIENTS`] at once.
fn serve(listener: TcpListener, shared: Arc<Shared>, hosts: Hosts) {
    let hosts = Arc::new(hosts);
    let serving = Arc::new(AtomicU64::new(0));
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if serving.load(Ordering::Relaxed) >= MAX_CLIENTS as u64 {
                    continue; // closed: dropped
                }
                serving.fetch_add(1, Ordering::Relaxed);
                let (shared, hosts, done) = (shared.clone(), hosts.clone(), serving.clone());
                let spawned = std::thread::Builder::new()
                    .name("sonde-metrics-client".into())
                    .spawn(move || {
                        if answer(stream, &shared, &hosts).is_ok() {
                            shared.scrapes.fetch_add(1, Ordering::Relaxed);
                        }
                        done.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    serving.fetch_sub(1, Ordering::Relaxed);
                }
            }
            // The wait ran out: look at the stop.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            // Out of descriptors, or a client gone before it was accepted: no busy loop.
            Err(_) => std::thread::sleep(ACCEPT_WAIT),
        }
    }
}

/// A stream whose waits can be bounded: each read or write is given what is left of the
/// client's deadline.
trait Bounded: Read + Write {
    fn bound_waits(&mut self, left: Duration) -> io::Result<()>;
}

impl Bounded for TcpStream {
    fn bound_waits(&mut self, left: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(left))?;
        self.set_write_timeout(Some(left))
    }
}

/// Reads one request and answers it within [`CLIENT_DEADLINE`]: the page for `GET /metrics`,
/// 404 for another path, 405 for another method, 421 for another host. `Ok` only when a page
/// was sent.
fn answer(mut stream: TcpStream, shared: &Shared, hosts: &Hosts) -> io::Result<()> {
    let deadline = Instant::now() + CLIENT_DEADLINE;
    respond(&mut stream, &shared.page, hosts, deadline)
}

/// What is left until `deadline`, or a timeout error when nothing is.
fn time_left(deadline: Instant) -> io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// [`answer`]'s exchange, over any stream whose waits can be bounded.
fn respond(
    stream: &mut impl Bounded,
    page: &Mutex<String>,
    hosts: &Hosts,
    deadline: Instant,
) -> io::Result<()> {
    let head = read_head(stream, deadline)?;
    let (status, body) = match request_line(&head) {
        Some(_) if !hosts.allow(host_header(&head)) => (
            "421 Misdirected Request",
            "sonde serves its metrics for the address it listens on and the --metrics-host names only\n".into(),
        ),
        Some(("GET" | "HEAD", "/metrics")) => {
            let page = page.lock().unwrap_or_else(|e| e.into_inner()).clone();
            ("200 OK", page)
        }
        Some(("GET" | "HEAD", _)) => ("404 Not Found", "sonde serves /metrics\n".into()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".into()),
    };
    let ok = status.starts_with("200");
    let content_type = if ok { CONTENT_TYPE } else { "text/plain" };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head.starts_with(b"HEAD ") {
        reply.push_str(&body);
    }
    write_all_by(stream, reply.as_bytes(), deadline)?;
    match ok {
        true => Ok(()),
        false => Err(io::ErrorKind::NotFound.into()),
    }
}

/// Writes `bytes` whole before `deadline` (a client that reads too slowly is cut off).
fn write_all_by(stream: &mut impl Bounded, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.bound_waits(time_left(deadline)?)?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.flush()
}

/// The request up to its blank line, at most 8 KiB, read before `deadline`.
fn read_head(stream: &mut impl Bounded, deadline: Instant) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        stream.bound_waits(time_left(deadline)?)?;
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}

/// The value of the request's `Host` header, if it has one (one that is not text is no name
/// the page is for: empty).
fn host_header(head: &[u8]) -> Option<&str> {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(head.len());
    head[..end].split(|&b| b == b'\n').skip(1).find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let name = line[..colon].trim_ascii();
        let value = line[colon + 1..].trim_ascii();
        name.eq_ignore_ascii_case(b"host")
            .then(|| std::str::from_utf8(value).unwrap_or(""))
    })
}

/// The method and the path (without a query) of a request's first line.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let line = head.split(|&b| b == b'\r' || b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    parts.next().filter(|v| v.starts_with("HTTP/"))?;
    Some((method, target.split('?').next().unwrap_or(target)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Labels {
        Labels::new("scan", "tcp_syn", "xdp", 2)
    }

    #[test]
    fn families_have_help_and_type_and_every_sample_the_run_labels() {
        let mut page = Page::new(&labels());
        page.counter("sonde_sent_total", "Probes sent", 12);
        page.counters(
            "sonde_drops_total",
            "Drops\nby cause",
            "cause",
            &[("receiver", 3), ("interface_out", 0)],
        );
        page.gauge("sonde_done_ratio", "Share done", 0.25);
        let l = r#"command="scan",module="tcp_syn",backend="xdp",shard="2""#;
        let want = format!(
            "# HELP sonde_sent_total Probes sent\n# TYPE sonde_sent_total counter\nsonde_sent_total{{{l}}} 12\n\
             # HELP sonde_drops_total Drops\\nby cause\n# TYPE sonde_drops_total counter\n\
             sonde_drops_total{{{l},cause=\"receiver\"}} 3\nsonde_drops_total{{{l},cause=\"interface_out\"}} 0\n\
             # HELP sonde_done_ratio Share done\n# TYPE sonde_done_ratio gauge\nsonde_done_ratio{{{l}}} 0.25\n"
        );
        assert_eq!(page.text(), want);
    }

    #[test]
    fn label_values_are_escaped() {
        let l = Labels::new("grab", "a\"b\\c\nd", "x", 0);
        assert_eq!(
            l.rendered,
            r#"command="grab",module="a\"b\\c\nd",backend="x",shard="0""#
        );
    }

    #[test]
    fn special_floats_are_written_as_the_format_spells_them() {
        assert_eq!(Number(f64::NAN).to_string(), "NaN");
        assert_eq!(Number(f64::INFINITY).to_string(), "+Inf");
        assert_eq!(Number(f64::NEG_INFINITY).to_string(), "-Inf");
        assert_eq!(Number(1e-7).to_string().parse::<f64>().unwrap(), 1e-7);
        assert_eq!(Number(3.0).to_string(), "3");
    }

    #[test]
    fn the_summary_is_there_field_for_field() {
        let summary = serde_json::json!({
            "sent": 18446744073709551615u64,
            "pps": 1234.5678901234567,
            "interrupted": false,
            "module": "tcp_syn",
            "losses": "lost: \"x\"\nthen y",
            "checkpoint": null,
            "loop": {"passes": 7}
        });
        let mut page = Page::new(&labels());
        page.summary(&summary);
        let text = page.text();
        let l = r#"command="scan",module="tcp_syn",backend="xdp",shard="2""#;
        // The number exactly as the JSON has it, even past 2^53.
        assert!(
            text.contains(&format!(
                "sonde_report{{{l},field=\"sent\"}} 18446744073709551615\n"
            )),
            "{text}"
        );
        assert!(text.contains(&format!(
            "sonde_report{{{l},field=\"pps\"}} 1234.5678901234567\n"
        )));
        assert!(text.contains(&format!("sonde_report{{{l},field=\"interrupted\"}} 0\n")));
        assert!(text.contains(&format!("sonde_report{{{l},field=\"loop.passes\"}} 7\n")));
        assert!(text.contains(&format!(
            "sonde_report_text{{{l},field=\"losses\",value=\"lost: \\\"x\\\"\\nthen y\"}} 1\n"
        )));
        assert!(!text.contains("checkpoint"), "null fields have no series");
        assert_eq!(text.matches("# TYPE sonde_report gauge\n").count(), 1);
        assert_eq!(text.matches("# TYPE sonde_report_text gauge\n").count(), 1);
    }

    /// A scraper's side in memory: its request, and what it was sent.
    struct Exchange {
        request: io::Cursor<Vec<u8>>,
        reply: Vec<u8>,
    }

    impl Read for Exchange {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.request.read(buf)
        }
    }

    impl Write for Exchange {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.reply.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Bounded for Exchange {
        fn bound_waits(&mut self, _: Duration) -> io::Result<()> {
            Ok(())
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn local() -> Hosts {
        Hosts::new("127.0.0.1".parse().unwrap(), &["sonde.lab".into()])
    }

    /// The reply to `request`, and whether it counted as a scrape. (The exporter's socket is
    /// exercised by the lab test, inside a lab namespace: tests bind nothing in the root one.)
    fn get(publisher: &Publisher, request: &str) -> (String, bool) {
        let mut exchange = Exchange {
            request: io::Cursor::new(request.as_bytes().to_vec()),
            reply: Vec::new(),
        };
        let ok = respond(&mut exchange, &publisher.shared.page, &local(), far()).is_ok();
        (String::from_utf8(exchange.reply).unwrap(), ok)
    }

    #[test]
    fn the_exporter_serves_the_latest_page_and_then_the_summary() {
        let publisher = Publisher::unserved(labels(), 1000.0);
        publisher.publish(publisher.live_page());
        let (first, ok) = get(
            &publisher,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\n\r\n",
        );
        assert!(ok && first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
        assert!(first.contains(CONTENT_TYPE));
        assert!(first.contains("sonde_target_rate{"), "{first}");
        let mut page = publisher.live_page();
        page.counter("sonde_sent_total", "Probes sent", 5);
        publisher.publish(page);
        let (live, _) = get(&publisher, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(live.contains("} 5\n"), "{live}");
        publisher.publish_summary(&serde_json::json!({"sent": 5}));
        let (last, _) = get(&publisher, "GET /metrics HTTP/1.1\r\n\r\n");
        let body = last.split("\r\n\r\n").nth(1).unwrap();
        let length: usize = last
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), length);
        assert!(body.contains("sonde_sent_total{"), "the live part stays");
        assert!(body.contains("field=\"sent\"} 5\n"), "{body}");
        let (head, _) = get(&publisher, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
        for (request, status) in [
            ("GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404"),
            ("POST /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 405"),
            ("garbage\r\n\r\n", "HTTP/1.1 405"),
            ("", "HTTP/1.1 405"),
        ] {
            let (reply, ok) = get(&publisher, request);
            assert!(reply.starts_with(status) && !ok, "{request:?}: {reply}");
        }
    }
    /// A client that sends a byte now and then, each within any per-read timeout: it held the
    /// only serving thread for as long as it liked. Its whole exchange has a deadline now.
    struct Trickle {
        sent: usize,
        waits: Vec<Duration>,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let wait = *self.waits.last().expect("a wait was set before each read");
            std::thread::sleep(wait.min(Duration::from_millis(20)));
            self.sent += 1;
            buf[0] = b"GET /metrics HTTP/1.1\r\nX: "[self.sent.min(26) - 1];
            Ok(1)
        }
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Bounded for Trickle {
        fn bound_waits(&mut self, left: Duration) -> io::Result<()> {
            self.waits.push(left);
            Ok(())
        }
    }

    #[test]
    fn a_trickling_client_is_cut_off_at_its_deadline() {
        let page = Mutex::new(String::new());
        let mut client = Trickle {
            sent: 0,
            waits: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_millis(200);
        let err = respond(&mut client, &page, &local(), deadline).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(Instant::now() >= deadline);
        assert!(
            client.sent < 8192,
            "it read all it would take: {}",
            client.sent
        );
        // Every read was bounded by what was left, never by more.
        assert!(
            client.waits.windows(2).all(|w| w[1] <= w[0]),
            "{:?}",
            client.waits
        );
    }

    #[test]
    fn only_the_bound_address_and_the_names_given_are_served() {
        let (publisher, hosts) = (Publisher::unserved(labels(), 0.0), local());
        let status = |host: &str| {
            let request = format!("GET /metrics HTTP/1.1\r\n{host}\r\n\r\n");
            let mut exchange = Exchange {
                request: io::Cursor::new(request.into_bytes()),
                reply: Vec::new(),
            };
            let _ = respond(&mut exchange, &publisher.shared.page, &hosts, far());
            let reply = String::from_utf8(exchange.reply).unwrap();
            reply[9..12].to_string()
        };
        for allowed in [
            "Host: 127.0.0.1:9464",
            "host: 127.0.0.1",
            "HOST:  localhost:9464 ",
            "Host: SONDE.lab:9464",
            "X-Other: 1",
        ] {
            assert_eq!(status(allowed), "200", "{allowed}");
        }
        for refused in [
            "Host: rebound.example:9464",
            "Host: 127.0.0.2:9464",
            "Host: 127.0.0.1.rebound.example",
            "Host: sonde.lab.rebound.example",
            "Host: [::1]:9464",
            "Host: ",
        ] {
            assert_eq!(status(refused), "421", "{refused}");
        }
        let any = Hosts::new("0.0.0.0".parse().unwrap(), &[]);
        assert!(any.allow(Some("198.18.0.1:9464")) && any.allow(Some("[2001:2::1]:9464")));
        assert!(any.allow(Some("localhost")) && !any.allow(Some("rebound.example")));
        let v6 = Hosts::new("2001:2::1".parse().unwrap(), &[]);
        assert!(v6.allow(Some("[2001:2::1]:9464")) && !v6.allow(Some("localhost")));
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("a.example"), "a.example");
    }
}
