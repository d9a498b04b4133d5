//! Address-set algebra, list files and the default blocklist.

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::net::{IpAddr, Ipv4Addr};

    use sonde_scan::targets::{default_blocklist, PrefixSet, DEFAULT_BLOCKLIST};

    fn ip(text: &str) -> u32 {
        text.parse::<Ipv4Addr>().unwrap().into()
    }

    fn set(tokens: &[&str]) -> PrefixSet {
        PrefixSet::parse(tokens).unwrap()
    }

    fn intervals(pairs: &[(&str, &str)]) -> Vec<(u32, u32)> {
        pairs.iter().map(|&(s, e)| (ip(s), ip(e))).collect()
    }

    fn addr(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn merges_overlapping_and_adjacent() {
        let merged = set(&[
            "10.0.1.0/24",
            "10.0.0.0/24",
            "10.0.0.128/25",
            "10.0.3.0-10.0.3.10",
            "10.0.2.255", // adjacent to 10.0.3.0: joins that range
            "10.0.9.9",
            "10.0.9.9",
        ]);
        assert_eq!(
            merged.ipv4_intervals(),
            intervals(&[
                ("10.0.0.0", "10.0.1.255"),
                ("10.0.2.255", "10.0.3.10"),
                ("10.0.9.9", "10.0.9.9")
            ])
        );
        assert_eq!(merged.ipv4_count(), 512 + 12 + 1);
        let top = set(&[
            "255.255.255.255",
            "255.255.255.0/25",
            "255.255.255.128-255.255.255.254",
        ]);
        assert_eq!(
            top.ipv4_intervals(),
            intervals(&[("255.255.255.0", "255.255.255.255")])
        );
    }

    #[test]
    fn subtract_hand_made_cases() {
        let a = set(&["10.0.0.0/8"]);
        let b = set(&["10.1.0.0/16", "10.255.255.255", "9.0.0.0/8", "11.0.0.0"]);
        assert_eq!(
            a.subtract(&b).ipv4_intervals(),
            intervals(&[("10.0.0.0", "10.0.255.255"), ("10.2.0.0", "10.255.255.254")])
        );
        assert!(a.subtract(&set(&["0.0.0.0/0"])).is_empty());
        assert_eq!(a.subtract(&PrefixSet::new()), a);
        assert!(PrefixSet::new().subtract(&a).is_empty());

        let everything = set(&["0.0.0.0/0"]);
        let ends = set(&["0.0.0.0", "255.255.255.255"]);
        assert_eq!(
            everything.subtract(&ends).ipv4_intervals(),
            intervals(&[("0.0.0.1", "255.255.255.254")])
        );

        // One removal spanning two intervals, and several removals inside one interval.
        let two = set(&["1.0.0.0/24", "1.0.2.0/24"]);
        assert_eq!(
            two.subtract(&set(&["1.0.0.128-1.0.2.127"]))
                .ipv4_intervals(),
            intervals(&[("1.0.0.0", "1.0.0.127"), ("1.0.2.128", "1.0.2.255")])
        );
        assert_eq!(
            two.subtract(&set(&[
                "1.0.0.1",
                "1.0.0.3",
                "1.0.0.5-1.0.0.255",
                "1.0.2.0"
            ]))
            .ipv4_intervals(),
            intervals(&[
                ("1.0.0.0", "1.0.0.0"),
                ("1.0.0.2", "1.0.0.2"),
                ("1.0.0.4", "1.0.0.4"),
                ("1.0.2.1", "1.0.2.255")
            ])
        );
    }

    #[test]
    fn intersect_hand_made_cases() {
        let a = set(&["10.0.0.0/8", "192.168.0.0/16"]);
        let b = set(&["10.5.0.0/16", "11.0.0.0/8", "192.0.0.0/8", "9.255.255.255"]);
        assert_eq!(
            a.intersect(&b).ipv4_intervals(),
            intervals(&[
                ("10.5.0.0", "10.5.255.255"),
                ("192.168.0.0", "192.168.255.255")
            ])
        );
        assert_eq!(b.intersect(&a), a.intersect(&b));
        assert!(a.intersect(&PrefixSet::new()).is_empty());
        let ranges = set(&["1.0.0.0-1.0.0.10", "1.0.0.20-1.0.0.30"]);
        let across = set(&["1.0.0.5-1.0.0.25"]);
        assert_eq!(
            ranges.intersect(&across).ipv4_intervals(),
            intervals(&[("1.0.0.5", "1.0.0.10"), ("1.0.0.20", "1.0.0.25")])
        );
    }

    #[test]
    fn ipv6_algebra_and_nets() {
        let doc = set(&["2001:db8::/32"]);
        let half = set(&["2001:db8::/33"]);
        let rest = doc.subtract(&half);
        let nets: Vec<String> = rest.ipv6_nets().iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, vec!["2001:db8:8000::/33"]);
        assert!(rest.contains(addr("2001:db8:ffff::1")));
        assert!(!rest.contains(addr("2001:db8::1")));
        assert_eq!(
            doc.intersect(&set(&["2001:db8:1::/48", "2001:db9::/32"])),
            set(&["2001:db8:1::/48"])
        );
        // A family never matches the other.
        assert!(!doc.contains(addr("32.1.13.184")));
        assert_eq!(doc.union(&half), doc);
        let nets: Vec<String> = set(&["10.0.0.1-10.0.0.6"])
            .ipv4_nets()
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(
            nets,
            vec!["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
    }

    #[test]
    fn contains_at_interval_edges() {
        let s = set(&["10.0.0.0/24", "10.0.2.0/24"]);
        for (text, inside) in [
            ("9.255.255.255", false),
            ("10.0.0.0", true),
            ("10.0.0.255", true),
            ("10.0.1.0", false),
            ("10.0.1.255", false),
            ("10.0.2.0", true),
            ("10.0.2.255", true),
            ("10.0.3.0", false),
        ] {
            assert_eq!(s.contains(addr(text)), inside, "{text}");
        }
    }

    #[test]
    fn from_file_and_its_errors() {
        let path = std::env::temp_dir().join(format!("sonde-targets-{}-block", std::process::id()));
        std::fs::write(
            &path,
            "# blocklist\n10.0.0.0/8\n\n2001:db8::/32 # docs\n1.2.3.4-1.2.3.5\n",
        )
        .unwrap();
        let loaded = PrefixSet::from_file(&path).unwrap();
        assert_eq!(
            loaded,
            set(&["10.0.0.0/8", "2001:db8::/32", "1.2.3.4", "1.2.3.5"])
        );

        std::fs::write(&path, "10.0.0.0/8\n10.0.0.0/99\n").unwrap();
        let message = format!("{:#}", PrefixSet::from_file(&path).unwrap_err());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            message,
            format!(
                r#"{}:2: invalid prefix "10.0.0.0/99": prefix length must be from 0 to 32"#,
                path.display()
            )
        );
    }

    #[test]
    fn default_blocklist_membership() {
        let block = default_blocklist();
        for text in [
            "10.1.2.3",
            "198.18.5.5",
            "198.19.255.255",
            "2001:db8::1",
            "2001:2::1",
            "0.0.0.0",
            "127.0.0.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:8.8.8.8",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "2002:c000:0204::1",
        ] {
            assert!(block.contains(addr(text)), "{text} should be blocked");
        }
        for text in [
            "8.8.8.8",
            "1.1.1.1",
            "198.17.255.255",
            "198.20.0.0",
            "2001:4860:4860::8888",
            "2a00::1",
        ] {
            assert!(!block.contains(addr(text)), "{text} should not be blocked");
        }
    }

    #[test]
    fn default_blocklist_entries_are_documented_and_sized() {
        for (prefix, why) in DEFAULT_BLOCKLIST {
            assert!(PrefixSet::parse(&[prefix]).is_ok(), "{prefix}");
            assert!(why.contains("RFC"), "{prefix}: {why}");
        }
        // Sum of the IPv4 entries: three /8s, 100.64/10, 169.254/16, 172.16/12, eight /24s,
        // 192.168/16, 198.18/15 and the two /4s (255.255.255.255 lies inside 240/4).
        let expected = 3 * (1 << 24)
            + (1 << 22)
            + (1 << 16)
            + (1 << 20)
            + 8 * 256
            + (1 << 16)
            + (1 << 17)
            + 2 * (1 << 28);
        assert_eq!(default_blocklist().ipv4_count(), expected);
        assert_eq!(expected, 592_709_632);
    }
}
