//! Names per target for `sonde grab -I` (`address[:port],name` lines): reading them, and the
//! target file of each round a target with several names needs (the rounds share one output
//! through `sonde_engine::grab::rounds`).

use std::io::Write;

use anyhow::Context;
use sonde_apps::TargetNames;
pub use sonde_engine::grab::rounds::{Refused, SharedWriter};

use crate::runargs::RunArgs;

/// The names of `-I`'s lines, if any line has one.
pub fn read(run: &RunArgs) -> anyhow::Result<Option<TargetNames>> {
    let Some(path) = run.input_file.as_deref() else {
        return Ok(None);
    };
    let list = sonde_scan::targets::read_target_list(path)?;
    let names = TargetNames::new(&list.names);
    if names.is_empty() {
        return Ok(None);
    }
    if run.resume.is_some() && names.most_per_target() > 1 {
        anyhow::bail!(
            "--resume cannot go on with several names for one target ({}): run the grab again without --resume",
            path.display()
        );
    }
    Ok(Some(names))
}

/// A target file of the round's targets, removed when dropped.
pub struct RoundFile(std::path::PathBuf);

impl Drop for RoundFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The run arguments of round `round` (≥ 1): only the targets that have a `round`-th name.
pub fn round_targets(
    run: &RunArgs,
    names: &TargetNames,
    round: usize,
) -> anyhow::Result<(RunArgs, RoundFile)> {
    let path = std::env::temp_dir().join(format!(
        "sonde-grab-names-{}-round-{round}.txt",
        std::process::id()
    ));
    let file = RoundFile(path.clone());
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path)
            .with_context(|| format!("cannot write the round's targets to {}", path.display()))?,
    );
    for (addr, port) in names.targets_of_round(round) {
        match (addr, port) {
            (std::net::IpAddr::V6(v6), Some(port)) => writeln!(out, "[{v6}]:{port}")?,
            (addr, Some(port)) => writeln!(out, "{addr}:{port}")?,
            (addr, None) => writeln!(out, "{addr}")?,
        }
    }
    out.flush()?;
    let args = RunArgs {
        targets: Vec::new(),
        input_file: Some(path),
        ..run.clone()
    };
    Ok((args, file))
}

/// A target file of `targets` (address:port lines) and run arguments that grab only them.
pub fn target_file(
    run: &RunArgs,
    targets: &[(std::net::IpAddr, u16)],
    label: &str,
) -> anyhow::Result<(RunArgs, RoundFile)> {
    let path = std::env::temp_dir().join(format!("sonde-grab-{label}-{}.txt", std::process::id()));
    let file = RoundFile(path.clone());
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path)
            .with_context(|| format!("cannot write the retry's targets to {}", path.display()))?,
    );
    for (addr, port) in targets {
        match addr {
            std::net::IpAddr::V6(v6) => writeln!(out, "[{v6}]:{port}")?,
            v4 => writeln!(out, "{v4}:{port}")?,
        }
    }
    out.flush()?;
    let args = RunArgs {
        targets: Vec::new(),
        input_file: Some(path),
        ..run.clone()
    };
    Ok((args, file))
}
