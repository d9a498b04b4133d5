//! The grab loop over the `mem` backend against a scripted peer: one row per target whatever
//! arrives late or twice, also across a resume, and corrupted segments counted and dropped.

mod order;
pub(super) mod peer;
mod rows;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;

use sonde_apps::{AnyApp, AppKind, AppOptions};
use sonde_craft::cookie::{PortRange, Validator};
use sonde_io::{mem, AnyRx, AnyTx, BackendKind, FrameRx, XdpMode};
use sonde_scan::output::{Row, RowWriter};
use sonde_scan::reply::Value;
use sonde_scan::targets::{parse_targets, PrefixSet, TargetSpace};

use peer::{banner, corrupted_banner, Controls, Peer, Script, GW_MAC, OUR_IP, OUR_MAC};

use super::{all_fields, run_on, GrabIo, GrabPlan, GrabSummary};
use crate::checkpoint::Checkpoint;
use crate::plan::RunPlan;
use crate::stop::{Stop, StopReason};

/// One row as the loop wrote it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub saddr: IpAddr,
    pub status: String,
    pub banner: Option<String>,
}

/// A row writer that keeps the rows where the test (and the peer) can read them while the
/// loop runs; optionally also in a log the rows of several runs share.
#[derive(Clone, Default)]
pub struct RowLog {
    own: Arc<Mutex<Vec<Logged>>>,
    also: Option<Arc<Mutex<Vec<Logged>>>>,
}

impl RowLog {
    /// A log whose rows also go to `all`.
    fn part_of(all: &RowLog) -> RowLog {
        RowLog {
            own: Arc::default(),
            also: Some(all.own.clone()),
        }
    }

    pub fn rows(&self) -> Vec<Logged> {
        self.own.lock().unwrap().clone()
    }

    /// The targets that have a row.
    pub fn addrs(&self) -> Vec<IpAddr> {
        self.own.lock().unwrap().iter().map(|r| r.saddr).collect()
    }
}

impl RowWriter for RowLog {
    fn write(&mut self, r: &dyn Row) -> anyhow::Result<()> {
        let text = |name| match r.get(name) {
            Value::Str(s) => Some(s),
            _ => None,
        };
        let row = Logged {
            saddr: text("saddr").unwrap().parse().unwrap(),
            status: text("tcp_status").unwrap(),
            banner: text("banner"),
        };
        if let Some(all) = &self.also {
            all.lock().unwrap().push(row.clone());
        }
        self.own.lock().unwrap().push(row);
        Ok(())
    }

