//! Whether a grab sent faster than the path to its targets carries, and how fast it could have
//! gone: decided once, at the end, from counters the engine threads keep per target answered
//! (never per frame).
//!
//! A SYN retry alone says nothing: a target that is not there gets every retry (a clean run
//! over a /24 of which half answer sends 2 × 128 of them). What does say it is a target that
//! answered only after its SYN was sent again: its first SYN, or the SYN-ACK to it, was lost.
//! Losses on the way do not depend on whether the target is live, so the share of answering
//! targets that needed a retry is the share of first SYNs the path lost. Each thread records
//! which of its targets it sent a SYN again to in a bitmap ([`RetriedSample`]): one bit per
//! target up to [`SAMPLE_BITS`], a regular sample of the targets beyond, so that it costs at
//! most 1 MiB a thread whatever the space.

use sonde_io::{BackendKind, LinkDrops};

/// Targets recorded at most per thread: beyond, every `stride`-th target of the space.
pub const SAMPLE_BITS: u64 = 1 << 23;

/// Which targets of a thread's sample had their SYN sent again.
pub(crate) struct RetriedSample {
    stride: u64,
    bits: Vec<u64>,
}

impl RetriedSample {
    pub fn for_space(targets: u64) -> RetriedSample {
        let stride = targets.div_ceil(SAMPLE_BITS).max(1);
        let words = targets.div_ceil(stride).div_ceil(64) as usize;
        RetriedSample {
            stride,
            // Zeroed memory from the allocator: only the pages of targets retried are touched.
            bits: vec![0; words],
        }
    }

    /// The share of a space of `targets` targets that a thread's sample holds.
    pub fn sample_share(targets: u64) -> f64 {
        1.0 / targets.div_ceil(SAMPLE_BITS).max(1) as f64
    }

    /// The bit of target `index`, if it is in the sample.
    fn bit(&self, index: u64) -> Option<(usize, u64)> {
        if !index.is_multiple_of(self.stride) {
            return None;
        }
        let at = index / self.stride;
        Some(((at >> 6) as usize, 1 << (at & 63)))
    }

    pub fn sampled(&self, index: u64) -> bool {
        self.bit(index).is_some_and(|(w, _)| w < self.bits.len())
    }

    pub fn mark(&mut self, index: u64) {
        if let Some((word, bit)) = self.bit(index) {
            if let Some(w) = self.bits.get_mut(word) {
                *w |= bit;
            }
        }
    }

    pub fn contains(&self, index: u64) -> bool {
        self.bit(index)
            .and_then(|(word, bit)| self.bits.get(word).map(|w| w & bit != 0))
            .unwrap_or(false)
    }
}

/// What a thread saw of its sampled targets' answers, and of its first SYNs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AnswerCounts {
    /// First SYNs sent (every target, sampled or not) and when the first and last left (µs of
    /// the run's clock).
    pub first_syns: u64,
    pub first_syn_from_us: Option<u64>,
    pub first_syn_to_us: u64,
    /// Sampled targets that answered (SYN-ACK, RST or ICMP error) to their first SYN, with the
    /// first and last such answer's arrival (µs), and those that answered only after a retry.
    pub first_try: u64,
    pub first_try_from_us: Option<u64>,
    pub first_try_to_us: u64,
    pub after_retry: u64,
    /// Of `first_try`: targets whose first SYN was answered after a retry of it had left (the
    /// SYN-ACK's echo is at least the retry's wait old): the path's round trip is longer than
    /// `--syn-timeout`, and the retries raced the answers rather than replace lost SYNs.
    pub raced: u64,
}

impl AnswerCounts {
    pub fn first_syn_sent(&mut self, n: u64, now_us: u64) {
        if n > 0 {
            self.first_syns += n;
            self.first_syn_from_us.get_or_insert(now_us);
            self.first_syn_to_us = now_us;
        }
    }

    /// A sampled target answered: `retried` when a retry of its SYN had left, `raced` when the
    /// answer was nevertheless to its first SYN (see [`AnswerCounts::raced`]).
    pub fn answered(&mut self, retried: bool, raced: bool, now_us: u64) {
        if retried && !raced {
            self.after_retry += 1;
        } else {
            self.first_try += 1;
            self.raced += u64::from(retried && raced);
            let from = self.first_try_from_us.get_or_insert(now_us);
            *from = (*from).min(now_us);
            self.first_try_to_us = self.first_try_to_us.max(now_us);
        }
    }

