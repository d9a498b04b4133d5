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

#[cfg(test)]
mod tests {
    use super::*;

    const US: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
    const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 64);

    fn link() -> Link {
        Link {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            gateway_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: US,
        }
    }

    fn query_frame() -> Vec<u8> {
        let name = NameBuf::from_text("www.d1.example").unwrap();
        let q = Outgoing {
            server: SERVER,
            port: 61_234,
            id: 0xbeef,
            name: &name,
            qtype: Type::AAAA,
            recursion_desired: true,
            udp_payload: Some(1232),
        };
        let mut buf = vec![0u8; 2048];
        let len = write_query(&link(), &q, 7, &mut buf);
        buf.truncate(len);
        buf
    }

    #[test]
    fn a_query_frame_has_right_headers_checksums_and_question() {
        let frame = query_frame();
        let ip = ipv4::Packet::new_checked(&frame[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (US, SERVER));
        let datagram = udp::Packet::new_checked(ip.payload()).unwrap();
        assert!(datagram.verify_checksum_v4(US, SERVER));
        assert_eq!((datagram.src_port(), datagram.dst_port()), (61_234, 53));
        let m = sonde_dns::Message::parse(datagram.payload()).unwrap();
        assert_eq!(m.header().id(), 0xbeef);
        let name = NameBuf::from_text("www.d1.example").unwrap();
        assert!(m.asks(name.wire(), Type::AAAA, sonde_dns::CLASS_IN));
        assert_eq!(m.edns().map(|e| e.udp_payload_size), Some(1232));
    }

    /// The query frame turned into its answer's: addresses and ports swapped, checksums made.
    fn answer_to(frame: &[u8]) -> Vec<u8> {
        let mut f = frame.to_vec();
        let len = f.len();
        let ips = IpPair::V4 {
            src: SERVER,
            dst: US,
        };
        {
            let mut d = udp::Packet::new_unchecked(&mut f[34..len]);
            d.set_dst_port(61_234);
            d.set_src_port(53);
            d.fill_checksum(&ips);
        }
        let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
        ip.set_src_addr(SERVER);
        ip.set_dst_addr(US);
        ip.fill_checksum();
        f
    }

    #[test]
    fn a_reply_is_read_down_to_its_message_and_a_flipped_bit_is_caught() {
        let answer = answer_to(&query_frame());
        let reply = read_reply(&answer, US, true).ok().unwrap();
        assert_eq!((reply.server, reply.port), (SERVER, 61_234));
        assert_eq!(reply.message, &answer[HEADERS..]);
        let mut flipped = answer.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(
            read_reply(&flipped, US, true).err(),
            Some(NotReply::Checksum)
        );
        assert!(
            read_reply(&flipped, US, false).is_ok(),
            "unverified when offloaded"
        );
        assert_eq!(
            read_reply(&answer, SERVER, true).err(),
            Some(NotReply::Other)
        );
        for cut in 0..answer.len() {
            let _ = read_reply(&answer[..cut], US, true);
        }
    }
}
