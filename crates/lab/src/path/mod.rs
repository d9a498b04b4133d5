//! The lab's path: distance between the scanner and the lab network (`lab up --rtt 100ms …`).
//!
//! ```text
//!  sonde-N-scan              sonde-N-path                      sonde-N-net
//!  sx0 198.19.255.1 ─── ps ──[ delay line: sonde lab __path ]── pn ─── nx0 198.19.255.254
//! ```
//!
//! Without a path sx0 and nx0 are the two ends of one veth pair. With one, each is paired with
//! an interface of a third namespace, `sonde-N-path`, whose only process is sonde's delay line
//! (the `sonde-path` crate, run as `sonde lab __path`): it takes every frame off one side, holds
//! it until its time, and sends it out of the other, a bump in the wire. It has no address and
//! rewrites nothing (but the bit `--corrupt` flips), so the scanner, the responders, ARP/ND and
//! the MACs work as before; the truth and `lab score` do not change. In a bridge lab the path
//! sits between host A and mid (ax0 — ps … pn — ma), and mid keeps its Linux bridge.
//!
//! This module parses and checks the path's flags ([`PathConfig`]), makes the namespace and its
//! two veth pairs, starts the delay line and waits until it forwards, and reads back what it
//! counts ([`PathCounters`], from `stats.json`, which the delay line rewrites every 100 ms in
//! `/run/sonde/lab/N-path/`, beside `spec.json`, what it was told, and `path.log`, its stderr).
//! `down` stops it and deletes the namespace, also after the delay line was killed.
//!
//! The kernel's netem would do the same inside the kernel, but kernels without it (this one:
//! "Specified qdisc kind is unknown") are where sonde is tested, so the lab brings its own.

mod setup;

use std::fmt;

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

pub use setup::report;
pub(crate) use setup::{exists, host_offloads_off, make_links, start, started, teardown, End};

/// The path namespace's interface toward the scanner (host A in a bridge lab) …
pub const SCAN_SIDE_IF: &str = "ps";
/// … and toward the lab network (mid in a bridge lab).
pub const NET_SIDE_IF: &str = "pn";

/// Frames held at most in each direction by default (`--path-frames`).
pub const DEFAULT_FRAMES: u32 = 1 << 19;
/// The bottleneck's queue by default (`--bottleneck-queue`): a NIC's usual txqueuelen.
pub const DEFAULT_QUEUE: u32 = 1000;
/// Bytes of frame data held per frame of `--path-frames`, on average: the delay line's byte
/// store in each direction is this many times `frames` (untouched memory stays unbacked).
pub const BYTES_PER_FRAME: u64 = 512;
/// Limits of the flags: the longest round trip and jitter, the most frames held, the rates.
const MAX_RTT_NS: u64 = 60_000_000_000;
const MIN_FRAMES: u32 = 16;
const MAX_FRAMES: u32 = 1 << 24;
const MIN_RATE_BPS: u64 = 8_000;
const MAX_RATE_BPS: u64 = 1_000_000_000_000;
const MAX_QUEUE: u32 = 1 << 20;

/// What the path does to every frame, in each direction (the flags of `lab up`). Shares are
/// 0.0 to 1.0, times in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathConfig {
    /// `--rtt`: the round trip the path adds. Each frame is held half of it on its way, plus
    /// its jitter: a ping's round trip is this long.
    pub rtt_ns: u64,
    /// `--jitter`: the standard deviation of a round trip. Each frame's one-way hold gets a
    /// normal deviate of standard deviation `jitter / √2` (two directions make a round trip of
    /// standard deviation `jitter`), truncated at three of those either way and never below no
    /// hold at all. Frames leave by their due times, so jitter reorders them.
    #[serde(default)]
    pub jitter_ns: u64,
    /// `--reorder`: the share of frames that skip the hold (and the jitter) and leave as soon as
    /// the bottleneck lets them, ahead of frames held, as netem's `reorder` does.
    #[serde(default)]
    pub reorder: f64,
    /// `--duplicate`: the share of frames sent twice; the copy is held on its own draws (of
    /// jitter, reordering and corruption) like any frame.
    #[serde(default)]
    pub duplicate: f64,
    /// `--corrupt`: the share of frames with one bit flipped, anywhere after the Ethernet header
    /// (so in an IP header or what it carries, where a checksum covers it).
    #[serde(default)]
    pub corrupt: f64,
    /// `--bottleneck`: a rate in bits per second, counting each frame from its Ethernet header to
    /// the end of its payload (as tc does: no preamble, FCS or gap). None: no bottleneck.
    #[serde(default)]
    pub bottleneck_bps: Option<u64>,
    /// `--bottleneck-queue`: frames the bottleneck's queue holds, the one being sent included;
    /// a frame that finds it full is dropped (drop-tail).
    #[serde(default = "default_queue")]
    pub bottleneck_queue: u32,
    /// `--path-frames`: frames the path holds at most in each direction (with
    /// [`BYTES_PER_FRAME`] bytes of store per frame on average); one more is dropped.
    #[serde(default = "default_frames")]
    pub frames: u32,
}

