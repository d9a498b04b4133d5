//! The DNS tree as pure functions of the lab's seed, its number of zones and hosts: the servers'
//! addresses, the zones and their records, what a recursive resolver answers for any question,
//! and the ground truth (DNS-TREE.md in the project's shared notes is the contract; docs/lab.md
//! says the same for users). The zone files, `lab truth --dns`, `lab score` and the XDP
//! answerer's tests all come from here, so they cannot drift apart.
//!
//! Names are lowercase text with the trailing dot (`www.d3.example.`); the record data is in the
//! presentation form the truth's `answers` use: A as a dotted quad, AAAA as `Ipv6Addr` prints it,
//! MX as `10 mail.d3.example.`, TXT as its strings in double quotes separated by one space.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use anyhow::{anyhow, Result};
use ipnet::Ipv4Net;
use serde::Serialize;

use crate::truth::{hash_key, mix64, GOLDEN};

/// Every record's TTL.
pub const TTL: u32 = 3600;
/// The root server (only the root zone).
pub const ROOT_SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 1);
/// The `test.` TLD's server; the same NSD serves `example.` on [`EXAMPLE_SERVER`].
pub const TEST_SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 2);
pub const EXAMPLE_SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 3);
/// The servers of the second-level zones: zone j on `SLD_SERVERS[j % 4]` (one NSD serves every
/// zone on all four).
pub const SLD_SERVERS: [Ipv4Addr; 4] = [
    Ipv4Addr::new(198, 19, 53, 10),
    Ipv4Addr::new(198, 19, 53, 11),
    Ipv4Addr::new(198, 19, 53, 12),
    Ipv4Addr::new(198, 19, 53, 13),
];
/// Where `lame.test.` is delegated: a server that has no zone for it (REFUSED).
pub const LAME_SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 20);
/// Where `slow.test.` is delegated: it answers after the lab's delay.
pub const SLOW_SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 21);
/// `www.slow.test.`'s address.
pub const SLOW_WWW: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 53);
/// The first of the recursive resolvers (unbound), and how many there are.
pub const FIRST_RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 64);
pub const RESOLVER_COUNT: u8 = 16;
/// The tree's servers and resolvers.
pub const SERVER_NET: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 19, 53, 0), 24);
/// The XDP answerer's addresses (answering as a recursive resolver would).
pub const ANSWERER_NET: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 19, 54, 0), 24);
/// The root zone's name server (an address record in the root zone itself).
pub const ROOT_NS: &str = "ns.";
/// Strings in `big.A`'s TXT record, and characters in each.
pub const BIG_STRINGS: usize = 8;
pub const BIG_STRING_LEN: usize = 250;
/// Records in a second-level zone besides its hosts: SOA, NS, MX and TXT at the apex; ns, www
/// (A and AAAA), mail, alias, chain, far and big.
pub const FIXED_RECORDS: u64 = 12;
/// Longest CNAME chain a resolution follows (the tree's longest has two steps).
const MAX_CHAIN: usize = 8;

/// The recursive resolvers' addresses, ascending.
pub fn resolvers() -> Vec<Ipv4Addr> {
    let first = u32::from(FIRST_RESOLVER);
    (0..u32::from(RESOLVER_COUNT))
        .map(|i| Ipv4Addr::from(first + i))
        .collect()
}

/// An address inside 198.18.0.0/15 from a hash: 198.18.0.0 + (x mod 131072).
pub fn addr4(x: u64) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (x % 131_072) as u32)
}

/// An address inside 2001:2::/48 from a hash: 2001:2:: + the low 32 bits of x.
pub fn addr6(x: u64) -> Ipv6Addr {
    Ipv6Addr::from(
        u128::from(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0)) + (x & 0xffff_ffff) as u128,
    )
}

/// The two top-level domains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tld {
    Test,
    Example,
}

impl Tld {
    /// Zone j's TLD: `test` for even j, `example` for odd.
    pub fn of(j: u64) -> Tld {
        if j.is_multiple_of(2) {
            Tld::Test
        } else {
            Tld::Example
        }
    }

    /// Its label (`test`, `example`).
    pub fn label(self) -> &'static str {
        match self {
            Tld::Test => "test",
            Tld::Example => "example",
        }
    }

    /// Its server's address.
    pub fn server(self) -> Ipv4Addr {
        match self {
            Tld::Test => TEST_SERVER,
            Tld::Example => EXAMPLE_SERVER,
        }
    }
}

