//! Round-trip times of a run: every RTT in an HDR histogram (so percentiles up to p99.99 and
//! the maximum are exact to 3 significant digits, whatever the count), and, for the heat map
//! and the raw CSV, the (send time, RTT) of each echo in a buffer sized once for the run.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest RTT the histogram holds exactly: 60 s (anything longer is recorded as 60 s).
const HIGHEST_NS: u64 = 60_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// One timed echo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When the message was sent, in ns from the run's start.
    pub sent_ns: u64,
    pub rtt_ns: u64,
}

#[derive(Clone, Debug)]
pub struct RttRecorder {
    pub hist: Histogram<u64>,
    pub samples: Vec<Sample>,
    /// Samples beyond the buffer's size (the histogram still has them).
    pub samples_left_out: u64,
}

impl RttRecorder {
    /// Room for `expected` samples, reserved now (none is allocated while recording).
    pub fn with_capacity(expected: usize) -> RttRecorder {
        RttRecorder {
            hist: new_histogram(),
            samples: Vec::with_capacity(expected),
            samples_left_out: 0,
        }
    }

    pub fn record(&mut self, sample: Sample) {
        self.hist.saturating_record(sample.rtt_ns.max(1));
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(sample);
        } else {
            self.samples_left_out += 1;
        }
    }
}

/// An empty histogram of RTTs in ns (1 ns to 60 s, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("the histogram's fixed bounds are valid")
}

/// Adds `other` into `into` (for a total over several runs or threads).
pub fn merge(into: &mut Histogram<u64>, other: &Histogram<u64>) {
    into.add(other)
        .expect("histograms with the same bounds always merge");
}

/// The percentiles every report prints, in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

impl Percentiles {
    /// Zeros for an empty histogram.
    pub fn of(hist: &Histogram<u64>) -> Percentiles {
        if hist.is_empty() {
            return Percentiles::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        let q = |p: f64| us(hist.value_at_quantile(p));
        Percentiles {
            min_us: us(hist.min()),
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: us(hist.max()),
            mean_us: hist.mean() / 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        // 1..=10_000 µs, once each: the q-quantile is q·10,000 µs (within 3 digits).
        let mut h = new_histogram();
        for us in 1..=10_000u64 {
            h.record(us * 1000).unwrap();
        }
        let p = Percentiles::of(&h);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 1e-3 + 1e-9;
        assert!(close(p.min_us, 1.0), "{p:?}");
        assert!(close(p.p50_us, 5_000.0), "{p:?}");
        assert!(close(p.p90_us, 9_000.0), "{p:?}");
        assert!(close(p.p99_us, 9_900.0), "{p:?}");
        assert!(close(p.p999_us, 9_990.0), "{p:?}");
        assert!(close(p.p9999_us, 9_999.0), "{p:?}");
        assert!(close(p.max_us, 10_000.0), "{p:?}");
        assert!(close(p.mean_us, 5_000.5), "{p:?}");
    }

    #[test]
    fn merged_histograms_equal_one_fed_everything() {
        let (mut a, mut b, mut all) = (new_histogram(), new_histogram(), new_histogram());
        for v in 1..5_000u64 {
            let ns = v * 37 % 900_000 + 1;
            if v % 3 == 0 { &mut a } else { &mut b }.record(ns).unwrap();
            all.record(ns).unwrap();
        }
        merge(&mut a, &b);
        assert_eq!(a.len(), all.len());
        assert_eq!(Percentiles::of(&a), Percentiles::of(&all));
    }

    #[test]
    fn the_sample_buffer_never_grows_and_counts_what_it_left_out() {
        let mut r = RttRecorder::with_capacity(2);
        let cap = r.samples.capacity();
        for i in 0..(cap as u64 + 3) {
            r.record(Sample {
                sent_ns: i,
                rtt_ns: 1000 + i,
            });
        }
        assert_eq!(r.samples.len(), cap);
        assert_eq!(r.samples_left_out, 3);
        assert_eq!(r.hist.len(), cap as u64 + 3);
        assert!(Percentiles::of(&new_histogram()) == Percentiles::default());
    }
}
