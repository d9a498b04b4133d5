//! A fast in-memory server for the large tests and the benchmark: it answers each SYN it reads
//! with a SYN-ACK, and can write reply segments, all built with `sonde-wire`.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sonde_craft::cookie::Validator;
use sonde_tcp::{App, Config};
use sonde_wire::{ethernet, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol};
use sonde_wire::{MacAddr, TcpFlags};

pub const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
pub const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
pub const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
pub const SERVER_ISS: u32 = 0x5000_0000;

pub fn config(max_outstanding: usize) -> Config {
    let mut cfg = Config::new(OUR_MAC, GW_MAC, Validator::from_seed(7));
    cfg.src_ip = Some(OUR_IP);
    cfg.src_ip6 = Some(OUR_IP6);
    cfg.max_outstanding = max_outstanding;
    cfg
}

/// The i-th lab target: the 131,072 addresses of 198.18.0.0/15 times ports from 1000 (IPv4),
/// or an address of 2001:2::/48 (IPv6).
pub fn target(i: u64, v6: bool) -> (IpAddr, u16) {
    if v6 {
        let addr = Ipv6Addr::new(0x2001, 2, 0, 1, 0, 0, (i >> 16) as u16, i as u16);
        (IpAddr::V6(addr), 443)
    } else {
        let addr = Ipv4Addr::from(0xc612_0000 + (i % 131_072) as u32);
        (IpAddr::V4(addr), 1000 + (i / 131_072) as u16)
    }
}

/// A small HTTP-like app: complete when the reply ends with a blank line.
pub struct Http;

pub const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n";

impl App for Http {
    fn write_request(&self, buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        buf[..REQUEST.len()].copy_from_slice(REQUEST);
        REQUEST.len()
    }

    fn max_request_len(&self) -> usize {
        REQUEST.len()
    }

    fn is_complete(&self, received: &[u8]) -> bool {
        received.ends_with(b"\r\n\r\n")
    }
}

/// What the server keeps of a SYN to answer it.
#[derive(Clone, Copy, Debug)]
pub struct Syn {
    pub client: IpAddr,
    pub addr: IpAddr,
    pub port: u16,
    pub client_port: u16,
    pub client_iss: u32,
    pub client_tsval: u32,
}

/// Reads a frame the engine wrote, if it is a SYN.
pub fn read_syn(frame: &[u8]) -> Option<Syn> {
    let (client, addr, segment) = l4(frame)?;
    let packet = tcp::Packet::new_checked(segment).ok()?;
    if packet.flags() != TcpFlags::SYN {
        return None;
    }
    let tsval = packet.iter_options().find_map(|o| match o {
        Ok(sonde_wire::TcpOption::Timestamps { tsval, .. }) => Some(tsval),
        _ => None,
    });
    Some(Syn {
        client,
        addr,
        port: packet.dst_port(),
        client_port: packet.src_port(),
        client_iss: packet.seq_number(),
        client_tsval: tsval.unwrap_or(0),
    })
}

/// The source, destination and TCP segment of an IPv4 or IPv6 frame.
pub fn l4(frame: &[u8]) -> Option<(IpAddr, IpAddr, &[u8])> {
    let eth = ethernet::Frame::new_checked(frame).ok()?;
    match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(&frame[14..]).ok()?;
            let seg = &frame[14 + ip.header_len()..14 + usize::from(ip.total_len())];
            Some((ip.src_addr().into(), ip.dst_addr().into(), seg))
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(&frame[14..]).ok()?;
            let seg = &frame[54..54 + usize::from(ip.payload_len())];
            Some((ip.src_addr().into(), ip.dst_addr().into(), seg))
        }
        _ => None,
    }
}

/// A TCP segment of the frame, parsed (checksum verified).
pub fn read_tcp(frame: &[u8]) -> (tcp::Repr, Vec<u8>) {
    let (src, dst, seg) = l4(frame).expect("an IP frame");
    let ips = match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpPair::V4 { src, dst },
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpPair::V6 { src, dst },
        _ => unreachable!(),
    };
    let packet = tcp::Packet::new_checked(seg).unwrap();
    let repr = tcp::Repr::parse(&packet, &ips, ChecksumMode::Verify).expect("checksum");
    (repr, packet.payload().to_vec())
}

/// The server's SYN-ACK to `syn` (MSS, SACK-permitted, timestamps, window scale 7).
pub fn write_synack(buf: &mut [u8], syn: &Syn) -> usize {
    let tcp = tcp::Repr {
        src_port: syn.port,
        dst_port: syn.client_port,
        seq_number: SERVER_ISS,
        ack_number: Some(syn.client_iss.wrapping_add(1)),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window_len: 0xffff,
        window_scale: Some(7),
        max_seg_size: Some(1460),
        sack_permitted: true,
        sack_ranges: [None; 3],
        timestamp: Some((1, syn.client_tsval)),
        payload_len: 0,
    };
    write_frame(buf, syn, &tcp, &[])
}

/// A server segment `off` bytes into the reply, acknowledging `acked` request bytes.
pub fn write_segment(
    buf: &mut [u8],
    syn: &Syn,
    flags: TcpFlags,
    off: u32,
    acked: u32,
    payload: &[u8],
) -> usize {
    let tcp = tcp::Repr {
        src_port: syn.port,
        dst_port: syn.client_port,
        seq_number: SERVER_ISS.wrapping_add(1).wrapping_add(off),
        ack_number: Some(syn.client_iss.wrapping_add(1).wrapping_add(acked)),
        flags,
        window_len: 0xffff,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: Some((2, syn.client_tsval)),
        payload_len: payload.len(),
    };
    write_frame(buf, syn, &tcp, payload)
}

fn write_frame(buf: &mut [u8], syn: &Syn, tcp: &tcp::Repr, payload: &[u8]) -> usize {
    let tcp_len = tcp.buffer_len();
    let l4 = if syn.addr.is_ipv4() { 34 } else { 54 };
    let frame = &mut buf[..l4 + tcp_len];
    ethernet::Repr {
        src_addr: GW_MAC,
        dst_addr: OUR_MAC,
        ethertype: if syn.addr.is_ipv4() {
            EtherType::Ipv4
        } else {
            EtherType::Ipv6
        },
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut *frame));
    frame[l4 + tcp.header_len()..].copy_from_slice(payload);
    let ips = match (syn.addr, syn.client) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            ipv4::Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: IpProtocol::TCP,
                payload_len: tcp_len,
                ttl: 64,
                ident: 0,
                dont_frag: true,
            }
            .emit(&mut ipv4::Packet::new_unchecked(&mut frame[14..]));
            IpPair::V4 { src, dst }
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            ipv6::Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::TCP,
                payload_len: tcp_len,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut frame[14..]));
            IpPair::V6 { src, dst }
        }
        _ => unreachable!(),
    };
    tcp.emit(&mut tcp::Packet::new_unchecked(&mut frame[l4..]), &ips);
    l4 + tcp_len
}

/// Peak resident memory of this process (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
