//! The frames a direction holds: their bytes in one byte ring, their records (where the bytes
//! are, how long) in a ring of slots, both in arrival order and allocated once.
//!
//! Frames are stored as they arrive and mostly leave in that order (they are all held as long,
//! but for jitter and reordering). A slot is reused, and its bytes, only once every frame that
//! arrived before it has left: a frame that leaves early (reordered) keeps its room until then.
//! So the store needs no allocation and no free list, and the room it takes is what arrived
//! over the longest a frame is held. Memory the kernel has never been asked for is untouched
//! (the rings are zeroed allocations, backed as they are first written), so a large
//! `--path-frames` costs only what is used.

/// Alignment of each frame's bytes in the byte ring.
const ALIGN: usize = 8;

pub(crate) struct Store {
    /// Slots: a power of two, at least twice `limit`, so frames that left early (reordered)
    /// while an older one is held do not keep new ones out.
    mask: u64,
    /// Frames held at most.
    limit: u64,
    /// Next slot to fill and oldest slot not yet reused (counting up, never wrapping).
    head: u64,
    tail: u64,
    /// Frames stored and not yet left, and their bytes.
    held: u64,
    held_bytes: u64,
    offset: Vec<u32>,
    len: Vec<u16>,
    gone: Vec<bool>,
    bytes: Vec<u8>,
    /// Where the next frame's bytes go, and where the oldest slot's bytes start.
    byte_head: usize,
    byte_tail: usize,
}

impl Store {
    /// A store of `limit` frames and `bytes` bytes (at most 4 GiB).
    pub(crate) fn new(limit: u32, bytes: u64) -> Store {
        let slots = 2 * limit.max(1).next_power_of_two() as usize;
        let bytes = bytes.min(u64::from(u32::MAX)) as usize;
        Store {
            mask: slots as u64 - 1,
            limit: u64::from(limit),
            head: 0,
            tail: 0,
            held: 0,
            held_bytes: 0,
            offset: vec![0; slots],
            len: vec![0; slots],
            gone: vec![false; slots],
            bytes: vec![0; bytes],
            byte_head: 0,
            byte_tail: 0,
        }
    }

    /// How many slots there are (slot numbers are below this).
    pub(crate) fn slots(&self) -> usize {
        self.offset.len()
    }

    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Where a frame of `len` bytes would go, if there is room for it.
    fn place(&self, len: usize) -> Option<usize> {
        let need = len.div_ceil(ALIGN) * ALIGN;
        if self.held >= self.limit || self.head - self.tail > self.mask {
            return None;
        }
        if self.head == self.tail {
            // Empty: the whole ring (start over at 0).
            return (need <= self.bytes.len()).then_some(0);
        }
        let (h, t) = (self.byte_head, self.byte_tail);
        if h > t {
            // In use: [t, h). Room after h, else at the start before t.
            if self.bytes.len() - h >= need {
                Some(h)
            } else {
                (need < t).then_some(0)
            }
        } else {
            // Wrapped, in use: [t, end) and [0, h). Room between.
            (t - h > need).then_some(h)
        }
    }

