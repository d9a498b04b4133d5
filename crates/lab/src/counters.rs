//! Packet counters of the two veth ends.

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cmd::{in_ns, ip_line};
use crate::config::{NET_IF, SCAN_IF};
use crate::netns::{net_ns, scan_ns};
use crate::state;

/// Counters of one interface, as the kernel reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IfCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    /// Sum of veth's per-queue `rx_queue_N_xdp_drops` (`ethtool -S`): frames
    /// a native-mode XDP program dropped. Generic-mode drops do not show here.
    pub xdp_drops: u64,
}

/// Counters of nx0, the lab side.
pub fn net_counters(name: &str) -> Result<IfCounters> {
    state::load(name)?;
    counters(&net_ns(name), NET_IF)
}

/// Counters of sx0, the scanner side.
pub fn scan_counters(name: &str) -> Result<IfCounters> {
    state::load(name)?;
    counters(&scan_ns(name), SCAN_IF)
}

/// Frames that arrived on the lab side (nx0), whatever the sink.
///
/// This is nx0's `rx_packets`, in every mode. Checked on kernel 6.18 by
/// sending N frames from the scanner namespace (the integration test repeats
/// the check):
/// - `Sink::Kernel`: veth counts each frame it hands to nx0's receive path;
///   rx_packets rises by N.
/// - `Sink::Drop`, xdpdrv: frames take veth's NAPI path, where rx_packets is
///   the count of frames the XDP program saw, drops included: rx_packets and
///   the sum of `ethtool -S nx0` `rx_queue_N_xdp_drops` both rise by N.
/// - `Sink::Drop`, xdpgeneric: the frame is counted on receive as with the
///   kernel sink, then the program drops it (no ethtool counter moves).
///
/// Frames veth itself drops (a full backlog or XDP ring) are not counted: they
/// never arrived. Other traffic is near zero: the lab has static neighbours
/// (no ARP) and no IPv6 link-local addresses (no DAD, RS or MLD). With an
/// IPv6 population, the link addresses join their solicited-node groups, so
/// a couple of MLD reports cross the link in the first seconds after `up`
/// (seen: 2 frames on nx0's RX within 4 s).
pub fn received(name: &str) -> Result<u64> {
    state::load(name)?;
    Ok(link_stats(&net_ns(name), NET_IF)?.rx_packets)
}

fn counters(ns: &str, ifname: &str) -> Result<IfCounters> {
    let mut c = link_stats(ns, ifname)?;
    c.xdp_drops = xdp_drops(ns, ifname)?;
    Ok(c)
}

/// The kernel's stats64 of `ifname` via `ip -s -j link show`.
fn link_stats(ns: &str, ifname: &str) -> Result<IfCounters> {
    let text = ip_line(&format!("-n {ns} -s -j link show dev {ifname}"))?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| anyhow!("cannot parse `ip -s -j link show dev {ifname}` in {ns}: {e}"))?;
    let stats = &json[0]["stats64"];
    let get = |dir: &str, key: &str| {
        stats[dir][key]
            .as_u64()
            .ok_or_else(|| anyhow!("`ip -s -j link show dev {ifname}` in {ns} has no {dir}.{key}"))
    };
    Ok(IfCounters {
        rx_packets: get("rx", "packets")?,
        rx_bytes: get("rx", "bytes")?,
        tx_packets: get("tx", "packets")?,
        tx_bytes: get("tx", "bytes")?,
        rx_dropped: get("rx", "dropped")?,
        xdp_drops: 0,
    })
}

/// Sum of veth's per-queue XDP drop counters (`ethtool -S`).
fn xdp_drops(ns: &str, ifname: &str) -> Result<u64> {
    let text = in_ns(ns, "ethtool", &["-S", ifname])
        .map_err(|e| anyhow!("{e} (XDP drop counters need ethtool: apt-get install ethtool)"))?;
    Ok(sum_xdp_drops(&text))
}

fn sum_xdp_drops(ethtool_s: &str) -> u64 {
    ethtool_s
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .filter(|(k, _)| k.starts_with("rx_queue_") && k.ends_with("_xdp_drops"))
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_queue_xdp_drops() {
        let text = "NIC statistics:\n     peer_ifindex: 2\n     rx_queue_0_xdp_packets: 51\n     \
                    rx_queue_0_xdp_drops: 51\n     rx_queue_1_xdp_drops: 49\n     tx_queue_0_xdp_xmit: 3\n";
        assert_eq!(sum_xdp_drops(text), 100);
    }
}
