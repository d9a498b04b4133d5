//! Chunked transfer coding (RFC 9112 §7.1): walks the chunks of a body, handing each chunk's
//! data to the caller. Chunk-size lines and trailers are parsed by `httparse`; this file only
//! checks the CRLF after each chunk's data. Work is linear in the body's length.

use httparse::Status;

/// How a chunked body ends within the bytes received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkedEnd {
    /// The last chunk and the (possibly empty) trailer section have arrived.
    Terminated,
    /// The bytes stop before the last chunk: more would come.
    Cut,
    /// Not chunked coding: a bad chunk size, a missing CRLF after a chunk, bad trailers.
    Malformed,
}

/// Trailer fields we parse at most; more is treated as malformed (no server sends that).
const MAX_TRAILERS: usize = 32;

/// Walks the chunks of `body`, calling `data` with each chunk's bytes (a cut chunk's present
/// part too), and says how the body ends.
pub(crate) fn decode(mut body: &[u8], mut data: impl FnMut(&[u8])) -> ChunkedEnd {
    loop {
        let (line_len, size) = match httparse::parse_chunk_size(body) {
            Ok(Status::Complete(found)) => found,
            Ok(Status::Partial) => return ChunkedEnd::Cut,
            Err(_) => return ChunkedEnd::Malformed,
        };
        body = &body[line_len..];
        if size == 0 {
            return trailers_end(body);
        }
        let present = body.len().min(usize::try_from(size).unwrap_or(usize::MAX));
        data(&body[..present]);
        if (present as u64) < size {
            return ChunkedEnd::Cut;
        }
        body = &body[present..];
        match body {
            [b'\r', b'\n', rest @ ..] => body = rest,
            [] | [b'\r'] => return ChunkedEnd::Cut,
            _ => return ChunkedEnd::Malformed,
        }
    }
}

/// After the last chunk: trailer fields, then an empty line.
fn trailers_end(rest: &[u8]) -> ChunkedEnd {
    let mut trailers = [httparse::EMPTY_HEADER; MAX_TRAILERS];
    match httparse::parse_headers(rest, &mut trailers) {
        Ok(Status::Complete(_)) => ChunkedEnd::Terminated,
        Ok(Status::Partial) => ChunkedEnd::Cut,
        Err(_) => ChunkedEnd::Malformed,
    }
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

    #[test]
    fn every_cut_is_cut_and_keeps_what_arrived() {
        let body = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";
        for cut in 0..body.len() {
            let (data, end) = decoded(&body[..cut]);
            assert_eq!(end, ChunkedEnd::Cut, "cut {cut}");
            assert!(b"Wikipedia".starts_with(&data), "cut {cut}: {data:?}");
        }
    }

    #[test]
    fn malformed_codings_are_recognised() {
        for body in [
            &b"zz\r\nabc"[..],
            b"3\r\nabcX\r\n",
            b"3\r\nabc\r\n0\r\n\x01bad\r\n\r\n",
        ] {
            assert_eq!(decoded(body).1, ChunkedEnd::Malformed, "{body:?}");
        }
    }

    #[test]
    fn a_huge_announced_chunk_is_only_cut() {
        let (data, end) = decoded(b"fffffffffffffff\r\nabc");
        assert_eq!((data.as_slice(), end), (&b"abc"[..], ChunkedEnd::Cut));
    }
}
