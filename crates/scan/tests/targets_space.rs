//! The allowed target space: set algebra with allow/blocklists, index → (address, port).

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::collections::HashSet;
    use std::net::{IpAddr, Ipv4Addr};

    use sonde_scan::targets::{default_blocklist, parse_targets, PrefixSet, TargetSpace};

    fn space(
        targets: &[&str],
        allow: Option<&[&str]>,
        block: &[&str],
        ports: &[u16],
    ) -> anyhow::Result<TargetSpace> {
        let allow = allow.map(|tokens| PrefixSet::parse(tokens).unwrap());
        TargetSpace::new(
            &parse_targets(targets).unwrap(),
            allow.as_ref(),
            &PrefixSet::parse(block).unwrap(),
            ports,
        )
    }

    fn addr(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addr_at_across_intervals() {
        let s = space(
            &["192.0.2.1", "10.0.0.8-10.0.0.9", "10.0.0.0/30"],
            None,
            &[],
            &[80],
        )
        .unwrap();
        let expected = [
            "10.0.0.0",
            "10.0.0.1",
            "10.0.0.2",
            "10.0.0.3",
            "10.0.0.8",
            "10.0.0.9",
            "192.0.2.1",
        ];
        assert_eq!(s.addresses(), 7);
        assert_eq!(s.len(), 7);
        for (i, text) in expected.iter().enumerate() {
            assert_eq!(s.addr_at(i as u64), addr(text), "index {i}");
            assert_eq!(IpAddr::V4(s.ipv4_at(i as u64)), addr(text));
        }
    }

    #[test]
    #[should_panic]
    fn ipv4_at_out_of_range_panics() {
        let s = space(&["10.0.0.0/30"], None, &[], &[80]).unwrap();
        s.ipv4_at(4);
    }

    #[test]
    fn target_at_is_address_major() {
        let s = space(
            &["10.0.0.0/31", "2001:db8::1"],
            None,
            &[],
            &[443, 22, 80, 80],
        )
        .unwrap();
        assert_eq!(s.ports(), &[22, 80, 443]);
        assert_eq!(s.addresses(), 3);
        assert_eq!((s.ipv4_addresses(), s.ipv6_addresses()), (2, 1));
        assert_eq!(s.len(), 9);
        let all: Vec<(IpAddr, u16)> = (0..s.len()).map(|i| s.target_at(i)).collect();
        assert_eq!(all[0], (addr("10.0.0.0"), 22));
        assert_eq!(all[1], (addr("10.0.0.0"), 80));
        assert_eq!(all[2], (addr("10.0.0.0"), 443));
        assert_eq!(all[3], (addr("10.0.0.1"), 22));
        assert_eq!(all[8], (addr("2001:db8::1"), 443));
        // Through a permutation, every pair comes exactly once.
        let walked: HashSet<(IpAddr, u16)> =
            s.permutation(9).iter().map(|i| s.target_at(i)).collect();
        assert_eq!(walked, all.into_iter().collect());
    }

    #[test]
    fn allowlist_and_blocklist() {
        let s = space(
            &["198.18.0.0/16"],
            Some(&["198.18.1.0/24", "8.8.8.8"]),
            &["198.18.1.128/25"],
            &[80],
        )
        .unwrap();
        assert_eq!(s.addresses(), 128);
        assert_eq!(
            s.ipv4_intervals(),
            &[(
                u32::from(Ipv4Addr::new(198, 18, 1, 0)),
                u32::from(Ipv4Addr::new(198, 18, 1, 127))
            )]
        );
        // An allowlist without IPv6 entries excludes every IPv6 target.
        let s = space(
            &["198.18.0.0/30", "2001:db8::/126"],
            Some(&["198.18.0.0/15"]),
            &[],
            &[80],
        )
        .unwrap();
        assert_eq!((s.ipv4_addresses(), s.ipv6_addresses()), (4, 0));
        // IPv6 blocklist entries apply to the hit list.
        let s = space(
            &["2001:db8::/126"],
            None,
            &["2001:db8::1", "2001:db8::2"],
            &[80],
        )
        .unwrap();
        assert_eq!(s.addr_at(0), addr("2001:db8::"));
        assert_eq!(s.addr_at(1), addr("2001:db8::3"));
    }

    #[test]
    fn empty_space_is_an_error() {
        let targets = parse_targets(&["10.0.0.0/8", "2001:db8::1"]).unwrap();
        let error = TargetSpace::new(&targets, None, &default_blocklist(), &[80]).unwrap_err();
        assert_eq!(
        error.to_string(),
        "no targets left after the blocklist/allowlist (16,777,217 addresses given, all excluded)"
    );
        let error = space(&["198.18.0.0/24"], Some(&["8.8.8.0/24"]), &[], &[80]).unwrap_err();
        assert!(error.to_string().contains("256 addresses given"), "{error}");
        assert!(space(&["198.18.0.0/24"], None, &[], &[]).is_err());
    }

    #[test]
    fn describe_counts() {
        let s = space(&["198.18.0.0/16"], None, &[], &[80]).unwrap();
        assert_eq!(s.describe(), "65,536 addresses × 1 port = 65,536 probes");
        let s = space(&["198.18.0.1"], None, &[], &[22, 80, 443]).unwrap();
        assert_eq!(s.describe(), "1 address × 3 ports = 3 probes");
    }

    #[test]
    fn whole_ipv4_minus_default_blocklist() {
        let s = TargetSpace::new(
            &parse_targets(&["0.0.0.0/0"]).unwrap(),
            None,
            &default_blocklist(),
            &[80],
        )
        .unwrap();
        assert_eq!(s.len(), (1u64 << 32) - 592_709_632);
        assert!(
            s.ipv4_intervals().len() < 40,
            "{}",
            s.ipv4_intervals().len()
        );
        assert_eq!(s.addr_at(0), addr("1.0.0.0"));
        assert_eq!(s.addr_at(s.len() - 1), addr("223.255.255.255"));
        // Spot checks: in order, all outside the blocklist.
        let block = default_blocklist();
        let mut previous = 0u32;
        for k in 1..100_000u64 {
            let a = s.ipv4_at(k * (s.len() / 100_000));
            assert!(!block.contains(IpAddr::V4(a)), "{a}");
            assert!(u32::from(a) > previous);
            previous = a.into();
        }
    }

    #[test]
    fn every_address_and_port_does_not_overflow() {
        let s = space(
            &["0.0.0.0/0"],
            None,
            &[],
            &(0..=65535).collect::<Vec<u16>>(),
        )
        .unwrap();
        assert_eq!(s.len(), 1 << 48);
        assert_eq!(
            s.describe(),
            "4,294,967,296 addresses × 65,536 ports = 281,474,976,710,656 probes"
        );
        assert_eq!(s.target_at(s.len() - 1), (addr("255.255.255.255"), 65535));
        assert_eq!(s.target_at(65_536 + 7), (addr("0.0.0.1"), 7));
        let mut cursor = s.permutation(1).iter();
        assert!(cursor.by_ref().take(1000).all(|i| i < 1 << 48));
    }

    /// `index_of` inverts `target_at` over `s`: for `samples` indexes spread over the whole
    /// space (all of them when the space is smaller), and both ends.
    fn round_trips(s: &TargetSpace, samples: u64) {
        let step = (s.len() / samples).max(1);
        let picks = (0..s.len()).step_by(step as usize).chain([s.len() - 1]);
        for i in picks {
            let (a, port) = s.target_at(i);
            assert_eq!(s.index_of(a, port), Some(i), "index {i}: {a} port {port}");
        }
    }

    #[test]
    fn index_of_inverts_target_at_over_mixed_spaces() {
        let mixed = space(
            &[
                "198.18.0.0/30",
                "198.18.0.9-198.18.0.20",
                "198.18.3.0/24",
                "198.19.255.255",
                "2001:2::1",
                "2001:2::/126",
                "2001:2:0:ff::9",
            ],
            None,
            &["198.18.3.128/27"],
            &[443, 22, 80],
        )
        .unwrap();
        round_trips(&mixed, mixed.len());
        let one_port = space(&["198.18.0.0/15", "2001:2::/120"], None, &[], &[53]).unwrap();
        round_trips(&one_port, 50_000);
        let icmp = space(&["198.18.0.0/20", "2001:2::7"], None, &[], &[0]).unwrap();
        round_trips(&icmp, icmp.len());
        let wide = space(&["0.0.0.0/0"], None, &[], &[1, 2, 3, 65535]).unwrap();
        round_trips(&wide, 100_000);
        // Pseudo-random indexes, not just evenly spaced ones.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % wide.len();
            let (a, port) = wide.target_at(i);
            assert_eq!(wide.index_of(a, port), Some(i));
        }
    }

    #[test]
    fn index_of_is_none_outside_the_space() {
        let s = space(
            &["198.18.0.0/30", "198.18.0.9-198.18.0.20", "2001:2::/126"],
            None,
            &["198.18.0.10"],
            &[22, 80],
        )
        .unwrap();
        for (a, port) in [
            ("198.18.0.1", 443),    // a port not probed
            ("198.18.0.4", 80),     // between the intervals
            ("198.18.0.10", 80),    // blocked
            ("198.18.0.21", 22),    // past the last interval
            ("198.17.255.255", 22), // before the first
            ("0.0.0.0", 22),
            ("255.255.255.255", 80),
            ("2001:2::4", 80), // past the IPv6 list
            ("2001:1::", 22),  // before it
            ("::ffff:198.18.0.1", 80),
        ] {
            assert_eq!(s.index_of(addr(a), port), None, "{a} port {port}");
        }
        assert_eq!(s.index_of(addr("198.18.0.9"), 22), Some(8));
        assert_eq!(s.address_index(addr("2001:2::3")), Some(s.addresses() - 1));
        let v6_only = space(&["2001:2::5"], None, &[], &[80]).unwrap();
        assert_eq!(v6_only.index_of(addr("198.18.0.1"), 80), None);
        assert_eq!(v6_only.index_of(addr("2001:2::5"), 80), Some(0));
    }
}
