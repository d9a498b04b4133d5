//! libpcap through the `pcap` crate: the portable path (Npcap on Windows later). Transmit is one
//! `pcap_sendpacket` per frame, as WinPcap's classic path was.

use sonde_meter::stages::{self, Stage};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::anyhow;

use crate::packet_socket::poll_readable;
use crate::{FrameRx, FrameTx, IoConfig, RxDrops, MAX_FRAME};

pub(crate) fn pcap_error(iface: &str, err: pcap::Error) -> anyhow::Error {
    let text = err.to_string();
    if text.contains("ermission") || text.contains("EPERM") {
        anyhow!("libpcap on {iface}: permission denied: needs CAP_NET_RAW (run as root)")
    } else if text.contains("No such device") {
        anyhow!(
            "no interface named \"{iface}\" in this network namespace (list them with: ip link)"
        )
    } else {
        anyhow!("libpcap on {iface}: {text}")
    }
}

fn open_capture(cfg: &IoConfig, timeout_ms: i32) -> anyhow::Result<pcap::Capture<pcap::Active>> {
    crate::packet_socket::ifindex(&cfg.iface)?;
    let cap = pcap::Capture::from_device(cfg.iface.as_str())
        .and_then(|c| {
            c.snaplen(MAX_FRAME as i32 + 4)
                .immediate_mode(true)
                .timeout(timeout_ms)
                .open()
        })
        .map_err(|e| pcap_error(&cfg.iface, e))?;
    // libpcap opens its socket without SOCK_CLOEXEC.
    crate::packet_socket::set_cloexec(cap.as_raw_fd())
        .map_err(|e| anyhow!("libpcap on {}: {e}", cfg.iface))?;
    Ok(cap)
}

pub struct PcapTx {
    cap: pcap::Capture<pcap::Active>,
    buf: Box<[u8; MAX_FRAME]>,
}

impl PcapTx {
    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let mut cap = open_capture(cfg, 1)?;
        // A sender has no use for what arrives: capture nothing so the ring costs nothing.
        cap.filter("less 1", true)
            .map_err(|e| pcap_error(&cfg.iface, e))?;
        cap.direction(pcap::Direction::In).ok();
        Ok(PcapTx {
            cap,
            buf: Box::new([0; MAX_FRAME]),
        })
    }
}

#[cfg(test)]
impl PcapTx {
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.cap.as_raw_fd()
    }
}

impl FrameTx for PcapTx {
    fn tx_batch<F: FnMut(usize, &mut [u8]) -> usize>(
        &mut self,
        count: usize,
        mut fill: F,
    ) -> io::Result<usize> {
        for i in 0..count {
            let len = fill(i, &mut self.buf[..]).min(MAX_FRAME);
            loop {
                let cap = &mut self.cap;
                let buf = &self.buf[..len];
                match stages::call(Stage::Enqueue, Stage::Kick, || cap.sendpacket(buf)) {
                    Ok(()) => break,
                    Err(e) if e.to_string().contains("No buffer space") => std::thread::yield_now(),
                    Err(e) => return Err(io::Error::other(e.to_string())),
                }
            }
        }
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A non-blocking capture: waiting is a poll(2) on its descriptor, so a zero timeout never
/// blocks and several receivers can be waited on at once.
pub struct PcapRx {
    cap: pcap::Capture<pcap::Active>,
    /// libpcap's drop count (cumulative, 32 bits) when last read.
    drops_seen: u32,
}

impl PcapRx {
    pub fn raw_fd(&self) -> RawFd {
        self.cap.as_raw_fd()
    }

    /// Frames the kernel dropped for this capture since the last call (its socket buffer or
    /// ring was full).
    pub fn take_drops(&mut self) -> RxDrops {
        let Ok(stats) = self.cap.stats() else {
            return RxDrops::default();
        };
        let new = stats.dropped.wrapping_sub(self.drops_seen);
        self.drops_seen = stats.dropped;
        RxDrops {
            ring_full: u64::from(new),
            ..RxDrops::default()
        }
    }

    pub fn set_filter(&mut self, expr: &str) -> anyhow::Result<()> {
        self.cap
            .filter(expr, true)
            .map_err(|e| anyhow!("invalid filter expression \"{expr}\": {e}"))
    }

    pub fn open(cfg: &IoConfig) -> anyhow::Result<Self> {
        let cap = open_capture(cfg, 10)?;
        cap.direction(pcap::Direction::In)
            .map_err(|e| pcap_error(&cfg.iface, e))?;
        let cap = cap.setnonblock().map_err(|e| pcap_error(&cfg.iface, e))?;
        Ok(PcapRx { cap, drops_seen: 0 })
    }
}

impl FrameRx for PcapRx {
    fn rx_batch<F: FnMut(&[u8])>(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_frame: F,
    ) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut got = 0;
        while got < max {
            match self.cap.next_packet() {
                Ok(p) => {
                    on_frame(p.data);
                    got += 1;
                }
                // Non-blocking: nothing waiting. Wait only while nothing has been read yet.
                Err(pcap::Error::TimeoutExpired) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if got > 0 || left.is_zero() {
                        break;
                    }
                    poll_readable(self.cap.as_raw_fd(), left)?;
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        }
        Ok(got)
    }
}
