//! Probe modules: each prepares its frame once (a template patched per target with the fields
//! validation needs), names the in-kernel filter that lets only possible replies through, and
//! validates and classifies what comes back.
//!
//! Every module is written once, generic over the address family (`family.rs`: what differs
//! between IPv4 and IPv6); a [`Probe`] holds the module for each family the scan has a source
//! address of and hands each target and each received frame to the right one.
//!
//! - `tcp_syn.rs`: SYN probes, SYN-ACK/RST replies, and the [`RstTemplate`].
//! - `icmp_echo.rs`: echo requests, echo replies and ICMP errors about them.
//! - `udp.rs`: `udp` and `dns` datagrams, their replies (fragmented ones too) and ICMP errors.

mod family;
mod icmp_echo;
mod tcp_syn;
#[cfg(test)]
mod tests;
mod udp;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use sonde_meter::stages::{self, Stage};
use sonde_wire::{ethernet, tcp, EtherType, IpProtocol, MacAddr};

use crate::reply::Reply;
use crate::validate::{PortRange, Validator};
use family::{Family, Fragment, Received, Source, V4, V6};
use icmp_echo::IcmpEcho;
use tcp_syn::TcpSyn;
use udp::{dns_query, UdpProbe};

pub use tcp_syn::RstTemplate;

/// What every probe of a scan shares. A family's modules exist when its source address is given.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSetup {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Option<Ipv4Addr>,
    pub src_ip6: Option<Ipv6Addr>,
    pub validator: Validator,
    /// The source ports probes use; replies must come back to them.
    pub ports: PortRange,
    /// IPv4 TTL and IPv6 hop limit.
    pub ttl: u8,
}

impl ProbeSetup {
    /// The family's share of the setup, if it has a source address of the family.
    fn source<F: Family>(&self) -> Option<Source<F>> {
        Some(Source {
            src_mac: self.src_mac,
            dst_mac: self.dst_mac,
            ip: F::source_ip(self)?,
            validator: self.validator,
            ports: self.ports,
            ttl: self.ttl,
        })
    }
}

/// Module-specific options from the command line.
#[derive(Clone, Debug, Default)]
pub struct ModuleOptions {
    /// UDP payload (`--payload-hex`, `--payload-file`).
    pub payload: Vec<u8>,
    /// DNS query name and type (`--dns-name`, `--dns-type`).
    pub dns_name: String,
    pub dns_type: u16,
}

/// What a received frame turned out to be.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // the common case is Valid; boxing it would allocate per reply
pub enum Verdict {
    /// Not a reply to this scan at all (other traffic to our address).
    NotOurs,
    /// Looks like a reply to this scan but fails validation: spoofed, stale, or another scan's.
    Invalid,
    /// A genuine reply; `repeat` and `timestamp_us` are the engine's to fill. Returned by value:
    /// no allocation per received packet.
    Valid(Reply),
    /// A fragment after the first of a datagram of the module's protocols: no transport header
    /// to validate, so it is only counted (the first fragment is validated and reported as a
    /// `Valid` reply with `fragmented` set).
    Fragment,
}

/// The modules, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    TcpSyn,
    IcmpEcho,
    Udp,
    Dns,
}

impl ModuleKind {
    pub const ALL: [ModuleKind; 4] = [
        ModuleKind::TcpSyn,
        ModuleKind::IcmpEcho,
        ModuleKind::Udp,
        ModuleKind::Dns,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModuleKind::TcpSyn => "tcp_syn",
            ModuleKind::IcmpEcho => "icmp_echo",
            ModuleKind::Udp => "udp",
            ModuleKind::Dns => "dns",
        }
    }

    /// ZMap's name of the same module (`-M tcp_synscan` is accepted as `tcp_syn`).
    pub fn zmap_name(self) -> &'static str {
        match self {
            ModuleKind::TcpSyn => "tcp_synscan",
            ModuleKind::IcmpEcho => "icmp_echoscan",
            ModuleKind::Udp => "udp",
            ModuleKind::Dns => "dns",
        }
    }

    /// Whether probes carry a port (ICMP does not: its targets use port 0).
    pub fn uses_ports(self) -> bool {
        self != ModuleKind::IcmpEcho
    }

    /// The output fields written when none are chosen: what the module's replies carry.
    pub fn default_fields(self) -> &'static [&'static str] {
        use crate::reply::{DEFAULT_FIELDS, DNS_FIELDS, ICMP_FIELDS, UDP_FIELDS};
        match self {
            ModuleKind::TcpSyn => DEFAULT_FIELDS,
            ModuleKind::IcmpEcho => ICMP_FIELDS,
            ModuleKind::Udp => UDP_FIELDS,
            ModuleKind::Dns => DNS_FIELDS,
        }
    }
}

