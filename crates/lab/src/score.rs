//! Scoring a scan's or a grab's results (csv, ndjson or parquet) against the lab's ground
//! truth, in one line a script can parse (`sonde lab score` parses the arguments and prints).
//!
//! - Scans: `found N of M (P %), false positives F [what was scored]`. What counts comes from
//!   the file (its `classification` column names the module, its `sport` column the ports) or
//!   from the request's module, answer and ports.
//! - Grabs (a `status` column): completed % of the live hosts, correct bodies, silent hosts
//!   seen as `data-timeout`, false positives, certificates; and every field the truth expects
//!   of a server (`Truth::expect`, by grab field name: banners, certificate and host key
//!   hashes, TLS version and cipher) that the results hold.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use ipnet::IpNet;

use crate::dns_tree::score as dns_score;
use crate::{Answer, LabStatus, Service, Truth};

/// What to score. Each field left `None` or empty is read from the results, as
/// `sonde lab score --help` says.
pub struct ScoreRequest {
    /// The module that made the results.
    pub module: Option<Module>,
    /// Ports to score.
    pub port: Vec<u16>,
    /// The answer that counts as found (`Echo` scores port 0, the host).
    pub answer: Option<Answer>,
    /// Count only the truth inside these prefixes (results outside them are left out).
    pub within: Vec<IpNet>,
    /// The results' format; `None`: read from the content (`sonde lab score` first reads it
    /// from the file's name, as `sonde_scan::output::OutputFormat::from_extension` does).
    pub format: Option<Format>,
    /// The results file.
    pub results: PathBuf,
}

/// The scan module (or grab) whose results are scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    TcpSyn,
    IcmpEcho,
    Udp,
    Dns,
    Grab,
}

impl Module {
    pub fn name(self) -> &'static str {
        match self {
            Module::TcpSyn => "tcp_syn",
            Module::IcmpEcho => "icmp_echo",
            Module::Udp => "udp",
            Module::Dns => "dns",
            Module::Grab => "grab",
        }
    }

    /// The module whose scans report `classification`.
    fn of_classification(classification: &str) -> Option<Module> {
        Some(match classification {
            "synack" | "rst" => Module::TcpSyn,
            "echoreply" => Module::IcmpEcho,
            "udp" | "unreach" => Module::Udp,
            "dns" => Module::Dns,
            _ => return None,
        })
    }

    /// The module whose scans report `answer`.
    fn of_answer(answer: Answer) -> Module {
        match answer {
            Answer::Synack | Answer::Rst | Answer::None => Module::TcpSyn,
            Answer::Echo => Module::IcmpEcho,
            Answer::Unreach => Module::Udp,
            Answer::Dns => Module::Dns,
        }
    }

    /// The answers of the truth that a scan of this module finds.
    fn answers(self) -> Vec<Answer> {
        match self {
            Module::TcpSyn | Module::Grab => vec![Answer::Synack],
            Module::IcmpEcho => vec![Answer::Echo],
            Module::Udp => vec![Answer::Unreach, Answer::Dns],
            Module::Dns => vec![Answer::Dns],
        }
    }
}

/// The format of a results file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Ndjson,
    Parquet,
}

impl Format {
    /// The format with its article, for sentences: "a CSV file".
    fn article_name(self) -> &'static str {
        match self {
            Format::Csv => "a CSV file",
            Format::Ndjson => "an NDJSON file",
            Format::Parquet => "a Parquet file",
        }
    }
}

/// A CSV reader's error in words: which line, and what is wrong with it.
fn csv_words(e: &anyhow::Error) -> String {
    let Some(csv) = e.downcast_ref::<csv::Error>() else {
        return format!("{e:#}");
    };
    let line = |pos: &Option<csv::Position>| pos.as_ref().map_or(0, |p| p.line());
    match csv.kind() {
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => format!(
            "line {} has {len} fields where the header has {expected_len}",
            line(pos)
        ),
        csv::ErrorKind::Utf8 { pos, .. } => format!("line {} is not UTF-8 text", line(pos)),
        csv::ErrorKind::Io(io) => io.to_string(),
        _ => csv.to_string(),
    }
}

/// The score line, and the notes (for stderr) on what was left out of it.
pub struct Scored {
    pub line: String,
    pub notes: Vec<String>,
}

/// Scores the results `request` names against the truth of the lab `status` describes.
pub fn score(status: &LabStatus, args: &ScoreRequest) -> Result<Scored> {
    if args.format.is_none_or(|f| f == Format::Ndjson) && dns_score::is_dns_file(&args.results)? {
        return score_dns(status, &args.results);
    }
    let truth = Truth::from_status(status)?;
    let results = read_results(&args.results, args.format)?;
    let module = match args.module {
        Some(m) => m,
        None => results.module(&args.results, args.answer)?,
    };
    let scope = Scope::new(&args.within, &truth, &results);
    let mut notes = Vec::new();
    if !scope.left_out.is_empty() {
        notes.push(format!(
            "note: scoring {} only: the results hold no address in {} (give --within to score it too)",
            scope.describe(),
            nets_text(&scope.left_out)
        ));
    }
    let line = if module == Module::Grab {
        score_grab(args, &scope, status, &truth, &results)?.to_string()
    } else {
        let scan = score_scan(args, &scope, module, &truth, &results)?;
        if args.within.is_empty() && !results.rows.is_empty() && scan.found * 2 < scan.expected {
            let span = covering_prefixes(results.rows.iter().filter_map(|r| r.addr));
            notes.push(format!(
                "note: scored against the lab's whole population; if the scan covered less, give --within PREFIX (the results lie within {span})"
            ));
        }
        scan.to_string()
    };
    Ok(Scored { line, notes })
}