fn default_queue() -> u32 {
    DEFAULT_QUEUE
}

fn default_frames() -> u32 {
    DEFAULT_FRAMES
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            rtt_ns: 0,
            jitter_ns: 0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            bottleneck_bps: None,
            bottleneck_queue: DEFAULT_QUEUE,
            frames: DEFAULT_FRAMES,
        }
    }
}

impl PathConfig {
    /// Checks every value before anything is made; errors are one line naming the flag.
    pub fn validate(&self) -> Result<()> {
        if self.rtt_ns > MAX_RTT_NS {
            bail!(
                "--rtt {} is longer than the path holds frames: use at most 60s",
                show_ns(self.rtt_ns)
            );
        }
        if self.jitter_ns > MAX_RTT_NS {
            bail!(
                "--jitter {} is more than the path holds frames: use at most 60s",
                show_ns(self.jitter_ns)
            );
        }
        for (flag, share) in [
            ("--reorder", self.reorder),
            ("--duplicate", self.duplicate),
            ("--corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&share) {
                bail!("{flag} {share} is not a share between 0.0 and 1.0");
            }
        }
        if let Some(bps) = self.bottleneck_bps {
            if !(MIN_RATE_BPS..=MAX_RATE_BPS).contains(&bps) {
                bail!(
                    "--bottleneck {} is outside 8kbit to 1000gbit",
                    show_rate(bps)
                );
            }
        }
        if !(1..=MAX_QUEUE).contains(&self.bottleneck_queue) {
            bail!(
                "--bottleneck-queue {} is not between 1 and {MAX_QUEUE} frames",
                self.bottleneck_queue
            );
        }
        if !(MIN_FRAMES..=MAX_FRAMES).contains(&self.frames) {
            bail!(
                "--path-frames {} is not between {MIN_FRAMES} and {MAX_FRAMES}",
                self.frames
            );
        }
        Ok(())
    }

    /// Bytes of frame data the delay line can hold in each direction.
    pub fn store_bytes(&self) -> u64 {
        u64::from(self.frames) * BYTES_PER_FRAME
    }
}

impl fmt::Display for PathConfig {
    /// The path in the words of its flags: "rtt 100ms, jitter 10ms, bottleneck 100mbit (queue
    /// 1000)", what is not set left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![format!("rtt {}", show_ns(self.rtt_ns))];
        if self.jitter_ns > 0 {
            parts.push(format!("jitter {}", show_ns(self.jitter_ns)));
        }
        for (what, share) in [
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
        ] {
            if share > 0.0 {
                parts.push(format!("{what} {share}"));
            }
        }
        if let Some(bps) = self.bottleneck_bps {
            parts.push(format!(
                "bottleneck {} (queue {})",
                show_rate(bps),
                self.bottleneck_queue
            ));
        }
        f.write_str(&parts.join(", "))
    }
}

/// A duration as the flags take it: a number (decimals allowed) and one of ns, us (or µs), ms,
/// s; "0" alone too. "100ms", "1.5s", "250us".
pub fn parse_duration(text: &str) -> Result<u64> {
    let bad =
        || anyhow!("{text:?} is not a duration: use a number and ns, us, ms or s, e.g. 100ms");
    let t = text.trim();
    if t == "0" {
        return Ok(0);
    }
    let (number, scale) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n, *scale)))
    .ok_or_else(bad)?;
    let value = parse_number(number).ok_or_else(bad)? * scale;
    if value > u64::MAX as f64 / 2.0 {
        return Err(bad());
    }
    Ok(value.round() as u64)
}

