//! From what the user asked to what is probed: targets ∩ allowlist − blocklists, × ports, and
//! the guardrails around it.
//!
//! Outside a lab the blocklists are the default one (the IANA special-purpose registries, unless
//! `--no-default-blocklist`), the system opt-out file (`/etc/sonde/blocklist.conf`, always, when
//! it exists) and every `-b` file. A list that is there but cannot be read (a dangling link, a
//! file or folder sonde may not read) stops the run: only "nothing at that path" skips the
//! opt-out file. Inside a lab only the lab's population may be probed (the lab
//! answers nothing else), and that population is lifted from the default blocklist, which lists
//! the benchmarking ranges the lab lives in.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use ipnet::{Ipv4Net, Ipv6Net};
use sonde_scan::targets::{
    default_blocklist, parse_targets, read_target_list, PrefixSet, TargetList, TargetSpace,
    TargetSpec, DEFAULT_BLOCKLIST,
};

/// The operators' opt-out list, applied to every scan when it exists.
pub const SYSTEM_BLOCKLIST: &str = "/etc/sonde/blocklist.conf";

/// A scan of more addresses than this (a /8) needs `--confirm-large-scan`.
pub const LARGE_SCAN: u64 = 1 << 24;

/// The lab a run is inside: what it can answer.
#[derive(Clone, Debug)]
pub struct LabScope {
    pub name: String,
    pub population: Ipv4Net,
    pub population6: Option<Ipv6Net>,
}

/// What the user asked for.
#[derive(Clone, Debug, Default)]
pub struct TargetRequest {
    /// Prefixes, ranges and addresses from the command line.
    pub tokens: Vec<String>,
    /// `-I FILE`: more of them, one per line (`addr:port` lines and sonde's csv output too).
    pub input_file: Option<PathBuf>,
    /// Such a list already in memory (a grab round's targets), in place of `input_file`.
    pub input_list: Option<TargetList>,
    /// The ports given (`-p`); `None`: the ports the input file names, else `default_ports`.
    pub ports: Option<Vec<u16>>,
    pub default_ports: Vec<u16>,
    pub allowlist: Option<PathBuf>,
    /// `-b FILE`, each added to the blocklist.
    pub blocklists: Vec<PathBuf>,
    /// Apply the IANA special-purpose blocklist.
    pub default_blocklist: bool,
    /// The system opt-out file to apply if it exists (normally [`SYSTEM_BLOCKLIST`]).
    pub system_blocklist: Option<PathBuf>,
    pub lab: Option<LabScope>,
}

/// The space to probe, with one line per decision the operator should see.
pub struct TargetPlan {
    pub space: TargetSpace,
    /// E.g. "blocklists: default (IANA special-purpose), /etc/sonde/blocklist.conf (3 entries)".
    pub notes: Vec<String>,
}

/// The targets as given, checked: parsed from the command line and `-I`, and more than a /8
/// only with `large_scan_ok` (`--confirm-large-scan`, or a dry run, which sends nothing). This
/// needs nothing of the host, so it runs before anything else: bad input fails first.
pub fn read_targets(
    tokens: &[String],
    input_file: Option<&Path>,
    large_scan_ok: bool,
) -> anyhow::Result<(Vec<String>, TargetSpec, Vec<u16>)> {
    let list = input_file.map(read_target_list).transpose()?;
    read_listed_targets(tokens, list, large_scan_ok)
}

/// [`read_targets`] with the `-I` list already read (or given in memory).
fn read_listed_targets(
    tokens: &[String],
    list: Option<TargetList>,
    large_scan_ok: bool,
) -> anyhow::Result<(Vec<String>, TargetSpec, Vec<u16>)> {
    let mut tokens = tokens.to_vec();
    let mut file_ports = Vec::new();
    if let Some(list) = list {
        tokens.extend(list.tokens);
        file_ports = list.ports;
    }
    if tokens.is_empty() {
        bail!("no targets: give prefixes, ranges or addresses, or -I FILE");
    }
    let spec = parse_targets(&tokens)?;
    if spec.address_count() > u128::from(LARGE_SCAN) && !large_scan_ok {
        bail!(
            "this scan covers {} addresses, more than a /8: add --confirm-large-scan if you mean it",
            spec.address_count()
        );
    }
    Ok((tokens, spec, file_ports))
}

