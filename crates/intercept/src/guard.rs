//! The fail-open guard: a child process that undoes sonde's path changes if sonde dies
//! without doing so itself.
//!
//! sonde tells it each undo command before making the change (one line each), and `forget`
//! when a change could not be made; `done` sends it away. End of input without `done` (sonde
//! was killed, the kernel closed the pipe) makes it run every command it holds, newest first.
//! It runs in its own process group, so a Ctrl-C or a terminal's hang-up meant for sonde does
//! not stop it.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use anyhow::anyhow;

/// The guard child and the pipe that keeps it waiting.
pub struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Guard {
    /// Starts `program args…` (sonde's own `intercept guard`), holding no command yet.
    pub fn start(program: &std::path::Path, args: &[&str]) -> anyhow::Result<Guard> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow!("starting the fail-open guard: {e}"))?;
        let stdin = child.stdin.take();
        Ok(Guard { child, stdin })
    }

    /// Hands the guard the command that undoes a change about to be made.
    pub fn learn(&mut self, undo: &[String]) -> anyhow::Result<()> {
        self.say(&command_line(undo))
    }

    /// The change last learned of was not made: the guard drops its command.
    pub fn forget_last(&mut self) -> anyhow::Result<()> {
        self.say(FORGET)
    }

    fn say(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("the fail-open guard has gone"))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| anyhow!("the fail-open guard is not listening: {e}"))
    }

    /// sonde undid everything itself: the guard can go.
    pub fn stand_down(mut self) {
        let _ = self.say(DONE);
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

const DONE: &str = "done";
const FORGET: &str = "forget";

/// One command as a line: words separated by the unit separator (no word contains it).
pub(crate) fn command_line(cmd: &[String]) -> String {
    cmd.join("\u{1f}")
}

/// The guard's side: learns commands until `done` (returns) or the end of its input (runs
/// them all, newest first, past any that fail).
pub fn guard_main(input: impl BufRead) -> anyhow::Result<()> {
    let mut commands: Vec<Vec<String>> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        match line.as_str() {
            DONE => return Ok(()),
            FORGET => {
                commands.pop();
            }
            _ => commands.push(line.split('\u{1f}').map(str::to_string).collect()),
        }
    }
    commands.reverse();
    crate::command::undo(&commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_undoes_what_it_learned_unless_told_done_or_to_forget() {
        let dir = std::env::temp_dir().join(format!("sonde-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = |name: &str| dir.join(name);
        let touch =
            |name: &str| command_line(&["touch".into(), marker(name).display().to_string()]);
        let input = format!("{}\ndone\n", touch("a"));
        guard_main(input.as_bytes()).unwrap();
        assert!(!marker("a").exists(), "undone although sonde said done");
        // sonde vanished after learning three changes, the last of which it could not make.
        let input = format!("{}\n{}\n{}\nforget\n", touch("b"), touch("c"), touch("d"));
        guard_main(input.as_bytes()).unwrap();
        assert!(
            marker("b").exists() && marker("c").exists(),
            "not undone after sonde vanished"
        );
        assert!(
            !marker("d").exists(),
            "undid a change it was told to forget"
        );
        // One failing command does not stop the others.
        let input = format!("{}\nfalse\n", touch("e"));
        assert!(guard_main(input.as_bytes()).is_err());
        assert!(marker("e").exists(), "stopped at the first failure");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
