//! Where live packets come from: the backends a capture thread reads.
//!
//! - `ring`: an AF_PACKET TPACKET_V3 ring. The classic BPF filter runs in the kernel (JIT
//!   compiled) before the one copy into the ring; blocks of packets are handed over with no
//!   system call while they are full; the kernel stamps each packet in nanoseconds.
//! - `xdp`: AF_XDP sockets behind sonde's translation of the filter to an XDP program, which
//!   runs before the kernel allocates anything for the frame and passes what it does not take
//!   to the OS stack untouched. Frames carry no kernel stamp here: each batch is stamped once
//!   when user space reads it.
//! - `pcap`: libpcap (what tcpdump uses), for comparison.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use sonde_io::{AnyRx, CaptureRing, RingRx};
use sonde_meter::stages::{self, Stage};

/// One captured packet: its bytes in up to three pieces (a VLAN tag the NIC took off goes back
/// between the MAC addresses and the rest).
pub struct Packet<'a> {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub parts: [&'a [u8]; 3],
    pub hw_timestamp: bool,
}

/// Packets a source's kernel side lost since the last call.
#[derive(Clone, Copy, Debug, Default)]
pub struct SourceDrops {
    /// The ring (or socket buffer) between the kernel and sonde was full.
    pub ring: u64,
    /// The kernel lost them before the ring (AF_XDP: no free buffer).
    pub kernel: u64,
}

/// Which timestamps a source gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsSource {
    /// The kernel's clock when the packet arrived (nanoseconds).
    Kernel,
    /// The NIC's clock.
    Hardware,
    /// sonde's clock once per batch read from the ring (AF_XDP frames carry no stamp).
    UserBatch,
    /// libpcap's (the kernel's, through libpcap).
    Libpcap,
}

impl TsSource {
    pub fn name(self) -> &'static str {
        match self {
            TsSource::Kernel => "kernel (software, ns)",
            TsSource::Hardware => "hardware (NIC)",
            TsSource::UserBatch => "sonde, once per batch (AF_XDP has no kernel stamp)",
            TsSource::Libpcap => "kernel via libpcap (ns)",
        }
    }
}

pub enum Source {
    Ring(RingRx),
    Xdp(Vec<AnyRx>),
    Pcap(Box<pcap::Capture<pcap::Active>>),
}

/// A partly filled ring block is handed to sonde after this long (tcpdump's is 1 s): at low
/// rates the capture wakes at most 20 times a second, and no packet waits longer in the ring.
pub const BLOCK_TIMEOUT_MS: u32 = 50;

/// How long an AF_XDP capture thread lets frames gather after a thin batch.
const XDP_NAP: Duration = Duration::from_micros(500);

/// A `ring` source: its size, and whether it shares a fanout group.
pub fn open_ring(
    iface: &str,
    program: &[libc::sock_filter],
    ring_bytes: usize,
    fanout_group: Option<u16>,
) -> anyhow::Result<Source> {
    let mut rx = RingRx::open_capture(
        iface,
        &CaptureRing {
            ring_bytes,
            fanout_group,
            block_timeout_ms: BLOCK_TIMEOUT_MS,
        },
    )?;
    // It replaces the reject-all filter the ring opened with: nothing is in the ring before it.
    sonde_io::filter::attach(rx.raw_fd(), program)?;
    let _ = rx.take_counts();
    Ok(Source::Ring(rx))
}

/// libpcap on `iface` with the tcpdump expression `expr`.
pub fn open_pcap(
    iface: &str,
    expr: &str,
    snaplen: u32,
    ring_bytes: usize,
) -> anyhow::Result<Source> {
    let cap = pcap::Capture::from_device(iface)
        .and_then(|c| {
            c.precision(pcap::Precision::Nano)
                .snaplen(snaplen.min(i32::MAX as u32) as i32)
                .buffer_size(ring_bytes.min(i32::MAX as usize) as i32)
                .timeout(10)
                .open()
        })
        .map_err(|e| anyhow!("libpcap on {iface}: {e}"))?;
    // Never block in libpcap: with TPACKET_V3 its read waits for a block the kernel retires
    // only once a packet is in it, so a quiet interface would hold the capture past its end
    // (--duration, a signal). pcap_batch polls the descriptor itself, with a timeout.
    let mut cap = cap
        .setnonblock()
        .map_err(|e| anyhow!("libpcap on {iface}: {e}"))?;
    if !expr.is_empty() {
        cap.filter(expr, true)
            .map_err(|e| anyhow!("invalid filter expression \"{expr}\": {e}"))?;
    }
    Ok(Source::Pcap(Box::new(cap)))
}

