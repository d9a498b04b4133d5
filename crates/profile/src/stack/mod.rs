//! The harness behind `sonde profile stack`: the start and stop latency of a protocol stack against payload size,
//! for the kernel's socket path and sonde's own (`ring`) path, UDP and TCP, in a lab.
//!
//! Start is the time from the send call to the first packet of the payload leaving the
//! scanner's interface, stop the time to the last one leaving. Both come from the kernel
//! timestamps (CLOCK_REALTIME) of a tap: for the kernel's path on the scanner's side of the
//! veth pair as the kernel hands each frame to the driver, for sonde's path (which bypasses that
//! point) on the lab's side as veth hands it over (see `peer` for why, and the measured gap
//! between the two); the send call is timed with the same clock right before it. The kernel path
//! also reports its own SO_TIMESTAMPING view (see `kernel`). What the instrumentation itself
//! costs is measured and subtracted: the clock read before the call, and the tap's work per frame
//! when it runs inside the send (see [`Instrumentation`]). Least-squares lines `start = a·x + b`
//! and `stop = a·x + b` (x in KB of 1024 bytes, y in µs) are fitted to the medians, printed,
//! written as CSV and JSON (and drawn by `sonde_plot::stack`).

pub(crate) mod frames;
mod kernel;
mod offloads;
mod peer;

use std::fmt::Write as _;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use serde::Serialize;
use sonde_io::{AnyTx, BackendKind, FrameTx, IoConfig};
use sonde_meter::fit::{median, LineFit};
use sonde_meter::output_file::{self, IfExists};
use sonde_wire::MacAddr;

use frames::{Burst, Endpoints};
use kernel::KernelSocket;
use peer::{Addresses, Direction, Tap, DISCARD_PORT};

/// The largest UDP payload over IPv4: 65535 less the IPv4 and UDP headers.
const MAX_UDP: usize = 65507;
/// The largest payload accepted at all (TCP).
const MAX_TCP: usize = 1 << 20;
/// Sends before the measured ones, per (path, protocol), that warm caches, ARP and the TCP
/// window and are not counted.
const WARMUP: usize = 3;
/// How long a send's frames may take to reach the tap before the send counts as lost.
const FRAME_WAIT: Duration = Duration::from_secs(1);
/// Blocks of 64 KB sends with a tap on and off, in turn, that measure the tap's cost...
const CALIBRATION_ROUNDS: usize = 20;
/// ...and the sends measured in each block.
const CALIBRATION_BLOCK: usize = 10;
/// 64-byte datagrams that measure the gap between the two taps.
const GAP_SENDS: usize = 30;
/// The pause before each measured send, so that it finds the stack idle: otherwise TCP's
/// small-queue check may hold a send back until the previous one's frames are freed in the
/// lab, and the ring's slots of the previous burst may still be in flight.
const SETTLE: Duration = Duration::from_millis(1);
/// The source port of sonde's frames (inside sonde's default source range).
const SONDE_PORT: u16 = 61999;

/// What to measure.
pub struct StackConfig {
    /// The lab to run in; the payloads go from its scanner namespace to its gateway address,
    /// port 9 (discard).
    pub lab: String,
    /// Payload sizes in bytes, sorted (see [`parse_sizes`]).
    pub sizes: Vec<usize>,
    pub protos: Vec<Proto>,
    pub paths: Vec<PathKind>,
    /// Measured sends per size, path and protocol (after a short warm-up).
    pub reps: u32,
    /// Leave TSO and GSO of the scanner's interface as they are (by default they are off for
    /// the run, so TCP leaves as MTU-sized segments as on a wire).
    pub keep_offloads: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }

    fn ip(self) -> sonde_wire::IpProtocol {
        match self {
            Proto::Udp => sonde_wire::IpProtocol::UDP,
            Proto::Tcp => sonde_wire::IpProtocol::TCP,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    Kernel,
    Sonde,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Kernel => "kernel",
            PathKind::Sonde => "sonde",
        }
    }
}

