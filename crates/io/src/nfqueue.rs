//! NFQUEUE, batched: the host's own packets, taken off the path by an `iptables ... -j NFQUEUE
//! --queue-num N` rule, handed to a `decide` closure in batches, and given back to the kernel
//! with their verdicts (`sonde intercept stack`).
//!
//! One [`NfQueue::process_batch`] takes up to `batch` queued packets with one `recvmmsg(2)` on
//! a `NETLINK_NETFILTER` socket (one datagram per packet), lends each packet to `decide` in place
//! in its receive buffer, and sends all the verdicts with one `sendmsg(2)`: the verdict
//! messages concatenated in arrival order (which keeps every flow in order), a rewritten
//! packet's payload sent straight from its receive buffer by an iovec. When every verdict of a
//! batch is a plain accept, one `NFQNL_MSG_VERDICT_BATCH` for the highest id replaces them (the
//! kernel numbers a queue's packets upwards, and they arrive in that order). `batch = 1` is the
//! classic program: one receive and one send per packet.
//!
//! The messages are written and read by hand ([`crate::nfqueue_msg`], a checked parser) on a
//! plain libc netlink socket: the maintained pure-Rust crate `nfq` (0.2.5) receives one packet
//! per `recv` into allocations of its own and sends each verdict with its own `sendto`, and has
//! no batch verdicts, so it cannot be the batched path. Everything is allocated when the queue
//! opens: the receive buffers (each big enough for a 64 KiB GSO packet and its headers), the
//! `mmsghdr`/`iovec` arrays and the verdict buffer; a batch allocates nothing, takes no lock,
//! and makes one `recvmmsg` and one `sendmsg` (plus one `poll` when nothing was waiting).
//!
//! Netlink messages that are not packets (an error the kernel answers to a rejected verdict, a
//! message cut short) are counted in [`NfQueue::skipped`] and never mistaken for packets; the
//! first rejected verdict is also returned as an error once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::nfqueue_msg::{self as msg, Msg, PacketMsg};
use crate::packet_socket::{poll_readable, set_option};

/// Largest batch [`NfQueue::open`] accepts.
pub const MAX_BATCH: usize = 1024;

/// Receive buffer per packet: the largest copy the kernel makes (`MAX_COPY_RANGE`, 65531 bytes)
/// plus room for every header and attribute it puts before it (a few hundred bytes).
const SLOT: usize = 68 * 1024;

/// Socket receive buffer asked for: packets wait here until received (and count against it
/// with their kernel overhead); 32 MiB holds thousands of small packets or ~450 of 64 KiB.
const RCVBUF: i32 = 32 << 20;

/// Socket send buffer asked for: a batch of rewritten packets goes out as one message, which
/// netlink refuses beyond the send buffer (such a batch is split in several sends).
const SNDBUF: i32 = 8 << 20;

/// Most iovecs one `sendmsg` takes (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// How long opening waits for the kernel to acknowledge the queue's setup.
const SETUP_TIMEOUT: Duration = Duration::from_secs(3);

/// Sequence number of the bind request (verdicts use the packet id).
const BIND_SEQ: u32 = 1;

const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;
const NETLINK_CAP_ACK: i32 = 10;

/// How to open a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfqConfig {
    /// The `--queue-num` of the iptables rule.
    pub queue: u16,
    /// Most packets taken and decided per batch, 1 to [`MAX_BATCH`].
    pub batch: usize,
    /// Most packets the kernel holds for this queue; more are dropped (or accepted, with
    /// `fail_open`).
    pub max_len: u32,
    /// Accept packets when the queue is full instead of dropping them (`NFQA_CFG_F_FAIL_OPEN`).
    pub fail_open: bool,
    /// Take GSO packets whole, without the kernel segmenting them first (`NFQA_CFG_F_GSO`):
    /// fewer, larger packets, whose transport checksum may still be partial (see
    /// [`QueuedPacket::csum_partial`]).
    pub gso: bool,
    /// Bytes of each packet copied to sonde (at most [`msg::MAX_COPY_RANGE`]): a filter that
    /// reads only headers needs a few dozen, and the copy of the rest is the largest cost of a
    /// big packet. A packet copied in part cannot be rewritten (the kernel would cut it).
    pub copy_bytes: u32,
}

