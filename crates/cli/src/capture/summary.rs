//! What a capture reports: the final line (`N captured, N dropped by the kernel, N by sonde`)
//! and `--summary-json`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use sonde_engine::status::to_stderr;
use sonde_meter::output_file;
use sonde_meter::CpuTimes;

use super::CaptureArgs;

#[derive(Debug, Serialize)]
pub struct Summary {
    /// Packets written.
    pub captured: u64,
    /// Lost by the kernel before the ring: the interface's receive drops, AF_XDP's "no buffer".
    pub kernel_drops: u64,
    /// Lost because the ring to sonde was full (PACKET_STATISTICS, XDP rx_ring_full,
    /// libpcap's ps_drop).
    pub ring_drops: u64,
    /// Lost by sonde: its writer or the disk fell behind, or writing failed.
    pub writer_drops: u64,
    /// Packets the source handed to sonde.
    pub received: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// Captured packets per second of the run.
    pub pps: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// sonde's CPU time (user + system, all threads) per captured packet.
    pub cpu_ns_per_packet: f64,
    pub ts_source: String,
    pub backend: String,
    pub threads: u32,
    /// Where the filter ran.
    pub filter: String,
    pub files: Vec<String>,
    /// Why the capture stopped early, if it did (a full disk, a closed pipe).
    pub stopped_by: Option<String>,
}

/// What `sonde capture -r` reports: a file read has no kernel, ring or drops, and its CPU
/// per packet would say more about the disk than about capturing.
#[derive(Debug, Serialize)]
pub struct OfflineSummary {
    /// The file read.
    pub read_from: String,
    /// Packets read from it.
    pub received: u64,
    /// Packets the expression kept (written).
    pub captured: u64,
    pub seconds: f64,
    pub backend: String,
    /// How the packets were judged.
    pub filter: String,
    pub files: Vec<String>,
}

impl OfflineSummary {
    pub fn new(
        args: &CaptureArgs,
        file: &str,
        kept: u64,
        read: u64,
        wall: Duration,
        filter: String,
        files: Vec<String>,
    ) -> OfflineSummary {
        OfflineSummary {
            read_from: file.to_string(),
            received: read,
            captured: kept,
            seconds: wall.as_secs_f64(),
            backend: args.backend.name().into(),
            filter,
            files,
        }
    }

    /// The final line (stderr) and the JSON file.
    pub fn finish(&self, args: &CaptureArgs) -> anyhow::Result<()> {
        eprintln!(
            "{} kept of {} packets read from {}",
            self.captured, self.received, self.read_from
        );
        if !args.quiet {
            eprintln!(
                "  filter: {}; {:.3} s; written to {}",
                self.filter,
                self.seconds,
                self.files.join(", ")
            );
        }
        write_json(args, self)
    }
}

fn write_json(args: &CaptureArgs, summary: &impl Serialize) -> anyhow::Result<()> {
    if let Some(path) = &args.summary_json {
        let text = serde_json::to_string_pretty(summary)? + "\n";
        output_file::write_whole(Path::new(path), text.as_bytes(), super::if_exists(args))
            .context("--summary-json")?;
    }
    Ok(())
}

impl Summary {
    /// The final line (stderr, so `-w -` keeps stdout for the packets), the JSON file, and
    /// an error if writing stopped early.
    pub fn finish(&self, args: &CaptureArgs) -> anyhow::Result<()> {
        // Not eprintln!: after a hangup the terminal is gone, and a panic would abort.
        to_stderr(format_args!(
            "{} captured, {} dropped by the kernel, {} by sonde",
            self.captured,
            self.kernel_drops + self.ring_drops,
            self.writer_drops
        ));
        if !args.quiet {
            to_stderr(format_args!(
                "  {} received; kernel {} + ring {} + sonde {} dropped; {:.0} pps, {:.0} ns CPU per packet; filter: {}; timestamps: {}",
                self.received,
                self.kernel_drops,
                self.ring_drops,
                self.writer_drops,
                self.pps,
                self.cpu_ns_per_packet,
                self.filter,
                self.ts_source
            ));
        }
        write_json(args, self)?;
        if let Some(why) = &self.stopped_by {
            anyhow::bail!(
                "writing stopped early ({why}); {} holds the {} packets written before, and is valid",
                self.files.last().map_or("the output", |s| s.as_str()),
                self.captured
            );
        }
        Ok(())
    }
}

pub fn per_packet(cpu: CpuTimes, packets: u64) -> f64 {
    if packets == 0 {
        return 0.0;
    }
    cpu.total().as_nanos() as f64 / packets as f64
}
