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
use crate::{FrameRx, FrameTx, IoConfig, RxChecksum, MAX_FRAME};

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

/// Joins the flow-hash `PACKET_FANOUT` group `group`. Done after the ring exists, so no frame
/// is ever handed to a member without one.
fn join_fanout(fd: &OwnedFd, iface: &str, group: u16) -> anyhow::Result<()> {
    let arg = u32::from(group) | (u32::from(libc::PACKET_FANOUT_HASH as u16) << 16);
    set_option(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
        .map_err(|e| anyhow!("PACKET_FANOUT group {group} on {iface}: {e}"))
}

/// A forwarding ring's blocks: small, so one fills (and reaches user space) after a few dozen
/// full-size frames rather than hundreds.
const FORWARD_BLOCK_SIZE: usize = 1 << 13;
const FORWARD_BLOCKS: usize = 1024;

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

    /// Lends the next free slot to `fill`, which writes a frame into it and returns its length,
    /// or `None` to leave the slot unused. Nothing is sent until [`RingTx::send_posted`].
    /// Returns `Ok(false)` when every slot is still waiting for the kernel.
    pub fn fill_next(&mut self, fill: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        let index = self.head;
        if !self.slot_is_free(index) {
            return false;
        }
        let offset = self.slot_offset(index);
        // SAFETY: the slot is free, so the kernel does not touch its data until we set
        // SEND_REQUEST below; the range lies inside the mapping.
        let data = unsafe {
            std::slice::from_raw_parts_mut(
                self.map.base.as_ptr().add(offset + TX_DATA_OFFSET),
                TX_FRAME_SIZE - TX_DATA_OFFSET,
            )
        };
        let Some(len) = fill(data) else {
            return true;
        };
        self.request_send(offset, len.min(TX_FRAME_SIZE - TX_DATA_OFFSET) as u32);
        self.head = (index + 1) & (self.slots - 1);
        true
    }

    /// Sets the length of the frame written into the slot at `offset` and hands the slot to
    /// the kernel for sending.
    fn request_send(&mut self, offset: usize, len: u32) {
        // SAFETY: the slot header lies at the start of the slot inside the mapping, and the
        // slot is ours until SEND_REQUEST is stored below.
        let hdr = unsafe { &mut *(self.map.base.as_ptr().add(offset) as *mut libc::tpacket3_hdr) };
        hdr.tp_len = len;
        hdr.tp_snaplen = len;
        hdr.tp_next_offset = 0;
        self.map
            .status(offset + STATUS_FIELD)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }

    /// Sends every frame [`RingTx::fill_next`] posted, with one system call.
    pub fn send_posted(&self) -> io::Result<()> {
        self.kick()
    }

    /// The largest frame a slot holds.
    pub const SLOT_BYTES: usize = TX_FRAME_SIZE - TX_DATA_OFFSET;

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
        self.request_send(offset, len);
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
    block_size: usize,
    blocks: usize,
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
        Self::with_ring(
            fd,
            &cfg.iface,
            RX_BLOCK_SIZE,
            RX_BLOCKS,
            RX_BLOCK_TIMEOUT_MS,
        )
    }

    /// Opens a receive ring for capturing: both directions (what the host sends on `iface` as
    /// well as what arrives, as tcpdump sees them), a ring of `options.ring_bytes`, nanosecond
    /// timestamps (from the NIC where it stamps received frames, from the kernel otherwise), and
    /// optionally a member of a `PACKET_FANOUT` group that spreads flows over several rings by
    /// flow hash. Read it with [`RingRx::rx_packets`].
    ///
    /// The socket starts with a filter that rejects every frame, attached before it is bound to
    /// the interface, so nothing reaches the ring until the caller attaches the capture's own
    /// filter ([`crate::filter::attach`], which replaces it at once): no frame the expression
    /// excludes is ever in the ring, not even one that arrived while the ring was set up.
    pub fn open_capture(iface: &str, options: &CaptureRing) -> anyhow::Result<Self> {
        crate::packet_socket::ifindex(iface)?;
        let fd = crate::packet_socket::open_unbound(0)?;
        crate::filter::attach(fd.as_raw_fd(), &crate::filter::reject_all())?;
        set_version(&fd, libc::tpacket_versions::TPACKET_V3, "TPACKET_V3")?;
        // Ask for hardware receive stamps; the kernel falls back to its own where the NIC has
        // none, and each packet's status says which it got. A refusal only means software.
        let _ = set_option(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_TIMESTAMP,
            &(libc::SOF_TIMESTAMPING_RAW_HARDWARE as i32),
        );
        let blocks = (options.ring_bytes / RX_BLOCK_SIZE).max(2);
        let ring = Self::with_ring(fd, iface, RX_BLOCK_SIZE, blocks, options.block_timeout_ms)?;
        crate::packet_socket::bind(&ring.fd, iface, libc::ETH_P_ALL as u16)?;
        // The kernel takes a socket into a fanout group only once it is bound.
        if let Some(group) = options.fanout_group {
            join_fanout(&ring.fd, iface, group)?;
        }
        Ok(ring)
    }

    /// Opens a receive ring for forwarding (`sonde intercept bridge`): only what arrives on
    /// `iface` (not what this host, or sonde itself, sends out of it), every frame whatever its
    /// destination MAC (promiscuous while the socket is open), small blocks retired after 1 ms
    /// so a quiet flow's packets are not held back, and optionally a member of a flow-hash
    /// `PACKET_FANOUT` group so each flow stays with one thread.
    pub fn open_forwarding(iface: &str, fanout_group: Option<u16>) -> anyhow::Result<Self> {
        let fd = open_bound(iface, libc::ETH_P_ALL as u16)?;
        set_version(&fd, libc::tpacket_versions::TPACKET_V3, "TPACKET_V3")?;
        ignore_outgoing(&fd, iface)?;
        let promisc = libc::packet_mreq {
            mr_ifindex: crate::packet_socket::ifindex(iface)? as i32,
            mr_type: libc::PACKET_MR_PROMISC as u16,
            mr_alen: 0,
            mr_address: [0; 8],
        };
        set_option(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &promisc,
        )
        .map_err(|e| anyhow!("promiscuous mode on {iface}: {e}"))?;
        let ring = Self::with_ring(fd, iface, FORWARD_BLOCK_SIZE, FORWARD_BLOCKS, 1)?;
        if let Some(group) = fanout_group {
            join_fanout(&ring.fd, iface, group)?;
        }
        Ok(ring)
    }

    fn with_ring(
        fd: OwnedFd,
        iface: &str,
        block_size: usize,
        blocks: usize,
        block_timeout_ms: u32,
    ) -> anyhow::Result<Self> {
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: TX_FRAME_SIZE as u32,
            tp_frame_nr: (block_size * blocks / TX_FRAME_SIZE) as u32,
            tp_retire_blk_tov: block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(fd.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(|e| {
            anyhow!(
                "the kernel refused a TPACKET_V3 rx ring of {} MiB on {iface} ({e}); try a smaller buffer or --backend mmsg",
                (block_size * blocks) >> 20
            )
        })?;
        let map = Mapping::new(&fd, block_size * blocks).context("mapping the rx ring")?;
        Ok(RingRx {
            fd,
            map,
            block_size,
            blocks,
            block: 0,
            left_in_block: 0,
            next_offset: 0,
        })
    }

    /// Packets the kernel counted for this socket and the ones it dropped because the ring was
    /// full, since the last call (`PACKET_STATISTICS` resets on read).
    pub fn take_counts(&mut self) -> (u64, u64) {
        crate::packet_socket::take_counts(self.fd.as_raw_fd())
    }

    /// Like [`FrameRx::rx_batch`], with what the kernel knows of each packet: its length on
    /// the wire, its timestamp, and the VLAN tag the NIC took off.
    pub fn rx_packets<F: FnMut(RxPacket<'_>)>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_packet: F,
    ) -> io::Result<usize> {
        self.read_up_to(max, timeout, |hdr, data| {
            on_packet(RxPacket::from_header(hdr, data))
        })
    }

    /// Hands up to `max` packets (header and bytes) to `on_packet`, waiting at most `timeout`
    /// for the first.
    fn read_up_to<F: FnMut(&libc::tpacket3_hdr, &[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_packet: F,
    ) -> io::Result<usize> {
        let mut got = 0;
        while got < max {
            if !self.ready(got, timeout)? {
                break;
            }
            self.next_header(&mut on_packet);
            got += 1;
        }
        Ok(got)
    }

    /// Whether a packet is ready to read; waits for the kernel only while nothing has been read
    /// yet (and never for a zero timeout: then no system call is made at all).
    fn ready(&mut self, got: usize, timeout: Duration) -> io::Result<bool> {
        if self.left_in_block > 0 || self.open_block() {
            return Ok(true);
        }
        Ok(got == 0
            && !timeout.is_zero()
            && stages::call(Stage::Poll, Stage::RxCall, || {
                poll_readable(self.fd.as_raw_fd(), timeout)
            })?
            && self.open_block())
    }

    fn block_desc(&self) -> &libc::tpacket_block_desc {
        // SAFETY: block descriptors sit at the start of each block inside the mapping.
        unsafe {
            &*(self.map.base.as_ptr().add(self.block * self.block_size)
                as *const libc::tpacket_block_desc)
        }
    }

    fn block_status(&self) -> &AtomicU32 {
        self.map
            .status(self.block * self.block_size + BLOCK_STATUS_FIELD)
    }

    /// Opens the current block if the kernel has handed it to us; false if it has not.
    fn open_block(&mut self) -> bool {
        if self.block_status().load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return false;
        }
        // SAFETY: the block is ours (TP_STATUS_USER), so reading its header is race-free.
        let h1 = unsafe { self.block_desc().hdr.bh1 };
        self.left_in_block = h1.num_pkts;
        self.next_offset = self.block * self.block_size + h1.offset_to_first_pkt as usize;
        if self.left_in_block == 0 {
            self.release_block();
            return false;
        }
        true
    }

    fn release_block(&mut self) {
        self.block_status()
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.block = (self.block + 1) % self.blocks;
    }

    /// Reads the next packet of the open block: `on_packet` gets its header and its bytes.
    fn next_header<F: FnOnce(&libc::tpacket3_hdr, &[u8])>(&mut self, on_packet: F) {
        let block_end = (self.block + 1) * self.block_size;
        // SAFETY: the kernel wrote a tpacket3_hdr at next_offset inside this user-owned block.
        let hdr = unsafe {
            &*(self.map.base.as_ptr().add(self.next_offset) as *const libc::tpacket3_hdr)
        };
        let start = self.next_offset + hdr.tp_mac as usize;
        let len = (hdr.tp_snaplen as usize).min(block_end.saturating_sub(start));
        // SAFETY: start..start+len is clamped to the current block, which we own.
        let frame = unsafe { std::slice::from_raw_parts(self.map.base.as_ptr().add(start), len) };
        stages::mark(Stage::Poll);
        on_packet(hdr, frame);
        self.next_offset += hdr.tp_next_offset as usize;
        self.left_in_block -= 1;
        if self.left_in_block == 0 || self.next_offset >= block_end {
            self.left_in_block = 0;
            self.release_block();
        }
    }
}

