//! The chart of `sonde bench plot-capture CSV PNG`: the picture of `bench/compare-capture`'s medians. One row
//! of panels per frame size; on the left the share of expected frames a tool failed to write, on
//! the right its CPU time per captured frame, both against the rate the sender reached (x is
//! `sent_pps`, not the asked-for rate, because "max" is a different rate for every tool). One
//! colour per tool; the unfiltered runs are solid lines with filled markers, filtered runs dashed
//! with hollow markers. Only rows whose status is `ok` are drawn.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use plotters::coord::Shift;
use plotters::element::ComposedElement;
use plotters::prelude::*;
use serde::Deserialize;

use crate::COLORS;

/// Reads the medians CSV at `csv` and writes its chart to `png`.
pub fn plot_file(csv: &Path, png: &Path) -> anyhow::Result<()> {
    let rows = read_rows(csv)?;
    let title = format!(
        "capture comparison ({})",
        csv.file_name().unwrap_or_default().to_string_lossy()
    );
    draw(&rows, png, &title)
}

/// The columns of a medians row this chart uses (the CSV has more; they are ignored). Rows that
/// are not `ok` have empty numbers, hence the options.
#[derive(Deserialize)]
struct CsvRow {
    size: u32,
    filter: String,
    tool: String,
    status: String,
    sent_pps: Option<f64>,
    lost_share: Option<f64>,
    cpu_ns: Option<f64>,
}

/// One `ok` row, in the units drawn.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    size: u32,
    filter: String,
    tool: String,
    sent_mpps: f64,
    lost_pct: f64,
    /// NaN when the tool captured nothing (no per-packet figure); such points are left out.
    cpu_ns: f64,
}

/// Reads the `ok` rows of a medians CSV; errors name the file.
fn read_rows(path: &Path) -> anyhow::Result<Vec<Point>> {
    let mut reader = csv::Reader::from_path(path).with_context(|| {
        format!(
            "reading {} (the medians CSV of compare-capture)",
            path.display()
        )
    })?;
    let mut points = Vec::new();
    for row in reader.deserialize::<CsvRow>() {
        let row =
            row.with_context(|| format!("{}: not a compare-capture medians CSV", path.display()))?;
        if row.status != "ok" {
            continue;
        }
        let (Some(pps), Some(lost)) = (row.sent_pps, row.lost_share) else {
            bail!(
                "{}: an ok row ({} B, {}, {}) has no sent_pps or lost_share",
                path.display(),
                row.size,
                row.tool,
                row.filter
            );
        };
        points.push(Point {
            size: row.size,
            filter: row.filter,
            tool: row.tool,
            sent_mpps: pps / 1e6,
            lost_pct: lost * 100.0,
            cpu_ns: row.cpu_ns.unwrap_or(f64::NAN),
        });
    }
    if points.is_empty() {
        bail!("{}: no row has status ok; nothing to plot", path.display());
    }
    Ok(points)
}

/// One line of a panel: a tool under one filter, at one frame size.
struct Series<'a> {
    tool: &'a str,
    filter: &'a str,
    points: Vec<&'a Point>,
}

/// How a series looks: the tool gives the colour, the filter the line and marker.
#[derive(Clone, Copy)]
struct Look {
    color: RGBColor,
    dashed: bool,
}

/// Tools and filters in the order the CSV first names them (the script's order).
fn first_seen<'a>(points: &'a [Point], key: impl Fn(&'a Point) -> &'a str) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for p in points {
        if !seen.contains(&key(p)) {
            seen.push(key(p));
        }
    }
    seen
}

struct Layout<'a> {
    tools: Vec<&'a str>,
    filters: Vec<&'a str>,
    /// The (tool, filter) pairs that have an `ok` row: the legend lists only these.
    drawn: Vec<(&'a str, &'a str)>,
}

