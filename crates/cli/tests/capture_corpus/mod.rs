//! A deterministic corpus of Ethernet frames for checking `sonde capture`'s filters against
//! tcpdump: every frame is built byte by byte (correct IPv4, TCP, UDP, ICMP and ICMPv6
//! checksums) and written to a classic microsecond pcap file.
//!
//! Only lab addresses appear anywhere, ARP included: 198.18.0.0/15 and 2001:2::/48. The
//! frames cover what tcpdump expressions look at: every TCP flags byte, many ports, DNS,
//! ICMP errors quoting datagrams, ARP/RARP, IPv6 extension headers, IPv4 fragments and
//! options, 802.1Q and QinQ tags, frames cut short by the snap length, tiny and large frames.

pub mod files;

use std::fs::File;
use std::io::BufWriter;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use sonde_wire::checksum::{checksum, fold, pseudo_header_v4, pseudo_header_v6, sum};

/// The snap length the corpus file declares; every frame fits in it.
pub const SNAPLEN: u32 = 65_535;

/// The host MAC that `ether host` is tested with (it sends and receives many frames).
pub const HOST_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x01];
/// The DNS transaction id of the queries and responses sent over IPv4 and VLANs.
pub const DNS_ID: u16 = 0x1a2b;

const PEER_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x02];
const ROUTER_MAC: [u8; 6] = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x03];
const BROADCAST: [u8; 6] = [0xff; 6];
const V6_ALL_NODES_MAC: [u8; 6] = [0x33, 0x33, 0x00, 0x00, 0x00, 0x01];
const V4_MCAST_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb];
const STP_MAC: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x00];
const LLDP_MAC: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];

const ETH_IPV4: u16 = 0x0800;
const ETH_ARP: u16 = 0x0806;
const ETH_RARP: u16 = 0x8035;
const ETH_IPV6: u16 = 0x86dd;
const ETH_VLAN: u16 = 0x8100;
const ETH_QINQ: u16 = 0x88a8;

const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMPV6: u8 = 58;
const V6_HOP_BY_HOP: u8 = 0;
const V6_ROUTING: u8 = 43;
const V6_FRAGMENT: u8 = 44;
const V6_DEST_OPTS: u8 = 60;

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;
const ECE: u8 = 0x40;
const CWR: u8 = 0x80;
const FLAG_BITS: [u8; 8] = [FIN, SYN, RST, PSH, ACK, URG, ECE, CWR];

