//! The text formats: csv (ZMap style: header, bools as 1/0, Null as an empty cell, a structured
//! value as its JSON text) and ndjson (one typed JSON object per line, fields in selection
//! order, a structured value nested).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::{self, Write};

use anyhow::{Context, Result};

use super::{Row, RowRenderer, RowWriter, Sink};
use crate::reply::{Field, Value};

/// Appends rows to a [`Sink`] one whole row at a time. Each row is rendered into `row` first
/// and handed over in a single `write_all`: a `BufWriter` passes its contents on before taking
/// a write that does not fit, so the OS only ever receives whole rows, and even a killed scan
/// leaves a file ending at a row boundary.
struct RowSink {
    /// In a cell so that rows rendered elsewhere can be written past the csv crate's writer,
    /// which lends its target only immutably (it holds no bytes between rows).
    out: RefCell<Sink>,
    row: Vec<u8>,
}

impl RowSink {
    fn new(out: Sink) -> Self {
        RowSink {
            out: RefCell::new(out),
            row: Vec::with_capacity(512),
        }
    }

    /// Hands the rendered row to the buffer and starts the next one.
    fn commit(&mut self) -> io::Result<()> {
        let written = self.out.get_mut().out.write_all(&self.row);
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
            self.out.get_mut().out.flush()
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
        let mut csv = csv_writer(RowSink::new(out));
        if header {
            csv.write_record(fields.iter().map(|f| f.name))?;
            csv.flush().context("writing the csv header")?; // commits the header
                                                            // A reader downstream sees the header at once, before any row.
            let sent = csv.get_ref().out.borrow_mut().end_batch();
            sent.context("writing the csv header")?;
        }
        Ok(CsvWriter {
            csv,
            fields,
            cell: String::new(),
        })
    }
}

/// One csv record of `r`'s `fields` (then flushed: the record leaves the csv crate's buffer).
fn csv_record<W: Write>(
    csv: &mut csv::Writer<W>,
    fields: &[&'static Field],
    r: &dyn Row,
    cell: &mut String,
) -> Result<()> {
    for field in fields {
        cell.clear();
        csv_cell(&r.get(field.name), cell);
        csv.write_field(&*cell)?;
    }
    // An empty record ends the one the fields above started.
    csv.write_record(None::<&[u8]>)?;
    csv.flush()?;
    Ok(())
}

/// Renders csv records as [`CsvWriter`] writes them, into a spool it empties after each.
struct CsvRenderer {
    csv: csv::Writer<Spool>,
    fields: Vec<&'static Field>,
    cell: String,
}

/// Bytes the csv crate's writer renders, taken back through its immutable `get_ref`.
struct Spool(RefCell<Vec<u8>>);

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.get_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl RowRenderer for CsvRenderer {
    fn render(&mut self, r: &dyn Row, out: &mut Vec<u8>) -> Result<()> {
        let rendered = csv_record(&mut self.csv, &self.fields, r, &mut self.cell);
        let mut spool = self.csv.get_ref().0.borrow_mut();
        if rendered.is_ok() {
            out.extend_from_slice(&spool);
        }
        spool.clear(); // whole rows only
        rendered
    }
}

impl RowWriter for CsvWriter {
    fn write(&mut self, r: &dyn Row) -> Result<()> {
        // The flush commits the row.
        csv_record(&mut self.csv, &self.fields, r, &mut self.cell)
    }

    fn renderer(&self) -> Option<Box<dyn RowRenderer>> {
        Some(Box::new(CsvRenderer {
            csv: csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Spool(RefCell::new(Vec::new()))),
            fields: self.fields.clone(),
            cell: String::new(),
        }))
    }

    fn write_rendered(&mut self, rows: &[u8]) -> Result<()> {
        // The csv writer holds no row between calls (each is flushed): written past it.
        let mut sink = self.csv.get_ref().out.borrow_mut();
        sink.out.write_all(rows)?;
        sink.end_batch()?;
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        self.csv.flush()?; // no row pending: flushes to the OS
        Ok(())
    }

    fn end_batch(&mut self) -> Result<()> {
        self.csv.get_ref().out.borrow_mut().end_batch()?;
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_rows()
    }
}

fn csv_writer(sink: RowSink) -> csv::Writer<RowSink> {
    csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(sink)
}

/// ZMap's csv conventions: Null is an empty cell, booleans are 1/0; a structured value is its
/// JSON text.
fn csv_cell(value: &Value, cell: &mut String) {
    match value {
        Value::Null => {}
        Value::Bool(b) => cell.push(if *b { '1' } else { '0' }),
        Value::Int(n) => {
            let _ = write!(cell, "{n}"); // writing to a String cannot fail
        }
        Value::Str(s) => cell.push_str(s),
        Value::Json(json) => {
            let _ = write!(cell, "{json}"); // writing to a String cannot fail
        }
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

/// One JSON object of `r`'s `fields`, and its newline, appended to `row`.
fn ndjson_row(fields: &[&'static Field], r: &dyn Row, row: &mut Vec<u8>) -> Result<()> {
    row.push(b'{');
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            row.push(b',');
        }
        serde_json::to_writer(&mut *row, field.name)?;
        row.push(b':');
        json_value(&r.get(field.name), row)?;
    }
    row.extend_from_slice(b"}\n");
    Ok(())
}

struct NdjsonRenderer {
    fields: Vec<&'static Field>,
}

impl RowRenderer for NdjsonRenderer {
    fn render(&mut self, r: &dyn Row, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        let rendered = ndjson_row(&self.fields, r, out);
        if rendered.is_err() {
            out.truncate(start); // whole rows only
        }
        rendered
    }
}

impl RowWriter for NdjsonWriter {
    fn write(&mut self, r: &dyn Row) -> Result<()> {
        ndjson_row(&self.fields, r, &mut self.sink.row)?;
        self.sink.commit()?;
        Ok(())
    }

    fn renderer(&self) -> Option<Box<dyn RowRenderer>> {
        Some(Box::new(NdjsonRenderer {
            fields: self.fields.clone(),
        }))
    }

    fn write_rendered(&mut self, rows: &[u8]) -> Result<()> {
        let sink = self.sink.out.get_mut();
        sink.out.write_all(rows)?;
        sink.end_batch()?;
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        self.sink.out.get_mut().out.flush()?;
        Ok(())
    }

    fn end_batch(&mut self) -> Result<()> {
        self.sink.out.get_mut().end_batch()?;
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
        // Nested as it is: an object or an array in the row's object.
        Value::Json(json) => serde_json::to_writer(out, json)?,
    }
    Ok(())
}
