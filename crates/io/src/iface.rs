//! Facts about an interface of the calling thread's network namespace that decide how it can be
//! driven: how many queues it has (an AF_XDP socket binds to one queue, and the kernel allows one
//! socket per queue); and what it dropped itself, by its own counters ([`LinkCounters`]).

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

/// The loss counters an interface keeps itself: fields of the kernel's `struct
/// rtnl_link_stats64`, what `ip -s link` shows and `/sys/class/net/IF/statistics/` names. They
/// count every frame through the interface, not only a tool's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkDrops {
    /// `tx_dropped`: frames the interface or its driver dropped on the way out (a veth: its
    /// peer could not take them, its backlog full or the peer down).
    pub tx_dropped: u64,
    /// `rx_dropped`: frames dropped on the way in after the interface had them (the kernel's
    /// backlog was full; on a NIC also frames no protocol wanted).
    pub rx_dropped: u64,
    /// `rx_missed_errors`: frames the NIC had no receive buffer for (its ring was full).
    pub rx_missed_errors: u64,
    /// `rx_fifo_errors`: the NIC's receive FIFO overran.
    pub rx_fifo_errors: u64,
}

impl LinkDrops {
    /// What was added since `start`. A counter that went back (the interface was made anew)
    /// counts as nothing added.
    pub fn since(&self, start: &LinkDrops) -> LinkDrops {
        LinkDrops {
            tx_dropped: self.tx_dropped.saturating_sub(start.tx_dropped),
            rx_dropped: self.rx_dropped.saturating_sub(start.rx_dropped),
            rx_missed_errors: self.rx_missed_errors.saturating_sub(start.rx_missed_errors),
            rx_fifo_errors: self.rx_fifo_errors.saturating_sub(start.rx_fifo_errors),
        }
    }

    /// Frames lost on the way in, by any of the receive counters.
    pub fn rx_total(&self) -> u64 {
        self.rx_dropped + self.rx_missed_errors + self.rx_fifo_errors
    }
}

/// Reads the loss counters of one interface through a route netlink socket (`RTM_GETLINK`).
///
/// Not from `/sys/class/net`: sysfs shows the network namespace it was mounted in, not the
/// calling thread's, so after `setns` into a lab (what `--lab` does) it would name another
/// namespace's interfaces. A netlink socket belongs to the namespace of the thread that opened
/// it, whichever thread reads through it later.
pub struct LinkCounters {
    socket: OwnedFd,
    iface: String,
    ifindex: u32,
    seq: u32,
    buf: Vec<u8>,
}

/// How long a reading waits for the kernel's answer (it answers at once; this only bounds a
/// surprise).
const LINK_READ_TIMEOUT: libc::timeval = libc::timeval {
    tv_sec: 1,
    tv_usec: 0,
};

impl LinkCounters {
    /// A reader of `iface`'s counters in the calling thread's network namespace; fails in one
    /// line if there is no such interface.
    pub fn open(iface: &str) -> anyhow::Result<LinkCounters> {
        let ifindex = crate::packet_socket::ifindex(iface)?;
        let socket = open_route_socket().map_err(|e| {
            anyhow!("cannot open a route netlink socket to read {iface}'s counters: {e}")
        })?;
        Ok(LinkCounters {
            socket,
            iface: iface.to_string(),
            ifindex,
            seq: 0,
            buf: vec![0; 32 * 1024],
        })
    }

    /// The interface's counters now (two system calls: call it once a second at most).
    pub fn read(&mut self) -> anyhow::Result<LinkDrops> {
        self.seq = self.seq.wrapping_add(1);
        let request = rtnl::link_request(self.ifindex, self.seq);
        let fd = self.socket.as_raw_fd();
        // SAFETY: `request` is a live buffer of the length passed.
        let rc = unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) };
        if rc < 0 {
            return Err(self.error(io::Error::last_os_error()));
        }
        // Answers to an earlier request that timed out may still be queued: skip them.
        for _ in 0..8 {
            // SAFETY: `buf` is a live, writable buffer of the length passed; MSG_TRUNC only
            // makes the call return the datagram's full length.
            let n = unsafe {
                libc::recv(
                    fd,
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                return Err(self.error(io::Error::last_os_error()));
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(self.error(io::Error::other(format!(
                    "the answer ({n} bytes) is larger than the buffer"
                ))));
            }
            match rtnl::parse_link_reply(&self.buf[..n], self.seq, self.ifindex) {
                rtnl::Reply::Drops(d) => return Ok(d),
                rtnl::Reply::Error(errno) => {
                    return Err(self.error(io::Error::from_raw_os_error(errno)))
                }
                rtnl::Reply::Malformed(why) => return Err(self.error(io::Error::other(why))),
                rtnl::Reply::NotOurs => continue,
            }
        }
        Err(self.error(io::Error::other("no answer to the request")))
    }

    fn error(&self, e: io::Error) -> anyhow::Error {
        anyhow!(
            "cannot read the counters of {} (RTM_GETLINK): {e}",
            self.iface
        )
    }
}