const HTTP_GET: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: 198.18.0.80\r\nAccept: */*\r\n\r\n";

/// One captured frame: the bytes kept and the length it had on the wire.
pub struct Frame {
    pub kind: &'static str,
    pub data: Vec<u8>,
    pub wire_len: u32,
}

/// Builds the whole corpus, in file order.
pub fn frames() -> Vec<Frame> {
    let mut c = Corpus::default();
    c.tcp_v4_every_flags_byte();
    c.tcp_v6_flag_singles_and_pairs();
    c.tcp_special();
    c.udp_and_dns();
    c.icmp_v4();
    c.icmp_v6();
    c.arp_and_rarp();
    c.ipv6_extension_headers();
    c.ipv4_fragments_and_options();
    c.vlan_tagged();
    c.truncated_and_tiny();
    c.not_ip();
    c.frames
}

/// Writes `frames` as a classic pcap file with microsecond stamps, one packet every few
/// milliseconds from a fixed start.
pub fn write_pcap(path: &Path, frames: &[Frame]) -> std::io::Result<()> {
    let header = PcapHeader {
        snaplen: SNAPLEN,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::MicroSecond,
        endianness: Endianness::Little,
        ..Default::default()
    };
    let file = BufWriter::new(File::create(path)?);
    let mut writer = PcapWriter::with_header(file, header).map_err(std::io::Error::other)?;
    let mut rng = Rng(0x5eed_cafe);
    let mut micros: u64 = 1_700_000_000_000_000;
    for frame in frames {
        micros += 700 + rng.next() % 9_000;
        let stamp = Duration::from_micros(micros);
        writer
            .write_packet(&PcapPacket::new(stamp, frame.wire_len, &frame.data))
            .map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// How many frames of each kind, in order of first appearance.
pub fn counts_by_kind(frames: &[Frame]) -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for f in frames {
        match counts.iter_mut().find(|(k, _)| *k == f.kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((f.kind, 1)),
        }
    }
    counts
}

/// xorshift64: deterministic filler for payloads and stamps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn v4(a: u8, b: u8, c: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18 + (a & 1), b, c)
}

fn v6(subnet: u16, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 2, 0, subnet, 0, 0, 0, host)
}

#[derive(Default)]
struct Corpus {
    frames: Vec<Frame>,
    rng: Option<Rng>,
}

/// VLAN tags as (TPID, TCI) pairs, outermost first.
type Tags = [(u16, u16)];

// ---- Byte builders -------------------------------------------------------------------------

/// An Ethernet II frame, with optional VLAN tags (TPID, TCI) before the EtherType; padded
/// to the 60-byte minimum when `pad` (as a NIC sends it, FCS not captured).
fn ethernet(
    dst: [u8; 6],
    src: [u8; 6],
    tags: &Tags,
    ethertype: u16,
    payload: &[u8],
    pad: bool,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(60 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    for (tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    if pad && f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// IPv4 header fields that vary between frames.
#[derive(Clone, Copy)]
struct V4Opts<'a> {
    id: u16,
    /// Flags (top 3 bits) and fragment offset in 8-byte units.
    flags_fragment: u16,
    ttl: u8,
    tos: u8,
    options: &'a [u8],
}

impl Default for V4Opts<'_> {
    fn default() -> Self {
        V4Opts {
            id: 0x4242,
            flags_fragment: 0x4000, // DF
            ttl: 64,
            tos: 0,
            options: &[],
        }
    }
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload: &[u8], o: V4Opts) -> Vec<u8> {
    assert_eq!(o.options.len() % 4, 0, "IPv4 options come in 32-bit words");
    let header_len = 20 + o.options.len();
    let total = (header_len + payload.len()) as u16;
    let mut p = Vec::with_capacity(total as usize);
    p.push(0x40 | (header_len / 4) as u8);
    p.push(o.tos);
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&o.id.to_be_bytes());
    p.extend_from_slice(&o.flags_fragment.to_be_bytes());
    p.push(o.ttl);
    p.push(protocol);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(o.options);
    let csum = checksum(&p[..header_len]);
    p[10..12].copy_from_slice(&csum.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet; `next_header` names the first header of `payload` (extension or upper).
fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, hop_limit: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(40 + payload.len());
    p.extend_from_slice(&[0x60, 0x00, 0x12, 0x34]);
    p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    p.push(next_header);
    p.push(hop_limit);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// The pseudo-header an upper-layer checksum covers.
#[derive(Clone, Copy)]
enum Pseudo {
    V4(Ipv4Addr, Ipv4Addr),
    V6(Ipv6Addr, Ipv6Addr),
    /// ICMPv4 has none.
    None,
}

impl Pseudo {
    fn sum(self, protocol: u8, len: usize) -> u32 {
        match self {
            Pseudo::V4(s, d) => pseudo_header_v4(s, d, protocol, len as u16),
            Pseudo::V6(s, d) => pseudo_header_v6(&s, &d, protocol, len as u32),
            Pseudo::None => 0,
        }
    }
}

/// Stores the checksum of `segment` (plus pseudo-header) at `at`, which must hold zero.
fn put_checksum(segment: &mut [u8], at: usize, pseudo: Pseudo, protocol: u8) {
    let total = pseudo.sum(protocol, segment.len()) + sum(segment);
    let mut csum = !fold(total);
    if protocol == PROTO_UDP && csum == 0 {
        csum = 0xffff;
    }
    segment[at..at + 2].copy_from_slice(&csum.to_be_bytes());
}

struct TcpSeg<'a> {
    sport: u16,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
    options: &'a [u8],
    payload: &'a [u8],
}

fn tcp(pseudo: Pseudo, s: &TcpSeg) -> Vec<u8> {
    assert_eq!(s.options.len() % 4, 0, "TCP options come in 32-bit words");
    let header_len = 20 + s.options.len();
    let mut t = Vec::with_capacity(header_len + s.payload.len());
    t.extend_from_slice(&s.sport.to_be_bytes());
    t.extend_from_slice(&s.dport.to_be_bytes());
    t.extend_from_slice(&s.seq.to_be_bytes());
    t.extend_from_slice(&s.ack.to_be_bytes());
    t.push(((header_len / 4) as u8) << 4);
    t.push(s.flags);
    t.extend_from_slice(&64_240u16.to_be_bytes());
    t.extend_from_slice(&[0, 0]); // checksum
    let urgent: u16 = if s.flags & URG != 0 { 1 } else { 0 };
    t.extend_from_slice(&urgent.to_be_bytes());
    t.extend_from_slice(s.options);
    t.extend_from_slice(s.payload);
    put_checksum(&mut t, 16, pseudo, PROTO_TCP);
    t
}

fn udp(pseudo: Pseudo, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let len = (8 + payload.len()) as u16;
    let mut u = Vec::with_capacity(len as usize);
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    put_checksum(&mut u, 6, pseudo, PROTO_UDP);
    u
}

/// An ICMP or ICMPv6 message: type, code, checksum, 4 bytes `rest`, then `body`.
fn icmp(pseudo: Pseudo, protocol: u8, kind: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    put_checksum(&mut m, 2, pseudo, protocol);
    m
}

/// A DNS message with one question (type A, class IN) and, for a response, one A answer.
fn dns(id: u16, name: &str, answer: Option<Ipv4Addr>) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&id.to_be_bytes());
    let flags: u16 = if answer.is_some() { 0x8180 } else { 0x0100 };
    d.extend_from_slice(&flags.to_be_bytes());
    let answers = u16::from(answer.is_some());
    for count in [1u16, answers, 0, 0] {
        d.extend_from_slice(&count.to_be_bytes());
    }
    for label in name.split('.') {
        d.push(label.len() as u8);
        d.extend_from_slice(label.as_bytes());
    }
    d.push(0);
    d.extend_from_slice(&[0, 1, 0, 1]);
    if let Some(addr) = answer {
        d.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]); // pointer to the question's name
        d.extend_from_slice(&300u32.to_be_bytes());
        d.extend_from_slice(&4u16.to_be_bytes());
        d.extend_from_slice(&addr.octets());
    }
    d
}

/// An ARP or RARP packet for IPv4 over Ethernet.
fn arp(op: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0x00, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa.octets());
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa.octets());
    a
}

/// An IPv6 extension header of 8 bytes with PadN filling (hop-by-hop, destination
/// options), or a type-4 routing header with no segments left naming `dst`.
fn ext_header(kind: u8, next: u8, dst: Ipv6Addr) -> Vec<u8> {
    match kind {
        V6_ROUTING => {
            // Segment routing header, 1 segment, segments left 0: the packet is at its
            // final destination, so the pseudo-header uses the IPv6 destination.
            let mut h = vec![next, 2, 4, 0, 0, 0, 0, 0];
            h.extend_from_slice(&dst.octets());
            h
        }
        _ => vec![next, 0, 1, 4, 0, 0, 0, 0],
    }
}

fn fragment_header(next: u8, offset_units: u16, more: bool, id: u32) -> Vec<u8> {
    let mut h = vec![next, 0];
    h.extend_from_slice(&((offset_units << 3) | u16::from(more)).to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h
}

// ---- The corpus ----------------------------------------------------------------------------

impl Corpus {
    fn rng(&mut self) -> &mut Rng {
        self.rng.get_or_insert(Rng(0x0ddba11))
    }

    fn push(&mut self, kind: &'static str, data: Vec<u8>) {
        let wire_len = data.len() as u32;
        self.frames.push(Frame {
            kind,
            data,
            wire_len,
        });
    }

    /// Keeps only the first `caplen` bytes, as a snap length would.
    fn push_cut(&mut self, kind: &'static str, mut data: Vec<u8>, caplen: usize) {
        let wire_len = data.len() as u32;
        data.truncate(caplen);
        self.frames.push(Frame {
            kind,
            data,
            wire_len,
        });
    }

    fn eth_v4(&mut self, kind: &'static str, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) {
        let ip = ipv4(src, dst, proto, l4, V4Opts::default());
        self.push(kind, ethernet(PEER_MAC, HOST_MAC, &[], ETH_IPV4, &ip, true));
    }

    fn eth_v6(&mut self, kind: &'static str, src: Ipv6Addr, dst: Ipv6Addr, next: u8, l4: &[u8]) {
        let ip = ipv6(src, dst, next, 64, l4);
        self.push(
            kind,
            ethernet(ROUTER_MAC, HOST_MAC, &[], ETH_IPV6, &ip, true),
        );
    }

    fn tcp4(&mut self, kind: &'static str, src: Ipv4Addr, dst: Ipv4Addr, seg: &TcpSeg) {
        self.eth_v4(kind, src, dst, PROTO_TCP, &tcp(Pseudo::V4(src, dst), seg));
    }

    fn tcp6(&mut self, kind: &'static str, src: Ipv6Addr, dst: Ipv6Addr, seg: &TcpSeg) {
        self.eth_v6(kind, src, dst, PROTO_TCP, &tcp(Pseudo::V6(src, dst), seg));
    }

    /// All 256 values of the TCP flags byte over IPv4, with ports, addresses, directions
    /// and payloads varying with the value.
    fn tcp_v4_every_flags_byte(&mut self) {
        const PORTS: [u16; 15] = [
            80, 443, 22, 53, 1000, 1500, 2000, 1999, 8080, 61000, 61001, 65535, 12345, 999, 2001,
        ];
        for flags in 0..=255u8 {
            let i = usize::from(flags);
            let client = v4(i as u8, (i % 4) as u8, 1 + (i % 7) as u8);
            let server = v4(1 + i as u8 / 2, (i % 3) as u8, 10 + (i % 5) as u8);
            let service = PORTS[i % PORTS.len()];
            let ephemeral = PORTS[(i * 7 + 3) % PORTS.len()];
            let payload_len = if i % 3 == 0 { i % 50 } else { 0 };
            let payload = self.rng().bytes(payload_len);
            let seg = TcpSeg {
                sport: ephemeral,
                dport: service,
                flags,
                seq: 0x1000_0000 + i as u32,
                ack: if flags & ACK != 0 { 0x2000_0000 } else { 0 },
                options: &[],
                payload: &payload,
            };
            // Odd values go server → client, so src/dst filters see both directions.
            let (src, dst, seg) = if i % 2 == 1 {
                let back = TcpSeg {
                    sport: seg.dport,
                    dport: seg.sport,
                    ..seg
                };
                (server, client, back)
            } else {
                (client, server, seg)
            };
            let l4 = tcp(Pseudo::V4(src, dst), &seg);
            let (dmac, smac) = if i % 2 == 1 {
                (HOST_MAC, PEER_MAC)
            } else {
                (PEER_MAC, HOST_MAC)
            };
            let ip = ipv4(
                src,
                dst,
                PROTO_TCP,
                &l4,
                V4Opts {
                    id: i as u16,
                    ttl: 64 - (i % 64) as u8,
                    ..V4Opts::default()
                },
            );
            self.push("tcp4-flags", ethernet(dmac, smac, &[], ETH_IPV4, &ip, true));
        }
    }

    /// Over IPv6: each of the eight flags alone, every pair, and all set.
    fn tcp_v6_flag_singles_and_pairs(&mut self) {
        let mut values: Vec<u8> = FLAG_BITS.to_vec();
        for (a, first) in FLAG_BITS.iter().enumerate() {
            for second in &FLAG_BITS[a + 1..] {
                values.push(first | second);
            }
        }
        values.push(0xff);
        for (i, flags) in values.into_iter().enumerate() {
            let (src, dst) = (v6(1, 0x10 + i as u16), v6(0xff, 0xbeef));
            let ports = [(40_000, 443), (61_500, 80), (1234, 22), (1500, 8080)][i % 4];
            let payload = if i % 2 == 0 {
                vec![]
            } else {
                vec![0x5a; 20 + i]
            };
            let seg = TcpSeg {
                sport: ports.0,
                dport: ports.1,
                flags,
                seq: 77 + i as u32,
                ack: 99,
                options: &[],
                payload: &payload,
            };
            self.tcp6("tcp6-flags", src, dst, &seg);
        }
    }

    /// HTTP GET requests (payload after options too), SYNs with options, large segments.
    fn tcp_special(&mut self) {
        let syn_options = [
            2, 4, 0x05, 0xb4, // MSS 1460
            4, 2, // SACK permitted
            8, 10, 0, 0, 0, 1, 0, 0, 0, 0, // timestamps
            1, // NOP
            3, 3, 7, // window scale 7
        ];
        let ack_ts_options = [1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 1];
        for (i, (dport, options)) in [(80u16, &[][..]), (8080, &ack_ts_options[..]), (80, &[][..])]
            .into_iter()
            .enumerate()
        {
            let seg = TcpSeg {
                sport: 61_000 + i as u16,
                dport,
                flags: PSH | ACK,
                seq: 1,
                ack: 1,
                options,
                payload: HTTP_GET,
            };
            if i < 2 {
                let (src, dst) = (v4(0, 0, 1), v4(0, 0, 80));
                self.tcp4("http-get", src, dst, &seg);
            } else {
                let (src, dst) = (v6(0, 1), v6(0, 0x80));
                self.tcp6("http-get", src, dst, &seg);
            }
        }
        // A POST is not a GET.
        let (src, dst) = (v4(1, 2, 3), v4(0, 0, 80));
        let post = TcpSeg {
            sport: 50_000,
            dport: 80,
            flags: PSH | ACK,
            seq: 5,
            ack: 6,
            options: &[],
            payload: b"POST /form HTTP/1.1\r\n\r\n",
        };
        self.tcp4("http-post", src, dst, &post);
        for (i, dport) in [443u16, 22, 1500].into_iter().enumerate() {
            let (src, dst) = (v4(1, 9, 9 + i as u8), v4(0, 4, 4));
            let syn = TcpSeg {
                sport: 61_234,
                dport,
                flags: SYN,
                seq: 42,
                ack: 0,
                options: &syn_options,
                payload: &[],
            };
            self.tcp4("tcp-syn-options", src, dst, &syn);
        }
        for size in [1200usize, 1448] {
            let payload = self.rng().bytes(size);
            let seg = TcpSeg {
                sport: 443,
                dport: 61_777,
                flags: ACK,
                seq: 1000,
                ack: 2000,
                options: &[],
                payload: &payload,
            };
            let (src, dst) = (v4(0, 0, 80), v4(1, 0, 1));
            self.tcp4("tcp-large", src, dst, &seg);
            let (src6, dst6) = (v6(0, 0x80), v6(1, 1));
            self.tcp6("tcp-large", src6, dst6, &seg);
        }
    }

    fn udp_and_dns(&mut self) {
        let resolver = v4(0, 0, 53);
        let answer = v4(1, 1, 1);
        for (i, (id, name)) in [
            (DNS_ID, "www.example.lab"),
            (0xbeef, "ns1.lab"),
            (1, "a.b.c.lab"),
        ]
        .into_iter()
        .enumerate()
        {
            let client = v4(i as u8, 2, 20 + i as u8);
            let sport = 33_000 + i as u16 * 1000;
            let q = udp(
                Pseudo::V4(client, resolver),
                sport,
                53,
                &dns(id, name, None),
            );
            self.eth_v4("dns4-query", client, resolver, PROTO_UDP, &q);
            let r = udp(
                Pseudo::V4(resolver, client),
                53,
                sport,
                &dns(id, name, Some(answer)),
            );
            self.eth_v4("dns4-response", resolver, client, PROTO_UDP, &r);
        }
        let (client6, resolver6) = (v6(1, 0x22), v6(0, 0x53));
        let q = udp(
            Pseudo::V6(client6, resolver6),
            40_053,
            53,
            &dns(0x6666, "v6.lab", None),
        );
        self.eth_v6("dns6-query", client6, resolver6, PROTO_UDP, &q);
        let r = udp(
            Pseudo::V6(resolver6, client6),
            53,
            40_053,
            &dns(0x6666, "v6.lab", Some(answer)),
        );
        self.eth_v6("dns6-response", resolver6, client6, PROTO_UDP, &r);

        // Other UDP: NTP-sized, traceroute probes, the portrange edges, a large datagram.
        for (sport, dport, len) in [
            (123u16, 123u16, 48usize),
            (45_000, 33_434, 32),
            (45_000, 33_435, 32),
            (999, 1000, 10),
            (2000, 2001, 10),
            (61_000, 5353, 100),
            (1900, 1900, 0),
            (65_535, 8080, 1200),
        ] {
            let (src, dst) = (v4(1, 3, sport as u8), v4(0, 3, dport as u8));
            let payload = self.rng().bytes(len);
            self.eth_v4(
                "udp4",
                src,
                dst,
                PROTO_UDP,
                &udp(Pseudo::V4(src, dst), sport, dport, &payload),
            );
        }
        for (sport, dport, len) in [
            (546u16, 547u16, 40usize),
            (50_000, 4789, 900),
            (1000, 2000, 4),
        ] {
            let (src, dst) = (v6(2, sport), v6(3, dport));
            let payload = self.rng().bytes(len);
            self.eth_v6(
                "udp6",
                src,
                dst,
                PROTO_UDP,
                &udp(Pseudo::V6(src, dst), sport, dport, &payload),
            );
        }
        // IPv4 to a multicast MAC (the address stays in the lab).
        let (src, dst) = (v4(0, 7, 7), v4(0, 7, 255));
        let ip = ipv4(
            src,
            dst,
            PROTO_UDP,
            &udp(Pseudo::V4(src, dst), 5353, 5353, &[0; 12]),
            V4Opts {
                ttl: 1,
                ..V4Opts::default()
            },
        );
        self.push(
            "udp4-mcast-mac",
            ethernet(V4_MCAST_MAC, PEER_MAC, &[], ETH_IPV4, &ip, true),
        );
    }

    fn icmp_v4(&mut self) {
        let (a, b) = (v4(0, 0, 1), v4(1, 0, 10));
        for (seq, payload_len) in [(1u16, 56usize), (2, 56), (3, 1400), (4, 0)] {
            let rest = [0x12, 0x34, (seq >> 8) as u8, seq as u8];
            let payload = self.rng().bytes(payload_len);
            let req = icmp(Pseudo::None, PROTO_ICMP, 8, 0, rest, &payload);
            self.eth_v4("icmp4-echo", a, b, PROTO_ICMP, &req);
            let rep = icmp(Pseudo::None, PROTO_ICMP, 0, 0, rest, &payload);
            self.eth_v4("icmp4-echo", b, a, PROTO_ICMP, &rep);
        }
        // Port unreachable quoting the UDP datagram it answers (IP header + 8 bytes).
        let probe_udp = udp(Pseudo::V4(a, b), 45_000, 33_434, &[0; 32]);
        let probe = ipv4(a, b, PROTO_UDP, &probe_udp, V4Opts::default());
        let unreach = icmp(Pseudo::None, PROTO_ICMP, 3, 3, [0; 4], &probe[..28]);
        self.eth_v4("icmp4-unreach", b, a, PROTO_ICMP, &unreach);
        // Host unreachable from a router, quoting a TCP SYN.
        let router = v4(1, 255, 254);
        let syn = tcp(
            Pseudo::V4(a, b),
            &TcpSeg {
                sport: 61_111,
                dport: 443,
                flags: SYN,
                seq: 9,
                ack: 0,
                options: &[],
                payload: &[],
            },
        );
        let syn_ip = ipv4(
            a,
            b,
            PROTO_TCP,
            &syn,
            V4Opts {
                ttl: 1,
                ..V4Opts::default()
            },
        );
        let host_unreach = icmp(Pseudo::None, PROTO_ICMP, 3, 1, [0; 4], &syn_ip[..28]);
        self.eth_v4("icmp4-unreach", router, a, PROTO_ICMP, &host_unreach);
        // Time exceeded in transit, quoting the same SYN.
        let exceeded = icmp(Pseudo::None, PROTO_ICMP, 11, 0, [0; 4], &syn_ip[..28]);
        self.eth_v4("icmp4-time-exceeded", router, a, PROTO_ICMP, &exceeded);
    }

    fn icmp_v6(&mut self) {
        let (a, b) = (v6(0, 1), v6(1, 0x10));
        for seq in 1..=3u16 {
            let rest = [0xab, 0xcd, 0, seq as u8];
            let payload = self.rng().bytes(32 * usize::from(seq));
            let req = icmp(Pseudo::V6(a, b), PROTO_ICMPV6, 128, 0, rest, &payload);
            self.eth_v6("icmp6-echo", a, b, PROTO_ICMPV6, &req);
            let rep = icmp(Pseudo::V6(b, a), PROTO_ICMPV6, 129, 0, rest, &payload);
            self.eth_v6("icmp6-echo", b, a, PROTO_ICMPV6, &rep);
        }
        // Neighbour solicitation (unicast: reachability confirmation, so no multicast
        // address is needed) and the advertisement answering it; hop limit 255.
        let mut ns_body = b.octets().to_vec();
        ns_body.extend_from_slice(&[1, 1]);
        ns_body.extend_from_slice(&HOST_MAC);
        let ns = icmp(Pseudo::V6(a, b), PROTO_ICMPV6, 135, 0, [0; 4], &ns_body);
        let ns_ip = ipv6(a, b, PROTO_ICMPV6, 255, &ns);
        self.push(
            "icmp6-ns",
            ethernet(PEER_MAC, HOST_MAC, &[], ETH_IPV6, &ns_ip, true),
        );
        let mut na_body = b.octets().to_vec();
        na_body.extend_from_slice(&[2, 1]);
        na_body.extend_from_slice(&PEER_MAC);
        let na = icmp(
            Pseudo::V6(b, a),
            PROTO_ICMPV6,
            136,
            0,
            [0x60, 0, 0, 0],
            &na_body,
        );
        let na_ip = ipv6(b, a, PROTO_ICMPV6, 255, &na);
        self.push(
            "icmp6-na",
            ethernet(HOST_MAC, PEER_MAC, &[], ETH_IPV6, &na_ip, true),
        );
        // An unsolicited advertisement to the all-nodes MAC (IPv6 destination in the lab).
        let una = icmp(
            Pseudo::V6(b, a),
            PROTO_ICMPV6,
            136,
            0,
            [0x20, 0, 0, 0],
            &na_body,
        );
        let una_ip = ipv6(b, a, PROTO_ICMPV6, 255, &una);
        self.push(
            "icmp6-na",
            ethernet(V6_ALL_NODES_MAC, PEER_MAC, &[], ETH_IPV6, &una_ip, true),
        );
        // Destination unreachable (port) quoting the offending packet.
        let probe = udp(Pseudo::V6(a, b), 45_000, 33_434, &[0; 16]);
        let probe_ip = ipv6(a, b, PROTO_UDP, 64, &probe);
        let unreach = icmp(Pseudo::V6(b, a), PROTO_ICMPV6, 1, 4, [0; 4], &probe_ip);
        self.eth_v6("icmp6-unreach", b, a, PROTO_ICMPV6, &unreach);
        let router = v6(0xff, 1);
        let no_route = icmp(Pseudo::V6(router, a), PROTO_ICMPV6, 1, 0, [0; 4], &probe_ip);
        self.eth_v6("icmp6-unreach", router, a, PROTO_ICMPV6, &no_route);
        let exceeded = icmp(Pseudo::V6(router, a), PROTO_ICMPV6, 3, 0, [0; 4], &probe_ip);
        self.eth_v6("icmp6-time-exceeded", router, a, PROTO_ICMPV6, &exceeded);
    }

    fn arp_and_rarp(&mut self) {
        let (a, b) = (v4(0, 0, 1), v4(0, 0, 2));
        let request = arp(1, HOST_MAC, a, [0; 6], b);
        let reply = arp(2, PEER_MAC, b, HOST_MAC, a);
        // As the sender's own capture shows them (42 bytes) and as the wire pads them.
        for pad in [false, true] {
            self.push(
                "arp",
                ethernet(BROADCAST, HOST_MAC, &[], ETH_ARP, &request, pad),
            );
            self.push(
                "arp",
                ethernet(HOST_MAC, PEER_MAC, &[], ETH_ARP, &reply, pad),
            );
        }
        let gratuitous = arp(1, ROUTER_MAC, v4(1, 0, 254), BROADCAST, v4(1, 0, 254));
        self.push(
            "arp",
            ethernet(BROADCAST, ROUTER_MAC, &[], ETH_ARP, &gratuitous, true),
        );
        let rarp_request = arp(3, PEER_MAC, b, PEER_MAC, b);
        self.push(
            "rarp",
            ethernet(BROADCAST, PEER_MAC, &[], ETH_RARP, &rarp_request, true),
        );
        let rarp_reply = arp(4, ROUTER_MAC, v4(1, 0, 254), PEER_MAC, b);
        self.push(
            "rarp",
            ethernet(PEER_MAC, ROUTER_MAC, &[], ETH_RARP, &rarp_reply, true),
        );
    }

    /// Hop-by-hop, routing, destination options and fragment headers before TCP, UDP and
    /// ICMPv6, alone and chained.
    fn ipv6_extension_headers(&mut self) {
        let (a, b) = (v6(4, 1), v6(5, 2));
        let syn = tcp(
            Pseudo::V6(a, b),
            &TcpSeg {
                sport: 61_999,
                dport: 443,
                flags: SYN,
                seq: 3,
                ack: 0,
                options: &[],
                payload: &[],
            },
        );
        let dns_q = udp(Pseudo::V6(a, b), 53_000, 53, &dns(0x7777, "ext.lab", None));
        let echo = icmp(
            Pseudo::V6(a, b),
            PROTO_ICMPV6,
            128,
            0,
            [0, 1, 0, 1],
            &[7; 24],
        );
        let uppers = [
            (PROTO_TCP, &syn),
            (PROTO_UDP, &dns_q),
            (PROTO_ICMPV6, &echo),
        ];
        let chains: [&[u8]; 5] = [
            &[V6_HOP_BY_HOP],
            &[V6_ROUTING],
            &[V6_DEST_OPTS],
            &[V6_HOP_BY_HOP, V6_DEST_OPTS],
            &[V6_HOP_BY_HOP, V6_ROUTING, V6_DEST_OPTS],
        ];
        for chain in chains {
            for (upper, body) in uppers {
                let mut payload = body.to_vec();
                let mut next = upper;
                for &kind in chain.iter().rev() {
                    let mut with_header = ext_header(kind, next, b);
                    with_header.extend_from_slice(&payload);
                    payload = with_header;
                    next = kind;
                }
                self.eth_v6("ip6-ext", a, b, next, &payload);
            }
        }
        // A UDP datagram of 1600 bytes in two fragments, and a fragmented TCP segment.
        let big = self.rng().bytes(1592);
        let datagram = udp(Pseudo::V6(a, b), 7000, 1500, &big);
        let (head, tail) = datagram.split_at(1232);
        let mut first = fragment_header(PROTO_UDP, 0, true, 0xf00d);
        first.extend_from_slice(head);
        self.eth_v6("ip6-fragment", a, b, V6_FRAGMENT, &first);
        let mut last = fragment_header(PROTO_UDP, 1232 / 8, false, 0xf00d);
        last.extend_from_slice(tail);
        self.eth_v6("ip6-fragment", a, b, V6_FRAGMENT, &last);
        let mut tcp_first = ext_header(V6_HOP_BY_HOP, V6_FRAGMENT, b);
        tcp_first.extend_from_slice(&fragment_header(PROTO_TCP, 0, true, 0xbead));
        tcp_first.extend_from_slice(&syn);
        self.eth_v6("ip6-fragment", a, b, V6_HOP_BY_HOP, &tcp_first);
    }

    /// A UDP datagram in three IPv4 fragments (first with MF, middle, last), a fragmented
    /// echo request, and headers with options (IHL > 5).
    fn ipv4_fragments_and_options(&mut self) {
        let (a, b) = (v4(1, 20, 1), v4(0, 20, 2));
        let body = self.rng().bytes(2992);
        let datagram = udp(Pseudo::V4(a, b), 1024, 5000, &body);
        for (n, piece) in datagram.chunks(1480).enumerate() {
            let more = if (n + 1) * 1480 < datagram.len() {
                0x2000
            } else {
                0
            };
            let ip = ipv4(
                a,
                b,
                PROTO_UDP,
                piece,
                V4Opts {
                    id: 0xabcd,
                    flags_fragment: more | (n * 1480 / 8) as u16,
                    ..V4Opts::default()
                },
            );
            self.push(
                "ip4-fragment",
                ethernet(PEER_MAC, HOST_MAC, &[], ETH_IPV4, &ip, true),
            );
        }
        let echo = icmp(Pseudo::None, PROTO_ICMP, 8, 0, [0, 9, 0, 9], &[0x11; 1600]);
        for (n, piece) in echo.chunks(1200).enumerate() {
            let more = if n == 0 { 0x2000 } else { 0 };
            let ip = ipv4(
                b,
                a,
                PROTO_ICMP,
                piece,
                V4Opts {
                    id: 0x0102,
                    flags_fragment: more | (n * 1200 / 8) as u16,
                    ..V4Opts::default()
                },
            );
            self.push(
                "ip4-fragment",
                ethernet(HOST_MAC, PEER_MAC, &[], ETH_IPV4, &ip, true),
            );
        }
        let router_alert: &[u8] = &[0x94, 0x04, 0x00, 0x00];
        let record_route: &[u8] = &[0x01, 0x07, 0x0b, 0x04, 198, 18, 0, 1, 0, 0, 0, 0];
        let timestamp: &[u8] = &[0x44, 0x0c, 0x05, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        for options in [router_alert, record_route, timestamp] {
            let udp_dns = udp(Pseudo::V4(a, b), 1053, 53, &dns(0x0bad, "opt.lab", None));
            let syn = tcp(
                Pseudo::V4(a, b),
                &TcpSeg {
                    sport: 1999,
                    dport: 80,
                    flags: SYN,
                    seq: 1,
                    ack: 0,
                    options: &[],
                    payload: &[],
                },
            );
            let echo = icmp(Pseudo::None, PROTO_ICMP, 8, 0, [0, 3, 0, 3], &[3; 8]);
            for (proto, l4) in [(PROTO_UDP, udp_dns), (PROTO_TCP, syn), (PROTO_ICMP, echo)] {
                let ip = ipv4(
                    a,
                    b,
                    proto,
                    &l4,
                    V4Opts {
                        options,
                        tos: 0x10,
                        ..V4Opts::default()
                    },
                );
                self.push(
                    "ip4-options",
                    ethernet(PEER_MAC, HOST_MAC, &[], ETH_IPV4, &ip, true),
                );
            }
        }
    }

    /// 802.1Q frames (VLAN 100, 200, 300, with a priority) and QinQ (802.1ad outer tag).
    fn vlan_tagged(&mut self) {
        let (a, b) = (v4(0, 100, 1), v4(0, 100, 53));
        let query = udp(Pseudo::V4(a, b), 41_000, 53, &dns(DNS_ID, "vlan.lab", None));
        let dns_ip = ipv4(a, b, PROTO_UDP, &query, V4Opts::default());
        let syn = tcp(
            Pseudo::V4(a, b),
            &TcpSeg {
                sport: 41_001,
                dport: 80,
                flags: SYN,
                seq: 1,
                ack: 0,
                options: &[],
                payload: &[],
            },
        );
        let syn_ip = ipv4(a, b, PROTO_TCP, &syn, V4Opts::default());
        let get = tcp(
            Pseudo::V4(a, b),
            &TcpSeg {
                sport: 41_001,
                dport: 80,
                flags: PSH | ACK,
                seq: 2,
                ack: 2,
                options: &[],
                payload: HTTP_GET,
            },
        );
        let get_ip = ipv4(a, b, PROTO_TCP, &get, V4Opts::default());
        let (a6, b6) = (v6(0x100, 1), v6(0x100, 2));
        let syn6 = tcp(
            Pseudo::V6(a6, b6),
            &TcpSeg {
                sport: 41_002,
                dport: 443,
                flags: SYN | ECE | CWR,
                seq: 1,
                ack: 0,
                options: &[],
                payload: &[],
            },
        );
        let syn6_ip = ipv6(a6, b6, PROTO_TCP, 64, &syn6);
        let dns6 = udp(
            Pseudo::V6(a6, b6),
            41_003,
            53,
            &dns(0x6a6a, "vlan6.lab", None),
        );
        let dns6_ip = ipv6(a6, b6, PROTO_UDP, 64, &dns6);
        let who_has = arp(1, HOST_MAC, a, [0; 6], b);

        let dot1q = |vid: u16| [(ETH_VLAN, vid)];
        let with_priority = [(ETH_VLAN, (5 << 13) | 100)];
        let qinq = [(ETH_QINQ, 200), (ETH_VLAN, 100)];
        let frames: [(&Tags, u16, &[u8]); 11] = [
            (&dot1q(100), ETH_IPV4, &dns_ip),
            (&dot1q(100), ETH_IPV4, &syn_ip),
            (&dot1q(200), ETH_IPV4, &get_ip),
            (&dot1q(200), ETH_IPV6, &syn6_ip),
            (&dot1q(100), ETH_IPV6, &dns6_ip),
            (&dot1q(300), ETH_ARP, &who_has),
            (&with_priority, ETH_IPV4, &dns_ip),
            (&qinq, ETH_IPV4, &dns_ip),
            (&qinq, ETH_IPV4, &syn_ip),
            (&qinq, ETH_IPV6, &syn6_ip),
            (&dot1q(4095), ETH_IPV4, &syn_ip),
        ];
        for (tags, ethertype, payload) in frames {
            let dst = if ethertype == ETH_ARP {
                BROADCAST
            } else {
                PEER_MAC
            };
            self.push(
                "vlan",
                ethernet(dst, HOST_MAC, tags, ethertype, payload, true),
            );
        }
    }

    /// Frames cut by a snap length, frames shorter than an Ethernet header, and frames
    /// around the 60-byte minimum.
    fn truncated_and_tiny(&mut self) {
        let (a, b) = (v4(0, 50, 1), v4(1, 50, 2));
        let payload = self.rng().bytes(1446);
        let seg = TcpSeg {
            sport: 80,
            dport: 61_500,
            flags: ACK | PSH,
            seq: 1,
            ack: 1,
            options: &[],
            payload: &payload,
        };
        let big = ethernet(
            HOST_MAC,
            PEER_MAC,
            &[],
            ETH_IPV4,
            &ipv4(
                a,
                b,
                PROTO_TCP,
                &tcp(Pseudo::V4(a, b), &seg),
                V4Opts::default(),
            ),
            true,
        );
        assert_eq!(big.len(), 1500);
        for caplen in [14, 20, 34, 40, 54, 60, 96] {
            self.push_cut("truncated", big.clone(), caplen);
        }
        let (a6, b6) = (v6(0x50, 1), v6(0x50, 2));
        let big6 = ethernet(
            HOST_MAC,
            PEER_MAC,
            &[],
            ETH_IPV6,
            &ipv6(a6, b6, PROTO_TCP, 64, &tcp(Pseudo::V6(a6, b6), &seg)),
            true,
        );
        for caplen in [40, 54, 60, 74, 80] {
            self.push_cut("truncated", big6.clone(), caplen);
        }
        let query = udp(Pseudo::V4(a, b), 42_000, 53, &dns(DNS_ID, "cut.lab", None));
        let dns_frame = ethernet(
            PEER_MAC,
            HOST_MAC,
            &[],
            ETH_IPV4,
            &ipv4(a, b, PROTO_UDP, &query, V4Opts::default()),
            true,
        );
        for caplen in [42, 44] {
            self.push_cut("truncated", dns_frame.clone(), caplen);
        }
        let dns_ip = ipv4(a, b, PROTO_UDP, &query, V4Opts::default());
        let tagged = ethernet(
            PEER_MAC,
            HOST_MAC,
            &[(ETH_VLAN, 100)],
            ETH_IPV4,
            &dns_ip,
            true,
        );
        for caplen in [16, 18, 38] {
            self.push_cut("truncated", tagged.clone(), caplen);
        }

        // Runts: a few bytes of a frame that was short on the wire too.
        for len in [1usize, 6, 12, 13] {
            let mut runt = big[..len].to_vec();
            runt.resize(len, 0);
            self.push("runt", runt);
        }
        self.push_cut("runt", big[..64].to_vec(), 10);

        // Around the minimum: a bare ACK unpadded (54), padded (60), and with 8/10/12
        // payload bytes (62, 64, 66 on the wire).
        for (pad, payload_len) in [
            (false, 0usize),
            (true, 0),
            (true, 8),
            (true, 10),
            (true, 12),
        ] {
            let seg = TcpSeg {
                sport: 22,
                dport: 61_022,
                flags: ACK,
                seq: 7,
                ack: 7,
                options: &[],
                payload: &vec![0x42; payload_len],
            };
            let ip = ipv4(
                a,
                b,
                PROTO_TCP,
                &tcp(Pseudo::V4(a, b), &seg),
                V4Opts::default(),
            );
            self.push(
                "small",
                ethernet(HOST_MAC, PEER_MAC, &[], ETH_IPV4, &ip, pad),
            );
        }
    }

    /// Frames that are neither IPv4 nor IPv6: an 802.3/LLC spanning-tree BPDU, LLDP and a
    /// local experimental EtherType.
    fn not_ip(&mut self) {
        let mut bpdu = vec![0x42, 0x42, 0x03, 0, 0, 0, 0, 0];
        bpdu.extend_from_slice(&[0x80, 0x00]);
        bpdu.extend_from_slice(&ROUTER_MAC);
        bpdu.resize(38, 0);
        let frame = ethernet(STP_MAC, ROUTER_MAC, &[], bpdu.len() as u16, &bpdu, true);
        self.push("llc-stp", frame);
        let lldp = [
            0x02, 0x07, 0x04, 0x02, 0x00, 0x5e, 0x10, 0x00, 0x03, 0x00, 0x00,
        ];
        self.push(
            "lldp",
            ethernet(LLDP_MAC, ROUTER_MAC, &[], 0x88cc, &lldp, true),
        );
        let experimental = self.rng().bytes(100);
        self.push(
            "ethertype-88b5",
            ethernet(BROADCAST, PEER_MAC, &[], 0x88b5, &experimental, true),
        );
    }
}
