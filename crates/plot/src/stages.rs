//! The stacked-bar PNG of `sonde profile tx|rx|scan` and `sonde capture --profile`: one bar per
//! batch size, a segment per stage (bottom to top in path order, the kernel's rest on top), and
//! a black tick at the CPU per packet measured, which the bar should reach.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

use crate::COLORS;

/// One bar: a batch size's stages (name, ns per packet) and its measured CPU per packet.
pub struct Bar<'a> {
    pub batch: u32,
    pub stages: &'a [(String, f64)],
    pub measured_ns: f64,
}

/// Draws `bars` under the title `title`; `tick` names the black ticks (what was measured). Each
/// bar is labelled with its batch size.
pub fn stacked_bars(title: &str, tick: &str, bars: Vec<Bar>, png: &Path) -> anyhow::Result<()> {
    let labels = bars.iter().map(|b| format!("batch {}", b.batch)).collect();
    labelled_bars(title, tick, bars, labels, png)
}

/// [`stacked_bars`] with a label of the caller's under each bar (its `batch` is not shown).
pub fn labelled_bars(
    title: &str,
    tick: &str,
    bars: Vec<Bar>,
    labels: Vec<String>,
    png: &Path,
) -> anyhow::Result<()> {
    let fail = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", png.display());
    let top = bars
        .iter()
        .map(|b| {
            b.stages
                .iter()
                .map(|(_, ns)| ns)
                .sum::<f64>()
                .max(b.measured_ns)
        })
        .fold(1.0, f64::max)
        * 1.15;
    let root = BitMapBackend::new(png, (1000, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..bars.len() as f64 + 1.5, 0.0..top)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() + 2)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc("ns per packet")
        .draw()
        .map_err(|e| fail(&e))?;
    let names: Vec<&String> = bars
        .first()
        .map_or(Vec::new(), |b| b.stages.iter().map(|(n, _)| n).collect());
    for (k, name) in names.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let segments: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let below: f64 = b.stages[..k].iter().map(|(_, ns)| ns).sum();
                let x = i as f64;
                Rectangle::new(
                    [(x - 0.3, below), (x + 0.3, below + b.stages[k].1)],
                    color.filled(),
                )
            })
            .collect();
        chart
            .draw_series(segments)
            .map_err(|e| fail(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            PathElement::new(
                vec![(x - 0.4, b.measured_ns), (x + 0.4, b.measured_ns)],
                BLACK.stroke_width(3),
            )
        }))
        .map_err(|e| fail(&e))?
        .label(tick)
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(3)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", png.display()))?;
    Ok(())
}