/// Parses `--sizes`: sorted, without repeats, each from 1 byte to the protocols' limit.
pub fn parse_sizes(text: &str, protos: &[Proto]) -> anyhow::Result<Vec<usize>> {
    let limit = if protos.contains(&Proto::Udp) {
        MAX_UDP
    } else {
        MAX_TCP
    };
    let mut sizes = Vec::new();
    for token in text.split(',').map(str::trim) {
        let (digits, scale) = match token.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1024),
            None => (token, 1),
        };
        let size = digits
            .parse::<usize>()
            .ok()
            .map(|n| n * scale)
            .ok_or_else(|| {
                anyhow!(
                    "invalid --sizes: {token:?} is not a size in bytes (e.g. --sizes 64,1024,32k)"
                )
            })?;
        if size == 0 {
            bail!("invalid --sizes: a payload of 0 bytes sends nothing to time; start at 1");
        }
        if size > limit {
            bail!(
                "invalid --sizes: {size} bytes is above {limit}, the largest {} payload: leave it out{}",
                if limit == MAX_UDP { "UDP (over IPv4)" } else { "this tool sends" },
                if limit == MAX_UDP { " or use --proto tcp" } else { "" }
            );
        }
        sizes.push(size);
    }
    sizes.sort_unstable();
    sizes.dedup();
    Ok(sizes)
}

/// One measured send, in ns from the send call, instrumentation subtracted.
#[derive(Clone, Debug)]
struct Sample {
    frames: usize,
    start_ns: f64,
    stop_ns: f64,
    /// How long the send call itself took.
    call_ns: f64,
    /// Kernel path: SO_TIMESTAMPING's SCHED and SND stamps of a second socket's same send.
    sched_ns: Option<f64>,
    software_ns: Option<f64>,
}

/// The medians of one (path, protocol, size).
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub path: PathKind,
    pub proto: Proto,
    pub size_bytes: usize,
    pub frames: usize,
    pub reps: usize,
    pub lost: usize,
    pub start_us: f64,
    pub stop_us: f64,
    pub call_us: f64,
    pub sched_us: Option<f64>,
    pub software_us: Option<f64>,
}

/// The fitted lines of one (path, protocol), x in KB, y in µs.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesFit {
    pub path: PathKind,
    pub proto: Proto,
    pub start: Option<LineFit>,
    pub stop: Option<LineFit>,
}

/// What the measuring costs, measured before the run.
#[derive(Clone, Debug, Serialize)]
pub struct Instrumentation {
    /// One CLOCK_REALTIME read: the part of the first read that falls inside the interval.
    /// Subtracted from start and stop.
    pub clock_read_ns: f64,
    /// The scanner-side tap's work per frame (cloning the frame, its filter, queueing), which
    /// runs inside the kernel's send; from 64 KB UDP sends with the tap open and closed. Subtracted
    /// from the kernel path's stop once per frame before the last. (The first frame's stamp
    /// follows only its own clone, which is not subtracted.)
    pub kernel_tap_ns_per_frame: f64,
    /// The lab-side tap's work per frame, from the same sends with its filter taking the
    /// frames and refusing them (its filter runs first); it runs inside the send when
    /// the lab's receive work shares sonde's CPU. Subtracted from sonde's stop once per frame
    /// before the last (a frame's stamp precedes its own tap work).
    pub lab_tap_ns_per_frame: f64,
    /// The median time from the scanner-side stamp of a frame to the lab-side stamp of the
    /// same frame (64-byte kernel UDP datagrams): how much later sonde's point of observation
    /// is than the kernel's. Reported, not subtracted.
    pub tap_gap_ns: f64,
    /// The median calibration send with each tap on and off, for a look at the noise.
    pub calibration_calls_us: Vec<CalibrationCalls>,
}

/// The median 64 KB UDP send of a tap's calibration.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CalibrationCalls {
    /// Whose tap: the kernel path's (sx0) or sonde's (nx0).
    pub tap: PathKind,
    pub on_us: f64,
    pub off_us: f64,
}

/// One run's results: what `sonde profile stack` prints, writes and draws.
pub struct StackRun {
    pub lab: String,
    pub iface: String,
    pub destination: SocketAddrV4,
    /// How TSO and GSO were during the run.
    pub offloads: String,
    pub reps: u32,
    pub instrumentation: Instrumentation,
    pub points: Vec<Point>,
    pub fits: Vec<SeriesFit>,
    samples: Vec<(PathKind, Proto, usize, Sample)>,
}

/// The summary JSON of a run.
#[derive(Serialize)]
pub struct Summary<'a> {
    lab: &'a str,
    iface: &'a str,
    destination: String,
    offloads: &'a str,
    reps: u32,
    x_unit: &'static str,
    y_unit: &'static str,
    instrumentation: &'a Instrumentation,
    points: &'a [Point],
    fits: &'a [SeriesFit],
}

