//! A query's frame (Ethernet, IPv4, UDP, the DNS message) written straight into a transmit
//! buffer, and a reply frame read back down to its DNS message.

use std::net::Ipv4Addr;

use sonde_dns::{NameBuf, Query, Type};
use sonde_wire::checksum::IpPair;
use sonde_wire::{ethernet, ipv4, udp, EtherType, IpProtocol, MacAddr};

/// Ethernet, IPv4 (no options) and UDP headers.
pub const HEADERS: usize = 14 + 20 + 8;
pub const DNS_PORT: u16 = 53;

/// What is fixed for every query of a run.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub src_mac: MacAddr,
    pub gateway_mac: MacAddr,
    pub src_ip: Ipv4Addr,
}

/// One query to send.
pub struct Outgoing<'a> {
    pub server: Ipv4Addr,
    pub port: u16,
    pub id: u16,
    pub name: &'a NameBuf,
    pub qtype: Type,
    pub recursion_desired: bool,
    pub udp_payload: Option<u16>,
}

/// Writes the frame of `q` into `buf`; returns its length (0 if `buf` cannot hold it, which a
/// 2 KiB frame buffer always can: a query is at most 12 + 255 + 4 + 11 bytes).
pub fn write_query(link: &Link, q: &Outgoing<'_>, ip_ident: u16, buf: &mut [u8]) -> usize {
    let query = Query {
        id: q.id,
        name: q.name,
        qtype: q.qtype,
        recursion_desired: q.recursion_desired,
        udp_payload: q.udp_payload,
    };
    let total = HEADERS + query.len();
    let Some(buf) = buf.get_mut(..total) else {
        return 0;
    };
    if query.write(&mut buf[HEADERS..]).is_err() {
        return 0;
    }
    let udp_len = total - 14 - 20;
    {
        let mut frame = ethernet::Frame::new_unchecked(&mut *buf);
        frame.set_dst_addr(link.gateway_mac);
        frame.set_src_addr(link.src_mac);
        frame.set_ethertype(EtherType::Ipv4);
    }
    let ips = IpPair::V4 {
        src: link.src_ip,
        dst: q.server,
    };
    {
        let mut datagram = udp::Packet::new_unchecked(&mut buf[34..]);
        udp::Repr {
            src_port: q.port,
            dst_port: DNS_PORT,
            payload_len: udp_len - udp::HEADER_LEN,
        }
        .emit(&mut datagram, &ips);
    }
    let mut packet = ipv4::Packet::new_unchecked(&mut buf[14..]);
    ipv4::Repr {
        src_addr: link.src_ip,
        dst_addr: q.server,
        protocol: IpProtocol::UDP,
        payload_len: udp_len,
        ttl: 64,
        ident: ip_ident,
        dont_frag: true,
    }
    .emit(&mut packet);
    total
}

/// A UDP datagram from port 53 to us, down to its DNS message.
pub struct Incoming<'a> {
    pub server: Ipv4Addr,
    pub port: u16,
    pub message: &'a [u8],
}

/// Why a received frame is not a reply at all (counted, never a row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReply {
    /// Not IPv4/UDP to our address from port 53, or a fragment.
    Other,
    /// Its IPv4 or UDP checksum is wrong.
    Checksum,
}

/// Reads `frame` as a reply: IPv4, not a fragment, UDP from port 53 to `ours`. The checksums
/// are verified unless `verify` is off (the kernel left them for offload: never on a wire).
pub fn read_reply(frame: &[u8], ours: Ipv4Addr, verify: bool) -> Result<Incoming<'_>, NotReply> {
    let eth = ethernet::Frame::new_checked(frame).map_err(|_| NotReply::Other)?;
    if eth.ethertype() != EtherType::Ipv4 {
        return Err(NotReply::Other);
    }
    let ip = ipv4::Packet::new_checked(&frame[14..]).map_err(|_| NotReply::Other)?;
    if ip.protocol() != IpProtocol::UDP || ip.is_fragment() || ip.dst_addr() != ours {
        return Err(NotReply::Other);
    }
    if verify && !ip.verify_checksum() {
        return Err(NotReply::Checksum);
    }
    let ip_payload = &frame[14 + ip.header_len()..14 + usize::from(ip.total_len())];
    let datagram = udp::Packet::new_checked(ip_payload).map_err(|_| NotReply::Other)?;
    if datagram.src_port() != DNS_PORT {
        return Err(NotReply::Other);
    }
    if verify && datagram.checksum() != 0 && !datagram.verify_checksum_v4(ip.src_addr(), ours) {
        return Err(NotReply::Checksum);
    }
    let port = datagram.dst_port();
    let message = &ip_payload[udp::HEADER_LEN..usize::from(datagram.len())];
    Ok(Incoming {
        server: ip.src_addr(),
        port,
        message,
    })
}