/// A `NETLINK_ROUTE` socket of the calling thread's network namespace, that waits at most
/// [`LINK_READ_TIMEOUT`] for an answer.
fn open_route_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers and returns a new descriptor or -1.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    crate::packet_socket::set_option(
        socket.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVTIMEO,
        &LINK_READ_TIMEOUT,
    )?;
    Ok(socket)
}

/// The route netlink messages of a link reading, written and read by hand (safe code): a
/// `nlmsghdr` (host byte order), an `ifinfomsg`, then attributes (`nlattr`, each padded to 4
/// bytes), as `linux/netlink.h` and `linux/rtnetlink.h` lay them out. The reader checks every
/// length against what is there, so no input can make it panic.
mod rtnl {
    use super::LinkDrops;

    const NLMSG_HDRLEN: usize = 16;
    const IFINFOMSG_LEN: usize = 16;
    const NLA_HDRLEN: usize = 4;
    const NLA_TYPE_MASK: u16 = 0x3fff;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    pub(super) const RTM_NEWLINK: u16 = 16;
    const RTM_GETLINK: u16 = 18;
    const NLM_F_REQUEST: u16 = 1;
    pub(super) const IFLA_STATS64: u16 = 23;

    /// Indices of the fields read, in `struct rtnl_link_stats64` (an array of u64).
    const RX_DROPPED: usize = 6;
    const TX_DROPPED: usize = 7;
    const RX_FIFO_ERRORS: usize = 14;
    const RX_MISSED_ERRORS: usize = 15;

