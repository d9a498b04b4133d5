//! Runs a tcpdump expression in XDP (`sonde capture --backend xdp`): the classic BPF that
//! libpcap compiles (`sonde_io::filter::compile`) is translated here into eBPF, which an XDP
//! program can run, so frames are judged before any copy to user space. sonde-io loads what
//! this writes (its `cbpf_xdp` module).
//!
//! The translation goes instruction by instruction, in two passes: the first expands each
//! classic instruction into a few eBPF ones, whose jumps still name classic instructions (or one
//! of the two verdicts); the second, once every expansion's length is known, turns those names
//! into eBPF offsets. Classic jumps only go forward, so the eBPF program has no loops either.
//!
//! The meaning is that of libpcap's own interpreter (`pcap_offline_filter`), which the tests
//! compare against: A, X and the scratch words M\[0..16\] start at zero; a packet load reads
//! big-endian bytes, and one reaching beyond the frame ends the program with "no match"; so does
//! a division or modulo by zero; a shift by 32 or more leaves A zero; `len` is the frame's length
//! (`data_end - data`); a nonzero return is a match.
//!
//! A live program sees a frame as the kernel shows it to a packet socket ([`View::TagOff`]): an
//! outer 802.1Q or 802.1ad tag, which XDP finds in the frame but the kernel takes off before
//! any packet socket (or tcpdump) sees it, is taken off for the program and put back before
//! the verdict, and the program reads it as the kernel's ancillary data (SKF_AD_VLAN_TAG,
//! SKF_AD_VLAN_TAG_PRESENT, SKF_AD_VLAN_TPID), as libpcap's programs for a live Linux interface
//! do (`vlan 100`). A file's packets are judged as they are ([`View::AsIs`]).
//!
//! What XDP cannot run is refused with [`Unsupported`] (one line): loads of other ancillary data
//! (the kernel's other SKF_AD_* and SKF_NET/SKF_LL offsets, which libpcap uses only for live
//! Linux captures, e.g. for `inbound`; and any in a file's view), backward jumps (the
//! loop `protochain` compiles to), constant shifts by 32 or more, unknown opcodes, jumps past the
//! end, programs longer than classic BPF allows or whose jumps eBPF's 16-bit offsets cannot
//! span; and, when loading, a translation the kernel's verifier refuses (e.g. classic code that
//! nothing reaches, which libpcap's optimiser never leaves; or, on an architecture without cheap
//! unaligned loads, a 2- or 4-byte packet load at an odd offset: the loader's refusal, made
//! with [`Unsupported::new`]). The caller then filters in user space instead.
//!
//! Two epilogues follow one identical body ([`Epilogue`]): a live one, which redirects a matching
//! frame to the AF_XDP socket of its queue and passes the rest to the OS stack untouched
//! (`sonde_io::xdp::XdpRx::open_cbpf`), and a verdict-only one, run on frames in memory with
//! BPF_PROG_TEST_RUN (`sonde_io::cbpf_xdp::VerdictProgram`).

use std::fmt;
use std::os::fd::RawFd;

use libbpf_sys as bpf;

pub use libbpf_sys::bpf_insn;

/// Why a classic program cannot run in XDP; displays as one line, "this expression cannot run in
/// XDP: …". An `anyhow::Error` from sonde-io's `VerdictProgram::load` or `XdpRx::open_cbpf`
/// holds one (`err.downcast_ref::<Unsupported>()`) exactly when the expression itself is the
/// reason, so the caller can filter in user space instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(String);

impl Unsupported {
    /// The expression cannot run in XDP because of `why` (for a loader whose kernel refuses a
    /// translation).
    pub fn new(why: impl Into<String>) -> Unsupported {
        Unsupported(why.into())
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this expression cannot run in XDP: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// What the translated program does with its verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// A match is redirected to the AF_XDP socket at the frame's `rx_queue_index` in the XSKMAP
    /// `xsks_map` (XDP_PASS if there is none); anything else gets XDP_PASS.
    Redirect { xsks_map: RawFd },
    /// A match returns [`MATCHED`], anything else XDP_PASS.
    Verdict,
}

/// How the program sees a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// As it is (a file's packet, which libpcap judges as it is).
    AsIs,
    /// As the kernel shows it to a packet socket: an outer 802.1Q (0x8100) or 802.1ad (0x88a8)
    /// tag taken off and given as ancillary data; the frame is put back before the verdict.
    TagOff,
}

impl Epilogue {
    /// The view a program with this epilogue has by default: live frames as a packet socket
    /// sees them, frames in memory (a file's) as they are.
    fn view(self) -> View {
        match self {
            Epilogue::Redirect { .. } => View::TagOff,
            Epilogue::Verdict => View::AsIs,
        }
    }
}

/// The kernel's ancillary-data offsets (`<linux/filter.h>`) that a [`View::TagOff`] program
/// reads: SKF_AD_OFF + SKF_AD_VLAN_TAG, + SKF_AD_VLAN_TAG_PRESENT, + SKF_AD_VLAN_TPID.
const AD_VLAN_TAG: u32 = 0xffff_f000 + 44;
const AD_VLAN_TAG_PRESENT: u32 = 0xffff_f000 + 48;
const AD_VLAN_TPID: u32 = 0xffff_f000 + 60;

/// Whether `program` reads the VLAN tag the kernel took off a frame (libpcap's `vlan` on a live
/// Linux interface).
pub fn reads_vlan_tag(program: &[libc::sock_filter]) -> bool {
    program.iter().any(|i| {
        i.code & 0x07 == classic::LD
            && i.code & 0xe0 == classic::ABS
            && [AD_VLAN_TAG, AD_VLAN_TAG_PRESENT, AD_VLAN_TPID].contains(&i.k)
    })
}

/// What the verdict-only program returns for a match (XDP_DROP).
pub const MATCHED: u32 = bpf::XDP_DROP;

/// The shortest frame BPF_PROG_TEST_RUN takes for an XDP program (an Ethernet header).
pub const MIN_TEST_FRAME: usize = 14;

