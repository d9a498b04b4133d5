//! `http`: one HTTP/1.1 request with `Connection: close`, and the response it gets: status,
//! headers, and the body decoded from its framing (Content-Length, chunked, or until close).

mod chunked;
mod complete;
mod response;

use std::io::Write;
use std::net::IpAddr;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, ReplyCursor};

use crate::text::{hex, int, lossy, sha256_hex};
use crate::{AppOptions, AppOutcome, TargetNames};
use chunked::ChunkedEnd;
use response::{final_head, parser_config, Framing, HeadParse};

/// Fields of the `http` app.
pub static HTTP_FIELDS: &[Field] = &[
    Field {
        name: "http_path",
        kind: FieldType::Str,
        help: "the path requested",
    },
    Field {
        name: "http_status",
        kind: FieldType::U16,
        help: "status code of the final response (after any 1xx)",
    },
    Field {
        name: "http_reason",
        kind: FieldType::Str,
        help: "reason phrase of the status line",
    },
    Field {
        name: "http_headers",
        kind: FieldType::Map,
        help: "response headers: lower-case name to value, repeats joined by \", \" (an object in ndjson, its JSON text in csv, a MAP in parquet)",
    },
    Field {
        name: "http_body",
        kind: FieldType::Str,
        help: "decoded body as text, invalid UTF-8 replaced (the whole reply when it is not HTTP)",
    },
    Field {
        name: "http_body_len",
        kind: FieldType::Int,
        help: "bytes of the decoded body",
    },
    Field {
        name: "http_body_sha256",
        kind: FieldType::Str,
        help: "SHA-256 of the decoded body's bytes, hex",
    },
    Field {
        name: "http_truncated",
        kind: FieldType::Bool,
        help: "the response is cut: head unfinished, body shorter than its Content-Length, or chunks unfinished or malformed",
    },
];

/// The port `http` leaves out of the Host header.
const HTTP_PORT: u16 = 80;

/// Longest `:port` after a name in the Host header.
const PORT_LEN: usize = ":65535".len();

/// Longest text of a target address in the Host header: `[v6]:port`.
pub(crate) const MAX_ADDR_HOST_LEN: usize = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535".len();

/// The request, rendered once: `before_host` + host + `after_host`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpApp {
    before_host: Vec<u8>,
    /// The Host header's value when it is fixed; `None`: the target's address.
    host: Option<String>,
    after_host: Vec<u8>,
    /// The request is HEAD: the response has no body.
    head_request: bool,
    /// The path requested, for the rows.
    path: String,
    /// Names per target: a target's name is its Host.
    names: Option<Arc<TargetNames>>,
}

impl HttpApp {
    pub fn new(options: &AppOptions) -> Result<HttpApp, String> {
        let method = &options.http_method;
        if method.is_empty() || method.len() > 32 || !method.bytes().all(is_token_byte) {
            return Err(format!(
                "bad --http-method {method:?}: use a method name such as GET or HEAD"
            ));
        }
        let path = &options.http_path;
        if !path.starts_with('/') || !path.bytes().all(is_visible_ascii) {
            return Err(format!(
                "bad --http-path {path:?}: it starts with '/' and has no spaces or non-ASCII \
                 characters (percent-encode them)"
            ));
        }
        if let Some(host) = &options.http_host {
            if host.is_empty() || !host.bytes().all(is_visible_ascii) {
                return Err(format!(
                    "bad --http-host {host:?}: give a host name or address without spaces"
                ));
            }
        }
        let user_agent = &options.user_agent;
        if user_agent.bytes().any(|b| b.is_ascii_control()) {
            return Err(format!(
                "bad --user-agent {user_agent:?}: it is one line without control characters"
            ));
        }
        let mut after_host = Vec::new();
        if !user_agent.is_empty() {
            after_host.extend_from_slice(format!("\r\nUser-Agent: {user_agent}").as_bytes());
        }
        after_host.extend_from_slice(b"\r\nAccept: */*\r\n");
        for header in &options.http_headers {
            check_header(header)?;
            after_host.extend_from_slice(header.as_bytes());
            after_host.extend_from_slice(b"\r\n");
        }
        after_host.extend_from_slice(b"Connection: close\r\n\r\n");
        Ok(HttpApp {
            before_host: format!("{method} {path} HTTP/1.1\r\nHost: ").into_bytes(),
            host: options.http_host.clone(),
            after_host,
            head_request: method == "HEAD",
            path: path.clone(),
            names: None,
        })
    }

