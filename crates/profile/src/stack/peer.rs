//! The far end of `sonde profile stack`, in the lab's network namespace: UDP and TCP discard
//! sinks on port 9 of the lab's gateway address (so the kernel's sockets have someone to talk
//! to), and the taps: packet sockets that see the scanner's frames with kernel timestamps
//! (CLOCK_REALTIME).
//!
//! Two taps, because no one place sees both paths with a timestamp of the moment a frame
//! leaves:
//! - on sx0 in the scanner namespace, outgoing frames are stamped as the kernel hands them to
//!   the driver (`dev_queue_xmit_nit`, right before veth's transmit), but sonde's ring backend
//!   (`PACKET_QDISC_BYPASS`) skips that point: this tap times the kernel's path;
//! - on nx0 in the lab, frames are stamped as the scanner's veth hands them over (`netif_rx`),
//!   unless the frame carries a delivery time, which the kernel's TCP sets (EDT): then the
//!   stamp is taken only when the lab's softirq delivers it to the tap, later. This tap times
//!   sonde's path, whose frames carry none.
//!
//! The two points are a few hundred ns of veth apart; the run measures the gap on the same
//! frames (kernel UDP, both taps on) and reports it.
//!
//! The lab side runs on threads of this process that entered the network namespace (setns
//! moves only the calling thread, and threads it spawns inherit it); the sockets stay in their
//! namespace wherever they are used from.

use std::io::{IoSliceMut, Read};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nix::sys::socket::{
    recvmsg, setsockopt, socket, sockopt, AddressFamily, ControlMessageOwned, LinkAddr, MsgFlags,
    SockFlag, SockProtocol, SockType,
};
use nix::sys::time::TimeVal;
use sonde_wire::{ethernet, IpProtocol};

/// The discard service's port (RFC 863).
pub const DISCARD_PORT: u16 = 9;

/// How often blocked sink and tap reads wake up to look at the clock and the stop flag.
const WAKE: Duration = Duration::from_millis(20);

/// The discard sinks' threads; they stop when this is dropped.
pub struct Peer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Where the measured frames go and come from.
#[derive(Clone, Copy, Debug)]
pub struct Addresses {
    pub scan_ip: Ipv4Addr,
    pub gateway_ip: Ipv4Addr,
}

/// Starts the sinks and opens the tap in the network namespace of lab `lab`, whose interface
/// facing the scanner is `net_if`.
pub fn start(lab: &str, net_if: &str, addrs: Addresses) -> anyhow::Result<(Peer, Tap)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (lab, net_if) = (lab.to_string(), net_if.to_string());
    let flag = stop.clone();
    let main = std::thread::Builder::new()
        .name("stack-peer".into())
        .spawn(move || {
            let opened = open_in_lab(&lab, &net_if, addrs);
            match opened {
                Ok((tap, udp, tcp)) => {
                    let udp_flag = flag.clone();
                    let udp_thread = std::thread::spawn(move || discard_udp(udp, &udp_flag));
                    let _ = ready_tx.send(Ok(tap));
                    serve_tcp(tcp, &flag);
                    let _ = udp_thread.join();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .context("starting the peer thread")?;
    let tap = ready_rx
        .recv()
        .map_err(|_| anyhow!("the peer thread ended before it was ready"))??;
    Ok((
        Peer {
            stop,
            threads: vec![main],
        },
        tap,
    ))
}

fn open_in_lab(
    lab: &str,
    net_if: &str,
    addrs: Addresses,
) -> anyhow::Result<(Tap, UdpSocket, TcpListener)> {
    sonde_lab::enter_net_ns(lab)?;
    let here = SocketAddrV4::new(addrs.gateway_ip, DISCARD_PORT);
    let in_use = |what: &str, e: std::io::Error| {
        anyhow!("cannot open the {what} discard sink on {here} in lab {lab:?}: {e} (is something else of the lab listening on port {DISCARD_PORT}?)")
    };
    let udp = UdpSocket::bind(here).map_err(|e| in_use("UDP", e))?;
    udp.set_read_timeout(Some(WAKE))?;
    let tcp = TcpListener::bind(here).map_err(|e| in_use("TCP", e))?;
    tcp.set_nonblocking(true)?;
    // A receive window far above 64 KB, so that a send is never held back by the sink's
    // flow control: stop is the sender's time, not the sink thread's wake-up.
    setsockopt(&tcp, sockopt::RcvBufForce, &(8 << 20))
        .or_else(|_| setsockopt(&tcp, sockopt::RcvBuf, &(8 << 20)))
        .map_err(|e| anyhow!("cannot size the TCP sink's receive buffer: {e}"))?;
    let tap = Tap::open(net_if, addrs, Direction::Incoming)?;
    Ok((tap, udp, tcp))
}

fn discard_udp(socket: UdpSocket, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let _ = socket.recv(&mut buf);
    }
}

/// Accepts connections and reads them to nothing, one thread each (the run opens two).
fn serve_tcp(listener: TcpListener, stop: &Arc<AtomicBool>) {
    let mut readers = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                let flag = stop.clone();
                readers.push(std::thread::spawn(move || {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_read_timeout(Some(WAKE));
                    let mut buf = vec![0u8; 1 << 16];
                    while !flag.load(Ordering::Relaxed) {
                        match conn.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if is_timeout(&e) => {}
                            Err(_) => break,
                        }
                    }
                }));
            }
            Err(_) => std::thread::sleep(WAKE),
        }
    }
    for r in readers {
        let _ = r.join();
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// One frame the tap saw: when it arrived and how much transport payload it carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TapFrame {
    /// CLOCK_REALTIME, ns since the epoch.
    pub at_ns: i128,
    pub proto: IpProtocol,
    /// UDP or TCP payload bytes in this frame (a UDP fragment counts its share of the
    /// datagram's payload, the first one less the UDP header).
    pub payload: usize,
}

