//! Frame templates: a probe frame is built once with the `wire` formats, and each frame after
//! that is a copy of it with the destination address and port patched in and both checksums
//! finished from partial sums computed up front (the idea of RFC 1624's incremental update:
//! only the changed 16-bit words are added).
//!
//! Takes addresses, ports and a probe's fixed fields; gives ready frames written into the caller's
//! buffers. Uses sonde-wire (the formats and checksums) and nothing else.
//!
//! Per frame that is one short copy, a few stores and a handful of adds — no parsing, no
//! allocation, no branch on the frame's contents. [`Patcher`] is the general form (any set of
//! changing words); [`Template`] is blast's use of it.
#![forbid(unsafe_code)]

pub mod cookie;

use std::fmt;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::str::FromStr;

use sonde_wire::checksum::{fold, pseudo_header_v4, sum};
use sonde_wire::{ethernet, ipv4, tcp, udp, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags};

/// Smallest and largest frame (without FCS) a template builds.
pub const MIN_FRAME: usize = 60;
pub const MAX_FRAME: usize = 1514;

const IP_AT: usize = ethernet::HEADER_LEN;
const L4_AT: usize = IP_AT + ipv4::HEADER_LEN;
const IP_CHECKSUM: Range<usize> = IP_AT + 10..IP_AT + 12;
const IP_DST: Range<usize> = IP_AT + 16..IP_AT + 20;
const L4_DST_PORT: Range<usize> = L4_AT + 2..L4_AT + 4;
const TCP_CHECKSUM_AT: usize = L4_AT + 16;
const UDP_CHECKSUM_AT: usize = L4_AT + 6;

/// One 16-bit word that changes per frame, and which checksums cover it.
#[derive(Clone, Copy, Debug)]
pub struct Word {
    /// Offset of the word in the frame.
    pub at: usize,
    pub value: u16,
    /// Covered by the IPv4 header checksum.
    pub in_ip: bool,
    /// Covered by the transport (or ICMP) checksum.
    pub in_l4: bool,
}

impl Word {
    /// A word of the IPv4 destination address: in both checksums (TCP/UDP via the pseudo-header).
    pub const fn addr(at: usize, value: u16) -> Word {
        Word {
            at,
            value,
            in_ip: true,
            in_l4: true,
        }
    }
    /// A word of the transport header or payload.
    pub const fn l4(at: usize, value: u16) -> Word {
        Word {
            at,
            value,
            in_ip: false,
            in_l4: true,
        }
    }
}

/// A frame built once with its varying words and checksums zeroed, and the partial sums of the
/// rest: per frame, copy it, store the words and add them to the sums — the incremental
/// update of RFC 1624 applied to every changing word at once.
#[derive(Clone, Debug)]
pub struct Patcher {
    frame: Vec<u8>,
    ip_checksum_at: Option<usize>,
    ip_sum: u32,
    l4_checksum_at: usize,
    l4_sum: u32,
    zero_as_ones: bool,
}

impl Patcher {
    /// `frame` must hold zeros in every varying word and in both checksum fields. `ip_header` is
    /// the IPv4 header's range (None for IPv6), `l4` the range the transport checksum covers and
    /// `pseudo` the pseudo-header's sum (0 for ICMPv4). `zero_as_ones` for UDP.
    pub fn new(
        frame: Vec<u8>,
        ip_header: Option<Range<usize>>,
        l4: Range<usize>,
        l4_checksum_at: usize,
        pseudo: u32,
        zero_as_ones: bool,
    ) -> Patcher {
        let ip_sum = ip_header.as_ref().map_or(0, |r| sum(&frame[r.clone()]));
        let l4_sum = pseudo + sum(&frame[l4]);
        let ip_checksum_at = ip_header.map(|r| r.start + 10);
        Patcher {
            frame,
            ip_checksum_at,
            ip_sum,
            l4_checksum_at,
            l4_sum,
            zero_as_ones,
        }
    }

    pub fn frame_len(&self) -> usize {
        self.frame.len()
    }

    /// Writes the frame with `words` patched in and both checksums finished; returns its length.
    ///
    /// # Panics
    /// If `buf` is shorter than the frame (backend buffers hold [`MAX_FRAME`] bytes).
    #[inline]
    pub fn write(&self, buf: &mut [u8], words: &[Word]) -> usize {
        let len = self.patch(buf, words);
        self.finish_checksums(buf, words);
        len
    }

    /// The first half of [`Patcher::write`]: copies the frame into `buf` and stores `words`,
    /// leaving the checksums as they are. Apart so that `sonde profile` can time the halves.
    #[inline]
    pub fn patch(&self, buf: &mut [u8], words: &[Word]) -> usize {
        let len = self.frame.len();
        let out = &mut buf[..len];
        out.copy_from_slice(&self.frame);
        for w in words {
            out[w.at..w.at + 2].copy_from_slice(&w.value.to_be_bytes());
        }
        len
    }

