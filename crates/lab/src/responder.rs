//! The XDP responder (xdp/responder.c, compiled by build.rs): `lab up --responder xdp`, and with
//! `--http` the lab's stateless web server on port 80 as well; and the DNS tree's answerer
//! (xdp/answerer.c, which responder.c includes): `lab up --dns-tree N --dns-answerer xdp`.
//!
//! nx0 has one XDP program, so the answerer is a step of the responder's rather than a program
//! of its own: its first, which answers UDP port 53 on 198.19.54.0/24 and hands the tree's other
//! addresses to the kernel before the population's rules could drop or answer them. With the
//! kernel responder the same program is attached with `KERNEL_RESPONDS`, and every frame the
//! answerer does not take goes to the kernel. (Two programs chained by a tail call would need
//! their program array pinned in bpffs: the kernel empties one when the last descriptor of it
//! closes, which is when `lab up` exits.)
//!
//! Loading goes through libbpf-rs: open the embedded object, load it, write the population,
//! the hash key and threshold, the open ports and the link's addresses into `responder_cfg`,
//! and attach it to nx0 with a netlink attachment (not a BPF link), so it stays after `up`
//! exits and goes with the namespace at `down`.
//!
//! Mode: generic (skb) XDP. With native XDP on one end of a veth pair, XDP_TX hands the frame
//! to the peer's NAPI ring, which exists only while the peer (sx0, the scanner's end) has an
//! XDP program or GRO of its own; without, veth drops every reply. That would make the lab
//! depend on what the scanner attaches to sx0, and anything the lab attached there would change
//! what the scanner sees (GRO merges the replies; a program takes the place of sonde's own
//! reply filter). Generic XDP_TX sends through nx0's ordinary transmit path, which works
//! whatever sx0 runs.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use anyhow::{anyhow, bail, Result};
use ipnet::{Ipv4Net, Ipv6Net};
use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder, Xdp, XdpFlags};
use nix::sched::{setns, CloneFlags};

use crate::config::{GATEWAY_IP, GATEWAY_IP6, LINK_NET, NET_IF, SCAN_IP, SCAN_IP6};
use crate::dns_tree::spec::{ANSWERER_NET, SERVER_NET};
use crate::netns::ns_path;
use crate::truth::{hash_key, share_threshold, Population, Population6};

/// The compiled program; empty if clang was missing at build time.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/responder.o"));

const PROGRAM: &str = "sonde_lab_responder";
const CFG_MAP: &str = "responder_cfg";
const DNS_CFG_MAP: &str = "dns_cfg";
/// Read by the tests; `bpftool map dump name dns_counts` shows it in a running lab.
#[cfg(test)]
const DNS_COUNTS_MAP: &str = "dns_counts";
/// The mode `attach` uses (see the module documentation).
pub(crate) const MODE: &str = "xdpgeneric";

/// `responder_cfg.flags` bits of responder.c.
const EVERY_ADDRESS: u32 = 1 << 0;
const HAS_V6: u32 = 1 << 1;
const DNS_53: u32 = 1 << 2;
const HTTP_80: u32 = 1 << 3;
const KERNEL_RESPONDS: u32 = 1 << 4;

/// `dns_cfg.flags` bits of answerer.c.
const DNS_TREE_ON: u32 = 1 << 0;
const DNS_ANSWER: u32 = 1 << 1;
/// Size of `struct dns_cfg`: two u64s and six u32s.
const DNS_CFG_LEN: usize = 2 * 8 + 6 * 4;

/// Size of `struct responder_cfg`: eight u64s, six u32s, the MAC, window scale and padding,
/// four windows, the TAI offset, the gateway's IPv4 address and the low half of its IPv6 one,
/// and the open-port bitmap of 65,536 bits.
const CFG_LEN: usize = 8 * 8 + 6 * 4 + 8 + 4 * 2 + 2 * 4 + 8 + 65_536 / 8;

/// What the responder answers for.
#[derive(Clone, Debug)]
pub(crate) struct ResponderSpec {
    pub pop: Population,
    pub pop6: Option<Population6>,
    /// Ports that answer SYN-ACK; every other port answers RST.
    pub open: Vec<u16>,
    /// Port 53 (UDP and TCP) goes to the lab's DNS server.
    pub dns: bool,
    /// The program serves HTTP on port 80 itself (`--http`): handshakes, `GET /`, FIN.
    pub http: bool,
    /// CLOCK_TAI less UTC, in seconds: the program's HTTP Date is UTC from CLOCK_TAI.
    pub tai_utc: u32,
    /// nx0's MAC: frames to another go to the kernel.
    pub mac: [u8; 6],
    /// The window and window scale the lab's kernel puts in its SYN-ACKs.
    pub windows: SynAckWindows,
    /// The kernel answers the probes (`--responder kernel`): the program is there for the DNS
    /// answerer alone and passes every other frame.
    pub kernel_responds: bool,
    /// The lab's DNS tree, if it has one.
    pub tree: Option<TreeSpec>,
}

