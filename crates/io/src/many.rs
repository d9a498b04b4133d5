//! Serving several receivers from one thread (e.g. one AF_XDP receiver per queue) so that a busy
//! one cannot starve the others: non-blocking sweeps over all of them, and only when every one
//! came back empty a single `ppoll(2)` over all their descriptors.

use sonde_meter::stages::{self, Stage};
use std::io;
use std::time::Duration;

use std::os::fd::RawFd;

use crate::wake::Wake;
use crate::{AnyRx, FrameRx, RxChecksum};

/// Up to this many receivers are waited on with a pollfd array on the stack; more cost one
/// allocation per wait (only when all of them were idle).
const STACK_FDS: usize = 64;

/// Receives from every receiver of `rxs` in turn and calls `on_frame(i, frame)` for each frame
/// of `rxs[i]`, up to `max_each` frames per receiver. Returns how many frames were handed over.
///
/// First a sweep that does not wait: each receiver hands over what it has (at most `max_each`,
/// so a flooded queue gets its share and no more). Only if every receiver came back empty, one
/// `poll(2)` over all their descriptors waits up to `timeout`, and if any became readable,
/// another sweep follows. So a busy receiver is never waited on while another has frames, and
/// an idle thread still sleeps in the kernel. A zero `timeout` never waits.
///
/// An error of any receiver ends the call with that error; frames already handed to `on_frame`
/// in the same call are then not counted in a return value.
pub fn rx_many<F: FnMut(usize, &[u8])>(
    rxs: &mut [AnyRx],
    max_each: usize,
    timeout: Duration,
    mut on_frame: F,
) -> io::Result<usize> {
    rx_many_stamped(rxs, max_each, timeout, |i, frame, _| on_frame(i, frame))
}

/// [`rx_many`], with the kernel's arrival time of each frame where the backend keeps one (a
/// packet ring stamps every frame, in nanoseconds since the Unix epoch): `on_frame(i, frame,
/// stamp)`. A ring hands frames over a block at a time, milliseconds after they arrived, so
/// what times a reply must read this stamp rather than the clock.
pub fn rx_many_stamped<F: FnMut(usize, &[u8], Option<u64>)>(
    rxs: &mut [AnyRx],
    max_each: usize,
    timeout: Duration,
    mut on_frame: F,
) -> io::Result<usize> {
    rx_many_meta(rxs, max_each, timeout, |i, frame, meta| {
        on_frame(i, frame, meta.stamp_ns)
    })
}

/// What a backend knows of a received frame besides its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// The kernel's arrival time, nanoseconds since the Unix epoch (packet rings, and AF_XDP
    /// behind a reply filter that stamps arrivals).
    pub stamp_ns: Option<u64>,
    /// What the kernel says of the frame's checksums (packet rings).
    pub checksum: RxChecksum,
}

/// [`rx_many`], with what the backend knows of each frame: `on_frame(i, frame, meta)`.
pub fn rx_many_meta<F: FnMut(usize, &[u8], RxMeta)>(
    rxs: &mut [AnyRx],
    max_each: usize,
    timeout: Duration,
    on_frame: F,
) -> io::Result<usize> {
    rx_many_meta_or_wake(rxs, max_each, timeout, None, on_frame)
}

/// [`rx_many_meta`], whose wait also ends when `wake` is notified (then it returns 0; the
/// caller clears `wake` and looks at what it was woken for). With a `wake`, it waits even
/// with no receivers.
pub fn rx_many_meta_or_wake<F: FnMut(usize, &[u8], RxMeta)>(
    rxs: &mut [AnyRx],
    max_each: usize,
    timeout: Duration,
    wake: Option<&Wake>,
    mut on_frame: F,
) -> io::Result<usize> {
    let got = sweep(rxs, max_each, &mut on_frame)?;
    let nothing_to_wait_on = rxs.is_empty() && wake.is_none();
    if got > 0 || nothing_to_wait_on || max_each == 0 || timeout.is_zero() {
        return Ok(got);
    }
    if !wait_readable(rxs, wake.map(Wake::raw_fd), timeout)? {
        return Ok(0);
    }
    sweep(rxs, max_each, &mut on_frame)
}

