//! Why a message was refused: one enum, so a caller counts refusals in one array.

use std::fmt;

/// Why a DNS message (or one record's data) was refused. Every parser in this crate fails with
/// one of these and nothing else, so a caller keeps one counter per reason
/// (`counters[reason.index()] += 1`) and names them with [`Malformed::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Fewer than the 12 bytes of the fixed header.
    HeaderTooShort,
    /// The section counts ask for more questions and records than the message could hold even if
    /// each were as short as possible (5 bytes a question, 11 a record).
    CountPastEnd,
    /// A name runs past the end of the message (or of the record data that holds it).
    NamePastEnd,
    /// A compression pointer points at or past the end of the message.
    PointerPastEnd,
    /// A compression pointer does not point strictly backward (which is how a loop starts), or a
    /// name follows more pointers than the longest name has labels.
    PointerLoop,
    /// A label length byte over 63 (the 0b01 and 0b10 prefixes, which no one uses).
    LabelTooLong,
    /// A name longer than 255 bytes in its uncompressed form.
    NameTooLong,
    /// A question's type and class, or a record's type, class, TTL and data length, cut short.
    RecordPastEnd,
    /// A record's data length runs past the end of the message.
    RdataPastEnd,
    /// A record's data does not fit its type: an A record not 4 bytes long, a name that does not
    /// end where the data ends, a text string longer than the data, an SOA without its numbers.
    BadRdata,
}

impl Malformed {
    /// Every reason, in the order of [`Malformed::index`].
    pub const ALL: [Malformed; 10] = [
        Malformed::HeaderTooShort,
        Malformed::CountPastEnd,
        Malformed::NamePastEnd,
        Malformed::PointerPastEnd,
        Malformed::PointerLoop,
        Malformed::LabelTooLong,
        Malformed::NameTooLong,
        Malformed::RecordPastEnd,
        Malformed::RdataPastEnd,
        Malformed::BadRdata,
    ];

    /// Position in [`Malformed::ALL`], for an array of counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short snake_case name for metrics and summaries.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::HeaderTooShort => "header_too_short",
            Malformed::CountPastEnd => "count_past_end",
            Malformed::NamePastEnd => "name_past_end",
            Malformed::PointerPastEnd => "pointer_past_end",
            Malformed::PointerLoop => "pointer_loop",
            Malformed::LabelTooLong => "label_too_long",
            Malformed::NameTooLong => "name_too_long",
            Malformed::RecordPastEnd => "record_past_end",
            Malformed::RdataPastEnd => "rdata_past_end",
            Malformed::BadRdata => "bad_rdata",
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Malformed {}
