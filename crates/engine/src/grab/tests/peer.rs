//! A scripted server at the other end of an in-memory link: it reads the grab loop's frames
//! (checking every checksum), and answers each target as its [`Script`] says — on time, late
//! (once the loop has written the target's row), twice, or with a corrupted segment.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sonde_io::mem::MemPort;
use sonde_io::{FrameRx, FrameTx};
use sonde_wire::{
    ethernet, ipv4, tcp, ChecksumMode, EtherType, IpPair, IpProtocol, MacAddr, TcpFlags,
};

use super::RowLog;

pub const OUR_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const GW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xfe]);
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
const SERVER_ISS: u32 = 0x7000_0000;
/// How long the peer waits for the loop's RST to a late SYN-ACK before it gives up on it.
const RST_WAIT: Duration = Duration::from_secs(3);
/// The peer stops after this long whatever happens (a bounded test).
const LIFETIME: Duration = Duration::from_secs(60);

/// What the server of one target does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// SYN-ACK at once, then the banner line.
    Serve,
    /// Two SYN-ACKs at once, the banner; once the loop has closed the connection, the SYN-ACK
    /// again (late).
    DuplicateSynAck,
    /// RST at once, twice.
    RefuseTwice,
    /// Silent until the loop has given up on the target (its row is out), then a SYN-ACK.
    LateSynAck,
    /// Silent until the loop has given up on the target, then an RST.
    LateRst,
    /// The handshake at once, the banner only once every late answer has been sent and every
    /// late SYN-ACK reset: the open connection keeps the loop running meanwhile.
    Keeper,
    /// The banner arrives first corrupted on the way (its bytes changed after the checksum
    /// was computed), then intact.
    CorruptFirst,
}

/// The banner a target's server says.
pub fn banner(addr: IpAddr) -> String {
    format!("SONDE {addr}\r\n")
}

/// The corrupted copy: as long as the banner, other bytes.
pub fn corrupted_banner(addr: IpAddr) -> String {
    banner(addr).replace("SONDE", "BOGUS")
}

/// What the peer knows of one target.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub script: Option<Script>,
    pub client_port: u16,
    pub client_iss: u32,
    pub syns: u32,
    /// RSTs the loop sent to this target, with their sequence numbers.
    pub rsts: Vec<u32>,
    /// The loop's RSTs counted when the late answer went out (None: not sent yet).
    pub rsts_before_late: Option<usize>,
    /// When the last late SYN-ACK went out.
    pub late_at: Option<Instant>,
    /// Late SYN-ACKs sent.
    pub late_synacks: u32,
    /// The late SYN-ACK was sent again as a resumed run started.
    pub replayed: bool,
    pub served: bool,
}

impl Target {
    /// The loop's RSTs since the late answer went out.
    pub fn rsts_after_late(&self) -> usize {
        self.rsts_before_late
            .map_or(0, |before| self.rsts.len() - before)
    }

    fn awaits_rst(&self) -> bool {
        self.late_at.is_some_and(|at| at.elapsed() < RST_WAIT) && self.rsts_after_late() == 0
    }
}

/// Switches shared with the test.
#[derive(Clone, Default)]
pub struct Controls {
    /// The test is over: the peer returns what it saw.
    pub done: Arc<AtomicBool>,
    /// At the next SYN, first send the late SYN-ACK again for every `LateSynAck` target that
    /// was given up on (a run resumed from a checkpoint getting the previous run's late
    /// answers).
    pub replay: Arc<AtomicBool>,
}

pub struct Peer {
    port: MemPort,
    script: fn(IpAddr) -> Script,
    rows: RowLog,
    controls: Controls,
    pub targets: HashMap<IpAddr, Target>,
    out: Vec<Vec<u8>>,
    /// Late SYN-ACKs replayed at the start of a resumed run.
    pub replayed: u32,
}

impl Peer {
    pub fn new(port: MemPort, script: fn(IpAddr) -> Script, rows: RowLog, c: Controls) -> Peer {
        Peer {
            port,
            script,
            rows,
            controls: c,
            targets: HashMap::new(),
            out: Vec::new(),
            replayed: 0,
        }
    }

    /// Serves until the test says it is done (or the lifetime runs out).
    pub fn run(mut self) -> Peer {
        let end = Instant::now() + LIFETIME;
        while !self.controls.done.load(Ordering::Acquire) && Instant::now() < end {
            let mut frames = Vec::new();
            self.port
                .rx_batch(64, Duration::from_millis(2), |f| frames.push(f.to_vec()))
                .unwrap();
            for frame in &frames {
                self.on_frame(frame);
            }
            self.late_answers();
            self.release_keepers();
            self.flush();
        }
        self
    }

