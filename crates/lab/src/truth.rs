//! Which addresses answer, and the ground truth of what the lab does.
//!
//! The same `Population::answers` decides both the nftables set (what the lab
//! does) and the truth rows (what the lab says it does), so they cannot drift.

use std::fmt::Display;
use std::io::{self, BufWriter, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{anyhow, Result};
use ipnet::{Ipv4Net, Ipv6Net};

use crate::config::LINK_NET;
use crate::state;

/// 2^64 / golden ratio: SplitMix64's increment.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// SplitMix64's finaliser: a bijection on u64 with full avalanche.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A keyed 64-bit hash of an address: the seed is mixed into a key first, so
/// nearby seeds give unrelated populations.
fn addr_hash(seed: u64, addr: Ipv4Addr) -> u64 {
    let key = mix64(seed.wrapping_add(GOLDEN));
    mix64(key ^ u64::from(u32::from(addr)).wrapping_mul(GOLDEN))
}

/// The same keyed hash over a 128-bit address: the IPv4 step applied to the
/// high 64 bits, then again with the low 64 bits.
fn addr_hash6(seed: u64, addr: Ipv6Addr) -> u64 {
    let key = mix64(seed.wrapping_add(GOLDEN));
    let bits = u128::from(addr);
    let (hi, lo) = ((bits >> 64) as u64, bits as u64);
    let h = mix64(key ^ hi.wrapping_mul(GOLDEN));
    mix64(h ^ lo.wrapping_mul(GOLDEN))
}

/// Whether a hash is among the lowest `share` (0.0..=1.0) of all u64s.
fn below_share(hash: u64, share: f64) -> bool {
    if share >= 1.0 {
        return true;
    }
    if share.is_nan() || share <= 0.0 {
        return false;
    }
    // share < 1, so the product is below 2^64 and the cast is exact enough.
    hash < (share * TWO_POW_64) as u64
}

/// Whether `addr` is among the `share` (0.0..=1.0) of addresses that answer
/// under `seed`: its keyed hash is below share·2^64.
pub fn is_responsive(seed: u64, addr: Ipv4Addr, share: f64) -> bool {
    below_share(addr_hash(seed, addr), share)
}

/// `is_responsive` for IPv6: the same keyed hash over all 128 bits of
/// `addr`, below share·2^64.
pub fn is_responsive6(seed: u64, addr: Ipv6Addr, share: f64) -> bool {
    below_share(addr_hash6(seed, addr), share)
}

/// A lab's population and the rule that picks who answers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Population {
    pub net: Ipv4Net,
    pub seed: u64,
    pub share: f64,
}

impl Population {
    /// Every address of the prefix, network and broadcast included (the lab
    /// answers for them too: they are plain local addresses there), ascending.
    pub fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> {
        (u32::from(self.net.network())..=u32::from(self.net.broadcast())).map(Ipv4Addr::from)
    }

    /// Whether the lab answers at `addr`. The veth link subnet never answers:
    /// its addresses are routed to the link, not to the lab, and nftables
    /// drops what is sent to them (see nft.rs).
    pub fn answers(&self, addr: Ipv4Addr) -> bool {
        !LINK_NET.contains(&addr) && is_responsive(self.seed, addr, self.share)
    }

    pub fn responsive(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.addresses().filter(|a| self.answers(*a))
    }
}

/// A lab's IPv6 population (at most a /112, so enumerable) and the rule that
/// picks who answers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Population6 {
    pub net: Ipv6Net,
    pub seed: u64,
    pub share: f64,
}

impl Population6 {
    /// Every address of the prefix, ascending.
    pub fn addresses(&self) -> impl Iterator<Item = Ipv6Addr> {
        (u128::from(self.net.network())..=u128::from(self.net.broadcast())).map(Ipv6Addr::from)
    }

    /// Whether the lab answers at `addr` (config.rs keeps the link prefix out
    /// of IPv6 populations).
    pub fn answers(&self, addr: Ipv6Addr) -> bool {
        is_responsive6(self.seed, addr, self.share)
    }

    pub fn responsive(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.addresses().filter(|a| self.answers(*a))
    }
}

