//! What the lab integration tests share: running the built `sonde`, and a lab guard that removes
//! its lab (and scratch folder) when dropped — also when an assertion fails.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

pub const SONDE: &str = env!("CARGO_BIN_EXE_sonde");

/// Lab tests need root (namespaces, raw sockets); without it they say so and pass vacuously.
pub fn can_run_labs() -> bool {
    let ok = nix::unistd::geteuid().is_root() && Command::new("ip").arg("-V").output().is_ok();
    if !ok {
        eprintln!("skipping lab test: needs root and iproute2");
    }
    ok
}

pub fn sonde(args: &[&str]) -> Output {
    Command::new(SONDE)
        .args(args)
        .output()
        .expect("running sonde")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A uniquely named lab, removed on drop.
pub struct Lab {
    pub name: String,
    pub dir: PathBuf,
}

impl Lab {
    /// A unique name and scratch folder for a lab the test brings up itself; removed on drop
    /// like any other.
    pub fn named() -> Lab {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("sonde-test-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        Lab { name, dir }
    }

    pub fn up(extra: &[&str]) -> Lab {
        let lab = Lab::named();
        let mut args = vec!["lab", "up", "--name", &lab.name];
        args.extend_from_slice(extra);
        let out = sonde(&args);
        assert!(out.status.success(), "lab up: {}", stderr(&out));
        lab
    }

    /// A path in the lab's scratch folder.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_string()
    }

    /// `sonde scan` in this lab (default blocklist lifted: the lab's range is on it), quietly.
    pub fn scan(&self, extra: &[&str]) -> Output {
        let mut args = vec!["scan", "--lab", &self.name, "--no-default-blocklist", "-q"];
        args.extend_from_slice(extra);
        sonde(&args)
    }
}

impl Lab {
    /// `sonde lab score` of this lab with `args` (port, answer, results file): its one line.
    pub fn score(&self, args: &[&str]) -> String {
        let mut all = vec!["lab", "score", "--name", &self.name];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&sonde(&all).stdout).into_owned()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = sonde(&["lab", "down", "--name", &self.name]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    /// `sonde lab status --json` of this lab.
    pub fn status(&self) -> serde_json::Value {
        let out = sonde(&["lab", "status", "--name", &self.name, "--json"]);
        assert!(out.status.success(), "lab status: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("lab status --json")
    }

    /// `sonde lab truth` of this lab with `args`: its rows, each split at commas (header
    /// checked and left out).
    pub fn truth(&self, args: &[&str]) -> Vec<Vec<String>> {
        let mut all = vec!["lab", "truth", "--name", &self.name];
        all.extend_from_slice(args);
        let out = sonde(&all);
        assert!(out.status.success(), "lab truth: {}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("addr,port,answer,service"));
        lines
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    }

    /// `sonde lab score` of this lab with `args`, the whole output (for exit codes and errors).
    pub fn score_output(&self, args: &[&str]) -> Output {
        let mut all = vec!["lab", "score", "--name", &self.name];
        all.extend_from_slice(args);
        sonde(&all)
    }

    /// Runs `f` on a thread that has entered this lab's scanner namespace (and only there).
    pub fn in_scan<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                sonde_lab::enter_scan_ns(&self.name).expect("entering the scanner namespace");
                f()
            })
            .join()
            .expect("scanner-namespace thread panicked")
        })
    }
}

/// The numbers of `lab score`'s grab line: (completed, live, bodies correct, wrong bodies,
/// false positives).
pub fn grab_score(line: &str) -> (u64, u64, u64, u64, u64) {
    let number = |after: &str| -> u64 {
        let rest = line
            .split(after)
            .nth(1)
            .unwrap_or_else(|| panic!("{after}: {line}"));
        let word = rest.split_whitespace().next().unwrap();
        word.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap()
    };
    (
        number("completed "),
        number(" of "),
        number("bodies correct "),
        number("wrong bodies "),
        number("false positives "),
    )
}

/// A small tmpfs on a folder of the lab's scratch space: a disk that fills. Unmounted on drop,
/// also when the test fails.
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    pub fn mount(lab: &Lab, kib: u32) -> SmallDisk {
        let dir = lab.dir.join("disk");
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "sonde-test"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount -t tmpfs");
        SmallDisk(dir)
    }

    pub fn file(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }

    /// Fills what is left of it.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = [0u8; 4096];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