/// A zone of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Zone {
    Root,
    Tld(Tld),
    /// Second-level zone j: `d{j}.{tld}.`.
    Sld(u64),
    /// `slow.test.`, served after a delay.
    Slow,
}

impl Zone {
    /// The zone's name (`.`, `test.`, `d3.example.`, `slow.test.`).
    pub fn origin(self) -> String {
        match self {
            Zone::Root => ".".to_string(),
            Zone::Tld(t) => format!("{}.", t.label()),
            Zone::Sld(j) => sld_name(j),
            Zone::Slow => "slow.test.".to_string(),
        }
    }
}

/// `d{j}.{tld}.`
pub fn sld_name(j: u64) -> String {
    format!("d{j}.{}.", Tld::of(j).label())
}

/// Zone j's server.
pub fn sld_server(j: u64) -> Ipv4Addr {
    SLD_SERVERS[(j % 4) as usize]
}

/// A record type: the ones the tree has, and any other by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rtype {
    A,
    Ns,
    Cname,
    Soa,
    Mx,
    Txt,
    Aaaa,
    Other(u16),
}

impl Rtype {
    pub fn code(self) -> u16 {
        match self {
            Rtype::A => 1,
            Rtype::Ns => 2,
            Rtype::Cname => 5,
            Rtype::Soa => 6,
            Rtype::Mx => 15,
            Rtype::Txt => 16,
            Rtype::Aaaa => 28,
            Rtype::Other(n) => n,
        }
    }

    pub fn from_code(code: u16) -> Rtype {
        [
            Rtype::A,
            Rtype::Ns,
            Rtype::Cname,
            Rtype::Soa,
            Rtype::Mx,
            Rtype::Txt,
            Rtype::Aaaa,
        ]
        .into_iter()
        .find(|t| t.code() == code)
        .unwrap_or(Rtype::Other(code))
    }
}

impl fmt::Display for Rtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rtype::A => f.write_str("A"),
            Rtype::Ns => f.write_str("NS"),
            Rtype::Cname => f.write_str("CNAME"),
            Rtype::Soa => f.write_str("SOA"),
            Rtype::Mx => f.write_str("MX"),
            Rtype::Txt => f.write_str("TXT"),
            Rtype::Aaaa => f.write_str("AAAA"),
            Rtype::Other(n) => write!(f, "TYPE{n}"),
        }
    }
}

impl FromStr for Rtype {
    type Err = anyhow::Error;
    /// A type's name in any case (`a`, `AAAA`), or `TYPE{n}`.
    fn from_str(s: &str) -> Result<Rtype> {
        let upper = s.to_ascii_uppercase();
        if let Some(n) = upper.strip_prefix("TYPE") {
            let code = n
                .parse()
                .map_err(|_| anyhow!("bad record type {s:?} (e.g. A, AAAA, MX, TYPE65)"))?;
            return Ok(Rtype::from_code(code));
        }
        (1..=28)
            .map(Rtype::from_code)
            .find(|t| t.to_string() == upper)
            .ok_or_else(|| anyhow!("unknown record type {s:?} (e.g. A, AAAA, MX, TYPE65)"))
    }
}

impl Serialize for Rtype {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A record's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Ns(String),
    Cname(String),
    Mx(u16, String),
    Txt(Vec<String>),
    /// The primary server and the mailbox; serial 1, refresh 3600, retry 600, expire 86400,
    /// minimum 300 always.
    Soa(String, String),
}

impl Data {
    pub fn rtype(&self) -> Rtype {
        match self {
            Data::A(_) => Rtype::A,
            Data::Aaaa(_) => Rtype::Aaaa,
            Data::Ns(_) => Rtype::Ns,
            Data::Cname(_) => Rtype::Cname,
            Data::Mx(..) => Rtype::Mx,
            Data::Txt(_) => Rtype::Txt,
            Data::Soa(..) => Rtype::Soa,
        }
    }
}

/// The SOA's fixed numbers: serial, refresh, retry, expire, minimum (the negative TTL).
pub const SOA_NUMBERS: [u32; 5] = [1, 3600, 600, 86400, 300];