/// The DNS tree as the program sees it: its addresses are left to the kernel, and with `answer`
/// the answerer serves it on 198.19.54.0/24.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TreeSpec {
    pub seed: u64,
    pub zones: u64,
    pub hosts: u32,
    pub answer: bool,
}

impl TreeSpec {
    /// `struct dns_cfg` as the program reads it.
    fn cfg_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(DNS_CFG_LEN);
        let mut flags = DNS_TREE_ON;
        if self.answer {
            flags |= DNS_ANSWER;
        }
        b.extend(hash_key(self.seed).to_ne_bytes());
        b.extend(self.zones.to_ne_bytes());
        let (servers, servers_mask) = split4(SERVER_NET);
        let (answerers, answerers_mask) = split4(ANSWERER_NET);
        for v in [
            self.hosts,
            flags,
            servers,
            servers_mask,
            answerers,
            answerers_mask,
        ] {
            b.extend(v.to_ne_bytes());
        }
        debug_assert_eq!(b.len(), DNS_CFG_LEN);
        b
    }
}

/// What the DNS answerer did, summed over the CPUs (`enum dns_count` of answerer.c).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DnsCounts {
    /// Answered from the tree: NOERROR (TC included), NXDOMAIN or SERVFAIL.
    pub answered: u64,
    pub formerr: u64,
    pub notimp: u64,
    pub refused: u64,
    /// Dropped: shorter than a DNS header.
    pub short: u64,
    /// Dropped: a response (QR set).
    pub response: u64,
    /// Dropped: IP options, fragments, lengths that disagree, a bad IP checksum.
    pub bad_ip: u64,
    /// Dropped: a bad UDP checksum.
    pub bad_checksum: u64,
    /// Dropped: the frame could not be resized for the answer.
    pub no_room: u64,
}

/// What Linux offers in a SYN-ACK (tcp_select_initial_window), from the lab namespace's
/// net.ipv4.tcp_rmem and net.core.rmem_max, so both responders' SYN-ACKs read the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SynAckWindows {
    /// By [v6 << 1 | timestamps]: the receive space rounded down to whole segments of the
    /// link's MSS (1460 for IPv4, 1440 for IPv6) less 12 bytes when timestamps are on.
    pub window: [u16; 4],
    pub wscale: u8,
}

impl SynAckWindows {
    /// `tcp_rmem` as "min default max", `rmem_max` in bytes.
    pub(crate) fn linux(tcp_rmem: &str, rmem_max: &str) -> Result<SynAckWindows> {
        let bad = || {
            anyhow!("unexpected net.ipv4.tcp_rmem {tcp_rmem:?} or net.core.rmem_max {rmem_max:?}")
        };
        let rmem: Vec<u64> = tcp_rmem
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [_, default, max] = rmem[..] else {
            return Err(bad());
        };
        let rmem_max: u64 = rmem_max.trim().parse().map_err(|_| bad())?;
        // The space a new socket may advertise: half its default buffer (the rest is kept
        // for overhead); the scale is what lets the largest buffer be advertised.
        let space = default / 2;
        let largest = max.max(rmem_max).max(space);
        let wscale = (largest.max(1).ilog2() as i64 - 15).clamp(0, 14) as u8;
        let window = [1460, 1448, 1440, 1428].map(|mss: u64| {
            let w = space / mss * mss;
            w.min(65_535) as u16
        });
        Ok(SynAckWindows { window, wscale })
    }

    /// The lab namespace `ns`'s own settings.
    pub(crate) fn of_namespace(ns: &str) -> Result<SynAckWindows> {
        let read = |path: &str| crate::cmd::in_ns(ns, "cat", &[path]);
        SynAckWindows::linux(
            &read("/proc/sys/net/ipv4/tcp_rmem")?,
            &read("/proc/sys/net/core/rmem_max")?,
        )
    }
}

