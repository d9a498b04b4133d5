//! An in-process port pair for unit tests: what one end transmits, the other receives.
//!
//! Each direction is a queue plus an eventfd that is readable exactly while the queue holds
//! frames, so a receiving end can be waited on with `poll(2)` beside real sockets (see
//! [`crate::rx_many`]).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::packet_socket::poll_readable;
use crate::{FrameRx, FrameTx, MAX_FRAME};

/// One direction of the link.
struct Queue {
    frames: Mutex<VecDeque<Vec<u8>>>,
    /// Readable (count > 0) exactly while `frames` is not empty; both change under its lock.
    ready: OwnedFd,
}

impl Queue {
    fn new() -> io::Result<Queue> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Queue {
            frames: Mutex::default(),
            // SAFETY: `fd` was just returned by eventfd and nothing else owns it.
            ready: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, VecDeque<Vec<u8>>>> {
        self.frames
            .lock()
            .map_err(|_| io::Error::other("mem queue poisoned"))
    }

    /// Marks the queue readable (call with the lock held, when it stops being empty).
    fn signal(&self) -> io::Result<()> {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let rc = unsafe { libc::write(self.ready.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Marks the queue not readable (call with the lock held, when it becomes empty).
    fn clear(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd; EAGAIN (already
        // clear) is fine.
        unsafe { libc::read(self.ready.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}

/// One end of an in-memory link.
pub struct MemPort {
    outbox: Arc<Queue>,
    inbox: Arc<Queue>,
    capacity: usize,
    scratch: Box<[u8; MAX_FRAME]>,
}

/// Two connected ports; each queue holds at most `capacity` frames (a full queue accepts none,
/// like a full ring).
///
/// # Panics
/// If the process is out of file descriptors (each pair holds two eventfds).
pub fn pair(capacity: usize) -> (MemPort, MemPort) {
    let queue = || Arc::new(Queue::new().expect("an eventfd for an in-memory queue"));
    let (a, b) = (queue(), queue());
    let port = |outbox: &Arc<Queue>, inbox: &Arc<Queue>| MemPort {
        outbox: outbox.clone(),
        inbox: inbox.clone(),
        capacity: capacity.max(1),
        scratch: Box::new([0; MAX_FRAME]),
    };
    (port(&a, &b), port(&b, &a))
}

impl MemPort {
    /// The descriptor that is readable while frames wait to be received at this end.
    pub fn raw_fd(&self) -> RawFd {
        self.inbox.ready.as_raw_fd()
    }

    /// Another handle on this same end: what it sends goes where this end's frames go, and it
    /// receives what this end receives. So one end can be both the transmit queue and the
    /// receive queue of a run loop (an `AnyTx::Mem` and an `AnyRx::Mem`), as a backend's are.
    pub fn another_handle(&self) -> MemPort {
        MemPort {
            outbox: self.outbox.clone(),
            inbox: self.inbox.clone(),
            capacity: self.capacity,
            scratch: Box::new([0; MAX_FRAME]),
        }
    }

    /// Hands up to `max` waiting frames to `on_frame`, without waiting.
    fn take<F: FnMut(&[u8])>(&mut self, max: usize, on_frame: &mut F) -> io::Result<usize> {
        let mut inbox = self.inbox.lock()?;
        let n = max.min(inbox.len());
        for frame in inbox.drain(..n) {
            on_frame(&frame);
        }
        if n > 0 && inbox.is_empty() {
            self.inbox.clear();
        }
        Ok(n)
    }
}

impl FrameTx for MemPort {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        // One lock per batch, never per frame.
        let mut out = self.outbox.lock()?;
        let was_empty = out.is_empty();
        let n = count.min(self.capacity - out.len().min(self.capacity));
        for i in 0..n {
            let len = fill(i, &mut self.scratch[..]).min(MAX_FRAME);
            out.push_back(self.scratch[..len].to_vec());
        }
        if was_empty && n > 0 {
            self.outbox.signal()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl FrameRx for MemPort {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.take(max, &mut on_frame)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if n > 0 || max == 0 || left.is_zero() {
                return Ok(n);
            }
            poll_readable(self.raw_fd(), left)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_cross_in_order_and_full_queue_refuses() {
        let (mut a, mut b) = pair(3);
        let sent = a.tx_batch(5, |i, buf| {
            buf[0] = i as u8;
            60
        });
        assert_eq!(sent.unwrap(), 3, "a queue of 3 takes 3 frames");
        let mut seen = Vec::new();
        let got = b
            .rx_batch(10, Duration::ZERO, |f| seen.push((f[0], f.len())))
            .unwrap();
        assert_eq!(got, 3);
        assert_eq!(seen, vec![(0, 60), (1, 60), (2, 60)]);
        assert_eq!(b.rx_batch(10, Duration::from_millis(1), |_| ()).unwrap(), 0);
    }

    #[test]
    fn the_descriptor_is_readable_exactly_while_frames_wait() {
        let (mut a, mut b) = pair(8);
        let readable = |p: &MemPort| poll_readable(p.raw_fd(), Duration::ZERO).unwrap();
        assert!(!readable(&b));
        a.tx_batch(3, |_, _| 60).unwrap();
        assert!(readable(&b));
        assert!(!readable(&a), "the other direction stays quiet");
        assert_eq!(b.rx_batch(2, Duration::ZERO, |_| ()).unwrap(), 2);
        assert!(readable(&b), "one frame still waits");
        a.tx_batch(1, |_, _| 60).unwrap();
        assert_eq!(b.rx_batch(8, Duration::ZERO, |_| ()).unwrap(), 2);
        assert!(!readable(&b));
    }

    #[test]
    fn another_handle_sends_and_receives_as_its_end() {
        let (a, mut b) = pair(8);
        let (mut a_tx, mut a_rx) = (a.another_handle(), a);
        a_tx.tx_batch(1, |_, buf| {
            buf[0] = 1;
            60
        })
        .unwrap();
        b.tx_batch(1, |_, buf| {
            buf[0] = 2;
            60
        })
        .unwrap();
        let mut at_b = Vec::new();
        b.rx_batch(8, Duration::ZERO, |f| at_b.push(f[0])).unwrap();
        let mut at_a = Vec::new();
        a_rx.rx_batch(8, Duration::ZERO, |f| at_a.push(f[0]))
            .unwrap();
        assert_eq!((at_a, at_b), (vec![2], vec![1]));
    }

    #[test]
    fn a_waiting_receiver_wakes_for_a_frame_from_another_thread() {
        let (mut a, mut b) = pair(8);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            a.tx_batch(1, |_, buf| {
                buf[0] = 7;
                1
            })
            .unwrap()
        });
        let mut seen = Vec::new();
        let start = Instant::now();
        let got = b
            .rx_batch(8, Duration::from_secs(30), |f| seen.push(f.to_vec()))
            .unwrap();
        // Not a speed check: a receiver that never woke would return only after 30 s.
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "slept through the frame"
        );
        assert_eq!(sender.join().unwrap(), 1);
        assert_eq!((got, seen), (1, vec![vec![7]]));
    }
}