    /// Values of [`HTTP_FIELDS`] for the reply `received`, and whether it was HTTP: a whole
    /// head is, but for the 400 an HTTPS port answers plain HTTP with (ZGrab2's
    /// `--fail-http-to-https` rule, always on: sonde retries nothing).
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) -> AppOutcome {
        values.push(Value::Str(self.path.clone()));
        let (offset, head) = final_head(received, self.head_request);
        let reply = &received[offset..];
        match head {
            HeadParse::Invalid => {
                // Not HTTP: keep the bytes so the reader sees what answered instead.
                let body = if reply.is_empty() {
                    Value::Null
                } else {
                    lossy(reply)
                };
                values.extend([Value::Null, Value::Null, Value::Null, body]);
                values.extend([int(reply.len()), Value::Str(sha256_hex(reply)), Value::Null]);
                AppOutcome::ProtocolError
            }
            HeadParse::Partial { status } => {
                let status = status.map_or(Value::Null, |code| Value::Int(code.into()));
                values.extend([status, Value::Null, Value::Null, Value::Null]);
                values.extend([Value::Null, Value::Null, Value::Bool(true)]);
                // The head never ended: not a response a client could read.
                AppOutcome::ProtocolError
            }
            HeadParse::Complete(head) => {
                let (reason, headers) = reason_and_headers(&reply[..head.len]);
                let (body, complete) = decoded_body(&reply[head.len..], head.framing);
                let outcome = if head.status == 400 && is_plain_http_to_tls(&body) {
                    AppOutcome::ProtocolError
                } else {
                    AppOutcome::Success
                };
                values.extend([Value::Int(head.status.into()), reason, headers]);
                values.extend([
                    lossy(&body),
                    int(body.len()),
                    Value::Str(hex(&Sha256::digest(&body))),
                ]);
                values.push(Value::Bool(!complete));
                outcome
            }
        }
    }
}

/// What web servers say, in the body of a 400, to plain HTTP on a port that speaks TLS (nginx,
/// Apache httpd, Caddy, Go's net/http): looked for in the body's first bytes.
const PLAIN_HTTP_TO_TLS: &[&[u8]] = &[
    b"The plain HTTP request was sent to HTTPS port",
    b"You're speaking plain HTTP to an SSL-enabled server port",
    b"Client sent an HTTP request to an HTTPS server",
    b"combination of host and port requires TLS",
];

/// How far into a 400's body [`PLAIN_HTTP_TO_TLS`] is looked for.
const PLAIN_HTTP_TO_TLS_WITHIN: usize = 512;

fn is_plain_http_to_tls(body: &[u8]) -> bool {
    let start = &body[..body.len().min(PLAIN_HTTP_TO_TLS_WITHIN)];
    PLAIN_HTTP_TO_TLS
        .iter()
        .any(|phrase| start.windows(phrase.len()).any(|w| w == *phrase))
}

/// Token characters of RFC 9110 §5.6.2 (method and header names).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_visible_ascii(b: u8) -> bool {
    b.is_ascii_graphic()
}

/// An extra header is `Name: value` on one line, the name a token.
fn check_header(header: &str) -> Result<(), String> {
    let name = header.split_once(':').map(|(name, _)| name);
    let one_line = !header.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0);
    match name {
        Some(name) if one_line && !name.is_empty() && name.bytes().all(is_token_byte) => Ok(()),
        _ => Err(format!(
            "bad --http-header {header:?}: write it as \"Name: value\" on one line"
        )),
    }
}

/// The reason phrase and the headers as an object, parsed again from the complete `head`
/// with as many header slots as it has lines (a header takes at least one).
fn reason_and_headers(head: &[u8]) -> (Value, Value) {
    let mut slots = vec![httparse::EMPTY_HEADER; head.iter().filter(|&&b| b == b'\n').count() + 1];
    let mut response = httparse::Response::new(&mut slots);
    if !matches!(
        parser_config().parse_response(&mut response, head),
        Ok(httparse::Status::Complete(_))
    ) {
        return (Value::Null, Value::Null);
    }
    let mut object = serde_json::Map::new();
    for header in response.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(header.value);
        match object.get_mut(&name) {
            Some(serde_json::Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(&value);
            }
            _ => {
                object.insert(name, serde_json::Value::String(value.into_owned()));
            }
        }
    }
    let reason = response
        .reason
        .map_or(Value::Null, |r| Value::Str(r.to_string()));
    (reason, Value::Json(serde_json::Value::Object(object)))
}

/// The decoded body and whether it is whole.
fn decoded_body(body: &[u8], framing: Framing) -> (Vec<u8>, bool) {
    match framing {
        Framing::NoBody => (Vec::new(), true),
        Framing::Length(len) => {
            let present = body.len().min(usize::try_from(len).unwrap_or(usize::MAX));
            (body[..present].to_vec(), present as u64 == len)
        }
        Framing::Chunked => {
            let mut decoded = Vec::with_capacity(body.len());
            let end = chunked::decode(body, |data| decoded.extend_from_slice(data));
            (decoded, end == ChunkedEnd::Terminated)
        }
        Framing::UntilClose => (body.to_vec(), true),
    }
}

