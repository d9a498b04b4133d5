//! Reading an HTTP/1.x response: the head (parsed by `httparse`), interim 1xx responses, and
//! how the body is framed (RFC 9112 §6.3).

use httparse::{Header, ParserConfig, Status};

use crate::progress::looked_at;

/// Interim (1xx) responses skipped before the final one at most; after that many the reply is
/// taken as it is (no server sends more than one or two: 100 Continue, 103 Early Hints).
pub(crate) const MAX_INTERIM: usize = 8;

/// Header slots on the stack (4 KiB); a head with more is parsed again with
/// [`MAX_HEADERS`] slots on the heap.
const STACK_HEADERS: usize = 128;

/// Header fields of a response at most; a head with more is not taken for HTTP (no server
/// sends that many, and the bound keeps the work per call small).
const MAX_HEADERS: usize = 1024;

/// How the body after a head ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: 1xx, 204, 304, or a reply to HEAD.
    NoBody,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding, ending with the last chunk.
    Chunked,
    /// Everything until the server closes.
    UntilClose,
}

/// What a head says, without borrowing the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// Bytes of the status line and header section, final empty line included.
    pub len: usize,
    pub status: u16,
    pub framing: Framing,
}

/// A head parsed as far as the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadParse {
    /// Not an HTTP/1.x response.
    Invalid,
    /// A prefix of a head; the status code when the status line has arrived.
    Partial {
        status: Option<u16>,
    },
    Complete(Head),
}

/// The lenient parser settings: we measure servers as they are, so obsolete line folding,
/// spaces before colons and stray invalid header lines do not make a reply unreadable.
pub(crate) fn parser_config() -> ParserConfig {
    let mut config = ParserConfig::default();
    config
        .allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true)
        .allow_multiple_spaces_in_response_status_delimiters(true)
        .ignore_invalid_headers_in_responses(true);
    config
}

/// Parses the head at the start of `bytes`; `head_request` says the request was HEAD.
pub(crate) fn parse_head(bytes: &[u8], head_request: bool) -> HeadParse {
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let parsed = match parse_head_with(&mut stack, bytes, head_request) {
        Some(parsed) => parsed,
        None => {
            looked_at(bytes.len());
            let mut heap = vec![httparse::EMPTY_HEADER; MAX_HEADERS];
            parse_head_with(&mut heap, bytes, head_request).unwrap_or(HeadParse::Invalid)
        }
    };
    // What httparse read, at most (for the tests that count it).
    looked_at(match parsed {
        HeadParse::Complete(head) => head.len,
        HeadParse::Partial { .. } | HeadParse::Invalid => bytes.len(),
    });
    parsed
}

/// `None` when `headers` has too few slots.
fn parse_head_with<'b>(
    headers: &mut [Header<'b>],
    bytes: &'b [u8],
    head_request: bool,
) -> Option<HeadParse> {
    let mut response = httparse::Response::new(headers);
    let parsed = match parser_config().parse_response(&mut response, bytes) {
        Err(httparse::Error::TooManyHeaders) => return None,
        Err(_) => HeadParse::Invalid,
        Ok(Status::Partial) => HeadParse::Partial {
            status: response.code,
        },
        Ok(Status::Complete(len)) => {
            let status = response.code.unwrap_or(0);
            HeadParse::Complete(Head {
                len,
                status,
                framing: framing(status, response.headers, head_request),
            })
        }
    };
    Some(parsed)
}

/// Skips interim 1xx responses (except 101, which ends HTTP on the connection) and returns
/// the offset of the final response in `received` with its head.
pub(crate) fn final_head(received: &[u8], head_request: bool) -> (usize, HeadParse) {
    let mut offset = 0;
    for _ in 0..MAX_INTERIM {
        match parse_head(&received[offset..], head_request) {
            HeadParse::Complete(head) if is_interim(head.status) => offset += head.len,
            other => return (offset, other),
        }
    }
    (offset, parse_head(&received[offset..], head_request))
}

fn is_interim(status: u16) -> bool {
    (100..200).contains(&status) && status != 101
}