impl StackRun {
    pub fn summary(&self) -> Summary<'_> {
        Summary {
            lab: &self.lab,
            iface: &self.iface,
            destination: self.destination.to_string(),
            offloads: &self.offloads,
            reps: self.reps,
            x_unit: "KB (1024 bytes)",
            y_unit: "µs",
            instrumentation: &self.instrumentation,
            points: &self.points,
            fits: &self.fits,
        }
    }
}

/// Measures every (path, protocol, size) of `config` in its lab (this thread enters the lab's
/// scanner namespace), saying what it measures and what the instrumentation costs on `say`
/// before the long part.
pub fn run(config: &StackConfig, mut say: impl FnMut(String)) -> anyhow::Result<StackRun> {
    let (lab_name, sizes) = (&config.lab, &config.sizes);
    let lab = sonde_lab::status(lab_name)?;
    if let Some(mode) = &lab.xdp_mode {
        bail!(
            "lab {lab_name:?} drops every frame in XDP ({mode}) before the tap sees it: bring up a lab with the kernel sink (the default) for sonde profile stack"
        );
    }
    let addrs = Addresses {
        scan_ip: lab.scan_ip,
        gateway_ip: lab.gateway_ip,
    };
    let lab_range = ipnet::Ipv4Net::new(Ipv4Addr::new(198, 18, 0, 0), 15).expect("a prefix");
    if !lab_range.contains(&addrs.gateway_ip) {
        bail!("lab {lab_name:?} reports a gateway outside 198.18.0.0/15; refusing to send");
    }
    let (_peer, lab_tap) = peer::start(lab_name, &lab.net_if, addrs)?;
    sonde_lab::enter_scan_ns(lab_name)?;
    let scan_tap = Tap::open(&lab.scan_if, addrs, Direction::Outgoing)?;
    let cpu_note = pin(&lab);
    let offloads = match config.keep_offloads {
        true => None,
        false => Some(offloads::Off::segmentation(&lab.scan_ns, &lab.scan_if)?),
    };
    let offload_note = offloads
        .as_ref()
        .map_or("as they were".to_string(), |o| o.describe());
    let sink = SocketAddrV4::new(addrs.gateway_ip, DISCARD_PORT);
    let mut bench = Bench {
        scan_tap,
        lab_tap,
        cost: Instrumentation {
            clock_read_ns: clock_read_ns(),
            kernel_tap_ns_per_frame: 0.0,
            lab_tap_ns_per_frame: 0.0,
            tap_gap_ns: 0.0,
            calibration_calls_us: Vec::new(),
        },
        payload: (0..sizes[sizes.len() - 1])
            .map(|i| (i * 131 + 7) as u8)
            .collect(),
    };
    bench.calibrate(sink)?;
    let cost = bench.cost.clone();
    say(format!(
        "sonde profile stack: lab {lab_name}, {} → {sink}, {} reps per size; {cpu_note}; TSO/GSO on {}: {offload_note}",
        lab.scan_if, config.reps, lab.scan_if
    ));
    say(format!(
        "instrumentation: clock read {:.0} ns (subtracted from start and stop); tap work per frame {:.0} ns on {} (kernel path), {:.0} ns on {} (sonde's path), subtracted from stop for each frame before the last; {} stamps a frame {:.0} ns after {} does (not subtracted)",
        cost.clock_read_ns,
        cost.kernel_tap_ns_per_frame,
        lab.scan_if,
        cost.lab_tap_ns_per_frame,
        lab.net_if,
        lab.net_if,
        cost.tap_gap_ns,
        lab.scan_if
    ));
    for c in &cost.calibration_calls_us {
        say(format!(
            "  calibration: a 64 KB UDP send takes {:.1} µs with the {} path's tap on, {:.1} µs with it off (medians)",
            c.on_us,
            c.tap.name(),
            c.off_us
        ));
    }
    let ends = Endpoints {
        src_mac: parse_mac(&lab.scan_mac)?,
        dst_mac: parse_mac(&lab.gateway_mac)?,
        src_ip: addrs.scan_ip,
        dst_ip: addrs.gateway_ip,
        src_port: SONDE_PORT,
        dst_port: DISCARD_PORT,
    };
    let mut points = Vec::new();
    let mut samples = Vec::new();
    for &path in &config.paths {
        for &proto in &config.protos {
            let mut sender = Sender::open(path, proto, sink, ends, &lab.scan_if)?;
            bench.observe_at(path)?;
            for _ in 0..WARMUP {
                bench.measure(&mut sender, proto, sizes[0])?;
            }
            for &size in sizes {
                let mut got = Vec::new();
                let mut lost = 0;
                for _ in 0..config.reps {
                    match bench.measure(&mut sender, proto, size)? {
                        Some(s) => got.push(s),
                        None => lost += 1,
                    }
                }
                if got.is_empty() {
                    bail!(
                        "no {} {} send of {size} bytes reached the tap in {} tries; is the lab healthy (sonde lab status --name {lab_name})?",
                        path.name(), proto.name(), config.reps
                    );
                }
                points.push(Point::of(path, proto, size, &got, lost));
                samples.extend(got.into_iter().map(|s| (path, proto, size, s)));
            }
        }
    }
    drop(offloads);
    let fits = fit_all(&points);
    Ok(StackRun {
        lab: lab_name.clone(),
        iface: lab.scan_if.clone(),
        destination: sink,
        offloads: offload_note,
        reps: config.reps,
        instrumentation: cost,
        points,
        fits,
        samples,
    })
}

