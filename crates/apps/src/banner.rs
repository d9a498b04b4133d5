//! `banner`: send nothing, keep what the server says first (SSH, SMTP, FTP, … greet first).

use std::net::IpAddr;

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::App;

use crate::text::{int, lossy};

/// Fields of the `banner` app.
pub static BANNER_FIELDS: &[Field] = &[
    Field {
        name: "banner",
        kind: FieldType::Str,
        help: "what the server sent first, as text (invalid UTF-8 replaced)",
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
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) {
        if received.is_empty() {
            values.extend([Value::Null, int(0)]);
        } else {
            values.extend([lossy(received), int(received.len())]);
        }
    }
}

impl App for BannerApp {
    fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        0
    }

    fn max_request_len(&self) -> usize {
        0
    }

    /// A banner is a line: complete once a `\n` has arrived. (A memchr over what has arrived,
    /// so a hostile endless line costs a few linear scans per segment, no more.)
    fn is_complete(&self, received: &[u8]) -> bool {
        received.contains(&b'\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
