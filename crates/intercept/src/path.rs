//! Taking traffic off its path, and putting it back: the firewall rules and tables sonde adds
//! so the kernel hands packets to it, each recorded with the command that removes it.
//!
//! - stack mode: `iptables -A CHAIN MATCH… -j NFQUEUE` (the xt target through nft compat; this
//!   kernel's nft has no `queue` expression), tagged with a comment so leftovers can be found;
//! - bridge mode: an nftables `netdev` table whose ingress chains drop everything arriving on
//!   the two interfaces. Packet sockets see a frame before that hook, so sonde still gets it,
//!   but the kernel's own bridge or router does not forward it a second time.
//!
//! Every change is undone on exit and on Ctrl-C. After a crash, a guard process (see
//! [`Guard`]) undoes them when `--fail-open` was asked for; without it they stay on purpose
//! (that is what keeps traffic stopped) until `sonde intercept cleanup`.

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};

use anyhow::{anyhow, bail, Context};

/// The comment every NFQUEUE rule sonde adds carries.
pub const RULE_TAG: &str = "sonde-intercept";
/// The prefix of the nftables tables bridge mode adds.
pub const TABLE_PREFIX: &str = "sonde_intercept_";

/// The changes made so far, newest last, each as the command line that undoes it.
#[derive(Default, Debug)]
pub struct PathChanges {
    undo: Vec<Vec<String>>,
}

/// Which NFQUEUE queues a rule feeds.
#[derive(Clone, Copy, Debug)]
pub struct Queues {
    pub first: u16,
    pub count: u16,
}

impl PathChanges {
    /// Adds `iptables -A SPEC -m comment --comment sonde-intercept -j NFQUEUE …` where SPEC is
    /// a chain and iptables match options, e.g. `OUTPUT -d 198.19.254.2 -p tcp`.
    pub fn add_nfqueue_rule(
        &mut self,
        spec: &str,
        queues: Queues,
        bypass: bool,
    ) -> anyhow::Result<()> {
        let mut words: Vec<String> = spec.split_whitespace().map(str::to_string).collect();
        let Some(chain) = words.first().cloned() else {
            bail!("--install-rule needs a chain and matches, e.g. \"OUTPUT -d 198.19.254.2\"");
        };
        if words
            .iter()
            .any(|w| w == "-j" || w == "--jump" || w == "-g")
        {
            bail!(
                "--install-rule \"{spec}\": give only the chain and matches; sonde adds -j NFQUEUE"
            );
        }
        words.drain(..1);
        words.extend(["-m", "comment", "--comment", RULE_TAG, "-j", "NFQUEUE"].map(str::to_string));
        if queues.count > 1 {
            let last = queues.first + queues.count - 1;
            words.extend([
                "--queue-balance".to_string(),
                format!("{}:{last}", queues.first),
            ]);
        } else {
            words.extend(["--queue-num".to_string(), queues.first.to_string()]);
        }
        if bypass {
            words.push("--queue-bypass".into());
        }
        let add = iptables_cmd("-A", &chain, &words);
        run(&add).with_context(|| format!("--install-rule \"{spec}\""))?;
        self.undo.push(iptables_cmd("-D", &chain, &words));
        Ok(())
    }

    /// Adds a netdev table that drops at ingress every frame arriving on `ifaces` (after packet
    /// sockets have seen it).
    pub fn take_off_wire(&mut self, ifaces: &[&str]) -> anyhow::Result<()> {
        let table = format!("{TABLE_PREFIX}{}", std::process::id());
        let mut script = format!("add table netdev {table}\n");
        for (i, iface) in ifaces.iter().enumerate() {
            script += &format!(
                "add chain netdev {table} in{i} {{ type filter hook ingress device \"{iface}\" priority 0; policy drop; }}\n"
            );
        }
        nft(&script)
            .with_context(|| format!("taking {} off the kernel's path", ifaces.join(" and ")))?;
        self.undo.push(vec![
            "nft".into(),
            "delete".into(),
            "table".into(),
            "netdev".into(),
            table,
        ]);
        Ok(())
    }

    /// The undo commands, newest first.
    pub fn undo_commands(&self) -> Vec<Vec<String>> {
        self.undo.iter().rev().cloned().collect()
    }

    /// Undoes every change, newest first; reports the first failure after trying them all.
    pub fn undo_all(&mut self) -> anyhow::Result<()> {
        let result = undo(&self.undo_commands());
        self.undo.clear();
        result
    }
}

impl Drop for PathChanges {
    fn drop(&mut self) {
        if let Err(e) = self.undo_all() {
            eprintln!("sonde intercept: {e:#}");
        }
    }
}

