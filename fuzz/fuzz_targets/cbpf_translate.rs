#![no_main]

//! Arbitrary classic BPF programs to sonde-bpf's translation into eBPF: it refuses what XDP
//! cannot run (an `Unsupported`, one line) and never panics; what it writes only jumps forward,
//! to an instruction of the program (never into the second half of a 64-bit load), and ends in
//! an exit.

use libfuzzer_sys::fuzz_target;
use sonde_bpf::{bpf_insn, translate_as, Epilogue, View};

/// eBPF's BPF_JMP and BPF_JMP32 classes, and the call, exit and 64-bit immediate load codes.
const JMP: u8 = 0x05;
const JMP32: u8 = 0x06;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const LD_IMM64: u8 = 0x18;

/// The input's instructions: 8 bytes each, as `struct sock_filter` lays them out (code,
/// jt, jf, k; little-endian).
fn classic(bytes: &[u8]) -> Vec<libc::sock_filter> {
    bytes
        .chunks_exact(8)
        .map(|b| libc::sock_filter {
            code: u16::from_le_bytes([b[0], b[1]]),
            jt: b[2],
            jf: b[3],
            k: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        })
        .collect()
}

fn check(insns: &[bpf_insn]) {
    let last = insns.last().expect("a translation is never empty");
    assert_eq!(last.code, JMP | EXIT, "it ends in an exit");
    let second_halves: Vec<usize> = (0..insns.len())
        .filter(|&at| insns[at].code == LD_IMM64)
        .map(|at| at + 1)
        .collect();
    for (at, insn) in insns.iter().enumerate() {
        let class = insn.code & 0x07;
        let op = insn.code & 0xf0;
        if (class == JMP || class == JMP32) && op != CALL && op != EXIT {
            assert!(insn.off >= 0, "instruction {at} jumps backwards");
            let to = at + 1 + insn.off as usize;
            assert!(to < insns.len(), "instruction {at} jumps past the end");
            assert!(!second_halves.contains(&to), "instruction {at} jumps into a 64-bit load");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&how, rest)) = data.split_first() else {
        return;
    };
    let program = classic(rest);
    let epilogue = if how & 1 == 0 {
        Epilogue::Verdict
    } else {
        Epilogue::Redirect { xsks_map: 3 }
    };
    let view = if how & 2 == 0 { View::AsIs } else { View::TagOff };
    match translate_as(&program, epilogue, view) {
        Ok(insns) => check(&insns),
        Err(why) => assert!(!why.to_string().contains('\n'), "{why}"),
    }
});
