//! The Internet checksum (RFC 1071) with pseudo-headers and RFC 1624
//! incremental updates.
//!
//! [`sum`] returns a partial ones'-complement sum that callers add together
//! (header, pseudo-header, payload) before a single [`fold`] and complement.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Ones'-complement sum of `data` as big-endian 16-bit words, an odd trailing
/// byte padded with zero.
///
/// The result is only partially folded: it is congruent to the 16-bit sum and
/// at most `0xFFFF`, so thousands of results can be added in a `u32` before
/// calling [`fold`].
pub fn sum(data: &[u8]) -> u32 {
    // Two properties keep this fast (RFC 1071 section 2). The ones'-complement
    // sum is byte-order independent, so native-endian words can be added and
    // the folded result swapped once at the end. And adding 32-bit words is
    // equivalent to adding their 16-bit halves, since 2^16 = 1 (mod 2^16 - 1);
    // a u64 cannot overflow before 16 GiB of input, so the loop needs no
    // carry handling and vectorizes.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes(chunk.try_into().expect("chunk of 8"));
        acc += (word >> 32) + (word & 0xffff_ffff);
    }
    let mut words = chunks.remainder().chunks_exact(2);
    for pair in &mut words {
        acc += u64::from(u16::from_ne_bytes([pair[0], pair[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    u32::from(u16::from_be(acc as u16))
}

/// Folds the carries of a partial sum into 16 bits. Not complemented.
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The Internet checksum of `data`: the complement of its folded sum.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Partial sum of the IPv4 pseudo-header covered by TCP and UDP checksums;
/// `length` is the transport header plus payload.
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, length: u16) -> u32 {
    sum(&src.octets()) + sum(&dst.octets()) + u32::from(protocol) + u32::from(length)
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 section 8.1) covered by
/// TCP, UDP and ICMPv6 checksums; `length` is the upper-layer packet length.
pub fn pseudo_header_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u32 {
    sum(&src.octets())
        + sum(&dst.octets())
        + (length >> 16)
        + (length & 0xffff)
        + u32::from(next_header)
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word of the covered data
/// changes from `old` to `new`, i.e. `~(~HC + ~m + m')`. Unlike RFC 1141's
/// shortcut it never produces `0xFFFF` where a full recomputation gives `0`.
pub fn update16(old_checksum: u16, old: u16, new: u16) -> u16 {
    !fold(u32::from(!old_checksum) + u32::from(!old) + u32::from(new))
}

/// [`update16`] for a 32-bit aligned field such as an IPv4 address or a TCP
/// sequence number.
pub fn update32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let halves = |v: u32| [(v >> 16) as u16, v as u16];
    let [old_hi, old_lo] = halves(old);
    let [new_hi, new_lo] = halves(new);
    let sum = u32::from(!old_checksum)
        + u32::from(!old_hi)
        + u32::from(!old_lo)
        + u32::from(new_hi)
        + u32::from(new_lo);
    !fold(sum)
}

/// Source and destination of the enclosing IP header: what TCP, UDP and
/// ICMPv6 checksums need besides the segment itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpPair {
    /// Addresses of an IPv4 header.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// Addresses of an IPv6 header.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

impl IpPair {
    /// Partial sum of the pseudo-header for `protocol` over `length` bytes.
    pub fn pseudo_header(&self, protocol: u8, length: usize) -> u32 {
        // Lengths come from buffers, which IP bounds far below 2^32.
        let length = length as u32;
        match self {
            IpPair::V4 { src, dst } => {
                let length = (length >> 16) + (length & 0xffff);
                sum(&src.octets()) + sum(&dst.octets()) + u32::from(protocol) + length
            }
            IpPair::V6 { src, dst } => pseudo_header_v6(src, dst, protocol, length),
        }
    }

    /// Checksum of a transport `segment` (checksum field included) under this
    /// pseudo-header: `0` when the stored checksum is right, the value to store
    /// when the field is zeroed.
    pub(crate) fn segment_checksum(&self, protocol: u8, segment: &[u8]) -> u16 {
        !fold(self.pseudo_header(protocol, segment.len()) + sum(segment))
    }
}

impl From<(Ipv4Addr, Ipv4Addr)> for IpPair {
    fn from((src, dst): (Ipv4Addr, Ipv4Addr)) -> Self {
        IpPair::V4 { src, dst }
    }
}

impl From<(Ipv6Addr, Ipv6Addr)> for IpPair {
    fn from((src, dst): (Ipv6Addr, Ipv6Addr)) -> Self {
        IpPair::V6 { src, dst }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::XorShift;

    /// The plain word-at-a-time definition, to check the fast path against.
    fn naive_sum(data: &[u8]) -> u32 {
        let mut acc = 0u32;
        for pair in data.chunks(2) {
            let hi = u32::from(pair[0]) << 8;
            acc += hi | pair.get(1).copied().map_or(0, u32::from);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc
    }

    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn odd_trailing_byte_is_padded() {
        assert_eq!(fold(sum(&[0xab])), 0xab00);
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(sum(&[]), 0);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn all_ones_stays_negative_zero() {
        for len in [2, 8, 16, 40, 1500] {
            assert_eq!(fold(sum(&vec![0xff; len])), 0xffff, "len {len}");
        }
    }

    #[test]
    fn fast_sum_matches_naive_definition() {
        let mut rng = XorShift::new(0x5eed);
        for len in 0..300 {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            assert_eq!(fold(sum(&data)), fold(naive_sum(&data)), "len {len}");
        }
    }

    #[test]
    fn partial_sums_compose() {
        let mut rng = XorShift::new(7);
        let data: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
        for split in (0..1000).step_by(2) {
            let (a, b) = data.split_at(split);
            assert_eq!(fold(sum(a) + sum(b)), fold(sum(&data)));
        }
    }

    #[test]
    fn rfc1624_corner_case() {
        // Section 4: the other words sum to 0xCD7A and m goes 0x5555 -> 0x3285;
        // a recomputation yields 0x0000, which eqn. 3 must reproduce.
        let old_checksum = !fold(0xcd7a + 0x5555);
        assert_eq!(old_checksum, 0xdd2f);
        assert_eq!(update16(old_checksum, 0x5555, 0x3285), 0x0000);
        assert_eq!(!fold(0xcd7a + 0x3285), 0x0000);
    }

    #[test]
    fn update_of_unchanged_word_is_identity() {
        for hc in [0x0000, 0x0001, 0x1234, 0xfffe] {
            assert_eq!(update16(hc, 0xabcd, 0xabcd), hc);
            assert_eq!(update32(hc, 0xdead_beef, 0xdead_beef), hc);
        }
    }

    /// Random buffers with one random field rewritten: the incremental result
    /// must equal a full recomputation, including when the field goes to or
    /// from 0x0000 and 0xFFFF.
    #[test]
    fn incremental_update_matches_recomputation() {
        let mut rng = XorShift::new(0x1624);
        let specials = [0x0000, 0xffff, 0x0001, 0xfffe];
        for round in 0..20_000 {
            let mut data: Vec<u8> = (0..20).map(|_| rng.next() as u8).collect();
            // Keep one word non-zero: an all-zero buffer has checksum 0xFFFF
            // while eqn. 3 can only produce 0x0000 for it (RFC 1624 section 3).
            data[0] |= 1;
            let at = 2 + 2 * (rng.next() as usize % 9);
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            let new = if round % 4 == 0 {
                specials[(round / 4) % 4]
            } else {
                rng.next() as u16
            };
            let before = checksum(&data);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            assert_eq!(update16(before, old, new), checksum(&data), "round {round}");

            let at = 4 * (1 + rng.next() as usize % 4);
            let old = u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
            let new = if round % 3 == 0 {
                [0, u32::MAX, 0xffff, 0xffff_0000][round % 4]
            } else {
                rng.next() as u32
            };
            let before = checksum(&data);
            data[at..at + 4].copy_from_slice(&new.to_be_bytes());
            assert_eq!(update32(before, old, new), checksum(&data), "round {round}");
        }
    }

    #[test]
    fn pseudo_headers() {
        let (s4, d4) = (Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(
            fold(pseudo_header_v4(s4, d4, 6, 40)),
            fold(0xc000 + 0x020a + 0xc633 + 0x6407 + 6 + 40)
        );
        assert_eq!(
            fold(IpPair::from((s4, d4)).pseudo_header(6, 40)),
            fold(pseudo_header_v4(s4, d4, 6, 40))
        );
        let s6: Ipv6Addr = "2001:db8::a".parse().unwrap();
        let d6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let expect = 2 * (0x2001 + 0x0db8) + 0x000a + 0x0007 + 1 + 0x0002 + 58;
        assert_eq!(fold(pseudo_header_v6(&s6, &d6, 58, 0x1_0002)), fold(expect));
    }
}