/// Scores `sonde dns` rows against the lab's DNS tree: the line, and examples of what was
/// wrong, missing or extra as notes.
fn score_dns(status: &LabStatus, path: &Path) -> Result<Scored> {
    let Some(tree) = &status.dns_tree else {
        bail!(
            "{} holds dns rows but lab {:?} has no DNS tree to score them against (bring one up with --dns-tree N)",
            path.display(),
            status.name
        );
    };
    let scored = dns_score::score_rows(&tree.tree(), dns_score::read_rows(path)?);
    Ok(Scored {
        line: scored.to_string(),
        notes: scored.notes(),
    })
}

/// The narrowest prefix of each family holding every address of `addrs`, comma separated.
fn covering_prefixes(addrs: impl Iterator<Item = IpAddr>) -> String {
    let (mut v4, mut v6): (Vec<u128>, Vec<u128>) = (Vec::new(), Vec::new());
    for addr in addrs {
        match addr {
            IpAddr::V4(a) => v4.push(u128::from(u32::from(a))),
            IpAddr::V6(a) => v6.push(u128::from(a)),
        }
    }
    let span = |bits: &[u128], width: u32| -> Option<(u128, u8)> {
        let (lo, hi) = (*bits.iter().min()?, *bits.iter().max()?);
        let same = ((lo ^ hi) << (128 - width)).leading_zeros().min(width);
        let mask = if same == 0 {
            0
        } else {
            (u128::MAX << (128 - same)) >> (128 - width)
        };
        Some((lo & mask, same as u8))
    };
    let mut nets = Vec::new();
    if let Some((net, len)) = span(&v4, 32) {
        nets.push(format!("{}/{len}", std::net::Ipv4Addr::from(net as u32)));
    }
    if let Some((net, len)) = span(&v6, 128) {
        nets.push(format!("{}/{len}", std::net::Ipv6Addr::from(net)));
    }
    nets.join(", ")
}

// ---- reading results ------------------------------------------------------------------------

/// The fields of one result row that scoring looks at.
#[derive(Clone, Debug, Default, PartialEq)]
struct Row {
    addr: Option<IpAddr>,
    /// The target's port: a scan's and a grab's rows both name it `sport` (the reply's source).
    sport: Option<u16>,
    /// A `port` column (other tools' rows, as bench/grab-rows.py writes them).
    port: Option<u16>,
    classification: Option<String>,
    success: Option<bool>,
    /// A grab's `status` (the protocol's outcome: success, io-timeout, …) and `tcp_status`
    /// (the connection's: success, data-timeout, …).
    status: Option<String>,
    tcp_status: Option<String>,
    /// The HTTP path fetched (`http_path` or `path`), if the file says.
    path: Option<String>,
    /// SHA-256 of the body: the `http_body_sha256` column, else computed from `http_body`.
    body_sha256: Option<String>,
    tls_cert_sha256: Option<String>,
    /// The row's values of the fields the truth may expect (`crate::EXPECT_FIELDS`) that
    /// it has.
    fields: Vec<(&'static str, String)>,
}

impl Row {
    /// A grab's connection that waited for a reply in vain: `tcp_status` data-timeout, or
    /// (files without it: other tools' rows, older sonde's) `status` io-timeout (ZGrab2's word)
    /// or data-timeout.
    fn timed_out(&self) -> bool {
        match &self.tcp_status {
            Some(tcp) => tcp == "data-timeout",
            None => matches!(self.status.as_deref(), Some("io-timeout" | "data-timeout")),
        }
    }

    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A results file: which columns it has, and its rows.
struct Results {
    columns: HashSet<String>,
    rows: Vec<Row>,
}

impl Results {
    fn has(&self, column: &str) -> bool {
        self.columns.contains(column)
    }

