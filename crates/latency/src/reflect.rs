//! Reflectors: they echo each datagram to a port back to its sender, payload unchanged, at the
//! application layer. [`reflect_kernel`] is an ordinary program on the kernel's UDP socket path
//! (blocking `recv_from`, `send_to`); [`reflect_frames`] is sonde's frame path: it reads frames
//! from a packet ring or AF_XDP, swaps the addresses and ports in place and sends the frame
//! back. Swapping source and destination leaves every checksum valid (the sums do not depend on
//! the order of the words), so nothing is recomputed.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sonde_io::{rx_many, AnyRx, AnyTx, FrameTx};
use sonde_wire::{ethernet, ipv4, udp, EtherType, IpProtocol};

/// How long the frame reflector spins after the last frame before it waits in `poll(2)`
/// instead (so an idle reflector does not hold a CPU, and a busy one never sleeps).
const SPIN_FOR: Duration = Duration::from_millis(50);
/// Longest wait, so a stop request (Ctrl-C, the end of `--duration`) is seen quickly.
const WAIT_STEP: Duration = Duration::from_millis(100);

/// What a reflector did.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReflectCount {
    pub echoed: u64,
    /// Frames that were not datagrams to the reflector's port (frame path only).
    pub ignored: u64,
}

/// Echoes every datagram to `bind` until `stop` is set or `until` passes.
pub fn reflect_kernel(
    bind: SocketAddrV4,
    stop: &AtomicBool,
    until: Option<Instant>,
) -> io::Result<ReflectCount> {
    let socket = UdpSocket::bind(bind)?;
    socket.set_read_timeout(Some(WAIT_STEP))?;
    let mut buf = [0u8; 65536];
    let mut count = ReflectCount::default();
    while !should_stop(stop, until) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                socket.send_to(&buf[..n], from)?;
                count.echoed += 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(count)
}

/// Which datagrams the frame reflector echoes.
#[derive(Clone, Copy, Debug)]
pub struct EchoMatch {
    pub port: u16,
    /// Only datagrams to this address (None: to any).
    pub addr: Option<Ipv4Addr>,
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
            match tx.tx_batch(1, |_, buf| echo_into(frame, buf)) {
                Ok(1) => count.echoed += 1,
                Ok(_) => count.ignored += 1,
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
    Ok(count)
}

fn should_stop(stop: &AtomicBool, until: Option<Instant>) -> bool {
    stop.load(Ordering::Relaxed) || until.is_some_and(|t| Instant::now() >= t)
}

/// Whether `frame` is an unfragmented IPv4 UDP datagram to the reflector.
pub fn is_echo_request(frame: &[u8], matching: &EchoMatch) -> bool {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return false;
    };
    if eth.ethertype() != EtherType::Ipv4 {
        return false;
    }
    let Ok(ip) = ipv4::Packet::new_checked(eth.payload()) else {
        return false;
    };
    if ip.protocol() != IpProtocol::UDP
        || ip.is_fragment()
        || matching.addr.is_some_and(|a| a != ip.dst_addr())
    {
        return false;
    }
    udp::Packet::new_checked(ip.payload()).is_ok_and(|d| d.dst_port() == matching.port)
}

/// Writes the echo of `frame` (checked by [`is_echo_request`]) into `buf`: the same bytes with
/// MAC addresses, IPv4 addresses and UDP ports swapped. Returns its length.
///
/// Swapping leaves a valid UDP checksum valid, but a datagram a local kernel socket sent over
/// veth arrives with its checksum unfinished (the kernel leaves it to a NIC that never comes:
/// `CHECKSUM_PARTIAL`), and echoing that as it is gets it dropped. So the checksum is
/// computed afresh: for a 64-byte payload that is a few dozen additions.
pub fn echo_into(frame: &[u8], buf: &mut [u8]) -> usize {
    let len = frame.len().min(buf.len());
    let out = &mut buf[..len];
    out.copy_from_slice(&frame[..len]);
    let ip_at = ethernet::HEADER_LEN;
    let l4_at = ip_at + usize::from(out[ip_at] & 0x0f) * 4;
    swap(out, 0, 6, 6);
    swap(out, ip_at + 12, ip_at + 16, 4);
    swap(out, l4_at, l4_at + 2, 2);
    if let Ok(ip) = ipv4::Packet::new_checked(&out[ip_at..]) {
        let (src, dst, end) = (
            ip.src_addr(),
            ip.dst_addr(),
            ip_at + usize::from(ip.total_len()),
        );
        if let Ok(mut dgram) = udp::Packet::new_checked(&mut out[l4_at..end]) {
            dgram.fill_checksum_v4(src, dst);
        }
    }
    len
}

fn swap(b: &mut [u8], a: usize, c: usize, n: usize) {
    for i in 0..n {
        b.swap(a + i, c + i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::FrameEnds;
    use sonde_wire::MacAddr;

    fn request() -> Vec<u8> {
        let ends = FrameEnds {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: "198.19.255.1:40000".parse().unwrap(),
            dst: "198.19.255.254:7007".parse().unwrap(),
        };
        crate::link::tests_support::frame_for(&ends, 64, 5)
    }

    #[test]
    fn an_echo_swaps_the_ends_and_keeps_every_checksum_valid() {
        let req = request();
        let m = EchoMatch {
            port: 7007,
            addr: Some("198.19.255.254".parse().unwrap()),
        };
        assert!(is_echo_request(&req, &m));
        let mut buf = [0u8; 1514];
        let n = echo_into(&req, &mut buf);
        let echo = &buf[..n];
        let eth = ethernet::Frame::new_checked(echo).unwrap();
        assert_eq!(eth.src_addr(), MacAddr([2, 0, 0, 0, 0, 2]));
        assert_eq!(eth.dst_addr(), MacAddr([2, 0, 0, 0, 0, 1]));
        let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.src_addr(), "198.19.255.254".parse::<Ipv4Addr>().unwrap());
        let d = udp::Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((d.src_port(), d.dst_port()), (7007, 40000));
        assert!(d.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        let stamp = crate::Stamp::read(d.payload()).unwrap();
        assert_eq!(stamp.seq, 5);
    }

    #[test]
    fn an_unfinished_checksum_is_finished_in_the_echo() {
        let mut req = request();
        let l4_at = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
        // What CHECKSUM_PARTIAL leaves: anything but the right sum.
        req[l4_at + 6..l4_at + 8].copy_from_slice(&[0x12, 0x34]);
        let mut buf = [0u8; 1514];
        let n = echo_into(&req, &mut buf);
        let ip = ipv4::Packet::new_checked(&buf[ethernet::HEADER_LEN..n]).unwrap();
        let d = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(d.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
    }

    #[test]
    fn other_frames_are_not_echoed_and_no_truncation_panics() {
        let req = request();
        let wrong_port = EchoMatch {
            port: 7,
            addr: None,
        };
        let wrong_addr = EchoMatch {
            port: 7007,
            addr: Some("198.18.0.1".parse().unwrap()),
        };
        assert!(!is_echo_request(&req, &wrong_port));
        assert!(!is_echo_request(&req, &wrong_addr));
        let any = EchoMatch {
            port: 7007,
            addr: None,
        };
        // Every truncation is refused (the UDP length no longer fits), none panics.
        for len in 0..req.len() {
            assert!(!is_echo_request(&req[..len], &any), "length {len}");
        }
    }
}
