//! `sonde capture --profile`'s chart; the stage clock and the arithmetic are
//! `sonde_profile::capture`.

use std::path::Path;

use sonde_plot::stages::{labelled_bars, Bar};
pub use sonde_profile::capture::{start, Profile};

/// The one stacked bar of a run's profile, written to `png`.
pub fn plot(profile: &Profile, backend: &str, png: &Path) -> anyhow::Result<()> {
    let mut segments = profile.stages.clone();
    segments.push(("unstaged".into(), profile.unstaged_ns));
    if let Some(ns) = profile.filter_ns {
        segments.insert(0, ("filter (kernel)".into(), ns));
    }
    let title = format!("sonde capture --backend {backend}: CPU per captured packet by stage");
    let tick = "CPU per packet measured (getrusage)";
    let bar = Bar {
        batch: 0,
        stages: &segments,
        measured_ns: profile.measured_ns + profile.filter_ns.unwrap_or(0.0),
    };
    labelled_bars(&title, tick, vec![bar], vec![bar_label(backend)], png)
}

/// What the capture chart's one bar is labelled: the backend (capture has no batch size).
fn bar_label(backend: &str) -> String {
    format!("--backend {backend}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_names_the_backend_not_a_batch() {
        assert_eq!(bar_label("xdp"), "--backend xdp");
        assert!(!bar_label("ring").contains("batch"));
    }
}
