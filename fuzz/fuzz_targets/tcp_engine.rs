//! The sonde-tcp engine under arbitrary input.
//!
//! The first byte picks the setup (IPv4/IPv6, close mode, request in the ACK, checksum
//! verification, the peer's options, a small `max_bytes`) and the mode:
//! - **frames**: the rest is length-prefixed raw frames fed to an engine that has one
//!   established connection;
//! - **segments**: the rest is a script of segments (flags, sequence and ACK offsets around
//!   the right values, window, timestamp, payload, time step) sent on an established
//!   connection by its server;
//! - **icmp** (setup bit 0x80): the rest is a script of ICMP errors (destination unreachable,
//!   fragmentation needed, Packet Too Big, and others) from a router, quoting a segment of the
//!   connection (or of a SYN, or of someone else) with sequence numbers around the right ones,
//!   an MTU, and quotes cut short, interleaved with the server's ACKs;
//! - **session** (setup bits 0xc0 both): segments as in the segments mode, to a connection of
//!   an app that talks in turns: it sends a flight of bytes first and another after each `?`
//!   it receives (up to the most a session sends), and is complete at a `!`.
//!
//! In the segments modes a segment with no time step is in the same pass as the next one (the
//! queue is written after both), so a connection can end with segments queued for it. After
//! every pass the engine's timers run, and every frame it writes must be a well-formed
//! Ethernet/IP/TCP frame of at most 1514 bytes with correct checksums, exactly as many as
//! `tx_pending` said, whose data is the bytes the connection sends at that offset; outcomes
//! never carry more than `max_bytes`, and a `truncated` one is a `success` of exactly
//! `max_bytes`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use sonde_craft::cookie::Validator;
use sonde_tcp::{App, CloseMode, Config, Engine, Session, Status, MAX_SESSION_SEND};
use sonde_wire::{
    ethernet, icmpv4, icmpv6, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol,
    MacAddr, TcpFlags,
};

const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
const REQUEST: &[u8] = b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n";
const SERVER_ISS: u32 = 0xffff_ff00; // wraps during the reply

/// A session's flights: the first at once, another after each `?` received.
const FLIGHT: usize = 600;

/// The request app, or with `session` one that talks in turns.
struct Http {
    session: bool,
}

impl Http {
    /// The byte the connection sends at offset `off` of its stream.
    fn byte_at(&self, off: usize) -> Option<u8> {
        if self.session {
            (off < MAX_SESSION_SEND).then_some((off % 251) as u8 + 1)
        } else {
            REQUEST.get(off).copied()
        }
    }
}

impl App for Http {
    fn write_request(&self, buf: &mut [u8], _: IpAddr, _: u16) -> usize {
        buf[..REQUEST.len()].copy_from_slice(REQUEST);
        REQUEST.len()
    }
    fn max_request_len(&self) -> usize {
        REQUEST.len()
    }
    fn max_sent_len(&self) -> usize {
        if self.session {
            MAX_SESSION_SEND
        } else {
            REQUEST.len()
        }
    }
    fn is_complete(&self, received: &[u8]) -> bool {
        received.ends_with(b"\r\n\r\n")
    }
    fn open_session(&self, _: IpAddr, _: u16, first: &mut Vec<u8>) -> Option<Box<dyn Session>> {
        if !self.session {
            return None;
        }
        let mut flights = Flights { sent: 0 };
        flights.flight(first);
        Some(Box::new(flights))
    }
}

struct Flights {
    sent: usize,
}

impl Flights {
    fn flight(&mut self, send: &mut Vec<u8>) {
        send.extend((self.sent..self.sent + FLIGHT).map(|off| (off % 251) as u8 + 1));
        self.sent += FLIGHT;
    }
}