    /// Several threads' counts together (one clock).
    pub fn merge(&mut self, o: &AnswerCounts) {
        self.first_syns += o.first_syns;
        self.first_syn_from_us = min_some(self.first_syn_from_us, o.first_syn_from_us);
        self.first_syn_to_us = self.first_syn_to_us.max(o.first_syn_to_us);
        self.first_try += o.first_try;
        self.first_try_from_us = min_some(self.first_try_from_us, o.first_try_from_us);
        self.first_try_to_us = self.first_try_to_us.max(o.first_try_to_us);
        self.after_retry += o.after_retry;
        self.raced += o.raced;
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        _ => a.or(b),
    }
}

/// The share of answering targets that needed a retry from which a run is said to have lost
/// SYNs on the way. A clean lab has none; a lab with `--loss 0.01` (a frame in a hundred lost
/// each way) about 2 %: random loss, which the summary counts but the last line does not cry
/// about. A bottleneck outrun at `-r 0` loses far more.
pub const SYN_LOSS_SHARE: f64 = 0.05;
/// Segments retransmitted (by sonde and by the servers) per connection established from which
/// a run is said to have lost segments: a lost frame in a hundred makes about one connection of
/// twenty retransmit one segment of its five or so.
pub const SEGMENT_LOSS_PER_CONN: f64 = 0.1;
/// Answers needed before a share is trusted.
pub const MIN_ANSWERS: u64 = 10;

/// What grab's figures say about the path.
pub struct Figures<'a> {
    pub answers: &'a AnswerCounts,
    pub established: u64,
    pub retransmits_sent: u64,
    pub retransmits_received: u64,
}

/// The share of answering targets whose first SYN (or its answer) the path lost, when enough
/// answered to say.
pub fn syn_loss_share(a: &AnswerCounts) -> Option<f64> {
    let answered = a.first_try + a.after_retry;
    (answered >= MIN_ANSWERS).then(|| a.after_retry as f64 / answered as f64)
}

/// The rate first SYNs left at (per second), over the time from the first to the last.
pub fn first_syn_rate(a: &AnswerCounts) -> Option<f64> {
    let from = a.first_syn_from_us?;
    let span_s = (a.first_syn_to_us.saturating_sub(from) as f64 / 1e6).max(MIN_SPAN_S);
    Some(a.first_syns as f64 / span_s)
}

/// Whether every first SYN left within [`MIN_SPAN_S`].
fn in_one_burst(a: &AnswerCounts) -> bool {
    a.first_syn_from_us
        .is_some_and(|from| ((a.first_syn_to_us - from) as f64) < MIN_SPAN_S * 1e6)
}

/// The shortest span a rate is taken over: a burst sent in one pass has none.
const MIN_SPAN_S: f64 = 1e-3;

/// How many first SYNs a second the path carried. Answers to first SYNs arrived at the rate the
/// path let them through times the share of targets that answer; that share is the answering
/// targets over the first SYNs (both counted over the sample, so the sample's scale cancels).
/// So the path's rate is the first-try answers' arrival rate over the answering share. Over a
/// long run this is the first SYNs' rate times the share that got through; over a burst
/// shorter than the run, it is the rate at which the bottleneck let them out (the burst's own
/// rate would count the queue's frames as carried, as if the path were as fast as sonde).
pub fn path_rate(a: &AnswerCounts) -> Option<f64> {
    let from = a.first_try_from_us?;
    let answered = a.first_try + a.after_retry;
    if a.first_try < MIN_ANSWERS || answered == 0 || a.first_syns == 0 {
        return None;
    }
    let span_s = (a.first_try_to_us.saturating_sub(from) as f64 / 1e6).max(MIN_SPAN_S);
    // The sample's share of every target: answered over sampled first SYNs is answered over
    // first SYNs scaled by it; the threads' first SYNs count every target.
    let arrival = a.first_try as f64 / span_s;
    let answering_share = answered as f64 / a.first_syns as f64;
    Some(arrival / answering_share)
}