    fn on_frame(&mut self, frame: &[u8]) {
        let (dst, seg, payload) = read(frame);
        assert!(payload.is_empty(), "banner grabs send no data");
        let flags = seg.flags;
        if flags.contains(TcpFlags::SYN) {
            assert_eq!(flags, TcpFlags::SYN, "the loop sends plain SYNs");
            if self.controls.replay.swap(false, Ordering::AcqRel) {
                self.replay_late_synacks();
            }
            self.on_syn(dst, &seg);
        } else if flags.contains(TcpFlags::RST) {
            let t = self.target(dst);
            t.rsts.push(seg.seq_number);
        } else if flags.contains(TcpFlags::ACK) {
            self.on_ack(dst);
        }
    }

    fn target(&mut self, addr: IpAddr) -> &mut Target {
        let script = self.script;
        let t = self.targets.entry(addr).or_default();
        t.script.get_or_insert(script(addr));
        t
    }

    fn on_syn(&mut self, addr: IpAddr, syn: &tcp::Repr) {
        let t = self.target(addr);
        t.client_port = syn.src_port;
        t.client_iss = syn.seq_number;
        t.syns += 1;
        let first = t.syns == 1;
        let t = t.clone();
        match t.script.unwrap() {
            Script::Serve | Script::Keeper | Script::CorruptFirst if first => {
                self.send_synack(addr, &t)
            }
            Script::DuplicateSynAck if first => {
                self.send_synack(addr, &t);
                self.send_synack(addr, &t);
            }
            Script::RefuseTwice if first => {
                self.send_rst(addr, &t);
                self.send_rst(addr, &t);
            }
            _ => {}
        }
    }

    /// The handshake's ACK: the banner follows, as the script says.
    fn on_ack(&mut self, addr: IpAddr) {
        let t = self.target(addr);
        if t.served {
            return;
        }
        let t = t.clone();
        let text = banner(addr);
        match t.script.unwrap() {
            Script::Serve | Script::DuplicateSynAck => self.send_data(addr, &t, &text, None),
            Script::CorruptFirst => {
                self.send_data(addr, &t, &text, Some(&corrupted_banner(addr)));
                self.send_data(addr, &t, &text, None);
            }
            _ => return,
        }
        self.target(addr).served = true;
    }

    /// Late answers for targets the loop has given up on (their row is out), RSTs first, and
    /// the SYN-ACK again for connections the loop has closed.
    fn late_answers(&mut self) {
        let ended: Vec<IpAddr> = self.rows.addrs();
        let mut synacks = Vec::new();
        for addr in ended {
            let Some(t) = self.targets.get(&addr).cloned() else {
                continue;
            };
            if t.rsts_before_late.is_some() {
                continue;
            }
            match t.script.unwrap() {
                Script::LateRst if t.syns > 0 => self.send_rst(addr, &t),
                Script::LateSynAck if t.syns > 0 => synacks.push(addr),
                Script::DuplicateSynAck if !t.rsts.is_empty() => synacks.push(addr),
                _ => continue,
            }
            self.targets.get_mut(&addr).unwrap().rsts_before_late = Some(t.rsts.len());
        }
        for addr in synacks {
            self.send_late_synack(addr);
        }
    }

    fn send_late_synack(&mut self, addr: IpAddr) {
        let t = self.targets.get_mut(&addr).unwrap();
        t.late_at = Some(Instant::now());
        t.late_synacks += 1;
        let t = t.clone();
        self.send_synack(addr, &t);
    }

    /// A resumed run starts: the late SYN-ACK again for every target given up on before.
    fn replay_late_synacks(&mut self) {
        let given_up: Vec<IpAddr> = self
            .targets
            .iter()
            .filter(|(_, t)| t.script == Some(Script::LateSynAck) && t.rsts_before_late.is_some())
            .map(|(addr, _)| *addr)
            .collect();
        for addr in given_up {
            let t = self.targets.get_mut(&addr).unwrap();
            t.rsts_before_late = Some(t.rsts.len());
            t.replayed = true;
            self.send_late_synack(addr);
            self.replayed += 1;
        }
    }

    /// Keepers get their banner once nothing late is outstanding.
    fn release_keepers(&mut self) {
        let late_pending = self.targets.values().any(|t| {
            let late_due = match t.script.unwrap() {
                Script::LateSynAck | Script::LateRst => t.syns > 0,
                Script::DuplicateSynAck => true,
                _ => false,
            };
            (late_due && t.rsts_before_late.is_none()) || t.awaits_rst()
        });
        if late_pending {
            return;
        }
        let keepers: Vec<IpAddr> = self
            .targets
            .iter()
            .filter(|(_, t)| t.script == Some(Script::Keeper) && !t.served && t.syns > 0)
            .map(|(addr, _)| *addr)
            .collect();
        for addr in keepers {
            let t = self.targets[&addr].clone();
            self.send_data(addr, &t, &banner(addr), None);
            self.targets.get_mut(&addr).unwrap().served = true;
        }
    }

