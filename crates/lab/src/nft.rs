//! The lab's nftables table: who answers, and random loss.
//!
//! ```text
//! table inet sonde {
//!     set responsive { type ipv4_addr; elements = { the answering addresses } }
//!     chain prerouting {                       # raw priority: before conntrack
//!         ip daddr POP ip daddr != @responsive counter drop   # silent
//!         ip daddr POP numgen random mod 1000000 < N counter drop   # loss
//!         ip daddr POP counter                  # what reaches the kernel
//!         # with an IPv6 population POP6, the same three rules:
//!         ip6 daddr POP6 ip6 daddr != @responsive6 counter drop
//!         ip6 daddr POP6 numgen random mod 1000000 < N counter drop
//!         ip6 daddr POP6 counter
//!     }
//!     set responsive6 { type ipv6_addr; … }    # only with POP6
//! }
//! ```
//! The IPv6 rules match only POP6, which config.rs keeps clear of the link
//! prefix, so neighbour discovery (to the link prefix and solicited-node
//! multicast) is never dropped.
//! Addresses go in with `add element` lines of at most CHUNK elements, so even
//! a /15 with every address responsive loads without huge single commands.

use std::fmt::Write;
use std::path::Path;

use anyhow::Result;

use crate::cmd::in_ns;
use crate::truth::{Population, Population6};

const CHUNK: usize = 4096;
/// numgen draws from 0..LOSS_SCALE; loss is kept to 1e-6.
const LOSS_SCALE: f64 = 1_000_000.0;

/// The nft script for `pop` (and `pop6`) with `loss` (0.0..1.0).
pub(crate) fn script(pop: &Population, pop6: Option<&Population6>, loss: f64) -> String {
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
    add_elements(&mut s, "responsive", pop.responsive());
    if let Some(pop6) = pop6 {
        let net6 = pop6.net.trunc();
        let _ = writeln!(s, "add set inet sonde responsive6 {{ type ipv6_addr; }}");
        let rule6 = format!("add rule inet sonde prerouting ip6 daddr {net6}");
        let _ = writeln!(
            s,
            "{rule6} ip6 daddr != @responsive6 counter drop comment \"silent6\""
        );
        if drop_in_million > 0 {
            let _ = writeln!(
                s,
                "{rule6} numgen random mod {} < {drop_in_million} counter drop comment \"loss6\"",
                LOSS_SCALE as u64
            );
        }
        let _ = writeln!(s, "{rule6} counter comment \"answered6\"");
        add_elements(&mut s, "responsive6", pop6.responsive());
    }
    s
}

fn add_elements<A: std::fmt::Display>(s: &mut String, set: &str, addrs: impl Iterator<Item = A>) {
    let mut n = 0;
    for addr in addrs {
        if n % CHUNK == 0 {
            if n > 0 {
                s.push_str(" }\n");
            }
            let _ = write!(s, "add element inet sonde {set} {{");
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
pub(crate) fn load(
    ns: &str,
    pop: &Population,
    pop6: Option<&Population6>,
    loss: f64,
    file: &Path,
) -> Result<()> {
    std::fs::write(file, script(pop, pop6, loss))
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
        let s = script(&pop, None, 0.01);
        assert!(!s.contains("ip6") && !s.contains("responsive6"));
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
        let s = script(&pop, None, 0.0);
        assert!(!s.contains("numgen"));
        assert!(!s.contains("add element"));
    }

    #[test]
    fn script6_shape() {
        let pop = Population {
            net: "198.18.0.0/24".parse().unwrap(),
            seed: 1,
            share: 1.0,
        };
        let pop6 = Population6 {
            net: "2001:2::/112".parse().unwrap(),
            seed: 1,
            share: 1.0,
        };
        let s = script(&pop, Some(&pop6), 0.01);
        assert!(s.contains("add set inet sonde responsive6 { type ipv6_addr; }"));
        assert!(s.contains(
            "ip6 daddr 2001:2::/112 ip6 daddr != @responsive6 counter drop comment \"silent6\""
        ));
        assert!(s.contains("ip6 daddr 2001:2::/112 numgen random mod 1000000 < 10000 counter drop"));
        let adds: Vec<&str> = s
            .lines()
            .filter(|l| l.starts_with("add element inet sonde responsive6 "))
            .collect();
        assert_eq!(adds.len(), 65536 / CHUNK);
        let count: usize = adds.iter().map(|l| l.matches(',').count() + 1).sum();
        assert_eq!(count, 65536);
        assert!(adds[0].starts_with("add element inet sonde responsive6 { 2001:2::, 2001:2::1,"));
        // The IPv4 set still gets only IPv4 addresses.
        let adds4 = s
            .lines()
            .filter(|l| l.starts_with("add element inet sonde responsive "));
        assert!(adds4.clone().all(|l| !l.contains("2001:")));
        assert_eq!(adds4.count(), 1);
    }
}
