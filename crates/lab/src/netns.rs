//! The lab's namespaces (scan and net; or a, mid and b for a bridge lab): names, finding them
//! (and a lab's recorded status once they are whole), and entering them.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{anyhow, bail, Result};
use nix::sched::{setns, CloneFlags};

use crate::cmd::spawn_error;
use crate::config::{validate_name, LabStatus};
use crate::state;

/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";

pub(crate) fn scan_ns(name: &str) -> String {
    format!("sonde-{name}-scan")
}

pub(crate) fn net_ns(name: &str) -> String {
    format!("sonde-{name}-net")
}

/// The namespace of host A in bridge lab `name`.
pub fn a_ns(name: &str) -> String {
    format!("sonde-{name}-a")
}

/// The middle namespace of bridge lab `name`.
pub fn mid_ns(name: &str) -> String {
    format!("sonde-{name}-mid")
}

/// The namespace of host B in bridge lab `name`.
pub fn b_ns(name: &str) -> String {
    format!("sonde-{name}-b")
}

/// The three namespaces of bridge lab `name`, A, mid, B.
pub(crate) fn all_ns(name: &str) -> [String; 3] {
    [a_ns(name), mid_ns(name), b_ns(name)]
}

/// Whether anything of bridge lab `name` exists: a namespace or its state file.
pub fn bridge_exists(name: &str) -> bool {
    all_ns(name).iter().any(|ns| ns_exists(ns)) || state::is_bridge(name)
}

/// The status of lab `name` as `up` recorded it, after checking it is whole.
pub fn status(name: &str) -> Result<LabStatus> {
    let st = state::load_opt(name)?;
    let whole = ns_exists(&scan_ns(name)) && ns_exists(&net_ns(name));
    if st.is_none() && bridge_exists(name) {
        bail!("lab {name:?} is a bridge lab (A — mid — B), not a scanner lab; see: sonde lab status --name {name}");
    }
    let path_whole = |st: &LabStatus| st.path.is_none() || ns_exists(&crate::path::path_ns(name));
    match st {
        Some(st) if whole && path_whole(&st) => Ok(st),
        None if !ns_exists(&scan_ns(name)) && !ns_exists(&net_ns(name)) => {
            bail!("lab {name:?} is not up (start it with: sonde lab up --name {name})")
        }
        _ => bail!("lab {name:?} is half-made; remove it with: sonde lab down --name {name}"),
    }
}

pub(crate) fn ns_path(ns: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(ns)
}

pub(crate) fn ns_exists(ns: &str) -> bool {
    ns_path(ns).exists()
}

/// What a lab's namespace names end with: scan and net, or a bridge lab's a, mid and b, and
/// either kind's path. No suffix ends another, so a namespace name belongs to one lab at most.
const SUFFIXES: [&str; 6] = ["-scan", "-net", "-a", "-mid", "-b", "-path"];

/// The lab a namespace name belongs to, if it is one of ours.
fn lab_of(ns: &str) -> Option<&str> {
    let rest = ns.strip_prefix("sonde-")?;
    let name = SUFFIXES.iter().find_map(|s| rest.strip_suffix(s))?;
    validate_name(name).ok().map(|_| name)
}

/// Names of all labs, up or half-made (a namespace or a state file left).
pub fn list() -> Vec<String> {
    let mut names = BTreeSet::new();
    if let Ok(dir) = fs::read_dir(NETNS_DIR) {
        for entry in dir.flatten() {
            if let Some(name) = entry.file_name().to_str().and_then(lab_of) {
                names.insert(name.to_string());
            }
        }
    }
    names.extend(state::names());
    names.into_iter().collect()
}

fn open_scan_ns(name: &str) -> Result<File> {
    validate_name(name)?;
    let path = ns_path(&scan_ns(name));
    File::open(&path).map_err(|e| {
        if bridge_exists(name) {
            anyhow!(
                "lab {name:?} is a bridge lab: it has no scanner namespace (use its hosts: ip netns exec {} …)",
                a_ns(name)
            )
        } else {
            anyhow!(
                "lab {name:?} is not up ({}: {e}); start it with: sonde lab up --name {name}",
                path.display()
            )
        }
    })
}

