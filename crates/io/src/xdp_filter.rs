//! sonde's XDP reply filter (xdp/reply_filter.c, compiled by build.rs): the program that steers
//! a scan's replies to its AF_XDP socket while every other frame keeps going to the OS stack.
//!
//! Loading goes through libbpf (the same libbpf-sys that libxdp links): open the embedded object,
//! load it, write the scan's addresses, protocols and ports into `filter_cfg`, attach it to the
//! interface as a BPF link, and put the AF_XDP socket into `xsks_map` at its queue. A link (not
//! a netlink attachment) detaches when its last file descriptor closes, so the program goes away
//! with the receiver even when the process dies without unwinding (sonde aborts on panic), and
//! attaching never replaces another program already on the interface.
//!
//! An interface has one XDP program, and an AF_XDP socket receives only from the queue it is
//! bound to, so the receivers of several queues of one interface share one attached filter
//! ([`attach_shared`]): the first attaches it, the others add their sockets, and the last one
//! dropped detaches it. The same machinery attaches the other program sonde steers with: a
//! tcpdump expression translated to eBPF (by sonde-bpf), for `sonde capture --backend xdp`.

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::{anyhow, bail};
use libbpf_sys as bpf;
use sonde_bpf::{translate, Epilogue};

use crate::libbpf::{check, load_xdp};

/// The compiled program.
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/reply_filter.o"));

const PROGRAM: &CStr = c"sonde_reply_filter";
const XSKS_MAP: &CStr = c"xsks_map";
const CFG_MAP: &CStr = c"filter_cfg";
/// `max_entries` of `xsks_map`: the highest queue the filter serves, plus one.
pub(crate) const MAX_QUEUES: u32 = 64;

/// `filter_cfg.protos` bits of reply_filter.c.
const TAKE_TCP_SYNACK_RST: u32 = 1 << 0;
const TAKE_UDP: u32 = 1 << 1;
const TAKE_ICMP: u32 = 1 << 2;
const TAKE_ICMP6: u32 = 1 << 3;
const TAKE_TCP_ALL: u32 = 1 << 4;
const TAKE_ECHO: u32 = 1 << 5;
const SPARE_HOST_SOCKETS: u32 = 1 << 6;
const STAMP_ARRIVALS: u32 = 1 << 7;

/// The trailer reply_filter.c appends with `STAMP_ARRIVALS`: the filter's mark, then the
/// arrival time (CLOCK_MONOTONIC ns), 8 bytes each in host order.
pub(crate) const STAMP_LEN: usize = 16;

/// This process's stamp mark: random, so a frame cannot carry it by chance or by design, and
/// one per process, so the receivers of one interface still share one filter.
fn stamp_mark() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    static MARK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MARK.get_or_init(|| RandomState::new().hash_one(std::process::id()) | 1)
}

/// The arrival stamp (CLOCK_MONOTONIC ns) of a frame a filter with `mark` stamped, and the
/// frame without its trailer; None for a frame without the trailer (one that could not grow).
pub(crate) fn take_stamp(frame: &[u8], mark: u64) -> Option<(&[u8], u64)> {
    let split = frame.len().checked_sub(STAMP_LEN)?;
    let (bytes, trailer) = frame.split_at(split);
    let (have, stamp) = trailer.split_at(8);
    if have != mark.to_ne_bytes() {
        return None;
    }
    Some((bytes, u64::from_ne_bytes(stamp.try_into().ok()?)))
}

/// Which TCP segments to the port range the reply filter takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TcpTake {
    /// No TCP at all.
    #[default]
    None,
    /// Only what can answer a SYN probe: a SYN-ACK (SYN and ACK both set) or a RST (RST set).
    /// Any other segment to those ports (a stray ACK, data or FIN of some connection) goes on to
    /// the OS stack. What a SYN scan asks for.
    SynAckOrRst,
    /// Every segment: what a user-space TCP client (`grab`) asks for, since it owns its
    /// connections on these ports end to end and the OS stack must see none of them.
    All,
}

