//! What an interrupted scan leaves behind so `--resume` can finish it with no target missed and
//! none probed twice: the seed and key, the shard, and per sender thread the cursor's position
//! plus the targets it had taken from the cursor but not yet handed to the kernel.

use std::path::Path;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use sonde_scan::targets::CursorState;

use super::ScanPlan;

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Checkpoint {
    pub seed: u64,
    pub key: [u64; 2],
    pub module: String,
    pub targets: u64,
    pub shard: (u32, u32),
    pub probes: u32,
    pub sent: u64,
    pub threads: Vec<ThreadCheckpoint>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ThreadCheckpoint {
    pub cursor: CursorState,
    /// Target indexes taken from the cursor but not sent (with repeats for --probes).
    pub pending: Vec<u64>,
    /// Targets handed out so far by this thread (for --max-targets).
    pub taken: u64,
}

impl Checkpoint {
    pub fn load(path: &Path) -> anyhow::Result<Checkpoint> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading checkpoint {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a sonde scan checkpoint", path.display()))
    }

    /// Writes atomically: a crash while writing leaves the old file or none, never half of one.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }

    /// Refuses to resume into a different scan.
    pub fn check_matches(&self, plan: &ScanPlan) -> anyhow::Result<()> {
        let ok = self.targets == plan.space.len()
            && self.module == plan.module_kind.name()
            && self.shard == plan.shard
            && self.probes == plan.probes
            && self.threads.len() == plan.threads as usize;
        if !ok {
            bail!(
                "the checkpoint is of another scan ({} targets, {}, shard {:?}, {} threads): resume with the same targets, module, shards, --probes and --threads",
                self.targets,
                self.module,
                self.shard,
                self.threads.len()
            );
        }
        Ok(())
    }
}