/// Moves the calling thread into lab namespace `ns` (any namespace a lab made, e.g.
/// `bridge::a_ns(name)`). Threads spawned afterwards inherit it, so call this before spawning.
/// Only the lab's own namespaces can be entered this way.
pub fn enter_ns(ns: &str) -> Result<()> {
    if lab_of(ns).is_none() {
        bail!("{ns:?} is not a lab namespace (sonde-NAME-scan, -net, -a, -mid, -b or -path)");
    }
    let path = ns_path(ns);
    let file = File::open(&path).map_err(|e| {
        anyhow!(
            "namespace {ns} is not there ({}: {e}); is its lab up? (sonde lab list)",
            path.display()
        )
    })?;
    setns(&file, CloneFlags::CLONE_NEWNET)
        .map_err(|e| anyhow!("cannot enter namespace {ns}: {e} (this needs root)"))
}

/// Moves the calling thread into the scanner namespace of lab `name`.
/// Threads spawned afterwards inherit it, so call this before spawning.
pub fn enter_scan_ns(name: &str) -> Result<()> {
    let ns = open_scan_ns(name)?;
    setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
        anyhow!("cannot enter the scanner namespace of lab {name:?}: {e} (this needs root)")
    })
}

/// Moves the calling thread into the network namespace of lab `name` (the side that owns the
/// population and 198.19.255.254 on nx0: targets, servers, reflectors), e.g. to serve or observe
/// there from one thread of a process whose other threads stay in the scanner namespace.
pub fn enter_net_ns(name: &str) -> Result<()> {
    validate_name(name)?;
    let path = ns_path(&net_ns(name));
    let ns = File::open(&path).map_err(|e| {
        anyhow!(
            "lab {name:?} is not up ({}: {e}); start it with: sonde lab up --name {name}",
            path.display()
        )
    })?;
    setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
        anyhow!("cannot enter the network namespace of lab {name:?}: {e} (this needs root)")
    })
}

/// The lab whose scanner namespace the calling thread is in, if any.
pub fn current_lab() -> Option<String> {
    let ns = current_ns()?;
    let name = lab_of(&ns).filter(|n| ns == scan_ns(n))?;
    Some(name.to_string())
}

/// The name (in /run/netns) of the network namespace the calling thread is in, if it has one.
pub fn current_ns() -> Option<String> {
    // thread-self: entering a lab moves one thread, and that is what counts.
    let me = fs::metadata("/proc/thread-self/ns/net").ok()?;
    let dir = fs::read_dir(NETNS_DIR).ok()?;
    dir.flatten().find_map(|entry| {
        let meta = fs::metadata(entry.path()).ok()?;
        let same = meta.ino() == me.ino() && meta.dev() == me.dev();
        same.then(|| entry.file_name().to_str().map(str::to_string))?
    })
}

/// Where the calling thread's network namespace is, in words: a lab's namespace by name and
/// side (`sonde-demo-scan (lab demo's scanner side)`), another named one, the host's, or an
/// unnamed one.
pub fn where_am_i() -> String {
    if let Some(ns) = current_ns() {
        return describe_ns(&ns);
    }
    let id = |path: &str| fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    match (id("/proc/thread-self/ns/net"), id("/proc/1/ns/net")) {
        (Some(me), Some(host)) if me == host => "the host's network namespace".into(),
        _ => "an unnamed network namespace".into(),
    }
}

/// Namespace `ns` as a person reads it: a lab's with its side, any other by its name.
pub fn describe_ns(ns: &str) -> String {
    let Some(lab) = lab_of(ns) else {
        return format!("network namespace {ns}");
    };
    let side = match &ns["sonde-".len() + lab.len()..] {
        "-scan" => "scanner side",
        "-net" => "network side",
        "-a" => "host A",
        "-mid" => "middle",
        _ => "host B",
    };
    format!("{ns} (lab {lab}'s {side})")
}

/// How to run `command` in the calling thread's namespace from a shell: `ip netns exec NS …`
/// when it has a name, else the command as it is.
pub fn run_here(command: &str) -> String {
    match current_ns() {
        Some(ns) => format!("ip netns exec {ns} {command}"),
        None => command.to_string(),
    }
}

/// Refuses interface `iface` when the calling thread's namespace has none of that name, in one
/// line that names the namespace searched and the namespaces that have one: those of the same
/// lab when the thread is in a lab's, else any lab's.
pub fn check_interface(iface: &str) -> Result<()> {
    if nix::net::if_::if_nametoindex(iface).is_ok() {
        return Ok(());
    }
    let elsewhere = lab_namespaces_with(iface);
    let found = match elsewhere.as_slice() {
        [] => String::new(),
        names => {
            // Outside a lab, every lab's scanner has sx0: a few are enough to point the way.
            const SHOWN: usize = 3;
            let mut named: Vec<String> =
                names.iter().take(SHOWN).map(|ns| describe_ns(ns)).collect();
            if names.len() > SHOWN {
                named.push(format!("{} more", names.len() - SHOWN));
            }
            format!("; {iface} is in {}", named.join(" and "))
        }
    };
    bail!(
        "no interface named {iface:?} in {}{found} (list this namespace's with: {})",
        where_am_i(),
        run_here("ip link")
    )
}

