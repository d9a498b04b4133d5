//! A bump in the wire over AF_XDP: one socket on each of two interfaces, both over ONE UMEM
//! (`XDP_SHARED_UMEM` across devices), so a frame that arrives on one side is judged where the
//! kernel put it and leaves by the other side's TX ring as the same descriptor: no copy in
//! user space.
//!
//! Every UMEM frame is, at any time, in exactly one place: a fill ring, an RX ring, a TX ring,
//! a completion ring (each socket's (interface, queue) pair has its own fill and completion
//! ring), or the free pool here. The way round is: A's fill ring → A's RX ring → (kept) B's TX
//! ring → B's completion ring → pool → whichever fill ring is short; a frame not kept (or that
//! found B's TX ring full) goes straight back to A's fill ring. Every ring is as large as the
//! UMEM, so no ring can ever refuse a frame this code owns.
//!
//! libxdp's default program steers every frame of the queue on both interfaces to the sockets,
//! so the kernel stack sees none of them; it is detached when the bridge is dropped, and
//! [`detach_bridge_program`] takes it off after a crash.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

use crate::xdp::{
    bind_socket, new_umem, open_first_accepted, queue_size, set_tx_budget, Attempt, Steering,
};
use crate::XdpMode;

/// Bound on wake-ups spent handing one batch to a copy-mode TX ring (the kernel sends at most
/// its TX budget per wake-up; raised to the ring size where the kernel allows, it takes one).
const MAX_KICKS_PER_BATCH: usize = 64;

/// One interface's socket and its (interface, queue) pair's fill and completion rings.
struct Side {
    rx: RxQueue,
    tx: TxQueue,
    fill: FillQueue,
    comp: CompQueue,
    /// Frames given to the fill ring and not yet back off the RX ring: on the fill ring, held
    /// by the kernel to copy into, or on the RX ring. Counted here rather than read from the
    /// fill ring, whose consumer index the kernel publishes only when it has used every entry
    /// it last saw.
    lent: u32,
    /// The socket's cumulative `XDP_STATISTICS` drop count when last read.
    kernel_drops_seen: u64,
}

/// Two AF_XDP sockets, one per interface, sharing one UMEM, and the frames no ring holds.
pub struct XdpBridge {
    /// Dropped before the UMEM (the sockets hold it alive anyway).
    sides: [Side; 2],
    umem: Umem,
    /// Frames no ring holds: back from a completion ring, waiting for a fill ring.
    pool: Vec<FrameDesc>,
    /// Descriptors taken off an RX or completion ring in one go.
    taken: Vec<FrameDesc>,
    /// This batch's frames for the other side's TX ring.
    kept: Vec<FrameDesc>,
    /// This batch's frames going back to their own fill ring.
    recycled: Vec<FrameDesc>,
    /// Entries of every ring, and frames of the UMEM.
    frames: u32,
    /// Frames this code could not place (the other side's TX ring was full) since last read.
    unplaced: u64,
    how: String,
}

impl XdpBridge {
    /// Opens a socket on `iface_a` and one on `iface_b`, both on `queue`, over one UMEM of
    /// `frames` frames (rounded up to a power of two; every ring has as many entries). Attach
    /// modes are tried as `mode` allows (native then generic XDP, zero-copy then copy); both
    /// sockets bind the same way. Half the frames go to each side's fill ring.
    pub fn open(
        iface_a: &str,
        iface_b: &str,
        queue: u32,
        frames: u32,
        mode: XdpMode,
    ) -> anyhow::Result<XdpBridge> {
        if iface_a == iface_b {
            anyhow::bail!("an AF_XDP bridge joins two different interfaces, not {iface_a} twice");
        }
        for iface in [iface_a, iface_b] {
            crate::packet_socket::ifindex(iface)?;
        }
        silence_library_logs();
        let mut bridge = open_first_accepted(&[iface_a, iface_b], queue, mode, |attempt| {
            Self::try_open([iface_a, iface_b], queue, frames, attempt)
        })?;
        bridge.refill();
        Ok(bridge)
    }

