//! The worker threads of a run, in either mode: one per rule set and its source (a queue, a
//! pair of rings), sharing a stop flag. One thread failing stops them all; the first error is
//! the run's.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::{RuleCounter, RuleSet, ThreadCounters, Totals};

/// What a worker does with its source until the stop flag is set: its rule set, the flag, its
/// counters and the run's start.
pub trait Work<S>:
    Fn(S, &mut RuleSet, &AtomicBool, &ThreadCounters, Instant) -> anyhow::Result<()>
    + Send
    + Sync
    + Clone
    + 'static
{
}

impl<S, F> Work<S> for F where
    F: Fn(S, &mut RuleSet, &AtomicBool, &ThreadCounters, Instant) -> anyhow::Result<()>
        + Send
        + Sync
        + Clone
        + 'static
{
}

/// The running threads and what they share with whoever watches them.
pub struct Workers {
    pub stop: Arc<AtomicBool>,
    /// Each thread's counters, read while it runs (the status line, `--metrics`).
    pub counters: Vec<Arc<ThreadCounters>>,
    /// Each thread's per-rule counters.
    pub rule_counters: Vec<Arc<[RuleCounter]>>,
    pub start: Instant,
    handles: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Workers {
    /// Starts a thread per (rule set, source) pair, each running `work`.
    pub fn start<S: Send + 'static>(
        stop: Arc<AtomicBool>,
        sets: Vec<RuleSet>,
        sources: Vec<S>,
        work: impl Work<S>,
    ) -> Workers {
        let start = Instant::now();
        let mut counters = Vec::new();
        let mut rule_counters = Vec::new();
        let mut handles = Vec::new();
        for (mut set, source) in sets.into_iter().zip(sources) {
            let c = Arc::new(ThreadCounters::default());
            counters.push(c.clone());
            rule_counters.push(set.counters());
            let (stop, work) = (stop.clone(), work.clone());
            handles.push(std::thread::spawn(move || {
                let result = work(source, &mut set, &stop, &c, start);
                if result.is_err() {
                    stop.store(true, Relaxed); // one thread failing ends the run
                }
                result
            }));
        }
        Workers {
            stop,
            counters,
            rule_counters,
            start,
            handles,
        }
    }

    /// The counters of every thread, added up.
    pub fn totals(&self) -> Totals {
        Totals::sum(self.counters.iter().map(|c| c.as_ref()))
    }

    /// Sets the stop flag and waits for every thread: the first error one returned (a panic
    /// counts as one), if any.
    pub fn stop_and_join(&mut self) -> Option<anyhow::Error> {
        self.stop.store(true, Relaxed);
        let mut first = None;
        for h in std::mem::take(&mut self.handles) {
            let result = h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker thread panicked")));
            if let Err(e) = result {
                first.get_or_insert(e);
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(n: usize) -> Vec<RuleSet> {
        (0..n)
            .map(|_| RuleSet::new(&[], crate::Link::RawIp, n).unwrap())
            .collect()
    }

    #[test]
    fn one_failing_thread_stops_the_others_and_its_error_is_the_run_s() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Workers::start(stop.clone(), sets(3), vec![0u32, 1, 2], {
            move |source: u32, _: &mut RuleSet, stop: &AtomicBool, _: &ThreadCounters, _| {
                if source == 1 {
                    anyhow::bail!("thread 1 failed");
                }
                while !stop.load(Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Ok(())
            }
        });
        let error = workers.stop_and_join();
        assert_eq!(error.unwrap().to_string(), "thread 1 failed");
        assert!(stop.load(Relaxed));
        assert_eq!(workers.counters.len(), 3);
    }

    #[test]
    fn threads_that_end_well_give_no_error() {
        let mut workers = Workers::start(
            Arc::new(AtomicBool::new(false)),
            sets(2),
            vec![(), ()],
            |_, _: &mut RuleSet, _: &AtomicBool, c: &ThreadCounters, _| {
                c.packets.fetch_add(5, Relaxed);
                Ok(())
            },
        );
        assert!(workers.stop_and_join().is_none());
        assert_eq!(workers.totals().packets, 10);
    }
}
