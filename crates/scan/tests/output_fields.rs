//! Field selection (`-f`).

mod output_fields {
    use sonde_scan::output::{select_fields, DEFAULT_FIELDS};
    use sonde_scan::FIELDS;

    fn names(spec: Option<&str>) -> Vec<&'static str> {
        select_fields(spec)
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
        let err = select_fields(Some("saddr,bogus")).unwrap_err().to_string();
        assert!(err.contains("`bogus`"), "{err}");
        assert!(err.contains("saddr, sport, daddr"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn empty_and_repeated_names_are_refused() {
        assert!(select_fields(Some("")).is_err());
        assert!(select_fields(Some("saddr,,sport")).is_err());
        let err = select_fields(Some("saddr,saddr")).unwrap_err().to_string();
        assert!(err.contains("`saddr`"), "{err}");
    }
}