impl Session for Flights {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        for &byte in new {
            if byte == b'?' {
                self.flight(send);
            }
        }
        new.contains(&b'!')
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

struct Peer {
    ours: IpAddr,
    addr: IpAddr,
    port: u16,
    client_port: u16,
    client_iss: u32,
    client_tsval: u32,
}

impl Peer {
    fn frame(&self, tcp: &tcp::Repr, payload: &[u8]) -> Vec<u8> {
        let l4 = if self.addr.is_ipv4() { 34 } else { 54 };
        let mut frame = vec![0; l4 + tcp.buffer_len()];
        ethernet::Repr {
            src_addr: GW_MAC,
            dst_addr: OUR_MAC,
            ethertype: if self.addr.is_ipv4() {
                EtherType::Ipv4
            } else {
                EtherType::Ipv6
            },
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
        frame[l4 + tcp.header_len()..].copy_from_slice(payload);
        let ips = match (self.addr, self.ours) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                ipv4::Repr {
                    src_addr: src,
                    dst_addr: dst,
                    protocol: IpProtocol::TCP,
                    payload_len: tcp.buffer_len(),
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
                    payload_len: tcp.buffer_len(),
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
        frame
    }

    fn header(&self, flags: TcpFlags, seq: u32, ack: Option<u32>) -> tcp::Repr {
        tcp::Repr {
            src_port: self.port,
            dst_port: self.client_port,
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: 0xffff,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload_len: 0,
        }
    }
}

impl Peer {
    /// An ICMP error from a router to us of `kind`/`code` with `rest` (an MTU), quoting the
    /// first `quote_len` bytes of an IP header and TCP header from `quoted_src` and
    /// `quoted_port` to the peer, with sequence number `seq`.
    fn icmp(&self, kind: u8, code: u8, rest: u32, quoted: (IpAddr, u16, u32), quote_len: usize) -> Vec<u8> {
        let (quoted_src, quoted_port, seq) = quoted;
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&quoted_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&self.port.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 0x50;
        let mut quote = match (quoted_src, self.addr) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
                let mut ip = vec![0u8; 20];
                ipv4::Repr {
                    src_addr,
                    dst_addr,
                    protocol: IpProtocol::TCP,
                    payload_len: 1420,
                    ttl: 64,
                    ident: 0,
                    dont_frag: true,
                }
                .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
                ip
            }
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
                let mut ip = vec![0u8; 40];
                ipv6::Repr {
                    src_addr,
                    dst_addr,
                    next_header: IpProtocol::TCP,
                    payload_len: 1420,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                }
                .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
                ip
            }
            _ => unreachable!(),
        };
        quote.extend_from_slice(&tcp);
        quote.truncate(quote_len);
        let mut message = vec![kind, code, 0, 0];
        message.extend_from_slice(&rest.to_be_bytes());
        message.extend_from_slice(&quote);
        let mut frame = vec![0u8; 14];
        let ethertype = match (self.router(), self.ours) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
                icmpv4::Packet::new_unchecked(&mut message[..]).fill_checksum();
                let mut ip = vec![0u8; 20];
                ipv4::Repr {
                    src_addr,
                    dst_addr,
                    protocol: IpProtocol::ICMP,
                    payload_len: message.len(),
                    ttl: 64,
                    ident: 0,
                    dont_frag: false,
                }
                .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
                frame.extend_from_slice(&ip);
                EtherType::Ipv4
            }
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
                icmpv6::Packet::new_unchecked(&mut message[..]).fill_checksum(&src_addr, &dst_addr);
                let mut ip = vec![0u8; 40];
                ipv6::Repr {
                    src_addr,
                    dst_addr,
                    next_header: IpProtocol::ICMPV6,
                    payload_len: message.len(),
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                }
                .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
                frame.extend_from_slice(&ip);
                EtherType::Ipv6
            }
            _ => unreachable!(),
        };
        ethernet::Repr {
            src_addr: GW_MAC,
            dst_addr: OUR_MAC,
            ethertype,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
        frame.extend_from_slice(&message);
        frame
    }

    fn router(&self) -> IpAddr {
        if self.addr.is_ipv4() {
            IpAddr::V4(Ipv4Addr::new(198, 19, 255, 254))
        } else {
            IpAddr::V6("2001:2:0:ffff::fe".parse().unwrap())
        }
    }
}

/// Checks every frame the engine has queued; `peer` is the connection's server, whose data
/// segments must carry the bytes the connection sends.
fn flush(engine: &mut Engine<Http>, buf: &mut [u8], now: u64, peer: &Peer) {
    let pending = engine.tx_pending();
    let mut written = 0;
    loop {
        let len = engine.write_tx(buf, now);
        if len == 0 {
            break;
        }
        written += 1;
        assert!(len <= 1514);
        let (seg, payload) = check_frame(&buf[..len]);
        if !payload.is_empty() && seg.dst_port == peer.port && seg.src_port == peer.client_port {
            let off = seg.seq_number.wrapping_sub(peer.client_iss.wrapping_add(1)) as usize;
            for (i, &byte) in payload.iter().enumerate() {
                assert_eq!(Some(byte), engine.app().byte_at(off + i), "byte {} sent", off + i);
            }
        }
    }
    assert_eq!(written, pending, "tx_pending counts the frames");
}

