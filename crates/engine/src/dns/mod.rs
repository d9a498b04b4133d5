//! `sonde dns`: lookups at line rate, through resolvers or from the root.
//!
//! One thread runs the whole client: it reads the next lookups as room frees up, writes each
//! query's frame straight into the transmit ring (Ethernet, IPv4, UDP, the query: [`frame`]),
//! paced to `-r` queries a second, and reads the replies that the kernel's reply filter hands it
//! beside the OS stack. A reply names its lookup by its destination port and DNS ID alone
//! ([`token`]: a keyed permutation, no hash table), and is taken only from the server asked,
//! with the question asked. Lookups in flight live in a table of at most `--max-outstanding`
//! slots with one timer queue (every query waits the same `--timeout`, so the queue is in
//! deadline order); a timed-out query goes again, to the next resolver, up to `--retries`
//! times. A truncated answer is asked again over TCP ([`tcp`]). `--iterative` walks from the
//! root with a shared cache of zone cuts ([`walk`]).

pub mod frame;
mod input;
mod row;
mod status;
mod tcp;
pub mod token;
mod walk;

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sonde_craft::cookie::PortRange;
use sonde_dns::{Header, Message, Query, Type, CLASS_IN};
use sonde_io::{AnyRx, AnyTx, FrameTx, RxChecksum, RxMeta};
use sonde_scan::output::RowWriter;

use crate::pace::Pacer;
use crate::stop::Stop;
use frame::{Link, NotReply, Outgoing};
pub use input::{reverse_name, Ask, Asks, BadLine, Source};
pub use row::{default_fields, Answer, DnsRow, FIELDS};
pub use status::DnsStatus;
use tcp::{TcpAnswer, TcpAsk, TcpPool};
use token::Tokens;
use walk::{Delegations, Next, Walk};

/// How many generations back a reply still counts as late rather than forged.
const LATE_GENERATIONS: u32 = 8;

/// Whom the queries go to.
pub enum Mode {
    /// Recursive resolvers, in turn; a retry goes to the next one.
    Resolvers(Vec<Ipv4Addr>),
    /// Authoritative servers, from these roots down.
    Iterative(Vec<Ipv4Addr>),
}

/// Which servers may be sent to (the blocklists), for servers an iterative walk meets.
pub type Allowed = Arc<dyn Fn(Ipv4Addr) -> bool + Send + Sync>;

pub struct DnsPlan {
    pub mode: Mode,
    /// Queries a second, retries and every step of a walk counted; 0: as fast as possible.
    pub rate: f64,
    pub max_outstanding: u32,
    pub retries: u32,
    pub timeout: Duration,
    /// EDNS0's stated UDP payload size, or no OPT record.
    pub udp_payload: Option<u16>,
    pub link: Link,
    pub ports: PortRange,
    pub key: [u64; 2],
    pub batch: usize,
    pub trace: bool,
    pub verify_checksums: bool,
    pub allowed: Allowed,
    pub quiet: bool,
    pub status_file: Option<std::path::PathBuf>,
    pub overwrite: bool,
    /// Where the status line also publishes (`--metrics`).
    pub metrics: Option<sonde_meter::metrics::Publisher>,
}

/// What was counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DnsStats {
    /// Lookups started, and rows written (one per lookup that ended).
    pub lookups: u64,
    pub rows: u64,
    pub by_status: BTreeMap<String, u64>,
    pub queries_sent: u64,
    /// Queries sent again after a timeout, SERVFAIL or REFUSED.
    pub retries: u64,
    /// Replies taken: from the server asked, with the question asked.
    pub replies: u64,
    /// Replies to a query already sent again or answered (the lookup had moved on).
    pub late: u64,
    pub invalid: Invalid,
    /// Truncated answers asked again over TCP.
    pub tcp_fallbacks: u64,
    pub peak_in_flight: u64,
    /// Zone cuts in the walk's cache at the end (--iterative).
    pub zone_cuts: u64,
    /// Frames the reply filter passed that were no DNS reply to us.
    pub other_frames: u64,
}

