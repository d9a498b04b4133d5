//! Output filter parsing and matching.

mod output_filter {
    use sonde_scan::output::OutputFilter;
    use sonde_scan::Reply;

    /// Whether `expr` accepts `r`; panics if it does not parse.
    fn accepts(expr: &str, r: &Reply) -> bool {
        OutputFilter::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches(r)
    }

    fn error(expr: &str) -> String {
        match OutputFilter::parse(expr) {
            Ok(f) => panic!("`{expr}` parsed: {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn rst() -> Reply {
        Reply {
            classification: "rst",
            success: false,
            sport: 443,
            ttl: 30,
            ..Reply::example()
        }
    }

    #[test]
    fn default_is_success() {
        let filter = OutputFilter::default();
        assert!(filter.matches(&Reply::example()));
        assert!(!filter.matches(&rst()));
        assert_eq!(filter.to_string(), "success = 1");
        assert!(OutputFilter::accept_all().matches(&rst()));
    }

    #[test]
    fn each_operator_on_integers() {
        let r = Reply::example(); // ttl 64
        for (expr, want) in [
            ("ttl = 64", true),
            ("ttl == 64", true),
            ("ttl != 64", false),
            ("ttl < 64", false),
            ("ttl < 65", true),
            ("ttl > 63", true),
            ("ttl > 64", false),
            ("ttl <= 64", true),
            ("ttl >= 65", false),
            ("ttl>32", true),
            ("sport != 80", false),
        ] {
            assert_eq!(accepts(expr, &r), want, "{expr}");
        }
    }

    #[test]
    fn strings_bare_and_quoted() {
        let r = Reply::example();
        assert!(accepts("classification = synack", &r));
        assert!(accepts("classification = 'synack'", &r));
        assert!(accepts("classification = \"synack\"", &r));
        assert!(accepts("classification != rst", &r));
        assert!(accepts("saddr = 198.18.0.7", &r));
        assert!(!accepts("saddr = 198.18.0.70", &r));
        let v6 = Reply {
            saddr: "2001:db8::1".parse().unwrap(),
            ..Reply::example()
        };
        assert!(accepts("saddr = 2001:db8::1", &v6));
    }

    #[test]
    fn booleans_as_numbers_or_words() {
        let r = Reply::example(); // success, not repeat
        assert!(accepts("success = 1", &r));
        assert!(accepts("success = true", &r));
        assert!(accepts("repeat = 0", &r));
        assert!(accepts("repeat = FALSE", &r));
        assert!(!accepts("repeat = 1", &r));
        assert!(accepts("success != 1", &rst()));
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let r = Reply::example();
        // true || (false && false)
        assert!(accepts("success = 1 || ttl = 1 && sport = 1", &r));
        // (true || false) && false
        assert!(!accepts("(success = 1 || ttl = 1) && sport = 1", &r));
        // false && true || true
        assert!(accepts("ttl = 1 and success = 1 or sport = 80", &r));
        assert!(accepts(
            "success = 1 AND (classification = rst OR ttl > 32)",
            &r
        ));
        assert!(!accepts("((success = 0))", &r));
    }

    #[test]
    fn null_matches_only_not_equal() {
        let r = Reply::example(); // tcp_ts is None
        for expr in [
            "tcp_ts = 0",
            "tcp_ts > 0",
            "tcp_ts < 1",
            "tcp_ts >= 0",
            "tcp_ts <= 9",
        ] {
            assert!(!accepts(expr, &r), "{expr}");
        }
        assert!(accepts("tcp_ts != 0", &r));
        assert!(accepts("tcp_mss = 1460", &r));
    }

    #[test]
    fn errors_name_the_token_and_column() {
        let err = error("success = 1 && bogus = 2");
        assert!(
            err.contains("`bogus`") && err.contains("column 16"),
            "{err}"
        );
        let err = error("ttl > abc");
        assert!(err.contains("`abc`") && err.contains("column 7"), "{err}");
        let err = error("success = maybe");
        assert!(err.contains("`maybe`"), "{err}");
        let err = error("ttl 64");
        assert!(err.contains("`64`") && err.contains("column 5"), "{err}");
        let err = error("(ttl = 64");
        assert!(err.contains("end of filter"), "{err}");
        let err = error("ttl = 64)");
        assert!(err.contains("`)`") && err.contains("column 9"), "{err}");
        let err = error("ttl = 64 # x");
        assert!(err.contains("`#`") && err.contains("column 10"), "{err}");
        let err = error("classification < rst");
        assert!(err.contains("`<`") && err.contains("column 16"), "{err}");
        let err = error("classification = 'rst");
        assert!(
            err.contains("unterminated") && err.contains("column 18"),
            "{err}"
        );
        let err = error("ttl = ");
        assert!(err.contains("end of filter"), "{err}");
        assert!(error("").contains("end of filter"));
        assert!(error("&& ttl = 1").contains("`&&`"));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = format!("{}ttl = 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(error(&deep).contains("nest"));
        let ok = format!("{}ttl = 64{}", "(".repeat(30), ")".repeat(30));
        assert!(accepts(&ok, &Reply::example()));
    }
}
