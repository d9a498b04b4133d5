//! JA3S, the fingerprint of a ServerHello (Salesforce's JA3 for servers): its legacy version,
//! its cipher suite, and the types of its extensions in the order sent, as decimal numbers,
//! `version,cipher,ext-ext-…`, and the MD5 of that text.

use md5::{Digest, Md5};

use crate::text::hex;

/// Extension types kept at most; a ServerHello carries a handful (a TLS 1.3 one: two).
const MAX_EXTENSIONS: usize = 32;

/// What JA3S reads of a ServerHello, kept without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ja3s {
    legacy_version: u16,
    cipher: u16,
    extensions: [u16; MAX_EXTENSIONS],
    count: u8,
}

impl Ja3s {
    /// From the ServerHello's legacy version, cipher, and raw extensions block (the bytes after
    /// its length): type and length of each, in order. A cut extension ends the list; more than
    /// [`MAX_EXTENSIONS`] are not kept.
    pub fn new(legacy_version: u16, cipher: u16, mut extensions: &[u8]) -> Ja3s {
        let mut ja3s = Ja3s {
            legacy_version,
            cipher,
            extensions: [0; MAX_EXTENSIONS],
            count: 0,
        };
        while let [t0, t1, l0, l1, rest @ ..] = extensions {
            let len = usize::from(u16::from_be_bytes([*l0, *l1]));
            if rest.len() < len || usize::from(ja3s.count) == MAX_EXTENSIONS {
                break;
            }
            ja3s.extensions[usize::from(ja3s.count)] = u16::from_be_bytes([*t0, *t1]);
            ja3s.count += 1;
            extensions = &rest[len..];
        }
        ja3s
    }

    /// `771,4865,43-51`.
    pub fn text(&self) -> String {
        let types: Vec<String> = self.extensions[..usize::from(self.count)]
            .iter()
            .map(u16::to_string)
            .collect();
        format!(
            "{},{},{}",
            self.legacy_version,
            self.cipher,
            types.join("-")
        )
    }

    /// MD5 of [`Ja3s::text`], lower-case hex.
    pub fn md5(&self) -> String {
        Ja3s::md5_of(&self.text())
    }

    /// MD5 of a JA3S text, lower-case hex.
    pub fn md5_of(text: &str) -> String {
        hex(&Md5::digest(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_hash_follow_the_ja3s_recipe() {
        // supported_versions (43, 2 bytes) then key_share (51, 36 bytes).
        let mut ext = vec![0, 43, 0, 2, 3, 4, 0, 51, 0, 36];
        ext.extend_from_slice(&[0; 36]);
        let ja3s = Ja3s::new(0x0303, 0x1301, &ext);
        assert_eq!(ja3s.text(), "771,4865,43-51");
        // MD5 of the text, computed with `printf %s 771,4865,43-51 | md5sum`.
        assert_eq!(ja3s.md5(), "f4febc55ea12b31ae17cfb7e614afda8");
        assert_eq!(Ja3s::new(0x0301, 0x002f, &[]).text(), "769,47,");
    }

    #[test]
    fn a_cut_extension_ends_the_list() {
        let ja3s = Ja3s::new(0x0303, 0xc02f, &[0xff, 0x01, 0, 1, 0, 0, 11, 0, 9, 1]);
        assert_eq!(ja3s.text(), "771,49199,65281");
        let many: Vec<u8> = (0..40u8).flat_map(|i| [0, i, 0, 0]).collect();
        assert_eq!(Ja3s::new(0x0303, 1, &many).count, 32);
    }
}
