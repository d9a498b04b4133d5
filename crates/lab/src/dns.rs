//! The lab's DNS server: unbound (Debian's package) in the lab namespace, answering on port 53 of
//! every population address. `interface-automatic` makes it reply from the address each query
//! was sent to (the kernel delivers all of them to its wildcard socket), and a static root zone
//! makes it answer from its own data only: it never recurses, so no query leaves the lab.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::{server, state};

/// Names the lab's DNS server knows; every other name is NXDOMAIN.
pub const RECORDS: &[&str] = &[
    "example.com. A 198.18.0.1",
    "example.com. AAAA 2001:2::1",
    "lab.example. TXT \"sonde lab\"",
];

fn config(v6: bool) -> String {
    let mut c = String::from("server:\n");
    for line in [
        "interface-automatic: yes",
        "port: 53",
        "do-daemonize: no",
        "use-syslog: no",
        "logfile: \"\"",
        "pidfile: \"\"",
        "chroot: \"\"",
        "username: \"\"",
        "directory: \"/\"",
        "num-threads: 1",
        "access-control: 0.0.0.0/0 allow",
        "access-control: ::/0 allow",
        "do-not-query-localhost: yes",
        "local-zone: \".\" static",
    ] {
        c.push_str(&format!("  {line}\n"));
    }
    c.push_str(&format!("  do-ip6: {}\n", if v6 { "yes" } else { "no" }));
    for record in RECORDS {
        c.push_str(&format!(
            "  local-data: \"{}\"\n",
            record.replace('"', "\\\"")
        ));
    }
    c
}

/// Starts unbound in namespace `ns` and waits until it listens on UDP 53; returns its pid.
/// On `cpus` if given.
pub(crate) fn start(name: &str, ns: &str, v6: bool, cpus: Option<&[usize]>) -> Result<u32> {
    let path = state::scratch(name, "-unbound.conf")?;
    std::fs::write(&path, config(v6))
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    let mut child = server::detached_in(ns, cpus)
        .args(["unbound", "-d", "-c"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| anyhow!("cannot start unbound (install it: apt-get install unbound): {e}"))?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("unbound exited at once ({status}); is it installed? (apt-get install unbound)");
        }
        if listens_on_53(pid) {
            std::thread::spawn(move || child.wait());
            return Ok(pid);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    bail!("unbound did not start listening on port 53 within 10 s")
}

/// Whether the process has a UDP socket on port 53 (0035 in /proc's hex notation).
fn listens_on_53(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/net/udp"))
        .map(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| a.ends_with(":0035"))
            })
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_answers_locally_and_never_recurses() {
        let c = config(false);
        assert!(c.contains("local-zone: \".\" static"), "{c}");
        assert!(c.contains("interface-automatic: yes"));
        assert!(c.contains("do-ip6: no"));
        assert!(
            c.contains("local-data: \"lab.example. TXT \\\"sonde lab\\\"\""),
            "{c}"
        );
        assert!(config(true).contains("do-ip6: yes"));
    }
}