/// A rate in bits per second as tc writes it: a number (decimals allowed) and one of bit, kbit,
/// mbit, gbit (decimal: kbit is 1000 bit/s), any case. "100mbit", "1.5gbit".
pub fn parse_rate(text: &str) -> Result<u64> {
    let bad = || {
        anyhow!("{text:?} is not a rate: use a number and bit, kbit, mbit or gbit, e.g. 100mbit")
    };
    let t = text.trim().to_ascii_lowercase();
    let (number, scale) = [("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9), ("bit", 1.0)]
        .iter()
        .find_map(|(unit, scale)| t.strip_suffix(unit).map(|n| (n.to_string(), *scale)))
        .ok_or_else(bad)?;
    let value = parse_number(&number).ok_or_else(bad)? * scale;
    if value < 1.0 || value > u64::MAX as f64 / 2.0 {
        return Err(bad());
    }
    Ok(value.round() as u64)
}

/// A non-negative decimal number without sign or exponent ("1", "0.5", "12.25").
fn parse_number(text: &str) -> Option<f64> {
    let ok = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && text.bytes().filter(|&b| b == b'.').count() <= 1
        && text.bytes().any(|b| b.is_ascii_digit());
    ok.then(|| text.parse().ok()).flatten()
}

/// A duration in ns written back as the flags take it ("100ms", "1.5s", "250us", "0").
pub fn show_ns(ns: u64) -> String {
    let units = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    for (scale, unit) in units {
        if ns >= scale {
            let value = ns as f64 / scale as f64;
            return format!("{}{unit}", trim_number(value));
        }
    }
    if ns == 0 {
        "0".into()
    } else {
        format!("{ns}ns")
    }
}

/// A rate in bit/s written as tc does ("100mbit", "1.5gbit", "500kbit").
pub fn show_rate(bps: u64) -> String {
    for (scale, unit) in [
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bps >= scale {
            return format!("{}{unit}", trim_number(bps as f64 / scale as f64));
        }
    }
    format!("{bps}bit")
}

/// Up to three decimals, without trailing zeros.
fn trim_number(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What the delay line is told, in `spec.json` of its folder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathSpec {
    /// The lab's name.
    pub lab: String,
    /// The interface toward the scanner (or host A) and the one toward the lab (or mid).
    pub scan_side: String,
    pub net_side: String,
    /// Seed of the path's draws (the lab's `--seed`): the same flags and traffic give the
    /// same drops, duplicates and flips.
    pub seed: u64,
    pub config: PathConfig,
}

/// A lab's path as `up` made it (in `lab status` and the lab's state file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathStatus {
    /// `sonde-NAME-path`.
    pub ns: String,
    /// Its interfaces toward the scanner (or host A) and toward the lab (or mid).
    pub scan_side_if: String,
    pub net_side_if: String,
    #[serde(flatten)]
    pub config: PathConfig,
    /// The delay line's pid and start time (field 22 of /proc/PID/stat), so `status` can tell
    /// it from a later process with the same pid.
    pub pid: u32,
    pub start_ticks: u64,
    /// Its folder: spec.json, stats.json, path.log.
    pub dir: String,
}

/// What the delay line did in one direction since it started.
///
/// Every frame is accounted for: `frames_in + duplicated = frames_out + held + queue_full +
/// hold_full + too_long`. Two kinds of loss happen outside it, in the kernel, and are counted
/// too: `rx_ring_full` (frames the receive ring had no room for, so never read) and
/// `link_dropped` (frames sent that the veth could not hand to the next namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathFlow {
    /// Frames read off the receive ring, and frames sent on.
    pub frames_in: u64,
    pub frames_out: u64,
    /// Bytes sent on (frames from the Ethernet header on).
    pub bytes_out: u64,
    /// Frames held now, the most held at once, and the bytes held now.
    pub held: u64,
    pub held_peak: u64,
    pub held_bytes: u64,
    /// Copies made by `--duplicate`, frames changed by `--corrupt`, frames sent ahead by
    /// `--reorder`.
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Dropped: the bottleneck's queue was full (drop-tail).
    pub queue_full: u64,
    /// Dropped: the path already held `--path-frames` frames, or its byte store was full.
    pub hold_full: u64,
    /// Dropped: longer than a transmit slot, or cut short by the receive ring.
    pub too_long: u64,
    /// Dropped by the kernel before the delay line saw them: its receive ring was full.
    pub rx_ring_full: u64,
    /// Dropped by the kernel after the delay line sent them: the veth's `tx_dropped`.
    pub link_dropped: u64,
    /// How late frames left after their due time: the most, and the mean (ns).
    pub late_max_ns: u64,
    pub late_mean_ns: u64,
}

impl PathFlow {
    /// Every frame lost in this direction, whatever the cause.
    pub fn dropped(&self) -> u64 {
        self.queue_full + self.hold_full + self.too_long + self.rx_ring_full + self.link_dropped
    }
}

/// What the delay line writes to `stats.json` every 100 ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathCounters {
    /// Wall-clock time of this writing, ms since 1970.
    pub written_unix_ms: u64,
    /// Frames from the scanner (or A) to the lab (or mid), and back.
    pub to_lab: PathFlow,
    pub to_scanner: PathFlow,
}

/// A path's state for `lab status`: whether the delay line runs, and its last counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    /// The delay line (the recorded pid, same start time) is alive.
    pub running: bool,
    pub pid: u32,
    /// The counters it last wrote (None if it never wrote any).
    pub counters: Option<PathCounters>,
    /// How long ago they were written (ms).
    pub age_ms: Option<u64>,
}

