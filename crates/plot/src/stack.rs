//! The PNG of `sonde profile stack`: one panel per protocol, start and stop latency against
//! payload size for each path, the medians as points and the fitted lines through them.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;
use sonde_meter::fit::LineFit;

use sonde_profile::stack::{kb, PathKind, Point, Proto, SeriesFit};

use crate::COLORS;

/// Draws `points` and `fits` into `path`.
pub fn draw(points: &[Point], fits: &[SeriesFit], path: &Path) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let protos: Vec<Proto> = [Proto::Udp, Proto::Tcp]
        .into_iter()
        .filter(|p| points.iter().any(|q| q.proto == *p))
        .collect();
    let root =
        BitMapBackend::new(path, (700 * protos.len().max(1) as u32, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, protos.len().max(1)));
    for (panel, proto) in panels.iter().zip(protos) {
        panel_for(panel, proto, points, fits).map_err(|e| err(&e))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

type Panel<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn panel_for(
    area: &Panel,
    proto: Proto,
    points: &[Point],
    fits: &[SeriesFit],
) -> Result<(), Box<dyn std::error::Error>> {
    let mine: Vec<&Point> = points.iter().filter(|p| p.proto == proto).collect();
    let x_max = mine.iter().map(|p| kb(p.size_bytes)).fold(1.0, f64::max) * 1.05;
    let y_max = mine
        .iter()
        .map(|p| p.stop_us.max(p.start_us))
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} start and stop latency", proto.name().to_uppercase()),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("payload (KB)")
        .y_desc("latency from the send call (µs)")
        .draw()?;
    // Kernel start, kernel stop, sonde start, sonde stop: the first four of the palette.
    let mut color = COLORS.iter();
    for path in [PathKind::Kernel, PathKind::Sonde] {
        let series: Vec<&&Point> = mine.iter().filter(|p| p.path == path).collect();
        let fit = fits.iter().find(|f| f.path == path && f.proto == proto);
        for (what, y, line) in [
            (
                "start",
                (|p: &Point| p.start_us) as fn(&Point) -> f64,
                fit.and_then(|f| f.start),
            ),
            ("stop", |p: &Point| p.stop_us, fit.and_then(|f| f.stop)),
        ] {
            let c = *color.next().expect("four colours for four series");
            if series.is_empty() {
                continue;
            }
            let dots: Vec<(f64, f64)> = series.iter().map(|p| (kb(p.size_bytes), y(p))).collect();
            let label = match line {
                Some(l) => format!("{} {what} = {l} µs", path.name()),
                None => format!("{} {what}", path.name()),
            };
            chart
                .draw_series(dots.iter().map(|&p| Circle::new(p, 4, c.filled())))?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
            if let Some(l) = line {
                chart.draw_series(LineSeries::new(fitted(&l, x_max), c.stroke_width(2)))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The fitted line from x = 0 to `x_max`.
fn fitted(line: &LineFit, x_max: f64) -> Vec<(f64, f64)> {
    vec![(0.0, line.at(0.0)), (x_max, line.at(x_max))]
}