/// Replies refused, by why: never a row.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Invalid {
    /// Port and ID name no lookup in flight (forged, or very late).
    pub not_ours: u64,
    /// From another address than the server asked.
    pub wrong_server: u64,
    /// Not an answer to the question asked (name, type, class), or not a response.
    pub wrong_question: u64,
    /// The message cannot be read, by reason.
    pub malformed: BTreeMap<&'static str, u64>,
    /// IPv4 or UDP checksum wrong.
    pub checksum: u64,
}

impl Invalid {
    pub fn total(&self) -> u64 {
        self.not_ours
            + self.wrong_server
            + self.wrong_question
            + self.checksum
            + self.malformed.values().sum::<u64>()
    }
}

/// How a run ended.
pub struct Outcome {
    pub stats: DnsStats,
    /// Lookups not finished when the run stopped (a checkpoint asks them again).
    pub unfinished: Vec<Ask>,
    /// The input position reached: every lookup numbered below was started.
    pub next_index: u64,
    pub stopped: bool,
    /// Bytes of the table per lookup in flight.
    pub bytes_per_lookup: usize,
}

struct Lookup {
    ask: Ask,
    attempts: u32,
    /// Queries of this lookup that went unanswered or failed, for --retries (resolver mode).
    tries: u32,
    resolver: usize,
    server: Ipv4Addr,
    sent_at: Instant,
    walk: Option<Box<Walk>>,
}

/// Runs the lookups of `asks` over the queues, writing a row for each to `out`.
pub fn run(
    plan: &DnsPlan,
    tx: &mut AnyTx,
    rxs: &mut [AnyRx],
    asks: &mut Asks,
    out: &mut dyn RowWriter,
    stop: &Stop,
) -> anyhow::Result<Outcome> {
    let tokens = Tokens::new(plan.key, plan.ports, plan.max_outstanding).map_err(|e| {
        anyhow::anyhow!(
            "--max-outstanding {} is more than the source ports {}-{} can tell apart: give at most {} or more ports",
            plan.max_outstanding,
            plan.ports.first,
            plan.ports.last,
            e.most_slots
        )
    })?;
    let mut run = Run::new(plan, tokens);
    let mut pacer = Pacer::new(plan.rate, plan.batch);
    let mut status = status::line(plan)?;
    let mut input_done = false;
    let mut last_tick = Instant::now();
    let mut failure: Option<anyhow::Error> = None;
    loop {
        if stop.is_set() {
            break;
        }
        if !input_done {
            input_done = run.admit(asks, out)?;
        }
        let now = Instant::now();
        run.expire(now, out)?;
        for answer in run.tcp.take() {
            run.on_tcp(answer, out)?;
        }
        if !run.to_send.is_empty() && pacer.is_due() {
            let sent = run.send(tx, pacer.burst())?;
            pacer.charge(sent);
        }
        let wait = run.wait(&pacer);
        sonde_io::rx_many_meta(rxs, plan.batch, wait, |_, frame, meta| {
            if failure.is_none() {
                if let Err(e) = run.on_frame(frame, meta, out) {
                    failure = Some(e);
                }
            }
        })?;
        if let Some(e) = failure.take() {
            return Err(e);
        }
        out.end_batch()?;
        if last_tick.elapsed() >= Duration::from_secs(1) {
            last_tick = Instant::now();
            status
                .source_mut()
                .update(&run.stats, run.live, asks.read_so_far());
            status.tick(crate::status::Phase::Sending { done: 0.0 }, false)?;
        }
        if input_done && run.live == 0 {
            break;
        }
    }
    run.stats.zone_cuts = run.cache.as_ref().map_or(0, |c| c.zone_count() as u64);
    status
        .source_mut()
        .update(&run.stats, run.live, asks.read_so_far());
    status.tick(crate::status::Phase::Done, true)?;
    let unfinished = run.unfinished();
    Ok(Outcome {
        stopped: stop.is_set() && !unfinished.is_empty(),
        unfinished,
        next_index: asks.read_so_far(),
        stats: run.stats,
        bytes_per_lookup: std::mem::size_of::<Option<Lookup>>()
            + std::mem::size_of::<u32>()
            + std::mem::size_of::<Walk>() * usize::from(plan.is_iterative()),
    })
}

