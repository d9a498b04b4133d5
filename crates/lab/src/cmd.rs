//! Running `ip`, `nft` and friends, with every failure turned into one line
//! that names the command and what it said.

use std::io;
use std::process::{Command, Stdio};

use anyhow::{anyhow, Result};

/// Runs `program args…` to completion and returns its stdout.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| spawn_error(program, &e))?;
    if !out.status.success() {
        return Err(anyhow!(
            "`{}` failed ({}): {}",
            shown(program, args),
            out.status,
            one_line(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip args…`
pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// `ip` with the arguments of a command line, split at white space, so calls
/// read like the shell commands they are. Only for arguments without spaces
/// (lab names, addresses, interface names and state paths have none).
pub(crate) fn ip_line(line: &str) -> Result<String> {
    ip(&line.split_whitespace().collect::<Vec<_>>())
}

/// `ip netns exec NS program args…`: runs a tool inside a namespace.
pub(crate) fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["netns", "exec", ns, program];
    all.extend_from_slice(args);
    ip(&all)
}

/// Why a program could not even start, with the package that provides it.
pub(crate) fn spawn_error(program: &str, e: &io::Error) -> anyhow::Error {
    let package = match program {
        "ip" => "iproute2",
        "nft" => "nftables",
        "nginx" => "nginx-light",
        other => other,
    };
    if e.kind() == io::ErrorKind::NotFound {
        anyhow!("cannot run `{program}`: not found (install {package})")
    } else {
        anyhow!("cannot run `{program}`: {e}")
    }
}

fn shown(program: &str, args: &[&str]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Tool output squeezed onto one line, so errors stay one line.
fn one_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        "no error message".to_string()
    } else {
        lines.join("; ")
    }
}
