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
//!   with no extension. A v4-only UINT32 would leave IPv6 rows without one.
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

use super::Row;
use super::{open_file, OpenMode, RowWriter, ROW_GROUP_ROWS};
use crate::reply::{Field, FieldType, Value};

/// The suffix of the 16-byte column written beside each address column.
pub const ADDR_BYTES_SUFFIX: &str = "_bytes";

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

/// Wide integers are plain signed INT64 rather than UINT_64, which Spark reads only as a
/// decimal; every value fits (microsecond times, byte counts).
fn column_type(field: &Field) -> Result<Type> {
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
    };
    Ok(Type::primitive_type_builder(field.name, physical)
        .with_repetition(Repetition::OPTIONAL)
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
            (kind, value) => bail!("field {name} is declared {kind:?} but is {value:?}"),
        })
    }
}

/// Buffers a present value; returns its definition level.
fn push_present<T>(values: &mut Vec<T>, value: T) -> i16 {
    values.push(value);
    1
}

/// A column's buffered values. Parquet stores OPTIONAL columns as definition levels (1 =
/// present, 0 = null) plus the present values only. An address field's two columns share
/// their levels.
struct Column {
    field: &'static Field,
    levels: Vec<i16>,
    values: Values,
}

enum Values {
    Bool(Vec<bool>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Str(Vec<ByteArray>),
    Addr(Vec<ByteArray>, Vec<FixedLenByteArray>),
}

impl Column {
    fn new(field: &'static Field) -> Self {
        let values = match field.kind {
            FieldType::Bool => Values::Bool(Vec::new()),
            FieldType::U8 | FieldType::U16 | FieldType::U32 => Values::Int32(Vec::new()),
            FieldType::Int | FieldType::Micros => Values::Int64(Vec::new()),
            FieldType::Str => Values::Str(Vec::new()),
            FieldType::Addr => Values::Addr(Vec::new(), Vec::new()),
        };
        Column {
            field,
            levels: Vec::new(),
            values,
        }
    }

    /// Buffers a cell already converted for this column's type.
    fn push(&mut self, cell: Cell) {
        let level = match (&mut self.values, cell) {
            (Values::Bool(v), Cell::Bool(b)) => push_present(v, b),
            (Values::Int32(v), Cell::Int32(n)) => push_present(v, n),
            (Values::Int64(v), Cell::Int64(n)) => push_present(v, n),
            (Values::Str(v), Cell::Str(s)) => push_present(v, s),
            (Values::Addr(text, bytes), Cell::Addr(s, b)) => {
                bytes.push(b);
                push_present(text, s)
            }
            // Null, or (impossible after `Cell::convert`) a cell of another type.
            _ => 0,
        };
        self.levels.push(level);
    }

    /// Writes the buffered values as this field's column chunks of a row group (two for an
    /// address), then empties them.
    fn write_to(&mut self, group: &mut RowGroup<'_>) -> Result<()> {
        let (name, levels) = (self.field.name, self.levels.as_slice());
        match &mut self.values {
            Values::Bool(v) => write_chunk::<BoolType>(group, name, v, levels)?,
            Values::Int32(v) => write_chunk::<Int32Type>(group, name, v, levels)?,
            Values::Int64(v) => write_chunk::<Int64Type>(group, name, v, levels)?,
            Values::Str(v) => write_chunk::<ByteArrayType>(group, name, v, levels)?,
            Values::Addr(text, bytes) => {
                write_chunk::<ByteArrayType>(group, name, text, levels)?;
                write_chunk::<FixedLenByteArrayType>(group, name, bytes, levels)?;
            }
        }
        match &mut self.values {
            Values::Bool(v) => v.clear(),
            Values::Int32(v) => v.clear(),
            Values::Int64(v) => v.clear(),
            Values::Str(v) => v.clear(),
            Values::Addr(text, bytes) => {
                text.clear();
                bytes.clear();
            }
        }
        self.levels.clear();
        Ok(())
    }
}

type RowGroup<'a> = SerializedRowGroupWriter<'a, std::fs::File>;

/// Writes one column chunk: the next column of `group`, which belongs to field `name`.
fn write_chunk<T: DataType>(
    group: &mut RowGroup<'_>,
    name: &str,
    values: &[T::T],
    levels: &[i16],
) -> Result<()> {
    let mut writer = group
        .next_column()?
        .with_context(|| format!("parquet schema lacks a column for {name}"))?;
    writer
        .typed::<T>()
        .write_batch(values, Some(levels), None)?;
    writer.close()?;
    Ok(())
}