impl DnsPlan {
    fn is_iterative(&self) -> bool {
        matches!(self.mode, Mode::Iterative(_))
    }
}

struct Run<'p> {
    plan: &'p DnsPlan,
    tokens: Tokens,
    slots: Vec<Option<Lookup>>,
    /// Each slot's generation: bumped by every query it sends and when its lookup ends, so a
    /// reply, timer or queued send of an earlier one is known for what it is.
    gens: Vec<u32>,
    free: Vec<u32>,
    live: usize,
    timers: VecDeque<(Instant, u32, u32)>,
    to_send: VecDeque<(u32, u32)>,
    sending: Vec<(u32, u32)>,
    resolver_turn: usize,
    cache: Option<Delegations>,
    tcp: TcpPool,
    stats: DnsStats,
    ip_ident: u16,
    epoch: (Instant, u64),
}

impl<'p> Run<'p> {
    fn new(plan: &'p DnsPlan, tokens: Tokens) -> Run<'p> {
        let cache = match &plan.mode {
            Mode::Iterative(roots) => Some(Delegations::new(roots)),
            Mode::Resolvers(_) => None,
        };
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Run {
            plan,
            tokens,
            slots: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            live: 0,
            timers: VecDeque::new(),
            to_send: VecDeque::new(),
            sending: Vec::with_capacity(plan.batch),
            resolver_turn: 0,
            cache,
            tcp: TcpPool::new(plan.timeout),
            stats: DnsStats::default(),
            ip_ident: 0,
            epoch: (Instant::now(), unix_us),
        }
    }

    /// Starts lookups while there is room; true when the input has ended.
    fn admit(&mut self, asks: &mut Asks, out: &mut dyn RowWriter) -> anyhow::Result<bool> {
        while self.live < self.plan.max_outstanding as usize
            && self.to_send.len() < 4 * self.plan.batch
        {
            let Some(ask) = asks.next() else {
                return Ok(true);
            };
            self.start(ask, out)?;
        }
        Ok(false)
    }

    fn start(&mut self, ask: Ask, out: &mut dyn RowWriter) -> anyhow::Result<()> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        self.stats.lookups += 1;
        self.stats.peak_in_flight = self.stats.peak_in_flight.max(self.live as u64);
        let mut lookup = Lookup {
            ask,
            attempts: 0,
            tries: 0,
            resolver: 0,
            server: Ipv4Addr::UNSPECIFIED,
            sent_at: Instant::now(),
            walk: None,
        };
        let first = match (&self.plan.mode, &self.cache) {
            (Mode::Resolvers(resolvers), _) => {
                lookup.resolver = self.resolver_turn % resolvers.len();
                self.resolver_turn += 1;
                Next::Ask(resolvers[lookup.resolver])
            }
            (Mode::Iterative(_), Some(cache)) => {
                let mut walk = Box::new(Walk::new(&lookup.ask.name, cache, self.plan.trace));
                let next = walk.start(&*self.plan.allowed);
                lookup.walk = Some(walk);
                next
            }
            (Mode::Iterative(_), None) => Next::Fail("no roots".into()),
        };
        self.slots[slot as usize] = Some(lookup);
        self.go(slot, first, out)
    }

    /// Acts on what a lookup does next.
    fn go(&mut self, slot: u32, next: Next, out: &mut dyn RowWriter) -> anyhow::Result<()> {
        match next {
            Next::Ask(server) => {
                if let Some(l) = self.slots[slot as usize].as_mut() {
                    l.server = server;
                }
                self.to_send.push_back((slot, self.gens[slot as usize]));
                Ok(())
            }
            Next::Done { status, answers } => self.finish(slot, status, answers, None, None, out),
            Next::Fail(why) => {
                let answers = self.slots[slot as usize]
                    .as_mut()
                    .and_then(|l| l.walk.as_mut())
                    .map(|w| w.take_answers())
                    .unwrap_or_default();
                self.finish(slot, "ERROR".into(), answers, Some(why), None, out)
            }
        }
    }