/// The TCP header and payload of a well-formed frame.
fn check_frame(frame: &[u8]) -> (tcp::Repr, Vec<u8>) {
    let eth = ethernet::Frame::new_checked(frame).expect("Ethernet");
    let (ips, segment) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(&frame[14..]).expect("IPv4");
            assert!(ip.verify_checksum());
            let ips = IpPair::V4 {
                src: ip.src_addr(),
                dst: ip.dst_addr(),
            };
            (
                ips,
                &frame[14 + ip.header_len()..14 + usize::from(ip.total_len())],
            )
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(&frame[14..]).expect("IPv6");
            let ips = IpPair::V6 {
                src: ip.src_addr(),
                dst: ip.dst_addr(),
            };
            (ips, &frame[54..54 + usize::from(ip.payload_len())])
        }
        other => panic!("ethertype {other}"),
    };
    let packet = tcp::Packet::new_checked(segment).expect("TCP");
    let repr = tcp::Repr::parse(&packet, &ips, ChecksumMode::Verify).expect("TCP checksum");
    (repr, packet.payload().to_vec())
}

fn drain(engine: &mut Engine<Http>, max_bytes: usize) {
    engine.drain_outcomes(|outcome, bytes| {
        assert_eq!(bytes.len() as u64, outcome.bytes);
        assert!(bytes.len() <= max_bytes);
        assert_eq!(outcome.icmp.is_some(), outcome.status == Status::Unreachable);
        if outcome.truncated {
            assert_eq!((outcome.status, bytes.len()), (Status::Success, max_bytes));
        }
    });
}

