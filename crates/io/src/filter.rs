//! In-kernel receive filtering: a tcpdump expression compiled by libpcap into classic BPF and
//! attached to the packet socket (`SO_ATTACH_FILTER`; the kernel JIT-compiles it), so only
//! frames that can matter reach user space and the rest of the host's traffic costs nothing.

use std::os::fd::RawFd;

use std::os::fd::IntoRawFd;

use anyhow::{anyhow, Context};

/// Compiles `expr` for Ethernet frames into classic BPF instructions.
pub fn compile(expr: &str) -> anyhow::Result<Vec<libc::sock_filter>> {
    compile_for(expr, Link::Ethernet)
}

/// What the first byte of a packet a program runs on is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// An Ethernet header (packet sockets, AF_XDP, pcap files of Ethernet).
    Ethernet,
    /// The IP header itself (NFQUEUE payloads), as libpcap's `DLT_RAW`.
    RawIp,
}

/// Compiles `expr` into classic BPF for packets that start with `link`.
pub fn compile_for(expr: &str, link: Link) -> anyhow::Result<Vec<libc::sock_filter>> {
    let linktype = match link {
        Link::Ethernet => pcap::Linktype::ETHERNET,
        // pcap_open_dead takes a DLT value; DLT_RAW is 12 on Linux (LINKTYPE_RAW, 101, is the file form).
        Link::RawIp => pcap::Linktype(12),
    };
    let dead = pcap::Capture::dead(linktype).context("libpcap")?;
    let program = dead
        .compile(expr, true)
        .map_err(|e| anyhow!("invalid filter expression \"{expr}\": {e}"))?;
    instructions(&program)
}

