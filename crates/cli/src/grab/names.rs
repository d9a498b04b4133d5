//! Names per target for `sonde grab -I` (`address[:port],name` lines): reading them, and the
//! targets of each round a target with several names needs, kept in memory (the rounds share
//! one output through `sonde_engine::grab::rounds`).

use std::net::IpAddr;

use sonde_apps::TargetNames;
pub use sonde_engine::grab::rounds::{Refused, SharedWriter};
use sonde_scan::targets::TargetList;

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

/// The run arguments of round `round` (≥ 1): only the targets that have a `round`-th name.
/// The list stays in memory: a file in a shared folder could be read, replaced or linked to
/// another file by any user of the host between its write and its read.
pub fn round_targets(run: &RunArgs, names: &TargetNames, round: usize) -> RunArgs {
    listed(run, names.targets_of_round(round))
}

/// Run arguments that grab only `targets` (the TLS 1.0 retry's), from a list in memory.
pub fn target_list(run: &RunArgs, targets: &[(IpAddr, u16)]) -> RunArgs {
    listed(run, targets.iter().map(|&(addr, port)| (addr, Some(port))))
}

/// `run` with `targets` in place of its targets and -I, as an -I file of `address[:port]`
/// lines would give them: every address over every port named (or -p, or the default).
fn listed(run: &RunArgs, targets: impl Iterator<Item = (IpAddr, Option<u16>)>) -> RunArgs {
    let mut list = TargetList::default();
    for (addr, port) in targets {
        list.tokens.push(addr.to_string());
        list.ports.extend(port);
    }
    list.ports.sort_unstable();
    list.ports.dedup();
    RunArgs {
        targets: Vec::new(),
        input_file: None,
        input_list: Some(list),
        ..run.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        run: RunArgs,
    }

    fn run_args(args: &[&str]) -> RunArgs {
        Line::parse_from(std::iter::once("sonde").chain(args.iter().copied())).run
    }

    /// The TLS 1.0 retry's list went to /tmp/sonde-grab-legacy-PID.txt, through any link
    /// planted there (another user of the host could point it at root's files), and each
    /// round's to /tmp/sonde-grab-names-PID-round-N.txt: the lists stay in memory now.
    #[test]
    fn a_retry_list_never_goes_through_a_planted_link() {
        let scratch = std::env::temp_dir().join(format!("sonde-names-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let victim = scratch.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let planted =
            std::env::temp_dir().join(format!("sonde-grab-legacy-{}.txt", std::process::id()));
        let _ = std::fs::remove_file(&planted);
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let run = run_args(&["198.18.0.0/24", "-I", "list.txt"]);
        let targets = ["198.18.0.7", "2001:2::9"].map(|a| (a.parse().unwrap(), 443));
        let round = target_list(&run, &targets);
        let after = std::fs::read_to_string(&victim).unwrap();
        let _ = std::fs::remove_file(&planted);
        let _ = std::fs::remove_dir_all(&scratch);
        assert_eq!(after, "precious\n", "written through the planted link");
        assert_eq!(round.input_file, None, "the round's list went to a file");
        assert!(
            round.targets.is_empty(),
            "the command line's targets stay out"
        );
        let list = round.input_list.unwrap();
        assert_eq!(list.tokens, ["198.18.0.7", "2001:2::9"]);
        assert_eq!(list.ports, [443]);
    }

    #[test]
    fn a_round_lists_the_targets_that_have_that_many_names() {
        let named = |addr: &str, port: Option<u16>, name: &str| sonde_scan::targets::NamedTarget {
            addr: addr.parse().unwrap(),
            port,
            name: name.into(),
        };
        let names = TargetNames::new(&[
            named("198.18.0.1", Some(80), "a.example"),
            named("198.18.0.1", Some(80), "b.example"),
            named("198.18.0.2", None, "c.example"),
            named("198.18.0.2", None, "d.example"),
            named("198.18.0.3", Some(8080), "e.example"),
        ]);
        let round = round_targets(&run_args(&["-I", "names.txt"]), &names, 1);
        let mut list = round.input_list.unwrap();
        list.tokens.sort();
        assert_eq!(list.tokens, ["198.18.0.1", "198.18.0.2"]);
        assert_eq!(list.ports, [80], "the ports the round's lines name");
        assert_eq!(round.input_file, None);
    }
}