/// One pass over all receivers without waiting.
fn sweep<F: FnMut(usize, &[u8], RxMeta)>(
    rxs: &mut [AnyRx],
    max_each: usize,
    on_frame: &mut F,
) -> io::Result<usize> {
    let mut got = 0;
    for (i, rx) in rxs.iter_mut().enumerate() {
        got += match rx {
            AnyRx::Ring(ring) => ring.rx_packets(max_each, Duration::ZERO, |p| {
                let meta = RxMeta {
                    stamp_ns: Some(p.ts_ns),
                    checksum: p.checksum,
                };
                on_frame(i, p.data, meta)
            })?,
            AnyRx::Xdp(xdp) => xdp.rx_stamped(max_each, Duration::ZERO, |frame, stamp_ns| {
                let meta = RxMeta {
                    stamp_ns,
                    checksum: RxChecksum::default(),
                };
                on_frame(i, frame, meta)
            })?,
            other => other.rx_batch(max_each, Duration::ZERO, |frame| {
                on_frame(i, frame, RxMeta::default())
            })?,
        };
    }
    Ok(got)
}

/// Waits until one of the receivers' descriptors (or `extra`) is readable (or in error) or
/// `timeout` passes; true if one is. An interrupted wait counts as a timeout.
fn wait_readable(rxs: &[AnyRx], extra: Option<RawFd>, timeout: Duration) -> io::Result<bool> {
    let pollfd = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let wanted = rxs.len() + usize::from(extra.is_some());
    let fds_of = || rxs.iter().map(AnyRx::raw_fd).chain(extra);
    let mut on_stack = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; STACK_FDS];
    let mut on_heap = Vec::new();
    let fds: &mut [libc::pollfd] = if wanted <= STACK_FDS {
        for (slot, fd) in on_stack.iter_mut().zip(fds_of()) {
            *slot = pollfd(fd);
        }
        &mut on_stack[..wanted]
    } else {
        on_heap.extend(fds_of().map(pollfd));
        &mut on_heap
    };
    // ppoll, not poll: a wait of a few hundred microseconds (the pace's next SYN) must not be
    // rounded up to a whole millisecond.
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `fds` is an array of fds.len() initialised pollfds and `timeout` a timespec,
    // both outliving the call; a null signal mask leaves the thread's mask as it is.
    let rc = stages::call(Stage::Poll, Stage::RxCall, || unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &timeout,
            std::ptr::null(),
        )
    });
    if rc >= 0 {
        return Ok(rc > 0);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::Interrupted {
        return Ok(false);
    }
    Err(err)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::mem::{pair, MemPort};
    use crate::FrameTx;

    /// `n` in-memory receivers and the ports that feed them.
    fn receivers(n: usize) -> (Vec<MemPort>, Vec<AnyRx>) {
        (0..n)
            .map(|_| pair(4096))
            .map(|(tx, rx)| (tx, AnyRx::Mem(rx)))
            .unzip()
    }

    /// Queues `count` frames at a receiver, each carrying `tag`.
    fn feed(tx: &mut MemPort, count: usize, tag: u8) {
        let sent = tx
            .tx_batch(count, |_, buf| {
                buf[0] = tag;
                60
            })
            .unwrap();
        assert_eq!(sent, count);
    }

    #[test]
    fn a_flooded_receiver_gets_its_share_and_no_more() {
        let (mut feeders, mut rxs) = receivers(3);
        feed(&mut feeders[0], 1000, 0);
        feed(&mut feeders[2], 3, 2);
        let mut per_rx = [0usize; 3];
        let got = rx_many(&mut rxs, 64, Duration::from_secs(5), |i, frame| {
            assert_eq!(
                usize::from(frame[0]),
                i,
                "a frame reported for the wrong receiver"
            );
            per_rx[i] += 1;
        })
        .unwrap();
        assert_eq!(per_rx, [64, 0, 3], "one sweep: at most 64 each");
        assert_eq!(got, 67);
        // The rest of the flood comes 64 at a time, and the others' new frames with it.
        feed(&mut feeders[1], 1, 1);
        per_rx = [0; 3];
        rx_many(&mut rxs, 64, Duration::ZERO, |i, _| per_rx[i] += 1).unwrap();
        assert_eq!(per_rx, [64, 1, 0]);
    }

    #[test]
    fn a_zero_timeout_returns_at_once_when_all_are_empty() {
        let (_feeders, mut rxs) = receivers(2);
        let got = rx_many(&mut rxs, 64, Duration::ZERO, |_, _| panic!("no frames")).unwrap();
        assert_eq!(got, 0);
        assert_eq!(
            rx_many(&mut [], 64, Duration::from_secs(30), |_, _| ()).unwrap(),
            0
        );
    }

    #[test]
    fn one_wait_covers_every_receiver() {
        let (mut feeders, mut rxs) = receivers(4);
        let mut late = feeders.pop().expect("four feeders");
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            feed(&mut late, 2, 3);
        });
        let start = Instant::now();
        let mut seen = Vec::new();
        let got = rx_many(&mut rxs, 64, Duration::from_secs(30), |i, _| seen.push(i)).unwrap();
        // Not a speed check: a wait that missed the last receiver would only end after 30 s.
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "slept through the frames"
        );
        sender.join().unwrap();
        assert_eq!((got, seen), (2, vec![3, 3]));
    }

    #[test]
    fn one_wait_covers_an_af_xdp_receiver_beside_others() {
        use crate::test_support::{in_private_netns, synack, SCAN4};
        use crate::{FilterSpec, IoConfig, TcpTake, XdpMode};
        in_private_netns(|| {
            let mut cfg = IoConfig::new("lo");
            cfg.xdp_mode = XdpMode::Generic;
            cfg.ring_frames = 64;
            let spec = FilterSpec {
                ipv4: Some(SCAN4),
                ipv6: None,
                tcp: TcpTake::SynAckOrRst,
                udp: false,
                icmp: false,
                icmp6: false,
                ports: (61000, 65535),
                echo_id: None,
                spare_host_sockets: true,
                stamp_arrivals: false,
            };
            let xdp = crate::xdp::XdpRx::open_filtered(&cfg, &spec).unwrap();
            let filter = xdp.filter();
            let (_feeder, mem) = pair(8);
            let mut rxs = vec![AnyRx::Mem(mem), AnyRx::Xdp(Box::new(xdp))];
            // The injecting thread starts in this thread's namespace, where the socket's lo is.
            let injector = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                filter.inject(&synack(SCAN4, 62000), 5).unwrap();
            });
            let start = Instant::now();
            let mut seen = Vec::new();
            let mut got = 0;
            while got < 5 && start.elapsed() < Duration::from_secs(15) {
                got += rx_many(&mut rxs, 64, Duration::from_secs(30), |i, _| seen.push(i)).unwrap();
            }
            // Not a speed check: a wait that missed the AF_XDP socket would last 30 s.
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "slept through the frames"
            );
            injector.join().unwrap();
            assert_eq!((got, seen), (5, vec![1; 5]));
        });
    }

    #[test]
    fn one_wait_covers_packet_sockets_and_libpcap() {
        use crate::test_support::in_private_netns;
        use crate::{AnyTx, BackendKind, IoConfig};
        in_private_netns(|| {
            let cfg = IoConfig::new("lo");
            let kinds = [BackendKind::Ring, BackendKind::Mmsg, BackendKind::Pcap];
            let mut rxs: Vec<AnyRx> = kinds
                .iter()
                .map(|&kind| {
                    let mut rx = AnyRx::open(kind, &cfg).unwrap();
                    rx.set_filter("ether proto 0x88b5").unwrap();
                    rx
                })
                .collect();
            let mut tx = AnyTx::open(BackendKind::Mmsg, &cfg).unwrap();
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                // One frame on lo, of an experimental ethertype no stack looks at.
                tx.tx_batch(1, |_, buf| {
                    buf[..14].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xb5]);
                    60
                })
                .unwrap()
            });
            let start = Instant::now();
            let mut seen = Vec::new();
            while seen.len() < kinds.len() && start.elapsed() < Duration::from_secs(15) {
                rx_many(&mut rxs, 64, Duration::from_secs(30), |i, _| seen.push(i)).unwrap();
            }
            // Not a speed check: a wait that missed a receiver would last 30 s.
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "slept through the frame"
            );
            assert_eq!(sender.join().unwrap(), 1);
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1, 2], "each receiver gets the frame once");
        });
    }

    #[test]
    fn an_idle_wait_times_out_empty() {
        let (_feeders, mut rxs) = receivers(2);
        let start = Instant::now();
        let got = rx_many(&mut rxs, 64, Duration::from_millis(30), |_, _| ()).unwrap();
        assert_eq!(got, 0);
        assert!(start.elapsed() >= Duration::from_millis(30), "did not wait");
    }

    // The wake itself (wake.rs), tested through the wait it ends.
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
