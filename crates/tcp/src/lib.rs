//! The client half of TCP in user space, for `sonde grab`: open connections to many targets at
//! once from batches of frames, send one request, receive the reply, close.
//!
//! Takes targets to connect to and the frames that arrive for them; gives the frames to send (SYNs,
//! ACKs, requests, RSTs, FINs) and, per target, its outcome and reply bytes. Uses sonde-wire
//! (parsing) and sonde-craft (cookies and port lanes).
//!
//! - **No state until a SYN-ACK validates.** A SYN's initial sequence number and source port
//!   come from a keyed cookie of (our address, target, port), as in `scan`; a SYN-ACK whose ACK
//!   does not match the cookie is invalid and creates nothing.
//! - **A compact connection table** keyed by the 4-tuple: 56-byte entries in a slab and an
//!   open-addressing index, about 62.5 bytes per connection with the table full (10 M
//!   connections: 595 MiB); receive buffers from a pool taken only when data arrives (or a
//!   FIN ahead of a gap, zero-window probes, or a retransmission schedule that starts over
//!   after the handshake, which keep their state there); a 1 ms timer wheel for delayed ACKs,
//!   retransmissions and the first-byte, idle and total timeouts.
//! - **The hot path** allocates nothing (vectors that grow are reused), takes no lock and makes
//!   no system call: frames come in through [`Engine::on_frame`], one table probe each, and
//!   the segments it queues (ACKs, requests, RSTs, FINs) leave in one batch through
//!   [`Engine::write_tx`], rendered straight into the caller's buffers.
//! - **ICMP errors are read** when their quote validates (our address, the cookie's port, and
//!   the cookie's ISN or a sequence number the connection has sent and not had acknowledged):
//!   a destination unreachable about a SYN ends the target as [`Status::Unreachable`] at once;
//!   about an established connection it is a soft error, counted. Fragmentation needed and
//!   Packet Too Big lower the connection's MSS and send its unacknowledged request again.
//! - SYN retries are stateless: [`SynRetries`] re-sends the SYN of a target that has not
//!   answered yet, with backoff, holding only the target's index until then.
//!
//! No I/O here: the run loop (`sonde-engine`) moves frames between this engine and a backend.
//!
//! # For the run loop
//!
//! - **Clock.** `now_us` is any monotonic microsecond clock (e.g. µs since the run started);
//!   it must never go back. Timers have 1 ms resolution. Connections keep 32-bit timestamps,
//!   which is why every timeout is at most 30 minutes (checked by [`Engine::new`]).
//! - **A pass:** `on_frame` (or `on_frame_with`) for each received frame, then `on_tick` once,
//!   `write_syn` for new targets, then exactly [`Engine::tx_pending`] frames through
//!   `write_tx` — the count is exact, so it can be the `count` of `FrameTx::tx_batch`, with
//!   `write_tx` in its `fill` — then `drain_outcomes`. Entries freed during a pass are reused
//!   only once `write_tx` has emptied the queue, so drain it every pass.
//! - **Buffers** given to `write_syn` and `write_tx` hold at least 1514 bytes; no frame is
//!   longer (requests are at most [`MAX_REQUEST_LEN`] bytes).
//! - **Answers.** [`Rx::Answered`] comes once per SYN-ACK that opened a connection and per RST
//!   that refused one. A SYN-ACK turned away because the table is full is not an answer: the
//!   SYN retry tries the target again. With [`Engine::on_frame_with`] and the bitmap of
//!   answered targets, a late duplicate SYN-ACK or RST (e.g. one answering a retried SYN after
//!   the first answer's connection ended) creates no second connection or row.
//! - **Backpressure.** Compare [`Engine::outstanding`] plus SYNs in flight with
//!   `max_outstanding` before writing new SYNs.
//! - **Memory.** [`Engine::new`] reserves the table for `max_outstanding` (the index is zeroed
//!   memory, so pages are only touched as it fills). For tables of millions, running with
//!   `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` lets glibc back them with transparent huge
//!   pages, which saved about a fifth of the CPU time in the 10 M connection test.
#![forbid(unsafe_code)]

pub mod app;
mod conn;
mod engine;
mod retry;
mod rxbuf;
mod segment;
mod table;
mod timer;

#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use app::{App, ReplyCursor, Session, MAX_SESSION_SEND};
pub use engine::{ChallengeBudget, Engine, CHALLENGE_ACKS_PER_SECOND, MAX_REQUEST_LEN};
pub use retry::SynRetries;
pub use segment::our_port_of;
use sonde_craft::cookie::{PortLane, PortRange, Validator};
use sonde_wire::MacAddr;

