//! TSO and GSO of the scanner's interface, off for the run and restored after it. With them
//! on, the kernel's TCP hands veth one super-packet of up to 64 KB that veth passes whole (a
//! NIC would cut it on the wire), so there would be no first and last packet to time. Only the
//! lab's scanner namespace is touched, through `ip netns exec`.

use std::process::Command;

use anyhow::{anyhow, bail};

/// The ethtool features turned off, by their `ethtool -k` names and `-K` keywords.
const FEATURES: [(&str, &str); 2] = [
    ("tcp-segmentation-offload", "tso"),
    ("generic-segmentation-offload", "gso"),
];

/// Segmentation offloads switched off; those that were on come back on drop.
pub struct Off {
    ns: String,
    iface: String,
    were_on: Vec<&'static str>,
}

impl Off {
    /// Turns TSO and GSO of `iface` in namespace `ns` off.
    pub fn segmentation(ns: &str, iface: &str) -> anyhow::Result<Off> {
        let shown = ethtool(ns, &["-k", iface])?;
        let were_on = FEATURES
            .iter()
            .filter(|(name, _)| is_on(&shown, name))
            .map(|&(_, keyword)| keyword)
            .collect();
        let off = Off {
            ns: ns.to_string(),
            iface: iface.to_string(),
            were_on,
        };
        let mut args = vec!["-K", iface];
        for (_, keyword) in FEATURES {
            args.extend([keyword, "off"]);
        }
        ethtool(ns, &args)?;
        Ok(off)
    }

    /// What was done, for the plan line.
    pub fn describe(&self) -> String {
        match self.were_on.is_empty() {
            true => "already off".into(),
            false => format!("{} off for the run", self.were_on.join(" and ")),
        }
    }
}

impl Drop for Off {
    fn drop(&mut self) {
        if self.were_on.is_empty() {
            return;
        }
        let mut args = vec!["-K", self.iface.as_str()];
        for keyword in &self.were_on {
            args.extend([*keyword, "on"]);
        }
        if let Err(e) = ethtool(&self.ns, &args) {
            eprintln!(
                "sonde: could not turn {} back on: {e}",
                self.were_on.join(" and ")
            );
        }
    }
}

/// Whether `ethtool -k` output shows feature `name` on ("name: on" or "name: on [fixed]").
fn is_on(shown: &str, name: &str) -> bool {
    shown.lines().any(|line| {
        line.trim()
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|v| v.trim_start().starts_with("on"))
    })
}

fn ethtool(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ethtool"])
        .args(args)
        .output()
        .map_err(|e| anyhow!("cannot run ip netns exec {ns} ethtool: {e}"))?;
    if !out.status.success() {
        bail!(
            "ethtool {} in {ns} failed: {} (install ethtool, or run with --keep-offloads)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ethtool_feature_lines() {
        let shown = "Features for sx0:\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\ngeneric-segmentation-offload: off [fixed]\n";
        assert!(is_on(shown, "tcp-segmentation-offload"));
        assert!(!is_on(shown, "generic-segmentation-offload"));
        assert!(!is_on(shown, "tcp-segmentation"));
    }
}