    /// The module the file comes from: grab if it has a status column, else the one its
    /// classifications name (a dns scan may report unreach too), else `answer`'s, else tcp_syn.
    fn module(&self, path: &Path, answer: Option<Answer>) -> Result<Module> {
        if self.has("status") {
            return Ok(Module::Grab);
        }
        let mut found: Vec<Module> = Vec::new();
        for class in self.rows.iter().filter_map(|r| r.classification.as_deref()) {
            match Module::of_classification(class) {
                Some(m) if !found.contains(&m) => found.push(m),
                _ => {}
            }
        }
        // A dns scan reports ICMP port unreachable (udp's) from hosts without a DNS server.
        if found.contains(&Module::Dns) {
            found.retain(|m| *m != Module::Udp);
        }
        match found.as_slice() {
            [] => Ok(answer.map_or(Module::TcpSyn, Module::of_answer)),
            [one] => Ok(*one),
            many => {
                let names: Vec<&str> = many.iter().map(|m| m.name()).collect();
                bail!(
                    "{} mixes answers of the modules {}: give --module",
                    path.display(),
                    names.join(" and ")
                )
            }
        }
    }
}

fn read_results(path: &Path, format: Option<Format>) -> Result<Results> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read results {}", path.display()))?;
    let format = match format {
        Some(f) => f,
        None => sniff_format(path)?,
    };
    let shown = path.display();
    let results = match format {
        Format::Csv => read_csv(file).map_err(|e| anyhow!(csv_words(&e))),
        Format::Ndjson => read_ndjson(file),
        Format::Parquet => read_parquet(file),
    }
    .map_err(|e| {
        anyhow!(
            "{shown} is not {} as sonde writes it ({e:#}): give sonde scan or grab output, or its format with --format",
            format.article_name()
        )
    })?;
    // An empty ndjson file names no columns at all; that is no results, not a wrong file.
    let empty = results.columns.is_empty() && results.rows.is_empty();
    if !empty && !results.has("saddr") {
        bail!(
            "{shown} has no saddr column (the address that answered); is it scan or grab output?"
        );
    }
    Ok(results)
}

/// By content (the caller reads the file's name first, as `sonde scan -o` does): parquet's
/// magic, a JSON object, or CSV.
fn sniff_format(path: &Path) -> Result<Format> {
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .with_context(|| format!("cannot read results {}", path.display()))?;
    Ok(if head.starts_with(b"PAR1") {
        Format::Parquet
    } else if head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Format::Ndjson
    } else {
        Format::Csv
    })
}

/// Builds a row from a lookup of its cells by column name (`line` for errors, 1-based).
fn make_row(get: impl Fn(&str) -> Option<String>, line: usize) -> Result<Row> {
    let nonempty = |c: &str| get(c).filter(|v| !v.is_empty());
    let port = |c: &str| -> Result<Option<u16>> {
        nonempty(c)
            .map(|v| {
                v.parse()
                    .map_err(|_| anyhow!("line {line}: {c} {v:?} is not a port"))
            })
            .transpose()
    };
    let addr = nonempty("saddr")
        .map(|v| {
            v.parse()
                .map_err(|_| anyhow!("line {line}: saddr {v:?} is not an IP address"))
        })
        .transpose()?;
    let success = match nonempty("success").as_deref() {
        None => None,
        Some("1" | "true") => Some(true),
        Some("0" | "false") => Some(false),
        Some(v) => bail!("line {line}: success {v:?} is neither 1/true nor 0/false"),
    };
    let body_sha256 = nonempty("http_body_sha256")
        .map(|s| s.to_ascii_lowercase())
        .or_else(|| get("http_body").map(|b| crate::sha256_hex(b.as_bytes())));
    Ok(Row {
        addr,
        sport: port("sport")?,
        port: port("port")?,
        classification: nonempty("classification"),
        success,
        status: nonempty("status"),
        tcp_status: nonempty("tcp_status"),
        path: nonempty("http_path").or_else(|| nonempty("path")),
        body_sha256,
        tls_cert_sha256: nonempty("tls_cert_sha256").map(|s| s.to_ascii_lowercase()),
        fields: crate::EXPECT_FIELDS
            .iter()
            .filter_map(|&name| Some((name, nonempty(name)?)))
            .collect(),
    })
}

fn read_csv(file: std::fs::File) -> Result<Results> {
    let mut reader = csv::Reader::from_reader(BufReader::new(file));
    let headers = reader.headers()?.clone();
    let columns: HashSet<String> = headers.iter().map(str::to_string).collect();
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record?;
        let get = |c: &str| {
            let at = headers.iter().position(|h| h == c)?;
            record.get(at).map(str::to_string)
        };
        rows.push(make_row(get, i + 2)?);
    }
    Ok(Results { columns, rows })
}

fn read_ndjson(file: std::fs::File) -> Result<Results> {
    let mut columns = HashSet::new();
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line).map_err(|e| {
            // serde_json's position is within the line: say it once, as the file's.
            let text = e.to_string();
            let what = text.split(" at line ").next().unwrap_or(&text);
            anyhow!("line {}, column {}: {what}", i + 1, e.column())
        })?;
        let object = value
            .as_object()
            .ok_or_else(|| anyhow!("line {} is not a JSON object", i + 1))?;
        columns.extend(object.keys().cloned());
        let get = |c: &str| match object.get(c)? {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        rows.push(make_row(get, i + 1)?);
    }
    Ok(Results { columns, rows })
}

