//! One connection's state in 56 bytes: the entry of the connection table's slab.
//!
//! The entry stores neither our initial sequence number nor our source port: both come from the
//! keyed cookie of (our address, target, port), recomputed (one SipHash, ~20 ns) whenever a
//! segment of the connection is handled or built. The receive side keeps only `rcv_nxt`; the
//! reply's bytes, out-of-order ranges and data timings live in a pool buffer taken when the
//! first byte arrives. Everything else (flags, the request's progress, the peer's MSS, window
//! and window scale, retransmissions) is packed into one 64-bit word, [`Bits`].

use std::net::{IpAddr, Ipv6Addr};

/// "No index": end of a list, no buffer.
pub(crate) const NIL: u32 = u32::MAX;
/// `timer_prev` of an entry that is not armed on the timer wheel (timer.rs).
pub(crate) const UNLINKED: u32 = u32::MAX - 1;

/// What the connection is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Handshake done; sending the request, receiving the reply.
    Open,
    /// The outcome is reported and our FIN is sent (`CloseMode::Fin`); waiting, bounded, for
    /// the peer's ACK and FIN. `since_us` is then the time the FIN first left, and `REQ_LEN`
    /// the FIN's offset: the bytes sent before it.
    Closing,
}

/// One field of [`Bits`]: `width` bits from `shift`.
#[derive(Clone, Copy)]
pub(crate) struct Field {
    shift: u32,
    width: u32,
}

impl Field {
    const fn new(shift: u32, width: u32) -> Field {
        Field { shift, width }
    }

    /// The largest value the field holds.
    pub(crate) const fn max(self) -> u32 {
        (1 << self.width) - 1
    }

    const fn mask(self) -> u64 {
        (self.max() as u64) << self.shift
    }
}

/// Flags and small counters of a connection, packed into one word.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Bits(u64);

impl Bits {
    const STATE: Field = Field::new(0, 1);
    /// Our FIN has been written (sequence numbers after it count it).
    pub const FIN_SENT: u64 = 1 << 1;
    /// The peer sent timestamps in its SYN-ACK: every segment carries them.
    pub const TS_OK: u64 = 1 << 2;
    /// The peer sent SACK-permitted: our ACKs carry SACK blocks while holes exist.
    pub const SACK_OK: u64 = 1 << 3;
    /// The peer sent a window scale: windows are scaled both ways.
    pub const WS_OK: u64 = 1 << 4;
    /// The peer's FIN is received (and counted in `rcv_nxt`).
    pub const FIN_RCVD: u64 = 1 << 5;
    /// Our FIN is acknowledged.
    pub const FIN_ACKED: u64 = 1 << 6;
    /// An ACK is owed (delayed ACK).
    pub const ACK_PENDING: u64 = 1 << 7;
    /// A pure ACK of this connection is in the transmit queue.
    pub const ACK_QUEUED: u64 = 1 << 8;
    /// One in-order data segment arrived since our last ACK (the next one is ACKed at once).
    pub const SEG_UNACKED: u64 = 1 << 9;
    /// We advertised a zero window for lack of buffer memory and owe a window update.
    pub const STARVED: u64 = 1 << 10;
    /// Freed: out of the index and the timer wheel, kept intact only until the segments
    /// already queued for it are written.
    pub const DEAD: u64 = 1 << 11;

    /// The peer's window scale (0..=14).
    pub const PEER_WS: Field = Field::new(12, 4);
    /// Retransmissions of the request or of the FIN since the retransmission schedule last
    /// started over (an ACK that advanced, new bytes sent with nothing in flight).
    pub const RETRIES: Field = Field::new(16, 4);
    /// The request's length (at most 1400), or what a session has given to send (at most
    /// 2047); while closing, the bytes sent before our FIN.
    pub const REQ_LEN: Field = Field::new(20, 11);
    /// Request bytes the peer acknowledged.
    pub const ACKED: Field = Field::new(31, 11);
    /// The MSS our segments keep to: the peer's, lowered by a smaller path MTU (an ICMP
    /// fragmentation needed or Packet Too Big); at most 2047.
    pub const MSS: Field = Field::new(42, 11);
    /// The send window beyond `ACKED`, saturated at 2047 (more than a request needs): the
    /// peer's, but never short of what was sent (a window that shrinks does not unsend).
    pub const WND: Field = Field::new(53, 11);

    pub fn state(self) -> State {
        match self.0 & Self::STATE.mask() {
            0 => State::Open,
            _ => State::Closing,
        }
    }

    pub fn set_state(&mut self, state: State) {
        let value = match state {
            State::Open => 0,
            State::Closing => 1,
        };
        self.put(Self::STATE, value);
    }

    pub fn has(self, flag: u64) -> bool {
        self.0 & flag != 0
    }

    pub fn set(&mut self, flag: u64, on: bool) {
        if on {
            self.0 |= flag;
        } else {
            self.0 &= !flag;
        }
    }

