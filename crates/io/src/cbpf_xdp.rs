//! Runs a tcpdump expression in XDP: loads the eBPF that sonde-bpf translates a compiled
//! expression's classic BPF into. A verdict-only program judges frames in memory with
//! BPF_PROG_TEST_RUN ([`VerdictProgram`], for `sonde capture -r FILE --backend xdp` and for
//! checking translations against libpcap's interpreter); the live one, which redirects a match
//! to an AF_XDP socket, is loaded and attached by xdp_filter.rs ([`crate::xdp::XdpRx::open_cbpf`]).
//! Whatever the expression itself keeps out of XDP is an [`Unsupported`] error, as sonde-bpf
//! describes; its items that callers of this module meet are re-exported here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::anyhow;
use libbpf_sys as bpf;
use sonde_bpf::{frame_length_program, translate_as, Epilogue, MAX_PACKET_OFF};

pub use sonde_bpf::{reads_vlan_tag, Unsupported, View, MATCHED, MIN_TEST_FRAME};

use crate::libbpf::{check, load_xdp};

/// Whether `iface` may take 802.1Q tags off frames before its XDP program sees them (the NIC
/// or driver parses them into metadata: `rx-vlan-offload` in `ethtool -k`, which veth shows
/// too, for frames a VLAN device on its peer sent): then a program that reads the tag
/// ([`reads_vlan_tag`]) cannot see every tag the kernel gives packet sockets.
pub fn may_hide_vlan_tags(iface: &str) -> bool {
    /// `ETHTOOL_GFLAGS` and its `ETH_FLAG_RXVLAN` (`<linux/ethtool.h>`).
    const ETHTOOL_GFLAGS: u32 = 0x25;
    const ETH_FLAG_RXVLAN: u32 = 1 << 8;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return false;
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut value = EthtoolValue {
        cmd: ETHTOOL_GFLAGS,
        data: 0,
    };
    // SAFETY: ifreq is plain old data; all-zero is a valid starting value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return false;
    }
    for (dst, &src) in req.ifr_name.iter_mut().zip(name) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
    // SAFETY: `req` names the interface (NUL-terminated: zeroed beyond the name) and points at
    // `value`, which the kernel fills; both outlive the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
    rc == 0 && value.data & ETH_FLAG_RXVLAN != 0
}

/// A classic program translated with the verdict-only epilogue and loaded, to judge frames in
/// memory (for checking, and for `sonde capture -r FILE --backend xdp`). Judging is one system
/// call per frame (BPF_PROG_TEST_RUN).
pub struct VerdictProgram {
    prog: OwnedFd,
    /// The longest frame a test run hands over whole (see [`VerdictProgram::matches`]).
    longest: usize,
}

impl VerdictProgram {
    /// Translates and loads `program`. Needs CAP_BPF (root). An [`Unsupported`] error (see
    /// there) means the expression cannot run in XDP at all.
    pub fn load(program: &[libc::sock_filter]) -> anyhow::Result<VerdictProgram> {
        Self::load_as(program, View::AsIs)
    }

    /// [`VerdictProgram::load`], judging frames as `view` shows them (a live program's view,
    /// for checking it on frames in memory).
    pub fn load_as(program: &[libc::sock_filter], view: View) -> anyhow::Result<VerdictProgram> {
        let insns = translate_as(program, Epilogue::Verdict, view)?;
        let prog = load_xdp(&insns, c"sonde_verdict")?;
        let longest = longest_whole_frame()
            .map_err(|e| anyhow!("measuring what an XDP test run takes: {e:#}"))?;
        Ok(VerdictProgram { prog, longest })
    }

    /// The longest frame [`VerdictProgram::matches`] judges: a test run puts a frame's first
    /// bytes up to about a page less head- and tailroom (3 520 bytes with 4 KiB pages) where
    /// the program sees them and the rest out of its sight.
    pub fn longest_frame(&self) -> usize {
        self.longest
    }

    /// Whether the program matches `frame`, judged by the kernel. `len` is `frame.len()`: for a
    /// frame captured short (a file's caplen below its wire length), `len`, `greater` and
    /// `less` judge the captured length, where tcpdump judges the wire length.
    ///
    /// A frame shorter than [`MIN_TEST_FRAME`] or longer than
    /// [`VerdictProgram::longest_frame`] is not judged: the kernel would refuse it, or judge
    /// only its first part. Either is an error of kind `InvalidInput`, returned without asking
    /// the kernel; judge those in user space (libpcap's `pcap_offline_filter`).
    /// The kernel's mean time in ns to run the program once on `frame`, over `repeat` runs
    /// (BPF_PROG_TEST_RUN's own clock: the program and the test run's dispatch around it;
    /// compare with a program that only returns, to see the filter's share). `frame` as for
    /// [`VerdictProgram::matches`].
    pub fn run_ns(&self, frame: &[u8], repeat: u32) -> io::Result<f64> {
        self.matches(frame)?;
        Ok(f64::from(test_runs(&self.prog, frame, repeat)?.1))
    }