/// What the reply filter hands to the AF_XDP socket. A frame is taken when it is addressed to
/// `ipv4` or `ipv6` and is of a protocol set here; TCP and UDP also need a destination port in
/// `ports` (inclusive), and TCP a segment of the kind `tcp` says.
///
/// The host shares the address, so ICMP is taken only where it can be about sonde's own probes:
/// echo replies (ICMP type 0, ICMPv6 type 129) only with the identifier `echo_id` (none without
/// it), and errors (ICMP types 3, 4, 11, 12; ICMPv6 types 1–4) only when the datagram they quote
/// was sent from `ipv4`/`ipv6` and is TCP or UDP (of a protocol taken here) from a port in
/// `ports`, or an echo request with `echo_id`. An error about the host's own traffic (the
/// fragmentation-needed or packet-too-big its TCP's path-MTU discovery needs, an unreachable
/// about its resolver's query) and the replies to its own `ping` thus reach the OS stack. An
/// IPv6 quote with extension headers is not one of sonde's probes (they carry none). Requests,
/// neighbour discovery and MLD are never taken.
///
/// With `spare_host_sockets`, a TCP or UDP frame that would be taken (or an ICMP error quoting
/// one) is first looked up in the kernel's socket tables, in the network namespace of the
/// interface: when a socket of the host owns its flow (a bound or connected UDP socket, a TCP
/// listener, connection or TIME-WAIT), it goes to the OS stack instead. Leave it off only for
/// a receiver that holds its own port with a kernel socket (`sonde latency` does, so that the
/// kernel neither reuses the port nor answers it), since that socket would win.
///
/// `ports` should be sonde's own source ports (`sonde_craft::cookie::PortRange::DEFAULT`,
/// 61000–65535, outside Linux's ephemeral range).
///
/// Fragments: only the first fragment of a datagram carries its transport header, so the filter
/// takes a first fragment (IPv4 MF set and offset 0; IPv6 a fragment header with offset 0) when
/// that header shows a reply, and passes every later fragment (offset ≠ 0) to the OS stack,
/// which never completes the datagram. A receiver thus sees only the first fragment of a
/// fragmented reply, and should count those (IPv4: MF set; IPv6: a fragment header) rather than
/// parse them as whole. IPv6 extension headers (hop-by-hop, routing, fragment, destination
/// options) are walked to find the transport header, up to six of them; a packet with more, or
/// with any other extension header (AH, ESP, …), goes to the OS stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterSpec {
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
    pub tcp: TcpTake,
    pub udp: bool,
    pub icmp: bool,
    pub icmp6: bool,
    pub ports: (u16, u16),
    /// The identifier of sonde's ICMP echo requests (`icmp_echo`); None when it sends none.
    pub echo_id: Option<u16>,
    /// Ask the kernel before taking TCP or UDP, and pass what a socket of the host owns.
    pub spare_host_sockets: bool,
    /// Stamp each frame taken with its arrival time (the receiver's [`crate::RxMeta`] then
    /// carries it): for a reader that does not read each frame as it arrives.
    pub stamp_arrivals: bool,
}

/// `struct filter_cfg` of reply_filter.c, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FilterCfg {
    /// Network order, as the packet has it; 0: none.
    ipv4: u32,
    ipv6: [u8; 16],
    protos: u32,
    port_lo: u16,
    port_hi: u16,
    echo_id: u16,
    reserved: u16,
    stamp_mark: u64,
}

impl FilterSpec {
    fn to_cfg(&self) -> anyhow::Result<FilterCfg> {
        if self.ipv4 == Some(Ipv4Addr::UNSPECIFIED) || self.ipv6 == Some(Ipv6Addr::UNSPECIFIED) {
            bail!("the XDP reply filter needs the scan's own address, not an unspecified one");
        }
        if self.ipv4.is_none() && self.ipv6.is_none() {
            bail!("the XDP reply filter needs an IPv4 or IPv6 address to take replies for");
        }
        let tcp = self.tcp != TcpTake::None;
        if !(tcp || self.udp || self.icmp || self.icmp6) {
            bail!("the XDP reply filter takes no protocol: set tcp, udp, icmp or icmp6");
        }
        let (lo, hi) = self.ports;
        if (tcp || self.udp) && lo > hi {
            bail!("the XDP reply filter's port range {lo}-{hi} is empty");
        }
        if self.echo_id.is_some() && !(self.icmp || self.icmp6) {
            bail!("the XDP reply filter's echo identifier needs icmp or icmp6 taken");
        }
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        Ok(FilterCfg {
            ipv4: self.ipv4.map_or(0, |a| u32::from_ne_bytes(a.octets())),
            ipv6: self.ipv6.map_or([0; 16], |a| a.octets()),
            protos: bit(self.tcp == TcpTake::SynAckOrRst, TAKE_TCP_SYNACK_RST)
                | bit(self.tcp == TcpTake::All, TAKE_TCP_ALL)
                | bit(self.udp, TAKE_UDP)
                | bit(self.icmp, TAKE_ICMP)
                | bit(self.icmp6, TAKE_ICMP6)
                | bit(self.echo_id.is_some(), TAKE_ECHO)
                | bit(self.spare_host_sockets, SPARE_HOST_SOCKETS)
                | bit(self.stamp_arrivals, STAMP_ARRIVALS),
            port_lo: lo,
            port_hi: hi,
            echo_id: self.echo_id.unwrap_or(0),
            reserved: 0,
            stamp_mark: if self.stamp_arrivals { stamp_mark() } else { 0 },
        })
    }
}

