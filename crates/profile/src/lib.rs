//! sonde-profile: where the time of a packet goes, measured in a lab. `stack` takes a lab,
//! payload sizes, protocols (UDP, TCP) and send paths (the kernel's sockets, sonde's ring
//! backend), sends each payload from the lab's scanner namespace to its gateway, and gives the
//! start and stop latency of every send (kernel timestamps of a tap), their medians and
//! least-squares lines against size, and what the instrumentation costs. `stages` takes the
//! summaries of plain and instrumented scans and the stage clock's tallies and gives the
//! per-stage bars of `sonde profile tx|rx|scan`, with their check, table, CSV and JSON;
//! `capture` does the same for `sonde capture --profile`'s threads and times the filter in the
//! kernel on packets of the capture file. It uses `wire` (the frames it builds), `io` (the ring
//! backend), `lab` (the namespaces), `meter` (medians, line fits, stage clock, output files),
//! `engine` (scan summaries, CPU pinning) and `capture` (reading capture files, the verdict
//! program). The `sonde profile` and `sonde capture --profile` commands parse the arguments,
//! run and print; `sonde_plot::{stack, stages}` draw the charts.

pub mod capture;
pub mod stack;
pub mod stages;
