//! The XDP translation of a filter (sonde_io::cbpf_xdp), as capture uses it: a verdict-only
//! program for `-r --backend xdp` and `--profile` (the live receivers behind it open in
//! [`crate::open`]).

use sonde_io::cbpf_xdp::{VerdictProgram, MIN_TEST_FRAME};

/// The translation loaded for test runs: the kernel judges one frame per call.
pub struct Verdicts(VerdictProgram);

impl Verdicts {
    pub fn load(program: &[libc::sock_filter]) -> anyhow::Result<Verdicts> {
        Ok(Verdicts(VerdictProgram::load(program)?))
    }

    /// Whether the kernel's test run can show the program all of `frame` (at least an
    /// Ethernet header, at most what it puts in one page).
    pub fn can_judge(&self, frame: &[u8]) -> bool {
        (MIN_TEST_FRAME..=self.0.longest_frame()).contains(&frame.len())
    }

    pub fn matches(&self, frame: &[u8]) -> std::io::Result<bool> {
        self.0.matches(frame)
    }

    /// The kernel's mean ns per run on `frame`, over `repeat` test runs.
    pub fn run_ns(&self, frame: &[u8], repeat: u32) -> std::io::Result<f64> {
        self.0.run_ns(frame, repeat)
    }
}