/// How a connection ended: one output row per target carries one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The reply is complete: the app said so, the server closed after sending data, or
    /// `max_bytes` were received (the outcome says `truncated`).
    Success,
    /// The target answered the SYN with an RST (port closed).
    Refused,
    /// No SYN-ACK after every SYN retry.
    SynTimeout,
    /// Handshake done, then the first-byte, idle or total timeout ran out before the reply
    /// was complete.
    DataTimeout,
    /// The server reset the connection after the handshake, before the reply was complete.
    Reset,
    /// The server closed (FIN) before sending any data.
    Closed,
    /// An ICMP destination unreachable (ICMPv6's too) answered the SYN; the outcome carries its
    /// type and code.
    Unreachable,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Success,
        Status::Refused,
        Status::SynTimeout,
        Status::DataTimeout,
        Status::Reset,
        Status::Closed,
        Status::Unreachable,
    ];

    /// The name in output rows: success, refused, syn-timeout, data-timeout, reset, closed,
    /// unreachable.
    pub fn name(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Refused => "refused",
            Status::SynTimeout => "syn-timeout",
            Status::DataTimeout => "data-timeout",
            Status::Reset => "reset",
            Status::Closed => "closed",
            Status::Unreachable => "unreachable",
        }
    }
}

/// How a finished connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseMode {
    /// One RST: the server keeps no TIME_WAIT, and neither side holds anything afterwards.
    Rst,
    /// FIN, then wait (bounded) for the server's FIN and ACK it: graceful.
    Fin,
}

/// Everything the engine needs to know, fixed for a run.
#[derive(Clone, Debug)]
pub struct Config {
    pub src_mac: MacAddr,
    /// The next hop's MAC (every frame goes to it).
    pub dst_mac: MacAddr,
    /// Our addresses; a family without one cannot be used.
    pub src_ip: Option<Ipv4Addr>,
    pub src_ip6: Option<Ipv6Addr>,
    /// The cookie key: ISNs and source ports come from `validator.token(ours, target, port)`.
    pub validator: Validator,
    /// Source ports connections use (`ports.port_for_lane(token, port_lane)`).
    pub ports: PortRange,
    /// The share of `ports` this engine uses: grab's threads each run an engine on a lane of
    /// their own, so a reply's port names its connection's owner.
    pub port_lane: PortLane,
    pub ttl: u8,
    /// MSS we offer over IPv4 (IPv6 offers 20 bytes less: its header is 20 bytes longer); at
    /// least 536. Larger segments are still accepted: receive offload may merge segments.
    pub mss: u16,
    /// Window scale we offer (0..=14); the receive window is `rcv_window`.
    pub wscale: u8,
    /// Receive window in bytes (what we advertise, after scaling).
    pub rcv_window: u32,
    /// Connections (established or closing) the table holds at most.
    pub max_outstanding: usize,
    /// Keep at most this many reply bytes per connection; the connection then closes as
    /// `Success`.
    pub max_bytes: usize,
    /// Send the request in the handshake's final ACK instead of right after it.
    pub request_in_ack: bool,
    pub close: CloseMode,
    /// Timeouts in microseconds: from the handshake to the first reply byte, between reply
    /// bytes, and for the whole connection from its SYN-ACK.
    pub first_byte_timeout_us: u64,
    pub idle_timeout_us: u64,
    pub total_timeout_us: u64,
    /// Delayed ACK: at most this long, or every second full segment, whichever comes first.
    pub delayed_ack_us: u64,
    /// With `CloseMode::Fin`: how long after our FIN to wait for the peer's ACK and FIN
    /// before the entry is freed anyway.
    pub close_timeout_us: u64,
    /// Retransmissions of the request and of the FIN in a row, at most (0..=15): an ACK that
    /// advances starts the count again, as in Linux. The timeouts bound them too. Zero-window
    /// probes do not count: they go on, backing off, while the peer's window stays shut,
    /// bounded by the timeouts.
    pub max_retransmits: u8,
    /// How long after a target's first SYN its SYN-ACK can still come: the SYN retries' whole
    /// span ([`SynRetries::span_us`]). The SYN-ACK's echoed timestamp gives the RTT only when
    /// it lies within that span before now (Linux takes an echo only between the SYN's send
    /// time and now); another echo is bogus, and the first RTO is then 1 s.
    pub syn_span_us: u64,
    /// Bytes all receive buffers together may hold. When they do, connections advertise a
    /// zero window (no more than what they already hold) and get a window update once drained
    /// outcomes free memory. The advertised windows may add up to more than what is left, so
    /// a burst can still find no room: its data is dropped and retransmitted by the peer.
    pub rx_memory_limit: usize,
    /// Check the TCP (and IPv4 header) checksums of received frames, dropping mismatches as
    /// invalid (counted in `Stats::bad_checksums`). On by default: frames from a NIC carry
    /// full checksums, and a corrupted segment must never be taken as reply data. Turn it off
    /// only where the capture point sees frames whose checksum the sender left partial for
    /// offload to finish (a veth peer with transmit checksum offload on, read over AF_XDP);
    /// over an AF_PACKET ring such frames are marked and go through
    /// [`Engine::on_frame_partial_with`] instead. Frames we send always carry correct checksums.
    pub verify_checksums: bool,
    /// RFC 5961's challenge ACKs left this second: one budget for every engine made from
    /// clones of this configuration (grab's threads), so that [`CHALLENGE_ACKS_PER_SECOND`]
    /// holds for the run. A configuration made by [`Config::new`] has a budget of its own.
    pub challenge_budget: ChallengeBudget,
}

