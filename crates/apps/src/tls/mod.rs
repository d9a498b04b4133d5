//! `tls`: a ClientHello, and what the server's first flight says: version, cipher suite,
//! alert, and the certificate chain.
//!
//! TLS 1.2 is the highest version offered by default: a TLS 1.3 server encrypts its
//! certificate, so offering 1.3 would hide the certificate of every server that speaks it,
//! while a 1.2 hello makes 1.2- and 1.3-capable servers alike send it in clear. With
//! `tls_max` 1.3 the version and cipher of 1.3 servers are seen, their certificates not.

mod cert;
mod flight;
mod hello;

use std::net::IpAddr;

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, ReplyCursor};
use tls_parser::{TlsAlertDescription, TlsCipherSuite};

use crate::progress::Mark;
use crate::AppOptions;
use flight::{read_flight, read_flight_from, Boundary, FlightEnd};
use hello::ClientHello;

/// Fields of the `tls` app.
pub static TLS_FIELDS: &[Field] = &[
    Field {
        name: "tls_version",
        kind: FieldType::Str,
        help: "negotiated version: SSLv3, TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3",
    },
    Field {
        name: "tls_cipher",
        kind: FieldType::Str,
        help: "cipher suite the server chose, IANA name",
    },
    Field {
        name: "tls_alert",
        kind: FieldType::Str,
        help: "alert the server sent instead (e.g. handshake_failure)",
    },
    Field {
        name: "tls_cert_subject",
        kind: FieldType::Str,
        help: "subject of the server's certificate (TLS 1.2 and older)",
    },
    Field {
        name: "tls_cert_issuer",
        kind: FieldType::Str,
        help: "issuer of the server's certificate",
    },
    Field {
        name: "tls_cert_sans",
        kind: FieldType::Str,
        help: "DNS names and IP addresses of the certificate, comma-separated",
    },
    Field {
        name: "tls_cert_not_before",
        kind: FieldType::Str,
        help: "start of the certificate's validity, RFC 3339",
    },
    Field {
        name: "tls_cert_not_after",
        kind: FieldType::Str,
        help: "end of the certificate's validity, RFC 3339",
    },
    Field {
        name: "tls_cert_sha256",
        kind: FieldType::Str,
        help: "SHA-256 of the certificate's DER, hex",
    },
    Field {
        name: "tls_chain_len",
        kind: FieldType::Int,
        help: "certificates the server sent",
    },
    Field {
        name: "tls_chain",
        kind: FieldType::Str,
        help: "JSON array of {subject, issuer, sha256} for each certificate sent",
    },
];

/// Sends a ClientHello; the reply is complete at the ServerHelloDone (TLS ≤ 1.2), at a TLS 1.3
/// ServerHello, at an alert, or when the bytes are not (or no longer readable as) TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsApp {
    hello: ClientHello,
}

impl TlsApp {
    pub fn new(options: &AppOptions) -> Result<TlsApp, String> {
        let server_name = server_name(options)?;
        Ok(TlsApp {
            hello: ClientHello::new(options.tls_max, server_name.as_deref())?,
        })
    }

    /// Values of [`TLS_FIELDS`] for the reply `received`.
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) {
        let flight = read_flight(received, true);
        let hello = flight.server_hello;
        values.push(hello.map_or(Value::Null, |h| Value::Str(version_name(h.version))));
        values.push(hello.map_or(Value::Null, |h| Value::Str(cipher_name(h.cipher))));
        values.push(
            flight
                .alert
                .map_or(Value::Null, |a| Value::Str(alert_name(a))),
        );
        // Only a whole Certificate message is read; a cut one tells nothing reliable.
        cert::describe_chain(flight.certificate.as_deref(), values);
    }
}

/// The SNI to send: `tls_sni`, else `http_host` when it is a name; never an IP address
/// (RFC 6066 §3 does not allow them).
fn server_name(options: &AppOptions) -> Result<Option<String>, String> {
    if let Some(name) = &options.tls_sni {
        if name.parse::<IpAddr>().is_ok() {
            return Err(format!(
                "bad --tls-sni {name:?}: SNI takes a host name, not an IP address (leave it out)"
            ));
        }
        if !is_host_name(name) {
            return Err(format!(
                "bad --tls-sni {name:?}: give a host name (letters, digits, '-', '.'; at most 253)"
            ));
        }
        return Ok(Some(name.clone()));
    }
    let Some(host) = &options.http_host else {
        return Ok(None);
    };
    // Host may carry a port; a bracketed IPv6 literal is no name.
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host.as_str(),
    };
    let usable = is_host_name(name) && name.parse::<IpAddr>().is_err();
    Ok(usable.then(|| name.to_string()))
}

/// A DNS name as SNI carries it: ASCII letters, digits, '-', '_', '.', at most 253 bytes.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn version_name(version: u16) -> String {
    match version {
        0x0300 => "SSLv3".to_string(),
        0x0301 => "TLSv1.0".to_string(),
        0x0302 => "TLSv1.1".to_string(),
        0x0303 => "TLSv1.2".to_string(),
        0x0304 => "TLSv1.3".to_string(),
        other => format!("0x{other:04x}"),
    }
}

/// The IANA name from `tls-parser`'s table, or the number in hex.
fn cipher_name(id: u16) -> String {
    TlsCipherSuite::from_id(id)
        .map_or_else(|| format!("0x{id:04x}"), |suite| suite.name.to_string())
}

/// The RFC name of an alert (`handshake_failure`), from `tls-parser`'s table; unknown ones as
/// `alert_<n>`.
fn alert_name(code: u8) -> String {
    let camel = TlsAlertDescription(code).to_string();
    if camel.starts_with("TlsAlertDescription(") {
        return format!("alert_{code}");
    }
    // tls-parser abbreviates "certificate" in three names the RFCs spell out.
    let camel = match camel.as_str() {
        "CertUnobtainable" => "CertificateUnobtainable",
        "BadCertStatusResponse" => "BadCertificateStatusResponse",
        "BadCertHashValue" => "BadCertificateHashValue",
        other => other,
    };
    let mut snake = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}

impl App for TlsApp {
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        self.hello.write(buf, addr, port)
    }

    fn max_request_len(&self) -> usize {
        self.hello.bytes.len()
    }

    fn is_complete(&self, received: &[u8]) -> bool {
        self.is_complete_after(received, &mut ReplyCursor::default())
    }

    /// The cursor holds the last record boundary reached with no handshake message open
    /// (phase 0), or that the flight ended (phase 1): each call reads on from that boundary.
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
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
}

#[cfg(test)]
mod tests;