fn iptables_cmd(op: &str, chain: &str, rest: &[String]) -> Vec<String> {
    let mut cmd = vec!["iptables".to_string(), "-w".into(), op.into(), chain.into()];
    cmd.extend(rest.iter().cloned());
    cmd
}

/// Runs each command; all are tried, the first failure is returned.
pub fn undo(commands: &[Vec<String>]) -> anyhow::Result<()> {
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

fn run(cmd: &[String]) -> anyhow::Result<()> {
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

fn nft(script: &str) -> anyhow::Result<()> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow!("nft: {e} (run scripts/setup)"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err
            .lines()
            .find(|l| l.starts_with("Error"))
            .unwrap_or("")
            .trim();
        bail!("nft refused: {err}");
    }
    Ok(())
}

/// Removes what an earlier, killed sonde intercept left: NFQUEUE rules with sonde's comment,
/// and sonde's netdev tables. Returns how many it removed.
pub fn cleanup_leftovers() -> anyhow::Result<usize> {
    let mut removed = 0;
    let out = Command::new("iptables").args(["-w", "-S"]).output();
    if let Ok(out) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(rule) = line.strip_prefix("-A ") else {
                continue;
            };
            if !line.contains(RULE_TAG) {
                continue;
            }
            let mut cmd = vec!["iptables".to_string(), "-w".into(), "-D".into()];
            cmd.extend(
                rule.split_whitespace()
                    .map(|w| w.trim_matches('"').to_string()),
            );
            run(&cmd)?;
            removed += 1;
        }
    }
    let out = Command::new("nft")
        .args(["list", "tables", "netdev"])
        .output();
    if let Ok(out) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(table) = line.strip_prefix("table netdev ") else {
                continue;
            };
            if table.starts_with(TABLE_PREFIX) {
                run(&["nft", "delete", "table", "netdev", table].map(str::to_string))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// A child process that undoes the path changes if sonde dies without doing so: it reads the
/// undo commands on its stdin, then waits; end of input without the word `done` (sonde was
/// killed, the kernel closed the pipe) makes it undo them. It runs in its own process group,
/// so a Ctrl-C meant for sonde does not stop it.
pub struct Guard {
    child: Child,
}

impl Guard {
    /// Starts `program args…` (sonde's own `intercept guard`) and hands it `commands`.
    pub fn start(
        program: &std::path::Path,
        args: &[&str],
        commands: &[Vec<String>],
    ) -> anyhow::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("starting the fail-open guard: {e}"))?;
        let stdin = child.stdin.as_mut().expect("piped");
        for cmd in commands {
            writeln!(stdin, "{}", command_line(cmd))?;
        }
        writeln!(stdin, "armed")?;
        stdin.flush()?;
        Ok(Guard { child })
    }

    /// sonde undid everything itself: the guard can go.
    pub fn stand_down(mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = writeln!(stdin, "done");
        }
        let _ = self.child.wait();
    }
}

/// One command as a line: words separated by the unit separator (no word contains it).
fn command_line(cmd: &[String]) -> String {
    cmd.join("\u{1f}")
}

/// The guard's side: reads commands until `armed`, then waits for `done` or end of input.
pub fn guard_main(input: impl BufRead) -> anyhow::Result<()> {
    let mut commands = Vec::new();
    let mut lines = input.lines();
    for line in lines.by_ref() {
        let line = line?;
        if line == "armed" {
            break;
        }
        commands.push(line.split('\u{1f}').map(str::to_string).collect::<Vec<_>>());
    }
    for line in lines {
        if line.map(|l| l == "done").unwrap_or(false) {
            return Ok(());
        }
    }
    undo(&commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_undoes_only_when_sonde_did_not_say_done() {
        let dir = std::env::temp_dir().join(format!("sonde-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("undone");
        let cmd = ["touch".to_string(), marker.display().to_string()];
        let input = format!("{}\narmed\ndone\n", command_line(&cmd));
        guard_main(input.as_bytes()).unwrap();
        assert!(!marker.exists(), "undone although sonde said done");
        let input = format!("{}\narmed\n", command_line(&cmd));
        guard_main(input.as_bytes()).unwrap();
        assert!(marker.exists(), "not undone after sonde vanished");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_install_rule_must_not_bring_its_own_target() {
        let mut changes = PathChanges::default();
        let q = Queues { first: 0, count: 1 };
        let e = changes
            .add_nfqueue_rule("OUTPUT -j ACCEPT", q, false)
            .unwrap_err();
        assert!(e.to_string().contains("sonde adds -j NFQUEUE"), "{e}");
        let e = changes.add_nfqueue_rule("  ", q, false).unwrap_err();
        assert!(e.to_string().contains("needs a chain"), "{e}");
        assert!(changes.undo_commands().is_empty());
    }
}
