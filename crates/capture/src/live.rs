//! A live capture: capture threads read their sources into chunks, one writer thread merges
//! the chunks into the output file, and the caller watches the shared counters.
//!
//! ```text
//! source (ring | xdp | pcap) ─► capture thread ─► chunk ─┐
//! source …                   ─► capture thread ─► chunk ─┼─► writer: merge ─► file(s)
//!                                       ▲ empty chunks ◄─┘
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chunk::{Chunk, ChunkPort};
use crate::merge::{Merge, HEARTBEAT, SLACK_NS};
use crate::output::{CaptureWriter, RecordFormat, WriteFailed};
use crate::source::{now_ns, Packet, Source, SourceDrops, TsSource};
use sonde_meter::stages::{self, Role, Stage};

/// Packets asked of a source per call.
const BATCH: usize = 256;
/// How long a source waits for packets before the thread looks at the clock and the stop flag
/// (an idle capture wakes 20 times a second, no more).
const IDLE_WAIT: Duration = HEARTBEAT;
/// How often a thread reads its kernel drop counters.
const DROPS_EVERY: Duration = Duration::from_millis(500);

/// Counters the capture threads and the writer keep, read live by the caller.
#[derive(Debug, Default)]
pub struct Counters {
    /// Packets the sources handed to sonde.
    pub received: AtomicU64,
    /// Packets written to the file.
    pub captured: AtomicU64,
    /// Bytes of packet data written.
    pub bytes: AtomicU64,
    pub ring_drops: AtomicU64,
    pub kernel_drops: AtomicU64,
    /// Packets sonde had to drop: no free chunk (the writer or the disk was behind), or left
    /// unwritten when writing failed.
    pub writer_drops: AtomicU64,
    /// A packet with a hardware stamp was seen.
    pub hardware_ts: AtomicBool,
}

impl Counters {
    /// Packets lost so far, by every cause.
    pub fn dropped(&self) -> u64 {
        self.ring_drops.load(Ordering::Relaxed)
            + self.kernel_drops.load(Ordering::Relaxed)
            + self.writer_drops.load(Ordering::Relaxed)
    }
}

/// What to capture and where to stop, with every buffer the capture will use already
/// allocated and touched (so neither the capture's CPU figures nor its first packets pay for
/// that).
pub struct Plan {
    /// One source per capture thread.
    sources: Vec<Source>,
    /// Stop after writing this many packets.
    count: Option<u64>,
    /// Each thread's chunks (1 MiB each).
    pools: Vec<Vec<Chunk>>,
}

impl Plan {
    pub fn new(sources: Vec<Source>, count: Option<u64>, chunks_per_thread: usize) -> Plan {
        let pools = (0..sources.len())
            .map(|t| (0..chunks_per_thread).map(|_| Chunk::new(t)).collect())
            .collect();
        Plan {
            sources,
            count,
            pools,
        }
    }
}

/// How the capture ended.
#[derive(Debug)]
pub struct Ending {
    pub ts_source: TsSource,
    /// Files written.
    pub files: Vec<String>,
    /// Why writing stopped early (the disk is full, the pipe closed), if it did.
    pub write_error: Option<String>,
}

/// Runs the capture until `stop` is set (by the caller: Ctrl-C, a duration) or the count is
/// reached or writing fails (both of which set `stop` themselves).
pub fn run(
    plan: Plan,
    writer: CaptureWriter,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Ending> {
    let threads = plan.sources.len();
    let ts_source = plan.sources[0].ts_source(false);
    let format = writer.record_format();
    let in_flight: usize = plan.pools.iter().map(Vec::len).sum();
    let (to_writer, from_threads) = mpsc::sync_channel::<Chunk>(in_flight);
    let mut returns = Vec::new();
    let mut handles = Vec::new();
    for (t, (source, pool)) in plan.sources.into_iter().zip(plan.pools).enumerate() {
        let (free_tx, free_rx) = mpsc::sync_channel(pool.len());
        for chunk in pool {
            free_tx.send(chunk).expect("the pool has room");
        }
        returns.push(free_tx);
        let port = ChunkPort {
            free: free_rx,
            to_writer: to_writer.clone(),
        };
        let (counters, stop) = (counters.clone(), stop.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("capture-{t}"))
                .spawn(move || {
                    capture_thread(t, threads, format, source, port, &counters, &stop)
                })?,
        );
    }
    drop(to_writer);
    let write_error = Arc::new(Mutex::new(None));
    let writer_thread = {
        let (counters, stop, write_error) = (counters.clone(), stop.clone(), write_error.clone());
        std::thread::Builder::new()
            .name("capture-writer".into())
            .spawn(move || {
                let mut w = WriterLoop {
                    writer,
                    merge: Merge::new(threads),
                    returns,
                    counters,
                    stop,
                    count: plan.count,
                };
                stages::begin_thread(Role::Rx);
                let result = w.run(from_threads);
                let files = w.writer.files();
                let end = w.counters.dropped();
                // After a failure the statistics block is still tried: cutting the file back
                // may have made room for it.
                let finished = w.writer.finish(end);
                // What `run` lost it has counted already; what the last write lost is new.
                if let Err(f) = &finished {
                    if f.lost > 0 {
                        w.failed(f.lost);
                    }
                }
                if let Some(failed) = result.err().or(finished.err()) {
                    *write_error.lock().expect("not poisoned") = Some(failed.to_string());
                }
                stages::end_thread();
                files
            })?
    };
    // A thread that fails has stopped the others; the file is still finished before the
    // error is told.
    let mut failure = None;
    for h in handles {
        let ended = h
            .join()
            .map_err(|_| anyhow::anyhow!("a capture thread panicked"))
            .and_then(|r| r);
        if let Err(e) = ended {
            failure.get_or_insert(e);
        }
    }
    let files = writer_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
    let ts_source = if counters.hardware_ts.load(Ordering::Relaxed) {
        TsSource::Hardware
    } else {
        ts_source
    };
    if let Some(e) = failure {
        return Err(e);
    }
    let write_error = write_error.lock().expect("not poisoned").take();
    Ok(Ending {
        ts_source,
        files,
        write_error,
    })
}

