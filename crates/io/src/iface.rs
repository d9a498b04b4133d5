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

/// How many queues of interface `iface` (in the calling thread's network namespace) can both
/// transmit and receive: one AF_XDP socket each, so at most this many AF_XDP senders or
/// receivers.
///
/// Asks the driver (`ETHTOOL_GCHANNELS`, what `ethtool -l` shows): combined channels plus the
/// smaller of the RX-only and TX-only counts (veth reports RX and TX counts only). A driver
/// that does not report channels (`lo`, bridges, most single-queue virtual devices) counts as
/// one queue. Fails, in one line, if there is no such interface.
pub fn queue_count(iface: &str) -> anyhow::Result<u32> {
    crate::packet_socket::ifindex(iface)?;
    match channels(iface) {
        Ok(ch) => Ok((ch.combined_count + ch.rx_count.min(ch.tx_count)).max(1)),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(1),
        Err(e) => Err(anyhow!(
            "cannot read the queue count of {iface} (ETHTOOL_GCHANNELS): {e}"
        )),
    }
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

/// "N queue(s)" of `iface`, or that the count is unknown.
fn queues_of(iface: &str) -> String {
    match queue_count(iface) {
        Ok(n) => format!("{iface} has {n} queue{}", if n == 1 { "" } else { "s" }),
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
    let n = queue_count(iface).ok()?;
    (queue >= n).then(|| {
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
            assert_eq!(queue_count("qc").unwrap(), 2, "RX and TX: the smaller");
            let err = queue_count("nosuch0").unwrap_err().to_string();
            assert!(err.contains("nosuch0"), "{err}");
        });
    }
}
