//! The parquet writer, read back with parquet's own reader.

mod output_parquet {
    use std::fs::{self, File};
    use std::path::{Path, PathBuf};
    use std::time::{SystemTime, UNIX_EPOCH};

    use parquet::basic::{LogicalType, Repetition, Type as PhysicalType};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field as Cell;
    use sonde_scan::output::{open_writer, select_fields, OutputFormat, ROW_GROUP_ROWS};
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
            let name = format!("sonde-output-{tag}-{}-{nanos}.parquet", std::process::id());
            TempFile(std::env::temp_dir().join(name))
        }

        fn path(&self) -> &Path {
            &self.0
        }

        fn reader(&self) -> SerializedFileReader<File> {
            SerializedFileReader::new(File::open(&self.0).unwrap()).unwrap()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }

    const SPEC: &str = "saddr,sport,success,tcp_ts,classification,timestamp";
    const ROWS: u32 = 100_000;

    /// Row `i`: varied values, with `tcp_ts` Null on every eighth row.
    fn row(i: u32) -> Reply {
        let [_, b, c, d] = i.to_be_bytes();
        Reply {
            saddr: format!("10.{b}.{c}.{d}").parse().unwrap(),
            sport: (i % 65_536) as u16,
            success: i & 3 != 0,
            tcp_ts: (i & 7 != 0).then_some(i),
            classification: ["synack", "rst"][(i & 1) as usize],
            timestamp_us: 1_795_000_000_000_000 + u64::from(i),
            ..Reply::example()
        }
    }

    /// The cells row `i` should read back as.
    fn expected(i: u32) -> Vec<Cell> {
        let r = row(i);
        vec![
            Cell::Str(r.saddr.to_string()),
            Cell::Long(r.sport.into()),
            Cell::Bool(r.success),
            r.tcp_ts.map_or(Cell::Null, |ts| Cell::Long(ts.into())),
            Cell::Str(r.classification.to_string()),
            Cell::Long(r.timestamp_us as i64),
        ]
    }

    #[test]
    fn hundred_thousand_rows_read_back() {
        let file = TempFile::new("100k");
        let fields = select_fields(Some(SPEC), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer(OutputFormat::Parquet, Some(file.path()), fields).unwrap();
        for i in 0..ROWS {
            writer.write(&row(i)).unwrap();
        }
        writer.finish().unwrap();

        let reader = file.reader();
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), i64::from(ROWS));
        let groups: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
        let full = ROW_GROUP_ROWS as i64;
        assert_eq!(groups, [full, i64::from(ROWS) - full]);

        let mut count = 0;
        for (i, got) in reader.get_row_iter(None).unwrap().enumerate() {
            let cells: Vec<Cell> = got
                .unwrap()
                .get_column_iter()
                .map(|(_, c)| c.clone())
                .collect();
            assert_eq!(cells, expected(i as u32), "row {i}");
            count += 1;
        }
        assert_eq!(count, ROWS);
    }

    #[test]
    fn schema_has_typed_optional_columns() {
        let file = TempFile::new("schema");
        let fields = select_fields(Some(SPEC), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer(OutputFormat::Parquet, Some(file.path()), fields).unwrap();
        writer.write(&row(1)).unwrap();
        writer.finish().unwrap();

        let reader = file.reader();
        let schema = reader.metadata().file_metadata().schema_descr();
        let columns: Vec<(&str, PhysicalType)> = schema
            .columns()
            .iter()
            .map(|c| (c.name(), c.physical_type()))
            .collect();
        assert_eq!(
            columns,
            [
                ("saddr", PhysicalType::BYTE_ARRAY),
                ("sport", PhysicalType::INT64),
                ("success", PhysicalType::BOOLEAN),
                ("tcp_ts", PhysicalType::INT64),
                ("classification", PhysicalType::BYTE_ARRAY),
                ("timestamp", PhysicalType::INT64),
            ]
        );
        for column in schema.columns() {
            let info = column.self_type().get_basic_info();
            assert_eq!(info.repetition(), Repetition::OPTIONAL, "{}", column.name());
        }
        assert_eq!(schema.column(0).logical_type(), Some(LogicalType::String));
    }

    #[test]
    fn empty_file_and_flushed_groups_are_valid() {
        let empty = TempFile::new("empty");
        let fields = || select_fields(Some(SPEC), ModuleKind::TcpSyn).unwrap();
        open_writer(OutputFormat::Parquet, Some(empty.path()), fields())
            .unwrap()
            .finish()
            .unwrap();
        assert_eq!(empty.reader().metadata().file_metadata().num_rows(), 0);

        let flushed = TempFile::new("flushed");
        let mut writer =
            open_writer(OutputFormat::Parquet, Some(flushed.path()), fields()).unwrap();
        writer.write(&row(1)).unwrap();
        writer.flush_rows().unwrap();
        writer.flush_rows().unwrap(); // nothing pending: no empty row group
        writer.write(&row(2)).unwrap();
        writer.finish().unwrap();
        let reader = flushed.reader();
        assert_eq!(reader.metadata().num_row_groups(), 2);
        let rows: Vec<_> = reader
            .get_row_iter(None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 2);
    }
}
