//! In-kernel receive filtering: a tcpdump expression compiled by libpcap into classic BPF and
//! attached to the packet socket (`SO_ATTACH_FILTER`; the kernel JIT-compiles it), so only
//! frames that can matter reach user space and the rest of the host's traffic costs nothing.

use std::os::fd::RawFd;

use anyhow::{anyhow, Context};

/// Compiles `expr` for Ethernet frames into classic BPF instructions.
pub fn compile(expr: &str) -> anyhow::Result<Vec<libc::sock_filter>> {
    let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET).context("libpcap")?;
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
}
