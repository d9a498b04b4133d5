//! The host side of a run, read from the tables of the network namespace sonde runs in: the
//! interface (the default route's), the source addresses (the interface's), the gateway's MAC
//! (neighbour table, resolved by ARP when missing), the kernel's ephemeral port range. Every
//! value can be given instead (`-i`, `-S`, `--source-ip6`, `-G`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use sonde_craft::cookie::PortRange;
use sonde_wire::MacAddr;

/// What the user gave; `None` means "find it".
#[derive(Clone, Debug, Default)]
pub struct HostRequest {
    pub iface: Option<String>,
    pub source_ip: Option<Ipv4Addr>,
    pub source_ip6: Option<Ipv6Addr>,
    pub gateway_mac: Option<MacAddr>,
    /// Send nothing while finding things out (a dry run does not even ARP).
    pub quiet_network: bool,
}

/// Where a run sends from.
#[derive(Clone, Debug)]
pub struct Host {
    pub iface: String,
    pub src_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub src_ip6: Option<Ipv6Addr>,
    /// The IPv4 source belongs to the interface (so its kernel sees replies unless sonde's XDP
    /// filter takes them first).
    pub source_is_local: bool,
    pub gateway_mac: MacAddr,
}

impl Host {
    /// Resolves everything not given in `req`; `default_iface` is the lab's scanner interface
    /// when running in a lab.
    pub fn resolve(req: &HostRequest, default_iface: Option<&str>) -> anyhow::Result<Host> {
        let iface = match (&req.iface, default_iface) {
            (Some(i), _) => i.clone(),
            (None, Some(i)) => i.to_string(),
            (None, None) => default_route_iface()?,
        };
        let src_mac = iface_mac(&iface)?;
        let local = iface_ipv4(&iface).ok();
        let src_ip = match (req.source_ip, local) {
            (Some(ip), _) | (None, Some(ip)) => ip,
            (None, None) => iface_ipv4(&iface)?,
        };
        let gateway_mac = match req.gateway_mac {
            Some(mac) => mac,
            None if req.quiet_network => default_gateway(&iface)
                .and_then(|g| neighbour_mac(&iface, g))
                .unwrap_or(MacAddr::ZERO),
            None => resolve_gateway_mac(&iface)?,
        };
        Ok(Host {
            src_ip6: req.source_ip6.or_else(|| iface_global_ipv6(&iface)),
            source_is_local: local == Some(src_ip),
            iface,
            src_mac,
            src_ip,
            gateway_mac,
        })
    }
}

/// The MAC address of `iface`, asked over netlink, so it answers for the namespace this thread
/// has entered (sysfs would show the namespace it was mounted in).
pub fn iface_mac(iface: &str) -> anyhow::Result<MacAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interfaces")?;
    addrs
        .filter(|a| a.interface_name == iface)
        .find_map(|a| a.address.and_then(|s| s.as_link_addr().and_then(|l| l.addr())))
        .map(MacAddr)
        .ok_or_else(|| {
            anyhow!("no interface named \"{iface}\" in this network namespace (list them with: ip link)")
        })
}

/// The IPv4 default gateway through `iface`, from /proc/net/route.
pub fn default_gateway(iface: &str) -> anyhow::Result<Ipv4Addr> {
    let table = std::fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[0] == iface && f[1] == "00000000")
        .and_then(|f| u32::from_str_radix(f[2], 16).ok())
        .map(|g| Ipv4Addr::from(u32::from_be(g)))
        .ok_or_else(|| {
            anyhow!("no default route through {iface}: give the next hop's MAC with -G/--dst-mac")
        })
}

/// The MAC the neighbour table holds for `ip` on `iface`, from /proc/net/arp.
pub fn neighbour_mac(iface: &str, ip: Ipv4Addr) -> anyhow::Result<MacAddr> {
    let table = std::fs::read_to_string("/proc/net/arp").context("reading /proc/net/arp")?;
    let wanted = ip.to_string();
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && f[0] == wanted && f[5] == iface && f[3] != "00:00:00:00:00:00")
        .and_then(|f| f[3].parse().ok())
        .ok_or_else(|| {
            anyhow!("no neighbour entry for {ip} on {iface}: ping it once, or give -G/--dst-mac")
        })
}

/// The interface of the IPv4 default route.
pub fn default_route_iface() -> anyhow::Result<String> {
    let table = std::fs::read_to_string("/proc/net/route").context("reading /proc/net/route")?;
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[1] == "00000000")
        .map(|f| f[0].to_string())
        .ok_or_else(|| anyhow!("no default route: name the interface with -i"))
}

/// The first IPv4 address of `iface`.
pub fn iface_ipv4(iface: &str) -> anyhow::Result<Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .context("listing interfaces")?
        .filter(|a| a.interface_name == iface)
        .find_map(|a| {
            a.address
                .and_then(|s| s.as_sockaddr_in().map(|sin| sin.ip()))
        })
        .ok_or_else(|| {
            anyhow!("interface {iface} has no IPv4 address: give the source address with -S")
        })
}

/// The first global (not link-local) IPv6 address of `iface`.
fn iface_global_ipv6(iface: &str) -> Option<Ipv6Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter(|a| a.interface_name == iface)
        .filter_map(|a| {
            a.address
                .and_then(|s| s.as_sockaddr_in6().map(|sin| sin.ip()))
        })
        .find(|ip| (ip.segments()[0] & 0xffc0) != 0xfe80 && !ip.is_loopback())
}

/// The gateway's MAC (IPv6 targets go to the same next hop: one router per link, as in the
/// lab; give -G when they differ). When the neighbour table lacks it, one datagram to the
/// gateway's discard port makes the kernel resolve it by ARP, and the table is read again.
fn resolve_gateway_mac(iface: &str) -> anyhow::Result<MacAddr> {
    let gateway = default_gateway(iface)?;
    if let Ok(mac) = neighbour_mac(iface, gateway) {
        return Ok(mac);
    }
    let socket =
        std::net::UdpSocket::bind("0.0.0.0:0").context("opening a socket for ARP resolution")?;
    let _ = socket.send_to(b"", (gateway, 9));
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(mac) = neighbour_mac(iface, gateway) {
            return Ok(mac);
        }
    }
    Err(anyhow!(
        "could not resolve the MAC of gateway {gateway} on {iface}: give it with -G"
    ))
}

/// The ports the kernel of this namespace hands out to its own connections
/// (`net.ipv4.ip_local_port_range`, which IPv6 shares).
pub fn kernel_ephemeral_ports() -> anyhow::Result<PortRange> {
    let path = "/proc/sys/net/ipv4/ip_local_port_range";
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let mut words = text.split_whitespace().map(str::parse::<u16>);
    match (words.next(), words.next()) {
        (Some(Ok(first)), Some(Ok(last))) => PortRange::new(first, last).map_err(|e| anyhow!(e)),
        _ => bail!("cannot read {path}: {text:?}"),
    }
}

/// Refuses source ports that the kernel may also hand out: a reply to one of them could then
/// belong to a local connection, and sonde would take it (or the kernel would reset sonde's).
pub fn check_source_ports(ours: PortRange) -> anyhow::Result<()> {
    let kernel = kernel_ephemeral_ports()?;
    if ours.overlaps(&kernel) {
        bail!(
            "source ports {ours} overlap the kernel's ephemeral ports {kernel} (net.ipv4.ip_local_port_range): give --source-ports outside them, e.g. 61000-65535, or narrow that sysctl"
        );
    }
    Ok(())
}