/// A packet socket on one interface that receives the scanner's IPv4 frames to the gateway,
/// with kernel timestamps.
pub struct Tap {
    /// None while a closing tap is off.
    fd: Option<OwnedFd>,
    ifindex: u32,
    /// What the tap lets through when on: IPv4 from the scanner to the gateway.
    accept: Vec<libc::sock_filter>,
    /// When off, for a tap that filters: nothing (an ethertype no one sends).
    reject: Vec<libc::sock_filter>,
    /// How the tap turns off: by closing its socket (for outgoing frames, which the kernel
    /// clones for the taps before any filter runs, so only closing takes its cost away), or by
    /// its filter (for incoming ones, whose filter runs first; a closed socket could not be
    /// reopened in the lab's namespace from here).
    off_by_closing: bool,
}

/// How a tap sees its frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Frames the namespace sends (the scanner's side).
    Outgoing,
    /// Frames the namespace receives (the lab's side).
    Incoming,
}

impl Tap {
    /// A tap on interface `iface` of the calling thread's namespace.
    pub fn open(iface: &str, addrs: Addresses, direction: Direction) -> anyhow::Result<Tap> {
        let ifindex = nix::net::if_::if_nametoindex(iface)
            .map_err(|e| anyhow!("no interface {iface} in the lab's namespace: {e}"))?;
        let accept = sonde_io::filter::compile(&format!(
            "ip and src host {} and dst host {}",
            addrs.scan_ip, addrs.gateway_ip
        ))?;
        let reject = sonde_io::filter::compile("ether proto 0x88b5")?;
        let fd = Some(open_socket(&accept)?);
        Ok(Tap {
            fd,
            ifindex,
            accept,
            reject,
            off_by_closing: direction == Direction::Outgoing,
        })
    }

    /// Switches the tap on (frames are queued to it) or off (see `off_by_closing`).
    pub fn set_on(&mut self, on: bool) -> anyhow::Result<()> {
        if self.off_by_closing {
            match (on, &self.fd) {
                (true, None) => self.fd = Some(open_socket(&self.accept)?),
                (false, Some(_)) => self.fd = None,
                _ => {}
            }
            return Ok(());
        }
        let program = if on { &self.accept } else { &self.reject };
        let fd = self.fd.as_ref().expect("a filtering tap stays open");
        sonde_io::filter::attach(fd.as_raw_fd(), program)
    }

    /// Throws away every frame waiting, without waiting.
    pub fn drain(&mut self) {
        while let Ok(Some(_)) = self.recv(MsgFlags::MSG_DONTWAIT) {}
    }

