//! The grab mode: the client half of TCP in user space. Discovery is the SYN: the same target
//! feed, pacing, queues, status line and checkpoint as a scan, but a valid SYN-ACK opens a
//! connection, the request goes out in the handshake's ACK or right after it, the reply is
//! reassembled, and one row per target says how it ended.
//!
//! Two ways to run it: [`user`], sonde's own TCP client (`sonde-tcp`) over AF_XDP or a packet
//! ring, and [`kernel`], the same targets and apps over the kernel's sockets (non-blocking
//! connect and epoll): the baseline the user-space path is measured against.

mod dispatch;
pub mod kernel;
mod marks;
mod metrics;
pub mod outran;
pub mod rounds;
pub mod user;

#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use serde::Serialize;
use sonde_apps::{AnyApp, AppOutcome};
use sonde_meter::Counter;
use sonde_scan::output::Row;
use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, Outcome, Session, Status};

use crate::plan::RunPlan;
use crate::status::{per_second, StatusSource, Tick};

pub use user::{run, run_on, GrabIo};

/// An application as grab uses it: the engine's request/complete seam plus its output fields.
pub trait GrabApp: App + Send + Sync {
    fn name(&self) -> &'static str;
    /// The app's output fields, in the order `describe_reply` fills them.
    fn fields(&self) -> &'static [Field];
    /// The app's field values for a reply's bytes (with the connection's session when the app
    /// talks in turns), and whether the reply was the app's protocol.
    fn describe_reply(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
    ) -> (Vec<Value>, AppOutcome);
    /// The name of the target (`-I address[:port],name`), for the row's `name`.
    fn target_name(&self, addr: IpAddr, port: u16) -> Option<&str> {
        let _ = (addr, port);
        None
    }
}

impl GrabApp for AnyApp {
    fn name(&self) -> &'static str {
        self.kind().name()
    }
    fn fields(&self) -> &'static [Field] {
        AnyApp::fields(self)
    }
    fn describe_reply(
        &self,
        received: &[u8],
        session: Option<&dyn Session>,
    ) -> (Vec<Value>, AppOutcome) {
        AnyApp::describe_reply(self, received, session)
    }
    fn target_name(&self, addr: IpAddr, port: u16) -> Option<&str> {
        AnyApp::target_name(self, addr, port)
    }
}

/// A grab, ready to run.
pub struct GrabPlan<A: GrabApp> {
    pub run: RunPlan,
    pub tcp: sonde_tcp::Config,
    pub app: A,
    /// Extra SYNs per unanswered target, the first after `syn_timeout_us`, doubling.
    pub syn_retries: u8,
    pub syn_timeout_us: u64,
    /// Answer ARP requests for this address (a source the kernel does not own).
    pub arp_for: Option<Ipv4Addr>,
    /// The output fields selected (see [`fields`] and the app's).
    pub fields: Vec<&'static Field>,
}

const fn field(name: &'static str, kind: FieldType, help: &'static str) -> Field {
    Field { name, kind, help }
}

