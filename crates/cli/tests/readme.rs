//! Every example command of the README runs as pasted: each `sonde …` line of the ```sh blocks
//! under "## Usage" is run in order with `sh -c`, in a scratch folder, with `sonde` this build's
//! binary. The only change is the lab's name: the README's `demo` becomes a unique name, so two
//! runs never share a lab (the safety rule), and a guard takes the lab down even on failure.

use std::path::Path;
use std::process::Command;

mod common;
use common::{can_run_labs, sonde, Lab, SONDE};

/// The `sonde` lines of the ```sh blocks of the README's Usage section, in order.
fn usage_examples(readme: &str) -> Vec<String> {
    let usage = readme
        .split("\n## Usage")
        .nth(1)
        .expect("the README has a Usage section");
    let usage = usage.split("\n## ").next().unwrap_or(usage);
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in usage.lines() {
        match line.trim_end() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            text if in_sh && text.starts_with("sonde ") => {
                // A trailing comment explains the line; it is not part of the command.
                let command = text.split("  #").next().unwrap_or(text).trim_end();
                lines.push(command.to_string());
            }
            _ => {}
        }
    }
    lines
}

#[test]
fn the_usage_section_has_runnable_examples() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let lines = usage_examples(&readme);
    assert!(lines.len() >= 10, "{lines:?}");
    assert!(
        lines[0].starts_with("sonde lab up --name demo"),
        "{}",
        lines[0]
    );
    assert!(lines
        .last()
        .unwrap()
        .starts_with("sonde lab down --name demo"));
}

#[test]
fn every_readme_example_runs_as_pasted() {
    if !can_run_labs() {
        return;
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let lines = usage_examples(&readme);
    // The guard's lab is brought up by the README's own first line, under the guard's name.
    let lab = Lab::named();
    let bin = lab.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(SONDE, bin.join("sonde")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for line in &lines {
        let command = line
            .replace("--name demo", &format!("--name {}", lab.name))
            .replace("--lab demo", &format!("--lab {}", lab.name));
        let out = Command::new("sh")
            .args(["-c", &command])
            .current_dir(&lab.dir)
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README example failed: {line}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The README's last line took the lab down; the guard finds nothing left to remove.
    let listed = String::from_utf8_lossy(&sonde(&["lab", "list"]).stdout).into_owned();
    assert!(!listed.lines().any(|l| l == lab.name), "{listed}");
}
