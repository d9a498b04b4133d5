//! Which addresses answer, and the ground truth of what the lab does.
//!
//! The same `Population::answers` decides both the nftables set (what the lab
//! does) and the truth rows (what the lab says it does), so they cannot drift.

use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{anyhow, Result};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::config::{LabConfig, LabStatus, DNS_PORT, HTTPS_PORT, HTTP_PORT, LINK_NET};

/// 2^64 / golden ratio: SplitMix64's increment.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// SplitMix64's finaliser: a bijection on u64 with full avalanche.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of the address hashes under `seed` (what the XDP responder is given).
pub(crate) fn hash_key(seed: u64) -> u64 {
    mix64(seed.wrapping_add(GOLDEN))
}

/// A keyed 64-bit hash of an address: the seed is mixed into a key first, so
/// nearby seeds give unrelated populations.
fn addr_hash(seed: u64, addr: Ipv4Addr) -> u64 {
    let key = hash_key(seed);
    mix64(key ^ u64::from(u32::from(addr)).wrapping_mul(GOLDEN))
}

/// The same keyed hash over a 128-bit address: the IPv4 step applied to the
/// high 64 bits, then again with the low 64 bits.
fn addr_hash6(seed: u64, addr: Ipv6Addr) -> u64 {
    let key = hash_key(seed);
    let bits = u128::from(addr);
    let (hi, lo) = ((bits >> 64) as u64, bits as u64);
    let h = mix64(key ^ hi.wrapping_mul(GOLDEN));
    mix64(h ^ lo.wrapping_mul(GOLDEN))
}

/// The bound below which a hash is among the lowest `share` (0.0..=1.0) of all u64s; None when
/// every hash is (share 1, whose bound 2^64 no u64 holds).
pub(crate) fn share_threshold(share: f64) -> Option<u64> {
    if share >= 1.0 {
        return None;
    }
    if share.is_nan() || share <= 0.0 {
        return Some(0);
    }
    // share < 1, so the product is below 2^64 and the cast is exact enough.
    Some((share * TWO_POW_64) as u64)
}

/// Whether a hash is among the lowest `share` (0.0..=1.0) of all u64s.
fn below_share(hash: u64, share: f64) -> bool {
    share_threshold(share).is_none_or(|bound| hash < bound)
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

/// Salt of the silence hash, so the silent hosts are not a slice of the responsive ones
/// ordered by the same hash (any constant but 0 would do).
const SILENT_SALT: u64 = 0x5d1e_47c3_a9b2_06f1;

/// Whether `addr` (a responsive address) is among the `share` of addresses that accept
/// connections and never send: the responsiveness hash keyed by `seed ^ SILENT_SALT`.
pub fn is_silent(seed: u64, addr: IpAddr, share: f64) -> bool {
    let seed = seed ^ SILENT_SALT;
    match addr {
        IpAddr::V4(a) => is_responsive(seed, a, share),
        IpAddr::V6(a) => is_responsive6(seed, a, share),
    }
}

/// What an address does with one kind of probe, as the truth's `answer` column says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// TCP: the handshake completes.
    Synack,
    /// TCP: the port is closed.
    Rst,
    /// ICMP echo reply (port 0 rows).
    Echo,
    /// UDP: ICMP port unreachable.
    Unreach,
    /// UDP: a DNS server answers DNS queries.
    Dns,
    /// Nothing comes back.
    None,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Synack => "synack",
            Answer::Rst => "rst",
            Answer::Echo => "echo",
            Answer::Unreach => "unreach",
            Answer::Dns => "dns",
            Answer::None => "none",
        }
    }
}

/// Who answers on an open port, as the truth's `service` column says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// nginx, plain HTTP (port 80 with `http`).
    Http,
    /// nginx over TLS (port 443 with `http`).
    Https,
    /// The handshake completes, then nothing is ever sent (a silent host).
    Silent,
    /// unbound (port 53 with `dns`, UDP and TCP).
    Dns,
    /// The small server on the other open ports: one line ([`banner_line`]), then close.
    Banner,
    /// No service: closed ports, ICMP, silence.
    None,
}

impl Service {
    /// The `service` column: `http`, `https`, `silent`, `dns`, `banner`, or empty.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Http => "http",
            Service::Https => "https",
            Service::Silent => "silent",
            Service::Dns => "dns",
            Service::Banner => "banner",
            Service::None => "",
        }
    }
}

/// One cell pair of the truth: what comes back, and from whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expect {
    pub answer: Answer,
    pub service: Service,
}

impl Expect {
    const NONE: Expect = Expect {
        answer: Answer::None,
        service: Service::None,
    };

    fn plain(answer: Answer) -> Expect {
        Expect {
            answer,
            service: Service::None,
        }
    }
}

