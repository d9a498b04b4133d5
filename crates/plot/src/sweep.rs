//! PNG plots of a transmit sweep: one line per backend, batch size on a log axis.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use serde::Serialize;

use crate::COLORS;

/// One row of a transmit sweep (`sonde bench tx`): a (backend, threads, batch size) and what
/// it reached.
#[derive(Serialize, Clone)]
pub struct SweepRow {
    pub backend: String,
    pub batch: usize,
    pub threads: usize,
    pub packets: u64,
    pub wall_s: f64,
    pub pps: f64,
    pub cpu_ns_per_packet: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
}

/// Plots `metric` against batch size, one series per (backend, threads).
pub fn sweep(
    rows: &[SweepRow],
    path: &Path,
    y_label: &str,
    note: &str,
    metric: impl Fn(&SweepRow) -> f64,
) -> anyhow::Result<()> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows {
        let name = if rows.iter().any(|o| o.threads != 1) {
            format!("{} ×{}", r.backend, r.threads)
        } else {
            r.backend.clone()
        };
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push((r.batch as f64, metric(r))),
            None => series.push((name, vec![(r.batch as f64, metric(r))])),
        }
    }
    let x_max = rows.iter().map(|r| r.batch as f64).fold(1.0, f64::max) * 1.5;
    let y_max = rows.iter().map(&metric).fold(0.0, f64::max) * 1.1 + 1e-9;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("plotting {}: {e}", path.display()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("sonde bench tx: {y_label} by batch size ({note})"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((0.8f64..x_max).log_scale(), 0.0..y_max)
        .map_err(|e| anyhow!("plotting {}: {e}", path.display()))?;
    chart
        .configure_mesh()
        .x_desc("frames per batch (log scale)")
        .y_desc(y_label)
        .y_label_formatter(&|v| {
            if *v >= 1e6 {
                format!("{:.1}M", v / 1e6)
            } else if *v >= 1e3 {
                format!("{:.1}k", v / 1e3)
            } else {
                format!("{v:.0}")
            }
        })
        .draw()
        .map_err(|e| anyhow!("plotting {}: {e}", path.display()))?;
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("plotting {}: {e}", path.display()))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow!("plotting: {e}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("plotting {}: {e}", path.display()))?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
