//! Header rewrites of an IP packet in place (TTL or hop limit, DSCP, TCP/UDP ports), each with
//! its checksums updated incrementally (RFC 1624), so a rewrite costs a few additions whatever
//! the packet's length.

use sonde_wire::checksum::update16;

/// What a `rewrite` rule changes; `None` leaves a field as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: Option<u8>,
    /// The 6-bit DSCP of the traffic class (ECN bits are kept).
    pub dscp: Option<u8>,
    /// TCP or UDP source port.
    pub sport: Option<u16>,
    /// TCP or UDP destination port.
    pub dport: Option<u16>,
}

const TCP: u8 = 6;
const UDP: u8 = 17;
/// Where the checksum sits in a TCP and in a UDP header.
const TCP_CHECKSUM: usize = 16;
const UDP_CHECKSUM: usize = 6;

impl Rewrite {
    /// Parses `ttl=64,dscp=46,sport=1234,dport=80` (any subset, at least one). A value out of
    /// its field's range is refused in one line that names the field and the range.
    pub fn parse(text: &str) -> anyhow::Result<Rewrite> {
        let mut rw = Rewrite::default();
        for part in text.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("rewrite \"{part}\": expected key=value (ttl, dscp, sport, dport)")
            })?;
            let in_range = |what: &str, max: u16| -> anyhow::Result<u16> {
                match value.parse::<u16>() {
                    Ok(v) if v <= max => Ok(v),
                    _ => anyhow::bail!(
                        "rewrite {key}={value}: {what} is a whole number from 0 to {max}"
                    ),
                }
            };
            match key {
                "ttl" | "hlim" => rw.ttl = Some(in_range("the TTL (hop limit)", 255)? as u8),
                "dscp" => rw.dscp = Some(in_range("DSCP", 63)? as u8),
                "sport" => rw.sport = Some(in_range("a port", u16::MAX)?),
                "dport" => rw.dport = Some(in_range("a port", u16::MAX)?),
                _ => anyhow::bail!("rewrite: unknown field \"{key}\" (ttl, dscp, sport, dport)"),
            }
        }
        Ok(rw)
    }

    /// Applies the rewrite to the IP packet `ip` (starting at its IP header). Returns whether a
    /// byte changed. Packets that are not IP, too short, or (for ports) not the first fragment
    /// of TCP or UDP are left as they are.
    pub fn apply(&self, ip: &mut [u8]) -> bool {
        match ip.first().map(|b| b >> 4) {
            Some(4) => self.apply_v4(ip),
            Some(6) => self.apply_v6(ip),
            _ => false,
        }
    }

    fn apply_v4(&self, ip: &mut [u8]) -> bool {
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ihl < 20 || ip.len() < ihl {
            return false;
        }
        let mut changed = false;
        if let Some(ttl) = self.ttl {
            // TTL shares a 16-bit word with the protocol.
            changed |= set_byte_in_word(ip, 8, 0, ttl, 10);
        }
        if let Some(dscp) = self.dscp {
            let tos = (dscp << 2) | (ip[1] & 0x03);
            changed |= set_byte_in_word(ip, 0, 1, tos, 10);
        }
        let first_fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
        if first_fragment {
            let protocol = ip[9];
            changed |= self.apply_ports(&mut ip[ihl..], protocol, false);
        }
        changed
    }

    fn apply_v6(&self, ip: &mut [u8]) -> bool {
        if ip.len() < 40 {
            return false;
        }
        let mut changed = false;
        if let Some(hlim) = self.ttl {
            changed |= std::mem::replace(&mut ip[7], hlim) != hlim;
        }
        if let Some(dscp) = self.dscp {
            // The traffic class spans the low nibble of byte 0 and the high nibble of byte 1.
            let tclass = (dscp << 2) | ((ip[1] >> 4) & 0x03);
            let (b0, b1) = (
                (ip[0] & 0xf0) | (tclass >> 4),
                (ip[1] & 0x0f) | (tclass << 4),
            );
            changed |= (ip[0], ip[1]) != (b0, b1);
            (ip[0], ip[1]) = (b0, b1);
        }
        // Ports only directly after the fixed header: extension headers are left alone.
        let next_header = ip[6];
        changed |= self.apply_ports(&mut ip[40..], next_header, true);
        changed
    }

    /// Rewrites the ports of a TCP or UDP header at the start of `l4`.
    fn apply_ports(&self, l4: &mut [u8], protocol: u8, v6: bool) -> bool {
        let checksum_at = match protocol {
            TCP if l4.len() >= 20 => TCP_CHECKSUM,
            UDP if l4.len() >= 8 => UDP_CHECKSUM,
            _ => return false,
        };
        // An IPv4 UDP checksum of 0 means "none" and stays 0; IPv6 has no such case.
        let has_checksum = protocol == TCP || v6 || l4[6..8] != [0, 0];
        let mut changed = false;
        for (at, port) in [(0, self.sport), (2, self.dport)] {
            let Some(port) = port else { continue };
            let old = u16::from_be_bytes([l4[at], l4[at + 1]]);
            if old == port {
                continue;
            }
            l4[at..at + 2].copy_from_slice(&port.to_be_bytes());
            if has_checksum {
                let sum = u16::from_be_bytes([l4[checksum_at], l4[checksum_at + 1]]);
                let mut new = update16(sum, old, port);
                if protocol == UDP && new == 0 {
                    new = 0xffff; // 0 would mean "no checksum" (RFC 768).
                }
                l4[checksum_at..checksum_at + 2].copy_from_slice(&new.to_be_bytes());
            }
            changed = true;
        }
        changed
    }
}

