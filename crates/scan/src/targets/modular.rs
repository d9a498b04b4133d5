//! Arithmetic modulo a prime below 2^63: primality, factoring, generators and Montgomery
//! multiplication for the permutation's hot loop.

/// `a · b mod m` through a 128-bit product; fine for setup, too slow (a hardware divide) for the
/// per-probe step, which uses `Montgomery`.
pub fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    (u128::from(a) * u128::from(b) % u128::from(m)) as u64
}

pub fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut result = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = mul_mod(result, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    result
}

/// Deterministic Miller-Rabin: the first twelve primes as bases decide every n < 3.3·10^24.
pub fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in BASES {
        // A named remainder rather than `is_multiple_of`, which needs Rust 1.87 (MSRV is 1.80).
        let remainder = n % p;
        if remainder == 0 {
            return n == p;
        }
    }
    let shift = (n - 1).trailing_zeros();
    let odd = (n - 1) >> shift;
    BASES.iter().all(|&a| passes_round(n, a, odd, shift))
}

/// One Miller-Rabin round: whether `n` (odd, with `n - 1 = odd · 2^shift`) is a strong probable
/// prime to base `a`.
fn passes_round(n: u64, a: u64, odd: u64, shift: u32) -> bool {
    let mut x = pow_mod(a, odd, n);
    if x == 1 || x == n - 1 {
        return true;
    }
    for _ in 1..shift {
        x = mul_mod(x, x, n);
        if x == n - 1 {
            return true;
        }
    }
    false
}

/// The smallest prime above `n`; `n < 2^63` keeps the answer in range (prime gaps are tiny).
pub fn next_prime_above(n: u64) -> u64 {
    (n + 1..)
        .find(|&c| is_prime(c))
        .expect("a prime exists below 2^64")
}

/// The distinct prime factors of `n >= 1` (0 would never finish), ascending: trial division takes the small ones,
/// Pollard's rho splits what remains (at most a few factors above 1,000).
pub fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut factors = Vec::new();
    for d in 2..1000u64 {
        let mut divided = false;
        while let (quotient, 0) = (n / d, n % d) {
            n = quotient;
            divided = true;
        }
        if divided {
            factors.push(d);
        }
    }
    split_large(n, &mut factors);
    factors.sort_unstable();
    factors.dedup();
    factors
}

fn split_large(n: u64, factors: &mut Vec<u64>) {
    if n == 1 {
        return;
    }
    if is_prime(n) {
        factors.push(n);
        return;
    }
    let d = pollard_rho(n);
    split_large(d, factors);
    split_large(n / d, factors);
}

/// A non-trivial factor of an odd composite `n` (Floyd's cycle finding on x² + c).
fn pollard_rho(n: u64) -> u64 {
    for c in 1..n {
        let step = |x: u64| (mul_mod(x, x, n) + c) % n;
        let (mut slow, mut fast, mut d) = (2, 2, 1);
        while d == 1 {
            slow = step(slow);
            fast = step(step(fast));
            d = gcd(slow.abs_diff(fast), n);
        }
        if d != n {
            return d;
        }
    }
    unreachable!("{n} is composite, so some c splits it")
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Whether `g` generates the multiplicative group mod prime `p`: its order is p - 1 exactly when
/// no maximal proper divisor (p - 1)/q of p - 1 already takes it to 1.
pub fn is_generator(g: u64, p: u64, factors_of_order: &[u64]) -> bool {
    let residue = g % p;
    residue != 0
        && factors_of_order
            .iter()
            .all(|&q| pow_mod(g, (p - 1) / q, p) != 1)
}

/// Multiplication modulo an odd `p < 2^63` without division: operands in Montgomery form carry a
/// factor R = 2^64, and `reduce` divides it back out with two multiplications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Montgomery {
    p: u64,
    /// p⁻¹ mod 2^64.
    p_inv: u64,
    /// R² mod p, to bring numbers into Montgomery form.
    r2: u64,
}