/// Builds the target space from checked targets (see [`read_targets`]), enforcing the lab's
/// scope.
pub fn plan_targets(req: &TargetRequest) -> anyhow::Result<TargetPlan> {
    let (tokens, spec, file_ports) = match &req.input_list {
        Some(list) => read_listed_targets(&req.tokens, Some(list.clone()), true)?,
        None => read_targets(&req.tokens, req.input_file.as_deref(), true)?,
    };
    let ports = match (&req.ports, file_ports.is_empty()) {
        (Some(given), _) => given.clone(),
        (None, false) => file_ports,
        (None, true) => req.default_ports.clone(),
    };
    if let Some(lab) = &req.lab {
        check_inside_lab(&spec, lab)?;
    }
    let allow = req
        .allowlist
        .as_deref()
        .map(PrefixSet::from_file)
        .transpose()?;
    let system = system_blocklist(req)?;
    let (block, notes) = blocklist(req, system)?;
    let space = match TargetSpace::new(&spec, allow.as_ref(), &block, &ports) {
        Ok(space) => space,
        Err(e) if e.to_string().contains("no targets left") => {
            bail!("{}", explain_empty(&tokens, req, system, allow.as_ref()))
        }
        Err(e) => return Err(e),
    };
    Ok(TargetPlan { space, notes })
}

/// Every blocklist in force for a request (the default, the system opt-outs, `-b`), with a
/// line naming them: for tools that send to servers rather than walk a target space (`sonde
/// dns` checks its resolvers, and every server a walk meets, against it).
pub fn blocklist_in_force(req: &TargetRequest) -> anyhow::Result<(PrefixSet, Vec<String>)> {
    let system = system_blocklist(req)?;
    blocklist(req, system)
}

