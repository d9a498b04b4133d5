//! Whether a scan sent faster than the path to its targets carries, and how fast it could have
//! gone. A stateless scan sees no retries, but each reply carries its probe's send time, so the
//! receiver can count the answers by when their probes left. Where a drop-tail queue on the way
//! is outrun, the first probes fill it and are answered as any are, and from then on only the
//! share the link drains gets through: the share of probes answered falls after the start, and
//! the round trip grows by the queue's delay. Random loss answers the same share of probes
//! whenever they left.
//!
//! Each sender counts its probes, a batch at a time, and the receiver its first answers (and
//! their round trips added up) in [`BUCKETS`] counters over the send time ([`ByTime`]), each
//! bucket twice as wide once a send time is past the last one: a few adds per batch or reply,
//! no allocation. At the end [`judge`] compares the answered share of the first tenth of the
//! probes with that of the last half.

/// Counters over the send time.
pub const BUCKETS: usize = 256;

/// Counts by the time probes left, from the start of sending: the probes sent (each sender
/// keeps one, a batch at a time) or the first answers to them and their round trips added up
/// (the receiver's), with when the first and the last answer arrived.
#[derive(Clone, Debug)]
pub struct ByTime {
    /// Each bucket spans `1 << shift` µs.
    shift: u32,
    counts: [u64; BUCKETS],
    rtt_sum_us: [u64; BUCKETS],
    /// The first and last answer's arrival, µs from the start of sending.
    arrived: Option<(u64, u64)>,
}

impl Default for ByTime {
    fn default() -> ByTime {
        ByTime {
            shift: 0,
            counts: [0; BUCKETS],
            rtt_sum_us: [0; BUCKETS],
            arrived: None,
        }
    }
}

impl ByTime {
    /// `n` probes sent `sent_us` after sending began.
    #[inline]
    pub fn sent(&mut self, sent_us: u64, n: u64) {
        let b = self.bucket(sent_us);
        self.counts[b] = self.counts[b].saturating_add(n);
    }

    /// A first answer to a probe sent `sent_us` after sending began, `rtt_us` before it came.
    #[inline]
    pub fn answer(&mut self, sent_us: u64, rtt_us: u64) {
        let b = self.bucket(sent_us);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.rtt_sum_us[b] = self.rtt_sum_us[b].saturating_add(rtt_us);
        let at = sent_us.saturating_add(rtt_us);
        let (first, last) = self.arrived.get_or_insert((at, at));
        (*first, *last) = ((*first).min(at), (*last).max(at));
    }

    fn bucket(&mut self, sent_us: u64) -> usize {
        while (sent_us >> self.shift) >= BUCKETS as u64 {
            self.widen();
        }
        (sent_us >> self.shift) as usize
    }

    /// Every bucket twice as wide: pairs merged into the lower half.
    fn widen(&mut self) {
        for i in 0..BUCKETS / 2 {
            self.counts[i] = self.counts[2 * i].saturating_add(self.counts[2 * i + 1]);
            self.rtt_sum_us[i] = self.rtt_sum_us[2 * i].saturating_add(self.rtt_sum_us[2 * i + 1]);
        }
        self.counts[BUCKETS / 2..].fill(0);
        self.rtt_sum_us[BUCKETS / 2..].fill(0);
        self.shift += 1;
    }

    /// Adds another sender's counts (widening whichever is finer).
    pub fn merge(&mut self, other: &ByTime) {
        let mut other = other.clone();
        while other.shift < self.shift {
            other.widen();
        }
        while self.shift < other.shift {
            self.widen();
        }
        for b in 0..BUCKETS {
            self.counts[b] = self.counts[b].saturating_add(other.counts[b]);
            self.rtt_sum_us[b] = self.rtt_sum_us[b].saturating_add(other.rtt_sum_us[b]);
        }
        self.arrived = match (self.arrived, other.arrived) {
            (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
            (a, b) => a.or(b),
        };
    }
}

/// When an answer's probe left, µs after sending began at `origin_us`, from the answer's
/// arrival `now_us` and round trip, all on the run's one clock: the probe carried its sender's
/// reading, so this is the very time its sender counted it by (a second clock, read beside it,
/// would shift every answer by the gap between the two readings). None for an echo dated
/// before sending began: not a send time of ours.
pub fn sent_since(origin_us: u64, now_us: u64, rtt_us: u64) -> Option<u64> {
    now_us.checked_sub(origin_us)?.checked_sub(rtt_us)
}

/// What the counters say about the path.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Outran {
    /// The share of probes answered among the first tenth sent and among the last half.
    pub early_share: f64,
    pub late_share: f64,
    /// The mean round trip of their answers (µs).
    pub early_rtt_us: f64,
    pub late_rtt_us: f64,
    /// The rate the probes left at (from the first batch to the last), and how many a second
    /// the path carried.
    pub sent_pps: f64,
    pub path_pps: f64,
    /// Every probe left within 1 ms: `sent_pps` is taken over 1 ms, so it was more.
    pub sent_in_one_burst: bool,
}

