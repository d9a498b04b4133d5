//! Parquet output through parquet's low-level writer (no arrow): one OPTIONAL column per field
//! (BOOLEAN, INT64, or BYTE_ARRAY annotated as UTF-8 text), so Null is representable; rows are
//! buffered column-wise and written as a row group every [`ROW_GROUP_ROWS`] rows, which bounds
//! memory. The file is readable only after `finish` writes the footer.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use parquet::basic::{Compression, LogicalType, Repetition, Type as PhysicalType};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::types::Type;

use super::Row;
use super::{open_file, OpenMode, RowWriter, ROW_GROUP_ROWS};
use crate::reply::{Field, FieldType, Value};

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
    pub(super) fn create(path: &Path, fields: Vec<&'static Field>, mode: OpenMode) -> Result<Self> {
        let schema = schema(&fields)?;
        let props = WriterProperties::builder()
            // Snappy: cheap to write at line rate and read by every Parquet consumer.
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_size(ROW_GROUP_ROWS)
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
            let mut writer = group
                .next_column()?
                .context("parquet schema lacks a column")?;
            column.write_to(&mut writer)?;
            writer.close()?;
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

/// The message type: the selected fields, in order.
fn schema(fields: &[&'static Field]) -> Result<Arc<Type>> {
    let columns = fields
        .iter()
        .map(|f| column_type(f).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(
        Type::group_type_builder("sonde_scan")
            .with_fields(columns)
            .build()?,
    ))
}

/// Integers are plain signed INT64 rather than UINT_64: every field fits (ports, TTLs,
/// microsecond times), and Spark reads signed columns natively.
fn column_type(field: &Field) -> Result<Type> {
    let (physical, logical) = match field.kind {
        FieldType::Bool => (PhysicalType::BOOLEAN, None),
        FieldType::Int => (PhysicalType::INT64, None),
        FieldType::Str => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
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
    Int(i64),
    Str(ByteArray),
}

impl Cell {
    fn convert(field: &Field, value: Value) -> Result<Cell> {
        Ok(match (field.kind, value) {
            (_, Value::Null) => Cell::Null,
            (FieldType::Bool, Value::Bool(b)) => Cell::Bool(b),
            (FieldType::Int, Value::Int(n)) => Cell::Int(
                i64::try_from(n).with_context(|| format!("{} = {n} exceeds INT64", field.name))?,
            ),
            (FieldType::Str, Value::Str(s)) => Cell::Str(ByteArray::from(s.into_bytes())),
            (kind, value) => bail!("field {} is declared {kind:?} but is {value:?}", field.name),
        })
    }
}

/// Buffers a present value; returns its definition level.
fn push_present<T>(values: &mut Vec<T>, value: T) -> i16 {
    values.push(value);
    1
}

/// A column's buffered values. Parquet stores OPTIONAL columns as definition levels (1 =
/// present, 0 = null) plus the present values only.
struct Column {
    field: &'static Field,
    levels: Vec<i16>,
    values: Values,
}

enum Values {
    Bool(Vec<bool>),
    Int(Vec<i64>),
    Str(Vec<ByteArray>),
}

impl Column {
    fn new(field: &'static Field) -> Self {
        let values = match field.kind {
            FieldType::Bool => Values::Bool(Vec::new()),
            FieldType::Int => Values::Int(Vec::new()),
            FieldType::Str => Values::Str(Vec::new()),
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
            (Values::Int(v), Cell::Int(n)) => push_present(v, n),
            (Values::Str(v), Cell::Str(s)) => push_present(v, s),
            // Null, or (impossible after `Cell::convert`) a cell of another type.
            _ => 0,
        };
        self.levels.push(level);
    }

    /// Writes the buffered values as this column's chunk of a row group, then empties them.
    fn write_to(&mut self, writer: &mut SerializedColumnWriter<'_>) -> Result<()> {
        let levels = Some(self.levels.as_slice());
        match &mut self.values {
            Values::Bool(v) => writer.typed::<BoolType>().write_batch(v, levels, None)?,
            Values::Int(v) => writer.typed::<Int64Type>().write_batch(v, levels, None)?,
            Values::Str(v) => writer
                .typed::<ByteArrayType>()
                .write_batch(v, levels, None)?,
        };
        match &mut self.values {
            Values::Bool(v) => v.clear(),
            Values::Int(v) => v.clear(),
            Values::Str(v) => v.clear(),
        }
        self.levels.clear();
        Ok(())
    }
}
