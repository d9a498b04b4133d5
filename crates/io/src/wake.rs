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

    /// Makes the descriptor unreadable again.
    pub fn clear(&self) {
        let mut count = [0u8; 8];
        let _ = (&self.fd).read(&mut count);
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::many::rx_many_meta_or_wake;
    use std::time::{Duration, Instant};

    #[test]
    fn a_notify_from_another_thread_ends_a_wait_and_clear_rearms_it() {
        let wake = std::sync::Arc::new(Wake::new().unwrap());
        let other = wake.clone();
        let start = Instant::now();
        let notifier = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.notify();
        });
        let got = rx_many_meta_or_wake(
            &mut [],
            64,
            Duration::from_secs(10),
            Some(&wake),
            |_, _, _| {},
        )
        .unwrap();
        notifier.join().unwrap();
        assert_eq!(got, 0);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the notify ended the wait"
        );
        wake.clear();
        let start = Instant::now();
        rx_many_meta_or_wake(
            &mut [],
            64,
            Duration::from_millis(100),
            Some(&wake),
            |_, _, _| {},
        )
        .unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "cleared: the wait ran its time"
        );
    }
}