fn read_parquet(file: std::fs::File) -> Result<Results> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let reader = SerializedFileReader::new(file)?;
    // The top-level fields: a nested one (a MAP, a LIST) is one column by its own name.
    let columns: HashSet<String> = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let mut rows = Vec::new();
    for (i, row) in reader.get_row_iter(None)?.enumerate() {
        let row = row?;
        let get = |c: &str| {
            let (_, field) = row.get_column_iter().find(|(name, _)| name.as_str() == c)?;
            match field {
                Field::Null => None,
                Field::Str(s) => Some(s.clone()),
                Field::Bytes(b) => Some(String::from_utf8_lossy(b.data()).into_owned()),
                other => Some(other.to_string()),
            }
        };
        rows.push(make_row(get, i + 1)?);
    }
    Ok(Results { columns, rows })
}

// ---- scoring a scan -------------------------------------------------------------------------

/// Found and false-positive counts of a scan against the truth, and what was scored.
pub struct ScanScore {
    pub expected: usize,
    pub found: usize,
    pub false_positives: usize,
    scored: String,
}

impl fmt::Display for ScanScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = 100.0 * self.found as f64 / self.expected as f64;
        write!(
            f,
            "found {} of {} ({pct:.3} %), false positives {} [{}]",
            self.found, self.expected, self.false_positives, self.scored
        )
    }
}

/// Where the truth is counted: the given prefixes, or the lab's populations that the results
/// reach (a scan of the IPv4 population says nothing of the IPv6 one).
struct Scope {
    nets: Vec<IpNet>,
    /// Whether the user gave the prefixes (then results outside them are left out; otherwise
    /// a result outside the populations is a false positive).
    given: bool,
    /// The populations left out because no result lies in them.
    left_out: Vec<IpNet>,
}

impl Scope {
    fn new(within: &[IpNet], truth: &Truth, results: &Results) -> Scope {
        if !within.is_empty() {
            return Scope {
                nets: within.iter().map(IpNet::trunc).collect(),
                given: true,
                left_out: Vec::new(),
            };
        }
        let populations = truth.populations();
        let reached = |net: &IpNet| {
            results
                .rows
                .iter()
                .any(|r| r.addr.is_some_and(|a| net.contains(&a)))
        };
        let (nets, left_out): (Vec<IpNet>, Vec<IpNet>) =
            populations.iter().partition(|net| reached(net));
        if nets.is_empty() {
            // No result in any population: nothing tells what was scanned, so all of it counts.
            return Scope {
                nets: populations,
                given: false,
                left_out: Vec::new(),
            };
        }
        Scope {
            nets,
            given: false,
            left_out,
        }
    }

    fn contains(&self, addr: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(&addr))
    }

    /// Whether a result at `addr` is scored at all.
    fn scores(&self, addr: IpAddr) -> bool {
        !self.given || self.contains(addr)
    }

    fn describe(&self) -> String {
        nets_text(&self.nets)
    }
}

/// `198.18.0.0/16, 2001:2::/116`.
fn nets_text(nets: &[IpNet]) -> String {
    let nets: Vec<String> = nets.iter().map(IpNet::to_string).collect();
    nets.join(", ")
}

/// What a scan is scored on: the answers that count, the ports, and whether it is about the
/// host (port 0, any answer).
struct Target {
    answers: Vec<Answer>,
    ports: Vec<u16>,
    host: bool,
}

impl Target {
    /// What the truth says (addr, port) answers to this kind of probe.
    fn truth(&self, truth: &Truth, addr: IpAddr, port: u16) -> Answer {
        if port == 0 {
            truth.echo(addr).answer
        } else if self
            .answers
            .iter()
            .any(|a| matches!(a, Answer::Unreach | Answer::Dns))
        {
            truth.udp(addr, port).answer
        } else {
            truth.tcp(addr, port).answer
        }
    }

    fn describe(&self, module: Module, scope: &Scope) -> String {
        let answers: Vec<&str> = self.answers.iter().map(|a| a.as_str()).collect();
        let mut s = format!("{}: {}", module.name(), answers.join("/"));
        if self.host && module != Module::IcmpEcho {
            s.push_str(" (any answer from the host)");
        }
        if self.ports != [0] {
            let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
            let word = if ports.len() == 1 { "port" } else { "ports" };
            s.push_str(&format!(" on {word} {}", ports.join(",")));
        }
        s.push_str(&format!(" within {}", scope.describe()));
        s
    }
}

/// The answer a result row reports: its classification's, or (without one) whatever the truth
/// holds there if it counts (`None` = the row is no answer at all).
fn row_answer(row: &Row) -> Option<Option<Answer>> {
    match row.classification.as_deref() {
        Some("synack") => Some(Some(Answer::Synack)),
        Some("rst") => Some(Some(Answer::Rst)),
        Some("echoreply") => Some(Some(Answer::Echo)),
        Some("unreach") => Some(Some(Answer::Unreach)),
        // A UDP reply: in the lab only the DNS server sends one.
        Some("udp" | "dns") => Some(Some(Answer::Dns)),
        Some(_) => None,
        None if row.success == Some(false) => None,
        None => Some(None),
    }
}