/// A compiled program's instructions.
fn instructions(program: &pcap::BpfProgram) -> anyhow::Result<Vec<libc::sock_filter>> {
    // The instruction fields are private in the pcap crate; its Display prints "code jt jf k".
    program
        .get_instructions()
        .iter()
        .map(|insn| parse_instruction(&insn.to_string()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| anyhow!("libpcap printed a BPF instruction sonde cannot read"))
}

fn parse_instruction(text: &str) -> Option<libc::sock_filter> {
    let mut f = text.split_whitespace();
    let insn = libc::sock_filter {
        code: f.next()?.parse().ok()?,
        jt: f.next()?.parse().ok()?,
        jf: f.next()?.parse().ok()?,
        k: f.next()?.parse().ok()?,
    };
    f.next().is_none().then_some(insn)
}

/// libpcap's device that captures on every interface at once (`-i any`), with cooked link
/// headers (LINUX_SLL) in place of Ethernet's.
pub const ANY_DEVICE: &str = "any";

/// libpcap's handle for compiling an expression as tcpdump would: for capturing on an interface
/// (a live handle, whose link type and Linux extensions, such as VLAN tags the kernel took off
/// the frame, the program then uses) or for reading a file of a given link type (a savefile
/// handle, which refuses what cannot be judged in a file, such as `inbound`).
pub struct Compiler {
    handle: Handle,
}

enum Handle {
    Live(pcap::Capture<pcap::Active>),
    File(pcap::Capture<pcap::Offline>),
}

impl Compiler {
    /// For capturing on `iface` (opens it with libpcap for as long as the compiler lives).
    pub fn for_interface(iface: &str) -> anyhow::Result<Compiler> {
        // `any` is libpcap's device of every interface at once, with no index of its own.
        if iface != ANY_DEVICE {
            crate::packet_socket::ifindex(iface)?;
        }
        let cap = pcap::Capture::from_device(iface)
            .and_then(|c| c.buffer_size(1 << 20).open())
            .map_err(|e| crate::libpcap::pcap_error(iface, e))?;
        Ok(Compiler {
            handle: Handle::Live(cap),
        })
    }

    /// For a file whose header gives `linktype_field` (a LINKTYPE_ value, with any FCS bits
    /// above it) and `snaplen`. libpcap reads that header from a pipe, so it maps the link type
    /// to its own number (DLT) exactly as when tcpdump opens the file.
    pub fn for_file(linktype_field: u32, snaplen: u32) -> anyhow::Result<Compiler> {
        let mut header = Vec::with_capacity(24);
        for word in [0xA1B2_C3D4u32, 2 | 4 << 16, 0, 0, snaplen, linktype_field] {
            header.extend_from_slice(&word.to_le_bytes());
        }
        let read = header_pipe(&header).context("a pipe for libpcap")?;
        // SAFETY: the capture takes `read` over and is its only owner from here on.
        let cap = unsafe { pcap::Capture::from_raw_fd(read.into_raw_fd()) }
            .map_err(|e| anyhow!("libpcap refused a file of link type {linktype_field}: {e}"))?;
        Ok(Compiler {
            handle: Handle::File(cap),
        })
    }

    /// libpcap's link type (DLT) of the handle.
    pub fn dlt(&self) -> i32 {
        match &self.handle {
            Handle::Live(c) => c.get_datalink().0,
            Handle::File(c) => c.get_datalink().0,
        }
    }

    /// `expr` compiled (optimised, as tcpdump does); the error carries libpcap's message.
    pub fn compile(&self, expr: &str) -> anyhow::Result<Vec<libc::sock_filter>> {
        let program = match &self.handle {
            Handle::Live(c) => c.compile(expr, true),
            Handle::File(c) => c.compile(expr, true),
        }
        .map_err(|e| anyhow!("invalid filter expression \"{expr}\": {e}"))?;
        instructions(&program)
    }
}

/// A pipe holding `bytes` (less than a pipe's atomic write), its writing end closed: its
/// reading end.
fn header_pipe(bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are fresh descriptors owned by nobody else.
    let (read, write) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    use std::io::Write;
    (&write).write_all(bytes)?;
    Ok(read)
}

/// The link type a capture file records for libpcap's link type `dlt` (the LINKTYPE_ value:
/// the same number, but for the few DLTs whose number differs between systems).
pub fn linktype_of_dlt(dlt: i32) -> u32 {
    match dlt {
        11 => 100, // ATM RFC 1483
        12 => 101, // raw IP
        15 => 102, // BSD/OS SLIP
        16 => 103, // BSD/OS PPP
        19 => 106, // Linux ATM CLIP
        other => other as u32,
    }
}

/// libpcap's name of its link type `dlt` (as tcpdump prints it: EN10MB, RAW, …).
pub fn dlt_name(dlt: i32) -> String {
    pcap::Linktype(dlt)
        .get_name()
        .unwrap_or_else(|_| format!("DLT {dlt}"))
}

/// libpcap's DLT_EN10MB: Ethernet.
pub const DLT_ETHERNET: i32 = 1;
/// libpcap's DLT_RAW on Linux: packets start with their IP header (a TUN device).
pub const DLT_RAW: i32 = 12;

/// A program that takes every frame whole: what is attached when there is no expression.
pub fn accept_all() -> Vec<libc::sock_filter> {
    vec![libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    }]
}

/// A program that takes nothing: what a capture socket holds until its own filter is attached.
pub fn reject_all() -> Vec<libc::sock_filter> {
    vec![libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    }]
}

/// `BPF_RET | BPF_K`: return a constant (the number of bytes to keep; 0 drops the frame).
const BPF_RET_K: u16 = 0x06;

/// Caps what each accepting return of `program` keeps at `snaplen` bytes, so the kernel copies
/// no more than that of a frame into the ring (a classic filter's return value is the snap
/// length). Returns that take the accumulator (`ret a`) are left as they are.
pub fn cap_snaplen(program: &mut [libc::sock_filter], snaplen: u32) {
    for insn in program
        .iter_mut()
        .filter(|i| i.code == BPF_RET_K && i.k != 0)
    {
        insn.k = insn.k.min(snaplen);
    }
}

