//! A TUN device held open: an interface whose packets carry no link-layer header (libpcap's
//! RAW link type), for checking what sonde captures on such an interface. A TUN device has a
//! carrier (and sends anything) only while a file descriptor is attached to it; this is that
//! descriptor. Whatever the host routes to the device is queued here and never leaves.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;

use anyhow::{anyhow, bail, Context};

/// `TUNSETIFF` (`_IOW('T', 202, int)`) and the flags of `<linux/if_tun.h>`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// A TUN device of the calling thread's network namespace; it goes away when dropped.
pub struct TunDevice {
    _file: File,
    pub name: String,
}

impl TunDevice {
    /// Creates the TUN device `name` (IP packets, no packet-information header) in the calling
    /// thread's network namespace and holds it open. Needs CAP_NET_ADMIN.
    pub fn create(name: &str) -> anyhow::Result<TunDevice> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .context("opening /dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid starting value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        if name.is_empty() || name.len() >= req.ifr_name.len() {
            bail!("a TUN device name has 1 to 15 bytes, not {name:?}");
        }
        for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = IFF_TUN | IFF_NO_PI;
        // SAFETY: `req` is a live ifreq naming the device (NUL-terminated: zeroed beyond the
        // name) with its flags set, as TUNSETIFF reads it; the descriptor is open.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req) };
        if rc < 0 {
            return Err(anyhow!(
                "creating the TUN device {name}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(TunDevice {
            _file: file,
            name: name.to_string(),
        })
    }
}