impl Config {
    /// Sensible defaults around the given link addresses: MSS 1460, window scale 7, a 64 KiB
    /// window, RST close, 1 MiB per connection, timeouts 5 s / 5 s / 15 s, delayed ACK 40 ms,
    /// close timeout 2 s, 6 retransmissions, SYN-ACKs up to 7 s after the first SYN (grab's
    /// two SYN retries: 1 + 2 + 4 s), 1 GiB of receive buffers, checksums verified.
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr, validator: Validator) -> Config {
        Config {
            src_mac,
            dst_mac,
            src_ip: None,
            src_ip6: None,
            validator,
            ports: PortRange::DEFAULT,
            port_lane: PortLane::ALL,
            ttl: 64,
            mss: 1460,
            wscale: 7,
            rcv_window: 64 * 1024,
            max_outstanding: 1 << 20,
            max_bytes: 1 << 20,
            request_in_ack: false,
            close: CloseMode::Rst,
            first_byte_timeout_us: 5_000_000,
            idle_timeout_us: 5_000_000,
            total_timeout_us: 15_000_000,
            delayed_ack_us: 40_000,
            close_timeout_us: 2_000_000,
            max_retransmits: 6,
            syn_span_us: 7_000_000,
            rx_memory_limit: 1 << 30,
            verify_checksums: true,
            challenge_budget: ChallengeBudget::default(),
        }
    }
}

/// One finished connection (or target that never connected), as output rows show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub addr: IpAddr,
    pub port: u16,
    /// Our source port.
    pub sport: u16,
    pub status: Status,
    /// SYN to SYN-ACK, when the peer echoed our timestamp (or the engine knows the SYN's time).
    pub rtt_us: Option<u64>,
    /// From the SYN-ACK to the first reply byte.
    pub t_first_byte_us: Option<u64>,
    /// From the SYN-ACK to the end of the connection.
    pub t_total_us: u64,
    /// Reply bytes received in order (at most `max_bytes` are kept and handed over).
    pub bytes: u64,
    /// The reply reached `max_bytes` and was cut there: the connection ended for that reason,
    /// before the app found the reply complete or the server closed (`bytes` is then
    /// `max_bytes`).
    pub truncated: bool,
    /// Segments of this connection the peer sent twice (retransmissions seen).
    pub retransmits_received: u32,
    /// Segments that arrived ahead of a gap.
    pub ooo_segments: u32,
    /// The ICMP error that ended the target (`Unreachable` only).
    pub icmp: Option<Icmp>,
}

/// An ICMP message's type and code, as received (e.g. 3/1, host unreachable; ICMPv6 1/3,
/// address unreachable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Icmp {
    pub icmp_type: u8,
    pub icmp_code: u8,
}

/// What [`Engine::on_frame`] made of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// Not TCP to one of our ports and addresses: someone else's.
    NotOurs,
    /// Looks like ours but fails validation (bad cookie, no such connection, bad checksum).
    Invalid,
    /// The first answer of a target to our SYN (a SYN-ACK that opened a connection, an RST
    /// that refused it, or an ICMP destination unreachable quoting it): the run loop marks the
    /// target answered, so no SYN retry follows.
    Answered { addr: IpAddr, port: u16 },
    /// A segment of a connection, handled.
    Segment,
    /// A segment of a connection that has ended (the server's FIN after our RST close, a
    /// retransmission): answered with an RST, as a closed port would.
    Late,
    /// An ICMP error about one of our segments that ends no target: a soft error or a smaller
    /// path MTU for a connection (see [`Stats`]), or one ignored (a too-big about a SYN, an
    /// error about a connection that has ended or a target that has its row already).
    Icmp,
}

