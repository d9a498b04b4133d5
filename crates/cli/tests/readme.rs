//! The README and the guide (`docs/`) stay true: every runnable example runs as pasted, and every
//! relative link leads to a file that exists.
//!
//! The rule for code blocks: a ` ```sh ` block runs. Each file's `sh` blocks, in order, make one
//! script, run by `sh -eux` in a scratch folder with `sonde` this build's binary (and `duckdb`
//! the DuckDB CLI that scripts/setup puts in `.venv/bin`), as a reader pasting them into one
//! shell would run them. Every other block is never run: ` ```console `
//! for commands a reader types that a test must not run (the set-up commands), ` ```text ` for
//! synopses, files, job scripts and commands that last minutes or reach past a lab (comparison
//! scripts, Slurm, Kubernetes, real networks), ` ```yaml ` and ` ```sql ` for what they say. Any
//! other kind of block is refused, so a runnable example cannot hide from this test.
//!
//! The safety rule: a script brings up its own labs and takes them down, and each of its lines
//! names one of them. The only change made to a script is the labs' names: each lab it brings up
//! (`sonde lab up --name demo`) gets a unique name, in `--name`, `--lab` and the namespaces'
//! names (`sonde-demo-…`), so two runs never share a lab, and a guard per lab takes it down even
//! when the script fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run_labs, sonde, Lab, SONDE};

/// The kinds of fenced block the README and the guide may hold; only `sh` runs.
const BLOCK_KINDS: [&str; 5] = ["sh", "console", "text", "yaml", "sql"];

/// The commands the README's tour shows, one example each.
const COMMANDS: [&str; 10] = [
    "lab",
    "scan",
    "grab",
    "dns",
    "latency",
    "capture",
    "intercept",
    "profile",
    "blast",
    "bench",
];