impl NfqConfig {
    /// Queue `queue` with batches of 64, a kernel queue of 4096 packets, GSO on, fail-closed.
    pub fn new(queue: u16) -> NfqConfig {
        NfqConfig {
            queue,
            batch: 64,
            max_len: 4096,
            fail_open: false,
            gso: true,
            copy_bytes: msg::MAX_COPY_RANGE,
        }
    }
}

/// What becomes of a queued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NfVerdict {
    Accept,
    Drop,
    /// The payload was changed in place (same length): the kernel takes it back and sends it
    /// on. The kernel then treats the packet's checksums as complete: the caller must fix the
    /// transport checksum (or zero a UDP/IPv4 one) — see [`QueuedPacket::csum_partial`].
    /// A packet the kernel copied only in part ([`QueuedPacket::is_truncated`]) cannot be
    /// given back whole: it is dropped instead, and counted in [`SkipCounts::rewrites_refused`].
    AcceptRewritten,
}

/// One queued packet, lent to `decide` in its receive buffer.
#[derive(Debug)]
pub struct QueuedPacket<'a> {
    pub id: u32,
    /// EtherType (0x0800 IPv4, 0x86dd IPv6).
    pub hw_protocol: u16,
    /// Netfilter hook (`NF_INET_LOCAL_OUT` = 3 for an OUTPUT rule).
    pub hook: u8,
    /// The IP packet (at most its first 65531 bytes: see `wire_len`).
    pub payload: &'a mut [u8],
    /// An unsegmented GSO packet (`NFQA_SKB_GSO`): its IP length fields may not describe it.
    pub gso: bool,
    /// The transport checksum is not computed yet (`NFQA_SKB_CSUMNOTREADY`): the field holds
    /// only the pseudo-header sum, for the device to finish. A rewrite must compute it whole.
    pub csum_partial: bool,
    /// The packet's whole length; more than `payload.len()` when the kernel copied only part.
    pub wire_len: u32,
}

impl QueuedPacket<'_> {
    /// The kernel copied only the first `payload.len()` of `wire_len` bytes.
    pub fn is_truncated(&self) -> bool {
        self.wire_len as usize > self.payload.len()
    }
}

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Packets decided (each got a verdict).
    pub packets: usize,
    /// Their bytes on the wire (`wire_len`).
    pub bytes: u64,
}

/// Messages received that were not packets to decide, and verdicts changed, since the queue
/// opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipCounts {
    /// Errors the kernel answered (a rejected verdict): the first is also returned once by
    /// [`NfQueue::process_batch`].
    pub netlink_errors: u64,
    /// Messages cut short (larger than a receive buffer); such a packet, when its id was still
    /// readable, got the fail-open verdict (accept if `fail_open`, else drop).
    pub truncated: u64,
    /// Messages that did not parse, and other message types.
    pub malformed: u64,
    /// `AcceptRewritten` verdicts for truncated packets, sent as drops.
    pub rewrites_refused: u64,
}

/// A bound NFQUEUE queue. Dropping it unbinds the queue.
pub struct NfQueue {
    fd: OwnedFd,
    queue: u16,
    fail_open: bool,
    bound: bool,
    rx: RxSlab,
    out: VerdictOut,
    skipped: SkipCounts,
    error_reported: bool,
}

impl NfQueue {
    /// Opens a netlink socket, binds queue `cfg.queue` to it (whole packets, up to 65531 bytes
    /// each) and allocates every buffer the batches use.
    pub fn open(cfg: &NfqConfig) -> anyhow::Result<NfQueue> {
        if !(1..=MAX_BATCH).contains(&cfg.batch) {
            bail!(
                "NFQUEUE batch {} is out of range: choose 1 to {MAX_BATCH}",
                cfg.batch
            );
        }
        if cfg.max_len == 0 {
            bail!("NFQUEUE queue length 0 would drop every packet: choose 1 or more");
        }
        let fd = open_socket()?;
        let send_limit = socket_buffers(fd.as_raw_fd());
        let mut queue = NfQueue {
            fd,
            queue: cfg.queue,
            fail_open: cfg.fail_open,
            bound: false,
            rx: RxSlab::new(cfg.batch),
            out: VerdictOut::new(cfg.batch, cfg.queue, send_limit),
            skipped: SkipCounts::default(),
            error_reported: false,
        };
        queue.bind(cfg)?;
        Ok(queue)
    }

