//! The output side of a scan: which fields each row carries ([`select_fields`]), which replies
//! become rows ([`OutputFilter`]), and how rows reach a file or stdout ([`open_writer`]: csv,
//! ndjson or parquet).
//!
//! Rows to a file are buffered (64 KiB at a time); rows to a pipe, a terminal or standard output
//! leave at the end of each batch of rows ([`RowWriter::end_batch`]), so a reader downstream
//! (`sonde scan -o - | sonde grab -I -`) sees them while the run goes on.
//!
//! Durability contract: a writer only ever hands whole rows to the OS, so a scan that is killed
//! leaves a csv/ndjson file that ends at a row boundary; on Ctrl-C the scan calls
//! [`RowWriter::flush_rows`] (or [`RowWriter::finish`]) so no buffered row is lost. A parquet
//! file is only readable once [`RowWriter::finish`] has written its footer: the scan calls
//! `finish` on SIGINT as on a normal end.
//!
//! Files are opened by [`sonde_meter::output_file`]: never through a symbolic link, an existing
//! regular file only as [`OpenMode`] allows, a device or FIFO (`-o /dev/null`) as it is.

mod columnar;
mod fields;
mod filter;
mod metadata;
mod text;

use std::fmt;
use std::io::{self, BufWriter, Write};

use sonde_meter::output_file::{self, IfExists, Output};
use sonde_meter::stages::{self, Stage};
use std::path::Path;
use std::str::FromStr;

use anyhow::{anyhow, bail, Result};

use crate::reply::{Field, Reply, Value};

pub use crate::reply::{DEFAULT_FIELDS, DNS_FIELDS, ICMP_FIELDS, UDP_FIELDS};
pub use columnar::ADDR_BYTES_SUFFIX;
pub use fields::select_fields;
pub use filter::OutputFilter;
pub use metadata::{rfc3339_micros, RunMetadata};

/// Rows per parquet row group; also the most rows a parquet writer holds in memory.
pub const ROW_GROUP_ROWS: usize = 64 * 1024;

/// Bytes buffered before a csv/ndjson writer hands them to the OS.
const SINK_BUFFER: usize = 64 * 1024;

/// Something with named field values: a scan's [`Reply`], a grab's connection row.
pub trait Row {
    /// The value of field `name`; `Null` for a field the row does not have.
    fn get(&self, name: &str) -> Value;
}

impl Row for Reply {
    fn get(&self, name: &str) -> Value {
        Reply::get(self, name)
    }
}

/// Writes selected fields of rows in one output format.
pub trait RowWriter {
    /// Appends one row. The row is buffered whole or not at all.
    fn write(&mut self, r: &dyn Row) -> Result<()>;

    /// Hands every buffered complete row to the OS (for parquet: writes them as a row group,
    /// possibly a short one). Meant for shutdown paths such as Ctrl-C, not for every row.
    fn flush_rows(&mut self) -> Result<()>;

    /// Ends a batch of rows (a receiver's pass): a text writer to a pipe, a terminal or
    /// standard output hands what it holds to the OS now, in one write, so whoever reads it
    /// sees the rows as they are found; one to a regular file (or parquet) keeps buffering.
    fn end_batch(&mut self) -> Result<()> {
        Ok(())
    }

    /// Writes what is still buffered (for parquet: the last row group and the footer) and
    /// flushes. Dropping a writer without calling this may lose rows and, for parquet, leaves
    /// an unreadable file.
    fn finish(self: Box<Self>) -> Result<()>;

    /// A renderer of rows in this writer's format, for a format whose rows are text (csv,
    /// ndjson): threads render their rows apart and hand the writer whole rows with
    /// [`RowWriter::write_rendered`], so a shared writer is held only for a copy. `None` for
    /// parquet (its rows become columns: written one by one).
    fn renderer(&self) -> Option<Box<dyn RowRenderer>> {
        None
    }

