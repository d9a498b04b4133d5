//! A wake-up another thread can send to one that sleeps in a receive: an `eventfd(2)` that
//! the sleeper polls beside its receivers' descriptors (grab's threads hand each other frames
//! through memory rings, and wake the owner only when it sleeps).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

/// One thread's wake-up: any thread may [`Wake::notify`]; the owner polls [`Wake::raw_fd`]
/// and [`Wake::clear`]s it after waking.
#[derive(Debug)]
pub struct Wake {
    fd: File,
}

impl Wake {
    pub fn new() -> io::Result<Wake> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Wake {
            fd: unsafe { File::from_raw_fd(fd) },
        })
    }

    /// Makes the descriptor readable (a no-op when it already is: the counter only grows).
    pub fn notify(&self) {
        // An eventfd write fails only when its counter would overflow: it is readable then.
        let _ = (&self.fd).write(&1u64.to_ne_bytes());
    }

    /// Makes the descriptor unreadable again; true if it was readable (a notify came since the
    /// last clear).
    pub fn clear(&self) -> bool {
        let mut count = [0u8; 8];
        // Non-blocking: an unread counter reads as WouldBlock.
        matches!((&self.fd).read(&mut count), Ok(8))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_clear_says_whether_a_notify_came() {
        let wake = Wake::new().unwrap();
        assert!(!wake.clear(), "nothing notified yet");
        wake.notify();
        wake.notify();
        assert!(wake.clear(), "two notifies read as one");
        assert!(!wake.clear(), "cleared");
    }
}