// Register mapping. A and X always hold zero-extended 32-bit values: every write to them is a
// 32-bit ALU operation or a zero-extending load, so classic unsigned 32-bit arithmetic and
// 32-bit comparisons (JMP32) carry over unchanged.
/// The return value.
const R0: u8 = 0;
/// The context on entry; the first helper argument.
const R1: u8 = 1;
/// Scratch for address arithmetic; R2 and R3 are also helper arguments in the live epilogue.
const TMP: u8 = 2;
const TMP2: u8 = 3;
/// The classic accumulator A.
const A: u8 = 4;
/// The classic index register X.
const X: u8 = 5;
/// The `struct xdp_md` context, kept for the live epilogue's `rx_queue_index`.
const CTX: u8 = 6;
/// The frame's first byte and one past its last (`ctx->data`, `ctx->data_end`).
const DATA: u8 = 7;
const DATA_END: u8 = 8;
/// The outer VLAN tag the program's view took off the frame ([`View::TagOff`]): 0 when there
/// was none, else `1 << 32 | TPID << 16 | TCI`.
const TAG: u8 = 9;
/// The read-only frame pointer: scratch word M\[i\] is the 4-byte stack slot at FP - 64 + 4i.
const FP: u8 = 10;

const SCRATCH_WORDS: u32 = 16;
const SCRATCH_BYTES: i16 = 4 * SCRATCH_WORDS as i16;

/// `struct xdp_md` field offsets.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

/// The largest packet offset the verifier lets a program reach (its MAX_PACKET_OFF). A load
/// beyond it is taken as beyond the frame: true of every frame but those over 64 KiB, which only
/// generic XDP on an interface with a 64 KiB MTU (such as `lo`) can see.
pub const MAX_PACKET_OFF: u32 = 0xffff;

/// Classic opcode parts (`<linux/filter.h>`); the class values are eBPF's too.
mod classic {
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;
    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;
    /// Source of an ALU or jump operand: K (the constant) or X.
    pub const X: u16 = 0x08;
    /// RET's value: K or A.
    pub const RET_A: u16 = 0x10;
    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;
    /// The negative offsets from which the kernel loads ancillary data (SKF_AD_OFF, …).
    pub const FIRST_SPECIAL_OFFSET: u32 = 0x8000_0000;
}

// eBPF opcode parts, as the instruction's `code` byte takes them.
const LDX_MEM: u8 = (bpf::BPF_LDX | bpf::BPF_MEM) as u8;
const STX_MEM: u8 = (bpf::BPF_STX | bpf::BPF_MEM) as u8;
const ST_MEM: u8 = (bpf::BPF_ST | bpf::BPF_MEM) as u8;
const LD_IMM64: u8 = (bpf::BPF_LD | bpf::BPF_IMM | bpf::BPF_DW) as u8;
const ALU32: u8 = bpf::BPF_ALU as u8;
const ALU64: u8 = bpf::BPF_ALU64 as u8;
const JMP64: u8 = bpf::BPF_JMP as u8;
const JMP32: u8 = bpf::BPF_JMP32 as u8;
const SRC_X: u8 = bpf::BPF_X as u8;
const MOV: u8 = bpf::BPF_MOV as u8;
const ADD: u8 = bpf::BPF_ADD as u8;
const AND: u8 = bpf::BPF_AND as u8;
const LSH: u8 = bpf::BPF_LSH as u8;
const JA: u8 = bpf::BPF_JA as u8;
const JEQ: u8 = bpf::BPF_JEQ as u8;
const JNE: u8 = bpf::BPF_JNE as u8;
const JGT: u8 = bpf::BPF_JGT as u8;
const JGE: u8 = bpf::BPF_JGE as u8;
const JLT: u8 = bpf::BPF_JLT as u8;
const JLE: u8 = bpf::BPF_JLE as u8;
const JSET: u8 = bpf::BPF_JSET as u8;

/// Where a jump goes, before eBPF offsets are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The first eBPF instruction of this classic instruction.
    Classic(usize),
    NoMatch,
    Match,
}

/// A jump's or ALU operation's second operand.
#[derive(Clone, Copy, Debug)]
enum Operand {
    Imm(u32),
    Reg(u8),
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    bpf_insn {
        code,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
        off,
        imm,
    }
}

/// The eBPF program being written: instructions, each jump with its target still symbolic.
#[derive(Default)]
struct Emitter {
    code: Vec<(bpf_insn, Option<Target>)>,
}

impl Emitter {
    fn len(&self) -> usize {
        self.code.len()
    }

    fn emit(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.code.push((insn(code, dst, src, off, imm), None));
    }

    fn mov32_imm(&mut self, dst: u8, imm: u32) {
        self.emit(ALU32 | MOV, dst, 0, 0, imm as i32);
    }

    fn mov32_reg(&mut self, dst: u8, src: u8) {
        self.emit(ALU32 | MOV | SRC_X, dst, src, 0, 0);
    }

    fn mov64_reg(&mut self, dst: u8, src: u8) {
        self.emit(ALU64 | MOV | SRC_X, dst, src, 0, 0);
    }

    /// A 32-bit operation: `dst = dst op operand` (`op` a BPF_ADD, … code).
    fn alu32(&mut self, op: u8, dst: u8, operand: Operand) {
        match operand {
            Operand::Imm(k) => self.emit(ALU32 | op, dst, 0, 0, k as i32),
            Operand::Reg(src) => self.emit(ALU32 | op | SRC_X, dst, src, 0, 0),
        }
    }

    fn add64_imm(&mut self, dst: u8, imm: u32) {
        self.emit(ALU64 | ADD, dst, 0, 0, imm as i32);
    }

    fn add64_reg(&mut self, dst: u8, src: u8) {
        self.emit(ALU64 | ADD | SRC_X, dst, src, 0, 0);
    }

