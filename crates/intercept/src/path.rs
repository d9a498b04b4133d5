//! Taking traffic off its path, and putting it back: the firewall rules and tables sonde adds
//! so the kernel hands packets to it, each recorded with the command that removes it.
//!
//! - stack mode: `iptables -t TABLE -A CHAIN MATCH… -j NFQUEUE` (or ip6tables; the xt target
//!   through nft compat: this kernel's nft has no `queue` expression), tagged with a comment
//!   naming sonde's process (`sonde-intercept-PID-START`, see [`crate::owner`]) so leftovers can
//!   be found and told from what a running sonde uses;
//! - bridge mode: an nftables `netdev` table whose ingress chains drop everything arriving on
//!   the two interfaces. Packet sockets see a frame before that hook, so sonde still gets it,
//!   but the kernel's own bridge or router does not forward it a second time.
//!
//! While sonde runs it checks, once a second, that its rules and table are still in place
//! ([`PathChanges::check_in_place`]): one removed from under it (by hand, or by `cleanup
//! --force`) stops it at once, with an error naming it.
//!
//! Every change is undone on exit and on Ctrl-C (and SIGTERM, SIGHUP, SIGQUIT). With
//! `--fail-open` a guard process (see [`Guard`]) learns each undo command before its change is
//! made, and undoes them all if sonde dies; without it they stay on purpose (that is what keeps
//! traffic stopped) until `sonde intercept cleanup` ([`crate::cleanup`]).

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context};

pub use crate::guard::{guard_main, Guard};

use crate::command::{run, undo};

pub use crate::owner::{RULE_TAG, TABLE_PREFIX};
/// The iptables tables an NFQUEUE rule may go in, all of which cleanup searches. (`nat` sees
/// only a connection's first packet, so it is refused.)
pub const RULE_TABLES: [&str; 4] = ["filter", "mangle", "raw", "security"];
/// The programs whose rules cleanup searches: IPv4 and IPv6.
pub const RULE_PROGRAMS: [&str; 2] = ["iptables", "ip6tables"];

/// The changes made so far, newest last, each as the command line that undoes it (and the one
/// that checks it is still in place); and the fail-open guard, when there is one, which learns
/// each of them first.
#[derive(Default)]
pub struct PathChanges {
    undo: Vec<Vec<String>>,
    /// The changes that can be checked while sonde runs.
    checks: Vec<Check>,
    guard: Option<Guard>,
}

/// A change that can be checked: what it is (for people), the command that succeeds while it is
/// in place, and its undo.
struct Check {
    what: String,
    check: Vec<String>,
    undo: Vec<String>,
}

/// Which NFQUEUE queues a rule feeds.
#[derive(Clone, Copy, Debug)]
pub struct Queues {
    pub first: u16,
    pub count: u16,
}

/// An `--install-rule` read: which program and table it goes in, its chain and its matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallRule {
    /// `iptables` or `ip6tables`.
    pub program: &'static str,
    pub table: String,
    pub chain: String,
    pub matches: Vec<String>,
}

impl InstallRule {
    /// Reads `[-4|-6] [-t TABLE] CHAIN MATCHES` (the options may stand anywhere). The address
    /// family is ip6tables' with `-6`, or when an address (`-s`, `-d`) is IPv6; else iptables'.
    pub fn parse(spec: &str) -> anyhow::Result<InstallRule> {
        let bad = |why: String| anyhow!("--install-rule \"{spec}\": {why}");
        let mut words = spec.split_whitespace().map(str::to_string);
        let (mut table, mut family, mut rest) = (None, None, Vec::new());
        while let Some(word) = words.next() {
            match word.as_str() {
                "-t" | "--table" => {
                    let name = words.next().ok_or_else(|| bad("-t needs a table".into()))?;
                    table = Some(name);
                }
                "-4" | "--ipv4" | "-6" | "--ipv6" => {
                    let six = word.contains('6');
                    if family.is_some_and(|f| f != six) {
                        return Err(bad("give -4 or -6, not both".into()));
                    }
                    family = Some(six);
                }
                "-j" | "--jump" | "-g" | "--goto" => {
                    return Err(bad(
                        "give only the chain and matches; sonde adds -j NFQUEUE".into(),
                    ))
                }
                w if w.starts_with("--table=") => table = Some(w["--table=".len()..].to_string()),
                _ => rest.push(word),
            }
        }
        let table = table.unwrap_or_else(|| "filter".to_string());
        if !RULE_TABLES.contains(&table.as_str()) {
            return Err(bad(format!(
                "table {table}: sonde installs NFQUEUE rules in {} only",
                RULE_TABLES.join(", ")
            )));
        }
        if rest.is_empty() {
            bail!("--install-rule needs a chain and matches, e.g. \"OUTPUT -d 198.19.254.2\"");
        }
        let chain = rest.remove(0);
        if chain.starts_with('-') {
            return Err(bad(format!(
                "the chain comes first (e.g. OUTPUT), not {chain}"
            )));
        }
        let six = family.unwrap_or_else(|| has_ipv6_address(&rest));
        Ok(InstallRule {
            program: if six { "ip6tables" } else { "iptables" },
            table,
            chain,
            matches: rest,
        })
    }