/// The fields every grab row has, before the app's. Addresses and ports are named from the
/// reply's side, as in a scan's rows (ZMap's): `saddr` and `sport` are the target's, `dport`
/// ours, so a scan's rows and a grab's join on (saddr, sport).
pub const FIELDS: &[Field] = &[
    field("saddr", FieldType::Addr, "the target's address"),
    field(
        "sport",
        FieldType::U16,
        "the target's port (the reply's source, as in scan rows)",
    ),
    field(
        "name",
        FieldType::Str,
        "the target's name from -I address[:port],name (its Host and SNI)",
    ),
    field(
        "dport",
        FieldType::U16,
        "our source port (the reply's destination)",
    ),
    field(
        "status",
        FieldType::Str,
        "how the protocol went, in ZGrab2's words: success, application-error (the server said no in its protocol), protocol-error (the reply is not the app's protocol), unknown-error (sonde could not finish the exchange: a session past its send budget), connection-refused, connection-timeout (no SYN-ACK), io-timeout (no whole reply in time), connection-closed (reset or closed early), unreachable (an ICMP error answered the SYN)",
    ),
    field(
        "tcp_status",
        FieldType::Str,
        "how the connection ended: success (a whole reply), refused, syn-timeout, data-timeout, reset, closed, unreachable",
    ),
    field("rtt_us", FieldType::Int, "SYN to SYN-ACK, microseconds"),
    field(
        "t_first_byte_us",
        FieldType::Int,
        "SYN-ACK to the first reply byte, microseconds",
    ),
    field(
        "t_total_us",
        FieldType::Int,
        "SYN-ACK to the end of the connection, microseconds",
    ),
    field("bytes", FieldType::Int, "reply bytes received in order"),
    field(
        "truncated",
        FieldType::Bool,
        "the reply reached --max-bytes and was cut there",
    ),
    field(
        "retransmits_received",
        FieldType::Int,
        "segments the server sent twice",
    ),
    field(
        "ooo_segments",
        FieldType::Int,
        "segments that arrived ahead of a gap",
    ),
    field(
        "icmp_type",
        FieldType::U8,
        "the ICMP error's type, when one answered the SYN (status unreachable)",
    ),
    field(
        "icmp_code",
        FieldType::U8,
        "the ICMP error's code (e.g. 3/1 host unreachable, ICMPv6 1/3 address unreachable)",
    ),
    field(
        "timestamp",
        FieldType::Micros,
        "end of the connection, microseconds since the Unix epoch",
    ),
];

/// Counters the engine thread shares with the status line.
#[derive(Default)]
pub struct GrabCounts {
    pub syn_sent: Counter,
    pub finished: Counter,
    pub success: Counter,
    pub outstanding: Counter,
    pub retransmits: Counter,
    pub drops: Counter,
    pub rows: Counter,
    pub syn_retransmitted: Counter,
    pub syn_timeouts: Counter,
    /// Frames that did not validate (the engine's and the loop's).
    pub invalid: Counter,
}

