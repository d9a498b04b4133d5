//! Parquet output through parquet's low-level writer (no arrow): one OPTIONAL column per field,
//! so Null is representable, typed so that DuckDB, Spark and pandas read it as it is:
//! - ports, TTLs and the other small counts as INT32 annotated UINT_8 / UINT_16 / UINT_32
//!   (DuckDB: UTINYINT, USMALLINT, UINTEGER; Spark widens each to the next signed type);
//! - other integers as plain INT64 (`rtt_us`: the unit is in the name);
//! - times as TIMESTAMP(MICROS, UTC);
//! - an address as its text (`saddr`) and, beside it, as 16 bytes in network order
//!   (`saddr_bytes`, FIXED_LEN_BYTE_ARRAY(16); IPv4 as ::ffff:a.b.c.d). One type serves both
//!   families, and the bytes compare and sort in address order, which the text does not
//!   (198.18.0.10 < 198.18.0.9), so DuckDB and Spark can group, join, sort and range-select on it
//!   with no extension. A v4-only UINT32 would leave IPv6 rows without one;
//! - a map of text (`http_headers`) as MAP<STRING, STRING>, and a list of records (`tls_chain`)
//!   as a LIST of structs, so `http_headers['server']` and `tls_chain[1].subject` read without
//!   parsing JSON. Their leaves carry repetition levels as well as definition levels.
//!
//! The file carries key-value metadata given at opening (the command line, seed, shard, version,
//! start time: see [`super::RunMetadata`]). Rows are buffered column-wise and written as a row
//! group every [`ROW_GROUP_ROWS`] rows, which bounds memory. The file is readable only after
//! `finish` writes the footer.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use parquet::basic::{Compression, LogicalType, Repetition, TimeUnit, Type as PhysicalType};
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DataType, FixedLenByteArray, FixedLenByteArrayType,
    Int32Type, Int64Type,
};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::format::MicroSeconds;
use parquet::schema::types::Type;
use serde_json::Value as Json;

use super::Row;
use super::{open_file, OpenMode, RowWriter, ROW_GROUP_ROWS};
use crate::reply::{Field, FieldType, Value};

/// The suffix of the 16-byte column written beside each address column.
pub const ADDR_BYTES_SUFFIX: &str = "_bytes";

/// The two leaves of a map column: its keys and its values.
const MAP_ENTRY: &[Field] = &[
    Field {
        name: "key",
        kind: FieldType::Str,
        help: "",
    },
    Field {
        name: "value",
        kind: FieldType::Str,
        help: "",
    },
];

/// Parquet's writer wraps the file in its own `BufWriter` and flushes it at the end of every
/// column chunk, so a closed row group has reached the OS; no buffer of ours is needed.
type FileWriter = SerializedFileWriter<std::fs::File>;

pub(super) struct ParquetWriter {
    file: FileWriter,
    columns: Vec<Column>,
    /// Rows buffered in `columns` and not yet written as a row group.
    pending: usize,
}

impl ParquetWriter {
    pub(super) fn create(
        path: &Path,
        fields: Vec<&'static Field>,
        mode: OpenMode,
        metadata: &[(String, String)],
    ) -> Result<Self> {
        let schema = schema(&fields)?;
        let key_values = metadata
            .iter()
            .map(|(key, value)| KeyValue::new(key.clone(), value.clone()))
            .collect::<Vec<_>>();
        let props = WriterProperties::builder()
            // Snappy: cheap to write at line rate and read by every Parquet consumer.
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_size(ROW_GROUP_ROWS)
            .set_key_value_metadata((!key_values.is_empty()).then_some(key_values))
            .build();
        let file = SerializedFileWriter::new(open_file(path, mode)?, schema, Arc::new(props))
            .with_context(|| format!("cannot start parquet file {}", path.display()))?;
        let columns = fields.into_iter().map(Column::new).collect();
        Ok(ParquetWriter {
            file,
            columns,
            pending: 0,
        })
    }

