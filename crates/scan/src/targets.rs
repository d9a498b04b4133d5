//! The scan's target space and its order.
//!
//! - `parse`: target tokens (`198.18.0.0/16`, `198.18.0.1-198.18.0.50`, `2001:db8::1`), target
//!   list files and port lists.
//! - `prefix_set`: address sets for allow- and blocklists, and the default blocklist.
//! - `space`: `TargetSpace`, targets ∩ allowlist − blocklist × ports as one index space.
//! - `order`: `Permutation`, a seeded walk of a cyclic group that visits every index once, split
//!   among shards and threads and resumable from a small `CursorState`.
//! - `shard`: the shard number from flags or from Slurm / Kubernetes.
//!
//! Nothing here allocates per target: a whole-IPv4 scan is a few dozen intervals and a cursor.

mod intervals;
mod modular;
mod order;
mod parse;
mod prefix_set;
mod shard;
mod space;

pub use order::{Cursor, CursorState, Part, Permutation};
pub use parse::{
    parse_ports, parse_targets, read_target_file, read_target_list, NamedTarget, TargetList,
    TargetSpec, WIDEST_IPV6_TARGET_PREFIX,
};
pub use prefix_set::{default_blocklist, PrefixSet, DEFAULT_BLOCKLIST};
pub use shard::{shard_from_env, shard_from_vars};
pub use space::TargetSpace;
