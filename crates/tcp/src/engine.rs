//! The engine: the client's TCP state machine over the connection table, the timer wheel, the
//! receive-buffer pool and the transmit queue.
//!
//! - A SYN-ACK whose ACK matches the cookie creates the connection; the handshake's ACK and the
//!   request are queued at once (the request in the ACK with `request_in_ack`).
//! - Received data goes into the connection's buffer in order; data ahead of a gap is kept
//!   and merged when the gap fills, and so is a FIN ahead of a gap. ACKs are immediate for
//!   the first segments of a reply (quick ACKs), then delayed (every second segment or
//!   `delayed_ack_us`); immediate for out-of-order data, filled holes, duplicates and FIN;
//!   and carry SACK blocks while holes exist, as many as fit the peer's MSS with the data.
//! - Segments are checked as RFC 9293, 7323 and 5961 ask: PAWS (one tick of slack), the
//!   receive window (whose ACK field still counts when our window is zero), an RST only at
//!   the next expected sequence number, an ACK only of what we sent. An RST or SYN elsewhere in
//!   the window and an ACK out of range get a challenge ACK, at most
//!   [`CHALLENGE_ACKS_PER_SECOND`] for the whole run (the engines made from one [`Config`]
//!   share a [`ChallengeBudget`]).
//! - The request (or a session's bytes) is retransmitted on an RTO from the handshake's RTT
//!   (min 200 ms, doubling, at most `max_retransmits` in a row), or probed byte by byte while
//!   the peer's window is zero (probes back off the same way but do not count against
//!   `max_retransmits`). As Linux re-arms its timer, the schedule starts over at an ACK that
//!   advances and when new bytes leave with nothing in flight (bytes sent while others are
//!   in flight keep the running timer): `from + RTO·(2^(k+1) − 1)` after k retransmissions
//!   and probes since `from`. `from` is the SYN-ACK's time (the entry's `since_us`) until the
//!   schedule first starts over; from then on it is kept in the connection's buffer (taken
//!   then if it has none), as the 56-byte entry has no room for a send time.
//! - SND.NXT is the send limit (`acked` plus the peer's window, at most the request): a
//!   window that shrinks does not lower it, and a zero-window probe's byte adds one. ACKs
//!   are checked against it, and our FIN goes there.
//! - A connection ends as `Success` (the app says the reply is complete, `max_bytes` reached
//!   — then `truncated` —, or the server's FIN after data), `Closed` (FIN before data),
//!   `Reset` (RST) or `DataTimeout`; its outcome is queued at once and closed by one RST, or by
//!   FIN (after the last byte sent) with a bounded wait for the peer's ACK and FIN (new data
//!   meanwhile gets an RST, as RFC 1122 4.2.2.13 asks).
//!
//! Segments to send are queued as small descriptors and rendered by [`Engine::write_tx`]
//! straight into the caller's buffer, from the connection's state at that moment (so an ACK
//! carries the latest `rcv_nxt`). One descriptor is exactly one frame. A connection may end
//! after segments were queued for it in the same pass (an RST or FIN later in the batch, a
//! timeout in `on_tick`): they still go out as queued, before the RST or FIN that closes it,
//! so that its sequence numbers hold. Until the queue is written, its freed entry stays
//! intact and its session's buffer (which data segments cut their bytes from) is not reused,
//! even if its outcome was drained.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sonde_wire::TcpFlags;

use crate::conn::{Bits, Conn, State, NIL, UNLINKED};
use crate::rxbuf::{Placed, Pool};
use crate::segment::icmp::{IcmpError, IcmpKind};
use crate::segment::{self, Header, Link, Parsed, Seg};
use crate::table::{Table, Vacancy, MAX_CAPACITY};
use crate::timer::Wheel;
use crate::{App, CloseMode, Config, Outcome, Rx, Session, Stats, Status, MAX_SESSION_SEND};

/// The longest request, and the largest payload of any segment the engine sends: with IPv6
/// and 40 bytes of TCP options a frame is then at most 1514 bytes.
pub const MAX_REQUEST_LEN: usize = 1400;
const MIN_RTO_US: u64 = 200_000;
const MAX_RTO_US: u64 = 60_000_000;
/// RFC 6298's RTO before any RTT is known (the peer did not echo our timestamp).
const INITIAL_RTO_US: u64 = 1_000_000;
/// Times are kept as the low 32 bits of µs and compared as differences (71 minutes), so no
/// timeout may exceed this.
const MAX_TIMEOUT_US: u64 = 30 * 60 * 1_000_000;
/// PAWS takes a TSval up to this many ticks behind TS.Recent (Linux's `TCP_PAWS_WINDOW`).
const PAWS_SLACK: i32 = 1;
/// RFC 1122: an ACK is delayed at most 500 ms.
const MAX_DELAYED_ACK_US: u64 = 500_000;
const TIMESTAMPS_LEN: u32 = 12;
/// Largest payload when the peer sent no MSS option (RFC 9293; RFC 8200 for IPv6).
const DEFAULT_MSS_V4: u16 = 536;
const DEFAULT_MSS_V6: u16 = 1220;
const MIN_PEER_MSS: u16 = 64;
/// The smallest path MTU a fragmentation needed lowers an IPv4 connection to (Linux's
/// `net.ipv4.route.min_pmtu` default, 512 + 20 + 20: an MSS of 512): a forged or broken "MTU
/// 68" (or an RFC 1191-less router's 0) must not make us send tiny segments.
const MIN_PMTU_V4: u32 = 552;
/// IPv6's minimum link MTU (RFC 8200): a Packet Too Big below it is ignored (RFC 8201, and
/// Linux's `tcp_v6_err`).
const MIN_PMTU_V6: u32 = 1280;
/// IP and TCP headers without options, which the path MTU less the MSS leaves room for.
const HEADERS_V4: u32 = 20 + 20;
const HEADERS_V6: u32 = 40 + 20;
/// RFC 5961's challenge ACKs a run sends per second at most, all connections of all the
/// engines sharing a [`ChallengeBudget`] together (Linux's `net.ipv4.tcp_challenge_ack_limit`
/// defaults to 1000 for the host): forged segments must not turn into a flood of ACKs.
pub const CHALLENGE_ACKS_PER_SECOND: u32 = 1000;

/// The challenge ACKs left in the current second, shared by every engine made from clones of
/// one [`Config`] (grab's threads): [`CHALLENGE_ACKS_PER_SECOND`] is then the run's limit, not
/// one per thread. One atomic word (the second, and the ACKs spent in it), touched only when
/// a challenge ACK is due, so engines share it without a lock. Engines sharing a budget must
/// share their clock (`now_us`).
#[derive(Clone, Debug, Default)]
pub struct ChallengeBudget(Arc<AtomicU64>);

impl ChallengeBudget {
    /// Takes one challenge ACK from the budget of the second of `now_us`; false when it is
    /// spent. A clock a little behind another engine's (the second has just turned there)
    /// spends from the newer second.
    pub fn take(&self, now_us: u64) -> bool {
        let second = (now_us / 1_000_000).min(u64::from(u32::MAX));
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let (current, spent) = (word >> 32, word & u64::from(u32::MAX));
            let (second, spent) = if second > current {
                (second, 0)
            } else {
                (current, spent)
            };
            if spent >= u64::from(CHALLENGE_ACKS_PER_SECOND) {
                return false;
            }
            let next = (second << 32) | (spent + 1);
            match self
                .0
                .compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => word = now,
            }
        }
    }
}

/// The first in-order data segments of a reply are ACKed at once, not delayed (Linux's quick
/// ACKs at the start, up to 16): a server that waits for an ACK before sending more (Nagle, a
/// small first window) is not held up by our delayed-ACK timer.
const QUICK_ACKS: u8 = 16;
/// A data segment's SACK option: two NOPs, kind and length, then 8 bytes a block.
const SACK_OPTION_LEN: u32 = 4;
const SACK_BLOCK_LEN: u32 = 8;

/// What a connection's cookie gives: our ISN and our port. Computed once per received segment
/// or timer event and carried by the descriptors, so rendering needs no SipHash.
#[derive(Clone, Copy, Debug)]
struct Cookie {
    iss: u32,
    port: u16,
}

/// A segment of a connection, rendered from the connection's state when it is written.
#[derive(Clone, Copy, Debug)]
enum ConnSeg {
    /// A pure ACK; `before_request` for the handshake's, which goes out ahead of the request
    /// and so carries the sequence number of its first byte.
    Ack {
        before_request: bool,
    },
    /// Bytes `[off, off + len)` of what the connection sends: cut from the buffer `sent`
    /// names for a session (its bytes stay there until the queue is written, even if the
    /// connection ends first), from the app's request when `sent` is [`NIL`].
    Data {
        off: u16,
        len: u16,
        sent: u32,
    },
    Fin,
}

/// A segment to send: a connection's or a bare RST.
#[derive(Clone, Copy, Debug)]
enum Tx {
    Conn {
        idx: u32,
        ck: Cookie,
        seg: ConnSeg,
    },
    Rst {
        target: IpAddr,
        port: u16,
        our_port: u16,
        seq: u32,
        ack: Option<u32>,
    },
}

/// The transmit queue: a vector drained from the front and cleared when empty, so its
/// capacity is reused pass after pass.
#[derive(Default)]
struct TxQueue {
    items: Vec<Tx>,
    head: usize,
}

impl TxQueue {
    fn push(&mut self, tx: Tx) {
        self.items.push(tx);
    }

    fn pop(&mut self) -> Option<Tx> {
        let tx = *self.items.get(self.head)?;
        self.head += 1;
        if self.head == self.items.len() {
            self.items.clear();
            self.head = 0;
        }
        Some(tx)
    }

    fn len(&self) -> usize {
        self.items.len() - self.head
    }
}

