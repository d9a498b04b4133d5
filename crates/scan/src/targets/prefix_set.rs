//! Sets of IPv4 and IPv6 addresses for allowlists (`-w`) and blocklists (`-b`), and the default
//! blocklist: the IANA special-purpose registries plus multicast.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{anyhow, Result};
use ipnet::{Ipv4Net, Ipv6Net};

use super::intervals::{cidr_blocks, Intervals};
use super::parse::{for_each_list_token, parse_block, Block};

/// A set of addresses. Both families are kept as sorted, merged `[start, end]` intervals (IPv6 as
/// `u128`), so membership is a binary search and the set algebra is a linear sweep; the IPv6 part
/// is shown as prefixes by `ipv6_nets`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixSet {
    pub(super) v4: Intervals<u32>,
    pub(super) v6: Intervals<u128>,
}

impl PrefixSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses prefixes (any IPv6 width), IPv4 ranges and single addresses.
    pub fn parse<S: AsRef<str>>(tokens: &[S]) -> Result<Self> {
        let mut blocks = Vec::with_capacity(tokens.len());
        for token in tokens {
            let token = token.as_ref().trim();
            blocks.push(
                parse_block(token).map_err(|why| anyhow!("invalid prefix {token:?}: {why}"))?,
            );
        }
        Ok(Self::from_blocks(blocks))
    }

    /// Reads a list file: one prefix, IPv4 range or address per line, `#` comments.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let mut blocks = Vec::new();
        for_each_list_token(path, |line, token| {
            let block = parse_block(token).map_err(|why| {
                anyhow!("{}:{line}: invalid prefix {token:?}: {why}", path.display())
            })?;
            blocks.push(block);
            Ok(())
        })?;
        Ok(Self::from_blocks(blocks))
    }

    pub(crate) fn from_blocks(blocks: impl IntoIterator<Item = Block>) -> Self {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for block in blocks {
            match block {
                Block::V4(start, end) => v4.push((start, end)),
                Block::V6(start, end) => v6.push((start, end)),
            }
        }
        Self {
            v4: Intervals::from_unsorted(v4),
            v6: Intervals::from_unsorted(v6),
        }
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.v4.contains(a.into()),
            IpAddr::V6(a) => self.v6.contains(a.into()),
        }
    }

    /// The addresses in `self` and not in `other`.
    pub fn subtract(&self, other: &PrefixSet) -> PrefixSet {
        Self {
            v4: self.v4.subtract(&other.v4),
            v6: self.v6.subtract(&other.v6),
        }
    }

    pub fn intersect(&self, other: &PrefixSet) -> PrefixSet {
        Self {
            v4: self.v4.intersect(&other.v4),
            v6: self.v6.intersect(&other.v6),
        }
    }

    /// For combining blocklists: the default one plus the user's `-b` file.
    pub fn union(&self, other: &PrefixSet) -> PrefixSet {
        Self {
            v4: self.v4.union(&other.v4),
            v6: self.v6.union(&other.v6),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Sorted, merged, non-overlapping `[start, end]` intervals.
    pub fn ipv4_intervals(&self) -> &[(u32, u32)] {
        self.v4.as_slice()
    }

    pub fn ipv6_intervals(&self) -> &[(u128, u128)] {
        self.v6.as_slice()
    }

    pub fn ipv4_count(&self) -> u64 {
        self.v4.count() as u64
    }

    /// The IPv4 part as the fewest prefixes.
    pub fn ipv4_nets(&self) -> Vec<Ipv4Net> {
        let blocks = self.v4.as_slice().iter();
        blocks
            .flat_map(|&(s, e)| cidr_blocks(s.into(), e.into(), 32))
            .map(|(base, len)| Ipv4Net::new(Ipv4Addr::from(base as u32), len).expect("len <= 32"))
            .collect()
    }

    /// The IPv6 part as the fewest prefixes.
    pub fn ipv6_nets(&self) -> Vec<Ipv6Net> {
        let blocks = self.v6.as_slice().iter();
        blocks
            .flat_map(|&(s, e)| cidr_blocks(s, e, 128))
            .map(|(base, len)| Ipv6Net::new(Ipv6Addr::from(base), len).expect("len <= 128"))
            .collect()
    }
}

/// The default blocklist, one entry per registry row (or covering block), with why it is there.
/// Sources: IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and updates), the
/// IPv4 and IPv6 multicast address spaces. Rows the registry marks globally reachable but that
/// sit inside a covering block (192.0.0.9/32 PCP anycast, 2001:1::1/128, …) go with the block:
/// they are protocol anycast services, not scan targets.
pub const DEFAULT_BLOCKLIST: &[(&str, &str)] = &[
    // IPv4 special-purpose registry
    ("0.0.0.0/8", "\"this network\" (RFC 791 §3.2); includes 0.0.0.0/32 \"this host\""),
    ("10.0.0.0/8", "private use (RFC 1918)"),
    ("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
    ("127.0.0.0/8", "loopback (RFC 1122 §3.2.1.3)"),
    ("169.254.0.0/16", "link-local (RFC 3927)"),
    ("172.16.0.0/12", "private use (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments (RFC 6890 §2.1): DS-Lite, PCP/TURN anycast, NAT64 discovery"),
    ("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)"),
    ("192.31.196.0/24", "AS112-v4 (RFC 7535)"),
    ("192.52.193.0/24", "AMT relay anycast (RFC 7450)"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast (RFC 7526)"),
    ("192.168.0.0/16", "private use (RFC 1918)"),
    ("192.175.48.0/24", "direct delegation AS112 service (RFC 7534)"),
    ("198.18.0.0/15", "benchmarking (RFC 2544): the lab's range, hence --no-default-blocklist there"),
    ("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)"),
    ("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)"),
    ("240.0.0.0/4", "reserved (RFC 1112 §4)"),
    ("255.255.255.255/32", "limited broadcast (RFC 8190, RFC 919 §7)"),
    // IPv4 multicast address space
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    // IPv6 special-purpose registry
    ("::/128", "unspecified address (RFC 4291)"),
    ("::1/128", "loopback (RFC 4291)"),
    ("::ffff:0:0/96", "IPv4-mapped addresses (RFC 4291)"),
    ("64:ff9b::/96", "IPv4-IPv6 translation, well-known prefix (RFC 6052)"),
    ("64:ff9b:1::/48", "IPv4-IPv6 translation, local use (RFC 8215)"),
    ("100::/64", "discard-only (RFC 6666)"),
    ("100:0:0:1::/64", "dummy IPv6 prefix (RFC 9780)"),
    ("2001::/23", "IETF protocol assignments (RFC 2928): TEREDO, benchmarking 2001:2::/48, AMT, AS112-v6, ORCHIDv2"),
    ("2001:db8::/32", "documentation (RFC 3849)"),
    ("2002::/16", "6to4 (RFC 3056)"),
    ("2620:4f:8000::/48", "direct delegation AS112 service (RFC 7534)"),
    ("3fff::/20", "documentation (RFC 9637)"),
    ("5f00::/16", "segment routing SIDs (RFC 9602)"),
    ("fc00::/7", "unique local (RFC 4193, RFC 8190)"),
    ("fe80::/10", "link-local unicast (RFC 4291)"),
    // IPv6 multicast address space
    ("ff00::/8", "multicast (RFC 4291 §2.7)"),
];

/// The special-purpose and multicast space no scan should probe (see `DEFAULT_BLOCKLIST`).
pub fn default_blocklist() -> PrefixSet {
    let blocks = DEFAULT_BLOCKLIST
        .iter()
        .map(|(prefix, _why)| parse_block(prefix).expect("the built-in blocklist parses"));
    PrefixSet::from_blocks(blocks)
}
