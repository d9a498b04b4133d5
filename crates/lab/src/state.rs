//! `/run/sonde/lab/<name>.json`: the status of each lab that is up, so later
//! commands (status, truth, down, exec) know what `up` made. /run is a tmpfs,
//! like /run/netns, so state and namespaces vanish together at reboot.

use std::fs;
use std::io;
use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use crate::config::{validate_name, LabStatus};

pub(crate) const STATE_DIR: &str = "/run/sonde/lab";
/// Suffixes of everything this module lets a lab keep in STATE_DIR.
const SUFFIXES: [&str; 5] = [".json", ".json.tmp", ".nft", "-drop.o", "-unbound.conf"];
/// Suffixes of the folders a lab may keep there (nginx's config, certificate, body, logs; the
/// services' configs, keys, pid files and logs; the lab's CA).
const DIR_SUFFIXES: [&str; 4] = ["-http", "-services", "-ca", "-dns"];

/// A file of lab `name` in the state directory (`suffix` from SUFFIXES).
pub(crate) fn file(name: &str, suffix: &str) -> PathBuf {
    debug_assert!(SUFFIXES.contains(&suffix));
    PathBuf::from(STATE_DIR).join(format!("{name}{suffix}"))
}

/// Creates the state directory and returns the path of `name`'s `suffix` file.
pub(crate) fn scratch(name: &str, suffix: &str) -> Result<PathBuf> {
    fs::create_dir_all(STATE_DIR).map_err(|e| anyhow!("cannot create {STATE_DIR}: {e}"))?;
    Ok(file(name, suffix))
}

/// Creates (empty) and returns lab `name`'s `suffix` folder (from DIR_SUFFIXES), readable by
/// all: nginx's workers drop root.
pub(crate) fn scratch_dir(name: &str, suffix: &str) -> Result<PathBuf> {
    debug_assert!(DIR_SUFFIXES.contains(&suffix));
    let path = PathBuf::from(STATE_DIR).join(format!("{name}{suffix}"));
    let _ = fs::remove_dir_all(&path);
    fs::create_dir_all(&path).map_err(|e| anyhow!("cannot create {}: {e}", path.display()))?;
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    fs::set_permissions(&path, mode)
        .map_err(|e| anyhow!("cannot make {} readable: {e}", path.display()))?;
    Ok(path)
}

pub(crate) fn exists(name: &str) -> bool {
    file(name, ".json").exists()
}

/// Where bridge labs keep their folders: apart from the other labs' files and folders, so no
/// name of one (`x-http`) is a folder of another (lab `x`'s nginx).
const BRIDGE_DIR: &str = "/run/sonde/lab/bridges";

/// The folder of bridge lab `name`: its `bridge.json` and the iperf3 servers' pid and log files.
pub(crate) fn bridge_dir(name: &str) -> PathBuf {
    PathBuf::from(BRIDGE_DIR).join(name)
}

/// The state file of bridge lab `name`. It is written before anything else of the lab is made
/// and removed last, so it marks the folder as a bridge lab's (a folder such as `x-http` is
/// another lab's).
pub(crate) fn bridge_file(name: &str) -> PathBuf {
    bridge_dir(name).join("bridge.json")
}

pub(crate) fn is_bridge(name: &str) -> bool {
    bridge_file(name).exists()
}

/// Removes the folder of bridge lab `name`, if it is one.
pub(crate) fn remove_bridge_dir(name: &str) -> Result<()> {
    if !is_bridge(name) {
        return Ok(());
    }
    let path = bridge_dir(name);
    fs::remove_dir_all(&path).map_err(|e| anyhow!("cannot remove {}: {e}", path.display()))
}

