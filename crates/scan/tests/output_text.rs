//! csv and ndjson writers, formats, and `open_writer` argument checks.

mod output_text {
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::time::{SystemTime, UNIX_EPOCH};

    use sonde_scan::output::{open_writer, select_fields, OutputFormat};
    use sonde_scan::probe::ModuleKind;
    use sonde_scan::Reply;

    /// A unique temp file, removed when dropped (also when a test fails).
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(tag: &str) -> Self {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let name = format!("sonde-output-{tag}-{}-{nanos}", std::process::id());
            TempFile(std::env::temp_dir().join(name))
        }

        fn path(&self) -> &Path {
            &self.0
        }

        fn text(&self) -> String {
            fs::read_to_string(&self.0).unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }

    const SPEC: &str = "saddr,sport,success,tcp_ts,classification";

    fn second_row() -> Reply {
        Reply {
            saddr: "2001:db8::1".parse().unwrap(),
            sport: 443,
            success: false,
            tcp_ts: Some(12345),
            classification: "rst, \"odd\"",
            ..Reply::example()
        }
    }

    /// Writes the example row and `second_row` as `format` and returns the file's text.
    fn write_two(format: OutputFormat, tag: &str) -> String {
        let file = TempFile::new(tag);
        let fields = select_fields(Some(SPEC), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer(format, Some(file.path()), fields).unwrap();
        writer.write(&Reply::example()).unwrap();
        writer.write(&second_row()).unwrap();
        writer.finish().unwrap();
        file.text()
    }

    #[test]
    fn csv_bytes_exactly() {
        let text = write_two(OutputFormat::Csv, "two.csv");
        let want = "saddr,sport,success,tcp_ts,classification\n\
                    198.18.0.7,80,1,,synack\n\
                    2001:db8::1,443,0,12345,\"rst, \"\"odd\"\"\"\n";
        assert_eq!(text, want);
    }

    #[test]
    fn ndjson_round_trips_typed() {
        let text = write_two(OutputFormat::Ndjson, "two.ndjson");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("{\"saddr\":"),
            "keys keep selection order: {}",
            lines[0]
        );
        let rows: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            rows[0],
            serde_json::json!({
                "saddr": "198.18.0.7", "sport": 80, "success": true,
                "tcp_ts": null, "classification": "synack"
            })
        );
        assert_eq!(
            rows[1],
            serde_json::json!({
                "saddr": "2001:db8::1", "sport": 443, "success": false,
                "tcp_ts": 12345, "classification": "rst, \"odd\""
            })
        );
    }

    #[test]
    fn flush_rows_makes_whole_rows_visible() {
        for format in [OutputFormat::Csv, OutputFormat::Ndjson] {
            let file = TempFile::new(&format!("flush.{format}"));
            let fields = select_fields(None, ModuleKind::TcpSyn).unwrap();
            let mut writer = open_writer(format, Some(file.path()), fields).unwrap();
            for _ in 0..1000 {
                writer.write(&Reply::example()).unwrap();
            }
            writer.flush_rows().unwrap();
            let text = file.text();
            let header = usize::from(format == OutputFormat::Csv);
            assert!(text.ends_with('\n'), "{format}");
            assert_eq!(text.lines().count(), 1000 + header, "{format}");
            writer.finish().unwrap();
        }
    }

    #[test]
    fn empty_csv_still_has_its_header() {
        let file = TempFile::new("empty.csv");
        let fields = select_fields(Some("saddr,ttl"), ModuleKind::TcpSyn).unwrap();
        open_writer(OutputFormat::Csv, Some(file.path()), fields)
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(file.text(), "saddr,ttl\n");
    }

    #[test]
    fn format_names() {
        assert_eq!("csv".parse::<OutputFormat>().unwrap(), OutputFormat::Csv);
        assert_eq!(
            "json".parse::<OutputFormat>().unwrap(),
            OutputFormat::Ndjson
        );
        assert_eq!(
            "NDJSON".parse::<OutputFormat>().unwrap(),
            OutputFormat::Ndjson
        );
        assert_eq!(
            "parquet".parse::<OutputFormat>().unwrap(),
            OutputFormat::Parquet
        );
        let err = "xml".parse::<OutputFormat>().unwrap_err().to_string();
        assert!(
            err.contains("`xml`") && err.contains("csv, ndjson"),
            "{err}"
        );
        assert!(err.contains("parquet"), "{err}");
    }

    #[test]
    fn parquet_needs_a_file() {
        let fields = || select_fields(None, ModuleKind::TcpSyn).unwrap();
        let err = open_writer(OutputFormat::Parquet, None, fields())
            .err()
            .unwrap();
        assert!(err.to_string().contains("parquet"), "{err}");
        let dash = Some(Path::new("-"));
        assert!(open_writer(OutputFormat::Parquet, dash, fields()).is_err());
    }

    #[test]
    fn malformed_selections_are_refused() {
        let file = TempFile::new("bad.csv");
        let no_fields = open_writer(OutputFormat::Csv, Some(file.path()), Vec::new());
        assert!(no_fields.is_err());
        let saddr = select_fields(Some("saddr"), ModuleKind::TcpSyn).unwrap()[0];
        let twice = open_writer(OutputFormat::Csv, Some(file.path()), vec![saddr, saddr]);
        assert!(twice.err().unwrap().to_string().contains("`saddr`"));
    }
}
