//! What the incremental completeness checks share: the layout of the one word they keep per
//! reply ([`ReplyCursor`]), a byte search, and, in tests, a count of the bytes they read, so
//! that a test can show the work over a reply grows linearly with it (no timing).

use sonde_tcp::ReplyCursor;

/// Bits of a cursor that hold a position in the reply.
const POS_BITS: u32 = 40;
/// Bits above the position for an app's own small number (a record count).
const AUX_BITS: u32 = 16;

/// The largest position a cursor holds (1 TiB); a farther position is stored as this one,
/// which no reply reaches (the engine keeps at most 1 GiB of one).
pub(crate) const POS_MAX: usize = (1 << POS_BITS) - 1;

/// A cursor's fields: which phase of its reading the app is in, a small number of its own,
/// and a position in the reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    pub phase: u8,
    pub aux: u16,
    pub pos: usize,
}

impl Mark {
    pub(crate) fn load(cursor: ReplyCursor) -> Mark {
        let word = cursor.0;
        Mark {
            phase: (word >> (POS_BITS + AUX_BITS)) as u8,
            aux: (word >> POS_BITS) as u16,
            pos: (word & POS_MAX as u64) as usize,
        }
    }

    /// The cursor of this mark, its position capped at [`POS_MAX`].
    pub(crate) fn store(self) -> ReplyCursor {
        let pos = self.pos.min(POS_MAX) as u64;
        ReplyCursor(
            u64::from(self.phase) << (POS_BITS + AUX_BITS) | u64::from(self.aux) << POS_BITS | pos,
        )
    }
}

/// The first `byte` in `bytes` at or after `from`.
pub(crate) fn find(bytes: &[u8], from: usize, byte: u8) -> Option<usize> {
    let rest = bytes.get(from..).unwrap_or_default();
    let found = rest.iter().position(|&b| b == byte);
    looked_at(found.map_or(rest.len(), |i| i + 1));
    found.map(|i| from + i)
}

/// The start of the line that ends with the `\n` at `line_end`: just after the `\n` before it.
pub(crate) fn line_start(bytes: &[u8], line_end: usize) -> usize {
    let before = &bytes[..line_end];
    let found = before.iter().rposition(|&b| b == b'\n');
    looked_at(found.map_or(before.len(), |i| before.len() - i));
    found.map_or(0, |i| i + 1)
}

#[cfg(test)]
thread_local! {
    static LOOKED_AT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `bytes` read (in tests; nothing otherwise).
#[inline]
pub(crate) fn looked_at(bytes: usize) {
    #[cfg(test)]
    LOOKED_AT.with(|count| count.set(count.get() + bytes as u64));
    #[cfg(not(test))]
    let _ = bytes;
}

/// The bytes read on this thread since the last call.
#[cfg(test)]
pub(crate) fn take_looked_at() -> u64 {
    LOOKED_AT.with(|count| count.replace(0))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Feeding a reply to an app segment by segment, as the engine does.

    use super::*;
    use sonde_tcp::App;

    /// What feeding a reply segment by segment cost and said.
    #[derive(Debug)]
    pub(crate) struct Fed {
        /// Bytes the app read over all the calls.
        pub looked_at: u64,
        /// The length of the first prefix the app called complete.
        pub complete_at: Option<usize>,
        /// Calls made.
        pub calls: u64,
    }

    /// Feeds `reply` to `app` in segments of `segment` bytes, one cursor throughout, asking
    /// after each segment (and not after the reply is complete, as the engine does).
    pub(crate) fn feed(app: &impl App, reply: &[u8], segment: usize) -> Fed {
        take_looked_at();
        let mut cursor = ReplyCursor::default();
        let mut complete_at = None;
        let mut len = 0;
        let mut calls = 0;
        while len < reply.len() {
            len = (len + segment).min(reply.len());
            calls += 1;
            if app.is_complete_after(&reply[..len], &mut cursor) {
                complete_at = Some(len);
                break;
            }
        }
        Fed {
            looked_at: take_looked_at(),
            complete_at,
            calls,
        }
    }

    /// Feeds `reply` in the segments `cuts` gives (lengths of successive prefixes) and checks
    /// that after each the answer is the one `is_complete` gives the whole prefix.
    pub(crate) fn assert_same_as_whole(app: &impl App, reply: &[u8], cuts: &[usize]) {
        let mut cursor = ReplyCursor::default();
        for &cut in cuts {
            let prefix = &reply[..cut.min(reply.len())];
            assert_eq!(
                app.is_complete_after(prefix, &mut cursor),
                app.is_complete(prefix),
                "cut {cut} of {} ({cuts:?})",
                reply.len()
            );
        }
    }

    /// Every way to feed `reply` in two segments, and a few pseudo-random segmentings.
    pub(crate) fn assert_any_segmenting_agrees(app: &impl App, reply: &[u8]) {
        for first in 0..=reply.len() {
            assert_same_as_whole(app, reply, &[first, reply.len()]);
        }
        let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ reply.len() as u64;
        for _ in 0..20 {
            let mut cuts = Vec::new();
            let mut at = 0;
            while at < reply.len() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                at += 1 + (state % 40) as usize;
                cuts.push(at.min(reply.len()));
            }
            assert_same_as_whole(app, reply, &cuts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_survives_its_cursor() {
        let mark = Mark {
            phase: 6,
            aux: 256,
            pos: 123_456_789,
        };
        assert_eq!(Mark::load(mark.store()), mark);
        assert_eq!(Mark::load(ReplyCursor::default()), Mark::default());
        let far = Mark {
            pos: usize::MAX,
            ..mark
        };
        assert_eq!(Mark::load(far.store()).pos, POS_MAX);
        assert_eq!(Mark::load(far.store()).phase, 6);
    }

    #[test]
    fn searches_count_what_they_read() {
        take_looked_at();
        assert_eq!(find(b"abc\ndef\n", 0, b'\n'), Some(3));
        assert_eq!(take_looked_at(), 4);
        assert_eq!(find(b"abc\ndef\n", 4, b'\n'), Some(7));
        assert_eq!(find(b"abc", 1, b'\n'), None);
        assert_eq!(find(b"abc", 9, b'\n'), None);
        assert_eq!(take_looked_at(), 4 + 2);
        assert_eq!(line_start(b"ab\ncd\n", 5), 3);
        assert_eq!(line_start(b"abcd\n", 4), 0);
        assert_eq!(take_looked_at(), 3 + 4);
    }
}
