//! Opening a file sonde writes (rows, captures, summaries, checkpoints, status files), the same
//! way for every tool:
//!
//! - `-` is standard output;
//! - an existing regular file is refused unless the user said to overwrite it (`--force`) or to
//!   add to it (`--append`): results are never overwritten silently;
//! - a symbolic link is never followed, not even with `--force` (`O_NOFOLLOW`): a link planted
//!   where sonde is told to write, in a shared folder such as /tmp, could point at any file of
//!   the user running sonde, often root;
//! - an existing file that is not a regular one (`/dev/null`, a FIFO, a terminal) is written as
//!   it is, never truncated or replaced. A device is taken as it is; a FIFO or socket only when
//!   the user running sonde owns it, or with `--force`: one made by another user would hand
//!   that user every row. A FIFO nobody reads is refused after two seconds (it is opened
//!   without blocking, and tried again meanwhile), rather than hold the run for good.
//!
//! Files are created with `O_CREAT | O_EXCL`, so a file that appears between the check and the
//! open is not overwritten either.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to do when the file already exists as a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfExists {
    /// Refuse: the default, so nothing is overwritten silently.
    Refuse,
    /// Truncate it (`--force`).
    Overwrite,
    /// Write at its end (`--append`).
    Append,
}

impl IfExists {
    /// `Overwrite` with `--force`, else `Refuse`.
    pub fn force(force: bool) -> IfExists {
        if force {
            IfExists::Overwrite
        } else {
            IfExists::Refuse
        }
    }
}