/// The XDP program that steers an interface's frames to its AF_XDP sockets: what the receivers
/// of one interface must agree on to share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum XdpProgram {
    /// sonde's reply filter, configured.
    Reply(FilterCfg),
    /// A tcpdump expression's classic BPF translated to eBPF (by sonde-bpf), as its
    /// instructions' `(code, jt, jf, k)`.
    Expression(Vec<(u16, u8, u8, u32)>),
}

impl XdpProgram {
    /// sonde's reply filter taking what `spec` describes.
    pub(crate) fn reply(spec: &FilterSpec) -> anyhow::Result<XdpProgram> {
        Ok(XdpProgram::Reply(spec.to_cfg()?))
    }

    /// The classic BPF `program` (a compiled tcpdump expression) translated to eBPF.
    pub(crate) fn expression(program: &[libc::sock_filter]) -> XdpProgram {
        XdpProgram::Expression(program.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
    }

    /// The mark of the arrival stamps it appends, if it stamps them.
    fn stamp_mark(&self) -> Option<u64> {
        match self {
            XdpProgram::Reply(cfg) if cfg.protos & STAMP_ARRIVALS != 0 => Some(cfg.stamp_mark),
            _ => None,
        }
    }

    /// The program's name in messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            XdpProgram::Reply(_) => "sonde's XDP reply filter",
            XdpProgram::Expression(_) => "the XDP program of the capture expression",
        }
    }

    /// Loads it into the kernel (verifier included).
    fn load(&self) -> anyhow::Result<LoadedFilter> {
        match self {
            XdpProgram::Reply(cfg) => LoadedFilter::load_reply(cfg),
            XdpProgram::Expression(insns) => {
                let program: Vec<libc::sock_filter> = insns
                    .iter()
                    .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
                    .collect();
                let (prog, xsks) = load_redirect(&program)?;
                Ok(LoadedFilter {
                    prog,
                    xsks,
                    link: None,
                })
            }
        }
    }
}

/// A loaded steering program and its `xsks_map`, attached to at most one interface. (Other maps
/// it uses stay alive as long as the program does.)
pub(crate) struct LoadedFilter {
    prog: OwnedFd,
    xsks: OwnedFd,
    /// The BPF link while attached; closing it detaches the program.
    link: Option<OwnedFd>,
}

/// Loads `program` translated with the live epilogue, redirecting matches to a new XSKMAP of
/// `MAX_QUEUES` entries: returns the program and the map.
fn load_redirect(program: &[libc::sock_filter]) -> anyhow::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: the name is NUL-terminated; null options mean the defaults.
    let fd = unsafe {
        bpf::bpf_map_create(
            bpf::BPF_MAP_TYPE_XSKMAP,
            c"xsks_map".as_ptr(),
            4,
            4,
            MAX_QUEUES,
            std::ptr::null(),
        )
    };
    let fd = check(fd).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => anyhow!(
            "creating the XSKMAP of the capture expression's XDP program: permission denied: needs CAP_BPF and CAP_NET_ADMIN (run as root)"
        ),
        _ => anyhow!("creating the XSKMAP of the capture expression's XDP program: {e}"),
    })?;
    // SAFETY: `fd` is the new map's descriptor, owned by nobody else.
    let xsks = unsafe { OwnedFd::from_raw_fd(fd) };
    let insns = translate(
        program,
        Epilogue::Redirect {
            xsks_map: xsks.as_raw_fd(),
        },
    )?;
    let prog = load_xdp(&insns, c"sonde_capture")?;
    Ok((prog, xsks))
}

/// A file descriptor of our own for one that libbpf's object owns (which closes with it).
fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an integer and returns a new descriptor or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

