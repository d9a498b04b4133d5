//! The two ways a latency client talks to a reflector: through the kernel's UDP socket path
//! ([`KernelLink`]) or through sonde's own frame I/O ([`FrameLink`]: a template patched per
//! message, sent on a ring or AF_XDP queue, echoes read from a per-frame ring or AF_XDP).
//! Both stamp each message right before handing it to the kernel and each echo right after it
//! is read, on the same [`Clock`], so the RTT includes the same two crossings either way.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sonde_craft::{Patcher, Word};
use sonde_io::{rx_many, AnyRx, AnyTx, FrameTx};
use sonde_wire::checksum::pseudo_header_v4;
use sonde_wire::{ethernet, ipv4, udp, EtherType, IpPair, IpProtocol, MacAddr};

use crate::message::{Stamp, HEADER_LEN, MAGIC, RUN_AT};

/// Echoes handed over per poll, at most.
const POLL_BATCH: usize = 64;

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

/// Addresses of a frame-level client.
#[derive(Clone, Copy, Debug)]
pub struct FrameEnds {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
}

/// sonde's own path: frames from a template, patched with each message's header.
pub struct FrameLink {
    tx: AnyTx,
    /// One receiver per queue the echoes can arrive on.
    rxs: Vec<AnyRx>,
    patcher: Patcher,
    ends: FrameEnds,
    payload_at: usize,
    /// Holds the client's port in the kernel, so the kernel neither gives it to another
    /// socket nor answers the echoes it also sees with ICMP port unreachable.
    _port: UdpSocket,
}

impl FrameLink {
    /// `size`: UDP payload bytes (at least [`HEADER_LEN`]). `port_guard` is a UDP socket bound
    /// to `ends.src` (see [`hold_port`]).
    pub fn new(
        tx: AnyTx,
        rxs: Vec<AnyRx>,
        ends: FrameEnds,
        size: usize,
        port_guard: UdpSocket,
    ) -> FrameLink {
        let (frame, payload_at) = echo_template(&ends, size.max(HEADER_LEN));
        let ip_at = ethernet::HEADER_LEN;
        let l4_at = ip_at + ipv4::HEADER_LEN;
        let pseudo = pseudo_header_v4(
            *ends.src.ip(),
            *ends.dst.ip(),
            IpProtocol::UDP.0,
            (frame.len() - l4_at) as u16,
        );
        let len = frame.len();
        let patcher = Patcher::new(
            frame,
            Some(ip_at..l4_at),
            l4_at..len,
            l4_at + 6,
            pseudo,
            true,
        );
        FrameLink {
            tx,
            rxs,
            patcher,
            ends,
            payload_at,
            _port: port_guard,
        }
    }

    /// The header words of a message, as the patcher stores them.
    fn words(&self, run: u32, seq: u64, sent_ns: u64) -> [Word; 10] {
        let at = self.payload_at + RUN_AT;
        let w = |i: usize, v: u64| Word::l4(at + 2 * i, v as u16);
        [
            w(0, u64::from(run >> 16)),
            w(1, u64::from(run)),
            w(2, seq >> 48),
            w(3, seq >> 32),
            w(4, seq >> 16),
            w(5, seq),
            w(6, sent_ns >> 48),
            w(7, sent_ns >> 32),
            w(8, sent_ns >> 16),
            w(9, sent_ns),
        ]
    }
}

