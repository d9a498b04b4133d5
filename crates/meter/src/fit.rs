//! Least-squares straight lines and medians: how a latency grows with payload size
//! (`sonde profile stack` fits `stop = a·x + b`).

use std::fmt;

use serde::Serialize;

/// A fitted line `y = slope·x + intercept` and how well it fits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LineFit {
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination: 1 for points on the line; 1 as well when every y is the
    /// same (the line explains all there is).
    pub r2: f64,
    /// Points fitted.
    pub points: usize,
}

impl LineFit {
    /// The ordinary least-squares line through `points` (x, y). None with fewer than two
    /// distinct x (no line is determined) or any non-finite coordinate.
    pub fn least_squares(points: &[(f64, f64)]) -> Option<LineFit> {
        if points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
            return None;
        }
        let n = points.len() as f64;
        let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
        // Centred sums keep the precision when x is large (bytes) and the spread small.
        let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
        for &(x, y) in points {
            let (dx, dy) = (x - mean_x, y - mean_y);
            sxx += dx * dx;
            sxy += dx * dy;
            syy += dy * dy;
        }
        if points.len() < 2 || sxx == 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        let intercept = mean_y - slope * mean_x;
        let residual: f64 = points
            .iter()
            .map(|&(x, y)| (y - slope * x - intercept).powi(2))
            .sum();
        let r2 = if syy == 0.0 {
            1.0
        } else {
            1.0 - residual / syy
        };
        Some(LineFit {
            slope,
            intercept,
            r2,
            points: points.len(),
        })
    }

    /// The line's y at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.slope * x + self.intercept
    }
}

impl fmt::Display for LineFit {
    /// `192.57·x + 246.98` (`- 3.10` for a negative intercept).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.intercept < 0.0 { '-' } else { '+' };
        write!(f, "{:.2}·x {sign} {:.2}", self.slope, self.intercept.abs())
    }
}

/// The median of `values` (the mean of the middle two for an even count); None when empty or
/// when any value is NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn points_on_a_line_give_that_line() {
        // The stack paper's TCP stop line, at 1, 2, 4, ... 64 KB.
        let points: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&x| (x, 192.57 * x + 246.98))
            .collect();
        let fit = LineFit::least_squares(&points).unwrap();
        assert!(close(fit.slope, 192.57, 1e-9), "{fit:?}");
        assert!(close(fit.intercept, 246.98, 1e-9), "{fit:?}");
        assert!(close(fit.r2, 1.0, 1e-12), "{fit:?}");
        assert_eq!(fit.points, 7);
        assert_eq!(fit.to_string(), "192.57·x + 246.98");
        assert!(close(fit.at(10.0), 2172.68, 1e-9));
    }

    #[test]
    fn noisy_points_give_the_textbook_answer() {
        // x = 1..5, y = 2.2, 2.8, 4.5, 3.7, 5.5: by hand, mean y = 3.74, Sxx = 10, Sxy = 7.5,
        // so slope 0.75, intercept 3.74 - 0.75·3 = 1.49; the squared residuals sum to
        // 1.307 of Syy = 6.932, so r² = 1 - 1.307/6.932.
        let points = [(1.0, 2.2), (2.0, 2.8), (3.0, 4.5), (4.0, 3.7), (5.0, 5.5)];
        let fit = LineFit::least_squares(&points).unwrap();
        assert!(close(fit.slope, 0.75, 1e-12), "{fit:?}");
        assert!(close(fit.intercept, 1.49, 1e-12), "{fit:?}");
        assert!(close(fit.r2, 1.0 - 1.307 / 6.932, 1e-9), "{fit:?}");
        assert!(fit.r2 < 1.0);
    }

    #[test]
    fn symmetric_noise_around_a_line_cancels() {
        // ±e alternating on pairs at the same x: the least-squares line is the line itself.
        let mut points = Vec::new();
        for x in [64.0, 1024.0, 8192.0, 65507.0] {
            let y = -0.5 * x + 40.0;
            points.push((x, y + 3.0));
            points.push((x, y - 3.0));
        }
        let fit = LineFit::least_squares(&points).unwrap();
        assert!(close(fit.slope, -0.5, 1e-12), "{fit:?}");
        assert!(close(fit.intercept, 40.0, 1e-9), "{fit:?}");
        assert_eq!(fit.to_string(), "-0.50·x + 40.00");
    }

    #[test]
    fn no_line_without_two_distinct_x() {
        assert_eq!(LineFit::least_squares(&[]), None);
        assert_eq!(LineFit::least_squares(&[(1.0, 2.0)]), None);
        assert_eq!(LineFit::least_squares(&[(3.0, 1.0), (3.0, 5.0)]), None);
        assert_eq!(LineFit::least_squares(&[(1.0, 1.0), (2.0, f64::NAN)]), None);
        let flat = LineFit::least_squares(&[(1.0, 7.0), (2.0, 7.0)]).unwrap();
        assert_eq!((flat.slope, flat.intercept, flat.r2), (0.0, 7.0, 1.0));
        assert_eq!(
            LineFit::least_squares(&[(0.0, 1.0), (1.0, -2.0)])
                .unwrap()
                .to_string(),
            "-3.00·x + 1.00"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }
}