/// Counters over the engine's life, for the status line and the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments of connections that had already ended (see [`Rx::Late`]).
    pub late: u64,
    /// First SYNs written by [`Engine::write_syn`] (retries included: the run loop writes
    /// those with it too).
    pub syn_sent: u64,
    /// SYN-ACKs that opened a connection.
    pub established: u64,
    /// Outcomes the engine produced: `success + refused + timeouts + resets + closed +
    /// unreachable`.
    pub completed: u64,
    pub success: u64,
    pub refused: u64,
    /// `DataTimeout` outcomes (abort included).
    pub timeouts: u64,
    pub resets: u64,
    pub closed: u64,
    /// Targets whose SYN an ICMP destination unreachable answered (`Unreachable` outcomes).
    pub unreachable: u64,
    /// Destination unreachables about established connections: soft errors (RFC 1122 4.2.3.9,
    /// RFC 5927), counted and otherwise ignored, as Linux does.
    pub icmp_soft_errors: u64,
    /// Fragmentation-needed and Packet Too Big errors that lowered a connection's MSS (its
    /// unacknowledged request then went out again at once, in segments of the new size).
    pub mss_lowered: u64,
    /// ICMP errors about our segments that changed nothing: a too-big about a SYN or giving no
    /// smaller MSS, an error about a connection that has ended or a target already answered.
    pub icmp_ignored: u64,
    /// Received segments whose data (some or all) had been received already.
    pub retransmits_received: u64,
    /// Request segments and FINs sent again, and zero-window probes.
    pub retransmits_sent: u64,
    /// SACK blocks in the segments written.
    pub sack_blocks_sent: u64,
    /// Received segments with data ahead of a gap.
    pub ooo_segments: u64,
    /// Pure ACKs written (handshake ACKs, delayed and immediate ACKs, window updates).
    pub acks_sent: u64,
    pub rsts_sent: u64,
    /// Challenge ACKs queued (RFC 5961): answers to an RST inside the window but not at the
    /// next expected sequence number, to a SYN on an open connection, and to an ACK of what we
    /// never sent (or from before our first byte). They count in `acks_sent` too.
    pub challenge_acks: u64,
    /// Challenge ACKs not sent because the run's budget for the second was spent.
    pub challenge_acks_limited: u64,
    /// SYN-ACKs on open connections that answered a SYN retry (their echo is of a SYN sent
    /// after the one that opened the connection): answered with a bare ACK, the request left
    /// to its timer. Counted in `acks_sent`.
    pub synacks_to_retries: u64,
    /// Frames to our addresses and ports that failed validation (bad cookie, no connection,
    /// bad checksum, malformed), ICMP errors whose quote fails it included.
    pub invalid: u64,
    /// Of `invalid`: frames whose TCP or IPv4 header checksum did not verify.
    pub bad_checksums: u64,
    /// SYN-ACKs turned away because the table was full (answered with an RST; not reported
    /// as answered, so the SYN retry tries the target again).
    pub table_full: u64,
    pub peak_outstanding: u64,
}

/// Several engines' counters together (grab's threads). `peak_outstanding` becomes the sum of
/// each engine's peak: at most that many connections were open at once.
impl std::ops::AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, other: &Stats) {
        // Destructured: a counter added to `Stats` must be added here too.
        let Stats {
            late,
            syn_sent,
            established,
            completed,
            success,
            refused,
            timeouts,
            resets,
            closed,
            unreachable,
            icmp_soft_errors,
            mss_lowered,
            icmp_ignored,
            retransmits_received,
            retransmits_sent,
            sack_blocks_sent,
            ooo_segments,
            acks_sent,
            rsts_sent,
            challenge_acks,
            challenge_acks_limited,
            synacks_to_retries,
            invalid,
            bad_checksums,
            table_full,
            peak_outstanding,
        } = other;
        self.late += late;
        self.syn_sent += syn_sent;
        self.established += established;
        self.completed += completed;
        self.success += success;
        self.refused += refused;
        self.timeouts += timeouts;
        self.resets += resets;
        self.closed += closed;
        self.unreachable += unreachable;
        self.icmp_soft_errors += icmp_soft_errors;
        self.mss_lowered += mss_lowered;
        self.icmp_ignored += icmp_ignored;
        self.retransmits_received += retransmits_received;
        self.retransmits_sent += retransmits_sent;
        self.sack_blocks_sent += sack_blocks_sent;
        self.ooo_segments += ooo_segments;
        self.acks_sent += acks_sent;
        self.rsts_sent += rsts_sent;
        self.challenge_acks += challenge_acks;
        self.challenge_acks_limited += challenge_acks_limited;
        self.synacks_to_retries += synacks_to_retries;
        self.invalid += invalid;
        self.bad_checksums += bad_checksums;
        self.table_full += table_full;
        self.peak_outstanding += peak_outstanding;
    }
}