    pub fn matches(&self, frame: &[u8]) -> io::Result<bool> {
        if !(MIN_TEST_FRAME..=self.longest).contains(&frame.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an XDP test run judges frames of {MIN_TEST_FRAME} to {} bytes, not {}",
                    self.longest,
                    frame.len()
                ),
            ));
        }
        match test_run(&self.prog, frame)? {
            MATCHED => Ok(true),
            bpf::XDP_PASS => Ok(false),
            other => Err(io::Error::other(format!(
                "the verdict program returned {other}, neither match nor no match"
            ))),
        }
    }
}

/// Runs `prog` once on `frame` (BPF_PROG_TEST_RUN) and returns what it returned.
fn test_run(prog: &OwnedFd, frame: &[u8]) -> io::Result<u32> {
    Ok(test_runs(prog, frame, 1)?.0)
}

/// Runs `prog` `repeat` times on `frame`: what it returned, and the kernel's mean time per run
/// in ns (its own clock, around the runs only).
fn test_runs(prog: &OwnedFd, frame: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
    let mut opts = bpf::bpf_test_run_opts {
        sz: std::mem::size_of::<bpf::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        repeat: repeat.min(i32::MAX as u32) as i32,
        ..Default::default()
    };
    // SAFETY: `frame` outlives the call, which only reads `data_size_in` bytes of it; there is
    // no output buffer.
    check(unsafe { bpf::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) })?;
    Ok((opts.retval, opts.duration))
}

