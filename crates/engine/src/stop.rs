//! Stopping a run: the signals of [`STOP_SIGNALS`] (Ctrl-C, SIGTERM, a hangup, SIGQUIT) set a
//! flag that the senders check between batches; whatever stops the run (a signal, a failed
//! receiver) says why. Every long-running command registers the same set, so a dropped SSH
//! session ends a run as Ctrl-C does: rows flushed, files finished, rules removed.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use anyhow::Context;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

/// The signals that end a long-running command cleanly, as Ctrl-C does: SIGINT (Ctrl-C),
/// SIGTERM (kill, a job scheduler), SIGHUP (the terminal went away: a dropped SSH session) and
/// SIGQUIT (Ctrl-\\). Left at their defaults, the last two would kill sonde with its output
/// buffers unwritten and its files unfinished.
pub const STOP_SIGNALS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// Makes every signal of [`STOP_SIGNALS`] set `flag`. A SIGHUP that was ignored when sonde
/// started stays ignored: that is what `nohup sonde …` asks for (the run outlives the
/// session).
pub fn set_on_stop_signals(flag: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let ignored = ignored_signals();
    for signal in STOP_SIGNALS {
        if signal == SIGHUP && ignored.is_some_and(|mask| is_in(mask, signal)) {
            continue;
        }
        signal_hook::flag::register(signal, flag.clone())
            .with_context(|| format!("installing the handler of signal {signal}"))?;
    }
    Ok(())
}

/// The signals this process ignores, as a mask (bit n-1 for signal n): the `SigIgn` line of
/// /proc/self/status, which needs no unsafe call to read. `None` if it cannot be read.
fn ignored_signals() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_sig_ign(&status)
}

fn parse_sig_ign(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

fn is_in(mask: u64, signal: i32) -> bool {
    (1..=64).contains(&signal) && mask & (1 << (signal - 1)) != 0
}

/// Why a run stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Not stopped (yet).
    None,
    /// One of [`STOP_SIGNALS`].
    Signal,
    /// The receiver failed (e.g. the output could not be written).
    ReceiverFailed,
    /// Another part of the run failed: a sender, or the status file.
    Failed,
}

/// The stop flag every thread of a run watches.
#[derive(Clone)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    reason: Arc<AtomicU8>,
}

impl Stop {
    /// A flag that every signal of [`STOP_SIGNALS`] sets.
    pub fn on_signals() -> anyhow::Result<Stop> {
        let stop = Stop::manual();
        set_on_stop_signals(&stop.flag)?;
        Ok(stop)
    }

    /// A flag only the program sets (tests, in-process runs).
    pub fn manual() -> Stop {
        Stop {
            flag: Arc::new(AtomicBool::new(false)),
            reason: Arc::new(AtomicU8::new(0)),
        }
    }

    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    pub fn set(&self, why: StopReason) {
        let _ = self
            .reason
            .compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Relaxed);
        self.flag.store(true, Ordering::Release);
    }

    /// Clears the flag (a second Ctrl-C during the cooldown then ends the cooldown). A signal
    /// that set it stays recorded: the run was still interrupted.
    pub fn rearm(&self) {
        if self.flag.swap(false, Ordering::AcqRel) {
            let _ = self.reason.compare_exchange(
                0,
                StopReason::Signal as u8,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Why the run stopped early; a signal leaves no reason of its own, so a set flag with no
    /// reason recorded is a signal.
    pub fn reason(&self) -> StopReason {
        match self.reason.load(Ordering::Acquire) {
            3 => StopReason::Failed,
            2 => StopReason::ReceiverFailed,
            1 => StopReason::Signal,
            _ if self.is_set() => StopReason::Signal,
            _ => StopReason::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_sticks() {
        let stop = Stop::manual();
        assert_eq!(stop.reason(), StopReason::None);
        stop.set(StopReason::ReceiverFailed);
        stop.set(StopReason::Signal);
        assert_eq!(stop.reason(), StopReason::ReceiverFailed);
        stop.rearm();
        assert!(!stop.is_set());
    }

    /// A grab clears the flag after the first Ctrl-C to wait for a second; it used to forget
    /// the first, and report an interrupted grab as complete, with no final checkpoint.
    #[test]
    fn a_rearmed_stop_still_says_a_signal_came() {
        let stop = Stop::manual();
        stop.rearm();
        assert_eq!(stop.reason(), StopReason::None, "nothing came");
        stop.flag().store(true, Ordering::Release); // what a signal handler does
        stop.rearm();
        assert!(!stop.is_set());
        assert_eq!(stop.reason(), StopReason::Signal);
    }

    #[test]
    fn the_ignored_mask_is_read_from_proc_status() {
        let status = "Name:\tsonde\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000001\nSigCgt:\t0000000180004002\n";
        let mask = parse_sig_ign(status).unwrap();
        assert!(is_in(mask, SIGHUP), "SIGHUP is signal 1, bit 0");
        assert!(!is_in(mask, SIGINT));
        assert_eq!(parse_sig_ign("Name:\tx\n"), None);
        assert!(!is_in(u64::MAX, 0) && !is_in(u64::MAX, 65));
        assert!(
            ignored_signals().is_some(),
            "/proc/self/status has no SigIgn"
        );
    }

    /// A hangup and a SIGQUIT stop a run as Ctrl-C does, rather than kill it (without the
    /// handlers, raising them here would end this test process).
    #[test]
    fn a_hangup_and_a_quit_set_the_flag() {
        let stop = Stop::on_signals().unwrap();
        for signal in [SIGQUIT, SIGHUP, SIGTERM, SIGINT] {
            if signal == SIGHUP && ignored_signals().is_some_and(|m| is_in(m, SIGHUP)) {
                eprintln!("SIGHUP is ignored here (nohup): it stays ignored, as it should");
                continue;
            }
            stop.rearm();
            signal_hook::low_level::raise(signal).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !stop.is_set() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(stop.is_set(), "signal {signal} did not set the flag");
            assert_eq!(stop.reason(), StopReason::Signal);
        }
    }
}
