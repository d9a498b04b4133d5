//! When an HTTP reply is complete, read as it grows: the state of the reading fits the one
//! [`ReplyCursor`] word the engine keeps per reply, and each call reads only what came since
//! the last (plus a look back of at most four bytes, and each line once more when it ends).
//!
//! The head is parsed by `httparse` in whole, so it is parsed only when that can decide
//! something: while the reply is within its first [`EAGER_HEAD`] bytes (bytes that are not
//! HTTP show there, and the reply is complete at once), and at each empty line that follows a
//! line (the end of a head: an interim 1xx one, at most [`MAX_INTERIM`] of them, or the final
//! one). A reply that turns into non-HTTP after its first KiB and never ends a head is
//! complete only when the server closes. Then the body: Content-Length (compare the length),
//! chunked (a resumable walk), or until close.
//!
//! [`MAX_INTERIM`]: super::response::MAX_INTERIM

use sonde_tcp::ReplyCursor;

use super::chunked::Walk;
use super::response::{final_head, Framing, HeadParse};
use crate::progress::{find, Mark};

/// The reply's first bytes that are parsed after every segment, so that a reply that is not
/// HTTP is recognised at once: its first line shows it.
pub(crate) const EAGER_HEAD: usize = 1024;

/// How far the reading of a reply got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// The final response's head is not in: no LF before `scanned` ends a head that decides.
    Head {
        scanned: usize,
    },
    /// A body of Content-Length bytes, whole when the reply reaches `end`.
    Length {
        end: usize,
    },
    /// A chunked body.
    Chunks(Walk),
    /// Nothing the server sends ends the reply: the body runs until the server closes, or its
    /// chunks went wrong.
    UntilClose,
    Complete,
}

/// Phases of [`Reading`] in a cursor's [`Mark`].
mod phase {
    pub const HEAD: u8 = 0;
    pub const LENGTH: u8 = 1;
    pub const SIZE_LINE: u8 = 2;
    pub const DATA: u8 = 3;
    pub const TRAILERS: u8 = 4;
    pub const UNTIL_CLOSE: u8 = 5;
    pub const COMPLETE: u8 = 6;
}

impl Reading {
    fn load(cursor: ReplyCursor) -> Reading {
        let Mark { phase, pos, .. } = Mark::load(cursor);
        match phase {
            phase::HEAD => Reading::Head { scanned: pos },
            phase::LENGTH => Reading::Length { end: pos },
            phase::SIZE_LINE => Reading::Chunks(Walk::SizeLine { scanned: pos }),
            phase::DATA => Reading::Chunks(Walk::Data { end: pos }),
            phase::TRAILERS => Reading::Chunks(Walk::Trailers { scanned: pos }),
            phase::UNTIL_CLOSE => Reading::UntilClose,
            _ => Reading::Complete,
        }
    }

    fn store(self) -> ReplyCursor {
        let (phase, pos) = match self {
            Reading::Head { scanned } => (phase::HEAD, scanned),
            Reading::Length { end } => (phase::LENGTH, end),
            Reading::Chunks(Walk::SizeLine { scanned }) => (phase::SIZE_LINE, scanned),
            Reading::Chunks(Walk::Data { end }) => (phase::DATA, end),
            Reading::Chunks(Walk::Trailers { scanned }) => (phase::TRAILERS, scanned),
            Reading::UntilClose | Reading::Chunks(Walk::Malformed) => (phase::UNTIL_CLOSE, 0),
            Reading::Complete | Reading::Chunks(Walk::Terminated) => (phase::COMPLETE, 0),
        };
        Mark { phase, aux: 0, pos }.store()
    }
}

/// Whether `received` is a complete reply; `cursor` says how far the previous calls read.
pub(crate) fn is_complete_after(
    received: &[u8],
    head_request: bool,
    cursor: &mut ReplyCursor,
) -> bool {
    let mut reading = Reading::load(*cursor);
    if let Reading::Head { scanned } = reading {
        reading = read_head(received, scanned, head_request);
    }
    reading = match reading {
        Reading::Length { end } if received.len() >= end => Reading::Complete,
        Reading::Chunks(walk) => match walk.advance(received, |_| {}) {
            Walk::Terminated => Reading::Complete,
            Walk::Malformed => Reading::UntilClose,
            walk => Reading::Chunks(walk),
        },
        other => other,
    };
    *cursor = reading.store();
    reading == Reading::Complete
}

