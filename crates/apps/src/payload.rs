//! `payload`: send fixed bytes (`--payload-hex`, `--payload-file`), keep the reply as hex.

use std::net::IpAddr;

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::App;

use crate::text::{hex, int};
use crate::{AppOptions, AppOutcome};

/// Fields of the `payload` app.
pub static PAYLOAD_FIELDS: &[Field] = &[
    Field {
        name: "reply_hex",
        kind: FieldType::Str,
        help: "the reply's bytes in hex",
    },
    Field {
        name: "reply_len",
        kind: FieldType::Int,
        help: "bytes of the reply",
    },
];

/// Sends the payload. Never complete by itself: a protocol we do not know has no end we can
/// see, so the server's FIN, the idle timeout or `max_bytes` ends the reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadApp {
    payload: Vec<u8>,
}

impl PayloadApp {
    pub fn new(options: &AppOptions) -> Result<PayloadApp, String> {
        if options.payload.is_empty() {
            return Err(
                "the payload app needs bytes to send: give --payload-hex or --payload-file \
                 (or use -M banner to send nothing)"
                    .to_string(),
            );
        }
        Ok(PayloadApp {
            payload: options.payload.clone(),
        })
    }

    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) -> AppOutcome {
        let reply = if received.is_empty() {
            Value::Null
        } else {
            Value::Str(hex(received))
        };
        values.extend([reply, int(received.len())]);
        AppOutcome::of_any_reply(received)
    }
}

impl App for PayloadApp {
    fn write_request(&self, buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        match buf.get_mut(..self.payload.len()) {
            Some(out) => {
                out.copy_from_slice(&self.payload);
                self.payload.len()
            }
            // The engine promises max_request_len bytes; send nothing rather than a torn payload.
            None => 0,
        }
    }

    fn max_request_len(&self) -> usize {
        self.payload.len()
    }

    fn is_complete(&self, _received: &[u8]) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(payload: &[u8]) -> PayloadApp {
        PayloadApp::new(&AppOptions {
            payload: payload.to_vec(),
            ..AppOptions::default()
        })
        .unwrap()
    }

    #[test]
    fn sends_the_payload_and_is_never_complete() {
        let app = app(b"\x00\x01hello");
        let mut buf = [0u8; 32];
        let len = app.write_request(&mut buf, "198.18.0.1".parse().unwrap(), 7);
        assert_eq!(&buf[..len], b"\x00\x01hello");
        assert_eq!(app.max_request_len(), 7);
        assert!(!app.is_complete(b"anything\r\n\r\n"));
        assert_eq!(
            app.write_request(&mut buf[..3], "198.18.0.1".parse().unwrap(), 7),
            0
        );
    }

    #[test]
    fn an_empty_payload_is_refused() {
        let err = PayloadApp::new(&AppOptions::default()).unwrap_err();
        assert!(err.contains("--payload-hex"), "{err}");
    }

    #[test]
    fn describes_the_reply_in_hex() {
        let mut values = Vec::new();
        app(b"x").describe_into(b"\x00\xffA", &mut values);
        assert_eq!(values, [Value::Str("00ff41".to_string()), Value::Int(3)]);
        values.clear();
        app(b"x").describe_into(b"", &mut values);
        assert_eq!(values, [Value::Null, Value::Int(0)]);
    }
}