fn parse_mac(text: &str) -> anyhow::Result<MacAddr> {
    text.parse()
        .map_err(|_| anyhow!("the lab's state names an invalid MAC address {text:?}"))
}

/// Pins this thread to a CPU the lab leaves to sonde, when the lab was brought up with
/// `--target-cpus`; says where the lab's receive work (and so the tap's) runs.
fn pin(lab: &sonde_lab::LabStatus) -> String {
    let sender_cpus = lab
        .target_cpus
        .as_ref()
        .map(|_| sonde_lab::sender_cpus(lab));
    match sender_cpus {
        Some(cpus) if !cpus.is_empty() => {
            sonde_engine::plan::pin_to_cpu(cpus[0]);
            format!(
                "sonde on CPU {}, the lab's receive work on CPU {}",
                cpus[0],
                sonde_lab::cpu_list(lab.target_cpus.as_deref().unwrap_or_default())
            )
        }
        _ => "the lab's receive work runs inside each send (a lab with --target-cpus moves it off sonde's CPU)".into(),
    }
}

/// Waits [`SETTLE`] without sleeping: a sleeping CPU (a VM's above all) wakes up slowly and
/// cold, which would be in the next send's start; yielding lets the kernel's deferred work on
/// this CPU run meanwhile.
fn settle() {
    let end = Instant::now() + SETTLE;
    while Instant::now() < end {
        std::thread::yield_now();
    }
}

/// CLOCK_REALTIME in ns: the clock the kernel's software timestamps use.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The median cost of one clock read, from back-to-back pairs.
fn clock_read_ns() -> f64 {
    let gaps: Vec<f64> = (0..2001)
        .map(|_| {
            let a = now_ns();
            let b = now_ns();
            (b - a) as f64
        })
        .collect();
    median(&gaps).unwrap_or(0.0)
}

/// One path's sending end.
enum Sender {
    Kernel {
        plain: KernelSocket,
        stamped: KernelSocket,
    },
    Sonde {
        tx: AnyTx,
        ends: Endpoints,
        next_id: u32,
    },
}

impl Sender {
    fn open(
        path: PathKind,
        proto: Proto,
        sink: SocketAddrV4,
        ends: Endpoints,
        iface: &str,
    ) -> anyhow::Result<Sender> {
        Ok(match path {
            PathKind::Kernel => Sender::Kernel {
                plain: KernelSocket::connect(proto, sink, false)?,
                stamped: KernelSocket::connect(proto, sink, true)?,
            },
            PathKind::Sonde => {
                let mut cfg = IoConfig::new(iface);
                cfg.batch = 64;
                cfg.ring_frames = 256;
                Sender::Sonde {
                    tx: AnyTx::open(BackendKind::Ring, &cfg)?,
                    ends,
                    next_id: 1,
                }
            }
        })
    }
}

/// Hands `payload` to the ring as frames: headers, checksum and copy, then the kernel's
/// transmit of the whole batch.
fn send_frames(
    tx: &mut AnyTx,
    ends: Endpoints,
    proto: Proto,
    payload: &[u8],
    id: u32,
) -> anyhow::Result<()> {
    let burst = Burst::new(ends, proto, payload, id);
    let total = burst.frames();
    let mut posted = 0;
    let give_up = Instant::now() + FRAME_WAIT;
    while posted < total {
        let base = posted;
        posted += tx.tx_batch(total - base, |i, buf| burst.write_frame(base + i, buf))?;
        if posted < total && Instant::now() > give_up {
            bail!("the ring took {posted} of {total} frames in {FRAME_WAIT:?}");
        }
    }
    Ok(())
}