    /// Waits up to `wait` for the first packet (no wait when one is already there), takes up
    /// to `batch` with one `recvmmsg`, calls `decide` on each in arrival order, and sends every
    /// verdict with one `sendmsg`. `Ok` with `packets == 0` when nothing came in time. An
    /// error the kernel answered to an earlier verdict is returned once (after this batch's
    /// verdicts are sent); later ones are only counted ([`NfQueue::skipped`]).
    pub fn process_batch(
        &mut self,
        wait: Duration,
        mut decide: impl FnMut(&mut QueuedPacket) -> NfVerdict,
    ) -> io::Result<BatchStats> {
        let fd = self.fd.as_raw_fd();
        self.out.reset();
        let mut received = self.rx.receive(fd)?;
        if received == 0 && !wait.is_zero() {
            if !poll_readable(fd, wait)? {
                return Ok(BatchStats::default());
            }
            received = self.rx.receive(fd)?;
        }
        let mut stats = BatchStats::default();
        let mut first_error = None;
        let fallback = if self.fail_open {
            msg::NF_ACCEPT
        } else {
            msg::NF_DROP
        };
        let NfQueue {
            rx, out, skipped, ..
        } = &mut *self;
        for i in 0..received {
            let datagram = rx.datagram(i);
            let mut pos = Some(0);
            while let Some((message, next)) = pos.and_then(|p| msg::next_message(datagram, p)) {
                pos = next;
                match message {
                    Msg::Packet(packet) => {
                        let verdict = decide_one(datagram, &packet, &mut decide, &mut stats);
                        give_verdict(fd, out, skipped, &packet, verdict, datagram)?;
                    }
                    Msg::Error { errno: 0, .. } => {}
                    Msg::Error { errno, .. } => {
                        skipped.netlink_errors += 1;
                        first_error.get_or_insert(errno);
                    }
                    Msg::Truncated { id } => {
                        skipped.truncated += 1;
                        if let Some(id) = id {
                            out.add(fd, id, fallback, None)?;
                        }
                    }
                    Msg::Malformed { .. } | Msg::Other { .. } => skipped.malformed += 1,
                }
            }
        }
        self.out.finish(fd)?;
        match first_error {
            Some(errno) if !self.error_reported => {
                self.error_reported = true;
                let cause = io::Error::from_raw_os_error(errno);
                Err(io::Error::new(
                    cause.kind(),
                    format!(
                        "NFQUEUE {}: the kernel rejected a verdict: {cause}",
                        self.queue
                    ),
                ))
            }
            _ => Ok(stats),
        }
    }

    /// The netlink socket, readable while packets wait; it stays owned by the queue.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// What was received but not decided, since the queue opened.
    pub fn skipped(&self) -> SkipCounts {
        self.skipped
    }

    /// Binds the queue and sets it up; waits for the kernel's answer.
    fn bind(&mut self, cfg: &NfqConfig) -> anyhow::Result<()> {
        let mut flags = 0;
        if cfg.gso {
            flags |= msg::NFQA_CFG_F_GSO;
        }
        if cfg.fail_open {
            flags |= msg::NFQA_CFG_F_FAIL_OPEN;
        }
        let setup = msg::QueueSetup {
            queue: cfg.queue,
            copy_range: cfg.copy_bytes.max(1),
            max_len: cfg.max_len,
            flags,
        };
        let fd = self.fd.as_raw_fd();
        send_all(fd, &msg::bind_config(&setup, BIND_SEQ))
            .map_err(|e| anyhow::anyhow!("NFQUEUE {}: sending the bind request: {e}", cfg.queue))?;
        self.bound = true;
        match self.wait_for_ack()? {
            0 => Ok(()),
            errno => {
                self.bound = false;
                Err(bind_error(cfg.queue, errno))
            }
        }
    }

