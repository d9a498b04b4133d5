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
//! tcpdump expression translated to eBPF (cbpf_xdp.rs), for `sonde capture --backend xdp`.

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::{anyhow, bail};
use libbpf_sys as bpf;

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
/// `ports` (inclusive), and TCP a segment of the kind `tcp` says. Taken ICMP is echo reply and
/// the errors that quote a datagram (types 0, 3, 4, 11, 12); taken ICMPv6 is errors and echo
/// reply (types 1–4, 129), never neighbour discovery. Everything else goes to the OS stack.
///
/// `ports` should be sonde's own source ports (`sonde_craft::cookie::PortRange::DEFAULT`,
/// 61000–65535, outside Linux's ephemeral range): with those, whatever the filter takes cannot
/// belong to one of the host's own connections.
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
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        Ok(FilterCfg {
            ipv4: self.ipv4.map_or(0, |a| u32::from_ne_bytes(a.octets())),
            ipv6: self.ipv6.map_or([0; 16], |a| a.octets()),
            protos: bit(self.tcp == TcpTake::SynAckOrRst, TAKE_TCP_SYNACK_RST)
                | bit(self.tcp == TcpTake::All, TAKE_TCP_ALL)
                | bit(self.udp, TAKE_UDP)
                | bit(self.icmp, TAKE_ICMP)
                | bit(self.icmp6, TAKE_ICMP6),
            port_lo: lo,
            port_hi: hi,
        })
    }
}

/// The XDP program that steers an interface's frames to its AF_XDP sockets: what the receivers
/// of one interface must agree on to share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum XdpProgram {
    /// sonde's reply filter, configured.
    Reply(FilterCfg),
    /// A tcpdump expression's classic BPF translated to eBPF (cbpf_xdp.rs), as its
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
                let (prog, xsks) = crate::cbpf_xdp::load_redirect(&program)?;
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

/// A libbpf return value: negative errno on failure (libbpf 1.x).
pub(crate) fn check(ret: i32) -> io::Result<i32> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
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
mod tests {
    use super::*;