/// How to size and share a capture ring ([`RingRx::open_capture`]).
#[derive(Clone, Copy, Debug)]
pub struct CaptureRing {
    /// Bytes of ring shared with the kernel (rounded down to whole 1 MiB blocks, at least 2).
    pub ring_bytes: usize,
    /// The `PACKET_FANOUT` group to join (flow hash), for several capturing threads.
    pub fanout_group: Option<u16>,
    /// A partly filled block is handed over after this many milliseconds: how stale a packet
    /// can get in the ring, and (at low rates) how often the reader wakes.
    pub block_timeout_ms: u32,
}

/// A packet read from a capture ring, with what the kernel knows of it.
#[derive(Clone, Copy, Debug)]
pub struct RxPacket<'a> {
    /// The bytes captured (at most what the filter's return value allowed).
    pub data: &'a [u8],
    /// The length of the frame on the wire.
    pub wire_len: u32,
    /// When the frame arrived (or left), in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The stamp came from the NIC, not the kernel's clock.
    pub hw_timestamp: bool,
    /// The VLAN tag the NIC or driver took off the frame (TPID, TCI), which the capture should
    /// put back to show the frame as it was on the wire.
    pub vlan: Option<(u16, u16)>,
    /// What the kernel says of the frame's checksums.
    pub checksum: RxChecksum,
}