    pub fn get(self, field: Field) -> u32 {
        ((self.0 & field.mask()) >> field.shift) as u32
    }

    /// Stores `value`, saturated at the field's maximum.
    pub fn put(&mut self, field: Field, value: u32) {
        let value = u64::from(value.min(field.max()));
        self.0 = (self.0 & !field.mask()) | (value << field.shift);
    }
}

/// A connection of the table. 56 bytes; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    /// The target, IPv4 stored as an IPv4-mapped IPv6 address (the table key with `port`).
    pub addr: [u8; 16],
    /// The next sequence number we expect from the peer (its FIN counted once received).
    pub rcv_nxt: u32,
    /// The last TSval the peer sent, echoed in our TSecr.
    pub ts_recent: u32,
    /// Our clock (µs, low 32 bits) at the SYN-ACK while open; at our first FIN while closing.
    pub since_us: u32,
    /// SYN to SYN-ACK, from the echoed timestamp; [`NIL`] when unknown.
    pub rtt_us: u32,
    /// The receive buffer in the pool, [`NIL`] until data arrives.
    pub buf: u32,
    /// Links of the timer wheel's slot list (the free list reuses `timer_next`).
    pub timer_next: u32,
    pub timer_prev: u32,
    pub bits: Bits,
    /// The target's port.
    pub port: u16,
    /// The wheel tick (ms, low 16 bits) the timer is armed for.
    pub timer_at: u16,
}

impl Conn {
    pub fn blank() -> Conn {
        Conn {
            addr: [0; 16],
            rcv_nxt: 0,
            ts_recent: 0,
            since_us: 0,
            rtt_us: NIL,
            buf: NIL,
            timer_next: NIL,
            timer_prev: UNLINKED,
            bits: Bits::default(),
            port: 0,
            timer_at: 0,
        }
    }

    pub fn target(&self) -> IpAddr {
        key_to_addr(&self.addr)
    }

    pub fn state(&self) -> State {
        self.bits.state()
    }

    pub fn has(&self, flag: u64) -> bool {
        self.bits.has(flag)
    }

    pub fn req_len(&self) -> u32 {
        self.bits.get(Bits::REQ_LEN)
    }

    pub fn acked(&self) -> u32 {
        self.bits.get(Bits::ACKED)
    }

    /// Request bytes the peer's window lets us have sent: `[acked, limit)` is in flight.
    pub fn send_limit(&self) -> u32 {
        (self.acked() + self.bits.get(Bits::WND)).min(self.req_len())
    }

    pub fn retries(&self) -> u32 {
        self.bits.get(Bits::RETRIES)
    }

    pub fn rtt(&self) -> Option<u32> {
        (self.rtt_us != NIL).then_some(self.rtt_us)
    }
}

/// The table key of an address: IPv6 as is, IPv4 mapped (`::ffff:a.b.c.d`). IPv4-mapped IPv6
/// addresses never reach the table (they are not valid on the wire), so keys do not collide.
pub(crate) fn addr_to_key(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

pub(crate) fn key_to_addr(key: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*key);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Whether an IPv6 address is IPv4-mapped (refused as a target and as a source).
pub(crate) fn is_mapped(addr: &Ipv6Addr) -> bool {
    addr.to_ipv4_mapped().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Conn>(), 56);
    }

    #[test]
    fn fields_do_not_overlap_and_saturate() {
        let mut bits = Bits::default();
        let fields = [
            Bits::PEER_WS,
            Bits::RETRIES,
            Bits::REQ_LEN,
            Bits::ACKED,
            Bits::MSS,
            Bits::WND,
        ];
        for (i, field) in fields.iter().enumerate() {
            bits.put(*field, 1000 + i as u32);
        }
        bits.set_state(State::Closing);
        bits.set(Bits::DEAD | Bits::TS_OK, true);
        for (i, field) in fields.iter().enumerate() {
            assert_eq!(bits.get(*field), (1000 + i as u32).min(field.max()));
        }
        assert_eq!(bits.state(), State::Closing);
        assert!(bits.has(Bits::DEAD) && bits.has(Bits::TS_OK) && !bits.has(Bits::WS_OK));
        bits.put(Bits::WND, 0);
        assert_eq!(bits.get(Bits::MSS), 1004);
        assert_eq!(bits.get(Bits::WND), 0);
        bits.set_state(State::Open);
        assert_eq!(bits.state(), State::Open);
        assert!(bits.has(Bits::DEAD));
    }

    #[test]
    fn keys_round_trip() {
        for text in ["198.18.0.1", "2001:2::7", "0.0.0.0"] {
            let addr: IpAddr = text.parse().unwrap();
            assert_eq!(key_to_addr(&addr_to_key(addr)), addr);
        }
        assert!(is_mapped(&"::ffff:1.2.3.4".parse().unwrap()));
    }
}
