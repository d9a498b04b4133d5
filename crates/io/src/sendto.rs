//! The baseline: one `send(2)` per frame on a bound AF_PACKET socket, the per-packet system call
//! path that batching backends are measured against.

use sonde_meter::stages::{self, Stage};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::packet_socket::{is_transient, open_bound};
use crate::{FrameTx, IoConfig, MAX_FRAME};

pub struct SendtoTx {
    fd: OwnedFd,
    buf: Box<[u8; MAX_FRAME]>,
}

impl SendtoTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        Ok(SendtoTx {
            fd: open_bound(&cfg.iface, 0)?,
            buf: Box::new([0; MAX_FRAME]),
        })
    }

    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    fn send_one(&mut self, len: usize) -> io::Result<bool> {
        let len = len.min(MAX_FRAME);
        // SAFETY: `buf` is valid for `len` ≤ MAX_FRAME bytes; the socket is bound, so no address.
        let rc = stages::call(Stage::Enqueue, Stage::Kick, || unsafe {
            libc::send(self.fd.as_raw_fd(), self.buf.as_ptr().cast(), len, 0)
        });
        if rc >= 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        if is_transient(&err) {
            return Ok(false);
        }
        Err(err)
    }
}

impl FrameTx for SendtoTx {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        for i in 0..count {
            // Never past the buffer, whatever `fill` claims.
            let len = fill(i, &mut self.buf[..]).min(MAX_FRAME);
            // A frame that was filled has been accepted: retry it until the kernel takes it.
            while !self.send_one(len)? {
                std::thread::yield_now();
            }
        }
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
