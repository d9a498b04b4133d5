//! Which lookup a reply answers, told by its destination port and DNS ID alone, and unguessable
//! off the path.
//!
//! A lookup in flight is a slot of the table and the count of queries that slot has sent (its
//! generation). The pair is numbered `slot * gens + gen`, and a keyed permutation of the whole
//! (port, ID) space turns that number into the query's source port and ID. A reply's port and
//! ID, permuted back, name the slot and the generation at once: no hash table, no search. An
//! off-path sender who does not know the key hits a live (slot, generation) with a chance of
//! (lookups in flight) / (ports × 65,536), and must still match the server and the question.
//!
//! The permutation is a four-round Feistel network over the smallest even number of bits that
//! holds the space, walked until it lands inside the space (cycle walking: a bijection on any
//! range, in under two steps on average here, since the space fills at least a quarter of the
//! bits).

use sonde_craft::cookie::PortRange;

const ROUNDS: usize = 4;

#[derive(Clone, Debug)]
pub struct Tokens {
    keys: [u64; ROUNDS],
    first_port: u16,
    space: u64,
    half_bits: u32,
    gens: u64,
    slots: u64,
}

/// The port range holds too few (port, ID) pairs for the lookups in flight.
#[derive(Debug, PartialEq, Eq)]
pub struct TooFewPorts {
    pub most_slots: u64,
}

impl Tokens {
    /// Tokens for `slots` lookups in flight over `ports`, keyed by `key`. Each slot gets at
    /// least two generations, so a late reply to a retried query is never taken for the retry.
    pub fn new(key: [u64; 2], ports: PortRange, slots: u32) -> Result<Tokens, TooFewPorts> {
        let space = u64::from(ports.last - ports.first + 1) << 16;
        let slots = u64::from(slots.max(1));
        let gens = space / slots;
        if gens < 2 {
            return Err(TooFewPorts {
                most_slots: space / 2,
            });
        }
        let bits = 64 - (space - 1).leading_zeros();
        let half_bits = bits.div_ceil(2);
        let mut keys = [0; ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = mix64(key[0] ^ mix64(key[1].wrapping_add(i as u64 + 1)));
        }
        Ok(Tokens {
            keys,
            first_port: ports.first,
            space,
            half_bits,
            gens,
            slots,
        })
    }

    /// Generations a slot goes through before its numbers come round again.
    pub fn generations(&self) -> u32 {
        self.gens.min(u64::from(u32::MAX)) as u32
    }

    /// The source port and ID of the query of `slot` at generation `gen`.
    pub fn encode(&self, slot: u32, gen: u32) -> (u16, u16) {
        let number = u64::from(slot) * self.gens + u64::from(gen) % self.gens;
        let mut t = number;
        loop {
            t = self.forward(t);
            if t < self.space {
                break;
            }
        }
        (self.first_port + (t >> 16) as u16, t as u16)
    }

    /// The (slot, generation) a reply to `port` with `id` answers, if any could.
    pub fn decode(&self, port: u16, id: u16) -> Option<(u32, u32)> {
        let offset = port.checked_sub(self.first_port)?;
        let mut t = (u64::from(offset) << 16) | u64::from(id);
        if t >= self.space {
            return None;
        }
        loop {
            t = self.backward(t);
            if t < self.space {
                break;
            }
        }
        let slot = t / self.gens;
        (slot < self.slots).then(|| (slot as u32, (t % self.gens) as u32))
    }

    fn round(&self, half: u64, i: usize) -> u64 {
        mix64(half ^ self.keys[i]) & self.mask()
    }

    fn mask(&self) -> u64 {
        (1 << self.half_bits) - 1
    }

    fn forward(&self, t: u64) -> u64 {
        let (mut left, mut right) = (t >> self.half_bits, t & self.mask());
        for i in 0..ROUNDS {
            (left, right) = (right, left ^ self.round(right, i));
        }
        (left << self.half_bits) | right
    }

    fn backward(&self, t: u64) -> u64 {
        let (mut left, mut right) = (t >> self.half_bits, t & self.mask());
        for i in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.round(left, i), left);
        }
        (left << self.half_bits) | right
    }
}

/// SplitMix64's finaliser.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports(first: u16, last: u16) -> PortRange {
        PortRange { first, last }
    }

    #[test]
    fn every_slot_and_generation_comes_back_from_its_port_and_id() {
        let t = Tokens::new([7, 9], ports(61000, 61003), 1000).unwrap();
        let mut seen = std::collections::HashSet::new();
        for slot in 0..1000 {
            for gen in 0..t.generations() {
                let (port, id) = t.encode(slot, gen);
                assert!((61000..=61003).contains(&port));
                assert!(seen.insert((port, id)), "two lookups share {port}/{id}");
                assert_eq!(t.decode(port, id), Some((slot, gen)));
            }
        }
    }

    #[test]
    fn numbers_outside_the_table_decode_to_nothing() {
        let t = Tokens::new([1, 2], ports(61000, 61000), 10).unwrap();
        assert_eq!(t.decode(60999, 0), None);
        assert_eq!(t.decode(61001, 0), None);
        let hits = (0..=u16::MAX)
            .filter(|&id| t.decode(61000, id).is_some())
            .count();
        // 10 slots × 6,553 generations of the 65,536 numbers.
        assert_eq!(hits, 10 * (65_536 / 10));
    }

    #[test]
    fn another_key_gives_other_numbers() {
        let a = Tokens::new([1, 2], ports(61000, 65535), 10_000).unwrap();
        let b = Tokens::new([1, 3], ports(61000, 65535), 10_000).unwrap();
        let same = (0..1000)
            .filter(|&s| a.encode(s, 0) == b.encode(s, 0))
            .count();
        assert!(same < 5, "{same} of 1000 alike");
    }

    #[test]
    fn too_many_slots_for_the_ports_are_refused() {
        assert_eq!(
            Tokens::new([0, 0], ports(61000, 61000), 40_000).unwrap_err(),
            TooFewPorts { most_slots: 32_768 }
        );
    }
}
