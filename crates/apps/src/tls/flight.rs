//! Reading the server's first flight from the bytes received so far: records are cut by
//! `tls-parser`, handshake messages are reassembled across records (a record may hold several
//! messages, a message may span several records), and the messages we need (ServerHello,
//! Certificate) are parsed by `tls-parser`. Work is linear in the bytes, and memory is
//! borrowed except for a needed message that spans records.
//!
//! A reading can start again at a record boundary where no handshake message is open, so the
//! completeness check after each segment reads on from the last such boundary: record and
//! message headers once each, except those of a message still open, which (at most
//! [`MAX_RECORDS`] records, a ServerHello at most [`MAX_SERVER_HELLO_LEN`] bytes) are read
//! again until it closes.

use std::borrow::Cow;

use sonde_tcp::ReplyCursor;

use super::ja3s::Ja3s;
use crate::progress::{looked_at, Mark};
use tls_parser::{
    parse_tls_handshake_server_hello, parse_tls_raw_record, parse_tls_server_hello_extension,
    TlsExtension, TlsHandshakeType, TlsMessage, TlsRecordType,
};

/// Records read at most. A real first flight has fewer than ten (ServerHello, Certificate,
/// CertificateStatus, ServerKeyExchange, CertificateRequest, ServerHelloDone, some split);
/// a server that sends more without finishing is not going to.
const MAX_RECORDS: usize = 256;

/// The longest ServerHello body: version, random, a 32-byte session id, cipher, compression,
/// and 2^16 - 1 bytes of extensions with their length.
const MAX_SERVER_HELLO_LEN: usize = 2 + 32 + 1 + 32 + 2 + 1 + 2 + 0xffff;

/// Bytes of a record's header: type, version, length.
const RECORD_HEADER_LEN: usize = 5;
/// Bytes of a handshake message's header: type, 24-bit length.
const MESSAGE_HEADER_LEN: usize = 4;

/// Why reading stopped. Everything but `Incomplete` means the reply is complete: nothing more
/// the server sends would be readable or change the outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlightEnd {
    /// More bytes are needed.
    Incomplete,
    /// TLS ≤ 1.2: the ServerHelloDone arrived; the server waits for us now.
    ServerHelloDone,
    /// TLS 1.3: the ServerHello (or HelloRetryRequest) arrived; the rest is encrypted.
    Tls13ServerHello,
    /// A fatal alert (or close_notify) arrived.
    Alert,
    /// A ChangeCipherSpec or application data: what follows is encrypted.
    Encrypted,
    /// The first bytes are not a TLS record (an HTTP error page, an SSH banner, …).
    NotTls,
    /// TLS records that make no sense (bad record or message, an unparsable ServerHello).
    Garbled,
    /// [`MAX_RECORDS`] records without an end.
    TooManyRecords,
}

/// What the ServerHello says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerHello {
    /// The negotiated version: supported_versions when present (TLS 1.3), else the legacy one.
    pub version: u16,
    pub cipher: u16,
    /// What the JA3S fingerprint reads of it.
    pub ja3s: Ja3s,
}

/// What the flight says so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Flight<'a> {
    pub server_hello: Option<ServerHello>,
    /// The description of the fatal alert that ended the flight, else of the first warning
    /// read past.
    pub alert: Option<u8>,
    /// The body of the Certificate message (when asked for and whole).
    pub certificate: Option<Cow<'a, [u8]>>,
    pub end: FlightEnd,
}

/// A record boundary where reading can start over: no handshake message is open there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Boundary {
    /// The offset of the next record in the bytes received.
    pub offset: usize,
    /// Records before it.
    pub records: usize,
}

/// Reads the flight in `received`; the Certificate message is kept only if `keep_certificate`.
pub(crate) fn read_flight(received: &[u8], keep_certificate: bool) -> Flight<'_> {
    read_flight_from(received, Boundary::default(), keep_certificate).0
}