    fn send_synack(&mut self, addr: IpAddr, t: &Target) {
        let seg = segment(t, TcpFlags::SYN | TcpFlags::ACK, SERVER_ISS, 0);
        self.out.push(frame(addr, &seg, &[], None));
    }

    fn send_rst(&mut self, addr: IpAddr, t: &Target) {
        let seg = segment(t, TcpFlags::RST | TcpFlags::ACK, 0, 0);
        self.out.push(frame(addr, &seg, &[], None));
    }

    /// `text` as the reply's first bytes; with `corrupt_to`, those bytes arrive instead,
    /// under the checksum of `text`.
    fn send_data(&mut self, addr: IpAddr, t: &Target, text: &str, corrupt_to: Option<&str>) {
        let seg = segment(
            t,
            TcpFlags::ACK | TcpFlags::PSH,
            SERVER_ISS.wrapping_add(1),
            text.len(),
        );
        let corrupt = corrupt_to.map(str::as_bytes);
        self.out.push(frame(addr, &seg, text.as_bytes(), corrupt));
    }

    fn flush(&mut self) {
        let mut sent = 0;
        while sent < self.out.len() {
            let out = &self.out;
            sent += self
                .port
                .tx_batch(out.len() - sent, |i, buf| {
                    let f = &out[sent + i];
                    buf[..f.len()].copy_from_slice(f);
                    f.len()
                })
                .unwrap();
        }
        self.out.clear();
    }
}

/// The server's segment to the target's client port, acknowledging its SYN.
pub(in crate::grab) fn segment(
    t: &Target,
    flags: TcpFlags,
    seq: u32,
    payload_len: usize,
) -> tcp::Repr {
    let syn = flags.contains(TcpFlags::SYN);
    tcp::Repr {
        src_port: 80,
        dst_port: t.client_port,
        seq_number: seq,
        ack_number: Some(t.client_iss.wrapping_add(1)),
        flags,
        window_len: 0xffff,
        window_scale: None,
        max_seg_size: syn.then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload_len,
    }
}

/// A whole frame from `addr` to us; `corrupt_to` replaces the payload after the checksums
/// were computed (a segment damaged on the way).
pub(in crate::grab) fn frame(
    addr: IpAddr,
    seg: &tcp::Repr,
    payload: &[u8],
    corrupt_to: Option<&[u8]>,
) -> Vec<u8> {
    let IpAddr::V4(src) = addr else {
        panic!("IPv4 targets only")
    };
    let tcp_len = seg.buffer_len();
    let l4 = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let mut f = vec![0; l4 + tcp_len];
    ethernet::Repr {
        src_addr: GW_MAC,
        dst_addr: OUR_MAC,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    ipv4::Repr {
        src_addr: src,
        dst_addr: OUR_IP,
        protocol: IpProtocol::TCP,
        payload_len: tcp_len,
        ttl: 60,
        ident: 1,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ));
    let data = l4 + seg.header_len();
    f[data..].copy_from_slice(payload);
    let ips = IpPair::V4 { src, dst: OUR_IP };
    seg.emit(&mut tcp::Packet::new_unchecked(&mut f[l4..]), &ips);
    if let Some(bytes) = corrupt_to {
        f[data..].copy_from_slice(bytes);
    }
    f
}

/// Reads a frame the loop sent: its destination, TCP header and payload, asserting that
/// its addresses and checksums are right.
pub(in crate::grab) fn read(frame: &[u8]) -> (IpAddr, tcp::Repr, Vec<u8>) {
    let eth = ethernet::Frame::new_checked(frame).unwrap();
    assert_eq!((eth.src_addr(), eth.dst_addr()), (OUR_MAC, GW_MAC));
    assert_eq!(eth.ethertype(), EtherType::Ipv4);
    let ip = ipv4::Packet::new_checked(&frame[ethernet::HEADER_LEN..]).unwrap();
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    assert_eq!((ip.protocol(), ip.src_addr()), (IpProtocol::TCP, OUR_IP));
    let start = ethernet::HEADER_LEN + ip.header_len();
    let segment = &frame[start..ethernet::HEADER_LEN + usize::from(ip.total_len())];
    let packet = tcp::Packet::new_checked(segment).unwrap();
    let ips = IpPair::V4 {
        src: OUR_IP,
        dst: ip.dst_addr(),
    };
    let repr = tcp::Repr::parse(&packet, &ips, ChecksumMode::Verify).expect("TCP checksum");
    assert_eq!(repr.dst_port, 80);
    (IpAddr::V4(ip.dst_addr()), repr, packet.payload().to_vec())
}