/// Times sends against the taps.
struct Bench {
    /// On sx0: sees the kernel's frames as they go to the driver.
    scan_tap: Tap,
    /// On nx0: sees every frame as veth hands it to the lab.
    lab_tap: Tap,
    cost: Instrumentation,
    /// The largest payload; smaller ones are its beginning.
    payload: Vec<u8>,
}

/// When a send's frames reached the tap, ns from the send call.
struct Seen {
    /// The first frame's stamp, ns since the epoch.
    first_at_ns: i128,
    frames: usize,
    first_ns: f64,
    last_ns: f64,
    call_ns: f64,
}

impl Bench {
    /// Switches on the tap that times `path` and off the other, so that only its cost is in
    /// the sends.
    fn observe_at(&mut self, path: PathKind) -> anyhow::Result<()> {
        self.scan_tap.set_on(path == PathKind::Kernel)?;
        self.lab_tap.set_on(path == PathKind::Sonde)
    }

    fn tap(&mut self, path: PathKind) -> &mut Tap {
        match path {
            PathKind::Kernel => &mut self.scan_tap,
            PathKind::Sonde => &mut self.lab_tap,
        }
    }

    /// Measures what the taps cost and how far apart they stamp (see [`Instrumentation`]).
    fn calibrate(&mut self, sink: SocketAddrV4) -> anyhow::Result<()> {
        let mut socket = KernelSocket::connect(Proto::Udp, sink, false)?;
        for path in [PathKind::Kernel, PathKind::Sonde] {
            self.observe_at(path)?;
            let per_frame = self.tap_ns_per_frame(path, &mut socket)?;
            match path {
                PathKind::Kernel => self.cost.kernel_tap_ns_per_frame = per_frame,
                PathKind::Sonde => self.cost.lab_tap_ns_per_frame = per_frame,
            }
        }
        self.scan_tap.set_on(true)?;
        self.lab_tap.set_on(true)?;
        let payload = &self.payload[..1];
        let mut gaps = Vec::new();
        for _ in 0..GAP_SENDS {
            self.lab_tap.drain();
            let seen = observe(&mut self.scan_tap, Proto::Udp, 1, || {
                Ok(socket.send(payload)?)
            })?;
            let deadline = Instant::now() + FRAME_WAIT;
            if let (Some(seen), Some(frame)) = (seen, self.lab_tap.next(deadline)?) {
                gaps.push(frame.at_ns as f64 - seen.first_at_ns as f64);
            }
        }
        self.cost.tap_gap_ns =
            median(&gaps).ok_or_else(|| anyhow!("no calibration datagram reached both taps"))?;
        Ok(())
    }

    /// The cost per frame of `path`'s tap inside a send: 64 KB UDP datagrams (45 fragments)
    /// sent in blocks with that tap on and off in turn (see `Tap::set_on`), the first send of
    /// each block unmeasured (it pays for the switch); the difference of the median call times
    /// over the frames. The other tap is off.
    fn tap_ns_per_frame(
        &mut self,
        path: PathKind,
        socket: &mut KernelSocket,
    ) -> anyhow::Result<f64> {
        let payload = vec![0x5a; MAX_UDP];
        let frames = frames::frames_for(Proto::Udp, MAX_UDP) as f64;
        let (mut on, mut off) = (Vec::new(), Vec::new());
        let tap = self.tap(path);
        for _ in 0..CALIBRATION_ROUNDS {
            for (tap_on, calls) in [(true, &mut on), (false, &mut off)] {
                tap.set_on(tap_on)?;
                for i in 0..=CALIBRATION_BLOCK {
                    tap.drain();
                    let t0 = now_ns();
                    socket
                        .send(&payload)
                        .context("sending the taps' calibration datagrams")?;
                    if i > 0 {
                        calls.push((now_ns() - t0) as f64);
                    }
                }
            }
        }
        tap.set_on(true)?;
        // The last datagram's work may still be under way on another CPU.
        std::thread::sleep(Duration::from_millis(20));
        tap.drain();
        let (on, off) = (median(&on).unwrap_or(0.0), median(&off).unwrap_or(0.0));
        self.cost.calibration_calls_us.push(CalibrationCalls {
            tap: path,
            on_us: on / 1000.0,
            off_us: off / 1000.0,
        });
        Ok(((on - off) / frames).max(0.0))
    }