impl<'a> RxPacket<'a> {
    fn from_header(hdr: &libc::tpacket3_hdr, data: &'a [u8]) -> Self {
        let vlan = (hdr.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if hdr.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                hdr.hv1.tp_vlan_tpid
            } else {
                0x8100
            };
            (tpid, hdr.hv1.tp_vlan_tci as u16)
        });
        RxPacket {
            data,
            wire_len: hdr.tp_len,
            ts_ns: u64::from(hdr.tp_sec) * 1_000_000_000 + u64::from(hdr.tp_nsec),
            hw_timestamp: hdr.tp_status & libc::TP_STATUS_TS_RAW_HARDWARE != 0,
            vlan,
            checksum: checksum_status(hdr.tp_status),
        }
    }
}

/// The checksum state a packet's `tp_status` reports.
fn checksum_status(tp_status: u32) -> RxChecksum {
    if tp_status & libc::TP_STATUS_CSUMNOTREADY != 0 {
        RxChecksum::Partial
    } else if tp_status & libc::TP_STATUS_CSUM_VALID != 0 {
        RxChecksum::Valid
    } else {
        RxChecksum::Unknown
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
        self.read_up_to(max, timeout, |_, frame| on_frame(frame))
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::process::Command;

    use super::*;
    use crate::test_support::in_private_netns;

    fn run(args: &[&str]) -> String {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The UDP checksum of an Ethernet/IPv4/UDP frame is complete (sums to zero with its
    /// pseudo-header).
    fn udp_checksum_complete(frame: &[u8]) -> bool {
        let ip = &frame[14..];
        let udp = &ip[20..usize::from(u16::from_be_bytes([ip[2], ip[3]]))];
        let mut sum = 17u32 + udp.len() as u32;
        for pair in ip[12..20].chunks(2).chain(udp.chunks(2)) {
            let word = [pair[0], pair.get(1).copied().unwrap_or(0)];
            sum += u32::from(u16::from_be_bytes(word));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum == 0xffff
    }

    /// A datagram this host's kernel sends out of a veth arrives at the peer with its checksum
    /// partial while the sender's transmit checksum offload is on, and the ring says so; with
    /// the offload off the checksum is complete and the ring does not say Partial.
    #[test]
    fn a_veth_with_tx_offload_leaves_checksums_partial_and_the_ring_says_so() {
        in_private_netns(|| {
            // va sends to 198.19.0.2, an address nobody has, whose MAC is vb's: the frame goes
            // out of va and arrives at vb, all inside this namespace.
            const VB_MAC: &str = "02:00:00:00:00:0b";
            run(&[
                "ip", "link", "add", "name", "va", "type", "veth", "peer", "name", "vb", "address",
                VB_MAC,
            ]);
            run(&["ip", "addr", "add", "198.19.0.1/24", "dev", "va"]);
            run(&["ip", "link", "set", "va", "up"]);
            run(&["ip", "link", "set", "vb", "up"]);
            run(&[
                "ip",
                "neigh",
                "replace",
                "198.19.0.2",
                "lladdr",
                VB_MAC,
                "dev",
                "va",
                "nud",
                "permanent",
            ]);
            let mut rx = RingRx::open(&IoConfig::new("vb")).unwrap();
            let socket = UdpSocket::bind("198.19.0.1:0").unwrap();
            let mut receive_one = |tag: u8| -> (RxChecksum, bool) {
                socket.send_to(&[tag; 32], "198.19.0.2:9").unwrap();
                let mut seen = None;
                let end = Instant::now() + Duration::from_secs(10);
                while seen.is_none() && Instant::now() < end {
                    rx.rx_packets(16, Duration::from_millis(100), |p| {
                        let udp = p.data.len() == 14 + 20 + 8 + 32 && p.data[23] == 17;
                        if udp && p.data[42] == tag {
                            seen = Some((p.checksum, udp_checksum_complete(p.data)));
                        }
                    })
                    .unwrap();
                }
                seen.expect("the datagram reached vb")
            };
            let (offloaded, complete) = receive_one(1);
            assert_eq!(offloaded, RxChecksum::Partial);
            assert!(!complete, "a partial checksum does not verify");
            run(&["ethtool", "-K", "va", "tx", "off"]);
            let (status, complete) = receive_one(2);
            assert_ne!(status, RxChecksum::Partial);
            assert!(complete, "with offload off the checksum is complete");
        });
    }
}