impl Layout<'_> {
    fn look(&self, tool: &str, filter: &str) -> Look {
        let i = self.tools.iter().position(|t| *t == tool).unwrap_or(0);
        Look {
            color: COLORS[i % COLORS.len()],
            // "none" (or whichever filter comes first when there is no "none") is solid.
            dashed: filter != "none" && Some(&filter) != self.filters.first(),
        }
    }

    /// Every (tool, filter) line of one frame size, its points sorted by rate.
    fn series<'p>(&self, points: &'p [Point], size: u32) -> Vec<Series<'p>> {
        let mut out: Vec<Series> = Vec::new();
        for p in points.iter().filter(|p| p.size == size) {
            match out
                .iter_mut()
                .find(|s| s.tool == p.tool && s.filter == p.filter)
            {
                Some(s) => s.points.push(p),
                None => out.push(Series {
                    tool: &p.tool,
                    filter: &p.filter,
                    points: vec![p],
                }),
            }
        }
        for s in &mut out {
            s.points.sort_by(|a, b| a.sent_mpps.total_cmp(&b.sent_mpps));
        }
        out
    }
}

const PANEL_W: u32 = 620;
const PANEL_H: u32 = 400;
const LEGEND_W: u32 = 240;
const TITLE_H: u32 = 50;

/// Writes the whole grid to `png`.
fn draw(points: &[Point], png: &Path, title: &str) -> anyhow::Result<()> {
    let mut sizes: Vec<u32> = points.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let layout = Layout {
        tools: first_seen(points, |p| &p.tool),
        filters: first_seen(points, |p| &p.filter),
        drawn: points
            .iter()
            .map(|p| (p.tool.as_str(), p.filter.as_str()))
            .collect(),
    };
    let height = TITLE_H + PANEL_H * sizes.len() as u32;
    let root = BitMapBackend::new(png, (2 * PANEL_W + LEGEND_W, height)).into_drawing_area();
    let err = |e: String| anyhow!("plotting {}: {e}", png.display());
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let body = root
        .titled(title, ("sans-serif", 24))
        .map_err(|e| err(e.to_string()))?;
    let (grid, legend) = body.split_horizontally(2 * PANEL_W);
    let panels = grid.split_evenly((sizes.len(), 2));
    for (row, &size) in sizes.iter().enumerate() {
        let series = layout.series(points, size);
        for (col, metric) in [Metric::LostPct, Metric::CpuNs].into_iter().enumerate() {
            panel(&panels[2 * row + col], &layout, &series, size, metric)
                .map_err(|e| err(e.to_string()))?;
        }
    }
    draw_legend(&legend, &layout).map_err(|e| err(e.to_string()))?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", png.display()))?;
    Ok(())
}

#[derive(Clone, Copy)]
enum Metric {
    LostPct,
    CpuNs,
}

impl Metric {
    fn of(self, p: &Point) -> f64 {
        match self {
            Metric::LostPct => p.lost_pct,
            Metric::CpuNs => p.cpu_ns,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Metric::LostPct => "frames lost (% of expected)",
            Metric::CpuNs => "tool CPU ns per captured frame",
        }
    }
}

/// One panel: `metric` of every series against the sent rate.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    layout: &Layout,
    series: &[Series],
    size: u32,
    metric: Metric,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let all = || series.iter().flat_map(|s| s.points.iter().copied());
    let x_max = all().map(|p| p.sent_mpps).fold(0.0, f64::max) * 1.08 + 1e-3;
    let y_top = all()
        .map(|p| metric.of(p))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // A loss panel where nothing was lost still shows a 0–1 % scale, not a collapsed axis.
    let y_max = match metric {
        Metric::LostPct => (y_top * 1.1).max(1.0),
        Metric::CpuNs => y_top * 1.1 + 1.0,
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{size} B frames: {}", metric.label()),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("sent rate (Mpps)")
        .y_desc(metric.label())
        .x_label_formatter(&|v| format!("{v:.2}"))
        .y_label_formatter(&|v| match metric {
            Metric::LostPct => format!("{v:.1}"),
            Metric::CpuNs => format!("{v:.0}"),
        })
        .draw()?;
    for s in series {
        let look = layout.look(s.tool, s.filter);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (p.sent_mpps, metric.of(p)))
            .filter(|(_, y)| y.is_finite())
            .collect();
        let line = look.color.stroke_width(2);
        if look.dashed {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, line))?;
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), line))?;
        }
        chart.draw_series(pts.into_iter().map(|p| marker(p, look)))?;
    }
    Ok(())
}

/// A filled circle for solid series, a hollow one (white inside) for dashed ones.
fn marker<C, DB: DrawingBackend>(at: C, look: Look) -> Marker<C, DB> {
    let inside = if look.dashed {
        WHITE.filled()
    } else {
        look.color.filled()
    };
    EmptyElement::at(at)
        + Circle::new((0, 0), 4, inside)
        + Circle::new((0, 0), 4, look.color.stroke_width(2))
}

