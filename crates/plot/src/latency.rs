//! The pictures of `sonde latency run`: a heat map per rate (time on x, RTT on a log axis on y,
//! how many echoes fell in each cell as colour, with a colour bar), and every rate's
//! percentile distribution on one chart. The heat map is what shows outliers a median hides.

use std::path::Path;

use anyhow::anyhow;
use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use sonde_latency::Sample;

use crate::COLORS;

const TIME_BINS: usize = 120;
const RTT_BINS: usize = 80;

/// What a heat map is of, for its title.
pub struct HeatTitle<'a> {
    pub rate: f64,
    pub path: &'a str,
    pub size: usize,
}

fn plot_err(path: &Path) -> impl Fn(String) -> anyhow::Error + '_ {
    move |e| anyhow!("plotting {}: {e}", path.display())
}

/// Counts of samples per (time bin, log-RTT bin), and the axes' ranges.
struct Grid {
    counts: Vec<u32>,
    t_max_s: f64,
    lo_us: f64,
    hi_us: f64,
}

impl Grid {
    fn of(samples: &[Sample]) -> Grid {
        let t_max_s = samples.iter().map(|s| s.sent_ns).max().unwrap_or(0) as f64 / 1e9;
        let us = |s: &Sample| s.rtt_ns.max(1) as f64 / 1e3;
        let lo_us = samples.iter().map(us).fold(f64::MAX, f64::min).min(1e9);
        let hi_us = samples.iter().map(us).fold(0.0, f64::max);
        // A decade at least, from a round number, so the log axis reads well.
        let lo_us = 10f64.powf(lo_us.max(0.1).log10().floor());
        let hi_us = (10f64.powf(hi_us.max(lo_us * 10.0).log10().ceil())).max(lo_us * 10.0);
        let mut counts = vec![0u32; TIME_BINS * RTT_BINS];
        let t_span = t_max_s.max(1e-9);
        let (llo, lspan) = (lo_us.log10(), hi_us.log10() - lo_us.log10());
        for s in samples {
            let tx = ((s.sent_ns as f64 / 1e9) / t_span * TIME_BINS as f64) as usize;
            let ry = ((us(s).log10() - llo) / lspan * RTT_BINS as f64) as usize;
            counts[tx.min(TIME_BINS - 1) * RTT_BINS + ry.min(RTT_BINS - 1)] += 1;
        }
        Grid {
            counts,
            t_max_s: t_span,
            lo_us,
            hi_us,
        }
    }

    fn cell_us(&self, y: usize) -> (f64, f64) {
        let (llo, lhi) = (self.lo_us.log10(), self.hi_us.log10());
        let at = |i: usize| 10f64.powf(llo + (lhi - llo) * i as f64 / RTT_BINS as f64);
        (at(y), at(y + 1))
    }
}

/// Colour of a count on a log scale from 1 to `max` (empty cells stay white).
fn colour(count: u32, max: u32) -> RGBColor {
    let h = ((count as f64).ln() / (max.max(2) as f64).ln()).clamp(0.0, 1.0);
    ViridisRGB.get_color(h as f32)
}

/// Writes the heat map of one rate's samples to `path`.
pub fn heat_map(samples: &[Sample], title: &HeatTitle, path: &Path) -> anyhow::Result<()> {
    let e = plot_err(path);
    let grid = Grid::of(samples);
    let max = grid.counts.iter().copied().max().unwrap_or(0);
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let (main, bar) = root.split_horizontally(880);
    let mut chart = ChartBuilder::on(&main)
        .caption(
            format!(
                "RTT over time at {} pps, {} ({} B payloads)",
                thousands(title.rate),
                title.path,
                title.size
            ),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..grid.t_max_s, (grid.lo_us..grid.hi_us).log_scale())
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("time since the first message (s)")
        .y_desc("round-trip time (µs, log scale)")
        .y_label_formatter(&|v| micros(*v))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let dt = grid.t_max_s / TIME_BINS as f64;
    let cells = (0..TIME_BINS).flat_map(|x| (0..RTT_BINS).map(move |y| (x, y)));
    chart
        .draw_series(cells.filter_map(|(x, y)| {
            let n = grid.counts[x * RTT_BINS + y];
            (n > 0).then(|| {
                let (y0, y1) = grid.cell_us(y);
                Rectangle::new(
                    [(x as f64 * dt, y0), ((x + 1) as f64 * dt, y1)],
                    colour(n, max).filled(),
                )
            })
        }))
        .map_err(|x| e(x.to_string()))?;
    colour_bar(&bar, max).map_err(|x| e(x.to_string()))?;
    root.present()
        .map_err(|x| anyhow!("writing {}: {x}", path.display()))?;
    Ok(())
}