    fn finish(
        &mut self,
        slot: u32,
        status: String,
        answers: Vec<Answer>,
        error: Option<String>,
        answered: Option<(u64, bool)>,
        out: &mut dyn RowWriter,
    ) -> anyhow::Result<()> {
        let Some(lookup) = self.slots[slot as usize].take() else {
            return Ok(());
        };
        self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        let row = DnsRow {
            name: lookup.ask.name,
            qtype: lookup.ask.qtype,
            answers,
            server: (lookup.attempts > 0).then_some(lookup.server),
            attempts: lookup.attempts,
            rtt_us: answered.map(|a| a.0),
            tcp: answered.is_some_and(|a| a.1),
            error,
            trace: lookup.walk.and_then(|mut w| w.steps.take()),
            timestamp_us: self.epoch.1 + self.epoch.0.elapsed().as_micros() as u64,
            status,
        };
        *self.stats.by_status.entry(row.status.clone()).or_default() += 1;
        self.stats.rows += 1;
        out.write(&row)
    }

    /// Writes up to `most` queued queries into the ring; returns how many left.
    fn send(&mut self, tx: &mut AnyTx, most: usize) -> anyhow::Result<usize> {
        self.sending.clear();
        while self.sending.len() < most {
            let Some((slot, gen)) = self.to_send.pop_front() else {
                break;
            };
            // Skip what ended or moved on since it was queued.
            if self.slots[slot as usize].is_some() && self.gens[slot as usize] == gen {
                self.sending.push((slot, gen));
            }
        }
        if self.sending.is_empty() {
            return Ok(0);
        }
        let ident = self.ip_ident;
        let (plan, tokens, slots, sending) = (self.plan, &self.tokens, &self.slots, &self.sending);
        let accepted = tx.tx_batch(sending.len(), |i, buf| {
            let (slot, gen) = sending[i];
            let Some(lookup) = slots[slot as usize].as_ref() else {
                return 0;
            };
            let (port, id) = tokens.encode(slot, gen.wrapping_add(1));
            let name = lookup.walk.as_ref().map_or(&lookup.ask.name, |w| &w.qname);
            let q = Outgoing {
                server: lookup.server,
                port,
                id,
                name,
                qtype: lookup.ask.qtype,
                recursion_desired: lookup.walk.is_none(),
                udp_payload: plan.udp_payload,
            };
            frame::write_query(&plan.link, &q, ident.wrapping_add(i as u16), buf)
        })?;
        self.ip_ident = ident.wrapping_add(accepted as u16);
        let now = Instant::now();
        let deadline = now + self.plan.timeout;
        for &(slot, gen) in &self.sending[..accepted] {
            let gen = gen.wrapping_add(1);
            self.gens[slot as usize] = gen;
            if let Some(l) = self.slots[slot as usize].as_mut() {
                l.attempts += 1;
                l.sent_at = now;
            }
            self.timers.push_back((deadline, slot, gen));
        }
        for &entry in self.sending[accepted..].iter().rev() {
            self.to_send.push_front(entry);
        }
        self.stats.queries_sent += accepted as u64;
        Ok(accepted)
    }

    /// How long the receiver may wait: not at all when queries are due, else until the next
    /// send or deadline (at most 10 ms, so TCP answers and Ctrl-C are seen).
    fn wait(&self, pacer: &Pacer) -> Duration {
        let most = Duration::from_millis(10);
        let send = if self.to_send.is_empty() {
            most
        } else {
            pacer.until_due()
        };
        let timer = self.timers.front().map_or(most, |(deadline, _, _)| {
            deadline.saturating_duration_since(Instant::now())
        });
        send.min(timer).min(most)
    }

    fn expire(&mut self, now: Instant, out: &mut dyn RowWriter) -> anyhow::Result<()> {
        while let Some(&(deadline, slot, gen)) = self.timers.front() {
            if deadline > now {
                break;
            }
            self.timers.pop_front();
            if self.slots[slot as usize].is_none() || self.gens[slot as usize] != gen {
                continue;
            }
            self.on_timeout(slot, out)?;
        }
        Ok(())
    }

