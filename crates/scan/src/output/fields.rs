//! Choosing the output fields: `-f saddr,sport,success`, `*`, or the ZMap-like default set.

use anyhow::{anyhow, bail, Result};

use crate::reply::{Field, FIELDS};

/// Fields written when none are chosen: what ZMap users expect from a TCP scan.
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

/// The fields named by `spec` (comma separated, spaces ignored; `*` means every field, in
/// [`FIELDS`] order), or [`DEFAULT_FIELDS`] when `spec` is `None`.
pub fn select_fields(spec: Option<&str>) -> Result<Vec<&'static Field>> {
    match spec.map(str::trim) {
        None => DEFAULT_FIELDS.iter().map(|name| lookup(name)).collect(),
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