fn colour_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    max: u32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let top = (max.max(2)) as f64;
    let mut bar = ChartBuilder::on(area)
        .margin_top(45)
        .margin_bottom(45)
        .margin_right(10)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..1.0, (1.0..top).log_scale())?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_desc("echoes per cell")
        .y_label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 14))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let steps = 100;
    bar.draw_series((0..steps).map(|i| {
        let a = top.powf(i as f64 / steps as f64);
        let b = top.powf((i + 1) as f64 / steps as f64);
        Rectangle::new([(0.0, a), (1.0, b)], colour(a.round() as u32, max).filled())
    }))?;
    Ok(())
}

/// One rate's histogram, for the percentile chart.
pub struct RateCurve<'a> {
    pub rate: f64,
    pub hist: &'a Histogram<u64>,
}

/// Every rate's RTT against percentile, on an axis that spreads the tail: x = 1/(1-q), log.
pub fn percentiles(curves: &[RateCurve], title: &str, path: &Path) -> anyhow::Result<()> {
    let e = plot_err(path);
    // q from 0 to 1 - 1e-5, evenly in log(1/(1-q)).
    let qs: Vec<f64> = (0..=100)
        .map(|i| 1.0 - 10f64.powf(-(i as f64) * 0.05))
        .collect();
    let y_max = curves
        .iter()
        .map(|c| c.hist.max() as f64 / 1e3)
        .fold(1.0, f64::max);
    let y_min = curves
        .iter()
        .filter(|c| !c.hist.is_empty())
        .map(|c| c.hist.min().max(1) as f64 / 1e3)
        .fold(f64::MAX, f64::min)
        .min(y_max);
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (1.0..1e5).log_scale(),
            ((y_min * 0.8)..(y_max * 1.25)).log_scale(),
        )
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("round-trip time (µs, log scale)")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|v| micros(*v))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    for (i, c) in curves.iter().filter(|c| !c.hist.is_empty()).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = qs
            .iter()
            .map(|&q| (1.0 / (1.0 - q), c.hist.value_at_quantile(q) as f64 / 1e3))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(format!("{} pps", thousands(c.rate)))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(x.to_string()))?;
    root.present()
        .map_err(|x| anyhow!("writing {}: {x}", path.display()))?;
    Ok(())
}

/// 1/(1-q) as a percentile: 2 → "50%", 100 → "99%", 1e4 → "99.99%".
fn percentile_label(x: f64) -> String {
    let q = (1.0 - 1.0 / x) * 100.0;
    let digits = (x.log10().round() as i32 - 2).max(0) as usize;
    format!("{q:.digits$}%")
}

/// An axis label in µs: whole numbers from 10 up, one decimal below.
fn micros(v: f64) -> String {
    if v >= 10.0 {
        thousands(v)
    } else {
        format!("{v:.1}")
    }
}

/// 20000 → "20,000".
pub fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_people_write_them() {
        assert_eq!(thousands(20_000.0), "20,000");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1e4), "99.99%");
        assert_eq!(percentile_label(10.0), "90%");
    }

    #[test]
    fn every_sample_lands_in_one_cell() {
        let samples: Vec<Sample> = (0..1000u64)
            .map(|i| Sample {
                sent_ns: i * 1_000_000,
                rtt_ns: 20_000 + (i % 7) * 90_000,
            })
            .collect();
        let g = Grid::of(&samples);
        assert_eq!(g.counts.iter().map(|&c| c as usize).sum::<usize>(), 1000);
        assert!(
            g.lo_us <= 20.0 && g.hi_us >= 560.0,
            "{} {}",
            g.lo_us,
            g.hi_us
        );
    }
}