    /// `dst = *(width bytes *)(base + off)`, zero-extended.
    fn load(&mut self, width: Width, dst: u8, base: u8, off: i16) {
        self.emit(LDX_MEM | width.size(), dst, base, off, 0);
    }

    /// `*(u32 *)(base + off) = src`.
    fn store32(&mut self, base: u8, off: i16, src: u8) {
        self.emit(STX_MEM | bpf::BPF_W as u8, base, src, off, 0);
    }

    fn goto(&mut self, to: Target) {
        self.code.push((insn(JMP64 | JA, 0, 0, 0, 0), Some(to)));
    }

    /// `if dst op operand goto to`, comparing 64 (`JMP64`) or 32 bits (`JMP32`).
    fn branch(&mut self, class: u8, op: u8, dst: u8, operand: Operand, to: Target) {
        let insn = match operand {
            Operand::Imm(k) => insn(class | op, dst, 0, 0, k as i32),
            Operand::Reg(src) => insn(class | op | SRC_X, dst, src, 0, 0),
        };
        self.code.push((insn, Some(to)));
    }

    /// Ends the program with "no match" when this point is reached; a conditional jump (A
    /// always equals itself) so that what follows stays reachable in the verifier's check of
    /// the control flow, which refuses any instruction it cannot reach.
    fn always_no_match(&mut self) {
        self.branch(JMP64, JEQ, A, Operand::Reg(A), Target::NoMatch);
    }

    fn exit(&mut self) {
        self.emit(JMP64 | bpf::BPF_EXIT as u8, 0, 0, 0, 0);
    }

    /// Turns symbolic targets into offsets: `starts[i]` is where classic instruction `i`
    /// begins, `no_match` and `matched` where the verdicts do (if anything jumps to them).
    fn resolve(
        self,
        starts: &[usize],
        no_match: Option<usize>,
        matched: Option<usize>,
    ) -> Result<Vec<bpf_insn>, Unsupported> {
        let mut out = Vec::with_capacity(self.code.len());
        for (at, (mut insn, target)) in self.code.into_iter().enumerate() {
            if let Some(target) = target {
                let to = match target {
                    Target::Classic(i) => starts[i],
                    Target::NoMatch => no_match.expect("a jump to no-match has its epilogue"),
                    Target::Match => matched.expect("a jump to match has its epilogue"),
                };
                insn.off = i16::try_from(to as i64 - at as i64 - 1).map_err(|_| {
                    Unsupported(format!(
                        "its translation is too long: a jump spans more than {} eBPF instructions",
                        i16::MAX
                    ))
                })?;
            }
            out.push(insn);
        }
        Ok(out)
    }

    /// Makes the jump emitted at `from` (with offset 0) land here.
    fn land_here(&mut self, from: usize) {
        self.code[from].0.off = (self.len() - from - 1) as i16;
    }

    /// A jump to be landed later with [`Emitter::land_here`]: where it is.
    fn jump_ahead(&mut self, code: u8, dst: u8, src: u8, imm: i32) -> usize {
        self.emit(code, dst, src, 0, imm);
        self.len() - 1
    }

    fn jumps_to(&self, target: Target) -> bool {
        self.code.iter().any(|(_, t)| *t == Some(target))
    }
}

/// Size of a packet or memory load.
#[derive(Clone, Copy, Debug)]
enum Width {
    Byte,
    Half,
    Word,
}

impl Width {
    fn of(code: u16) -> Option<Width> {
        match code & 0x18 {
            classic::B => Some(Width::Byte),
            classic::H => Some(Width::Half),
            classic::W => Some(Width::Word),
            _ => None,
        }
    }

    fn bytes(self) -> u32 {
        match self {
            Width::Byte => 1,
            Width::Half => 2,
            Width::Word => 4,
        }
    }

    /// The eBPF size bits.
    fn size(self) -> u8 {
        (match self {
            Width::Byte => bpf::BPF_B,
            Width::Half => bpf::BPF_H,
            Width::Word => bpf::BPF_W,
        }) as u8
    }
}

/// Translates the classic BPF `program` (a tcpdump expression compiled for Ethernet) into an
/// XDP program ending in `epilogue`. The instructions before the epilogue do not depend on it.
pub fn translate(
    program: &[libc::sock_filter],
    epilogue: Epilogue,
) -> Result<Vec<bpf_insn>, Unsupported> {
    Ok(expand_viewed(program, epilogue, epilogue.view())?.insns)
}

/// A translation and where its parts begin.
struct Expanded {
    insns: Vec<bpf_insn>,
    /// Where each classic instruction's expansion begins.
    #[cfg_attr(not(test), allow(dead_code))]
    starts: Vec<usize>,
    /// Where the verdicts begin, if anything jumps to them.
    #[cfg_attr(not(test), allow(dead_code))]
    no_match: Option<usize>,
    #[cfg_attr(not(test), allow(dead_code))]
    matched: Option<usize>,
}

/// [`translate`], with the frame seen as `view` shows it (a live program's view, for checking it
/// on frames in memory with the verdict-only epilogue).
pub fn translate_as(
    program: &[libc::sock_filter],
    epilogue: Epilogue,
    view: View,
) -> Result<Vec<bpf_insn>, Unsupported> {
    Ok(expand_viewed(program, epilogue, view)?.insns)
}

/// [`translate`], with the positions the tests check jumps against.
#[cfg(test)]
fn expand(program: &[libc::sock_filter], epilogue: Epilogue) -> Result<Expanded, Unsupported> {
    expand_viewed(program, epilogue, epilogue.view())
}

