//! sonde-bpf writes the eBPF programs that sonde runs in XDP from tcpdump expressions: it takes
//! a classic BPF program (`libc::sock_filter`s, as libpcap compiles an expression) and gives
//! eBPF instructions (`bpf_insn`s) with one of two epilogues: a live one that redirects a match
//! to an AF_XDP socket, or a verdict-only one for judging frames in memory; what XDP cannot run
//! is an [`Unsupported`] (one line). It only writes programs: loading, attaching and test runs
//! are sonde-io's (`cbpf_xdp`, `xdp_filter`), which keeps every system call and `unsafe` there.
//! It uses no other sonde crate (libc and libbpf-sys for the two instruction formats).
#![deny(unsafe_code)]

mod translate;

pub use translate::{
    bpf_insn, frame_length_program, reads_vlan_tag, translate, translate_as, Epilogue, Unsupported,
    View, MATCHED, MAX_PACKET_OFF, MIN_TEST_FRAME,
};
