//! What an interrupted run leaves behind so `--resume` can finish it with no target missed and
//! none probed twice: the seed and validation key, the shard, and per sender thread the
//! cursor's position plus the targets it had taken but not yet handed to the kernel.
//!
//! It is written as soon as sending stops (a job scheduler's SIGKILL may follow SIGTERM within
//! seconds), and written again when the run ends, with the final counts.

use std::path::Path;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sonde_scan::targets::CursorState;

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
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a sonde checkpoint", path.display()))
    }

    /// Writes atomically: a crash while writing leaves the old file or none, never half of one.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }

    /// Refuses to resume into a different run, naming what differs.
    pub fn check_matches(&self, run: &RunIdentity) -> anyhow::Result<()> {
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
            complete: true,
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

    #[test]
    fn old_checkpoints_still_load() {
        let text = r#"{"seed":1,"key":[1,2],"module":"tcp_syn","targets":4,"shard":[0,1],"probes":1,"sent":2,"threads":[]}"#;
        let c: Checkpoint = serde_json::from_str(text).unwrap();
        assert_eq!((c.tool.as_str(), c.complete), ("scan", true));
    }
}