impl LoadedFilter {
    /// Loads sonde's reply filter into the kernel (verifier included) with `spec` as its
    /// configuration.
    #[cfg(test)]
    fn load(spec: &FilterSpec) -> anyhow::Result<LoadedFilter> {
        Self::load_reply(&spec.to_cfg()?)
    }

    /// Loads sonde's reply filter into the kernel (verifier included) configured with `cfg`.
    fn load_reply(cfg: &FilterCfg) -> anyhow::Result<LoadedFilter> {
        let (prog, xsks, cfg_fd) = load_object().map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => anyhow!(
                "loading sonde's XDP reply filter: permission denied: needs CAP_BPF and CAP_NET_ADMIN (run as root)"
            ),
            _ => anyhow!("loading sonde's XDP reply filter: {e}"),
        })?;
        let filter = LoadedFilter {
            prog,
            xsks,
            link: None,
        };
        let key = 0u32;
        // SAFETY: the map's value is a `struct filter_cfg`, whose size load_object checked
        // against FilterCfg's; key and value outlive the call, which copies them.
        let ret = unsafe {
            bpf::bpf_map_update_elem(
                cfg_fd.as_raw_fd(),
                (&key as *const u32).cast(),
                (cfg as *const FilterCfg).cast(),
                bpf::BPF_ANY.into(),
            )
        };
        check(ret).map_err(|e| anyhow!("configuring sonde's XDP reply filter: {e}"))?;
        Ok(filter)
    }

    /// Attaches the program to `ifindex` in native (driver) or generic (SKB) mode.
    fn attach(&mut self, ifindex: u32, native: bool) -> io::Result<()> {
        self.detach();
        let opts = bpf::bpf_link_create_opts {
            sz: std::mem::size_of::<bpf::bpf_link_create_opts>() as _,
            flags: if native {
                bpf::XDP_FLAGS_DRV_MODE
            } else {
                bpf::XDP_FLAGS_SKB_MODE
            },
            ..Default::default()
        };
        // SAFETY: `opts` is a fully initialised options struct of the size it declares; the
        // program fd is ours.
        let fd = check(unsafe {
            bpf::bpf_link_create(self.prog.as_raw_fd(), ifindex as i32, bpf::BPF_XDP, &opts)
        })?;
        // SAFETY: `fd` is the new link's descriptor, owned by nobody else.
        self.link = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(())
    }

    /// Takes the program off the interface (closing the link is the detach).
    fn detach(&mut self) {
        self.link = None;
    }

    /// Steers the filter's frames arriving on `queue` to the AF_XDP socket `xsk`.
    fn add_socket(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        if queue >= MAX_QUEUES {
            return Err(io::Error::other(format!(
                "queue {queue} is beyond the {MAX_QUEUES} queues the XDP reply filter serves"
            )));
        }
        let value = xsk as u32;
        // SAFETY: an XSKMAP takes u32 keys and u32 socket-fd values; both outlive the call.
        let ret = unsafe {
            bpf::bpf_map_update_elem(
                self.xsks.as_raw_fd(),
                (&queue as *const u32).cast(),
                (&value as *const u32).cast(),
                bpf::BPF_ANY.into(),
            )
        };
        check(ret).map(drop)
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN) and returns its XDP action.
    #[cfg(test)]
    fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        let mut opts = bpf::bpf_test_run_opts {
            sz: std::mem::size_of::<bpf::bpf_test_run_opts>() as _,
            data_in: frame.as_ptr().cast(),
            data_size_in: frame.len() as u32,
            repeat: 1,
            ..Default::default()
        };
        // SAFETY: `frame` outlives the call, which only reads `data_size_in` bytes of it; there
        // is no output buffer.
        check(unsafe { bpf::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) })?;
        Ok(opts.retval)
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN) and returns its XDP action and the
    /// frame as the program left it.
    #[cfg(test)]
    fn test_run_frame(&self, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; frame.len() + 256];
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
        // one and writes at most `data_size_out` bytes into the other.
        check(unsafe { bpf::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) })?;
        out.truncate(opts.data_size_out as usize);
        Ok((opts.retval, out))
    }

    /// Runs the program on `count` copies of `frame` as if they had arrived on queue 0 of the
    /// calling thread's `lo` (BPF_F_TEST_XDP_LIVE_FRAMES): what it redirects really reaches
    /// the AF_XDP socket in `xsks_map` at queue 0, which must be bound to that `lo`.
    #[cfg(test)]
    pub(crate) fn inject(&self, frame: &[u8], count: u32) -> io::Result<()> {
        let mut opts = bpf::bpf_test_run_opts {
            sz: std::mem::size_of::<bpf::bpf_test_run_opts>() as _,
            data_in: frame.as_ptr().cast(),
            data_size_in: frame.len() as u32,
            repeat: count as i32,
            flags: bpf::BPF_F_TEST_XDP_LIVE_FRAMES,
            ..Default::default()
        };
        // SAFETY: `frame` outlives the call, which only reads `data_size_in` bytes of it; live
        // mode has no output buffer.
        check(unsafe { bpf::bpf_prog_test_run_opts(self.prog.as_raw_fd(), &mut opts) }).map(drop)
    }
}

