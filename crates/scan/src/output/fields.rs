//! Choosing the output fields: `-f saddr,sport,success`, `*`, or the module's default set (the
//! sets are in reply.rs, beside the fields, which the probe modules use too).

use anyhow::{anyhow, bail, Result};

use crate::probe::ModuleKind;
use crate::reply::{Field, FIELDS};

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