/// Reads the flight in `received` from `start`, and says where a later call with more bytes
/// can start (the last boundary reached). What comes before `start` can only be the end of
/// the flight's records, so `end` is as read from the start; the other fields are not.
pub(crate) fn read_flight_from(
    received: &[u8],
    start: Boundary,
    keep_certificate: bool,
) -> (Flight<'_>, Boundary) {
    let mut flight = Flight {
        server_hello: None,
        alert: None,
        certificate: None,
        end: FlightEnd::Incomplete,
    };
    let mut messages = Reassembler::keeping_certificate(keep_certificate);
    let mut boundary = start;
    let mut rest = received.get(start.offset..).unwrap_or_default();
    for index in start.records..MAX_RECORDS {
        if !plausible_record_start(rest) {
            flight.end = if index == 0 {
                FlightEnd::NotTls
            } else {
                FlightEnd::Garbled
            };
            return (flight, boundary);
        }
        looked_at(RECORD_HEADER_LEN);
        let record = match parse_tls_raw_record(rest) {
            Ok((after, record)) => {
                rest = after;
                record
            }
            Err(tls_parser::Err::Incomplete(_)) => return (flight, boundary),
            Err(_) => {
                flight.end = FlightEnd::Garbled;
                return (flight, boundary);
            }
        };
        let end = match record.hdr.record_type {
            TlsRecordType::Handshake => messages.feed(record.data, |kind, body| {
                on_message(&mut flight, kind, body)
            }),
            TlsRecordType::Alert => match alert_of(record.data) {
                // A warning (unrecognized_name before the ServerHello, as servers of a name
                // they do not know send it) is read past: the handshake goes on. It is kept
                // unless a fatal alert follows.
                Some(alert) if alert.is_warning_that_goes_on() => {
                    flight.alert.get_or_insert(alert.description);
                    None
                }
                Some(alert) => {
                    flight.alert = Some(alert.description);
                    Some(FlightEnd::Alert)
                }
                None => Some(FlightEnd::Garbled),
            },
            TlsRecordType::ChangeCipherSpec | TlsRecordType::ApplicationData => {
                Some(FlightEnd::Encrypted)
            }
            _ => Some(FlightEnd::Garbled),
        };
        if let Some(end) = end {
            flight.end = end;
            return (flight, boundary);
        }
        if messages.is_idle() {
            boundary = Boundary {
                offset: received.len() - rest.len(),
                records: index + 1,
            };
        }
    }
    flight.end = FlightEnd::TooManyRecords;
    (flight, boundary)
}

/// Whether the flight in `received` is complete, reading on from where `cursor` says the last
/// call stopped: the last record boundary reached with no handshake message open (phase 0), or
/// that the flight ended (phase 1). `received` extends the bytes of the previous call.
pub(crate) fn is_complete_after(received: &[u8], cursor: &mut ReplyCursor) -> bool {
    let mark = Mark::load(*cursor);
    if mark.phase == 1 {
        return true;
    }
    let start = Boundary {
        offset: mark.pos,
        records: usize::from(mark.aux),
    };
    let (flight, boundary) = read_flight_from(received, start, false);
    let complete = flight.end != FlightEnd::Incomplete;
    *cursor = Mark {
        phase: u8::from(complete),
        // At most MAX_RECORDS (256).
        aux: u16::try_from(boundary.records).unwrap_or(u16::MAX),
        pos: boundary.offset,
    }
    .store();
    complete
}

/// Whether `bytes` can start a TLS record, as far as they go: a content type we know and
/// major version 3 (SSL 3.0 to TLS 1.3).
fn plausible_record_start(bytes: &[u8]) -> bool {
    let known_type = TlsRecordType::ChangeCipherSpec.0..=TlsRecordType::Heartbeat.0;
    bytes.first().is_none_or(|kind| known_type.contains(kind))
        && bytes.get(1).is_none_or(|&major| major == 3)
}

/// Handles one whole handshake message; `Some` ends the flight.
fn on_message<'a>(
    flight: &mut Flight<'a>,
    kind: TlsHandshakeType,
    body: Cow<'a, [u8]>,
) -> Option<FlightEnd> {
    match kind {
        TlsHandshakeType::ServerHello => {
            let Some(hello) = server_hello(&body) else {
                return Some(FlightEnd::Garbled);
            };
            flight.server_hello = Some(hello);
            (hello.version >= 0x0304).then_some(FlightEnd::Tls13ServerHello)
        }
        TlsHandshakeType::Certificate => {
            flight.certificate = Some(body);
            None
        }
        TlsHandshakeType::ServerDone => Some(FlightEnd::ServerHelloDone),
        _ => None,
    }
}