impl Source {
    pub fn ts_source(&self, hardware_seen: bool) -> TsSource {
        match self {
            Source::Ring(_) if hardware_seen => TsSource::Hardware,
            Source::Ring(_) => TsSource::Kernel,
            Source::Xdp(_) => TsSource::UserBatch,
            Source::Pcap(_) => TsSource::Libpcap,
        }
    }

    /// How long to let frames gather after a thin batch, for sources that hand them over one
    /// by one: AF_XDP (its receive ring holds 4096 frames, 4 ms at 1 Mpps, so a 0.5 ms nap is
    /// safe). The ring gathers in the kernel (blocks) and libpcap on its own.
    pub fn coalesce(&self) -> Option<Duration> {
        matches!(self, Source::Xdp(_)).then_some(XDP_NAP)
    }

    /// Hands up to `max` packets to `on_packet`, waiting at most `timeout` for the first.
    pub fn next_batch(
        &mut self,
        max: usize,
        timeout: Duration,
        mut on_packet: impl FnMut(&Packet<'_>),
    ) -> io::Result<usize> {
        match self {
            // The stage clock (`--profile`): the ring's own work ends in `Poll`, reading the
            // stamp and the tag in `Timestamp`; the callback's copy ends in `Copy`.
            Source::Ring(rx) => rx.rx_packets(max, timeout, |p| {
                let tag;
                let (wire_len, parts) = match p.vlan {
                    Some((tpid, tci)) if p.data.len() >= 12 => {
                        tag = vlan_tag(tpid, tci);
                        (p.wire_len + 4, [&p.data[..12], &tag[..], &p.data[12..]])
                    }
                    _ => (p.wire_len, [p.data, &[][..], &[][..]]),
                };
                let packet = Packet {
                    ts_ns: p.ts_ns,
                    wire_len,
                    parts,
                    hw_timestamp: p.hw_timestamp,
                };
                stages::mark(Stage::Timestamp);
                on_packet(&packet)
            }),
            Source::Xdp(rxs) => {
                let ts_ns = now_ns();
                stages::mark(Stage::Timestamp);
                sonde_io::rx_many(rxs, max, timeout, |_, frame| {
                    stages::mark(Stage::Poll);
                    on_packet(&Packet {
                        ts_ns,
                        wire_len: frame.len() as u32,
                        parts: [frame, &[], &[]],
                        hw_timestamp: false,
                    })
                })
            }
            Source::Pcap(cap) => pcap_batch(cap, max, timeout, &mut on_packet),
        }
    }

    /// What the kernel side lost since the last call (one system call; once a second).
    pub fn take_drops(&mut self) -> SourceDrops {
        match self {
            Source::Ring(rx) => SourceDrops {
                ring: rx.take_counts().1,
                kernel: 0,
            },
            Source::Xdp(rxs) => rxs.iter_mut().fold(SourceDrops::default(), |acc, rx| {
                let d = rx.take_drop_counts();
                SourceDrops {
                    ring: acc.ring + d.ring_full,
                    kernel: acc.kernel + d.no_buffer + d.invalid,
                }
            }),
            Source::Pcap(_) => SourceDrops::default(),
        }
    }

    /// libpcap's totals (it keeps cumulative counts): (dropped by its buffer, by the interface).
    pub fn pcap_totals(&mut self) -> Option<(u64, u64)> {
        let Source::Pcap(cap) = self else {
            return None;
        };
        let s = cap.stats().ok()?;
        Some((u64::from(s.dropped), u64::from(s.if_dropped)))
    }
}

fn vlan_tag(tpid: u16, tci: u16) -> [u8; 4] {
    let [a, b] = tpid.to_be_bytes();
    let [c, d] = tci.to_be_bytes();
    [a, b, c, d]
}

/// Up to `max` packets from libpcap (non-blocking), after waiting at most `timeout` for its
/// descriptor to be readable.
fn pcap_batch(
    cap: &mut pcap::Capture<pcap::Active>,
    max: usize,
    timeout: Duration,
    on_packet: &mut impl FnMut(&Packet<'_>),
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    if !sonde_io::poll_any(&[cap.as_raw_fd()], timeout)? {
        return Ok(0);
    }
    let mut got = 0;
    while got < max {
        match cap.next_packet() {
            Ok(p) => {
                // With nanosecond precision libpcap puts nanoseconds in tv_usec.
                let ts_ns = p.header.ts.tv_sec as u64 * 1_000_000_000 + p.header.ts.tv_usec as u64;
                on_packet(&Packet {
                    ts_ns,
                    wire_len: p.header.len,
                    parts: [p.data, &[], &[]],
                    hw_timestamp: false,
                });
                got += 1;
            }
            Err(pcap::Error::TimeoutExpired | pcap::Error::NoMorePackets) => break,
            Err(e) => return Err(io::Error::other(e.to_string())),
        }
    }
    Ok(got)
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
