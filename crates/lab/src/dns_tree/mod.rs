//! The lab's DNS tree (`lab up --dns-tree N`): a root, the `test.` and `example.` TLDs and N
//! second-level zones generated from the seed, served by NSD, a slow server and unbound as the
//! recursive resolver, all in the lab's network namespace, with the ground truth of every
//! answer. [`spec`] is the tree itself as pure functions.

pub mod score;
mod servers;
mod slow;
pub mod spec;

pub(crate) use servers::start;
pub use slow::serve_slow;

use std::io::{BufWriter, Write};
use std::net::Ipv4Addr;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// What `lab up --dns-tree N [--dns-hosts H] [--dns-slow-ms D]` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsTreeConfig {
    /// Second-level zones (N, at least 1).
    pub zones: u64,
    /// Hosts `h0` … `h{H-1}` in each.
    pub hosts: u32,
    /// How long the slow server holds each query, in milliseconds.
    pub slow_ms: u64,
    /// The XDP answerer serves the tree on 198.19.54.0/24 too (`--dns-answerer xdp`).
    pub answerer: bool,
    /// The real servers (NSD, the slow server, unbound) run; without them (`--dns-servers
    /// none`) only the answerer serves the tree, which then may be of any size.
    pub servers: bool,
}

/// Hosts per zone by default.
pub const DEFAULT_HOSTS: u32 = 4;
/// The slow server's delay by default, in milliseconds.
pub const DEFAULT_SLOW_MS: u64 = 300;
/// Most records the second-level zones may hold together. Measured on 2 vCPUs (`lab up
/// --dns-tree N`, default hosts): NSD loads 10,000 zones (170,000 records) in 3.1 s and 50,000
/// (850,000) in 18.9 s, holding some 470 MB, with 205 MB of zone files in /run; a million
/// records keep `up` under half a minute.
pub const MAX_RECORDS: u64 = 1_000_000;
/// The longest delay of the slow server: longer would only time every client out.
const MAX_SLOW_MS: u64 = 60_000;

impl DnsTreeConfig {
    /// Records in one second-level zone: the fixed ones and one per host.
    pub fn records_per_zone(&self) -> u64 {
        spec::FIXED_RECORDS + u64::from(self.hosts)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.zones == 0 {
            bail!("--dns-tree 0 has no zones; give at least 1 (e.g. --dns-tree 100)");
        }
        if !self.servers && !self.answerer {
            bail!(
                "--dns-servers none leaves nothing to serve the DNS tree; add --dns-answerer xdp"
            );
        }
        let records = self.zones.saturating_mul(self.records_per_zone());
        if self.servers && records > MAX_RECORDS {
            bail!(
                "--dns-tree {} with --dns-hosts {} makes {records} records, more than NSD loads in reasonable time ({MAX_RECORDS}); use fewer zones or hosts, or --dns-answerer xdp --dns-servers none",
                self.zones,
                self.hosts
            );
        }
        if self.slow_ms > MAX_SLOW_MS {
            bail!(
                "--dns-slow-ms {} is longer than {MAX_SLOW_MS}: every client would time out first",
                self.slow_ms
            );
        }
        Ok(())
    }
}

/// A running DNS tree, in the lab's status (`LabStatus::dns_tree`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DnsTreeStatus {
    pub zones: u64,
    pub hosts: u32,
    /// The lab's seed, which the tree's values come from.
    pub seed: u64,
    /// The slow server's delay, in milliseconds.
    pub slow_ms: u64,
    /// The root server, the resolvers' only hint.
    pub root: Ipv4Addr,
    /// The recursive resolvers (unbound).
    pub resolvers: Vec<Ipv4Addr>,
    /// The XDP answerer's prefix, when one serves the tree.
    #[serde(default)]
    pub answerers: Option<String>,
}

impl DnsTreeStatus {
    /// The tree it serves.
    pub fn tree(&self) -> spec::Tree {
        spec::Tree::new(self.seed, self.zones, self.hosts)
    }
}

/// Writes the truth of lab `name`'s DNS tree (`tree`, from its status) to `out`, one JSON object a line
/// ([`spec::TruthRow`]); returns the rows written. An error naming what to do when the lab
/// has no tree.
pub fn truth(name: &str, tree: Option<&DnsTreeStatus>, out: &mut dyn Write) -> Result<u64> {
    let Some(status) = tree else {
        return Err(anyhow!(
            "lab {name:?} has no DNS tree (bring one up with: sonde lab up --name {name} --dns-tree 100)"
        ));
    };
    let tree = status.tree();
    let mut w = BufWriter::with_capacity(1 << 16, out);
    let mut rows = 0;
    for row in tree.truth() {
        write_row(&mut w, &row)
            .with_context(|| format!("cannot write the DNS truth of lab {name:?}"))?;
        rows += 1;
    }
    w.flush()
        .with_context(|| format!("cannot write the DNS truth of lab {name:?}"))?;
    Ok(rows)
}

fn write_row(w: &mut impl Write, row: &spec::TruthRow) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, row).map_err(std::io::Error::from)?;
    w.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_beyond_what_nsd_loads_in_time_are_refused_in_one_line() {
        let ok = DnsTreeConfig {
            zones: 100,
            hosts: DEFAULT_HOSTS,
            slow_ms: DEFAULT_SLOW_MS,
            answerer: false,
            servers: true,
        };
        ok.validate().unwrap();
        // What the limit counts is what a zone holds.
        let tree = spec::Tree::new(1, 100, DEFAULT_HOSTS);
        assert_eq!(
            tree.records(spec::Zone::Sld(7)).len() as u64,
            ok.records_per_zone()
        );
        for (bad, why) in [
            (DnsTreeConfig { zones: 0, ..ok }, "no zones"),
            (
                DnsTreeConfig {
                    zones: 100_000,
                    ..ok
                },
                "more than NSD loads",
            ),
            (
                DnsTreeConfig {
                    hosts: u32::MAX,
                    ..ok
                },
                "more than NSD loads",
            ),
            (
                DnsTreeConfig {
                    slow_ms: 120_000,
                    ..ok
                },
                "time out",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
    }

    #[test]
    fn the_xdp_answerer_alone_serves_a_tree_of_any_size() {
        let answerer_alone = DnsTreeConfig {
            zones: 10_000_000,
            hosts: DEFAULT_HOSTS,
            slow_ms: DEFAULT_SLOW_MS,
            answerer: true,
            servers: false,
        };
        answerer_alone.validate().unwrap();
        // With the servers the limit is NSD's, answerer or not.
        let with_servers = DnsTreeConfig {
            servers: true,
            ..answerer_alone
        };
        let e = with_servers.validate().unwrap_err().to_string();
        assert!(e.contains("--dns-servers none"), "{e}");
        // Without either nothing would serve the tree.
        let nothing = DnsTreeConfig {
            zones: 10,
            answerer: false,
            ..answerer_alone
        };
        let e = nothing.validate().unwrap_err().to_string();
        assert!(e.contains("add --dns-answerer xdp"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }
}