    /// One send of `size` bytes; None when its frames did not all reach the tap in time.
    fn measure(
        &mut self,
        sender: &mut Sender,
        proto: Proto,
        size: usize,
    ) -> anyhow::Result<Option<Sample>> {
        settle();
        let clock = self.cost.clock_read_ns;
        let (tap_cost, tap) = match sender {
            Sender::Kernel { .. } => (self.cost.kernel_tap_ns_per_frame, &mut self.scan_tap),
            Sender::Sonde { .. } => (self.cost.lab_tap_ns_per_frame, &mut self.lab_tap),
        };
        let payload = &self.payload[..size];
        let (seen, stamps) = match sender {
            Sender::Kernel { plain, stamped } => {
                let Some(seen) = observe(tap, proto, size, || Ok(plain.send(payload)?))? else {
                    return Ok(None);
                };
                // The kernel's own view, from the same send on the socket that asks for it.
                settle();
                stamped.take_stamps()?;
                let mut t0 = 0;
                let arrived = observe(tap, proto, size, || {
                    t0 = now_ns();
                    Ok(stamped.send(payload)?)
                })?;
                let stamps = stamped.take_stamps()?;
                // UDP's stamped packet is the first fragment, TCP's the last segment: the
                // tap's work on the frames before it lies inside its SND time, as for stop.
                // SCHED is taken as TCP's (GSO) packet enters, before it is cut into segments
                // and before any of them passes the tap.
                let tap_before = match (proto, &arrived) {
                    (Proto::Tcp, Some(a)) => tap_cost * (a.frames - 1) as f64,
                    _ => 0.0,
                };
                let since = |t: Option<i128>, tap: f64| {
                    t.filter(|_| arrived.is_some())
                        .map(|t| (t - t0) as f64 - clock - tap)
                };
                let stamps = (
                    since(stamps.sched_ns, 0.0),
                    since(stamps.software_ns, tap_before),
                );
                (seen, stamps)
            }
            Sender::Sonde { tx, ends, next_id } => {
                let id = *next_id;
                *next_id = next_id.wrapping_add(size as u32);
                let Some(seen) = observe(tap, proto, size, || {
                    send_frames(tx, *ends, proto, payload, id)
                })?
                else {
                    return Ok(None);
                };
                (seen, (None, None))
            }
        };
        let tap_before_last = tap_cost * (seen.frames - 1) as f64;
        Ok(Some(Sample {
            frames: seen.frames,
            start_ns: seen.first_ns - clock,
            stop_ns: (seen.last_ns - clock - tap_before_last).max(seen.first_ns - clock),
            call_ns: seen.call_ns,
            sched_ns: stamps.0,
            software_ns: stamps.1,
        }))
    }
}