/// [`expand`] with the frame seen as `view` shows it.
fn expand_viewed(
    program: &[libc::sock_filter],
    epilogue: Epilogue,
    view: View,
) -> Result<Expanded, Unsupported> {
    check_shape(program)?;
    let mut e = Emitter::default();
    prologue(&mut e, uses_scratch(program), view);
    let mut starts = Vec::with_capacity(program.len());
    for (at, classic) in program.iter().enumerate() {
        starts.push(e.len());
        translate_one(&mut e, at, classic, program.len(), view).map_err(|why| {
            Unsupported(format!(
                "instruction {at} (code {:#06x}, k {:#x}) {why}",
                classic.code, classic.k
            ))
        })?;
    }
    // The body ends in jumps only (check_shape), so the verdicts follow it; each is written only
    // if something jumps to it, as the verifier refuses unreachable instructions.
    let no_match = e.jumps_to(Target::NoMatch).then(|| {
        let at = e.len();
        put_tag_back(&mut e, view);
        e.mov32_imm(R0, bpf::XDP_PASS);
        e.exit();
        at
    });
    let matched = e.jumps_to(Target::Match).then(|| {
        let at = e.len();
        put_tag_back(&mut e, view);
        on_match(&mut e, epilogue);
        at
    });
    Ok(Expanded {
        insns: e.resolve(&starts, no_match, matched)?,
        starts,
        no_match,
        matched,
    })
}

/// Refuses what cannot be a complete classic program.
fn check_shape(program: &[libc::sock_filter]) -> Result<(), Unsupported> {
    let max = bpf::BPF_MAXINSNS as usize;
    match program.last() {
        None => Err(Unsupported("the program is empty".into())),
        Some(_) if program.len() > max => Err(Unsupported(format!(
            "the program has {} instructions, more than classic BPF's {max}",
            program.len()
        ))),
        Some(last) if !matches!(last.code & 0x07, classic::RET | classic::JMP) => Err(Unsupported(
            "the program can run past its last instruction".into(),
        )),
        Some(_) => Ok(()),
    }
}

fn uses_scratch(program: &[libc::sock_filter]) -> bool {
    program.iter().any(|i| match i.code & 0x07 {
        classic::ST | classic::STX => true,
        classic::LD | classic::LDX => i.code & 0xe0 == classic::MEM,
        _ => false,
    })
}

/// Saves the context and the frame's bounds, takes the tag off for a [`View::TagOff`], and
/// zeroes A, X and (if used) M\[0..16\].
fn prologue(e: &mut Emitter, scratch: bool, view: View) {
    e.mov64_reg(CTX, R1);
    load_bounds(e);
    if view == View::TagOff {
        take_tag_off(e);
    }
    e.mov32_imm(A, 0);
    e.mov32_imm(X, 0);
    if scratch {
        for off in (-SCRATCH_BYTES..0).step_by(8) {
            e.emit(ST_MEM | bpf::BPF_DW as u8, FP, 0, off, 0);
        }
    }
}

fn load_bounds(e: &mut Emitter) {
    e.load(Width::Word, DATA, CTX, XDP_MD_DATA);
    e.load(Width::Word, DATA_END, CTX, XDP_MD_DATA_END);
}

/// `*(u32 *)(base + off)` for the three words at `from`, stored at `to`, `to + 4`, `to + 8`
/// (read before any is written, so the two may overlap).
fn move_12_bytes(e: &mut Emitter, from: i16, to: i16) {
    for (reg, at) in [(TMP, 0), (TMP2, 4), (A, 8)] {
        e.load(Width::Word, reg, DATA, from + at);
    }
    for (reg, at) in [(TMP, 0), (TMP2, 4), (A, 8)] {
        e.store32(DATA, to + at, reg);
    }
}

/// If the frame carries an outer 802.1Q or 802.1ad tag, as the kernel finds it before any
/// packet socket sees the frame: TAG = the tag (see [`TAG`]), the two MAC addresses moved 4
/// bytes on over it, and the frame's start moved after the tag (bpf_xdp_adjust_head), so the
/// program reads the frame as the kernel shows it, length included. Otherwise TAG = 0.
fn take_tag_off(e: &mut Emitter) {
    let to_be16 = ALU32 | bpf::BPF_END as u8 | bpf::BPF_TO_BE as u8;
    e.emit(ALU64 | MOV, TAG, 0, 0, 0);
    // A tagged frame holds at least the MAC addresses, the tag and an EtherType.
    e.mov64_reg(TMP, DATA);
    e.add64_imm(TMP, 18);
    let short = e.jump_ahead(JMP64 | JGT | SRC_X, TMP, DATA_END, 0);
    e.load(Width::Half, TMP, DATA, 12);
    e.emit(to_be16, TMP, 0, 0, 16);
    let dot1q = e.jump_ahead(JMP64 | JEQ, TMP, 0, 0x8100);
    let not_tagged = e.jump_ahead(JMP64 | JNE, TMP, 0, 0x88a8);
    e.land_here(dot1q);
    // TAG = 1 << 32 | TPID << 16 | TCI.
    e.emit(ALU64 | LSH, TMP, 0, 0, 16);
    e.load(Width::Half, TMP2, DATA, 14);
    e.emit(to_be16, TMP2, 0, 0, 16);
    e.emit(ALU64 | bpf::BPF_OR as u8 | SRC_X, TMP, TMP2, 0, 0);
    e.emit(ALU64 | MOV, TMP2, 0, 0, 1);
    e.emit(ALU64 | LSH, TMP2, 0, 0, 32);
    e.emit(ALU64 | bpf::BPF_OR as u8 | SRC_X, TMP, TMP2, 0, 0);
    e.mov64_reg(TAG, TMP);
    move_12_bytes(e, 0, 4);
    // Cannot fail: what is left (at least 14 bytes) still holds an Ethernet header.
    adjust_head(e, 4);
    e.land_here(short);
    e.land_here(not_tagged);
}

/// bpf_xdp_adjust_head(ctx, by), then the frame's bounds again (the call moves them).
fn adjust_head(e: &mut Emitter, by: i32) {
    e.mov64_reg(R1, CTX);
    e.emit(ALU64 | MOV, TMP, 0, 0, by);
    e.emit(
        JMP64 | bpf::BPF_CALL as u8,
        0,
        0,
        0,
        bpf::BPF_FUNC_xdp_adjust_head as i32,
    );
    load_bounds(e);
}