/// What a grab reports at the end (`--summary-json`).
#[derive(Serialize, Clone, Debug, Default)]
pub struct GrabSummary {
    pub targets: u64,
    pub syn_sent: u64,
    pub syn_retransmitted: u64,
    pub established: u64,
    pub completed: u64,
    pub success: u64,
    pub refused: u64,
    pub syn_timeouts: u64,
    pub timeouts: u64,
    pub resets: u64,
    pub closed: u64,
    /// Targets whose SYN an ICMP destination unreachable answered (rows `unreachable`).
    pub unreachable: u64,
    /// Destination unreachables about open connections (soft errors: counted, not acted on),
    /// too-bigs that lowered a connection's MSS, and ICMP errors that changed nothing.
    pub icmp_soft_errors: u64,
    pub mss_lowered: u64,
    pub icmp_ignored: u64,
    pub retransmits_received: u64,
    pub retransmits_sent: u64,
    pub sack_blocks_sent: u64,
    pub ooo_segments: u64,
    pub table_full: u64,
    pub invalid: u64,
    /// Segments of connections that had already ended (answered with an RST).
    pub late_segments: u64,
    /// Whether received checksums were verified (`--no-verify-checksums` turns it off).
    pub checksums_verified: bool,
    /// Frames to our addresses and ports whose TCP or IPv4 header checksum was wrong: dropped
    /// (counted in `invalid` too).
    pub bad_checksums: u64,
    /// Frames taken without verifying their checksum because the kernel marked it partial
    /// (AF_PACKET's `TP_STATUS_CSUMNOTREADY`: made on this host or by a veth peer).
    pub partial_checksums: u64,
    pub drops: u64,
    /// With several threads: frames for another thread's connection that could not be handed
    /// over (larger than the room the reader keeps, or than a record carries) and were lost.
    /// A lost RST or ICMP error turns its row's `reset` or `unreachable` into a timeout, and a
    /// lost segment is sent again by the peer (a retransmission sonde caused, not the network).
    pub handover_dropped: u64,
    pub conn_per_s: f64,
    pub wall_s: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub cpu_us_per_conn: f64,
    pub peak_outstanding: u64,
    pub peak_rss_bytes: u64,
    pub engine_bytes: u64,
    /// Bytes reserved for the record of which targets answered or were given up on (and, in a
    /// resumed run, which this run sent a SYN to): a bit per target of the space, one bitmap
    /// the threads share, allocated lazily (only the pages of targets reached become
    /// resident). A space of more than 2^34 targets keeps a window of recent ones per thread.
    pub answered_bytes: u64,
    /// Connections a second Ctrl-C ended without their closing segment (an RST) going out:
    /// their servers still hold them.
    pub left_open: u64,
    pub interrupted: bool,
    pub app: String,
    pub backend: String,
    /// Engine threads (`--threads`): each owns its connections; the figures are their sums.
    pub threads: u32,
    pub checkpoint: Option<String>,
    /// Where the engine thread's time went (sonde's own TCP client only; `None` for the
    /// kernel backend).
    #[serde(rename = "loop")]
    pub loop_stats: Option<LoopStats>,
    /// Targets that answered their first SYN, and those that answered only a SYN sent again
    /// (its first, or the answer to it, was lost on the way), counted over a sample of the
    /// targets in a space of more than 2^23 per thread (see `outran`); and the share of the
    /// space sampled.
    pub answered_first_syn: u64,
    pub answered_after_retry: u64,
    /// Of `answered_first_syn`: those answered after a retry of the SYN had left (a path
    /// longer than `--syn-timeout`; see `outran::raced_line`).
    pub answered_first_syn_after_retry: u64,
    pub answer_sample: f64,
    /// The first SYNs' rate, and how many a second the path carried by the first-try answers'
    /// arrival (see `outran::path_rate`); null when too few answered to say.
    pub first_syn_per_s: Option<f64>,
    pub path_syn_per_s: Option<f64>,
    /// The scanner's interface, and what it dropped itself during the run (deltas; all of its
    /// traffic; null where they could not be read), as scan's summary has them.
    pub iface_tx_dropped: Option<u64>,
    pub iface_rx_dropped: Option<u64>,
    /// One line on what was lost between here and the targets (SYNs answered only when sent
    /// again, segments retransmitted, the interface's drops) and how fast the run could have
    /// gone; null when nothing crossed the thresholds (see `outran`).
    pub losses: Option<String>,
    /// One line when SYN retries raced their answers (the path's round trip is longer than
    /// `--syn-timeout`): not a loss, but retries that cost each target a second SYN-ACK.
    pub syn_retries_raced: Option<String>,
}

