//! Text to addresses: target tokens, list files and port lists. Every error is one line that
//! names the offending token (and the file and line when it came from a file).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};

use super::intervals::Intervals;

/// IPv6 is scanned from address lists, never by sweeping prefixes: a /112 (65,536 addresses) is
/// the widest prefix still expanded into addresses.
pub const WIDEST_IPV6_TARGET_PREFIX: u8 = 112;

/// One token as a closed range of addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Block {
    V4(u32, u32),
    V6(u128, u128),
}

/// Parses a CIDR prefix, an IPv4 range or a single address. The error is the reason only; callers
/// add the token and where it came from.
pub(crate) fn parse_block(token: &str) -> Result<Block, String> {
    if let Some((addr, len)) = token.split_once('/') {
        parse_prefix(addr, len)
    } else if let Some((first, last)) = token.split_once('-') {
        parse_range(first, last)
    } else {
        match token.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => Ok(Block::V4(a.into(), a.into())),
            Ok(IpAddr::V6(a)) => Ok(Block::V6(a.into(), a.into())),
            Err(_) => Err("not an IP address, prefix or range".into()),
        }
    }
}

/// Like `parse_block`, plus the rule that IPv6 targets come as addresses, not wide prefixes.
fn parse_target_block(token: &str) -> Result<Block, String> {
    let block = parse_block(token)?;
    if let Block::V6(start, end) = block {
        if end - start >= 1 << (128 - WIDEST_IPV6_TARGET_PREFIX) {
            return Err(format!(
                "IPv6 prefixes wider than /{WIDEST_IPV6_TARGET_PREFIX} are not swept; \
                 give the addresses to scan in a hit-list file"
            ));
        }
    }
    Ok(block)
}

/// Host bits set in the address are ignored (`198.18.7.1/16` is `198.18.0.0/16`), as in ZMap.
fn parse_prefix(addr: &str, len: &str) -> Result<Block, String> {
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP address"))?;
    let max_len: u8 = if addr.is_ipv4() { 32 } else { 128 };
    let len = len
        .parse::<u8>()
        .ok()
        .filter(|&len| len <= max_len)
        .ok_or_else(|| format!("prefix length must be from 0 to {max_len}"))?;
    Ok(match addr {
        IpAddr::V4(a) => {
            let host = u32::MAX.checked_shr(len.into()).unwrap_or(0);
            let start = u32::from(a) & !host;
            Block::V4(start, start | host)
        }
        IpAddr::V6(a) => {
            let host = u128::MAX.checked_shr(len.into()).unwrap_or(0);
            let start = u128::from(a) & !host;
            Block::V6(start, start | host)
        }
    })
}

fn parse_range(first: &str, last: &str) -> Result<Block, String> {
    let parse = |text: &str| {
        text.parse::<Ipv4Addr>()
            .map_err(|_| match text.parse::<Ipv6Addr>() {
                Ok(_) => "ranges are IPv4 only; give IPv6 as a prefix or addresses".to_string(),
                Err(_) => format!("{text:?} is not an IPv4 address"),
            })
    };
    let (start, end) = (parse(first)?, parse(last)?);
    if start > end {
        return Err(format!("range start {start} is after its end {end}"));
    }
    Ok(Block::V4(start.into(), end.into()))
}

/// The scan's targets as given: IPv4 as merged intervals, IPv6 as a sorted list of addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetSpec {
    pub(crate) v4: Intervals<u32>,
    pub(crate) v6: Vec<u128>,
}

impl TargetSpec {
    /// Sorted, merged, non-overlapping `[start, end]` intervals.
    pub fn ipv4_intervals(&self) -> &[(u32, u32)] {
        self.v4.as_slice()
    }

    /// The IPv6 hit list, sorted, without duplicates.
    pub fn ipv6_addrs(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.v6.iter().map(|&a| Ipv6Addr::from(a))
    }

    /// Distinct addresses given, IPv4 and IPv6.
    pub fn address_count(&self) -> u128 {
        self.v4.count() + self.v6.len() as u128
    }
}

/// Parses target tokens: IPv4/IPv6 prefixes (`198.18.0.0/16`, `2001:2::/120`), IPv4 ranges
/// (`198.18.0.1-198.18.0.50`) and single addresses. IPv6 prefixes wider than /112 are refused.
pub fn parse_targets<S: AsRef<str>>(tokens: &[S]) -> Result<TargetSpec> {
    if tokens.is_empty() {
        bail!("no targets given");
    }
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for token in tokens {
        let token = token.as_ref().trim();
        match parse_target_block(token).map_err(|why| anyhow!("invalid target {token:?}: {why}"))? {
            Block::V4(start, end) => v4.push((start, end)),
            Block::V6(start, end) => v6.extend(start..=end),
        }
    }
    v6.sort_unstable();
    v6.dedup();
    Ok(TargetSpec {
        v4: Intervals::from_unsorted(v4),
        v6,
    })
}