/// The body nginx sends for `GET /` on `addr`: `sonde lab <addr>\n`.
pub fn http_body(addr: IpAddr) -> String {
    format!("sonde lab {addr}\n")
}

/// What the lab's small server says on accepting a connection to (`addr`, `port`), before it
/// closes: one line, so banner grabs can be checked byte for byte.
pub fn banner_line(addr: IpAddr, port: u16) -> String {
    format!("SONDE-LAB {addr} {port}\r\n")
}

/// The exact behaviour of a lab (loss aside), address by address: what `lab truth` prints and
/// `lab score` compares with. Built from the lab's status, so it is what `up` configured.
#[derive(Clone, Debug)]
pub struct Truth {
    pop: Population,
    pop6: Option<Population6>,
    /// Ports that answer SYN-ACK (nginx's included).
    open: Vec<u16>,
    http: bool,
    dns: bool,
    silent_share: f64,
}

impl Truth {
    /// The truth of a lab being brought up with `cfg` over `pop` and `pop6`.
    pub(crate) fn new(pop: Population, pop6: Option<Population6>, cfg: &LabConfig) -> Truth {
        Truth {
            pop,
            pop6,
            open: cfg.open_ports(),
            http: cfg.http,
            dns: cfg.dns,
            silent_share: cfg.silent_share,
        }
    }

    /// The truth of lab `name` (which must be up, and a scanner lab: a bridge lab has no
    /// population).
    pub fn of_lab(name: &str) -> Result<Truth> {
        Truth::from_status(&crate::setup::status(name)?)
    }

    pub fn from_status(st: &LabStatus) -> Result<Truth> {
        let name = &st.name;
        let net: Ipv4Net = st.population.parse().map_err(|e| {
            anyhow!(
                "lab {name:?} state has a bad population {:?}: {e}",
                st.population
            )
        })?;
        let pop6 = match &st.population6 {
            None => None,
            Some(p) => Some(Population6 {
                net: p.parse().map_err(|e| {
                    anyhow!("lab {name:?} state has a bad IPv6 population {p:?}: {e}")
                })?,
                seed: st.seed,
                share: st.responsive,
            }),
        };
        Ok(Truth {
            pop: Population {
                net,
                seed: st.seed,
                share: st.responsive,
            },
            pop6,
            open: st.tcp_open.clone(),
            http: st.http,
            dns: st.dns_pid.is_some(),
            silent_share: st.silent_share,
        })
    }

    /// The IPv4 population, then the IPv6 one if any.
    pub fn populations(&self) -> Vec<IpNet> {
        let mut nets = vec![IpNet::V4(self.pop.net)];
        nets.extend(self.pop6.map(|p| IpNet::V6(p.net)));
        nets
    }

    /// Every address of the populations, IPv4 then IPv6, ascending.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let six = self.pop6.iter().flat_map(|p| p.addresses().map(IpAddr::V6));
        self.pop.addresses().map(IpAddr::V4).chain(six)
    }

    /// How many addresses answer, both populations together (what `lab up` and `lab status`
    /// report).
    pub fn responsive_count(&self) -> u64 {
        let six = self.pop6.map_or(0, |p| p.responsive().count());
        (self.pop.responsive().count() + six) as u64
    }

    /// Whether `addr` answers at all (inside a population and picked by the hash).
    pub fn responds(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.pop.net.contains(&a) && self.pop.answers(a),
            IpAddr::V6(a) => self
                .pop6
                .is_some_and(|p| p.net.contains(&a) && p.answers(a)),
        }
    }

    /// Whether `addr` is a silent host: responsive, and picked by the silence hash.
    pub fn is_silent(&self, addr: IpAddr) -> bool {
        self.responds(addr) && is_silent(self.pop.seed, addr, self.silent_share)
    }

    /// ICMP echo (the port 0 row).
    pub fn echo(&self, addr: IpAddr) -> Expect {
        if self.responds(addr) {
            Expect::plain(Answer::Echo)
        } else {
            Expect::NONE
        }
    }

    /// A TCP SYN to `port`.
    pub fn tcp(&self, addr: IpAddr, port: u16) -> Expect {
        if !self.responds(addr) {
            return Expect::NONE;
        }
        if self.dns && port == DNS_PORT {
            return Expect {
                answer: Answer::Synack,
                service: Service::Dns,
            };
        }
        if !self.open.contains(&port) {
            return Expect::plain(Answer::Rst);
        }
        let service = if self.is_silent(addr) {
            Service::Silent
        } else if self.http && port == HTTP_PORT {
            Service::Http
        } else if self.http && port == HTTPS_PORT {
            Service::Https
        } else {
            Service::Banner
        };
        Expect {
            answer: Answer::Synack,
            service,
        }
    }

    /// A UDP datagram to `port`: the DNS server on 53 with `dns`, port unreachable elsewhere.
    pub fn udp(&self, addr: IpAddr, port: u16) -> Expect {
        if !self.responds(addr) {
            Expect::NONE
        } else if self.dns && port == DNS_PORT {
            Expect {
                answer: Answer::Dns,
                service: Service::Dns,
            }
        } else {
            Expect::plain(Answer::Unreach)
        }
    }

    /// The open TCP ports (nginx's included), ascending.
    pub fn open_ports(&self) -> &[u16] {
        &self.open
    }

    /// The silent addresses, IPv4 then IPv6 (what nftables hands to the silent server).
    pub(crate) fn silent(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses().filter(|a| self.is_silent(*a))
    }
}