    /// The second half of [`Patcher::write`]: adds `words` to the partial sums and stores both
    /// checksums into the frame [`Patcher::patch`] wrote.
    #[inline]
    pub fn finish_checksums(&self, buf: &mut [u8], words: &[Word]) {
        let out = &mut buf[..self.frame.len()];
        let (mut ip, mut l4) = (self.ip_sum, self.l4_sum);
        for w in words {
            ip += u32::from(w.value) * u32::from(w.in_ip);
            l4 += u32::from(w.value) * u32::from(w.in_l4);
        }
        if let Some(at) = self.ip_checksum_at {
            out[at..at + 2].copy_from_slice(&(!fold(ip)).to_be_bytes());
        }
        let mut l4 = !fold(l4);
        if l4 == 0 && self.zero_as_ones {
            l4 = 0xffff;
        }
        out[self.l4_checksum_at..self.l4_checksum_at + 2].copy_from_slice(&l4.to_be_bytes());
    }
}

/// What the template carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    TcpSyn,
    Udp,
}

impl FromStr for ProbeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "syn" | "tcp" | "tcp_syn" => Ok(ProbeKind::TcpSyn),
            "udp" => Ok(ProbeKind::Udp),
            _ => Err(format!("unknown frame template \"{s}\": choose syn or udp")),
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::TcpSyn => "syn",
            ProbeKind::Udp => "udp",
        })
    }
}

/// The fixed parts of every frame.
#[derive(Clone, Copy, Debug)]
pub struct TemplateSpec {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub src_port: u16,
    pub kind: ProbeKind,
    /// Frame length without FCS; bytes past the headers are a zero payload.
    pub frame_size: usize,
}

/// The blast frame: a TCP SYN or UDP datagram whose destination address and port change per
/// frame.
#[derive(Clone, Debug)]
pub struct Template {
    patcher: Patcher,
}

impl Template {
    pub fn new(spec: &TemplateSpec) -> Result<Template, String> {
        if !(MIN_FRAME..=MAX_FRAME).contains(&spec.frame_size) {
            return Err(format!(
                "frame size {} is outside {MIN_FRAME}..={MAX_FRAME}",
                spec.frame_size
            ));
        }
        let mut frame = vec![0u8; spec.frame_size];
        let (protocol, l4_checksum_at) = match spec.kind {
            ProbeKind::TcpSyn => (IpProtocol::TCP, TCP_CHECKSUM_AT),
            ProbeKind::Udp => (IpProtocol::UDP, UDP_CHECKSUM_AT),
        };
        let l4_len = spec.frame_size - L4_AT;
        emit_headers(&mut frame, spec, protocol, l4_len);
        frame[IP_CHECKSUM].fill(0);
        frame[l4_checksum_at..l4_checksum_at + 2].fill(0);
        let pseudo = pseudo_header_v4(
            spec.src_ip,
            Ipv4Addr::UNSPECIFIED,
            protocol.0,
            l4_len as u16,
        );
        let patcher = Patcher::new(
            frame,
            Some(IP_AT..L4_AT),
            L4_AT..spec.frame_size,
            l4_checksum_at,
            pseudo,
            spec.kind == ProbeKind::Udp,
        );
        Ok(Template { patcher })
    }

    /// Length of every frame this template writes.
    pub fn frame_len(&self) -> usize {
        self.patcher.frame_len()
    }

    /// Writes the frame for (`dst`, `port`) into `buf` and returns its length.
    #[inline]
    pub fn write(&self, buf: &mut [u8], dst: Ipv4Addr, port: u16) -> usize {
        let [a, b, c, d] = dst.octets();
        self.patcher.write(
            buf,
            &[
                Word::addr(IP_DST.start, u16::from_be_bytes([a, b])),
                Word::addr(IP_DST.start + 2, u16::from_be_bytes([c, d])),
                Word::l4(L4_DST_PORT.start, port),
            ],
        )
    }
}

/// Builds Ethernet + IPv4 + TCP SYN/UDP headers (destination 0.0.0.0 port 0) with the wire reprs.
fn emit_headers(frame: &mut [u8], spec: &TemplateSpec, protocol: IpProtocol, l4_len: usize) {
    let eth = ethernet::Repr {
        src_addr: spec.src_mac,
        dst_addr: spec.dst_mac,
        ethertype: EtherType::Ipv4,
    };
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
    let ip = ipv4::Repr {
        src_addr: spec.src_ip,
        dst_addr: Ipv4Addr::UNSPECIFIED,
        protocol,
        payload_len: l4_len,
        ttl: 64,
        ident: 0x5d0e,
        dont_frag: false,
    };
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut frame[IP_AT..]));
    let ips = IpPair::V4 {
        src: spec.src_ip,
        dst: Ipv4Addr::UNSPECIFIED,
    };
    match spec.kind {
        ProbeKind::TcpSyn => {
            let syn = tcp::Repr {
                src_port: spec.src_port,
                dst_port: 0,
                seq_number: 0x5d0e_0001,
                ack_number: None,
                flags: TcpFlags::SYN,
                window_len: 65535,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: None,
                payload_len: l4_len - tcp::HEADER_LEN,
            };
            syn.emit(&mut tcp::Packet::new_unchecked(&mut frame[L4_AT..]), &ips);
        }
        ProbeKind::Udp => {
            let dgram = udp::Repr {
                src_port: spec.src_port,
                dst_port: 0,
                payload_len: l4_len - udp::HEADER_LEN,
            };
            dgram.emit(&mut udp::Packet::new_unchecked(&mut frame[L4_AT..]), &ips);
        }
    }
}

