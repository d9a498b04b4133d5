//! `sonde capture`: tcpdump-compatible packet capture at line rate.
//!
//! Takes a tcpdump expression and an interface (or a capture file with `-r`); gives pcapng or pcap
//! files and counts of what was kept and dropped; [`open`] opens a live capture's sources (the
//! backend, the link check, XDP's fallback to the ring). Uses sonde-io (rings, AF_XDP, filter compilation;
//! only with the default `live` feature) and sonde-meter (stage clocks, output files), with
//! pcap-file for the file formats.
//!
//! The data flow, one file per stage:
//! - `source`: where packets come from (a kernel-filtered AF_PACKET ring, AF_XDP behind an XDP
//!   translation of the filter, or libpcap), with the kernel's drop counters;
//! - `chunk`: preallocated batches in which capture threads hand packets to the writer;
//! - `merge`: several threads' chunks into one stream in timestamp order;
//! - `output`: pcapng or pcap files, written in large pieces, rotated, always left valid;
//! - `live`: the capture threads, the writer thread and the counters that tie them together;
//! - `read`: reading capture files back (`-r`).

pub mod chunk;
#[cfg(feature = "live")]
pub mod live;
pub mod merge;
#[cfg(feature = "live")]
pub mod open;
pub mod output;
pub mod read;
#[cfg(feature = "live")]
pub mod source;
#[cfg(feature = "live")]
pub mod verdicts;
