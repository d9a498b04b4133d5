//! `banner`: send nothing, keep what the server says first (SSH, SMTP, FTP, … greet first).

use std::net::IpAddr;

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, ReplyCursor};

use crate::progress::{find, Mark};
use crate::text::{int, lossy};
use crate::AppOutcome;

/// Fields of the `banner` app.
pub static BANNER_FIELDS: &[Field] = &[
    Field {
        name: "banner",
        kind: FieldType::Str,
        help: "what the server sent first, as text, line end included (invalid UTF-8 replaced): its bytes as they came, where the protocol apps' *_banner fields leave the last line end out",
    },
    Field {
        name: "banner_len",
        kind: FieldType::Int,
        help: "bytes the server sent",
    },
];

/// Sends nothing; the reply is complete at its first line end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BannerApp;

impl BannerApp {
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) -> AppOutcome {
        if received.is_empty() {
            values.extend([Value::Null, int(0)]);
        } else {
            values.extend([lossy(received), int(received.len())]);
        }
        AppOutcome::of_any_reply(received)
    }
}

impl App for BannerApp {
    fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        0
    }

    fn max_request_len(&self) -> usize {
        0
    }

    /// A banner is a line: complete once a `\n` has arrived.
    fn is_complete(&self, received: &[u8]) -> bool {
        self.is_complete_after(received, &mut ReplyCursor::default())
    }

    /// The cursor holds how far no `\n` was found (phase 0), or that one was (phase 1), so
    /// each byte of an endless line is read once.
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        let mark = Mark::load(*cursor);
        let complete = mark.phase == 1 || find(received, mark.pos, b'\n').is_some();
        *cursor = Mark {
            phase: u8::from(complete),
            aux: 0,
            pos: received.len(),
        }
        .store();
        complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::testing;

    const SSH: &[u8] = include_bytes!("../testdata/banner_ssh.txt");
    const SMTP: &[u8] = include_bytes!("../testdata/banner_smtp.txt");

    #[test]
    fn sends_nothing() {
        let mut buf = [0u8; 16];
        assert_eq!(
            BannerApp.write_request(&mut buf, "198.18.0.1".parse().unwrap(), 22),
            0
        );
        assert_eq!(BannerApp.max_request_len(), 0);
    }

    #[test]
    fn complete_exactly_when_the_first_line_has_ended() {
        for fixture in [SSH, SMTP] {
            let line_end = fixture.iter().position(|&b| b == b'\n').unwrap();
            for cut in 0..=fixture.len() {
                assert_eq!(
                    BannerApp.is_complete(&fixture[..cut]),
                    cut > line_end,
                    "cut {cut}"
                );
            }
        }
    }

    /// The engine asks after every segment: a line of n bytes costs O(n) reads in all, not
    /// one read of everything so far per segment (O(n²): 327 M bytes here).
    #[test]
    fn a_long_line_fed_by_segments_is_read_once() {
        let mut line = vec![b'x'; 256 * 1024];
        line.extend_from_slice(b"\r\n");
        let fed = testing::feed(&BannerApp, &line, 100);
        assert_eq!(fed.complete_at, Some(line.len()));
        assert!(
            fed.looked_at <= line.len() as u64,
            "{} bytes read for a {}-byte line",
            fed.looked_at,
            line.len()
        );
    }

    #[test]
    fn fed_by_segments_it_answers_as_on_the_whole() {
        for fixture in [SSH, SMTP, b"no line end at all"] {
            testing::assert_any_segmenting_agrees(&BannerApp, fixture);
        }
        // Once complete it stays so, whatever follows.
        let mut cursor = ReplyCursor::default();
        assert!(BannerApp.is_complete_after(b"a\n", &mut cursor));
        assert!(BannerApp.is_complete_after(b"a\nbc", &mut cursor));
    }

    #[test]
    fn describes_the_ssh_greeting() {
        let mut values = Vec::new();
        BannerApp.describe_into(SSH, &mut values);
        let Value::Str(banner) = &values[0] else {
            panic!("{values:?}")
        };
        assert!(banner.starts_with("SSH-2.0-OpenSSH_"));
        assert!(banner.ends_with("\r\n"));
        assert_eq!(values[1], Value::Int(SSH.len() as u64));
    }

    #[test]
    fn invalid_utf8_is_replaced_and_nothing_is_null() {
        let mut values = Vec::new();
        BannerApp.describe_into(b"220 \xff\xfe ok\r\n", &mut values);
        assert_eq!(
            values[0],
            Value::Str("220 \u{fffd}\u{fffd} ok\r\n".to_string())
        );
        assert_eq!(values[1], Value::Int(11));
        values.clear();
        BannerApp.describe_into(b"", &mut values);
        assert_eq!(values, [Value::Null, Value::Int(0)]);
    }
}
