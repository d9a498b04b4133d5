//! Writing a query into the caller's buffer.

use std::fmt;

use crate::message::{flags, HEADER_LEN};
use crate::{NameBuf, Type, CLASS_IN};

/// UDP payload size to state in EDNS0 by default: what the DNS flag day of 2020 agreed on, small
/// enough to avoid fragmentation on any path.
pub const DEFAULT_UDP_PAYLOAD: u16 = 1232;
/// Length of an OPT record with no options.
const OPT_LEN: usize = 11;

/// A query: one question, with or without recursion desired, with or without EDNS0.
#[derive(Debug, Clone, Copy)]
pub struct Query<'n> {
    /// Message id, echoed by the response.
    pub id: u16,
    /// The name asked about.
    pub name: &'n NameBuf,
    /// The type asked for.
    pub qtype: Type,
    /// RD: on when asking a resolver, off when asking authoritative servers (iterative mode).
    pub recursion_desired: bool,
    /// The UDP payload size stated in an EDNS0 OPT record, or `None` to send no OPT record.
    pub udp_payload: Option<u16>,
}

/// The buffer given to [`Query::write`] is shorter than the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the query needs.
    pub needed: usize,
}

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a DNS query needs {} bytes of buffer", self.needed)
    }
}

impl std::error::Error for BufferTooSmall {}

impl Query<'_> {
    /// Length of the encoded query.
    pub fn len(&self) -> usize {
        let opt = if self.udp_payload.is_some() {
            OPT_LEN
        } else {
            0
        };
        HEADER_LEN + self.name.wire().len() + 4 + opt
    }

    /// Never true: a query holds at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the query at the start of `buf` and returns its length. Allocates nothing.
    pub fn write(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let len = self.len();
        let out = buf.get_mut(..len).ok_or(BufferTooSmall { needed: len })?;
        let flag_bits = if self.recursion_desired {
            flags::RECURSION_DESIRED
        } else {
            0
        };
        let additional = u16::from(self.udp_payload.is_some());
        let (header, rest) = out.split_at_mut(HEADER_LEN);
        for (i, word) in [self.id, flag_bits, 1, 0, 0, additional]
            .into_iter()
            .enumerate()
        {
            header[i * 2..i * 2 + 2].copy_from_slice(&word.to_be_bytes());
        }
        let wire = self.name.wire();
        let (name, rest) = rest.split_at_mut(wire.len());
        name.copy_from_slice(wire);
        rest[0..2].copy_from_slice(&self.qtype.0.to_be_bytes());
        rest[2..4].copy_from_slice(&CLASS_IN.to_be_bytes());
        if let Some(payload) = self.udp_payload {
            let opt = &mut rest[4..4 + OPT_LEN];
            opt[0] = 0; // the root name
            opt[1..3].copy_from_slice(&Type::OPT.0.to_be_bytes());
            opt[3..5].copy_from_slice(&payload.to_be_bytes());
            opt[5..11].fill(0); // extended rcode, version 0, no flags, no options
        }
        Ok(len)
    }
}