/// Runs `program` on a frame in user space with libpcap's own interpreter, as the kernel would
/// on a frame of `wire_len` bytes of which `frame` were captured, and as tcpdump does on a file's
/// packet (`len` is the wire length even where a file records less than it captured). True if
/// it keeps the frame.
pub fn matches(program: &[libc::sock_filter], frame: &[u8], wire_len: u32) -> bool {
    if program.is_empty() {
        return true;
    }
    // SAFETY: `struct bpf_insn` and `struct sock_filter` have the same layout (code, jt, jf, k);
    // libpcap validated the program when it compiled it; `frame` is readable for its length,
    // which is what is passed as the buffer length, and bpf_filter reads nothing past it.
    unsafe {
        bpf_filter(
            program.as_ptr(),
            frame.as_ptr(),
            wire_len,
            frame.len().min(u32::MAX as usize) as u32,
        ) != 0
    }
}

extern "C" {
    /// libpcap's classic BPF interpreter (pcap/bpf.h).
    fn bpf_filter(
        pc: *const libc::sock_filter,
        packet: *const u8,
        wire_len: libc::c_uint,
        buf_len: libc::c_uint,
    ) -> libc::c_uint;
}

/// How many leading bytes of a packet `program` can read: enough to copy for its verdict, run
/// by [`matches`] on a packet whose wire length is at least its captured length, to be the same
/// as on the whole packet. `u32::MAX` when that cannot be bounded (an index register loaded
/// from the accumulator or scratch memory). Loads relative to the index register count its
/// largest possible value: an IPv4 header length (at most 60) or a constant it was set to. Two
/// kinds of load read nothing and need no byte: those at an offset of 2^31 or more (the
/// kernel's ancillary data, or `[x - k]`), which libpcap's interpreter refuses before reading
/// anything, and those relative to an index register set to the packet's length (`ldx #len`),
/// which start at or past the end of the packet.
pub fn bytes_needed(program: &[libc::sock_filter]) -> u32 {
    const LD: u16 = 0x00;
    const LDX: u16 = 0x01;
    const MISC: u16 = 0x07;
    const TAX: u16 = 0x00;
    let size = |code: u16| match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        _ => 1,
    };
    // X starts at zero; `ldx #len` adds nothing (see above).
    let mut max_x = 0u32;
    for insn in program {
        match (insn.code & 0x07, insn.code & 0xe0) {
            (LDX, 0x00) => max_x = max_x.max(insn.k), // ldx #k
            (LDX, 0xa0) => max_x = max_x.max(60),     // ldx 4*([k]&0xf)
            (LDX, 0x80) => {}                         // ldx #len
            (LDX, _) => return u32::MAX,              // ldx M[k]: unbounded
            (MISC, _) if insn.code & 0xf8 == TAX => return u32::MAX, // tax
            _ => {}
        }
    }
    program
        .iter()
        .map(|insn| match (insn.code & 0x07, insn.code & 0xe0) {
            (LD | LDX, _) if insn.k >= 0x8000_0000 => 0,
            (LD, 0x20) => insn.k.saturating_add(size(insn.code)),
            (LD, 0x40) => insn.k.saturating_add(size(insn.code)).saturating_add(max_x),
            (LDX, 0xa0) => insn.k.saturating_add(1),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// Attaches a compiled program to a packet socket.
pub fn attach(fd: RawFd, program: &[libc::sock_filter]) -> anyhow::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // The kernel copies the program during the call, so `program` need only live until it returns.
    crate::packet_socket::set_option(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
        .map_err(|e| anyhow!("the kernel refused the receive filter: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn bytes_needed_bounds_what_a_program_reads() {
        use super::{bytes_needed, compile_for, matches, Link};
        let ip_udp: Vec<u8> = {
            let mut p = vec![0u8; 28 + 100];
            p[0] = 0x45;
            p[9] = 17;
            p[20..22].copy_from_slice(&53u16.to_be_bytes());
            p[22..24].copy_from_slice(&9u16.to_be_bytes());
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            p
        };
        for expr in [
            "udp",
            "udp port 9",
            "host 198.19.254.2",
            "udp[8:4] = 0",
            "ip6 and tcp port 80",
            "tcp[tcpflags] & tcp-rst != 0",
        ] {
            let prog = compile_for(expr, Link::RawIp).unwrap();
            let need = bytes_needed(&prog) as usize;
            assert!(need < 200, "{expr}: {need}");
            // The verdict on the first `need` bytes is the verdict on the whole packet.
            let whole = matches(&prog, &ip_udp, ip_udp.len() as u32);
            let cut = &ip_udp[..need.min(ip_udp.len())];
            assert_eq!(matches(&prog, cut, ip_udp.len() as u32), whole, "{expr}");
        }
        assert_eq!(bytes_needed(&[]), 0);
    }

    #[test]
    fn loads_relative_to_the_packet_length_need_no_bytes() {
        use super::{bytes_needed, matches};
        let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        const LDX_LEN: u16 = 0x81;
        const LDB_IND: u16 = 0x50;
        const LDH_ABS: u16 = 0x28;
        const JEQ: u16 = 0x15;
        const RET: u16 = 0x06;
        let packet: Vec<u8> = (0..200u8).collect();
        // X = the packet's length, then a byte at X + k: at k = 0, and at k = -4 (the kernel
        // reads the fourth byte from the end there; libpcap's interpreter refuses the offset).
        for k in [0u32, 0xffff_fffc] {
            let program = [
                op(LDH_ABS, 0, 0, 12),
                op(JEQ, 0, 4, 0x0c0d),
                op(LDX_LEN, 0, 0, 0),
                op(LDB_IND, 0, 0, k),
                op(JEQ, 0, 1, 196),
                op(RET, 0, 0, 0xffff),
                op(RET, 0, 0, 0),
            ];
            let need = bytes_needed(&program);
            assert!(need <= 14, "k {k:#x}: {need} bytes");
            let whole = matches(&program, &packet, packet.len() as u32);
            let cut = &packet[..need as usize];
            assert_eq!(
                matches(&program, cut, packet.len() as u32),
                whole,
                "k {k:#x}"
            );
        }
    }

    use super::*;

    #[test]
    fn compiles_and_reads_back_a_program() {
        let prog = compile("ip and dst host 198.19.255.1 and tcp").unwrap();
        assert!(prog.len() > 3);
        // Every classic BPF program ends in a return.
        assert_eq!(
            prog.last().unwrap().code & 0x07,
            0x06,
            "last instruction is BPF_RET"
        );
        let err = compile("tcp and and").unwrap_err().to_string();
        assert!(err.contains("tcp and and"), "{err}");
    }

    /// An Ethernet + IPv4 + UDP frame to 198.18.0.1 port `dport`, padded to `len` bytes.
    fn udp_frame(dport: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(42)];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[30..34].copy_from_slice(&[198, 18, 0, 1]);
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn user_space_verdicts_follow_the_expression_and_the_wire_length() {
        let dns = compile("udp dst port 53").unwrap();
        assert!(matches(&dns, &udp_frame(53, 60), 60));
        assert!(!matches(&dns, &udp_frame(54, 60), 60));
        // `greater` reads the length on the wire, not what was captured.
        let big = compile("greater 1000").unwrap();
        let head = udp_frame(53, 60);
        assert!(!matches(&big, &head, 60));
        assert!(matches(&big, &head, 1500));
        // A load past the captured bytes rejects the frame.
        let deep = compile("udp[100] = 0").unwrap();
        assert!(!matches(&deep, &udp_frame(53, 60), 60));
        assert!(matches(&accept_all(), &[], 0));
    }

    #[test]
    fn the_snap_length_caps_every_accepting_return() {
        let mut prog = compile("udp or tcp").unwrap();
        cap_snaplen(&mut prog, 96);
        let rets: Vec<u32> = prog
            .iter()
            .filter(|i| i.code == BPF_RET_K)
            .map(|i| i.k)
            .collect();
        assert!(rets.contains(&0) && rets.contains(&96), "{rets:?}");
        assert!(rets.iter().all(|&k| k == 0 || k == 96), "{rets:?}");
    }
}
