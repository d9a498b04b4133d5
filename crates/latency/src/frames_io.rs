//! sonde's frame path on real queues: the client's [`FrameLink`] (messages sent on a ring or
//! AF_XDP queue, echoes read from a per-frame ring or AF_XDP sockets) and the frame reflector
//! [`reflect_frames`]. Built with the `io` feature (on by default; the fuzz targets leave it
//! out, and with it the AF_XDP build).

use std::io;
use std::net::SocketAddrV4;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;
use sonde_io::{rx_many, AnyRx, AnyTx, BackendKind, FilterSpec, FrameTx, IoConfig, TcpTake};

use crate::frame::{echo_into, echo_of, is_echo_request, EchoMatch, FrameEnds, MessageFrame};
use crate::link::{Clock, EchoLink, POLL_BATCH};
use crate::message::Stamp;
use crate::reflect::{should_stop, ReflectCount, WAIT_STEP};

/// How long the frame reflector spins after the last frame before it waits in `poll(2)`
/// instead (so an idle reflector does not hold a CPU, and a busy one never sleeps).
const SPIN_FOR: Duration = Duration::from_millis(50);
/// How long an echo waits for room in a full transmit queue before it is given up (and
/// counted): long enough for the kernel to drain a ring, short enough not to stall receiving.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(1);

/// sonde's own path: frames from a template, patched with each message's header.
pub struct FrameLink {
    tx: AnyTx,
    /// One receiver per queue the echoes can arrive on.
    rxs: Vec<AnyRx>,
    message: MessageFrame,
    ends: FrameEnds,
    /// Holds the client's port in the kernel, so the kernel neither gives it to another
    /// socket nor answers the echoes it also sees with ICMP port unreachable.
    _port: UdpSocket,
}

impl FrameLink {
    /// `size`: UDP payload bytes (at least [`crate::HEADER_LEN`]). `port_guard` is a UDP socket bound
    /// to `ends.src` (see [`hold_port`]).
    pub fn new(
        tx: AnyTx,
        rxs: Vec<AnyRx>,
        ends: FrameEnds,
        size: usize,
        port_guard: UdpSocket,
    ) -> FrameLink {
        let message = MessageFrame::new(&ends, size);
        FrameLink {
            tx,
            rxs,
            message,
            ends,
            _port: port_guard,
        }
    }
}

impl EchoLink for FrameLink {
    fn send(&mut self, run: u32, seq: u64, clock: &Clock) -> io::Result<bool> {
        let sent_ns = clock.now_ns();
        let message = &self.message;
        let sent = self
            .tx
            .tx_batch(1, |_, buf| message.write(buf, run, seq, sent_ns))?;
        Ok(sent == 1)
    }

    fn poll(&mut self, clock: &Clock, on_echo: &mut dyn FnMut(Stamp, u64)) -> io::Result<usize> {
        let ends = &self.ends;
        let mut echoed = 0;
        rx_many(&mut self.rxs, POLL_BATCH, Duration::ZERO, |_, frame| {
            if let Some(stamp) = echo_of(ends, frame) {
                on_echo(stamp, clock.now_ns());
                echoed += 1;
            }
        })?;
        Ok(echoed)
    }

    fn take_rx_drops(&mut self) -> Option<u64> {
        Some(self.rxs.iter_mut().map(|rx| rx.take_drops()).sum())
    }

    fn describe(&self) -> String {
        let rx = self.rxs.first().map_or_else(String::new, |r| r.describe());
        format!("{}; {rx} ×{}", self.tx.describe(), self.rxs.len())
    }
}

/// A UDP socket holding `addr`'s port (port 0: one the kernel picks) that drops everything it
/// receives (a one-instruction filter, `ret 0`): the kernel then neither gives the port away
/// nor answers frames to it, which sonde reads from a packet socket, with ICMP port unreachable.
pub fn hold_port(addr: SocketAddrV4) -> anyhow::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr).map_err(|e| {
        anyhow::anyhow!("cannot hold UDP port {} on {}: {e}", addr.port(), addr.ip())
    })?;
    let drop_all = [libc::sock_filter {
        code: 0x06, // BPF_RET | BPF_K
        jt: 0,
        jf: 0,
        k: 0,
    }];
    sonde_io::filter::attach(socket.as_raw_fd(), &drop_all)?;
    Ok(socket)
}

