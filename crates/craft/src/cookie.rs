//! Keyed cookies, for stateless validation (`scan`) and stateless connection set-up (`grab`): a
//! keyed hash of (our address, target address, target port) decides the fields a genuine reply
//! must echo — TCP sequence number and source port, ICMP id/sequence, DNS id. A reply that does
//! not carry them is invalid (spoofed, stale, or another scan's), and is never reported as a
//! hit. The key is drawn at random for every scan.

use std::net::IpAddr;

/// The source ports probes (and grab's connections) use: a token picks one port of the range.
///
/// The default, 61000–65535, is the part of the port space Linux never hands out as an
/// ephemeral port (its default `ip_local_port_range` is 32768–60999), so a reply to one of these
/// ports cannot belong to one of the host's own connections, and sonde can take every packet to
/// them (in the kernel, before the OS stack) without starving the host's traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub const DEFAULT: PortRange = PortRange {
        first: 61000,
        last: 65535,
    };

    /// `first`..=`last`; refuses an empty range and port 0.
    pub fn new(first: u16, last: u16) -> Result<PortRange, String> {
        if first == 0 || first > last {
            return Err(format!(
                "invalid source port range {first}-{last}: give FIRST-LAST with 1 <= FIRST <= LAST <= 65535"
            ));
        }
        Ok(PortRange { first, last })
    }

    pub fn len(&self) -> u32 {
        u32::from(self.last - self.first) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    /// Whether the two ranges share a port.
    pub fn overlaps(&self, other: &PortRange) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    /// The port a probe with this token uses.
    #[inline]
    pub fn port_for(&self, token: u64) -> u16 {
        self.first + ((token >> 32) % u64::from(self.len())) as u16
    }

    /// The port a connection of `lane` with this token uses: a port of the lane's share of the
    /// range (every `lane.count`-th port, from `first + lane.index`). With one lane this is
    /// [`PortRange::port_for`].
    #[inline]
    pub fn port_for_lane(&self, token: u64, lane: PortLane) -> u16 {
        let count = u32::from(lane.count.max(1));
        let index = u32::from(lane.index);
        let share = self.len().saturating_sub(index).div_ceil(count).max(1);
        let step = ((token >> 32) % u64::from(share)) as u32;
        (u32::from(self.first) + index + step * count) as u16
    }

    /// The lane (of `lanes`) whose connections use `port`: the owner of a reply to it.
    #[inline]
    pub fn lane_of(&self, port: u16, lanes: u16) -> u16 {
        port.wrapping_sub(self.first) % lanes.max(1)
    }
}

/// One of several disjoint shares of a [`PortRange`]: grab's threads each use one, so that a
/// reply's destination port names the thread that owns its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortLane {
    pub index: u16,
    pub count: u16,
}

impl PortLane {
    /// The whole range: one lane.
    pub const ALL: PortLane = PortLane { index: 0, count: 1 };
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<PortRange, String> {
        let bad =
            || format!("invalid source port range \"{s}\": give FIRST-LAST, e.g. 61000-65535");
        let (a, b) = s.trim().split_once('-').ok_or_else(bad)?;
        let first = a.trim().parse().map_err(|_| bad())?;
        let last = b.trim().parse().map_err(|_| bad())?;
        PortRange::new(first, last)
    }
}

/// The per-scan key and the hash built on it (SipHash-2-4 over a fixed-size message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validator {
    k0: u64,
    k1: u64,
}

impl Validator {
    pub fn new(key: [u64; 2]) -> Validator {
        Validator {
            k0: key[0],
            k1: key[1],
        }
    }

    /// A key derived from a seed, so a scan can be repeated or resumed with the same key.
    pub fn from_seed(seed: u64) -> Validator {
        let mut s = seed;
        Validator::new([splitmix64(&mut s), splitmix64(&mut s)])
    }

