//! Choosing the output fields: `-f saddr,sport,success`, `*`, or the module's default set.
//!
//! Every default set starts with `saddr` and holds `classification` and `success`: `sonde lab
//! score` reads them.

use anyhow::{anyhow, bail, Result};

use crate::probe::ModuleKind;
use crate::reply::{Field, FIELDS};

/// Fields written for `tcp_syn` when none are chosen: what ZMap users expect from a TCP scan.
pub const DEFAULT_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "ipid",
    "window",
    "tcp_mss",
    "tcp_wscale",
    "tcp_sack_ok",
    "tcp_ts",
    "rtt_us",
    "timestamp",
];

/// Fields written for `icmp_echo` when none are chosen: no ports, no TCP.
pub const ICMP_FIELDS: &[&str] = &[
    "saddr",
    "daddr",
    "classification",
    "success",
    "repeat",
    "ttl",
    "ipid",
    "icmp_type",
    "icmp_code",
    "rtt_us",
    "timestamp",
];

/// Fields written for `udp` when none are chosen: the answer's length, the ICMP error that
/// came instead, and whether it was fragmented.
pub const UDP_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "udp_len",
    "icmp_type",
    "icmp_code",
    "fragmented",
    "timestamp",
];

/// Fields written for `dns` when none are chosen: as for `udp`, plus the response code and the
/// number of answers.
pub const DNS_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "udp_len",
    "dns_rcode",
    "dns_answers",
    "icmp_type",
    "icmp_code",
    "fragmented",
    "timestamp",
];

/// The fields named by `spec` (comma separated, spaces ignored; `*` means every field, in
/// [`FIELDS`] order), or the `module`'s [`ModuleKind::default_fields`] when `spec` is `None`.
pub fn select_fields(spec: Option<&str>, module: ModuleKind) -> Result<Vec<&'static Field>> {
    match spec.map(str::trim) {
        None => module
            .default_fields()
            .iter()
            .map(|name| lookup(name))
            .collect(),
        Some("*") => Ok(FIELDS.iter().collect()),
        Some(list) => parse_list(list),
    }
}

fn parse_list(list: &str) -> Result<Vec<&'static Field>> {
    if list.is_empty() {
        bail!("no output fields given; known fields: {}", known_names());
    }
    let mut selected: Vec<&'static Field> = Vec::new();
    for name in list.split(',').map(str::trim) {
        if name.is_empty() {
            bail!("empty field name in output field list `{list}`");
        }
        let field = lookup(name)?;
        if selected.iter().any(|f| f.name == field.name) {
            bail!("output field `{name}` is listed twice");
        }
        selected.push(field);
    }
    Ok(selected)
}

/// The field called `name`, if there is one.
pub(super) fn find_field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

fn lookup(name: &str) -> Result<&'static Field> {
    find_field(name).ok_or_else(|| {
        anyhow!(
            "unknown output field `{name}`; known fields: {}",
            known_names()
        )
    })
}

/// Every field name, comma separated, for error messages.
pub(super) fn known_names() -> String {
    let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
    names.join(", ")
}
