//! Grab over the kernel's sockets (`--backend kernel`): the same targets, pacing, apps and rows
//! as the user-space path, with one non-blocking socket per connection, `connect` and `epoll`,
//! and `SO_LINGER 0` for the RST close. It is the baseline the reference work measured its
//! user-space stack against (kernel sockets managed 16–54 K connections/s there), run side by
//! side with it in `bench/compare-grab`.
//!
//! The kernel does the TCP: its own SYN retries (bounded here by the same total connect time
//! as the user-space path's retries), retransmissions, window and reassembly.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage};
use sonde_meter::output_file::IfExists;
use sonde_meter::{peak_rss_bytes, Stopwatch};
use sonde_scan::output::RowWriter;
use sonde_tcp::{CloseMode, Outcome, ReplyCursor, Session, Status};

use super::{success_rate, GrabApp, GrabCounts, GrabPlan, GrabRow, GrabStatus, GrabSummary};
use crate::feed::Feed;
use crate::pace::Pacer;
use crate::status::{Phase, StatusLine};
use crate::stop::{Stop, StopReason};

/// Events taken from epoll at once.
const EVENTS: usize = 1024;
/// Bytes read from a socket at once.
const READ_CHUNK: usize = 64 * 1024;

/// One open connection.
struct Conn {
    stream: TcpStream,
    addr: IpAddr,
    port: u16,
    started: Instant,
    connected: Option<Instant>,
    first_byte: Option<Instant>,
    last_byte: Option<Instant>,
    /// Request bytes still to write.
    request: Vec<u8>,
    data: Vec<u8>,
    /// Where the app's completeness check stopped in `data` (it reads each byte once).
    cursor: ReplyCursor,
    /// The app's session, when it talks in turns: it reads the reply and adds to `request`.
    session: Option<Box<dyn Session>>,
    bytes: u64,
    /// Bumped when the slot is reused, so stale timers are ignored.
    generation: u32,
}

/// Runs the grab over kernel sockets.
pub fn run<A: GrabApp>(
    plan: GrabPlan<A>,
    mut writer: Box<dyn RowWriter + Send>,
    stop: &Stop,
) -> anyhow::Result<GrabSummary> {
    let sockets = socket_budget(plan.tcp.max_outstanding, plan.run.quiet)?;
    let mut feed = Feed::open(&plan.run.feed_spec(), 0, plan.run.resumed_thread(0))?;
    let counts = Arc::new(GrabCounts::default());
    let mut status = StatusLine::new(
        GrabStatus::new(vec![counts.clone()], feed.left()),
        plan.run.quiet,
        plan.run.status_file.as_deref(),
        IfExists::force(plan.run.overwrite),
    )?
    .publishing(plan.run.metrics.clone());
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("creating an epoll set")?;
    let mut pool = Pool::new(&plan, &epoll);
    let mut pacer = Pacer::new(plan.run.rate, plan.run.batch);
    let watch = Stopwatch::start();
    let mut events = vec![EpollEvent::empty(); EVENTS];
    let mut stopping = false;
    // A target whose socket could not be opened (the process ran out of descriptors): it is
    // tried again once a connection has ended, and the budget shrinks to what was open.
    let mut waiting: Option<u64> = None;
    let (mut sockets, mut told) = (sockets, false);
    loop {
        if stop.is_set() {
            if stopping {
                pool.abort_all(&mut writer, &counts)?;
                break;
            }
            stopping = true;
            stop.rearm();
        }
        while !stopping && pool.open < sockets && pacer.is_due() {
            let Some(index) = waiting.take().or_else(|| feed.next_target()) else {
                break;
            };
            let (addr, port) = plan.run.space.target_at(index);
            match pool.connect(addr, port, &mut writer, &counts)? {
                Connect::Started => {}
                Connect::NoDescriptor => {
                    sockets = out_of_descriptors(pool.open, &mut told)?;
                    waiting = Some(index);
                    break;
                }
            }
            pacer.charge(1);
            counts.syn_sent.add(1);
        }
        if pool.open == 0 && waiting.is_none() && (stopping || feed.is_done()) {
            break;
        }
        let n = epoll
            .wait(&mut events, EpollTimeout::from(1u8))
            .context("waiting on epoll")?;
        for event in &events[..n] {
            pool.on_event(event.data() as usize, &mut writer, &counts)?;
        }
        pool.expire(Instant::now(), &mut writer, &counts)?;
        writer.end_batch().context("writing the output")?;
        counts.outstanding.set(pool.open as u64);
        let done = status.source().done_fraction();
        status.tick(Phase::Sending { done }, false)?;
    }
    writer.finish().context("finishing the output")?;
    let wall = watch.wall().as_secs_f64();
    let success = counts.success.get();
    let conn_per_s = success_rate(success, wall);
    status.source_mut().run_ended(conn_per_s);
    if stop.reason() != StopReason::None {
        status.source_mut().stopped_early();
    }
    status.tick(Phase::Done, true)?;
    let cpu = watch.cpu();
    let syn_timeouts = pool.tally(Status::SynTimeout);
    Ok(GrabSummary {
        targets: plan.run.space.len(),
        syn_sent: counts.syn_sent.get(),
        established: pool.established,
        // As the user-space engine counts: the targets that answered (syn_timeouts did not).
        completed: counts.finished.get() - syn_timeouts,
        success,
        refused: pool.tally(Status::Refused),
        syn_timeouts,
        timeouts: pool.tally(Status::DataTimeout),
        resets: pool.tally(Status::Reset),
        closed: pool.tally(Status::Closed),
        conn_per_s,
        wall_s: wall,
        cpu_user_s: cpu.user.as_secs_f64(),
        cpu_sys_s: cpu.system.as_secs_f64(),
        cpu_us_per_conn: cpu.total().as_secs_f64() * 1e6 / success.max(1) as f64,
        peak_outstanding: pool.peak as u64,
        peak_rss_bytes: peak_rss_bytes(),
        interrupted: stop.reason() != StopReason::None,
        app: plan.app.name().into(),
        backend: "kernel".into(),
        threads: 1,
        ..GrabSummary::default()
    })
}