/// The system opt-out list, if there is one. Only "nothing at that path" means none: a dangling
/// link, or a path sonde may not look at, stops the run (`Path::exists` would say "none" and
/// skip the opt-outs silently).
fn system_blocklist(req: &TargetRequest) -> anyhow::Result<Option<&Path>> {
    let Some(path) = req.system_blocklist.as_deref() else {
        return Ok(None);
    };
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(Some(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => bail!(
            "cannot look at the opt-out list {}: {e}; sonde does not scan without the opt-outs it may hold: make it readable",
            path.display()
        ),
    }
}

/// Reads a blocklist (`what`: which one, for the message); one that cannot be read stops the
/// run with a line naming it, and the link's target when it is a dangling link.
fn read_blocklist(path: &Path, what: &str) -> anyhow::Result<PrefixSet> {
    if let Err(e) = std::fs::File::open(path) {
        let why = match std::fs::read_link(path) {
            Ok(target) => format!(
                "it is a link to {}, which cannot be opened ({e})",
                target.display()
            ),
            Err(_) => e.to_string(),
        };
        bail!(
            "cannot read {what} {}: {why}; sonde does not scan without it: fix it",
            path.display()
        );
    }
    PrefixSet::from_file(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// The union of every blocklist in force, and a line naming them.
fn blocklist(
    req: &TargetRequest,
    system: Option<&Path>,
) -> anyhow::Result<(PrefixSet, Vec<String>)> {
    let mut block = PrefixSet::new();
    let mut names = Vec::new();
    let mut notes = Vec::new();
    if req.default_blocklist {
        let mut default = default_blocklist();
        if let Some(lab) = &req.lab {
            let population = lab_population(lab);
            if !default.intersect(&population).is_empty() {
                default = default.subtract(&population);
                notes.push(format!(
                    "lab {}: its population is benchmarking space, on the default blocklist; lifted for this run",
                    lab.name
                ));
            }
        }
        block = block.union(&default);
        names.push("default (IANA special-purpose)".to_string());
    }
    if let Some(path) = system {
        block = block.union(&read_blocklist(path, "the opt-out list")?);
        names.push(path.display().to_string());
    }
    for path in &req.blocklists {
        block = block.union(&read_blocklist(path, "blocklist (-b)")?);
        names.push(path.display().to_string());
    }
    let listed = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    notes.push(format!("blocklists: {listed}"));
    Ok((block, notes))
}

fn lab_population(lab: &LabScope) -> PrefixSet {
    let mut tokens = vec![lab.population.to_string()];
    tokens.extend(lab.population6.map(|p| p.to_string()));
    PrefixSet::parse(&tokens).expect("a lab's population parses")
}

/// Inside a lab only its population can answer: anything else would be silently missing from
/// the results (and must never be sent to).
fn check_inside_lab(spec: &TargetSpec, lab: &LabScope) -> anyhow::Result<()> {
    let (lo, hi) = (
        u32::from(lab.population.network()),
        u32::from(lab.population.broadcast()),
    );
    let outside_v4 = spec
        .ipv4_intervals()
        .iter()
        .find(|&&(s, e)| s < lo || e > hi)
        .map(|&(s, e)| IpAddr::from(std::net::Ipv4Addr::from(if s < lo { s } else { e })));
    let outside_v6 = spec
        .ipv6_addrs()
        .find(|a| !lab.population6.is_some_and(|p| p.contains(a)))
        .map(IpAddr::from);
    if let Some(addr) = outside_v4.or(outside_v6) {
        let population = match lab.population6 {
            Some(p6) => format!("{} and {p6}", lab.population),
            None => lab.population.to_string(),
        };
        bail!(
            "target {addr} is outside lab {}'s population {population}: the lab answers only its population: give targets inside it (a real network is another matter: read \"Scanning real networks responsibly\" in sonde's README first)",
            lab.name
        );
    }
    Ok(())
}

/// Why nothing is left: the blocklist entries that cover the targets, and the flag that lifts
/// each.
fn explain_empty(
    tokens: &[String],
    req: &TargetRequest,
    system: Option<&Path>,
    allow: Option<&PrefixSet>,
) -> String {
    let Ok(targets) = PrefixSet::parse(tokens) else {
        return "no targets left after the blocklist/allowlist".into();
    };
    if let Some(allow) = allow {
        if targets.intersect(allow).is_empty() {
            return "no targets left: none of them is on the allowlist (-w)".into();
        }
    }
    if req.default_blocklist {
        let hits: Vec<String> = DEFAULT_BLOCKLIST
            .iter()
            .filter(|(prefix, _)| {
                PrefixSet::parse(&[prefix]).is_ok_and(|p| !p.intersect(&targets).is_empty())
            })
            .map(|(prefix, why)| format!("{prefix}, {why}"))
            .collect();
        if !hits.is_empty() {
            return format!(
                "no targets left: they are on the default blocklist ({}); --no-default-blocklist lifts it",
                hits.join("; ")
            );
        }
    }
    for path in system
        .into_iter()
        .chain(req.blocklists.iter().map(PathBuf::as_path))
    {
        if PrefixSet::from_file(path).is_ok_and(|b| !b.intersect(&targets).is_empty()) {
            return format!(
                "no targets left: they are on the blocklist {}{}",
                path.display(),
                if Some(path) == system {
                    " (the system opt-out list: its entries asked not to be scanned)"
                } else {
                    " (-b)"
                }
            );
        }
    }
    "no targets left after the blocklist/allowlist".into()
}

/// True when `path` is the system opt-out list.
pub fn is_system_blocklist(path: &Path) -> bool {
    path == Path::new(SYSTEM_BLOCKLIST)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tokens: &[&str]) -> TargetRequest {
        TargetRequest {
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            ports: Some(vec![80]),
            default_blocklist: true,
            ..TargetRequest::default()
        }
    }

    fn lab() -> LabScope {
        LabScope {
            name: "t".into(),
            population: "198.18.0.0/16".parse().unwrap(),
            population6: Some("2001:2::/120".parse().unwrap()),
        }
    }

    #[test]
    fn a_lab_lifts_its_population_from_the_default_blocklist_and_says_so() {
        let mut req = request(&["198.18.0.0/20"]);
        req.lab = Some(lab());
        let plan = plan_targets(&req).unwrap();
        assert_eq!(plan.space.addresses(), 4096);
        assert!(plan.notes[0].contains("lifted"), "{:?}", plan.notes);
    }

    #[test]
    fn a_lab_refuses_targets_outside_its_population() {
        for outside in [
            "198.19.0.0/24",
            "198.17.255.255",
            "192.0.2.1",
            "2001:2::1:0/128",
        ] {
            let mut req = request(&["198.18.0.0/24", outside]);
            req.lab = Some(lab());
            let err = plan_targets(&req).err().expect(outside).to_string();
            assert!(
                err.contains("outside lab t's population"),
                "{outside}: {err}"
            );
            // It points at the guardrails, not at a way out of the lab.
            assert!(err.contains("Scanning real networks responsibly"), "{err}");
            assert!(!err.contains("without --lab"), "{err}");
            assert_eq!(err.lines().count(), 1);
        }
    }

    #[test]
    fn outside_a_lab_the_error_names_the_blocklist_entry_and_the_flag() {
        let err = plan_targets(&request(&["198.18.0.0/20"]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("198.18.0.0/15") && err.contains("--no-default-blocklist"),
            "{err}"
        );
        let mut lifted = request(&["198.18.0.0/20"]);
        lifted.default_blocklist = false;
        assert_eq!(plan_targets(&lifted).unwrap().space.addresses(), 4096);
    }

    #[test]
    fn blocklist_files_add_to_the_default_and_the_system_list_applies_when_present() {
        let dir = std::env::temp_dir().join(format!("sonde-targets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (user, system) = (dir.join("b.txt"), dir.join("system.conf"));
        std::fs::write(&user, "198.18.0.0/24 # opt-out\n").unwrap();
        std::fs::write(&system, "198.18.1.0/24\n").unwrap();
        let mut req = request(&["198.18.0.0/22"]);
        req.default_blocklist = false;
        req.blocklists = vec![user.clone()];
        req.system_blocklist = Some(system.clone());
        let plan = plan_targets(&req).unwrap();
        assert_eq!(plan.space.addresses(), 512);
        assert!(plan.notes.last().unwrap().contains("system.conf"));
        req.tokens = vec!["198.18.1.0/25".into()];
        let err = plan_targets(&req).err().unwrap().to_string();
        assert!(
            err.contains("system.conf") && err.contains("opt-out"),
            "{err}"
        );
        req.system_blocklist = Some(dir.join("missing.conf"));
        assert_eq!(plan_targets(&req).unwrap().space.addresses(), 128);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Only "nothing there" skips the opt-out list: a dangling link, or a path that cannot be
    /// looked at, stops the scan with one line (it used to plan in full, "blocklists: none").
    #[test]
    fn an_opt_out_list_that_cannot_be_read_stops_the_scan() {
        let dir = std::env::temp_dir().join(format!("sonde-optout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dangling = dir.join("blocklist.conf");
        std::os::unix::fs::symlink(dir.join("gone.conf"), &dangling).unwrap();
        let a_file = dir.join("plain");
        std::fs::write(&a_file, "").unwrap();
        let mut req = request(&["198.18.0.0/24"]);
        req.default_blocklist = false;
        let unstattable = a_file.join("blocklist.conf");
        for (system, want) in [
            (&dangling, "it is a link to"),
            (&unstattable, "cannot look at the opt-out list"),
            (&dir, "cannot read the opt-out list"),
        ] {
            req.system_blocklist = Some(system.clone());
            let err = format!(
                "{:#}",
                plan_targets(&req).err().expect("planned without it")
            );
            assert!(err.contains(want), "{}: {err}", system.display());
            assert!(err.contains(&*system.to_string_lossy()), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        req.system_blocklist = None;
        for bad in [&dangling, &dir.join("missing.txt")] {
            req.blocklists = vec![bad.clone()];
            let err = format!(
                "{:#}",
                plan_targets(&req).err().expect("planned without -b")
            );
            assert!(err.contains("cannot read blocklist (-b)"), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn more_than_a_slash_8_needs_confirmation() {
        let tokens = vec!["0.0.0.0/7".to_string()];
        let err = read_targets(&tokens, None, false)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--confirm-large-scan"), "{err}");
        assert!(read_targets(&tokens, None, true).is_ok());
        assert!(read_targets(&["10.0.0.0/8".to_string()], None, false).is_ok());
    }
}
