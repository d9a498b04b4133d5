//! Which process made a rule or a table: its pid and when it started (field 22 of
//! /proc/PID/stat, clock ticks after boot), written into the rule's comment and the table's
//! name, so `cleanup` can tell what a running sonde still uses from what a dead one left (a
//! later process that got the same pid started later).

use std::sync::OnceLock;

/// How the comment of every NFQUEUE rule sonde adds begins (then `-PID-START` of the process
/// that added it; an older sonde wrote it alone). Cleanup matches it exactly.
pub const RULE_TAG: &str = "sonde-intercept";
/// The prefix of the nftables tables bridge mode adds (then `PID_START` of sonde's process).
pub const TABLE_PREFIX: &str = "sonde_intercept_";

/// A process, as a rule's comment or a table's name records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// When it started; None for a table of an older sonde, which recorded the pid alone.
    pub start: Option<u64>,
}

impl Owner {
    /// This process.
    pub fn me() -> Owner {
        static ME: OnceLock<Owner> = OnceLock::new();
        *ME.get_or_init(|| {
            let pid = std::process::id();
            Owner {
                pid,
                start: start_ticks(pid),
            }
        })
    }

    /// The comment of the rules this owner adds: `sonde-intercept-PID-START`.
    pub fn rule_tag(&self) -> String {
        format!("{RULE_TAG}-{}-{}", self.pid, self.start.unwrap_or(0))
    }

    /// The name of the netdev table this owner adds: `sonde_intercept_PID_START`.
    pub fn table_name(&self) -> String {
        format!("{TABLE_PREFIX}{}_{}", self.pid, self.start.unwrap_or(0))
    }

    /// Whether the owner still runs: the same pid, started at the same time (a pid alone, from
    /// an older sonde: a process of that pid that is a sonde).
    pub fn is_running(&self) -> bool {
        match self.start {
            Some(start) => start_ticks(self.pid) == Some(start),
            None => std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
                .is_ok_and(|comm| comm.trim() == "sonde"),
        }
    }
}

/// The owner a rule's comment names: `Some(None)` for a rule of sonde's that names none (an
/// older sonde's, tagged `sonde-intercept`), None for a comment that is not sonde's.
pub fn of_rule(comment: &str) -> Option<Option<Owner>> {
    let rest = comment.strip_prefix(RULE_TAG)?;
    if rest.is_empty() {
        return Some(None);
    }
    let (pid, start) = rest.strip_prefix('-')?.split_once('-')?;
    Some(Some(Owner {
        pid: digits(pid)?,
        start: Some(digits(start)?),
    }))
}

/// The owner a netdev table's name names, if it is sonde's: `sonde_intercept_PID_START`, or
/// `sonde_intercept_PID` from an older sonde.
pub fn of_table(name: &str) -> Option<Owner> {
    let rest = name.strip_prefix(TABLE_PREFIX)?;
    match rest.split_once('_') {
        Some((pid, start)) => Some(Owner {
            pid: digits(pid)?,
            start: Some(digits(start)?),
        }),
        None => Some(Owner {
            pid: digits(rest)?,
            start: None,
        }),
    }
}

/// A whole number written with digits only (no sign, no space).
fn digits<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// When process `pid` started: field 22 of /proc/PID/stat, counted after the command name
/// (which may hold spaces and parentheses: the last ')' ends it).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_comm) = stat.rsplit_once(')')?;
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_back_from_what_they_wrote() {
        let me = Owner::me();
        assert!(me.start.is_some(), "this process's start time");
        assert!(me.is_running());
        assert_eq!(of_rule(&me.rule_tag()), Some(Some(me)));
        assert_eq!(of_table(&me.table_name()), Some(me));
        assert_eq!(of_rule("sonde-intercept"), Some(None), "an older sonde's");
        for not_ours in [
            "sonde-intercept-mine",
            "sonde-intercept-1",
            "sonde-intercept-1-",
            "sonde-intercept-1-2-3",
            "sonde-intercept -1-2",
            "other",
        ] {
            assert_eq!(of_rule(not_ours), None, "{not_ours}");
        }
        assert_eq!(
            of_table("sonde_intercept_17"),
            Some(Owner {
                pid: 17,
                start: None
            })
        );
        for not_ours in [
            "sonde_intercept_",
            "sonde_intercept_x1",
            "sonde_intercept_1_x",
        ] {
            assert_eq!(of_table(not_ours), None, "{not_ours}");
        }
        // The same pid, another start: a later process, not the owner.
        let later = Owner {
            start: me.start.map(|s| s + 1),
            ..me
        };
        assert!(!later.is_running());
    }
}
