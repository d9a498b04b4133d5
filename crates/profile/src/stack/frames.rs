//! The frames sonde's own path sends for one payload: a UDP datagram cut into IPv4 fragments
//! (as the kernel cuts one above the MTU), or TCP segments of one MSS each (as the kernel's TCP
//! sends them with segmentation offloads off). Written straight into the transmit ring's
//! buffers by [`Burst::write_frame`], so the cost measured is sonde's: headers, checksum and
//! one copy of the payload.

use std::net::Ipv4Addr;

use sonde_wire::checksum::{fold, pseudo_header_v4, sum};
use sonde_wire::{ethernet, ipv4, tcp, udp, EtherType, IpProtocol, MacAddr, TcpFlags};

use super::Proto;

/// IPv4 payload bytes per frame: a 1500-byte MTU less the IPv4 header, a multiple of 8 as
/// fragment offsets need.
pub const IP_PAYLOAD_PER_FRAME: usize = 1480;
/// TCP payload per segment: a 1500-byte MTU less the IPv4 and TCP headers.
pub const MSS: usize = 1460;

const HEADERS: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN;

/// Addresses and ports of the frames.
#[derive(Clone, Copy, Debug)]
pub struct Endpoints {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// One payload as frames: built on the fly, frame by frame.
pub struct Burst<'a> {
    ends: Endpoints,
    proto: Proto,
    payload: &'a [u8],
    /// IPv4 identification (UDP fragments share one) or the first TCP sequence number.
    id: u32,
    /// The UDP checksum of the whole datagram (it sits in the first fragment).
    udp_checksum: u16,
}

