//! Stateless scanning: the target space and its permutation (`targets`), probe modules that build
//! and recognise probes of both address families (`probe`), keyed validation (`validate`),
//! duplicate suppression (`dedup`) and output writers (`output`). The send/receive loop lives
//! above this crate.

pub mod dedup;
pub mod output;
pub mod probe;
pub mod reply;
pub mod targets;
/// The keyed cookie (it lives in `sonde-craft`, which `grab`'s TCP engine shares).
pub use sonde_craft::cookie as validate;

pub use reply::{Field, Reply, Value, FIELDS};
