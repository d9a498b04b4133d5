//! A whole message: its header, questions and the records of its three sections.

use crate::name::{read_name, Name};
use crate::rdata::Rdata;
use crate::{Malformed, Type};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 12;
const MIN_QUESTION_LEN: usize = 5;
const MIN_RECORD_LEN: usize = 11;

/// Header flag bits.
pub mod flags {
    /// A response (QR).
    pub const RESPONSE: u16 = 0x8000;
    /// Authoritative answer (AA).
    pub const AUTHORITATIVE: u16 = 0x0400;
    /// Truncated (TC): the answer did not fit; ask again over TCP.
    pub const TRUNCATED: u16 = 0x0200;
    /// Recursion desired (RD): set in queries to resolvers, clear in iterative ones.
    pub const RECURSION_DESIRED: u16 = 0x0100;
    /// Recursion available (RA).
    pub const RECURSION_AVAILABLE: u16 = 0x0080;
    /// Authentic data (AD, RFC 4035).
    pub const AUTHENTIC_DATA: u16 = 0x0020;
    /// Checking disabled (CD, RFC 4035).
    pub const CHECKING_DISABLED: u16 = 0x0010;
}

/// Response codes of the header's four bits (and, with EDNS, of the extended twelve).
pub mod rcode {
    /// No error.
    pub const NOERROR: u16 = 0;
    /// The server could not read the query.
    pub const FORMERR: u16 = 1;
    /// Server failure.
    pub const SERVFAIL: u16 = 2;
    /// The name does not exist.
    pub const NXDOMAIN: u16 = 3;
    /// Not implemented.
    pub const NOTIMP: u16 = 4;
    /// Refused.
    pub const REFUSED: u16 = 5;
}

/// The fixed 12-byte header, readable from a message whose body is malformed (its ID and TC bit
/// still tell whom it answers and whether to ask again over TCP).
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    bytes: &'a [u8; HEADER_LEN],
}

impl<'a> Header<'a> {
    /// Checks that the message holds a whole header.
    pub fn new(msg: &'a [u8]) -> Result<Header<'a>, Malformed> {
        msg.first_chunk()
            .map(|bytes| Header { bytes })
            .ok_or(Malformed::HeaderTooShort)
    }

    fn word(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    /// Query id, echoed by the response.
    pub fn id(&self) -> u16 {
        self.word(0)
    }
    /// The 16 flag bits; test them with the constants of [`flags`].
    pub fn flags(&self) -> u16 {
        self.word(2)
    }
    /// QR: a response rather than a query.
    pub fn is_response(&self) -> bool {
        self.flags() & flags::RESPONSE != 0
    }
    /// Kind of query (0: standard).
    pub fn opcode(&self) -> u8 {
        ((self.flags() >> 11) & 0xf) as u8
    }
    /// AA: the answer comes from a server authoritative for the name.
    pub fn is_authoritative(&self) -> bool {
        self.flags() & flags::AUTHORITATIVE != 0
    }
    /// TC: the answer was cut to fit; ask again over TCP.
    pub fn is_truncated(&self) -> bool {
        self.flags() & flags::TRUNCATED != 0
    }
    /// RD: recursion was asked for.
    pub fn recursion_desired(&self) -> bool {
        self.flags() & flags::RECURSION_DESIRED != 0
    }
    /// RA: the server offers recursion.
    pub fn recursion_available(&self) -> bool {
        self.flags() & flags::RECURSION_AVAILABLE != 0
    }
    /// The header's four rcode bits; [`Message::rcode`] adds EDNS's upper eight.
    pub fn rcode(&self) -> u8 {
        (self.flags() & 0xf) as u8
    }
    /// Entries in the question section.
    pub fn question_count(&self) -> u16 {
        self.word(4)
    }
    /// Records in the answer section.
    pub fn answer_count(&self) -> u16 {
        self.word(6)
    }
    /// Records in the authority section.
    pub fn authority_count(&self) -> u16 {
        self.word(8)
    }
    /// Records in the additional section.
    pub fn additional_count(&self) -> u16 {
        self.word(10)
    }
}

/// A checked message. [`Message::parse`] walks every question and record once (names with
/// compression, fixed fields, data lengths), so the iterators below cannot fail; only the typed
/// view of a record's data ([`Record::data`]) is checked when asked for, since most data is
/// never read.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    msg: &'a [u8],
    header: Header<'a>,
    answers_at: usize,
    authorities_at: usize,
    additionals_at: usize,
    end: usize,
}

impl<'a> Message<'a> {
    /// Checks a whole message. Bytes after the last record are allowed and ignored.
    pub fn parse(msg: &'a [u8]) -> Result<Message<'a>, Malformed> {
        let header = Header::new(msg)?;
        let questions = usize::from(header.question_count());
        let records = usize::from(header.answer_count())
            + usize::from(header.authority_count())
            + usize::from(header.additional_count());
        if HEADER_LEN + questions * MIN_QUESTION_LEN + records * MIN_RECORD_LEN > msg.len() {
            return Err(Malformed::CountPastEnd);
        }
        let mut at = HEADER_LEN;
        for _ in 0..questions {
            at = read_name(msg, at, msg.len())?.1;
            at = fixed_end(msg, at, 4)?;
        }
        let answers_at = at;
        at = check_records(msg, at, header.answer_count())?;
        let authorities_at = at;
        at = check_records(msg, at, header.authority_count())?;
        let additionals_at = at;
        at = check_records(msg, at, header.additional_count())?;
        Ok(Message {
            msg,
            header,
            answers_at,
            authorities_at,
            additionals_at,
            end: at,
        })
    }

    /// The header.
    pub fn header(&self) -> Header<'a> {
        self.header
    }

