//! The lab's nftables tables: who answers, silent hosts, and random loss.
//!
//! ```text
//! table inet sonde {
//!     set responsive { type ipv4_addr; elements = { the answering addresses } }
//!     chain prerouting {                       # raw priority: before conntrack
//!         # with a DNS tree (KEEP: its servers' prefixes), before the rest:
//!         ip daddr { KEEP } udp dport 53 counter accept
//!         ip daddr { KEEP } tcp dport 53 counter accept
//!         iifname "lo" ip daddr { KEEP } counter accept        # the resolver's own queries
//!         ip daddr POP ip daddr != @responsive counter drop   # silent
//!         ip daddr POP numgen random mod 1000000 < N counter drop   # loss
//!         ip daddr POP counter                  # what reaches the kernel
//!         # with an IPv6 population POP6, the same three rules:
//!         ip6 daddr POP6 ip6 daddr != @responsive6 counter drop
//!         ip6 daddr POP6 numgen random mod 1000000 < N counter drop
//!         ip6 daddr POP6 counter
//!     }
//!     set responsive6 { type ipv6_addr; … }    # only with POP6
//!     # only with silent hosts:
//!     set silent { type ipv4_addr; … }  set silent6 { type ipv6_addr; … }
//!     chain silent {                           # mangle priority, after the drops
//!         ip daddr @silent tcp dport { OPEN } tproxy ip to 127.0.0.1:SILENT_PORT
//!         ip6 daddr @silent6 tcp dport { OPEN } tproxy ip6 to [::1]:SILENT_PORT
//!     }
//! }
//! table netdev sonde_out {                     # only with loss
//!     chain egress {                           # nx0's egress: after the stack sent it
//!         ip saddr POP numgen random mod 1000000 < N counter fwd to "lz0"
//!         ip6 saddr POP6 numgen random mod 1000000 < N counter fwd to "lz0"
//!     }
//! }
//! ```
//! The IPv6 rules match only POP6, which config.rs keeps clear of the link
//! prefix, so neighbour discovery (to the link prefix and solicited-node
//! multicast) is never dropped.
//!
//! The DNS tree's servers answer port 53 whatever the population is: a population that covers
//! their prefixes still drops (or loses) everything else sent there, as its truth says.
//!
//! Silent hosts: tproxy hands their SYNs on the open ports to the silent server's listener
//! (which is bound to loopback, so nothing else reaches it), keeping the original addresses
//! on the accepted socket. Unlike a NAT redirect it needs no conntrack, so a scan at line rate
//! fills no connection-tracking table.
//!
//! Loss from the population must look like loss on a wire: the sending TCP must believe the
//! segment left, so the peer sees a gap (out-of-order data, SACK, retransmissions). A `drop`
//! anywhere on the way out (output, postrouting, even nx0's egress hook) fails the send with
//! an error, and TCP just sends the segment again, with no gap. So the lost packets are
//! `fwd`-ed from nx0's egress hook to `lz0`, an interface that is down and eats them: the hook
//! reports them stolen, which the sender counts as sent. (`up` also caps nx0 at one segment
//! per packet, so each draw loses one segment, not a 64 KB TSO train.)
//!
//! Addresses go in with `add element` lines of at most CHUNK elements, so even
//! a /15 with every address responsive loads without huge single commands.

use std::fmt::Write;
use std::net::IpAddr;
use std::path::Path;

use anyhow::Result;

use ipnet::Ipv4Net;

use crate::cmd::in_ns;
use crate::config::{LOSS_SINK_IF, NET_IF, SILENT_PORT};
use crate::truth::{Population, Population6};

/// The silent hosts and the ports on which they accept and stay silent.
#[derive(Clone, Debug, Default)]
pub(crate) struct Silent {
    pub addrs: Vec<IpAddr>,
    pub ports: Vec<u16>,
}

const CHUNK: usize = 4096;
/// numgen draws from 0..LOSS_SCALE; loss is kept to 1e-6.
const LOSS_SCALE: f64 = 1_000_000.0;

