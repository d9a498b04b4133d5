//! `sonde intercept cleanup`: removes what a killed sonde intercept left in this network
//! namespace — its NFQUEUE rules (any table, IPv4 and IPv6), its netdev tables, and libxdp's
//! program on the interfaces those tables name — going on past any that fail. What a sonde
//! that still runs made (each rule's comment and table's name say which process made it, see
//! [`crate::owner`]) is spared unless forced: removing it would silently stop that sonde's
//! filtering.

use std::process::{Command, Stdio};

use anyhow::anyhow;

use crate::owner::{self, Owner};
use crate::path::{check_iface_name, RULE_PROGRAMS, RULE_TABLES};

/// What cleanup did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Rules, tables and XDP programs removed.
    pub removed: usize,
    /// One line for each thing that could not be listed or removed.
    pub failures: Vec<String>,
    /// Rules and tables left in place because the sonde that made them still runs: the pids.
    pub spared: Vec<u32>,
}

/// How cleanup reaches the system (a trait so the logic can be tested without one).
pub trait System {
    /// Runs `cmd` and returns its standard output; `Ok(None)` when the program is not
    /// installed (then it cannot have made anything to remove).
    fn output(&mut self, cmd: &[&str]) -> anyhow::Result<Option<String>>;
    /// Runs `cmd`; fails with its first line of error.
    fn run(&mut self, cmd: &[String]) -> anyhow::Result<()>;
    /// Detaches the AF_XDP bridge's program from `iface`; true if it was attached.
    fn detach_xdp(&mut self, iface: &str) -> anyhow::Result<bool>;
    /// Whether the process that made a rule or table still runs.
    fn is_running(&mut self, owner: &Owner) -> bool;
}

/// The calling process's network namespace.
pub struct ThisHost;

impl System for ThisHost {
    fn output(&mut self, cmd: &[&str]) -> anyhow::Result<Option<String>> {
        let (program, args) = cmd
            .split_first()
            .ok_or_else(|| anyhow!("an empty command"))?;
        let out = match Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) => out,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(anyhow!("{program}: {e}")),
        };
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            anyhow::bail!("`{}` failed: {}", cmd.join(" "), first.trim());
        }
        Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
    }

    fn run(&mut self, cmd: &[String]) -> anyhow::Result<()> {
        crate::command::run(cmd)
    }

    fn detach_xdp(&mut self, iface: &str) -> anyhow::Result<bool> {
        sonde_io::detach_bridge_program(iface)
    }

    fn is_running(&mut self, owner: &Owner) -> bool {
        owner.is_running()
    }
}

/// Removes every leftover it finds through `sys`: NFQUEUE rules whose comment is sonde's, in
/// each table of iptables and ip6tables; netdev tables named sonde_intercept_PID_START, and
/// libxdp's bridge program on the interfaces they name. What a running sonde made is spared,
/// unless `force`. Each failure is noted and the rest goes on.
pub fn cleanup(sys: &mut impl System, force: bool) -> Cleanup {
    let mut done = Cleanup::default();
    for program in RULE_PROGRAMS {
        for table in RULE_TABLES {
            remove_rules(sys, program, table, force, &mut done);
        }
    }
    remove_tables(sys, force, &mut done);
    done.spared.sort_unstable();
    done.spared.dedup();
    done
}

/// Whether what `owner` made is left alone: it still runs, and cleanup is not forced.
fn spare(sys: &mut impl System, owner: Option<Owner>, force: bool, done: &mut Cleanup) -> bool {
    match owner {
        Some(owner) if !force && sys.is_running(&owner) => {
            done.spared.push(owner.pid);
            true
        }
        _ => false,
    }
}

/// Notes the outcome of removing one thing.
fn note(done: &mut Cleanup, result: anyhow::Result<bool>) {
    match result {
        Ok(removed) => done.removed += usize::from(removed),
        Err(e) => done.failures.push(format!("{e:#}")),
    }
}

fn remove_rules(
    sys: &mut impl System,
    program: &str,
    table: &str,
    force: bool,
    done: &mut Cleanup,
) {
    let listing = match sys.output(&[program, "-w", "-t", table, "-S"]) {
        Ok(Some(text)) => text,
        Ok(None) => return,
        Err(e) => return done.failures.push(format!("{e:#}")),
    };
    for line in listing.lines() {
        let words = split_saved_rule(line);
        if words.first().map(String::as_str) != Some("-A") {
            continue;
        }
        let Some(owner) = sonde_comment(&words) else {
            continue;
        };
        if spare(sys, owner, force, done) {
            continue;
        }
        let mut cmd: Vec<String> = [program, "-w", "-t", table, "-D"]
            .map(str::to_string)
            .into();
        cmd.extend(words.into_iter().skip(1));
        let result = sys.run(&cmd).map(|()| true);
        note(done, result);
    }
}

