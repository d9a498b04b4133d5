//! Running the `iptables` and `nft` commands that change the kernel's path, and undoing a list
//! of them: what path.rs (the changes), guard.rs (the fail-open guard, which undoes them if sonde
//! dies) and cleanup.rs share.

use std::process::{Command, Stdio};

use anyhow::{anyhow, bail};

/// Runs each command; all are tried, the first failure is returned.
pub(crate) fn undo(commands: &[Vec<String>]) -> anyhow::Result<()> {
    let mut first = Ok(());
    for cmd in commands {
        if let Err(e) = run(cmd) {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Whether `cmd` runs and exits 0 (a check: `iptables -C`, `nft list table`). A command that
/// cannot be started counts as a success: nothing is known to be missing.
pub(crate) fn succeeds(cmd: &[String]) -> bool {
    let Some((program, args)) = cmd.split_first() else {
        return true;
    };
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |s| s.success())
}

pub(crate) fn run(cmd: &[String]) -> anyhow::Result<()> {
    let (program, args) = cmd
        .split_first()
        .ok_or_else(|| anyhow!("an empty command"))?;
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow!("{program} is not installed: run scripts/setup")
            }
            _ => anyhow!("{program}: {e}"),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        bail!("`{}` failed: {err}", cmd.join(" "));
    }
    Ok(())
}