    fn try_open(
        ifaces: [&str; 2],
        queue: u32,
        frames: u32,
        attempt: Attempt,
    ) -> Result<XdpBridge, (usize, io::Error)> {
        let ring = queue_size(frames.max(2));
        let (umem, descs) = new_umem(ring, ring.get()).map_err(|e| (0, e))?;
        let side = |i: usize| -> io::Result<Side> {
            // SAFETY: the two sockets are on different interfaces, so each (interface, queue)
            // pair is new to the UMEM and libxdp may load its program on each.
            let (tx, rx, rings) =
                unsafe { bind_socket(&umem, ifaces[i], queue, ring, Steering::Libxdp, attempt)? };
            let (fill, comp) = rings.ok_or_else(|| {
                io::Error::other("no fill and completion ring for a new (interface, queue) pair")
            })?;
            Ok(Side {
                rx,
                tx,
                fill,
                comp,
                lent: 0,
                kernel_drops_seen: 0,
            })
        };
        let a = side(0).map_err(|e| (0, e))?;
        let b = side(1).map_err(|e| (1, e))?;
        let budget = set_tx_budget(&a.tx, ring.get());
        set_tx_budget(&b.tx, ring.get());
        let n = ring.get() as usize;
        let mut pool = Vec::with_capacity(n);
        pool.extend(descs);
        Ok(XdpBridge {
            sides: [a, b],
            umem,
            pool,
            taken: vec![FrameDesc::default(); n],
            kept: Vec::with_capacity(n),
            recycled: Vec::with_capacity(n),
            frames: ring.get(),
            unplaced: 0,
            how: format!("AF_XDP, one UMEM for both sides, {attempt}{budget}"),
        })
    }

    /// How the sockets were bound (attach mode, copy or zero-copy), for summaries.
    pub fn describe(&self) -> String {
        self.how.clone()
    }

    /// Takes up to `max` frames that arrived on `side` (0 = A, 1 = B) and runs `decide` on each
    /// in place (it may rewrite the bytes, not the length); those it keeps (true) go on the
    /// other side's TX ring in arrival order, with one wake-up for the batch when the kernel
    /// asks for one, the rest back to `side`'s fill ring. Returns (arrived, forwarded).
    ///
    /// A frame that finds the other side's TX ring full is not judged: it is counted in
    /// [`XdpBridge::drops`] and recycled. No allocation, lock or system call per frame; none at
    /// all when nothing arrived and nothing waits to be sent.
    pub fn forward(
        &mut self,
        side: usize,
        max: usize,
        mut decide: impl FnMut(&mut [u8]) -> bool,
    ) -> io::Result<(usize, usize)> {
        assert!(side < 2, "side is 0 (A) or 1 (B), not {side}");
        self.reclaim();
        self.refill();
        let max = max.min(self.taken.len());
        let [a, b] = &mut self.sides;
        let (from, to) = if side == 0 { (a, b) } else { (b, a) };
        // SAFETY: `taken` receives descriptors of this UMEM, which the kernel hands over.
        let arrived = unsafe { from.rx.consume(&mut self.taken[..max]) };
        if arrived == 0 {
            return Ok((0, 0));
        }
        from.lent -= arrived as u32;
        let room = to.tx.nb_free(arrived as u32) as usize;
        for desc in &mut self.taken[..arrived] {
            if self.kept.len() == room {
                self.unplaced += 1;
                self.recycled.push(*desc);
                continue;
            }
            // SAFETY: the kernel handed this frame over on the RX ring; no ring holds it and
            // nothing else refers to it until it is put on a ring below.
            let mut data = unsafe { self.umem.data_mut(desc) };
            if decide(data.contents_mut()) {
                self.kept.push(*desc);
            } else {
                self.recycled.push(*desc);
            }
        }
        let forwarded = self.kept.len();
        if forwarded > 0 {
            // SAFETY: the kept frames were received whole and are owned by no ring; `room`
            // said the TX ring has space for them all.
            let produced = unsafe { to.tx.produce(&self.kept) };
            debug_assert_eq!(produced, forwarded, "nb_free promised room");
            self.kept.clear();
            kick(&mut to.tx, self.frames)?;
        }
        if !self.recycled.is_empty() {
            // SAFETY: these frames are owned by no ring; the fill ring has an entry for every
            // frame of the UMEM, so it takes them all.
            let produced = unsafe { from.fill.produce(&self.recycled) };
            debug_assert_eq!(produced, self.recycled.len(), "the fill ring fits the UMEM");
            from.lent += produced as u32;
            self.recycled.clear();
            wake_fill(from)?;
        }
        // What the kicked TX ring has already finished with can wait for the next arrival
        // on a fill ring rather than in the pool.
        self.reclaim();
        self.refill();
        Ok((arrived, forwarded))
    }

