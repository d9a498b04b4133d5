//! The client half of TCP in user space, for `sonde grab`: open connections to many targets at
//! once from batches of frames, send one request, receive the reply, close.
//!
//! - **No state until a SYN-ACK validates.** A SYN's initial sequence number and source port
//!   come from a keyed cookie of (our address, target, port), as in `scan`; a SYN-ACK whose ACK
//!   does not match the cookie is invalid and creates nothing.
//! - **A compact connection table** keyed by the 4-tuple, receive buffers from a pool taken only
//!   when data arrives, and a timer wheel for the handshake, first-byte, idle and total
//!   timeouts.
//! - **The hot path** allocates nothing, takes no lock and makes no system call: frames come in
//!   through [`Engine::on_frame`], and the control segments it queues (ACKs, requests, RSTs,
//!   FINs) leave in one batch through [`Engine::write_tx`].
//! - SYN retries are stateless: [`SynRetries`] re-sends the SYN of a target that has not
//!   answered yet, with backoff, holding only the target's index until then.
//!
//! No I/O here: the run loop (`sonde-engine`) moves frames between this engine and a backend.
#![forbid(unsafe_code)]

pub mod app;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use app::App;
use sonde_craft::cookie::{PortRange, Validator};
use sonde_wire::MacAddr;

/// How a connection ended: one output row per target carries one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The reply is complete: the app said so, the server closed after sending data, or
    /// `max_bytes` were received.
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
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Success,
        Status::Refused,
        Status::SynTimeout,
        Status::DataTimeout,
        Status::Reset,
        Status::Closed,
    ];

    /// The name in output rows: success, refused, syn-timeout, data-timeout, reset, closed.
    pub fn name(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Refused => "refused",
            Status::SynTimeout => "syn-timeout",
            Status::DataTimeout => "data-timeout",
            Status::Reset => "reset",
            Status::Closed => "closed",
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
    /// Source ports connections use (`ports.port_for(token)`).
    pub ports: PortRange,
    pub ttl: u8,
    /// MSS we offer (and the largest segment we accept as in-window data).
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
}

impl Config {
    /// Sensible defaults around the given link addresses: MSS 1460, window scale 7, a 64 KiB
    /// window, RST close, 1 MiB per connection, timeouts 5 s / 5 s / 15 s, delayed ACK 40 ms.
    pub fn new(src_mac: MacAddr, dst_mac: MacAddr, validator: Validator) -> Config {
        Config {
            src_mac,
            dst_mac,
            src_ip: None,
            src_ip6: None,
            validator,
            ports: PortRange::DEFAULT,
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
    /// Segments of this connection the peer sent twice (retransmissions seen).
    pub retransmits_received: u32,
    /// Segments that arrived ahead of a gap.
    pub ooo_segments: u32,
}

/// What [`Engine::on_frame`] made of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// Not TCP to one of our ports and addresses: someone else's.
    NotOurs,
    /// Looks like ours but fails validation (bad cookie, no such connection, bad checksum).
    Invalid,
    /// The first answer of a target to our SYN (a SYN-ACK that opened a connection, or an RST
    /// that refused it): the run loop marks the target answered, so no SYN retry follows.
    Answered { addr: IpAddr, port: u16 },
    /// A segment of a connection, handled.
    Segment,
}

/// Counters over the engine's life, for the status line and the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub syn_sent: u64,
    pub established: u64,
    pub completed: u64,
    pub success: u64,
    pub refused: u64,
    pub timeouts: u64,
    pub resets: u64,
    pub closed: u64,
    pub retransmits_received: u64,
    pub retransmits_sent: u64,
    pub sack_blocks_sent: u64,
    pub ooo_segments: u64,
    pub acks_sent: u64,
    pub rsts_sent: u64,
    pub invalid: u64,
    /// SYN-ACKs turned away because the table was full (answered with an RST).
    pub table_full: u64,
    pub peak_outstanding: u64,
}

/// The engine: connection table, timers, receive buffers, and the queue of segments to send.
pub struct Engine<A: App> {
    _app: A,
    _cfg: Config,
}

