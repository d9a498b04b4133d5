//! The thin calls into libbpf that sonde's XDP programs share (as libpcap.rs is for libpcap):
//! reading libbpf's return values, and loading a list of eBPF instructions (what sonde-bpf
//! writes) as an XDP program, with the verifier's reason when it refuses one.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::anyhow;
use libbpf_sys as bpf;
use sonde_bpf::{bpf_insn, Unsupported};

/// A libbpf return value: negative errno on failure (libbpf 1.x).
pub(crate) fn check(ret: i32) -> io::Result<i32> {
    if ret < 0 {
        Err(io::Error::from_raw_os_error(-ret))
    } else {
        Ok(ret)
    }
}

/// Loads `insns` as an XDP program named `name`. A verifier's refusal is an [`Unsupported`]
/// naming the last line of its log.
pub(crate) fn load_xdp(insns: &[bpf_insn], name: &CStr) -> anyhow::Result<OwnedFd> {
    match load_with_log(insns, name, None) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(anyhow!(
            "loading the XDP program of the expression: permission denied: needs CAP_BPF and CAP_NET_ADMIN (run as root)"
        )),
        Err(e) => {
            // Once more, for the verifier's reason.
            let mut log = vec![0u8; 1 << 18];
            let _ = load_with_log(insns, name, Some(&mut log));
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0');
            // The reason is the last line before the closing statistics.
            let statistics = ["processed ", "verification time", "stack depth"];
            let reason = text.lines().rev().map(str::trim).find(|l| {
                !l.is_empty() && !statistics.iter().any(|s| l.starts_with(s))
            });
            Err(Unsupported::new(match reason {
                Some(line) => format!("the kernel refused its translation ({e}): {line}"),
                None => format!("the kernel refused its translation: {e}"),
            })
            .into())
        }
    }
}

fn load_with_log(insns: &[bpf_insn], name: &CStr, log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
    let mut opts = bpf::bpf_prog_load_opts {
        sz: std::mem::size_of::<bpf::bpf_prog_load_opts>() as _,
        ..Default::default()
    };
    if let Some(log) = log {
        opts.log_buf = log.as_mut_ptr().cast();
        opts.log_size = log.len() as u32;
        opts.log_level = 1;
    }
    // SAFETY: `insns` is valid for `insns.len()` instructions, name and license are
    // NUL-terminated, `opts` is fully initialised with its own size, and its log buffer (if
    // any) is writable for `log_size` bytes; the kernel copies the program during the call.
    let fd = check(unsafe {
        bpf::bpf_prog_load(
            bpf::BPF_PROG_TYPE_XDP,
            name.as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    })?;
    // SAFETY: `fd` is the new program's descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
