//! Domain names: reading them from a message (compression followed, hostile forms refused),
//! comparing them without allocating, their text form, and the uncompressed form sonde writes.

use std::fmt;

use crate::Malformed;

/// Longest name in wire form, length bytes and final zero included (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;
/// Longest label.
pub const MAX_LABEL_LEN: usize = 63;
/// Most compression pointers one name may follow: one per label of the longest name. Pointers
/// must also go strictly backward, so this only bounds the work of a chain of pointers to
/// pointers.
const MAX_POINTERS: usize = 127;

/// A name inside a message, already checked: its labels can be walked, compared and printed
/// without failing. Copying it copies two references.
#[derive(Clone, Copy)]
pub struct Name<'a> {
    msg: &'a [u8],
    start: usize,
    wire_len: u8,
}

/// Reads the name at `at`, whose own bytes (up to its first pointer, or its end) must lie before
/// `end`; pointers may lead anywhere earlier in `msg`. Returns the name and the offset just past
/// its bytes in place.
pub(crate) fn read_name(msg: &[u8], at: usize, end: usize) -> Result<(Name<'_>, usize), Malformed> {
    let end = end.min(msg.len());
    let mut pos = at;
    let mut limit = end;
    let mut after: Option<usize> = None;
    let mut wire_len = 1usize;
    let mut pointers = 0;
    loop {
        let byte = *msg[..limit].get(pos).ok_or(Malformed::NamePastEnd)?;
        match byte >> 6 {
            0 if byte == 0 => break,
            0 => {
                let label = usize::from(byte);
                wire_len += 1 + label;
                if wire_len > MAX_NAME_LEN {
                    return Err(Malformed::NameTooLong);
                }
                if pos + 1 + label > limit {
                    return Err(Malformed::NamePastEnd);
                }
                pos += 1 + label;
            }
            0b11 => {
                let low = *msg[..limit].get(pos + 1).ok_or(Malformed::NamePastEnd)?;
                let target = usize::from(byte & 0x3f) << 8 | usize::from(low);
                if target >= msg.len() {
                    return Err(Malformed::PointerPastEnd);
                }
                pointers += 1;
                if target >= pos || pointers > MAX_POINTERS {
                    return Err(Malformed::PointerLoop);
                }
                after.get_or_insert(pos + 2);
                pos = target;
                limit = msg.len();
            }
            _ => return Err(Malformed::LabelTooLong),
        }
    }
    let next = after.unwrap_or(pos + 1);
    // wire_len <= 255 was checked on every label.
    let wire_len = u8::try_from(wire_len).map_err(|_| Malformed::NameTooLong)?;
    Ok((
        Name {
            msg,
            start: at,
            wire_len,
        },
        next,
    ))
}

impl<'a> Name<'a> {
    /// The labels, first (leftmost) to last, without the root's empty one.
    pub fn labels(&self) -> Labels<'a> {
        Labels {
            msg: self.msg,
            pos: self.start,
        }
    }

    /// Length of the uncompressed wire form, final zero included (1 for the root).
    pub fn wire_len(&self) -> usize {
        usize::from(self.wire_len)
    }

    /// Whether this is the root (`.`).
    pub fn is_root(&self) -> bool {
        self.wire_len == 1
    }

    /// Compares with an uncompressed wire-form name (as [`NameBuf::wire`] holds), ignoring ASCII
    /// case, as DNS does. Allocates nothing.
    pub fn eq_wire(&self, wire: &[u8]) -> bool {
        labels_eq(self.labels(), WireLabels { wire, pos: 0 })
    }

    /// Compares with another name, ignoring ASCII case.
    pub fn eq_name(&self, other: &Name<'_>) -> bool {
        self.wire_len == other.wire_len && labels_eq(self.labels(), other.labels())
    }

    /// Whether this name is `zone` or below it (`www.example.com` is under `example.com` and
    /// under the root), ignoring ASCII case: for checking that a referral's servers are in
    /// bailiwick.
    pub fn is_under(&self, zone: &Name<'_>) -> bool {
        let ours = self.labels().count();
        let theirs = zone.labels().count();
        ours >= theirs && labels_eq(self.labels().skip(ours - theirs), zone.labels())
    }

    /// The uncompressed form, to keep past the message (a CNAME target to follow, a zone cut).
    pub fn to_buf(&self) -> NameBuf {
        let mut buf = NameBuf::root();
        for label in self.labels() {
            // A checked name fits: its wire length is at most 255.
            let _ = buf.push_label(label);
        }
        buf
    }
}

