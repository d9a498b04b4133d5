//! The one-line live status of long runs (stderr, redrawn in place; hidden when not a terminal
//! or with --quiet).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sonde_meter::{human_rate, Counter};

pub struct Status {
    bar: ProgressBar,
    last: (Instant, u64),
}

impl Status {
    /// A status line for `total` frames (or an open-ended run when `None`).
    pub fn new(total: Option<u64>, quiet: bool) -> Status {
        let target = if quiet {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(2)
        };
        let bar = ProgressBar::with_draw_target(total, target);
        let template = if total.is_some() {
            "{elapsed_precise} [{bar:30}] {percent:>3}% {human_pos}/{human_len} frames  {msg}  eta {eta}"
        } else {
            "{elapsed_precise} {human_pos} frames  {msg}"
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        Status {
            bar,
            last: (Instant::now(), 0),
        }
    }

    /// Redraws with the counter's current value and the rate since the last call.
    pub fn update(&mut self, counter: &Counter) {
        let now = Instant::now();
        let count = counter.get();
        let dt = now.duration_since(self.last.0).as_secs_f64().max(1e-6);
        let rate = (count - self.last.1) as f64 / dt;
        self.last = (now, count);
        self.bar.set_position(count);
        self.bar.set_message(format!("{}pps", human_rate(rate)));
    }

    /// Polls `counter` every half second until `done()` says the run has ended.
    pub fn follow(&mut self, counter: &Counter, mut done: impl FnMut() -> bool) {
        while !done() {
            std::thread::sleep(Duration::from_millis(100));
            if self.last.0.elapsed() >= Duration::from_millis(500) {
                self.update(counter);
            }
        }
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
