//! A scripted server for the engine's tests: it reads the frames the engine writes (checking
//! their checksums) and builds SYN-ACKs, data, FINs and RSTs with `sonde-wire`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sonde_craft::cookie::Validator;
use sonde_wire::{
    ethernet, icmpv4, icmpv6, ipv4, ipv6, tcp, ChecksumMode, EtherType, IpPair, IpProtocol,
    MacAddr, TcpFlags,
};

use crate::{App, Config, Engine, Outcome, ReplyCursor, Rx};

pub const OUR_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
pub const GW_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
pub const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
pub const REQUEST: &[u8] = b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n";

/// An app with a fixed request, complete when the reply ends with `end` (if any).
#[derive(Clone)]
pub struct TestApp {
    pub request: Vec<u8>,
    pub end: Option<&'static [u8]>,
}

impl TestApp {
    pub fn http() -> TestApp {
        TestApp {
            request: REQUEST.to_vec(),
            end: None,
        }
    }
}

impl App for TestApp {
    fn write_request(&self, buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        buf[..self.request.len()].copy_from_slice(&self.request);
        self.request.len()
    }

    fn max_request_len(&self) -> usize {
        self.request.len()
    }

    fn is_complete(&self, received: &[u8]) -> bool {
        self.end.is_some_and(|end| received.ends_with(end))
    }

    /// Logs each call's cursor and length (this thread's test reads them), then answers as
    /// `is_complete`.
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        COMPLETENESS_CALLS.with(|calls| calls.borrow_mut().push((cursor.0, received.len())));
        cursor.0 = received.len() as u64;
        self.is_complete(received)
    }
}

thread_local! {
    /// (cursor as given, bytes given) of each `TestApp::is_complete_after` on this thread.
    pub static COMPLETENESS_CALLS: std::cell::RefCell<Vec<(u64, usize)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub fn config() -> Config {
    let mut cfg = Config::new(OUR_MAC, GW_MAC, Validator::from_seed(42));
    cfg.src_ip = Some(OUR_IP);
    cfg.src_ip6 = Some(OUR_IP6);
    cfg.max_outstanding = 1000;
    cfg
}

/// A segment the engine sent, as the server reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub tcp: tcp::Repr,
    pub payload: Vec<u8>,
    pub ttl: u8,
    /// The TCP header's length as sent (20 bytes and the options).
    pub header_len: usize,
}

impl Sent {
    pub fn flags(&self) -> TcpFlags {
        self.tcp.flags
    }

    pub fn sacks(&self) -> Vec<(u32, u32)> {
        self.tcp.sack_ranges.iter().flatten().copied().collect()
    }

    /// Data and options together: what the peer's MSS bounds.
    pub fn data_and_options(&self) -> usize {
        self.payload.len() + self.header_len - 20
    }
}

/// Reads a frame the engine wrote, asserting its link addresses and checksums.
pub fn read_sent(frame: &[u8]) -> Sent {
    assert!(frame.len() <= 1514, "frame of {} bytes", frame.len());
    let eth = ethernet::Frame::new_checked(frame).unwrap();
    assert_eq!((eth.src_addr(), eth.dst_addr()), (OUR_MAC, GW_MAC));
    let (src, dst, ttl, segment, ips) = match eth.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
            assert!(ip.verify_checksum(), "IPv4 header checksum");
            assert_eq!(ip.protocol(), IpProtocol::TCP);
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            let seg = &frame[14 + ip.header_len()..14 + usize::from(ip.total_len())];
            (
                IpAddr::V4(s),
                IpAddr::V4(d),
                ip.ttl(),
                seg,
                IpPair::V4 { src: s, dst: d },
            )
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(&frame[14..]).unwrap();
            assert_eq!(ip.next_header(), IpProtocol::TCP);
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            let seg = &frame[54..54 + usize::from(ip.payload_len())];
            (
                IpAddr::V6(s),
                IpAddr::V6(d),
                ip.hop_limit(),
                seg,
                IpPair::V6 { src: s, dst: d },
            )
        }
        other => panic!("ethertype {other}"),
    };
    let packet = tcp::Packet::new_checked(segment).unwrap();
    // Verify: every frame the engine builds carries a correct TCP checksum.
    let repr = tcp::Repr::parse(&packet, &ips, ChecksumMode::Verify).expect("TCP checksum");
    Sent {
        src,
        dst,
        tcp: repr,
        payload: packet.payload().to_vec(),
        ttl,
        header_len: packet.header_len(),
    }
}

/// The server side of one connection, and what it learned from the client's SYN.
#[derive(Clone, Debug)]
pub struct Server {
    pub addr: IpAddr,
    pub port: u16,
    pub iss: u32,
    /// Options of the SYN-ACK.
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack: bool,
    pub timestamps: bool,
    /// The server's clock for TSval.
    pub tsval: u32,
    pub window: u16,
    /// From the client's SYN.
    pub client_port: u16,
    pub client_iss: u32,
    pub client_tsval: u32,
}