impl fmt::Display for Name<'_> {
    /// The text form for rows: labels joined by dots, no final dot, `.` for the root; a dot,
    /// backslash or byte outside printable ASCII inside a label is escaped as `\.`, `\\` or
    /// `\DDD` (as in zone files), so the text reads back to the same name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(self.labels(), f)
    }
}

impl fmt::Debug for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

fn write_text<'l>(labels: impl Iterator<Item = &'l [u8]>, f: &mut impl fmt::Write) -> fmt::Result {
    let mut any = false;
    for label in labels {
        if any {
            f.write_char('.')?;
        }
        any = true;
        // Runs of plain bytes are written whole: a byte at a time through a formatter is slow.
        for run in label.split_inclusive(|&b| needs_escape(b)) {
            let (plain, last) = match run.split_last() {
                Some((&last, plain)) if needs_escape(last) => (plain, Some(last)),
                _ => (run, None),
            };
            f.write_str(std::str::from_utf8(plain).map_err(|_| fmt::Error)?)?;
            match last {
                Some(b @ (b'.' | b'\\')) => {
                    f.write_char('\\')?;
                    f.write_char(char::from(b))?;
                }
                Some(b) => write!(f, "\\{b:03}")?,
                None => {}
            }
        }
    }
    if !any {
        f.write_char('.')?;
    }
    Ok(())
}

/// Bytes written as `\X` or `\DDD`: outside printable ASCII, or a dot or backslash.
fn needs_escape(b: u8) -> bool {
    !(0x21..=0x7e).contains(&b) || b == b'.' || b == b'\\'
}

fn labels_eq<'x, 'y>(
    mut a: impl Iterator<Item = &'x [u8]>,
    mut b: impl Iterator<Item = &'y [u8]>,
) -> bool {
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(x), Some(y)) if x.eq_ignore_ascii_case(y) => {}
            _ => return false,
        }
    }
}

/// The labels of a checked [`Name`], pointers followed.
#[derive(Clone)]
pub struct Labels<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            let byte = *self.msg.get(self.pos)?;
            match byte >> 6 {
                0 if byte == 0 => return None,
                0 => {
                    let start = self.pos + 1;
                    let label = self.msg.get(start..start + usize::from(byte))?;
                    self.pos = start + label.len();
                    return Some(label);
                }
                _ => {
                    let low = *self.msg.get(self.pos + 1)?;
                    self.pos = usize::from(byte & 0x3f) << 8 | usize::from(low);
                }
            }
        }
    }
}

/// Labels of an uncompressed wire-form name.
struct WireLabels<'a> {
    wire: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for WireLabels<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(*self.wire.get(self.pos)?);
        if len == 0 {
            return None;
        }
        let label = self.wire.get(self.pos + 1..self.pos + 1 + len)?;
        self.pos += 1 + len;
        Some(label)
    }
}

/// A name in uncompressed wire form, in a fixed buffer: what a query is written from and a
/// response's question is matched against, kept without allocating. Its `==` and `Hash` are
/// exact, bytes for bytes: for a key that ignores case (a cache of zone cuts), lower it first
/// with [`NameBuf::make_ascii_lowercase`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NameBuf {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
}