impl GrabSummary {
    /// Adds a later round's counts (a run with several names per target runs one round per
    /// name; see `sonde grab -I`): counts add up, rates are over the rounds' whole time.
    pub fn add_round(&mut self, round: &GrabSummary) {
        self.targets += round.targets;
        self.syn_sent += round.syn_sent;
        self.syn_retransmitted += round.syn_retransmitted;
        self.established += round.established;
        self.completed += round.completed;
        self.success += round.success;
        self.refused += round.refused;
        self.syn_timeouts += round.syn_timeouts;
        self.timeouts += round.timeouts;
        self.resets += round.resets;
        self.closed += round.closed;
        self.unreachable += round.unreachable;
        self.retransmits_received += round.retransmits_received;
        self.retransmits_sent += round.retransmits_sent;
        self.invalid += round.invalid;
        self.drops += round.drops;
        self.handover_dropped += round.handover_dropped;
        self.wall_s += round.wall_s;
        self.cpu_user_s += round.cpu_user_s;
        self.cpu_sys_s += round.cpu_sys_s;
        self.conn_per_s = success_rate(self.success, self.wall_s);
        let cpu_us = (self.cpu_user_s + self.cpu_sys_s) * 1e6;
        self.cpu_us_per_conn = cpu_us / self.success.max(1) as f64;
        self.peak_outstanding = self.peak_outstanding.max(round.peak_outstanding);
        self.peak_rss_bytes = self.peak_rss_bytes.max(round.peak_rss_bytes);
        self.answered_bytes = self.answered_bytes.max(round.answered_bytes);
        self.left_open += round.left_open;
        self.interrupted |= round.interrupted;
        self.answered_first_syn += round.answered_first_syn;
        self.answered_after_retry += round.answered_after_retry;
        self.answered_first_syn_after_retry += round.answered_first_syn_after_retry;
        self.syn_retries_raced = self
            .syn_retries_raced
            .take()
            .or(round.syn_retries_raced.clone());
        self.iface_tx_dropped = sum_some(self.iface_tx_dropped, round.iface_tx_dropped);
        self.iface_rx_dropped = sum_some(self.iface_rx_dropped, round.iface_rx_dropped);
        // The first round's estimates stand (later rounds are small retries); their words add.
        self.losses = match (self.losses.take(), &round.losses) {
            (Some(a), Some(b)) => Some(format!("{a}; in a later round, {b}")),
            (a, b) => a.or(b.clone()),
        };
    }
}

fn sum_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        _ => a.or(b),
    }
}

/// Counters of the grab loop's passes: what each pass found to do, what held back new
/// connections, and where the thread's wall time went. They show what a run waits on.
#[derive(Serialize, Clone, Debug, Default)]
pub struct LoopStats {
    pub passes: u64,
    /// Passes that received, sent and wrote nothing.
    pub idle_passes: u64,
    /// Receives that waited for a frame (nothing to send until the pace's next SYN, a timer
    /// or a SYN retry), and the wall time they took: the time the thread slept.
    pub waits: u64,
    pub wait_s: f64,
    pub frames_received: u64,
    /// Passes that sent at least one first SYN, and those SYNs.
    pub syn_passes: u64,
    pub first_syns: u64,
    /// Passes that could open nothing new: the table and the SYNs in flight filled
    /// `--max-outstanding`, or the pace (`-r`) was not due.
    pub passes_table_full: u64,
    pub passes_pace_not_due: u64,
    /// Passes that left segments for the next one because the transmit ring was full.
    pub transmit_ring_full: u64,
    /// Most SYNs awaiting an answer at once (not counted in `peak_outstanding`; with
    /// several threads, the sum of each thread's most).
    pub peak_syns_in_flight: u64,
    /// With several threads: frames a thread received for a connection of another and handed
    /// over, and passes that read fewer frames than their batch because the ring to another
    /// thread was nearly full (the frames waited in the receive queue: back-pressure).
    pub handed_over: u64,
    pub handover_held_back: u64,
    /// Wall time in each part of the passes: receiving (and the engine's work on what came
    /// in), timers and SYN retries, transmitting, writing rows. With several threads, the
    /// sums of the threads' times. (The status line has a thread of its own.)
    pub receive_s: f64,
    pub timers_s: f64,
    pub transmit_s: f64,
    pub rows_s: f64,
}

/// Several threads' loop counters together.
impl std::ops::AddAssign<&LoopStats> for LoopStats {
    fn add_assign(&mut self, o: &LoopStats) {
        // Destructured: a counter added to `LoopStats` must be added here too.
        let LoopStats {
            passes,
            idle_passes,
            waits,
            wait_s,
            frames_received,
            syn_passes,
            first_syns,
            passes_table_full,
            passes_pace_not_due,
            transmit_ring_full,
            peak_syns_in_flight,
            handed_over,
            handover_held_back,
            receive_s,
            timers_s,
            transmit_s,
            rows_s,
        } = o;
        self.passes += passes;
        self.idle_passes += idle_passes;
        self.waits += waits;
        self.wait_s += wait_s;
        self.frames_received += frames_received;
        self.syn_passes += syn_passes;
        self.first_syns += first_syns;
        self.passes_table_full += passes_table_full;
        self.passes_pace_not_due += passes_pace_not_due;
        self.transmit_ring_full += transmit_ring_full;
        self.peak_syns_in_flight += peak_syns_in_flight;
        self.handed_over += handed_over;
        self.handover_held_back += handover_held_back;
        self.receive_s += receive_s;
        self.timers_s += timers_s;
        self.transmit_s += transmit_s;
        self.rows_s += rows_s;
    }
}

