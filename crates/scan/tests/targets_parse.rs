//! Parsing targets, target files and ports: accepted forms and one-line errors naming the token.

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::net::Ipv6Addr;
    use std::path::PathBuf;

    use sonde_scan::targets::{parse_ports, parse_targets, read_target_file};

    fn ip(text: &str) -> u32 {
        text.parse::<std::net::Ipv4Addr>().unwrap().into()
    }

    fn error_of(tokens: &[&str]) -> String {
        format!("{:#}", parse_targets(tokens).unwrap_err())
    }

    /// A file under the system temp directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("sonde-targets-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            Self(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn prefixes_ranges_and_addresses() {
        let spec = parse_targets(&[
            "198.18.0.0/24",
            "198.18.1.0-198.18.1.9",
            "198.18.0.77",   // inside the /24
            "198.18.1.10",   // touches the range: merged
            "198.19.7.1/31", // host bits ignored: 198.19.7.0/31
            "2001:db8::1",
            "2001:db8::/127",
        ])
        .unwrap();
        assert_eq!(
            spec.ipv4_intervals(),
            &[
                (ip("198.18.0.0"), ip("198.18.1.10")),
                (ip("198.19.7.0"), ip("198.19.7.1"))
            ]
        );
        let v6: Vec<Ipv6Addr> = spec.ipv6_addrs().collect();
        assert_eq!(
            v6,
            vec![
                "2001:db8::".parse::<Ipv6Addr>().unwrap(),
                "2001:db8::1".parse().unwrap()
            ]
        );
        assert_eq!(spec.address_count(), 256 + 11 + 2 + 2);
    }

    #[test]
    fn ipv6_prefixes_up_to_a_slash_112_expand() {
        let spec = parse_targets(&["2001:db8::/112"]).unwrap();
        assert_eq!(spec.address_count(), 65_536);
        let spec = parse_targets(&["0.0.0.0/0"]).unwrap();
        assert_eq!(spec.address_count(), 1 << 32);
    }

    #[test]
    fn bad_prefix_length_names_token() {
        assert_eq!(
            error_of(&["198.18.0.0/16", "198.18.0.0/33"]),
            r#"invalid target "198.18.0.0/33": prefix length must be from 0 to 32"#
        );
        assert_eq!(
            error_of(&["2001:db8::/129"]),
            r#"invalid target "2001:db8::/129": prefix length must be from 0 to 128"#
        );
        assert!(error_of(&["198.18.0.0/"])
            .starts_with(r#"invalid target "198.18.0.0/": prefix length"#));
        assert!(error_of(&["198.18.0.0/x"])
            .starts_with(r#"invalid target "198.18.0.0/x": prefix length"#));
    }

    #[test]
    fn other_bad_tokens_name_token() {
        for token in [
            "198.18.0.300",
            "example.org",
            "198.18.0/16",
            "198.18.0.50-198.18.0.1",
            "198.18.0.1-",
            "2001:db8::1-2001:db8::5",
            "",
        ] {
            let message = error_of(&[token]);
            assert!(
                message.starts_with(&format!("invalid target {token:?}: ")),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        assert!(error_of(&["198.18.0.50-198.18.0.1"]).contains("after its end"));
        assert!(error_of(&["::1-::5"]).contains("IPv4 only"));
    }

    #[test]
    fn wide_ipv6_prefix_asks_for_a_hit_list() {
        let message = error_of(&["2001:db8::/111"]);
        assert!(
            message.starts_with(r#"invalid target "2001:db8::/111": "#),
            "{message}"
        );
        assert!(message.contains("hit-list file"), "{message}");
        assert!(error_of(&["::/0"]).contains("hit-list"));
    }

    #[test]
    fn no_targets_is_an_error() {
        let none: [&str; 0] = [];
        assert_eq!(
            format!("{}", parse_targets(&none).unwrap_err()),
            "no targets given"
        );
    }

    #[test]
    fn target_file_comments_blanks_and_errors() {
        let file = TempFile::new(
            "list",
            "# hit list\n198.18.0.0/30\n\n  198.18.0.9  # trailing comment\n2001:db8::1\n",
        );
        let tokens = read_target_file(&file.0).unwrap();
        assert_eq!(tokens, vec!["198.18.0.0/30", "198.18.0.9", "2001:db8::1"]);
        let spec = parse_targets(&tokens).unwrap();
        assert_eq!(spec.address_count(), 6);

        let bad = TempFile::new("bad", "198.18.0.0/30\n# fine\n198.18.0.0/40\n");
        let message = format!("{:#}", read_target_file(&bad.0).unwrap_err());
        let expected = format!(
            r#"{}:3: invalid target "198.18.0.0/40": prefix length must be from 0 to 32"#,
            bad.0.display()
        );
        assert_eq!(message, expected);

        let two = TempFile::new("two", "198.18.0.1 198.18.0.2\n");
        let message = format!("{:#}", read_target_file(&two.0).unwrap_err());
        assert!(
            message.starts_with(&format!("{}:1: ", two.0.display())),
            "{message}"
        );

        let missing = std::env::temp_dir().join("sonde-targets-does-not-exist");
        let message = format!("{:#}", read_target_file(&missing).unwrap_err());
        assert!(
            message.contains("sonde-targets-does-not-exist"),
            "{message}"
        );
    }

    #[test]
    fn ports_sorted_and_deduplicated() {
        let ports = parse_ports("80,443,8000-8100").unwrap();
        assert_eq!(ports.len(), 2 + 101);
        assert_eq!(&ports[..3], &[80, 443, 8000]);
        assert_eq!(*ports.last().unwrap(), 8100);
        assert_eq!(
            parse_ports(" 443, 80,80,79-81 ").unwrap(),
            vec![79, 80, 81, 443]
        );
        assert_eq!(parse_ports("0-65535").unwrap().len(), 65_536);
        assert_eq!(parse_ports("7-7").unwrap(), vec![7]);
    }

    #[test]
    fn port_errors_name_token() {
        let error = |text: &str| format!("{:#}", parse_ports(text).unwrap_err());
        assert!(error("80,70000").starts_with(r#"invalid port "70000""#));
        assert!(error("90-80").starts_with(r#"invalid port range "90-80""#));
        assert!(error("80-70000").starts_with(r#"invalid port range "80-70000""#));
        assert!(error("http").starts_with(r#"invalid port "http""#));
        assert!(error("+80").starts_with(r#"invalid port "+80""#));
        assert!(error("80,,443").starts_with(r#"invalid port """#));
        assert_eq!(error(""), "no ports given");
    }
}

#[test]
fn target_lists_carry_ports_from_addr_port_lines_and_scan_csv() {
    use sonde_scan::targets::read_target_list;
    let dir = std::env::temp_dir().join(format!("sonde-list-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("pairs.txt");
    std::fs::write(
        &plain,
        "# hits\n198.18.0.1:80\n[2001:2::1]:443\n198.18.1.0/30\n",
    )
    .unwrap();
    let list = read_target_list(&plain).unwrap();
    assert_eq!(list.tokens, ["198.18.0.1", "2001:2::1", "198.18.1.0/30"]);
    assert_eq!(list.ports, [80, 443]);
    let scan = dir.join("scan.csv");
    std::fs::write(
        &scan,
        "saddr,sport,classification\n198.18.0.7,80,synack\n198.18.0.9,80,synack\n",
    )
    .unwrap();
    let list = read_target_list(&scan).unwrap();
    assert_eq!((list.tokens.len(), list.ports.as_slice()), (2, &[80][..]));
    // A grab's rows name the target's port sport too (dport is ours), in csv and ndjson.
    let grab = dir.join("grab.csv");
    std::fs::write(
        &grab,
        "saddr,sport,name,dport,status\n198.18.0.7,443,,61000,success\n",
    )
    .unwrap();
    let list = read_target_list(&grab).unwrap();
    assert_eq!(
        (list.tokens, list.ports),
        (vec!["198.18.0.7".to_string()], vec![443])
    );
    let rows = dir.join("grab.ndjson");
    std::fs::write(
        &rows,
        "{\"saddr\":\"198.18.0.7\",\"sport\":443,\"dport\":61000}\n\n\
         {\"saddr\":\"2001:2::1\",\"sport\":22,\"status\":\"success\"}\n",
    )
    .unwrap();
    let list = read_target_list(&rows).unwrap();
    assert_eq!(list.tokens, ["198.18.0.7", "2001:2::1"]);
    assert_eq!(list.ports, [22, 443]);
    std::fs::write(&rows, "{\"saddr\":\"198.18.0.7\"}\n{\"sport\":80}\n").unwrap();
    let err = read_target_list(&rows).unwrap_err().to_string();
    assert!(err.contains(":2:") && err.contains("saddr"), "{err}");
    std::fs::write(&plain, "198.18.0.1:99999\n").unwrap();
    let err = read_target_list(&plain).unwrap_err().to_string();
    assert!(err.contains(":1:") && err.contains("99999"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn target_lists_carry_names_and_a_bad_named_line_is_one_line_with_its_number() {
    use sonde_scan::targets::{read_target_list, NamedTarget};
    let dir = std::env::temp_dir().join(format!("sonde-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("names.txt");
    std::fs::write(
        &file,
        "198.18.0.1:443,a.sonde.test\n198.18.0.1:443,b.sonde.test\n2001:2::1,v6.sonde.test\n198.18.0.2\n",
    )
    .unwrap();
    let list = read_target_list(&file).unwrap();
    assert_eq!(
        list.tokens,
        ["198.18.0.1", "198.18.0.1", "2001:2::1", "198.18.0.2"]
    );
    assert_eq!(list.ports, [443]);
    let named = |addr: &str, port, name: &str| NamedTarget {
        addr: addr.parse().unwrap(),
        port,
        name: name.to_string(),
    };
    assert_eq!(
        list.names,
        [
            named("198.18.0.1", Some(443), "a.sonde.test"),
            named("198.18.0.1", Some(443), "b.sonde.test"),
            named("2001:2::1", None, "v6.sonde.test"),
        ]
    );
    for (bad, why) in [
        ("198.18.0.1,", "empty"),
        ("198.18.0.0/24,a.test", "one address"),
        ("198.18.0.1:80,bad/name", "letters"),
        ("198.18.0.1:99999,a.test", "99999"),
        ("198.18.0.1,a,b", "letters"),
    ] {
        std::fs::write(&file, format!("198.18.0.5\n{bad}\n")).unwrap();
        let err = format!("{:#}", read_target_list(&file).unwrap_err());
        assert!(
            err.contains("names.txt:2:") && err.contains(why),
            "{bad}: {err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