    /// Waits for the answer to the bind request: its errno (0 for success). Packets that come
    /// first (the queue is live from the bind on, before its copy mode is set) go back to the
    /// hook with NF_REPEAT, which queues them again, whole.
    fn wait_for_ack(&mut self) -> anyhow::Result<i32> {
        let fd = self.fd.as_raw_fd();
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut answer = None;
        while answer.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "NFQUEUE {}: the kernel did not answer the bind request within {SETUP_TIMEOUT:?}",
                    self.queue
                );
            }
            if !poll_readable(fd, left)? {
                continue;
            }
            self.out.reset();
            for i in 0..self.rx.receive(fd)? {
                for message in msg::messages(self.rx.datagram(i)) {
                    match message {
                        Msg::Error { errno, seq } if seq == BIND_SEQ => answer = Some(errno),
                        Msg::Packet(p) => self.out.add(fd, p.id, msg::NF_REPEAT, None)?,
                        _ => {}
                    }
                }
            }
            self.out.finish(fd)?;
        }
        Ok(answer.unwrap_or(0))
    }

    #[cfg(test)]
    pub(crate) fn send_raw(&self, bytes: &[u8]) -> io::Result<()> {
        send_all(self.fd.as_raw_fd(), bytes)
    }

    /// Datagram `i` of the last batch received, as the kernel wrote it.
    #[cfg(test)]
    pub(crate) fn last_datagram(&self, i: usize) -> &[u8] {
        let len = (self.rx.msgs[i].msg_len as usize).min(SLOT);
        &self.rx.bufs[i * SLOT..i * SLOT + len]
    }
}

impl Drop for NfQueue {
    fn drop(&mut self) {
        // Closing the socket unbinds too; saying so first is tidier for the kernel's log.
        if self.bound {
            let _ = send_all(self.fd.as_raw_fd(), &msg::unbind_config(self.queue));
        }
    }
}

/// Queues the verdict for `packet` (whose payload lies in `datagram`).
fn give_verdict(
    fd: RawFd,
    out: &mut VerdictOut,
    skipped: &mut SkipCounts,
    packet: &PacketMsg,
    verdict: NfVerdict,
    datagram: &[u8],
) -> io::Result<()> {
    // The range came from the parser, checked against this datagram.
    let payload = datagram.get(packet.payload.clone()).unwrap_or_default();
    // A payload longer than a verdict can carry cannot be given back whole either.
    let truncated =
        packet.wire_len() as usize > payload.len() || payload.len() > msg::MAX_COPY_RANGE as usize;
    match verdict {
        NfVerdict::Accept => out.add(fd, packet.id, msg::NF_ACCEPT, None),
        NfVerdict::Drop => out.add(fd, packet.id, msg::NF_DROP, None),
        NfVerdict::AcceptRewritten if truncated => {
            // Sent back, the copied part would replace (and so cut off) the whole packet.
            skipped.rewrites_refused += 1;
            out.add(fd, packet.id, msg::NF_DROP, None)
        }
        NfVerdict::AcceptRewritten => out.add(fd, packet.id, msg::NF_ACCEPT, Some(payload)),
    }
}

/// Lends the packet to `decide`; counts it.
fn decide_one(
    datagram: &mut [u8],
    packet: &PacketMsg,
    decide: &mut impl FnMut(&mut QueuedPacket) -> NfVerdict,
    stats: &mut BatchStats,
) -> NfVerdict {
    let wire_len = packet.wire_len();
    stats.packets += 1;
    stats.bytes += u64::from(wire_len);
    let payload = datagram.get_mut(packet.payload.clone()).unwrap_or_default();
    decide(&mut QueuedPacket {
        id: packet.id,
        hw_protocol: packet.hw_protocol,
        hook: packet.hook,
        payload,
        gso: packet.skb_info & msg::NFQA_SKB_GSO != 0,
        csum_partial: packet.skb_info & msg::NFQA_SKB_CSUMNOTREADY != 0,
        wire_len,
    })
}