/// The output fields of a grab with `app`: the connection's, then the app's.
pub fn all_fields<A: GrabApp>(app: &A) -> impl Iterator<Item = &'static Field> {
    FIELDS.iter().chain(app.fields())
}

/// A row's `status`: the protocol's outcome in ZGrab2's words. A connection that ended well
/// (`tcp` success) takes the app's word; one that did not takes the TCP outcome's ZGrab2 name,
/// unless the bytes that came already told the protocol apart (a TLS alert before a reset, an
/// HTTP reply to a TLS hello before a timeout). ZGrab2 has no word for an ICMP error
/// answering the SYN (it files every failed dial under connection-timeout): `unreachable`.
pub fn row_status(tcp: Status, app: Option<AppOutcome>) -> &'static str {
    match (tcp, app) {
        (Status::Success, Some(app)) => app.name(),
        (_, Some(app @ (AppOutcome::ApplicationError | AppOutcome::ProtocolError))) => app.name(),
        (Status::Success, None) => AppOutcome::Success.name(),
        (Status::Refused, _) => "connection-refused",
        (Status::SynTimeout, _) => "connection-timeout",
        (Status::DataTimeout, _) => "io-timeout",
        (Status::Reset | Status::Closed, _) => "connection-closed",
        (Status::Unreachable, _) => "unreachable",
    }
}

/// One output row: the connection's outcome and the app's fields.
pub(crate) struct GrabRow<'a> {
    pub outcome: &'a Outcome,
    /// What the app read of the reply, when it was asked (a reply came, or the connection
    /// ended well).
    pub app_outcome: Option<AppOutcome>,
    /// The target's name, when the input gives names.
    pub name: Option<&'a str>,
    pub app_fields: &'static [Field],
    pub app_values: &'a [Value],
    pub timestamp_us: u64,
}

impl Row for GrabRow<'_> {
    fn get(&self, name: &str) -> Value {
        let o = self.outcome;
        let int = |v: Option<u64>| v.map_or(Value::Null, Value::Int);
        match name {
            "saddr" => Value::Str(o.addr.to_string()),
            "sport" => Value::Int(o.port.into()),
            "name" => self.name.map_or(Value::Null, |n| Value::Str(n.to_string())),
            "dport" => Value::Int(o.sport.into()),
            "status" => Value::Str(row_status(o.status, self.app_outcome).into()),
            "tcp_status" => Value::Str(o.status.name().into()),
            "rtt_us" => int(o.rtt_us),
            "t_first_byte_us" => int(o.t_first_byte_us),
            "t_total_us" => Value::Int(o.t_total_us),
            "bytes" => Value::Int(o.bytes),
            "truncated" => Value::Bool(o.truncated),
            "retransmits_received" => Value::Int(o.retransmits_received.into()),
            "ooo_segments" => Value::Int(o.ooo_segments.into()),
            "icmp_type" => int(o.icmp.map(|i| i.icmp_type.into())),
            "icmp_code" => int(o.icmp.map(|i| i.icmp_code.into())),
            "timestamp" => Value::Int(self.timestamp_us),
            _ => self
                .app_fields
                .iter()
                .position(|f| f.name == name)
                .and_then(|i| self.app_values.get(i).cloned())
                .unwrap_or(Value::Null),
        }
    }
}

