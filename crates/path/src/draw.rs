//! The path's random draws: a small PRNG (xoshiro256**, seeded through SplitMix64), yes/no
//! draws of a share, and jitter's truncated normal deviates. Deterministic for a seed, so the
//! same flags and traffic give the same drops, copies and flips; no allocation.

/// xoshiro256** with a spare normal deviate (Box–Muller makes two at a time).
pub(crate) struct Draws {
    s: [u64; 4],
    spare: Option<f64>,
}

impl Draws {
    pub(crate) fn new(seed: u64) -> Draws {
        let mut x = seed;
        let mut split = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Draws {
            s: [split(), split(), split(), split()],
            spare: None,
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform number in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform number in [0, n).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A standard normal deviate (Box–Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        // 1 - unit() is in (0, 1], so its logarithm is finite.
        let r = (-2.0 * (1.0 - self.unit()).ln()).sqrt();
        let theta = std::f64::consts::TAU * self.unit();
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}

/// A share as a yes/no draw: yes with probability `p`. Draws nothing for 0 or 1.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Chance {
    Never,
    Always,
    /// Yes when a draw is below this.
    Below(u64),
}

impl Chance {
    pub(crate) fn new(p: f64) -> Chance {
        if p.is_nan() || p <= 0.0 {
            Chance::Never
        } else if p >= 1.0 {
            Chance::Always
        } else {
            Chance::Below((p * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    pub(crate) fn hit(self, draws: &mut Draws) -> bool {
        match self {
            Chance::Never => false,
            Chance::Always => true,
            Chance::Below(t) => draws.next_u64() < t,
        }
    }
}

/// Where jitter's normal deviates are cut: this many of their standard deviations either way.
const CUT: f64 = 3.0;
/// The standard deviation of a standard normal deviate cut at ±3: sqrt(1 - 6·φ(3) / (2Φ(3) - 1)).
/// Dividing by it makes the cut deviates' spread exactly the one asked for.
const CUT_SD: f64 = 0.986_578_392_558_108_6;

/// One direction's jitter: normal deviates of standard deviation `jitter / √2`, cut at three
/// of those either way (a deviate beyond is drawn again), so that two directions make a round
/// trip whose standard deviation is `jitter`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Jitter {
    /// The standard deviation of the uncut normal whose cut version has the spread asked for.
    sigma_ns: f64,
}

impl Jitter {
    /// None for no jitter.
    pub(crate) fn new(round_trip_sd_ns: u64) -> Option<Jitter> {
        (round_trip_sd_ns > 0).then(|| Jitter {
            sigma_ns: round_trip_sd_ns as f64 / std::f64::consts::SQRT_2 / CUT_SD,
        })
    }

    /// A deviate, ns.
    pub(crate) fn draw(self, draws: &mut Draws) -> i64 {
        loop {
            let z = draws.normal();
            if z.abs() <= CUT {
                return (z * self.sigma_ns).round() as i64;
            }
        }
    }

    /// The largest deviate either way, ns.
    #[cfg(test)]
    pub(crate) fn bound_ns(self) -> f64 {
        CUT * self.sigma_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_sd(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }

    #[test]
    fn draws_are_deterministic_for_a_seed_and_differ_between_seeds() {
        let take = |seed| {
            let mut d = Draws::new(seed);
            (0..4).map(|_| d.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(take(1), take(1));
        assert_ne!(take(1), take(2));
    }

    #[test]
    fn uniform_draws_stay_in_range_and_average_out() {
        let mut d = Draws::new(7);
        let xs: Vec<f64> = (0..100_000).map(|_| d.unit()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let (mean, _) = mean_sd(&xs);
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        assert!((0..10_000).all(|_| d.below(10) < 10));
    }

    #[test]
    fn chances_hit_their_share() {
        let mut d = Draws::new(3);
        for p in [0.01, 0.2, 0.5, 0.9] {
            let c = Chance::new(p);
            let hits = (0..200_000).filter(|_| c.hit(&mut d)).count() as f64 / 200_000.0;
            // Binomial: σ ≤ 0.0012 at 200 K draws; 5σ.
            assert!((hits - p).abs() < 0.006, "p {p}: {hits}");
        }
        assert!((0..1000).all(|_| !Chance::new(0.0).hit(&mut d)));
        assert!((0..1000).all(|_| Chance::new(1.0).hit(&mut d)));
        assert!(!Chance::new(f64::NAN).hit(&mut d));
    }

    #[test]
    fn normals_are_standard() {
        let mut d = Draws::new(11);
        let xs: Vec<f64> = (0..200_000).map(|_| d.normal()).collect();
        let (mean, sd) = mean_sd(&xs);
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((sd - 1.0).abs() < 0.01, "{sd}");
    }

    #[test]
    fn one_way_jitter_makes_a_round_trip_of_the_spread_asked_for() {
        let mut d = Draws::new(5);
        let jitter = Jitter::new(10_000_000).unwrap();
        let one_way: Vec<f64> = (0..200_000).map(|_| jitter.draw(&mut d) as f64).collect();
        assert!(one_way.iter().all(|x| x.abs() <= jitter.bound_ns() + 1.0));
        let (mean, sd) = mean_sd(&one_way);
        assert!(mean.abs() < 0.01 * 7_071_068.0, "{mean}");
        assert!((sd / 7_071_068.0 - 1.0).abs() < 0.01, "{sd}");
        // A round trip: the sum of two directions' deviates.
        let trips: Vec<f64> = one_way.chunks(2).map(|p| p[0] + p[1]).collect();
        let (_, sd) = mean_sd(&trips);
        assert!((sd / 10_000_000.0 - 1.0).abs() < 0.015, "{sd}");
        assert!(Jitter::new(0).is_none());
    }
}