/// One capture thread: reads its source into chunks until told to stop, then sends its last
/// chunk (marked `last`).
fn capture_thread(
    thread: usize,
    threads: usize,
    format: RecordFormat,
    mut source: Source,
    port: ChunkPort,
    counters: &Counters,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let mut filler = Filler {
        thread,
        format,
        chunk: port.free.recv().ok(),
        port,
        last_handover: Instant::now(),
        dropped: 0,
        received: 0,
        hardware: false,
    };
    let mut last_drops = Instant::now();
    stages::begin_thread(Role::Rx);
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        let got = match source.next_batch(BATCH, IDLE_WAIT, |p| filler.take(p)) {
            Ok(got) => got,
            Err(e) => {
                // The other threads stop too; the writer finishes the file.
                stop.store(true, Ordering::Relaxed);
                break Err(anyhow::anyhow!("receiving: {e}"));
            }
        };
        // A thin batch from a source that hands over frame by frame: let frames gather
        // before the next system call, as the ring's blocks do in the kernel.
        if got > 0 && got < BATCH / 4 {
            if let Some(nap) = source.coalesce() {
                stages::call(Stage::Copy, Stage::RxCall, || std::thread::sleep(nap));
            }
        }
        filler.publish(counters);
        // A lone thread needs no heartbeat (the merge waits for no one), only its packets
        // handed over while the writer would otherwise wait for a full chunk.
        let due = filler.last_handover.elapsed() >= HEARTBEAT;
        if due && (threads > 1 || filler.holds_packets()) {
            filler.hand_over(false);
        }
        if last_drops.elapsed() >= DROPS_EVERY {
            add_drops(counters, source.take_drops());
            last_drops = Instant::now();
        }
    };
    add_drops(counters, source.take_drops());
    if let Some((ring, iface)) = source.pcap_totals() {
        counters.ring_drops.fetch_add(ring, Ordering::Relaxed);
        counters.kernel_drops.fetch_add(iface, Ordering::Relaxed);
    }
    filler.publish(counters);
    filler.hand_over(true);
    stages::end_thread();
    result
}

fn add_drops(counters: &Counters, d: SourceDrops) {
    counters.ring_drops.fetch_add(d.ring, Ordering::Relaxed);
    counters.kernel_drops.fetch_add(d.kernel, Ordering::Relaxed);
}

/// A capture thread's current chunk and what it has counted since it last published.
struct Filler {
    thread: usize,
    /// How packets become records of the output file.
    format: RecordFormat,
    chunk: Option<Chunk>,
    port: ChunkPort,
    last_handover: Instant,
    received: u64,
    dropped: u64,
    hardware: bool,
}

impl Filler {
    /// Copies a packet into the current chunk, handing full chunks over; counts it as dropped
    /// by sonde when no chunk is free.
    fn take(&mut self, p: &Packet<'_>) {
        self.received += 1;
        self.hardware |= p.hw_timestamp;
        for _ in 0..2 {
            let Some(chunk) = self.chunk.as_mut() else {
                self.chunk = self.port.free.try_recv().ok();
                if self.chunk.is_none() {
                    break;
                }
                continue;
            };
            if chunk.push(&self.format, p.ts_ns, p.wire_len, &p.parts) {
                stages::mark(Stage::Copy);
                return;
            }
            self.hand_over(false);
        }
        self.dropped += 1;
    }

    fn holds_packets(&self) -> bool {
        self.chunk.as_ref().is_some_and(|c| !c.is_empty())
    }