/// A whole script gets this long before it is stopped (the examples take seconds).
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md, then every Markdown file under docs/, in name order.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced block: its kind (the word after the opening fence) and its lines.
struct Block {
    kind: String,
    body: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (open.take(), fence) {
            (None, Some(kind)) => {
                open = Some(Block {
                    kind: kind.trim().to_string(),
                    body: String::new(),
                })
            }
            (Some(block), Some(_)) => found.push(block),
            (Some(mut block), None) => {
                block.body.push_str(line);
                block.body.push('\n');
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    found
}

/// The file's `sh` blocks, in order, as one script.
fn sh_script(text: &str) -> String {
    blocks(text)
        .into_iter()
        .filter(|b| b.kind == "sh")
        .map(|b| b.body)
        .collect()
}

/// The script's commands: its lines less comments and blank lines.
fn commands(script: &str) -> Vec<&str> {
    script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The names of the labs the script brings up, in order.
fn labs_brought_up(script: &str) -> Vec<String> {
    commands(script)
        .into_iter()
        .filter_map(|c| c.strip_prefix("sonde lab up --name "))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// `text` with `pattern` replaced by `with` wherever what follows `pattern` cannot continue a
/// lab's name (so `--name demo` does not match `--name demo2`).
fn replace_whole(text: &str, pattern: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(pattern) {
        let after = &rest[at + pattern.len()..];
        let whole = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if whole { with } else { pattern });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The script with the lab `from` renamed `to` wherever a line names it.
fn rename_lab(script: &str, from: &str, to: &str) -> String {
    let script = replace_whole(script, &format!("--name {from}"), &format!("--name {to}"));
    let script = replace_whole(&script, &format!("--lab {from}"), &format!("--lab {to}"));
    script.replace(&format!("sonde-{from}-"), &format!("sonde-{to}-"))
}

/// Whether `pattern` stands in `text` followed by something that cannot continue a lab's name.
fn contains_whole(text: &str, pattern: &str) -> bool {
    text.match_indices(pattern).any(|(at, _)| {
        !text[at + pattern.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Commands that send nothing, so need no lab: waiting for a background example, and reading a
/// capture file back (`capture -r` filters a file; its `xdp` backend runs the filter with the
/// kernel's test runs, attached to no interface).
const SENDS_NOTHING: [&str; 3] = ["wait", "wait ", "sonde capture -r "];

/// Whether a command names one of `labs`, or is one that sends nothing (writing a file with
/// `printf`, and nothing more, counts).
fn names_a_lab(command: &str, labs: &[String]) -> bool {
    let writes_a_file =
        command.starts_with("printf ") && !command.contains(['|', ';', '&', '`', '$']);
    writes_a_file
        || SENDS_NOTHING
            .iter()
            .any(|start| command == start.trim_end() || command.starts_with(start))
        || labs.iter().any(|lab| uses_lab(command, lab))
}

/// Whether `command` works on lab `lab`: names it, or one of its namespaces.
fn uses_lab(command: &str, lab: &str) -> bool {
    contains_whole(command, &format!("--name {lab}"))
        || contains_whole(command, &format!("--lab {lab}"))
        || command.contains(&format!("sonde-{lab}-"))
}

fn name_of(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn every_block_is_of_a_known_kind() {
    for path in doc_files() {
        for block in blocks(&read(&path)) {
            assert!(
                BLOCK_KINDS.contains(&block.kind.as_str()),
                "{}: a ```{} block; mark it one of {BLOCK_KINDS:?} (only sh runs)",
                name_of(&path),
                block.kind
            );
        }
    }
}

#[test]
fn every_sh_example_stays_in_its_own_lab() {
    let mut scripts = 0;
    for path in doc_files() {
        let script = sh_script(&read(&path));
        let commands = commands(&script);
        if commands.is_empty() {
            continue;
        }
        scripts += 1;
        let name = name_of(&path);
        let labs = labs_brought_up(&script);
        assert!(
            commands[0].starts_with("sonde lab up --name "),
            "{name}: its examples start by bringing up their lab, not with {}",
            commands[0]
        );
        for command in &commands {
            assert!(
                names_a_lab(command, &labs),
                "{name}: `{command}` names none of the labs it brought up ({labs:?})"
            );
        }
        // Each lab is taken down after the last command that uses it (a page may bring up a
        // second lab after taking its first down).
        for lab in &labs {
            let down = format!("sonde lab down --name {lab}");
            assert_eq!(
                commands.iter().rev().find(|c| uses_lab(c, lab)).copied(),
                Some(down.as_str()),
                "{name}: its examples end lab {lab} by taking it down"
            );
        }
    }
    assert!(scripts >= 10, "only {scripts} files have sh examples");
}

#[test]
fn the_readme_tours_every_command() {
    let script = sh_script(&read(&repo().join("README.md")));
    for command in COMMANDS {
        let runs = format!("sonde {command} ");
        assert!(
            commands(&script).iter().any(|c| c.contains(&runs)),
            "the README's tour has no `{runs}` example"
        );
    }
}

#[test]
fn the_readme_is_short() {
    let size = read(&repo().join("README.md")).len();
    assert!(
        size < 12_000,
        "README.md is {size} bytes: move detail into docs/"
    );
}

/// The targets of the Markdown links and images in `text`, outside code blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        // Code spans are the odd-numbered pieces between backticks.
        for (i, piece) in line.split('`').enumerate() {
            if i % 2 == 1 {
                continue;
            }
            let mut rest = piece;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let end = after.find(')').unwrap_or(after.len());
                targets.push(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut in_block = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn every_relative_link_leads_to_a_file() {
    let mut checked = 0;
    for path in doc_files() {
        let text = read(&path);
        let dir = path.parent().unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if file.is_empty() {
                path.clone()
            } else {
                dir.join(file)
            };
            checked += 1;
            assert!(
                linked.exists(),
                "{}: the link to {target} leads nowhere",
                name_of(&path)
            );
            if !fragment.is_empty() {
                let headings = anchors(&read(&linked));
                assert!(
                    headings.iter().any(|a| a == fragment),
                    "{}: {target}: no such heading ({headings:?})",
                    name_of(&path)
                );
            }
        }
    }
    assert!(checked >= 20, "only {checked} links found");
}

#[test]
fn link_and_block_parsing_finds_what_it_should() {
    let text = "# Top `x`\n[a](a.md) `[b](b.md)` ![c](img/c.png)\n```sh\n[d](d.md)\n```\n";
    assert_eq!(link_targets(text), ["a.md", "img/c.png"]);
    assert_eq!(anchors(text), ["top-x"]);
    assert_eq!(anchor("`sonde lab` — a network"), "sonde-lab--a-network");
    let script =
        "sonde lab up --name demo\nsonde lab down --name demo2\nip netns exec sonde-demo-a x\n";
    assert_eq!(
        rename_lab(script, "demo", "t1"),
        "sonde lab up --name t1\nsonde lab down --name demo2\nip netns exec sonde-t1-a x\n"
    );
    let labs = vec!["demo".to_string()];
    assert!(names_a_lab("sonde scan --lab demo 198.18.0.0/16", &labs));
    assert!(!names_a_lab("sonde scan --lab demo2 198.18.0.0/16", &labs));
    assert!(!names_a_lab("sonde scan 198.18.0.0/16", &labs));
    assert!(names_a_lab("printf 'a: 1\\n' > prometheus.yml", &labs));
    assert!(!names_a_lab("printf '198.18.0.1' | sonde scan -I -", &labs));
    assert!(!names_a_lab(
        "printf x > f; sonde scan 198.18.0.0/16",
        &labs
    ));
    assert!(!names_a_lab("printf \"$(sonde scan x)\"", &labs));
}

/// Runs `script` with `sh -eux` in `dir`, `sonde` on the PATH; its output goes to files there
/// (a background job holds no pipe of ours). Ok, or what went wrong with the end of its trace.
fn run_script(script: &str, dir: &Path) -> Result<(), String> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(SONDE, bin.join("sonde")).unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        repo().join(".venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::fs::write(dir.join("examples.sh"), script).unwrap();
    let log = dir.join("examples.log");
    let mut child = Command::new("sh")
        .args(["-eux", "examples.sh"])
        .current_dir(dir)
        .env("PATH", &path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("examples.out")).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > SCRIPT_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break std::os::unix::process::ExitStatusExt::from_raw(124 << 8);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if status.success() {
        return Ok(());
    }
    let trace = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: Vec<&str> = trace.lines().rev().take(30).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!("{status}\n{}", tail.join("\n")))
}

#[test]
fn every_example_runs_as_pasted() {
    if !can_run_labs() {
        return;
    }
    let mut failures = Vec::new();
    for path in doc_files() {
        let mut script = sh_script(&read(&path));
        if commands(&script).is_empty() {
            continue;
        }
        // One guard per lab the file brings up, under the guard's unique name.
        let guards: Vec<Lab> = labs_brought_up(&script)
            .iter()
            .map(|lab| {
                let guard = Lab::named();
                script = rename_lab(&script, lab, &guard.name);
                guard
            })
            .collect();
        let name = name_of(&path);
        eprintln!("running the examples of {name}");
        if let Err(why) = run_script(&script, &guards[0].dir) {
            failures.push(format!("{name}: {why}"));
            continue;
        }
        // The script's last lines took its labs down; the guards find nothing left to remove.
        let listed = String::from_utf8_lossy(&sonde(&["lab", "list"]).stdout).into_owned();
        for guard in &guards {
            if listed.lines().any(|l| l == guard.name) {
                failures.push(format!("{name}: lab {} left up", guard.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Whether a tcpdump command line (what follows `tcpdump`) has `-n`, alone or among other
/// one-letter flags (`-nr`).
fn tcpdump_says_n(args: &str) -> bool {
    args.split_whitespace()
        .take_while(|word| !word.starts_with('|'))
        .any(|word| {
            word.strip_prefix('-')
                .is_some_and(|flags| !flags.starts_with('-') && flags.contains('n'))
        })
}

/// The tcpdump command lines in `text`: what follows each `tcpdump ` that runs it (followed by
/// an option).
fn tcpdump_commands(text: &str) -> Vec<String> {
    text.lines()
        .flat_map(|line| {
            line.match_indices("tcpdump ")
                .map(move |(at, _)| &line[at + 8..])
        })
        .filter(|args| args.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// The commands a Markdown file shows: its fenced blocks, and the code spans of its prose that
/// pipe into tcpdump (prose may name `tcpdump -r` as what it is).
fn shown_commands(text: &str) -> String {
    let mut shown = String::new();
    for block in blocks(text) {
        shown.push_str(&block.body);
    }
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let spans = line.split('`').skip(1).step_by(2);
        for span in spans.filter(|s| !in_block && s.contains("| tcpdump")) {
            shown.push_str(span);
            shown.push('\n');
        }
    }
    shown
}

/// tcpdump without `-n` looks up every address it prints in DNS, over the host's resolver: the
/// examples, the guide's code and the comparison scripts never leave it out.
#[test]
fn every_tcpdump_says_n() {
    assert!(tcpdump_says_n("-nr -"));
    assert!(tcpdump_says_n("-i nx0 -n -w x"));
    assert!(!tcpdump_says_n("-r - | grep -n x"));
    assert!(!tcpdump_says_n("-i nx0 --number"));
    let mut sources: Vec<PathBuf> = doc_files();
    let bench = repo().join("bench");
    for entry in std::fs::read_dir(&bench).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            sources.push(path);
        }
    }
    let mut seen = 0;
    for path in sources {
        let Ok(mut text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "md") {
            text = shown_commands(&text);
        }
        for args in tcpdump_commands(&text) {
            seen += 1;
            assert!(
                tcpdump_says_n(&args),
                "{}: tcpdump {args}: give -n",
                name_of(&path)
            );
        }
    }
    assert!(seen >= 2, "only {seen} tcpdump commands found");
}