/// Echoes every matching datagram that `rxs` (one receiver per queue) receive through `tx`,
/// until `stop` or `until`.
pub fn reflect_frames(
    tx: &mut AnyTx,
    rxs: &mut [AnyRx],
    matching: EchoMatch,
    stop: &AtomicBool,
    until: Option<Instant>,
) -> io::Result<ReflectCount> {
    let mut count = ReflectCount::default();
    let mut last_frame = Instant::now();
    while !should_stop(stop, until) {
        let idle = last_frame.elapsed() > SPIN_FOR;
        let timeout = if idle { WAIT_STEP } else { Duration::ZERO };
        let mut failed = None;
        let got = rx_many(rxs, 64, timeout, |_, frame| {
            if failed.is_some() {
                return;
            }
            if !is_echo_request(frame, &matching) {
                count.ignored += 1;
                return;
            }
            // One echo per kick, on purpose: each leaves the moment its request was read, so
            // an echo never waits for the rest of a batch (at the rates measured, a batch is
            // mostly one frame anyway).
            match send_echo(tx, frame) {
                Ok(true) => count.echoed += 1,
                Ok(false) => count.queue_full += 1,
                Err(e) => failed = Some(e),
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if got > 0 {
            last_frame = Instant::now();
        }
    }
    count.rx_dropped = rxs.iter_mut().map(|rx| rx.take_drops()).sum();
    Ok(count)
}

/// Sends the echo of `frame`, trying again while the transmit queue is full (each try kicks the
/// kernel to drain it) for at most [`QUEUE_FULL_WAIT`]; false if it never had room.
fn send_echo(tx: &mut AnyTx, frame: &[u8]) -> io::Result<bool> {
    let deadline = Instant::now() + QUEUE_FULL_WAIT;
    loop {
        if tx.tx_batch(1, |_, buf| echo_into(frame, buf))? == 1 {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::hint::spin_loop();
    }
}

/// A frame path's transmit queue and one receiver per queue frames can arrive on, taking only
/// UDP datagrams to `local` (for `xdp` its XDP filter, for `ring` a BPF filter).
/// `backend` is `Ring` or `Xdp`; the kernel's path opens a socket instead.
pub fn open_frames(
    backend: BackendKind,
    iface: &str,
    local: SocketAddrV4,
) -> anyhow::Result<(AnyTx, Vec<AnyRx>)> {
    // The default ring sizes (4096 frames each way): a few milliseconds of a stalled reader at
    // 40 K/s must fit (256 frames lost echoes in every multi-millisecond stall).
    let mut cfg = IoConfig::new(iface);
    match backend {
        BackendKind::Ring => {
            let tx = AnyTx::open(BackendKind::Ring, &cfg)?;
            let mut rx = AnyRx::open_per_frame(&cfg)?;
            let mut expr = format!("udp dst port {}", local.port());
            if !local.ip().is_unspecified() {
                expr += &format!(" and dst host {}", local.ip());
            }
            rx.set_filter(&expr)?;
            Ok((tx, vec![rx]))
        }
        BackendKind::Xdp => {
            let spec = FilterSpec {
                ipv4: Some(*local.ip()),
                ipv6: None,
                tcp: TcpTake::None,
                udp: true,
                icmp: false,
                icmp6: false,
                ports: (local.port(), local.port()),
                echo_id: None,
                // The port is held by a kernel socket of ours (hold_port), which would win.
                spare_host_sockets: false,
                stamp_arrivals: false,
            };
            let (tx, rx0) = sonde_io::open_xdp_pair(&cfg, &spec)?;
            let mut rxs = vec![rx0];
            let queues = sonde_io::queue_count(iface).context("counting queues")?;
            for q in 1..queues {
                cfg.queue = q;
                rxs.push(AnyRx::open_filtered(BackendKind::Xdp, &cfg, &spec, "")?);
            }
            Ok((tx, rxs))
        }
        other => anyhow::bail!("latency frames travel on ring or xdp, not {}", other.name()),
    }
}