    /// The next frame of the scanner's, waiting until `deadline` at most (not at all while
    /// the tap is closed).
    pub fn next(&mut self, deadline: Instant) -> anyhow::Result<Option<TapFrame>> {
        while self.fd.is_some() && Instant::now() < deadline {
            match self.recv(MsgFlags::empty()) {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(anyhow!("reading the tap: {e}")),
            }
        }
        Ok(None)
    }

    /// One frame from the socket: Ok(None) for a frame that is not one of ours.
    fn recv(&mut self, flags: MsgFlags) -> nix::Result<Option<TapFrame>> {
        // The headers are all that is needed; the kernel truncates the rest.
        let mut head = [0u8; 128];
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let mut iov = [IoSliceMut::new(&mut head)];
        let fd = self.fd.as_ref().ok_or(nix::errno::Errno::EAGAIN)?;
        let msg = recvmsg::<LinkAddr>(fd.as_raw_fd(), &mut iov, Some(&mut cmsg), flags)?;
        if msg.address.map(|a| a.ifindex()) != Some(self.ifindex as usize) {
            return Ok(None);
        }
        let at_ns = msg.cmsgs()?.find_map(|c| match c {
            ControlMessageOwned::ScmTimestampns(ts) => {
                Some(ts.tv_sec() as i128 * 1_000_000_000 + ts.tv_nsec() as i128)
            }
            _ => None,
        });
        let len = msg.bytes.min(head.len());
        Ok(at_ns.and_then(|at| parse_frame(&head[..len], at)))
    }
}

/// A packet socket of every protocol with `program` attached and kernel receive timestamps.
fn open_socket(program: &[libc::sock_filter]) -> anyhow::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::EthAll,
    )
    .map_err(|e| anyhow!("cannot open a packet socket (this needs root): {e}"))?;
    sonde_io::filter::attach(fd.as_raw_fd(), program)?;
    // Asking for timestamps switches the kernel's software stamping of frames on.
    setsockopt(&fd, sockopt::ReceiveTimestampns, &true)
        .map_err(|e| anyhow!("the kernel refused SO_TIMESTAMPNS on the tap: {e}"))?;
    // Room for a few bursts of 45 fragments: the tap is read after each send, not during.
    setsockopt(&fd, sockopt::RcvBufForce, &(8 << 20))
        .or_else(|_| setsockopt(&fd, sockopt::RcvBuf, &(8 << 20)))
        .map_err(|e| anyhow!("cannot size the tap's buffer: {e}"))?;
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 20_000))?;
    Ok(fd)
}

/// The protocol and payload share of an IPv4 frame's first bytes (headers only); None for
/// anything else or too short to tell.
pub fn parse_frame(head: &[u8], at_ns: i128) -> Option<TapFrame> {
    let ip = head.get(ethernet::HEADER_LEN..)?;
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let frag_offset = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff;
    let proto = IpProtocol(*ip.get(9)?);
    let ip_payload = total.checked_sub(ihl)?;
    let payload = match proto {
        IpProtocol::UDP if frag_offset == 0 => ip_payload.checked_sub(8)?,
        IpProtocol::UDP => ip_payload,
        IpProtocol::TCP => {
            let data_offset = usize::from(*ip.get(ihl + 12)? >> 4) * 4;
            ip_payload.checked_sub(data_offset)?
        }
        _ => return None,
    };
    Some(TapFrame {
        at_ns,
        proto,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::frames::Burst;
    use crate::stack::Proto;

    #[test]
    fn frames_parse_to_their_payload_share() {
        let ends = crate::stack::frames::tests::ends();
        let data = vec![7u8; 5000];
        for proto in [Proto::Udp, Proto::Tcp] {
            let burst = Burst::new(ends, proto, &data, 1);
            let mut total = 0;
            for k in 0..burst.frames() {
                let mut buf = vec![0u8; 1514];
                let len = burst.write_frame(k, &mut buf);
                let frame = parse_frame(&buf[..len.min(128)], 5).unwrap();
                assert_eq!(frame.at_ns, 5);
                total += frame.payload;
            }
            assert_eq!(total, data.len(), "{proto:?}");
        }
        assert_eq!(parse_frame(&[0u8; 20], 0), None);
        assert_eq!(parse_frame(&[], 0), None);
    }
}