    const XDP_PASS: u32 = 2;
    const XDP_REDIRECT: u32 = 4;
    const SCAN4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
    const SCAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
    const OTHER4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 2);
    const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 2);
    /// sonde's default source ports (`PortRange::DEFAULT` of sonde-craft).
    const PORTS: (u16, u16) = (61000, 65535);
    /// A port inside them, and one of Linux's ephemeral ports (32768–60999), outside.
    const OURS: u16 = 62000;
    const EPHEMERAL: u16 = 45000;

    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;
    const FIN: u8 = 0x01;
    const PSH: u8 = 0x08;

    fn spec() -> FilterSpec {
        FilterSpec {
            ipv4: Some(SCAN4),
            ipv6: Some(SCAN6),
            tcp: TcpTake::SynAckOrRst,
            udp: true,
            icmp: true,
            icmp6: true,
            ports: PORTS,
        }
    }

    #[test]
    fn config_layout_and_checks() {
        assert_eq!(std::mem::size_of::<FilterCfg>(), 28);
        let cfg = spec().to_cfg().unwrap();
        assert_eq!(cfg.ipv4.to_ne_bytes(), [198, 19, 255, 1]);
        assert_eq!(cfg.protos, 0b1111);
        assert_eq!((cfg.port_lo, cfg.port_hi), PORTS);
        let only_tcp4 = FilterSpec {
            ipv6: None,
            udp: false,
            icmp: false,
            icmp6: false,
            ..spec()
        };
        let cfg = only_tcp4.to_cfg().unwrap();
        assert_eq!((cfg.ipv6, cfg.protos), ([0; 16], TAKE_TCP_SYNACK_RST));
        let all_tcp = FilterSpec {
            tcp: TcpTake::All,
            ..only_tcp4.clone()
        };
        assert_eq!(all_tcp.to_cfg().unwrap().protos, TAKE_TCP_ALL);
        let no_tcp = FilterSpec {
            tcp: TcpTake::None,
            ..spec()
        };
        assert_eq!(no_tcp.to_cfg().unwrap().protos, 0b1110);
        let bad = [
            FilterSpec {
                ipv4: None,
                ipv6: None,
                ..spec()
            },
            FilterSpec {
                ipv4: Some(Ipv4Addr::UNSPECIFIED),
                ..spec()
            },
            FilterSpec {
                ports: (2, 1),
                ..spec()
            },
            FilterSpec {
                ports: (2, 1),
                udp: false,
                tcp: TcpTake::All,
                ..spec()
            },
            FilterSpec {
                tcp: TcpTake::None,
                udp: false,
                icmp: false,
                icmp6: false,
                ..spec()
            },
        ];
        for s in bad {
            assert!(s.to_cfg().is_err(), "{s:?}");
        }
    }

    // Frame builders: just the fields the filter reads; checksums do not matter to it.

    fn eth(ethertype: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }

    fn tcp(dport: u16, flags: u8) -> Vec<u8> {
        let mut h = vec![0; 20];
        h[0..2].copy_from_slice(&80u16.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h[12] = 5 << 4;
        h[13] = flags;
        h
    }

    fn udp(dport: u16) -> Vec<u8> {
        let mut h = vec![0; 8];
        h[0..2].copy_from_slice(&53u16.to_be_bytes());
        h[2..4].copy_from_slice(&dport.to_be_bytes());
        h
    }

    fn icmp(kind: u8) -> Vec<u8> {
        vec![kind, 0, 0, 0, 0, 0, 0, 0]
    }

    fn v4(dst: Ipv4Addr, proto: u8, options: usize, frag_off: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = eth(0x0800);
        let ihl = 20 + options;
        let mut ip = vec![0; ihl];
        ip[0] = 0x40 | (ihl / 4) as u8;
        ip[2..4].copy_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
        ip[6..8].copy_from_slice(&frag_off.to_be_bytes());
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&[198, 18, 0, 7]);
        ip[16..20].copy_from_slice(&dst.octets());
        for b in &mut ip[20..] {
            *b = 1; // NOP options
        }
        f.extend_from_slice(&ip);
        f.extend_from_slice(payload);
        f
    }

    /// An IPv6 frame whose first next-header is `next`; `payload` holds any extension headers.
    fn v6(dst: Ipv6Addr, next: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = eth(0x86dd);
        let mut ip = vec![0; 40];
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        ip[6] = next;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 7).octets());
        ip[24..40].copy_from_slice(&dst.octets());
        f.extend_from_slice(&ip);
        f.extend_from_slice(payload);
        f
    }

    /// A hop-by-hop, routing or destination options header of `(units + 1) * 8` bytes.
    fn opt_hdr(next: u8, units: u8) -> Vec<u8> {
        let mut h = vec![0; (usize::from(units) + 1) * 8];
        h[0] = next;
        h[1] = units;
        h[2] = 1; // a PadN option filling the rest
        h[3] = (h.len() - 4) as u8;
        h
    }

    /// A fragment header: offset in 8-octet units, `more` the M flag.
    fn frag_hdr(next: u8, offset: u16, more: bool) -> Vec<u8> {
        let field = (offset << 3) | u16::from(more);
        let mut h = vec![next, 0, 0, 0, 0xab, 0xcd, 0xef, 0x01];
        h[2..4].copy_from_slice(&field.to_be_bytes());
        h
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    pub(crate) fn can_load() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipping: loading an XDP program needs root");
        }
        root
    }

    /// Runs `check` with the filter loaded from `spec` and an AF_XDP socket in `xsks_map` at
    /// queue 0 (the queue a test run's frames come from), so a taken frame returns
    /// XDP_REDIRECT instead of the XDP_PASS fallback. The socket is bound to `lo` of a network
    /// namespace of its own, in a thread of its own, and no program is attached anywhere.
    fn with_filter(spec: FilterSpec, check: impl FnOnce(&LoadedFilter) + Send + 'static) {
        std::thread::spawn(move || {
            // SAFETY: unshare only changes this thread's namespaces (no other flags given).
            let ret = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(ret, 0, "unshare: {}", io::Error::last_os_error());
            let filter = LoadedFilter::load(&spec).unwrap();
            let mut cfg = crate::IoConfig::new("lo");
            cfg.xdp_mode = crate::XdpMode::Generic;
            let port = crate::xdp::XskPort::open(
                &cfg,
                64,
                false,
                crate::xdp::Steering::Own { native: false },
            )
            .unwrap();
            filter.add_socket(0, port.raw_fd()).unwrap();
            check(&filter);
        })
        .join()
        .unwrap();
    }

    /// Asserts the filter's verdict on a frame; `what` names the frame in a failure.
    type Verdict<'a> = Box<dyn Fn(Vec<u8>, &str) + 'a>;

    /// `(take, pass)`: `take(frame, what)` asserts the filter redirects `frame`,
    /// `pass(frame, what)` that it leaves it to the OS stack.
    fn judge(f: &LoadedFilter) -> (Verdict<'_>, Verdict<'_>) {
        let take = move |frame: Vec<u8>, what: &str| {
            assert_eq!(f.test_run(&frame).unwrap(), XDP_REDIRECT, "take {what}")
        };
        let pass = move |frame: Vec<u8>, what: &str| {
            assert_eq!(f.test_run(&frame).unwrap(), XDP_PASS, "pass {what}")
        };
        (Box::new(take), Box::new(pass))
    }

    #[test]
    fn takes_exactly_the_replies() {
        if !can_load() {
            return;
        }
        with_filter(spec(), |f| {
            let (take, pass) = judge(f);
            let synack = SYN | ACK;
            // IPv4 TCP/UDP: address and both ends of the port range.
            take(v4(SCAN4, 6, 0, 0, &tcp(PORTS.0, synack)), "tcp lo");
            take(v4(SCAN4, 6, 0, 0, &tcp(PORTS.1, synack)), "tcp hi");
            take(v4(SCAN4, 17, 0, 0, &udp(OURS)), "udp");
            take(v4(SCAN4, 6, 12, 0, &tcp(OURS, synack)), "after IP options");
            pass(v4(SCAN4, 6, 0, 0, &tcp(PORTS.0 - 1, synack)), "below range");
            pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, synack)), "ephemeral");
            pass(v4(SCAN4, 6, 0, 0, &tcp(22, synack)), "tcp port 22");
            pass(v4(SCAN4, 17, 0, 0, &udp(EPHEMERAL)), "udp ephemeral");
            pass(v4(OTHER4, 6, 0, 0, &tcp(OURS, synack)), "other address");
            pass(v4(SCAN4, 47, 0, 0, &[0; 20]), "gre");
            // ICMP: replies and errors, not requests.
            for t in [0, 3, 4, 11, 12] {
                take(v4(SCAN4, 1, 0, 0, &icmp(t)), &format!("icmp type {t}"));
            }
            for t in [8, 13, 5] {
                pass(v4(SCAN4, 1, 0, 0, &icmp(t)), &format!("icmp type {t}"));
            }
            // IPv6.
            take(v6(SCAN6, 6, &tcp(OURS, synack)), "tcp6");
            take(v6(SCAN6, 17, &udp(PORTS.0)), "udp6");
            pass(v6(SCAN6, 17, &udp(1000)), "udp6 outside range");
            pass(v6(OTHER6, 6, &tcp(OURS, synack)), "tcp6 other address");
            for t in [1, 2, 3, 4, 129] {
                take(v6(SCAN6, 58, &icmp(t)), &format!("icmp6 type {t}"));
            }
            for t in [128, 133, 134, 135, 136, 137, 143] {
                pass(v6(SCAN6, 58, &icmp(t)), &format!("icmp6 type {t}"));
            }
            // ICMP of the wrong family is not taken.
            pass(v4(SCAN4, 58, 0, 0, &icmp(129)), "icmp6 in ipv4");
            pass(v6(SCAN6, 1, &icmp(0)), "icmp in ipv6");
            // Truncated and odd frames.
            let frame = v4(SCAN4, 6, 0, 0, &tcp(OURS, synack));
            pass(frame[..14 + 20 + 3].to_vec(), "truncated before the port");
            pass(frame[..14 + 20 + 13].to_vec(), "truncated before the flags");
            take(
                frame[..14 + 20 + 14].to_vec(),
                "flags present, rest missing",
            );
            pass(frame[..14 + 19].to_vec(), "truncated IPv4 header");
            let mut bad_ihl = frame.clone();
            bad_ihl[14] = 0x44;
            pass(bad_ihl, "IHL below 5");
            let mut long_ihl = frame.clone();
            long_ihl[14] = 0x4f;
            pass(long_ihl, "IHL beyond the frame");
            let mut not_v4 = frame.clone();
            not_v4[14] = 0x65;
            pass(not_v4, "version 6 in an IPv4 frame");
            pass(
                v6(SCAN6, 6, &tcp(OURS, synack))[..14 + 39].to_vec(),
                "truncated IPv6",
            );
            pass(eth(0x0806).into_iter().chain([0; 28]).collect(), "arp");
            let mut vlan = eth(0x8100);
            vlan.extend_from_slice(&frame[12..]);
            pass(vlan, "vlan-tagged");
        });
    }

    /// Every combination of TCP flags a segment of an ordinary connection carries, and whether
    /// a SYN scan's filter takes it (only SYN-ACK and RST kinds).
    const SEGMENTS: [(u8, &str, bool); 9] = [
        (SYN | ACK, "SYN-ACK", true),
        (RST, "RST", true),
        (RST | ACK, "RST-ACK", true),
        (SYN | ACK | PSH, "SYN-ACK-PSH", true),
        (SYN, "SYN", false),
        (ACK, "ACK", false),
        (PSH | ACK, "data", false),
        (FIN | ACK, "FIN-ACK", false),
        (0, "no flags", false),
    ];

    #[test]
    fn a_syn_scan_takes_only_synacks_and_resets() {
        if !can_load() {
            return;
        }
        with_filter(spec(), |f| {
            let (take, pass) = judge(f);
            for (flags, what, taken) in SEGMENTS {
                let (frame4, frame6) = (
                    v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)),
                    v6(SCAN6, 6, &tcp(OURS, flags)),
                );
                if taken {
                    take(frame4, what);
                    take(frame6, what);
                } else {
                    pass(frame4, what);
                    pass(frame6, what);
                }
                // Outside the range nothing is taken, whatever the flags.
                pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, flags)), what);
            }
        });
    }

    #[test]
    fn a_tcp_client_takes_every_segment_to_its_ports() {
        if !can_load() {
            return;
        }
        let all = FilterSpec {
            tcp: TcpTake::All,
            ..spec()
        };
        with_filter(all, |f| {
            let (take, pass) = judge(f);
            for (flags, what, _) in SEGMENTS {
                take(v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)), what);
                take(v6(SCAN6, 6, &tcp(OURS, flags)), what);
                pass(v4(SCAN4, 6, 0, 0, &tcp(EPHEMERAL, flags)), what);
                pass(v6(SCAN6, 6, &tcp(EPHEMERAL, flags)), what);
            }
            // The ports are enough: every segment to them is the client's.
            let frame = v4(SCAN4, 6, 0, 0, &tcp(OURS, ACK));
            take(frame[..14 + 20 + 4].to_vec(), "ports present, rest missing");
        });
        let none = FilterSpec {
            tcp: TcpTake::None,
            ..spec()
        };
        with_filter(none, |f| {
            let (take, pass) = judge(f);
            for (flags, what, _) in SEGMENTS {
                pass(v4(SCAN4, 6, 0, 0, &tcp(OURS, flags)), what);
            }
            take(v4(SCAN4, 17, 0, 0, &udp(OURS)), "udp still");
        });
    }

    #[test]
    fn ipv4_first_fragments_are_judged_later_ones_passed() {
        if !can_load() {
            return;
        }
        with_filter(spec(), |f| {
            let (take, pass) = judge(f);
            const MF: u16 = 0x2000;
            let synack = tcp(OURS, SYN | ACK);
            take(v4(SCAN4, 6, 0, MF, &synack), "first fragment of a SYN-ACK");
            take(v4(SCAN4, 17, 0, MF, &udp(OURS)), "first fragment of UDP");
            take(
                v4(SCAN4, 1, 0, MF, &icmp(3)),
                "first fragment of an ICMP error",
            );
            pass(
                v4(SCAN4, 6, 0, MF, &tcp(OURS, ACK)),
                "first fragment, not a reply",
            );
            pass(
                v4(SCAN4, 6, 0, MF, &tcp(EPHEMERAL, SYN | ACK)),
                "first, other port",
            );
            pass(v4(SCAN4, 6, 0, MF, &synack[..3]), "first, ports cut off");
            pass(v4(SCAN4, 6, 0, MF, &synack[..13]), "first, flags cut off");
            // A later fragment's payload is the middle of the datagram: even bytes that look
            // like a reply's header are not one.
            pass(v4(SCAN4, 6, 0, MF | 1, &synack), "middle fragment");
            pass(v4(SCAN4, 6, 0, 185, &synack), "last fragment");
            pass(v4(SCAN4, 17, 0, 0x1fff, &udp(OURS)), "largest offset");
            // DF alone is no fragment.
            take(v4(SCAN4, 6, 0, 0x4000, &synack), "don't fragment");
        });
    }

    #[test]
    fn ipv6_extension_headers_are_walked() {
        if !can_load() {
            return;
        }
        with_filter(spec(), |f| {
            let (take, pass) = judge(f);
            let (hop, routing, fragment, dest) = (0u8, 43u8, 44u8, 60u8);
            let synack = tcp(OURS, SYN | ACK);
            take(
                v6(SCAN6, hop, &cat(&[&opt_hdr(6, 0), &synack])),
                "hop-by-hop",
            );
            take(
                v6(
                    SCAN6,
                    dest,
                    &cat(&[&opt_hdr(routing, 1), &opt_hdr(6, 2), &synack]),
                ),
                "destination options, routing",
            );
            take(
                v6(SCAN6, hop, &cat(&[&opt_hdr(58, 0), &icmp(129)])),
                "hop-by-hop, echo reply",
            );
            pass(
                v6(SCAN6, hop, &cat(&[&opt_hdr(58, 0), &icmp(143)])),
                "hop-by-hop, MLDv2 report",
            );
            pass(
                v6(SCAN6, hop, &cat(&[&opt_hdr(6, 0), &tcp(OURS, ACK)])),
                "hop-by-hop, ACK",
            );
            pass(
                v6(
                    SCAN6,
                    hop,
                    &cat(&[&opt_hdr(6, 0), &tcp(EPHEMERAL, SYN | ACK)]),
                ),
                "hop-by-hop, other port",
            );
            // Fragments: the first (offset 0) is judged, later ones passed.
            take(
                v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 0, true), &synack])),
                "first fragment",
            );
            take(
                v6(SCAN6, fragment, &cat(&[&frag_hdr(17, 0, true), &udp(OURS)])),
                "first fragment of UDP",
            );
            take(
                v6(
                    SCAN6,
                    hop,
                    &cat(&[&opt_hdr(fragment, 0), &frag_hdr(6, 0, true), &synack]),
                ),
                "hop-by-hop, first fragment",
            );
            pass(
                v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 1, true), &synack])),
                "middle fragment",
            );
            pass(
                v6(SCAN6, fragment, &cat(&[&frag_hdr(6, 8191, false), &synack])),
                "last fragment",
            );
            // Six extension headers are walked, a seventh is one too many.
            let chain = |n: usize| {
                let mut payload = Vec::new();
                for i in 0..n {
                    payload.extend(opt_hdr(if i + 1 == n { 6 } else { dest }, 0));
                }
                payload.extend_from_slice(&synack);
                v6(SCAN6, dest, &payload)
            };
            take(chain(6), "six extension headers");
            pass(chain(7), "seven extension headers");
            // Truncated and unknown headers.
            let frame = v6(SCAN6, hop, &cat(&[&opt_hdr(6, 1), &synack]));
            pass(frame[..14 + 40 + 1].to_vec(), "extension header cut off");
            pass(frame[..14 + 40 + 16 + 3].to_vec(), "ports cut off after it");
            let mut overlong = opt_hdr(6, 0);
            overlong[1] = 200;
            pass(
                v6(SCAN6, hop, &cat(&[&overlong, &synack])),
                "extension header longer than the frame",
            );
            pass(
                v6(SCAN6, fragment, &frag_hdr(6, 0, true)[..7]),
                "fragment header cut off",
            );
            pass(v6(SCAN6, 51, &cat(&[&opt_hdr(6, 1), &synack])), "AH");
            pass(v6(SCAN6, 59, &synack), "no next header");
            pass(
                v6(OTHER6, hop, &cat(&[&opt_hdr(6, 0), &synack])),
                "other address",
            );
        });
    }

    #[test]
    fn takes_only_the_protocols_and_families_asked_for() {
        if !can_load() {
            return;
        }
        let tcp4 = FilterSpec {
            ipv6: None,
            udp: false,
            icmp: false,
            icmp6: false,
            ..spec()
        };
        with_filter(tcp4, |f| {
            let run = |frame: Vec<u8>| f.test_run(&frame).unwrap();
            assert_eq!(run(v4(SCAN4, 6, 0, 0, &tcp(OURS, RST))), XDP_REDIRECT);
            assert_eq!(run(v4(SCAN4, 17, 0, 0, &udp(OURS))), XDP_PASS);
            assert_eq!(run(v4(SCAN4, 1, 0, 0, &icmp(0))), XDP_PASS);
            assert_eq!(run(v6(SCAN6, 6, &tcp(OURS, RST))), XDP_PASS);
        });
        let icmp6 = FilterSpec {
            ipv4: None,
            tcp: TcpTake::None,
            udp: false,
            icmp: false,
            ..spec()
        };
        with_filter(icmp6, |f| {
            let run = |frame: Vec<u8>| f.test_run(&frame).unwrap();
            assert_eq!(run(v6(SCAN6, 58, &icmp(129))), XDP_REDIRECT);
            assert_eq!(run(v6(SCAN6, 6, &tcp(OURS, RST))), XDP_PASS);
            assert_eq!(run(v4(SCAN4, 1, 0, 0, &icmp(0))), XDP_PASS);
        });
    }
}
