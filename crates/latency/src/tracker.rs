//! Loss, reordering and duplicates of one run, from the sequence numbers that came back.
//! Sized once for the run (one bit per message), so recording an echo never allocates.

/// What one echo was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The first echo of this message (counted, and timed).
    First,
    /// An echo of a message already seen.
    Duplicate,
    /// A sequence number this run never sent.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct SeqTracker {
    seen: Vec<u64>,
    capacity: u64,
    highest: Option<u64>,
    pub received: u64,
    pub duplicates: u64,
    /// First echoes that came after an echo of a later message.
    pub reordered: u64,
    pub unknown: u64,
}

impl SeqTracker {
    /// For a run of `messages` messages (sequence numbers 0..messages).
    pub fn new(messages: u64) -> SeqTracker {
        SeqTracker {
            seen: vec![0; messages.div_ceil(64) as usize],
            capacity: messages,
            highest: None,
            received: 0,
            duplicates: 0,
            reordered: 0,
            unknown: 0,
        }
    }

    pub fn record(&mut self, seq: u64) -> Arrival {
        if seq >= self.capacity {
            self.unknown += 1;
            return Arrival::Unknown;
        }
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if self.seen[word] & bit != 0 {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        self.seen[word] |= bit;
        self.received += 1;
        match self.highest {
            Some(h) if seq < h => self.reordered += 1,
            _ => self.highest = Some(seq),
        }
        Arrival::First
    }

    /// Messages sent that never came back.
    pub fn lost(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripted_sequence_counts_loss_reordering_and_duplicates() {
        let mut t = SeqTracker::new(10);
        // 0 1 3 2 (late) 3 (dup) 5 4 (late) 4 (dup) 99 (never sent); 6..9 lost.
        let arrivals: Vec<Arrival> = [0, 1, 3, 2, 3, 5, 4, 4, 99]
            .into_iter()
            .map(|s| t.record(s))
            .collect();
        use Arrival::*;
        assert_eq!(
            arrivals,
            [First, First, First, First, Duplicate, First, First, Duplicate, Unknown]
        );
        assert_eq!(t.received, 6);
        assert_eq!(t.reordered, 2);
        assert_eq!(t.duplicates, 2);
        assert_eq!(t.unknown, 1);
        assert_eq!(t.lost(10), 4);
    }

    #[test]
    fn sequence_numbers_across_word_boundaries_are_distinct() {
        let mut t = SeqTracker::new(130);
        for s in [63, 64, 127, 128, 129, 0] {
            assert_eq!(t.record(s), Arrival::First, "{s}");
        }
        assert_eq!(t.record(64), Arrival::Duplicate);
        assert_eq!(t.record(130), Arrival::Unknown);
        assert_eq!(t.received, 6);
    }
}