impl Server {
    pub fn new(addr: &str, port: u16) -> Server {
        Server {
            addr: addr.parse().unwrap(),
            port,
            iss: 0x1000_0000,
            mss: Some(1460),
            ws: Some(7),
            sack: true,
            timestamps: true,
            tsval: 5000,
            window: 0xffff,
            client_port: 0,
            client_iss: 0,
            client_tsval: 0,
        }
    }

    fn ours(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(OUR_IP),
            IpAddr::V6(_) => IpAddr::V6(OUR_IP6),
        }
    }

    /// Learns the client's port, ISN and TSval from its SYN.
    pub fn read_syn(&mut self, syn: &Sent) {
        assert_eq!(syn.flags(), TcpFlags::SYN);
        assert_eq!(syn.dst, self.addr);
        assert_eq!(syn.tcp.dst_port, self.port);
        self.client_port = syn.tcp.src_port;
        self.client_iss = syn.tcp.seq_number;
        self.client_tsval = syn.tcp.timestamp.map_or(0, |ts| ts.0);
    }

    /// The client's sequence number `off` bytes into its stream (0: the request's first byte).
    pub fn client_seq(&self, off: u32) -> u32 {
        self.client_iss.wrapping_add(1).wrapping_add(off)
    }

    /// The server's sequence number `off` bytes into the reply.
    pub fn seq(&self, off: u32) -> u32 {
        self.iss.wrapping_add(1).wrapping_add(off)
    }

    pub fn syn_ack(&self) -> Vec<u8> {
        let tcp = tcp::Repr {
            src_port: self.port,
            dst_port: self.client_port,
            seq_number: self.iss,
            ack_number: Some(self.client_iss.wrapping_add(1)),
            flags: TcpFlags::SYN | TcpFlags::ACK,
            window_len: self.window,
            window_scale: self.ws,
            max_seg_size: self.mss,
            sack_permitted: self.sack,
            sack_ranges: [None; 3],
            timestamp: self.timestamps.then_some((self.tsval, self.client_tsval)),
            payload_len: 0,
        };
        self.frame(&tcp, &[])
    }

    /// A segment `off` bytes into the reply, acknowledging `acked` request bytes.
    pub fn segment(&self, flags: TcpFlags, off: u32, acked: u32, payload: &[u8]) -> Vec<u8> {
        self.raw(flags, self.seq(off), Some(self.client_seq(acked)), payload)
    }

    pub fn raw(&self, flags: TcpFlags, seq: u32, ack: Option<u32>, payload: &[u8]) -> Vec<u8> {
        let tcp = tcp::Repr {
            src_port: self.port,
            dst_port: self.client_port,
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: self.window,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: self.timestamps.then_some((self.tsval, self.client_tsval)),
            payload_len: payload.len(),
        };
        self.frame(&tcp, payload)
    }

    pub fn frame(&self, tcp: &tcp::Repr, payload: &[u8]) -> Vec<u8> {
        let ours = self.ours();
        let tcp_len = tcp.buffer_len();
        let ip_len = if self.addr.is_ipv4() { 20 } else { 40 };
        let l4 = 14 + ip_len;
        let mut frame = vec![0; l4 + tcp_len];
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
        let ips = match (self.addr, ours) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                ipv4::Repr {
                    src_addr: src,
                    dst_addr: dst,
                    protocol: IpProtocol::TCP,
                    payload_len: tcp_len,
                    ttl: 60,
                    ident: 1,
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
                    hop_limit: 60,
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
}

/// An engine, a clock and one scripted server.
pub struct Harness<A: App = TestApp> {
    pub engine: Engine<A>,
    pub server: Server,
    pub now: u64,
    buf: Vec<u8>,
}

impl Harness<TestApp> {
    pub fn v4() -> Harness {
        Harness::new(config(), TestApp::http(), Server::new("198.18.0.7", 80))
    }
}

impl<A: App> Harness<A> {
    pub fn new(cfg: Config, app: A, server: Server) -> Harness<A> {
        Harness {
            engine: Engine::new(cfg, app).unwrap(),
            server,
            now: 1_000_000,
            buf: vec![0; 1514],
        }
    }

    /// Sends the SYN and returns it as the server reads it.
    pub fn syn(&mut self) -> Sent {
        let len =
            self.engine
                .write_syn(&mut self.buf, self.server.addr, self.server.port, self.now);
        assert!(len > 0);
        let syn = read_sent(&self.buf[..len]);
        self.server.read_syn(&syn);
        syn
    }

    /// SYN, then after `rtt_us` the SYN-ACK; returns what the engine made of it.
    pub fn handshake(&mut self, rtt_us: u64) -> Rx {
        self.syn();
        self.now += rtt_us;
        let synack = self.server.syn_ack();
        self.input(&synack)
    }

    pub fn input(&mut self, frame: &[u8]) -> Rx {
        self.engine.on_frame(frame, self.now)
    }

    /// Every segment queued, as the server reads them.
    pub fn flush(&mut self) -> Vec<Sent> {
        let mut sent = Vec::new();
        let pending = self.engine.tx_pending();
        loop {
            let len = self.engine.write_tx(&mut self.buf, self.now);
            if len == 0 {
                break;
            }
            sent.push(read_sent(&self.buf[..len]));
        }
        assert_eq!(sent.len(), pending, "tx_pending counts the frames exactly");
        sent
    }

    /// Advances the clock and runs the timers.
    pub fn tick(&mut self, us: u64) {
        self.now += us;
        self.engine.on_tick(self.now);
    }

    pub fn outcomes(&mut self) -> Vec<(Outcome, Vec<u8>)> {
        let mut out = Vec::new();
        self.engine
            .drain_outcomes(|outcome, bytes| out.push((outcome.clone(), bytes.to_vec())));
        out
    }

    /// The one outcome drained now.
    pub fn outcome(&mut self) -> (Outcome, Vec<u8>) {
        let mut all = self.outcomes();
        assert_eq!(all.len(), 1, "{all:?}");
        all.pop().unwrap()
    }

    /// Handshake, then the ACK and request flushed; returns them.
    pub fn established(&mut self) -> Vec<Sent> {
        assert!(matches!(self.handshake(10_000), Rx::Answered { .. }));
        self.flush()
    }
}

/// The IP header and the first `tcp_bytes` bytes of the TCP header (ports, sequence number,
/// ACK, offset and flags) of a segment the engine sent, as an ICMP error quotes it.
pub fn quote(sent: &Sent, tcp_bytes: usize) -> Vec<u8> {
    let mut tcp = vec![0u8; 20];
    tcp[0..2].copy_from_slice(&sent.tcp.src_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&sent.tcp.dst_port.to_be_bytes());
    tcp[4..8].copy_from_slice(&sent.tcp.seq_number.to_be_bytes());
    tcp[8..12].copy_from_slice(&sent.tcp.ack_number.unwrap_or(0).to_be_bytes());
    tcp[12] = ((sent.header_len / 4) as u8) << 4;
    tcp[13] = sent.tcp.flags.0;
    tcp.truncate(tcp_bytes);
    let segment_len = sent.header_len + sent.payload.len();
    let mut quoted = match (sent.src, sent.dst) {
        (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
            let mut ip = vec![0u8; 20];
            ipv4::Repr {
                src_addr,
                dst_addr,
                protocol: IpProtocol::TCP,
                payload_len: segment_len,
                ttl: sent.ttl,
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
                payload_len: segment_len,
                hop_limit: sent.ttl,
                traffic_class: 0,
                flow_label: 0,
            }
            .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
            ip
        }
        _ => unreachable!(),
    };
    quoted.extend_from_slice(&tcp);
    quoted
}

/// A frame carrying an ICMP (to an IPv4 address) or ICMPv6 message from `from` to `to`:
/// `icmp_type`, `code`, the rest-of-header word `rest` (an MTU), then `quoted`.
pub fn icmp_frame(
    from: IpAddr,
    to: IpAddr,
    icmp_type: u8,
    code: u8,
    rest: u32,
    quoted: &[u8],
) -> Vec<u8> {
    let mut message = vec![0u8; 8 + quoted.len()];
    message[0] = icmp_type;
    message[1] = code;
    message[4..8].copy_from_slice(&rest.to_be_bytes());
    message[8..].copy_from_slice(quoted);
    let mut frame = vec![0u8; 14];
    let ethertype = match (from, to) {
        (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
            icmpv4::Packet::new_unchecked(&mut message[..]).fill_checksum();
            let mut ip = vec![0u8; 20];
            ipv4::Repr {
                src_addr,
                dst_addr,
                protocol: IpProtocol::ICMP,
                payload_len: message.len(),
                ttl: 60,
                ident: 7,
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
                hop_limit: 60,
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

/// A router on the path to the targets of `family` (it sends the ICMP errors).
pub fn router(v6: bool) -> IpAddr {
    if v6 {
        "2001:2:0:ffff::fe".parse().unwrap()
    } else {
        "198.19.255.254".parse().unwrap()
    }
}

/// An ICMP error from the router about `sent` (its IP header and TCP header quoted).
pub fn icmp_about(sent: &Sent, icmp_type: u8, code: u8, rest: u32) -> Vec<u8> {
    let quoted = quote(sent, 20);
    icmp_frame(
        router(sent.src.is_ipv6()),
        sent.src,
        icmp_type,
        code,
        rest,
        &quoted,
    )
}
