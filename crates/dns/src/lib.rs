//! DNS messages for sonde (RFC 1035, with EDNS0 of RFC 6891 and CAA of RFC 8659): a checked view
//! of a response and a writer of queries, made for a client that handles hundreds of thousands of
//! lookups a second.
//!
//! Takes a message's bytes (a UDP payload, or a TCP message without its two-byte length); gives
//! checked views of it and writes queries. Uses no other crate.
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
//!
//! # Why a view of its own rather than hickory-proto or domain
//!
//! Measured with `bench/dns-parse` (`cargo run --release` there; best of 5 rounds of 200,000
//! messages, 2 shared vCPUs) on five responses like those a lookup meets, against hickory-proto
//! 0.25's `Message::from_vec`. *Accept* is what the client does with every response (header,
//! ID, opcode, the question matched); *row* adds every record's typed data with names as text,
//! which only the responses that make a row need:
//!
//! | response (bytes)          | accept: sonde-dns | accept: hickory     | row: sonde-dns | row: hickory        |
//! |---------------------------|-------------------|---------------------|----------------|---------------------|
//! | A ×2, compressed, OPT (76)| 66 ns, 0 allocs   | 605 ns, 4 allocs    | 384 ns, 0      | 884 ns, 4 allocs    |
//! | referral, NS + glue (113) | 86 ns, 0          | 894 ns, 4           | 654 ns, 0      | 1,629 ns, 4         |
//! | MX, TXT, CAA, HTTPS (125) | 71 ns, 0          | 1,309 ns, 15        | 494 ns, 0      | 1,853 ns, 15        |
//! | CNAME chain (101)         | 78 ns, 0          | 732 ns, 3           | 495 ns, 0      | 1,274 ns, 3         |
//! | NXDOMAIN + SOA (85)       | 52 ns, 0          | 529 ns, 3           | 267 ns, 0      | 789 ns, 3           |
//!
//! hickory-proto decodes every record into owned values on every message, so even a response
//! that is only checked and dropped costs 0.5–1.3 µs and 3–15 allocations; at 350 K responses a
//! second that is a third to half of a core, against 2–3 % here with no allocation. domain
//! (NLnet Labs) has zero-copy views too, but the part sonde needs (check, match, read a few typed
//! answers, write one question) is a few hundred lines, and owning them lets every refusal be one
//! counted reason, which neither crate gives. The query writer is also our own: building a
//! hickory `Message` and encoding it allocates, and a query is a header, a name and 11 bytes of
//! OPT.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod message;
mod name;
mod present;
mod query;
mod rdata;
mod rtype;

pub use error::Malformed;
pub use message::{
    flags, rcode, Edns, Header, Message, Question, Questions, Record, Records, HEADER_LEN,
};
pub use name::{Labels, Name, NameBuf, NameError, MAX_LABEL_LEN, MAX_NAME_LEN};
pub use present::Fqdn;
pub use query::{BufferTooSmall, Query, DEFAULT_UDP_PAYLOAD};
pub use rdata::{Options, Rdata, Soa, Strings, StringsIter};
pub use rtype::{Type, UnknownType, CLASS_IN};

#[cfg(test)]
mod tests;
