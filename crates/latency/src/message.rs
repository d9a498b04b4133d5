//! What a latency probe carries: a tag, the run it belongs to (each rate is a run, so a late
//! echo of one rate is never counted in the next), its sequence number and the moment it was
//! handed to the kernel, on the sender's clock. Reflectors echo the payload unchanged, so the
//! round trip is measured on one clock.

/// Marks a sonde latency message.
pub const MAGIC: [u8; 4] = *b"SNDL";
/// Bytes of the message header; the rest of a payload is padding.
pub const HEADER_LEN: usize = 24;
/// Offsets inside the payload.
pub const RUN_AT: usize = 4;
pub const SEQ_AT: usize = 8;
pub const SENT_AT: usize = 16;

/// A message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub run: u32,
    pub seq: u64,
    /// Nanoseconds on the sender's [`crate::Clock`].
    pub sent_ns: u64,
}

impl Stamp {
    /// Writes the header into the start of `payload` (at least [`HEADER_LEN`] bytes).
    pub fn write(&self, payload: &mut [u8]) {
        payload[..4].copy_from_slice(&MAGIC);
        payload[RUN_AT..SEQ_AT].copy_from_slice(&self.run.to_be_bytes());
        payload[SEQ_AT..SENT_AT].copy_from_slice(&self.seq.to_be_bytes());
        payload[SENT_AT..HEADER_LEN].copy_from_slice(&self.sent_ns.to_be_bytes());
    }

    /// Reads a header; None when `payload` is too short or not a sonde message.
    pub fn read(payload: &[u8]) -> Option<Stamp> {
        let header = payload.get(..HEADER_LEN)?;
        if header[..4] != MAGIC {
            return None;
        }
        let word = |r: std::ops::Range<usize>| -> Option<u64> {
            let mut b = [0u8; 8];
            b[8 - r.len()..].copy_from_slice(header.get(r)?);
            Some(u64::from_be_bytes(b))
        };
        Some(Stamp {
            run: word(RUN_AT..SEQ_AT)? as u32,
            seq: word(SEQ_AT..SENT_AT)?,
            sent_ns: word(SENT_AT..HEADER_LEN)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips_and_bytes_are_fixed() {
        let s = Stamp {
            run: 3,
            seq: 0x0102_0304_0506_0708,
            sent_ns: 42,
        };
        let mut buf = [0u8; 64];
        s.write(&mut buf);
        assert_eq!(&buf[..8], b"SNDL\0\0\0\x03");
        assert_eq!(&buf[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Stamp::read(&buf), Some(s));
    }

    #[test]
    fn short_or_foreign_payloads_are_refused_without_panicking() {
        let mut buf = [0u8; HEADER_LEN];
        Stamp {
            run: 1,
            seq: 2,
            sent_ns: 3,
        }
        .write(&mut buf);
        for len in 0..HEADER_LEN {
            assert_eq!(Stamp::read(&buf[..len]), None, "length {len}");
        }
        buf[0] = b'X';
        assert_eq!(Stamp::read(&buf), None);
    }
}
