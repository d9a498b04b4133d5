//! Stateless scanning: the target space and its permutation (`targets`), probe modules that build
//! and recognise probes of both address families (`probe`), keyed validation (`validate`),
//! duplicate suppression (`dedup`) and output writers (`output`). The send/receive loop lives
//! above this crate.
//!
//! Takes the targets asked for (prefixes, ports, blocklists, shard and seed) and received frames;
//! gives each sender its next targets and probe frames, and each validated reply as an output row.
//! Uses sonde-wire (parsing), sonde-craft (probe templates, cookies) and sonde-meter (stage clocks,
//! output files), with csv and parquet for the writers.

pub mod dedup;
pub mod nearest;
pub mod output;
pub mod probe;
pub mod reply;
pub mod targets;
/// The keyed cookie (it lives in `sonde-craft`, which `grab`'s TCP engine shares).
pub use sonde_craft::cookie as validate;

pub use reply::{Field, Reply, Value, FIELDS};
