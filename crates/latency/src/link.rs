//! How a latency client talks to a reflector: the [`EchoLink`] trait, with the kernel's UDP
//! socket path here ([`KernelLink`]) and sonde's frame path in `frames_io` ([`crate::FrameLink`]).
//! Both stamp each message right before handing it to the kernel and each echo right after it
//! is read, on the same [`Clock`], so the RTT includes the same two crossings either way.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Instant;

use crate::message::{Stamp, HEADER_LEN};

/// Echoes handed over per poll, at most.
pub(crate) const POLL_BATCH: usize = 64;

/// Nanoseconds since the clock was made, on CLOCK_MONOTONIC (read through the vDSO: no
/// system call).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// A path to a reflector.
pub trait EchoLink {
    /// Sends message (`run`, `seq`), stamped now; false when the queue is full (send again).
    fn send(&mut self, run: u32, seq: u64, clock: &Clock) -> io::Result<bool>;
    /// Hands each echo waiting now (never waits) to `on_echo` with the moment it was read.
    fn poll(&mut self, clock: &Clock, on_echo: &mut dyn FnMut(Stamp, u64)) -> io::Result<usize>;
    /// Frames the kernel dropped for this link's receivers since the last call (its rings were
    /// full), where the path can tell; None where it cannot (the kernel socket path).
    fn take_rx_drops(&mut self) -> Option<u64> {
        None
    }
    /// How the messages travel, for the summary.
    fn describe(&self) -> String;
}

/// The kernel's UDP socket path: `send` and non-blocking `recv`, one system call each.
pub struct KernelLink {
    socket: UdpSocket,
    buf: Vec<u8>,
}

impl KernelLink {
    /// A socket connected to `to`, sending `size`-byte payloads.
    pub fn open(to: SocketAddrV4, size: usize) -> io::Result<KernelLink> {
        let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
        socket.connect(to)?;
        socket.set_nonblocking(true)?;
        Ok(KernelLink {
            socket,
            buf: vec![0; size.max(HEADER_LEN)],
        })
    }
}

impl EchoLink for KernelLink {
    fn send(&mut self, run: u32, seq: u64, clock: &Clock) -> io::Result<bool> {
        let sent_ns = clock.now_ns();
        Stamp { run, seq, sent_ns }.write(&mut self.buf);
        match self.socket.send(&self.buf) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn poll(&mut self, clock: &Clock, on_echo: &mut dyn FnMut(Stamp, u64)) -> io::Result<usize> {
        let mut got = 0;
        let mut buf = [0u8; 2048];
        while got < POLL_BATCH {
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let now = clock.now_ns();
                    if let Some(stamp) = Stamp::read(&buf[..n]) {
                        on_echo(stamp, now);
                        got += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // A reflector that is not there yet answers with ICMP port unreachable, which
                // a connected socket reports once: it is a lost message, not an error.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    fn describe(&self) -> String {
        "kernel UDP socket (send, non-blocking recv)".into()
    }
}