    /// Appends rows a [`RowWriter::renderer`] of this writer rendered: whole rows only, a
    /// batch of them (it ends the batch: see [`RowWriter::end_batch`]).
    fn write_rendered(&mut self, rows: &[u8]) -> Result<()> {
        let _ = rows;
        bail!("this output format takes its rows one by one")
    }
}

/// Renders rows as a text writer would write them (see [`RowWriter::renderer`]).
pub trait RowRenderer: Send {
    /// Appends `r`, rendered whole, to `out`.
    fn render(&mut self, r: &dyn Row, out: &mut Vec<u8>) -> Result<()>;
}

/// An output file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Csv,
    Ndjson,
    Parquet,
}

impl FromStr for OutputFormat {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "csv" => Ok(Self::Csv),
            "ndjson" | "json" => Ok(Self::Ndjson),
            "parquet" => Ok(Self::Parquet),
            _ => {
                bail!("unknown output format `{s}`; choose one of: csv, ndjson (or json), parquet")
            }
        }
    }
}

impl OutputFormat {
    /// The format a file's name says, from its extension (any case): `.csv`; `.ndjson`,
    /// `.jsonl`, `.json`; `.parquet`, `.pq`. `None` for another extension, for none, and for
    /// `-` (stdout). The one reading of a results file's name: `sonde lab score` uses it too.
    pub fn from_extension(path: &Path) -> Option<OutputFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(Self::Csv),
            "ndjson" | "jsonl" | "json" => Some(Self::Ndjson),
            "parquet" | "pq" => Some(Self::Parquet),
            _ => None,
        }
    }

    /// The format rows are written in: `given` (`-O`) when there is one, else what the name of
    /// `path` (`-o`) says, else `default`. A `-O` that contradicts the name is refused: a
    /// `h.parquet` holding csv would fail every reader later.
    pub fn resolve(
        given: Option<OutputFormat>,
        path: Option<&Path>,
        default: OutputFormat,
    ) -> Result<OutputFormat> {
        let named = path.and_then(Self::from_extension);
        match (given, named) {
            (Some(given), Some(named)) if given != named => bail!(
                "-O {given} contradicts -o {}, a {named} name: drop -O, or give the file a .{} name",
                path.map_or(String::new(), |p| p.display().to_string()),
                given.extension()
            ),
            (Some(given), _) => Ok(given),
            (None, Some(named)) => Ok(named),
            (None, None) => Ok(default),
        }
    }

    /// The usual extension of files in this format.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
            Self::Parquet => "parquet",
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
            Self::Parquet => "parquet",
        })
    }
}

/// How an output file is opened (a device or FIFO is written as it is in every mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Created; an existing regular file is refused (no --force).
    CreateNew,
    /// Created, or truncated if it exists (--force).
    Create,
    /// Rows added at its end (csv: no second header when the file already has rows).
    Append,
}

impl OpenMode {
    fn if_exists(self) -> IfExists {
        match self {
            OpenMode::CreateNew => IfExists::Refuse,
            OpenMode::Create => IfExists::Overwrite,
            OpenMode::Append => IfExists::Append,
        }
    }
}

/// Opens a writer of `format` for `fields`, to the file at `path` (created or truncated), or to
/// stdout when `path` is `None` or `-`. Parquet needs a real file: its footer points back at
/// earlier bytes, so it cannot be streamed.
pub fn open_writer(
    format: OutputFormat,
    path: Option<&Path>,
    fields: Vec<&'static Field>,
) -> Result<Box<dyn RowWriter + Send>> {
    open_writer_with(format, path, fields, OpenMode::Create)
}

/// [`open_writer`], appending to an existing file with [`OpenMode::Append`] (csv, ndjson).
pub fn open_writer_with(
    format: OutputFormat,
    path: Option<&Path>,
    fields: Vec<&'static Field>,
    mode: OpenMode,
) -> Result<Box<dyn RowWriter + Send>> {
    open_writer_with_metadata(format, path, fields, mode, &[])
}