    fn flush_rows(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    fn finish(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }
}

const KEY: [u64; 2] = [0x5eed, 0x0bad_cafe];

/// A banner grab of `targets` port 80 from 198.19.255.1 at `rate` new connections per second
/// (0: at once), one SYN retry after 100 ms (so a silent target is given up 300 ms after its
/// first SYN), 5 s to the first byte.
pub(super) fn plan(targets: &str, rate: f64, dir: &tempdir::Dir) -> GrabPlan<AnyApp> {
    let spec = parse_targets(&[targets]).unwrap();
    let space = TargetSpace::new(&spec, None, &PrefixSet::new(), &[80]).unwrap();
    let run = RunPlan {
        space,
        seed: 11,
        key: KEY,
        shard: (0, 1),
        threads: 1,
        probes: 1,
        max_targets: None,
        rate,
        batch: 64,
        cooldown: 0.0,
        iface: "mem".into(),
        src_mac: OUR_MAC,
        gateway_mac: GW_MAC,
        src_ip: Some(OUR_IP),
        src_ip6: None,
        source_is_local: false,
        queues: 1,
        cpus: None,
        backend: BackendKind::Mem,
        rx_backend: BackendKind::Mem,
        xdp_mode: XdpMode::Auto,
        ports: PortRange::DEFAULT,
        resume: None,
        resumed_from: None,
        checkpoint: dir.path("grab.checkpoint.json"),
        status_file: None,
        overwrite: true,
        quiet: true,
        metrics: None,
    };
    let mut tcp = sonde_tcp::Config::new(OUR_MAC, GW_MAC, Validator::new(KEY));
    tcp.src_ip = Some(OUR_IP);
    tcp.max_outstanding = 1000;
    tcp.first_byte_timeout_us = 5_000_000;
    let app = AnyApp::build(AppKind::Banner, &AppOptions::default()).unwrap();
    let fields = all_fields(&app).collect();
    GrabPlan {
        run,
        tcp,
        app,
        syn_retries: 1,
        syn_timeout_us: 100_000,
        arp_for: None,
        fields,
    }
}

/// A folder of its own for a test's checkpoint, removed afterwards.
pub(super) mod tempdir {
    use std::path::PathBuf;

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(name: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("sonde-grab-loop-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        pub fn path(&self, file: &str) -> PathBuf {
            self.0.join(file)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The loop's end of an in-memory link (its transmit and receive queues) and the peer's.
fn link() -> (mem::MemPort, mem::MemPort) {
    mem::pair(4096)
}

/// Drops the frames waiting at the loop's end of the link.
fn drain(end: &mem::MemPort) {
    let mut rx = end.another_handle();
    while rx.rx_batch(256, std::time::Duration::ZERO, |_| {}).unwrap() > 0 {}
}

/// Each thread's queues on the loop's end of the link: every thread sends on it, and the first
/// thread alone receives, so every reply to another thread's connection must be handed over.
fn ios_of(end: &mem::MemPort, threads: u32) -> Vec<GrabIo> {
    (0..threads.max(1))
        .map(|t| GrabIo {
            tx: AnyTx::Mem(end.another_handle()),
            rxs: if t == 0 {
                vec![AnyRx::Mem(end.another_handle())]
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// Runs `plan` over `end` to its end (or `stop`), writing rows to `rows`.
fn grab(plan: GrabPlan<AnyApp>, end: &mem::MemPort, rows: &RowLog, stop: &Stop) -> GrabSummary {
    let ios = ios_of(end, plan.run.threads);
    run_on(plan, ios, Box::new(rows.clone()), stop).unwrap()
}

/// `plan` on `threads` engine threads.
fn on_threads(mut plan: GrabPlan<AnyApp>, threads: u32) -> GrabPlan<AnyApp> {
    plan.run.threads = threads;
    plan
}

/// With several threads, every figure of the summary adds up to what the rows say, and the
/// frames for the threads that receive nothing were handed over.
fn check_threads_add_up(summary: &GrabSummary, rows: &[Logged], threads: u32) {
    let count = |status: &str| rows.iter().filter(|r| r.status == status).count() as u64;
    assert_eq!(summary.threads, threads);
    assert_eq!(summary.success, count("success"));
    assert_eq!(summary.refused, count("refused"));
    assert_eq!(summary.syn_timeouts, count("syn-timeout"));
    let l = summary.loop_stats.as_ref().unwrap();
    if threads > 1 {
        assert!(l.handed_over > 0, "nothing handed to the other threads");
        assert_eq!(summary.handover_dropped, 0);
    } else {
        assert_eq!(l.handed_over, 0);
    }
}

/// Each target's rows, by address.
fn by_target(rows: &[Logged]) -> HashMap<IpAddr, Vec<Logged>> {
    let mut map: HashMap<IpAddr, Vec<Logged>> = HashMap::new();
    for r in rows {
        map.entry(r.saddr).or_default().push(r.clone());
    }
    map
}

fn last_octet(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(v4) => v4.octets()[3],
        IpAddr::V6(_) => unreachable!("IPv4 targets"),
    }
}

fn every_kind(addr: IpAddr) -> Script {
    match last_octet(addr) {
        1 => Script::LateSynAck,
        2 => Script::LateRst,
        3 => Script::DuplicateSynAck,
        4 => Script::RefuseTwice,
        5 => Script::Keeper,
        7 => Script::LateSynAck,
        _ => Script::Serve,
    }
}

#[test]
fn late_and_duplicate_answers_never_make_a_second_row() {
    late_and_duplicate_answers(1);
}

#[test]
fn with_two_threads_late_and_duplicate_answers_never_make_a_second_row() {
    late_and_duplicate_answers(2);
}

fn late_and_duplicate_answers(threads: u32) {
    let dir = tempdir::Dir::new(&format!("late{threads}"));
    let (ours, theirs) = link();
    let rows = RowLog::default();
    let controls = Controls::default();
    let peer = Peer::new(theirs, every_kind, rows.clone(), controls.clone());
    let peer = thread::spawn(move || peer.run());
    let summary = grab(
        on_threads(plan("198.18.0.0/29", 0.0, &dir), threads),
        &ours,
        &rows,
        &Stop::manual(),
    );
    controls.done.store(true, Ordering::Release);
    let peer = peer.join().unwrap();

    let rows = rows.rows();
    let per_target = by_target(&rows);
    assert_eq!(per_target.len(), 8, "{rows:?}");
    for (addr, rows) in &per_target {
        assert_eq!(rows.len(), 1, "{addr}: {rows:?}");
        let row = &rows[0];
        let want = match every_kind(*addr) {
            Script::LateSynAck | Script::LateRst => "syn-timeout",
            Script::RefuseTwice => "refused",
            _ => "success",
        };
        assert_eq!(row.status, want, "{addr}");
        if want == "success" {
            assert_eq!(row.banner.as_deref(), Some(banner(*addr).as_str()));
        }
    }
    // Each late SYN-ACK got one RST from the loop, with the sequence number its SYN had:
    // those given up on, and the duplicate after the connection had ended.
    for (addr, t) in &peer.targets {
        match t.script.unwrap() {
            Script::LateSynAck | Script::DuplicateSynAck => {
                assert_eq!(t.late_synacks, 1, "{addr}");
                assert_eq!(
                    t.rsts_after_late(),
                    1,
                    "{addr}: no RST for the late SYN-ACK"
                );
                assert_eq!(t.rsts.last(), Some(&t.client_iss.wrapping_add(1)), "{addr}");
            }
            Script::LateRst => {
                assert!(
                    t.rsts_before_late.is_some(),
                    "{addr}: the late RST was sent"
                )
            }
            _ => {}
        }
        // Given up or answered, a target gets no SYN after that.
        assert!(t.syns <= 2, "{addr}: {} SYNs", t.syns);
    }
    assert_eq!(
        (summary.syn_timeouts, summary.refused, summary.success),
        (3, 1, 4)
    );
    assert_eq!(summary.bad_checksums, 0);
    // Invalid, each counted once: three late SYN-ACKs, the late RST, the second refusal.
    assert_eq!(summary.invalid, 5);
    // One bitmap of the 8 targets (a word), whatever the threads (issue 30).
    assert_eq!(summary.answered_bytes, 8, "{summary:?}");
    check_threads_add_up(&summary, &rows, threads);
}

fn a_quarter_late(addr: IpAddr) -> Script {
    if last_octet(addr) % 4 == 1 {
        Script::LateSynAck
    } else {
        Script::Serve
    }
}

#[test]
fn a_resumed_grab_writes_each_target_once_across_both_runs() {
    resumed_grab(1);
}

#[test]
fn with_two_threads_a_resumed_grab_writes_each_target_once_across_both_runs() {
    resumed_grab(2);
}

fn resumed_grab(threads: u32) {
    let dir = tempdir::Dir::new(&format!("resume{threads}"));
    let (ours, theirs) = link();
    // The peer sees the rows of both runs: a late answer follows a row in either.
    let all_rows = RowLog::default();
    let rows = [RowLog::part_of(&all_rows), RowLog::part_of(&all_rows)];
    let controls = Controls::default();
    let peer = Peer::new(theirs, a_quarter_late, all_rows.clone(), controls.clone());
    let peer = thread::spawn(move || peer.run());

    // The first run is interrupted once a target has been given up on.
    let stop = Stop::manual();
    let stopper = {
        let (rows, stop) = (rows[0].clone(), stop.clone());
        thread::spawn(move || {
            for _ in 0..3000 {
                if rows.rows().iter().any(|r| r.status == "syn-timeout") {
                    stop.set(StopReason::Signal);
                    return;
                }
                thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let first = grab(
        on_threads(plan("198.18.0.0/26", 50.0, &dir), threads),
        &ours,
        &rows[0],
        &stop,
    );
    stopper.join().unwrap();
    let checkpoint = PathBuf::from(first.checkpoint.clone().expect("interrupted: a checkpoint"));

    // Frames that reached the first run after it ended are gone, as a closed socket's are
    // (the peer answers the run's last rows late, within a pass of its 2 ms loop: those late
    // SYN-ACKs are replayed below).
    thread::sleep(std::time::Duration::from_millis(200));
    drain(&ours);
    // The second run resumes; the previous run's late SYN-ACKs arrive as it starts.
    controls.replay.store(true, Ordering::Release);
    let mut again = on_threads(plan("198.18.0.0/26", 0.0, &dir), threads);
    again.run.resume = Some(Checkpoint::load(&checkpoint).unwrap());
    let second = grab(again, &ours, &rows[1], &Stop::manual());
    controls.done.store(true, Ordering::Release);
    let peer = peer.join().unwrap();

    let (a, b) = (rows[0].rows(), rows[1].rows());
    eprintln!("{} rows before the interrupt, {} after", a.len(), b.len());
    assert!(
        !a.is_empty() && !b.is_empty(),
        "the interrupt did not split the grab"
    );
    let both: Vec<Logged> = a.iter().chain(&b).cloned().collect();
    let per_target = by_target(&both);
    for (addr, rows) in &per_target {
        assert_eq!(rows.len(), 1, "{addr}: {rows:?}");
    }
    assert_eq!(per_target.len(), 64, "targets missed");
    // The previous run's late SYN-ACKs were answered with RSTs, not connections.
    assert!(peer.replayed > 0, "no late SYN-ACK reached the resumed run");
    for (addr, t) in peer.targets.iter().filter(|(_, t)| t.replayed) {
        assert_eq!(t.rsts_after_late(), 1, "{addr}: a late SYN-ACK not reset");
    }
    assert_eq!(first.success + second.success, 48);
    check_threads_add_up(&first, &a, threads);
    check_threads_add_up(&second, &b, threads);
}

fn corrupt_first(_: IpAddr) -> Script {
    Script::CorruptFirst
}

#[test]
fn a_corrupted_segment_is_counted_and_not_delivered() {
    let dir = tempdir::Dir::new("corrupt");
    for verify in [true, false] {
        let (ours, theirs) = link();
        let rows = RowLog::default();
        let controls = Controls::default();
        let peer = Peer::new(theirs, corrupt_first, rows.clone(), controls.clone());
        let peer = thread::spawn(move || peer.run());
        let mut plan = plan("198.18.0.0/30", 0.0, &dir);
        plan.tcp.verify_checksums = verify;
        let summary = grab(plan, &ours, &rows, &Stop::manual());
        controls.done.store(true, Ordering::Release);
        peer.join().unwrap();
        let rows = rows.rows();
        assert_eq!(rows.len(), 4);
        for row in &rows {
            assert_eq!(row.status, "success");
            let (good, bogus) = (banner(row.saddr), corrupted_banner(row.saddr));
            // Unverified, the corrupted copy is taken as the reply (and the intact one is
            // then a retransmission): what the check is for.
            let want = if verify { good } else { bogus };
            assert_eq!(
                row.banner.as_deref(),
                Some(want.as_str()),
                "verify {verify}"
            );
        }
        assert_eq!(summary.checksums_verified, verify);
        assert_eq!(summary.bad_checksums, if verify { 4 } else { 0 });
        assert_eq!(summary.invalid, summary.bad_checksums);
    }
}

fn serve(_: IpAddr) -> Script {
    Script::Serve
}

#[test]
fn a_target_that_answered_frees_its_slot_at_once() {
    // 64 targets, 4 open at once, and a first SYN retry 60 s away: were an answered target's
    // slot held until its retry was due, 4 connections would be all this run made before the
    // watchdog stops it (10 s, then 11 s to end the draining).
    let dir = tempdir::Dir::new("slots");
    let (ours, theirs) = link();
    let rows = RowLog::default();
    let controls = Controls::default();
    let peer = Peer::new(theirs, serve, rows.clone(), controls.clone());
    let peer = thread::spawn(move || peer.run());
    let mut plan = plan("198.18.0.0/26", 0.0, &dir);
    plan.tcp.max_outstanding = 4;
    plan.syn_timeout_us = 60_000_000;
    let stop = Stop::manual();
    let (watchdog, finished) = {
        let (stop, finished) = (
            stop.clone(),
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let done = finished.clone();
        let watchdog = thread::spawn(move || {
            for tick in 0..110 {
                if done.load(Ordering::Acquire) {
                    return;
                }
                if tick == 100 || tick == 109 {
                    stop.set(StopReason::Signal);
                }
                thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        (watchdog, finished)
    };
    let summary = grab(plan, &ours, &rows, &stop);
    finished.store(true, Ordering::Release);
    watchdog.join().unwrap();
    controls.done.store(true, Ordering::Release);
    peer.join().unwrap();

    assert!(
        !summary.interrupted,
        "the watchdog had to stop it: {summary:?}"
    );
    let rows = rows.rows();
    assert_eq!(rows.len(), 64, "{rows:?}");
    assert!(rows.iter().all(|r| r.status == "success"), "{rows:?}");
    let loop_stats = summary.loop_stats.unwrap();
    assert!(loop_stats.peak_syns_in_flight <= 4, "{loop_stats:?}");
    assert_eq!(loop_stats.first_syns, 64);
}

#[test]
fn with_nothing_to_do_until_a_retry_the_loop_sleeps() {
    // One target nobody answers: its SYN, a retry 50 ms later, the give-up 100 ms after that.
    // Between them the loop has nothing to do and sleeps until the next is due (a spinning
    // or millisecond-polling loop makes hundreds of passes in those 150 ms).
    let dir = tempdir::Dir::new("sleeps");
    let (ours, _nobody) = link();
    let rows = RowLog::default();
    let mut plan = plan("198.18.0.1/32", 0.0, &dir);
    plan.syn_timeout_us = 50_000;
    let summary = grab(plan, &ours, &rows, &Stop::manual());
    let rows = rows.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "syn-timeout");
    let l = summary.loop_stats.clone().unwrap();
    assert!(l.passes <= 12, "{l:?}");
    assert!(l.waits >= 2 && l.wait_s >= 0.1, "{l:?}");
    // And it ended when the row was out, not a timer's turn later.
    assert!(summary.wall_s < 0.5, "{summary:?}");
}

#[test]
fn a_paced_grab_sleeps_between_its_syns() {
    // Eight targets at 40 new connections a second: 175 ms from the first SYN to the last.
    // The loop wakes for each SYN and for the peer's segments, and sleeps in between.
    let dir = tempdir::Dir::new("paced");
    let (ours, theirs) = link();
    let rows = RowLog::default();
    let controls = Controls::default();
    let peer = Peer::new(theirs, serve, rows.clone(), controls.clone());
    let peer = thread::spawn(move || peer.run());
    let summary = grab(
        plan("198.18.0.0/29", 40.0, &dir),
        &ours,
        &rows,
        &Stop::manual(),
    );
    controls.done.store(true, Ordering::Release);
    peer.join().unwrap();
    let rows = rows.rows();
    assert_eq!(rows.len(), 8, "{rows:?}");
    assert!(rows.iter().all(|r| r.status == "success"), "{rows:?}");
    let l = summary.loop_stats.unwrap();
    assert!(l.passes <= 200, "{l:?}");
    assert!(l.wait_s >= 0.1, "{l:?}");
}
