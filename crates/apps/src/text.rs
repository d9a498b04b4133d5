//! Small text helpers shared by the apps: hex, digests, lossy strings.

use sha2::{Digest, Sha256};
use sonde_scan::reply::Value;

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

/// Hex of the SHA-256 digest of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `bytes` as text, invalid UTF-8 replaced by U+FFFD (the writers escape control characters).
pub(crate) fn lossy(bytes: &[u8]) -> Value {
    Value::Str(String::from_utf8_lossy(bytes).into_owned())
}

/// A length as an output value.
pub(crate) fn int(len: usize) -> Value {
    Value::Int(len as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_digest_match_known_values() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        // FIPS 180-2 example "abc".
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
