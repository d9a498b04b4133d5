//! AF_PACKET with TPACKET_V3 memory-mapped rings: frames are written into (and read from) pages
//! shared with the kernel, so one `send(2)` hands over a whole batch and receiving needs no
//! system call while blocks are full. Transmit bypasses the qdisc layer (`PACKET_QDISC_BYPASS`).

use sonde_meter::stages::{self, Stage};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use crate::packet_socket::{is_transient, open_bound, poll_readable, set_option};
use crate::{FrameRx, FrameTx, IoConfig, MAX_FRAME};

const TX_FRAME_SIZE: usize = 2048;
/// Where frame data starts in a TX slot: after the aligned tpacket3_hdr (the kernel's
/// `tp_hdrlen - sizeof(struct sockaddr_ll)`).
const TX_DATA_OFFSET: usize = libc::TPACKET3_HDRLEN - size_of::<libc::sockaddr_ll>();
const RX_BLOCK_SIZE: usize = 1 << 20;
const RX_BLOCKS: usize = 16;
/// A partly filled receive block is handed to user space after this many milliseconds.
const RX_BLOCK_TIMEOUT_MS: u32 = 2;

/// A shared mapping of a packet ring, unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by one value and only touched through it; moving it between
// threads does not change what the kernel shares with us.
unsafe impl Send for Mapping {}

impl Mapping {
    pub(crate) fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: mapping a packet socket's ring of exactly the size configured on it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: NonNull::new(ptr.cast()).expect("mmap returned NULL"),
            len,
        })
    }

    /// The status word at `offset` (the kernel and we hand slots back and forth through it).
    pub(crate) fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= self.len);
        // SAFETY: offset is a slot/block header inside the mapping, 4-byte aligned; the kernel
        // only accesses the word atomically too.
        unsafe { &*(self.base.as_ptr().add(offset) as *const AtomicU32) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned and nothing borrows them any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Sets the packet ring version of `fd` (before its ring is configured).
pub(crate) fn set_version(
    fd: &OwnedFd,
    version: libc::tpacket_versions,
    name: &str,
) -> anyhow::Result<()> {
    set_option(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        libc::PACKET_VERSION,
        &(version as i32),
    )
    .map_err(|e| anyhow!("the kernel refused {name} ({e}); try --backend mmsg"))
}

/// A receive socket sees only what arrives, not what this host sends on `iface`.
pub(crate) fn ignore_outgoing(fd: &OwnedFd, iface: &str) -> anyhow::Result<()> {
    set_option(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        libc::PACKET_IGNORE_OUTGOING,
        &1i32,
    )
    .map_err(|e| anyhow!("PACKET_IGNORE_OUTGOING on {iface}: {e}"))
}

pub struct RingTx {
    fd: OwnedFd,
    map: Mapping,
    slots: usize,
    head: usize,
}

impl RingTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let fd = open_bound(&cfg.iface, 0)?;
        set_version(&fd, libc::tpacket_versions::TPACKET_V3, "TPACKET_V3")?;
        set_option(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            &1i32,
        )
        .map_err(|e| anyhow!("the kernel refused PACKET_QDISC_BYPASS ({e}); try --backend mmsg"))?;
        let slots = cfg.ring_frames.max(64).next_power_of_two() as usize;
        let block_size = 1 << 16;
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: (slots * TX_FRAME_SIZE / block_size).max(1) as u32,
            tp_frame_size: TX_FRAME_SIZE as u32,
            tp_frame_nr: slots as u32,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_TX_RING, &req).map_err(|e| {
            anyhow!(
                "the kernel refused a TPACKET_V3 tx ring on {} ({e}); try --backend mmsg",
                cfg.iface
            )
        })?;
        let map = Mapping::new(&fd, slots * TX_FRAME_SIZE).context("mapping the tx ring")?;
        Ok(RingTx {
            fd,
            map,
            slots,
            head: 0,
        })
    }

    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    fn slot_offset(&self, index: usize) -> usize {
        index * TX_FRAME_SIZE
    }

    fn slot_is_free(&self, index: usize) -> bool {
        let status = self
            .map
            .status(self.slot_offset(index) + STATUS_FIELD)
            .load(Ordering::Acquire);
        status == libc::TP_STATUS_AVAILABLE || status & libc::TP_STATUS_WRONG_FORMAT != 0
    }

    /// Asks the kernel to transmit every slot marked SEND_REQUEST.
    fn kick(&self) -> io::Result<()> {
        // SAFETY: a zero-length send on a TX-ring socket only triggers ring processing.
        let rc = stages::call(Stage::Enqueue, Stage::Kick, || unsafe {
            libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT)
        });
        if rc < 0 {
            let err = io::Error::last_os_error();
            if !is_transient(&err) {
                return Err(err);
            }
        }
        Ok(())
    }

    /// Writes one frame into slot `index` and marks it for sending.
    fn post<F: FnMut(usize, &mut [u8]) -> usize>(&mut self, index: usize, i: usize, fill: &mut F) {
        let offset = self.slot_offset(index);
        // SAFETY: the slot is free (checked by the caller), so the kernel does not touch its
        // data until we set SEND_REQUEST below; the range lies inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts_mut(
                self.map.base.as_ptr().add(offset + TX_DATA_OFFSET),
                MAX_FRAME,
            )
        };
        let len = fill(i, data).min(MAX_FRAME) as u32;
        // SAFETY: the slot header lies at the start of the slot inside the mapping.
        let hdr = unsafe { &mut *(self.map.base.as_ptr().add(offset) as *mut libc::tpacket3_hdr) };
        hdr.tp_len = len;
        hdr.tp_snaplen = len;
        hdr.tp_next_offset = 0;
        self.map
            .status(offset + STATUS_FIELD)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }
}

