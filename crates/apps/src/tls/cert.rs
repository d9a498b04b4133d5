//! A server's certificate chain (from a TLS 1.2 Certificate message, or as rustls received
//! it), summarised with `x509-parser`.

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

/// The certificates (DER, leaf first) of the Certificate message `body`; empty when there is
/// none or it does not parse.
pub(crate) fn chain_of_message(body: Option<&[u8]>) -> Vec<&[u8]> {
    match body.map(parse_tls_handshake_msg_certificate) {
        Some(Ok((_, TlsMessageHandshake::Certificate(certificate)))) => {
            certificate.cert_chain.iter().map(|raw| raw.data).collect()
        }
        _ => Vec::new(),
    }
}

/// Appends the certificate values for `chain` (DER, leaf first; empty: no certificate).
pub(crate) fn describe_chain(chain: &[&[u8]], values: &mut Vec<Value>) {
    let Some(&leaf) = chain.first() else {
        values.extend(std::iter::repeat_n(Value::Null, CERT_VALUES));
        return;
    };
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
    let entries: Vec<serde_json::Value> = chain.iter().map(|der| chain_entry(der)).collect();
    values.push(Value::Json(serde_json::Value::Array(entries)));
}

/// `{subject, issuer, sans, not_before, not_after, key_type, key_bits, sha256}` of one
/// certificate; all but sha256 null when it does not parse.
fn chain_entry(der: &[u8]) -> serde_json::Value {
    let sha256 = sha256_hex(der);
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return serde_json::json!({
            "subject": null, "issuer": null, "sans": null, "not_before": null,
            "not_after": null, "key_type": null, "key_bits": null, "sha256": sha256,
        });
    };
    let sans = match sans(&cert) {
        Value::Str(joined) => serde_json::Value::String(joined),
        _ => serde_json::Value::Null,
    };
    let (key_type, key_bits) = key_of(&cert).map_or((None, None), |(t, b)| (Some(t), b));
    serde_json::json!({
        "subject": cert.subject().to_string(),
        "issuer": cert.issuer().to_string(),
        "sans": sans,
        "not_before": rfc3339(cert.validity().not_before),
        "not_after": rfc3339(cert.validity().not_after),
        "key_type": key_type,
        "key_bits": key_bits,
        "sha256": sha256,
    })
}

/// The leaf's key type (RSA, EC, Ed25519, …) and size in bits, as two values.
pub(crate) fn describe_key(chain: &[&[u8]], values: &mut Vec<Value>) {
    let key = chain
        .first()
        .and_then(|der| x509_parser::parse_x509_certificate(der).ok())
        .and_then(|(_, cert)| key_of(&cert));
    match key {
        Some((kind, bits)) => {
            values.push(Value::Str(kind.to_string()));
            values.push(bits.map_or(Value::Null, |b| Value::Int(b as u64)));
        }
        None => values.extend([Value::Null, Value::Null]),
    }
}

/// Bits of a big-endian unsigned integer (DER may lead with zero bytes).
fn unsigned_bits(bytes: &[u8]) -> usize {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    match bytes.get(start..) {
        Some([first, rest @ ..]) => rest.len() * 8 + (8 - first.leading_zeros() as usize),
        _ => 0,
    }
}

/// A certificate's key type and size in bits (unknown for some types).
fn key_of(cert: &X509Certificate<'_>) -> Option<(&'static str, Option<usize>)> {
    use x509_parser::public_key::PublicKey;
    let spki = cert.public_key();
    let kind = match spki.algorithm.algorithm.to_id_string().as_str() {
        "1.3.101.112" => return Some(("Ed25519", Some(256))),
        "1.3.101.113" => return Some(("Ed448", Some(456))),
        _ => spki.parsed().ok()?,
    };
    Some(match kind {
        PublicKey::RSA(rsa) => ("RSA", Some(unsigned_bits(rsa.modulus))),
        // An uncompressed point: two coordinates of the field's size (P-521's in 66 bytes).
        PublicKey::EC(point) => (
            "EC",
            Some(point.key_size()).map(|b| if b == 528 { 521 } else { b }),
        ),
        PublicKey::DSA(_) => ("DSA", None),
        PublicKey::GostR3410(_) | PublicKey::GostR3410_2012(_) => ("GOST", None),
        PublicKey::Unknown(_) => ("unknown", None),
    })
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
