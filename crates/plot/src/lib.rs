//! sonde-plot: every chart sonde draws, as PNG files, and the palette they share. It takes the
//! figures a command measured or read (a transmit sweep's rows, latency samples and
//! percentile curves, the profile's stage bars and stack fits, the medians CSVs of the capture
//! and intercept comparisons) and gives a picture; nothing here measures. It uses `plotters`,
//! `latency` (samples), `meter` (line fits) and `profile` (the stack harness's points).

pub mod capture;
pub mod intercept;
pub mod latency;
pub mod stack;
pub mod stages;
pub mod sweep;

use plotters::style::RGBColor;

/// The palette every sonde chart draws its series from, in order: enough distinct colours for
/// the 17 segments of `sonde profile scan`'s bars.
pub const COLORS: [RGBColor; 18] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(247, 182, 210),
    RGBColor(199, 199, 199),
];