impl<'a> Burst<'a> {
    /// The frames of `payload` sent as `proto`; `id` tells this burst from the last one.
    /// For UDP this sums the whole payload once (the datagram's checksum).
    pub fn new(ends: Endpoints, proto: Proto, payload: &'a [u8], id: u32) -> Burst<'a> {
        let udp_checksum = match proto {
            Proto::Udp => datagram_checksum(&ends, payload),
            Proto::Tcp => 0,
        };
        Burst {
            ends,
            proto,
            payload,
            id,
            udp_checksum,
        }
    }

    /// How many frames the payload takes.
    pub fn frames(&self) -> usize {
        frames_for(self.proto, self.payload.len())
    }

    /// Writes frame `k` into `buf` (at least 1514 bytes) and returns its length.
    pub fn write_frame(&self, k: usize, buf: &mut [u8]) -> usize {
        let mut eth = ethernet::Frame::new_unchecked(&mut *buf);
        eth.set_dst_addr(self.ends.dst_mac);
        eth.set_src_addr(self.ends.src_mac);
        eth.set_ethertype(EtherType::Ipv4);
        let ip_payload = match self.proto {
            Proto::Udp => self.write_fragment(k, &mut buf[HEADERS..]),
            Proto::Tcp => self.write_segment(k, &mut buf[HEADERS..]),
        };
        let mut ip = ipv4::Packet::new_unchecked(&mut buf[ethernet::HEADER_LEN..]);
        ip.set_version(4);
        ip.set_header_len(ipv4::HEADER_LEN);
        ip.set_dscp(0);
        ip.set_ecn(0);
        ip.set_total_len((ipv4::HEADER_LEN + ip_payload) as u16);
        ip.set_ttl(64);
        ip.set_src_addr(self.ends.src_ip);
        ip.set_dst_addr(self.ends.dst_ip);
        match self.proto {
            Proto::Udp => {
                ip.set_protocol(IpProtocol::UDP);
                ip.set_ident(self.id as u16);
                ip.set_dont_frag(false);
                ip.set_more_frags(k + 1 < self.frames());
                ip.set_frag_offset((k * IP_PAYLOAD_PER_FRAME) as u16);
            }
            Proto::Tcp => {
                ip.set_protocol(IpProtocol::TCP);
                ip.set_ident((self.id as u16).wrapping_add(k as u16));
                ip.set_more_frags(false);
                ip.set_frag_offset(0);
                ip.set_dont_frag(true);
            }
        }
        ip.fill_checksum();
        HEADERS + ip_payload
    }

    /// Fragment `k` of the UDP datagram (header + payload) into `out`; its length.
    fn write_fragment(&self, k: usize, out: &mut [u8]) -> usize {
        let datagram_len = udp::HEADER_LEN + self.payload.len();
        let start = k * IP_PAYLOAD_PER_FRAME;
        let end = (start + IP_PAYLOAD_PER_FRAME).min(datagram_len);
        if k == 0 {
            let mut header = udp::Packet::new_unchecked(&mut out[..udp::HEADER_LEN]);
            header.set_src_port(self.ends.src_port);
            header.set_dst_port(self.ends.dst_port);
            header.set_len(datagram_len as u16);
            header.set_checksum(self.udp_checksum);
            let body = end - udp::HEADER_LEN;
            out[udp::HEADER_LEN..end].copy_from_slice(&self.payload[..body]);
        } else {
            let from = start - udp::HEADER_LEN;
            out[..end - start].copy_from_slice(&self.payload[from..end - udp::HEADER_LEN]);
        }
        end - start
    }

    /// Segment `k` (TCP header + one MSS of payload at most) into `out`; its length.
    fn write_segment(&self, k: usize, out: &mut [u8]) -> usize {
        let start = k * MSS;
        let chunk = &self.payload[start..(start + MSS).min(self.payload.len())];
        let len = tcp::HEADER_LEN + chunk.len();
        let mut segment = tcp::Packet::new_unchecked(&mut out[..len]);
        segment.set_src_port(self.ends.src_port);
        segment.set_dst_port(self.ends.dst_port);
        segment.set_seq_number(self.id.wrapping_add(start as u32));
        segment.set_ack_number(1);
        segment.set_header_len(tcp::HEADER_LEN);
        segment.set_flags(TcpFlags(TcpFlags::ACK.0 | TcpFlags::PSH.0));
        segment.set_window_len(65535);
        segment.set_urgent_at(0);
        segment.payload_mut().copy_from_slice(chunk);
        segment.fill_checksum_v4(self.ends.src_ip, self.ends.dst_ip);
        len
    }
}

/// Frames a payload of `len` bytes takes as `proto` on a 1500-byte MTU (at least one).
pub fn frames_for(proto: Proto, len: usize) -> usize {
    match proto {
        Proto::Udp => (udp::HEADER_LEN + len).div_ceil(IP_PAYLOAD_PER_FRAME),
        Proto::Tcp => len.div_ceil(MSS).max(1),
    }
}

/// The UDP checksum of a datagram carrying `payload` (0 is sent as 0xffff, RFC 768).
fn datagram_checksum(ends: &Endpoints, payload: &[u8]) -> u16 {
    let len = (udp::HEADER_LEN + payload.len()) as u16;
    let header = [
        ends.src_port.to_be_bytes(),
        ends.dst_port.to_be_bytes(),
        len.to_be_bytes(),
    ];
    let partial = pseudo_header_v4(ends.src_ip, ends.dst_ip, IpProtocol::UDP.0, len)
        + sum(header.as_flattened())
        + sum(payload);
    match !fold(partial) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The scanner's side to the lab's discard port: the ends every frame test uses.
    pub(crate) fn ends() -> Endpoints {
        Endpoints {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: Ipv4Addr::new(198, 19, 255, 1),
            dst_ip: Ipv4Addr::new(198, 19, 255, 254),
            src_port: 61999,
            dst_port: 9,
        }
    }

    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    fn frames(burst: &Burst) -> Vec<Vec<u8>> {
        (0..burst.frames())
            .map(|k| {
                let mut buf = vec![0u8; sonde_io::MAX_FRAME];
                let len = burst.write_frame(k, &mut buf);
                assert!(len <= sonde_io::MAX_FRAME, "frame {k} is {len} bytes");
                buf.truncate(len);
                buf
            })
            .collect()
    }

    #[test]
    fn udp_fragments_reassemble_into_a_valid_datagram() {
        for len in [1, 64, 1472, 1473, 4000, 65507] {
            let data = payload(len);
            let burst = Burst::new(ends(), Proto::Udp, &data, 77);
            let mut datagram = Vec::new();
            let all = frames(&burst);
            assert_eq!(all.len(), frames_for(Proto::Udp, len));
            for (k, frame) in all.iter().enumerate() {
                let ip = ipv4::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).unwrap();
                assert!(ip.verify_checksum(), "len {len} fragment {k}");
                assert_eq!(ip.ident(), 77);
                assert_eq!(ip.more_frags(), k + 1 < all.len());
                assert_eq!(ip.frag_offset() as usize, datagram.len(), "len {len}");
                datagram.extend_from_slice(ip.payload());
            }
            let udp = udp::Packet::new_checked(&datagram[..]).unwrap();
            assert_eq!(udp.payload(), &data[..], "len {len}");
            assert!(
                udp.verify_checksum_v4(ends().src_ip, ends().dst_ip),
                "len {len}"
            );
        }
    }

    #[test]
    fn tcp_segments_carry_the_payload_in_sequence() {
        for len in [1, 1460, 1461, 65536] {
            let data = payload(len);
            let burst = Burst::new(ends(), Proto::Tcp, &data, 1000);
            let mut stream = Vec::new();
            for frame in frames(&burst) {
                let ip = ipv4::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).unwrap();
                assert!(ip.verify_checksum() && ip.dont_frag());
                let segment = tcp::Packet::new_checked(ip.payload()).unwrap();
                assert!(segment.verify_checksum_v4(ends().src_ip, ends().dst_ip));
                assert_eq!(segment.seq_number(), 1000 + stream.len() as u32);
                stream.extend_from_slice(segment.payload());
            }
            assert_eq!(stream, data, "len {len}");
        }
    }
}