    /// Sends the current chunk (possibly empty: a heartbeat) with this thread's watermark, and
    /// takes a free one if there is one.
    fn hand_over(&mut self, last: bool) {
        self.last_handover = Instant::now();
        let mut chunk = match self.chunk.take() {
            Some(c) => c,
            // No chunk in hand: the writer holds them all. A last word must still get through.
            None if last => self
                .port
                .free
                .recv()
                .unwrap_or_else(|_| Chunk::new(self.thread)),
            None => {
                self.chunk = self.port.free.try_recv().ok();
                return;
            }
        };
        chunk.watermark_ns = now_ns().saturating_sub(SLACK_NS);
        chunk.last = last;
        // The writer only goes away after every thread's last chunk, or with an error it has
        // already recorded.
        let _ = stages::call(Stage::Copy, Stage::Handover, || {
            self.port.to_writer.send(chunk)
        });
        if !last {
            self.chunk = self.port.free.try_recv().ok();
        }
    }

    fn publish(&mut self, counters: &Counters) {
        counters
            .received
            .fetch_add(std::mem::take(&mut self.received), Ordering::Relaxed);
        counters
            .writer_drops
            .fetch_add(std::mem::take(&mut self.dropped), Ordering::Relaxed);
        if self.hardware {
            counters.hardware_ts.store(true, Ordering::Relaxed);
        }
    }
}

/// The writer thread's state.
struct WriterLoop {
    writer: CaptureWriter,
    merge: Merge,
    returns: Vec<SyncSender<Chunk>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    count: Option<u64>,
}

/// How often the writer hands what it has buffered to the file even when the buffer is not
/// full (so a reader of `-w -` sees packets promptly, and a crash loses at most this much).
const COMMIT_EVERY: Duration = Duration::from_millis(500);

impl WriterLoop {
    /// Writes chunks as they come until every thread has ended. Stops writing (and sets
    /// `stop`) at the count or at the first write error, but keeps taking chunks so that no
    /// capture thread waits forever; what it then throws away after an error is counted as
    /// dropped by sonde.
    fn run(&mut self, chunks: Receiver<Chunk>) -> Result<(), WriteFailed> {
        let mut result = Ok(());
        let mut last_commit = Instant::now();
        while !self.merge.finished() {
            let next = stages::call(Stage::Format, Stage::Handover, || {
                chunks.recv_timeout(COMMIT_EVERY)
            });
            match next {
                Ok(chunk) => self.merge.add(chunk),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if result.is_ok() {
                result = self.write_settled();
                if result.is_ok() && last_commit.elapsed() >= COMMIT_EVERY {
                    result = self.writer.commit();
                    last_commit = Instant::now();
                }
                if let Err(failed) = &result {
                    self.failed(failed.lost);
                }
            }
            if result.is_err() || self.count_reached() {
                let left = self.merge.discard(|c| recycle(&self.returns, c));
                if result.is_err() {
                    self.counters
                        .writer_drops
                        .fetch_add(left, Ordering::Relaxed);
                }
            }
        }
        result
    }

    /// Writing failed: stop capturing, and count what was buffered and lost.
    fn failed(&self, lost: u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.counters
            .writer_drops
            .fetch_add(lost, Ordering::Relaxed);
        self.counters
            .captured
            .store(self.writer.packets, Ordering::Relaxed);
    }

    fn write_settled(&mut self) -> Result<(), WriteFailed> {
        let (writer, counters, count) = (&mut self.writer, &self.counters, self.count);
        let returns = &self.returns;
        let mut failed = None;
        let drained = self.merge.drain(
            |chunk, from, to| {
                let left = count.map_or(usize::MAX, |c| c.saturating_sub(writer.packets) as usize);
                let to = to.min(from.saturating_add(left));
                write_records(writer, chunk, from, to, counters).map_err(|e| {
                    let io = std::io::Error::new(e.error.kind(), e.error.to_string());
                    failed = Some(e);
                    io
                })?;
                stages::mark(Stage::Format);
                Ok(())
            },
            |c| recycle(returns, c),
        );
        if let Some(f) = failed {
            return Err(f);
        }
        drained.map_err(|error| WriteFailed { error, lost: 0 })?;
        if self.count_reached() {
            self.stop.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn count_reached(&self) -> bool {
        self.count.is_some_and(|c| self.writer.packets >= c)
    }
}

/// Writes records `from..to` of `chunk`: as one run, or one by one when files rotate (so each
/// file ends at its size).
fn write_records(
    writer: &mut CaptureWriter,
    chunk: &Chunk,
    from: usize,
    to: usize,
    counters: &Counters,
) -> Result<(), WriteFailed> {
    if writer.rotates() {
        for i in from..to {
            let (run, bytes) = chunk.run(i, i + 1);
            writer.write_run(run, 1, bytes, counters.dropped())?;
        }
    } else if from < to {
        let (run, bytes) = chunk.run(from, to);
        writer.write_run(run, (to - from) as u64, bytes, counters.dropped())?;
    }
    counters.captured.store(writer.packets, Ordering::Relaxed);
    counters.bytes.store(writer.bytes, Ordering::Relaxed);
    Ok(())
}

fn recycle(returns: &[SyncSender<Chunk>], mut chunk: Chunk) {
    let t = chunk.thread;
    chunk.clear();
    // A pool never holds more than it started with, so this never blocks; a thread that has
    // ended no longer listens, which is fine.
    let _ = returns[t].try_send(chunk);
}
