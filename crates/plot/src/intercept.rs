//! The chart of `sonde bench plot-intercept CSV PNG`: bench/compare-intercept's medians —
//! throughput against verdict batch size, one panel per mode, with the kernel alone and the
//! nftables rule as flat reference lines.

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;

use crate::COLORS;

/// One row of the medians CSV (the columns this chart needs).
#[derive(Debug, serde::Deserialize)]
struct Row {
    wire: String,
    mode: String,
    config: String,
    batch: String,
    test: String,
    mbit: f64,
}

/// The transfers drawn: TCP A to B with 1 and with 16 streams.
const TESTS: [&str; 2] = ["tcp1", "tcp16"];

/// Reads the medians CSV at `csv` and writes its chart to `png`.
pub fn plot_file(csv: &Path, png: &Path) -> anyhow::Result<()> {
    let mut reader =
        csv::Reader::from_path(csv).with_context(|| format!("reading {}", csv.display()))?;
    let rows: Vec<Row> = reader
        .deserialize()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", csv.display()))?;
    let mut panels: Vec<(&str, &str)> = Vec::new();
    for r in &rows {
        if !panels.contains(&(r.wire.as_str(), r.mode.as_str())) {
            panels.push((r.wire.as_str(), r.mode.as_str()));
        }
    }
    draw(&rows, &panels, png)
}

/// One panel per (wire, mode), wires in rows and modes in columns.
fn draw(rows: &[Row], panels: &[(&str, &str)], path: &Path) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let mut wires: Vec<&str> = panels.iter().map(|p| p.0).collect();
    wires.dedup();
    let columns = panels.len().div_ceil(wires.len().max(1)).max(1);
    let root = BitMapBackend::new(
        path,
        (560 * columns as u32, 480 * wires.len().max(1) as u32),
    )
    .into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_max = rows
        .iter()
        .filter_map(|r| r.batch.parse::<f64>().ok())
        .fold(1.0, f64::max)
        * 1.5;
    for (area, &(wire, mode)) in root
        .split_evenly((wires.len().max(1), columns))
        .iter()
        .zip(panels)
    {
        let rows: Vec<&Row> = rows
            .iter()
            .filter(|r| r.wire == wire && r.mode == mode)
            .collect();
        let y_max = rows.iter().map(|r| r.mbit).fold(0.0, f64::max) * 1.15 + 1.0;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("intercept {mode}, wire {wire}: iperf3 A→B"),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((0.8f64..x_max).log_scale(), 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("verdict batch (packets, log scale); 1 thread")
            .y_desc("Mbit/s")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, test) in TESTS.iter().enumerate() {
            let of = |config: &str| {
                rows.iter()
                    .find(|r| r.test == *test && r.config == config)
                    .map(|r| r.mbit)
            };
            let color = COLORS[i];
            // One curve with GSO packets judged whole, one with every wire packet judged.
            for (prefix, what, style) in [
                (
                    "sonde b",
                    if mode == "bridge" { " (ring)" } else { "" },
                    color.stroke_width(2),
                ),
                ("nogso b", " (no GSO)", color.mix(0.6).stroke_width(2)),
                ("xdp b", " (AF_XDP)", color.mix(0.6).stroke_width(2)),
            ] {
                let curve: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.test == *test && r.config.starts_with(prefix))
                    .filter_map(|r| Some((r.batch.parse().ok()?, r.mbit)))
                    .collect();
                if curve.is_empty() {
                    continue;
                }
                chart
                    .draw_series(LineSeries::new(curve.clone(), style))
                    .map_err(|e| err(&e))?
                    .label(format!("sonde{what}, {test}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                chart
                    .draw_series(
                        curve
                            .into_iter()
                            .map(|p| Circle::new(p, 3, style.color.filled())),
                    )
                    .map_err(|e| err(&e))?;
            }
            for (config, shade) in [("none", 0.9), ("nftables", 0.45)] {
                let Some(level) = of(config) else { continue };
                let style = color.mix(shade).stroke_width(1);
                chart
                    .draw_series(DashedLineSeries::new(
                        [(0.8, level), (x_max, level)],
                        6,
                        4,
                        style,
                    ))
                    .map_err(|e| err(&e))?
                    .label(format!(
                        "{}, {test}",
                        if config == "none" {
                            "kernel alone"
                        } else {
                            "nftables rule"
                        }
                    ))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::MiddleRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))
}