/// The one-line error for a refused bind.
fn bind_error(queue: u16, errno: i32) -> anyhow::Error {
    // Another socket's queue answers EPERM (EBUSY in some kernels), as does a missing
    // CAP_NET_ADMIN: the queue's presence in the kernel's table tells them apart.
    let held = queue_counters(queue).is_some();
    match errno {
        libc::EBUSY => already_bound(queue),
        libc::EPERM if held => already_bound(queue),
        libc::EPERM => anyhow::anyhow!("NFQUEUE needs CAP_NET_ADMIN (run as root)"),
        _ => anyhow::anyhow!(
            "NFQUEUE {queue}: the kernel refused the queue setup: {}",
            io::Error::from_raw_os_error(errno)
        ),
    }
}

fn already_bound(queue: u16) -> anyhow::Error {
    anyhow::anyhow!(
        "NFQUEUE {queue} is already bound by another program: stop it or pick another --queue"
    )
}

/// A close-on-exec `NETLINK_NETFILTER` socket, bound (the kernel picks the port id), that
/// does not report ENOBUFS and whose error messages carry only the failed request's header.
fn open_socket() -> anyhow::Result<OwnedFd> {
    // SAFETY: socket(2) takes plain integers and returns a new descriptor or -1.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            msg::NETLINK_NETFILTER,
        )
    };
    if raw < 0 {
        let err = io::Error::last_os_error();
        bail!(
            "NFQUEUE: cannot open a netfilter netlink socket (is nfnetlink in this kernel?): {err}"
        );
    }
    // SAFETY: `raw` is a descriptor just opened and owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: all-zero is a valid sockaddr_nl (port id 0: the kernel assigns one).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: `addr` is a live sockaddr_nl and its exact size is passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if rc < 0 {
        bail!(
            "NFQUEUE: binding the netlink socket: {}",
            io::Error::last_os_error()
        );
    }
    // Without NO_ENOBUFS a full receive buffer makes the next receive fail with ENOBUFS
    // (the kernel counts those packets in user_dropped either way). CAP_ACK keeps a rejected
    // rewritten verdict's payload out of the error message that answers it.
    set_option(fd.as_raw_fd(), SOL_NETLINK, NETLINK_NO_ENOBUFS, &1i32)?;
    set_option(fd.as_raw_fd(), SOL_NETLINK, NETLINK_CAP_ACK, &1i32)?;
    Ok(fd)
}

/// Enlarges the socket's buffers (beyond the system limits where allowed: root); returns how
/// many bytes one send may carry.
fn socket_buffers(fd: RawFd) -> usize {
    for (force, plain, size) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SNDBUF),
    ] {
        if set_option(fd, libc::SOL_SOCKET, force, &size).is_err() {
            // Capped at net.core.{r,w}mem_max: smaller, still working.
            let _ = set_option(fd, libc::SOL_SOCKET, plain, &size);
        }
    }
    let mut sndbuf: i32 = 0;
    let mut len = size_of::<i32>() as u32;
    // SAFETY: `sndbuf` is a live i32 and `len` holds its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut sndbuf as *mut i32).cast(),
            &mut len,
        )
    };
    // netlink refuses a message longer than the send buffer less 32 bytes.
    let sndbuf = if rc == 0 { sndbuf.max(0) as usize } else { 0 };
    sndbuf.saturating_sub(64).max(128 * 1024)
}

/// Sends one buffer to the kernel.
fn send_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `bytes` is live for the call and its length is passed; no address (the
        // socket's default peer is the kernel).
        let rc = unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), 0) };
        if rc >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `batch` receive buffers of SLOT bytes in one allocation, and the headers pointing into them.
