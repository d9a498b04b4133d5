//! `sonde capture -r FILE` without `-w`: every packet kept, one line on stdout, in tcpdump's
//! manner (`tcpdump -nr FILE`): the time (UTC, microseconds), then what the packet is, its
//! addresses as numbers (nothing is ever looked up). Ethernet, raw IP and Linux cooked
//! (`-i any`) captures are read down to TCP, UDP and ICMP; any other link type is shown by its
//! length.

use std::fmt::Write as _;
use std::net::IpAddr;

use sonde_wire::{ethernet, icmpv4, ipv4, ipv6, tcp, udp, IpProtocol};

/// libpcap's link types (DLT_) the lines read.
const DLT_ETHERNET: i32 = 1;
const DLT_RAW: i32 = 12;
const DLT_RAW_OPENBSD: i32 = 14;
const DLT_LINUX_SLL: i32 = 113;
const DLT_LINUX_SLL2: i32 = 276;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPES_VLAN: [u16; 2] = [0x8100, 0x88a8];

/// The line of a packet captured at `ts_ns` (nanoseconds since 1970), `data` as captured of
/// `wire_len` bytes, on a link of type `dlt`.
pub fn line(ts_ns: u64, dlt: i32, data: &[u8], wire_len: u32) -> String {
    let mut line = time_of_day(ts_ns);
    line.push(' ');
    let what = match dlt {
        DLT_ETHERNET => ethernet_frame(data),
        DLT_RAW | DLT_RAW_OPENBSD => raw_ip(data),
        DLT_LINUX_SLL if data.len() >= 16 => by_ethertype(be16(&data[14..16]), &data[16..]),
        DLT_LINUX_SLL2 if data.len() >= 20 => by_ethertype(be16(&data[0..2]), &data[20..]),
        _ => format!("link type {dlt}, length {wire_len}"),
    };
    line.push_str(&what);
    line
}

/// `HH:MM:SS.uuuuuu` of the day, UTC.
fn time_of_day(ts_ns: u64) -> String {
    let seconds = ts_ns / 1_000_000_000;
    let micros = (ts_ns % 1_000_000_000) / 1_000;
    let day = seconds % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{micros:06}",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn ethernet_frame(data: &[u8]) -> String {
    match ethernet::Frame::new_checked(data) {
        Ok(frame) => by_ethertype(u16::from(frame.ethertype()), frame.payload()),
        Err(_) => format!("[|ether], length {}", data.len()),
    }
}

/// What follows a link header whose type field says `ethertype`.
fn by_ethertype(ethertype: u16, payload: &[u8]) -> String {
    match ethertype {
        ETHERTYPE_IPV4 => ip4(payload),
        ETHERTYPE_IPV6 => ip6(payload),
        ETHERTYPE_ARP => format!("ARP, length {}", payload.len()),
        vlan if ETHERTYPES_VLAN.contains(&vlan) && payload.len() >= 4 => format!(
            "vlan {}, {}",
            be16(&payload[0..2]) & 0x0fff,
            by_ethertype(be16(&payload[2..4]), &payload[4..])
        ),
        other => format!("ethertype 0x{other:04x}, length {}", payload.len()),
    }
}

fn raw_ip(data: &[u8]) -> String {
    match data.first().map(|b| b >> 4) {
        Some(4) => ip4(data),
        Some(6) => ip6(data),
        _ => format!("[|ip], length {}", data.len()),
    }
}

fn ip4(data: &[u8]) -> String {
    // A packet cut by the snap length still has its header: read what is there.
    let Ok(ip) = ipv4::Packet::new_quoted(data) else {
        return format!("IP [|ip], length {}", data.len());
    };
    let length = usize::from(ip.total_len()).saturating_sub(ip.header_len());
    let (src, dst) = (IpAddr::from(ip.src_addr()), IpAddr::from(ip.dst_addr()));
    if ip.frag_offset() != 0 {
        return format!(
            "IP {src} > {dst}: ip-proto-{}, fragment, length {length}",
            ip.protocol().0
        );
    }
    format!(
        "IP {}",
        transport(ip.protocol(), src, dst, ip.payload(), length)
    )
}

fn ip6(data: &[u8]) -> String {
    let Ok(ip) = ipv6::Packet::new_quoted(data) else {
        return format!("IP6 [|ip6], length {}", data.len());
    };
    let (src, dst) = (IpAddr::from(ip.src_addr()), IpAddr::from(ip.dst_addr()));
    let length = usize::from(ip.payload_len());
    format!(
        "IP6 {}",
        transport(ip.next_header(), src, dst, ip.payload(), length)
    )
}