/// Writes the ground truth CSV of lab `name` (see `write_truth`); `ports`
/// defaults to the lab's open ports. Returns the number of rows after the
/// header.
pub fn truth(name: &str, ports: Option<&[u16]>, out: &mut dyn Write) -> Result<u64> {
    let st = state::load(name)?;
    let net: Ipv4Net = st.population.parse().map_err(|e| {
        anyhow!(
            "lab {name:?} state has a bad population {:?}: {e}",
            st.population
        )
    })?;
    let pop = Population {
        net,
        seed: st.seed,
        share: st.responsive,
    };
    let pop6 = match &st.population6 {
        None => None,
        Some(p) => Some(Population6 {
            net: p
                .parse()
                .map_err(|e| anyhow!("lab {name:?} state has a bad IPv6 population {p:?}: {e}"))?,
            seed: st.seed,
            share: st.responsive,
        }),
    };
    let ports = ports.unwrap_or(&st.tcp_open);
    write_truth(&pop, pop6.as_ref(), &st.tcp_open, ports, out)
        .map_err(|e| anyhow!("cannot write the ground truth of lab {name:?}: {e}"))
}

/// `addr,port,answer` rows, addresses ascending (the IPv4 population, then
/// the IPv6 one if any): port 0 is ICMP echo (`echo`), then each of `ports`:
/// `synack` if a server listens there, else `rst`; `none` for every row of an
/// address that does not answer. This is what the kernel sink does with loss 0.
pub(crate) fn write_truth(
    pop: &Population,
    pop6: Option<&Population6>,
    open: &[u16],
    ports: &[u16],
    out: &mut dyn Write,
) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 16, out);
    w.write_all(b"addr,port,answer\n")?;
    let mut rows = 0;
    for addr in pop.addresses() {
        rows += write_rows(&mut w, addr, pop.answers(addr), open, ports)?;
    }
    if let Some(pop6) = pop6 {
        for addr in pop6.addresses() {
            rows += write_rows(&mut w, addr, pop6.answers(addr), open, ports)?;
        }
    }
    w.flush()?;
    Ok(rows)
}