    /// Whether a frame of `len` bytes can be stored now.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.place(len).is_some()
    }

    /// Stores `frame`; its slot, or None when full.
    pub(crate) fn push(&mut self, frame: &[u8]) -> Option<u32> {
        let at = self.place(frame.len())?;
        if self.head == self.tail {
            self.byte_tail = at;
        }
        let slot = (self.head & self.mask) as usize;
        self.bytes[at..at + frame.len()].copy_from_slice(frame);
        self.offset[slot] = at as u32;
        self.len[slot] = frame.len() as u16;
        self.gone[slot] = false;
        self.byte_head = at + frame.len().div_ceil(ALIGN) * ALIGN;
        self.head += 1;
        self.held += 1;
        self.held_bytes += frame.len() as u64;
        Some(slot as u32)
    }

    pub(crate) fn frame(&self, slot: u32) -> &[u8] {
        let at = self.offset[slot as usize] as usize;
        &self.bytes[at..at + usize::from(self.len[slot as usize])]
    }

    pub(crate) fn frame_mut(&mut self, slot: u32) -> &mut [u8] {
        let at = self.offset[slot as usize] as usize;
        &mut self.bytes[at..at + usize::from(self.len[slot as usize])]
    }

    /// The frame in `slot` has left: its slot and bytes are reused once every older one has.
    pub(crate) fn release(&mut self, slot: u32) {
        let s = slot as usize;
        debug_assert!(!self.gone[s]);
        self.gone[s] = true;
        self.held -= 1;
        self.held_bytes -= u64::from(self.len[s]);
        while self.tail < self.head && self.gone[(self.tail & self.mask) as usize] {
            self.tail += 1;
        }
        if self.tail < self.head {
            self.byte_tail = self.offset[(self.tail & self.mask) as usize] as usize;
        } else {
            self.byte_head = 0;
            self.byte_tail = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, len: usize) -> Vec<u8> {
        vec![tag; len]
    }

    #[test]
    fn frames_come_back_as_stored() {
        let mut s = Store::new(16, 16 * 100);
        let a = s.push(&frame(1, 60)).unwrap();
        let b = s.push(&frame(2, 1514)).unwrap();
        assert_eq!(s.frame(a), &frame(1, 60)[..]);
        assert_eq!(s.frame(b), &frame(2, 1514)[..]);
        assert_eq!((s.held(), s.held_bytes()), (2, 1574));
        s.frame_mut(a)[0] = 9;
        assert_eq!(s.frame(a)[0], 9);
        s.release(a);
        s.release(b);
        assert_eq!((s.held(), s.held_bytes()), (0, 0));
    }

    #[test]
    fn the_frame_limit_holds() {
        let mut s = Store::new(4, 1 << 20);
        let slots: Vec<u32> = (0..4).map(|i| s.push(&frame(i, 64)).unwrap()).collect();
        assert!(s.push(&frame(9, 64)).is_none());
        assert!(!s.has_room(64));
        s.release(slots[2]);
        // A frame that left out of order makes room (3 held of 4), though older ones stay.
        assert!(s.has_room(64));
        let e = s.push(&frame(5, 64)).unwrap();
        assert!(s.push(&frame(6, 64)).is_none());
        s.release(slots[0]);
        assert!(s.push(&frame(7, 64)).is_some());
        assert_eq!(s.frame(e), &frame(5, 64)[..]);
    }

    #[test]
    fn bytes_wrap_around_and_are_reused_in_order() {
        // Room for 4 frames of 1000 bytes; send 1000 through, two held at a time.
        let mut s = Store::new(1024, 4000);
        let mut held = std::collections::VecDeque::new();
        for i in 0..1000u32 {
            let f = frame(i as u8, 1000 - (i as usize % 7));
            let slot = s
                .push(&f)
                .unwrap_or_else(|| panic!("frame {i} found no room"));
            held.push_back((slot, f));
            if held.len() == 2 {
                let (slot, f) = held.pop_front().unwrap();
                assert_eq!(s.frame(slot), &f[..]);
                s.release(slot);
            }
        }
        assert_eq!(s.held(), 1);
    }

    #[test]
    fn a_frame_held_long_keeps_the_bytes_after_it_in_use() {
        let mut s = Store::new(64, 4000);
        let old = s.push(&frame(1, 1000)).unwrap();
        let mut n = 0;
        // The others leave at once, but the byte ring cannot pass the old frame.
        while let Some(slot) = s.push(&frame(2, 1000)) {
            s.release(slot);
            n += 1;
            assert!(n < 100, "the old frame's bytes were reused");
        }
        assert_eq!(s.frame(old), &frame(1, 1000)[..]);
        s.release(old);
        assert!(s.push(&frame(3, 1000)).is_some());
    }

    #[test]
    fn nothing_too_large_for_the_bytes_is_taken() {
        let mut s = Store::new(16, 1000);
        assert!(s.push(&frame(1, 1514)).is_none());
        assert!(s.push(&frame(1, 1000)).is_some());
    }
}
