//! The lab's nftables table: who answers, and random loss.
//!
//! ```text
//! table inet sonde {
//!     set responsive { type ipv4_addr; elements = { the answering addresses } }
//!     chain prerouting {                       # raw priority: before conntrack
//!         ip daddr POP ip daddr != @responsive counter drop   # silent
//!         ip daddr POP numgen random mod 1000000 < N counter drop   # loss
//!         ip daddr POP counter                  # what reaches the kernel
//!     }
//! }
//! ```
//! Addresses go in with `add element` lines of at most CHUNK elements, so even
//! a /15 with every address responsive loads without huge single commands.

use std::fmt::Write;
use std::path::Path;

use anyhow::Result;

use crate::cmd::in_ns;
use crate::truth::Population;

const CHUNK: usize = 4096;
/// numgen draws from 0..LOSS_SCALE; loss is kept to 1e-6.
const LOSS_SCALE: f64 = 1_000_000.0;

/// The nft script for `pop` with `loss` (0.0..1.0).
pub(crate) fn script(pop: &Population, loss: f64) -> String {
    let net = pop.net.trunc();
    let mut s = String::new();
    // The table cannot exist yet (the namespace is new); `add table` keeps
    // the script valid if it is loaded again by hand.
    let _ = writeln!(s, "add table inet sonde");
    let _ = writeln!(s, "add set inet sonde responsive {{ type ipv4_addr; }}");
    let _ = writeln!(
        s,
        "add chain inet sonde prerouting {{ type filter hook prerouting priority raw; policy accept; }}"
    );
    let rule = format!("add rule inet sonde prerouting ip daddr {net}");
    let _ = writeln!(
        s,
        "{rule} ip daddr != @responsive counter drop comment \"silent\""
    );
    let drop_in_million = (loss * LOSS_SCALE).round() as u64;
    if drop_in_million > 0 {
        let _ = writeln!(
            s,
            "{rule} numgen random mod {} < {drop_in_million} counter drop comment \"loss\"",
            LOSS_SCALE as u64
        );
    }
    let _ = writeln!(s, "{rule} counter comment \"answered\"");
    add_elements(&mut s, pop);
    s
}

fn add_elements(s: &mut String, pop: &Population) {
    let mut n = 0;
    for addr in pop.responsive() {
        if n % CHUNK == 0 {
            if n > 0 {
                s.push_str(" }\n");
            }
            s.push_str("add element inet sonde responsive {");
        } else {
            s.push(',');
        }
        let _ = write!(s, " {addr}");
        n += 1;
    }
    if n > 0 {
        s.push_str(" }\n");
    }
}

/// Writes the script to `file`, loads it in namespace `ns`, and removes the
/// file (`nft list ruleset` in the namespace shows what was loaded).
pub(crate) fn load(ns: &str, pop: &Population, loss: f64, file: &Path) -> Result<()> {
    std::fs::write(file, script(pop, loss))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", file.display()))?;
    let loaded = in_ns(ns, "nft", &["-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(file);
    loaded.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_shape() {
        let pop = Population {
            net: "198.18.0.0/16".parse().unwrap(),
            seed: 1,
            share: 1.0,
        };
        let s = script(&pop, 0.01);
        assert!(s.contains("ip daddr 198.18.0.0/16 ip daddr != @responsive counter drop"));
        assert!(s.contains("numgen random mod 1000000 < 10000 counter drop"));
        let adds: Vec<&str> = s.lines().filter(|l| l.starts_with("add element")).collect();
        assert_eq!(adds.len(), 65536 / CHUNK);
        let count: usize = adds.iter().map(|l| l.matches(',').count() + 1).sum();
        assert_eq!(count, 65536);
        assert!(adds[0].starts_with("add element inet sonde responsive { 198.18.0.0, 198.18.0.1,"));
        assert!(adds[0].ends_with(" }"));
    }

    #[test]
    fn no_loss_rule_and_no_elements_when_empty() {
        let pop = Population {
            net: "198.18.0.0/24".parse().unwrap(),
            seed: 1,
            share: 0.0,
        };
        let s = script(&pop, 0.0);
        assert!(!s.contains("numgen"));
        assert!(!s.contains("add element"));
    }
}