/// Grab's part of the status line: connections done (every target ends as one: success,
/// refused, no answer, timeout …), successes and their rate, open connections, SYNs,
/// retransmissions, drops. The rate is of successes, as the summary's `conn_per_s`: over the
/// last second while running, and the summary's own figure on the last line.
pub(crate) struct GrabStatus {
    /// Each engine thread's counters (the kernel backend has one).
    counts: Vec<Arc<GrabCounts>>,
    total: u64,
    last_success: u64,
    last_finished: u64,
    rate: f64,
    /// Connections ended per second over the last tick, for the time left.
    finish_rate: f64,
    /// The whole run's success rate, once it has ended.
    final_rate: Option<f64>,
    /// The run stopped before every target had its connection.
    stopped: bool,
}

impl GrabStatus {
    pub fn new(counts: Vec<Arc<GrabCounts>>, total: u64) -> GrabStatus {
        GrabStatus {
            counts,
            total,
            last_success: 0,
            last_finished: 0,
            rate: 0.0,
            finish_rate: 0.0,
            final_rate: None,
            stopped: false,
        }
    }

    pub fn counts(&self) -> &[Arc<GrabCounts>] {
        &self.counts
    }

    /// One counter added up over the threads.
    pub(super) fn sum(&self, counter: fn(&GrabCounts) -> &Counter) -> u64 {
        self.counts.iter().map(|c| counter(c).get()).sum()
    }

    pub fn done_fraction(&self) -> f64 {
        self.sum(|c| &c.finished) as f64 / self.total.max(1) as f64
    }

    /// The run has ended: the last line shows the summary's rate, `success_per_s`.
    pub fn run_ended(&mut self, success_per_s: f64) {
        self.final_rate = Some(success_per_s);
    }

    /// The run stopped before its end (a signal, a failure): the last line says how far it
    /// got, not 100 %.
    pub fn stopped_early(&mut self) {
        self.stopped = true;
    }
}

/// Successes per second over `wall_s` seconds: the summary's `conn_per_s`, and the status
/// line's last rate.
pub fn success_rate(success: u64, wall_s: f64) -> f64 {
    success as f64 / wall_s.max(1e-9)
}

impl StatusSource for GrabStatus {
    fn csv_header(&self) -> &'static str {
        "finished,success,success_per_s,outstanding,syn_sent,syn_retransmitted,retransmits_received,drops"
    }

    fn share_done_at_end(&self) -> f64 {
        match self.stopped {
            true => self.done_fraction(),
            false => 1.0,
        }
    }

    fn sample(&mut self, tick: &Tick) -> (String, String) {
        let (finished, success) = (self.sum(|c| &c.finished), self.sum(|c| &c.success));
        self.rate = match self.final_rate {
            Some(rate) => rate,
            None => (success - self.last_success) as f64 / tick.dt,
        };
        self.finish_rate = (finished - self.last_finished) as f64 / tick.dt;
        (self.last_success, self.last_finished) = (success, finished);
        let outstanding = self.sum(|c| &c.outstanding);
        let syn_sent = self.sum(|c| &c.syn_sent);
        let again = self.sum(|c| &c.syn_retransmitted);
        let retransmits = self.sum(|c| &c.retransmits);
        let drops = self.sum(|c| &c.drops);
        let text = format!(
            "done {finished} of {} connections; {success} success ({}); open {outstanding}; SYNs {syn_sent} ({again} again); retransmits in {retransmits}; drops {drops}",
            self.total,
            per_second(self.rate, "conn"),
        );
        let row = format!(
            "{finished},{success},{:.0},{outstanding},{syn_sent},{again},{retransmits},{drops}",
            self.rate,
        );
        (text, row)
    }

    fn seconds_left(&self) -> Option<f64> {
        let left = self.total.saturating_sub(self.sum(|c| &c.finished));
        (self.finish_rate > 0.0).then(|| left as f64 / self.finish_rate)
    }

    fn paced(&self) -> u64 {
        self.sum(|c| &c.syn_sent)
    }

    fn metrics(&self, page: &mut sonde_meter::metrics::Page) {
        self.write_metrics(page);
    }
}