    /// The command with `op` (`-A` to add, `-D` to delete) and everything sonde appends.
    fn command(&self, op: &str, queues: Queues, bypass: bool) -> Vec<String> {
        let mut cmd: Vec<String> = [
            self.program,
            "-w",
            "-t",
            self.table.as_str(),
            op,
            self.chain.as_str(),
        ]
        .map(str::to_string)
        .into();
        cmd.extend(self.matches.iter().cloned());
        let tag = crate::owner::Owner::me().rule_tag();
        cmd.extend(["-m", "comment", "--comment", &tag, "-j", "NFQUEUE"].map(str::to_string));
        if queues.count > 1 {
            let last = queues.first + queues.count - 1;
            cmd.extend([
                "--queue-balance".to_string(),
                format!("{}:{last}", queues.first),
            ]);
        } else {
            cmd.extend(["--queue-num".to_string(), queues.first.to_string()]);
        }
        if bypass {
            cmd.push("--queue-bypass".into());
        }
        cmd
    }
}

/// Whether a source or destination address among `words` is IPv6.
fn has_ipv6_address(words: &[String]) -> bool {
    words.windows(2).any(|w| {
        matches!(
            w[0].as_str(),
            "-s" | "--source" | "--src" | "-d" | "--destination" | "--dst"
        ) && w[1].contains(':')
    })
}

impl PathChanges {
    /// No changes yet; `guard` (with --fail-open) will learn of each before it is made.
    pub fn new(guard: Option<Guard>) -> PathChanges {
        PathChanges {
            undo: Vec::new(),
            checks: Vec::new(),
            guard,
        }
    }

    /// Tells the guard how to undo a change, then makes it with `make`; keeps the undo command
    /// if the change was made, and has the guard forget it if not. So at no moment does a
    /// change exist that the guard would not undo.
    fn change(
        &mut self,
        undo: Vec<String>,
        make: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if let Some(guard) = &mut self.guard {
            guard.learn(&undo)?;
        }
        match make() {
            Ok(()) => {
                self.undo.push(undo);
                Ok(())
            }
            Err(e) => {
                if let Some(guard) = &mut self.guard {
                    let _ = guard.forget_last();
                }
                Err(e)
            }
        }
    }

    /// Records a change another part of sonde is about to make (libxdp's program), with the
    /// command that undoes it.
    pub fn about_to(&mut self, undo: Vec<String>) -> anyhow::Result<()> {
        self.change(undo, || Ok(()))
    }

    /// Adds `iptables -t TABLE -A CHAIN MATCHES -m comment --comment sonde-intercept -j
    /// NFQUEUE …` (or ip6tables) for `spec`, read by [`InstallRule::parse`].
    pub fn add_nfqueue_rule(
        &mut self,
        spec: &str,
        queues: Queues,
        bypass: bool,
    ) -> anyhow::Result<()> {
        let rule = InstallRule::parse(spec)?;
        let add = rule.command("-A", queues, bypass);
        let undo = rule.command("-D", queues, bypass);
        self.change(undo.clone(), || {
            run(&add).with_context(|| format!("--install-rule \"{spec}\""))
        })?;
        self.checks.push(Check {
            what: format!("the NFQUEUE rule of --install-rule \"{spec}\""),
            check: rule.command("-C", queues, bypass),
            undo,
        });
        Ok(())
    }

    /// Adds a netdev table that drops at ingress every frame arriving on `ifaces` (after packet
    /// sockets have seen it).
    pub fn take_off_wire(&mut self, ifaces: &[&str]) -> anyhow::Result<()> {
        let table = crate::owner::Owner::me().table_name();
        let script = ingress_drop_script(&table, ifaces)?;
        let undo: Vec<String> = ["nft", "delete", "table", "netdev", &table]
            .map(str::to_string)
            .into();
        self.change(undo.clone(), || {
            nft(&script)
                .with_context(|| format!("taking {} off the kernel's path", ifaces.join(" and ")))
        })?;
        self.checks.push(Check {
            what: format!(
                "the netdev table {table} (which keeps {} off the kernel's path)",
                ifaces.join(" and ")
            ),
            check: ["nft", "list", "table", "netdev", &table]
                .map(str::to_string)
                .into(),
            undo,
        });
        Ok(())
    }

    /// Checks that every rule and table made is still in place (one command each: call it
    /// now and then, not per packet). One that is gone was removed from under sonde, which then
    /// filters nothing it was asked to: an error naming it. Its undo is dropped (nothing is left
    /// to undo).
    pub fn check_in_place(&mut self) -> anyhow::Result<()> {
        let Some(at) = self
            .checks
            .iter()
            .position(|c| !crate::command::succeeds(&c.check))
        else {
            return Ok(());
        };
        let gone = self.checks.remove(at);
        if let Some(undo) = self.undo.iter().rposition(|u| *u == gone.undo) {
            self.undo.remove(undo);
        }
        Err(anyhow!(
            "{} was removed while sonde ran (by `sonde intercept cleanup --force`, or by hand): stopping, as it no longer filtered what it was asked to",
            gone.what
        ))
    }