/// Answers needed among the first tenth before a share is trusted.
const MIN_EARLY_ANSWERS: u64 = 10;
/// How much lower the late share must be, and by how many standard errors: random loss and
/// the draw of which targets are live make the two shares differ by chance. At three standard
/// errors a clean scan of a /24 on two ports, a quarter of its probes answered, said it outran
/// its path about once in 550 runs (simulated; one CI run did); at four, once in 15,000.
const LATE_BELOW: f64 = 0.67;
const STANDARD_ERRORS: f64 = 4.0;
/// The shortest time a rate is taken over: a burst sent or answered at once has none.
const MIN_SPAN_US: f64 = 1_000.0;

/// Whether the share of probes answered fell while sending: Some with the figures when it fell
/// by more than chance explains. `sent` counts the probes by send time (the senders' counts
/// together), `answers` the first answers (the receiver's). The windows are by probes, not time
/// (at `-r 0` a first batch can hold half a small scan): the buckets that hold the first tenth
/// of the probes, and those from where half had been sent.
///
/// How fast it could have gone: answers arrived at the rate the path let probes through times
/// the share of targets that answer, which the early share is (the early probes met an empty
/// queue); so the path carried the answers' arrival rate over the early share, a second. Over a
/// long run that is the sending rate times the late share over the early one; over a burst it is
/// the rate at which the bottleneck let the probes out.
pub fn judge(sent: &ByTime, answers: &ByTime) -> Option<Outran> {
    let (mut sent, mut answers) = (sent.clone(), answers.clone());
    sent.merge(&ByTime {
        shift: answers.shift,
        ..ByTime::default()
    });
    answers.merge(&ByTime {
        shift: sent.shift,
        ..ByTime::default()
    });
    let total: u64 = sent.counts.iter().sum();
    let (mut cumulative, mut early, mut late) = ([0u64; 3], None, None);
    for b in 0..BUCKETS {
        let before = cumulative[0];
        cumulative[0] += sent.counts[b];
        if early.is_none() && cumulative[0] * 10 >= total && cumulative[0] > 0 {
            early = Some(b);
        }
        if late.is_none() && before * 2 >= total && before > 0 && sent.counts[b] > 0 {
            late = Some(b);
        }
    }
    let (early, late) = (early?, late?);
    if late <= early {
        return None;
    }
    let sum = |xs: &[u64; BUCKETS], r: std::ops::Range<usize>| xs[r].iter().sum::<u64>();
    let (early_sent, late_sent) = (
        sum(&sent.counts, 0..early + 1),
        sum(&sent.counts, late..BUCKETS),
    );
    let (early_n, late_n) = (
        sum(&answers.counts, 0..early + 1),
        sum(&answers.counts, late..BUCKETS),
    );
    if early_n < MIN_EARLY_ANSWERS || late_sent == 0 {
        return None;
    }
    let (es, ls) = (early_sent as f64, late_sent as f64);
    let early_share = (early_n as f64 / es).min(1.0);
    let late_share = (late_n as f64 / ls).min(1.0);
    let pooled = ((early_n + late_n) as f64 / (es + ls)).min(1.0);
    let error = (pooled * (1.0 - pooled) * (1.0 / es + 1.0 / ls)).sqrt();
    let fell =
        late_share < early_share * LATE_BELOW && early_share - late_share > STANDARD_ERRORS * error;
    if !fell {
        return None;
    }
    let width = 1u64 << sent.shift;
    let first = sent.counts.iter().position(|&n| n > 0)? as u64 * width;
    let last = (sent.counts.iter().rposition(|&n| n > 0)? as u64 + 1) * width;
    let sent_in_one_burst = ((last - first) as f64) < MIN_SPAN_US;
    let sent_pps = total as f64 / ((last - first) as f64).max(MIN_SPAN_US) * 1e6;
    let (arrived_from, arrived_to) = answers.arrived?;
    let all_answers: u64 = answers.counts.iter().sum();
    let arrival_span = ((arrived_to - arrived_from) as f64).max(MIN_SPAN_US);
    let path_pps = (all_answers as f64 / arrival_span * 1e6 / early_share).min(sent_pps);
    Some(Outran {
        early_share,
        late_share,
        early_rtt_us: sum(&answers.rtt_sum_us, 0..early + 1) as f64 / early_n as f64,
        late_rtt_us: sum(&answers.rtt_sum_us, late..BUCKETS) as f64 / late_n.max(1) as f64,
        sent_pps,
        path_pps,
        sent_in_one_burst,
    })
}

