//! What an interrupted run leaves behind so `--resume` can finish it with no target missed and
//! none probed twice: the seed and validation key, the shard, and per sender thread the
//! cursor's position plus the targets it had taken but not yet handed to the kernel.
//!
//! It is written as soon as sending stops (a job scheduler's SIGKILL may follow SIGTERM within
//! seconds), and written again when the run ends, with the final counts. A resumed run that
//! goes on to its end marks it `complete`, and a complete checkpoint is never resumed again: a
//! retried job script cannot probe the rest twice.
//!
//! By default it goes next to the run's output file (`results.csv.checkpoint.json`), so runs
//! in one folder (the shards of one scan, say) never write the same one; when the rows go to
//! stdout or a device, to `sonde-scan.checkpoint.json` (or `sonde-grab…`) in the working folder.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sonde_meter::output_file::{self, IfExists, OpenError};
use sonde_scan::targets::CursorState;

/// Where the checkpoint of a `tool` run writing to `output` goes unless `--checkpoint` says.
pub fn default_path(tool: &str, output: Option<&Path>) -> PathBuf {
    match output {
        Some(out) if !output_file::is_written_in_place(out) => {
            let mut name = out.as_os_str().to_owned();
            name.push(".checkpoint.json");
            PathBuf::from(name)
        }
        _ => PathBuf::from(format!("sonde-{tool}.checkpoint.json")),
    }
}

/// Checks, before a run starts, that its checkpoint may be written at `path` when it is
/// interrupted: not over another run's checkpoint (or any file) unless `force`, never through
/// a symbolic link. The checkpoint being resumed may be updated.
pub fn check_writable(path: &Path, force: bool, resuming: Option<&Path>) -> anyhow::Result<()> {
    if resuming.is_some_and(|r| same_file(r, path)) {
        return Ok(());
    }
    match output_file::check(path, IfExists::force(force)) {
        Err(OpenError::Exists(_)) => bail!(
            "checkpoint {p} exists (an interrupted run's): resume it with --resume {p}, give another --checkpoint, or --force to overwrite it",
            p = path.display()
        ),
        other => Ok(other?),
    }
}

/// Saves `done`, a complete checkpoint, at `path`, and over `resumed` too when that is another
/// file (the checkpoint the run resumed, which must not be resumed again either).
pub fn save_complete(done: &Checkpoint, path: &Path, resumed: Option<&Path>) -> anyhow::Result<()> {
    done.save(path)?;
    match resumed {
        Some(from) if !same_file(from, path) => done.save(from),
        _ => Ok(()),
    }
}

/// Creates `path` (never through a link, never over a file), writes `bytes` and syncs them to
/// the disk.
fn write_synced(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = output_file::open(path, IfExists::Refuse)?;
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .and_then(|()| match &out {
            output_file::Output::File(file) => file.sync_all(),
            output_file::Output::Stdout(_) => Ok(()),
        })
        .with_context(|| format!("writing {}", path.display()))
}

/// Syncs the folder of `path`, so a rename into it survives a crash.
fn sync_folder_of(path: &Path) -> anyhow::Result<()> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(folder)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing the folder of {}", path.display()))
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// `scan` or `grab`.
    #[serde(default = "scan_tool")]
    pub tool: String,
    pub seed: u64,
    pub key: [u64; 2],
    pub module: String,
    pub targets: u64,
    pub shard: (u32, u32),
    pub probes: u32,
    /// Probes sent before the interrupt, over every run of this scan so far.
    pub sent: u64,
    pub threads: Vec<ThreadCheckpoint>,
    /// False while the run that wrote it was still receiving (cooldown not finished).
    #[serde(default = "yes")]
    pub receiving_done: bool,
    /// True once the run is over: every target of the shard probed and its replies received.
    /// Nothing is left to resume.
    #[serde(default)]
    pub complete: bool,
}

fn scan_tool() -> String {
    "scan".into()
}

fn yes() -> bool {
    true
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ThreadCheckpoint {
    pub cursor: CursorState,
    /// Target indexes taken from the cursor but not sent (with repeats for --probes).
    pub pending: Vec<u64>,
    /// Targets handed out so far by this thread (for --max-targets).
    pub taken: u64,
}

/// What a checkpoint must agree with to be resumed by a run.
#[derive(Clone, Debug)]
pub struct RunIdentity<'a> {
    pub tool: &'a str,
    pub module: &'a str,
    pub targets: u64,
    pub shard: (u32, u32),
    pub probes: u32,
    pub threads: u32,
    /// `--seed` as given again (None: not given, the checkpoint's is used).
    pub seed: Option<u64>,
}