    /// The two sockets' descriptors (A's, B's), readable while frames wait on their RX rings.
    pub fn raw_fds(&self) -> [RawFd; 2] {
        [
            self.sides[0].rx.fd().as_raw_fd(),
            self.sides[1].rx.fd().as_raw_fd(),
        ]
    }

    /// Frames lost since the last call: what the kernel dropped for either socket
    /// (`XDP_STATISTICS`: RX ring full, no fill-ring frame to copy into, invalid RX or TX
    /// descriptors) and what this code could not place (the other side's TX ring full). Two
    /// system calls: call it once per status interval, not per batch.
    pub fn drops(&mut self) -> u64 {
        let mut lost = std::mem::take(&mut self.unplaced);
        for side in &mut self.sides {
            let Ok(stats) = side.rx.fd().xdp_statistics() else {
                continue;
            };
            let now = stats.rx_ring_full()
                + stats.rx_dropped()
                + stats.rx_invalid_descs()
                + stats.tx_invalid_descs();
            lost += now.saturating_sub(side.kernel_drops_seen);
            side.kernel_drops_seen = now;
        }
        lost
    }

    /// Takes the frames both TX rings have finished with into the pool.
    fn reclaim(&mut self) {
        for side in &mut self.sides {
            // SAFETY: `taken` receives descriptors of this UMEM; the completion ring holds at
            // most every frame, and `taken` is as long as the UMEM.
            let n = unsafe { side.comp.consume(&mut self.taken) };
            self.pool.extend_from_slice(&self.taken[..n]);
        }
    }

    /// Gives pool frames to each side that has fewer than half the UMEM lent, A first.
    fn refill(&mut self) {
        let target = self.frames / 2;
        for side in &mut self.sides {
            if self.pool.is_empty() {
                return;
            }
            let short = target.saturating_sub(side.lent) as usize;
            let give = short.min(self.pool.len());
            if give == 0 {
                continue;
            }
            let from = self.pool.len() - give;
            // SAFETY: pool frames are owned by no ring; the fill ring fits the whole UMEM.
            let produced = unsafe { side.fill.produce(&self.pool[from..]) };
            self.pool.truncate(self.pool.len() - produced);
            side.lent += produced as u32;
            let _ = wake_fill(side);
        }
    }
}

/// libxdp's opaque handles (`<xdp/libxdp.h>`).
#[repr(C)]
struct XdpMultiprog {
    _private: [u8; 0],
}
#[repr(C)]
struct XdpProgram {
    _private: [u8; 0],
}

extern "C" {
    /// libxdp's logger setter (`<xdp/libxdp.h>`); a null function prints nothing. The
    /// function type carries a `va_list`, so it is passed here as a plain pointer.
    fn libxdp_set_print(print: *const libc::c_void) -> *const libc::c_void;
    // What libxdp says is attached to an interface, and how to take it off (`<xdp/libxdp.h>`).
    fn libxdp_get_error(ptr: *const libc::c_void) -> libc::c_long;
    fn xdp_multiprog__get_from_ifindex(ifindex: libc::c_int) -> *mut XdpMultiprog;
    fn xdp_multiprog__is_legacy(mp: *const XdpMultiprog) -> bool;
    fn xdp_multiprog__main_prog(mp: *const XdpMultiprog) -> *mut XdpProgram;
    fn xdp_multiprog__next_prog(
        prog: *const XdpProgram,
        mp: *const XdpMultiprog,
    ) -> *mut XdpProgram;
    fn xdp_multiprog__attach_mode(mp: *const XdpMultiprog) -> libc::c_uint;
    fn xdp_multiprog__detach(mp: *mut XdpMultiprog) -> libc::c_int;
    fn xdp_multiprog__close(mp: *mut XdpMultiprog);
    fn xdp_program__name(prog: *const XdpProgram) -> *const libc::c_char;
    fn xdp_program__detach(
        prog: *mut XdpProgram,
        ifindex: libc::c_int,
        mode: libc::c_uint,
        flags: libc::c_uint,
    ) -> libc::c_int;
}

/// The name of the program libxdp attaches for AF_XDP sockets (its default redirect program),
/// which the bridge's sockets use: what a killed bridge leaves on both interfaces.
pub const BRIDGE_PROGRAM: &str = "xsk_def_prog";