type Dot = Circle<(i32, i32), i32>;
type Marker<C, DB> = ComposedElement<C, DB, Dot, Dot>;

/// Legend: one line per (tool, filter) that occurs, drawn beside the grid so it hides no data.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    layout: &Layout,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let text = ("sans-serif", 16).into_font().color(&BLACK);
    area.draw_text("tool, filter", &text, (10, 30))?;
    let mut y = 60;
    for tool in &layout.tools {
        for filter in &layout.filters {
            if !layout.drawn.contains(&(tool, filter)) {
                continue;
            }
            let look = layout.look(tool, filter);
            let line = look.color.stroke_width(2);
            if look.dashed {
                area.draw(&PathElement::new(vec![(10, y), (18, y)], line))?;
                area.draw(&PathElement::new(vec![(24, y), (32, y)], line))?;
                area.draw(&PathElement::new(vec![(38, y), (46, y)], line))?;
            } else {
                area.draw(&PathElement::new(vec![(10, y), (46, y)], line))?;
            }
            area.draw(&marker((28, y), look))?;
            area.draw_text(&format!("{tool}, {filter}"), &text, (56, y - 8))?;
            y += 26;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Rows of a real run (the 60 B half, one round, 2025-11) plus made-up 1514 B rows, a row
    /// with loss, and the rows a failed and a missing tool leave (empty numbers).
    const SAMPLE: &str = "\
size,rate,filter,tool,rounds,status,secs,sent_pps,sent,expected,captured,tool_drops,lost,lost_share,cpu_ns,cpu1_ns,nx0_dropped,count_mismatch
60,250000,none,sonde-ring,1,ok,2.0,250012.5,500025.0,500025.0,500025.0,0.0,0.0,0.0,196.53217339133045,119.994000299985,0.0,0
60,250000,none,sonde-xdp,1,ok,2.0,250012.5,500025.0,500025.0,500025.0,0.0,0.0,0.0,1674.0082995850207,639.9680015999201,0.0,0
60,250000,none,tcpdump,1,ok,2.0,250012.5,500025.0,500025.0,500025.0,0.0,0.0,0.0,171.75141242937852,3999.8000099995,0.0,0
60,250000,none,netsniff-ng,1,ok,2.0,250012.5,500025.0,500025.0,500025.0,0.0,0.0,0.0,195.69421528923553,279.986000699965,0.0,0
60,250000,port10,sonde-ring,1,ok,2.0,250012.5,500025.0,50176.0,50176.0,0.0,0.0,0.0,449.6572066326531,39.998000099995004,0.0,0
60,250000,port10,sonde-xdp,1,ok,2.0,250012.5,500025.0,50176.0,50176.0,0.0,0.0,0.0,1626.0164221938776,3119.84400779961,0.0,0
60,250000,port10,tcpdump,1,ok,2.0,250012.5,500025.0,50176.0,50176.0,0.0,0.0,0.0,186.00526147959184,3679.81600919954,0.0,0
60,250000,port10,netsniff-ng,1,ok,2.0,250012.5,500025.0,50176.0,50176.0,0.0,0.0,0.0,437.4402104591837,139.9930003499825,0.0,0
60,max,none,sonde-ring,1,ok,2.0,1019744.0,2039488.0,2039488.0,2039488.0,0.0,0.0,0.0,437.60296701917343,995.3478520099161,0.0,0
60,max,none,sonde-xdp,1,ok,2.0,441600.0,883200.0,883200.0,883200.0,0.0,0.0,0.0,1560.8514492753623,1403.9855072463768,0.0,0
60,max,none,tcpdump,1,ok,2.0,1044544.0,2089088.0,2089088.0,2089088.0,0.0,0.0,0.0,321.03865418785614,971.7158875068928,0.0,0
60,max,none,netsniff-ng,1,ok,2.0,1071104.0,2142208.0,2142208.0,2142208.0,0.0,0.0,0.0,408.53642596797323,956.9565607074569,0.0,0
60,max,port10,sonde-ring,1,ok,2.0,1442208.0,2884416.0,288512.0,288512.0,0.0,0.0,0.0,2366.9448757763976,703.781978743704,0.0,0
60,max,port10,sonde-xdp,1,ok,2.0,420704.0,841408.0,84224.0,84224.0,1041.0,0.0,0.0,1592.1233852583584,1842.1503004487715,1041.0,0
60,max,port10,tcpdump,1,ok,2.0,1445888.0,2891776.0,289280.0,289280.0,0.0,0.0,0.0,1094.4137168141592,698.5326664305949,0.0,0
60,max,port10,netsniff-ng,1,ok,2.0,1419616.0,2839232.0,284096.0,284096.0,0.0,0.0,0.0,2366.3796744762335,704.4158420305209,0.0,0
1514,100000,none,sonde-ring,1,ok,2.0,100000.0,200000.0,200000.0,200000.0,0.0,0.0,0.0,900.0,1500.0,0.0,0
1514,100000,none,tcpdump,1,ok,2.0,100000.0,200000.0,200000.0,190000.0,10000.0,10000.0,0.05,1200.0,1800.0,0.0,0
1514,max,none,sonde-ring,1,ok,2.0,400000.0,800000.0,800000.0,800000.0,0.0,0.0,0.0,700.0,1400.0,0.0,0
1514,max,none,tcpdump,1,ok,2.0,410000.0,820000.0,820000.0,779000.0,41000.0,41000.0,0.05,nan,1700.0,0.0,0
1514,max,port10,sonde-xdp,0,not-xdp,,,,,,,,,,,,
1514,max,port10,netsniff-ng,0,missing,,,,,,,,,,,,
";

    /// A file under the temp dir that this test alone uses, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str) -> TempFile {
            let dir =
                std::env::temp_dir().join(format!("sonde-plot-capture-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempFile(dir.join(name))
        }

        fn with(name: &str, text: &str) -> TempFile {
            let f = TempFile::new(name);
            std::fs::write(&f.0, text).unwrap();
            f
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn keeps_ok_rows_in_the_units_drawn() {
        let csv = TempFile::with("units.csv", SAMPLE);
        let points = read_rows(&csv.0).unwrap();
        assert_eq!(
            points.len(),
            20,
            "the not-xdp and missing rows are left out"
        );
        let lossy = points
            .iter()
            .find(|p| p.size == 1514 && p.tool == "tcpdump" && p.sent_mpps == 0.1)
            .unwrap();
        assert!((lossy.lost_pct - 5.0).abs() < 1e-9, "{}", lossy.lost_pct);
        assert!(points.iter().any(|p| p.cpu_ns.is_nan()));
    }

    #[test]
    fn renders_the_sample_to_a_png_with_a_row_per_frame_size() {
        let csv = TempFile::with("sample.csv", SAMPLE);
        let png = TempFile::new("sample.png");
        plot_file(&csv.0, &png.0).unwrap();
        let bytes = std::fs::read(&png.0).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, right after the chunk's length and name.
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(width, 2 * PANEL_W + LEGEND_W);
        assert_eq!(height, TITLE_H + 2 * PANEL_H, "two frame sizes, two rows");
        assert!(bytes.len() > 50_000, "only {} bytes", bytes.len());
    }

    #[test]
    fn a_malformed_csv_errors_naming_the_file() {
        let bad = SAMPLE.replace("250012.5", "fast");
        let csv = TempFile::with("malformed.csv", &bad);
        let png = TempFile::new("malformed.png");
        let err = plot_file(&csv.0, &png.0).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("malformed.csv"), "{text}");
        assert!(
            text.contains("sent_pps") || text.contains("field 7"),
            "{text}"
        );
        assert!(!text.contains('\n'), "one line: {text}");
        assert!(!png.0.exists());
    }

    #[test]
    fn a_missing_csv_or_one_without_ok_rows_errors_naming_the_file() {
        let gone = TempFile::new("gone.csv");
        let png = TempFile::new("gone.png");
        let err = format!("{:#}", plot_file(&gone.0, &png.0).unwrap_err());
        assert!(err.contains("gone.csv"), "{err}");
        let header = SAMPLE.lines().next().unwrap();
        let failed = TempFile::with(
            "failed.csv",
            &format!("{header}\n60,max,none,tcpdump,0,failed,,,,,,,,,,,,\n"),
        );
        let err = format!("{:#}", plot_file(&failed.0, &png.0).unwrap_err());
        assert!(
            err.contains("failed.csv") && err.contains("no row has status ok"),
            "{err}"
        );
    }
}