/// A steering program attached to one interface, shared by the receivers of its queues;
/// dropping the last reference detaches it.
pub(crate) struct Attached {
    filter: LoadedFilter,
    native: bool,
    /// [`XdpProgram::name`].
    name: &'static str,
    /// The mark of the arrival stamps the program appends, if it stamps them.
    pub(crate) stamp_mark: Option<u64>,
}

impl Attached {
    /// Steers the filter's frames arriving on `queue` to the AF_XDP socket `xsk` (bound to that
    /// queue, with its fill ring stocked).
    pub(crate) fn add_socket(&self, queue: u32, xsk: RawFd) -> anyhow::Result<()> {
        self.filter
            .add_socket(queue, xsk)
            .map_err(|e| anyhow!("cannot add the AF_XDP socket to {}: {e}", self.name))
    }

    /// See [`LoadedFilter::inject`].
    #[cfg(test)]
    pub(crate) fn inject(&self, frame: &[u8], count: u32) -> io::Result<()> {
        self.filter.inject(frame, count)
    }
}

/// An interface: the calling thread's network namespace (device and inode of its nsfs file)
/// and the interface index in it.
type IfKey = (u64, u64, u32);

/// The programs this process has attached, by interface.
static ATTACHED: Mutex<Vec<(IfKey, XdpProgram, Weak<Attached>)>> = Mutex::new(Vec::new());

fn if_key(ifindex: u32) -> anyhow::Result<IfKey> {
    let ns = std::fs::metadata("/proc/thread-self/ns/net")
        .map_err(|e| anyhow!("cannot tell this thread's network namespace: {e}"))?;
    Ok((ns.dev(), ns.ino(), ifindex))
}

/// `program` on interface `ifindex` (`iface`), and what `open(native)` returned for it (the
/// AF_XDP socket, bound in the program's mode).
///
/// When this process has the same program on the interface already, it is shared and `open`
/// runs in its mode. Otherwise a new one is loaded and attached in the first mode of `modes`
/// (true: native, false: generic) for which `open` also succeeds; it is detached again before
/// the next mode is tried.
pub(crate) fn attach_shared<T>(
    ifindex: u32,
    iface: &str,
    program: &XdpProgram,
    modes: &[bool],
    mut open: impl FnMut(bool) -> anyhow::Result<T>,
) -> anyhow::Result<(Arc<Attached>, T)> {
    let name = program.name();
    let key = if_key(ifindex)?;
    // Held throughout, so two receivers opening at once attach one filter between them.
    let mut attached = ATTACHED.lock().unwrap_or_else(|e| e.into_inner());
    attached.retain(|(_, _, weak)| weak.strong_count() > 0);
    let found = attached
        .iter()
        .find(|(k, _, _)| *k == key)
        .and_then(|(_, have, weak)| Some((have, weak.upgrade()?)));
    // (One whose last user is dropping it right now counts as gone: attaching anew waits.)
    if let Some((have, shared)) = found {
        match (have, program) {
            (have, program) if have == program => {}
            (XdpProgram::Reply(_), XdpProgram::Reply(_)) => bail!(
                "{name} is already on {iface} with another address, protocol or port range: all receivers of one interface must take the same replies"
            ),
            (XdpProgram::Expression(_), XdpProgram::Expression(_)) => bail!(
                "{name} is already on {iface} with another expression: all receivers of one interface must capture the same expression"
            ),
            (have, _) => bail!(
                "{} is already on {iface}: {name} cannot be attached beside it",
                have.name()
            ),
        }
        if !modes.contains(&shared.native) {
            bail!(
                "{name} is already on {iface} in {} mode, which this receiver's XDP mode excludes",
                if shared.native { "native" } else { "generic" }
            );
        }
        let opened = open(shared.native)?;
        return Ok((shared, opened));
    }
    let mut filter = program.load()?;
    let mut errors = Vec::new();
    for &native in modes {
        let mode = if native { "native" } else { "generic" };
        if let Err(e) = attach_retrying(&mut filter, ifindex, native) {
            match e.raw_os_error() {
                Some(libc::EBUSY) => bail!(
                    "cannot attach {name} to {iface}: another XDP program is attached to it (see `ip link show {iface}`)"
                ),
                Some(libc::EPERM) => bail!(
                    "cannot attach {name} to {iface}: permission denied: needs CAP_NET_ADMIN and CAP_BPF (run as root)"
                ),
                _ => {
                    errors.push(format!("attaching in {mode} mode: {e}"));
                    continue;
                }
            }
        }
        match open(native) {
            Ok(opened) => {
                let shared = Arc::new(Attached {
                    filter,
                    native,
                    name,
                    stamp_mark: program.stamp_mark(),
                });
                attached.push((key, program.clone(), Arc::downgrade(&shared)));
                return Ok((shared, opened));
            }
            Err(e) => {
                filter.detach();
                errors.push(format!("{mode} mode: {e:#}"));
            }
        }
    }
    Err(anyhow!(
        "cannot receive through {name} on {iface}: {}",
        errors.join("; then ")
    ))
}