/// Version and cipher of a ServerHello body. A TLS 1.3 server says 0x0303 in the legacy field
/// and its real version in supported_versions (RFC 8446 §4.1.3); a HelloRetryRequest is a
/// ServerHello too and reads the same way.
fn server_hello(body: &[u8]) -> Option<ServerHello> {
    let (_, hello) = parse_tls_handshake_server_hello(body).ok()?;
    let mut version = hello.version.0;
    let mut extensions = hello.ext.unwrap_or_default();
    while !extensions.is_empty() {
        let Ok((rest, extension)) = parse_tls_server_hello_extension(extensions) else {
            break;
        };
        if let TlsExtension::SupportedVersions(versions) = extension {
            if let [selected] = versions.as_slice() {
                version = selected.0;
            }
        }
        extensions = rest;
    }
    Some(ServerHello {
        version,
        cipher: hello.cipher.0,
        ja3s: Ja3s::new(
            hello.version.0,
            hello.cipher.0,
            hello.ext.unwrap_or_default(),
        ),
    })
}

/// An alert record's level and description.
#[derive(Clone, Copy, Debug)]
struct Alert {
    level: u8,
    description: u8,
}

impl Alert {
    /// A warning other than close_notify (which ends the connection, RFC 5246 §7.2.1).
    fn is_warning_that_goes_on(self) -> bool {
        const WARNING: u8 = 1;
        const CLOSE_NOTIFY: u8 = 0;
        self.level == WARNING && self.description != CLOSE_NOTIFY
    }
}

/// The alert of an alert record.
fn alert_of(data: &[u8]) -> Option<Alert> {
    match tls_parser::parse_tls_message_alert(data) {
        Ok((_, TlsMessage::Alert(alert))) => Some(Alert {
            level: alert.severity.0,
            description: alert.code.0,
        }),
        _ => None,
    }
}

/// Handshake messages out of a stream of handshake record fragments.
struct Reassembler {
    /// The message header (type, 24-bit length) while it arrives.
    header: [u8; MESSAGE_HEADER_LEN],
    header_len: usize,
    /// Body bytes of the current message still to come.
    remaining: usize,
    /// The current message's body so far when it spans fragments and is wanted.
    spanning: Vec<u8>,
    keep_certificate: bool,
}

impl Reassembler {
    fn keeping_certificate(keep_certificate: bool) -> Reassembler {
        Reassembler {
            header: [0; MESSAGE_HEADER_LEN],
            header_len: 0,
            remaining: 0,
            spanning: Vec::new(),
            keep_certificate,
        }
    }

    /// Whether no message is open: the next fragment starts a message.
    fn is_idle(&self) -> bool {
        self.header_len == 0
    }

    /// Messages whose body is handed over; others are skipped without copying (an empty body).
    fn wants(&self, kind: TlsHandshakeType) -> bool {
        kind == TlsHandshakeType::ServerHello
            || (kind == TlsHandshakeType::Certificate && self.keep_certificate)
    }

    /// Feeds one record's fragment; `on_message` gets each whole message (borrowed when it
    /// lies in this fragment) and can end the flight.
    fn feed<'a>(
        &mut self,
        mut fragment: &'a [u8],
        mut on_message: impl FnMut(TlsHandshakeType, Cow<'a, [u8]>) -> Option<FlightEnd>,
    ) -> Option<FlightEnd> {
        while !fragment.is_empty() {
            if self.header_len < MESSAGE_HEADER_LEN {
                let take = (MESSAGE_HEADER_LEN - self.header_len).min(fragment.len());
                looked_at(take);
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&fragment[..take]);
                self.header_len += take;
                fragment = &fragment[take..];
                if self.header_len < MESSAGE_HEADER_LEN {
                    break;
                }
                let [_, a, b, c] = self.header;
                self.remaining = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
                self.spanning.clear();
                if self.header[0] == TlsHandshakeType::ServerHello.0
                    && self.remaining > MAX_SERVER_HELLO_LEN
                {
                    // Not a ServerHello: collecting it would copy megabytes per segment.
                    return Some(FlightEnd::Garbled);
                }
            }
            let kind = TlsHandshakeType(self.header[0]);
            let take = self.remaining.min(fragment.len());
            let (part, after) = fragment.split_at(take);
            fragment = after;
            self.remaining -= take;
            let done = self.remaining == 0;
            if !done {
                if self.wants(kind) {
                    looked_at(part.len());
                    self.spanning.extend_from_slice(part);
                }
                continue;
            }
            let body = if !self.wants(kind) {
                Cow::Borrowed(&part[..0])
            } else if self.spanning.is_empty() {
                Cow::Borrowed(part)
            } else {
                looked_at(part.len());
                self.spanning.extend_from_slice(part);
                Cow::Owned(std::mem::take(&mut self.spanning))
            };
            self.header_len = 0;
            if let Some(end) = on_message(kind, body) {
                return Some(end);
            }
        }
        None
    }
}
