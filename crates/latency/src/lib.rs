//! Round-trip times under fixed packet rates (`sonde latency`): a client sends timestamped
//! messages on a precise schedule and times each echo on the same clock; a reflector echoes them
//! at the application layer. Both come in two forms — on the kernel's UDP socket path and on
//! sonde's frame I/O — so the difference between the paths is measured, not assumed.
//!
//! Takes a target, a path and a list of packet rates; gives per-rate RTT histograms, samples and
//! loss/reorder/duplicate counts. Uses sonde-wire and sonde-craft (the frames), and sonde-io (rings
//! and AF_XDP; only with the default `io` feature), with hdrhistogram.
//!
//! Data flow: [`message`] (what a probe carries) → [`frame`] (its frame on sonde's path, and the
//! echo's) → [`link`] (how it travels: kernel socket, or frames through `frames_io`) →
//! [`client`] (the schedule, one run per rate) → [`tracker`] (loss, reordering, duplicates) and
//! [`stats`] (HDR histogram, samples for the heat map, percentiles). [`reflect`] is the other
//! end.
#![forbid(unsafe_code)]

pub mod client;
pub mod frame;
#[cfg(feature = "io")]
mod frames_io;
pub mod link;
pub mod message;
pub mod reflect;
pub mod stats;
pub mod tracker;

pub use client::{measure, reflector_answers, ClientCpu, RunReport, RunResult, RunSpec};
pub use frame::{EchoMatch, FrameEnds};
#[cfg(feature = "io")]
pub use frames_io::{hold_port, open_frames, reflect_frames, FrameLink};
pub use link::{Clock, EchoLink, KernelLink};
pub use message::{Stamp, HEADER_LEN};
pub use reflect::{reflect_kernel, ReflectCount};
pub use stats::{merge, new_histogram, Percentiles, RttRecorder, Sample};
pub use tracker::{Arrival, SeqTracker};
