//! Grab's series for `--metrics`: the counters its status line already reads. The whole
//! breakdown of connections by status comes with the summary at the end.

use sonde_meter::metrics::Page;

use super::GrabStatus;

impl GrabStatus {
    pub(super) fn write_metrics(&self, page: &mut Page) {
        let c = &self.counts;
        let (finished, success) = (c.finished.get(), c.success.get());
        page.counter(
            "sonde_sent_total",
            "SYNs sent (first SYNs and retries)",
            c.syn_sent.get(),
        );
        let no_answer = self.syn_timeouts.min(finished - success);
        page.counters(
            "sonde_connections_total",
            "Connections ended, by status: success, no_answer (every SYN unanswered; known live with sonde's TCP only), other (refused, reset, timed out, closed, unreachable: the summary splits them)",
            "status",
            &[
                ("success", success),
                ("no_answer", no_answer),
                ("other", finished - success - no_answer),
            ],
        );
        page.gauge(
            "sonde_connections_open",
            "Connections open now",
            c.outstanding.get() as f64,
        );
        page.counter(
            "sonde_syn_retransmits_total",
            "SYNs sent again to targets that had not answered",
            self.syn_retransmitted,
        );
        page.counter(
            "sonde_retransmits_received_total",
            "Segments the servers sent twice",
            c.retransmits.get(),
        );
        page.counter(
            "sonde_invalid_total",
            "Frames to our addresses that did not validate (the engine's own count comes with the summary)",
            self.invalid,
        );
        page.counters(
            "sonde_drops_total",
            "Frames lost, by cause: sonde's receiver ring",
            "cause",
            &[("receiver", c.drops.get())],
        );
    }
}