/// Grab's word on what the path lost: that something between here and the targets dropped
/// SYNs and segments (with the counts), the interface's own drops (as scan says them) and how
/// fast the run could have gone; None when nothing crossed the thresholds and nothing was
/// dropped. `sample` is the share of the space's targets the SYN counts were taken over.
pub fn grab_loss_line(
    f: &Figures,
    sample: f64,
    drops: u64,
    iface: &str,
    link: Option<&LinkDrops>,
    backend: BackendKind,
) -> Option<String> {
    let mut causes = Vec::new();
    let share = syn_loss_share(f.answers).filter(|s| *s >= SYN_LOSS_SHARE);
    let segments = f.retransmits_sent + f.retransmits_received;
    let segments_lost = f.established > 0
        && segments as f64 / f.established as f64 >= SEGMENT_LOSS_PER_CONN
        || f.established == 0 && segments > 0;
    if share.is_some() || segments_lost {
        let a = f.answers;
        let answered = a.first_try + a.after_retry;
        let scale = 1.0 / sample.max(f64::MIN_POSITIVE);
        let syns = match share {
            Some(s) => format!(
                "{} of {} targets that answered did so only to a SYN sent again ({:.0} %)",
                (a.after_retry as f64 * scale).round(),
                (answered as f64 * scale).round(),
                s * 100.0
            ),
            None => "few SYNs".into(),
        };
        let rate = match (first_syn_rate(a), path_rate(a)) {
            (Some(sent), Some(could)) if share.is_some() && could < sent => format!(
                "; first SYNs left at {}{:.0}/s and the path carried about {:.0}/s: try -r {}",
                // A burst of one pass has no span: its rate is taken over the shortest.
                if in_one_burst(a) { "more than " } else { "" },
                sent,
                could,
                round_rate(could)
            ),
            _ => "; lower -r".into(),
        };
        causes.push(format!(
            "outran the path: something between here and the targets dropped SYNs or segments: {syns}; {} segments sent again by sonde and {} by the servers over {} connections{rate}",
            f.retransmits_sent, f.retransmits_received, f.established
        ));
    }
    let link = crate::scan::loss_line(drops, iface, link, backend);
    match (causes.is_empty(), link) {
        (true, None) => None,
        (true, Some(l)) => Some(l),
        (false, None) => Some(format!("lost: {}", causes.join("; also "))),
        (false, Some(l)) => Some(format!(
            "lost: {}; also {}",
            causes.join("; also "),
            l.trim_start_matches("lost: ")
        )),
    }
}

/// Grab's word when its SYN retries raced their answers: enough targets (a share of at least
/// [`SYN_LOSS_SHARE`] of those that answered) answered their first SYN only after a retry of
/// it had left, so the path's round trip is longer than `--syn-timeout` and every such retry
/// cost its target a second SYN-ACK for nothing. Not a loss: said on its own line.
pub fn raced_line(a: &AnswerCounts, sample: f64, syn_timeout_s: f64) -> Option<String> {
    let answered = a.first_try + a.after_retry;
    if answered < MIN_ANSWERS || (a.raced as f64) < SYN_LOSS_SHARE * answered as f64 {
        return None;
    }
    let scale = 1.0 / sample.max(f64::MIN_POSITIVE);
    Some(format!(
        "SYN retries raced their answers: {} of {} targets that answered did so to their first SYN after its retry had left (round trips of {syn_timeout_s} s or more); set --syn-timeout above the path's round trip",
        (a.raced as f64 * scale).round(),
        (answered as f64 * scale).round(),
    ))
}

