//! When a received frame arrived, from the kernel's arrival stamp. A packet ring hands frames
//! over a block at a time, and a loop that sleeps reads AF_XDP frames in batches: without the
//! stamp, every reply would be dated when it was read.

/// A stamp older than this is not trusted: the wall clock was set meanwhile.
const TRUSTED_AGE_NS: u64 = 1_000_000_000;

/// How long ago (µs) a frame arrived, from its stamp and a reading of the wall clock taken
/// after it (both ns since the Unix epoch). None without a stamp, or for a stamp from the
/// future or more than a second old: then the reading itself dates the frame.
pub(crate) fn stamp_age_us(now_epoch_ns: u64, stamp_ns: Option<u64>) -> Option<u64> {
    let age_ns = now_epoch_ns.checked_sub(stamp_ns?)?;
    (age_ns <= TRUSTED_AGE_NS).then_some(age_ns / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plausible_stamp_dates_a_frame() {
        let now = 1_700_000_000_000_000_000;
        assert_eq!(stamp_age_us(now, Some(now - 3_500_000)), Some(3_500));
        assert_eq!(stamp_age_us(now, Some(now)), Some(0));
        assert_eq!(stamp_age_us(now, None), None);
        assert_eq!(stamp_age_us(now, Some(now + 1)), None, "from the future");
        assert_eq!(
            stamp_age_us(now, Some(now - 2_000_000_000)),
            None,
            "too old"
        );
    }
}