impl fmt::Display for Data {
    /// The presentation form (also a zone file's).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Data::A(a) => write!(f, "{a}"),
            Data::Aaaa(a) => write!(f, "{a}"),
            Data::Ns(n) | Data::Cname(n) => f.write_str(n),
            Data::Mx(pref, host) => write!(f, "{pref} {host}"),
            Data::Txt(strings) => {
                for (i, s) in strings.iter().enumerate() {
                    let sep = if i == 0 { "" } else { " " };
                    write!(f, "{sep}\"{s}\"")?;
                }
                Ok(())
            }
            Data::Soa(mname, rname) => {
                let [serial, refresh, retry, expire, minimum] = SOA_NUMBERS;
                write!(
                    f,
                    "{mname} {rname} {serial} {refresh} {retry} {expire} {minimum}"
                )
            }
        }
    }
}

/// One record (class IN, TTL [`TTL`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub data: Data,
}

impl Record {
    fn new(name: impl Into<String>, data: Data) -> Record {
        Record {
            name: name.into(),
            data,
        }
    }

    /// Its line in a zone file: `name TTL IN TYPE data`.
    pub fn zone_line(&self) -> String {
        format!("{} {TTL} IN {} {}", self.name, self.data.rtype(), self.data)
    }
}

/// An answer's code, as the truth names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rcode {
    NoError,
    NxDomain,
    ServFail,
}

impl Rcode {
    pub fn as_str(self) -> &'static str {
        match self {
            Rcode::NoError => "NOERROR",
            Rcode::NxDomain => "NXDOMAIN",
            Rcode::ServFail => "SERVFAIL",
        }
    }
}

impl Serialize for Rcode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What a recursive resolver answers for one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolution {
    pub rcode: Rcode,
    /// The CNAME targets followed, in order.
    pub chain: Vec<String>,
    /// The answer section: the CNAMEs followed, then the records of the asked type at the end
    /// of the chain (none for NXDOMAIN, NODATA and SERVFAIL).
    pub records: Vec<Record>,
}

impl Resolution {
    /// The presentation data of the answer's records of type `qtype`, sorted.
    pub fn answers(&self, qtype: Rtype) -> Vec<String> {
        let mut data: Vec<String> = self
            .records
            .iter()
            .filter(|r| r.data.rtype() == qtype)
            .map(|r| r.data.to_string())
            .collect();
        data.sort();
        data
    }
}

/// One row of `sonde lab truth --dns`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TruthRow {
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: Rtype,
    pub rcode: Rcode,
    pub chain: Vec<String>,
    pub answers: Vec<String>,
}

/// What exists at a name.
enum Node {
    /// Records (none: an empty name, NODATA for every type).
    Records(Vec<Record>),
    /// No such name: NXDOMAIN.
    Missing,
    /// Under the lame delegation: no server answers for it.
    Lame,
}

/// The tree of a lab: its key (from the seed), zones and hosts per zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    key: u64,
    zones: u64,
    hosts: u32,
}

impl Tree {
    /// The tree of a lab with `seed`, `zones` second-level zones and `hosts` hosts in each.
    pub fn new(seed: u64, zones: u64, hosts: u32) -> Tree {
        Tree {
            key: hash_key(seed),
            zones,
            hosts,
        }
    }

    pub fn zones(&self) -> u64 {
        self.zones
    }

    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// `v(j, s) = mix64(mix64(key ^ j·GOLDEN) ^ s)`: zone j's value under salt s.
    pub fn v(&self, j: u64, salt: u64) -> u64 {
        mix64(mix64(self.key ^ j.wrapping_mul(GOLDEN)) ^ salt)
    }

    /// `www.A`'s address.
    pub fn www4(&self, j: u64) -> Ipv4Addr {
        addr4(self.v(j, 1))
    }

    pub fn www6(&self, j: u64) -> Ipv6Addr {
        addr6(self.v(j, 2))
    }

    pub fn mail4(&self, j: u64) -> Ipv4Addr {
        addr4(self.v(j, 3))
    }

    /// `h{k}.A`'s address.
    pub fn host4(&self, j: u64, k: u32) -> Ipv4Addr {
        addr4(mix64(self.v(j, 4) ^ u64::from(k).wrapping_mul(GOLDEN)))
    }