/// `src.port > dst.port: …` for TCP and UDP, `src > dst: …` for the rest; `length` is the
/// transport's bytes on the wire (the payload may have been cut).
fn transport(
    protocol: IpProtocol,
    src: IpAddr,
    dst: IpAddr,
    payload: &[u8],
    length: usize,
) -> String {
    match protocol {
        IpProtocol::TCP => match tcp::Packet::new_checked(payload) {
            Ok(t) => {
                let data = length.saturating_sub(t.header_len());
                let mut line = format!(
                    "{src}.{} > {dst}.{}: Flags [{}], seq {}",
                    t.src_port(),
                    t.dst_port(),
                    flags(t.flags()),
                    t.seq_number()
                );
                if t.flags().contains(tcp::Flags::ACK) {
                    let _ = write!(line, ", ack {}", t.ack_number());
                }
                let _ = write!(line, ", win {}, length {data}", t.window_len());
                line
            }
            Err(_) => format!("{src} > {dst}: tcp [|tcp]"),
        },
        IpProtocol::UDP => match udp::Packet::new_quoted(payload) {
            Ok(u) => format!(
                "{src}.{} > {dst}.{}: UDP, length {}",
                u.src_port(),
                u.dst_port(),
                usize::from(u.len()).saturating_sub(8)
            ),
            Err(_) => format!("{src} > {dst}: udp [|udp]"),
        },
        IpProtocol::ICMP => match icmpv4::Packet::new_checked(payload) {
            Ok(i) => format!("{src} > {dst}: ICMP {}, length {length}", icmp(&i)),
            Err(_) => format!("{src} > {dst}: icmp [|icmp]"),
        },
        IpProtocol(58) => format!("{src} > {dst}: ICMP6, length {length}"),
        other => format!("{src} > {dst}: ip-proto-{}, length {length}", other.0),
    }
}

/// tcpdump's letters of TCP flags, in its order: F S R P . (ACK) U E W.
fn flags(f: tcp::Flags) -> String {
    use tcp::Flags as F;
    let letters = [
        (F::FIN, 'F'),
        (F::SYN, 'S'),
        (F::RST, 'R'),
        (F::PSH, 'P'),
        (F::ACK, '.'),
        (F::URG, 'U'),
        (F::ECE, 'E'),
        (F::CWR, 'W'),
    ];
    let shown: String = letters
        .iter()
        .filter(|(flag, _)| f.contains(*flag))
        .map(|(_, letter)| *letter)
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown
    }
}

fn icmp(i: &icmpv4::Packet<&[u8]>) -> String {
    use icmpv4::Message as M;
    let echo = |what: &str| format!("{what}, id {}, seq {}", i.echo_ident(), i.echo_seq_no());
    match i.msg_type() {
        M::ECHO_REQUEST => echo("echo request"),
        M::ECHO_REPLY => echo("echo reply"),
        M::DST_UNREACHABLE => format!("unreachable, code {}", i.msg_code()),
        M::TIME_EXCEEDED => "time exceeded in-transit".into(),
        other => format!("type {}, code {}", other.0, i.msg_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of a TCP segment from 198.19.255.1:61000 to 198.18.0.7:80 with
    /// `flags` and `data` bytes of payload.
    fn tcp_frame(flags: u8, data: usize) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + data];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((40 + data) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 19, 255, 1]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 7]);
        let t = &mut f[34..54];
        t[0..2].copy_from_slice(&61000u16.to_be_bytes());
        t[2..4].copy_from_slice(&80u16.to_be_bytes());
        t[4..8].copy_from_slice(&1234u32.to_be_bytes());
        t[8..12].copy_from_slice(&99u32.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&1024u16.to_be_bytes());
        f
    }

    #[test]
    fn packets_read_as_tcpdump_prints_them() {
        let ts = 1_795_907_081_799_493_123;
        let syn = tcp_frame(0x02, 0);
        assert_eq!(
            line(ts, DLT_ETHERNET, &syn, syn.len() as u32),
            "23:04:41.799493 IP 198.19.255.1.61000 > 198.18.0.7.80: Flags [S], seq 1234, win 1024, length 0"
        );
        let reply = tcp_frame(0x18, 21);
        assert!(line(ts, DLT_ETHERNET, &reply, 0)
            .ends_with("Flags [P.], seq 1234, ack 99, win 1024, length 21"));
        // Cut by a snap length of 60: the header still reads, the length is the wire's.
        let cut = &reply[..60];
        assert!(line(ts, DLT_ETHERNET, cut, reply.len() as u32).ends_with("length 21"));
        // Raw IP, and a cooked (-i any) header.
        assert!(line(ts, DLT_RAW, &syn[14..], 40).contains("IP 198.19.255.1.61000 > 198.18.0.7.80"));
        let mut cooked = vec![0u8; 16];
        cooked[14..16].copy_from_slice(&0x0800u16.to_be_bytes());
        cooked.extend_from_slice(&syn[14..]);
        assert!(line(ts, DLT_LINUX_SLL, &cooked, 56).contains("Flags [S]"));
        // What cannot be read says so, and never panics.
        for junk in [&[][..], &[0x45], &syn[..20], &syn[..40]] {
            for dlt in [DLT_ETHERNET, DLT_RAW, DLT_LINUX_SLL, DLT_LINUX_SLL2, 147] {
                let _ = line(ts, dlt, junk, 100);
            }
        }
        assert_eq!(
            line(0, 147, &[1, 2], 2),
            "00:00:00.000000 link type 147, length 2"
        );
    }
}