impl Montgomery {
    pub fn new(p: u64) -> Self {
        assert!(
            p % 2 == 1 && p < 1 << 63,
            "Montgomery needs an odd modulus below 2^63"
        );
        // Newton's iteration doubles the correct low bits each round; p·p ≡ 1 mod 8 gives 3.
        let mut p_inv = p;
        for _ in 0..5 {
            p_inv = p_inv.wrapping_mul(2u64.wrapping_sub(p.wrapping_mul(p_inv)));
        }
        let r = (1u128 << 64) % u128::from(p);
        let r2 = (r * r % u128::from(p)) as u64;
        Self { p, p_inv, r2 }
    }

    pub fn modulus(&self) -> u64 {
        self.p
    }

    /// `x · R mod p`.
    pub fn form_of(&self, x: u64) -> u64 {
        self.reduce(u128::from(x % self.p) * u128::from(self.r2))
    }

    /// `a · b · R⁻¹ mod p`: with `a` plain and `b` in Montgomery form, the plain product `a · b`.
    #[inline(always)]
    pub fn mul(&self, a: u64, b: u64) -> u64 {
        self.reduce(u128::from(a) * u128::from(b))
    }

    /// `t · R⁻¹ mod p` for `t < p · 2^64`. With m = t · p⁻¹ mod 2^64, m · p has the same low
    /// word as t, so (t - m · p) / 2^64 is the difference of the high words, in (-p, p).
    #[inline(always)]
    fn reduce(&self, t: u128) -> u64 {
        let (low, high) = (t as u64, (t >> 64) as u64);
        let m = low.wrapping_mul(self.p_inv);
        let mp_high = ((u128::from(m) * u128::from(self.p)) >> 64) as u64;
        if high >= mp_high {
            high - mp_high
        } else {
            high + self.p - mp_high
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primality_against_a_sieve() {
        let limit = 100_000usize;
        let mut composite = vec![false; limit];
        for i in 2..limit {
            if !composite[i] {
                (i * i..limit).step_by(i).for_each(|j| composite[j] = true);
            }
            assert_eq!(is_prime(i as u64), !composite[i], "{i}");
        }
        assert!(!is_prime(0) && !is_prime(1));
    }

    #[test]
    fn primality_of_hard_cases() {
        // Strong pseudoprimes to several small bases, Carmichael numbers, large primes.
        for n in [
            3_215_031_751u64,
            2_152_302_898_747,
            3_474_749_660_383,
            341_550_071_728_321,
        ] {
            assert!(!is_prime(n), "{n}");
        }
        assert!(!is_prime(561) && !is_prime(1_105));
        assert!(is_prime((1 << 61) - 1));
        assert!(is_prime(4_294_967_311)); // the smallest prime above 2^32
        assert!(is_prime(18_446_744_073_709_551_557)); // the largest prime below 2^64
        assert_eq!(next_prime_above(1 << 32), 4_294_967_311);
        assert_eq!(next_prime_above(65_536), 65_537);
        assert_eq!(next_prime_above(2), 3);
    }

    #[test]
    fn factoring() {
        assert_eq!(prime_factors(1), Vec::<u64>::new());
        assert_eq!(prime_factors(65_536), vec![2]);
        assert_eq!(prime_factors(4_294_967_310), vec![2, 3, 5, 131, 364_289]);
        // Two primes near 2^31: the case trial division would be slow for.
        let (a, b) = (2_147_483_647u64, 2_147_483_629u64);
        assert_eq!(prime_factors(a * b), vec![b, a]);
        let big = next_prime_above(1 << 40);
        assert_eq!(prime_factors(big * 6 * 1_009), vec![2, 3, 1_009, big]);
    }

    #[test]
    fn montgomery_matches_plain_mulmod() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for p in [3u64, 65_537, 4_294_967_311, next_prime_above(1 << 62)] {
            let mont = Montgomery::new(p);
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (a, b) = (x % p, x.rotate_left(29) % p);
                assert_eq!(mont.mul(a, mont.form_of(b)), mul_mod(a, b, p));
            }
        }
    }

    #[test]
    fn generator_test() {
        // 3 generates mod 7; 2 has order 3 mod 7.
        assert!(is_generator(3, 7, &[2, 3]));
        assert!(!is_generator(2, 7, &[2, 3]));
    }
}