    /// `big.A`'s TXT strings: the lowercase hex (16 digits each) of mix64(v(j,5) ^ i) for
    /// i = 0, 1, … written one after the other, cut into [`BIG_STRINGS`] strings of
    /// [`BIG_STRING_LEN`] characters.
    pub fn big_strings(&self, j: u64) -> Vec<String> {
        let v = self.v(j, 5);
        let total = BIG_STRINGS * BIG_STRING_LEN;
        let mut hex = String::with_capacity(total + 16);
        let mut i = 0;
        while hex.len() < total {
            hex.push_str(&format!("{:016x}", mix64(v ^ i)));
            i += 1;
        }
        (0..BIG_STRINGS)
            .map(|s| hex[s * BIG_STRING_LEN..(s + 1) * BIG_STRING_LEN].to_string())
            .collect()
    }

    /// Where `far.A` points: `www.` of the next zone (wrapping), across TLDs.
    pub fn far_target(&self, j: u64) -> String {
        format!("www.{}", sld_name((j + 1) % self.zones))
    }

    /// Every zone: the root, the two TLDs, the second-level zones, `slow.test.`.
    pub fn all_zones(&self) -> impl Iterator<Item = Zone> {
        [Zone::Root, Zone::Tld(Tld::Test), Zone::Tld(Tld::Example)]
            .into_iter()
            .chain((0..self.zones).map(Zone::Sld))
            .chain(std::iter::once(Zone::Slow))
    }

    /// Every record of `zone` (what its zone file holds): the apex first, delegations with
    /// their glue.
    pub fn records(&self, zone: Zone) -> Vec<Record> {
        match zone {
            Zone::Root => self.root_records(),
            Zone::Tld(t) => self.tld_records(t),
            Zone::Sld(j) => self.sld_records(j),
            Zone::Slow => slow_records(),
        }
    }

    fn root_records(&self) -> Vec<Record> {
        let mut r = apex(".", ROOT_NS, "hostmaster.");
        r.push(Record::new(ROOT_NS, Data::A(ROOT_SERVER)));
        for t in [Tld::Test, Tld::Example] {
            let (origin, ns) = (Zone::Tld(t).origin(), format!("ns.{}.", t.label()));
            delegation(&mut r, &origin, &ns, t.server());
        }
        r
    }

    fn tld_records(&self, t: Tld) -> Vec<Record> {
        let origin = Zone::Tld(t).origin();
        let mut r = apex(
            &origin,
            &format!("ns.{origin}"),
            &format!("hostmaster.{origin}"),
        );
        r.push(Record::new(format!("ns.{origin}"), Data::A(t.server())));
        let first = if t == Tld::Test { 0 } else { 1 };
        for j in (first..self.zones).step_by(2) {
            let zone = sld_name(j);
            delegation(&mut r, &zone, &format!("ns.{zone}"), sld_server(j));
        }
        if t == Tld::Test {
            delegation(&mut r, "lame.test.", "ns.lame.test.", LAME_SERVER);
            delegation(&mut r, "slow.test.", "ns.slow.test.", SLOW_SERVER);
        }
        r
    }

    fn sld_records(&self, j: u64) -> Vec<Record> {
        let mut r = Vec::new();
        for label in self.sld_labels() {
            r.extend(self.sld_node(j, label.as_deref()));
        }
        r
    }

    /// The names of a second-level zone, relative to it (None: the apex).
    fn sld_labels(&self) -> impl Iterator<Item = Option<String>> {
        let fixed = ["ns", "www", "mail", "alias", "chain", "far", "big"];
        std::iter::once(None)
            .chain(fixed.into_iter().map(|l| Some(l.to_string())))
            .chain((0..self.hosts).map(|k| Some(format!("h{k}"))))
    }