/// Undoes [`take_tag_off`] (if it took a tag off) before the verdict: the frame goes to the
/// stack or to sonde as it arrived.
fn put_tag_back(e: &mut Emitter, view: View) {
    if view != View::TagOff {
        return;
    }
    let untagged = e.jump_ahead(JMP64 | JEQ, TAG, 0, 0);
    adjust_head(e, -4);
    e.mov64_reg(TMP, DATA);
    e.add64_imm(TMP, 16);
    let short = e.jump_ahead(JMP64 | JGT | SRC_X, TMP, DATA_END, 0);
    move_12_bytes(e, 4, 0);
    e.mov32_reg(TMP, TAG);
    e.emit(
        ALU32 | bpf::BPF_END as u8 | bpf::BPF_TO_BE as u8,
        TMP,
        0,
        0,
        32,
    );
    e.store32(DATA, 12, TMP);
    e.land_here(short);
    e.land_here(untagged);
}

/// What a match does.
fn on_match(e: &mut Emitter, epilogue: Epilogue) {
    match epilogue {
        Epilogue::Verdict => {
            e.mov32_imm(R0, MATCHED);
        }
        Epilogue::Redirect { xsks_map } => {
            // bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS): the flags' low bits
            // are the action when the map has no socket at that queue.
            e.emit(LD_IMM64, R1, bpf::BPF_PSEUDO_MAP_FD as u8, 0, xsks_map);
            e.emit(0, 0, 0, 0, 0);
            e.load(Width::Word, TMP, CTX, XDP_MD_RX_QUEUE_INDEX);
            e.mov32_imm(TMP2, bpf::XDP_PASS);
            let call = JMP64 | bpf::BPF_CALL as u8;
            e.emit(call, 0, 0, 0, bpf::BPF_FUNC_redirect_map as i32);
        }
    }
    e.exit();
}

/// Translates classic instruction `at` of a program of `len`; `Err` says why it cannot be (the
/// caller names the instruction).
fn translate_one(
    e: &mut Emitter,
    at: usize,
    i: &libc::sock_filter,
    len: usize,
    view: View,
) -> Result<(), String> {
    match i.code & 0x07 {
        classic::LD => load_a(e, i, view),
        classic::LDX => load_x(e, i),
        classic::ST | classic::STX => store(e, i),
        classic::ALU => alu(e, i),
        classic::JMP => jump(e, at, i, len),
        classic::RET => ret(e, i),
        classic::MISC => misc(e, i),
        _ => unreachable!("the class is three bits"),
    }
}

fn unknown() -> String {
    "has an opcode classic BPF does not define".into()
}

/// The stack offset of scratch word M\[k\].
fn scratch_slot(k: u32) -> Result<i16, String> {
    if k >= SCRATCH_WORDS {
        return Err(format!(
            "uses scratch word M[{k}], beyond M[0..{SCRATCH_WORDS}]"
        ));
    }
    Ok(-SCRATCH_BYTES + 4 * k as i16)
}

/// `LD`: A = a packet word, half word or byte (at k, or at X + k), a constant, a scratch word,
/// or the frame's length.
fn load_a(e: &mut Emitter, i: &libc::sock_filter, view: View) -> Result<(), String> {
    let width = Width::of(i.code).ok_or_else(unknown)?;
    match (i.code & 0xe0, width) {
        (classic::ABS, _) if view == View::TagOff && load_tag(e, i.k) => Ok(()),
        (classic::ABS, _) => load_packet(e, A, width, i.k, false),
        (classic::IND, _) => load_packet(e, A, width, i.k, true),
        (classic::IMM, Width::Word) => {
            e.mov32_imm(A, i.k);
            Ok(())
        }
        (classic::MEM, Width::Word) => {
            e.load(Width::Word, A, FP, scratch_slot(i.k)?);
            Ok(())
        }
        (classic::LEN, Width::Word) => {
            frame_length(e, A);
            Ok(())
        }
        _ => Err(unknown()),
    }
}

/// A = the VLAN ancillary datum at `k` (of any load width, as the kernel), from TAG; false if
/// `k` names no such datum.
fn load_tag(e: &mut Emitter, k: u32) -> bool {
    let rsh = bpf::BPF_RSH as u8;
    match k {
        AD_VLAN_TAG => {
            e.mov32_reg(A, TAG);
            e.alu32(AND, A, Operand::Imm(0xffff));
        }
        AD_VLAN_TPID => {
            e.mov32_reg(A, TAG);
            e.alu32(rsh, A, Operand::Imm(16));
        }
        AD_VLAN_TAG_PRESENT => {
            e.mov64_reg(A, TAG);
            e.emit(ALU64 | rsh, A, 0, 0, 32);
        }
        _ => return false,
    }
    true
}

/// `LDX`: X = a constant, a scratch word, the frame's length, or 4 × the low nibble of the
/// packet byte at k (MSH: an IPv4 header's length).
fn load_x(e: &mut Emitter, i: &libc::sock_filter) -> Result<(), String> {
    match i.code & !0x07 {
        c if c == classic::W | classic::IMM => e.mov32_imm(X, i.k),
        c if c == classic::W | classic::MEM => e.load(Width::Word, X, FP, scratch_slot(i.k)?),
        c if c == classic::W | classic::LEN => frame_length(e, X),
        c if c == classic::B | classic::MSH => {
            load_packet(e, X, Width::Byte, i.k, false)?;
            e.alu32(AND, X, Operand::Imm(0xf));
            e.alu32(LSH, X, Operand::Imm(2));
        }
        _ => return Err(unknown()),
    }
    Ok(())
}

/// `dst` = `data_end - data`.
fn frame_length(e: &mut Emitter, dst: u8) {
    e.mov64_reg(TMP, DATA_END);
    e.emit(ALU64 | bpf::BPF_SUB as u8 | SRC_X, TMP, DATA, 0, 0);
    e.mov32_reg(dst, TMP);
}