impl Target {
    /// What `args` (or, without them, `module` and the results) say to score.
    fn new(args: &ScoreRequest, module: Module, results: &Results) -> Result<Target> {
        let answers = args.answer.map_or_else(|| module.answers(), |a| vec![a]);
        let host = answers == [Answer::Echo];
        let mut target = Target {
            answers,
            ports: args.port.clone(),
            host,
        };
        if target.ports.is_empty() {
            target.ports = if host {
                vec![0]
            } else {
                let counts = |r: &Row| target.counts(r);
                let sport = |r: &Row| r.sport;
                ports_named(
                    results,
                    &args.results,
                    "sport",
                    sport,
                    &target.answers,
                    counts,
                )?
            };
        }
        Ok(target)
    }

    /// Whether a result row is an answer this score counts.
    fn counts(&self, row: &Row) -> bool {
        match row_answer(row) {
            None => false,
            Some(_) if self.host => true,
            Some(None) => true,
            Some(Some(a)) => self.answers.contains(&a),
        }
    }

    /// The (address, port) pairs of `scope` where the truth holds one of the answers.
    fn expected(&self, truth: &Truth, scope: &Scope) -> Result<HashSet<(IpAddr, u16)>> {
        let mut expected = HashSet::new();
        for addr in truth.addresses().filter(|a| scope.contains(*a)) {
            for &port in &self.ports {
                if self.answers.contains(&self.truth(truth, addr, port)) {
                    expected.insert((addr, port));
                }
            }
        }
        if expected.is_empty() {
            let answers: Vec<&str> = self.answers.iter().map(|a| a.as_str()).collect();
            let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
            bail!(
                "the truth has no {} rows for port {} within {}: check --port/--module (or --within)",
                answers.join("/"),
                ports.join(","),
                scope.describe()
            );
        }
        Ok(expected)
    }
}

fn score_scan(
    args: &ScoreRequest,
    scope: &Scope,
    module: Module,
    truth: &Truth,
    results: &Results,
) -> Result<ScanScore> {
    let target = Target::new(args, module, results)?;
    let expected = target.expected(truth, scope)?;
    let (mut found, mut false_positives) = (HashSet::new(), HashSet::new());
    for row in results.rows.iter().filter(|r| target.counts(r)) {
        let Some(addr) = row.addr.filter(|a| scope.scores(*a)) else {
            continue;
        };
        let port = if target.host {
            0
        } else {
            row_port(row.sport, &target.ports, &args.results, "sport")?
        };
        if !target.ports.contains(&port) {
            continue;
        }
        let truly = target.truth(truth, addr, port);
        let right = match row_answer(row) {
            Some(Some(a)) if !target.host => a == truly,
            _ => target.answers.contains(&truly),
        };
        if right && expected.contains(&(addr, port)) {
            found.insert((addr, port));
        } else {
            false_positives.insert((addr, port));
        }
    }
    Ok(ScanScore {
        expected: expected.len(),
        found: found.len(),
        false_positives: false_positives.len(),
        scored: target.describe(module, scope),
    })
}

/// The ports the results name in `column` (rows that count only), for scoring without --port.
fn ports_named(
    results: &Results,
    path: &Path,
    column: &str,
    port_of: impl Fn(&Row) -> Option<u16>,
    answers: &[Answer],
    counts: impl Fn(&Row) -> bool,
) -> Result<Vec<u16>> {
    if !results.has(column) {
        bail!(
            "{} has no {column} column to tell the port from: give --port",
            path.display()
        );
    }
    let ports: BTreeSet<u16> = results
        .rows
        .iter()
        .filter(|r| counts(r))
        .filter_map(port_of)
        .collect();
    if ports.is_empty() {
        let answers: Vec<&str> = answers.iter().map(|a| a.as_str()).collect();
        bail!(
            "{} has no {} rows to tell the port from: give --port",
            path.display(),
            answers.join("/")
        );
    }
    Ok(ports.into_iter().collect())
}

/// The port a row is about: its own column, or the only scored port if the file has none.
fn row_port(port: Option<u16>, scored: &[u16], path: &Path, column: &str) -> Result<u16> {
    match (port, scored) {
        (Some(p), _) => Ok(p),
        (None, [only]) => Ok(*only),
        (None, _) => bail!(
            "{} has rows without a {column}: give a single --port",
            path.display()
        ),
    }
}

// ---- scoring a grab -------------------------------------------------------------------------

/// How a grab did against the truth.
pub struct GrabScore {
    /// Live (answering, not silent) targets, and those with a `success` row.
    pub live: usize,
    pub completed: usize,
    /// Of the completed HTTP/HTTPS rows whose body the file shows: right and wrong bodies.
    pub bodies_right: usize,
    pub bodies_wrong: usize,
    /// Silent targets, and those reported `data-timeout`.
    pub silent: usize,
    pub silent_timeouts: usize,
    /// `success` rows where the truth has no live server.
    pub false_positives: usize,
    /// Completed rows of servers that show a certificate: (right, all); None without the
    /// tls_cert_sha256 column.
    pub certificates: Option<(usize, usize)>,
    /// Per expected field the results hold: (right, checked, missing).
    pub fields: BTreeMap<&'static str, FieldCount>,
    scored: String,
}

/// How one expected field did: rows with the right value, rows that had a value, and rows of
/// a file with the column whose value was empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldCount {
    pub right: usize,
    pub checked: usize,
    pub missing: usize,
}

