//! The host side of a scan, found from the tables of the namespace sonde runs in: interface
//! (default route), source address (the interface's), gateway MAC (neighbour table, resolved by
//! ARP when missing). `-i`, `-S` and `-G` override each.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::{anyhow, Context};
use sonde_lab::LabStatus;
use sonde_wire::MacAddr;

use super::ScanArgs;
use crate::netenv;

pub struct Host {
    pub iface: String,
    pub src_ip: Ipv4Addr,
    pub src_ip6: Option<Ipv6Addr>,
    pub source_is_local: bool,
    pub src_mac: MacAddr,
    pub gateway_mac: MacAddr,
}

pub fn resolve(args: &ScanArgs, lab: Option<&LabStatus>) -> anyhow::Result<Host> {
    let iface = match (&args.iface, lab) {
        (Some(i), _) => i.clone(),
        (None, Some(l)) => l.scan_if.clone(),
        (None, None) => default_route_iface()?,
    };
    let src_mac = netenv::iface_mac(&iface)?;
    let local = iface_ipv4(&iface).ok();
    let src_ip = match (args.source_ip, local) {
        (Some(ip), _) => ip,
        (None, Some(ip)) => ip,
        (None, None) => iface_ipv4(&iface)?,
    };
    let source_is_local = local == Some(src_ip);
    let gateway_mac = match args.gateway_mac {
        Some(mac) => mac,
        // A dry run sends nothing, not even an ARP request.
        None if args.dryrun => netenv::default_gateway(&iface)
            .and_then(|g| netenv::neighbour_mac(&iface, g))
            .unwrap_or(MacAddr::ZERO),
        None => gateway_mac(&iface)?,
    };
    let src_ip6 = args.source_ip6.or_else(|| iface_global_ipv6(&iface));
    Ok(Host {
        iface,
        src_ip,
        src_ip6,
        source_is_local,
        src_mac,
        gateway_mac,
    })
}

/// The interface of the IPv4 default route.
fn default_route_iface() -> anyhow::Result<String> {
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
fn iface_ipv4(iface: &str) -> anyhow::Result<Ipv4Addr> {
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
/// lab; give -G when they differ); when the neighbour table lacks it, one datagram to the gateway's discard
/// port makes the kernel resolve it by ARP, and the table is read again.
fn gateway_mac(iface: &str) -> anyhow::Result<MacAddr> {
    let gateway = netenv::default_gateway(iface)?;
    if let Ok(mac) = netenv::neighbour_mac(iface, gateway) {
        return Ok(mac);
    }
    let socket =
        std::net::UdpSocket::bind("0.0.0.0:0").context("opening a socket for ARP resolution")?;
    let _ = socket.send_to(b"", (gateway, 9));
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(mac) = netenv::neighbour_mac(iface, gateway) {
            return Ok(mac);
        }
    }
    Err(anyhow!(
        "could not resolve the MAC of gateway {gateway} on {iface}: give it with -G"
    ))
}