/// `dst` = the big-endian packet field of `width` at `k` (or at X + k if `indexed`), in host
/// order; a field reaching beyond the frame ends the program with "no match".
///
/// The verifier accepts a packet access only when it has seen the pointer compared against
/// `data_end`, and a variable offset only when it is bounded first: X + k is checked against
/// MAX_PACKET_OFF (beyond it no frame reaches) before it is added to `data`.
fn load_packet(
    e: &mut Emitter,
    dst: u8,
    width: Width,
    k: u32,
    indexed: bool,
) -> Result<(), String> {
    if k >= classic::FIRST_SPECIAL_OFFSET {
        return Err(format!(
            "loads the kernel's ancillary data at offset {}, which XDP does not have",
            k as i32
        ));
    }
    let end = u64::from(k) + u64::from(width.bytes());
    if end > u64::from(MAX_PACKET_OFF) {
        // Beyond any frame (and X only adds to it).
        e.always_no_match();
        return Ok(());
    }
    let ptr = if indexed {
        // TMP = X + k (64-bit: no wrap-around), then TMP2 = data + TMP + width.
        e.mov32_reg(TMP, X);
        if k != 0 {
            e.add64_imm(TMP, k);
        }
        let last_start = MAX_PACKET_OFF - width.bytes();
        e.branch(JMP64, JGT, TMP, Operand::Imm(last_start), Target::NoMatch);
        e.mov64_reg(TMP2, DATA);
        e.add64_reg(TMP2, TMP);
        e.add64_imm(TMP2, width.bytes());
        TMP2
    } else {
        e.mov64_reg(TMP, DATA);
        e.add64_imm(TMP, end as u32);
        TMP
    };
    e.branch(JMP64, JGT, ptr, Operand::Reg(DATA_END), Target::NoMatch);
    e.load(width, dst, ptr, -(width.bytes() as i16));
    if !matches!(width, Width::Byte) {
        // To big-endian from host order is the same swap as back (or nothing, on a big-endian
        // host); it also clears the bits above the field.
        let to_be = bpf::BPF_END as u8 | bpf::BPF_TO_BE as u8;
        e.emit(ALU32 | to_be, dst, 0, 0, 8 * width.bytes() as i32);
    }
    Ok(())
}

/// `ST`/`STX`: M\[k\] = A or X.
fn store(e: &mut Emitter, i: &libc::sock_filter) -> Result<(), String> {
    let src = match i.code {
        classic::ST => A,
        classic::STX => X,
        _ => return Err(unknown()),
    };
    e.store32(FP, scratch_slot(i.k)?, src);
    Ok(())
}

/// `ALU`: A = A op K (or X), 32 bits unsigned, as classic BPF.
fn alu(e: &mut Emitter, i: &libc::sock_filter) -> Result<(), String> {
    let op = (i.code & 0xf0) as u8;
    let operand = if i.code & classic::X != 0 {
        Operand::Reg(X)
    } else {
        Operand::Imm(i.k)
    };
    match op as u32 {
        bpf::BPF_ADD | bpf::BPF_SUB | bpf::BPF_MUL | bpf::BPF_OR | bpf::BPF_AND | bpf::BPF_XOR => {
            e.alu32(op, A, operand);
        }
        bpf::BPF_DIV | bpf::BPF_MOD => match operand {
            // eBPF divides by zero without a fault; classic BPF ends with "no match".
            Operand::Imm(0) => e.always_no_match(),
            Operand::Reg(x) => {
                e.branch(JMP64, JEQ, x, Operand::Imm(0), Target::NoMatch);
                e.alu32(op, A, operand);
            }
            Operand::Imm(_) => e.alu32(op, A, operand),
        },
        bpf::BPF_LSH | bpf::BPF_RSH => match operand {
            Operand::Imm(k) if k >= 32 => {
                return Err(format!("shifts by {k}, which 32-bit BPF cannot"))
            }
            Operand::Imm(_) => e.alu32(op, A, operand),
            Operand::Reg(x) => {
                // libpcap leaves A zero for a shift by 32 or more; eBPF's would be undefined.
                e.emit(JMP64 | JLT, x, 0, 2, 32);
                e.mov32_imm(A, 0);
                e.emit(JMP64 | JA, 0, 0, 1, 0);
                e.alu32(op, A, operand);
            }
        },
        bpf::BPF_NEG if i.code == classic::ALU | bpf::BPF_NEG as u16 => {
            e.emit(ALU32 | op, A, 0, 0, 0);
        }
        _ => return Err(unknown()),
    }
    Ok(())
}

/// The negation of a comparison, where eBPF has one.
fn negated(op: u8) -> Option<u8> {
    match op {
        JEQ => Some(JNE),
        JGT => Some(JLE),
        JGE => Some(JLT),
        _ => None,
    }
}

/// `JMP`: always (JA), or to `jt` if A compares true against K (or X) and to `jf` if not.
fn jump(e: &mut Emitter, at: usize, i: &libc::sock_filter, len: usize) -> Result<(), String> {
    let target = |skip: u32| match (at + 1).checked_add(skip as usize) {
        Some(to) if to < len => Ok(Target::Classic(to)),
        _ => Err("jumps past the end of the program".to_string()),
    };
    let op = (i.code & 0xf0) as u8;
    if i.code == classic::JMP | JA as u16 {
        if i.k >= 0x8000_0000 {
            // libpcap's interpreter runs what wraps around; the kernel refuses it.
            return Err("jumps backwards (a loop, as `protochain` compiles to)".into());
        }
        e.goto(target(i.k)?);
        return Ok(());
    }
    if !matches!(op, JEQ | JGT | JGE | JSET) {
        return Err(unknown());
    }
    let operand = if i.code & classic::X != 0 {
        Operand::Reg(X)
    } else {
        Operand::Imm(i.k)
    };
    let (on_true, on_false) = (target(i.jt.into())?, target(i.jf.into())?);
    if on_true == on_false {
        e.goto(on_true);
    } else if i.jf == 0 {
        e.branch(JMP32, op, A, operand, on_true);
    } else if let (0, Some(not)) = (i.jt, negated(op)) {
        e.branch(JMP32, not, A, operand, on_false);
    } else {
        e.branch(JMP32, op, A, operand, on_true);
        e.goto(on_false);
    }
    Ok(())
}