    /// The records at `label` (None: the apex) of zone j; none where no such name exists.
    fn sld_node(&self, j: u64, label: Option<&str>) -> Vec<Record> {
        let zone = sld_name(j);
        let Some(label) = label else {
            let mut r = apex(&zone, &format!("ns.{zone}"), &format!("hostmaster.{zone}"));
            r.push(Record::new(&zone, Data::Mx(10, format!("mail.{zone}"))));
            r.push(Record::new(&zone, Data::Txt(vec![format!("sonde-{j}")])));
            return r;
        };
        let name = format!("{label}.{zone}");
        let data = match label {
            "ns" => vec![Data::A(sld_server(j))],
            "www" => vec![Data::A(self.www4(j)), Data::Aaaa(self.www6(j))],
            "mail" => vec![Data::A(self.mail4(j))],
            "alias" => vec![Data::Cname(format!("www.{zone}"))],
            "chain" => vec![Data::Cname(format!("alias.{zone}"))],
            "far" => vec![Data::Cname(self.far_target(j))],
            "big" => vec![Data::Txt(self.big_strings(j))],
            _ => match host_number(label) {
                Some(k) if k < self.hosts => vec![Data::A(self.host4(j, k))],
                _ => vec![],
            },
        };
        data.into_iter()
            .map(|d| Record::new(name.clone(), d))
            .collect()
    }

    /// What exists at `name` (lowercase, with the trailing dot), as its zone's servers say.
    fn node(&self, name: &str) -> Node {
        let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
        let Some((&tld, rest)) = labels.split_last().filter(|_| name != ".") else {
            return Node::Records(
                self.root_records()
                    .into_iter()
                    .filter(|r| r.name == ".")
                    .collect(),
            );
        };
        let t = match tld {
            "test" => Tld::Test,
            "example" => Tld::Example,
            _ => return at(self.root_records(), name),
        };
        let Some((&second, below)) = rest.split_last() else {
            return at(self.tld_records(t), name);
        };
        if t == Tld::Test && second == "lame" {
            return Node::Lame;
        }
        if t == Tld::Test && second == "slow" {
            return at(slow_records(), name);
        }
        if second == "ns" && below.is_empty() {
            return Node::Records(vec![Record::new(name, Data::A(t.server()))]);
        }
        let j = match zone_number(second) {
            Some(j) if j < self.zones && Tld::of(j) == t => j,
            _ => return Node::Missing,
        };
        match below {
            [] => Node::Records(self.sld_node(j, None)),
            [label] => match self.sld_node(j, Some(label)) {
                r if r.is_empty() => Node::Missing,
                r => Node::Records(r),
            },
            _ => Node::Missing,
        }
    }

    /// What a recursive resolver over the tree answers for (`name`, `qtype`): CNAMEs followed
    /// (unless CNAME is asked), NXDOMAIN for a name that does not exist, NOERROR with no
    /// records for a type a name lacks (NODATA), SERVFAIL under `lame.test.`. `name` in any
    /// case, with or without the trailing dot.
    pub fn resolve(&self, name: &str, qtype: Rtype) -> Resolution {
        let mut name = normalize(name);
        let mut chain = Vec::new();
        let mut records = Vec::new();
        for _ in 0..MAX_CHAIN {
            let found = match self.node(&name) {
                Node::Lame => return servfail(),
                Node::Missing => {
                    return Resolution {
                        rcode: Rcode::NxDomain,
                        chain,
                        records,
                    }
                }
                Node::Records(found) => found,
            };
            let cname = found.iter().find(|r| r.data.rtype() == Rtype::Cname);
            if let (Some(c), false) = (cname, qtype == Rtype::Cname) {
                let Data::Cname(target) = &c.data else {
                    unreachable!("a CNAME record holds a CNAME")
                };
                name = target.clone();
                chain.push(target.clone());
                records.push(c.clone());
                continue;
            }
            records.extend(found.into_iter().filter(|r| r.data.rtype() == qtype));
            return Resolution {
                rcode: Rcode::NoError,
                chain,
                records,
            };
        }
        servfail()
    }