    fn on_timeout(&mut self, slot: u32, out: &mut dyn RowWriter) -> anyhow::Result<()> {
        let tries = self.plan.retries + 1;
        let allowed = self.plan.allowed.clone();
        let Some(lookup) = self.slots[slot as usize].as_mut() else {
            return Ok(());
        };
        let next = match lookup.walk.as_mut() {
            Some(walk) => walk.on_timeout(lookup.server, lookup.ask.qtype, tries, &*allowed),
            None => {
                lookup.tries += 1;
                self.retry_or(slot, "TIMEOUT")
            }
        };
        if matches!(next, Next::Ask(_)) {
            self.stats.retries += 1;
        }
        self.go(slot, next, out)
    }

    /// Resolver mode: the next resolver if tries are left, else the lookup ends with `status`.
    fn retry_or(&mut self, slot: u32, status: &str) -> Next {
        let Mode::Resolvers(resolvers) = &self.plan.mode else {
            return Next::Fail("no resolvers".into());
        };
        let Some(lookup) = self.slots[slot as usize].as_mut() else {
            return Next::Fail("gone".into());
        };
        if lookup.tries > self.plan.retries {
            return Next::Done {
                status: status.into(),
                answers: Vec::new(),
            };
        }
        lookup.resolver = (lookup.resolver + 1) % resolvers.len();
        Next::Ask(resolvers[lookup.resolver])
    }

    fn on_frame(
        &mut self,
        frame: &[u8],
        meta: RxMeta,
        out: &mut dyn RowWriter,
    ) -> anyhow::Result<()> {
        let verify = self.plan.verify_checksums && meta.checksum != RxChecksum::Partial;
        match frame::read_reply(frame, self.plan.link.src_ip, verify) {
            Ok(reply) => self.on_reply(reply.server, Some(reply.port), reply.message, None, out),
            Err(NotReply::Checksum) => {
                self.stats.invalid.checksum += 1;
                Ok(())
            }
            Err(NotReply::Other) => {
                self.stats.other_frames += 1;
                Ok(())
            }
        }
    }

    fn on_tcp(&mut self, answer: TcpAnswer, out: &mut dyn RowWriter) -> anyhow::Result<()> {
        let (slot, gen) = (answer.slot, answer.gen);
        if self.slots[slot as usize].is_none() || self.gens[slot as usize] != gen {
            return Ok(());
        }
        match answer.result {
            Ok(message) => {
                let server = self.slots[slot as usize].as_ref().map(|l| l.server);
                let server = server.unwrap_or(Ipv4Addr::UNSPECIFIED);
                self.on_reply(
                    server,
                    None,
                    &message,
                    Some((slot, gen, answer.rtt_us)),
                    out,
                )
            }
            Err(why) => self.finish(slot, "ERROR".into(), Vec::new(), Some(why), None, out),
        }
    }