/// [`open_writer_with`], with key-value pairs that formats with room for them keep in the file
/// (parquet's footer; csv and ndjson have none): e.g. [`RunMetadata::key_values`].
pub fn open_writer_with_metadata(
    format: OutputFormat,
    path: Option<&Path>,
    fields: Vec<&'static Field>,
    mode: OpenMode,
    metadata: &[(String, String)],
) -> Result<Box<dyn RowWriter + Send>> {
    check_fields(&fields)?;
    let path = path.filter(|p| *p != Path::new("-"));
    let has_rows = mode == OpenMode::Append
        && path.is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0));
    if mode == OpenMode::Append && format == OutputFormat::Parquet {
        bail!("parquet output cannot be appended to: write to another file");
    }
    Ok(match format {
        OutputFormat::Csv => Box::new(text::CsvWriter::new(
            open_sink(path, mode)?,
            fields,
            !has_rows,
        )?),
        OutputFormat::Ndjson => Box::new(text::NdjsonWriter::new(open_sink(path, mode)?, fields)),
        OutputFormat::Parquet => {
            let path = path.ok_or_else(|| {
                anyhow!("parquet output needs a file (-o FILE): it cannot be written to stdout")
            })?;
            Box::new(columnar::ParquetWriter::create(
                path, fields, mode, metadata,
            )?)
        }
    })
}

/// Rejects selections that would make a malformed file (no columns, or a column twice).
fn check_fields(fields: &[&'static Field]) -> Result<()> {
    if fields.is_empty() {
        bail!("no output fields selected");
    }
    for (i, f) in fields.iter().enumerate() {
        if fields[..i].iter().any(|g| g.name == f.name) {
            bail!("output field `{}` is selected twice", f.name);
        }
    }
    Ok(())
}

/// Buffered destination of the text formats, and whether it is a stream (see
/// [`RowWriter::end_batch`]).
struct Sink {
    out: BufWriter<Box<dyn Write + Send>>,
    stream: bool,
}

impl Sink {
    /// Hands the buffered rows to the OS if the destination is a stream.
    fn end_batch(&mut self) -> io::Result<()> {
        if self.stream && !self.out.buffer().is_empty() {
            self.out.flush()?;
        }
        Ok(())
    }
}

fn open_sink(path: Option<&Path>, mode: OpenMode) -> Result<Sink> {
    let (out, stream): (Box<dyn Write + Send>, bool) = match path {
        Some(p) => match output_file::open(p, mode.if_exists())? {
            Output::File(file) => {
                let regular = file.metadata().is_ok_and(|m| m.is_file());
                (Box::new(file), !regular)
            }
            stdout @ Output::Stdout(_) => (Box::new(stdout), !stdout_is_a_file()),
        },
        None => (Box::new(io::stdout()), !stdout_is_a_file()),
    };
    Ok(Sink {
        out: BufWriter::with_capacity(SINK_BUFFER, Box::new(TimedWrites(out))),
        stream,
    })
}

/// Whether standard output is a regular file (`> rows.csv`): buffered as one; anything else
/// (a pipe, a terminal) is a stream.
fn stdout_is_a_file() -> bool {
    use std::os::fd::AsFd;
    io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file())
}

/// What lies under the buffer: its writes are system calls, which `sonde profile` times as
/// such (the row that fills the buffer would otherwise carry the kernel's copy in its output
/// stage, and the system time count it a second time).
struct TimedWrites(Box<dyn Write + Send>);

impl Write for TimedWrites {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        stages::call(Stage::Output, Stage::Write, || self.0.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        stages::call(Stage::Output, Stage::Write, || self.0.flush())
    }
}

