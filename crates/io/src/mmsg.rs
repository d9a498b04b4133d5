//! A raw AF_PACKET socket driven by `sendmmsg(2)` / `recvmmsg(2)`: one system call per batch,
//! but the kernel still copies each frame and walks the stack once per frame.

use sonde_meter::stages::{self, Stage};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use crate::packet_socket::{is_transient, open_bound, poll_readable};
use crate::{FrameRx, FrameTx, IoConfig, MAX_FRAME};

/// One contiguous slab of `n` frame buffers plus the message headers that point into it.
struct Slab {
    bufs: Vec<u8>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iov`/`msgs` only ever point into `bufs`, owned by the same value,
// and are rewritten before every system call that reads them.
unsafe impl Send for Slab {}

impl Slab {
    fn new(n: usize) -> Slab {
        let n = n.max(1);
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is a valid value for both.
        let zero_iov: libc::iovec = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let zero_msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
        Slab {
            bufs: vec![0; n * MAX_FRAME],
            iov: vec![zero_iov; n],
            msgs: vec![zero_msg; n],
        }
    }

    fn capacity(&self) -> usize {
        self.iov.len()
    }

    fn frame_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * MAX_FRAME..(i + 1) * MAX_FRAME]
    }

    fn frame(&self, i: usize, len: usize) -> &[u8] {
        &self.bufs[i * MAX_FRAME..i * MAX_FRAME + len.min(MAX_FRAME)]
    }

    /// Points message `i` at frame `i` with length `len` (at most the frame's buffer).
    fn point(&mut self, i: usize, len: usize) {
        let base = self.bufs.as_mut_ptr();
        // SAFETY: i < capacity, so the offset stays inside `bufs`.
        self.iov[i].iov_base = unsafe { base.add(i * MAX_FRAME) }.cast();
        // The kernel reads (or writes) iov_len bytes: never more than the frame's buffer.
        self.iov[i].iov_len = len.min(MAX_FRAME);
        let hdr = &mut self.msgs[i].msg_hdr;
        hdr.msg_iov = &mut self.iov[i];
        hdr.msg_iovlen = 1;
        self.msgs[i].msg_len = 0;
    }
}

pub struct MmsgTx {
    fd: OwnedFd,
    slab: Slab,
}

impl MmsgTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        Ok(MmsgTx {
            fd: open_bound(&cfg.iface, 0)?,
            slab: Slab::new(cfg.batch.min(4096)),
        })
    }

    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends messages `from..to`; returns how many the kernel took (0 when its queue is full).
    fn send_range(&mut self, from: usize, to: usize) -> io::Result<usize> {
        let msgs = self.slab.msgs[from..].as_mut_ptr();
        // SAFETY: messages from..to were pointed at live frames of `bufs` by `point`.
        let rc = stages::call(Stage::Enqueue, Stage::Kick, || unsafe {
            libc::sendmmsg(self.fd.as_raw_fd(), msgs, (to - from) as u32, 0)
        });
        if rc >= 0 {
            return Ok(rc as usize);
        }
        let err = io::Error::last_os_error();
        if is_transient(&err) {
            return Ok(0);
        }
        Err(err)
    }
}

impl FrameTx for MmsgTx {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        let n = count.min(self.slab.capacity());
        for i in 0..n {
            // Never past the frame's buffer, whatever `fill` claims.
            let len = fill(i, self.slab.frame_mut(i)).min(MAX_FRAME);
            self.slab.point(i, len);
        }
        let mut sent = 0;
        while sent < n {
            match self.send_range(sent, n)? {
                0 => std::thread::yield_now(),
                k => sent += k,
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub struct MmsgRx {
    fd: OwnedFd,
    slab: Slab,
}

impl MmsgRx {
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let fd = open_bound(&cfg.iface, libc::ETH_P_ALL as u16)?;
        // Our own transmissions would otherwise be looped back to this socket.
        crate::packet_socket::set_option(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &1i32,
        )
        .map_err(|e| anyhow::anyhow!("PACKET_IGNORE_OUTGOING on {}: {e}", cfg.iface))?;
        Ok(MmsgRx {
            fd,
            slab: Slab::new(cfg.batch.min(4096)),
        })
    }
}

impl FrameRx for MmsgRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        // A zero timeout goes straight to the non-blocking recvmmsg.
        if !timeout.is_zero() && !poll_readable(self.fd.as_raw_fd(), timeout)? {
            return Ok(0);
        }
        let n = max.min(self.slab.capacity());
        for i in 0..n {
            self.slab.point(i, MAX_FRAME);
        }
        // SAFETY: the first n messages point at n live MAX_FRAME-sized buffers.
        let rc = stages::call(Stage::Poll, Stage::RxCall, || unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                self.slab.msgs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        });
        if rc < 0 {
            let err = io::Error::last_os_error();
            return if is_transient(&err) { Ok(0) } else { Err(err) };
        }
        let got = rc as usize;
        for i in 0..got {
            let len = self.slab.msgs[i].msg_len as usize;
            on_frame(self.slab.frame(i, len));
        }
        Ok(got)
    }
}
