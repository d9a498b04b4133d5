//! sonde-bpf: the classic BPF → eBPF compiler (translate.rs), moved here from sonde-io; the next
//! commit makes it this crate's code.