struct RxSlab {
    bufs: Vec<u8>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl RxSlab {
    fn new(batch: usize) -> RxSlab {
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is a valid value for both.
        let zero_iov: libc::iovec = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let zero_msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
        RxSlab {
            // Zeroed allocations this large come straight from mmap: pages the kernel never
            // writes (short packets) are never touched.
            bufs: vec![0; batch * SLOT],
            iov: vec![zero_iov; batch],
            msgs: vec![zero_msg; batch],
        }
    }

    /// Takes what is waiting, up to one datagram per buffer, without waiting; how many.
    fn receive(&mut self, fd: RawFd) -> io::Result<usize> {
        let base = self.bufs.as_mut_ptr();
        for (i, (iov, msg)) in self.iov.iter_mut().zip(&mut self.msgs).enumerate() {
            // SAFETY: i < batch, so the offset stays inside `bufs` (batch * SLOT bytes).
            iov.iov_base = unsafe { base.add(i * SLOT) }.cast();
            iov.iov_len = SLOT;
            msg.msg_hdr.msg_iov = iov;
            msg.msg_hdr.msg_iovlen = 1;
            msg.msg_len = 0;
        }
        // SAFETY: `msgs` holds msgs.len() headers, each pointing at one iovec of SLOT bytes
        // inside `bufs`; all stay live and unaliased for the call.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
            _ => Err(err),
        }
    }

    /// Datagram `i` of the last receive (cut to its buffer if the kernel's was longer).
    fn datagram(&mut self, i: usize) -> &mut [u8] {
        let len = (self.msgs[i].msg_len as usize).min(SLOT);
        &mut self.bufs[i * SLOT..i * SLOT + len]
    }
}

/// The verdicts of one batch, written one after another into one netlink buffer; rewritten
/// payloads are not copied but sent from the receive buffers through iovecs.
struct VerdictOut {
    queue: u16,
    /// Verdict headers; never grows (room for `batch` verdicts with payload headers and pads).
    bytes: Vec<u8>,
    len: usize,
    /// Where the header bytes not yet covered by an iovec start.
    chunk_start: usize,
    /// Capacity IOV_MAX, never exceeded: pushing never allocates.
    iov: Vec<libc::iovec>,
    /// Bytes of the message being built (headers and payloads).
    message_len: usize,
    send_limit: usize,
    verdicts: usize,
    last_id: u32,
    only_accepts: bool,
    sent_early: bool,
}

// SAFETY: the raw pointers in the iovecs point into buffers owned by the same NfQueue and are
// rewritten before every system call that reads them (RxSlab), or only live between `add` and
// the `finish` of the same batch (VerdictOut).
unsafe impl Send for RxSlab {}
// SAFETY: as above.
unsafe impl Send for VerdictOut {}

impl VerdictOut {
    fn new(batch: usize, queue: u16, send_limit: usize) -> VerdictOut {
        VerdictOut {
            queue,
            bytes: vec![0; batch * (msg::VERDICT_WITH_PAYLOAD_HEAD + 4) + msg::VERDICT_LEN],
            len: 0,
            chunk_start: 0,
            iov: Vec::with_capacity(IOV_MAX),
            message_len: 0,
            send_limit,
            verdicts: 0,
            last_id: 0,
            only_accepts: true,
            sent_early: false,
        }
    }

    fn reset(&mut self) {
        self.len = 0;
        self.chunk_start = 0;
        self.iov.clear();
        self.message_len = 0;
        self.verdicts = 0;
        self.only_accepts = true;
        self.sent_early = false;
    }