    /// Writes the buffered rows as one row group and empties the buffers.
    fn write_row_group(&mut self) -> Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut group = self.file.next_row_group()?;
        for column in &mut self.columns {
            column.write_to(&mut group)?;
        }
        group.close()?;
        self.pending = 0;
        Ok(())
    }
}

impl RowWriter for ParquetWriter {
    fn write(&mut self, r: &dyn Row) -> Result<()> {
        // Convert every cell before buffering any, so a bad value cannot leave the columns
        // with different lengths.
        let cells = self
            .columns
            .iter()
            .map(|c| Cell::convert(c.field, r.get(c.field.name)))
            .collect::<Result<Vec<_>>>()?;
        for (column, cell) in self.columns.iter_mut().zip(cells) {
            column.push(cell);
        }
        self.pending += 1;
        if self.pending >= ROW_GROUP_ROWS {
            self.write_row_group()?;
        }
        Ok(())
    }

    /// Writes the buffered rows as a (possibly short) row group. The file still needs
    /// `finish` to become readable.
    fn flush_rows(&mut self) -> Result<()> {
        self.write_row_group()
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.write_row_group()?;
        self.file.close().context("cannot write parquet footer")?;
        Ok(())
    }
}

/// The message type: the selected fields, in order (an address field as two columns).
fn schema(fields: &[&'static Field]) -> Result<Arc<Type>> {
    let mut columns = Vec::with_capacity(fields.len() + 2);
    for field in fields {
        columns.push(Arc::new(column_type(field)?));
        if field.kind == FieldType::Addr {
            let name = format!("{}{ADDR_BYTES_SUFFIX}", field.name);
            let bytes = Type::primitive_type_builder(&name, PhysicalType::FIXED_LEN_BYTE_ARRAY)
                .with_repetition(Repetition::OPTIONAL)
                .with_length(16)
                .build()?;
            columns.push(Arc::new(bytes));
        }
    }
    Ok(Arc::new(
        Type::group_type_builder("sonde_scan")
            .with_fields(columns)
            .build()?,
    ))
}

/// A field's column: a primitive, or for a map or a list of records its group (see
/// [`nested_type`]).
fn column_type(field: &Field) -> Result<Type> {
    match field.kind {
        FieldType::Map | FieldType::Records(_) => nested_type(field),
        _ => primitive_type(field, Repetition::OPTIONAL),
    }
}

/// The group of a nested field, as the parquet format's MAP and LIST conventions lay them out:
///
/// ```text
/// optional group http_headers (MAP) {      optional group tls_chain (LIST) {
///   repeated group key_value {               repeated group list {
///     required binary key (STRING);            required group element {
///     optional binary value (STRING);            optional binary subject (STRING); …
///   }                                          }
/// }                                          }
///                                          }
/// ```
fn nested_type(field: &Field) -> Result<Type> {
    let leaf = |member: &Field, repetition| primitive_type(member, repetition).map(Arc::new);
    let entries = match field.kind {
        FieldType::Map => Type::group_type_builder("key_value")
            .with_repetition(Repetition::REPEATED)
            .with_fields(vec![
                leaf(&MAP_ENTRY[0], Repetition::REQUIRED)?,
                leaf(&MAP_ENTRY[1], Repetition::OPTIONAL)?,
            ])
            .build()?,
        FieldType::Records(members) => {
            let element = Type::group_type_builder("element")
                .with_repetition(Repetition::REQUIRED)
                .with_fields(
                    members
                        .iter()
                        .map(|m| leaf(m, Repetition::OPTIONAL))
                        .collect::<Result<_>>()?,
                )
                .build()?;
            Type::group_type_builder("list")
                .with_repetition(Repetition::REPEATED)
                .with_fields(vec![Arc::new(element)])
                .build()?
        }
        kind => bail!("field {} is {kind:?}, not nested", field.name),
    };
    let logical = match field.kind {
        FieldType::Map => LogicalType::Map,
        _ => LogicalType::List,
    };
    Ok(Type::group_type_builder(field.name)
        .with_repetition(Repetition::OPTIONAL)
        .with_logical_type(Some(logical))
        .with_fields(vec![Arc::new(entries)])
        .build()?)
}

/// Wide integers are plain signed INT64 rather than UINT_64, which Spark reads only as a
/// decimal; every value fits (microsecond times, byte counts).
fn primitive_type(field: &Field, repetition: Repetition) -> Result<Type> {
    let unsigned = |bits| LogicalType::Integer {
        bit_width: bits,
        is_signed: false,
    };
    let (physical, logical) = match field.kind {
        FieldType::Bool => (PhysicalType::BOOLEAN, None),
        FieldType::Int => (PhysicalType::INT64, None),
        FieldType::U8 => (PhysicalType::INT32, Some(unsigned(8))),
        FieldType::U16 => (PhysicalType::INT32, Some(unsigned(16))),
        FieldType::U32 => (PhysicalType::INT32, Some(unsigned(32))),
        FieldType::Micros => (
            PhysicalType::INT64,
            Some(LogicalType::Timestamp {
                is_adjusted_to_u_t_c: true,
                unit: TimeUnit::MICROS(MicroSeconds {}),
            }),
        ),
        FieldType::Str | FieldType::Addr => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
        FieldType::Map | FieldType::Records(_) => {
            bail!("field {} nests inside a nested field", field.name)
        }
    };
    Ok(Type::primitive_type_builder(field.name, physical)
        .with_repetition(repetition)
        .with_logical_type(logical)
        .build()?)
}

/// One value converted to its column's physical type.
enum Cell {
    Null,
    Bool(bool),
    Int32(i32),
    Int64(i64),
    Str(ByteArray),
    /// The text and the 16 bytes of an address.
    Addr(ByteArray, FixedLenByteArray),
    /// A nested value's entries, leaf by leaf (see [`Leaf`]).
    Nested(Vec<Vec<LeafEntry>>),
}

/// One entry of a nested field's leaf: its value (`Cell::Null` when absent) and its levels.
struct LeafEntry {
    cell: Cell,
    def: i16,
    rep: i16,
}

impl Cell {
    fn convert(field: &Field, value: Value) -> Result<Cell> {
        let name = field.name;
        Ok(match (field.kind, value) {
            (_, Value::Null) => Cell::Null,
            (FieldType::Bool, Value::Bool(b)) => Cell::Bool(b),
            (FieldType::Int | FieldType::Micros, Value::Int(n)) => Cell::Int64(
                i64::try_from(n).with_context(|| format!("{name} = {n} exceeds INT64"))?,
            ),
            (kind @ (FieldType::U8 | FieldType::U16 | FieldType::U32), Value::Int(n)) => {
                if Some(n) > kind.int_max() {
                    bail!("{name} = {n} exceeds its type {kind:?}");
                }
                // UINT_32 keeps its bit pattern in parquet's INT32.
                Cell::Int32(n as u32 as i32)
            }
            (FieldType::Str, Value::Str(s)) => Cell::Str(ByteArray::from(s.into_bytes())),
            (FieldType::Addr, Value::Str(s)) => {
                let addr: IpAddr = s
                    .parse()
                    .with_context(|| format!("{name} = {s:?} is not an IP address"))?;
                let v6 = match addr {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let bytes = FixedLenByteArray::from(v6.octets().to_vec());
                Cell::Addr(ByteArray::from(s.into_bytes()), bytes)
            }
            (FieldType::Map, Value::Json(Json::Object(map))) => map_entries(field, map)?,
            (FieldType::Records(members), Value::Json(Json::Array(records))) => {
                record_entries(field, members, records)?
            }
            (kind, value) => bail!("field {name} is declared {kind:?} but is {value:?}"),
        })
    }

    /// A member of a nested value, as the plain value of its JSON (text other than a string,
    /// a number or a bool is kept as JSON text).
    fn of_member(member: &Field, json: Json) -> Result<Cell> {
        let value = match json {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(b),
            Json::Number(n) if n.is_u64() => Value::Int(n.as_u64().unwrap_or_default()),
            Json::String(s) => Value::Str(s),
            other => Value::Str(other.to_string()),
        };
        Cell::convert(member, value)
    }
}

/// Definition and repetition levels of a nested field's leaves (see [`nested_type`]): the
/// field null (0), present but empty (1), an entry whose leaf value is absent (2; a map's key
/// never is), or present (3; a map's key: 2). Each entry after a value's first repeats (1).
const EMPTY: i16 = 1;
const ENTRY: i16 = 2;
const PRESENT: i16 = 3;

/// The entry of `cell` at position `i` of its value: present or absent.
fn entry(cell: Cell, i: usize, present: i16) -> LeafEntry {
    let def = if matches!(cell, Cell::Null) {
        ENTRY
    } else {
        present
    };
    LeafEntry {
        cell,
        def,
        rep: i16::from(i > 0),
    }
}

/// An empty map or list: one entry per leaf that says so.
fn empty(leaves: usize) -> Cell {
    Cell::Nested(
        (0..leaves)
            .map(|_| {
                vec![LeafEntry {
                    cell: Cell::Null,
                    def: EMPTY,
                    rep: 0,
                }]
            })
            .collect(),
    )
}

fn map_entries(field: &Field, map: serde_json::Map<String, Json>) -> Result<Cell> {
    if map.is_empty() {
        return Ok(empty(2));
    }
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    for (i, (key, value)) in map.into_iter().enumerate() {
        keys.push(entry(
            Cell::Str(ByteArray::from(key.into_bytes())),
            i,
            ENTRY,
        ));
        let value = Cell::of_member(&MAP_ENTRY[1], value)
            .with_context(|| format!("a value of {}", field.name))?;
        values.push(entry(value, i, PRESENT));
    }
    Ok(Cell::Nested(vec![keys, values]))
}

fn record_entries(field: &Field, members: &'static [Field], records: Vec<Json>) -> Result<Cell> {
    if records.is_empty() {
        return Ok(empty(members.len()));
    }
    let mut leaves: Vec<Vec<LeafEntry>> = members.iter().map(|_| Vec::new()).collect();
    for (i, record) in records.into_iter().enumerate() {
        let Json::Object(mut record) = record else {
            bail!("field {} holds {record}, not an object", field.name);
        };
        for (member, leaf) in members.iter().zip(&mut leaves) {
            let json = record.remove(member.name).unwrap_or(Json::Null);
            let cell = Cell::of_member(member, json)
                .with_context(|| format!("{}.{}", field.name, member.name))?;
            leaf.push(entry(cell, i, PRESENT));
        }
    }
    Ok(Cell::Nested(leaves))
}

/// Buffers a present value; returns its definition level.
fn push_present<T>(values: &mut Vec<T>, value: T) -> i16 {
    values.push(value);
    1
}

/// A column's buffered values. Parquet stores OPTIONAL columns as definition levels (1 =
/// present, 0 = null) plus the present values only. An address field's two columns share
/// their levels; a nested field's leaves keep their own, with repetition levels.
struct Column {
    field: &'static Field,
    levels: Vec<i16>,
    values: Values,
    /// A nested field's leaves (`values` and `levels` then stay empty).
    leaves: Vec<Leaf>,
}

/// One leaf column of a nested field.
struct Leaf {
    name: &'static str,
    values: Values,
    def: Vec<i16>,
    rep: Vec<i16>,
}

enum Values {
    Bool(Vec<bool>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Str(Vec<ByteArray>),
    Addr(Vec<ByteArray>, Vec<FixedLenByteArray>),
}

impl Values {
    fn of(kind: FieldType) -> Values {
        match kind {
            FieldType::Bool => Values::Bool(Vec::new()),
            FieldType::U8 | FieldType::U16 | FieldType::U32 => Values::Int32(Vec::new()),
            FieldType::Int | FieldType::Micros => Values::Int64(Vec::new()),
            FieldType::Addr => Values::Addr(Vec::new(), Vec::new()),
            FieldType::Str | FieldType::Map | FieldType::Records(_) => Values::Str(Vec::new()),
        }
    }

    /// Buffers a cell already converted for this column's type; returns 1 if it was present,
    /// 0 for Null (or, impossible after `Cell::convert`, a cell of another type).
    fn push(&mut self, cell: Cell) -> i16 {
        match (self, cell) {
            (Values::Bool(v), Cell::Bool(b)) => push_present(v, b),
            (Values::Int32(v), Cell::Int32(n)) => push_present(v, n),
            (Values::Int64(v), Cell::Int64(n)) => push_present(v, n),
            (Values::Str(v), Cell::Str(s)) => push_present(v, s),
            (Values::Addr(text, bytes), Cell::Addr(s, b)) => {
                bytes.push(b);
                push_present(text, s)
            }
            _ => 0,
        }
    }

    /// Writes the buffered values as the next column chunks of `group` (two for an address),
    /// with these levels, then empties them.
    fn write_to(
        &mut self,
        group: &mut RowGroup<'_>,
        name: &str,
        def: &[i16],
        rep: Option<&[i16]>,
    ) -> Result<()> {
        match self {
            Values::Bool(v) => write_chunk::<BoolType>(group, name, v, def, rep)?,
            Values::Int32(v) => write_chunk::<Int32Type>(group, name, v, def, rep)?,
            Values::Int64(v) => write_chunk::<Int64Type>(group, name, v, def, rep)?,
            Values::Str(v) => write_chunk::<ByteArrayType>(group, name, v, def, rep)?,
            Values::Addr(text, bytes) => {
                write_chunk::<ByteArrayType>(group, name, text, def, rep)?;
                write_chunk::<FixedLenByteArrayType>(group, name, bytes, def, rep)?;
            }
        }
        match self {
            Values::Bool(v) => v.clear(),
            Values::Int32(v) => v.clear(),
            Values::Int64(v) => v.clear(),
            Values::Str(v) => v.clear(),
            Values::Addr(text, bytes) => {
                text.clear();
                bytes.clear();
            }
        }
        Ok(())
    }
}

impl Column {
    fn new(field: &'static Field) -> Self {
        let members: &'static [Field] = match field.kind {
            FieldType::Map => MAP_ENTRY,
            FieldType::Records(members) => members,
            _ => &[],
        };
        let leaves = members
            .iter()
            .map(|member| Leaf {
                name: member.name,
                values: Values::of(member.kind),
                def: Vec::new(),
                rep: Vec::new(),
            })
            .collect();
        Column {
            field,
            levels: Vec::new(),
            values: Values::of(field.kind),
            leaves,
        }
    }

    /// Buffers a cell already converted for this column's type.
    fn push(&mut self, cell: Cell) {
        if self.leaves.is_empty() {
            let level = self.values.push(cell);
            self.levels.push(level);
            return;
        }
        match cell {
            Cell::Nested(entries) => {
                for (leaf, entries) in self.leaves.iter_mut().zip(entries) {
                    for e in entries {
                        leaf.values.push(e.cell);
                        leaf.def.push(e.def);
                        leaf.rep.push(e.rep);
                    }
                }
            }
            // Null (or, impossible after `Cell::convert`, a plain cell): the field is absent.
            _ => {
                for leaf in &mut self.leaves {
                    leaf.def.push(0);
                    leaf.rep.push(0);
                }
            }
        }
    }

    /// Writes the buffered values as this field's column chunks of a row group (two for an
    /// address, one per leaf for a nested field), then empties them.
    fn write_to(&mut self, group: &mut RowGroup<'_>) -> Result<()> {
        if self.leaves.is_empty() {
            self.values
                .write_to(group, self.field.name, &self.levels, None)?;
            self.levels.clear();
            return Ok(());
        }
        for leaf in &mut self.leaves {
            let name = format!("{}.{}", self.field.name, leaf.name);
            leaf.values
                .write_to(group, &name, &leaf.def, Some(&leaf.rep))?;
            leaf.def.clear();
            leaf.rep.clear();
        }
        Ok(())
    }
}

type RowGroup<'a> = SerializedRowGroupWriter<'a, std::fs::File>;

/// Writes one column chunk: the next column of `group`, which belongs to field `name`.
fn write_chunk<T: DataType>(
    group: &mut RowGroup<'_>,
    name: &str,
    values: &[T::T],
    def: &[i16],
    rep: Option<&[i16]>,
) -> Result<()> {
    let mut writer = group
        .next_column()?
        .with_context(|| format!("parquet schema lacks a column for {name}"))?;
    writer.typed::<T>().write_batch(values, Some(def), rep)?;
    writer.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use serde_json::json;

    use super::*;

    const MEMBERS: &[Field] = &[
        Field {
            name: "subject",
            kind: FieldType::Str,
            help: "",
        },
        Field {
            name: "bits",
            kind: FieldType::Int,
            help: "",
        },
    ];
    static FIELDS: [Field; 3] = [
        Field {
            name: "id",
            kind: FieldType::U16,
            help: "",
        },
        Field {
            name: "headers",
            kind: FieldType::Map,
            help: "",
        },
        Field {
            name: "chain",
            kind: FieldType::Records(MEMBERS),
            help: "",
        },
    ];

    struct Nested(u64, Value, Value);

    impl Row for Nested {
        fn get(&self, name: &str) -> Value {
            match name {
                "id" => Value::Int(self.0),
                "headers" => self.1.clone(),
                _ => self.2.clone(),
            }
        }
    }

    /// A map, a list of records, each null, empty and full, read back as parquet's reader
    /// sees them: MAP and LIST columns, not JSON text.
    #[test]
    fn nested_values_become_maps_and_lists_of_structs() {
        let path =
            std::env::temp_dir().join(format!("sonde-nested-{}.parquet", std::process::id()));
        let mut w =
            ParquetWriter::create(&path, FIELDS.iter().collect(), OpenMode::Create, &[]).unwrap();
        let rows = [
            Nested(
                1,
                Value::Json(json!({"server": "nginx", "x-a": "1, 2"})),
                Value::Json(json!([
                    {"subject": "CN=leaf", "bits": 2048},
                    {"subject": null, "bits": null, "unknown": true},
                    {"subject": "CN=root"},
                ])),
            ),
            Nested(2, Value::Null, Value::Null),
            Nested(3, Value::Json(json!({})), Value::Json(json!([]))),
        ];
        for row in &rows {
            w.write(row).unwrap();
        }
        Box::new(w).finish().unwrap();
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let shown: Vec<String> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|row| row.unwrap().to_string())
            .collect();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            shown,
            [
                r#"{id: 1, headers: {"server" -> "nginx", "x-a" -> "1, 2"}, chain: [{subject: "CN=leaf", bits: 2048}, {subject: null, bits: null}, {subject: "CN=root", bits: null}]}"#,
                "{id: 2, headers: null, chain: null}",
                "{id: 3, headers: {}, chain: []}",
            ]
        );
        let schema = reader.metadata().file_metadata().schema_descr();
        let leaves: Vec<String> = schema.columns().iter().map(|c| c.path().string()).collect();
        assert_eq!(
            leaves,
            [
                "id",
                "headers.key_value.key",
                "headers.key_value.value",
                "chain.list.element.subject",
                "chain.list.element.bits"
            ]
        );
    }

    #[test]
    fn a_nested_field_of_the_wrong_shape_is_refused_whole() {
        let path = std::env::temp_dir().join(format!("sonde-shape-{}.parquet", std::process::id()));
        let mut w =
            ParquetWriter::create(&path, FIELDS.iter().collect(), OpenMode::Create, &[]).unwrap();
        for bad in [
            Nested(1, Value::Json(json!(["not", "a map"])), Value::Null),
            Nested(1, Value::Null, Value::Json(json!(["not an object"]))),
            Nested(1, Value::Str("{}".into()), Value::Null),
        ] {
            assert!(w.write(&bad).is_err());
        }
        w.write(&Nested(4, Value::Null, Value::Null)).unwrap();
        Box::new(w).finish().unwrap();
        let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