/// The file the delay line rewrites with its counters, in its folder.
pub const STATS_FILE: &str = "stats.json";

/// `sonde-NAME-path`.
pub fn path_ns(name: &str) -> String {
    format!("sonde-{name}-path")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_the_flags_take_them() {
        for (text, ns) in [
            ("0", 0),
            ("100ms", 100_000_000),
            ("1s", 1_000_000_000),
            ("1.5s", 1_500_000_000),
            ("250us", 250_000),
            ("250µs", 250_000),
            ("20ns", 20),
            ("0ms", 0),
            (" 10ms ", 10_000_000),
        ] {
            assert_eq!(parse_duration(text).unwrap(), ns, "{text:?}");
        }
        for bad in [
            "", "100", "ms", "1.2.3ms", "-1ms", "1e3ms", "10 ms", "10min", "1h",
        ] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains("is not a duration"), "{bad:?}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
        for ns in [
            0,
            20,
            250_000,
            1_500_000,
            100_000_000,
            1_000_000_000,
            2_250_000_000,
        ] {
            assert_eq!(parse_duration(&show_ns(ns)).unwrap(), ns, "{ns}");
        }
    }

    #[test]
    fn rates_parse_as_tc_writes_them() {
        for (text, bps) in [
            ("100mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("1.5Gbit", 1_500_000_000),
            ("500kbit", 500_000),
            ("9600bit", 9600),
        ] {
            assert_eq!(parse_rate(text).unwrap(), bps, "{text:?}");
        }
        for bad in ["", "100", "100mbps", "mbit", "0mbit", "-1mbit", "1e6bit"] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(e.contains("is not a rate"), "{bad:?}: {e}");
        }
        for bps in [9600, 500_000, 100_000_000, 1_500_000_000] {
            assert_eq!(parse_rate(&show_rate(bps)).unwrap(), bps);
        }
    }

    #[test]
    fn configs_are_checked_in_one_line_each() {
        PathConfig::default().validate().unwrap();
        let base = PathConfig {
            rtt_ns: 100_000_000,
            ..PathConfig::default()
        };
        base.validate().unwrap();
        for (cfg, why) in [
            (
                PathConfig {
                    rtt_ns: 61_000_000_000,
                    ..base.clone()
                },
                "--rtt 61s",
            ),
            (
                PathConfig {
                    reorder: 1.5,
                    ..base.clone()
                },
                "--reorder 1.5",
            ),
            (
                PathConfig {
                    corrupt: f64::NAN,
                    ..base.clone()
                },
                "--corrupt",
            ),
            (
                PathConfig {
                    bottleneck_bps: Some(100),
                    ..base.clone()
                },
                "--bottleneck 100bit",
            ),
            (
                PathConfig {
                    bottleneck_queue: 0,
                    ..base.clone()
                },
                "--bottleneck-queue 0",
            ),
            (
                PathConfig {
                    frames: 4,
                    ..base.clone()
                },
                "--path-frames 4",
            ),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
    }

    #[test]
    fn a_path_reads_as_its_flags() {
        let cfg = PathConfig {
            rtt_ns: 100_000_000,
            jitter_ns: 10_000_000,
            reorder: 0.01,
            bottleneck_bps: Some(100_000_000),
            ..PathConfig::default()
        };
        assert_eq!(
            cfg.to_string(),
            "rtt 100ms, jitter 10ms, reorder 0.01, bottleneck 100mbit (queue 1000)"
        );
    }

    #[test]
    fn every_frame_is_accounted_for_in_the_drop_total() {
        let flow = PathFlow {
            queue_full: 1,
            hold_full: 2,
            too_long: 3,
            rx_ring_full: 4,
            link_dropped: 5,
            ..PathFlow::default()
        };
        assert_eq!(flow.dropped(), 15);
    }

    #[test]
    fn old_and_new_states_round_trip() {
        let st = PathStatus {
            ns: path_ns("x"),
            scan_side_if: SCAN_SIDE_IF.into(),
            net_side_if: NET_SIDE_IF.into(),
            config: PathConfig {
                rtt_ns: 20_000_000,
                ..PathConfig::default()
            },
            pid: 7,
            start_ticks: 9,
            dir: "/run/sonde/lab/x-path".into(),
        };
        let text = serde_json::to_string(&st).unwrap();
        assert!(text.contains(r#""rtt_ns":20000000"#), "{text}");
        assert_eq!(serde_json::from_str::<PathStatus>(&text).unwrap(), st);
        assert_eq!(st.ns, "sonde-x-path");
    }
}