/// The state file: the status, and what `down` needs besides.
#[derive(Serialize, Deserialize)]
pub(crate) struct Saved {
    #[serde(flatten)]
    pub status: LabStatus,
    /// The server's command line, so `down` can tell the server from another
    /// process that got its pid later.
    #[serde(default)]
    pub server_cmd: Vec<String>,
    /// The silent server's command line, for the same reason.
    #[serde(default)]
    pub silent_cmd: Vec<String>,
    /// Every server `up` started besides the lab server, so `down` can stop each even when
    /// its namespace has lost its name.
    #[serde(default)]
    pub started: Vec<Started>,
}

/// A process `up` started, known by its pid and its start time (a later process that reuses
/// the pid has another): nginx rewrites its command line, so that cannot identify it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Started {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat: clock ticks after boot when the process started.
    pub start_ticks: u64,
    /// What it is, for people reading the state file.
    pub what: String,
}

/// Writes the state atomically (temporary file, then rename), so a reader
/// never sees half a file.
pub(crate) fn save(saved: &Saved) -> Result<()> {
    let name = &saved.status.name;
    let path = scratch(name, ".json")?;
    let tmp = file(name, ".json.tmp");
    let text = serde_json::to_string_pretty(saved)?;
    fs::write(&tmp, text + "\n")
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

/// The status of lab `name`, or None if it has no state file.
pub(crate) fn load_opt(name: &str) -> Result<Option<LabStatus>> {
    Ok(load_saved(name)?.map(|s| s.status))
}

/// The state of lab `name`, or None if it has no state file.
pub(crate) fn load_saved(name: &str) -> Result<Option<Saved>> {
    validate_name(name)?;
    let path = file(name, ".json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("cannot read {}: {e}", path.display())),
    };
    let st = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "{} is damaged ({e}); remove the lab with: sonde lab down --name {name}",
            path.display()
        )
    })?;
    Ok(Some(st))
}

/// The status of lab `name`; an error if it is not up.
pub(crate) fn load(name: &str) -> Result<LabStatus> {
    load_opt(name)?.ok_or_else(|| {
        anyhow!("lab {name:?} is not up (start it with: sonde lab up --name {name})")
    })
}

/// Removes every file lab `name` has in the state directory.
pub(crate) fn remove(name: &str) -> Result<()> {
    for suffix in SUFFIXES {
        let path = file(name, suffix);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(anyhow!("cannot remove {}: {e}", path.display()));
            }
            _ => {}
        }
    }
    for suffix in DIR_SUFFIXES {
        let path = PathBuf::from(STATE_DIR).join(format!("{name}{suffix}"));
        match fs::remove_dir_all(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(anyhow!("cannot remove {}: {e}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Names of labs with a state file (`NAME.json`, or `bridges/NAME/bridge.json` for a bridge
/// lab).
pub(crate) fn names() -> Vec<String> {
    let entries = |dir: &str| fs::read_dir(dir).into_iter().flatten().flatten();
    let labs = entries(STATE_DIR).filter_map(|e| {
        let file = e.file_name();
        Some(file.to_str()?.strip_suffix(".json")?.to_string())
    });
    let bridges = entries(BRIDGE_DIR).filter_map(|e| {
        let name = e.file_name().to_str()?.to_string();
        is_bridge(&name).then_some(name)
    });
    labs.chain(bridges)
        .filter(|n| validate_name(n).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bridge lab named `x-http` or `x-services` had the folder of lab `x`'s nginx or
    /// services, which `up` and `down` of lab `x` remove.
    #[test]
    fn a_bridge_labs_folder_is_no_other_labs_folder() {
        for lab in ["x", "lab-1"] {
            for suffix in DIR_SUFFIXES {
                let bridge = format!("{lab}{suffix}");
                let theirs = PathBuf::from(STATE_DIR).join(&bridge);
                assert!(
                    !bridge_dir(&bridge).starts_with(&theirs)
                        && !theirs.starts_with(bridge_dir(&bridge)),
                    "bridge lab {bridge} and lab {lab} share {}",
                    theirs.display()
                );
            }
        }
    }
}