    /// The questions of the truth, in its order: for each zone A, (A, MX), (A, TXT),
    /// (www.A, A), (www.A, AAAA), (mail.A, A), (mail.A, AAAA), (alias.A, A), (chain.A, A),
    /// (far.A, A), (big.A, TXT), (h{k}.A, A) for every k, (nx.A, A); then (www.slow.test., A)
    /// and (www.lame.test., A).
    pub fn questions(&self) -> impl Iterator<Item = (String, Rtype)> + '_ {
        let per_zone = move |j: u64| {
            let zone = sld_name(j);
            let fixed = [
                ("", Rtype::Mx),
                ("", Rtype::Txt),
                ("www.", Rtype::A),
                ("www.", Rtype::Aaaa),
                ("mail.", Rtype::A),
                ("mail.", Rtype::Aaaa),
                ("alias.", Rtype::A),
                ("chain.", Rtype::A),
                ("far.", Rtype::A),
                ("big.", Rtype::Txt),
            ];
            let fixed: Vec<(String, Rtype)> = fixed
                .into_iter()
                .map(|(label, t)| (format!("{label}{zone}"), t))
                .collect();
            let zone2 = zone.clone();
            fixed
                .into_iter()
                .chain((0..self.hosts).map(move |k| (format!("h{k}.{zone2}"), Rtype::A)))
                .chain(std::iter::once((format!("nx.{zone}"), Rtype::A)))
        };
        (0..self.zones).flat_map(per_zone).chain([
            ("www.slow.test.".to_string(), Rtype::A),
            ("www.lame.test.".to_string(), Rtype::A),
        ])
    }

    /// The ground truth: one row per question of [`Tree::questions`].
    pub fn truth(&self) -> impl Iterator<Item = TruthRow> + '_ {
        self.questions().map(|(name, rtype)| {
            let r = self.resolve(&name, rtype);
            TruthRow {
                answers: r.answers(rtype),
                name,
                rtype,
                rcode: r.rcode,
                chain: r.chain,
            }
        })
    }
}

fn servfail() -> Resolution {
    Resolution {
        rcode: Rcode::ServFail,
        chain: Vec::new(),
        records: Vec::new(),
    }
}

/// Lowercase, with the trailing dot.
fn normalize(name: &str) -> String {
    let mut n = name.to_ascii_lowercase();
    if !n.ends_with('.') {
        n.push('.');
    }
    n
}

/// The records of `zone` at `name`; Missing when it has none.
fn at(zone: Vec<Record>, name: &str) -> Node {
    let here: Vec<Record> = zone.into_iter().filter(|r| r.name == name).collect();
    if here.is_empty() {
        Node::Missing
    } else {
        Node::Records(here)
    }
}

/// SOA and NS at a zone's apex.
fn apex(origin: &str, ns: &str, mailbox: &str) -> Vec<Record> {
    vec![
        Record::new(origin, Data::Soa(ns.to_string(), mailbox.to_string())),
        Record::new(origin, Data::Ns(ns.to_string())),
    ]
}

/// A delegation of `zone` to `ns`, with its glue.
fn delegation(r: &mut Vec<Record>, zone: &str, ns: &str, addr: Ipv4Addr) {
    r.push(Record::new(zone, Data::Ns(ns.to_string())));
    r.push(Record::new(ns, Data::A(addr)));
}

fn slow_records() -> Vec<Record> {
    let mut r = apex("slow.test.", "ns.slow.test.", "hostmaster.slow.test.");
    r.push(Record::new("ns.slow.test.", Data::A(SLOW_SERVER)));
    r.push(Record::new("www.slow.test.", Data::A(SLOW_WWW)));
    r
}

/// j of a label `d{j}` (decimal, no leading zeros).
fn zone_number(label: &str) -> Option<u64> {
    decimal(label.strip_prefix('d')?)
}

/// k of a label `h{k}`.
fn host_number(label: &str) -> Option<u32> {
    decimal(label.strip_prefix('h')?).and_then(|k| u32::try_from(k).ok())
}

