//! The parquet writer, read back with parquet's own reader.

mod output_parquet {
    use std::fs::{self, File};
    use std::path::{Path, PathBuf};
    use std::time::{SystemTime, UNIX_EPOCH};

    use parquet::basic::{ConvertedType, LogicalType, Repetition, TimeUnit, Type as PhysicalType};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::format::MicroSeconds;
    use parquet::record::Field as Cell;
    use sonde_scan::output::{
        open_writer, open_writer_with_metadata, select_fields, OpenMode, OutputFormat, Row,
        RunMetadata, ROW_GROUP_ROWS,
    };
    use sonde_scan::probe::ModuleKind;
    use sonde_scan::reply::Value;
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
        let std::net::IpAddr::V4(v4) = r.saddr else {
            unreachable!("row() makes IPv4 addresses")
        };
        let mut mapped = [0u8; 16];
        mapped[10..12].copy_from_slice(&[0xff, 0xff]);
        mapped[12..].copy_from_slice(&v4.octets());
        vec![
            Cell::Str(r.saddr.to_string()),
            Cell::Bytes(mapped.to_vec().into()),
            Cell::UShort(r.sport),
            Cell::Bool(r.success),
            r.tcp_ts.map_or(Cell::Null, Cell::UInt),
            Cell::Str(r.classification.to_string()),
            Cell::TimestampMicros(r.timestamp_us as i64),
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
                ("saddr_bytes", PhysicalType::FIXED_LEN_BYTE_ARRAY),
                ("sport", PhysicalType::INT32),
                ("success", PhysicalType::BOOLEAN),
                ("tcp_ts", PhysicalType::INT32),
                ("classification", PhysicalType::BYTE_ARRAY),
                ("timestamp", PhysicalType::INT64),
            ]
        );
        for column in schema.columns() {
            let info = column.self_type().get_basic_info();
            assert_eq!(info.repetition(), Repetition::OPTIONAL, "{}", column.name());
        }
        let unsigned = |bits| {
            Some(LogicalType::Integer {
                bit_width: bits,
                is_signed: false,
            })
        };
        let logical: Vec<Option<LogicalType>> =
            schema.columns().iter().map(|c| c.logical_type()).collect();
        assert_eq!(
            logical,
            [
                Some(LogicalType::String),
                None,
                unsigned(16),
                None,
                unsigned(32),
                Some(LogicalType::String),
                Some(LogicalType::Timestamp {
                    is_adjusted_to_u_t_c: true,
                    unit: TimeUnit::MICROS(MicroSeconds {}),
                }),
            ]
        );
        assert_eq!(schema.column(1).type_length(), 16);
        // Readers that know only the legacy annotations (older Spark, Hive) see them too.
        assert_eq!(schema.column(2).converted_type(), ConvertedType::UINT_16);
        assert_eq!(
            schema.column(6).converted_type(),
            ConvertedType::TIMESTAMP_MICROS
        );
    }

    /// The narrow types at their bounds, an IPv6 address, and a value too large for its column.
    #[test]
    fn narrow_columns_hold_their_whole_range_and_refuse_more() {
        let file = TempFile::new("bounds");
        let fields = select_fields(Some("saddr,ttl,window,tcp_ts"), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer(OutputFormat::Parquet, Some(file.path()), fields).unwrap();
        let widest = Reply {
            saddr: "2001:2::ff".parse().unwrap(),
            ttl: u8::MAX,
            window: u16::MAX,
            tcp_ts: Some(u32::MAX),
            ..Reply::example()
        };
        writer.write(&widest).unwrap();
        writer.finish().unwrap();
        let got = file.reader().get_row_iter(None).unwrap().next().unwrap();
        let cells: Vec<Cell> = got
            .unwrap()
            .get_column_iter()
            .map(|(_, c)| c.clone())
            .collect();
        let six: std::net::Ipv6Addr = "2001:2::ff".parse().unwrap();
        assert_eq!(
            cells,
            [
                Cell::Str("2001:2::ff".into()),
                Cell::Bytes(six.octets().to_vec().into()),
                Cell::UByte(u8::MAX),
                Cell::UShort(u16::MAX),
                Cell::UInt(u32::MAX),
            ]
        );

        /// A row (as an app or another tool could make) whose TTL does not fit 8 bits.
        struct TooWide;
        impl Row for TooWide {
            fn get(&self, name: &str) -> Value {
                match name {
                    "saddr" => Value::Str("198.18.0.1".into()),
                    "ttl" => Value::Int(256),
                    _ => Value::Null,
                }
            }
        }
        let refused = TempFile::new("too-wide");
        let fields = select_fields(Some("saddr,ttl"), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer(OutputFormat::Parquet, Some(refused.path()), fields).unwrap();
        let err = writer.write(&TooWide).unwrap_err().to_string();
        assert!(err.contains("ttl = 256"), "{err}");
    }

    #[test]
    fn run_metadata_is_kept_in_the_footer() {
        let file = TempFile::new("meta");
        let meta = RunMetadata {
            command_line: vec!["sonde".into(), "scan".into(), "--seed".into(), "9".into()],
            seed: 9,
            shard: (1, 4),
            version: "0.1.0".into(),
            start_time_us: 1_795_000_000_000_000,
        };
        let fields = select_fields(Some(SPEC), ModuleKind::TcpSyn).unwrap();
        let mut writer = open_writer_with_metadata(
            OutputFormat::Parquet,
            Some(file.path()),
            fields,
            OpenMode::Create,
            &meta.key_values(),
        )
        .unwrap();
        writer.write(&row(1)).unwrap();
        writer.finish().unwrap();
        let reader = file.reader();
        let stored: Vec<(String, Option<String>)> = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .expect("no key-value metadata")
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect();
        let wanted: Vec<(String, Option<String>)> = meta
            .key_values()
            .into_iter()
            .map(|(k, v)| (k, Some(v)))
            .collect();
        assert_eq!(stored, wanted);
        assert!(stored.contains(&("sonde.shard".into(), Some("1".into()))));
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