impl App for HttpApp {
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        let capacity = buf.len();
        let mut out: &mut [u8] = buf;
        let name = self.names().and_then(|names| names.name_of(addr, port));
        let written = out.write_all(&self.before_host).is_ok()
            && match name.or(self.host.as_deref()) {
                Some(host) => write_name_host(&mut out, host, port, HTTP_PORT).is_ok(),
                None => write_addr_host(&mut out, addr, port).is_ok(),
            }
            && out.write_all(&self.after_host).is_ok();
        // The engine promises max_request_len bytes; send nothing rather than a torn request.
        if written {
            capacity - out.len()
        } else {
            0
        }
    }

    fn max_request_len(&self) -> usize {
        let host = self
            .host
            .as_ref()
            .map_or(MAX_ADDR_HOST_LEN, |h| h.len() + PORT_LEN);
        let host = host.max(self.names().map_or(0, |n| n.longest() + PORT_LEN));
        self.before_host.len() + host + self.after_host.len()
    }

    /// Complete when the final response's head is in and its body is whole (Content-Length
    /// reached, last chunk and trailers arrived, or no body by status or method), or when the
    /// bytes are not HTTP at all (nothing would make them so). A body that runs until close
    /// is complete only when the server closes.
    fn is_complete(&self, received: &[u8]) -> bool {
        self.is_complete_after(received, &mut ReplyCursor::default())
    }

    /// As `is_complete`, reading only what came since the last call (see `complete.rs`).
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        complete::is_complete_after(received, self.head_request, cursor)
    }
}

impl HttpApp {
    /// With names per target: a target's name is its Host.
    pub fn with_names(self, names: Arc<TargetNames>) -> HttpApp {
        HttpApp {
            names: Some(names),
            ..self
        }
    }

    pub fn names(&self) -> Option<&TargetNames> {
        self.names.as_deref()
    }

    /// The request for (`addr`, `port`) with Host `name` when given (the target's own name),
    /// else as [`App::write_request`] writes it but without `:port` when the port is
    /// `default_port` (443 for `https`).
    pub(crate) fn request_for(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        default_port: u16,
    ) -> Vec<u8> {
        let mut out = self.before_host.clone();
        match name.or(self.host.as_deref()) {
            Some(host) => {
                let mut buf = [0u8; PORT_LEN];
                let mut rest: &mut [u8] = &mut buf;
                out.extend_from_slice(host.as_bytes());
                if write_port_of_name(&mut rest, host, port, default_port).is_ok() {
                    let len = PORT_LEN - rest.len();
                    out.extend_from_slice(&buf[..len]);
                }
            }
            None => {
                let shown_port = if port == default_port { 80 } else { port };
                let mut buf = [0u8; MAX_ADDR_HOST_LEN];
                let mut rest: &mut [u8] = &mut buf;
                if write_addr_host(&mut rest, addr, shown_port).is_ok() {
                    let len = MAX_ADDR_HOST_LEN - rest.len();
                    out.extend_from_slice(&buf[..len]);
                }
            }
        }
        out.extend_from_slice(&self.after_host);
        out
    }

    /// The length of the request with a Host value of `host` bytes.
    pub(crate) fn request_len_with_host(&self, host: usize) -> usize {
        self.before_host.len() + host + self.after_host.len()
    }

    /// The length of `--http-host`, when it fixes the Host header.
    pub(crate) fn fixed_host_len(&self) -> Option<usize> {
        self.host.as_ref().map(String::len)
    }

    /// Whether --http-host fixes the Host header.
    pub(crate) fn has_fixed_host(&self) -> bool {
        self.host.is_some()
    }

    /// Whether the response to this request has no body (HEAD).
    pub(crate) fn head_request(&self) -> bool {
        self.head_request
    }
}

/// Whether an HTTP response (`received` so far, read on from `cursor`) is complete: as
/// [`HttpApp`]'s check, for responses read from inside TLS.
pub(crate) fn is_complete_response(
    received: &[u8],
    head_request: bool,
    cursor: &mut ReplyCursor,
) -> bool {
    complete::is_complete_after(received, head_request, cursor)
}

/// A name as a Host value (`-I`'s, `--http-host`'s, the SNI): with `:port` when the port is
/// not the scheme's `default_port` and the name has none of its own, as curl sends it.
fn write_name_host(
    out: &mut &mut [u8],
    host: &str,
    port: u16,
    default_port: u16,
) -> std::io::Result<()> {
    out.write_all(host.as_bytes())?;
    write_port_of_name(out, host, port, default_port)
}

/// The `:port` a name's Host value takes (nothing for the default port, or a name that has
/// a port: `name:8080`, `[2001:2::1]:8080`).
fn write_port_of_name(
    out: &mut &mut [u8],
    host: &str,
    port: u16,
    default_port: u16,
) -> std::io::Result<()> {
    let has_port = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.contains("]:"),
        None => host.contains(':'),
    };
    if port != default_port && !has_port {
        write!(out, ":{port}")?;
    }
    Ok(())
}

/// The target's address as a Host value: IPv6 in brackets, `:port` unless it is 80.
fn write_addr_host(out: &mut &mut [u8], addr: IpAddr, port: u16) -> std::io::Result<()> {
    match addr {
        IpAddr::V4(v4) => write!(out, "{v4}")?,
        IpAddr::V6(v6) => write!(out, "[{v6}]")?,
    }
    if port != 80 {
        write!(out, ":{port}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
