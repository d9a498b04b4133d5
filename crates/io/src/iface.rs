//! Facts about an interface of the calling thread's network namespace that decide how it can be
//! driven: how many queues it has (an AF_XDP socket binds to one queue, and the kernel allows one
//! socket per queue).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::anyhow;

/// `ETHTOOL_GCHANNELS` of `<linux/ethtool.h>`.
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// `struct ethtool_channels` of `<linux/ethtool.h>`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

/// The receive and transmit queues of an interface, from its driver's channel counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueCounts {
    /// Queues frames arrive on: combined channels plus RX-only ones.
    pub rx: u32,
    /// Queues frames can leave by: combined channels plus TX-only ones.
    pub tx: u32,
}

impl QueueCounts {
    /// From `ethtool -l` figures: a combined channel is one queue each way, an RX-only or
    /// TX-only channel one queue its way (veth reports only these). Every interface has at
    /// least one queue each way, whatever its driver reports.
    fn from_channels(combined: u32, rx_only: u32, tx_only: u32) -> QueueCounts {
        QueueCounts {
            rx: combined.saturating_add(rx_only).max(1),
            tx: combined.saturating_add(tx_only).max(1),
        }
    }

    /// One queue each way, for drivers that report no channels (`lo`, bridges, most
    /// single-queue virtual devices).
    const SINGLE: QueueCounts = QueueCounts { rx: 1, tx: 1 };
}

/// The receive and transmit queue counts of interface `iface` (in the calling thread's network
/// namespace), from its driver (`ETHTOOL_GCHANNELS`, what `ethtool -l` shows). A driver that
/// does not report channels counts as one queue each way. Fails, in one line, if there is no
/// such interface.
pub fn queue_counts(iface: &str) -> anyhow::Result<QueueCounts> {
    crate::packet_socket::ifindex(iface)?;
    match channels(iface) {
        Ok(ch) => Ok(QueueCounts::from_channels(
            ch.combined_count,
            ch.rx_count,
            ch.tx_count,
        )),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(QueueCounts::SINGLE),
        Err(e) => Err(anyhow!(
            "cannot read the queue count of {iface} (ETHTOOL_GCHANNELS): {e}"
        )),
    }
}

/// How many receive queues interface `iface` has: every one of them can deliver frames, so a
/// receiver that must see all traffic binds one AF_XDP socket on each (the kernel allows one
/// socket per queue). See [`queue_counts`].
pub fn queue_count(iface: &str) -> anyhow::Result<u32> {
    Ok(queue_counts(iface)?.rx)
}

/// The driver's channel counts of `iface`.
fn channels(iface: &str) -> io::Result<EthtoolChannels> {
    // Any socket of this namespace will do for the ioctl.
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: ifreq is plain old data; all-zero is a valid starting value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    for (dst, &src) in req.ifr_name.iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut ch as *mut EthtoolChannels).cast();
    // SAFETY: `req` names the interface (NUL-terminated: zeroed beyond the name) and points at
    // `ch`, a live ethtool_channels that the kernel fills; both outlive the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ch)
}

/// "N queue(s)" of `iface` (receive and transmit counts when they differ), or that the count
/// is unknown.
fn queues_of(iface: &str) -> String {
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    match queue_counts(iface) {
        Ok(QueueCounts { rx, tx }) if rx == tx => format!("{iface} has {rx} queue{}", plural(rx)),
        Ok(QueueCounts { rx, tx }) => format!(
            "{iface} has {rx} receive queue{} and {tx} transmit queue{}",
            plural(rx),
            plural(tx)
        ),
        Err(_) => format!("{iface}'s queue count is unknown"),
    }
}

/// One line for an AF_XDP socket that stayed busy: which queue, why, and what to do.
pub(crate) fn busy_queue_error(iface: &str, queue: u32, waited_ms: u64) -> anyhow::Error {
    anyhow!(
        "AF_XDP on {iface} queue {queue} stayed busy for {waited_ms} ms: another AF_XDP socket is bound to that queue (the kernel allows one per queue; {}): run no more threads than queues, or stop the other program using it",
        queues_of(iface)
    )
}

/// One line for a queue index the interface does not have, if that is why binding failed.
pub(crate) fn missing_queue_error(iface: &str, queue: u32) -> Option<anyhow::Error> {
    // The kernel binds a socket to a queue below either count, but sonde's sockets both
    // receive and send: the queue must exist both ways.
    let n = queue_counts(iface).ok()?;
    (queue >= n.rx.min(n.tx)).then(|| {
        anyhow!(
            "AF_XDP on {iface}: there is no queue {queue} ({}): run no more threads than queues",
            queues_of(iface)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::in_private_netns;

    #[test]
    fn receive_queues_are_combined_plus_rx_only_channels() {
        let count = |combined, rx, tx| QueueCounts::from_channels(combined, rx, tx);
        // veth: RX-only and TX-only channels, no combined ones.
        assert_eq!(
            count(0, 4, 2),
            QueueCounts { rx: 4, tx: 2 },
            "more RX than TX"
        );
        assert_eq!(count(0, 2, 4), QueueCounts { rx: 2, tx: 4 });
        // Most NICs: combined channels only.
        assert_eq!(count(8, 0, 0), QueueCounts { rx: 8, tx: 8 });
        // Combined channels plus RX-only ones: every one receives.
        assert_eq!(count(4, 2, 0), QueueCounts { rx: 6, tx: 4 });
        // TX-only channels add no receive queue.
        assert_eq!(count(4, 0, 2), QueueCounts { rx: 4, tx: 6 });
        // A driver that reports nothing still has one queue each way.
        assert_eq!(count(0, 0, 0), QueueCounts { rx: 1, tx: 1 });
        assert_eq!(count(0, 0, 3), QueueCounts { rx: 1, tx: 3 });
        assert_eq!(count(u32::MAX, 1, 1).rx, u32::MAX, "no overflow");
    }

    #[test]
    fn counts_the_queues_of_this_namespace() {
        in_private_netns(|| {
            assert_eq!(queue_count("lo").unwrap(), 1, "lo reports no channels");
            let ip = |args: &str| {
                let ok = std::process::Command::new("ip")
                    .args(args.split_whitespace())
                    .status()
                    .expect("running ip")
                    .success();
                assert!(ok, "ip {args}");
            };
            ip("link add qa numtxqueues 3 numrxqueues 3 type veth peer name qb numtxqueues 1 numrxqueues 1");
            assert_eq!(queue_count("qa").unwrap(), 3);
            assert_eq!(queue_count("qb").unwrap(), 1);
            ip("link add qc numtxqueues 4 numrxqueues 2 type veth peer name qd");
            assert_eq!(queue_count("qc").unwrap(), 2, "two receive queues");
            assert_eq!(queue_counts("qc").unwrap(), QueueCounts { rx: 2, tx: 4 });
            ip("link add qe numtxqueues 2 numrxqueues 4 type veth peer name qf");
            assert_eq!(
                queue_count("qe").unwrap(),
                4,
                "more receive than transmit queues"
            );
            let err = queue_count("nosuch0").unwrap_err().to_string();
            assert!(err.contains("nosuch0"), "{err}");
        });
    }
}
