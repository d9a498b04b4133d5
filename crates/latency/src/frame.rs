//! The frames of a latency run on sonde's frame path, with no I/O: the client's message frame
//! (a template the client patches per message), how the client recognises an echo, and how a
//! reflector recognises a request and turns it into its echo. All parsing goes through
//! `sonde-wire`'s checked views, so no input can make it panic (`fuzz/` has a target).

use std::net::{Ipv4Addr, SocketAddrV4};

use sonde_craft::{Patcher, Word};
use sonde_wire::checksum::pseudo_header_v4;
use sonde_wire::{ethernet, ipv4, udp, EtherType, IpPair, IpProtocol, MacAddr};

use crate::message::{Stamp, HEADER_LEN, MAGIC, RUN_AT};

/// Addresses of a frame-level client.
#[derive(Clone, Copy, Debug)]
pub struct FrameEnds {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
}

/// Which datagrams the frame reflector echoes.
#[derive(Clone, Copy, Debug)]
pub struct EchoMatch {
    pub port: u16,
    /// Only datagrams to this address (None: to any).
    pub addr: Option<Ipv4Addr>,
}

/// The message of an echo from the reflector at `ends.dst` to us; None for any other frame.
pub fn echo_of(ends: &FrameEnds, frame: &[u8]) -> Option<Stamp> {
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

/// The client's message frame: built once, then per message a copy with the message header
/// patched in and both checksums finished from partial sums (craft's [`Patcher`]).
#[derive(Clone, Debug)]
pub struct MessageFrame {
    patcher: Patcher,
    payload_at: usize,
}

impl MessageFrame {
    /// For `size`-byte payloads (at least [`HEADER_LEN`]) from `ends.src` to `ends.dst`.
    pub fn new(ends: &FrameEnds, size: usize) -> MessageFrame {
        let (frame, payload_at) = echo_template(ends, size.max(HEADER_LEN));
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
        MessageFrame {
            patcher,
            payload_at,
        }
    }

    /// Writes the frame of message (`run`, `seq`, `sent_ns`) into `buf`; returns its length.
    #[inline]
    pub fn write(&self, buf: &mut [u8], run: u32, seq: u64, sent_ns: u64) -> usize {
        let at = self.payload_at + RUN_AT;
        let w = |i: usize, v: u64| Word::l4(at + 2 * i, v as u16);
        let words = [
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
        ];
        self.patcher.write(buf, &words)
    }
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
pub(crate) mod tests_support {
    use super::*;

    /// The frame a client would send for message `seq` of run 1, stamped at 99 ns.
    pub(crate) fn frame_for(ends: &FrameEnds, size: usize, seq: u64) -> Vec<u8> {
        let message = MessageFrame::new(ends, size);
        let mut buf = vec![0u8; 1514];
        let n = message.write(&mut buf, 1, seq, 99);
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
        let n = echo_into(&f, &mut echo);
        assert_eq!(echo_of(&ends, &echo[..n]), Some(stamp));
        for len in 0..n {
            assert_eq!(echo_of(&ends, &echo[..len]), None, "length {len}");
        }
    }

    fn request() -> Vec<u8> {
        let ends = FrameEnds {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src: "198.19.255.1:40000".parse().unwrap(),
            dst: "198.19.255.254:7007".parse().unwrap(),
        };
        frame_for(&ends, 64, 5)
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