fuzz_target!(|data: &[u8]| {
    let Some((&setup, mut rest)) = data.split_first() else {
        return;
    };
    let v6 = setup & 1 != 0;
    let mut cfg = Config::new(OUR_MAC, GW_MAC, Validator::from_seed(3));
    cfg.src_ip = Some(OUR_IP);
    cfg.src_ip6 = Some(OUR_IP6);
    cfg.max_outstanding = 4;
    cfg.close = if setup & 2 != 0 {
        CloseMode::Fin
    } else {
        CloseMode::Rst
    };
    cfg.request_in_ack = setup & 4 != 0;
    cfg.verify_checksums = setup & 8 != 0;
    if setup & 0x20 != 0 {
        cfg.max_bytes = 3000;
        cfg.rx_memory_limit = 5000;
    }
    let max_bytes = cfg.max_bytes;
    let session = setup & 0xc0 == 0xc0;
    let mut engine = Engine::new(cfg, Http { session }).unwrap();
    let mut buf = vec![0u8; 1514];
    let mut now: u64 = 1_000_000;

    // One connection, opened by a valid SYN-ACK with the options the setup byte chose.
    let (ours, addr): (IpAddr, IpAddr) = if v6 {
        (OUR_IP6.into(), "2001:2::80".parse().unwrap())
    } else {
        (OUR_IP.into(), "198.18.0.80".parse().unwrap())
    };
    let len = engine.write_syn(&mut buf, addr, 80, now);
    let syn = tcp::Packet::new_checked(&buf[if v6 { 54 } else { 34 }..len]).unwrap();
    let mut peer = Peer {
        ours,
        addr,
        port: 80,
        client_port: syn.src_port(),
        client_iss: syn.seq_number(),
        client_tsval: 0,
    };
    let options = setup & 0x10 != 0;
    now += 3000;
    let synack = tcp::Repr {
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window_scale: options.then_some(7),
        max_seg_size: options.then_some(536),
        sack_permitted: options,
        timestamp: options.then_some((100, now as u32 - 3000)),
        ..peer.header(
            TcpFlags::SYN | TcpFlags::ACK,
            SERVER_ISS,
            Some(peer.client_iss.wrapping_add(1)),
        )
    };
    engine.on_frame(&peer.frame(&synack, &[]), now);
    flush(&mut engine, &mut buf, now, &peer);
    peer.client_tsval = now as u32;

    if setup & 0x80 != 0 && !session {
        // A second target with only a SYN out (no connection): errors about it are about a SYN.
        let other: IpAddr = if v6 {
            "2001:2::81".parse().unwrap()
        } else {
            "198.18.0.81".parse().unwrap()
        };
        let len = engine.write_syn(&mut buf, other, 80, now);
        let syn = tcp::Packet::new_checked(&buf[if v6 { 54 } else { 34 }..len]).unwrap();
        let syn_only = Peer {
            addr: other,
            client_port: syn.src_port(),
            client_iss: syn.seq_number(),
            ..peer
        };
        // ICMP errors: 8 bytes each (message, code, MTU, sequence offset, quote length and
        // source, ACK offset), each followed by an ACK of the server's.
        while rest.len() >= 8 {
            let r = &rest[..8];
            rest = &rest[8..];
            let kind = [3, 3, 1, 2, 11, 4, r[0]][usize::from(r[0] % 7)];
            let code = if r[1] & 0x80 != 0 { r[1] } else { r[1] % 16 };
            let mtu = u32::from(u16::from_le_bytes([r[2], r[3]])) * 4;
            let seq_off = i32::from(i16::from_le_bytes([r[4], r[5]]));
            let ip_len = if v6 { 40 } else { 20 };
            let quote_len = ip_len + usize::from(r[6] & 0x1f).min(20);
            // Mostly our address and port; sometimes another port, another source, or the
            // target with only a SYN out.
            let about = if r[6] >> 5 == 2 { &syn_only } else { &peer };
            let seq = about.client_iss.wrapping_add(seq_off as u32);
            let quoted = match r[6] >> 5 {
                0 => (ours, peer.client_port.wrapping_add(1), seq),
                1 => (peer.router(), peer.client_port, seq),
                _ => (ours, about.client_port, seq),
            };
            let frame = about.icmp(kind, code, mtu, quoted, quote_len);
            engine.on_frame(&frame, now);
            let acked = peer.client_iss.wrapping_add(1).wrapping_add(u32::from(r[7]) * 8);
            let ack = peer.header(TcpFlags::ACK, SERVER_ISS.wrapping_add(1), Some(acked));
            engine.on_frame(&peer.frame(&ack, &[]), now);
            now += 50_000;
            engine.on_tick(now);
            flush(&mut engine, &mut buf, now, &peer);
            drain(&mut engine, max_bytes);
            assert!(engine.outstanding() <= 4);
        }
    } else if setup & 0x40 != 0 && !session {
        // Raw frames: a 2-byte length, then that many bytes.
        while rest.len() >= 2 {
            let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
            let frame = &rest[2..2 + len];
            rest = &rest[2 + len..];
            engine.on_frame(frame, now);
            now += u64::from(len as u8) * 1000;
            engine.on_tick(now);
            flush(&mut engine, &mut buf, now, &peer);
            drain(&mut engine, max_bytes);
        }
    } else {
        // Scripted segments: 10 bytes of header fields, then the payload.
        let mut tsval = 100u32;
        while rest.len() >= 10 {
            let flags = TcpFlags(rest[0]);
            let seq_off = i32::from(i16::from_le_bytes([rest[1], rest[2]])) * 8;
            let ack_off = i32::from(i8::from_le_bytes([rest[3]]));
            let window = u16::from_le_bytes([rest[4], rest[5]]);
            let ts_step = rest[6] as i8;
            let payload_len = usize::from(rest[7]) * 8;
            let step_ms = u64::from(u16::from_le_bytes([rest[8], rest[9]]));
            rest = &rest[10..];
            let payload = &rest[..payload_len.min(rest.len())];
            rest = &rest[payload.len()..];
            tsval = tsval.wrapping_add(ts_step as u32);
            let seq = SERVER_ISS.wrapping_add(1).wrapping_add(seq_off as u32);
            // Around the end of the request, or of a session's first flight (in steps of 8,
            // which reach the next flights' ends).
            let ack_off = if session { ack_off * 8 } else { ack_off };
            let sent = if session { FLIGHT } else { REQUEST.len() };
            let ack = peer
                .client_iss
                .wrapping_add(1)
                .wrapping_add(sent as u32)
                .wrapping_add(ack_off as u32);
            let tcp = tcp::Repr {
                window_len: window,
                timestamp: options.then_some((tsval, peer.client_tsval)),
                payload_len: payload.len(),
                ..peer.header(flags, seq, flags.contains(TcpFlags::ACK).then_some(ack))
            };
            let frame = peer.frame(&tcp, payload);
            engine.on_frame(&frame, now);
            // No time step: the next segment comes in the same pass.
            if step_ms > 0 {
                now += step_ms * 1000;
                engine.on_tick(now);
                flush(&mut engine, &mut buf, now, &peer);
                drain(&mut engine, max_bytes);
            }
            assert!(engine.outstanding() <= 4);
        }
        flush(&mut engine, &mut buf, now, &peer);
        drain(&mut engine, max_bytes);
    }
    // Everything ends: an hour later every timeout has run, and a minute after that every
    // close (FIN) has timed out too.
    for step in [3_600_000_000, 60_000_000] {
        now += step;
        engine.on_tick(now);
        flush(&mut engine, &mut buf, now, &peer);
        drain(&mut engine, max_bytes);
    }
    assert_eq!(
        engine.outstanding(),
        0,
        "every connection ends by a timeout"
    );
    engine.abort_all(now);
    flush(&mut engine, &mut buf, now, &peer);
    drain(&mut engine, max_bytes);
});