    /// The bytes of the message, as given to [`Message::parse`].
    pub fn bytes(&self) -> &'a [u8] {
        self.msg
    }

    /// Length of the message up to the end of its last record.
    pub fn len(&self) -> usize {
        self.end
    }

    /// Never true: a checked message holds at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The questions, usually one.
    pub fn questions(&self) -> Questions<'a> {
        Questions {
            msg: self.msg,
            at: HEADER_LEN,
            left: self.header.question_count(),
        }
    }

    /// The first question, if any.
    pub fn question(&self) -> Option<Question<'a>> {
        self.questions().next()
    }

    /// Whether the message asks exactly one question, and it is `name` (uncompressed wire form,
    /// ASCII case ignored), `qtype` and `class`: the check that a response answers what was
    /// asked. Allocates nothing.
    pub fn asks(&self, name: &[u8], qtype: Type, class: u16) -> bool {
        self.header.question_count() == 1
            && self
                .question()
                .is_some_and(|q| q.qtype == qtype && q.class == class && q.name.eq_wire(name))
    }

    /// The answer section.
    pub fn answers(&self) -> Records<'a> {
        self.records(self.answers_at, self.header.answer_count())
    }

    /// The authority section (an NXDOMAIN's SOA, a referral's NS records).
    pub fn authorities(&self) -> Records<'a> {
        self.records(self.authorities_at, self.header.authority_count())
    }

    /// The additional section (a referral's glue, the OPT record).
    pub fn additionals(&self) -> Records<'a> {
        self.records(self.additionals_at, self.header.additional_count())
    }

    fn records(&self, at: usize, left: u16) -> Records<'a> {
        Records {
            msg: self.msg,
            at,
            left,
        }
    }

    /// The EDNS0 OPT record of the additional section, if the server sent one.
    pub fn edns(&self) -> Option<Edns> {
        self.additionals()
            .find(|r| r.rtype == Type::OPT)
            .map(|r| Edns {
                udp_payload_size: r.class,
                extended_rcode: (r.ttl >> 24) as u8,
                version: (r.ttl >> 16) as u8,
                dnssec_ok: r.ttl & 0x8000 != 0,
            })
    }

    /// The full response code: the header's four bits, with EDNS's upper eight when an OPT record
    /// is present (compare with the constants of [`rcode`]).
    pub fn rcode(&self) -> u16 {
        let upper = self.edns().map_or(0, |e| u16::from(e.extended_rcode));
        upper << 4 | u16::from(self.header.rcode())
    }
}