    /// A key nobody can predict: from the kernel's random pool.
    pub fn random() -> std::io::Result<Validator> {
        let mut bytes = [0u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        Ok(Validator::new([word(&bytes[..8]), word(&bytes[8..])]))
    }

    pub fn key(&self) -> [u64; 2] {
        [self.k0, self.k1]
    }

    /// The 64-bit token for one probe.
    #[inline]
    pub fn token(&self, ours: IpAddr, target: IpAddr, target_port: u16) -> u64 {
        let (a, b) = addr_words(ours);
        let (c, d) = addr_words(target);
        self.siphash(&[a ^ b.rotate_left(17), c, d, u64::from(target_port)])
    }

    fn siphash(&self, words: &[u64; 4]) -> u64 {
        let mut v = [
            self.k0 ^ 0x736f6d6570736575,
            self.k1 ^ 0x646f72616e646f6d,
            self.k0 ^ 0x6c7967656e657261,
            self.k1 ^ 0x7465646279746573,
        ];
        for &m in words {
            v[3] ^= m;
            sip_round(&mut v);
            sip_round(&mut v);
            v[0] ^= m;
        }
        let last = 32u64 << 56; // message length in bytes, in the top byte
        v[3] ^= last;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= last;
        v[2] ^= 0xff;
        for _ in 0..4 {
            sip_round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[inline]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

fn addr_words(addr: IpAddr) -> (u64, u64) {
    match addr {
        IpAddr::V4(a) => (u64::from(u32::from(a)), 0x4),
        IpAddr::V6(a) => {
            let n = u128::from(a);
            ((n >> 64) as u64, n as u64)
        }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e3779b97f4a7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// The source port a probe to this target uses, in the default range.
#[inline]
pub fn source_port(token: u64) -> u16 {
    PortRange::DEFAULT.port_for(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_depend_on_every_input_and_the_key() {
        let v = Validator::from_seed(7);
        let ours: IpAddr = "198.19.255.1".parse().unwrap();
        let t: IpAddr = "198.18.3.4".parse().unwrap();
        let base = v.token(ours, t, 80);
        assert_eq!(
            base,
            Validator::from_seed(7).token(ours, t, 80),
            "deterministic per seed"
        );
        assert_ne!(base, Validator::from_seed(8).token(ours, t, 80));
        assert_ne!(base, v.token(ours, t, 81));
        assert_ne!(base, v.token(ours, "198.18.3.5".parse().unwrap(), 80));
        assert_ne!(base, v.token("198.19.255.2".parse().unwrap(), t, 80));
        assert_ne!(
            v.token(ours, "2001:2::1".parse().unwrap(), 80),
            v.token(ours, "2001:2::2".parse().unwrap(), 80)
        );
        assert_ne!(Validator::random().unwrap(), Validator::random().unwrap());
    }

    #[test]
    fn source_ports_stay_in_range_and_spread() {
        let v = Validator::from_seed(1);
        let ours: IpAddr = "198.19.255.1".parse().unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000u32 {
            let p = source_port(v.token(
                ours,
                IpAddr::from(std::net::Ipv4Addr::from(0xC612_0000 + i)),
                80,
            ));
            assert!(PortRange::DEFAULT.contains(p));
            seen.insert(p);
        }
        assert!(seen.len() > 4000, "{} distinct ports of 10,000", seen.len());
    }

    #[test]
    fn port_ranges_parse_and_stay_clear_of_linux_ephemeral_ports() {
        let linux = PortRange::new(32768, 60999).unwrap();
        assert!(!PortRange::DEFAULT.overlaps(&linux));
        assert!(PortRange::new(60000, 61000).unwrap().overlaps(&linux));
        assert_eq!(
            "61000-65535".parse::<PortRange>().unwrap(),
            PortRange::DEFAULT
        );
        assert_eq!(PortRange::DEFAULT.len(), 4536);
        for bad in ["", "5", "9-3", "0-10", "a-b", "1-70000"] {
            assert!(
                bad.parse::<PortRange>()
                    .unwrap_err()
                    .contains("source port range"),
                "{bad}"
            );
        }
        let r = PortRange::new(100, 100).unwrap();
        assert_eq!(r.port_for(u64::MAX), 100);
    }

    #[test]
    fn lanes_split_the_range_and_a_port_names_its_lane() {
        let range = PortRange::new(61000, 61009).unwrap();
        let v = Validator::new([3, 4]);
        for count in 1..=4u16 {
            let mut used = HashSet::new();
            for index in 0..count {
                let lane = PortLane { index, count };
                for port in 1..2000u16 {
                    let token = v.token(
                        IpAddr::from([198, 18, 0, 1]),
                        IpAddr::from([198, 18, 1, 1]),
                        port,
                    );
                    let p = range.port_for_lane(token, lane);
                    assert!(range.contains(p), "{p} outside {range}");
                    assert_eq!(
                        range.lane_of(p, count),
                        index,
                        "{p} of lane {index}/{count}"
                    );
                    used.insert(p);
                }
            }
            assert_eq!(used.len(), 10, "the lanes together use the whole range");
        }
        let token = v.token(IpAddr::from([1, 1, 1, 1]), IpAddr::from([2, 2, 2, 2]), 80);
        assert_eq!(
            range.port_for_lane(token, PortLane::ALL),
            range.port_for(token)
        );
    }
}
