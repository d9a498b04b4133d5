//! Which addresses answer, and the ground truth of what the lab does.
//!
//! The same `Population::answers` decides both the nftables set (what the lab
//! does) and the truth rows (what the lab says it does), so they cannot drift.

use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{anyhow, Result};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::config::{LabConfig, LabStatus, DNS_PORT, HTTPS_PORT, HTTP_PORT, LINK_NET};
use crate::config::{LabService, ServiceStatus};

/// 2^64 / golden ratio: SplitMix64's increment.
pub(crate) const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// SplitMix64's finaliser: a bijection on u64 with full avalanche.
pub(crate) fn mix64(mut z: u64) -> u64 {
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
    /// One of the real servers of `lab up --services` (sshd, exim, dovecot, vsftpd, nginx).
    Lab(LabService),
    /// No service: closed ports, ICMP, silence.
    None,
}

impl Service {
    /// The `service` column: `http`, `https`, `silent`, `dns`, `banner`, a service's name
    /// (`ssh`, `smtp`, `imap`, `pop3`, `tls13`, `tls10`), or empty.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Http => "http",
            Service::Https => "https",
            Service::Silent => "silent",
            Service::Dns => "dns",
            Service::Banner => "banner",
            Service::Lab(s) => s.name(),
            Service::None => "",
        }
    }

    /// Whether it answers `GET /` with [`http_body`] (over TLS for https, tls13 and tls10).
    pub fn serves_http(self) -> bool {
        matches!(
            self,
            Service::Http
                | Service::Https
                | Service::Lab(LabService::Tls13)
                | Service::Lab(LabService::Tls10)
        )
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
    /// SHA-256 of the certificate nginx shows on 443, with `http`.
    https_cert_sha256: Option<String>,
    /// The servers of `--services`, and what each shows.
    services: Vec<ServiceStatus>,
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
            https_cert_sha256: None,
            services: cfg
                .services
                .iter()
                .map(|s| ServiceStatus::planned(*s))
                .collect(),
        }
    }

    /// The truth of lab `name` (which must be up, and a scanner lab: a bridge lab has no
    /// population).
    pub fn of_lab(name: &str) -> Result<Truth> {
        Truth::from_status(&crate::netns::status(name)?)
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
            https_cert_sha256: st.tls_cert_sha256.clone(),
            services: st.services.clone(),
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
        } else if let Some(s) = self.service_on(port) {
            Service::Lab(s.service)
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

    /// The lab service on TCP `port`, if any.
    fn service_on(&self, port: u16) -> Option<&ServiceStatus> {
        self.services.iter().find(|s| s.port == port)
    }

    /// The grab fields a connection to (`addr`, TCP `port`) shows, by field name, with their
    /// values: a service's greeting, certificate, host key, TLS version and cipher
    /// ([`ServiceStatus::fields`]), the certificate of nginx's 443, and the small server's
    /// `banner` ([`banner_line`]). Nothing for a host that does not answer there or is silent.
    /// (Bodies are checked apart: [`Service::serves_http`].)
    pub fn expect(&self, addr: IpAddr, port: u16) -> Vec<(&'static str, String)> {
        match self.tcp(addr, port).service {
            Service::Lab(_) => self
                .service_on(port)
                .map(|s| s.fields(addr))
                .unwrap_or_default(),
            Service::Https => self
                .https_cert_sha256
                .iter()
                .map(|c| ("tls_cert_sha256", c.clone()))
                .collect(),
            Service::Banner => vec![("banner", banner_line(addr, port))],
            _ => Vec::new(),
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

/// How `lab truth` writes its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TruthFormat {
    /// `addr,port,answer,service` (see [`write_truth`]).
    #[default]
    Csv,
    /// One JSON object a row: `addr`, `port`, `proto` (`icmp`, `tcp` or `udp`), `answer`,
    /// `service`, and for a live service `expect`: the grab fields it shows, by name
    /// ([`Truth::expect`]).
    Ndjson,
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
    truth_as(name, ports, udp_ports, TruthFormat::Csv, out)
}

/// [`truth_csv`] in `format`.
pub fn truth_as(
    name: &str,
    ports: Option<&[u16]>,
    udp_ports: &[u16],
    format: TruthFormat,
    out: &mut dyn Write,
) -> Result<u64> {
    let truth = Truth::of_lab(name)?;
    let ports = match ports {
        Some(given) => given.to_vec(),
        None => std::iter::once(ECHO_PORT)
            .chain(truth.open.clone())
            .collect(),
    };
    let written = match format {
        TruthFormat::Csv => write_truth(&truth, &ports, udp_ports, out),
        TruthFormat::Ndjson => write_truth_ndjson(&truth, &ports, udp_ports, out),
    };
    written.map_err(|e| {
        anyhow::Error::new(e).context(format!("cannot write the ground truth of lab {name:?}"))
    })
}

/// The truth's port for ICMP echo: the host itself.
pub const ECHO_PORT: u16 = 0;

/// `addr,port,answer,service` rows, addresses ascending (the IPv4 population, then the IPv6
/// one if any). For each address, each of `ports` in the order given: port 0 is ICMP echo
/// (`echo` or `none`), the others TCP (`synack` where something listens, `rst` elsewhere);
/// then each of `udp_ports` (`dns` on 53 with a DNS server, `unreach` elsewhere). Every row of
/// an address that does not answer says `none`. `service` is `http`, `https`, `silent`, `dns`,
/// `banner`, a lab service's name (`ssh`, `smtp`, `imap`, `pop3`, `tls13`, `tls10`) or empty. This is what the lab does with loss 0.
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

/// The truth's rows as in [`write_truth`], one JSON object a line (see [`TruthFormat::Ndjson`]).
pub(crate) fn write_truth_ndjson(
    truth: &Truth,
    ports: &[u16],
    udp_ports: &[u16],
    out: &mut dyn Write,
) -> io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 16, out);
    let mut rows = 0;
    for addr in truth.addresses() {
        let tcp = ports.iter().map(|&port| {
            if port == ECHO_PORT {
                ("icmp", port, truth.echo(addr))
            } else {
                ("tcp", port, truth.tcp(addr, port))
            }
        });
        let udp = udp_ports
            .iter()
            .map(|&port| ("udp", port, truth.udp(addr, port)));
        for (proto, port, e) in tcp.chain(udp) {
            let mut row = serde_json::json!({
                "addr": addr.to_string(),
                "port": port,
                "proto": proto,
                "answer": e.answer.as_str(),
                "service": e.service.as_str(),
            });
            let expect = if proto == "tcp" {
                truth.expect(addr, port)
            } else {
                Vec::new()
            };
            if !expect.is_empty() {
                let fields: serde_json::Map<String, serde_json::Value> = expect
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.into()))
                    .collect();
                row["expect"] = fields.into();
            }
            serde_json::to_writer(&mut w, &row)?;
            w.write_all(b"\n")?;
            rows += 1;
        }
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
            https_cert_sha256: None,
            services: Vec::new(),
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

    /// A truth with every lab service, as `up` records them.
    fn truth_with_services(p: Population, silent_share: f64) -> Truth {
        let with = |service, f: &dyn Fn(&mut ServiceStatus)| {
            let mut s = ServiceStatus::planned(service);
            f(&mut s);
            s
        };
        Truth {
            silent_share,
            services: vec![
                with(LabService::Ssh, &|s| {
                    s.banner = Some("SSH-2.0-OpenSSH_9.2p1\r\n".into());
                    s.host_key_sha256 = Some("11".repeat(32));
                }),
                with(LabService::Smtp, &|s| {
                    s.banner = Some("220 sonde lab {addr} ESMTP\r\n".into());
                    s.cert_sha256 = Some("22".repeat(32));
                }),
                with(LabService::Tls10, &|s| {
                    s.cert_sha256 = Some("33".repeat(32));
                    s.tls_version = Some("TLSv1.0".into());
                }),
            ],
            ..truth_of(p, None, &[22, 25, 9443])
        }
    }

    #[test]
    fn services_name_their_rows_and_expected_fields() {
        let p = pop("198.18.0.0/28", 4, 0.5);
        let t = truth_with_services(p, 0.0);
        let mut csv = Vec::new();
        write_truth(&t, &[22, 25, 9443, 80], &[], &mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        let mut json = Vec::new();
        let rows = write_truth_ndjson(&t, &[0, 22, 25, 9443, 80], &[53], &mut json).unwrap();
        assert_eq!(rows, 16 * 6);
        let json: Vec<serde_json::Value> = String::from_utf8(json)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(json.len(), 16 * 6);
        for addr in p.addresses() {
            let live = p.answers(addr);
            let (a, at) = (addr.to_string(), IpAddr::V4(addr));
            let want_csv = if live {
                format!(
                    "{a},22,synack,ssh\n{a},25,synack,smtp\n{a},9443,synack,tls10\n{a},80,rst,\n"
                )
            } else {
                format!("{a},22,none,\n{a},25,none,\n{a},9443,none,\n{a},80,none,\n")
            };
            assert!(csv.contains(&want_csv), "{addr}: {csv}");
            let mine: Vec<&serde_json::Value> = json.iter().filter(|r| r["addr"] == a).collect();
            let protos: Vec<&str> = mine.iter().map(|r| r["proto"].as_str().unwrap()).collect();
            assert_eq!(protos, ["icmp", "tcp", "tcp", "tcp", "tcp", "udp"]);
            if !live {
                assert!(mine.iter().all(|r| r.get("expect").is_none()), "{mine:?}");
                assert!(t.expect(at, 22).is_empty());
                continue;
            }
            assert_eq!(mine[1]["service"], "ssh");
            assert_eq!(mine[1]["expect"]["banner"], "SSH-2.0-OpenSSH_9.2p1\r\n");
            assert_eq!(mine[1]["expect"]["ssh_banner"], "SSH-2.0-OpenSSH_9.2p1");
            assert_eq!(mine[1]["expect"]["ssh_host_key_sha256"], "11".repeat(32));
            // The SMTP greeting names the address connected to.
            assert_eq!(
                mine[2]["expect"]["banner"],
                format!("220 sonde lab {a} ESMTP\r\n")
            );
            assert_eq!(mine[2]["expect"]["tls_cert_sha256"], "22".repeat(32));
            assert_eq!(mine[3]["service"], "tls10");
            assert_eq!(mine[3]["expect"]["tls_version"], "TLSv1.0");
            assert_eq!(mine[3]["expect"]["tls_cert_sha256"], "33".repeat(32));
            for r in [mine[0], mine[4], mine[5]] {
                assert!(r.get("expect").is_none(), "{r}");
            }
            assert_eq!(mine[4]["answer"], "rst");
            // The small server's line on another open port.
            let small = Truth {
                open: vec![7],
                ..t.clone()
            };
            assert_eq!(
                small.expect(at, 7),
                [("banner", format!("SONDE-LAB {a} 7\r\n"))]
            );
            assert_eq!(mine[5]["answer"], "unreach");
        }
        // A silent host shows nothing, even on a service's port.
        let all_silent = truth_with_services(p, 1.0);
        let live = p.responsive().next().map(IpAddr::V4).unwrap();
        assert_eq!(all_silent.tcp(live, 22).service, Service::Silent);
        assert!(all_silent.expect(live, 22).is_empty());
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
