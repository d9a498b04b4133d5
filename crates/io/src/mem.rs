//! An in-process port pair for unit tests: what one end transmits, the other receives.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{FrameRx, FrameTx, MAX_FRAME};

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

/// One end of an in-memory link.
pub struct MemPort {
    outbox: Queue,
    inbox: Queue,
    capacity: usize,
    scratch: Box<[u8; MAX_FRAME]>,
}

/// Two connected ports; each queue holds at most `capacity` frames (a full queue accepts none,
/// like a full ring).
pub fn pair(capacity: usize) -> (MemPort, MemPort) {
    let a: Queue = Arc::default();
    let b: Queue = Arc::default();
    let port = |outbox: &Queue, inbox: &Queue| MemPort {
        outbox: outbox.clone(),
        inbox: inbox.clone(),
        capacity: capacity.max(1),
        scratch: Box::new([0; MAX_FRAME]),
    };
    (port(&a, &b), port(&b, &a))
}

impl FrameTx for MemPort {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        // One lock per batch, never per frame.
        let mut out = self
            .outbox
            .lock()
            .map_err(|_| io::Error::other("mem queue poisoned"))?;
        let n = count.min(self.capacity - out.len().min(self.capacity));
        for i in 0..n {
            let len = fill(i, &mut self.scratch[..]).min(MAX_FRAME);
            out.push_back(self.scratch[..len].to_vec());
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
            {
                let mut inbox = self
                    .inbox
                    .lock()
                    .map_err(|_| io::Error::other("mem queue poisoned"))?;
                let n = max.min(inbox.len());
                if n > 0 || Instant::now() >= deadline {
                    for frame in inbox.drain(..n) {
                        on_frame(&frame);
                    }
                    return Ok(n);
                }
            }
            std::thread::sleep(Duration::from_micros(100));
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
}