impl Checkpoint {
    pub fn load(path: &Path) -> anyhow::Result<Checkpoint> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading checkpoint {}", path.display()))?;
        let mut value: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a sonde checkpoint", path.display()))?;
        // Before `receiving_done`, `complete` said what it says now; a checkpoint of that time
        // was written only by a run that stopped early.
        if let Some(fields) = value.as_object_mut() {
            if !fields.contains_key("receiving_done") {
                let received = fields.remove("complete").unwrap_or(true.into());
                fields.insert("receiving_done".into(), received);
                fields.insert("complete".into(), false.into());
            }
        }
        serde_json::from_value(value)
            .with_context(|| format!("{} is not a sonde checkpoint", path.display()))
    }

    /// Writes atomically and durably: a crash while writing (or a power cut after) leaves the
    /// old file or the new one, never half of one. The new file is made beside it (never
    /// through a link), synced, renamed over it (which replaces a link rather than follow
    /// it), and the folder synced; a failure removes the new file. A device or FIFO
    /// (`--checkpoint /dev/null`) is written in place, never replaced.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        write_durably(path, &text)
    }

    /// Refuses to resume a run that is complete, or into a different run, naming what
    /// differs.
    pub fn check_matches(&self, run: &RunIdentity) -> anyhow::Result<()> {
        if self.complete {
            bail!(
                "the checkpoint is complete: its {} went to the end, nothing is left to resume (start a new run without --resume)",
                self.tool
            );
        }
        let mut differs = Vec::new();
        if self.tool != run.tool {
            differs.push(format!("it is a {} checkpoint", self.tool));
        }
        if self.targets != run.targets {
            differs.push(format!("{} targets, not {}", self.targets, run.targets));
        }
        if self.module != run.module {
            differs.push(format!("module {}, not {}", self.module, run.module));
        }
        if self.shard != run.shard {
            differs.push(format!(
                "shard {} of {}, not {} of {}",
                self.shard.0, self.shard.1, run.shard.0, run.shard.1
            ));
        }
        if self.probes != run.probes {
            differs.push(format!("--probes {}, not {}", self.probes, run.probes));
        }
        if self.threads.len() != run.threads as usize {
            differs.push(format!(
                "--threads {}, not {}",
                self.threads.len(),
                run.threads
            ));
        }
        if run.seed.is_some_and(|s| s != self.seed) {
            differs.push(format!(
                "--seed {}, not {}",
                self.seed,
                run.seed.unwrap_or(0)
            ));
        }
        if !differs.is_empty() {
            bail!(
                "the checkpoint is of another run ({}): resume with the same targets and options, or leave them out to use the checkpoint's",
                differs.join("; ")
            );
        }
        Ok(())
    }
}

