//! The allowed target space: targets ∩ allowlist − blocklist, times the ports, as one index space
//! `0..len` that the permutation walks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Result};

use super::intervals::Intervals;
use super::order::Permutation;
use super::parse::TargetSpec;
use super::prefix_set::PrefixSet;

/// Every (address, port) pair to probe, addressable by index.
///
/// Index layout is address-major: `index = address_index · ports + port_index`, so the port
/// varies fastest. Address indexes run over the IPv4 intervals in order, then the IPv6 hit list.
/// Since the permutation scatters indexes, one index space mixes addresses and ports and a host's
/// ports are probed at unrelated times.
#[derive(Clone, Debug)]
pub struct TargetSpace {
    v4: Vec<(u32, u32)>,
    /// `v4_before[i]`: IPv4 addresses in the intervals before `v4[i]`, for the binary search.
    v4_before: Vec<u64>,
    v4_count: u64,
    v6: Vec<u128>,
    ports: Vec<u16>,
    len: u64,
}

impl TargetSpace {
    /// Fails when nothing is left to probe or the space exceeds `Permutation::MAX_LEN`.
    pub fn new(
        targets: &TargetSpec,
        allowlist: Option<&PrefixSet>,
        blocklist: &PrefixSet,
        ports: &[u16],
    ) -> Result<Self> {
        if ports.is_empty() {
            bail!("no ports given");
        }
        let mut ports = ports.to_vec();
        ports.sort_unstable();
        ports.dedup();
        let v4 = allowed_v4(targets, allowlist, blocklist);
        let v6 = allowed_v6(targets, allowlist, blocklist);
        if v4.is_empty() && v6.is_empty() {
            bail!(
                "no targets left after the blocklist/allowlist ({} addresses given, all excluded)",
                thousands(targets.address_count())
            );
        }
        Self::from_parts(v4.as_slice().to_vec(), v6, ports)
    }

    fn from_parts(v4: Vec<(u32, u32)>, v6: Vec<u128>, ports: Vec<u16>) -> Result<Self> {
        let mut v4_before = Vec::with_capacity(v4.len());
        let mut v4_count = 0u64;
        for &(start, end) in &v4 {
            v4_before.push(v4_count);
            v4_count += u64::from(end - start) + 1;
        }
        let addresses = u128::from(v4_count) + v6.len() as u128;
        let len = addresses * ports.len() as u128;
        if len > u128::from(Permutation::MAX_LEN) {
            bail!(
                "{} addresses × {} ports = {} probes is more than one scan can order (2^62)",
                thousands(addresses),
                ports.len(),
                thousands(len)
            );
        }
        Ok(Self {
            v4,
            v4_before,
            v4_count,
            v6,
            ports,
            len: len as u64,
        })
    }

    /// Probes in all: addresses × ports.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: construction fails on an empty space.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn addresses(&self) -> u64 {
        self.v4_count + self.v6.len() as u64
    }

    pub fn ipv4_addresses(&self) -> u64 {
        self.v4_count
    }

    pub fn ipv6_addresses(&self) -> u64 {
        self.v6.len() as u64
    }

    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// The allowed IPv4 space as sorted, merged `[start, end]` intervals.
    pub fn ipv4_intervals(&self) -> &[(u32, u32)] {
        &self.v4
    }

    /// The order to probe in: a seeded permutation of `0..len()`.
    pub fn permutation(&self, seed: u64) -> Permutation {
        Permutation::new(self.len, seed)
    }

    /// The probe at `index < len()`.
    #[inline]
    pub fn target_at(&self, index: u64) -> (IpAddr, u16) {
        // One port is the common case; it saves a division per probe.
        if self.ports.len() == 1 {
            return (self.addr_at(index), self.ports[0]);
        }
        let n = self.ports.len() as u64;
        (self.addr_at(index / n), self.ports[(index % n) as usize])
    }

    /// The address at `index < addresses()`: IPv4 first, then IPv6.
    #[inline]
    pub fn addr_at(&self, index: u64) -> IpAddr {
        if index < self.v4_count {
            IpAddr::V4(self.ipv4_at(index))
        } else {
            IpAddr::V6(Ipv6Addr::from(self.v6[(index - self.v4_count) as usize]))
        }
    }

    /// The IPv4 address at `index < ipv4_addresses()`: a binary search over the intervals.
    #[inline]
    pub fn ipv4_at(&self, index: u64) -> Ipv4Addr {
        assert!(index < self.v4_count, "IPv4 index {index} out of range");
        let i = self.v4_before.partition_point(|&before| before <= index) - 1;
        Ipv4Addr::from(self.v4[i].0 + (index - self.v4_before[i]) as u32)
    }

    /// The index of (`addr`, `port`): the inverse of [`TargetSpace::target_at`], or `None` when
    /// the pair is not in the space (a reply from an address or port that was never probed).
    #[inline]
    pub fn index_of(&self, addr: IpAddr, port: u16) -> Option<u64> {
        let port_index = self.ports.binary_search(&port).ok()? as u64;
        Some(self.address_index(addr)? * self.ports.len() as u64 + port_index)
    }

    /// The index of `addr` among the addresses (`addr_at`'s inverse): a binary search over the
    /// IPv4 intervals, or over the sorted IPv6 list.
    #[inline]
    pub fn address_index(&self, addr: IpAddr) -> Option<u64> {
        match addr {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                let i = self
                    .v4
                    .partition_point(|&(start, _)| start <= a)
                    .checked_sub(1)?;
                let (start, end) = self.v4[i];
                (a <= end).then(|| self.v4_before[i] + u64::from(a - start))
            }
            IpAddr::V6(a) => {
                let i = self.v6.binary_search(&u128::from(a)).ok()?;
                Some(self.v4_count + i as u64)
            }
        }
    }

    /// For the operator: `65,536 addresses × 1 port = 65,536 probes`.
    pub fn describe(&self) -> String {
        self.describe_as("probe", "probes")
    }

    /// [`describe`](Self::describe) with the tool's own word for a target, e.g.
    /// `1,024 addresses × 1 port = 1,024 connections`.
    pub fn describe_as(&self, one: &str, many: &str) -> String {
        format!(
            "{} × {} = {}",
            counted(self.addresses().into(), "address", "addresses"),
            counted(self.ports.len() as u128, "port", "ports"),
            counted(self.len.into(), one, many),
        )
    }
}

fn allowed_v4(
    targets: &TargetSpec,
    allow: Option<&PrefixSet>,
    block: &PrefixSet,
) -> Intervals<u32> {
    let given = match allow {
        Some(allow) => targets.v4.intersect(&allow.v4),
        None => targets.v4.clone(),
    };
    given.subtract(&block.v4)
}

fn allowed_v6(targets: &TargetSpec, allow: Option<&PrefixSet>, block: &PrefixSet) -> Vec<u128> {
    let allowed = |a: &u128| allows(allow, *a) && !block.v6.contains(*a);
    targets.v6.iter().copied().filter(allowed).collect()
}

/// No allowlist allows everything.
fn allows(allow: Option<&PrefixSet>, addr: u128) -> bool {
    match allow {
        Some(set) => set.v6.contains(addr),
        None => true,
    }
}

fn counted(n: u128, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// `1234567` → `1,234,567`.
fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let lead = match digits.len() % 3 {
        0 => 3,
        short => short,
    };
    let mut out = digits[..lead].to_string();
    for group in digits.as_bytes()[lead..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).expect("ASCII digits"));
    }
    out
}
