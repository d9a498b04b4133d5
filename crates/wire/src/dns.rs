//! DNS messages (RFC 1035), as much as a scanner needs: the fixed 12-byte header as a checked
//! view (id, flags, rcode, section counts), and emitting one query.

use crate::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 12;
/// Longest encoded name (RFC 1035 §2.3.4) and label.
const MAX_NAME: usize = 255;
const MAX_LABEL: usize = 63;

mod field {
    pub const ID: core::ops::Range<usize> = 0..2;
    pub const FLAGS: core::ops::Range<usize> = 2..4;
    pub const QDCOUNT: core::ops::Range<usize> = 4..6;
    pub const ANCOUNT: core::ops::Range<usize> = 6..8;
    pub const NSCOUNT: core::ops::Range<usize> = 8..10;
    pub const ARCOUNT: core::ops::Range<usize> = 10..12;
}

/// Query types by name, for `--dns-type`.
pub const QTYPES: &[(&str, u16)] = &[
    ("A", 1),
    ("NS", 2),
    ("CNAME", 5),
    ("SOA", 6),
    ("PTR", 12),
    ("MX", 15),
    ("TXT", 16),
    ("AAAA", 28),
    ("ANY", 255),
];

/// The numeric type for a name like `A` or `aaaa`.
pub fn qtype(name: &str) -> Option<u16> {
    QTYPES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, t)| t)
}

/// A DNS message header view.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds a whole header; every accessor is then safe.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Packet { buffer })
    }

    fn word(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    /// Query id, echoed by the response.
    pub fn id(&self) -> u16 {
        self.word(field::ID)
    }
    /// The 16 flag bits (QR, opcode, AA, TC, RD, RA, rcode).
    pub fn flags(&self) -> u16 {
        self.word(field::FLAGS)
    }
    /// QR bit: a response rather than a query.
    pub fn is_response(&self) -> bool {
        self.flags() & 0x8000 != 0
    }
    /// Kind of query (0: standard).
    pub fn opcode(&self) -> u8 {
        ((self.flags() >> 11) & 0xf) as u8
    }
    /// Response code (low four bits of the flags): 0 no error, 2 server failure, 3 NXDOMAIN, …
    pub fn rcode(&self) -> u8 {
        (self.flags() & 0xf) as u8
    }
    /// Entries in the question section.
    pub fn question_count(&self) -> u16 {
        self.word(field::QDCOUNT)
    }
    /// Records in the answer section.
    pub fn answer_count(&self) -> u16 {
        self.word(field::ANCOUNT)
    }
    /// Records in the authority section.
    pub fn authority_count(&self) -> u16 {
        self.word(field::NSCOUNT)
    }
    /// Records in the additional section.
    pub fn additional_count(&self) -> u16 {
        self.word(field::ARCOUNT)
    }
}

/// Encoded length of a query for `name`: header, name, type and class.
pub fn query_len(name: &str) -> Result<usize> {
    Ok(HEADER_LEN + encoded_name_len(name)? + 4)
}

fn encoded_name_len(name: &str) -> Result<usize> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Ok(1);
    }
    let mut len = 1;
    for label in name.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err(Error::Malformed);
        }
        len += 1 + label.len();
    }
    if len > MAX_NAME {
        return Err(Error::Malformed);
    }
    Ok(len)
}

/// Writes a recursive query (one question, class IN) for `name` and `qtype` into `buf`; returns
/// its length. A name with an empty or over-long label is `Malformed`; a short buffer `Truncated`.
pub fn emit_query(buf: &mut [u8], id: u16, name: &str, qtype: u16) -> Result<usize> {
    let len = query_len(name)?;
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    buf[..HEADER_LEN].fill(0);
    buf[field::ID].copy_from_slice(&id.to_be_bytes());
    buf[field::FLAGS].copy_from_slice(&0x0100u16.to_be_bytes()); // RD: recursion desired
    buf[field::QDCOUNT].copy_from_slice(&1u16.to_be_bytes());
    let mut at = HEADER_LEN;
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    for label in trimmed.split('.').filter(|l| !l.is_empty()) {
        buf[at] = label.len() as u8;
        buf[at + 1..at + 1 + label.len()].copy_from_slice(label.as_bytes());
        at += 1 + label.len();
    }
    buf[at] = 0;
    buf[at + 1..at + 3].copy_from_slice(&qtype.to_be_bytes());
    buf[at + 3..at + 5].copy_from_slice(&1u16.to_be_bytes()); // class IN
    Ok(at + 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for example.com A with id 0x1234, as `dig` sends it (without EDNS).
    const QUERY: [u8; 29] = [
        0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, b'e', b'x',
        b'a', b'm', b'p', b'l', b'e', 0x03, b'c', b'o', b'm', 0x00, 0x00, 0x01, 0x00, 0x01,
    ];
    /// The header of an NXDOMAIN response with 0 answers and 1 authority record.
    const NXDOMAIN: [u8; 12] = [
        0x12, 0x34, 0x81, 0x83, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    ];

    #[test]
    fn emits_the_fixture_query() {
        let mut buf = [0u8; 64];
        let n = emit_query(&mut buf, 0x1234, "example.com.", 1).unwrap();
        assert_eq!(&buf[..n], &QUERY);
        assert_eq!(query_len("example.com").unwrap(), QUERY.len());
    }

    #[test]
    fn parses_a_response_header() {
        let p = Packet::new_checked(&NXDOMAIN[..]).unwrap();
        assert_eq!(
            (p.id(), p.is_response(), p.opcode(), p.rcode()),
            (0x1234, true, 0, 3)
        );
        assert_eq!(
            (
                p.question_count(),
                p.answer_count(),
                p.authority_count(),
                p.additional_count()
            ),
            (1, 0, 1, 0)
        );
        let q = Packet::new_checked(&QUERY[..]).unwrap();
        assert!(!q.is_response());
    }

    #[test]
    fn hostile_input_is_refused_not_panicking() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&NXDOMAIN[..n]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut buf = [0u8; 300];
        assert_eq!(emit_query(&mut buf, 1, "a..b", 1), Err(Error::Malformed));
        assert_eq!(
            emit_query(&mut buf, 1, &"x".repeat(64), 1),
            Err(Error::Malformed)
        );
        assert_eq!(
            emit_query(&mut buf, 1, &["abcdefghi"; 30].join("."), 1),
            Err(Error::Malformed)
        );
        assert_eq!(
            emit_query(&mut buf[..20], 1, "example.com", 1),
            Err(Error::Truncated)
        );
        assert_eq!(qtype("aaaa"), Some(28));
        assert_eq!(qtype("BOGUS"), None);
    }
}