/// The rows of one address; returns how many.
fn write_rows(
    w: &mut impl Write,
    addr: impl Display,
    answers: bool,
    open: &[u16],
    ports: &[u16],
) -> io::Result<u64> {
    writeln!(w, "{addr},0,{}", if answers { "echo" } else { "none" })?;
    for &port in ports {
        let answer = match (answers, open.contains(&port)) {
            (false, _) => "none",
            (true, true) => "synack",
            (true, false) => "rst",
        };
        writeln!(w, "{addr},{port},{answer}")?;
    }
    Ok(1 + ports.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pop(net: &str, seed: u64, share: f64) -> Population {
        Population {
            net: net.parse().unwrap(),
            seed,
            share,
        }
    }

    #[test]
    fn share_is_about_right_over_a_slash_16() {
        for share in [0.01, 0.1, 0.5, 0.9] {
            let p = pop("198.18.0.0/16", 7, share);
            let n = p.responsive().count() as f64 / 65536.0;
            assert!((n - share).abs() < 0.01, "share {share}: got {n}");
        }
        assert_eq!(pop("198.18.0.0/16", 7, 0.0).responsive().count(), 0);
        assert_eq!(pop("198.18.0.0/16", 7, 1.0).responsive().count(), 65536);
    }

    #[test]
    fn deterministic_per_seed() {
        let a: Vec<_> = pop("198.18.0.0/20", 1, 0.3).responsive().collect();
        let b: Vec<_> = pop("198.18.0.0/20", 1, 0.3).responsive().collect();
        let c: Vec<_> = pop("198.18.0.0/20", 2, 0.3).responsive().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Growing the share only adds addresses.
        let more: Vec<_> = pop("198.18.0.0/20", 1, 0.6).responsive().collect();
        assert!(a.iter().all(|x| more.contains(x)));
    }

    #[test]
    fn link_subnet_never_answers() {
        let p = pop("198.19.0.0/16", 3, 1.0);
        assert_eq!(p.responsive().count(), 65536 - 256);
        assert!(!p.answers("198.19.255.1".parse().unwrap()));
    }

    #[test]
    fn truth_rows() {
        let p = pop("198.18.0.0/30", 5, 0.5);
        let mut out = Vec::new();
        let rows = write_truth(&p, None, &[80], &[80, 22], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "addr,port,answer");
        assert_eq!(rows, 12);
        assert_eq!(lines.len(), 13);
        for (i, addr) in p.addresses().enumerate() {
            let got = &lines[1 + 3 * i..4 + 3 * i];
            let want: [String; 3] = if p.answers(addr) {
                [
                    format!("{addr},0,echo"),
                    format!("{addr},80,synack"),
                    format!("{addr},22,rst"),
                ]
            } else {
                [
                    format!("{addr},0,none"),
                    format!("{addr},80,none"),
                    format!("{addr},22,none"),
                ]
            };
            assert_eq!(got, want, "{addr}");
        }
    }

    fn pop6(net: &str, seed: u64, share: f64) -> Population6 {
        Population6 {
            net: net.parse().unwrap(),
            seed,
            share,
        }
    }

    #[test]
    fn share6_is_about_right_over_a_slash_112() {
        for share in [0.01, 0.1, 0.5, 0.9] {
            let p = pop6("2001:2::/112", 7, share);
            let n = p.responsive().count() as f64 / 65536.0;
            assert!((n - share).abs() < 0.01, "share {share}: got {n}");
        }
        assert_eq!(pop6("2001:2::/112", 7, 0.0).responsive().count(), 0);
        assert_eq!(pop6("2001:2::/112", 7, 1.0).responsive().count(), 65536);
        assert_eq!(pop6("2001:2::/112", 7, f64::NAN).responsive().count(), 0);
        // The high 64 bits count too: the same low bits in another /64 give
        // another set.
        let a: Vec<u64> = pop6("2001:2::/116", 7, 0.5)
            .responsive()
            .map(|x| u128::from(x) as u64)
            .collect();
        let b: Vec<u64> = pop6("2001:2:0:1::/116", 7, 0.5)
            .responsive()
            .map(|x| u128::from(x) as u64)
            .collect();
        assert_ne!(a, b);
    }

    #[test]
    fn responsive6_deterministic_per_seed() {
        let a: Vec<_> = pop6("2001:2::/116", 1, 0.3).responsive().collect();
        let b: Vec<_> = pop6("2001:2::/116", 1, 0.3).responsive().collect();
        let c: Vec<_> = pop6("2001:2::/116", 2, 0.3).responsive().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let more: Vec<_> = pop6("2001:2::/116", 1, 0.6).responsive().collect();
        assert!(a.iter().all(|x| more.contains(x)));
    }

    #[test]
    fn truth_rows_v6_follow_v4() {
        let p = pop("198.18.0.0/31", 5, 0.5);
        let p6 = pop6("2001:2::ff00/126", 5, 0.5);
        let mut out = Vec::new();
        let rows = write_truth(&p, Some(&p6), &[80], &[80, 22], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(rows, 3 * (2 + 4));
        assert_eq!(lines.len(), 1 + 3 * 6);
        assert!(lines[1].starts_with("198.18.0.0,0,"));
        assert!(lines[4].starts_with("198.18.0.1,0,"));
        for (i, addr) in p6.addresses().enumerate() {
            let got = &lines[7 + 3 * i..10 + 3 * i];
            let want: [String; 3] = if is_responsive6(5, addr, 0.5) {
                [
                    format!("{addr},0,echo"),
                    format!("{addr},80,synack"),
                    format!("{addr},22,rst"),
                ]
            } else {
                [
                    format!("{addr},0,none"),
                    format!("{addr},80,none"),
                    format!("{addr},22,none"),
                ]
            };
            assert_eq!(got, want, "{addr}");
        }
        assert_eq!(lines[7].split(',').next(), Some("2001:2::ff00"));
        assert_eq!(lines[16].split(',').next(), Some("2001:2::ff03"));
    }

    #[test]
    fn truth_of_a_slash_16_is_fast() {
        let p = pop("198.18.0.0/16", 1, 0.1);
        let start = std::time::Instant::now();
        let rows = write_truth(&p, None, &[80, 443], &[80, 443], &mut io::sink()).unwrap();
        assert_eq!(rows, 3 * 65536);
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
    }
}
