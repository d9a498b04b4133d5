//! The scan order: exact coverage under every shard/thread split, seeding, checkpoint/resume,
//! spread, and (ignored by default) the walking speed.

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::net::IpAddr;
    use std::time::Instant;

    use sonde_scan::targets::{
        parse_targets, Cursor, CursorState, Part, Permutation, PrefixSet, TargetSpace,
    };

    /// One bit per index.
    struct Bitmap(Vec<u64>);

    impl Bitmap {
        fn new(len: u64) -> Self {
            Self(vec![0; len.div_ceil(64) as usize])
        }

        /// Whether `i` was new.
        fn insert(&mut self, i: u64) -> bool {
            let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
            let new = self.0[word] & bit == 0;
            self.0[word] |= bit;
            new
        }
    }

    /// Deterministic test randomness (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn parts(shards: u32, threads: u32) -> Vec<Part> {
        let mut all = Vec::new();
        for shard in 0..shards {
            for thread in 0..threads {
                all.push(Part::new(shard, shards, thread, threads).unwrap());
            }
        }
        all
    }

    /// Walks every part and checks that together they yield each of `0..len` exactly once, and that
    /// the parts' cycle positions add up to the whole cycle.
    fn assert_exact_cover(len: u64, seed: u64, shards: u32, threads: u32) {
        let permutation = Permutation::new(len, seed);
        let mut seen = Bitmap::new(len);
        let (mut yielded, mut positions) = (0u64, 0u64);
        for part in parts(shards, threads) {
            let cursor = permutation.cursor(part);
            positions += cursor.positions();
            for index in cursor {
                assert!(index < len, "index {index} >= len {len}");
                assert!(
                    seen.insert(index),
                    "index {index} twice: len {len}, {shards}×{threads}"
                );
                yielded += 1;
            }
        }
        assert_eq!(
            yielded, len,
            "len {len}, {shards} shards × {threads} threads"
        );
        assert_eq!(positions, permutation.prime() - 1);
    }

    fn sizes() -> Vec<u64> {
        let mut sizes = vec![1, 2, 3, 7, 100, 65_536, 1_000_003];
        let mut rng = Rng(0x5eed);
        sizes.extend((0..5).map(|_| 1 + rng.below(300_000)));
        sizes
    }

    #[test]
    fn covers_every_index_once_under_every_split() {
        for (i, len) in sizes().into_iter().enumerate() {
            for shards in [1, 2, 3, 7] {
                for threads in [1, 2, 3] {
                    assert_exact_cover(len, 0xfeed + i as u64, shards, threads);
                }
            }
        }
    }

    #[test]
    fn more_parts_than_positions() {
        // len 1: p = 3, two cycle positions among 7 × 3 parts; most parts own nothing.
        assert_exact_cover(1, 5, 7, 3);
        assert_exact_cover(5, 5, 13, 4);
        let permutation = Permutation::new(1, 5);
        assert_eq!(permutation.iter().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn same_seed_same_order_different_seed_different_order() {
        let len = 1_000_003;
        let a: Vec<u64> = Permutation::new(len, 42).iter().collect();
        let b: Vec<u64> = Permutation::new(len, 42).iter().collect();
        assert_eq!(a, b);
        let firsts: Vec<Vec<u64>> = (0..20)
            .map(|seed| Permutation::new(len, seed).iter().take(64).collect())
            .collect();
        for i in 0..firsts.len() {
            for j in i + 1..firsts.len() {
                assert_ne!(firsts[i], firsts[j], "seeds {i} and {j}");
            }
        }
        // Not the identity, nor a shifted identity.
        let sequential = a.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(sequential < 10, "{sequential} sequential steps");
    }

    /// Stops a cursor after `k` indexes, round-trips its state through JSON, and continues.
    fn walk_with_resume(permutation: &Permutation, part: Part, k: u64, out: &mut Vec<u64>) {
        let mut cursor = permutation.cursor(part);
        out.extend(cursor.by_ref().take(k as usize));
        let json = serde_json::to_string(&cursor.state()).unwrap();
        let state: CursorState = serde_json::from_str(&json).unwrap();
        let resumed = Cursor::from_state(permutation, state).unwrap();
        out.extend(resumed);
    }

    #[test]
    fn resume_continues_exactly() {
        let mut rng = Rng(7);
        for len in [1_000, 65_536, 1_000_003] {
            let permutation = Permutation::new(len, len ^ 99);
            let straight: Vec<u64> = permutation.iter().collect();
            for _ in 0..5 {
                let k = rng.below(len + 1);
                let mut resumed = Vec::new();
                walk_with_resume(&permutation, Part::WHOLE, k, &mut resumed);
                assert_eq!(resumed, straight, "len {len}, resumed after {k}");
            }
        }
    }

    #[test]
    fn resume_per_shard_and_thread() {
        let mut rng = Rng(11);
        let len = 100_003;
        let permutation = Permutation::new(len, 3);
        let mut all = Vec::new();
        for part in parts(3, 2) {
            let k = rng.below(len / 6 + 2);
            walk_with_resume(&permutation, part, k, &mut all);
        }
        let mut seen = Bitmap::new(len);
        assert!(all.iter().all(|&i| seen.insert(i)), "an index came twice");
        assert_eq!(all.len() as u64, len);
    }

    #[test]
    fn resume_at_the_end_and_repeatedly() {
        let permutation = Permutation::new(1_000, 1);
        let mut cursor = permutation.iter();
        let mut order = Vec::new();
        // Checkpoint after every index: the chain of resumes still walks the same order.
        loop {
            cursor = Cursor::from_state(&permutation, cursor.state()).unwrap();
            match cursor.next() {
                Some(i) => order.push(i),
                None => break,
            }
        }
        assert!(cursor.is_done());
        assert_eq!(order, permutation.iter().collect::<Vec<_>>());
        let finished = Cursor::from_state(&permutation, cursor.state()).unwrap();
        assert_eq!(finished.count(), 0);
    }

    #[test]
    fn resume_refuses_a_different_scan() {
        let permutation = Permutation::new(10_000, 1);
        let mut cursor = permutation.iter();
        cursor.by_ref().take(500).for_each(drop);
        let state = cursor.state();
        let other_seed = Permutation::new(10_000, 2);
        assert!(
            format!("{}", Cursor::from_state(&other_seed, state).unwrap_err()).contains("seed")
        );
        let other_len = Permutation::new(10_001, 1);
        assert!(Cursor::from_state(&other_len, state).is_err());
        let too_far = CursorState {
            consumed: 1 << 40,
            ..state
        };
        assert!(Cursor::from_state(&permutation, too_far).is_err());
    }

    #[test]
    fn parts_must_be_in_range() {
        assert!(Part::new(2, 2, 0, 1).is_err());
        assert!(Part::new(0, 2, 3, 3).is_err());
        assert!(Part::new(0, 0, 0, 1).is_err());
        assert_eq!(Part::new(0, 1, 0, 1).unwrap(), Part::WHOLE);
    }

    /// Consecutive probes of a /16 should land in the same /24 about as often as random pairs do
    /// (1/256 ≈ 0.4 %); the bar is 1 %.
    #[test]
    fn consecutive_probes_are_spread_out() {
        let targets = parse_targets(&["198.18.0.0/16"]).unwrap();
        let space = TargetSpace::new(&targets, None, &PrefixSet::new(), &[80]).unwrap();
        for seed in 0..20 {
            let addresses: Vec<u32> = space
                .permutation(seed)
                .iter()
                .map(|i| match space.target_at(i).0 {
                    IpAddr::V4(a) => u32::from(a),
                    IpAddr::V6(_) => unreachable!(),
                })
                .collect();
            let same_24 = addresses
                .windows(2)
                .filter(|w| w[0] >> 8 == w[1] >> 8)
                .count();
            let share = same_24 as f64 / (addresses.len() - 1) as f64;
            assert!(
                share < 0.01,
                "seed {seed}: {:.2} % of consecutive probes share a /24",
                share * 100.0
            );
        }
    }

    #[test]
    fn large_spaces_set_up_quickly() {
        for len in [1u64 << 32, (1 << 32) * 1000, 1 << 48, Permutation::MAX_LEN] {
            let started = Instant::now();
            let permutation = Permutation::new(len, 77);
            let indexes: Vec<u64> = permutation
                .cursor(Part::new(1, 3, 1, 2).unwrap())
                .take(1000)
                .collect();
            assert!(indexes.iter().all(|&i| i < len));
            assert_eq!(indexes.len(), 1000);
            assert!(
                started.elapsed().as_secs() < 5,
                "setup for {len} took {:?}",
                started.elapsed()
            );
        }
    }

    /// `cargo test -p sonde-scan --release --test targets_order -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn walking_speed() {
        const STEPS: u64 = 100_000_000;
        let permutation = Permutation::new(1 << 32, 1);
        let started = Instant::now();
        let sum = permutation
            .iter()
            .take(STEPS as usize)
            .fold(0u64, |s, i| s.wrapping_add(i));
        let per_index = started.elapsed().as_secs_f64() / STEPS as f64;
        std::hint::black_box(sum);
        println!(
            "permutation: {:.2} ns/index; 2^32 indexes in {:.1} s",
            per_index * 1e9,
            per_index * (1u64 << 32) as f64
        );

        let targets = parse_targets(&["0.0.0.0/0"]).unwrap();
        let space = TargetSpace::new(
            &targets,
            None,
            &sonde_scan::targets::default_blocklist(),
            &[80],
        )
        .unwrap();
        let started = Instant::now();
        let mut check = 0u64;
        for index in space.permutation(1).iter().take(STEPS as usize) {
            let (addr, port) = space.target_at(index);
            if let IpAddr::V4(a) = addr {
                check = check.wrapping_add(u64::from(u32::from(a)) ^ u64::from(port));
            }
        }
        std::hint::black_box(check);
        let per_index = started.elapsed().as_secs_f64() / STEPS as f64;
        println!(
        "permutation + target_at (IPv4 minus default blocklist, {} intervals): {:.2} ns/index; \
         2^32 indexes in {:.1} s",
        space.ipv4_intervals().len(),
        per_index * 1e9,
        per_index * (1u64 << 32) as f64
    );
    }
}