/// The engine: connection table, timers, receive buffers, and the queue of segments to send.
pub struct Engine<A: App> {
    app: A,
    cfg: Config,
    link: Link,
    table: Table,
    wheel: Wheel,
    pool: Pool,
    tx: TxQueue,
    /// Ended connections not yet drained, with their buffers.
    done: Vec<(Outcome, u32)>,
    /// Drained sessions' buffers that queued segments still cut bytes from: released once the
    /// queue is written.
    held_buffers: Vec<u32>,
    /// Connections that advertised a zero window for lack of buffer memory.
    starved: Vec<u32>,
    /// Scratch for rendering requests.
    request: Vec<u8>,
    /// Scratch a new session writes its first bytes into (then swapped into its buffer).
    session_first: Vec<u8>,
    stats: Stats,
    /// The echo RTT of the SYN-ACK behind the last [`Rx::Answered`]; `None` after an RST's or
    /// an ICMP error's answer, or a SYN-ACK without a usable echo.
    answer_rtt_us: Option<u32>,
    /// The index position of the connection whose segment is being handled.
    hint: Option<usize>,
}

impl<A: App> Engine<A> {
    /// Checks the configuration (a request must fit one segment, `max_outstanding` > 0, …)
    /// and reserves the table. Errors are one line for the user.
    pub fn new(cfg: Config, app: A) -> Result<Engine<A>, String> {
        check_config(&cfg, &app)?;
        let link = Link {
            src_mac: cfg.src_mac,
            dst_mac: cfg.dst_mac,
            src_ip: cfg.src_ip,
            src_ip6: cfg.src_ip6,
            ttl: cfg.ttl,
            ports: cfg.ports,
            verify_checksums: cfg.verify_checksums,
        };
        Ok(Engine {
            table: Table::new(cfg.max_outstanding, cfg.validator.key()),
            wheel: Wheel::new(),
            pool: Pool::new(cfg.rx_memory_limit),
            tx: TxQueue::default(),
            done: Vec::new(),
            held_buffers: Vec::new(),
            starved: Vec::new(),
            request: vec![0; MAX_REQUEST_LEN],
            session_first: Vec::new(),
            stats: Stats::default(),
            answer_rtt_us: None,
            hint: None,
            link,
            cfg,
            app,
        })
    }