/// Walks (address × port) over a prefix: the address changes every frame, the port after each
/// full pass over the addresses, so consecutive frames go to different hosts.
#[derive(Clone, Debug)]
pub struct Targets {
    base: u32,
    addresses: u64,
    ports: Vec<u16>,
    next_addr: u64,
    next_port: usize,
}

impl Targets {
    pub fn new(network: Ipv4Addr, prefix_len: u8, ports: &[u16]) -> Result<Targets, String> {
        if prefix_len > 32 {
            return Err(format!("prefix length /{prefix_len} is longer than 32"));
        }
        if ports.is_empty() {
            return Err("no destination ports given".into());
        }
        let addresses = 1u64 << (32 - prefix_len);
        let base = u32::from(network) & (u64::from(u32::MAX) << (32 - prefix_len)) as u32;
        Ok(Targets {
            base,
            addresses,
            ports: ports.to_vec(),
            next_addr: 0,
            next_port: 0,
        })
    }

    /// Thread `t` of `n` starts its walk at its own slice of the address space.
    pub fn split(&self, t: usize, n: usize) -> Targets {
        let mut part = self.clone();
        part.next_addr = self.addresses * t as u64 / n.max(1) as u64;
        part
    }

    #[inline]
    pub fn next_target(&mut self) -> (Ipv4Addr, u16) {
        let addr = Ipv4Addr::from(self.base.wrapping_add(self.next_addr as u32));
        let port = self.ports[self.next_port];
        self.next_addr += 1;
        if self.next_addr == self.addresses {
            self.next_addr = 0;
            self.next_port = (self.next_port + 1) % self.ports.len();
        }
        (addr, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: ProbeKind, frame_size: usize) -> TemplateSpec {
        TemplateSpec {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip: Ipv4Addr::new(198, 19, 255, 1),
            src_port: 40000,
            kind,
            frame_size,
        }
    }

    /// Every patched frame must parse and carry checksums equal to a full recomputation.
    fn check_frame(frame: &[u8], dst: Ipv4Addr, port: u16, kind: ProbeKind) {
        let eth = ethernet::Frame::new_checked(frame).unwrap();
        let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum(), "IPv4 checksum for {dst}");
        assert_eq!(ip.dst_addr(), dst);
        let ips = IpPair::V4 {
            src: ip.src_addr(),
            dst,
        };
        match kind {
            ProbeKind::TcpSyn => {
                let seg = tcp::Packet::new_checked(ip.payload()).unwrap();
                assert!(seg.verify_checksum(&ips), "TCP checksum for {dst}:{port}");
                assert_eq!(seg.dst_port(), port);
                assert_eq!(seg.flags(), TcpFlags::SYN);
            }
            ProbeKind::Udp => {
                let dgram = udp::Packet::new_checked(ip.payload()).unwrap();
                assert!(dgram.verify_checksum(&ips), "UDP checksum for {dst}:{port}");
                assert_eq!(dgram.dst_port(), port);
            }
        }
    }

    #[test]
    fn patched_frames_have_correct_checksums() {
        for kind in [ProbeKind::TcpSyn, ProbeKind::Udp] {
            for size in [60, 61, 128, 1514] {
                let t = Template::new(&spec(kind, size)).unwrap();
                let mut buf = [0u8; MAX_FRAME];
                let mut targets =
                    Targets::new(Ipv4Addr::new(198, 18, 0, 0), 15, &[0, 80, 443, 65535]).unwrap();
                for i in 0..5000u32 {
                    let (dst, port) = if i % 7 == 0 {
                        (
                            Ipv4Addr::from(0xC612_0000 | i.wrapping_mul(2_654_435_761) & 0x1ffff),
                            (i * 40503) as u16,
                        )
                    } else {
                        targets.next_target()
                    };
                    assert_eq!(t.write(&mut buf, dst, port), size);
                    check_frame(&buf[..size], dst, port, kind);
                }
            }
        }
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert!(Template::new(&spec(ProbeKind::TcpSyn, 59))
            .unwrap_err()
            .contains("59"));
        assert!(Template::new(&spec(ProbeKind::Udp, 1515)).is_err());
    }

    #[test]
    fn targets_walk_addresses_then_ports() {
        let mut t = Targets::new(Ipv4Addr::new(198, 18, 0, 7), 30, &[80, 443]).unwrap();
        let seen: Vec<_> = (0..9).map(|_| t.next_target()).collect();
        let a = |d| Ipv4Addr::new(198, 18, 0, d);
        assert_eq!(
            &seen[..5],
            &[(a(4), 80), (a(5), 80), (a(6), 80), (a(7), 80), (a(4), 443)]
        );
        assert_eq!(seen[8], (a(4), 80));
        assert_eq!(t.split(1, 2).next_target(), (a(6), 80));
        assert!(Targets::new(Ipv4Addr::new(198, 18, 0, 0), 16, &[]).is_err());
    }
}
