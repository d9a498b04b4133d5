//! The arithmetic of `sonde capture --profile`: where a captured packet's CPU goes, by stage, measured with the
//! stage clock on the capture and writer threads (sonde_meter::stages: a cycle-counter lap per
//! stage, thread CPU time around each system call, the instrumentation's own cost measured at
//! start and taken out), plus the filter's cost in the kernel, timed by the kernel's test runs
//! of its eBPF form.
//!
//! The check: the stages must explain at least 90 % of the CPU the run's threads used per
//! packet (getrusage, instrumentation taken out). What no stage saw is listed as "unstaged":
//! thread start and end, laps cut as preempted, the main thread's status line.

use sonde_capture::verdicts::Verdicts;
use sonde_meter::stages::{self, Calibration, Role, Stage};
use sonde_meter::CpuTimes;

/// The share of the measured CPU per packet the stages must explain.
const EXPLAINED_AT_LEAST: f64 = 0.9;

/// Packets of the output file the filter is timed on, and runs per packet.
const FILTER_SAMPLE: usize = 64;
const FILTER_RUNS: u32 = 2_000;

/// Turns the stage clock on (before any capture thread starts) and calibrates it.
pub fn start() -> Calibration {
    stages::enable(sonde_io::cycle_counter())
}

/// The per-packet figures of one run.
pub struct Profile {
    pub stages: Vec<(String, f64)>,
    pub unstaged_ns: f64,
    pub overhead_ns: f64,
    /// Laps longer than `stages::MAX_LAP_NS` (the thread was preempted or a long interrupt
    /// burst hit it), per packet: charged to no stage.
    pub cut_laps_ns: f64,
    /// CPU per packet of the run, instrumentation taken out.
    pub measured_ns: f64,
    /// The kernel's filter, per packet it judged (None: no file to sample, or no translation).
    pub filter_ns: Option<f64>,
}

impl Profile {
    /// Collects the threads' stage counters of a run that wrote `captured` packets using `cpu`.
    pub fn collect(cal: &Calibration, captured: u64, cpu: CpuTimes) -> Profile {
        let tally = stages::take(Role::Rx);
        stages::disable();
        let n = captured.max(1) as f64;
        let stages: Vec<(String, f64)> = Stage::CAPTURE
            .iter()
            .map(|&s| (s.name().to_string(), tally.ns(s, cal) / n))
            .collect();
        let overhead_ns = Stage::CAPTURE
            .iter()
            .map(|&s| tally.overhead_ns(s, cal))
            .sum::<f64>()
            / n;
        let measured_ns = (cpu.total().as_nanos() as f64 / n - overhead_ns).max(0.0);
        let staged: f64 = stages.iter().map(|(_, ns)| ns).sum();
        Profile {
            stages,
            unstaged_ns: (measured_ns - staged).max(0.0),
            overhead_ns,
            cut_laps_ns: tally.dropped_ticks as f64 / cal.ticks_per_ns / n,
            measured_ns,
            filter_ns: None,
        }
    }

    /// Share of the measured CPU per packet the stages explain.
    pub fn explained(&self) -> f64 {
        let staged: f64 = self.stages.iter().map(|(_, ns)| ns).sum();
        staged / self.measured_ns.max(1e-9)
    }

    /// Whether the stages explain enough of the CPU per packet (the profile's check).
    pub fn check_passed(&self) -> bool {
        self.explained() >= EXPLAINED_AT_LEAST
    }

    /// Times the filter (its XDP translation, in the kernel) on up to 64 packets of `file`, less
    /// the same test run of a program that keeps everything: the filter's own cost per packet.
    pub fn time_filter(&mut self, program: &[libc::sock_filter], file: &str) {
        self.filter_ns = filter_ns(program, file).ok().flatten();
    }

    pub fn table(&self, backend: &str) -> String {
        let mut out = format!("capture profile ({backend}), ns per captured packet:\n");
        for (name, ns) in &self.stages {
            out += &format!("  {name:<20} {ns:>9.1}\n");
        }
        out += &format!(
            "  {:<20} {:>9.1}   (of which laps cut as preempted, wall time: {:.1})\n",
            "unstaged", self.unstaged_ns, self.cut_laps_ns
        );
        out += &format!(
            "  {:<20} {:>9.1}   (getrusage, all threads; instrumentation's {:.1} taken out)\n",
            "= CPU per packet", self.measured_ns, self.overhead_ns
        );
        out += &format!(
            "  stages explain {:.1} % of it; check (at least {:.0} %): {}\n",
            self.explained() * 100.0,
            EXPLAINED_AT_LEAST * 100.0,
            if self.check_passed() {
                "passed"
            } else {
                "FAILED"
            }
        );
        match self.filter_ns {
            Some(ns) => out += &format!(
                "  filter, in the kernel: {ns:.1} ns per packet it judges (kernel test runs of its eBPF form, less an empty program's); it runs in the kernel's receive path, outside sonde's threads\n"
            ),
            None => out += "  filter, in the kernel: not timed (no output file to sample, or no XDP translation of it)\n",
        }
        out
    }
}

fn filter_ns(program: &[libc::sock_filter], file: &str) -> anyhow::Result<Option<f64>> {
    let (Ok(expr), Ok(empty)) = (
        Verdicts::load(program),
        Verdicts::load(&sonde_io::filter::accept_all()),
    ) else {
        return Ok(None);
    };
    let mut sample = Vec::new();
    sonde_capture::read::read_file(
        file,
        |_| Ok(()),
        |p| {
            if expr.can_judge(p.data) {
                sample.push(p.data.to_vec());
            }
            Ok(sample.len() < FILTER_SAMPLE)
        },
    )?;
    if sample.is_empty() {
        return Ok(None);
    }
    let mut total = 0.0;
    for frame in &sample {
        total += expr.run_ns(frame, FILTER_RUNS)? - empty.run_ns(frame, FILTER_RUNS)?;
    }
    Ok(Some((total / sample.len() as f64).max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(staged: f64, measured: f64) -> Profile {
        Profile {
            stages: vec![("copy".into(), staged)],
            unstaged_ns: (measured - staged).max(0.0),
            overhead_ns: 1.0,
            cut_laps_ns: 0.0,
            measured_ns: measured,
            filter_ns: None,
        }
    }

    #[test]
    fn the_table_says_whether_the_check_passed() {
        let good = profile(95.0, 100.0).table("ring");
        assert!(good.contains("check (at least 90 %): passed"), "{good}");
        let bad = profile(50.0, 100.0).table("ring");
        assert!(bad.contains("check (at least 90 %): FAILED"), "{bad}");
    }
}