/// Attaches, waiting a moment while the interface is busy: a filter of this process that was
/// just dropped may still be on its way off.
fn attach_retrying(filter: &mut LoadedFilter, ifindex: u32, native: bool) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match filter.attach(ifindex, native) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 10 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Opens and loads the embedded object, checks the configuration map's layout, and returns our
/// own descriptors of the program, `xsks_map` and `filter_cfg`; the object is closed again.
fn load_object() -> io::Result<(OwnedFd, OwnedFd, OwnedFd)> {
    if OBJECT.is_empty() {
        return Err(io::Error::other("the embedded BPF object is empty"));
    }
    // SAFETY: the buffer is a static ELF image that outlives the call; libbpf copies what it
    // keeps. Null options mean the defaults.
    let obj = unsafe {
        bpf::bpf_object__open_mem(OBJECT.as_ptr().cast(), OBJECT.len() as _, std::ptr::null())
    };
    if obj.is_null() {
        return Err(io::Error::last_os_error());
    }
    let result = (|| {
        // SAFETY: `obj` is a valid, not yet loaded object.
        check(unsafe { bpf::bpf_object__load(obj) })?;
        // SAFETY: `obj` is valid and the name a NUL-terminated string; the returned pointer
        // (or null) lives as long as the object.
        let prog = unsafe { bpf::bpf_object__find_program_by_name(obj, PROGRAM.as_ptr()) };
        if prog.is_null() {
            return Err(io::Error::other(
                "the object has no program sonde_reply_filter",
            ));
        }
        // SAFETY: `prog` belongs to the loaded object.
        let prog_fd = check(unsafe { bpf::bpf_program__fd(prog) })?;
        let map_fd = |name: &CStr| -> io::Result<(RawFd, u32)> {
            // SAFETY: as for the program: valid object, NUL-terminated name.
            let map = unsafe { bpf::bpf_object__find_map_by_name(obj, name.as_ptr()) };
            if map.is_null() {
                return Err(io::Error::other(format!("the object has no map {name:?}")));
            }
            // SAFETY: `map` belongs to the loaded object.
            let (fd, size) = unsafe { (bpf::bpf_map__fd(map), bpf::bpf_map__value_size(map)) };
            Ok((check(fd)?, size))
        };
        let (xsks, _) = map_fd(XSKS_MAP)?;
        let (cfg, size) = map_fd(CFG_MAP)?;
        if size as usize != std::mem::size_of::<FilterCfg>() {
            return Err(io::Error::other(format!(
                "filter_cfg holds {size} bytes, sonde writes {}: reply_filter.c and xdp_filter.rs disagree",
                std::mem::size_of::<FilterCfg>()
            )));
        }
        Ok((dup(prog_fd)?, dup(xsks)?, dup(cfg)?))
    })();
    // SAFETY: `obj` came from bpf_object__open_mem and is closed once; only our duplicated
    // descriptors remain, and they keep the program and maps alive.
    unsafe { bpf::bpf_object__close(obj) };
    result
}

#[cfg(test)]
mod tests;