impl fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModuleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ModuleKind::ALL
            .into_iter()
            .find(|k| k.name() == s || k.zmap_name() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ModuleKind::ALL.iter().map(|k| k.name()).collect();
                let near = crate::nearest::did_you_mean(s, &known);
                format!(
                    "unknown probe module \"{s}\"{near}: known modules are {}",
                    known.join(", ")
                )
            })
    }
}

/// A module of one family.
trait Module<F: Family>: Send + Sync {
    /// Length of every probe frame.
    fn frame_len(&self) -> usize;
    /// Writes the probe for (`target`, `port`) into `buf` and returns its length; `now_us` is
    /// stamped where the reply will carry it back (TCP timestamp, ICMP echo data) for RTTs.
    fn write(&self, buf: &mut [u8], target: F::Addr, port: u16, now_us: u32) -> usize;
    /// A tcpdump expression that passes every frame that can be a reply.
    fn bpf_filter(&self) -> String;
    /// Whether replies come in packets of `protocol` (so later fragments of it are counted).
    fn answers_in(&self, protocol: IpProtocol) -> bool;
    /// The identifier every echo request of the module carries, if it sends echo requests.
    fn echo_ident(&self) -> Option<u16> {
        None
    }
    /// Validates and classifies a received packet, a whole one or a first fragment.
    fn classify(&self, rx: &Received<'_, F>, now_us: u32) -> Verdict;
}

/// Prepares the module's template for one family.
fn module<F: Family>(
    kind: ModuleKind,
    src: Source<F>,
    options: &ModuleOptions,
    dns: &[u8],
) -> Result<Box<dyn Module<F>>, String> {
    Ok(match kind {
        ModuleKind::TcpSyn => Box::new(TcpSyn::new(src)),
        ModuleKind::IcmpEcho => Box::new(IcmpEcho::new(src)),
        ModuleKind::Udp => Box::new(UdpProbe::new(src, &options.payload, None)?),
        ModuleKind::Dns => Box::new(UdpProbe::new(src, dns, Some(0))?),
    })
}

/// Hands a received IP packet of family `F` to the module of that family.
fn classify_in<F: Family>(module: Option<&dyn Module<F>>, packet: &[u8], now_us: u32) -> Verdict {
    let (Some(module), Some(rx)) = (module, F::receive(packet)) else {
        return Verdict::NotOurs;
    };
    // `sonde profile`: the Ethernet and IP headers are read; the rest is validation.
    stages::mark(Stage::Parse);
    if rx.fragment == Fragment::Later {
        return if module.answers_in(rx.protocol) {
            Verdict::Fragment
        } else {
            Verdict::NotOurs
        };
    }
    module.classify(&rx, now_us)
}

/// A probe module for every family the scan has a source address of.
pub struct Probe {
    kind: ModuleKind,
    v4: Option<Box<dyn Module<V4>>>,
    v6: Option<Box<dyn Module<V6>>>,
}

impl Probe {
    /// Prepares the templates; fails on options the module cannot send (a payload too long for
    /// a frame, an invalid DNS name) or a setup without any source address.
    pub fn build(
        kind: ModuleKind,
        setup: &ProbeSetup,
        options: &ModuleOptions,
    ) -> Result<Probe, String> {
        if setup.src_ip.is_none() && setup.src_ip6.is_none() {
            return Err("no source address to probe from: give an IPv4 or IPv6 one".into());
        }
        let dns = match kind {
            ModuleKind::Dns => dns_query(&options.dns_name, options.dns_type)?,
            _ => Vec::new(),
        };
        let v4 = setup.source::<V4>();
        let v6 = setup.source::<V6>();
        Ok(Probe {
            kind,
            v4: v4.map(|src| module(kind, src, options, &dns)).transpose()?,
            v6: v6.map(|src| module(kind, src, options, &dns)).transpose()?,
        })
    }