/// The words for the loss line.
pub fn outran_text(o: &Outran) -> String {
    let ms = |us: f64| us / 1000.0;
    format!(
        "outran the path: {:.0} % of the first tenth of the probes were answered but {:.0} % of the last half (the round trip {:.2} ms, then {:.2} ms), so something between here and the targets dropped probes or replies; sent at {}{:.0} probes/s, the path carried about {:.0}/s: try -r {}",
        o.early_share * 100.0,
        o.late_share * 100.0,
        ms(o.early_rtt_us),
        ms(o.late_rtt_us),
        if o.sent_in_one_burst { "more than " } else { "" },
        o.sent_pps,
        o.path_pps,
        crate::grab::outran::round_rate(o.path_pps)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 256 probes in batches of 16 every 40 µs, half the targets live (the even ones), answered
    /// as `answered(i)` says, probe i with a round trip of `rtt(i)`.
    fn run(answered: impl Fn(u64) -> bool, rtt: impl Fn(u64) -> u64) -> (ByTime, ByTime) {
        let (mut sent, mut answers) = (ByTime::default(), ByTime::default());
        for i in 0..256u64 {
            let sent_us = i / 16 * 40;
            sent.sent(sent_us, 1);
            if i.is_multiple_of(2) && answered(i) {
                answers.answer(sent_us, rtt(i));
            }
        }
        (sent, answers)
    }

    #[test]
    fn a_clean_run_says_nothing() {
        // Measured on a clean lab: every live target answered, round trips 1.8 to 2.3 ms.
        let (sent, answers) = run(|_| true, |i| 1_800 + i * 2);
        assert_eq!(judge(&sent, &answers), None);
    }

    #[test]
    fn random_loss_says_nothing() {
        // One answer in ten lost, whenever its probe left.
        let (sent, answers) = run(|i| i % 20 != 10, |_| 2_000);
        assert_eq!(judge(&sent, &answers), None);
    }

    #[test]
    fn a_bottleneck_outrun_says_so_with_a_lower_rate() {
        // As against --bottleneck 20mbit --bottleneck-queue 100: the first 100 probes queued,
        // then about one in ten got through, each 29 µs after the last; the round trip grew
        // from 0.4 to 3.3 ms.
        let through = |i: u64| i < 100 || i.is_multiple_of(10);
        let (sent, answers) = run(through, |i| 400 + i.min(100) * 29);
        let o = judge(&sent, &answers).expect("outran");
        assert!(o.early_share > 0.4 && o.late_share < 0.15, "{o:?}");
        assert!(o.late_rtt_us > 2.0 * o.early_rtt_us, "{o:?}");
        assert!(o.path_pps < o.sent_pps / 2.0, "{o:?}");
        let text = outran_text(&o);
        assert!(text.starts_with("outran the path: "), "{text}");
        assert!(text.contains("try -r "), "{text}");
    }

    #[test]
    fn buckets_widen_to_cover_a_long_run_and_keep_every_count() {
        let (mut sent, mut answers) = (ByTime::default(), ByTime::default());
        for s in 0..10_000u64 {
            sent.sent(s * 1_000, 2);
            answers.answer(s * 1_000, 5_000);
        }
        assert!(answers.shift > 0);
        assert_eq!(answers.counts.iter().sum::<u64>(), 10_000);
        assert_eq!(answers.rtt_sum_us.iter().sum::<u64>(), 50_000_000);
        // Half of every batch answered, all along: no fall.
        assert_eq!(judge(&sent, &answers), None);
        // Two senders' counts, one of them finer, add up.
        let mut early = ByTime::default();
        early.sent(10, 5);
        sent.merge(&early);
        assert_eq!(sent.counts.iter().sum::<u64>(), 20_005);
        assert_eq!(sent.shift, answers.shift);
    }

    #[test]
    fn an_answer_is_dated_by_its_probes_stamp() {
        // Sending began at 1,000 µs; a probe stamped 1,250 answered at 1,400.
        assert_eq!(sent_since(1_000, 1_400, 150), Some(250));
        assert_eq!(sent_since(1_000, 1_400, 400), Some(0));
        // An echo from before sending began (a target echoing junk) is not counted.
        assert_eq!(sent_since(1_000, 1_400, 401), None);
        assert_eq!(sent_since(1_000, 900, 0), None);
        // Past the 71 minutes a probe's 32-bit stamp spans, the send time keeps counting.
        let late = u64::from(u32::MAX) + 5_000;
        assert_eq!(sent_since(1_000, late, 2_000), Some(late - 3_000));
    }

    #[test]
    fn too_few_answers_say_nothing() {
        let (sent, answers) = run(|i| i < 8, |_| 1_000);
        assert_eq!(judge(&sent, &answers), None);
        assert_eq!(judge(&ByTime::default(), &ByTime::default()), None);
    }
}
