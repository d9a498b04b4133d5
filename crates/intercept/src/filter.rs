//! The decision point: every packet taken off the path is shown to a [`Filter`], which says
//! what becomes of it. sonde's rules ([`crate::RuleSet`]) are one filter; a program built on
//! this library can plug in its own (see `examples/drop_rst_from_port.rs`).

pub use sonde_io::filter::Link;

/// One packet on its way through: its bytes (which a filter may change in place, keeping the
/// length), what they start with, and the time of the batch it came in.
pub struct Packet<'a> {
    /// The packet: an Ethernet frame in bridge mode, the IP packet itself in stack mode.
    pub data: &'a mut [u8],
    /// What `data` starts with.
    pub link: Link,
    /// Its length on the wire (`data` may be shorter only where the kernel cut it).
    pub wire_len: u32,
    /// When its batch was taken (CLOCK_MONOTONIC, ns): one clock read per batch, not per packet.
    pub now_ns: u64,
}

impl Packet<'_> {
    /// The IP packet inside (for Ethernet, after the header and any VLAN tags), or `None` if
    /// it is not IPv4 or IPv6.
    pub fn ip_mut(&mut self) -> Option<&mut [u8]> {
        let start = ip_offset(self.data, self.link)?;
        self.data.get_mut(start..)
    }

    /// Like [`Packet::ip_mut`], read only.
    pub fn ip(&self) -> Option<&[u8]> {
        let start = ip_offset(self.data, self.link)?;
        self.data.get(start..)
    }
}

/// Where the IP header of `data` starts, if it carries IPv4 or IPv6.
pub fn ip_offset(data: &[u8], link: Link) -> Option<usize> {
    match link {
        Link::RawIp => matches!(data.first()? >> 4, 4 | 6).then_some(0),
        Link::Ethernet => {
            let mut at = 12;
            loop {
                let ethertype = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
                match ethertype {
                    0x8100 | 0x88a8 => at += 4,
                    0x0800 | 0x86dd => return Some(at + 2),
                    _ => return None,
                }
            }
        }
    }
}

/// What becomes of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// On its way, unchanged.
    Pass,
    /// Gone.
    Drop,
    /// On its way, with bytes changed in place (same length).
    Rewritten,
}

/// A decision on each packet. One instance per thread, so it needs no locks; packets of one
/// flow always reach the same instance, in the order they arrived.
pub trait Filter: Send {
    /// Decides on one packet; may change its bytes (then say [`Verdict::Rewritten`]).
    fn decide(&mut self, packet: &mut Packet<'_>) -> Verdict;
}

impl<F: Filter + ?Sized> Filter for Box<F> {
    fn decide(&mut self, packet: &mut Packet<'_>) -> Verdict {
        (**self).decide(packet)
    }
}

/// Two filters in a row: the first decides unless it passes the packet unchanged, in which
/// case the second does (so a custom filter can sit in front of the rules).
pub struct Then<A, B>(pub A, pub B);

impl<A: Filter, B: Filter> Filter for Then<A, B> {
    fn decide(&mut self, packet: &mut Packet<'_>) -> Verdict {
        match self.0.decide(packet) {
            Verdict::Pass => self.1.decide(packet),
            Verdict::Drop => Verdict::Drop,
            Verdict::Rewritten => match self.1.decide(packet) {
                Verdict::Drop => Verdict::Drop,
                _ => Verdict::Rewritten,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ip_header_is_found_behind_ethernet_and_vlan_tags() {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x81, 0x00, 0, 5, 0x08, 0x00, 0x45]);
        assert_eq!(ip_offset(&frame, Link::Ethernet), Some(18));
        frame[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert_eq!(ip_offset(&frame, Link::Ethernet), None);
        assert_eq!(ip_offset(&[0x60], Link::RawIp), Some(0));
        assert_eq!(ip_offset(&[0x20], Link::RawIp), None);
        assert_eq!(ip_offset(&[], Link::RawIp), None);
        assert_eq!(ip_offset(&frame[..13], Link::Ethernet), None);
    }
}