/// Why an output cannot be opened; each says in one line what to do.
#[derive(Debug)]
pub enum OpenError {
    Exists(PathBuf),
    Symlink(PathBuf),
    Directory(PathBuf),
    /// A FIFO or socket another user made (it would read every row).
    NotYours(PathBuf),
    /// A FIFO no process has open for reading.
    NoReader(PathBuf),
    Io(PathBuf, io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Exists(p) => write!(
                f,
                "{} exists: give another file name, or --force to overwrite it",
                p.display()
            ),
            OpenError::Symlink(p) => write!(
                f,
                "{} is a symbolic link: sonde does not write through links (one planted there could point at any file); give the file's own path",
                p.display()
            ),
            OpenError::Directory(p) => {
                write!(f, "{} is a directory: give a file name", p.display())
            }
            OpenError::NotYours(p) => write!(
                f,
                "{} is a FIFO or socket of another user, who would read every row: give a file of your own, or --force to write there anyway",
                p.display()
            ),
            OpenError::NoReader(p) => write!(
                f,
                "{} is a FIFO that nothing reads: start its reader first",
                p.display()
            ),
            OpenError::Io(p, e) => write!(f, "cannot write {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for OpenError {}

/// An opened output: standard output, or a file (regular or not).
pub enum Output {
    Stdout(io::Stdout),
    File(File),
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::Stdout(s) => s.write(buf),
            Output::File(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Output::Stdout(s) => s.lock().write_all(buf),
            Output::File(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File(f) => f.flush(),
        }
    }
}

/// True for `-` and `/dev/stdout` (a link to whatever standard output is: a terminal, a pipe,
/// a file), standard output.
pub fn is_stdout(path: &Path) -> bool {
    path == Path::new("-") || path == Path::new("/dev/stdout")
}

/// Opens `path` for writing, as the module docs say.
pub fn open(path: &Path, if_exists: IfExists) -> Result<Output, OpenError> {
    if is_stdout(path) {
        return Ok(Output::Stdout(io::stdout()));
    }
    match options(if_exists).create_new(true).open(path) {
        Ok(file) => return Ok(Output::File(file)),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(classify(path, e)),
    }
    // Something is there: a regular file (allowed or not), a link, a device, a FIFO…
    check(path, if_exists)?;
    let file = open_in_place(path, if_exists)?;
    // Judged again on what was opened: the name may have changed hands since the check.
    let meta = file.metadata().map_err(|e| OpenError::Io(path.into(), e))?;
    if meta.is_file() {
        match if_exists {
            IfExists::Refuse => return Err(OpenError::Exists(path.into())),
            IfExists::Overwrite => file.set_len(0).map_err(|e| OpenError::Io(path.into(), e))?,
            IfExists::Append => {}
        }
    }
    Ok(Output::File(file))
}

/// Says whether [`open`] would refuse `path`, creating nothing: for outputs written at the end
/// of a run (a summary, a checkpoint), so a run is refused before it starts, not after.
pub fn check(path: &Path, if_exists: IfExists) -> Result<(), OpenError> {
    if is_stdout(path) {
        return Ok(());
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(OpenError::Symlink(path.into())),
        Ok(m) if m.is_dir() => Err(OpenError::Directory(path.into())),
        Ok(m) if m.is_file() && if_exists == IfExists::Refuse => {
            Err(OpenError::Exists(path.into()))
        }
        Ok(m) if !is_taken_as_it_is(&m) && if_exists != IfExists::Overwrite => {
            Err(OpenError::NotYours(path.into()))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => check_folder(path),
        Err(e) => Err(OpenError::Io(path.into(), e)),
    }
}

/// Whether something that is there may be written without `--force` (regular files have
/// their own rule): a device (`/dev/null`, a terminal), or what the user running sonde owns.
fn is_taken_as_it_is(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let kind = meta.file_type();
    kind.is_file()
        || kind.is_char_device()
        || kind.is_block_device()
        || meta.uid() == nix::unistd::geteuid().as_raw()
}

/// How long a FIFO's writer waits for a reader (one started beside sonde, as in
/// `sonde scan -o pipe & reader < pipe`) before the FIFO is refused.
const READER_WAIT: Duration = Duration::from_secs(2);

/// Opens what is at `path` (checked) without truncating it. Without O_NONBLOCK a FIFO's
/// writer waits for a reader, for good if none comes; with it, no reader is ENXIO, which is
/// tried again for [`READER_WAIT`], then refused.
fn open_in_place(path: &Path, if_exists: IfExists) -> Result<File, OpenError> {
    let deadline = Instant::now() + READER_WAIT;
    loop {
        let opened = options(if_exists)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(path);
        match opened {
            Ok(file) => {
                blocking(&file).map_err(|e| OpenError::Io(path.into(), e))?;
                return Ok(file);
            }
            Err(e) if e.raw_os_error() == Some(nix::libc::ENXIO) => {
                if Instant::now() >= deadline {
                    return Err(OpenError::NoReader(path.into()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(classify(path, e)),
        }
    }
}

/// Clears the O_NONBLOCK the file was opened with: writes wait for room as a file's do.
fn blocking(file: &File) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// A file that does not exist yet can be made only in a folder that does.
fn check_folder(path: &Path) -> Result<(), OpenError> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(folder) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(OpenError::Io(
            path.into(),
            io::Error::new(ErrorKind::NotADirectory, "not a directory"),
        )),
        Err(e) => Err(OpenError::Io(path.into(), e)),
    }
}

/// Writes `bytes` as the whole content of `path` (a summary), opened as [`open`] does.
pub fn write_whole(path: &Path, bytes: &[u8], if_exists: IfExists) -> Result<(), OpenError> {
    let mut out = open(path, if_exists)?;
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| OpenError::Io(path.into(), e))
}

/// True when `path` names something that is written in place, never replaced: standard
/// output, or an existing file that is not a regular one (a device, a FIFO). A file that is
/// written by renaming a new one over it (a checkpoint) must not rename over these.
pub fn is_written_in_place(path: &Path) -> bool {
    is_stdout(path)
        || std::fs::symlink_metadata(path).is_ok_and(|m| {
            let kind = m.file_type();
            !kind.is_file() && !kind.is_dir() && !kind.is_symlink()
        })
}

fn options(if_exists: IfExists) -> OpenOptions {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .append(if_exists == IfExists::Append)
        .custom_flags(nix::libc::O_NOFOLLOW);
    options
}

fn classify(path: &Path, e: io::Error) -> OpenError {
    match e.raw_os_error() {
        // O_NOFOLLOW on a link.
        Some(nix::libc::ELOOP) => OpenError::Symlink(path.into()),
        Some(nix::libc::EISDIR) => OpenError::Directory(path.into()),
        _ => OpenError::Io(path.into(), e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    /// A scratch folder, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir()
                .join(format!("sonde-output-file-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(path: &Path, if_exists: IfExists, text: &str) -> Result<(), OpenError> {
        write_whole(path, text.as_bytes(), if_exists)
    }

    fn read(path: &Path) -> String {
        let mut s = String::new();
        File::open(path).unwrap().read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn a_new_file_is_created_and_an_existing_one_needs_force_or_append() {
        let dir = Scratch::new("exists");
        let file = dir.path("out.csv");
        write(&file, IfExists::Refuse, "first\n").unwrap();
        let err = write(&file, IfExists::Refuse, "second\n").unwrap_err();
        assert!(matches!(err, OpenError::Exists(_)), "{err}");
        assert!(err.to_string().contains("--force"), "{err}");
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(check(&file, IfExists::Refuse).is_err());
        assert_eq!(read(&file), "first\n", "a refused file was touched");
        write(&file, IfExists::Append, "more\n").unwrap();
        assert_eq!(read(&file), "first\nmore\n");
        check(&file, IfExists::Overwrite).unwrap();
        write(&file, IfExists::Overwrite, "new\n").unwrap();
        assert_eq!(read(&file), "new\n", "--force must truncate");
    }

    #[test]
    fn a_planted_symlink_is_never_followed_even_with_force() {
        let dir = Scratch::new("symlink");
        let victim = dir.path("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.path("out.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let dangling = dir.path("dangling.json");
        std::os::unix::fs::symlink(dir.path("nothing-here"), &dangling).unwrap();
        for how in [IfExists::Refuse, IfExists::Overwrite, IfExists::Append] {
            for path in [&link, &dangling] {
                let err = write(path, how, "planted\n").unwrap_err();
                assert!(matches!(err, OpenError::Symlink(_)), "{how:?}: {err}");
                assert!(check(path, how).is_err(), "{how:?}");
            }
        }
        assert_eq!(read(&victim), "precious\n", "the link's target changed");
        assert!(
            !dir.path("nothing-here").exists(),
            "a dangling link was followed"
        );
    }

    #[test]
    fn devices_are_written_as_they_are() {
        for how in [IfExists::Refuse, IfExists::Overwrite, IfExists::Append] {
            check(Path::new("/dev/null"), how).unwrap();
            write(Path::new("/dev/null"), how, "discarded\n").unwrap();
        }
        assert!(is_written_in_place(Path::new("/dev/null")));
        assert!(is_written_in_place(Path::new("-")));
        assert!(is_stdout(Path::new("/dev/stdout")), "a link, but to stdout");
        assert!(matches!(
            open(Path::new("-"), IfExists::Refuse),
            Ok(Output::Stdout(_))
        ));
    }

    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = Scratch::new("fifo");
        let fifo = dir.path("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipping: mkfifo failed");
            return;
        }
        assert!(is_written_in_place(&fifo));
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || read(&fifo))
        };
        write(&fifo, IfExists::Refuse, "through the pipe\n").unwrap();
        assert_eq!(reader.join().unwrap(), "through the pipe\n");
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the FIFO was replaced");
    }

    /// `mkfifo PATH`; false (the test then skips) when it cannot be made.
    fn mkfifo(path: &Path) -> bool {
        let made = std::process::Command::new("mkfifo").arg(path).status();
        made.is_ok_and(|s| s.success())
    }

    /// `open` of `path` on a thread of its own, given `wait` to return: None if it did not
    /// (it blocks; the thread is left behind).
    fn open_within(path: &Path, how: IfExists, wait: std::time::Duration) -> Option<bool> {
        let (done, result) = std::sync::mpsc::channel();
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let opened = open(&path, how);
            let _ = done.send(opened.map(drop));
        });
        let outcome = result.recv_timeout(wait).ok()?;
        if let Err(e) = &outcome {
            let text = e.to_string();
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(text.contains(&path_name(e)), "{text}");
        }
        Some(outcome.is_ok())
    }

    fn path_name(e: &OpenError) -> String {
        match e {
            OpenError::Exists(p)
            | OpenError::Symlink(p)
            | OpenError::Directory(p)
            | OpenError::NotYours(p)
            | OpenError::NoReader(p)
            | OpenError::Io(p, _) => p.display().to_string(),
        }
    }

    /// A FIFO nobody reads used to block the run for good (a scan hung before its first
    /// probe): it is refused within seconds, in one line.
    #[test]
    fn a_fifo_nobody_reads_is_refused_within_seconds() {
        let dir = Scratch::new("fifo-unread");
        let fifo = dir.path("pipe");
        if !mkfifo(&fifo) {
            eprintln!("skipping: mkfifo failed");
            return;
        }
        let wait = READER_WAIT + std::time::Duration::from_secs(3);
        assert_eq!(
            open_within(&fifo, IfExists::Refuse, wait),
            Some(false),
            "open blocked on a FIFO with no reader"
        );
    }

    /// Another user's FIFO (or socket) at -o hands every row to that user: only with --force.
    /// A device (/dev/null) and the user's own FIFO need nothing.
    #[test]
    fn another_users_fifo_needs_force() {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
            eprintln!("skipping: giving a FIFO to another user needs root");
            return;
        }
        let dir = Scratch::new("fifo-owner");
        let fifo = dir.path("pipe");
        if !mkfifo(&fifo) {
            eprintln!("skipping: mkfifo failed");
            return;
        }
        let nobody = std::process::Command::new("chown")
            .args(["nobody"])
            .arg(&fifo)
            .status();
        assert!(nobody.is_ok_and(|s| s.success()), "chown nobody");
        let err = check(&fifo, IfExists::Refuse).unwrap_err().to_string();
        assert!(err.contains("--force") && err.lines().count() == 1, "{err}");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || read(&fifo))
        };
        let wait = READER_WAIT + std::time::Duration::from_secs(3);
        assert_eq!(open_within(&fifo, IfExists::Refuse, wait), Some(false));
        write(&fifo, IfExists::Overwrite, "forced\n").unwrap();
        assert_eq!(reader.join().unwrap(), "forced\n");
        check(Path::new("/dev/null"), IfExists::Refuse).unwrap();
    }

    #[test]
    fn folders_and_missing_folders_are_refused_in_one_line() {
        let dir = Scratch::new("folders");
        let err = check(&dir.0, IfExists::Overwrite).unwrap_err();
        assert!(matches!(err, OpenError::Directory(_)), "{err}");
        let err = write(&dir.0, IfExists::Overwrite, "x").unwrap_err();
        assert!(matches!(err, OpenError::Directory(_)), "{err}");
        let missing = dir.path("no-such-folder/out.json");
        let err = check(&missing, IfExists::Refuse).unwrap_err();
        assert!(err.to_string().starts_with("cannot write"), "{err}");
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(write(&missing, IfExists::Refuse, "x").is_err());
        check(&dir.path("new.json"), IfExists::Refuse).unwrap();
        assert!(!dir.path("new.json").exists(), "check created the file");
        assert!(!is_written_in_place(&dir.path("new.json")));
    }
}