/// A rate to try: two significant figures, rounded down (a suggestion, not a measurement).
pub fn round_rate(rate: f64) -> u64 {
    if rate < 1.0 {
        return 1;
    }
    let digits = rate.log10().floor() as i32;
    let unit = 10f64.powi((digits - 1).max(0));
    ((rate / unit).floor() * unit) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(a: &AnswerCounts, established: u64, sent: u64, received: u64) -> Option<String> {
        let f = Figures {
            answers: a,
            established,
            retransmits_sent: sent,
            retransmits_received: received,
        };
        grab_loss_line(&f, 1.0, 0, "sx0", None, BackendKind::Xdp)
    }

    /// A clean lab's /24, half live, at -r 0: every live target answered its first SYN (the
    /// dead ones' retries count for nothing); measured 124 of 124 with 264 SYNs sent again.
    fn clean() -> AnswerCounts {
        AnswerCounts {
            first_syns: 256,
            first_syn_from_us: Some(1_000),
            first_syn_to_us: 2_000,
            first_try: 124,
            first_try_from_us: Some(1_800),
            first_try_to_us: 3_300,
            after_retry: 0,
            raced: 0,
        }
    }

    #[test]
    fn a_clean_run_says_nothing() {
        assert_eq!(line(&clean(), 124, 0, 0), None);
        assert_eq!(syn_loss_share(&clean()), Some(0.0));
    }

    #[test]
    fn random_loss_of_a_frame_in_a_hundred_is_counted_not_cried() {
        // 2 of 124 answered only to a retry, and 6 segments sent again: under the thresholds.
        let a = AnswerCounts {
            first_try: 122,
            after_retry: 2,
            ..clean()
        };
        assert_eq!(line(&a, 124, 3, 3), None);
        assert!(syn_loss_share(&a).unwrap() < SYN_LOSS_SHARE);
    }

    #[test]
    fn a_bottleneck_outrun_says_so_with_a_lower_rate() {
        // 256 first SYNs in 1 ms (256 K/s); the first-try answers came over 3 ms, as a
        // 34 K SYN/s bottleneck let them out; 31 of 124 needed a retry.
        let a = AnswerCounts {
            first_try: 93,
            first_try_from_us: Some(1_400),
            first_try_to_us: 4_400,
            after_retry: 31,
            ..clean()
        };
        let text = line(&a, 124, 38, 0).expect("outran");
        assert!(text.starts_with("lost: outran the path"), "{text}");
        assert!(text.contains("31 of 124 targets that answered"), "{text}");
        assert!(text.contains("(25 %)"), "{text}");
        assert!(text.contains("38 segments sent again by sonde"), "{text}");
        let sent = first_syn_rate(&a).unwrap();
        let could = path_rate(&a).unwrap();
        assert!((sent - 256_000.0).abs() < 1.0, "{sent}");
        // 93 answers over 3 ms, over an answering share of 124/256: 64 K/s.
        assert!((could - 64_000.0).abs() < 100.0, "{could}");
        assert!(text.contains("try -r 64000"), "{text}");
    }

    #[test]
    fn retries_that_raced_their_answers_are_no_loss_but_a_word_of_their_own() {
        // A 1 s path: half the live targets' first SYNs were retried just before their
        // SYN-ACKs came, which echo the first SYN (1 s old): first tries, not losses.
        let mut a = AnswerCounts::default();
        for i in 0..124u64 {
            a.answered(i % 2 == 0, i % 2 == 0, 1_000_000 + i);
        }
        a.first_syn_sent(256, 0);
        assert_eq!((a.first_try, a.after_retry, a.raced), (124, 0, 62));
        assert_eq!(line(&a, 124, 0, 0), None);
        let text = raced_line(&a, 1.0, 1.0).expect("raced");
        assert!(text.contains("62 of 124 targets"), "{text}");
        assert!(text.contains("--syn-timeout above"), "{text}");
        // Answers to the retries themselves (the first SYNs lost) are losses, not races.
        let mut lost = AnswerCounts::default();
        for i in 0..124u64 {
            lost.answered(i % 2 == 0, false, 1_000_000 + i);
        }
        assert_eq!(raced_line(&lost, 1.0, 1.0), None);
        assert_eq!(lost.after_retry, 62);
        assert_eq!(raced_line(&clean(), 1.0, 1.0), None);
    }

    #[test]
    fn segments_alone_say_it_without_a_rate() {
        let text = line(&clean(), 124, 30, 10).expect("segments lost");
        assert!(
            text.contains("few SYNs") && text.ends_with("lower -r"),
            "{text}"
        );
    }

    #[test]
    fn the_interface_s_drops_join_the_line() {
        let out = LinkDrops {
            tx_dropped: 7,
            ..LinkDrops::default()
        };
        let f = Figures {
            answers: &clean(),
            established: 124,
            retransmits_sent: 0,
            retransmits_received: 0,
        };
        let only = grab_loss_line(&f, 1.0, 0, "sx0", Some(&out), BackendKind::Xdp).unwrap();
        assert!(only.starts_with("lost: sx0 dropped 7"), "{only}");
    }

    #[test]
    fn the_sample_covers_a_large_space_in_bounded_memory() {
        let mut s = RetriedSample::for_space(1 << 32);
        assert!(s.bits.len() * 8 <= 1 << 20);
        assert!(s.sampled(0) && !s.sampled(1));
        s.mark(512);
        assert!(s.contains(512) && !s.contains(1024) && !s.contains(513));
        let mut small = RetriedSample::for_space(256);
        assert!((0..256).all(|i| small.sampled(i)));
        small.mark(255);
        assert!(small.contains(255) && !small.contains(254));
        assert!(!small.sampled(256) && !small.contains(256));
    }

    #[test]
    fn a_rate_to_try_keeps_two_figures() {
        assert_eq!(round_rate(64_123.0), 64_000);
        assert_eq!(round_rate(9_876.0), 9_800);
        assert_eq!(round_rate(42.7), 42);
        assert_eq!(round_rate(0.3), 1);
    }
}
