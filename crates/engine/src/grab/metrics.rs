//! Grab's series for `--metrics`: the counters its status line already reads. The whole
//! breakdown of connections by status comes with the summary at the end.

use sonde_meter::metrics::Page;

use super::GrabStatus;

impl GrabStatus {
    pub(super) fn write_metrics(&self, page: &mut Page) {
        let (finished, success) = (self.sum(|c| &c.finished), self.sum(|c| &c.success));
        page.counter(
            "sonde_sent_total",
            "SYNs sent (first SYNs and retries)",
            self.sum(|c| &c.syn_sent),
        );
        let no_answer = self.sum(|c| &c.syn_timeouts).min(finished - success);
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
            self.sum(|c| &c.outstanding) as f64,
        );
        page.counter(
            "sonde_syn_retransmits_total",
            "SYNs sent again to targets that had not answered",
            self.sum(|c| &c.syn_retransmitted),
        );
        page.counter(
            "sonde_retransmits_received_total",
            "Segments the servers sent twice",
            self.sum(|c| &c.retransmits),
        );
        page.counter(
            "sonde_invalid_total",
            "Frames to our addresses that did not validate (the engine's own count comes with the summary)",
            self.sum(|c| &c.invalid),
        );
        page.counters(
            "sonde_drops_total",
            "Frames lost, by cause: sonde's receiver ring",
            "cause",
            &[("receiver", self.sum(|c| &c.drops))],
        );
    }
}