/// The open connections: a slab indexed by the epoll token, and their deadlines.
struct Pool<'p, A: GrabApp> {
    plan: &'p GrabPlan<A>,
    epoll: &'p Epoll,
    slots: Vec<Option<Conn>>,
    free: Vec<usize>,
    deadlines: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    generation: u32,
    open: usize,
    peak: usize,
    established: u64,
    tallies: [u64; Status::ALL.len()],
    chunk: Vec<u8>,
    connect_timeout: Duration,
}

impl<'p, A: GrabApp> Pool<'p, A> {
    fn new(plan: &'p GrabPlan<A>, epoll: &'p Epoll) -> Self {
        // The user-space path's whole SYN schedule: the first SYN and every retry's wait.
        let waits = (0..=plan.syn_retries)
            .map(|k| plan.syn_timeout_us << k)
            .sum();
        Pool {
            plan,
            epoll,
            slots: Vec::new(),
            free: Vec::new(),
            deadlines: BinaryHeap::new(),
            generation: 0,
            open: 0,
            peak: 0,
            established: 0,
            tallies: [0; Status::ALL.len()],
            chunk: vec![0; READ_CHUNK],
            connect_timeout: Duration::from_micros(waits),
        }
    }

    fn tally(&self, status: Status) -> u64 {
        self.tallies[status as usize]
    }