/// Writes `text` to `path` as [`Checkpoint::save`] does: atomically and durably, a device or
/// FIFO in place. For any run's checkpoint (`sonde dns` keeps its own form).
pub fn write_durably(path: &Path, text: &str) -> anyhow::Result<()> {
    if output_file::is_written_in_place(path) {
        return Ok(output_file::write_whole(
            path,
            text.as_bytes(),
            IfExists::Overwrite,
        )?);
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    // A leftover of a crashed run that had this pid (unlinking never follows a link).
    let _ = std::fs::remove_file(&tmp);
    let saved = write_synced(&tmp, text.as_bytes())
        .and_then(|()| {
            std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
        })
        .and_then(|()| sync_folder_of(path));
    if saved.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    saved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            tool: "scan".into(),
            seed: 7,
            key: [1, 2],
            module: "tcp_syn".into(),
            targets: 100,
            shard: (0, 1),
            probes: 1,
            sent: 40,
            threads: vec![],
            receiving_done: true,
            complete: false,
        }
    }

    fn identity() -> RunIdentity<'static> {
        RunIdentity {
            tool: "scan",
            module: "tcp_syn",
            targets: 100,
            shard: (0, 1),
            probes: 1,
            threads: 0,
            seed: None,
        }
    }

    #[test]
    fn a_conflicting_option_is_named() {
        let c = checkpoint();
        c.check_matches(&identity()).unwrap();
        c.check_matches(&RunIdentity {
            seed: Some(7),
            ..identity()
        })
        .unwrap();
        let err = c
            .check_matches(&RunIdentity {
                seed: Some(8),
                ..identity()
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("--seed 7, not 8"), "{err}");
        let err = c
            .check_matches(&RunIdentity {
                module: "udp",
                targets: 5,
                ..identity()
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("5") && err.contains("module tcp_syn"), "{err}");
    }

    /// A scratch folder, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("sonde-ck-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_default_goes_next_to_the_output_file() {
        assert_eq!(
            default_path("scan", Some(Path::new("out/results.csv"))),
            Path::new("out/results.csv.checkpoint.json")
        );
        for rows_elsewhere in [None, Some(Path::new("-")), Some(Path::new("/dev/null"))] {
            assert_eq!(
                default_path("grab", rows_elsewhere),
                Path::new("sonde-grab.checkpoint.json")
            );
        }
    }

    #[test]
    fn saving_replaces_a_planted_link_and_never_writes_through_it() {
        let dir = Scratch::new("link");
        let victim = dir.0.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let path = dir.0.join("ck.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let err = check_writable(&path, true, None).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        checkpoint().save(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(Checkpoint::load(&path).unwrap(), checkpoint());
        let left: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
        assert_eq!(left.len(), 2, "a temporary file was left behind");
    }

    #[test]
    fn another_runs_checkpoint_needs_force_but_the_resumed_one_may_be_updated() {
        let dir = Scratch::new("exists");
        let path = dir.0.join("ck.json");
        check_writable(&path, false, None).unwrap();
        checkpoint().save(&path).unwrap();
        let err = check_writable(&path, false, None).unwrap_err().to_string();
        assert!(err.contains("--resume") && err.contains("--force"), "{err}");
        assert_eq!(err.lines().count(), 1);
        check_writable(&path, true, None).unwrap();
        check_writable(&path, false, Some(&path)).unwrap();
        check_writable(&path, false, Some(&dir.0.join(".").join("ck.json"))).unwrap();
    }

    #[test]
    fn a_fifo_is_written_in_place_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = Scratch::new("fifo");
        let fifo = dir.0.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipping: mkfifo failed");
            return;
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        checkpoint().save(&fifo).unwrap();
        let text = reader.join().unwrap();
        assert_eq!(
            serde_json::from_str::<Checkpoint>(&text).unwrap(),
            checkpoint()
        );
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the FIFO was replaced by a file");
    }

    /// A small tmpfs mounted on a scratch folder (a disk that fills), unmounted and removed on
    /// drop, also when the test fails. None without root.
    struct SmallDisk(PathBuf);

    impl SmallDisk {
        fn mount(name: &str) -> Option<SmallDisk> {
            use std::os::unix::fs::MetadataExt;
            let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
            if !root {
                eprintln!("skipping: mounting a tmpfs needs root");
                return None;
            }
            let dir =
                std::env::temp_dir().join(format!("sonde-disk-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let disk = SmallDisk(dir);
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "sonde-test"])
                .arg(&disk.0)
                .status()
                .unwrap();
            assert!(mounted.success(), "mount -t tmpfs failed");
            Some(disk)
        }

        /// Fills the disk to the last byte.
        fn fill(&self) {
            use std::io::Write;
            let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
            let block = [0u8; 4096];
            while f.write_all(&block).is_ok() {}
            let _ = f.write_all(&[0]);
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    /// A full disk: the save fails in one line, and leaves neither a temporary file nor a
    /// half-written checkpoint.
    #[test]
    fn a_full_disk_leaves_no_temporary_file() {
        let Some(disk) = SmallDisk::mount("full") else {
            return;
        };
        let path = disk.0.join("ck.json");
        checkpoint().save(&path).unwrap();
        disk.fill();
        let big = Checkpoint {
            module: "x".repeat(256 * 1024),
            ..checkpoint()
        };
        let err = big.save(&path).unwrap_err();
        assert!(format!("{err:#}").contains("ck.json"), "{err:#}");
        let mut left: Vec<String> = std::fs::read_dir(&disk.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["ck.json", "filler"], "a temporary file was left");
        assert_eq!(
            Checkpoint::load(&path).unwrap(),
            checkpoint(),
            "the old one stays"
        );
    }

    #[test]
    fn old_checkpoints_still_load() {
        let dir = Scratch::new("old");
        let path = dir.0.join("ck.json");
        let oldest = r#"{"seed":1,"key":[1,2],"module":"tcp_syn","targets":4,"shard":[0,1],"probes":1,"sent":2,"threads":[]}"#;
        std::fs::write(&path, oldest).unwrap();
        let c = Checkpoint::load(&path).unwrap();
        assert_eq!(
            (c.tool.as_str(), c.receiving_done, c.complete),
            ("scan", true, false)
        );
        // `complete` once meant that the cooldown was over: such a run still has targets left.
        let received = oldest.replace("\"threads\":[]", "\"threads\":[],\"complete\":true");
        std::fs::write(&path, received).unwrap();
        let c = Checkpoint::load(&path).unwrap();
        assert_eq!((c.receiving_done, c.complete), (true, false));
        c.check_matches(&RunIdentity {
            targets: 4,
            ..identity()
        })
        .unwrap();
    }

    /// A resumed run that went to its end left its checkpoint as it was, so running the same
    /// command again (a retried job) probed the rest a second time.
    #[test]
    fn a_complete_checkpoint_is_not_resumed() {
        let done = Checkpoint {
            complete: true,
            ..checkpoint()
        };
        let err = done.check_matches(&identity()).unwrap_err().to_string();
        assert!(
            err.contains("complete") && err.contains("without --resume"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1);
        let dir = Scratch::new("complete");
        let path = dir.0.join("ck.json");
        done.save(&path).unwrap();
        assert!(Checkpoint::load(&path).unwrap().complete);
    }
}
