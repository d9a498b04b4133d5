//! Stopping a run: Ctrl-C (SIGINT) and SIGTERM set a flag that the senders check between
//! batches; whatever stops the run (a signal, a failed receiver) says why.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use anyhow::Context;

/// Why a run stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Not stopped (yet).
    None,
    /// SIGINT or SIGTERM.
    Signal,
    /// The receiver failed (e.g. the output could not be written).
    ReceiverFailed,
}

/// The stop flag every thread of a run watches.
#[derive(Clone)]
pub struct Stop {
    flag: Arc<AtomicBool>,
    reason: Arc<AtomicU8>,
}

impl Stop {
    /// A flag that SIGINT and SIGTERM set.
    pub fn on_signals() -> anyhow::Result<Stop> {
        let stop = Stop::manual();
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, stop.flag.clone())
                .context("installing the Ctrl-C handler")?;
        }
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

    /// Clears the flag (a second Ctrl-C during the cooldown then ends the cooldown).
    pub fn rearm(&self) {
        self.flag.store(false, Ordering::Release);
    }

    /// Why the run stopped early; a signal leaves no reason of its own, so a set flag with no
    /// reason recorded is a signal.
    pub fn reason(&self) -> StopReason {
        match self.reason.load(Ordering::Acquire) {
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
}
