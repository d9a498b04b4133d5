//! sonde-profile: measurement harnesses that time a protocol stack from outside, in a lab.
//! `stack` takes a lab, payload sizes, protocols (UDP, TCP) and send paths (the kernel's
//! sockets, sonde's ring backend), sends each payload from the lab's scanner namespace to its
//! gateway, and gives the start and stop latency of every send (kernel timestamps of a tap),
//! their medians and least-squares lines against size, and what the instrumentation costs. It
//! uses `wire` (the frames it builds), `io` (the ring backend), `lab` (the namespaces),
//! `meter` (medians, line fits, output files) and `engine` (CPU pinning). `sonde profile
//! stack` parses its arguments and prints; `sonde_plot::stack` draws its chart.

pub mod stack;