/// The labs' namespaces that have an interface named `iface` (only the calling thread's lab's
/// when it is in one), looked at from a thread of its own (entering a namespace moves only the
/// thread that enters); none when they cannot be entered.
fn lab_namespaces_with(iface: &str) -> Vec<String> {
    let here = current_ns();
    let this_lab = here.as_deref().and_then(lab_of).map(str::to_string);
    let names: Vec<String> = fs::read_dir(NETNS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .filter(|ns| match (lab_of(ns), &this_lab) {
            (Some(lab), Some(this)) => lab == this && Some(ns) != here.as_ref(),
            (lab, None) => lab.is_some(),
            (None, _) => false,
        })
        .collect();
    let iface = iface.to_string();
    let looker = std::thread::spawn(move || {
        let mut found: Vec<String> = names
            .into_iter()
            .filter(|ns| {
                File::open(ns_path(ns)).is_ok_and(|file| {
                    setns(&file, CloneFlags::CLONE_NEWNET).is_ok()
                        && nix::net::if_::if_nametoindex(iface.as_str()).is_ok()
                })
            })
            .collect();
        found.sort();
        found
    });
    looker.join().unwrap_or_default()
}

/// Runs `argv` in the scanner namespace of lab `name`, with this process's
/// stdio, and waits for it.
pub fn exec(name: &str, argv: &[String]) -> Result<ExitStatus> {
    open_scan_ns(name)?;
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| anyhow!("nothing to run in lab {name:?}: give a command"))?;
    // `ip netns exec` would say so in its own words, without sonde's error line.
    if find_program(program).is_none() {
        bail!("cannot run {program:?} in lab {name:?}: no such program (give its path, or one on PATH)");
    }
    Command::new("ip")
        .args(["netns", "exec", &scan_ns(name), program])
        .args(args)
        .status()
        .map_err(|e| spawn_error("ip", &e))
}

/// Where `program` is, as the shell finds it: a path when it has a slash, else the first
/// executable file of that name on PATH.
fn find_program(program: &str) -> Option<PathBuf> {
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let path = PathBuf::from(program);
        return executable(&path).then_some(path);
    }
    if program.is_empty() {
        return None;
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_the_shell_finds_them() {
        assert!(find_program("sh").is_some());
        assert_eq!(find_program("/bin/sh"), Some(PathBuf::from("/bin/sh")));
        assert_eq!(find_program("sonde-no-such-program"), None);
        assert_eq!(find_program("/nonexistent/prog"), None);
        assert_eq!(find_program(""), None);
        // A folder is not a program.
        assert_eq!(find_program("/bin"), None);
    }

    #[test]
    fn namespaces_are_described_by_lab_and_side() {
        assert_eq!(
            describe_ns("sonde-demo-scan"),
            "sonde-demo-scan (lab demo's scanner side)"
        );
        assert_eq!(
            describe_ns("sonde-a-net"),
            "sonde-a-net (lab a's network side)"
        );
        assert_eq!(
            describe_ns("sonde-x-scan-net"),
            "sonde-x-scan-net (lab x-scan's network side)"
        );
        assert_eq!(describe_ns("sonde-b-mid"), "sonde-b-mid (lab b's middle)");
        assert_eq!(describe_ns("sonde-b-a"), "sonde-b-a (lab b's host A)");
        assert_eq!(describe_ns("sonde-b-b"), "sonde-b-b (lab b's host B)");
        assert_eq!(describe_ns("other"), "network namespace other");
    }

    #[test]
    fn namespace_names_round_trip() {
        for name in ["lab", "a-net", "x-scan", "9", "x-a", "b-mid", "p-path"] {
            assert_eq!(lab_of(&scan_ns(name)), Some(name));
            assert_eq!(lab_of(&net_ns(name)), Some(name));
            assert_eq!(lab_of(&a_ns(name)), Some(name));
            assert_eq!(lab_of(&mid_ns(name)), Some(name));
            assert_eq!(lab_of(&b_ns(name)), Some(name));
            assert_eq!(lab_of(&crate::path::path_ns(name)), Some(name));
        }
        assert_eq!(lab_of("sonde-"), None);
        assert_eq!(lab_of("other-lab-net"), None);
        assert_eq!(lab_of("sonde-Bad-net"), None);
    }
}