/// Takes [`BRIDGE_PROGRAM`] off `iface` (in the calling thread's network namespace), attached
/// on its own or through libxdp's dispatcher; any other XDP program stays. True if it was
/// there. For interfaces a killed `sonde intercept bridge --backend xdp` used: while no socket
/// is bound the program passes every frame on, but it stays attached until detached.
pub fn detach_bridge_program(iface: &str) -> anyhow::Result<bool> {
    let ifindex = crate::packet_socket::ifindex(iface)? as libc::c_int;
    silence_library_logs();
    // SAFETY: takes an interface index; the result is checked before any other use.
    let mp = unsafe { xdp_multiprog__get_from_ifindex(ifindex) };
    // SAFETY: libxdp_get_error only inspects the pointer's value.
    let err = unsafe { libxdp_get_error(mp.cast()) };
    if err == -libc::c_long::from(libc::ENOENT) {
        return Ok(false); // no XDP program at all
    }
    if err != 0 {
        anyhow::bail!(
            "cannot read the XDP programs of {iface}: {}",
            io::Error::from_raw_os_error(-err as i32)
        );
    }
    // SAFETY: `mp` is a valid handle (checked above), closed once, right after.
    let detached = unsafe { detach_named(mp, ifindex) };
    // SAFETY: as above; nothing uses `mp` or its programs after this.
    unsafe { xdp_multiprog__close(mp) };
    match detached {
        Ok(found) => Ok(found),
        Err(e) => Err(anyhow::anyhow!(
            "cannot detach {BRIDGE_PROGRAM} from {iface}: {e}"
        )),
    }
}

/// Detaches [`BRIDGE_PROGRAM`] from the programs of `mp`, if it is one of them.
///
/// # Safety
///
/// `mp` must be a valid, open handle from `xdp_multiprog__get_from_ifindex(ifindex)`.
unsafe fn detach_named(mp: *mut XdpMultiprog, ifindex: libc::c_int) -> io::Result<bool> {
    let errno = |rc: libc::c_int| match rc {
        0 => Ok(true),
        rc => Err(io::Error::from_raw_os_error(rc.abs())),
    };
    // SAFETY (all calls below): `mp` is valid (the caller's promise); each program pointer
    // comes from `mp` and is null-checked before use.
    unsafe {
        if xdp_multiprog__is_legacy(mp) {
            // One program attached directly (libxdp does so without a bpffs).
            let main = xdp_multiprog__main_prog(mp);
            return match !main.is_null() && is_bridge_program(main) {
                true => errno(xdp_multiprog__detach(mp)),
                false => Ok(false),
            };
        }
        let mode = xdp_multiprog__attach_mode(mp);
        let mut prog = xdp_multiprog__next_prog(std::ptr::null(), mp);
        while !prog.is_null() && libxdp_get_error(prog.cast()) == 0 {
            if is_bridge_program(prog) {
                return errno(xdp_program__detach(prog, ifindex, mode, 0));
            }
            prog = xdp_multiprog__next_prog(prog, mp);
        }
    }
    Ok(false)
}

/// Whether `prog` (a valid libxdp program handle) is [`BRIDGE_PROGRAM`].
///
/// # Safety
///
/// `prog` must be a valid program handle.
unsafe fn is_bridge_program(prog: *const XdpProgram) -> bool {
    // SAFETY: `prog` is valid (the caller's promise); the name, when there is one, is a
    // NUL-terminated string owned by it.
    let name = unsafe { xdp_program__name(prog) };
    // SAFETY: checked non-null; NUL-terminated as above.
    !name.is_null()
        && unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes() == BRIDGE_PROGRAM.as_bytes()
}

/// Quiets libxdp and libbpf, which otherwise print to stderr about each program they load
/// (e.g. that without a bpffs mounted libxdp attaches its program without a dispatcher);
/// every failure reaches the caller as an error anyway. Process-wide, and idempotent.
fn silence_library_logs() {
    // SAFETY: both setters only store the pointer they are given; null means "print nothing"
    // to both libraries.
    unsafe {
        libxdp_set_print(std::ptr::null());
        libbpf_sys::libbpf_set_print(None);
    }
}

/// Wakes the kernel for `side`'s fill ring if it asked to be (zero-copy drivers do).
fn wake_fill(side: &mut Side) -> io::Result<()> {
    if side.fill.needs_wakeup() {
        side.fill.wakeup(side.rx.fd_mut(), 0)?;
    }
    Ok(())
}

