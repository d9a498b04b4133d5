//! The XDP drop sink (xdp/drop.c, compiled by build.rs).

use anyhow::{anyhow, bail, Result};

use crate::cmd::ip_line;
use crate::config::NET_IF;
use crate::state;

/// The BPF object; empty if clang was missing at build time.
static DROP_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/drop.o"));

/// Attaches the drop program to nx0 in namespace `ns`: native mode if the
/// driver can, generic (skb) mode otherwise. Returns the mode that attached.
pub(crate) fn attach_drop(lab: &str, ns: &str) -> Result<&'static str> {
    if DROP_OBJ.is_empty() {
        bail!("the drop sink was built without clang; install clang, rebuild sonde, or use --sink kernel");
    }
    // `ip` loads the program from a file; it is not needed once attached.
    let file = state::scratch(lab, "-drop.o")?;
    std::fs::write(&file, DROP_OBJ).map_err(|e| anyhow!("cannot write {}: {e}", file.display()))?;
    let obj = file.display();
    let attach = |mode: &str| {
        ip_line(&format!(
            "-n {ns} link set dev {NET_IF} {mode} obj {obj} sec xdp"
        ))
    };
    let result = match attach("xdpdrv") {
        Ok(_) => Ok("xdpdrv"),
        Err(native) => attach("xdpgeneric")
            .map(|_| "xdpgeneric")
            .map_err(|generic| {
                anyhow!("cannot attach the XDP drop sink: {native}; then: {generic}")
            }),
    };
    let _ = std::fs::remove_file(&file);
    result
}
