//! The run loop `scan` and `grab` share, as a library.
//!
//! Takes a run's plan (targets, rate, interface, probe module or grab application); gives rows to
//! the output writers, a status line, a checkpoint and a summary. Uses sonde-io (send and receive),
//! sonde-scan (targets, probes, outputs), sonde-tcp and sonde-apps (grab), sonde-craft and
//! sonde-wire (frames), and sonde-meter (counters and stage clocks). It also holds the transmit
//! engine of `blast` and `bench` ([`tx`]) and the `--metrics` exporter every command serves from
//! ([`metrics`]).
//!
//! A run walks a target space (`sonde_scan::targets`) in a seeded random order, split into
//! shards and sender threads ([`feed`]), paced to a rate ([`pace`]), through batched I/O
//! backends ([`queues`]), with a status line ([`status`]), Ctrl-C handling ([`stop`]), a
//! checkpoint to resume from ([`checkpoint`]) and a cooldown. Two modes plug into it:
//!
//! - [`scan`]: stateless probes; a probe module builds and classifies them.
//! - [`grab`]: the user-space TCP client of `sonde-tcp` answers SYN-ACKs, sends requests and
//!   reassembles replies.
//!
//! [`host`] finds the interface, addresses and gateway; [`targets`] turns what the user asked
//! for into the target space, with the guardrails of responsible scanning.

mod arrival;
pub mod checkpoint;
pub mod dns;
pub mod feed;
pub mod grab;
pub mod host;
pub mod metrics;
pub mod pace;
pub mod plan;
pub mod queues;
pub mod scan;
pub mod status;
pub mod stop;
pub mod targets;
pub mod tx;