impl<A: App> Engine<A> {
    /// Checks the configuration (a request must fit one segment, `max_outstanding` > 0, …)
    /// and reserves the table. Errors are one line for the user.
    pub fn new(cfg: Config, app: A) -> Result<Engine<A>, String> {
        let _ = (&cfg, &app);
        todo!("sonde-tcp engine")
    }

    pub fn app(&self) -> &A {
        &self._app
    }

    pub fn config(&self) -> &Config {
        &self._cfg
    }

    /// Connections in the table now.
    pub fn outstanding(&self) -> usize {
        todo!()
    }

    /// Writes the first SYN to (`addr`, `port`) into `buf` (≥ 1514 bytes) and returns the
    /// frame's length; 0 when we have no address of that family. Creates no state; its
    /// timestamp carries `now_us` so the SYN-ACK gives the RTT.
    pub fn write_syn(&mut self, buf: &mut [u8], addr: IpAddr, port: u16, now_us: u64) -> usize {
        let _ = (buf, addr, port, now_us);
        todo!()
    }

    /// Handles one received Ethernet frame at `now_us`.
    pub fn on_frame(&mut self, frame: &[u8], now_us: u64) -> Rx {
        let _ = (frame, now_us);
        todo!()
    }

    /// Runs the timers due by `now_us` (delayed ACKs, retransmission of the request or FIN,
    /// timeouts). Cheap when nothing is due; call it once per loop pass.
    pub fn on_tick(&mut self, now_us: u64) {
        let _ = now_us;
        todo!()
    }

    /// Segments queued to send.
    pub fn tx_pending(&self) -> usize {
        todo!()
    }

    /// Writes the next queued segment into `buf` (≥ 1514 bytes) as a whole Ethernet frame and
    /// returns its length (0: nothing queued).
    pub fn write_tx(&mut self, buf: &mut [u8], now_us: u64) -> usize {
        let _ = (buf, now_us);
        todo!()
    }

    /// Hands every connection that ended since the last call to `f`, with the reply bytes kept
    /// (at most `max_bytes`), then returns their buffers to the pool.
    pub fn drain_outcomes(&mut self, f: impl FnMut(&Outcome, &[u8])) {
        let _ = f;
        todo!()
    }

    /// Ends every connection now (Ctrl-C, end of run): each is closed as configured and
    /// reported with the status it has reached (`DataTimeout` when its reply is incomplete).
    pub fn abort_all(&mut self, now_us: u64) {
        let _ = now_us;
        todo!()
    }

    pub fn stats(&self) -> &Stats {
        todo!()
    }

    /// Bytes the table, timers and buffer pool hold now (for the summary and the memory test).
    pub fn memory_bytes(&self) -> usize {
        todo!()
    }
}

/// Stateless SYN retries: the indexes of targets whose SYN went out, each due again after a
/// backoff (1 s, then 2 s, 4 s, …) unless the target answered in between. Holding only the
/// index (8 bytes a SYN in flight), it is the "no state until a SYN-ACK" rule applied to
/// retries too.
pub struct SynRetries {
    _private: (),
}

impl SynRetries {
    /// `retries` extra SYNs per target, the first `first_us` after the SYN, doubling.
    pub fn new(retries: u8, first_us: u64) -> SynRetries {
        let _ = (retries, first_us);
        todo!()
    }

    /// Records that the SYN (attempt 0) to target `index` left at `now_us`.
    pub fn sent(&mut self, index: u64, now_us: u64) {
        let _ = (index, now_us);
        todo!()
    }

    /// SYNs in flight (sent, not yet given up, answered or not): for backpressure.
    pub fn in_flight(&self) -> usize {
        todo!()
    }

    /// Pops every retry due by `now_us`, skipping targets `answered` says have answered:
    /// `resend(index)` for one to send again (it is rescheduled with a doubled delay), and
    /// `gave_up(index)` for one whose last retry went unanswered (a `SynTimeout` row). Stops
    /// early when `resend` returns false (no room in this batch): the rest stay due.
    pub fn poll(
        &mut self,
        now_us: u64,
        answered: impl FnMut(u64) -> bool,
        resend: impl FnMut(u64) -> bool,
        gave_up: impl FnMut(u64),
    ) {
        let _ = (now_us, answered, resend, gave_up);
        todo!()
    }
}