/// A decimal number written without leading zeros (`0` itself is fine).
fn decimal(digits: &str) -> Option<u64> {
    let plain = digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.is_empty()
        && (digits == "0" || !digits.starts_with('0'));
    plain.then(|| digits.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Tree {
        Tree::new(1, 12, 2)
    }

    #[test]
    fn values_follow_the_formulas() {
        let t = tree();
        let key = hash_key(1);
        assert_eq!(key, mix64(1u64.wrapping_add(GOLDEN)));
        // v(3, 1) by hand from the contract's formula.
        let v31 = mix64(mix64(key ^ 3u64.wrapping_mul(GOLDEN)) ^ 1);
        assert_eq!(t.v(3, 1), v31);
        assert_eq!(u32::from(t.www4(3)), 0xc612_0000 + (v31 % 131_072) as u32);
        assert_eq!(addr4(131_072 + 5), Ipv4Addr::new(198, 18, 0, 5));
        assert_eq!(addr4(65_536 + 256 + 7), Ipv4Addr::new(198, 19, 1, 7));
        assert_eq!(
            addr6(0xdead_beef_0001_0203),
            "2001:2::1:203".parse::<Ipv6Addr>().unwrap()
        );
        let h1 = mix64(t.v(5, 4) ^ GOLDEN);
        assert_eq!(t.host4(5, 1), addr4(h1));
        // Another seed, another tree.
        assert_ne!(Tree::new(2, 12, 2).v(3, 1), v31);
    }

    #[test]
    fn names_and_servers() {
        assert_eq!(sld_name(0), "d0.test.");
        assert_eq!(sld_name(7), "d7.example.");
        assert_eq!(sld_server(7), Ipv4Addr::new(198, 19, 53, 13));
        assert_eq!(resolvers().len(), 16);
        assert_eq!(resolvers()[15], Ipv4Addr::new(198, 19, 53, 79));
        assert!(resolvers().iter().all(|r| SERVER_NET.contains(r)));
        assert_eq!(zone_number("d12"), Some(12));
        assert_eq!(zone_number("d012"), None);
        assert_eq!(zone_number("d"), None);
        assert_eq!(zone_number("d1x"), None);
        assert_eq!(host_number("h0"), Some(0));
        assert_eq!("aaaa".parse::<Rtype>().unwrap(), Rtype::Aaaa);
        assert_eq!("TYPE65".parse::<Rtype>().unwrap(), Rtype::Other(65));
        assert_eq!("type16".parse::<Rtype>().unwrap(), Rtype::Txt);
        assert!("A6X".parse::<Rtype>().is_err());
    }

    #[test]
    fn big_txt_is_eight_strings_of_250_hex_and_too_big_for_udp() {
        let t = tree();
        let strings = t.big_strings(4);
        assert_eq!(strings.len(), 8);
        assert!(strings.iter().all(|s| s.len() == 250));
        assert!(strings.iter().all(|s| s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))));
        let v = t.v(4, 5);
        assert_eq!(&strings[0][..16], format!("{:016x}", mix64(v)));
        assert_eq!(&strings[0][16..32], format!("{:016x}", mix64(v ^ 1)));
        // String 1 goes on where string 0 was cut: value 15 starts at character 240.
        let joined = strings.concat();
        assert_eq!(&joined[240..256], format!("{:016x}", mix64(v ^ 15)));
        let rdata: usize = strings.iter().map(|s| s.len() + 1).sum();
        assert!(rdata > 1232, "{rdata}");
    }

    fn row(t: &Tree, name: &str, rtype: Rtype) -> TruthRow {
        t.truth()
            .find(|r| r.name == name && r.rtype == rtype)
            .unwrap_or_else(|| panic!("no truth row for {name} {rtype}"))
    }

    #[test]
    fn chains_across_zones_and_tlds() {
        let t = tree();
        let chain = row(&t, "chain.d3.example.", Rtype::A);
        assert_eq!(chain.rcode, Rcode::NoError);
        assert_eq!(chain.chain, ["alias.d3.example.", "www.d3.example."]);
        assert_eq!(chain.answers, [t.www4(3).to_string()]);
        let far = row(&t, "far.d3.example.", Rtype::A);
        assert_eq!(far.chain, ["www.d4.test."]);
        assert_eq!(far.answers, [t.www4(4).to_string()]);
        // The last zone points back at the first.
        let last = row(&t, "far.d11.example.", Rtype::A);
        assert_eq!(last.chain, ["www.d0.test."]);
        // Asked for the CNAME itself, nothing is followed.
        let cname = t.resolve("ALIAS.d3.example", Rtype::Cname);
        assert!(cname.chain.is_empty());
        assert_eq!(cname.answers(Rtype::Cname), ["www.d3.example."]);
    }

    #[test]
    fn nxdomain_nodata_and_servfail() {
        let t = tree();
        let nx = row(&t, "nx.d2.test.", Rtype::A);
        assert_eq!((nx.rcode, nx.answers.len()), (Rcode::NxDomain, 0));
        let nodata = row(&t, "mail.d2.test.", Rtype::Aaaa);
        assert_eq!((nodata.rcode, nodata.answers.len()), (Rcode::NoError, 0));
        let lame = row(&t, "www.lame.test.", Rtype::A);
        assert_eq!(lame.rcode, Rcode::ServFail);
        let slow = row(&t, "www.slow.test.", Rtype::A);
        assert_eq!(slow.answers, ["198.18.0.53"]);
        for (name, why) in [
            ("d3.test.", "odd zones are under example."),
            ("www.d12.test.", "only 12 zones"),
            ("www.d02.test.", "no leading zeros"),
            ("h2.d0.test.", "2 hosts"),
            ("a.www.d0.test.", "nothing below www"),
            ("nothing.test.", "not delegated"),
            ("com.", "no such TLD"),
        ] {
            assert_eq!(
                t.resolve(name, Rtype::A).rcode,
                Rcode::NxDomain,
                "{name}: {why}"
            );
        }
        // Other types at names that exist: NODATA.
        for (name, rtype) in [("www.d0.test.", Rtype::Mx), ("d0.test.", Rtype::A)] {
            let r = t.resolve(name, rtype);
            assert_eq!((r.rcode, r.records.len()), (Rcode::NoError, 0), "{name}");
        }
        assert_eq!(
            t.resolve("ns.d5.example.", Rtype::A).answers(Rtype::A),
            ["198.19.53.11"]
        );
        assert_eq!(t.resolve(".", Rtype::Ns).answers(Rtype::Ns), [ROOT_NS]);
        assert_eq!(
            t.resolve("ns.test.", Rtype::A).answers(Rtype::A),
            ["198.19.53.2"]
        );
        assert_eq!(
            t.resolve("ns.", Rtype::A).answers(Rtype::A),
            ["198.19.53.1"]
        );
    }

    #[test]
    fn the_truth_has_every_row_of_the_contract() {
        let t = tree();
        let rows: Vec<TruthRow> = t.truth().collect();
        // 11 per zone and one per host, then slow and lame.
        assert_eq!(rows.len(), 12 * (11 + 2) + 2);
        let mx = row(&t, "d3.example.", Rtype::Mx);
        assert_eq!(mx.answers, ["10 mail.d3.example."]);
        let txt = row(&t, "d3.example.", Rtype::Txt);
        assert_eq!(txt.answers, ["\"sonde-3\""]);
        let www6 = row(&t, "www.d3.example.", Rtype::Aaaa);
        assert_eq!(www6.answers, [t.www6(3).to_string()]);
        let big = row(&t, "big.d3.example.", Rtype::Txt);
        assert_eq!(big.answers.len(), 1);
        assert_eq!(big.answers[0].len(), 8 * 252 + 7);
        let json = serde_json::to_string(&row(&t, "chain.d3.example.", Rtype::A)).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"name":"chain.d3.example.","type":"A","rcode":"NOERROR","chain":["alias.d3.example.","www.d3.example."],"answers":["{}"]}}"#,
                t.www4(3)
            )
        );
    }

    #[test]
    fn zones_hold_the_delegations_and_glue() {
        let t = tree();
        let root: Vec<String> = t
            .records(Zone::Root)
            .iter()
            .map(Record::zone_line)
            .collect();
        assert!(
            root.contains(&"test. 3600 IN NS ns.test.".to_string()),
            "{root:?}"
        );
        assert!(root.contains(&"ns.example. 3600 IN A 198.19.53.3".to_string()));
        let test: Vec<String> = t
            .records(Zone::Tld(Tld::Test))
            .iter()
            .map(Record::zone_line)
            .collect();
        assert!(test.contains(&"d4.test. 3600 IN NS ns.d4.test.".to_string()));
        assert!(test.contains(&"ns.d4.test. 3600 IN A 198.19.53.10".to_string()));
        assert!(test.contains(&"ns.lame.test. 3600 IN A 198.19.53.20".to_string()));
        assert!(!test.iter().any(|l| l.contains("d3.")), "{test:?}");
        let sld: Vec<String> = t
            .records(Zone::Sld(3))
            .iter()
            .map(Record::zone_line)
            .collect();
        assert_eq!(
            sld[0],
            "d3.example. 3600 IN SOA ns.d3.example. hostmaster.d3.example. 1 3600 600 86400 300"
        );
        assert!(sld.contains(&format!("h1.d3.example. 3600 IN A {}", t.host4(3, 1))));
        assert_eq!(t.all_zones().count(), 3 + 12 + 1);
    }
}