/// Runs `send` and waits for `size` bytes of `proto` payload to pass the tap: when the first
/// and the last of their frames did, from just before the call.
fn observe(
    tap: &mut Tap,
    proto: Proto,
    size: usize,
    send: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Option<Seen>> {
    tap.drain();
    let t0 = now_ns();
    send()?;
    let call_ns = (now_ns() - t0) as f64;
    let deadline = Instant::now() + FRAME_WAIT;
    let (mut first, mut last, mut frames, mut bytes) = (None, 0, 0, 0);
    while bytes < size {
        let Some(frame) = tap.next(deadline)? else {
            return Ok(None);
        };
        // Pure ACKs and window updates carry no payload: not part of the send.
        if frame.proto != proto.ip() || frame.payload == 0 {
            continue;
        }
        first.get_or_insert(frame.at_ns);
        last = frame.at_ns;
        frames += 1;
        bytes += frame.payload;
    }
    Ok(first.map(|first| Seen {
        first_at_ns: first,
        frames,
        first_ns: (first - t0) as f64,
        last_ns: (last - t0) as f64,
        call_ns,
    }))
}

impl Point {
    fn of(path: PathKind, proto: Proto, size: usize, got: &[Sample], lost: usize) -> Point {
        let us = |f: &dyn Fn(&Sample) -> Option<f64>| {
            let values: Vec<f64> = got.iter().filter_map(f).collect();
            median(&values).map(|ns| ns / 1000.0)
        };
        let frames: Vec<f64> = got.iter().map(|s| s.frames as f64).collect();
        Point {
            path,
            proto,
            size_bytes: size,
            frames: median(&frames).unwrap_or(0.0).round() as usize,
            reps: got.len(),
            lost,
            start_us: us(&|s| Some(s.start_ns)).unwrap_or(f64::NAN),
            stop_us: us(&|s| Some(s.stop_ns)).unwrap_or(f64::NAN),
            call_us: us(&|s| Some(s.call_ns)).unwrap_or(f64::NAN),
            sched_us: us(&|s| s.sched_ns),
            software_us: us(&|s| s.software_ns),
        }
    }
}

/// KB (1024 bytes): the x of the fits.
pub fn kb(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

fn fit_all(points: &[Point]) -> Vec<SeriesFit> {
    let mut fits: Vec<SeriesFit> = Vec::new();
    for p in points {
        if fits.iter().any(|f| f.path == p.path && f.proto == p.proto) {
            continue;
        }
        let series: Vec<&Point> = points
            .iter()
            .filter(|q| q.path == p.path && q.proto == p.proto)
            .collect();
        let line = |y: fn(&Point) -> f64| {
            let xy: Vec<(f64, f64)> = series.iter().map(|q| (kb(q.size_bytes), y(q))).collect();
            LineFit::least_squares(&xy)
        };
        fits.push(SeriesFit {
            path: p.path,
            proto: p.proto,
            start: line(|q| q.start_us),
            stop: line(|q| q.stop_us),
        });
    }
    fits
}

/// The medians and fitted lines of each (path, protocol), as lines of text.
pub fn tables(points: &[Point], fits: &[SeriesFit]) -> String {
    let mut out = String::new();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for fit in fits {
        out.push('\n');
        let stamped = match fit.proto {
            Proto::Udp => "the first fragment",
            Proto::Tcp => "the segment with the last byte",
        };
        match fit.path {
            PathKind::Kernel => _ = writeln!(
                out,
                "{} {}: start/stop as frames go to the driver (tap on the scanner's side); sched/sw: SO_TIMESTAMPING of {stamped}",
                fit.path.name(),
                fit.proto.name()
            ),
            PathKind::Sonde => _ = writeln!(
                out,
                "{} {}: start/stop as veth hands frames to the lab (tap on the lab's side); ring backend",
                fit.path.name(),
                fit.proto.name()
            ),
        }
        _ = writeln!(
            out,
            "  {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
            "size B", "frames", "start µs", "stop µs", "sched µs", "sw µs", "call µs", "lost"
        );
        for p in points
            .iter()
            .filter(|p| p.path == fit.path && p.proto == fit.proto)
        {
            _ = writeln!(
                out,
                "  {:>8} {:>6} {:>9.2} {:>9.2} {:>9} {:>9} {:>9.2} {:>5}",
                p.size_bytes,
                p.frames,
                p.start_us,
                p.stop_us,
                opt(p.sched_us),
                opt(p.software_us),
                p.call_us,
                p.lost
            );
        }
        for (what, line) in [("start", fit.start), ("stop ", fit.stop)] {
            match line {
                Some(l) => _ = writeln!(out, "  {what} = {l} µs  (x in KB; r² {:.3})", l.r2),
                None => _ = writeln!(out, "  {what}: no line (needs two sizes or more)"),
            }
        }
    }
    out
}

/// The output files, created before anything is measured so a bad --out fails at once.
pub struct Outputs {
    pub csv: PathBuf,
    pub samples: PathBuf,
    pub png: PathBuf,
}

impl Outputs {
    pub fn create(dir: &Path) -> anyhow::Result<Outputs> {
        let unwritable = |e: std::io::Error| {
            anyhow!(
                "cannot write to --out {}: {e}; give a folder you can write to",
                dir.display()
            )
        };
        std::fs::create_dir_all(dir).map_err(unwritable)?;
        let outputs = Outputs {
            csv: dir.join("stack.csv"),
            samples: dir.join("stack-samples.csv"),
            png: dir.join("stack.png"),
        };
        // The folder's own files are replaced on a second run into it, never written through a
        // link.
        output_file::open(&outputs.csv, IfExists::Overwrite)
            .map_err(|e| anyhow!("cannot write to --out {}: {e}", dir.display()))?;
        Ok(outputs)
    }

    /// Writes the medians and every send of `run` as CSV.
    pub fn write(&self, run: &StackRun) -> anyhow::Result<()> {
        let (points, samples) = (&run.points, &run.samples);
        let fail =
            |path: &Path, e: &dyn std::fmt::Display| anyhow!("writing {}: {e}", path.display());
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let open = |path: &Path| {
            output_file::open(path, IfExists::Overwrite).map(csv::Writer::from_writer)
        };
        let mut csv = open(&self.csv)?;
        csv.write_record([
            "path",
            "proto",
            "size_bytes",
            "frames",
            "reps",
            "lost",
            "start_us",
            "stop_us",
            "call_us",
            "sched_us",
            "sw_us",
        ])
        .map_err(|e| fail(&self.csv, &e))?;
        for p in points {
            csv.write_record([
                p.path.name().to_string(),
                p.proto.name().to_string(),
                p.size_bytes.to_string(),
                p.frames.to_string(),
                p.reps.to_string(),
                p.lost.to_string(),
                format!("{:.3}", p.start_us),
                format!("{:.3}", p.stop_us),
                format!("{:.3}", p.call_us),
                opt(p.sched_us),
                opt(p.software_us),
            ])
            .map_err(|e| fail(&self.csv, &e))?;
        }
        csv.flush().map_err(|e| fail(&self.csv, &e))?;
        let mut raw = open(&self.samples)?;
        raw.write_record([
            "path",
            "proto",
            "size_bytes",
            "frames",
            "start_us",
            "stop_us",
            "call_us",
            "sched_us",
            "sw_us",
        ])
        .map_err(|e| fail(&self.samples, &e))?;
        for (path, proto, size, s) in samples {
            raw.write_record([
                path.name().to_string(),
                proto.name().to_string(),
                size.to_string(),
                s.frames.to_string(),
                format!("{:.3}", s.start_ns / 1000.0),
                format!("{:.3}", s.stop_ns / 1000.0),
                format!("{:.3}", s.call_ns / 1000.0),
                opt(s.sched_ns.map(|v| v / 1000.0)),
                opt(s.software_ns.map(|v| v / 1000.0)),
            ])
            .map_err(|e| fail(&self.samples, &e))?;
        }
        raw.flush().map_err(|e| fail(&self.samples, &e))?;
        std::io::stdout().flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_sort_and_refuse_clearly() {
        let both = [Proto::Udp, Proto::Tcp];
        assert_eq!(
            parse_sizes("1k, 64,64,65507", &both).unwrap(),
            vec![64, 1024, 65507]
        );
        assert_eq!(parse_sizes("64k", &[Proto::Tcp]).unwrap(), vec![65536]);
        let e = parse_sizes("64,abc", &both).unwrap_err().to_string();
        assert!(e.contains("\"abc\"") && e.contains("--sizes"), "{e}");
        let e = parse_sizes("0,64", &both).unwrap_err().to_string();
        assert!(e.contains("0 bytes"), "{e}");
        let e = parse_sizes("65508", &both).unwrap_err().to_string();
        assert!(e.contains("65507") && e.contains("UDP"), "{e}");
        assert!(parse_sizes("", &both).is_err());
    }

    #[test]
    fn fits_are_per_path_and_protocol() {
        let point = |path, proto, size: usize, stop_per_kb: f64| Point {
            path,
            proto,
            size_bytes: size,
            frames: 1,
            reps: 1,
            lost: 0,
            start_us: 5.0,
            stop_us: stop_per_kb * kb(size) + 10.0,
            call_us: 1.0,
            sched_us: None,
            software_us: None,
        };
        let points = vec![
            point(PathKind::Kernel, Proto::Udp, 1024, 2.0),
            point(PathKind::Kernel, Proto::Udp, 4096, 2.0),
            point(PathKind::Sonde, Proto::Udp, 1024, 0.5),
            point(PathKind::Sonde, Proto::Udp, 8192, 0.5),
        ];
        let fits = fit_all(&points);
        assert_eq!(fits.len(), 2);
        let stop = fits[0].stop.unwrap();
        assert!((stop.slope - 2.0).abs() < 1e-9 && (stop.intercept - 10.0).abs() < 1e-9);
        assert!((fits[1].stop.unwrap().slope - 0.5).abs() < 1e-9);
        assert_eq!(fits[1].start.unwrap().slope, 0.0);
    }
}