    /// Adds a verdict for packet `id`, with the packet's new bytes if `payload` is given (they
    /// must stay untouched until `finish`). Sends what is pending first if the message would
    /// outgrow the iovec or send-buffer limits (in order: verdicts still go in arrival order).
    fn add(&mut self, fd: RawFd, id: u32, verdict: u32, payload: Option<&[u8]>) -> io::Result<()> {
        let payload_len = payload.map_or(0, <[u8]>::len);
        let room = msg::VERDICT_WITH_PAYLOAD_HEAD + payload_len + 3;
        if self.iov.len() + 3 > IOV_MAX
            || self.message_len + room > self.send_limit
            || self.len + room.min(msg::VERDICT_WITH_PAYLOAD_HEAD + 3) > self.bytes.len()
        {
            self.send(fd)?;
            self.sent_early = true;
        }
        let (head, head_len) = msg::verdict(self.queue, id, verdict, payload.map(<[u8]>::len))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "NFQUEUE {}: a verdict cannot carry a packet longer than {} bytes",
                        self.queue,
                        msg::MAX_COPY_RANGE
                    ),
                )
            })?;
        self.bytes[self.len..self.len + head_len].copy_from_slice(&head[..head_len]);
        self.len += head_len;
        self.message_len += head_len;
        if let Some(payload) = payload {
            self.cover_chunk();
            self.iov.push(libc::iovec {
                iov_base: payload.as_ptr() as *mut libc::c_void,
                iov_len: payload.len(),
            });
            let pad = payload.len().next_multiple_of(4) - payload.len();
            self.bytes[self.len..self.len + pad].fill(0);
            self.len += pad;
            self.message_len += payload.len() + pad;
        }
        self.verdicts += 1;
        self.last_id = id;
        self.only_accepts &= verdict == msg::NF_ACCEPT && payload.is_none();
        Ok(())
    }

    /// Sends every verdict added: one message for the batch, or a single batch verdict when
    /// all were plain accepts.
    fn finish(&mut self, fd: RawFd) -> io::Result<()> {
        if self.verdicts >= 2 && self.only_accepts && !self.sent_early {
            let batch = msg::batch_verdict(self.queue, self.last_id, msg::NF_ACCEPT);
            self.bytes[..batch.len()].copy_from_slice(&batch);
            self.len = batch.len();
            self.chunk_start = 0;
            self.iov.clear();
        }
        let sent = self.send(fd);
        self.reset();
        sent
    }

    /// Points an iovec at the header bytes not yet covered.
    fn cover_chunk(&mut self) {
        if self.len > self.chunk_start {
            let base = self.bytes.as_ptr();
            self.iov.push(libc::iovec {
                // SAFETY: chunk_start < len <= bytes.len(): inside `bytes`.
                iov_base: unsafe { base.add(self.chunk_start) } as *mut libc::c_void,
                iov_len: self.len - self.chunk_start,
            });
            self.chunk_start = self.len;
        }
    }

    /// Sends what is pending with one sendmsg; empties the buffer.
    fn send(&mut self, fd: RawFd) -> io::Result<()> {
        self.cover_chunk();
        if self.iov.is_empty() {
            return Ok(());
        }
        // SAFETY: all-zero is a valid msghdr (no address: the kernel is the default peer).
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = self.iov.as_mut_ptr();
        hdr.msg_iovlen = self.iov.len();
        let result = loop {
            // SAFETY: every iovec points at live bytes: verdict headers in `bytes`, or payloads
            // in the receive buffers, which nothing writes until the batch is sent.
            let rc = unsafe { libc::sendmsg(fd, &hdr, 0) };
            if rc >= 0 {
                break Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                break Err(err);
            }
        };
        self.len = 0;
        self.chunk_start = 0;
        self.iov.clear();
        self.message_len = 0;
        result
    }
}

/// A queue's counters, from the kernel's table of queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Packets waiting for a verdict now.
    pub queue_total: u32,
    /// Packets dropped (or, fail-open, accepted unseen) because the queue was full.
    pub queue_dropped: u64,
    /// Packets dropped because the socket's receive buffer was full.
    pub user_dropped: u64,
}

/// The counters of queue `queue` from `/proc/net/netfilter/nfnetlink_queue` of the calling
/// thread's network namespace; `None` when no program has bound it (or nfnetlink_queue is not
/// loaded).
pub fn queue_counters(queue: u16) -> Option<QueueCounters> {
    // thread-self: /proc/net (self) would show the namespace of the process's main thread.
    let table = std::fs::read_to_string("/proc/thread-self/net/netfilter/nfnetlink_queue").ok()?;
    parse_queue_table(&table, queue)
}

/// Reads one queue's line of the table: queue number, port id, waiting packets, copy mode,
/// copy range, queue drops, user drops, last id, 1.
fn parse_queue_table(table: &str, queue: u16) -> Option<QueueCounters> {
    table.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()?.parse::<u16>().ok()? != queue {
            return None;
        }
        let mut fields = fields.skip(1);
        let queue_total = fields.next()?.parse().ok()?;
        let mut fields = fields.skip(2);
        Some(QueueCounters {
            queue_total,
            queue_dropped: fields.next()?.parse().ok()?,
            user_dropped: fields.next()?.parse().ok()?,
        })
    })
}

#[cfg(test)]
mod tests;