impl EchoLink for FrameLink {
    fn send(&mut self, run: u32, seq: u64, clock: &Clock) -> io::Result<bool> {
        let sent_ns = clock.now_ns();
        let words = self.words(run, seq, sent_ns);
        let patcher = &self.patcher;
        let sent = self.tx.tx_batch(1, |_, buf| patcher.write(buf, &words))?;
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

    fn describe(&self) -> String {
        let rx = self.rxs.first().map_or_else(String::new, |r| r.describe());
        format!("{}; {rx} ×{}", self.tx.describe(), self.rxs.len())
    }
}

/// The message of an echo from the reflector at `ends.dst` to us; None for any other frame.
fn echo_of(ends: &FrameEnds, frame: &[u8]) -> Option<Stamp> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    if ip.protocol() != IpProtocol::UDP
        || ip.is_fragment()
        || ip.src_addr() != *ends.dst.ip()
        || ip.dst_addr() != *ends.src.ip()
    {
        return None;
    }
    let dgram = udp::Packet::new_checked(ip.payload()).ok()?;
    if dgram.src_port() != ends.dst.port() || dgram.dst_port() != ends.src.port() {
        return None;
    }
    Stamp::read(dgram.payload())
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

/// Ethernet + IPv4 + UDP to the reflector with the magic in place and every varying word
/// (the message header after the magic, both checksums) zero; and where the payload starts.
fn echo_template(ends: &FrameEnds, size: usize) -> (Vec<u8>, usize) {
    let ip_at = ethernet::HEADER_LEN;
    let l4_at = ip_at + ipv4::HEADER_LEN;
    let payload_at = l4_at + udp::HEADER_LEN;
    let mut frame = vec![0u8; payload_at + size];
    ethernet::Repr {
        src_addr: ends.src_mac,
        dst_addr: ends.dst_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
    ipv4::Repr {
        src_addr: *ends.src.ip(),
        dst_addr: *ends.dst.ip(),
        protocol: IpProtocol::UDP,
        payload_len: udp::HEADER_LEN + size,
        ttl: 64,
        ident: 0,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut frame[ip_at..]));
    let ips = IpPair::V4 {
        src: *ends.src.ip(),
        dst: *ends.dst.ip(),
    };
    udp::Repr {
        src_port: ends.src.port(),
        dst_port: ends.dst.port(),
        payload_len: size,
    }
    .emit(&mut udp::Packet::new_unchecked(&mut frame[l4_at..]), &ips);
    frame[ip_at + 10..ip_at + 12].fill(0);
    frame[l4_at + 6..l4_at + 8].fill(0);
    frame[payload_at..payload_at + 4].copy_from_slice(&MAGIC);
    (frame, payload_at)
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// The frame a [`FrameLink`] would send for message `seq` of run 1.
    pub(crate) fn frame_for(ends: &FrameEnds, size: usize, seq: u64) -> Vec<u8> {
        let (frame, payload_at) = echo_template(ends, size);
        let l4_at = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
        let pseudo = pseudo_header_v4(
            *ends.src.ip(),
            *ends.dst.ip(),
            IpProtocol::UDP.0,
            (frame.len() - l4_at) as u16,
        );
        let len = frame.len();
        let patcher = Patcher::new(
            frame,
            Some(ethernet::HEADER_LEN..l4_at),
            l4_at..len,
            l4_at + 6,
            pseudo,
            true,
        );
        let at = payload_at + RUN_AT;
        let mut words = Vec::new();
        for (i, v) in [0u16, 1, 0, 0, 0, seq as u16, 0, 0, 0, 99]
            .into_iter()
            .enumerate()
        {
            words.push(Word::l4(at + 2 * i, v));
        }
        let mut buf = vec![0u8; 1514];
        let n = patcher.write(&mut buf, &words);
        buf.truncate(n);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::frame_for;
    use super::*;

    #[test]
    fn a_client_frame_is_valid_udp_carrying_its_stamp_and_echoes_are_recognised() {
        let ends = FrameEnds {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: "198.19.255.1:40000".parse().unwrap(),
            dst: "198.19.255.254:7007".parse().unwrap(),
        };
        let f = frame_for(&ends, 100, 0x1234);
        assert_eq!(f.len(), 14 + 20 + 8 + 100);
        let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        let d = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(d.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        let stamp = Stamp::read(d.payload()).unwrap();
        assert_eq!((stamp.run, stamp.seq, stamp.sent_ns), (1, 0x1234, 99));
        // Our own frame is not an echo; its reflection is.
        assert_eq!(echo_of(&ends, &f), None);
        let mut echo = vec![0u8; 1514];
        let n = crate::reflect::echo_into(&f, &mut echo);
        assert_eq!(echo_of(&ends, &echo[..n]), Some(stamp));
        for len in 0..n {
            assert_eq!(echo_of(&ends, &echo[..len]), None, "length {len}");
        }
    }
}
