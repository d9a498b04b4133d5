//! DNS messages for sonde (RFC 1035, with EDNS0 of RFC 6891 and CAA of RFC 8659): a checked view
//! of a response and a writer of queries, made for a client that handles hundreds of thousands of
//! lookups a second.
//!
//! - [`Message::parse`] checks a message once (header, section counts, every name with its
//!   compression, every record's fixed fields and data length); then [`Message::questions`],
//!   [`Message::answers`], [`Message::authorities`] and [`Message::additionals`] iterate
//!   without failing or allocating. [`Header::new`] reads the 12-byte header alone, for a message
//!   whose body is refused.
//! - [`Message::asks`] matches the question against the name, type and class that were asked,
//!   ASCII case ignored, without allocating.
//! - [`Record::data`] gives the typed data ([`Rdata`]: A, AAAA, NS, CNAME, PTR, MX, TXT, SOA, CAA,
//!   OPT, and the raw bytes of any other type), checked when asked for, since only a row's
//!   answers are ever read.
//! - [`Name`] is a name inside a message: its labels, comparisons ignoring case, and its text
//!   form through `Display`. [`NameBuf`] holds a name in uncompressed wire form in 256 bytes,
//!   parsed from text, to ask with and to match against.
//! - [`Query::write`] writes a query (ID, RD on or off, one question, an optional EDNS0 OPT
//!   record stating a UDP payload size) into the caller's buffer.
//! - [`Type`] names types (`"MX"`, `"aaaa"`, `"TYPE65"`).
//!
//! Every refusal is one of the reasons of [`Malformed`], so the caller counts them in one array:
//! pointer loops (a compression pointer must go strictly backward, and a name may follow at most
//! 127), pointers past the end, section counts larger than the message could hold, labels over
//! 63 bytes, names over 255, and records or data cut short.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod message;
mod name;
mod query;
mod rdata;
mod rtype;

pub use error::Malformed;
pub use message::{
    flags, rcode, Edns, Header, Message, Question, Questions, Record, Records, HEADER_LEN,
};
pub use name::{Labels, Name, NameBuf, NameError, MAX_LABEL_LEN, MAX_NAME_LEN};
pub use query::{BufferTooSmall, Query, DEFAULT_UDP_PAYLOAD};
pub use rdata::{Options, Rdata, Soa, Strings, StringsIter};
pub use rtype::{Type, UnknownType, CLASS_IN};

#[cfg(test)]
mod tests;