    pub fn app(&self) -> &A {
        &self.app
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// When the earliest timer of a connection is due (µs, on the clock of `now_us`), if any
    /// runs: until then [`Engine::on_tick`] has nothing to do, and a loop with nothing else to
    /// do may sleep.
    pub fn next_deadline_us(&self) -> Option<u64> {
        self.wheel.next_tick().map(|tick| tick.saturating_mul(1000))
    }

    /// SYN to SYN-ACK from its echo, for the answer [`Rx::Answered`] just reported (`None`
    /// for a refusal or an ICMP error, or a SYN-ACK without a usable echo). It tells which SYN
    /// was answered: one at least the first retry's wait old is the first SYN's, even when a
    /// retry has left since (a path longer than the wait).
    pub fn answer_rtt_us(&self) -> Option<u32> {
        self.answer_rtt_us
    }

    /// Connections in the table now (established or closing).
    pub fn outstanding(&self) -> usize {
        self.table.live()
    }

    /// The source port of the connection with this cookie token: one of our lane's ports.
    #[inline]
    fn our_port(&self, token: u64) -> u16 {
        self.cfg.ports.port_for_lane(token, self.cfg.port_lane)
    }

    /// Writes the first SYN to (`addr`, `port`) into `buf` (≥ 1514 bytes) and returns the
    /// frame's length; 0 when we have no address of that family. Creates no state; its
    /// timestamp carries `now_us` so the SYN-ACK gives the RTT.
    pub fn write_syn(&mut self, buf: &mut [u8], addr: IpAddr, port: u16, now_us: u64) -> usize {
        let Some(ours) = self.link.ours(addr) else {
            return 0;
        };
        let token = self.cfg.validator.token(ours, addr, port);
        let mss = match addr {
            IpAddr::V4(_) => self.cfg.mss,
            IpAddr::V6(_) => self.cfg.mss - 20,
        };
        let syn = Header {
            window: self.cfg.rcv_window.min(0xffff) as u16,
            syn: Some((mss, self.cfg.wscale)),
            timestamps: Some((now_us as u32, 0)),
            ..Header::new(
                self.our_port(token),
                port,
                token as u32,
                None,
                TcpFlags::SYN,
            )
        };
        self.stats.syn_sent += 1;
        segment::render(&self.link, ours, addr, &syn, &[], buf)
    }

    /// Handles one received Ethernet frame at `now_us`.
    pub fn on_frame(&mut self, frame: &[u8], now_us: u64) -> Rx {
        self.on_frame_with(frame, now_us, |_, _| false)
    }

    /// [`Engine::on_frame`], asking `answered(addr, port)` before a SYN-ACK or RST without a
    /// connection counts as a target's first answer: true (the target answered before and its
    /// connection has ended) makes a late duplicate SYN-ACK get an RST and no second
    /// connection, and a duplicate RST no second `Refused` row. Both then return
    /// [`Rx::Invalid`]. The run loop passes its bitmap of answered targets.
    pub fn on_frame_with(
        &mut self,
        frame: &[u8],
        now_us: u64,
        answered: impl FnMut(IpAddr, u16) -> bool,
    ) -> Rx {
        let seg = match segment::parse(frame, &self.link) {
            Parsed::NotOurs => return Rx::NotOurs,
            Parsed::Invalid => return self.invalid(),
            Parsed::BadChecksum => {
                self.stats.bad_checksums += 1;
                return self.invalid();
            }
            Parsed::Icmp(error) => return self.on_icmp(&error, answered),
            Parsed::Ours(seg) => seg,
        };
        self.wheel.start(now_us / 1000);
        let token = self.cfg.validator.token(seg.ours, seg.addr, seg.port);
        if seg.our_port != self.our_port(token) {
            return self.invalid();
        }
        let ck = Cookie {
            iss: token as u32,
            port: seg.our_port,
        };
        match self.table.find(&seg.key, seg.port) {
            Ok((idx, pos)) => {
                self.hint = Some(pos);
                match self.table.slab[idx as usize].state() {
                    State::Open => self.on_open(idx, ck, &seg, now_us),
                    State::Closing => self.on_closing(idx, ck, &seg, now_us),
                }
                self.hint = None;
                Rx::Segment
            }
            Err(vacancy) => self.on_unknown(ck.iss, &seg, vacancy, now_us, answered),
        }
    }

    /// [`Engine::on_frame_with`] for a frame whose checksum the kernel marked partial
    /// (AF_PACKET's `TP_STATUS_CSUMNOTREADY`: built on this host or by a veth peer, its
    /// checksum left for offload to finish). Such a frame cannot be verified and crossed no
    /// wire, so it is taken without checking its checksums.
    pub fn on_frame_partial_with(
        &mut self,
        frame: &[u8],
        now_us: u64,
        answered: impl FnMut(IpAddr, u16) -> bool,
    ) -> Rx {
        let verify = std::mem::replace(&mut self.link.verify_checksums, false);
        let rx = self.on_frame_with(frame, now_us, answered);
        self.link.verify_checksums = verify;
        rx
    }

    /// Runs the timers due by `now_us` (delayed ACKs, retransmission of the request or FIN,
    /// timeouts). Cheap when nothing is due; call it once per loop pass.
    pub fn on_tick(&mut self, now_us: u64) {
        self.wheel.start(now_us / 1000);
        while let Some(mut idx) = self.wheel.next_due(now_us / 1000) {
            while idx != NIL {
                let next = Wheel::detach(&mut self.table.slab, idx);
                self.fire(idx, now_us);
                idx = next;
            }
        }
    }

    /// Segments queued to send: exactly the frames [`Engine::write_tx`] will write.
    pub fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    /// Writes the next queued segment into `buf` (≥ 1514 bytes) as a whole Ethernet frame and
    /// returns its length (0: nothing queued).
    pub fn write_tx(&mut self, buf: &mut [u8], now_us: u64) -> usize {
        let Some(tx) = self.tx.pop() else {
            self.release_referenced();
            return 0;
        };
        let len = match tx {
            Tx::Rst {
                target,
                port,
                our_port,
                seq,
                ack,
            } => self.render_rst(buf, target, port, our_port, seq, ack),
            Tx::Conn { idx, ck, seg } => {
                if let ConnSeg::Ack { .. } = seg {
                    self.conn_mut(idx).bits.set(Bits::ACK_QUEUED, false);
                }
                self.render_conn(buf, idx, ck, seg, now_us)
            }
        };
        if self.tx.len() == 0 {
            self.release_referenced();
        }
        len
    }

    /// Nothing queued refers to a freed entry or a drained session's buffer any more: they may
    /// be reused.
    fn release_referenced(&mut self) {
        self.table.release();
        for buf in self.held_buffers.drain(..) {
            self.pool.release(buf);
        }
    }

    /// Returns a buffer to the pool; a session's only once the transmit queue is written, as
    /// segments queued for its connection are cut from its bytes.
    fn release_buffer(&mut self, buf: u32) {
        if self.tx.len() > 0 && self.pool.get(buf).session.is_some() {
            self.held_buffers.push(buf);
        } else {
            self.pool.release(buf);
        }
    }

    /// Whether connections have ended whose outcomes [`Engine::drain_outcomes`] would hand
    /// over.
    pub fn has_outcomes(&self) -> bool {
        !self.done.is_empty()
    }

    /// Hands every connection that ended since the last call to `f`, with the reply bytes kept
    /// (at most `max_bytes`), then returns their buffers to the pool.
    pub fn drain_outcomes(&mut self, mut f: impl FnMut(&Outcome, &[u8])) {
        self.drain_replies(|outcome, bytes, _| f(outcome, bytes));
    }

    /// As [`Engine::drain_outcomes`], with the connection's session too (apps that talk in
    /// turns; `None` for others), which is dropped afterwards.
    pub fn drain_replies(&mut self, mut f: impl FnMut(&Outcome, &[u8], Option<&dyn Session>)) {
        let mut done = std::mem::take(&mut self.done);
        for (outcome, buf) in done.drain(..) {
            if buf == NIL {
                f(&outcome, &[], None);
            } else {
                let rx = self.pool.get(buf);
                f(
                    &outcome,
                    &rx.data[..outcome.bytes as usize],
                    rx.session.as_deref(),
                );
                self.release_buffer(buf);
            }
        }
        self.done = done;
        self.reopen_windows();
    }

    /// Ends every connection now (Ctrl-C, end of run): each is closed as configured and
    /// reported with the status it has reached (`DataTimeout` when its reply is incomplete).
    /// With `CloseMode::Fin` the FIN is sent but not waited for.
    pub fn abort_all(&mut self, now_us: u64) {
        self.wheel.start(now_us / 1000);
        // Once per run: collecting the indexes may allocate.
        let live: Vec<u32> = self.table.live_indexes().collect();
        for idx in live {
            if self.conn(idx).state() == State::Open {
                let ck = self.cookie(idx);
                self.finish(idx, ck, Status::DataTimeout, now_us, false);
            }
            if !self.conn(idx).has(Bits::DEAD) {
                self.free(idx);
            }
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Bytes the table, timers and buffer pool hold now (for the summary and the memory test):
    /// capacities, so the table counts in full from the start (it is reserved for
    /// `max_outstanding`), and receive buffers count what they can hold.
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
            + self.wheel.memory_bytes()
            + self.pool.memory_bytes()
            + self.tx.items.capacity() * std::mem::size_of::<Tx>()
            + self.done.capacity() * std::mem::size_of::<(Outcome, u32)>()
            + self.starved.capacity() * std::mem::size_of::<u32>()
            + self.held_buffers.capacity() * std::mem::size_of::<u32>()
            + self.request.capacity()
            + self.session_first.capacity()
    }

    /// Receive buffers in use (connections with data, and outcomes not yet drained).
    pub fn buffers_in_use(&self) -> usize {
        self.pool.in_use()
    }

    // ---- receiving ------------------------------------------------------------------------

    fn invalid(&mut self) -> Rx {
        self.stats.invalid += 1;
        Rx::Invalid
    }

    fn conn(&self, idx: u32) -> &Conn {
        &self.table.slab[idx as usize]
    }

    fn conn_mut(&mut self, idx: u32) -> &mut Conn {
        &mut self.table.slab[idx as usize]
    }

    /// A segment for no connection: a SYN-ACK or RST answering our SYN, or a late segment.
    fn on_unknown(
        &mut self,
        iss: u32,
        seg: &Seg,
        vacancy: Vacancy,
        now_us: u64,
        mut answered: impl FnMut(IpAddr, u16) -> bool,
    ) -> Rx {
        let answers_syn = seg.tcp.ack_number == Some(iss.wrapping_add(1));
        if seg.has(TcpFlags::RST) {
            if !answers_syn || seg.has(TcpFlags::SYN) || answered(seg.addr, seg.port) {
                return self.invalid();
            }
            self.refused(seg, now_us);
            self.answer_rtt_us = None;
            return Rx::Answered {
                addr: seg.addr,
                port: seg.port,
            };
        }
        if seg.has(TcpFlags::SYN) {
            if !seg.has(TcpFlags::ACK) || !answers_syn {
                return self.invalid();
            }
            if answered(seg.addr, seg.port) {
                self.queue_rst(seg, iss.wrapping_add(1), None);
                return self.invalid();
            }
            let ck = Cookie {
                iss,
                port: seg.our_port,
            };
            return self.open(ck, seg, vacancy, now_us);
        }
        // A late segment of a connection that has ended (the server's FIN after our RST, a
        // retransmission): reset it, as a closed port would.
        let max_ack = self.max_sent() + 1;
        if let Some(ack) = seg.tcp.ack_number {
            if ack.wrapping_sub(iss.wrapping_add(1)) <= max_ack {
                self.queue_rst(seg, ack, None);
                self.stats.late += 1;
                return Rx::Late;
            }
        }
        self.invalid()
    }

    // ---- ICMP errors ----------------------------------------------------------------------

    /// An ICMP error quoting a segment from one of our addresses and ports. Its quote must
    /// validate as a segment we sent: the cookie's port, and the cookie's ISN (a SYN: no
    /// connection) or, for a connection, a sequence number from SND.UNA to SND.NXT (Linux's
    /// check in `tcp_v4_err`). What fails is invalid.
    fn on_icmp(&mut self, error: &IcmpError, mut answered: impl FnMut(IpAddr, u16) -> bool) -> Rx {
        let token = self.cfg.validator.token(error.ours, error.addr, error.port);
        if error.our_port != self.our_port(token) {
            return self.invalid();
        }
        let ck = Cookie {
            iss: token as u32,
            port: error.our_port,
        };
        if let Ok((idx, _)) = self.table.find(&error.key, error.port) {
            return self.on_connection_icmp(idx, ck, error);
        }
        let about_syn = error.seq == ck.iss;
        // Our first byte up to just past the request and a FIN: a connection that has ended.
        let after = error.seq.wrapping_sub(ck.iss.wrapping_add(1));
        let about_ended = after <= self.max_sent() + 1;
        match error.kind {
            IcmpKind::Unreachable if about_syn && !answered(error.addr, error.port) => {
                self.unreachable(error);
                self.answer_rtt_us = None;
                Rx::Answered {
                    addr: error.addr,
                    port: error.port,
                }
            }
            _ if about_syn || about_ended => {
                // A SYN is small: a too-big about one means nothing (and holds no state to
                // lower). The rest are late: the target has its row.
                self.stats.icmp_ignored += 1;
                Rx::Icmp
            }
            _ => self.invalid(),
        }
    }

    /// A destination unreachable answered the SYN: the target's outcome.
    fn unreachable(&mut self, error: &IcmpError) {
        self.stats.unreachable += 1;
        self.stats.completed += 1;
        let outcome = Outcome {
            addr: error.addr,
            port: error.port,
            sport: error.our_port,
            status: Status::Unreachable,
            rtt_us: None,
            t_first_byte_us: None,
            t_total_us: 0,
            bytes: 0,
            truncated: false,
            retransmits_received: 0,
            ooo_segments: 0,
            icmp: Some(error.icmp),
        };
        self.done.push((outcome, NIL));
    }

    /// An ICMP error about a connection. A destination unreachable is a soft error (RFC 1122
    /// 4.2.3.9: only the timeouts end an established connection); a too-big lowers the MSS.
    fn on_connection_icmp(&mut self, idx: u32, ck: Cookie, error: &IcmpError) -> Rx {
        let conn = self.conn(idx);
        let una = ck.iss.wrapping_add(1).wrapping_add(conn.acked());
        let nxt = ck.iss.wrapping_add(1).wrapping_add(self.sent_len(idx));
        if error.seq.wrapping_sub(una) > nxt.wrapping_sub(una) {
            return self.invalid();
        }
        match error.kind {
            IcmpKind::Unreachable => self.stats.icmp_soft_errors += 1,
            IcmpKind::TooBig { mtu } => self.path_mtu(idx, ck, mtu),
        }
        Rx::Icmp
    }

    /// A fragmentation needed or Packet Too Big for a connection: as Linux, the MSS only goes
    /// down (to what `mtu` leaves after the IP and TCP headers, IPv4's floored at
    /// [`MIN_PMTU_V4`]; IPv6 ignores an MTU below [`MIN_PMTU_V6`]), and the request bytes in
    /// flight, which the path dropped, go out again at once at the new size (Linux's
    /// `tcp_simple_retransmit`; no backoff: nothing was lost to congestion).
    fn path_mtu(&mut self, idx: u32, ck: Cookie, mtu: u32) {
        let conn = self.conn(idx);
        let mss = match conn.target() {
            IpAddr::V4(_) => Some(mtu.max(MIN_PMTU_V4) - HEADERS_V4),
            IpAddr::V6(_) => (mtu >= MIN_PMTU_V6).then(|| mtu - HEADERS_V6),
        };
        let smaller = mss.filter(|&mss| mss < conn.bits.get(Bits::MSS));
        let (Some(mss), State::Open) = (smaller, conn.state()) else {
            self.stats.icmp_ignored += 1;
            return;
        };
        let (acked, limit) = (conn.acked(), conn.send_limit());
        self.conn_mut(idx).bits.put(Bits::MSS, mss);
        self.stats.mss_lowered += 1;
        if limit > acked {
            self.stats.retransmits_sent += self.queue_request(idx, ck, acked, limit);
        }
    }

    fn queue_rst(&mut self, seg: &Seg, seq: u32, ack: Option<u32>) {
        self.tx.push(Tx::Rst {
            target: seg.addr,
            port: seg.port,
            our_port: seg.our_port,
            seq,
            ack,
        });
    }

    fn refused(&mut self, seg: &Seg, now_us: u64) {
        self.stats.refused += 1;
        self.stats.completed += 1;
        let outcome = Outcome {
            addr: seg.addr,
            port: seg.port,
            sport: seg.our_port,
            status: Status::Refused,
            rtt_us: echo_rtt(seg, now_us, self.cfg.syn_span_us).map(u64::from),
            t_first_byte_us: None,
            t_total_us: 0,
            bytes: 0,
            truncated: false,
            retransmits_received: 0,
            ooo_segments: 0,
            icmp: None,
        };
        self.done.push((outcome, NIL));
    }

    /// A valid SYN-ACK: the connection is established.
    fn open(&mut self, ck: Cookie, seg: &Seg, vacancy: Vacancy, now_us: u64) -> Rx {
        let Some(idx) = self.table.alloc() else {
            // No room: the server gets an RST, and the SYN retry tries again later.
            self.stats.table_full += 1;
            self.queue_rst(seg, ck.iss.wrapping_add(1), None);
            return Rx::Segment;
        };
        let session = self.open_session(seg.addr, seg.port, now_us);
        let req_len = match session {
            Some((_, len)) => len,
            None => self.app_request(seg.addr, seg.port).len() as u32,
        };
        let t = &seg.tcp;
        let mut bits = Bits::default();
        bits.set_state(State::Open);
        bits.set(Bits::TS_OK, t.timestamp.is_some());
        bits.set(Bits::SACK_OK, t.sack_permitted);
        bits.set(Bits::WS_OK, t.window_scale.is_some());
        bits.put(
            Bits::PEER_WS,
            u32::from(t.window_scale.unwrap_or(0).min(14)),
        );
        bits.put(Bits::REQ_LEN, req_len);
        let default_mss = match seg.addr {
            IpAddr::V4(_) => DEFAULT_MSS_V4,
            IpAddr::V6(_) => DEFAULT_MSS_V6,
        };
        // An MSS option of 0 says nothing: as if absent (as Linux reads it).
        let mss = t
            .max_seg_size
            .filter(|&mss| mss != 0)
            .unwrap_or(default_mss)
            .max(MIN_PEER_MSS);
        bits.put(Bits::MSS, u32::from(mss));
        // The SYN-ACK's window is never scaled.
        bits.put(Bits::WND, u32::from(t.window_len));
        let rtt = echo_rtt(seg, now_us, self.cfg.syn_span_us);
        self.answer_rtt_us = rtt;
        *self.conn_mut(idx) = Conn {
            addr: seg.key,
            port: seg.port,
            rcv_nxt: t.seq_number.wrapping_add(1),
            ts_recent: t.timestamp.map_or(0, |ts| ts.0),
            since_us: now_us as u32,
            rtt_us: rtt.unwrap_or(NIL),
            buf: session.map_or(NIL, |(buf, _)| buf),
            timer_next: NIL,
            timer_prev: UNLINKED,
            bits,
            timer_at: 0,
        };
        self.table.index_at(idx, vacancy);
        self.stats.established += 1;
        self.stats.peak_outstanding = self.stats.peak_outstanding.max(self.table.live() as u64);
        let limit = self.conn(idx).send_limit();
        if !(self.cfg.request_in_ack && limit > 0) {
            self.queue_handshake_ack(idx, ck);
        }
        self.queue_request(idx, ck, 0, limit);
        self.rearm(idx, now_us);
        Rx::Answered {
            addr: seg.addr,
            port: seg.port,
        }
    }

    /// The most bytes a connection of this app sends.
    fn max_sent(&self) -> u32 {
        self.app.max_sent_len().min(MAX_SESSION_SEND) as u32
    }

    /// For an app that talks in turns: its session for a new connection, in a buffer taken
    /// now, with its first bytes; returns the buffer and their length.
    fn open_session(&mut self, addr: IpAddr, port: u16, now_us: u64) -> Option<(u32, u32)> {
        self.session_first.clear();
        let session = self.app.open_session(addr, port, &mut self.session_first)?;
        self.session_first.truncate(MAX_SESSION_SEND);
        let buf = self.pool.take();
        let rx = self.pool.get_mut(buf);
        std::mem::swap(&mut rx.sent, &mut self.session_first);
        rx.session = Some(session);
        rx.flight_us = Some(now_us as u32);
        Some((buf, rx.sent.len() as u32))
    }

    /// Queues what a session appended to its bytes since they were last sent (what the peer's
    /// window does not allow yet goes later, as the request's does); returns whether a segment
    /// was queued, or `None` when the session went past [`MAX_SESSION_SEND`] and the connection
    /// must end.
    fn send_session_bytes(&mut self, idx: u32, ck: Cookie, now_us: u64) -> Option<bool> {
        let conn = self.conn(idx);
        let (buf, req_len, acked, old_limit) =
            (conn.buf, conn.req_len(), conn.acked(), conn.send_limit());
        if buf == NIL {
            return Some(false);
        }
        let rx = self.pool.get_mut(buf);
        if rx.session.is_none() || rx.sent.len() as u32 == req_len {
            return Some(false);
        }
        if rx.sent.len() > MAX_SESSION_SEND {
            rx.sent.truncate(req_len as usize);
            return None;
        }
        let len = rx.sent.len() as u32;
        self.conn_mut(idx).bits.put(Bits::REQ_LEN, len);
        // With nothing unacknowledged, the new bytes' retransmissions run from now, with a
        // fresh count; otherwise the running schedule goes on (and resends them all).
        if acked == req_len {
            self.restart_rto(idx, now_us);
        }
        let limit = self.conn(idx).send_limit();
        let from = old_limit.max(acked);
        let sent = limit > from && self.queue_request(idx, ck, from, limit) > 0;
        self.rearm(idx, now_us);
        Some(sent)
    }

    /// The request for a target, rendered into the scratch buffer.
    fn app_request(&mut self, addr: IpAddr, port: u16) -> &[u8] {
        let max = self.app.max_request_len().min(MAX_REQUEST_LEN);
        let len = self.app.write_request(&mut self.request[..max], addr, port);
        &self.request[..len.min(max)]
    }

    /// A segment of an open connection.
    fn on_open(&mut self, idx: u32, ck: Cookie, seg: &Seg, now_us: u64) {
        if seg.has(TcpFlags::SYN) {
            self.on_dup_synack(idx, ck, seg, now_us);
            return;
        }
        if self.paws_rejects(idx, seg) {
            self.queue_ack(idx, ck);
            return;
        }
        let allowance = self.rcv_allowance(idx);
        let d = self.seq_offset(idx, seg);
        let in_window = acceptable(d, seg, allowance);
        if seg.has(TcpFlags::RST) {
            self.on_rst(idx, ck, d, in_window, now_us);
            return;
        }
        if !in_window {
            // Our window is zero: no data fits, but the ACK field of a segment at RCV.NXT
            // still counts (RFC 9293 3.10.7.4), so an acknowledged request is not sent again.
            if let (0, 0, Some(ack)) = (d, allowance, seg.tcp.ack_number) {
                self.on_ack(idx, ck, ack, seg, now_us);
            }
            self.count_duplicate(idx, d, seg);
            self.queue_ack(idx, ck);
            return;
        }
        // RFC 9293: a segment without ACK is dropped.
        let Some(ack) = seg.tcp.ack_number else {
            return;
        };
        if !self.on_ack(idx, ck, ack, seg, now_us) {
            self.challenge_ack(idx, ck, now_us);
            return;
        }
        self.update_ts_recent(idx, d, seg);
        if !seg.payload.is_empty() || seg.has(TcpFlags::FIN) {
            self.on_data(idx, ck, d, allowance, seg, now_us);
        }
    }

    /// The sequence number of a segment less `rcv_nxt`, as a signed distance.
    fn seq_offset(&self, idx: u32, seg: &Seg) -> i64 {
        i64::from(seg.tcp.seq_number.wrapping_sub(self.conn(idx).rcv_nxt) as i32)
    }

    /// An RST of a connection (RFC 5961 3.2): it resets only at exactly RCV.NXT; elsewhere in
    /// the window it gets a challenge ACK (a genuine peer answers it with an RST that fits);
    /// outside, it is dropped. The connection is freed, or reported `Reset` while open.
    fn on_rst(&mut self, idx: u32, ck: Cookie, d: i64, in_window: bool, now_us: u64) {
        if d == 0 {
            match self.conn(idx).state() {
                State::Open => self.finish(idx, ck, Status::Reset, now_us, false),
                State::Closing => self.free(idx),
            }
        } else if in_window {
            self.challenge_ack(idx, ck, now_us);
        }
    }

    /// Queues a challenge ACK (RFC 5961), within the run's budget per second.
    fn challenge_ack(&mut self, idx: u32, ck: Cookie, now_us: u64) {
        if !self.cfg.challenge_budget.take(now_us) {
            self.stats.challenge_acks_limited += 1;
            return;
        }
        self.stats.challenge_acks += 1;
        self.queue_ack(idx, ck);
    }

    /// A SYN on an established connection: a retransmitted SYN-ACK means our handshake ACK
    /// (and the request with it) was lost, unless it answers a later SYN of ours (a SYN retry
    /// that crossed the first SYN-ACK on a long path: it says nothing of our ACK, so it gets a
    /// bare ACK and the request waits for its timer); anything else gets a challenge ACK
    /// (RFC 5961 4).
    fn on_dup_synack(&mut self, idx: u32, ck: Cookie, seg: &Seg, now_us: u64) {
        let conn = self.conn(idx);
        let in_order = self.in_order(idx);
        let irs = conn.rcv_nxt.wrapping_sub(in_order).wrapping_sub(1);
        let same = seg.has(TcpFlags::ACK)
            && seg.tcp.seq_number == irs
            && seg.tcp.ack_number == Some(ck.iss.wrapping_add(1));
        let (acked, mut limit) = (conn.acked(), conn.send_limit());
        if same && answers_a_later_syn(conn, seg) {
            self.stats.synacks_to_retries += 1;
            limit = acked;
        }
        if same {
            // Echo this SYN-ACK's timestamp, not the first one's: the server measures its RTT
            // from our echo, and a 1 s-old echo would stretch its retransmission timer past our
            // timeouts (found under loss: the banner lost after the handshake ACK was lost
            // came back too late).
            if let Some((tsval, _)) = seg.tcp.timestamp {
                if self.conn(idx).has(Bits::TS_OK) {
                    self.conn_mut(idx).ts_recent = tsval;
                }
            }
        }
        if same && acked < limit {
            self.queue_handshake_ack(idx, ck);
            let sent = self.queue_request(idx, ck, acked, limit);
            self.stats.retransmits_sent += sent;
        } else if same {
            self.queue_ack(idx, ck);
        } else {
            self.challenge_ack(idx, ck, now_us);
        }
    }

    /// PAWS (RFC 7323): a segment whose timestamp is older than the last one seen is an old
    /// duplicate. One tick of slack, as Linux allows (`TCP_PAWS_WINDOW`): a peer whose
    /// clock is read per CPU may send one tick back.
    fn paws_rejects(&self, idx: u32, seg: &Seg) -> bool {
        let conn = self.conn(idx);
        match seg.tcp.timestamp {
            Some((tsval, _)) if conn.has(Bits::TS_OK) && !seg.has(TcpFlags::RST) => {
                (tsval.wrapping_sub(conn.ts_recent) as i32) < -PAWS_SLACK
            }
            _ => false,
        }
    }

    /// RFC 7323 4.3: TS.Recent takes a newer TSval only from a segment at or before the last
    /// ACK we sent (`SEG.SEQ ≤ Last.ACK.sent`), so that a delayed ACK echoes the first of the
    /// segments it covers. Last.ACK.sent is `rcv_nxt` unless an ACK is still owed, in which
    /// case it lies before `rcv_nxt` by an unknown amount and no segment is counted as at or
    /// before it (TS.Recent then waits for the next segment after that ACK).
    fn update_ts_recent(&mut self, idx: u32, d: i64, seg: &Seg) {
        let conn = self.conn_mut(idx);
        let ack_owed = conn.has(Bits::ACK_PENDING) || conn.has(Bits::ACK_QUEUED);
        if let Some((tsval, _)) = seg.tcp.timestamp {
            let newer = tsval.wrapping_sub(conn.ts_recent) as i32 >= 0;
            if conn.has(Bits::TS_OK) && d <= 0 && !ack_owed && newer {
                conn.ts_recent = tsval;
            }
        }
    }

    /// Counts the data of an unacceptable segment that had been received already.
    fn count_duplicate(&mut self, idx: u32, d: i64, seg: &Seg) {
        let in_order = i64::from(self.in_order(idx));
        let len = seg.payload.len() as i64;
        if len > 0 && d < 0 && d + in_order >= 0 {
            let buf = self.conn(idx).buf;
            if buf != NIL {
                self.pool.get_mut(buf).retransmits += 1;
                self.stats.retransmits_received += 1;
            }
        }
    }

    /// The ACK field of an open connection's segment; false when it lies outside
    /// `SND.UNA − bytes acked … SND.NXT` (RFC 5961 5.2 with Linux's bound: nothing before our
    /// first byte, nothing we have not sent), and the segment is then dropped with a challenge
    /// ACK. An old ACK inside is ignored; the segment counts. An ACK that advances takes the
    /// peer's window, sends what it lets go, and starts the retransmission schedule over.
    fn on_ack(&mut self, idx: u32, ck: Cookie, ack: u32, seg: &Seg, now_us: u64) -> bool {
        let conn = self.conn(idx);
        let (acked, req_len, old_limit) = (conn.acked(), conn.req_len(), conn.send_limit());
        let una = ck.iss.wrapping_add(1).wrapping_add(acked);
        let advance = ack.wrapping_sub(una);
        if advance > self.sent_len(idx) - acked {
            return una.wrapping_sub(ack) <= acked; // an old ACK: ignore the field
        }
        let scale = if conn.has(Bits::WS_OK) {
            conn.bits.get(Bits::PEER_WS)
        } else {
            0
        };
        let window = u32::from(seg.tcp.window_len)
            .checked_shl(scale)
            .unwrap_or(u32::MAX);
        let acked = acked + advance;
        // A window that shrinks does not take back what was sent: the send limit (SND.NXT)
        // never goes back, it only stops growing until the window passes it again.
        let edge = acked.saturating_add(window).max(old_limit);
        let bits = &mut self.conn_mut(idx).bits;
        bits.put(Bits::ACKED, acked);
        bits.put(Bits::WND, edge - acked);
        let limit = self.conn(idx).send_limit();
        let from = old_limit.max(acked);
        if limit > from {
            self.queue_request(idx, ck, from, limit);
        }
        // As Linux: the timer is re-armed one RTO after an ACK that advances, and after new
        // data leaves when none was in flight (the window opened); bytes sent while others
        // are in flight keep the running timer.
        let nothing_in_flight = old_limit <= acked;
        if acked < req_len && (advance > 0 || (limit > from && nothing_in_flight)) {
            self.restart_rto(idx, now_us);
        }
        true
    }

    /// Starts the retransmission schedule over at `now_us`: the next retransmission (or
    /// zero-window probe) is one RTO away, and the backoff and the count of retransmissions
    /// start again. The time is kept in the connection's buffer, taken now if it has none.
    fn restart_rto(&mut self, idx: u32, now_us: u64) {
        let buf = self.buffer(idx);
        let rx = self.pool.get_mut(buf);
        rx.flight_us = Some(now_us as u32);
        rx.probes = 0;
        let conn = self.conn_mut(idx);
        conn.bits.put(Bits::RETRIES, 0);
        let due = now_us.saturating_add(rto_us(conn));
        self.wheel
            .arm_by(&mut self.table.slab, idx, due.div_ceil(1000));
    }

    /// How far into our stream the peer may acknowledge: SND.NXT less our first sequence
    /// number. While open, the send limit (a shrinking window never lowers it, see
    /// [`Engine::on_ack`]), and one byte more while a zero-window probe is out; while
    /// closing, our FIN's offset, and the FIN once written.
    fn sent_len(&self, idx: u32) -> u32 {
        let conn = self.conn(idx);
        match conn.state() {
            State::Open => {
                let limit = conn.send_limit();
                let probing = limit == conn.acked()
                    && limit < conn.req_len()
                    && conn.buf != NIL
                    && self.pool.get(conn.buf).probes > 0;
                limit + u32::from(probing)
            }
            State::Closing => conn.req_len() + u32::from(conn.has(Bits::FIN_SENT)),
        }
    }

    /// Data and FIN of an acceptable segment of an open connection.
    fn on_data(&mut self, idx: u32, ck: Cookie, d: i64, allowance: u32, seg: &Seg, now_us: u64) {
        let in_order = i64::from(self.in_order(idx));
        let start = in_order + d;
        let end = start + seg.payload.len() as i64;
        let window_end = in_order + i64::from(allowance);
        let from = start.max(0);
        let to = end.min(window_end);
        let mut ack_now = false;
        let mut placed = Placed::default();
        if !seg.payload.is_empty() {
            if to > from {
                let bytes = &seg.payload[(from - start) as usize..(to - start) as usize];
                placed = self.place(idx, from as u32, bytes, now_us);
            }
            ack_now |= to < end
                || placed.duplicate
                || placed.out_of_order
                || placed.filled_hole
                || (placed.advanced && self.quick_ack(idx));
        }
        let in_order = i64::from(self.in_order(idx));
        // The FIN counts in order, after all of the segment's data. One ahead of a gap (the
        // data before it was lost; a sender's tail-loss probe is often the FIN alone) is kept
        // until the gap fills, and answered at once with a duplicate ACK, so the sender learns
        // what is missing. One beyond the window, or before data we have, is not a FIN.
        if seg.has(TcpFlags::FIN) {
            if to == end && end == in_order {
                self.fin_in_order(idx);
            } else {
                if to == end && end > in_order {
                    self.hold_fin(idx, end as u32);
                }
                ack_now = true;
            }
        } else if placed.advanced {
            self.take_held_fin(idx);
        }
        if let Some((status, truncated)) = self.completion(idx, placed.advanced) {
            self.finish(idx, ck, status, now_us, truncated);
            return;
        }
        if placed.advanced {
            match self.send_session_bytes(idx, ck, now_us) {
                // Its segments carry the ACK (and SACK blocks): no pure ACK is needed.
                Some(true) => return,
                Some(false) => {}
                None => {
                    // The session can say no more: what it has is the reply.
                    self.finish(idx, ck, Status::Success, now_us, false);
                    return;
                }
            }
        }
        if ack_now {
            self.queue_ack(idx, ck);
        } else if placed.advanced {
            self.delay_ack(idx, ck, now_us);
        }
    }

    /// Whether in-order data is ACKed at once: the first [`QUICK_ACKS`] segments of a reply.
    fn quick_ack(&mut self, idx: u32) -> bool {
        let rx = self.pool.get_mut(self.table.slab[idx as usize].buf);
        let quick = rx.quick_acks < QUICK_ACKS;
        rx.quick_acks = rx.quick_acks.saturating_add(1);
        quick
    }

    /// The peer's FIN is in order: it counts in `rcv_nxt`.
    fn fin_in_order(&mut self, idx: u32) {
        let conn = &mut self.table.slab[idx as usize];
        conn.rcv_nxt = conn.rcv_nxt.wrapping_add(1);
        conn.bits.set(Bits::FIN_RCVD, true);
        if conn.buf != NIL {
            self.pool.get_mut(conn.buf).fin_at = None;
        }
    }

    /// Keeps a FIN at reply offset `at`, ahead of a gap (taking a buffer if there is none).
    fn hold_fin(&mut self, idx: u32, at: u32) {
        let buf = self.buffer(idx);
        self.pool.get_mut(buf).fin_at = Some(at);
    }

    /// Counts a held FIN once the data before it is in order (forgets it if data went past it:
    /// that was no FIN).
    fn take_held_fin(&mut self, idx: u32) {
        let buf = self.conn(idx).buf;
        if buf == NIL {
            return;
        }
        let rx = self.pool.get_mut(buf);
        match rx.fin_at {
            Some(at) if at == rx.in_order => self.fin_in_order(idx),
            Some(at) if at < rx.in_order => rx.fin_at = None,
            _ => {}
        }
    }

    /// The connection's buffer, taken from the pool if it has none yet.
    fn buffer(&mut self, idx: u32) -> u32 {
        let conn = &mut self.table.slab[idx as usize];
        if conn.buf == NIL {
            conn.buf = self.pool.take();
        }
        conn.buf
    }

    /// Stores data in the connection's buffer (taken now if this is its first data).
    fn place(&mut self, idx: u32, from: u32, bytes: &[u8], now_us: u64) -> Placed {
        let before = self.in_order(idx);
        let buf = self.buffer(idx);
        let placed = self.pool.place(buf, from, bytes);
        let rx = self.pool.get_mut(buf);
        if placed.new_data {
            rx.last_rx_us = now_us as u32;
        }
        if placed.advanced && rx.first_byte_us.is_none() {
            rx.first_byte_us = Some(now_us as u32);
        }
        if placed.duplicate {
            rx.retransmits += 1;
            self.stats.retransmits_received += 1;
        }
        if placed.out_of_order {
            rx.ooo_segments += 1;
            self.stats.ooo_segments += 1;
        }
        let grown = rx.in_order - before;
        let conn = &mut self.table.slab[idx as usize];
        conn.rcv_nxt = conn.rcv_nxt.wrapping_add(grown);
        placed
    }

    /// The connection's status if its reply is complete now, and whether it was cut at
    /// `max_bytes` (only when neither the app nor the server's FIN says it is whole).
    fn completion(&mut self, idx: u32, advanced: bool) -> Option<(Status, bool)> {
        let in_order = self.in_order(idx);
        let (buf, fin) = {
            let conn = self.conn(idx);
            (conn.buf, conn.has(Bits::FIN_RCVD))
        };
        if advanced {
            // The buffer keeps the app's cursor, so each segment's check reads only what is new.
            let complete = match buf {
                NIL => self.app.is_complete(&[]),
                buf => {
                    let rx = self.pool.get_mut(buf);
                    let data = &rx.data[..in_order as usize];
                    match rx.session.as_mut() {
                        // A session reads each byte once: from where it stopped.
                        Some(session) => {
                            let from = (rx.cursor.0 as usize).min(data.len());
                            rx.cursor.0 = data.len() as u64;
                            session.on_received(&data[from..], &mut rx.sent)
                        }
                        None => self.app.is_complete_after(data, &mut rx.cursor),
                    }
                }
            };
            if complete {
                return Some((Status::Success, false));
            }
        }
        if fin {
            let status = if in_order > 0 {
                Status::Success
            } else {
                Status::Closed
            };
            return Some((status, false));
        }
        if advanced && in_order as usize >= self.cfg.max_bytes {
            return Some((Status::Success, true));
        }
        None
    }

    /// A segment of a closing connection: the peer's ACK of our FIN, or its FIN. New data
    /// gets an RST (RFC 1122 4.2.2.13: data after our close is lost, and the server should
    /// know at once rather than retransmit into our close timeout); old data is ACKed again.
    fn on_closing(&mut self, idx: u32, ck: Cookie, seg: &Seg, now_us: u64) {
        if seg.has(TcpFlags::SYN) {
            self.challenge_ack(idx, ck, now_us);
            return;
        }
        if self.paws_rejects(idx, seg) {
            self.queue_ack(idx, ck);
            return;
        }
        let d = self.seq_offset(idx, seg);
        let in_window = acceptable(d, seg, self.cfg.rcv_window);
        if seg.has(TcpFlags::RST) {
            self.on_rst(idx, ck, d, in_window, now_us);
            return;
        }
        if !in_window {
            self.queue_ack(idx, ck);
            return;
        }
        let Some(ack) = seg.tcp.ack_number else {
            return;
        };
        let fin_seq = ck
            .iss
            .wrapping_add(1)
            .wrapping_add(self.conn(idx).req_len());
        // Nothing before our first byte, nothing after what we sent (RFC 5961 5.2): the bytes
        // before our FIN, and the FIN once written.
        if ack.wrapping_sub(ck.iss.wrapping_add(1)) > self.sent_len(idx) {
            self.challenge_ack(idx, ck, now_us);
            return;
        }
        self.update_ts_recent(idx, d, seg);
        // Data in the window always reaches past RCV.NXT: it is new.
        if !seg.payload.is_empty() {
            // The RST takes its sequence number from the segment's ACK: exactly what the
            // server expects next, whether or not it has our FIN.
            self.queue_rst(seg, ack, None);
            self.free(idx);
            return;
        }
        let conn = self.conn_mut(idx);
        if ack == fin_seq.wrapping_add(1) && conn.has(Bits::FIN_SENT) {
            conn.bits.set(Bits::FIN_ACKED, true);
        }
        let mut ack_now = false;
        if d == 0 && seg.has(TcpFlags::FIN) && !conn.has(Bits::FIN_RCVD) {
            conn.rcv_nxt = conn.rcv_nxt.wrapping_add(1);
            conn.bits.set(Bits::FIN_RCVD, true);
            ack_now = true;
        }
        let done = conn.has(Bits::FIN_RCVD) && conn.has(Bits::FIN_ACKED);
        if ack_now {
            self.queue_ack(idx, ck);
        }
        if done {
            self.free(idx);
        }
    }

    // ---- ending ---------------------------------------------------------------------------

    /// Reports the connection's outcome (`truncated`: cut at `max_bytes`) and closes it as
    /// configured (a `Reset` is not answered).
    fn finish(&mut self, idx: u32, ck: Cookie, status: Status, now_us: u64, truncated: bool) {
        let conn = &mut self.table.slab[idx as usize];
        let buf = std::mem::replace(&mut conn.buf, NIL);
        let since = abs_us(now_us, conn.since_us);
        let mut outcome = Outcome {
            addr: conn.target(),
            port: conn.port,
            sport: ck.port,
            status,
            rtt_us: conn.rtt().map(u64::from),
            t_first_byte_us: None,
            t_total_us: now_us.saturating_sub(since),
            bytes: 0,
            truncated,
            retransmits_received: 0,
            ooo_segments: 0,
            icmp: None,
        };
        if buf != NIL {
            let rx = self.pool.get(buf);
            outcome.bytes = u64::from(rx.in_order);
            outcome.t_first_byte_us = rx
                .first_byte_us
                .map(|t| u64::from(t.wrapping_sub(conn.since_us)));
            outcome.retransmits_received = rx.retransmits;
            outcome.ooo_segments = rx.ooo_segments;
        }
        self.done.push((outcome, buf));
        self.stats.completed += 1;
        match status {
            Status::Success => self.stats.success += 1,
            Status::DataTimeout => self.stats.timeouts += 1,
            Status::Reset => self.stats.resets += 1,
            Status::Closed => self.stats.closed += 1,
            Status::Refused | Status::SynTimeout | Status::Unreachable => {}
        }
        if status == Status::Reset {
            self.free(idx);
            return;
        }
        match self.cfg.close {
            CloseMode::Rst => {
                let conn = self.conn(idx);
                let seq = ck.iss.wrapping_add(1).wrapping_add(conn.send_limit());
                self.tx.push(Tx::Rst {
                    target: conn.target(),
                    port: conn.port,
                    our_port: ck.port,
                    seq,
                    ack: Some(conn.rcv_nxt),
                });
                self.free(idx);
            }
            CloseMode::Fin => {
                let conn = self.conn_mut(idx);
                // The FIN follows the bytes sent (queued ones included: they go out first);
                // those the peer's window held back are never sent.
                let sent = conn.send_limit();
                conn.bits.put(Bits::REQ_LEN, sent);
                conn.bits.set_state(State::Closing);
                conn.bits.put(Bits::RETRIES, 0);
                conn.bits.set(Bits::ACK_PENDING | Bits::SEG_UNACKED, false);
                conn.since_us = now_us as u32;
                self.tx.push(Tx::Conn {
                    idx,
                    ck,
                    seg: ConnSeg::Fin,
                });
                self.rearm(idx, now_us);
            }
        }
    }

    /// Takes a connection out of the table (its outcome, if any, is already queued).
    fn free(&mut self, idx: u32) {
        self.wheel.unlink(&mut self.table.slab, idx);
        let buf = std::mem::replace(&mut self.conn_mut(idx).buf, NIL);
        if buf != NIL {
            self.release_buffer(buf);
        }
        // Segments already queued for it are rendered from it: it stays intact until then.
        let unreferenced = self.tx.len() == 0;
        self.table.free(idx, self.hint, unreferenced);
    }

    // ---- timers ---------------------------------------------------------------------------

    fn fire(&mut self, idx: u32, now_us: u64) {
        let ck = self.cookie(idx);
        let conn = self.conn(idx);
        let since = abs_us(now_us, conn.since_us);
        let rto_passed = now_us >= self.rto_due(idx, self.rto_base(idx, now_us));
        let (state, ack_pending, fin_acked) = (
            conn.state(),
            conn.has(Bits::ACK_PENDING),
            conn.has(Bits::FIN_ACKED),
        );
        match state {
            State::Open => {
                if now_us >= self.open_timeout(idx, now_us) {
                    self.finish(idx, ck, Status::DataTimeout, now_us, false);
                    return;
                }
                if ack_pending {
                    self.queue_ack(idx, ck);
                }
                if rto_passed && self.request_resendable(idx) {
                    self.retransmit_request(idx, ck);
                }
            }
            State::Closing => {
                if now_us >= since + self.cfg.close_timeout_us {
                    self.free(idx);
                    return;
                }
                if rto_passed && self.retrying(idx) && !fin_acked {
                    self.tx.push(Tx::Conn {
                        idx,
                        ck,
                        seg: ConnSeg::Fin,
                    });
                    self.stats.retransmits_sent += 1;
                    let bits = &mut self.conn_mut(idx).bits;
                    bits.put(Bits::RETRIES, bits.get(Bits::RETRIES) + 1);
                }
            }
        }
        self.rearm(idx, now_us);
    }

    /// When an open connection times out: the total timeout, and the first-byte timeout
    /// before data (the idle timeout after).
    fn open_timeout(&self, idx: u32, now_us: u64) -> u64 {
        let conn = self.conn(idx);
        let since = abs_us(now_us, conn.since_us);
        let total = since + self.cfg.total_timeout_us;
        let first = match conn.buf {
            NIL => None,
            buf => self.pool.get(buf).first_byte_us,
        };
        let data = match first {
            None => since + self.cfg.first_byte_timeout_us,
            Some(_) => {
                let last = self.pool.get(conn.buf).last_rx_us;
                abs_us(now_us, last) + self.cfg.idle_timeout_us
            }
        };
        total.min(data)
    }

    /// The connection's next deadline (µs).
    fn next_deadline(&self, idx: u32, now_us: u64) -> u64 {
        let conn = self.conn(idx);
        let since = abs_us(now_us, conn.since_us);
        let rto_due = self.rto_due(idx, self.rto_base(idx, now_us));
        match conn.state() {
            State::Open => {
                let timeout = self.open_timeout(idx, now_us);
                if self.request_resendable(idx) {
                    timeout.min(rto_due)
                } else {
                    timeout
                }
            }
            State::Closing => {
                let close = since + self.cfg.close_timeout_us;
                if self.retrying(idx) && !conn.has(Bits::FIN_ACKED) {
                    close.min(rto_due)
                } else {
                    close
                }
            }
        }
    }

    /// What the retransmission schedule runs from while open: when it last started over (see
    /// [`Engine::restart_rto`]), or else the SYN-ACK's time; while closing, our first FIN's.
    fn rto_base(&self, idx: u32, now_us: u64) -> u64 {
        let conn = self.conn(idx);
        let flight = match (conn.state(), conn.buf) {
            (State::Open, buf) if buf != NIL => self.pool.get(buf).flight_us,
            _ => None,
        };
        abs_us(now_us, flight.unwrap_or(conn.since_us))
    }

    /// When the next retransmission (or zero-window probe) is due: `since` plus RTO·(2^(k+1) −
    /// 1) after k of them since the schedule started, probes counted.
    fn rto_due(&self, idx: u32, since: u64) -> u64 {
        let conn = self.conn(idx);
        let probes = match conn.buf {
            NIL => 0,
            buf => u32::from(self.pool.get(buf).probes),
        };
        let k = (conn.retries() + probes).min(40);
        since.saturating_add(rto_us(conn).saturating_mul((2u64 << k) - 1))
    }

    /// Whether retransmissions are left (`max_retransmits`).
    fn retrying(&self, idx: u32) -> bool {
        self.conn(idx).retries() < u32::from(self.cfg.max_retransmits)
    }

    /// Whether the request is still to be sent again on the RTO: part of it is unacknowledged,
    /// and either retransmissions are left or the peer's window is shut (a probe is due, and
    /// probes do not count).
    fn request_resendable(&self, idx: u32) -> bool {
        let conn = self.conn(idx);
        let zero_window = conn.send_limit() == conn.acked();
        conn.acked() < conn.req_len() && (zero_window || self.retrying(idx))
    }

    /// Arms the connection's timer for its next deadline.
    fn rearm(&mut self, idx: u32, now_us: u64) {
        let tick = self.next_deadline(idx, now_us).div_ceil(1000);
        self.wheel.unlink(&mut self.table.slab, idx);
        self.wheel.link(&mut self.table.slab, idx, tick);
    }

    /// Owes an ACK for in-order data: at once for the second unacknowledged segment,
    /// otherwise after `delayed_ack_us`.
    fn delay_ack(&mut self, idx: u32, ck: Cookie, now_us: u64) {
        let bits = &mut self.conn_mut(idx).bits;
        if bits.has(Bits::SEG_UNACKED) {
            self.queue_ack(idx, ck);
            return;
        }
        bits.set(Bits::SEG_UNACKED | Bits::ACK_PENDING, true);
        let tick = (now_us + self.cfg.delayed_ack_us).div_ceil(1000);
        self.wheel.arm_by(&mut self.table.slab, idx, tick);
    }

    fn retransmit_request(&mut self, idx: u32, ck: Cookie) {
        let conn = self.conn(idx);
        let (acked, limit) = (conn.acked(), conn.send_limit());
        if limit > acked {
            self.stats.retransmits_sent += self.queue_request(idx, ck, acked, limit);
            let bits = &mut self.conn_mut(idx).bits;
            bits.put(Bits::RETRIES, bits.get(Bits::RETRIES) + 1);
            return;
        }
        // Zero window: probe with the next byte.
        self.push_data(idx, ck, acked, 1);
        self.stats.retransmits_sent += 1;
        let buf = self.buffer(idx);
        let rx = self.pool.get_mut(buf);
        rx.probes = rx.probes.saturating_add(1);
    }

    // ---- sending --------------------------------------------------------------------------

    fn queue_ack(&mut self, idx: u32, ck: Cookie) {
        self.push_ack(idx, ck, false);
    }

    /// The ACK that goes ahead of the request (the handshake's, or its repeat).
    fn queue_handshake_ack(&mut self, idx: u32, ck: Cookie) {
        self.push_ack(idx, ck, true);
    }

    fn push_ack(&mut self, idx: u32, ck: Cookie, before_request: bool) {
        let bits = &mut self.conn_mut(idx).bits;
        if !bits.has(Bits::ACK_QUEUED) {
            bits.set(Bits::ACK_QUEUED, true);
            self.tx.push(Tx::Conn {
                idx,
                ck,
                seg: ConnSeg::Ack { before_request },
            });
        }
    }

    /// Queues request bytes `[from, to)` as segments of at most the peer's MSS; returns how
    /// many.
    fn queue_request(&mut self, idx: u32, ck: Cookie, from: u32, to: u32) -> u64 {
        let conn = self.conn(idx);
        let options = if conn.has(Bits::TS_OK) {
            TIMESTAMPS_LEN
        } else {
            0
        };
        let most = (conn.bits.get(Bits::MSS) - options).min(MAX_REQUEST_LEN as u32);
        let mut segments = 0;
        let mut off = from;
        while off < to {
            let len = most.min(to - off);
            self.push_data(idx, ck, off, len);
            off += len;
            segments += 1;
        }
        segments
    }

    /// Queues bytes `[off, off + len)` of what the connection sends, naming its session's
    /// buffer (if it has a session) to cut them from.
    fn push_data(&mut self, idx: u32, ck: Cookie, off: u32, len: u32) {
        let buf = self.conn(idx).buf;
        let sent = if buf != NIL && self.pool.get(buf).session.is_some() {
            buf
        } else {
            NIL
        };
        self.tx.push(Tx::Conn {
            idx,
            ck,
            seg: ConnSeg::Data {
                off: off as u16,
                len: len as u16,
                sent,
            },
        });
    }

    /// Our ISN and port for a connection: the cookie, recomputed.
    fn cookie(&self, idx: u32) -> Cookie {
        let conn = self.conn(idx);
        let target = conn.target();
        let token = self
            .cfg
            .validator
            .token(self.ours(target), target, conn.port);
        Cookie {
            iss: token as u32,
            port: self.our_port(token),
        }
    }

    /// Our address in the family of `target` (a connection exists only in such a family).
    fn ours(&self, target: IpAddr) -> IpAddr {
        self.link
            .ours(target)
            .expect("a connection exists only in a family we have an address of")
    }

    fn render_rst(
        &mut self,
        buf: &mut [u8],
        target: IpAddr,
        port: u16,
        our_port: u16,
        seq: u32,
        ack: Option<u32>,
    ) -> usize {
        self.stats.rsts_sent += 1;
        let ours = self.link.ours(target).expect("RSTs answer our own family");
        let rst = Header::new(our_port, port, seq, ack, TcpFlags::RST);
        segment::render(&self.link, ours, target, &rst, &[], buf)
    }

    /// Renders a connection's ACK, data segment or FIN from its state now. Data whose bytes
    /// cannot be had (an app that renders a shorter request the second time) goes as a pure
    /// ACK instead: the frame is still written, as [`Engine::tx_pending`] counted it, and no
    /// byte goes out that the connection did not send.
    fn render_conn(
        &mut self,
        buf: &mut [u8],
        idx: u32,
        ck: Cookie,
        seg: ConnSeg,
        now_us: u64,
    ) -> usize {
        let data = match seg {
            ConnSeg::Data { off, len, sent } => self.data_bytes(idx, off, len, sent),
            _ => None,
        };
        let window = self.advertised_window(idx);
        let sack_ranges = self.sack_blocks(idx);
        let conn = self.conn(idx);
        let target = conn.target();
        let ours = self.ours(target);
        let first = ck.iss.wrapping_add(1);
        let (seq, flags) = match (seg, &data) {
            (ConnSeg::Data { off, .. }, Some((_, range))) => {
                let push = if range.end == conn.req_len() as usize {
                    TcpFlags::PSH
                } else {
                    TcpFlags::empty()
                };
                (first.wrapping_add(u32::from(off)), TcpFlags::ACK | push)
            }
            (ConnSeg::Fin, _) => (
                first.wrapping_add(conn.req_len()),
                TcpFlags::FIN | TcpFlags::ACK,
            ),
            (ConnSeg::Ack { before_request }, _) => (
                first.wrapping_add(ack_offset(conn, before_request)),
                TcpFlags::ACK,
            ),
            (ConnSeg::Data { .. }, None) => {
                (first.wrapping_add(ack_offset(conn, false)), TcpFlags::ACK)
            }
        };
        let payload_len = data.as_ref().map_or(0, |(_, range)| range.len());
        let timestamps = conn
            .has(Bits::TS_OK)
            .then_some((now_us as u32, conn.ts_recent));
        let tcp = Header {
            window,
            sacks: sacks_that_fit(conn, sack_ranges, payload_len),
            timestamps,
            ..Header::new(ck.port, conn.port, seq, Some(conn.rcv_nxt), flags)
        };
        let bits = &mut self.conn_mut(idx).bits;
        bits.set(Bits::ACK_PENDING | Bits::SEG_UNACKED, false);
        match (seg, payload_len) {
            (ConnSeg::Fin, _) => bits.set(Bits::FIN_SENT, true),
            (_, 0) => self.stats.acks_sent += 1,
            _ => {}
        }
        self.stats.sack_blocks_sent += tcp.sacks.iter().flatten().count() as u64;
        let payload = match data {
            None => &[][..],
            Some((NIL, range)) => self.request.get(range).unwrap_or_default(),
            Some((sent, range)) => self.pool.get(sent).sent.get(range).unwrap_or_default(),
        };
        segment::render(&self.link, ours, target, &tcp, payload, buf)
    }

    /// Where bytes `[off, off + len)` of a connection are: in the session's buffer `sent`, or
    /// ([`NIL`]) in the request, rendered into the scratch buffer now. None when they are not
    /// all there.
    fn data_bytes(
        &mut self,
        idx: u32,
        off: u16,
        len: u16,
        sent: u32,
    ) -> Option<(u32, std::ops::Range<usize>)> {
        let range = usize::from(off)..usize::from(off) + usize::from(len);
        let have = if sent != NIL {
            self.pool.get(sent).sent.len()
        } else {
            let conn = self.conn(idx);
            let (target, port) = (conn.target(), conn.port);
            self.app_request(target, port).len()
        };
        (range.end <= have).then_some((sent, range))
    }

    /// SACK blocks for the connection's ACKs: its out-of-order ranges, most recent first.
    fn sack_blocks(&self, idx: u32) -> [Option<(u32, u32)>; 3] {
        let mut blocks = [None; 3];
        let conn = self.conn(idx);
        if !conn.has(Bits::SACK_OK) || conn.buf == NIL || conn.state() != State::Open {
            return blocks;
        }
        let rx = self.pool.get(conn.buf);
        let base = conn.rcv_nxt.wrapping_sub(rx.in_order);
        for (block, &(start, end)) in blocks.iter_mut().zip(rx.ranges()) {
            *block = Some((base.wrapping_add(start), base.wrapping_add(end)));
        }
        blocks
    }

    // ---- windows --------------------------------------------------------------------------

    fn in_order(&self, idx: u32) -> u32 {
        match self.conn(idx).buf {
            NIL => 0,
            buf => self.pool.get(buf).in_order,
        }
    }

    /// Bytes beyond `rcv_nxt` the connection accepts now: the receive window, no more than
    /// `max_bytes` allows, no more than the pool's memory allows.
    fn rcv_allowance(&self, idx: u32) -> u32 {
        let conn = self.conn(idx);
        if conn.state() == State::Closing {
            return self.cfg.rcv_window;
        }
        let (in_order, held) = match conn.buf {
            NIL => (0, 0),
            buf => {
                let rx = self.pool.get(buf);
                (rx.in_order, rx.held_beyond())
            }
        };
        let by_config = self.by_config(in_order);
        let by_memory = (held as usize).saturating_add(self.pool.headroom());
        by_config.min(by_memory.min(u32::MAX as usize) as u32)
    }

    fn by_config(&self, in_order: u32) -> u32 {
        let left = self.cfg.max_bytes - in_order as usize;
        self.cfg.rcv_window.min(left.min(u32::MAX as usize) as u32)
    }

    /// The window field of the connection's next segment. Short of buffer memory (less than
    /// one MSS), it is zero and the connection is marked to get a window update later. Less
    /// than one MSS before `max_bytes`, it is one MSS: a sender puts no less than an MSS into
    /// a smaller window until its persist timer fires (200 ms or more), and what we receive
    /// past `max_bytes` is not kept anyway.
    fn advertised_window(&mut self, idx: u32) -> u16 {
        let allowance = self.rcv_allowance(idx);
        let conn = self.conn(idx);
        let mss = u32::from(self.cfg.mss);
        let mut window = allowance;
        if conn.state() == State::Open && allowance < mss {
            let by_config = self.by_config(self.in_order(idx));
            if allowance < by_config {
                window = 0;
                if !conn.has(Bits::STARVED) && !conn.has(Bits::DEAD) {
                    self.conn_mut(idx).bits.set(Bits::STARVED, true);
                    self.starved.push(idx);
                }
            } else if by_config < self.cfg.rcv_window {
                window = mss; // the last bytes before max_bytes
            }
        }
        // Scaled, the window is rounded up, as Linux does: rounded down, the last bytes before
        // `max_bytes` (less than one scale unit) would get a zero window, and the reply would
        // stall there. Data past the allowance is not kept.
        let conn = self.conn(idx);
        let scaled = if conn.has(Bits::WS_OK) {
            window.div_ceil(1 << self.cfg.wscale)
        } else {
            window
        };
        scaled.min(0xffff) as u16
    }

    /// Sends window updates to starved connections once buffer memory is back.
    fn reopen_windows(&mut self) {
        if self.starved.is_empty() || self.pool.headroom() < usize::from(self.cfg.mss) {
            return;
        }
        let starved = std::mem::take(&mut self.starved);
        for &idx in &starved {
            let conn = self.conn(idx);
            if conn.has(Bits::STARVED) && !conn.has(Bits::DEAD) {
                self.conn_mut(idx).bits.set(Bits::STARVED, false);
                let ck = self.cookie(idx);
                self.queue_ack(idx, ck);
            }
        }
        self.starved = starved;
        self.starved.clear();
    }
}

/// How far into our stream a pure ACK's sequence number is: at SND.NXT, which while open is
/// where the send limit is (never behind what the peer has, so the ACK is never "old") and
/// after our FIN is past it; for the handshake's ACK, which goes ahead of the request, at the
/// first byte not acknowledged.
fn ack_offset(conn: &Conn, before_request: bool) -> u32 {
    match conn.state() {
        State::Open if before_request => conn.acked(),
        State::Open => conn.send_limit(),
        State::Closing => conn.req_len() + u32::from(conn.has(Bits::FIN_SENT)),
    }
}

/// The SACK blocks a segment of the connection carries: all of them on a pure ACK; on a data
/// segment only as many as fit the peer's MSS with the data and the timestamps (none when the
/// data fills it), as the MSS bounds data and options together.
fn sacks_that_fit(
    conn: &Conn,
    mut sacks: [Option<(u32, u32)>; 3],
    payload_len: usize,
) -> [Option<(u32, u32)>; 3] {
    if payload_len == 0 {
        return sacks;
    }
    let timestamps = if conn.has(Bits::TS_OK) {
        TIMESTAMPS_LEN
    } else {
        0
    };
    let used = payload_len as u32 + timestamps + SACK_OPTION_LEN;
    let fit = (conn.bits.get(Bits::MSS).saturating_sub(used) / SACK_BLOCK_LEN) as usize;
    for block in sacks.iter_mut().skip(fit) {
        *block = None;
    }
    sacks
}

/// Whether a segment lies in the receive window (RFC 9293 3.10.7.4): `d` is its sequence
/// number minus `rcv_nxt`.
fn acceptable(d: i64, seg: &Seg, window: u32) -> bool {
    let len = seg.payload.len() as i64 + i64::from(seg.has(TcpFlags::FIN));
    let window = i64::from(window);
    let inside = |at: i64| (0..window).contains(&at);
    match (len, window) {
        (0, 0) => d == 0,
        (0, _) => inside(d),
        (_, 0) => false,
        _ => inside(d) || inside(d + len - 1),
    }
}

/// SYN to SYN-ACK from the echoed timestamp (our TSval is our clock in µs). The echo must
/// lie between the earliest a SYN of ours can have left (`span_us` ago: the SYN retries'
/// span) and now; anything else is no echo of ours (a middlebox's or a broken stack's), and a
/// bogus RTT would set the RTO for the whole connection.
fn echo_rtt(seg: &Seg, now_us: u64, span_us: u64) -> Option<u32> {
    let (_, tsecr) = seg.tcp.timestamp?;
    // Zero means the peer echoed nothing. An echo from the future wraps to a huge age.
    let rtt = (now_us as u32).wrapping_sub(tsecr);
    (tsecr != 0 && u64::from(rtt) <= span_us).then_some(rtt)
}

/// Whether a SYN-ACK on an open connection echoes a SYN sent after the one that opened it:
/// the opening SYN-ACK's echo is `since_us - rtt_us` (both from it, our TSval being our µs
/// clock). Unknown without timestamps: then no.
fn answers_a_later_syn(conn: &Conn, seg: &Seg) -> bool {
    let (Some((_, tsecr)), Some(rtt), State::Open) = (seg.tcp.timestamp, conn.rtt(), conn.state())
    else {
        return false;
    };
    let opening_echo = conn.since_us.wrapping_sub(rtt);
    tsecr != 0 && tsecr.wrapping_sub(opening_echo) as i32 > 0
}

/// The absolute time (µs) of a 32-bit timestamp taken at or before `now_us`.
fn abs_us(now_us: u64, t: u32) -> u64 {
    now_us.saturating_sub(u64::from((now_us as u32).wrapping_sub(t)))
}

/// The retransmission timeout: three RTTs (RFC 6298's first estimate), 200 ms to 60 s, 1 s
/// without an RTT.
fn rto_us(conn: &Conn) -> u64 {
    match conn.rtt() {
        Some(rtt) => (3 * u64::from(rtt)).clamp(MIN_RTO_US, MAX_RTO_US),
        None => INITIAL_RTO_US,
    }
}

fn check_config(cfg: &Config, app: &impl App) -> Result<(), String> {
    if cfg.src_ip.is_none() && cfg.src_ip6.is_none() {
        return Err("no source address: give an IPv4 or IPv6 address to connect from".into());
    }
    let request = app.max_request_len();
    if request > MAX_REQUEST_LEN {
        return Err(format!(
            "the request can be {request} bytes, more than the {MAX_REQUEST_LEN} one segment carries: shorten it"
        ));
    }
    if cfg.max_outstanding == 0 || cfg.max_outstanding > MAX_CAPACITY {
        return Err(format!(
            "max outstanding connections {} is out of range: give 1 to {MAX_CAPACITY}",
            cfg.max_outstanding
        ));
    }
    if cfg.wscale > 14 {
        return Err(format!(
            "window scale {} is above 14 (RFC 7323): give 0 to 14",
            cfg.wscale
        ));
    }
    if cfg.mss < 536 {
        return Err(format!("MSS {} is below 536: give at least 536", cfg.mss));
    }
    let most = 0xffffu64 << cfg.wscale;
    if cfg.rcv_window == 0 || u64::from(cfg.rcv_window) > most {
        return Err(format!(
            "receive window {} is out of range for window scale {}: give 1 to {most}",
            cfg.rcv_window, cfg.wscale
        ));
    }
    if cfg.max_bytes == 0 || cfg.max_bytes > 1 << 30 {
        return Err(format!(
            "max bytes per connection {} is out of range: give 1 to 1 GiB",
            cfg.max_bytes
        ));
    }
    for (name, value) in [
        ("first-byte timeout", cfg.first_byte_timeout_us),
        ("idle timeout", cfg.idle_timeout_us),
        ("total timeout", cfg.total_timeout_us),
        ("close timeout", cfg.close_timeout_us),
        ("SYN span", cfg.syn_span_us),
    ] {
        if value == 0 || value > MAX_TIMEOUT_US {
            return Err(format!(
                "{name} {value} µs is out of range: give 1 µs to 30 minutes"
            ));
        }
    }
    if cfg.delayed_ack_us > MAX_DELAYED_ACK_US {
        return Err(format!(
            "delayed ACK {} µs is above 500 ms (RFC 1122): give at most 500000",
            cfg.delayed_ack_us
        ));
    }
    if u32::from(cfg.max_retransmits) > Bits::RETRIES.max() {
        return Err(format!(
            "max retransmits {} is above {}: give fewer",
            cfg.max_retransmits,
            Bits::RETRIES.max()
        ));
    }
    Ok(())
}