/// The nft script for `pop` (and `pop6`) with `loss` (0.0..1.0) and the `silent` hosts; DNS
/// to the prefixes of `keep` (the DNS tree's) passes whatever the population is.
pub(crate) fn script(
    pop: &Population,
    pop6: Option<&Population6>,
    loss: f64,
    silent: &Silent,
    keep: &[Ipv4Net],
) -> String {
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
    keep_rules(&mut s, keep);
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
    silent_rules(&mut s, silent, pop6.is_some());
    if drop_in_million > 0 {
        loss_out_rules(&mut s, net, pop6.map(|p| p.net.trunc()), drop_in_million);
    }
    s
}

/// Accepts DNS to the prefixes of `keep` before the population's rules can drop it, and what
/// the lab's own servers send one another there over loopback (the resolver's queries to the
/// tree's servers, and their answers).
fn keep_rules(s: &mut String, keep: &[Ipv4Net]) {
    if keep.is_empty() {
        return;
    }
    let nets: Vec<String> = keep.iter().map(Ipv4Net::to_string).collect();
    let nets = nets.join(", ");
    let rule = "add rule inet sonde prerouting";
    for proto in ["udp", "tcp"] {
        let _ = writeln!(
            s,
            "{rule} ip daddr {{ {nets} }} {proto} dport 53 counter accept comment \"dns tree\""
        );
    }
    let _ = writeln!(
        s,
        "{rule} iifname \"lo\" ip daddr {{ {nets} }} counter accept comment \"dns tree inside\""
    );
}

/// The tproxy chain that hands the silent hosts' connections to the silent server.
fn silent_rules(s: &mut String, silent: &Silent, v6: bool) {
    if silent.addrs.is_empty() || silent.ports.is_empty() {
        return;
    }
    let ports: Vec<String> = silent.ports.iter().map(u16::to_string).collect();
    let ports = ports.join(", ");
    let _ = writeln!(s, "add set inet sonde silent {{ type ipv4_addr; }}");
    let _ = writeln!(
        s,
        "add chain inet sonde silent {{ type filter hook prerouting priority mangle; policy accept; }}"
    );
    let _ = writeln!(
        s,
        "add rule inet sonde silent ip daddr @silent tcp dport {{ {ports} }} tproxy ip to 127.0.0.1:{SILENT_PORT} comment \"silent\""
    );
    add_elements(s, "silent", silent.addrs.iter().filter(|a| a.is_ipv4()));
    if v6 {
        let _ = writeln!(s, "add set inet sonde silent6 {{ type ipv6_addr; }}");
        let _ = writeln!(
            s,
            "add rule inet sonde silent ip6 daddr @silent6 tcp dport {{ {ports} }} tproxy ip6 to [::1]:{SILENT_PORT} comment \"silent6\""
        );
        add_elements(s, "silent6", silent.addrs.iter().filter(|a| a.is_ipv6()));
    }
}