/// Why a name given as text cannot be a DNS name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// Two dots in a row, or a leading dot.
    EmptyLabel,
    /// A label over 63 bytes.
    LabelTooLong,
    /// Over 255 bytes in wire form.
    NameTooLong,
    /// A backslash not followed by a character or by three digits of at most 255.
    BadEscape,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::EmptyLabel => "empty label (two dots in a row or a leading dot)",
            NameError::LabelTooLong => "label longer than 63 bytes",
            NameError::NameTooLong => "name longer than 255 bytes",
            NameError::BadEscape => "backslash not followed by a character or \\DDD (0-255)",
        })
    }
}

impl std::error::Error for NameError {}

impl NameBuf {
    /// The root name.
    pub fn root() -> NameBuf {
        NameBuf {
            bytes: [0; MAX_NAME_LEN],
            len: 1,
        }
    }

    /// Parses a text name: labels separated by dots, an optional final dot, `.` or the empty
    /// string for the root, and the escapes `\X` and `\DDD` that [`Name`]'s text form writes.
    pub fn from_text(text: &str) -> Result<NameBuf, NameError> {
        let mut buf = NameBuf::root();
        if text == "." || text.is_empty() {
            return Ok(buf);
        }
        let mut label = [0u8; MAX_LABEL_LEN];
        let mut len = 0usize;
        let mut bytes = text.bytes();
        let mut ended_with_dot = false;
        while let Some(b) = bytes.next() {
            ended_with_dot = false;
            let byte = match b {
                b'.' => {
                    buf.push_label(&label[..len])?;
                    len = 0;
                    ended_with_dot = true;
                    continue;
                }
                b'\\' => unescape(&mut bytes)?,
                other => other,
            };
            *label.get_mut(len).ok_or(NameError::LabelTooLong)? = byte;
            len += 1;
        }
        if !ended_with_dot {
            buf.push_label(&label[..len])?;
        }
        Ok(buf)
    }

    /// Appends a label before the final zero.
    pub fn push_label(&mut self, label: &[u8]) -> Result<(), NameError> {
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(NameError::LabelTooLong);
        }
        let at = usize::from(self.len) - 1;
        let new_len = at + 1 + label.len() + 1;
        if new_len > MAX_NAME_LEN {
            return Err(NameError::NameTooLong);
        }
        self.bytes[at] = label.len() as u8;
        self.bytes[at + 1..at + 1 + label.len()].copy_from_slice(label);
        self.bytes[new_len - 1] = 0;
        self.len = new_len as u8;
        Ok(())
    }

    /// Lowers every ASCII letter, as DNS ignores their case.
    pub fn make_ascii_lowercase(&mut self) {
        // Length bytes are at most 63, below every uppercase letter, so they are left alone.
        self.bytes.make_ascii_lowercase();
    }

    /// The same name as a [`Name`], to compare with a message's names or print.
    pub fn as_name(&self) -> Name<'_> {
        Name {
            msg: self.wire(),
            start: 0,
            wire_len: self.len,
        }
    }

    /// The uncompressed wire form, final zero included.
    pub fn wire(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The labels, first to last.
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> + '_ {
        WireLabels {
            wire: self.wire(),
            pos: 0,
        }
    }
}

fn unescape(bytes: &mut impl Iterator<Item = u8>) -> Result<u8, NameError> {
    let first = bytes.next().ok_or(NameError::BadEscape)?;
    if !first.is_ascii_digit() {
        return Ok(first);
    }
    let mut value = u32::from(first - b'0');
    for _ in 0..2 {
        let digit = bytes
            .next()
            .filter(u8::is_ascii_digit)
            .ok_or(NameError::BadEscape)?;
        value = value * 10 + u32::from(digit - b'0');
    }
    u8::try_from(value).map_err(|_| NameError::BadEscape)
}

impl fmt::Display for NameBuf {
    /// The same text form as [`Name`]'s.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(self.labels(), f)
    }
}

impl fmt::Debug for NameBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NameBuf({self})")
    }
}

impl std::str::FromStr for NameBuf {
    type Err = NameError;

    fn from_str(s: &str) -> Result<NameBuf, NameError> {
        NameBuf::from_text(s)
    }
}
