//! The sonde-tcp engine under arbitrary input.
//!
//! The first byte picks the setup (IPv4/IPv6, close mode, request in the ACK, checksum
//! verification, the peer's options, a small `max_bytes`) and the mode:
//! - **frames**: the rest is length-prefixed raw frames fed to an engine that has one
//!   established connection;
//! - **segments**: the rest is a script of segments (flags, sequence and ACK offsets around
//!   the right values, window, timestamp, payload, time step) sent on an established
//!   connection by its server.
//!
//! After every input the engine's timers run, and every frame it writes must be a well-formed
//! Ethernet/IP/TCP frame of at most 1514 bytes with correct checksums, exactly as many as
//! `tx_pending` said; outcomes never carry more than `max_bytes`, and a `truncated` one is a
//! `success` of exactly `max_bytes`.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use sonde_craft::cookie::Validator;
use sonde_tcp::{App, CloseMode, Config, Engine, Status};
use sonde_wire::{
    ethernet, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
};

const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
const REQUEST: &[u8] = b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n";
const SERVER_ISS: u32 = 0xffff_ff00; // wraps during the reply

struct Http;

impl App for Http {
    fn write_request(&self, buf: &mut [u8], _: IpAddr, _: u16) -> usize {
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

/// Checks every frame the engine has queued.
fn flush(engine: &mut Engine<Http>, buf: &mut [u8], now: u64) {
    let pending = engine.tx_pending();
    let mut written = 0;
    loop {
        let len = engine.write_tx(buf, now);
        if len == 0 {
            break;
        }
        written += 1;
        assert!(len <= 1514);
        check_frame(&buf[..len]);
    }
    assert_eq!(written, pending, "tx_pending counts the frames");
}

fn check_frame(frame: &[u8]) {
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
    tcp::Repr::parse(&packet, &ips, ChecksumMode::Verify).expect("TCP checksum");
}

fn drain(engine: &mut Engine<Http>, max_bytes: usize) {
    engine.drain_outcomes(|outcome, bytes| {
        assert_eq!(bytes.len() as u64, outcome.bytes);
        assert!(bytes.len() <= max_bytes);
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
    let mut engine = Engine::new(cfg, Http).unwrap();
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
    flush(&mut engine, &mut buf, now);
    peer.client_tsval = now as u32;

    if setup & 0x40 != 0 {
        // Raw frames: a 2-byte length, then that many bytes.
        while rest.len() >= 2 {
            let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
            let frame = &rest[2..2 + len];
            rest = &rest[2 + len..];
            engine.on_frame(frame, now);
            now += u64::from(len as u8) * 1000;
            engine.on_tick(now);
            flush(&mut engine, &mut buf, now);
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
            let ack = peer
                .client_iss
                .wrapping_add(1)
                .wrapping_add(REQUEST.len() as u32)
                .wrapping_add(ack_off as u32);
            let tcp = tcp::Repr {
                window_len: window,
                timestamp: options.then_some((tsval, peer.client_tsval)),
                payload_len: payload.len(),
                ..peer.header(flags, seq, flags.contains(TcpFlags::ACK).then_some(ack))
            };
            let frame = peer.frame(&tcp, payload);
            engine.on_frame(&frame, now);
            if step_ms > 0 {
                now += step_ms * 1000;
                engine.on_tick(now);
            }
            flush(&mut engine, &mut buf, now);
            drain(&mut engine, max_bytes);
            assert!(engine.outstanding() <= 4);
        }
    }
    // Everything ends: an hour later every timeout has run, and a minute after that every
    // close (FIN) has timed out too.
    for step in [3_600_000_000, 60_000_000] {
        now += step;
        engine.on_tick(now);
        flush(&mut engine, &mut buf, now);
        drain(&mut engine, max_bytes);
    }
    assert_eq!(
        engine.outstanding(),
        0,
        "every connection ends by a timeout"
    );
    engine.abort_all(now);
    flush(&mut engine, &mut buf, now);
    drain(&mut engine, max_bytes);
});
