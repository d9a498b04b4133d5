//! What the host's tables say about an interface: its MAC, the default gateway, and the
//! gateway's MAC from the neighbour table, all of the network namespace sonde runs in.

use std::net::Ipv4Addr;

use anyhow::{anyhow, Context};
use sonde_wire::MacAddr;

/// The MAC address of `iface`, asked over netlink, so it answers for the namespace this thread
/// has entered (sysfs would show the namespace it was mounted in).
pub fn iface_mac(iface: &str) -> anyhow::Result<MacAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interfaces")?;
    addrs
        .filter(|a| a.interface_name == iface)
        .find_map(|a| a.address.and_then(|s| s.as_link_addr().and_then(|l| l.addr())))
        .map(MacAddr)
        .ok_or_else(|| anyhow!("no interface named \"{iface}\" in this network namespace (list them with: ip link)"))
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
            anyhow!("no default route through {iface}: give the next hop's MAC with --dst-mac")
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
            anyhow!("no neighbour entry for {ip} on {iface}: ping it once, or give --dst-mac")
        })
}