/// Offset of `tp_status` inside a tpacket3_hdr.
const STATUS_FIELD: usize = std::mem::offset_of!(libc::tpacket3_hdr, tp_status);

impl FrameTx for RingTx {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        let mut posted = 0;
        while posted < count {
            let index = self.head;
            if !self.slot_is_free(index) {
                if posted > 0 {
                    break;
                }
                // The ring is full: push what is queued and let the caller come back.
                self.kick()?;
                return Ok(0);
            }
            self.post(index, posted, &mut fill);
            self.head = (index + 1) & (self.slots - 1);
            posted += 1;
        }
        self.kick()?;
        Ok(posted)
    }

    fn flush(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(2);
        while (0..self.slots).any(|i| !self.slot_is_free(i)) && Instant::now() < deadline {
            self.kick()?;
            std::thread::yield_now();
        }
        Ok(())
    }
}

pub struct RingRx {
    fd: OwnedFd,
    map: Mapping,
    block: usize,
    /// Packets left to read in the current block, and the offset of the next one.
    left_in_block: u32,
    next_offset: usize,
}

impl RingRx {
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let fd = open_bound(&cfg.iface, libc::ETH_P_ALL as u16)?;
        set_version(&fd, libc::tpacket_versions::TPACKET_V3, "TPACKET_V3")?;
        ignore_outgoing(&fd, &cfg.iface)?;
        let req = libc::tpacket_req3 {
            tp_block_size: RX_BLOCK_SIZE as u32,
            tp_block_nr: RX_BLOCKS as u32,
            tp_frame_size: TX_FRAME_SIZE as u32,
            tp_frame_nr: (RX_BLOCK_SIZE * RX_BLOCKS / TX_FRAME_SIZE) as u32,
            tp_retire_blk_tov: RX_BLOCK_TIMEOUT_MS,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(|e| {
            anyhow!(
                "the kernel refused a TPACKET_V3 rx ring on {} ({e}); try --backend mmsg",
                cfg.iface
            )
        })?;
        let map = Mapping::new(&fd, RX_BLOCK_SIZE * RX_BLOCKS).context("mapping the rx ring")?;
        Ok(RingRx {
            fd,
            map,
            block: 0,
            left_in_block: 0,
            next_offset: 0,
        })
    }

    fn block_desc(&self) -> &libc::tpacket_block_desc {
        // SAFETY: block descriptors sit at the start of each block inside the mapping.
        unsafe {
            &*(self.map.base.as_ptr().add(self.block * RX_BLOCK_SIZE)
                as *const libc::tpacket_block_desc)
        }
    }

    fn block_status(&self) -> &AtomicU32 {
        self.map
            .status(self.block * RX_BLOCK_SIZE + BLOCK_STATUS_FIELD)
    }

    /// Opens the current block if the kernel has handed it to us; false if it has not.
    fn open_block(&mut self) -> bool {
        if self.block_status().load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return false;
        }
        // SAFETY: the block is ours (TP_STATUS_USER), so reading its header is race-free.
        let h1 = unsafe { self.block_desc().hdr.bh1 };
        self.left_in_block = h1.num_pkts;
        self.next_offset = self.block * RX_BLOCK_SIZE + h1.offset_to_first_pkt as usize;
        if self.left_in_block == 0 {
            self.release_block();
            return false;
        }
        true
    }

    fn release_block(&mut self) {
        self.block_status()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % RX_BLOCKS;
    }

    /// Reads the next packet of the open block.
    fn next_packet<F: FnMut(&[u8])>(&mut self, on_frame: &mut F) {
        let block_end = (self.block + 1) * RX_BLOCK_SIZE;
        // SAFETY: the kernel wrote a tpacket3_hdr at next_offset inside this user-owned block.
        let hdr = unsafe {
            &*(self.map.base.as_ptr().add(self.next_offset) as *const libc::tpacket3_hdr)
        };
        let start = self.next_offset + hdr.tp_mac as usize;
        let len = (hdr.tp_snaplen as usize).min(block_end.saturating_sub(start));
        // SAFETY: start..start+len is clamped to the current block, which we own.
        let frame = unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().add(start), len) };
        on_frame(frame);
        self.next_offset += hdr.tp_next_offset as usize;
        self.left_in_block -= 1;
        if self.left_in_block == 0 || self.next_offset >= block_end {
            self.left_in_block = 0;
            self.release_block();
        }
    }
}

/// Offset of `block_status` inside a tpacket_block_desc.
const BLOCK_STATUS_FIELD: usize = std::mem::offset_of!(libc::tpacket_block_desc, hdr);

impl FrameRx for RingRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let mut got = 0;
        while got < max {
            let ready = self.left_in_block > 0 || self.open_block();
            // Wait for the kernel only while nothing has been read yet (and never for a zero
            // timeout: then no system call is made at all).
            if !ready
                && (got > 0
                    || timeout.is_zero()
                    || !poll_readable(self.fd.as_raw_fd(), timeout)?
                    || !self.open_block())
            {
                break;
            }
            self.next_packet(&mut on_frame);
            got += 1;
        }
        Ok(got)
    }
}