/// `RET`: a nonzero K or A is a match.
fn ret(e: &mut Emitter, i: &libc::sock_filter) -> Result<(), String> {
    match i.code & !0x07 {
        0 => e.goto(if i.k != 0 {
            Target::Match
        } else {
            Target::NoMatch
        }),
        classic::RET_A => {
            e.branch(JMP32, JNE, A, Operand::Imm(0), Target::Match);
            e.goto(Target::NoMatch);
        }
        _ => return Err(unknown()),
    }
    Ok(())
}

/// `MISC`: X = A (TAX) or A = X (TXA).
fn misc(e: &mut Emitter, i: &libc::sock_filter) -> Result<(), String> {
    match i.code & !0x07 {
        classic::TAX => e.mov32_reg(X, A),
        classic::TXA => e.mov32_reg(A, X),
        _ => return Err(unknown()),
    }
    Ok(())
}

/// An XDP program returning how much of a frame it sees (`data_end - data`): run once on a
/// long frame, it measures what a test run shows a program whole.
pub fn frame_length_program() -> Vec<bpf_insn> {
    let mut e = Emitter::default();
    e.load(Width::Word, DATA, R1, XDP_MD_DATA);
    e.load(Width::Word, DATA_END, R1, XDP_MD_DATA_END);
    frame_length(&mut e, R0);
    e.exit();
    e.resolve(&[], None, None)
        .expect("a program without jumps resolves")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libpcap's classic program for `expr` on Ethernet, as sonde-io's `filter::compile` gives
    /// it (the pcap crate shows an instruction only as its text, "code jt jf k").
    fn compile(expr: &str) -> Result<Vec<libc::sock_filter>, pcap::Error> {
        let program = pcap::Capture::dead(pcap::Linktype::ETHERNET)?.compile(expr, true)?;
        let read = |text: String| {
            let fields: Vec<u32> = text.split(' ').map(|n| n.parse().unwrap()).collect();
            let [code, jt, jf, k] = fields[..] else {
                panic!("{text}")
            };
            op(code as u16, jt as u8, jf as u8, k)
        };
        Ok(program
            .get_instructions()
            .iter()
            .map(|i| read(i.to_string()))
            .collect())
    }

    fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }

    // Classic instructions, as libpcap's `-d` prints them.
    const LDH_ABS: u16 = 0x28;
    const LDB_ABS: u16 = 0x30;
    const LD_ABS: u16 = 0x20;
    const LDB_IND: u16 = 0x50;
    const LD_IND: u16 = 0x40;
    const LD_MEM: u16 = 0x60;
    const JA_: u16 = 0x05;
    const JEQ_K: u16 = 0x15;
    const JGT_K: u16 = 0x25;
    const JSET_K: u16 = 0x45;
    const LSH_K: u16 = 0x64;
    const RET_K: u16 = 0x06;
    const RET_A: u16 = 0x16;

    fn dst(i: &bpf_insn) -> u8 {
        i.dst_reg()
    }

    /// Whether `i` is a jump with an offset (not a call or exit).
    fn is_jump(i: &bpf_insn) -> bool {
        let class = i.code & 0x07;
        let op = i.code & 0xf0;
        (class == JMP64 || class == JMP32) && op != bpf::BPF_CALL as u8 && op != bpf::BPF_EXIT as u8
    }

    /// The jumps of the expansion of classic instruction `at`: (opcode, destination).
    fn jumps_of(x: &Expanded, at: usize) -> Vec<(u8, usize)> {
        let end = x.starts.get(at + 1).copied().unwrap_or(x.insns.len());
        (x.starts[at]..end)
            .filter(|&p| is_jump(&x.insns[p]))
            .map(|p| {
                (
                    x.insns[p].code,
                    (p as i64 + 1 + x.insns[p].off as i64) as usize,
                )
            })
            .collect()
    }

    #[test]
    fn jumps_land_where_the_classic_ones_did() {
        let program = [
            op(LDH_ABS, 0, 0, 12),    // 0
            op(JEQ_K, 0, 5, 0x800),   // 1: jt next, jf 7 → one negated jump
            op(LDB_ABS, 0, 0, 23),    // 2
            op(JGT_K, 1, 2, 5),       // 3: jt 5, jf 6 → jump and JA
            op(JA_, 0, 0, 2),         // 4: 7
            op(JSET_K, 1, 0, 1),      // 5: jt 7, jf next → one jump, no negation needed
            op(RET_K, 0, 0, 0x40000), // 6
            op(RET_K, 0, 0, 0),       // 7
        ];
        let x = expand(&program, Epilogue::Verdict).unwrap();
        let (s, no, yes) = (&x.starts, x.no_match.unwrap(), x.matched.unwrap());
        let j32 = |op: u8| JMP32 | op;
        // Packet loads jump (64-bit) to no-match when the field is beyond the frame.
        assert_eq!(jumps_of(&x, 0), [(JMP64 | JGT | SRC_X, no)]);
        assert_eq!(jumps_of(&x, 1), [(j32(JNE), s[7])]);
        assert_eq!(jumps_of(&x, 2), [(JMP64 | JGT | SRC_X, no)]);
        assert_eq!(jumps_of(&x, 3), [(j32(JGT), s[5]), (JMP64 | JA, s[6])]);
        assert_eq!(jumps_of(&x, 4), [(JMP64 | JA, s[7])]);
        assert_eq!(jumps_of(&x, 5), [(j32(JSET), s[7])]);
        assert_eq!(jumps_of(&x, 6), [(JMP64 | JA, yes)]);
        assert_eq!(jumps_of(&x, 7), [(JMP64 | JA, no)]);
        // Each comparison is of A with K.
        for at in [1, 3, 5] {
            let insn = &x.insns[s[at]];
            assert_eq!((dst(insn), insn.imm as u32), (A, program[at].k), "{at}");
        }
        // The verdicts: no match, then match, each returning at once.
        let ret = |at: usize| {
            (
                x.insns[at].code,
                x.insns[at].imm as u32,
                x.insns[at + 1].code,
            )
        };
        let exit = JMP64 | bpf::BPF_EXIT as u8;
        assert_eq!(ret(no), (ALU32 | MOV, bpf::XDP_PASS, exit));
        assert_eq!(ret(yes), (ALU32 | MOV, MATCHED, exit));
        assert_eq!(yes + 2, x.insns.len());
    }

    #[test]
    fn both_epilogues_share_one_body() {
        let program = compile("tcp port 80 or udp[8:2] = 0x1234").unwrap();
        let verdict = expand_viewed(&program, Epilogue::Verdict, View::TagOff).unwrap();
        let live = expand(&program, Epilogue::Redirect { xsks_map: 77 }).unwrap();
        let body = verdict.matched.unwrap().max(verdict.no_match.unwrap());
        let raw = |i: &[bpf_insn]| -> Vec<(u8, u8, i16, i32)> {
            i.iter().map(|i| (i.code, dst(i), i.off, i.imm)).collect()
        };
        assert_eq!(raw(&verdict.insns[..body]), raw(&live.insns[..body]));
        // Each verdict first puts a tag it took off back.
        let put_back = {
            let mut e = Emitter::default();
            put_tag_back(&mut e, View::TagOff);
            e.len()
        };
        let redirect = live.matched.unwrap() + put_back;
        let tail = raw(&live.insns[redirect..]);
        assert_eq!(tail[0], (LD_IMM64, R1, 0, 77), "the map's descriptor");
        assert_eq!(live.insns[redirect].src_reg(), bpf::BPF_PSEUDO_MAP_FD as u8);
        let call = (
            JMP64 | bpf::BPF_CALL as u8,
            0,
            0,
            bpf::BPF_FUNC_redirect_map as i32,
        );
        assert!(tail.contains(&call), "{tail:?}");
    }

    #[test]
    fn a_verdict_nothing_reaches_is_not_written() {
        // The verifier refuses unreachable instructions.
        let never = expand(&[op(RET_K, 0, 0, 0)], Epilogue::Verdict).unwrap();
        assert!(never.matched.is_none() && never.no_match.is_some());
        let always = expand(&[op(RET_K, 0, 0, 1)], Epilogue::Verdict).unwrap();
        assert!(always.no_match.is_none() && always.matched.is_some());
        let exits = |x: &Expanded| {
            x.insns
                .iter()
                .filter(|i| i.code == JMP64 | bpf::BPF_EXIT as u8)
                .count()
        };
        assert_eq!((exits(&never), exits(&always)), (1, 1));
    }

    #[test]
    fn what_xdp_cannot_run_is_refused_in_one_line() {
        let ret_a = op(RET_A, 0, 0, 0);
        let cases: Vec<(Vec<libc::sock_filter>, &str)> = vec![
            (vec![], "empty"),
            // SKF_AD_OFF + SKF_AD_PROTOCOL, SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT, SKF_LL_OFF.
            (
                vec![op(LDH_ABS, 0, 0, 0xffff_f000), ret_a],
                "ancillary data at offset -4096",
            ),
            (vec![op(LD_ABS, 0, 0, 0xffff_f030), ret_a], "ancillary"),
            (vec![op(LDB_IND, 0, 0, 0xffe0_0000), ret_a], "ancillary"),
            (vec![op(0x7ff, 0, 0, 0), ret_a], "opcode"),
            (vec![op(0x38, 0, 0, 0), ret_a], "opcode"), // a double-word load
            (vec![op(0x21, 0, 0, 0), ret_a], "opcode"), // LDX W ABS
            (vec![op(0x0e, 0, 0, 0)], "opcode"),        // RET X
            (vec![op(0xf7, 0, 0, 0), ret_a], "opcode"), // MISC beyond TAX/TXA
            (vec![op(JEQ_K, 5, 0, 1), ret_a], "past the end"),
            (vec![op(JA_, 0, 0, 0x7fff_ffff), ret_a], "past the end"),
            (vec![ret_a, op(JA_, 0, 0, u32::MAX - 1)], "jumps backwards"),
            (vec![op(LDH_ABS, 0, 0, 12)], "past its last instruction"),
            (
                vec![op(RET_K, 0, 0, 1); 4097],
                "more than classic BPF's 4096",
            ),
            (vec![op(LD_MEM, 0, 0, 16), ret_a], "M[16]"),
            (vec![op(LSH_K, 0, 0, 32), ret_a], "shifts by 32"),
        ];
        for (program, why) in cases {
            let err = translate(&program, Epilogue::Verdict)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("this expression cannot run in XDP: ") && err.contains(why),
                "{program:?}: {err}"
            );
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_loop_from_libpcap_is_refused() {
        // `protochain` walks IPv6 extension headers with a backward jump.
        let program = compile("ip6 protochain 6").unwrap();
        let err = translate(&program, Epilogue::Verdict)
            .unwrap_err()
            .to_string();
        assert!(err.contains("jumps backwards"), "{err}");
    }

    #[test]
    fn a_jump_longer_than_ebpf_offsets_is_refused() {
        // Word loads at X + 1 expand to 9 eBPF instructions each: 4000 of them make a jump
        // across them longer than an eBPF offset (15 bits) reaches; 3000 do not.
        let across = |loads: usize| {
            let mut p = vec![op(JA_, 0, 0, loads as u32)];
            p.extend(std::iter::repeat_n(op(LD_IND, 0, 0, 1), loads));
            p.push(op(RET_A, 0, 0, 0));
            p
        };
        let err = translate(&across(4000), Epilogue::Verdict).unwrap_err();
        assert!(err.to_string().contains("too long"), "{err}");
        assert!(translate(&across(3000), Epilogue::Verdict).is_ok());
    }
}
