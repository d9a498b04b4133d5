//! Big-endian field access shared by the views. Callers pass ranges from their
//! `field` modules; the views guarantee those ranges are in bounds.

use core::ops::Range;

/// A fixed-position header field.
pub(crate) type Field = Range<usize>;

pub(crate) fn read_u16(buf: &[u8], field: Field) -> u16 {
    let mut word = [0; 2];
    word.copy_from_slice(&buf[field]);
    u16::from_be_bytes(word)
}

pub(crate) fn read_u32(buf: &[u8], field: Field) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&buf[field]);
    u32::from_be_bytes(word)
}

pub(crate) fn write_u16(buf: &mut [u8], field: Field, value: u16) {
    buf[field].copy_from_slice(&value.to_be_bytes());
}

pub(crate) fn write_u32(buf: &mut [u8], field: Field, value: u32) {
    buf[field].copy_from_slice(&value.to_be_bytes());
}

pub(crate) fn read_array<const N: usize>(buf: &[u8], field: Field) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&buf[field]);
    out
}
