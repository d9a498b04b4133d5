//! The certificate chain of a TLS 1.2 Certificate message, summarised with `x509-parser`.

use std::fmt::Write;

use sonde_scan::reply::Value;
use tls_parser::parse_tls_handshake_msg_certificate;
use tls_parser::TlsMessageHandshake;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

use crate::text::{int, sha256_hex};

/// Values of the certificate fields, in [`super::TLS_FIELDS`] order from `tls_cert_subject`:
/// subject, issuer, SANs, not before, not after, leaf SHA-256, chain length, chain.
pub(crate) const CERT_VALUES: usize = 8;

/// Appends the certificate values for the Certificate message `body` (`None`: no message).
pub(crate) fn describe_chain(body: Option<&[u8]>, values: &mut Vec<Value>) {
    let chain = body.and_then(|body| match parse_tls_handshake_msg_certificate(body) {
        Ok((_, TlsMessageHandshake::Certificate(certificate))) => Some(certificate.cert_chain),
        _ => None,
    });
    let Some(chain) = chain.filter(|chain| !chain.is_empty()) else {
        values.extend(std::iter::repeat_n(Value::Null, CERT_VALUES));
        return;
    };
    let leaf = chain[0].data;
    match x509_parser::parse_x509_certificate(leaf) {
        Ok((_, cert)) => {
            values.push(Value::Str(cert.subject().to_string()));
            values.push(Value::Str(cert.issuer().to_string()));
            values.push(sans(&cert));
            values.push(Value::Str(rfc3339(cert.validity().not_before)));
            values.push(Value::Str(rfc3339(cert.validity().not_after)));
        }
        Err(_) => values.extend(std::iter::repeat_n(Value::Null, 5)),
    }
    values.push(Value::Str(sha256_hex(leaf)));
    values.push(int(chain.len()));
    let entries: Vec<serde_json::Value> = chain.iter().map(|raw| chain_entry(raw.data)).collect();
    values.push(Value::Str(serde_json::Value::Array(entries).to_string()));
}

/// `{subject, issuer, sha256}` of one certificate; subject and issuer null when it does not
/// parse.
fn chain_entry(der: &[u8]) -> serde_json::Value {
    let (subject, issuer) = match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => (
            serde_json::Value::String(cert.subject().to_string()),
            serde_json::Value::String(cert.issuer().to_string()),
        ),
        Err(_) => (serde_json::Value::Null, serde_json::Value::Null),
    };
    serde_json::json!({ "subject": subject, "issuer": issuer, "sha256": sha256_hex(der) })
}

/// DNS names and IP addresses of the subjectAltName extension, comma-joined; Null when the
/// certificate has none (or an invalid one).
fn sans(cert: &X509Certificate<'_>) -> Value {
    let Ok(Some(extension)) = cert.subject_alternative_name() else {
        return Value::Null;
    };
    let mut joined = String::new();
    for name in &extension.value.general_names {
        let start = joined.len();
        if start > 0 {
            joined.push(',');
        }
        match name {
            GeneralName::DNSName(dns) => joined.push_str(dns),
            GeneralName::IPAddress(bytes) => push_ip(&mut joined, bytes),
            _ => joined.truncate(start),
        }
    }
    if joined.is_empty() {
        Value::Null
    } else {
        Value::Str(joined)
    }
}

/// An IP address SAN: 4 or 16 bytes; anything else in hex.
fn push_ip(out: &mut String, bytes: &[u8]) {
    let _ = match *bytes {
        [a, b, c, d] => write!(out, "{}", std::net::Ipv4Addr::new(a, b, c, d)),
        _ => match <[u8; 16]>::try_from(bytes) {
            Ok(v6) => write!(out, "{}", std::net::Ipv6Addr::from(v6)),
            Err(_) => write!(out, "{}", crate::text::hex(bytes)),
        },
    };
}

/// RFC 3339 in UTC, e.g. `2026-11-22T20:00:00Z`.
fn rfc3339(time: ASN1Time) -> String {
    let t = time.to_datetime();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        t.month() as u8,
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