/// The file a parquet writer writes (it seeks nowhere, so a device or FIFO does too).
fn open_file(path: &Path, mode: OpenMode) -> Result<std::fs::File> {
    match output_file::open(path, mode.if_exists())? {
        Output::File(file) => Ok(file),
        Output::Stdout(_) => {
            bail!("parquet output needs a file (-o FILE): it cannot be written to stdout")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_file_name_unless_o_says_otherwise() {
        use OutputFormat::{Csv, Ndjson, Parquet};
        let path = |p: &'static str| Some(Path::new(p));
        let resolve = |given, p, default| OutputFormat::resolve(given, p, default).unwrap();
        for (name, format) in [
            ("h.parquet", Parquet),
            ("h.PQ", Parquet),
            ("dir.d/h.csv", Csv),
            ("h.ndjson", Ndjson),
            ("h.jsonl", Ndjson),
            ("h.json", Ndjson),
        ] {
            assert_eq!(OutputFormat::from_extension(Path::new(name)), Some(format));
            // The name decides when -O is absent, whatever the command's default.
            for default in [Csv, Ndjson] {
                assert_eq!(resolve(None, path(name), default), format, "{name}");
            }
            assert_eq!(resolve(Some(format), path(name), Csv), format, "{name}");
        }
        // No name to go by: -O, else the default.
        for name in [
            None,
            path("-"),
            path("hits"),
            path("hits.txt"),
            path("/dev/null"),
        ] {
            assert_eq!(resolve(None, name, Ndjson), Ndjson, "{name:?}");
            assert_eq!(resolve(None, name, Csv), Csv, "{name:?}");
            assert_eq!(resolve(Some(Parquet), name, Csv), Parquet, "{name:?}");
        }
        let err = OutputFormat::resolve(Some(Csv), path("h.parquet"), Csv)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("-O csv") && err.contains("h.parquet") && err.contains(".csv"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1);
    }

    #[test]
    fn appending_to_csv_writes_no_second_header() {
        let path = std::env::temp_dir().join(format!("sonde-append-{}.csv", std::process::id()));
        let fields = select_fields(Some("saddr,sport"), crate::probe::ModuleKind::TcpSyn).unwrap();
        for mode in [OpenMode::Create, OpenMode::Append] {
            let mut w =
                open_writer_with(OutputFormat::Csv, Some(&path), fields.clone(), mode).unwrap();
            w.write(&Reply::example()).unwrap();
            w.finish().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "saddr,sport\n198.18.0.7,80\n198.18.0.7,80\n");
        let parquet =
            open_writer_with(OutputFormat::Parquet, Some(&path), fields, OpenMode::Append);
        assert!(parquet
            .err()
            .unwrap()
            .to_string()
            .contains("cannot be appended"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_existing_file_is_kept_without_force_and_a_link_is_never_followed() {
        let dir = std::env::temp_dir().join(format!("sonde-outmode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fields = select_fields(Some("saddr"), crate::probe::ModuleKind::TcpSyn).unwrap();
        let kept = dir.join("kept.csv");
        std::fs::write(&kept, "old rows\n").unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.join("link.parquet");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let null = Path::new("/dev/null");
        for format in [
            OutputFormat::Csv,
            OutputFormat::Ndjson,
            OutputFormat::Parquet,
        ] {
            let refused =
                open_writer_with(format, Some(&kept), fields.clone(), OpenMode::CreateNew);
            let err = refused
                .err()
                .expect("an existing file was opened")
                .to_string();
            assert!(err.contains("--force"), "{format}: {err}");
            for mode in [OpenMode::CreateNew, OpenMode::Create] {
                let through = open_writer_with(format, Some(&link), fields.clone(), mode);
                let err = through.err().expect("a link was followed").to_string();
                assert!(err.contains("symbolic link"), "{format}: {err}");
            }
            let mut w =
                open_writer_with(format, Some(null), fields.clone(), OpenMode::CreateNew).unwrap();
            w.write(&Reply::example()).unwrap();
            w.finish().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "old rows\n");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Rows to a pipe leave at the end of each batch, while the writer is still open (so
    /// `scan -o - | grab -I -` sees the first row when it is found, not at the end); rows to a
    /// regular file stay in the buffer until it fills or the writer finishes.
    #[test]
    fn rows_to_a_pipe_leave_at_each_batch_s_end_and_to_a_file_when_the_buffer_fills() {
        use std::io::Read;
        use std::sync::mpsc;
        let dir = std::env::temp_dir().join(format!("sonde-stream-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fields = select_fields(Some("saddr,sport"), crate::probe::ModuleKind::TcpSyn).unwrap();
        let fifo = dir.join("rows");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        for format in [OutputFormat::Csv, OutputFormat::Ndjson] {
            let (tx, rx) = mpsc::channel();
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || {
                    let mut pipe = std::fs::File::open(&fifo).unwrap();
                    let mut buf = [0u8; 4096];
                    loop {
                        match pipe.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => tx.send(buf[..n].to_vec()).unwrap(),
                        }
                    }
                })
            };
            let mut w = open_writer(format, Some(&fifo), fields.clone()).unwrap();
            let mut seen = Vec::new();
            let mut take = |what: &str| {
                while !String::from_utf8_lossy(&seen).contains("198.18.0.7") {
                    let got = rx.recv_timeout(std::time::Duration::from_secs(5));
                    seen.extend(got.unwrap_or_else(|_| panic!("{format}: no {what} yet")));
                }
                std::mem::take(&mut seen)
            };
            w.write(&Reply::example()).unwrap();
            w.end_batch().unwrap();
            let first = take("row after the batch");
            assert!(String::from_utf8_lossy(&first).ends_with('\n'), "{format}");
            // Rendered apart (grab's threads): the batch ends with the copy.
            let mut renderer = w.renderer().unwrap();
            let mut rows = Vec::new();
            renderer.render(&Reply::example(), &mut rows).unwrap();
            w.write_rendered(&rows).unwrap();
            take("rendered row");
            w.finish().unwrap();
            reader.join().unwrap();
        }
        let file = dir.join("rows.csv");
        let mut w = open_writer(OutputFormat::Csv, Some(&file), fields).unwrap();
        w.write(&Reply::example()).unwrap();
        w.end_batch().unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            0,
            "a file is buffered"
        );
        w.finish().unwrap();
        assert!(std::fs::read_to_string(&file)
            .unwrap()
            .contains("198.18.0.7"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A row whose text needs quoting and escaping in both formats.
    struct Awkward;

    impl Row for Awkward {
        fn get(&self, name: &str) -> Value {
            match name {
                "saddr" => Value::Str("198.18.0.7".into()),
                "sport" => Value::Int(80),
                _ => Value::Str("a \"quoted\", comma\nand newline\u{7}".into()),
            }
        }
    }

    #[test]
    fn rows_rendered_apart_are_written_as_the_writer_writes_them() {
        let dir = std::env::temp_dir().join(format!("sonde-render-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fields = select_fields(
            Some("saddr,sport,classification"),
            crate::probe::ModuleKind::TcpSyn,
        )
        .unwrap();
        for format in [OutputFormat::Csv, OutputFormat::Ndjson] {
            let (direct, rendered) = (
                dir.join(format!("d.{format}")),
                dir.join(format!("r.{format}")),
            );
            let mut w = open_writer(format, Some(&direct), fields.clone()).unwrap();
            for _ in 0..3 {
                w.write(&Awkward).unwrap();
                w.write(&Reply::example()).unwrap();
            }
            w.finish().unwrap();
            let mut w = open_writer(format, Some(&rendered), fields.clone()).unwrap();
            let mut renderer = w.renderer().expect("a text format renders");
            let mut rows = Vec::new();
            for _ in 0..3 {
                renderer.render(&Awkward, &mut rows).unwrap();
                renderer.render(&Reply::example(), &mut rows).unwrap();
            }
            w.write_rendered(&rows).unwrap();
            w.finish().unwrap();
            let (a, b) = (
                std::fs::read(&direct).unwrap(),
                std::fs::read(&rendered).unwrap(),
            );
            assert_eq!(
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b),
                "{format}"
            );
            assert!(a.len() > 100, "{format}");
        }
        let parquet =
            open_writer(OutputFormat::Parquet, Some(&dir.join("p.parquet")), fields).unwrap();
        assert!(parquet.renderer().is_none(), "parquet rows become columns");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