/// Reads a target list (one token per line, `#` comments, blank lines ignored) and checks every
/// token, so that a bad one is reported with its file and line rather than later without them.
pub fn read_target_file(path: impl AsRef<Path>) -> Result<Vec<String>> {
    let path = path.as_ref();
    let mut tokens = Vec::new();
    for_each_list_token(path, |line, token| {
        parse_target_block(token)
            .map_err(|why| anyhow!("{}:{line}: invalid target {token:?}: {why}", shown(path)))?;
        tokens.push(token.to_string());
        Ok(())
    })?;
    Ok(tokens)
}

/// A target list as read from a file that may carry ports: the address tokens and every port
/// the lines named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetList {
    pub tokens: Vec<String>,
    /// Sorted, distinct; empty when no line named a port.
    pub ports: Vec<u16>,
    /// The names of `address[:port],name` lines, in file order.
    pub names: Vec<NamedTarget>,
}

/// One `address[:port],name` line of a target list (ZGrab2's input): the name a connection to
/// that address (and port, when given; every port otherwise) uses for Host and SNI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedTarget {
    pub addr: IpAddr,
    pub port: Option<u16>,
    pub name: String,
}

/// Why `name` is no host name, if it is not: letters, digits, '-', '_', '.', at most 253
/// bytes, labels of at most 63.
fn check_name(name: &str) -> Result<(), String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    if name.is_empty() {
        return Err("the name after ',' is empty".into());
    }
    if name.len() > 253 || name.split('.').any(|label| label.len() > 63) {
        return Err("a host name has at most 253 characters, in labels of at most 63".into());
    }
    if !name.bytes().all(allowed) {
        return Err("a host name has only letters, digits, '-', '_' and '.'".into());
    }
    Ok(())
}

/// `address[:port],name`: the address, its port if given, the checked name.
fn parse_named(token: &str) -> Result<NamedTarget, String> {
    let (target, name) = token.split_once(',').expect("a named line has a comma");
    let (addr, port) = split_port(target)?;
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not one address (a named line names one host)"))?;
    check_name(name)?;
    Ok(NamedTarget {
        addr,
        port,
        name: name.to_string(),
    })
}

/// Reads targets that may come with ports: what [`read_target_file`] reads, plus `addr:port`
/// and `[v6addr]:port` lines, each optionally followed by `,name` (ZGrab2's input: the name
/// goes into Host and SNI; [`TargetList::names`]), plus the rows of `sonde scan` or
/// `sonde grab`, csv (a header naming `saddr`) or ndjson (objects with `saddr`), whose `sport`
/// is the target's port in both, so a scan's hits can be grabbed directly. `-` is standard
/// input (`sonde scan -o - | sonde grab -I -`).
pub fn read_target_list(path: impl AsRef<Path>) -> Result<TargetList> {
    let path = path.as_ref();
    if let Some(list) = read_row_targets(path)? {
        return Ok(list);
    }
    let mut list = TargetList::default();
    for_each_list_token(path, |line, token| {
        if token.contains(',') {
            let named = parse_named(token).map_err(|why| {
                anyhow!(
                    "{}:{line}: invalid line {token:?}: {why}; lines are address[:port] or address[:port],name",
                    shown(path)
                )
            })?;
            list.tokens.push(named.addr.to_string());
            list.ports.extend(named.port);
            list.names.push(named);
            return Ok(());
        }
        let (addr, port) = split_port(token)
            .map_err(|why| anyhow!("{}:{line}: invalid target {token:?}: {why}", shown(path)))?;
        parse_target_block(addr)
            .map_err(|why| anyhow!("{}:{line}: invalid target {token:?}: {why}", shown(path)))?;
        list.tokens.push(addr.to_string());
        list.ports.extend(port);
        Ok(())
    })?;
    list.ports.sort_unstable();
    list.ports.dedup();
    Ok(list)
}

/// `198.18.0.1:80` → (`198.18.0.1`, 80), `[2001:2::1]:443` → (`2001:2::1`, 443); anything
/// else is returned whole, with no port.
fn split_port(token: &str) -> Result<(&str, Option<u16>), String> {
    let port = |text: &str| parse_port(text).ok_or_else(|| format!("{text:?} is not a port"));
    if let Some(rest) = token.strip_prefix('[') {
        let (addr, after) = rest.split_once(']').ok_or("a '[' without its ']'")?;
        let p = after.strip_prefix(':').ok_or("expected :PORT after ]")?;
        return Ok((addr, Some(port(p)?)));
    }
    match token.rsplit_once(':') {
        Some((addr, p)) if addr.parse::<Ipv4Addr>().is_ok() => Ok((addr, Some(port(p)?))),
        _ => Ok((token, None)),
    }
}

