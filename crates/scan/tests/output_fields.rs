//! Field selection (`-f`).

mod output_fields {
    use sonde_scan::output::{select_fields, DEFAULT_FIELDS};
    use sonde_scan::probe::ModuleKind;
    use sonde_scan::FIELDS;

    const TCP: ModuleKind = ModuleKind::TcpSyn;

    fn names(spec: Option<&str>) -> Vec<&'static str> {
        names_for(spec, TCP)
    }

    fn names_for(spec: Option<&str>, module: ModuleKind) -> Vec<&'static str> {
        select_fields(spec, module)
            .unwrap()
            .iter()
            .map(|f| f.name)
            .collect()
    }

    #[test]
    fn default_is_the_zmap_like_set() {
        assert_eq!(names(None), DEFAULT_FIELDS);
        assert_eq!(names(None).first(), Some(&"saddr"));
        assert_eq!(names(None).last(), Some(&"timestamp"));
    }

    #[test]
    fn default_is_the_module_s_set() {
        for module in ModuleKind::ALL {
            assert_eq!(names_for(None, module), module.default_fields(), "{module}");
            assert_eq!(names_for(None, module).first(), Some(&"saddr"));
        }
        assert_eq!(
            names_for(None, ModuleKind::IcmpEcho),
            [
                "saddr",
                "daddr",
                "classification",
                "success",
                "repeat",
                "ttl",
                "ipid",
                "icmp_type",
                "icmp_code",
                "rtt_us",
                "timestamp"
            ]
        );
        let dns = names_for(None, ModuleKind::Dns);
        for name in ["udp_len", "dns_rcode", "dns_answers", "fragmented"] {
            assert!(dns.contains(&name), "{name}");
        }
        assert!(!dns.contains(&"tcp_mss") && !dns.contains(&"window"));
        // An explicit list is the same whatever the module.
        assert_eq!(
            names_for(Some("saddr,ttl"), ModuleKind::Dns),
            ["saddr", "ttl"]
        );
    }

    #[test]
    fn star_is_every_field_in_order() {
        let all: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        assert_eq!(names(Some("*")), all);
        assert_eq!(names(Some(" * ")), all);
    }

    #[test]
    fn list_is_trimmed_and_kept_in_order() {
        assert_eq!(
            names(Some("success, saddr ,sport")),
            ["success", "saddr", "sport"]
        );
    }

    #[test]
    fn unknown_name_is_named_with_the_known_ones() {
        let err = select_fields(Some("saddr,bogus"), TCP)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`bogus`"), "{err}");
        assert!(err.contains("saddr, sport, daddr"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn empty_and_repeated_names_are_refused() {
        assert!(select_fields(Some(""), TCP).is_err());
        assert!(select_fields(Some("saddr,,sport"), TCP).is_err());
        let err = select_fields(Some("saddr,saddr"), TCP)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`saddr`"), "{err}");
    }
}