/// "N of M[ what] (P %)", or "N of 0[ what]" (no percentage of nothing).
fn share(n: usize, of: usize, what: &str) -> String {
    if of == 0 {
        format!("{n} of 0{what}")
    } else {
        format!("{n} of {of}{what} ({:.3} %)", 100.0 * n as f64 / of as f64)
    }
}

impl fmt::Display for GrabScore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "completed {}, bodies correct {}, wrong bodies {}, silent seen as data-timeout {}, false positives {}",
            share(self.completed, self.live, " live"),
            share(self.bodies_right, self.bodies_right + self.bodies_wrong, ""),
            self.bodies_wrong,
            share(self.silent_timeouts, self.silent, ""),
            self.false_positives,
        )?;
        if let Some((right, all)) = self.certificates {
            write!(f, ", certificates correct {}", share(right, all, ""))?;
        }
        if !self.fields.is_empty() {
            let sum = |of: fn(&FieldCount) -> usize| self.fields.values().map(of).sum::<usize>();
            let (right, checked, missing) =
                (sum(|c| c.right), sum(|c| c.checked), sum(|c| c.missing));
            let each: Vec<String> = self
                .fields
                .iter()
                .map(|(name, c)| match c.missing {
                    0 => format!("{name} {}/{}", c.right, c.checked),
                    m => format!("{name} {}/{} missing {m}", c.right, c.checked),
                })
                .collect();
            write!(
                f,
                ", fields correct {}, wrong fields {}, missing fields {missing} ({})",
                share(right, checked, ""),
                checked - right,
                each.join(", ")
            )?;
        }
        write!(f, " [{}]", self.scored)
    }
}

/// The live (answering, not silent) and the silent (address, port) pairs of `scope`.
type Targets = HashSet<(IpAddr, u16)>;

fn grab_targets(truth: &Truth, scope: &Scope, ports: &[u16]) -> (Targets, Targets) {
    let (mut live, mut silent) = (HashSet::new(), HashSet::new());
    for addr in truth.addresses().filter(|a| scope.contains(*a)) {
        for &port in ports {
            let e = truth.tcp(addr, port);
            match (e.answer, e.service) {
                (Answer::Synack, Service::Silent) => silent.insert((addr, port)),
                (Answer::Synack, _) => live.insert((addr, port)),
                _ => false,
            };
        }
    }
    (live, silent)
}

/// The target's port of a grab's row: `sport` (sonde's rows, as a scan's), else `port`.
fn grab_port(row: &Row) -> Option<u16> {
    row.sport.or(row.port)
}

/// The ports of a grab: --port, else the results' sport (or port) column.
fn grab_ports(args: &ScoreRequest, results: &Results) -> Result<Vec<u16>> {
    if !args.port.is_empty() {
        return Ok(args.port.clone());
    }
    let column = if results.has("sport") {
        "sport"
    } else {
        "port"
    };
    let has_status = |r: &Row| r.status.is_some();
    ports_named(
        results,
        &args.results,
        column,
        grab_port,
        &[Answer::Synack],
        has_status,
    )
}

/// The (address, port) pairs of a grab in each class the score counts.
#[derive(Default)]
struct GrabTally {
    completed: Targets,
    bodies_right: Targets,
    bodies_wrong: Targets,
    silent_timeouts: Targets,
    false_positives: Targets,
    certificates: Targets,
    certificates_right: Targets,
    /// Per expected field: the pairs with the right value, with a value, and without one.
    fields: BTreeMap<&'static str, [Targets; 3]>,
}

impl GrabTally {
    /// Counts one row about (addr, port).
    fn add(&mut self, row: &Row, key: (IpAddr, u16), lab: &GrabLab) {
        let success = row.status.as_deref() == Some("success");
        if success && !lab.live.contains(&key) {
            self.false_positives.insert(key);
            return;
        }
        if !success {
            if row.timed_out() && lab.silent.contains(&key) {
                self.silent_timeouts.insert(key);
            }
            return;
        }
        self.completed.insert(key);
        let (addr, port) = key;
        let expect = lab.truth.expect(addr, port);
        self.add_fields(row, key, &expect, lab);
        if let Some((_, want)) = expect.iter().find(|(n, _)| *n == "tls_cert_sha256") {
            if lab.has_certificates {
                self.certificates.insert(key);
                if row.tls_cert_sha256.as_deref() == Some(want.as_str()) {
                    self.certificates_right.insert(key);
                }
            }
        }
        let service = lab.truth.tcp(addr, port).service;
        if !service.serves_http() {
            return;
        }
        if let Some(body) = &row.body_sha256 {
            let want = match row.path.as_deref().unwrap_or("/") {
                "/" => Some(crate::sha256_hex(crate::http_body(addr).as_bytes())),
                p if Some(p) == lab.status.big_path.as_deref() => lab.status.big_sha256.clone(),
                _ => None,
            };
            match want {
                Some(w) if w == *body => self.bodies_right.insert(key),
                Some(_) => self.bodies_wrong.insert(key),
                None => false,
            };
        }
    }