    /// Starts a non-blocking connect to (`addr`, `port`); a target refused at once gets its row.
    /// With no descriptor left (EMFILE, ENFILE) nothing is started and the caller keeps the target.
    fn connect(
        &mut self,
        addr: IpAddr,
        port: u16,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<Connect> {
        let family = match addr {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        let fd = match socket::socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        ) {
            Ok(fd) => fd,
            Err(nix::Error::EMFILE | nix::Error::ENFILE) => return Ok(Connect::NoDescriptor),
            Err(e) => return Err(e).context("opening a socket"),
        };
        let started = Instant::now();
        let target = SockaddrStorage::from(SocketAddr::new(addr, port));
        let mut request = Vec::new();
        let session = self.plan.app.open_session(addr, port, &mut request);
        if session.is_none() {
            request.resize(self.plan.app.max_request_len(), 0);
            let len = self.plan.app.write_request(&mut request, addr, port);
            request.truncate(len);
        }
        let conn = Conn {
            stream: TcpStream::from(fd),
            addr,
            port,
            started,
            connected: None,
            first_byte: None,
            last_byte: None,
            request,
            data: Vec::new(),
            cursor: ReplyCursor::default(),
            session,
            bytes: 0,
            generation: 0,
        };
        match socket::connect(std::os::fd::AsRawFd::as_raw_fd(&conn.stream), &target) {
            Ok(()) | Err(nix::Error::EINPROGRESS) => {}
            Err(e) => {
                let status = connect_status(e);
                self.finish_conn(conn, status, writer, counts)?;
                return Ok(Connect::Started);
            }
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.generation = self.generation.wrapping_add(1);
        let interest = EpollFlags::EPOLLOUT | EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        self.epoll
            .add(conn.stream.as_fd(), EpollEvent::new(interest, slot as u64))
            .context("adding a socket to epoll")?;
        self.deadlines.push(Reverse((
            started + self.connect_timeout,
            slot,
            self.generation,
        )));
        self.slots[slot] = Some(Conn {
            generation: self.generation,
            ..conn
        });
        self.open += 1;
        self.peak = self.peak.max(self.open);
        Ok(Connect::Started)
    }

    /// Progress on one socket: the connect finishing, the request leaving, reply bytes.
    fn on_event(
        &mut self,
        slot: usize,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<()> {
        let Some(conn) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let now = Instant::now();
        if conn.connected.is_none() {
            match conn.stream.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => {
                    let status = match e.raw_os_error() {
                        Some(code) => connect_status(nix::Error::from_raw(code)),
                        None => Status::SynTimeout,
                    };
                    return self.close(slot, status, writer, counts);
                }
            }
            if conn.stream.peer_addr().is_err() {
                return Ok(()); // still connecting
            }
            conn.connected = Some(now);
            self.established += 1;
            let timeout = self.plan.tcp.first_byte_timeout_us;
            let generation = conn.generation;
            self.deadlines.push(Reverse((
                now + Duration::from_micros(timeout),
                slot,
                generation,
            )));
        }
        if !self.write_pending(slot) {
            return self.close(slot, Status::Reset, writer, counts);
        }
        match self.read(slot) {
            Some(status) => self.close(slot, status, writer, counts),
            // A session may have more to say after what it read.
            None if self.write_pending(slot) => Ok(()),
            None => self.close(slot, Status::Reset, writer, counts),
        }
    }

    /// Writes what of the request (or a session's bytes) the socket takes; false when the
    /// connection broke.
    fn write_pending(&mut self, slot: usize) -> bool {
        let Some(conn) = self.slots[slot].as_mut() else {
            return true;
        };
        if conn.request.is_empty() {
            return true;
        }
        match conn.stream.write(&conn.request) {
            Ok(n) => {
                conn.request.drain(..n);
                true
            }
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        }
    }

    /// Reads what is there; the status when the connection is over.
    fn read(&mut self, slot: usize) -> Option<Status> {
        let (max, app) = (self.plan.tcp.max_bytes, &self.plan.app);
        let conn = self.slots[slot].as_mut()?;
        loop {
            match conn.stream.read(&mut self.chunk) {
                Ok(0) => {
                    return Some(if conn.bytes > 0 {
                        Status::Success
                    } else {
                        Status::Closed
                    })
                }
                Ok(n) => {
                    let now = Instant::now();
                    conn.first_byte.get_or_insert(now);
                    conn.last_byte = Some(now);
                    conn.bytes += n as u64;
                    let keep = n.min(max.saturating_sub(conn.data.len()));
                    conn.data.extend_from_slice(&self.chunk[..keep]);
                    let complete = match conn.session.as_mut() {
                        Some(session) => {
                            session.on_received(&self.chunk[..keep], &mut conn.request)
                        }
                        None => app.is_complete_after(&conn.data, &mut conn.cursor),
                    };
                    if conn.data.len() >= max || complete {
                        return Some(Status::Success);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    // A session said at its last bytes that it was not done.
                    let complete = conn.session.is_none()
                        && app.is_complete_after(&conn.data, &mut conn.cursor);
                    return Some(if conn.data.is_empty() || !complete {
                        Status::Reset
                    } else {
                        Status::Success
                    });
                }
            }
        }
    }

    /// Ends connections whose timer ran out.
    fn expire(
        &mut self,
        now: Instant,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<()> {
        while let Some(&Reverse((due, slot, generation))) = self.deadlines.peek() {
            if due > now {
                break;
            }
            self.deadlines.pop();
            let Some(conn) = self.slots[slot]
                .as_ref()
                .filter(|c| c.generation == generation)
            else {
                continue;
            };
            let tcp = &self.plan.tcp;
            let next = match (conn.connected, conn.last_byte) {
                (None, _) => None,
                (Some(at), None) => Some(at + Duration::from_micros(tcp.first_byte_timeout_us)),
                (Some(at), Some(last)) => Some(
                    (last + Duration::from_micros(tcp.idle_timeout_us))
                        .min(at + Duration::from_micros(tcp.total_timeout_us)),
                ),
            };
            match next {
                Some(later) if later > now => {
                    self.deadlines.push(Reverse((later, slot, generation)))
                }
                Some(_) => self.close(slot, Status::DataTimeout, writer, counts)?,
                None => self.close(slot, Status::SynTimeout, writer, counts)?,
            }
        }
        Ok(())
    }

    fn close(
        &mut self,
        slot: usize,
        status: Status,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<()> {
        let Some(conn) = self.slots[slot].take() else {
            return Ok(());
        };
        let _ = self.epoll.delete(conn.stream.as_fd());
        self.free.push(slot);
        self.open -= 1;
        self.finish_conn(conn, status, writer, counts)
    }

    /// Closes the socket as configured and writes the connection's row.
    fn finish_conn(
        &mut self,
        conn: Conn,
        status: Status,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<()> {
        let sport = conn.stream.local_addr().map_or(0, |a| a.port());
        match self.plan.tcp.close {
            // SO_LINGER 0: close sends an RST and the kernel keeps no TIME_WAIT.
            CloseMode::Rst => {
                let _ = socket::setsockopt(
                    &conn.stream,
                    sockopt::Linger,
                    &nix::libc::linger {
                        l_onoff: 1,
                        l_linger: 0,
                    },
                );
            }
            CloseMode::Fin => {
                let _ = conn.stream.shutdown(std::net::Shutdown::Write);
            }
        }
        let since = |t: Option<Instant>, from: Option<Instant>| {
            Some(t?.duration_since(from?).as_micros() as u64)
        };
        let now = Instant::now();
        let outcome = Outcome {
            addr: conn.addr,
            port: conn.port,
            sport,
            status,
            rtt_us: since(conn.connected, Some(conn.started)),
            t_first_byte_us: since(conn.first_byte, conn.connected),
            t_total_us: since(Some(now), conn.connected).unwrap_or(0),
            bytes: conn.bytes,
            truncated: status == Status::Success
                && conn.data.len() >= self.plan.tcp.max_bytes
                && !self.plan.app.is_complete(&conn.data),
            retransmits_received: 0,
            ooo_segments: 0,
            icmp: None,
        };
        let (values, app_outcome) = if status == Status::Success || !conn.data.is_empty() {
            let (values, said) = self
                .plan
                .app
                .describe_reply(&conn.data, conn.session.as_deref());
            (values, Some(said))
        } else {
            (Vec::new(), None)
        };
        let row = GrabRow {
            outcome: &outcome,
            app_outcome,
            name: self.plan.app.target_name(outcome.addr, outcome.port),
            app_fields: self.plan.app.fields(),
            app_values: &values,
            timestamp_us: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        };
        self.tallies[status as usize] += 1;
        counts.finished.add(1);
        if status == Status::Success {
            counts.success.add(1);
        }
        writer.write(&row).context("writing the output")?;
        drop(conn); // closes the socket
        Ok(())
    }

    /// Ends every open connection now (a second Ctrl-C).
    fn abort_all(
        &mut self,
        writer: &mut Box<dyn RowWriter + Send>,
        counts: &GrabCounts,
    ) -> anyhow::Result<()> {
        for slot in 0..self.slots.len() {
            let status = match self.slots[slot].as_ref() {
                Some(c) if c.connected.is_none() => Status::SynTimeout,
                Some(_) => Status::DataTimeout,
                None => continue,
            };
            self.close(slot, status, writer, counts)?;
        }
        Ok(())
    }
}

/// What a failed connect means for the row.
fn connect_status(e: nix::Error) -> Status {
    match e {
        nix::Error::ECONNREFUSED => Status::Refused,
        nix::Error::ECONNRESET => Status::Reset,
        _ => Status::SynTimeout,
    }
}

/// What `Pool::connect` did with a target.
enum Connect {
    /// Its connect started, or it already ended with its row.
    Started,
    /// No socket could be opened: the process has no descriptor left.
    NoDescriptor,
}

/// Descriptors kept free for everything but the connections: the output and status files,
/// epoll, standard streams, the libraries' own.
const DESCRIPTOR_RESERVE: u64 = 64;

/// How many sockets the run may hold at once: `--max-outstanding`, capped by what the
/// open-file limit leaves (raised to its hard limit first: the soft limit is often 1,024, far
/// below any useful number of connections). Says so once when the cap binds.
fn socket_budget(max_outstanding: usize, quiet: bool) -> anyhow::Result<usize> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading the open-file limit")?;
    let limit = match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => hard,
        Err(_) => soft,
    };
    let open = open_descriptors();
    let budget = sockets_allowed(max_outstanding, limit, open);
    if budget == 0 {
        anyhow::bail!(
            "--backend kernel needs a socket per connection, but the open-file limit ({limit}) leaves none: raise it (ulimit -n)"
        );
    }
    if budget < max_outstanding && !quiet {
        eprintln!(
            "grab: --backend kernel holds at most {budget} connections at once, not --max-outstanding {max_outstanding}: the open-file limit is {limit} (raise it with ulimit -n)"
        );
    }
    Ok(budget)
}

/// `max_outstanding`, or fewer where `limit` descriptors, `open` of them in use already and
/// a reserve kept, leave fewer.
fn sockets_allowed(max_outstanding: usize, limit: u64, open: u64) -> usize {
    let left = limit.saturating_sub(open.saturating_add(DESCRIPTOR_RESERVE));
    max_outstanding.min(usize::try_from(left).unwrap_or(usize::MAX))
}

/// Descriptors this process has open now (0 when /proc cannot say).
fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// The process ran out of descriptors with `open` connections held (something else holds
/// more than the reserve): from now on hold at most that many (said once), or give up with none.
fn out_of_descriptors(open: usize, told: &mut bool) -> anyhow::Result<usize> {
    if open == 0 {
        anyhow::bail!(
            "--backend kernel cannot open a socket: the process has no file descriptor left (raise the open-file limit: ulimit -n)"
        );
    }
    if !std::mem::replace(told, true) {
        eprintln!(
            "grab: out of file descriptors with {open} connections open: --backend kernel holds at most that many from now on (raise the open-file limit: ulimit -n)"
        );
    }
    Ok(open)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_stay_under_the_open_file_limit() {
        // A hard limit of 20,000 and the default --max-outstanding of 100,000 (the 16-core
        // machine's EMFILE): the budget leaves the reserve and what is open already.
        assert_eq!(
            sockets_allowed(100_000, 20_000, 10),
            20_000 - 10 - DESCRIPTOR_RESERVE as usize
        );
        assert_eq!(sockets_allowed(500, 20_000, 10), 500);
        assert_eq!(sockets_allowed(500, 50, 10), 0);
        assert_eq!(sockets_allowed(500, u64::MAX, u64::MAX), 0);
    }
}