/// The rows of sonde's scan or grab output: csv whose header names `saddr`, or ndjson objects
/// with `saddr`; `None` for any other file. The port is `sport`, the target's in both.
fn read_row_targets(path: &Path) -> Result<Option<TargetList>> {
    let mut first = String::new();
    open_list(path)?
        .read_line(&mut first)
        .with_context(|| format!("{}: cannot read", shown(path)))?;
    if first.trim_start().starts_with('{') {
        return read_ndjson_targets(path).map(Some);
    }
    let header: Vec<&str> = first.trim_end().split(',').collect();
    let Some(saddr) = header.iter().position(|h| *h == "saddr") else {
        return Ok(None);
    };
    let port_column = header.iter().position(|h| *h == "sport");
    let mut reader = csv::Reader::from_reader(open_list(path)?);
    let mut list = TargetList::default();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let record = record.with_context(|| format!("{}:{line}: not csv", shown(path)))?;
        let port = port_column.and_then(|c| record.get(c));
        add_row(
            &mut list,
            path,
            line,
            record.get(saddr).unwrap_or_default(),
            port,
        )?;
    }
    list.ports.sort_unstable();
    list.ports.dedup();
    Ok(Some(list))
}

/// One JSON object a line, each with `saddr` (and `sport`, the port).
fn read_ndjson_targets(path: &Path) -> Result<TargetList> {
    let mut list = TargetList::default();
    for (i, line) in open_list(path)?.lines().enumerate() {
        let line_number = i + 1;
        let line = line.with_context(|| format!("{}:{line_number}: cannot read", shown(path)))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| anyhow!("{}:{line_number}: not a JSON object: {e}", shown(path)))?;
        let Some(addr) = row.get("saddr").and_then(|a| a.as_str()) else {
            bail!("{}:{line_number}: the row has no saddr", shown(path));
        };
        let port = row
            .get("sport")
            .filter(|p| !p.is_null())
            .map(|p| p.to_string());
        add_row(&mut list, path, line_number, addr, port.as_deref())?;
    }
    list.ports.sort_unstable();
    list.ports.dedup();
    Ok(list)
}

/// Adds the target of one output row: its address, and its port when the row has one.
fn add_row(
    list: &mut TargetList,
    path: &Path,
    line: usize,
    addr: &str,
    port: Option<&str>,
) -> Result<()> {
    parse_target_block(addr)
        .map_err(|why| anyhow!("{}:{line}: invalid saddr {addr:?}: {why}", shown(path)))?;
    list.tokens.push(addr.to_string());
    if let Some(p) = port.filter(|p| !p.is_empty()) {
        let port =
            parse_port(p).ok_or_else(|| anyhow!("{}:{line}: invalid port {p:?}", shown(path)))?;
        list.ports.push(port);
    }
    Ok(())
}

/// A list to read: the file at `path`, or for `-` standard input, read whole the first time
/// and kept, since a run reads its targets more than once (checked, then planned; a grab's
/// names too).
fn open_list(path: &Path) -> Result<Box<dyn BufRead>> {
    if path != Path::new("-") {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        return Ok(Box::new(BufReader::new(file)));
    }
    static STDIN: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    let read = STDIN.get_or_init(|| {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map(|_| bytes)
            .map_err(|e| e.to_string())
    });
    match read {
        Ok(bytes) => Ok(Box::new(bytes.as_slice())),
        Err(e) => bail!("cannot read the targets from standard input: {e}"),
    }
}

/// A list's name in messages: its path, or "standard input" for `-`.
fn shown(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// Calls `each(line_number, token)` for every token of a list file: one token per line, `#`
/// starts a comment, blank lines are skipped. Streams a file, so hit lists of any size fit
/// (standard input is held whole: see [`open_list`]).
pub(crate) fn for_each_list_token(
    path: &Path,
    mut each: impl FnMut(usize, &str) -> Result<()>,
) -> Result<()> {
    for (i, line) in open_list(path)?.lines().enumerate() {
        let line_number = i + 1;
        let line = line.with_context(|| format!("{}:{line_number}: cannot read", shown(path)))?;
        let text = line.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        if text.split_whitespace().count() > 1 {
            bail!(
                "{}:{line_number}: expected one entry per line, found {text:?}",
                shown(path)
            );
        }
        each(line_number, text)?;
    }
    Ok(())
}

/// Parses `80,443,8000-8100` into sorted, distinct ports.
pub fn parse_ports(text: &str) -> Result<Vec<u16>> {
    if text.trim().is_empty() {
        bail!("no ports given");
    }
    let mut ports = Vec::new();
    for token in text.split(',').map(str::trim) {
        match token.split_once('-') {
            Some((low, high)) => {
                let (low, high) = parse_port(low)
                    .zip(parse_port(high))
                    .filter(|(low, high)| low <= high)
                    .ok_or_else(|| {
                        anyhow!("invalid port range {token:?}: must be LOW-HIGH, LOW at most HIGH, both up to 65535")
                    })?;
                ports.extend(low..=high);
            }
            None => {
                ports.push(parse_port(token).ok_or_else(|| {
                    anyhow!("invalid port {token:?}: must be a number up to 65535")
                })?)
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// Digits only: `u16::from_str` would also take `+80`.
fn parse_port(text: &str) -> Option<u16> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}