/// Writes the ground truth CSV of lab `name` with no UDP rows: `truth_csv(name, ports, &[], out)`.
pub fn truth(name: &str, ports: Option<&[u16]>, out: &mut dyn Write) -> Result<u64> {
    truth_csv(name, ports, &[], out)
}

/// Writes the ground truth CSV of lab `name` (see `write_truth`): `ports` are the rows per
/// address, port 0 for ICMP echo and the others TCP; by default port 0 and the lab's open
/// ports. No UDP rows unless `udp_ports` names some. Returns the number of rows after the
/// header. A write error keeps its `io::Error` in the chain (so a caller can tell a closed
/// pipe).
pub fn truth_csv(
    name: &str,
    ports: Option<&[u16]>,
    udp_ports: &[u16],
    out: &mut dyn Write,
) -> Result<u64> {
    let truth = Truth::of_lab(name)?;
    let ports = match ports {
        Some(given) => given.to_vec(),
        None => std::iter::once(ECHO_PORT)
            .chain(truth.open.clone())
            .collect(),
    };
    write_truth(&truth, &ports, udp_ports, out).map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot write the ground truth of lab {name:?}"))
    })
}

/// The truth's port for ICMP echo: the host itself.
pub const ECHO_PORT: u16 = 0;

/// `addr,port,answer,service` rows, addresses ascending (the IPv4 population, then the IPv6
/// one if any). For each address, each of `ports` in the order given: port 0 is ICMP echo
/// (`echo` or `none`), the others TCP (`synack` where something listens, `rst` elsewhere);
/// then each of `udp_ports` (`dns` on 53 with a DNS server, `unreach` elsewhere). Every row of
/// an address that does not answer says `none`. `service` is `http`, `https`, `silent`, `dns`
/// or empty. This is what the lab does with loss 0.
pub(crate) fn write_truth(
    truth: &Truth,
    ports: &[u16],
    udp_ports: &[u16],
    out: &mut dyn Write,
) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 16, out);
    w.write_all(b"addr,port,answer,service\n")?;
    let mut rows = 0;
    for addr in truth.addresses() {
        let row = |w: &mut BufWriter<_>, port: u16, e: Expect| {
            let (answer, service) = (e.answer.as_str(), e.service.as_str());
            writeln!(w, "{addr},{port},{answer},{service}")
        };
        for &port in ports {
            let expect = if port == ECHO_PORT {
                truth.echo(addr)
            } else {
                truth.tcp(addr, port)
            };
            row(&mut w, port, expect)?;
        }
        for &port in udp_ports {
            row(&mut w, port, truth.udp(addr, port))?;
        }
        rows += ports.len() as u64 + udp_ports.len() as u64;
    }
    w.flush()?;
    Ok(rows)
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

    fn truth_of(p: Population, p6: Option<Population6>, open: &[u16]) -> Truth {
        Truth {
            pop: p,
            pop6: p6,
            open: open.to_vec(),
            http: false,
            dns: false,
            silent_share: 0.0,
        }
    }

    #[test]
    fn truth_rows() {
        let p = pop("198.18.0.0/30", 5, 0.5);
        let mut out = Vec::new();
        let rows = write_truth(&truth_of(p, None, &[80]), &[0, 80, 22], &[], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "addr,port,answer,service");
        assert_eq!(rows, 12);
        assert_eq!(lines.len(), 13);
        for (i, addr) in p.addresses().enumerate() {
            let got = &lines[1 + 3 * i..4 + 3 * i];
            let want: [String; 3] = if p.answers(addr) {
                [
                    format!("{addr},0,echo,"),
                    format!("{addr},80,synack,banner"),
                    format!("{addr},22,rst,"),
                ]
            } else {
                [
                    format!("{addr},0,none,"),
                    format!("{addr},80,none,"),
                    format!("{addr},22,none,"),
                ]
            };
            assert_eq!(got, want, "{addr}");
        }
    }

    #[test]
    fn truth_rows_are_the_ports_asked_for() {
        let p = pop("198.18.0.0/30", 5, 1.0);
        let mut out = Vec::new();
        let rows = write_truth(&truth_of(p, None, &[80]), &[80], &[], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(rows, 4);
        assert!(
            text.lines()
                .skip(1)
                .all(|l| l.split(',').nth(1) == Some("80")),
            "a row of another port than 80: {text}"
        );
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
        let rows = write_truth(&truth_of(p, Some(p6), &[80]), &[0, 80, 22], &[], &mut out).unwrap();
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
                    format!("{addr},0,echo,"),
                    format!("{addr},80,synack,banner"),
                    format!("{addr},22,rst,"),
                ]
            } else {
                [
                    format!("{addr},0,none,"),
                    format!("{addr},80,none,"),
                    format!("{addr},22,none,"),
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
        let t = truth_of(p, None, &[80, 443]);
        let rows = write_truth(&t, &[0, 80, 443], &[], &mut io::sink()).unwrap();
        assert_eq!(rows, 3 * 65536);
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
    }

    #[test]
    fn silent_hosts_are_a_salted_share_of_the_responsive() {
        let p = pop("198.18.0.0/16", 9, 0.5);
        let t = Truth {
            silent_share: 0.2,
            ..truth_of(p, None, &[80])
        };
        let responsive = p.responsive().count();
        let silent = t.silent().count();
        let share = silent as f64 / responsive as f64;
        assert!((share - 0.2).abs() < 0.01, "{share}");
        assert!(t.silent().all(|a| t.responds(a)));
        // Another salt than responsiveness: among the responsive, the silent ones are not
        // simply those with the lowest responsiveness hash.
        let low: Vec<IpAddr> = p
            .responsive()
            .filter(|a| is_responsive(9, *a, 0.1))
            .map(IpAddr::V4)
            .collect();
        let overlap = low.iter().filter(|a| t.is_silent(**a)).count() as f64;
        assert!((overlap / low.len() as f64 - 0.2).abs() < 0.03, "{overlap}");
        // Reproducible, and share 0 / 1 mean none / all.
        assert_eq!(
            t.silent().collect::<Vec<_>>(),
            t.silent().collect::<Vec<_>>()
        );
        let none = Truth {
            silent_share: 0.0,
            ..t.clone()
        };
        assert_eq!(none.silent().count(), 0);
        let all = Truth {
            silent_share: 1.0,
            ..t.clone()
        };
        assert_eq!(all.silent().count(), responsive);
    }

    #[test]
    fn services_and_udp_rows() {
        let p = pop("198.18.0.0/28", 3, 1.0);
        let p6 = pop6("2001:2::/124", 3, 1.0);
        let t = Truth {
            http: true,
            dns: true,
            silent_share: 0.5,
            ..truth_of(p, Some(p6), &[22, 80, 443])
        };
        let mut out = Vec::new();
        let rows = write_truth(&t, &[0, 80, 443, 22, 53, 7], &[53, 9999], &mut out).unwrap();
        assert_eq!(rows, 32 * 8);
        let text = String::from_utf8(out).unwrap();
        let silent: Vec<IpAddr> = t.silent().collect();
        assert!(!silent.is_empty() && silent.len() < 32, "{silent:?}");
        for addr in t.addresses() {
            let rows: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("{addr},")))
                .collect();
            let open = if silent.contains(&addr) {
                ["silent"; 3]
            } else {
                ["http", "https", "banner"]
            };
            let want = [
                format!("{addr},0,echo,"),
                format!("{addr},80,synack,{}", open[0]),
                format!("{addr},443,synack,{}", open[1]),
                format!("{addr},22,synack,{}", open[2]),
                format!("{addr},53,synack,dns"),
                format!("{addr},7,rst,"),
                format!("{addr},53,dns,dns"),
                format!("{addr},9999,unreach,"),
            ];
            assert_eq!(rows, want, "{addr}");
        }
        // Outside the populations, and without a DNS server: nothing / unreachable.
        let outside: IpAddr = "198.18.1.1".parse().unwrap();
        assert_eq!(t.tcp(outside, 80), Expect::NONE);
        assert_eq!(t.udp(outside, 53), Expect::NONE);
        let quiet = Truth { dns: false, ..t };
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        assert_eq!(quiet.udp(a, 53).answer, Answer::Unreach);
        assert_eq!(quiet.tcp(a, 53).answer, Answer::Rst);
        assert_eq!(http_body(a), "sonde lab 198.18.0.1\n");
        assert_eq!(
            http_body("2001:2::a".parse().unwrap()),
            "sonde lab 2001:2::a\n"
        );
    }
}