    /// A DNS message from `server`: to our `port` over UDP, or over TCP for `tcp`'s lookup.
    fn on_reply(
        &mut self,
        server: Ipv4Addr,
        port: Option<u16>,
        message: &[u8],
        tcp: Option<(u32, u32, u64)>,
        out: &mut dyn RowWriter,
    ) -> anyhow::Result<()> {
        let invalid = &mut self.stats.invalid;
        let Ok(header) = Header::new(message) else {
            let reason = sonde_dns::Malformed::HeaderTooShort.name();
            *invalid.malformed.entry(reason).or_default() += 1;
            return Ok(());
        };
        let found = match (tcp, port) {
            (Some((slot, gen, _)), _) => Some((slot, gen)),
            (None, Some(port)) => self.tokens.decode(port, header.id()),
            (None, None) => None,
        };
        let Some((slot, gen)) = found else {
            invalid.not_ours += 1;
            return Ok(());
        };
        // A reply to one of the last few queries of this slot is late (the lookup was asked
        // again, or ended); any other number is no query of ours.
        let current = self.gens.get(slot as usize).copied();
        let lookup = match (current, self.slots.get(slot as usize)) {
            (Some(g), Some(Some(lookup))) if g == gen => lookup,
            (Some(g), _) if (1..=LATE_GENERATIONS).contains(&g.wrapping_sub(gen)) => {
                self.stats.late += 1;
                return Ok(());
            }
            _ => {
                invalid.not_ours += 1;
                return Ok(());
            }
        };
        if lookup.server != server {
            invalid.wrong_server += 1;
            return Ok(());
        }
        let m = match Message::parse(message) {
            Ok(m) => m,
            Err(reason) => {
                *invalid.malformed.entry(reason.name()).or_default() += 1;
                return Ok(());
            }
        };
        let qname = lookup.walk.as_ref().map_or(&lookup.ask.name, |w| &w.qname);
        if !header.is_response()
            || header.opcode() != 0
            || !m.asks(qname.wire(), lookup.ask.qtype, CLASS_IN)
        {
            invalid.wrong_question += 1;
            return Ok(());
        }
        self.stats.replies += 1;
        let rtt_us = match tcp {
            Some((_, _, rtt)) => rtt,
            None => lookup.sent_at.elapsed().as_micros() as u64,
        };
        if header.is_truncated() && tcp.is_none() {
            return self.ask_over_tcp(slot);
        }
        self.on_answer(slot, &m, rtt_us, tcp.is_some(), out)
    }

    /// Asks the truncated query again over TCP.
    fn ask_over_tcp(&mut self, slot: u32) -> anyhow::Result<()> {
        let gen = self.gens[slot as usize].wrapping_add(1);
        self.gens[slot as usize] = gen;
        let Some(lookup) = self.slots[slot as usize].as_mut() else {
            return Ok(());
        };
        lookup.attempts += 1;
        let name = lookup.walk.as_ref().map_or(&lookup.ask.name, |w| &w.qname);
        let query = Query {
            id: 0,
            name,
            qtype: lookup.ask.qtype,
            recursion_desired: lookup.walk.is_none(),
            udp_payload: self.plan.udp_payload,
        };
        let mut bytes = vec![0u8; query.len()];
        let _ = query.write(&mut bytes);
        self.stats.tcp_fallbacks += 1;
        self.tcp.ask(TcpAsk {
            slot,
            gen,
            server: lookup.server,
            query: bytes,
        });
        Ok(())
    }

    fn on_answer(
        &mut self,
        slot: u32,
        m: &Message<'_>,
        rtt_us: u64,
        tcp: bool,
        out: &mut dyn RowWriter,
    ) -> anyhow::Result<()> {
        let rcode = m.rcode();
        let allowed = self.plan.allowed.clone();
        let Some(lookup) = self.slots[slot as usize].as_mut() else {
            return Ok(());
        };
        let next = match (lookup.walk.as_mut(), self.cache.as_mut()) {
            (Some(walk), Some(cache)) => walk.on_answer(
                m,
                lookup.server,
                lookup.ask.qtype,
                rtt_us,
                lookup.attempts,
                cache,
                &*allowed,
            ),
            _ if rcode == 2 || rcode == 5 => {
                lookup.tries += 1;
                let next = self.retry_or(slot, &row::rcode_name(rcode));
                if let Next::Ask(_) = next {
                    self.stats.retries += 1;
                }
                return self.go(slot, next, out);
            }
            _ => Next::Done {
                status: row::rcode_name(rcode),
                answers: Answer::section(m),
            },
        };
        match next {
            Next::Done { status, answers } => {
                self.finish(slot, status, answers, None, Some((rtt_us, tcp)), out)
            }
            other => self.go(slot, other, out),
        }
    }

    /// The lookups still open, for a checkpoint.
    fn unfinished(&self) -> Vec<Ask> {
        let mut open: Vec<Ask> = self.slots.iter().flatten().map(|l| l.ask.clone()).collect();
        open.sort_by_key(|a| a.index);
        open
    }
}

/// The type names of `types`, for the plan line.
pub fn type_names(types: &[Type]) -> String {
    types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
