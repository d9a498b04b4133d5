//! Which shard this machine scans, from the command line or from the batch scheduler that started
//! it (Slurm job arrays, Kubernetes indexed jobs).

use anyhow::{anyhow, bail, ensure, Context, Result};

/// `(shard, shards)`, 0-based, from `--shards N` / `--shard I` or the environment; `None` means
/// an unsharded scan. See `shard_from_vars`.
pub fn shard_from_env(shards: Option<u32>, shard: Option<u32>) -> Result<Option<(u32, u32)>> {
    shard_from_vars(shards, shard, |name| std::env::var(name).ok())
}

/// Like `shard_from_env` with the environment lookup injected (for tests). In order:
/// - `--shards N --shard I`: as given.
/// - a Slurm array task (`SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`, and `_MIN`/`_STEP`
///   when present): shard `(ID - MIN) / STEP` of `COUNT`; a `--shards N` must agree.
/// - a Kubernetes indexed job (`JOB_COMPLETION_INDEX`): it has no count variable, so `--shards
///   N` is required.
/// - otherwise unsharded; `--shards` alone, or `--shard` alone, is an error.
pub fn shard_from_vars(
    shards: Option<u32>,
    shard: Option<u32>,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<(u32, u32)>> {
    let found = match (shard, shards) {
        (Some(i), Some(n)) => Some((i, n)),
        (Some(i), None) => bail!("--shard {i} needs --shards N"),
        (None, shards) => from_scheduler(shards, &var)?,
    };
    if let Some((i, n)) = found {
        ensure!(n >= 1, "--shards must be at least 1");
        ensure!(
            i < n,
            "shard {i} is not in 0..{n} (shards are numbered from 0)"
        );
    }
    Ok(found)
}

fn from_scheduler(
    shards: Option<u32>,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Option<(u32, u32)>> {
    if let Some((index, count)) = slurm_array(var)? {
        if let Some(n) = shards.filter(|&n| n != count) {
            bail!("--shards {n} disagrees with SLURM_ARRAY_TASK_COUNT={count}");
        }
        return Ok(Some((index, count)));
    }
    if let Some(index) = number(var, "JOB_COMPLETION_INDEX")? {
        let n = shards.ok_or_else(|| {
            anyhow!(
                "JOB_COMPLETION_INDEX={index} is set (Kubernetes indexed job) but the shard count \
                 is not: pass --shards N, N being the job's completions"
            )
        })?;
        return Ok(Some((index, n)));
    }
    match shards {
        Some(n) => bail!(
            "--shards {n} needs --shard I (or a Slurm array or Kubernetes indexed job to supply it)"
        ),
        None => Ok(None),
    }
}

/// `(index, count)` of a Slurm array task. Task ids need not start at 0 (`--array=1-8`) or be
/// consecutive (`--array=0-30:3`), so the index is the task's rank in the array.
fn slurm_array(var: &impl Fn(&str) -> Option<String>) -> Result<Option<(u32, u32)>> {
    let Some(id) = number(var, "SLURM_ARRAY_TASK_ID")? else {
        return Ok(None);
    };
    let count = number(var, "SLURM_ARRAY_TASK_COUNT")?
        .context("SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not")?;
    let min = number(var, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = number(var, "SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let rank = id
        .checked_sub(min)
        .filter(|from_min| from_min % step == 0)
        .map(|d| d / step);
    match rank {
        Some(index) if index < count => Ok(Some((index, count))),
        _ => bail!(
            "Slurm array task {id} is not one of {count} evenly spaced tasks from {min}: \
             use a range such as --array=0-{}",
            count.saturating_sub(1)
        ),
    }
}

fn number(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<u32>> {
    match var(name) {
        None => Ok(None),
        Some(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| anyhow!("{name}={text:?} is not a non-negative integer")),
    }
}
