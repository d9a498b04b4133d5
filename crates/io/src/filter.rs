//! In-kernel receive filtering: a tcpdump expression compiled by libpcap into classic BPF and
//! attached to the packet socket (`SO_ATTACH_FILTER`; the kernel JIT-compiles it), so only
//! frames that can matter reach user space and the rest of the host's traffic costs nothing.

use std::os::fd::RawFd;

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

/// A program that takes every frame whole: what is attached when there is no expression.
pub fn accept_all() -> Vec<libc::sock_filter> {
    vec![libc::sock_filter {
        code: BPF_RET_K,
        jt: 0,
        jf: 0,
        k: u32::MAX,
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
/// on a frame of `wire_len` bytes of which `frame` were captured. True if it keeps the frame.
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
            wire_len.max(frame.len() as u32),
            frame.len() as u32,
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

/// How many leading bytes of a packet `program` can read: enough to copy for its verdict to be
/// the same as on the whole packet. `u32::MAX` when that cannot be bounded (an index register
/// loaded from the accumulator or scratch memory). Loads relative to the index register count
/// its largest possible value: an IPv4 header length (at most 60) or a constant it was set to.
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
    let mut max_x = 60u32;
    for insn in program {
        match (insn.code & 0x07, insn.code & 0xe0) {
            (LDX, 0x00) => max_x = max_x.max(insn.k), // ldx #k
            (LDX, 0xa0) | (LDX, 0x80) => {}           // ldx 4*([k]&0xf), ldx #len
            (LDX, _) => return u32::MAX,              // ldx M[k]: unbounded
            (MISC, _) if insn.code & 0xf8 == TAX => return u32::MAX, // tax
            _ => {}
        }
    }
    program
        .iter()
        .map(|insn| match (insn.code & 0x07, insn.code & 0xe0) {
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
