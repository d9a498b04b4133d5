//! The text formats: csv (ZMap style: header, bools as 1/0, Null as an empty cell) and ndjson
//! (one typed JSON object per line, fields in selection order).

use std::fmt::Write as _;
use std::io::{self, Write};

use anyhow::Result;

use super::{Row, RowWriter, Sink};
use crate::reply::{Field, Value};

/// Appends rows to a [`Sink`] one whole row at a time. Each row is rendered into `row` first
/// and handed over in a single `write_all`: a `BufWriter` passes its contents on before taking
/// a write that does not fit, so the OS only ever receives whole rows, and even a killed scan
/// leaves a file ending at a row boundary.
struct RowSink {
    out: Sink,
    row: Vec<u8>,
}

impl RowSink {
    fn new(out: Sink) -> Self {
        RowSink {
            out,
            row: Vec::with_capacity(512),
        }
    }

    /// Hands the rendered row to the buffer and starts the next one.
    fn commit(&mut self) -> io::Result<()> {
        let written = self.out.write_all(&self.row);
        // Cleared even on failure, so a retry never repeats this row's bytes.
        self.row.clear();
        written
    }
}

/// How the csv writer feeds a [`RowSink`]: it writes a record into `row`, and its `flush`
/// (which [`CsvWriter`] calls after every record, so its own buffer never splits one) commits
/// the row. A `flush` with no row pending is a real flush, down to the OS.
impl Write for RowSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.row.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.row.is_empty() {
            self.out.flush()
        } else {
            self.commit()
        }
    }
}

/// CSV rows through the csv crate, which quotes cells that need it.
pub(super) struct CsvWriter {
    csv: csv::Writer<RowSink>,
    fields: Vec<&'static Field>,
    cell: String,
}

impl CsvWriter {
    /// Writes the header line at once (unless appending to rows already there), so even an
    /// empty scan leaves a well-formed file.
    pub(super) fn new(out: Sink, fields: Vec<&'static Field>, header: bool) -> Result<Self> {
        let mut csv = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(RowSink::new(out));
        if header {
            csv.write_record(fields.iter().map(|f| f.name))?;
            csv.flush()?; // commits the header
        }
        Ok(CsvWriter {
            csv,
            fields,
            cell: String::new(),
        })
    }
}

impl RowWriter for CsvWriter {
    fn write(&mut self, r: &dyn Row) -> Result<()> {
        for field in &self.fields {
            self.cell.clear();
            csv_cell(&r.get(field.name), &mut self.cell);
            self.csv.write_field(&self.cell)?;
        }
        // An empty record ends the one the fields above started.
        self.csv.write_record(None::<&[u8]>)?;
        self.csv.flush()?; // commits the row
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        self.csv.flush()?; // no row pending: flushes to the OS
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_rows()
    }
}

/// ZMap's csv conventions: Null is an empty cell, booleans are 1/0.
fn csv_cell(value: &Value, cell: &mut String) {
    match value {
        Value::Null => {}
        Value::Bool(b) => cell.push(if *b { '1' } else { '0' }),
        Value::Int(n) => {
            let _ = write!(cell, "{n}"); // writing to a String cannot fail
        }
        Value::Str(s) => cell.push_str(s),
    }
}

/// Newline-delimited JSON, written by hand so keys keep the selection order.
pub(super) struct NdjsonWriter {
    sink: RowSink,
    fields: Vec<&'static Field>,
}

impl NdjsonWriter {
    pub(super) fn new(out: Sink, fields: Vec<&'static Field>) -> Self {
        NdjsonWriter {
            sink: RowSink::new(out),
            fields,
        }
    }
}

impl RowWriter for NdjsonWriter {
    fn write(&mut self, r: &dyn Row) -> Result<()> {
        let row = &mut self.sink.row;
        row.push(b'{');
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                row.push(b',');
            }
            serde_json::to_writer(&mut *row, field.name)?;
            row.push(b':');
            json_value(&r.get(field.name), row)?;
        }
        row.extend_from_slice(b"}\n");
        self.sink.commit()?;
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        self.sink.out.flush()?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_rows()
    }
}

fn json_value(value: &Value, out: &mut Vec<u8>) -> Result<()> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(n) => write!(out, "{n}")?,
        Value::Str(s) => serde_json::to_writer(out, s)?,
    }
    Ok(())
}