/// The EDNS0 fields a response's OPT record carries (RFC 6891).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// Largest UDP payload the sender can take.
    pub udp_payload_size: u16,
    /// Upper eight bits of the response code.
    pub extended_rcode: u8,
    /// EDNS version (0).
    pub version: u8,
    /// DO: DNSSEC records wanted.
    pub dnssec_ok: bool,
}

fn fixed_end(msg: &[u8], at: usize, len: usize) -> Result<usize, Malformed> {
    let end = at + len;
    if end > msg.len() {
        return Err(Malformed::RecordPastEnd);
    }
    Ok(end)
}

fn check_records(msg: &[u8], mut at: usize, count: u16) -> Result<usize, Malformed> {
    for _ in 0..count {
        at = read_name(msg, at, msg.len())?.1;
        let fixed = fixed_end(msg, at, 10)?;
        let rdlen = usize::from(u16::from_be_bytes([msg[fixed - 2], msg[fixed - 1]]));
        at = fixed + rdlen;
        if at > msg.len() {
            return Err(Malformed::RdataPastEnd);
        }
    }
    Ok(at)
}

fn be16(msg: &[u8], at: usize) -> u16 {
    msg.get(at..at + 2)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

fn be32(msg: &[u8], at: usize) -> u32 {
    msg.get(at..at + 4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// One question: a name, a type and a class.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The name asked about.
    pub name: Name<'a>,
    /// The type asked for.
    pub qtype: Type,
    /// The class (1: Internet).
    pub class: u16,
}

/// The questions of a checked message.
#[derive(Clone)]
pub struct Questions<'a> {
    msg: &'a [u8],
    at: usize,
    left: u16,
}

impl<'a> Iterator for Questions<'a> {
    type Item = Question<'a>;

    fn next(&mut self) -> Option<Question<'a>> {
        self.left = self.left.checked_sub(1)?;
        let (name, at) = read_name(self.msg, self.at, self.msg.len()).ok()?;
        self.at = at + 4;
        Some(Question {
            name,
            qtype: Type(be16(self.msg, at)),
            class: be16(self.msg, at + 2),
        })
    }
}

/// One resource record of a checked message.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    msg: &'a [u8],
    /// The name the record is about.
    pub owner: Name<'a>,
    /// Its type.
    pub rtype: Type,
    /// Its class (1: Internet; the UDP payload size for OPT).
    pub class: u16,
    /// Seconds it may be cached (EDNS fields for OPT).
    pub ttl: u32,
    rdata_at: usize,
    rdata_len: u16,
}

impl<'a> Record<'a> {
    /// The raw data, as sent (names in it may be compressed pointers into the message).
    pub fn rdata(&self) -> &'a [u8] {
        let end = self.rdata_at + usize::from(self.rdata_len);
        self.msg.get(self.rdata_at..end).unwrap_or_default()
    }

    /// The data as a typed view, checked now: names followed through the message, lengths
    /// matched to the type. Types sonde does not know come back as [`Rdata::Unknown`].
    pub fn data(&self) -> Result<Rdata<'a>, Malformed> {
        let end = self.rdata_at + usize::from(self.rdata_len);
        Rdata::parse(self.msg, self.rtype, self.rdata_at, end)
    }
}

/// The records of one section of a checked message.
#[derive(Clone)]
pub struct Records<'a> {
    msg: &'a [u8],
    at: usize,
    left: u16,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        self.left = self.left.checked_sub(1)?;
        let (owner, at) = read_name(self.msg, self.at, self.msg.len()).ok()?;
        let rdata_len = be16(self.msg, at + 8);
        self.at = at + 10 + usize::from(rdata_len);
        Some(Record {
            msg: self.msg,
            owner,
            rtype: Type(be16(self.msg, at)),
            class: be16(self.msg, at + 2),
            ttl: be32(self.msg, at + 4),
            rdata_at: at + 10,
            rdata_len,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.left)))
    }
}
