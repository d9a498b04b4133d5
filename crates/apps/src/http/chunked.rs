//! Chunked transfer coding (RFC 9112 §7.1), read by a walk that can stop anywhere and go on
//! later from where it stopped, so that checking a growing body reads each byte once.
//!
//! Lines end in CRLF or a bare LF: RFC 9112 §2.2 lets a recipient take a lone LF as a line
//! end, and servers do send it, but `httparse::parse_chunk_size` wants CRLF, so chunk-size
//! lines are parsed here. Each trailer line is checked by `httparse` when it is whole. A line
//! is read once: the walk looks for its LF and then reads it back from its start.

use crate::progress::{find, line_start, looked_at};

/// How a chunked body ends within the bytes received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkedEnd {
    /// The last chunk and the (possibly empty) trailer section have arrived.
    Terminated,
    /// The bytes stop before the last chunk: more would come.
    Cut,
    /// Not chunked coding: a bad chunk size, no line end after a chunk, bad trailers.
    Malformed,
}

/// Hex digits of a chunk size at most (as `httparse`: 16 make a u64).
const MAX_SIZE_DIGITS: usize = 16;

/// Where a walk through a chunked body stands. Positions are offsets in the bytes walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// In a chunk-size line, with no LF before `scanned`.
    SizeLine {
        scanned: usize,
    },
    /// In a chunk's data, which ends at `end` and is followed by a line end.
    Data {
        end: usize,
    },
    /// In the trailer section (after the last chunk), with no LF before `scanned`.
    Trailers {
        scanned: usize,
    },
    Terminated,
    Malformed,
}

impl Walk {
    /// A walk through the body that starts at `at`.
    pub(crate) fn start(at: usize) -> Walk {
        Walk::SizeLine { scanned: at }
    }

    /// How the body ends within the bytes walked so far.
    pub(crate) fn end(self) -> ChunkedEnd {
        match self {
            Walk::Terminated => ChunkedEnd::Terminated,
            Walk::Malformed => ChunkedEnd::Malformed,
            Walk::SizeLine { .. } | Walk::Data { .. } | Walk::Trailers { .. } => ChunkedEnd::Cut,
        }
    }

    /// Walks on through `bytes`, the bytes of the previous call and maybe more, as far as
    /// they go. Entering a chunk, it hands the chunk's data present in `bytes` to `data` (a
    /// walk made in one call so hands over the whole decoded body).
    pub(crate) fn advance(mut self, bytes: &[u8], mut data: impl FnMut(&[u8])) -> Walk {
        loop {
            let next = match self {
                Walk::SizeLine { scanned } => {
                    let Some(lf) = find(bytes, scanned, b'\n') else {
                        return Walk::SizeLine {
                            scanned: bytes.len(),
                        };
                    };
                    match chunk_size(without_line_end(line_to(bytes, lf))) {
                        None => Walk::Malformed,
                        Some(0) => Walk::Trailers { scanned: lf + 1 },
                        Some(size) => {
                            let start = lf + 1;
                            let end =
                                start.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
                            data(&bytes[start..end.min(bytes.len())]);
                            Walk::Data { end }
                        }
                    }
                }
                Walk::Data { end } => match bytes.get(end..) {
                    Some([b'\r', b'\n', ..]) => Walk::SizeLine { scanned: end + 2 },
                    Some([b'\n', ..]) => Walk::SizeLine { scanned: end + 1 },
                    None | Some([] | [b'\r']) => return self,
                    Some(_) => Walk::Malformed,
                },
                Walk::Trailers { scanned } => {
                    let Some(lf) = find(bytes, scanned, b'\n') else {
                        return Walk::Trailers {
                            scanned: bytes.len(),
                        };
                    };
                    let line = line_to(bytes, lf);
                    if without_line_end(line).is_empty() {
                        Walk::Terminated
                    } else if is_trailer_field(line) {
                        Walk::Trailers { scanned: lf + 1 }
                    } else {
                        Walk::Malformed
                    }
                }
                Walk::Terminated | Walk::Malformed => return self,
            };
            self = next;
        }
    }
}

/// The line that ends with the LF at `lf`, its line end included.
fn line_to(bytes: &[u8], lf: usize) -> &[u8] {
    &bytes[line_start(bytes, lf)..=lf]
}

/// `line` without its line end (LF, or CRLF).
fn without_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The size a chunk-size line gives: hex digits, then optional spaces or tabs and an
/// extension after `;` (read as `httparse` does: anything but CR). `None` if malformed.
fn chunk_size(line: &[u8]) -> Option<u64> {
    looked_at(line.len());
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > MAX_SIZE_DIGITS {
        return None;
    }
    let (hex, rest) = line.split_at(digits);
    let blanks = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let rest = &rest[blanks..];
    if !(rest.is_empty() || rest[0] == b';') || rest.contains(&b'\r') {
        return None;
    }
    Some(hex.iter().fold(0, |size, &digit| {
        // A hex digit (checked above); 16 of them fit a u64.
        size << 4 | u64::from(char::from(digit).to_digit(16).unwrap_or(0))
    }))
}