impl ResponderSpec {
    /// `struct responder_cfg` as the program reads it (host byte order, addresses as numbers).
    fn cfg_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CFG_LEN);
        let u64s = |b: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| b.extend(x.to_ne_bytes()));
        let u32s = |b: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| b.extend(x.to_ne_bytes()));
        let threshold = share_threshold(self.pop.share);
        let (net6, mask6) = self.pop6.map_or((0, 0), |p| split6(p.net));
        let mut flags = 0;
        if threshold.is_none() {
            flags |= EVERY_ADDRESS;
        }
        if self.pop6.is_some() {
            flags |= HAS_V6;
        }
        if self.dns {
            flags |= DNS_53;
        }
        if self.http {
            flags |= HTTP_80;
        }
        if self.kernel_responds {
            flags |= KERNEL_RESPONDS;
        }
        let peer6 = u128::from(SCAN_IP6);
        u64s(
            &mut b,
            &[
                hash_key(self.pop.seed),
                threshold.unwrap_or(u64::MAX),
                (net6 >> 64) as u64,
                net6 as u64,
                (mask6 >> 64) as u64,
                mask6 as u64,
                (peer6 >> 64) as u64,
                peer6 as u64,
            ],
        );
        let (net4, mask4) = split4(self.pop.net);
        let (link4, link_mask4) = split4(LINK_NET);
        u32s(
            &mut b,
            &[flags, net4, mask4, link4, link_mask4, u32::from(SCAN_IP)],
        );
        b.extend(self.mac);
        b.extend([self.windows.wscale, 0]);
        self.windows
            .window
            .iter()
            .for_each(|w| b.extend(w.to_ne_bytes()));
        u32s(&mut b, &[self.tai_utc, u32::from(GATEWAY_IP)]);
        u64s(&mut b, &[u128::from(GATEWAY_IP6) as u64]);
        let mut open = [0u64; 1024];
        for &p in &self.open {
            open[usize::from(p) / 64] |= 1 << (p % 64);
        }
        u64s(&mut b, &open);
        debug_assert_eq!(b.len(), CFG_LEN);
        b
    }
}

/// A prefix as (network, mask) numbers.
fn split4(net: Ipv4Net) -> (u32, u32) {
    (u32::from(net.network()), u32::from(net.netmask()))
}

fn split6(net: Ipv6Net) -> (u128, u128) {
    (u128::from(net.network()), u128::from(net.netmask()))
}

/// The responder loaded into the kernel (verifier passed) and configured, not yet attached.
pub(crate) struct Loaded {
    obj: Object,
}

impl Loaded {
    pub(crate) fn load(spec: &ResponderSpec) -> Result<Loaded> {
        if OBJECT.is_empty() {
            bail!("the XDP responder was built without clang; install clang, rebuild sonde, or use --responder kernel");
        }
        let failed = |what: &str, e: libbpf_rs::Error| {
            let hint = if e.kind() == libbpf_rs::ErrorKind::PermissionDenied {
                " (needs CAP_BPF and CAP_NET_ADMIN: run as root)"
            } else {
                ""
            };
            anyhow!("cannot {what} the lab's XDP responder: {e}{hint}")
        };
        // libbpf would print the verifier's whole log on stderr; the error says enough.
        libbpf_rs::set_print(None);
        let open = ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(|e| failed("open", e))?;
        let obj = open.load().map_err(|e| failed("load", e))?;
        let loaded = Loaded { obj };
        let map = loaded
            .obj
            .maps()
            .find(|m| m.name() == CFG_MAP)
            .ok_or_else(|| anyhow!("the XDP responder has no map {CFG_MAP}"))?;
        let size = map.value_size() as usize;
        if size != CFG_LEN {
            bail!("{CFG_MAP} holds {size} bytes, the lab writes {CFG_LEN}: responder.c and responder.rs disagree");
        }
        map.update(&0u32.to_ne_bytes(), &spec.cfg_bytes(), MapFlags::ANY)
            .map_err(|e| failed("configure", e))?;
        if let Some(tree) = &spec.tree {
            let map = loaded.map(DNS_CFG_MAP)?;
            let size = map.value_size() as usize;
            if size != DNS_CFG_LEN {
                bail!("{DNS_CFG_MAP} holds {size} bytes, the lab writes {DNS_CFG_LEN}: answerer.c and responder.rs disagree");
            }
            map.update(&0u32.to_ne_bytes(), &tree.cfg_bytes(), MapFlags::ANY)
                .map_err(|e| failed("configure", e))?;
        }
        loaded.program_fd().map(|_| loaded)
    }

    fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>> {
        self.obj
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| anyhow!("the XDP responder has no map {name}"))
    }

    /// What the DNS answerer counted, over every CPU.
    #[cfg(test)]
    pub(crate) fn dns_counts(&self) -> Result<DnsCounts> {
        let map = self.map(DNS_COUNTS_MAP)?;
        let mut n = [0u64; 9];
        for (i, total) in n.iter_mut().enumerate() {
            let per_cpu = map
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)?
                .unwrap_or_default();
            *total = per_cpu
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or_default()))
                .sum();
        }
        let [answered, formerr, notimp, refused, short, response, bad_ip, bad_checksum, no_room] =
            n;
        Ok(DnsCounts {
            answered,
            formerr,
            notimp,
            refused,
            short,
            response,
            bad_ip,
            bad_checksum,
            no_room,
        })
    }

    /// Our own descriptor of the program (it keeps the program, and its map, alive).
    fn program_fd(&self) -> Result<OwnedFd> {
        let prog = self
            .obj
            .progs()
            .find(|p| p.name() == PROGRAM)
            .ok_or_else(|| anyhow!("the XDP responder has no program {PROGRAM}"))?;
        prog.as_fd()
            .try_clone_to_owned()
            .map_err(|e| anyhow!("cannot hold the XDP responder: {e}"))
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN): its action and the frame it left.
    #[cfg(test)]
    pub(crate) fn run(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        let prog = self
            .obj
            .progs_mut()
            .find(|p| p.name() == PROGRAM)
            .ok_or_else(|| anyhow!("no program {PROGRAM}"))?;
        let mut out = vec![0u8; frame.len() + 512];
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let output = prog.test_run(input)?;
        let action = output.return_value;
        let len = output.data.map_or(0, |d| d.len());
        out.truncate(len);
        Ok((action, out))
    }
}

/// Loads the responder for `spec` and attaches it to nx0 in namespace `ns`; returns the mode.
pub(crate) fn attach(ns: &str, spec: &ResponderSpec) -> Result<&'static str> {
    let loaded = Loaded::load(spec)?;
    let prog = loaded.program_fd()?;
    let path = ns_path(ns);
    let ns_file = File::open(&path).map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    // The netlink attachment and the interface index belong to the namespace the calling
    // thread is in: a thread of its own enters the lab's and ends there.
    let attached = std::thread::scope(|s| {
        s.spawn(|| -> Result<()> {
            setns(&ns_file, CloneFlags::CLONE_NEWNET)
                .map_err(|e| anyhow!("cannot enter {ns}: {e}"))?;
            let ifindex = nix::net::if_::if_nametoindex(NET_IF)
                .map_err(|e| anyhow!("no {NET_IF} in {ns}: {e}"))?;
            Xdp::new(prog.as_fd())
                .attach(
                    ifindex as i32,
                    XdpFlags::SKB_MODE | XdpFlags::UPDATE_IF_NOEXIST,
                )
                .map_err(|e| anyhow!("cannot attach the XDP responder to {NET_IF} in {ns}: {e}"))
        })
        .join()
        .unwrap_or_else(|_| Err(anyhow!("the thread attaching the XDP responder panicked")))
    });
    attached.map(|()| MODE)
}

/// CLOCK_TAI less CLOCK_REALTIME in whole seconds (37 where the kernel was told the TAI offset,
/// else 0): a BPF program reads only CLOCK_TAI, and the HTTP Date is UTC.
pub(crate) fn tai_utc_offset() -> Result<u32> {
    use nix::time::{clock_gettime, ClockId};
    let read = |clock| {
        clock_gettime(clock)
            .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
            .map_err(|e| anyhow!("cannot read the clock {clock}: {e}"))
    };
    let offset = (read(ClockId::CLOCK_TAI)? - read(ClockId::CLOCK_REALTIME)?).round();
    if !(0.0..=3600.0).contains(&offset) {
        bail!("CLOCK_TAI is {offset} s from UTC: expected 0 to 3600 s (adjtimex's TAI offset)");
    }
    Ok(offset as u32)
}

/// A MAC in its usual notation ("02:00:c6:13:ff:fe") as bytes.
pub(crate) fn parse_mac(mac: &str) -> Result<[u8; 6]> {
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow!("{mac:?} is not a MAC address"))?;
    bytes
        .try_into()
        .map_err(|_| anyhow!("{mac:?} is not a MAC address"))
}

#[cfg(test)]
mod dns_tests;
#[cfg(test)]
mod tests;