    /// `RTM_GETLINK` for the interface with index `ifindex`.
    pub(super) fn link_request(ifindex: u32, seq: u32) -> [u8; NLMSG_HDRLEN + IFINFOMSG_LEN] {
        const LEN: usize = NLMSG_HDRLEN + IFINFOMSG_LEN;
        let mut m = [0u8; LEN];
        m[0..4].copy_from_slice(&(LEN as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
        m[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        // ifinfomsg: family AF_UNSPEC, type 0, the index, flags and change 0.
        m[20..24].copy_from_slice(&ifindex.to_ne_bytes());
        m
    }

    /// What one datagram from the kernel says.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Reply {
        Drops(LinkDrops),
        /// The kernel refused the request (a positive errno).
        Error(i32),
        /// An answer to our request that does not add up.
        Malformed(&'static str),
        /// Nothing that answers request `seq` about our interface.
        NotOurs,
    }

    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }

    /// Reads the answer to request `seq` about interface `ifindex` from `datagram`.
    pub(super) fn parse_link_reply(datagram: &[u8], seq: u32, ifindex: u32) -> Reply {
        let mut rest = datagram;
        while rest.len() >= NLMSG_HDRLEN {
            let Some(len) = u32_at(rest, 0).map(|l| l as usize) else {
                break;
            };
            if len < NLMSG_HDRLEN || len > rest.len() {
                return Reply::Malformed("a message length beyond the datagram");
            }
            let (msg, kind) = (&rest[..len], u16_at(rest, 4).unwrap_or(0));
            if u32_at(msg, 8) == Some(seq) {
                match kind {
                    NLMSG_ERROR => {
                        return match u32_at(msg, NLMSG_HDRLEN).map(|e| e as i32) {
                            Some(0) => Reply::NotOurs, // an acknowledgement
                            Some(e) => Reply::Error(e.saturating_neg()),
                            None => Reply::Malformed("an error message without its code"),
                        };
                    }
                    RTM_NEWLINK if u32_at(msg, NLMSG_HDRLEN + 4) == Some(ifindex) => {
                        return link_stats(&msg[NLMSG_HDRLEN + IFINFOMSG_LEN..]);
                    }
                    NLMSG_DONE => return Reply::NotOurs,
                    _ => {}
                }
            }
            // Messages are padded to 4 bytes.
            rest = rest.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        }
        Reply::NotOurs
    }

    /// The drop counters of `IFLA_STATS64` among a link message's attributes.
    fn link_stats(mut attrs: &[u8]) -> Reply {
        while attrs.len() >= NLA_HDRLEN {
            let len = u16_at(attrs, 0).unwrap_or(0) as usize;
            let kind = u16_at(attrs, 2).unwrap_or(0) & NLA_TYPE_MASK;
            if len < NLA_HDRLEN || len > attrs.len() {
                return Reply::Malformed("an attribute length beyond the message");
            }
            if kind == IFLA_STATS64 {
                let stats = &attrs[NLA_HDRLEN..len];
                let field = |i: usize| u64_at(stats, i * 8);
                return match (
                    field(TX_DROPPED),
                    field(RX_DROPPED),
                    field(RX_MISSED_ERRORS),
                    field(RX_FIFO_ERRORS),
                ) {
                    (Some(tx), Some(rx), Some(missed), Some(fifo)) => Reply::Drops(LinkDrops {
                        tx_dropped: tx,
                        rx_dropped: rx,
                        rx_missed_errors: missed,
                        rx_fifo_errors: fifo,
                    }),
                    _ => Reply::Malformed("IFLA_STATS64 shorter than its counters"),
                };
            }
            attrs = attrs.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        }
        Reply::Malformed("a link message without IFLA_STATS64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::in_private_netns;

    /// Runs `ip` with `args` (in the calling thread's namespace), which must succeed.
    fn ip(args: &str) {
        let ok = std::process::Command::new("ip")
            .args(args.split_whitespace())
            .status()
            .expect("running ip")
            .success();
        assert!(ok, "ip {args}");
    }

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

    /// A link message as the kernel writes it: `nlmsghdr`, `ifinfomsg` (index `ifindex`), an
    /// `IFLA_IFNAME` attribute, then `IFLA_STATS64` whose 23 counters are their own index
    /// times 1000 plus one (so a field read at the wrong place shows it).
    fn link_message(seq: u32, ifindex: u32) -> Vec<u8> {
        let mut attrs = Vec::new();
        // IFLA_IFNAME "sx0\0": 8 bytes with its header, no padding needed.
        attrs.extend_from_slice(&8u16.to_ne_bytes());
        attrs.extend_from_slice(&3u16.to_ne_bytes());
        attrs.extend_from_slice(b"sx0\0");
        // IFLA_IFALIAS of 5 bytes, padded to 8: the reader must skip the padding.
        attrs.extend_from_slice(&5u16.to_ne_bytes());
        attrs.extend_from_slice(&20u16.to_ne_bytes());
        attrs.extend_from_slice(&[b'x', 0, 0, 0]);
        let stats: Vec<u8> = (0..23u64)
            .flat_map(|i| (i * 1000 + 1).to_ne_bytes())
            .collect();
        attrs.extend_from_slice(&((4 + stats.len()) as u16).to_ne_bytes());
        attrs.extend_from_slice(&rtnl::IFLA_STATS64.to_ne_bytes());
        attrs.extend_from_slice(&stats);
        let mut m = Vec::new();
        m.extend_from_slice(&((32 + attrs.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&rtnl::RTM_NEWLINK.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[0, 0, 1, 0]); // family, pad, type ARPHRD_ETHER
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&[0; 8]); // flags, change
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn the_drop_counters_are_read_from_their_places_in_stats64() {
        use rtnl::{parse_link_reply, Reply};
        // struct rtnl_link_stats64: rx_dropped is field 6, tx_dropped 7, rx_fifo_errors 14,
        // rx_missed_errors 15.
        let want = LinkDrops {
            tx_dropped: 7001,
            rx_dropped: 6001,
            rx_missed_errors: 15001,
            rx_fifo_errors: 14001,
        };
        let msg = link_message(9, 4);
        assert_eq!(parse_link_reply(&msg, 9, 4), Reply::Drops(want));
        // Another request's answer, or another interface's, is not ours.
        assert_eq!(parse_link_reply(&msg, 8, 4), Reply::NotOurs);
        assert_eq!(parse_link_reply(&msg, 9, 5), Reply::NotOurs);
        // Ours after another message in the same datagram.
        let mut two = link_message(8, 4);
        two.extend_from_slice(&msg);
        assert_eq!(parse_link_reply(&two, 9, 4), Reply::Drops(want));
        // The kernel's refusal: nlmsgerr with -ENODEV.
        let mut err = Vec::new();
        err.extend_from_slice(&36u32.to_ne_bytes());
        err.extend_from_slice(&2u16.to_ne_bytes());
        err.extend_from_slice(&0u16.to_ne_bytes());
        err.extend_from_slice(&9u32.to_ne_bytes());
        err.extend_from_slice(&0u32.to_ne_bytes());
        err.extend_from_slice(&(-libc::ENODEV).to_ne_bytes());
        err.extend_from_slice(&[0; 16]);
        assert_eq!(parse_link_reply(&err, 9, 4), Reply::Error(libc::ENODEV));
    }

    #[test]
    fn no_datagram_makes_the_link_reader_panic() {
        use rtnl::{parse_link_reply, Reply};
        let msg = link_message(9, 4);
        // Every cut of a good message, and every byte of it changed, reads as something.
        for cut in 0..msg.len() {
            let r = parse_link_reply(&msg[..cut], 9, 4);
            assert!(!matches!(r, Reply::Drops(_)), "cut at {cut}: {r:?}");
        }
        for at in 0..msg.len() {
            for v in [0u8, 1, 3, 0x7f, 0xff] {
                let mut bad = msg.clone();
                bad[at] = v;
                let _ = parse_link_reply(&bad, 9, 4);
            }
        }
        // A stats attribute too short for rx_missed_errors is reported, not read past.
        let mut short = msg.clone();
        let stats_len_at = 32 + 8 + 8;
        short[stats_len_at..stats_len_at + 2].copy_from_slice(&(4u16 + 15 * 8).to_ne_bytes());
        let total = (stats_len_at + 4 + 15 * 8) as u32;
        short.truncate(total as usize);
        short[0..4].copy_from_slice(&total.to_ne_bytes());
        assert!(matches!(
            parse_link_reply(&short, 9, 4),
            Reply::Malformed(_)
        ));
    }

    #[test]
    fn deltas_count_what_was_added_and_nothing_when_a_counter_went_back() {
        let start = LinkDrops {
            tx_dropped: 100,
            rx_dropped: 5,
            rx_missed_errors: 7,
            rx_fifo_errors: 0,
        };
        let end = LinkDrops {
            tx_dropped: 6213,
            rx_dropped: 567,
            rx_missed_errors: 2, // the interface was made anew meanwhile
            rx_fifo_errors: 3,
        };
        let d = end.since(&start);
        assert_eq!(
            d,
            LinkDrops {
                tx_dropped: 6113,
                rx_dropped: 562,
                rx_missed_errors: 0,
                rx_fifo_errors: 3,
            }
        );
        assert_eq!(d.rx_total(), 565);
        assert_eq!(start.since(&start), LinkDrops::default());
    }

    #[test]
    fn a_veth_whose_peer_is_down_counts_each_frame_sent_in_tx_dropped() {
        use crate::FrameTx;
        in_private_netns(|| {
            // qa is up, its peer qb down: qa has no carrier, so the kernel drops every frame
            // handed to qa's driver and counts it in qa's tx_dropped.
            ip("link add qa type veth peer name qb");
            ip("link set qa up");
            let mut counters = LinkCounters::open("qa").unwrap();
            let start = counters.read().unwrap();
            // One send per frame, each dropped once (a packet ring would send a dropped frame
            // again, and count it again).
            let mut tx =
                crate::AnyTx::open(crate::BackendKind::Sendto, &crate::IoConfig::new("qa"))
                    .unwrap();
            let frame = crate::test_support::synack(crate::test_support::SCAN4, 61000);
            let mut sent = 0;
            for _ in 0..5 {
                sent += tx
                    .tx_batch(1, |_, buf| {
                        buf[..frame.len()].copy_from_slice(&frame);
                        frame.len()
                    })
                    .unwrap();
            }
            tx.flush().unwrap();
            let d = counters.read().unwrap().since(&start);
            assert_eq!(sent, 5);
            assert_eq!(
                d,
                LinkDrops {
                    tx_dropped: 5,
                    ..LinkDrops::default()
                }
            );
            let err = LinkCounters::open("nosuch0").err().unwrap().to_string();
            assert!(err.contains("nosuch0"), "{err}");
        });
    }
}