/// Wakes the kernel until it has taken everything off `tx` (a ring of `size` entries), while
/// it asks to be woken: once per batch where the TX budget was raised to the ring size.
fn kick(tx: &mut TxQueue, size: u32) -> io::Result<()> {
    for _ in 0..MAX_KICKS_PER_BATCH {
        if !tx.needs_wakeup() || tx.nb_free_exact() >= size {
            break;
        }
        tx.wakeup()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::test_support::in_private_netns;
    use crate::{AnyRx, AnyTx, BackendKind, FrameRx, FrameTx, IoConfig};

    /// IEEE 802 local experimental ethertype: no protocol stack looks at these frames.
    const EXPERIMENTAL: [u8; 2] = [0x88, 0xb5];

    fn ip(args: &str) {
        let ok = Command::new("ip")
            .args(args.split_whitespace())
            .status()
            .expect("running ip")
            .success();
        assert!(ok, "ip {args}");
    }

    /// Two veth pairs, pa—xa and xb—pb: the bridge joins xa and xb; the test sends on pa and
    /// receives on pb.
    fn two_wires() {
        // No IPv6 on them: no neighbour discovery or MLD frames besides the test's.
        for key in ["all", "default"] {
            let ok = Command::new("sysctl")
                .args(["-qw", &format!("net.ipv6.conf.{key}.disable_ipv6=1")])
                .status()
                .expect("running sysctl")
                .success();
            assert!(ok, "sysctl disable_ipv6");
        }
        ip("link add pa type veth peer name xa");
        ip("link add pb type veth peer name xb");
        for dev in ["pa", "xa", "pb", "xb"] {
            ip(&format!("link set dev {dev} up"));
        }
    }

    /// Frame `n` of the experimental ethertype, its number in bytes 14..18.
    fn numbered(buf: &mut [u8], n: u32) -> usize {
        buf[..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb, 2, 0, 0, 0, 0, 0xaa]);
        buf[12..14].copy_from_slice(&EXPERIMENTAL);
        buf[14..18].copy_from_slice(&n.to_be_bytes());
        buf[18..100].fill(n as u8);
        100
    }

    /// Sends frames `first..first + count` on `tx`.
    fn send(tx: &mut AnyTx, first: u32, count: u32) {
        let mut sent = 0;
        while sent < count {
            sent += tx
                .tx_batch((count - sent) as usize, |i, buf| {
                    numbered(buf, first + sent + i as u32)
                })
                .unwrap() as u32;
        }
    }

    fn number(frame: &[u8]) -> Option<u32> {
        (frame.len() >= 18 && frame[12..14] == EXPERIMENTAL)
            .then(|| u32::from_be_bytes(frame[14..18].try_into().unwrap()))
    }

    fn xdp_attached(dev: &str) -> bool {
        let out = Command::new("ip")
            .args(["-d", "link", "show", dev])
            .output()
            .expect("ip -d link show");
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }

    #[test]
    fn frames_cross_in_place_many_times_round_the_umem_and_the_program_goes_on_drop() {
        in_private_netns(|| {
            two_wires();
            let mut bridge = XdpBridge::open("xa", "xb", 0, 64, XdpMode::Auto).unwrap();
            eprintln!("{}", bridge.describe());
            assert!(xdp_attached("xa") && xdp_attached("xb"));
            let mut tx = AnyTx::open(BackendKind::Mmsg, &IoConfig::new("pa")).unwrap();
            let mut rx = AnyRx::open(BackendKind::Ring, &IoConfig::new("pb")).unwrap();
            rx.set_filter("ether proto 0x88b5").unwrap();
            // 1200 frames through a UMEM of 64 (32 lent to each fill ring), in bursts of 24:
            // every frame goes round many times; odd-numbered ones are dropped, the rest leave
            // pb rewritten.
            let (total, burst) = (1200u32, 24u32);
            let mut got = Vec::new();
            let keep_even = |frame: &mut [u8]| match number(frame) {
                Some(n) if n % 2 == 1 => false,
                Some(_) => {
                    frame[18] = 0xee; // rewritten in place
                    true
                }
                None => true,
            };
            let mut forward = |bridge: &mut XdpBridge, want: usize, got: &mut Vec<u32>| {
                let (mut arrived, mut forwarded) = (0, 0);
                let end = Instant::now() + Duration::from_secs(3);
                while got.len() < want && Instant::now() < end {
                    let (n, kept) = bridge.forward(0, 64, keep_even).unwrap();
                    arrived += n;
                    forwarded += kept;
                    rx.rx_batch(64, Duration::from_millis(1), |f| {
                        assert_eq!(f[18], 0xee, "the frame left unchanged");
                        got.extend(number(f));
                    })
                    .unwrap();
                }
                (arrived, forwarded)
            };
            // Lets the kernel complete what was sent on B; one pass with nothing arriving takes
            // the frames back and lends them to A again.
            let settle = |bridge: &mut XdpBridge| {
                std::thread::sleep(Duration::from_millis(5));
                assert_eq!(bridge.forward(1, 64, |_| true).unwrap(), (0, 0));
            };
            for start in (0..total).step_by(burst as usize) {
                settle(&mut bridge);
                send(&mut tx, start, burst);
                let want = (start + burst) as usize / 2;
                let (arrived, forwarded) = forward(&mut bridge, want, &mut got);
                assert_eq!(
                    (arrived, forwarded),
                    (burst as usize, burst as usize / 2),
                    "burst from {start}: {} drops, {} received",
                    bridge.drops(),
                    got.len()
                );
            }
            assert_eq!(got, (0..total).step_by(2).collect::<Vec<_>>());
            assert_eq!(bridge.drops(), 0, "frames were lost");
            // A burst larger than what is lent to A's fill ring: what does not fit is dropped
            // by the kernel, and counted.
            settle(&mut bridge);
            send(&mut tx, total, 48);
            std::thread::sleep(Duration::from_millis(50));
            let (arrived, _) = forward(&mut bridge, 16, &mut Vec::new());
            let drops = bridge.drops();
            eprintln!("a burst of 48 into 32 lent frames: {arrived} arrived, {drops} dropped");
            assert_eq!(
                (arrived, drops),
                (32, 16),
                "every lent frame used, the rest counted"
            );
            drop(bridge);
            assert!(
                !xdp_attached("xa") && !xdp_attached("xb"),
                "an XDP program stayed attached"
            );
        });
    }

    #[test]
    fn a_killed_bridges_program_is_detached_by_name_and_no_other() {
        in_private_netns(|| {
            two_wires();
            // A crash: the sockets are never closed, so libxdp never takes its program off.
            std::mem::forget(XdpBridge::open("xa", "xb", 0, 64, XdpMode::Auto).unwrap());
            assert!(xdp_attached("xa") && xdp_attached("xb"));
            assert!(
                detach_bridge_program("xa").unwrap(),
                "xa's program not found"
            );
            assert!(!xdp_attached("xa"), "still attached to xa");
            assert!(detach_bridge_program("xb").unwrap());
            assert!(!xdp_attached("xb"));
            assert!(
                !detach_bridge_program("xb").unwrap(),
                "nothing left to detach"
            );
            // Another XDP program (sonde's reply filter) is not the bridge's: it stays.
            let mut cfg = IoConfig::new("pa");
            cfg.xdp_mode = XdpMode::Generic;
            let spec = crate::FilterSpec {
                ipv4: Some(crate::test_support::SCAN4),
                ipv6: None,
                tcp: crate::TcpTake::None,
                udp: true,
                icmp: false,
                icmp6: false,
                ports: (40000, 40010),
                echo_id: None,
                spare_host_sockets: true,
                stamp_arrivals: false,
            };
            let rx = AnyRx::open_filtered(BackendKind::Xdp, &cfg, &spec, "").unwrap();
            assert!(xdp_attached("pa"));
            assert!(
                !detach_bridge_program("pa").unwrap(),
                "detached another program"
            );
            assert!(xdp_attached("pa"), "another program was taken off");
            drop(rx);
            let e = detach_bridge_program("nosuch0").unwrap_err().to_string();
            assert!(e.contains("nosuch0"), "{e}");
        });
    }

    #[test]
    fn one_interface_twice_or_a_missing_one_is_one_line() {
        in_private_netns(|| {
            two_wires();
            let err = XdpBridge::open("xa", "xa", 0, 64, XdpMode::Auto)
                .err()
                .unwrap();
            assert!(format!("{err:#}").contains("xa twice"), "{err:#}");
            let err = XdpBridge::open("xa", "nosuch0", 0, 64, XdpMode::Auto)
                .err()
                .unwrap();
            let text = format!("{err:#}");
            assert!(text.contains("nosuch0") && !text.contains('\n'), "{text}");
            let err = XdpBridge::open("xa", "xb", 3, 64, XdpMode::Auto)
                .err()
                .unwrap();
            let text = format!("{err:#}");
            assert!(text.contains("no queue 3"), "{text}");
        });
    }
}
