//! AF_PACKET with a TPACKET_V2 receive ring: one status word per frame, so each frame is
//! user space's the moment the kernel has copied it. The block-based TPACKET_V3 ring
//! ([`crate::ring`]) hands over a block only when it is full or its timer (2 ms) fires, which is
//! right for throughput and wrong for a round-trip measurement, where one frame waiting for
//! its block's timer would add milliseconds to a 20 µs round trip.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{anyhow, Context};

use crate::packet_socket::{open_bound, poll_readable, set_option};
use crate::ring::{ignore_outgoing, set_version, Mapping};
use crate::{FrameRx, IoConfig};

/// Each slot holds the tpacket2_hdr, the sockaddr_ll and a full frame.
const FRAME_SIZE: usize = 2048;
const BLOCK_SIZE: usize = 1 << 16;
const BLOCKS: usize = 64;
const FRAMES: usize = BLOCK_SIZE / FRAME_SIZE * BLOCKS;

/// Offset of `tp_status` inside a tpacket2_hdr.
const STATUS_FIELD: usize = std::mem::offset_of!(libc::tpacket2_hdr, tp_status);

pub struct RingFrameRx {
    fd: OwnedFd,
    map: Mapping,
    next: usize,
}

impl RingFrameRx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let fd = open_bound(&cfg.iface, libc::ETH_P_ALL as u16)?;
        set_version(&fd, libc::tpacket_versions::TPACKET_V2, "TPACKET_V2")?;
        ignore_outgoing(&fd, &cfg.iface)?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: FRAME_SIZE as u32,
            tp_frame_nr: FRAMES as u32,
        };
        set_option(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(|e| {
            anyhow!(
                "the kernel refused a TPACKET_V2 rx ring on {} ({e}); try --backend mmsg",
                cfg.iface
            )
        })?;
        let map =
            Mapping::new(&fd, BLOCK_SIZE * BLOCKS).context("mapping the per-frame rx ring")?;
        Ok(RingFrameRx { fd, map, next: 0 })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Frames tile the blocks exactly (FRAME_SIZE divides BLOCK_SIZE), so slot i is at i·size.
    fn slot_offset(&self, index: usize) -> usize {
        index * FRAME_SIZE
    }

    fn is_ours(&self, index: usize) -> bool {
        let status = self
            .map
            .status(self.slot_offset(index) + STATUS_FIELD)
            .load(Ordering::Acquire);
        status & libc::TP_STATUS_USER != 0
    }

    /// Passes the frame in slot `self.next` to `on_frame` and gives the slot back.
    fn take<F: FnMut(&[u8])>(&mut self, on_frame: &mut F) {
        let offset = self.slot_offset(self.next);
        // SAFETY: the slot is ours (TP_STATUS_USER, checked by the caller): the kernel wrote a
        // tpacket2_hdr at its start and does not touch the slot until we hand it back.
        let hdr = unsafe { &*(self.map.base.as_ptr().add(offset) as *const libc::tpacket2_hdr) };
        let start = offset + hdr.tp_mac as usize;
        let slot_end = offset + FRAME_SIZE;
        let len = (hdr.tp_snaplen as usize).min(slot_end.saturating_sub(start));
        // SAFETY: start..start+len is clamped to this slot, which we own until it is released.
        let frame = unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().add(start), len) };
        on_frame(frame);
        self.map
            .status(offset + STATUS_FIELD)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % FRAMES;
    }
}

impl FrameRx for RingFrameRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let mut got = 0;
        while got < max {
            if !self.is_ours(self.next)
                && (got > 0
                    || timeout.is_zero()
                    || !poll_readable(self.fd.as_raw_fd(), timeout)?
                    || !self.is_ours(self.next))
            {
                break;
            }
            self.take(&mut on_frame);
            got += 1;
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::test_support::in_private_netns;
    use crate::{AnyRx, AnyTx, BackendKind, FrameTx};

    const EXPERIMENTAL: u16 = 0x88b5;

    fn frame(buf: &mut [u8], n: u32) -> usize {
        buf[..12].fill(0x02);
        buf[12..14].copy_from_slice(&EXPERIMENTAL.to_be_bytes());
        buf[14..18].copy_from_slice(&n.to_be_bytes());
        buf[18..60].fill(0xab);
        60
    }

    #[test]
    fn every_frame_arrives_in_order_without_waiting_for_a_block_and_the_ring_wraps() {
        in_private_netns(|| {
            let mut cfg = IoConfig::new("lo");
            cfg.ring_frames = 256;
            let mut rx = AnyRx::open_per_frame(&cfg).unwrap();
            rx.set_filter(&format!("ether proto {EXPERIMENTAL}"))
                .unwrap();
            let mut tx = AnyTx::open(BackendKind::Ring, &cfg).unwrap();
            // More frames than the ring has slots, in bursts the ring can hold.
            let total = FRAMES as u32 + 300;
            let (mut sent, mut seen) = (0u32, Vec::new());
            let end = Instant::now() + Duration::from_secs(10);
            while seen.len() < total as usize && Instant::now() < end {
                if sent < total && sent as usize <= seen.len() {
                    let n = (total - sent).min(64) as usize;
                    sent += tx
                        .tx_batch(n, |i, buf| frame(buf, sent + i as u32))
                        .unwrap() as u32;
                }
                // A zero timeout never waits: each frame must be there as soon as it was sent.
                rx.rx_batch(64, Duration::ZERO, |f| {
                    assert_eq!(f.len(), 60);
                    seen.push(u32::from_be_bytes(f[14..18].try_into().unwrap()));
                })
                .unwrap();
            }
            let want: Vec<u32> = (0..total).collect();
            assert!(
                seen == want,
                "got {} frames, not 0..{total} in order",
                seen.len()
            );
        });
    }
}