fn remove_tables(sys: &mut impl System, force: bool, done: &mut Cleanup) {
    let listing = match sys.output(&["nft", "list", "tables", "netdev"]) {
        Ok(Some(text)) => text,
        Ok(None) => return,
        Err(e) => return done.failures.push(format!("{e:#}")),
    };
    for table in listing
        .lines()
        .filter_map(|l| l.strip_prefix("table netdev "))
    {
        let table = table.trim();
        let Some(owner) = owner::of_table(table) else {
            continue;
        };
        if spare(sys, Some(owner), force, done) {
            continue;
        }
        // The interfaces it keeps off the path, where a killed xdp bridge left its program.
        let devices = match sys.output(&["nft", "list", "table", "netdev", table]) {
            Ok(text) => text.as_deref().map(table_devices).unwrap_or_default(),
            Err(e) => {
                done.failures.push(format!("{e:#}"));
                Vec::new()
            }
        };
        let delete = ["nft", "delete", "table", "netdev", table].map(str::to_string);
        let result = sys.run(&delete).map(|()| true);
        note(done, result);
        for device in devices {
            let result = sys.detach_xdp(&device);
            note(done, result);
        }
    }
}

/// The owner named by a rule's comment when it is sonde's (`Some(None)`: an older sonde's,
/// which names none); None for a rule without sonde's comment (one that merely contains the
/// text is not).
fn sonde_comment(words: &[String]) -> Option<Option<Owner>> {
    words.windows(2).find_map(|w| {
        (w[0] == "--comment")
            .then(|| owner::of_rule(&w[1]))
            .flatten()
    })
}

/// The devices of a netdev table's chains, as `nft list table` prints them (`device "ma"`),
/// each a valid interface name.
fn table_devices(listing: &str) -> Vec<String> {
    let mut devices: Vec<String> = listing
        .split("device ")
        .skip(1)
        .filter_map(|rest| rest.strip_prefix('"')?.split('"').next())
        .filter(|name| check_iface_name(name).is_ok())
        .map(str::to_string)
        .collect();
    devices.dedup();
    devices
}

