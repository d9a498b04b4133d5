//! Small file helpers the lab's servers share: writing a file with its path in the error,
//! a path as a command's argument, a program found on the PATH, and the hex SHA-256 the lab
//! names certificates and bodies by.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, bail, Result};
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The path of `program`: on PATH, or where Debian puts daemons (root's PATH may lack
/// /usr/sbin); else an error naming `package` to install.
pub(crate) fn find_program(program: &str, package: &str) -> Result<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = path.split(':').chain(["/usr/sbin", "/usr/local/sbin"]);
    for dir in dirs.filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(program);
        if candidate.is_file() {
            return path_arg(&candidate);
        }
    }
    bail!("{program} is not installed: apt-get install {package} (or run scripts/setup)")
}

pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))
}

pub(crate) fn path_arg(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("path {} is not UTF-8", path.display()))
}