/// Loss on the way back: packets from the population sent to the sink at nx0's egress.
fn loss_out_rules(s: &mut String, net: ipnet::Ipv4Net, net6: Option<ipnet::Ipv6Net>, n: u64) {
    let scale = LOSS_SCALE as u64;
    let _ = writeln!(s, "add table netdev sonde_out");
    let _ = writeln!(
        s,
        "add chain netdev sonde_out egress {{ type filter hook egress device {NET_IF} priority filter; policy accept; }}"
    );
    let rule = "add rule netdev sonde_out egress";
    let _ = writeln!(
        s,
        "{rule} ip saddr {net} numgen random mod {scale} < {n} counter fwd to \"{LOSS_SINK_IF}\" comment \"loss_out\""
    );
    if let Some(net6) = net6 {
        let _ = writeln!(
            s,
            "{rule} ip6 saddr {net6} numgen random mod {scale} < {n} counter fwd to \"{LOSS_SINK_IF}\" comment \"loss_out6\""
        );
    }
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
    silent: &Silent,
    keep: &[Ipv4Net],
    file: &Path,
) -> Result<()> {
    std::fs::write(file, script(pop, pop6, loss, silent, keep))
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
        let s = script(&pop, None, 0.01, &Silent::default(), &[]);
        assert!(!s.contains("ip6") && !s.contains("responsive6"));
        assert!(s.contains("ip daddr 198.18.0.0/16 ip daddr != @responsive counter drop"));
        assert!(s.contains("numgen random mod 1000000 < 10000 counter drop"));
        let adds: Vec<&str> = s.lines().filter(|l| l.starts_with("add element")).collect();
        assert_eq!(adds.len(), 65536 / CHUNK);
        let count: usize = adds.iter().map(|l| l.matches(',').count() + 1).sum();
        assert_eq!(count, 65536);
        assert!(adds[0].starts_with("add element inet sonde responsive { 198.18.0.0, 198.18.0.1,"));
        assert!(adds[0].ends_with(" }"));
        assert!(!s.contains("dns tree"));
    }

    #[test]
    fn the_dns_trees_servers_answer_whatever_the_population() {
        let pop = Population {
            net: "198.18.0.0/15".parse().unwrap(),
            seed: 1,
            share: 0.0,
        };
        let keep = [
            "198.19.53.0/24".parse().unwrap(),
            "198.19.54.0/24".parse().unwrap(),
        ];
        let s = script(&pop, None, 0.5, &Silent::default(), &keep);
        let rules: Vec<&str> = s.lines().filter(|l| l.starts_with("add rule")).collect();
        // Before every rule that drops.
        let first_drop = rules.iter().position(|l| l.contains("drop")).unwrap();
        for kept in [
            "ip daddr { 198.19.53.0/24, 198.19.54.0/24 } udp dport 53 counter accept",
            "ip daddr { 198.19.53.0/24, 198.19.54.0/24 } tcp dport 53 counter accept",
            "iifname \"lo\" ip daddr { 198.19.53.0/24, 198.19.54.0/24 } counter accept",
        ] {
            let at = rules
                .iter()
                .position(|l| l.contains(kept))
                .unwrap_or_else(|| panic!("{s}"));
            assert!(at < first_drop, "{s}");
        }
    }

    #[test]
    fn no_loss_rule_and_no_elements_when_empty() {
        let pop = Population {
            net: "198.18.0.0/24".parse().unwrap(),
            seed: 1,
            share: 0.0,
        };
        let s = script(&pop, None, 0.0, &Silent::default(), &[]);
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
        let s = script(&pop, Some(&pop6), 0.01, &Silent::default(), &[]);
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

    #[test]
    fn silent_hosts_go_to_the_silent_server_and_loss_goes_both_ways() {
        let pop = Population {
            net: "198.18.0.0/24".parse().unwrap(),
            seed: 1,
            share: 1.0,
        };
        let pop6 = Population6 {
            net: "2001:2::/120".parse().unwrap(),
            seed: 1,
            share: 1.0,
        };
        let silent = Silent {
            addrs: vec![
                "198.18.0.5".parse().unwrap(),
                "198.18.0.9".parse().unwrap(),
                "2001:2::7".parse().unwrap(),
            ],
            ports: vec![80, 443],
        };
        let s = script(&pop, Some(&pop6), 0.25, &silent, &[]);
        assert!(s.contains(
            "add rule inet sonde silent ip daddr @silent tcp dport { 80, 443 } tproxy ip to 127.0.0.1:65534"
        ), "{s}");
        assert!(s.contains(
            "add rule inet sonde silent ip6 daddr @silent6 tcp dport { 80, 443 } tproxy ip6 to [::1]:65534"
        ));
        assert!(s.contains("add element inet sonde silent { 198.18.0.5, 198.18.0.9 }"));
        assert!(s.contains("add element inet sonde silent6 { 2001:2::7 }"));
        assert!(s.contains("priority mangle"));
        assert!(s.contains(
            "add chain netdev sonde_out egress { type filter hook egress device nx0 priority filter; policy accept; }"
        ));
        assert!(s.contains(
            "ip saddr 198.18.0.0/24 numgen random mod 1000000 < 250000 counter fwd to \"lz0\""
        ));
        assert!(s.contains(
            "ip6 saddr 2001:2::/120 numgen random mod 1000000 < 250000 counter fwd to \"lz0\""
        ));
        // No silent hosts, no loss: neither chain.
        let plain = script(&pop, None, 0.0, &Silent::default(), &[]);
        assert!(!plain.contains("tproxy") && !plain.contains("sonde_out"));
    }
}