/// Whether `line` (its line end included) is one header field, as `httparse` reads trailers.
fn is_trailer_field(line: &[u8]) -> bool {
    looked_at(line.len());
    let mut field = [httparse::EMPTY_HEADER; 1];
    // One field and no empty line: httparse wants more (Partial) unless the line is bad.
    matches!(
        httparse::parse_headers(line, &mut field),
        Ok(httparse::Status::Partial)
    )
}

/// Walks the chunks of `body` from its start, calling `data` with each chunk's bytes (a cut
/// chunk's present part too), and says how the body ends.
pub(crate) fn decode(body: &[u8], data: impl FnMut(&[u8])) -> ChunkedEnd {
    Walk::start(0).advance(body, data).end()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(body: &[u8]) -> (Vec<u8>, ChunkedEnd) {
        let mut out = Vec::new();
        let end = decode(body, |chunk| out.extend_from_slice(chunk));
        (out, end)
    }

    #[test]
    fn decodes_chunks_with_extensions_and_trailers() {
        let body = b"4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n";
        assert_eq!(
            decoded(body),
            (
                b"Wikipedia in\r\n\r\nchunks.".to_vec(),
                ChunkedEnd::Terminated
            )
        );
        assert_eq!(decoded(b"0\r\n\r\n"), (Vec::new(), ChunkedEnd::Terminated));
    }

    /// RFC 9112 §2.2: a bare LF ends a line too. The same body with LF, CRLF and both mixed
    /// (with extensions, blanks before them, and trailers) decodes to the same bytes.
    #[test]
    fn bare_lf_line_ends_decode_as_crlf_ones() {
        let expected = b"Wikipedia in\r\n\r\nchunks.".to_vec();
        let bodies: [&[u8]; 4] = [
            b"4\nWiki\n5;name=value\npedia\nE\n in\r\n\r\nchunks.\n0\nExpires: never\n\n",
            b"4\r\nWiki\n5 ;name=\"v\"\r\npedia\nE\t\n in\r\n\r\nchunks.\r\n0;last\nExpires: never\r\nX-Sum: 1\n\r\n",
            b"4\nWiki\r\n5\npedia\r\ne\n in\r\n\r\nchunks.\n0\r\n\n",
            b"00004\nWiki\n5;a;b=\"c d\"\npedia\nE\n in\r\n\r\nchunks.\n000\n\n",
        ];
        for body in bodies {
            assert_eq!(
                decoded(body),
                (expected.clone(), ChunkedEnd::Terminated),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn every_cut_is_cut_and_keeps_what_arrived() {
        for body in [
            &b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"[..],
            b"4\nWiki\n5;x\npedia\n0\nA: b\n\n",
        ] {
            for cut in 0..body.len() {
                let (data, end) = decoded(&body[..cut]);
                assert_eq!(end, ChunkedEnd::Cut, "cut {cut}");
                assert!(b"Wikipedia".starts_with(&data), "cut {cut}: {data:?}");
            }
        }
    }

    #[test]
    fn malformed_codings_are_recognised() {
        for body in [
            &b"zz\r\nabc"[..],
            b"3\r\nabcX\r\n",
            b"3\r\nabc\r\n0\r\n\x01bad\r\n\r\n",
            b"3\nabc\n0\nNo colon\n\n",
            b"3\nabc\n0\n folded: x\n\n",
            b"\r\n3\r\nabc\r\n0\r\n\r\n",
            b" 3\r\nabc\r\n0\r\n\r\n",
            b"3 4\r\nabc\r\n0\r\n\r\n",
            b"3;a\rb\r\nabc\r\n0\r\n\r\n",
            b"3\r\r\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\r\r\n0\r\n\r\n",
            b"00000000000000003\r\nabc\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                decoded(body).1,
                ChunkedEnd::Malformed,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn sizes_read_as_httparse_reads_them_with_crlf() {
        for line in [
            &b"0"[..],
            b"a",
            b"FF",
            b"10 ",
            b"7fffffff ;x=y",
            b"ffffffffffffffff",
            b"3;\x01\xff",
            b"0000000000000003",
        ] {
            let mut crlf = line.to_vec();
            crlf.extend_from_slice(b"\r\n");
            let httparse = match httparse::parse_chunk_size(&crlf) {
                Ok(httparse::Status::Complete((_, size))) => Some(size),
                other => panic!("{other:?}"),
            };
            assert_eq!(chunk_size(line), httparse, "{line:?}");
        }
    }

    #[test]
    fn a_huge_announced_chunk_is_only_cut() {
        let (data, end) = decoded(b"fffffffffffffff\r\nabc");
        assert_eq!((data.as_slice(), end), (&b"abc"[..], ChunkedEnd::Cut));
        let (data, end) = decoded(b"ffffffffffffffff\nabc");
        assert_eq!((data.as_slice(), end), (&b"abc"[..], ChunkedEnd::Cut));
    }

    /// A walk stopped anywhere and taken on later ends as one made at once.
    #[test]
    fn a_walk_resumed_at_every_cut_ends_as_one_walk() {
        let body = b"4\r\nWiki\n5;x=1\r\npedia\n0\nTrailer: a\r\n\n";
        for cut in 0..=body.len() {
            let stopped = Walk::start(0).advance(&body[..cut], |_| {});
            let resumed = stopped.advance(body, |_| {});
            assert_eq!(resumed, Walk::Terminated, "cut {cut}: {stopped:?}");
        }
    }
}