    /// Checks each field the truth expects of (addr, port) that the row has; one it lacks in a
    /// file with that column is missing.
    fn add_fields(
        &mut self,
        row: &Row,
        key: (IpAddr, u16),
        expect: &[(&'static str, String)],
        lab: &GrabLab,
    ) {
        for (name, want) in expect {
            let [right, checked, missing] = self.fields.entry(name).or_default();
            match row.field(name) {
                Some(got) => {
                    checked.insert(key);
                    if crate::field_matches(name, want, got) {
                        right.insert(key);
                    }
                }
                None if lab.columns.contains(*name) => {
                    missing.insert(key);
                }
                None => {}
            }
        }
    }
}

/// What a grab is scored against.
struct GrabLab<'a> {
    status: &'a LabStatus,
    truth: &'a Truth,
    live: Targets,
    silent: Targets,
    /// Whether the results carry certificate hashes.
    has_certificates: bool,
    /// The results' columns.
    columns: &'a HashSet<String>,
}

fn score_grab(
    args: &ScoreRequest,
    scope: &Scope,
    status: &LabStatus,
    truth: &Truth,
    results: &Results,
) -> Result<GrabScore> {
    let ports = grab_ports(args, results)?;
    let port_list: Vec<String> = ports.iter().map(u16::to_string).collect();
    let (live, silent) = grab_targets(truth, scope, &ports);
    if live.is_empty() {
        bail!(
            "the truth has no live hosts for port {} within {}: check --port/--within",
            port_list.join(","),
            scope.describe()
        );
    }
    let lab = GrabLab {
        status,
        truth,
        live,
        silent,
        has_certificates: results.has("tls_cert_sha256"),
        columns: &results.columns,
    };
    let mut tally = GrabTally::default();
    for row in &results.rows {
        let Some(addr) = row.addr.filter(|a| scope.scores(*a)) else {
            continue;
        };
        let port = row_port(grab_port(row), &ports, &args.results, "sport")?;
        if ports.contains(&port) {
            tally.add(row, (addr, port), &lab);
        }
    }
    Ok(GrabScore {
        live: lab.live.len(),
        completed: tally.completed.len(),
        bodies_right: tally.bodies_right.len(),
        bodies_wrong: tally.bodies_wrong.len(),
        silent: lab.silent.len(),
        silent_timeouts: tally.silent_timeouts.len(),
        false_positives: tally.false_positives.len(),
        certificates: lab
            .has_certificates
            .then_some((tally.certificates_right.len(), tally.certificates.len())),
        fields: tally
            .fields
            .iter()
            .filter(|(_, [_, checked, missing])| !checked.is_empty() || !missing.is_empty())
            .map(|(name, [right, checked, missing])| {
                let count = FieldCount {
                    right: right.len(),
                    checked: checked.len(),
                    missing: missing.len(),
                };
                (*name, count)
            })
            .collect(),
        scored: format!(
            "grab: port {} within {}",
            port_list.join(","),
            scope.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(classification: Option<&str>, success: Option<bool>) -> Row {
        Row {
            classification: classification.map(str::to_string),
            success,
            ..Row::default()
        }
    }

    /// The error of reading `content` as the results file `name`.
    fn reading_error(name: &str, content: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("sonde-score-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let err = read_results(&path, None).err().expect("an error");
        let _ = std::fs::remove_file(&path);
        format!("{err:#}")
    }

    #[test]
    fn unreadable_results_are_told_in_words() {
        let short = reading_error("h.csv", b"saddr,sport\n198.18.0.1,80\n198.18.0.2\n");
        assert!(short.contains("h.csv is not a CSV file"), "{short}");
        assert!(
            short.contains("line 3 has 1 fields where the header has 2"),
            "{short}"
        );
        let port = reading_error("p.csv", b"saddr,sport\n198.18.0.1,80x\n");
        assert!(
            port.contains("line 2: sport \"80x\" is not a port"),
            "{port}"
        );
        let json = reading_error("h.ndjson", b"{\"saddr\":1\n");
        assert!(json.contains("h.ndjson is not an NDJSON file"), "{json}");
        assert!(
            json.contains("(line 1, column 10: EOF while parsing an object)"),
            "{json}"
        );
        let binary = reading_error("b.csv", b"\xff\xfe,x\n");
        assert!(binary.contains("line 1 is not UTF-8 text"), "{binary}");
        for e in [&short, &port, &json, &binary] {
            assert!(
                !e.contains("Csv") && !e.contains("Ndjson") && !e.contains("CSV error"),
                "{e}"
            );
            assert!(e.contains("--format"), "{e}");
        }
    }

    #[test]
    fn classifications_name_modules_and_answers() {
        for (class, module, answer) in [
            ("synack", Module::TcpSyn, Answer::Synack),
            ("rst", Module::TcpSyn, Answer::Rst),
            ("echoreply", Module::IcmpEcho, Answer::Echo),
            ("unreach", Module::Udp, Answer::Unreach),
            ("udp", Module::Udp, Answer::Dns),
            ("dns", Module::Dns, Answer::Dns),
        ] {
            assert_eq!(Module::of_classification(class), Some(module), "{class}");
            assert_eq!(row_answer(&row(Some(class), None)), Some(Some(answer)));
        }
        assert_eq!(Module::of_classification("other"), None);
        assert_eq!(row_answer(&row(Some("other"), None)), None);
        assert_eq!(row_answer(&row(None, Some(false))), None);
        assert_eq!(row_answer(&row(None, Some(true))), Some(None));
        assert_eq!(row_answer(&row(None, None)), Some(None));
    }

    #[test]
    fn covering_prefixes_per_family() {
        let addrs = |list: &[&str]| {
            list.iter()
                .map(|a| a.parse::<IpAddr>().unwrap())
                .collect::<Vec<_>>()
                .into_iter()
        };
        assert_eq!(
            covering_prefixes(addrs(&["198.18.16.3", "198.18.31.250"])),
            "198.18.16.0/20"
        );
        assert_eq!(covering_prefixes(addrs(&["198.18.0.7"])), "198.18.0.7/32");
        assert_eq!(
            covering_prefixes(addrs(&["198.18.0.1", "2001:2::1", "2001:2::ff"])),
            "198.18.0.1/32, 2001:2::/120"
        );
        assert_eq!(
            covering_prefixes(addrs(&["1.0.0.0", "255.0.0.0"])),
            "0.0.0.0/0"
        );
    }

    #[test]
    fn grab_lines_name_each_checked_field() {
        let mut score = GrabScore {
            live: 4,
            completed: 4,
            bodies_right: 0,
            bodies_wrong: 0,
            silent: 0,
            silent_timeouts: 0,
            false_positives: 0,
            certificates: None,
            fields: BTreeMap::new(),
            scored: "grab: port 8443 within 198.18.0.0/30".into(),
        };
        let plain = score.to_string();
        assert!(plain.ends_with("false positives 0 [grab: port 8443 within 198.18.0.0/30]"));
        let count = |right, checked, missing| FieldCount {
            right,
            checked,
            missing,
        };
        score.fields.insert("tls_version", count(3, 4, 0));
        score.fields.insert("tls_cert_sha256", count(0, 0, 4));
        assert_eq!(
            score.to_string(),
            "completed 4 of 4 live (100.000 %), bodies correct 0 of 0, wrong bodies 0, \
             silent seen as data-timeout 0 of 0, false positives 0, fields correct 3 of 4 \
             (75.000 %), wrong fields 1, missing fields 4 (tls_cert_sha256 0/0 missing 4, \
             tls_version 3/4) [grab: port 8443 within 198.18.0.0/30]"
        );
    }

    /// A grab's row: the target's port is `sport` (dport is ours), and a reply waited for in
    /// vain is `tcp_status` data-timeout, or for rows without it, `status` io-timeout.
    #[test]
    fn grab_rows_name_the_target_s_port_sport_and_time_out_either_way() {
        let row = |cells: &'static [(&'static str, &'static str)]| {
            make_row(
                |c| {
                    cells
                        .iter()
                        .find(|(n, _)| *n == c)
                        .map(|(_, v)| v.to_string())
                },
                2,
            )
            .unwrap()
        };
        let sonde = row(&[
            ("saddr", "198.18.0.7"),
            ("sport", "443"),
            ("dport", "61000"),
            ("status", "io-timeout"),
            ("tcp_status", "data-timeout"),
        ]);
        assert_eq!(grab_port(&sonde), Some(443));
        assert!(sonde.timed_out());
        let closed = row(&[("status", "io-timeout"), ("tcp_status", "closed")]);
        assert!(!closed.timed_out());
        let other_tool = row(&[
            ("saddr", "198.18.0.7"),
            ("port", "80"),
            ("status", "io-timeout"),
        ]);
        assert_eq!(grab_port(&other_tool), Some(80));
        assert!(other_tool.timed_out());
    }

    #[test]
    fn shares_never_divide_by_zero() {
        assert_eq!(share(0, 0, ""), "0 of 0");
        assert_eq!(share(1, 4, ""), "1 of 4 (25.000 %)");
        assert_eq!(share(1, 4, " live"), "1 of 4 live (25.000 %)");
    }

    #[test]
    fn rows_from_cells() {
        let cells = |c: &str| {
            Some(
                match c {
                    "saddr" => "198.18.0.7",
                    "sport" => "80",
                    "success" => "true",
                    "http_body" => "sonde lab 198.18.0.7\n",
                    _ => return None,
                }
                .to_string(),
            )
        };
        let r = make_row(cells, 2).unwrap();
        assert_eq!(r.addr, Some("198.18.0.7".parse().unwrap()));
        assert_eq!((r.sport, r.success), (Some(80), Some(true)));
        assert_eq!(
            r.body_sha256,
            Some(crate::sha256_hex(b"sonde lab 198.18.0.7\n"))
        );
        let bad = make_row(|c| (c == "saddr").then(|| "nonsense".to_string()), 5);
        let e = bad.unwrap_err().to_string();
        assert!(
            e.contains("line 5") && e.contains("not an IP address"),
            "{e}"
        );
    }
}