/// How the body is framed, RFC 9112 §6.3: no body for HEAD, 1xx, 204, 304; Transfer-Encoding
/// ending in chunked; otherwise a valid Content-Length; otherwise until the server closes.
fn framing(status: u16, headers: &[Header<'_>], head_request: bool) -> Framing {
    if head_request || status < 200 || status == 204 || status == 304 {
        return Framing::NoBody;
    }
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut length = LengthHeader::Absent;
    for header in headers {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = Some(header.value);
        } else if header.name.eq_ignore_ascii_case("content-length") {
            length = length.with(header.value);
        }
    }
    if let Some(codings) = transfer_encoding {
        let last = codings.rsplit(|&b| b == b',').next().unwrap_or_default();
        return if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked
        } else {
            Framing::UntilClose
        };
    }
    match length {
        LengthHeader::Valid(len) => Framing::Length(len),
        LengthHeader::Absent | LengthHeader::Invalid => Framing::UntilClose,
    }
}

/// Content-Length over every occurrence: valid only when all agree (RFC 9110 §8.6 allows a
/// list of identical values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LengthHeader {
    Absent,
    Valid(u64),
    Invalid,
}

impl LengthHeader {
    fn with(self, value: &[u8]) -> LengthHeader {
        value.split(|&b| b == b',').fold(self, |so_far, item| {
            match (so_far, decimal(item.trim_ascii())) {
                (LengthHeader::Invalid, _) | (_, None) => LengthHeader::Invalid,
                (LengthHeader::Absent, Some(len)) => LengthHeader::Valid(len),
                (LengthHeader::Valid(seen), Some(len)) if seen == len => so_far,
                (LengthHeader::Valid(_), Some(_)) => LengthHeader::Invalid,
            }
        })
    }
}

/// A non-negative decimal of at most 19 digits (no sign, no spaces).
fn decimal(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> Head {
        match parse_head(bytes, false) {
            HeadParse::Complete(head) => head,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases: [(&[u8], Framing); 9] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n",
                Framing::Length(12),
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
                Framing::Length(5),
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                Framing::UntilClose,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
                Framing::UntilClose,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\nContent-Length: 3\r\n\r\n",
                Framing::Chunked,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                Framing::UntilClose,
            ),
            (b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n", Framing::UntilClose),
            (
                b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
                Framing::NoBody,
            ),
            (b"HTTP/1.1 304 Not Modified\r\n\r\n", Framing::NoBody),
        ];
        for (bytes, framing) in cases {
            assert_eq!(
                head(bytes).framing,
                framing,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let get = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n";
        let HeadParse::Complete(reply_to_head) = parse_head(get, true) else {
            panic!()
        };
        assert_eq!(reply_to_head.framing, Framing::NoBody);
    }

    #[test]
    fn interim_responses_are_skipped_but_101_is_final() {
        let reply = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let (offset, parsed) = final_head(reply, false);
        assert_eq!(offset, 44);
        assert!(matches!(
            parsed,
            HeadParse::Complete(Head { status: 200, .. })
        ));
        let upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n";
        assert!(matches!(
            final_head(upgrade, false),
            (0, HeadParse::Complete(Head { status: 101, .. }))
        ));
        let endless = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(20);
        let (offset, parsed) = final_head(&endless, false);
        assert_eq!(offset, 8 * 25);
        assert!(matches!(
            parsed,
            HeadParse::Complete(Head {
                status: 100,
                framing: Framing::NoBody,
                ..
            })
        ));
    }

    #[test]
    fn partial_heads_keep_the_status_once_the_line_is_in() {
        assert_eq!(
            parse_head(b"HTTP/1.1 40", false),
            HeadParse::Partial { status: None }
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 404 Not Found\r\nServ", false),
            HeadParse::Partial { status: Some(404) }
        );
        assert_eq!(
            parse_head(b"SSH-2.0-OpenSSH\r\n", false),
            HeadParse::Invalid
        );
    }

    #[test]
    fn many_headers_parse_through_the_heap() {
        let mut reply = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..1000 {
            reply.extend_from_slice(format!("X-Header-{i}: {i}\r\n").as_bytes());
        }
        reply.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
        let parsed = head(&reply);
        assert_eq!(parsed.framing, Framing::Length(2));
        assert_eq!(parsed.len, reply.len() - 2);
        let mut too_many = b"HTTP/1.1 200 OK\r\n".to_vec();
        too_many.extend_from_slice(&b"X: y\r\n".repeat(MAX_HEADERS + 1));
        too_many.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&too_many, false), HeadParse::Invalid);
    }
}