/// Reads on in the head from `scanned`: the body's reading once the final head is in.
fn read_head(received: &[u8], scanned: usize, head_request: bool) -> Reading {
    let mut from = scanned;
    if scanned < EAGER_HEAD {
        let eager = &received[..received.len().min(EAGER_HEAD)];
        if let Some(reading) = decided(eager, head_request) {
            return reading;
        }
        // The parse of `eager` decided nothing, so neither would one of its prefixes.
        from = from.max(eager.len());
    }
    while let Some(lf) = find(received, from, b'\n') {
        if ends_a_head(received, lf) {
            if let Some(reading) = decided(&received[..=lf], head_request) {
                return reading;
            }
        }
        from = lf + 1;
    }
    Reading::Head {
        scanned: received.len(),
    }
}

/// What parsing the heads in `prefix` decides: nothing while the final head is partial.
fn decided(prefix: &[u8], head_request: bool) -> Option<Reading> {
    match final_head(prefix, head_request) {
        (_, HeadParse::Partial { .. }) => None,
        (_, HeadParse::Invalid) => Some(Reading::Complete),
        (offset, HeadParse::Complete(head)) => {
            let body = offset + head.len;
            Some(match head.framing {
                Framing::NoBody => Reading::Complete,
                Framing::Length(len) => Reading::Length {
                    end: body.saturating_add(usize::try_from(len).unwrap_or(usize::MAX)),
                },
                Framing::Chunked => Reading::Chunks(Walk::start(body)),
                Framing::UntilClose => Reading::UntilClose,
            })
        }
    }
}

/// Whether the LF at `lf` ends an empty line that follows a line with something on it: how
/// every head ends (`httparse` ends a line at LF or CRLF). Empty lines before a status line,
/// which `httparse` skips, are not such a line.
fn ends_a_head(bytes: &[u8], lf: usize) -> bool {
    // The start of the empty line, then of the previous line's end.
    let empty_line = before_cr(bytes, lf);
    if empty_line == 0 || bytes[empty_line - 1] != b'\n' {
        return false;
    }
    let line_end = before_cr(bytes, empty_line - 1);
    line_end > 0 && !matches!(bytes[line_end - 1], b'\r' | b'\n')
}

/// `at`, or the index before it when a CR is there: where the line end at `at` starts.
fn before_cr(bytes: &[u8], at: usize) -> usize {
    if at > 0 && bytes[at - 1] == b'\r' {
        at - 1
    } else {
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_survive_their_cursor() {
        for reading in [
            Reading::Head { scanned: 0 },
            Reading::Head { scanned: 77 },
            Reading::Length { end: 1 << 30 },
            Reading::Chunks(Walk::SizeLine { scanned: 5 }),
            Reading::Chunks(Walk::Data { end: 9 }),
            Reading::Chunks(Walk::Trailers { scanned: 12 }),
            Reading::UntilClose,
            Reading::Complete,
        ] {
            assert_eq!(Reading::load(reading.store()), reading);
        }
        assert_eq!(
            Reading::load(ReplyCursor::default()),
            Reading::Head { scanned: 0 }
        );
    }

    #[test]
    fn head_ends_are_empty_lines_after_a_line() {
        let ends: [(&[u8], bool); 10] = [
            (b"OK\r\n\r\n", true),
            (b"OK\n\n", true),
            (b"OK\r\n\n", true),
            (b"OK\n\r\n", true),
            (b"\r\n\r\n", false),
            (b"\n\n", false),
            (b"OK\r\r\n", false),
            (b"a\r\n \r\n", false),
            (b" \r\n\r\n", true),
            (b"\n", false),
        ];
        for (bytes, end) in ends {
            assert_eq!(
                ends_a_head(bytes, bytes.len() - 1),
                end,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