/// Sets byte `byte` (0 = high, 1 = low) of the 16-bit word at `word` to `value`, updating the
/// 16-bit checksum at `checksum` over that word. True if the byte changed.
fn set_byte_in_word(buf: &mut [u8], word: usize, byte: usize, value: u8, checksum: usize) -> bool {
    if buf[word + byte] == value {
        return false;
    }
    let old = u16::from_be_bytes([buf[word], buf[word + 1]]);
    buf[word + byte] = value;
    let new = u16::from_be_bytes([buf[word], buf[word + 1]]);
    let sum = u16::from_be_bytes([buf[checksum], buf[checksum + 1]]);
    buf[checksum..checksum + 2].copy_from_slice(&update16(sum, old, new).to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use sonde_wire::checksum::{checksum, fold, pseudo_header_v4, pseudo_header_v6, sum};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// An IPv4 packet with a TCP or UDP segment and correct checksums.
    fn v4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let l4_len = if protocol == TCP { 20 } else { 8 } + payload.len();
        let mut p = vec![0u8; 20 + l4_len];
        p[0] = 0x45;
        p[1] = 0x02; // ECN bits set: they must survive a DSCP rewrite
        p[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&[198, 19, 254, 1]);
        p[16..20].copy_from_slice(&[198, 19, 254, 2]);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&5201u16.to_be_bytes());
        if protocol == TCP {
            p[32] = 5 << 4;
            p[40..].copy_from_slice(payload);
        } else {
            p[24..26].copy_from_slice(&(l4_len as u16).to_be_bytes());
            p[28..].copy_from_slice(payload);
        }
        fix_v4(&mut p);
        p
    }

    /// Recomputes every checksum of an IPv4 packet from scratch.
    fn fix_v4(p: &mut [u8]) {
        p[10..12].fill(0);
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let at = 20
            + if p[9] == TCP {
                TCP_CHECKSUM
            } else {
                UDP_CHECKSUM
            };
        p[at..at + 2].fill(0);
        let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
        let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
        let l4 = p.len() - 20;
        let c = !fold(pseudo_header_v4(src, dst, p[9], l4 as u16) + sum(&p[20..]));
        let c = if c == 0 && p[9] == UDP { 0xffff } else { c };
        p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    fn v6_udp(payload: &[u8]) -> Vec<u8> {
        let l4_len = 8 + payload.len();
        let mut p = vec![0u8; 40 + l4_len];
        p[0] = 0x60;
        p[1] = 0x10; // ECN 01 in the traffic class's low bits
        p[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        p[6] = UDP;
        p[7] = 64;
        p[8..24].copy_from_slice(&"2001:2:0:fe::1".parse::<Ipv6Addr>().unwrap().octets());
        p[24..40].copy_from_slice(&"2001:2:0:fe::2".parse::<Ipv6Addr>().unwrap().octets());
        p[40..42].copy_from_slice(&40000u16.to_be_bytes());
        p[42..44].copy_from_slice(&5201u16.to_be_bytes());
        p[44..46].copy_from_slice(&(l4_len as u16).to_be_bytes());
        p[48..].copy_from_slice(payload);
        fix_v6(&mut p);
        p
    }

    fn fix_v6(p: &mut [u8]) {
        p[46..48].fill(0);
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).unwrap());
        let c = !fold(pseudo_header_v6(&src, &dst, UDP, (p.len() - 40) as u32) + sum(&p[40..]));
        p[46..48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    }

    fn every_rewrite() -> Vec<Rewrite> {
        let mut all = Vec::new();
        for ttl in [None, Some(1), Some(255)] {
            for dscp in [None, Some(0), Some(46), Some(63)] {
                for sport in [None, Some(0), Some(443), Some(65535)] {
                    for dport in [None, Some(9), Some(0xfffe)] {
                        all.push(Rewrite {
                            ttl,
                            dscp,
                            sport,
                            dport,
                        });
                    }
                }
            }
        }
        all
    }

    #[test]
    fn incremental_checksums_equal_a_full_recompute() {
        let payloads: [&[u8]; 3] = [b"", b"x", b"odd length payload!"];
        for rw in every_rewrite() {
            for payload in payloads {
                for protocol in [TCP, UDP] {
                    let mut p = v4(protocol, payload);
                    rw.apply(&mut p);
                    let mut expected = p.clone();
                    fix_v4(&mut expected);
                    assert_eq!(p, expected, "{rw:?} on v4 protocol {protocol}");
                }
                let mut p = v6_udp(payload);
                rw.apply(&mut p);
                let mut expected = p.clone();
                fix_v6(&mut expected);
                assert_eq!(p, expected, "{rw:?} on v6");
            }
        }
    }

    #[test]
    fn fields_land_where_they_belong_and_ecn_is_kept() {
        let rw = Rewrite::parse("ttl=9,dscp=46,sport=1,dport=2").unwrap();
        let mut p = v4(TCP, b"abc");
        assert!(rw.apply(&mut p));
        assert_eq!((p[8], p[1] >> 2, p[1] & 3), (9, 46, 0x02));
        assert_eq!((&p[20..22], &p[22..24]), (&[0, 1][..], &[0, 2][..]));
        assert!(
            !rw.apply(&mut p),
            "a second identical rewrite changes nothing"
        );
        let mut q = v6_udp(b"abc");
        rw.apply(&mut q);
        let tclass = (q[0] << 4) | (q[1] >> 4);
        assert_eq!((q[7], tclass >> 2, tclass & 3), (9, 46, 0x01));
    }

    #[test]
    fn a_zero_udp_checksum_stays_zero_and_later_fragments_keep_their_bytes() {
        let mut p = v4(UDP, b"abcd");
        p[26..28].fill(0);
        Rewrite::parse("dport=53").unwrap().apply(&mut p);
        assert_eq!((&p[22..24], &p[26..28]), (&[0, 53][..], &[0, 0][..]));
        let mut frag = v4(UDP, b"abcd");
        frag[7] = 10; // fragment offset 80 bytes: no UDP header here
        fix_v4(&mut frag);
        let before = frag[20..].to_vec();
        Rewrite::parse("sport=7").unwrap().apply(&mut frag);
        assert_eq!(frag[20..], before[..]);
    }

    #[test]
    fn hostile_input_never_panics() {
        let rw = Rewrite::parse("ttl=1,dscp=1,sport=1,dport=1").unwrap();
        for len in 0..64 {
            for first in [0x45u8, 0x4f, 0x41, 0x60, 0x00, 0xff] {
                let mut p = vec![0xa5u8; len];
                if let Some(b) = p.first_mut() {
                    *b = first;
                }
                rw.apply(&mut p);
            }
        }
    }

    #[test]
    fn bad_rewrites_are_named() {
        for (text, needle) in [
            ("ttl", "key=value"),
            (
                "ttl=300",
                "rewrite ttl=300: the TTL (hop limit) is a whole number from 0 to 255",
            ),
            (
                "hlim=-1",
                "hlim=-1: the TTL (hop limit) is a whole number from 0 to 255",
            ),
            ("dscp=64", "dscp=64: DSCP is a whole number from 0 to 63"),
            ("dscp=x", "from 0 to 63"),
            (
                "sport=65536",
                "sport=65536: a port is a whole number from 0 to 65535",
            ),
            ("dport=", "dport=: a port"),
            ("mss=1", "unknown field"),
        ] {
            let e = Rewrite::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
            assert!(!e.contains("target type"), "{text}: {e}");
        }
        let rw = Rewrite::parse("ttl=255,dscp=63,sport=0,dport=65535").unwrap();
        assert_eq!(
            (rw.ttl, rw.dscp, rw.sport, rw.dport),
            (Some(255), Some(63), Some(0), Some(65535))
        );
    }
}