/// Splits a line of `iptables -S` into words as iptables wrote them: a word with characters
/// other than letters, digits, `_` and `-` is in double quotes, with `"`, `\` and `'` escaped
/// by a backslash.
fn split_saved_rule(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return words;
        };
        let mut word = String::new();
        if first == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => word.extend(chars.next()),
                    '"' => break,
                    c => word.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                word.push(c);
            }
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A made-up host: listings by command line, commands that fail, and what ran.
    #[derive(Default)]
    struct FakeHost {
        listings: HashMap<String, String>,
        failing: Vec<String>,
        ran: Vec<String>,
        xdp: Vec<String>,
        running: Vec<u32>,
    }

    impl System for FakeHost {
        fn output(&mut self, cmd: &[&str]) -> anyhow::Result<Option<String>> {
            let line = cmd.join(" ");
            if self.failing.contains(&line) {
                anyhow::bail!("`{line}` failed: no such table");
            }
            Ok(Some(self.listings.get(&line).cloned().unwrap_or_default()))
        }
        fn run(&mut self, cmd: &[String]) -> anyhow::Result<()> {
            let line = cmd.join(" ");
            self.ran.push(line.clone());
            match self.failing.contains(&line) {
                true => anyhow::bail!("`{line}` failed: busy"),
                false => Ok(()),
            }
        }
        fn detach_xdp(&mut self, iface: &str) -> anyhow::Result<bool> {
            self.xdp.push(iface.to_string());
            Ok(iface != "mb")
        }
        fn is_running(&mut self, owner: &Owner) -> bool {
            self.running.contains(&owner.pid)
        }
    }

    const TAGGED: &str = "-m comment --comment sonde-intercept -j NFQUEUE --queue-num 3";

    #[test]
    fn every_table_of_both_families_is_searched_and_failures_do_not_stop_it() {
        let mut host = FakeHost::default();
        let list = |program: &str, table: &str| format!("{program} -w -t {table} -S");
        host.listings.insert(
            list("iptables", "mangle"),
            format!(
                "-P OUTPUT ACCEPT\n-A OUTPUT -d 198.19.254.2/32 {TAGGED}\n-A OUTPUT -p udp -m comment --comment \"sonde-intercept mine\" -j NFQUEUE\n-A OUTPUT -m comment --comment sonde-intercept-old -j ACCEPT\n"
            ),
        );
        host.listings.insert(
            list("ip6tables", "mangle"),
            format!("-A OUTPUT -d 2001:2:0:fe::2/128 {TAGGED}\n"),
        );
        host.listings.insert(
            list("iptables", "filter"),
            format!(
                "-A INPUT -s 198.19.254.2/32 {TAGGED}\n-A OUTPUT -d 198.19.254.9/32 {TAGGED}\n"
            ),
        );
        host.listings
            .insert(list("ip6tables", "raw"), format!("-A OUTPUT {TAGGED}\n"));
        // A failing listing and a failing deletion: both noted, neither stops the rest.
        host.failing.push(list("iptables", "security"));
        host.failing.push(format!(
            "iptables -w -t filter -D INPUT -s 198.19.254.2/32 {TAGGED}"
        ));
        host.listings.insert(
            "nft list tables netdev".into(),
            "table netdev sonde_intercept_4242\ntable netdev sonde_intercept_notmine\ntable netdev other\n".into(),
        );
        host.listings.insert(
            "nft list table netdev sonde_intercept_4242".into(),
            "table netdev sonde_intercept_4242 {\n\tchain in0 {\n\t\ttype filter hook ingress device \"ma\" priority filter; policy drop;\n\t}\n\tchain in1 {\n\t\ttype filter hook ingress device \"mb\" priority filter; policy drop;\n\t}\n}\n".into(),
        );
        let done = cleanup(&mut host, false);
        assert_eq!(
            host.ran,
            [
                format!("iptables -w -t filter -D INPUT -s 198.19.254.2/32 {TAGGED}"),
                format!("iptables -w -t filter -D OUTPUT -d 198.19.254.9/32 {TAGGED}"),
                format!("iptables -w -t mangle -D OUTPUT -d 198.19.254.2/32 {TAGGED}"),
                format!("ip6tables -w -t mangle -D OUTPUT -d 2001:2:0:fe::2/128 {TAGGED}"),
                format!("ip6tables -w -t raw -D OUTPUT {TAGGED}"),
                "nft delete table netdev sonde_intercept_4242".to_string(),
            ],
            "only sonde's exact comment, every table, both families"
        );
        assert_eq!(host.xdp, ["ma", "mb"], "the table's interfaces");
        // 4 rules (one of 5 failed), the table, ma's program (mb had none).
        assert_eq!(done.removed, 6, "{done:?}");
        assert_eq!(done.failures.len(), 2, "{done:?}");
        assert!(done.failures.iter().all(|f| !f.contains('\n')));
    }

    #[test]
    fn saved_rules_split_as_iptables_quoted_them() {
        assert_eq!(
            split_saved_rule(r#"-A OUTPUT -m comment --comment "a \"b\" c\\d" -j NFQUEUE"#),
            [
                "-A",
                "OUTPUT",
                "-m",
                "comment",
                "--comment",
                r#"a "b" c\d"#,
                "-j",
                "NFQUEUE"
            ]
        );
        assert_eq!(split_saved_rule("  "), Vec::<String>::new());
        assert_eq!(
            split_saved_rule("-A \"unterminated"),
            ["-A", "unterminated"]
        );
        assert_eq!(
            table_devices("device \"ma\" x device \"b\\\"ad\" device \"mb\""),
            ["ma", "mb"]
        );
    }

    /// cleanup removed a running intercept's rules and table: it went on filtering nothing,
    /// and learned of it only at its exit. What a running sonde made is spared now, and
    /// removed only with --force; what a dead one left goes.
    #[test]
    fn what_a_running_sonde_made_is_spared_unless_forced() {
        let host = || {
            let mut host = FakeHost::default();
            host.listings.insert(
                "iptables -w -t filter -S".into(),
                "-A OUTPUT -d 198.19.254.2/32 -m comment --comment sonde-intercept-4242-77 -j NFQUEUE\n\
                 -A OUTPUT -d 198.19.254.9/32 -m comment --comment sonde-intercept-5151-88 -j NFQUEUE\n"
                    .into(),
            );
            host.listings.insert(
                "nft list tables netdev".into(),
                "table netdev sonde_intercept_4242_77\ntable netdev sonde_intercept_5151_88\n"
                    .into(),
            );
            host.running = vec![4242];
            host
        };
        let mut spared = host();
        let done = cleanup(&mut spared, false);
        assert_eq!(
            spared.ran,
            [
                "iptables -w -t filter -D OUTPUT -d 198.19.254.9/32 -m comment --comment sonde-intercept-5151-88 -j NFQUEUE",
                "nft delete table netdev sonde_intercept_5151_88",
            ],
            "only the dead sonde's"
        );
        assert_eq!((done.removed, done.spared.as_slice()), (2, &[4242][..]));
        let mut forced = host();
        let done = cleanup(&mut forced, true);
        assert_eq!(forced.ran.len(), 4, "{:?}", forced.ran);
        assert_eq!((done.removed, done.spared.len()), (4, 0));
    }
}