    /// Undoes every change, newest first, and sends the guard away; reports the first failure
    /// after trying them all.
    pub fn undo_all(&mut self) -> anyhow::Result<()> {
        let commands: Vec<_> = self.undo.drain(..).rev().collect();
        let result = undo(&commands);
        if let Some(guard) = self.guard.take() {
            guard.stand_down();
        }
        result
    }
}

impl Drop for PathChanges {
    fn drop(&mut self) {
        if let Err(e) = self.undo_all() {
            // Not eprintln: after a hang-up stderr may be gone, and a failed write must not
            // end sonde (a panic aborts) before the rest is undone.
            let _ = writeln!(std::io::stderr(), "sonde intercept: {e:#}");
        }
    }
}

/// The nft script of a netdev table `table` whose ingress chains drop every frame arriving on
/// `ifaces`. Each name must be one the kernel could have given an interface and hold nothing
/// that could end nft's quoted string: it goes into the script as text.
fn ingress_drop_script(table: &str, ifaces: &[&str]) -> anyhow::Result<String> {
    let mut script = format!("add table netdev {table}\n");
    for (i, iface) in ifaces.iter().enumerate() {
        check_iface_name(iface)?;
        script += &format!(
            "add chain netdev {table} in{i} {{ type filter hook ingress device \"{iface}\" priority 0; policy drop; }}\n"
        );
    }
    Ok(script)
}

/// Refuses, in one line, a name no interface can have (the kernel's rules: 1 to 15 bytes, no
/// `/`, `:` or white space, not `.` or `..`) or one with a quote or backslash.
pub fn check_iface_name(name: &str) -> anyhow::Result<()> {
    let bad = |c: char| c == '/' || c == ':' || c == '"' || c == '\\' || !c.is_ascii_graphic();
    if name.is_empty() || name.len() > 15 || name == "." || name == ".." || name.contains(bad) {
        bail!(
            "{name:?} is not an interface name: 1 to 15 printable characters without / : \" \\ or spaces"
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &[String]) -> String {
        cmd.join(" ")
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
        assert!(changes.undo.is_empty());
    }

    #[test]
    fn the_table_and_family_of_an_install_rule_are_recorded() {
        let q = Queues { first: 3, count: 1 };
        let rule = InstallRule::parse("OUTPUT -t mangle -d 198.19.254.2").unwrap();
        let tag = crate::owner::Owner::me().rule_tag();
        assert_eq!(
            words(&rule.command("-D", q, false)),
            format!("iptables -w -t mangle -D OUTPUT -d 198.19.254.2 -m comment --comment {tag} -j NFQUEUE --queue-num 3")
        );
        let rule = InstallRule::parse("-t raw OUTPUT -d 2001:2:0:fe::2 -p udp").unwrap();
        assert_eq!((rule.program, rule.table.as_str()), ("ip6tables", "raw"));
        assert_eq!(rule.matches, ["-d", "2001:2:0:fe::2", "-p", "udp"]);
        let rule = InstallRule::parse("-6 INPUT --table=security -p tcp").unwrap();
        assert_eq!(
            (rule.program, rule.table.as_str()),
            ("ip6tables", "security")
        );
        let rule = InstallRule::parse("OUTPUT -p udp").unwrap();
        assert_eq!((rule.program, rule.table.as_str()), ("iptables", "filter"));
        let q2 = Queues { first: 0, count: 2 };
        assert!(
            words(&rule.command("-A", q2, true)).ends_with("--queue-balance 0:1 --queue-bypass")
        );
        for (spec, needle) in [
            ("OUTPUT -t nat -p udp", "table nat"),
            ("OUTPUT -t", "-t needs a table"),
            ("-d 198.19.254.2", "the chain comes first"),
            ("-4 -6 OUTPUT", "not both"),
        ] {
            let e = format!("{:#}", InstallRule::parse(spec).unwrap_err());
            assert!(e.contains(needle) && !e.contains('\n'), "{spec}: {e}");
        }
    }

    #[test]
    fn interface_names_are_checked_before_they_enter_an_nft_script() {
        let script = ingress_drop_script("t", &["ma", "eth0.100", "br-lan@x"]).unwrap();
        assert!(script.contains("device \"eth0.100\""), "{script}");
        for bad in [
            "ma\"; flush ruleset; \"",
            "a b",
            "",
            "..",
            "sixteen-chars-xx",
            "a/b",
            "a\\b",
            "tab\there",
        ] {
            let e = ingress_drop_script("t", &["ma", bad])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("not an interface name") && !e.contains('\n'),
                "{bad:?}: {e}"
            );
        }
    }
}