/// How much of a frame a test run shows an XDP program (`data_end - data`), at most: measured
/// once by a program returning just that, on a frame of MAX_PACKET_OFF bytes. (The kernel puts
/// the rest of a longer frame into fragments, out of the program's sight, without an error.)
fn longest_whole_frame() -> anyhow::Result<usize> {
    static LONGEST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if let Some(&n) = LONGEST.get() {
        return Ok(n);
    }
    let probe = load_xdp(&frame_length_program(), c"sonde_xdp_len")?;
    let frame = vec![0u8; MAX_PACKET_OFF as usize];
    let n = test_run(&probe, &frame)? as usize;
    Ok(*LONGEST.get_or_init(|| n))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sonde_bpf::translate;

    use super::*;
    use crate::test_support::in_private_netns;
    use crate::xdp::XdpRx;
    use crate::{FilterSpec, FrameRx, IoConfig, TcpTake, XdpMode};

    fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
        libc::sock_filter { code, jt, jf, k }
    }

    // Classic instructions, as libpcap's `-d` prints them.
    const LD_MEM: u16 = 0x60;
    const JA_: u16 = 0x05;
    const JEQ_K: u16 = 0x15;
    const JGT_K: u16 = 0x25;
    const RET_K: u16 = 0x06;
    const RET_A: u16 = 0x16;

    // Frames: lab addresses only (198.18.0.0/15, 2001:2::/48); checksums do not matter here.

    const MAC_1: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const MAC_2: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const MAC_3: [u8; 6] = [2, 0, 0, 0, 0, 3];
    const BROADCAST: [u8; 6] = [0xff; 6];
    /// An Ethernet multicast address (the one mDNS uses).
    const MULTICAST: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 0xfb];
    const CLIENT: [u8; 4] = [198, 18, 0, 7];
    const SERVER: [u8; 4] = [198, 19, 0, 1];
    const RESOLVER: [u8; 4] = [198, 19, 0, 53];
    const OTHER: [u8; 4] = [198, 18, 5, 5];
    const CLIENT6: [u8; 16] = [0x20, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    const SERVER6: [u8; 16] = [0x20, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const PSH: u8 = 0x08;
    const ACK: u8 = 0x10;

    /// An Ethernet frame; each of `tags` is a VLAN tag (TPID, VLAN id) before `ethertype`.
    fn ether(
        dst: [u8; 6],
        src: [u8; 6],
        tags: &[(u16, u16)],
        ethertype: u16,
        l3: &[u8],
    ) -> Vec<u8> {
        let mut f = [dst, src].concat();
        for &(tpid, vid) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&vid.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(l3);
        f
    }

    /// The IPv4 header fields a test varies.
    #[derive(Clone, Copy)]
    struct V4 {
        src: [u8; 4],
        dst: [u8; 4],
        proto: u8,
        tos: u8,
        ttl: u8,
        /// Bytes of options (NOPs), a multiple of 4.
        options: usize,
        /// Flags and fragment offset.
        frag: u16,
    }

    fn v4(src: [u8; 4], dst: [u8; 4], proto: u8) -> V4 {
        V4 {
            src,
            dst,
            proto,
            tos: 0,
            ttl: 64,
            options: 0,
            frag: 0,
        }
    }

    fn ipv4(h: V4, payload: &[u8]) -> Vec<u8> {
        let ihl = 20 + h.options;
        let mut ip = vec![1u8; ihl];
        ip[0] = 0x40 | (ihl / 4) as u8;
        ip[1] = h.tos;
        ip[2..4].copy_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&[0x12, 0x34]);
        ip[6..8].copy_from_slice(&h.frag.to_be_bytes());
        ip[8] = h.ttl;
        ip[9] = h.proto;
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&h.src);
        ip[16..20].copy_from_slice(&h.dst);
        ip.extend_from_slice(payload);
        ip
    }

    fn ipv6(src: [u8; 16], dst: [u8; 16], next: u8, payload: &[u8]) -> Vec<u8> {
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[next, 64]);
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        ip.extend_from_slice(payload);
        ip
    }

    fn tcp(sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0..2].copy_from_slice(&sport.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        h[12] = 5 << 4;
        h[13] = flags;
        h[14..16].copy_from_slice(&64240u16.to_be_bytes());
        h.extend_from_slice(payload);
        h
    }

    fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 8];
        h[0..2].copy_from_slice(&sport.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        h.extend_from_slice(payload);
        h
    }

    fn icmp(kind: u8, code: u8) -> Vec<u8> {
        vec![kind, code, 0, 0, 0, 1, 0, 1, 0xde, 0xad, 0xbe, 0xef]
    }

    /// A DNS query for example.test with id 0x1234.
    fn dns_query() -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(b"\x07example\x04test\x00\x00\x01\x00\x01");
        q
    }

    fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 1];
        a.extend_from_slice(&MAC_3);
        a.extend_from_slice(&sender);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&target);
        a
    }

    fn eth4(h: V4, l4: &[u8]) -> Vec<u8> {
        ether(MAC_1, MAC_2, &[], 0x0800, &ipv4(h, l4))
    }

    fn eth6(next: u8, payload: &[u8]) -> Vec<u8> {
        ether(
            MAC_1,
            MAC_2,
            &[],
            0x86dd,
            &ipv6(CLIENT6, SERVER6, next, payload),
        )
    }

    /// The frames every expression is judged on, with a name for failures.
    fn frames() -> Vec<(&'static str, Vec<u8>)> {
        let (tcp4, udp4, icmp4, gre) = (6, 17, 1, 47);
        let client_to = |dst, proto| v4(CLIENT, dst, proto);
        let syn = eth4(client_to(SERVER, tcp4), &tcp(40000, 80, SYN, &[]));
        let mut frames = vec![
            ("tcp syn", syn.clone()),
            (
                "tcp syn-ack",
                eth4(v4(SERVER, CLIENT, tcp4), &tcp(80, 40000, SYN | ACK, &[])),
            ),
            (
                "tcp rst",
                eth4(v4(SERVER, CLIENT, tcp4), &tcp(80, 40001, RST | ACK, &[])),
            ),
            (
                "tcp fin",
                eth4(client_to(SERVER, tcp4), &tcp(40000, 80, FIN | ACK, &[])),
            ),
            (
                "tcp no flags",
                eth4(client_to(SERVER, tcp4), &tcp(40000, 80, 0, &[])),
            ),
            (
                "tcp http get",
                eth4(
                    client_to(SERVER, tcp4),
                    &tcp(40002, 80, PSH | ACK, b"GET / HTTP/1.1\r\n\r\n"),
                ),
            ),
            (
                "tcp 1200 bytes to 443",
                eth4(
                    client_to(SERVER, tcp4),
                    &tcp(40003, 443, PSH | ACK, &[0x17; 1200]),
                ),
            ),
            (
                "tcp 3000 bytes",
                eth4(
                    client_to(SERVER, tcp4),
                    &tcp(40004, 8080, ACK, &[0xaa; 3000]),
                ),
            ),
            (
                "tcp with ip options",
                eth4(
                    V4 {
                        options: 12,
                        ..client_to(SERVER, tcp4)
                    },
                    &tcp(40005, 1500, SYN, &[]),
                ),
            ),
            (
                "tcp to another lab host port 80",
                eth4(client_to(OTHER, tcp4), &tcp(40006, 80, SYN, &[])),
            ),
            (
                "tcp tos 64 ttl 1",
                eth4(
                    V4 {
                        tos: 64,
                        ttl: 1,
                        ..client_to(OTHER, tcp4)
                    },
                    &tcp(1024, 22, ACK, &[]),
                ),
            ),
            (
                "tcp tos 33",
                eth4(
                    V4 {
                        tos: 33,
                        ..client_to(SERVER, tcp4)
                    },
                    &tcp(2222, 2000, ACK, &[]),
                ),
            ),
            (
                "udp dns query",
                eth4(client_to(RESOLVER, udp4), &udp(5353, 53, &dns_query())),
            ),
            (
                "udp dns reply",
                eth4(v4(RESOLVER, CLIENT, udp4), &udp(53, 5353, &dns_query())),
            ),
            (
                "udp 999 to 1000",
                eth4(client_to(SERVER, udp4), &udp(999, 1000, &[1, 2, 3])),
            ),
            (
                "udp 2001 to 2001",
                eth4(client_to(OTHER, udp4), &udp(2001, 2001, &[0; 40])),
            ),
            ("icmp echo", eth4(client_to(SERVER, icmp4), &icmp(8, 0))),
            (
                "icmp echo reply",
                eth4(v4(SERVER, CLIENT, icmp4), &icmp(0, 0)),
            ),
            (
                "icmp unreachable",
                eth4(v4(SERVER, CLIENT, icmp4), &icmp(3, 3)),
            ),
            (
                "ipv4 first fragment",
                eth4(
                    V4 {
                        frag: 0x2000,
                        ..client_to(SERVER, udp4)
                    },
                    &udp(1234, 53, &[0; 32]),
                ),
            ),
            (
                "ipv4 later fragment",
                eth4(
                    V4 {
                        frag: 185,
                        ..client_to(SERVER, udp4)
                    },
                    &[0x55; 64],
                ),
            ),
            (
                "ipv4 don't fragment",
                eth4(
                    V4 {
                        frag: 0x4000,
                        ..client_to(SERVER, tcp4)
                    },
                    &tcp(40007, 443, ACK, &[]),
                ),
            ),
            (
                "gre",
                eth4(client_to(SERVER, gre), &[0, 0, 0x08, 0x00, 1, 2, 3, 4]),
            ),
            ("tcp6 443", eth6(6, &tcp(40000, 443, SYN, &[]))),
            ("tcp6 80 rst", eth6(6, &tcp(80, 40000, RST, &[]))),
            ("icmp6 echo", eth6(58, &icmp(128, 0))),
            ("icmp6 neighbour solicitation", eth6(58, &icmp(135, 0))),
            (
                "ipv6 hop-by-hop then udp 53",
                eth6(
                    0,
                    &[
                        &[17u8, 0, 1, 4, 0, 0, 0, 0][..],
                        &udp(5353, 53, &dns_query()),
                    ]
                    .concat(),
                ),
            ),
            (
                "ipv6 fragment header then tcp",
                eth6(
                    44,
                    &[
                        &[6u8, 0, 0, 1, 0xab, 0xcd, 0xef, 1][..],
                        &tcp(40000, 443, SYN, &[]),
                    ]
                    .concat(),
                ),
            ),
            (
                "arp broadcast",
                ether(BROADCAST, MAC_3, &[], 0x0806, &arp_request(CLIENT, SERVER)),
            ),
            (
                "udp to ethernet multicast",
                ether(
                    MULTICAST,
                    MAC_3,
                    &[],
                    0x0800,
                    &ipv4(client_to(OTHER, udp4), &udp(5353, 5353, &[0; 20])),
                ),
            ),
            (
                "vlan 100 udp 53",
                ether(
                    MAC_1,
                    MAC_2,
                    &[(0x8100, 100)],
                    0x0800,
                    &ipv4(client_to(RESOLVER, udp4), &udp(5353, 53, &dns_query())),
                ),
            ),
            (
                "vlan 200 tcp6 443",
                ether(
                    MAC_1,
                    MAC_2,
                    &[(0x8100, 200)],
                    0x86dd,
                    &ipv6(CLIENT6, SERVER6, 6, &tcp(40000, 443, SYN, &[])),
                ),
            ),
            (
                "qinq 300/100 tcp syn",
                ether(
                    MAC_1,
                    MAC_2,
                    &[(0x88a8, 300), (0x8100, 100)],
                    0x0800,
                    &ipv4(client_to(SERVER, tcp4), &tcp(40000, 80, SYN, &[])),
                ),
            ),
            (
                "experimental ethertype",
                ether(MAC_3, MAC_2, &[], 0x88b5, &[7; 46]),
            ),
            (
                "ethernet header only, ipv4",
                ether(MAC_1, MAC_2, &[], 0x0800, &[]),
            ),
            ("ipv4 header cut short", syn[..14 + 10].to_vec()),
            ("tcp cut before its flags", syn[..14 + 20 + 10].to_vec()),
            ("tcp cut before its ports", syn[..14 + 20 + 1].to_vec()),
            (
                "ipv6 header cut short",
                eth6(6, &tcp(1, 443, SYN, &[]))[..14 + 30].to_vec(),
            ),
        ];
        // An IHL of 60 bytes in a frame that ends after 20: header-relative loads fall off it.
        let mut long_ihl = syn.clone();
        long_ihl[14] = 0x4f;
        frames.push(("ipv4 ihl beyond the frame", long_ihl));
        frames
    }

    /// Expressions whose translation is compared with libpcap's interpreter.
    const EXPRESSIONS: &[&str] = &[
        "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
        "tcp[tcpflags] & tcp-rst != 0",
        "tcp and (tcp[tcpflags] & tcp-fin != 0)",
        "tcp[13] = 2",
        "tcp[13] & 0x3f = 0",
        "ip6 and icmp6",
        "icmp6 and ip6[40] = 135",
        "vlan and udp port 53",
        "vlan 100",
        "vlan and ip6",
        "vlan and vlan",
        "net 198.18.0.0/15 and not port 80",
        "portrange 1000-2000",
        "tcp portrange 1000-2000 or udp portrange 1000-1000",
        "ip[6:2] & 0x1fff != 0",
        "ip[6:2] & 0x1fff = 0 and udp",
        "ip[6] & 0x20 != 0",
        "greater 1000",
        "less 100",
        "greater 2000 and tcp",
        "len > 64 and len < 200",
        "ether host 02:00:00:00:00:01",
        "ether src 02:00:00:00:00:03",
        "ether broadcast",
        "ether multicast",
        "ether proto 0x88b5",
        "ether[12:2] = 0x86dd",
        "arp",
        "arp and arp[24:4] = 0xc6130001",
        "ip proto 47",
        "udp[8:2] = 0x1234",
        "udp[0:4] = 0x14e90035",
        "ip6 and tcp port 443",
        "ip6 net 2001:2::/48 and tcp",
        "ip6 host 2001:2::1",
        "ip[0] & 0xf > 5",
        "icmp[icmptype] = icmp-echo",
        "icmp[icmptype] = icmp-unreach or icmp[icmptype] = icmp-echoreply",
        "ip multicast",
        "ip",
        "ip6",
        "tcp",
        "udp",
        "icmp",
        "not tcp",
        "host 198.19.0.1",
        "src host 198.18.0.7 and dst port 80",
        "dst net 198.19.0.0/16",
        "tcp port 80 or udp port 53",
        "ip[8] = 1",
        "tcp[((tcp[12] & 0xf0) >> 2):4] = 0x47455420",
        "ip[0] << ip[1] = 0",
        "ip[0] >> (ip[1] - 31) = 0",
        "ip[2:2] / ip[8] > 10",
        "ip[2:2] % ip[1] = 7",
        "ip[2:2] / 4 > 100",
        "ip[2:2] % 7 = 3",
        "ip[2:2] - 20 * 2 > 1000",
        "(ip[9] ^ 6) = 0 and (ip[9] | 1) = 7",
        "-ip[8] + 64 = 0",
        "ip[1] & 0xe0 != 0 and ip[2:2] + ip[1] > 90",
        "tcp[0:2] > 1024 and tcp[2:2] < 1024",
        // Offsets beyond any frame XDP sees: a load there ends the program with no match.
        "tcp port 80 or ether[70000] = 1",
        "udp or ether[65534:2] = 0",
        "icmp or tcp[65530:4] = 0",
    ];

    /// Expressions no frame here can match (so the frames need not cover both verdicts): IPv4
    /// multicast would need an address outside the lab.
    const NEVER_TRUE: &[&str] = &["ip multicast"];

    fn can_load() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipping: loading an XDP program needs root");
        }
        root
    }

    /// libpcap's own program for `expr`, run by its interpreter (`pcap_offline_filter`).
    fn reference(expr: &str) -> pcap::BpfProgram {
        pcap::Capture::dead(pcap::Linktype::ETHERNET)
            .unwrap()
            .compile(expr, true)
            .unwrap()
    }

    #[test]
    fn verdicts_equal_libpcaps() {
        if !can_load() {
            return;
        }
        let frames = frames();
        assert!(EXPRESSIONS.len() >= 40);
        let (mut wrong, mut longest) = (Vec::new(), 0);
        for &expr in EXPRESSIONS {
            let program = crate::filter::compile(expr).unwrap();
            let translated = translate(&program, Epilogue::Verdict);
            longest = longest.max(translated.unwrap_or_else(|e| panic!("{expr}: {e}")).len());
            let xdp = VerdictProgram::load(&program).unwrap_or_else(|e| panic!("{expr}: {e:#}"));
            let pcap = reference(expr);
            let mut verdicts = [0usize; 2];
            for (name, frame) in &frames {
                let want = pcap.filter(frame);
                verdicts[usize::from(want)] += 1;
                let got = xdp.matches(frame).unwrap();
                if got != want {
                    wrong.push(format!("`{expr}` on {name}: XDP {got}, libpcap {want}"));
                }
            }
            // Every expression meets frames it matches and frames it does not, or the
            // comparison says little.
            let never = NEVER_TRUE.contains(&expr);
            assert!(
                verdicts[0] > 0 && (verdicts[1] > 0 || never),
                "{expr}: {verdicts:?}"
            );
        }
        eprintln!(
            "{} expressions x {} frames; longest translation {longest} eBPF instructions",
            EXPRESSIONS.len(),
            frames.len()
        );
        assert!(
            wrong.is_empty(),
            "{} differ:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    }

    /// Runs `prog` once on `frame`: what it returned, and the frame as the program left it.
    fn run_with_output(prog: &OwnedFd, frame: &[u8]) -> (u32, Vec<u8>) {
        let mut out = vec![0u8; frame.len() + 64];
        let mut opts = bpf::bpf_test_run_opts {
            sz: std::mem::size_of::<bpf::bpf_test_run_opts>() as _,
            data_in: frame.as_ptr().cast(),
            data_size_in: frame.len() as u32,
            data_out: out.as_mut_ptr().cast(),
            data_size_out: out.len() as u32,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: `frame` and `out` outlive the call, which reads `data_size_in` bytes of the
        // one and writes at most `data_size_out` bytes of the other.
        check(unsafe { bpf::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) }).unwrap();
        out.truncate(opts.data_size_out as usize);
        (opts.retval, out)
    }

    #[test]
    fn tagged_frames_are_judged_as_packet_sockets_see_them_and_left_as_they_came() {
        if !can_load() {
            return;
        }
        in_private_netns(|| {
            // Compiled as libpcap compiles for a live Linux interface (what tcpdump -i runs):
            // `vlan` reads the tag the kernel took off, as ancillary data.
            let live = crate::filter::Compiler::for_interface("lo").unwrap();
            let arp = ether(MAC_1, MAC_2, &[], 0x0806, &arp_request(CLIENT, SERVER));
            let tagged = |tpid: u16, vid: u16, inner: &[u8]| {
                let mut f = inner[..12].to_vec();
                f.extend_from_slice(&tpid.to_be_bytes());
                f.extend_from_slice(&vid.to_be_bytes());
                f.extend_from_slice(&inner[12..]);
                f
            };
            // 102 bytes: 106 and 110 with one and two tags on the wire.
            let dns = eth4(v4(CLIENT, SERVER, 17), &udp(40000, 53, &[7; 60]));
            let frames = [
                ("arp", arp.clone()),
                ("arp, vlan 100", tagged(0x8100, 100, &arp)),
                ("arp, vlan 100 priority 5", tagged(0x8100, 0xa064, &arp)),
                ("arp, 802.1ad 100", tagged(0x88a8, 100, &arp)),
                ("arp, vlan 200", tagged(0x8100, 200, &arp)),
                ("dns", dns.clone()),
                ("dns, vlan 100", tagged(0x8100, 100, &dns)),
                (
                    "dns, vlan 100 in 300",
                    tagged(0x88a8, 300, &tagged(0x8100, 100, &dns)),
                ),
            ];
            // What a packet socket's filter decides: the outer tag off, its length too.
            let cases: [(&str, [bool; 8]); 7] = [
                ("arp", [true, true, true, true, true, false, false, false]),
                (
                    "vlan 100",
                    [false, true, true, true, false, false, true, false],
                ),
                (
                    "vlan and arp",
                    [false, true, true, true, true, false, false, false],
                ),
                (
                    "vlan 300 and vlan 100",
                    [false, false, false, false, false, false, false, true],
                ),
                (
                    "udp port 53",
                    [false, false, false, false, false, true, true, false],
                ),
                (
                    "vlan 100 and udp port 53",
                    [false, false, false, false, false, false, true, false],
                ),
                (
                    "greater 105",
                    [false, false, false, false, false, false, false, true],
                ),
            ];
            for (expr, want) in cases {
                let program = live.compile(expr).unwrap();
                let xdp = VerdictProgram::load_as(&program, View::TagOff)
                    .unwrap_or_else(|e| panic!("{expr}: {e:#}"));
                for ((name, frame), want) in frames.iter().zip(want) {
                    let (verdict, after) = run_with_output(&xdp.prog, frame);
                    assert_eq!(verdict == MATCHED, want, "`{expr}` on {name}");
                    assert_eq!(&after, frame, "`{expr}` left {name} changed");
                }
            }
            // A file's view keeps the tag in the frame, and refuses the kernel's tag data.
            let program = live.compile("vlan 100").unwrap();
            assert!(VerdictProgram::load(&program).is_err());
            assert!(reads_vlan_tag(&program));
            assert!(!reads_vlan_tag(&live.compile("arp").unwrap()));
        });
    }

    #[test]
    fn hand_built_programs_keep_classic_semantics() {
        if !can_load() {
            return;
        }
        const LD_IMM: u16 = 0x00;
        const LDX_IMM: u16 = 0x01;
        const ST: u16 = 0x02;
        const STX: u16 = 0x03;
        const LDX_MEM: u16 = 0x61;
        const DIV_K: u16 = 0x34;
        const MOD_X: u16 = 0x9c;
        const SUB_X: u16 = 0x1c;
        const NEG: u16 = 0x84;
        const TXA: u16 = 0x87;
        const LD_LEN: u16 = 0x80;
        const JEQ_X: u16 = 0x1d;
        let ret_a = op(RET_A, 0, 0, 0);
        let frame = frames().swap_remove(0).1;
        let cases: Vec<(&str, Vec<libc::sock_filter>, bool)> = vec![
            (
                "division by constant zero",
                vec![op(LD_IMM, 0, 0, 5), op(DIV_K, 0, 0, 0), ret_a],
                false,
            ),
            (
                "modulo by X = 0",
                vec![op(LD_IMM, 0, 0, 5), op(MOD_X, 0, 0, 0), ret_a],
                false,
            ),
            (
                "scratch words start at zero, keep A and X",
                vec![
                    op(LD_MEM, 0, 0, 15), // A = M[15] = 0
                    op(JEQ_K, 0, 6, 0),
                    op(LD_IMM, 0, 0, 0xdead),
                    op(ST, 0, 0, 3), // M[3] = A
                    op(LDX_IMM, 0, 0, 0xbeef),
                    op(STX, 0, 0, 15),    // M[15] = X
                    op(LDX_MEM, 0, 0, 3), // X = M[3]
                    op(LD_MEM, 0, 0, 15), // A = M[15]
                    op(SUB_X, 0, 0, 0),   // A = 0xbeef - 0xdead
                    ret_a,
                ],
                true,
            ),
            (
                "A and X start at zero; negation wraps",
                vec![
                    op(TXA, 0, 0, 0),
                    op(NEG, 0, 0, 0),
                    op(JEQ_K, 0, 1, 0),
                    ret_a,
                    op(RET_K, 0, 0, 0),
                ],
                false,
            ),
            (
                "len, compared with X",
                vec![
                    op(LDX_IMM, 0, 0, frame.len() as u32),
                    op(LD_LEN, 0, 0, 0),
                    op(JEQ_X, 0, 1, 0),
                    op(RET_K, 0, 0, 1),
                    op(RET_K, 0, 0, 0),
                ],
                true,
            ),
            (
                "a constant beyond i32 compared unsigned",
                vec![
                    op(LD_IMM, 0, 0, 0x8000_0001),
                    op(JGT_K, 0, 1, 0x8000_0000),
                    op(RET_K, 0, 0, 1),
                    op(RET_K, 0, 0, 0),
                ],
                true,
            ),
        ];
        for (what, program, want) in cases {
            let xdp = VerdictProgram::load(&program).unwrap_or_else(|e| panic!("{what}: {e:#}"));
            assert_eq!(xdp.matches(&frame).unwrap(), want, "{what}");
        }
    }

    #[test]
    fn frames_a_test_run_cannot_show_whole_are_refused_not_judged() {
        if !can_load() {
            return;
        }
        let compile = |expr: &str| VerdictProgram::load(&crate::filter::compile(expr).unwrap());
        let less = compile("less 100").unwrap();
        let syn = frames().swap_remove(0).1;
        assert!(less.matches(&syn[..MIN_TEST_FRAME]).unwrap());
        let longest = less.longest_frame();
        eprintln!("an XDP test run shows frames of up to {longest} bytes whole");
        assert!(longest >= 1514, "{longest}");
        // The longest frame is judged whole: its length and its last byte.
        let mut frame = syn.clone();
        frame.resize(longest, 0);
        frame[longest - 1] = 0x5a;
        let whole = compile(&format!(
            "len = {longest} and ether[{}] = 0x5a",
            longest - 1
        ));
        assert!(whole.unwrap().matches(&frame).unwrap());
        frame.push(0);
        for len in [0, 1, MIN_TEST_FRAME - 1, longest + 1] {
            let err = less.matches(&frame[..len]).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidInput,
                "{len} bytes: {err}"
            );
        }
    }

    #[test]
    fn a_translation_the_verifier_refuses_is_unsupported() {
        if !can_load() {
            return;
        }
        // Instruction 1 is never reached: the verifier refuses unreachable code (libpcap's
        // optimiser never leaves any).
        let program = [op(JA_, 0, 0, 1), op(RET_K, 0, 0, 0), op(RET_K, 0, 0, 1)];
        let err = VerdictProgram::load(&program).err().expect("refused");
        let text = format!("{err:#}");
        assert!(err.downcast_ref::<Unsupported>().is_some(), "{text}");
        assert!(
            text.contains("the kernel refused its translation"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
        eprintln!("{text}");
    }

    fn lo() -> IoConfig {
        let mut cfg = IoConfig::new("lo");
        cfg.xdp_mode = XdpMode::Generic;
        cfg.ring_frames = 64;
        cfg
    }

    #[test]
    fn a_receiver_gets_exactly_what_the_expression_matches() {
        if !can_load() {
            return;
        }
        in_private_netns(|| {
            let expr = "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn or udp port 53";
            let program = crate::filter::compile(expr).unwrap();
            let mut rx = XdpRx::open_cbpf(&lo(), &program).unwrap();
            assert!(
                rx.describe().contains("capture expression in XDP"),
                "{}",
                rx.describe()
            );
            let pcap = reference(expr);
            // Frames up to a UMEM frame (2 KiB), each injected as if it arrived on lo queue 0.
            let frames: Vec<_> = frames()
                .into_iter()
                .filter(|(_, f)| f.len() <= 2048)
                .collect();
            // Judged as a packet socket sees them (an outer tag off), received as they came.
            let want: Vec<&[u8]> = frames
                .iter()
                .filter(|(_, f)| pcap.filter(&tag_off(f)))
                .map(|(_, f)| f.as_slice())
                .collect();
            assert!(
                frames
                    .iter()
                    .any(|(_, f)| pcap.filter(&tag_off(f)) && !pcap.filter(f)),
                "a tagged frame is matched only once its tag is off"
            );
            assert!(
                want.len() >= 5 && want.len() < frames.len(),
                "{}",
                want.len()
            );
            for (name, frame) in &frames {
                rx.filter()
                    .inject(frame, 1)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            let mut got = Vec::new();
            let end = Instant::now() + Duration::from_secs(2);
            while got.len() < want.len() && Instant::now() < end {
                rx.rx_batch(64, Duration::from_millis(20), |f| got.push(f.to_vec()))
                    .unwrap();
            }
            // Nothing more arrives either.
            rx.rx_batch(64, Duration::from_millis(50), |f| got.push(f.to_vec()))
                .unwrap();
            assert_eq!(got, want);
            assert_eq!(rx.take_drops().total(), 0);
        });
    }

    /// `frame` as the kernel shows it to a packet socket: an outer 802.1Q or 802.1ad tag off.
    fn tag_off(frame: &[u8]) -> Vec<u8> {
        match frame.get(12..14) {
            Some([0x81, 0x00] | [0x88, 0xa8]) if frame.len() >= 18 => {
                [&frame[..12], &frame[16..]].concat()
            }
            _ => frame.to_vec(),
        }
    }

    #[test]
    fn an_interface_runs_one_program_at_a_time() {
        if !can_load() {
            return;
        }
        in_private_netns(|| {
            let syn = crate::filter::compile("tcp[13] = 2").unwrap();
            let _rx = XdpRx::open_cbpf(&lo(), &syn).unwrap();
            let other = crate::filter::compile("udp").unwrap();
            let err = format!("{:#}", XdpRx::open_cbpf(&lo(), &other).err().unwrap());
            assert!(
                err.contains("already on lo with another expression"),
                "{err}"
            );
            let spec = FilterSpec {
                ipv4: Some(crate::test_support::SCAN4),
                ipv6: None,
                tcp: TcpTake::All,
                udp: false,
                icmp: false,
                icmp6: false,
                ports: (61000, 65535),
                echo_id: None,
                spare_host_sockets: true,
                stamp_arrivals: false,
            };
            let err = format!("{:#}", XdpRx::open_filtered(&lo(), &spec).err().unwrap());
            assert!(
                err.contains("capture expression is already on lo")
                    && err.contains("reply filter cannot be attached beside it"),
                "{err}"
            );
        });
    }
}