    pub fn kind(&self) -> ModuleKind {
        self.kind
    }

    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// The longest probe frame of either family.
    pub fn frame_len(&self) -> usize {
        let v4 = self.v4.as_ref().map_or(0, |m| m.frame_len());
        let v6 = self.v6.as_ref().map_or(0, |m| m.frame_len());
        v4.max(v6)
    }

    /// Whether the probe has a module for IPv6 (`v6`) or IPv4 targets.
    pub fn has_family(&self, v6: bool) -> bool {
        if v6 {
            self.v6.is_some()
        } else {
            self.v4.is_some()
        }
    }

    /// The identifier of the scan's ICMP echo requests (`icmp_echo`; the same in both
    /// families): the only echo replies that can be the scan's carry it. None for the modules
    /// that send no echo request.
    pub fn echo_ident(&self) -> Option<u16> {
        let v4 = self.v4.as_ref().and_then(|m| m.echo_ident());
        v4.or_else(|| self.v6.as_ref().and_then(|m| m.echo_ident()))
    }

    /// Writes the probe for (`target`, `port`) into `buf` and returns its length: 0 when there
    /// is no module for the target's family.
    #[inline]
    pub fn write(&self, buf: &mut [u8], target: IpAddr, port: u16, now_us: u32) -> usize {
        match target {
            IpAddr::V4(a) => self
                .v4
                .as_ref()
                .map_or(0, |m| m.write(buf, a, port, now_us)),
            IpAddr::V6(a) => self
                .v6
                .as_ref()
                .map_or(0, |m| m.write(buf, a, port, now_us)),
        }
    }

    /// Validates and classifies a whole received Ethernet frame.
    pub fn classify(&self, frame: &[u8], now_us: u32) -> Verdict {
        let Ok(eth) = ethernet::Frame::new_checked(frame) else {
            return Verdict::NotOurs;
        };
        match eth.ethertype() {
            EtherType::Ipv4 => classify_in(self.v4.as_deref(), eth.payload(), now_us),
            EtherType::Ipv6 => classify_in(self.v6.as_deref(), eth.payload(), now_us),
            _ => Verdict::NotOurs,
        }
    }

    /// The tcpdump expression that passes every frame that can be a reply, for every family
    /// the probe has.
    pub fn bpf_filter(&self) -> String {
        let v4 = self.v4.as_ref().map(|m| m.bpf_filter());
        let v6 = self.v6.as_ref().map(|m| m.bpf_filter());
        match (v4, v6) {
            (Some(v4), Some(v6)) => format!("({v4}) or ({v6})"),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => unreachable!("a probe is only built with a source address"),
        }
    }
}

/// The acknowledgment number of the TCP segment in a received Ethernet frame of either family
/// (past any IPv6 extension headers): for a SYN-ACK, the sequence number its RST must carry.
pub fn tcp_ack_number(frame: &[u8]) -> Option<u32> {
    fn in_family<F: Family>(packet: &[u8]) -> Option<u32> {
        let rx = F::receive(packet)?;
        if rx.protocol != IpProtocol::TCP || rx.fragment == Fragment::Later {
            return None;
        }
        Some(tcp::Packet::new_checked(rx.transport).ok()?.ack_number())
    }
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    match eth.ethertype() {
        EtherType::Ipv4 => in_family::<V4>(eth.payload()),
        EtherType::Ipv6 => in_family::<V6>(eth.payload()),
        _ => None,
    }
}
