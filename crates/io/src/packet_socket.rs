//! What the AF_PACKET backends (`ring`, `mmsg`, `sendto`) share: opening a raw packet socket
//! bound to one interface, socket options, and readable-polls.

use sonde_meter::stages::{self, Stage};
use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use anyhow::{anyhow, bail};

/// Index of interface `name` in this network namespace, or a one-line error saying where to look.
pub fn ifindex(name: &str) -> anyhow::Result<u32> {
    let c =
        CString::new(name).map_err(|_| anyhow!("interface name {name:?} contains a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        bail!("no interface named \"{name}\" in this network namespace (list them with: ip link)");
    }
    Ok(index)
}

/// Turns a socket-creation error into one line naming the missing capability.
pub fn open_error(what: &str, err: io::Error) -> anyhow::Error {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => anyhow!(
            "{what}: permission denied: needs CAP_NET_RAW (run as root, or: setcap cap_net_raw,cap_net_admin+ep $(which sonde))"
        ),
        _ => anyhow!("{what}: {err}"),
    }
}

/// A raw AF_PACKET socket bound to one interface.
///
/// `protocol` 0 makes a transmit-only socket: the kernel queues no received frames on it, so a
/// sender never pays for traffic it does not read. `ETH_P_ALL` receives every frame.
pub fn open_bound(iface: &str, protocol: u16) -> anyhow::Result<OwnedFd> {
    let index = ifindex(iface)?;
    let fd = open_unbound(protocol)?;
    bind_to(&fd, iface, index, protocol)?;
    Ok(fd)
}

/// A raw AF_PACKET socket of `protocol` that is bound to nothing yet. With protocol 0 it
/// receives nothing until [`bind`] names a protocol: a capture sets its filter and ring up
/// first, so no frame reaches it before they are in place.
pub fn open_unbound(protocol: u16) -> anyhow::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if raw < 0 {
        return Err(open_error(
            "opening an AF_PACKET socket",
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `raw` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Binds a packet socket to `iface`, receiving `protocol` (`ETH_P_ALL`: every frame) from then on.
pub fn bind(fd: &OwnedFd, iface: &str, protocol: u16) -> anyhow::Result<()> {
    bind_to(fd, iface, ifindex(iface)?, protocol)
}

fn bind_to(fd: &OwnedFd, iface: &str, index: u32, protocol: u16) -> anyhow::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid starting value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = index as i32;
    // SAFETY: `addr` is a valid sockaddr_ll and the length passed matches its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc < 0 {
        return Err(open_error(
            &format!("binding a packet socket to {iface}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Marks `fd` close-on-exec, for descriptors that libraries (libxdp, libpcap) open without it:
/// a child process would otherwise hold the socket (and an AF_XDP socket's queue) until it
/// exits.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD take and return plain integers; a bad fd yields -1.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// setsockopt(2) with a plain-data value.
pub fn set_option<T: Copy>(fd: RawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` whose size is passed alongside it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout` passes; true if readable.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    stages::call(Stage::Poll, Stage::RxCall, || poll_any(&[fd], timeout))
}

/// Waits until any of `fds` (the first 256: an AF_XDP bridge thread serving every queue of two
/// 128-queue NICs) is readable or `timeout` passes; true if one is (an interrupted wait counts
/// as a timeout).
pub fn poll_any(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 256];
    let n = fds.len().min(pfds.len());
    for (pfd, &fd) in pfds.iter_mut().zip(&fds[..n]) {
        pfd.fd = fd;
    }
    // SAFETY: `pfds` holds `n` valid pollfd entries and the count passed is `n`.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), n as libc::nfds_t, timeout_ms(timeout)) };
    match rc {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            }
        }
    }
}

/// Like [`poll_any`], but waits `timeout` to the nanosecond (ppoll(2)) rather than in whole
/// milliseconds rounded up: for a caller that wakes at a due time, such as the lab's delay line.
/// How late it wakes is then the kernel's timer slack (see prctl(2) PR_SET_TIMERSLACK) and
/// scheduling.
pub fn poll_any_precise(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    }; 256];
    let n = fds.len().min(pfds.len());
    for (pfd, &fd) in pfds.iter_mut().zip(&fds[..n]) {
        pfd.fd = fd;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `pfds` holds `n` valid pollfd entries, the count passed is `n`, `ts` lives across
    // the call and a null signal mask leaves the thread's mask as it is.
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    match rc {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            }
        }
    }
}

/// `timeout` in whole milliseconds for poll(2), rounded up (a wait of 0.5 ms is one of 1 ms, not
/// none) and capped at i32::MAX.
pub fn timeout_ms(timeout: Duration) -> i32 {
    timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

/// Whether a send error only means "the queue is full right now": back off and retry.
pub fn is_transient(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
    )
}

/// Drops the kernel counted on a packet socket since the last call (`PACKET_STATISTICS` resets
/// on read).
pub fn take_drops(fd: RawFd) -> u64 {
    take_counts(fd).1
}

/// Packets a packet socket received and the ones it dropped since the last call
/// (`PACKET_STATISTICS` resets on read; zeros if the kernel cannot tell). The V3 statistics start
/// with the same two counters as the older layout.
pub fn take_counts(fd: RawFd) -> (u64, u64) {
    let mut stats = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    let mut len = size_of::<libc::tpacket_stats_v3>() as u32;
    // SAFETY: `stats` is a valid buffer of `len` bytes for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut stats as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        return (0, 0);
    }
    (u64::from(stats.tp_packets), u64::from(stats.tp_drops))
}
