//! One direction of the path: what happens to each frame, with time given by the caller (so the
//! tests run it on a fake clock).
//!
//! A frame that arrives at `t` is counted in and, if longer than the path can send, dropped
//! (`too_long`). `--duplicate` decides whether a second copy follows it; each copy is then held
//! on its own:
//! 1. the store must have room (else `hold_full`), and the bottleneck's queue too (else
//!    `queue_full`); the bottleneck gives its departure `d` (`t` without one);
//! 2. its due time is `d + rtt/2 + jitter` (never before `d`), or `d` for a frame `--reorder`
//!    picked (`reordered`), which so overtakes the frames held; without jitter no frame is due
//!    before the one that arrived before it, so the order holds;
//! 3. `--corrupt` may flip one bit after its Ethernet header (`corrupted`).
//!
//! `ready` says how many frames' time has come, and `send_next` hands them over one by one, in
//! due order, counting how late each left.

use sonde_io::MAX_FRAME;
use sonde_lab::path::{PathConfig, PathFlow};

use crate::bottleneck::Bottleneck;
use crate::draw::{Chance, Draws, Jitter};
use crate::store::Store;
use crate::wheel::Wheel;

/// The Ethernet header, which `--corrupt` leaves alone.
const ETHERNET_HEADER: usize = 14;

pub struct Line {
    hold_ns: u64,
    jitter: Option<Jitter>,
    reorder: Chance,
    duplicate: Chance,
    corrupt: Chance,
    bottleneck: Option<Bottleneck>,
    store: Store,
    wheel: Wheel,
    draws: Draws,
    /// The latest due time so far of a frame held in order (without jitter).
    last_due: u64,
    counts: PathFlow,
    late_sum_ns: u128,
}

impl Line {
    /// A direction with `cfg`'s path, its draws from `seed`.
    pub fn new(cfg: &PathConfig, seed: u64) -> Line {
        let store = Store::new(cfg.frames, cfg.store_bytes());
        let slots = store.slots();
        Line {
            hold_ns: cfg.rtt_ns / 2,
            jitter: Jitter::new(cfg.jitter_ns),
            reorder: Chance::new(cfg.reorder),
            duplicate: Chance::new(cfg.duplicate),
            corrupt: Chance::new(cfg.corrupt),
            bottleneck: cfg
                .bottleneck_bps
                .map(|bps| Bottleneck::new(bps, cfg.bottleneck_queue)),
            store,
            wheel: Wheel::new(slots),
            draws: Draws::new(seed),
            last_due: 0,
            counts: PathFlow::default(),
            late_sum_ns: 0,
        }
    }

    /// A frame that arrived at `now_ns` (ns on the line's clock).
    pub fn admit(&mut self, now_ns: u64, frame: &[u8]) {
        self.counts.frames_in += 1;
        if frame.len() > MAX_FRAME {
            self.counts.too_long += 1;
            return;
        }
        self.hold(now_ns, frame);
        if self.duplicate.hit(&mut self.draws) {
            self.counts.duplicated += 1;
            self.hold(now_ns, frame);
        }
    }

    /// A frame that arrived cut short (the receive ring had less than the whole of it).
    pub fn admit_cut_short(&mut self) {
        self.counts.frames_in += 1;
        self.counts.too_long += 1;
    }

    fn hold(&mut self, now_ns: u64, frame: &[u8]) {
        if !self.store.has_room(frame.len()) {
            self.counts.hold_full += 1;
            return;
        }
        let departure = match &mut self.bottleneck {
            None => now_ns,
            Some(b) => match b.admit(now_ns, frame.len()) {
                Some(d) => d,
                None => {
                    self.counts.queue_full += 1;
                    return;
                }
            },
        };
        let due = self.due(departure);
        let Some(slot) = self.store.push(frame) else {
            // has_room said there was.
            self.counts.hold_full += 1;
            return;
        };
        if self.corrupt.hit(&mut self.draws) {
            let bytes = self.store.frame_mut(slot);
            flip_bit(bytes, &mut self.draws);
            self.counts.corrupted += 1;
        }
        self.wheel.insert(slot, due);
        self.counts.held = self.store.held();
        self.counts.held_peak = self.counts.held_peak.max(self.counts.held);
        self.counts.held_bytes = self.store.held_bytes();
    }

    /// The due time of a frame the bottleneck lets go at `departure`.
    fn due(&mut self, departure: u64) -> u64 {
        if self.reorder.hit(&mut self.draws) {
            self.counts.reordered += 1;
            return departure;
        }
        let due = departure + self.hold_ns;
        match self.jitter {
            Some(j) => due
                .saturating_add_signed(j.draw(&mut self.draws))
                .max(departure),
            None => {
                // The clock of arrivals can step back a little between CPUs: keep the order.
                self.last_due = self.last_due.max(due);
                self.last_due
            }
        }
    }

    /// How many frames are due by `now_ns` and ready to leave, in due order.
    pub fn ready(&mut self, now_ns: u64) -> usize {
        self.wheel.advance(now_ns);
        self.wheel.ready_len()
    }

    /// Copies the next ready frame into `buf` (it has left then) and returns its length; 0 when
    /// none is ready.
    pub fn send_next(&mut self, now_ns: u64, buf: &mut [u8]) -> usize {
        let Some((slot, due)) = self.wheel.peek_ready() else {
            return 0;
        };
        let frame = self.store.frame(slot);
        let len = frame.len().min(buf.len());
        buf[..len].copy_from_slice(&frame[..len]);
        self.counts.frames_out += 1;
        self.counts.bytes_out += len as u64;
        let late = now_ns.saturating_sub(due);
        self.counts.late_max_ns = self.counts.late_max_ns.max(late);
        self.late_sum_ns += u128::from(late);
        self.wheel.pop_ready();
        self.store.release(slot);
        self.counts.held = self.store.held();
        self.counts.held_bytes = self.store.held_bytes();
        len
    }

    /// When a frame is next due (ns; 0: now), or None when nothing is held.
    pub fn next_due(&self) -> Option<u64> {
        self.wheel.next_due()
    }

    /// What this direction counted so far (the kernel's drops are the caller's to add).
    pub fn counts(&self) -> PathFlow {
        let mut c = self.counts;
        if c.frames_out > 0 {
            c.late_mean_ns = (self.late_sum_ns / u128::from(c.frames_out)) as u64;
        }
        c
    }
}

/// Flips one bit of `frame` after its Ethernet header, each such bit equally likely.
fn flip_bit(frame: &mut [u8], draws: &mut Draws) {
    let skip = if frame.len() > ETHERNET_HEADER {
        ETHERNET_HEADER
    } else {
        0
    };
    let bits = ((frame.len() - skip) * 8) as u64;
    if bits == 0 {
        return;
    }
    let bit = draws.below(bits) as usize;
    frame[skip + bit / 8] ^= 1 << (bit % 8);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn cfg(rtt_ms: u64) -> PathConfig {
        PathConfig {
            rtt_ns: rtt_ms * MS,
            ..PathConfig::default()
        }
    }

    /// A frame whose bytes 14..18 and 18..22 carry its number.
    fn frame(n: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(22)];
        f[14..18].copy_from_slice(&n.to_be_bytes());
        f[18..22].copy_from_slice(&n.to_be_bytes());
        f
    }

    fn bits_apart(a: &[u8], b: &[u8]) -> u32 {
        a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
    }

    fn number(f: &[u8]) -> u32 {
        u32::from_be_bytes(f[14..18].try_into().unwrap())
    }

    /// Runs the line on a fake clock: `arrivals` (time, frame) in order, releasing every `step`
    /// ns until `end`; returns (time sent, frame) for each frame sent.
    fn run(
        line: &mut Line,
        arrivals: &[(u64, Vec<u8>)],
        step: u64,
        end: u64,
    ) -> Vec<(u64, Vec<u8>)> {
        let mut sent = Vec::new();
        let mut next = 0;
        let mut now = 0;
        while now <= end {
            while next < arrivals.len() && arrivals[next].0 <= now {
                line.admit(arrivals[next].0, &arrivals[next].1);
                next += 1;
            }
            for _ in 0..line.ready(now) {
                let mut buf = [0u8; MAX_FRAME];
                let len = line.send_next(now, &mut buf);
                sent.push((now, buf[..len].to_vec()));
            }
            now += step;
        }
        sent
    }

    #[test]
    fn every_frame_is_held_half_the_round_trip_in_order() {
        let mut line = Line::new(&cfg(20), 1);
        let arrivals: Vec<(u64, Vec<u8>)> = (0..1000)
            .map(|i| (i * 10_000, frame(i as u32, 100)))
            .collect();
        let sent = run(&mut line, &arrivals, 1_000, 40 * MS);
        assert_eq!(sent.len(), 1000);
        for (i, (at, f)) in sent.iter().enumerate() {
            assert_eq!(number(f), i as u32, "order");
            let held = at - arrivals[i].0;
            // Never early; late by at most the fake clock's step.
            assert!((10 * MS..10 * MS + 1_000).contains(&held), "{i}: {held}");
        }
        let c = line.counts();
        assert_eq!((c.frames_in, c.frames_out, c.held), (1000, 1000, 0));
        assert!(c.late_max_ns < 1_000 && c.held_peak >= 999, "{c:?}");
    }

    #[test]
    fn jitter_spreads_the_hold_as_stated_and_reorders() {
        let mut cfg = cfg(100);
        cfg.jitter_ns = 10 * MS;
        let mut line = Line::new(&cfg, 2);
        let n = 20_000u32;
        let arrivals: Vec<(u64, Vec<u8>)> = (0..n)
            .map(|i| (u64::from(i) * 20_000, frame(i, 64)))
            .collect();
        let sent = run(&mut line, &arrivals, 10_000, 600 * MS);
        assert_eq!(sent.len(), n as usize);
        let holds: Vec<f64> = sent
            .iter()
            .map(|(at, f)| (at - arrivals[number(f) as usize].0) as f64)
            .collect();
        let mean = holds.iter().sum::<f64>() / holds.len() as f64;
        let sd =
            (holds.iter().map(|h| (h - mean).powi(2)).sum::<f64>() / holds.len() as f64).sqrt();
        // One way: 50 ms and σ = 10 ms / √2 (plus the fake clock's step, uniform up to 10 µs).
        assert!((mean / (50.0 * MS as f64) - 1.0).abs() < 0.005, "{mean}");
        assert!((sd / (7.071 * MS as f64) - 1.0).abs() < 0.03, "{sd}");
        assert!(holds
            .iter()
            .all(|h| (*h - 50.0 * MS as f64).abs() < 22.0 * MS as f64));
        // Frames 20 µs apart with σ 7 ms: nearly all are out of order.
        let late = sent
            .windows(2)
            .filter(|w| number(&w[1].1) < number(&w[0].1))
            .count();
        assert!(late > n as usize / 3, "{late}");
    }

    #[test]
    fn reordered_frames_skip_the_hold() {
        let mut cfg = cfg(20);
        cfg.reorder = 0.25;
        let mut line = Line::new(&cfg, 3);
        let n = 10_000u32;
        let arrivals: Vec<(u64, Vec<u8>)> = (0..n)
            .map(|i| (u64::from(i) * 100_000, frame(i, 64)))
            .collect();
        let sent = run(&mut line, &arrivals, 10_000, 1_100 * MS);
        assert_eq!(sent.len(), n as usize);
        let early = sent
            .iter()
            .filter(|(at, f)| at - arrivals[number(f) as usize].0 < MS)
            .count();
        let share = early as f64 / f64::from(n);
        assert!((share - 0.25).abs() < 0.02, "{share}");
        assert_eq!(line.counts().reordered, early as u64);
        // Each overtakes the ~100 frames held ahead of it.
        let out_of_order = sent
            .windows(2)
            .filter(|w| number(&w[1].1) < number(&w[0].1))
            .count();
        assert!(out_of_order as f64 > 0.2 * f64::from(n), "{out_of_order}");
    }

    #[test]
    fn duplicates_follow_and_corruption_flips_one_bit_past_the_ethernet_header() {
        let mut cfg = cfg(2);
        cfg.duplicate = 0.5;
        cfg.corrupt = 0.5;
        let mut line = Line::new(&cfg, 4);
        let n = 4_000u32;
        let arrivals: Vec<(u64, Vec<u8>)> = (0..n)
            .map(|i| (u64::from(i) * 10_000, frame(i, 80)))
            .collect();
        let sent = run(&mut line, &arrivals, 5_000, 60 * MS);
        let c = line.counts();
        assert_eq!(sent.len() as u64, u64::from(n) + c.duplicated);
        assert!(
            (c.duplicated as f64 / f64::from(n) - 0.5).abs() < 0.05,
            "{c:?}"
        );
        let mut flipped = 0;
        for (_, f) in &sent {
            // The number is in the frame twice; a flip changes one of them at most.
            let tail = u32::from_be_bytes(f[18..22].try_into().unwrap());
            let original = [number(f), tail]
                .into_iter()
                .filter(|&i| i < n)
                .map(|i| &arrivals[i as usize].1)
                .min_by_key(|a| bits_apart(a, f))
                .expect("a frame with its number");
            match bits_apart(original, f) {
                0 => {}
                1 => {
                    flipped += 1;
                    assert_eq!(
                        &f[..14],
                        &original[..14],
                        "the Ethernet header is left alone"
                    );
                }
                d => panic!("a frame differs from its original in {d} bits"),
            }
        }
        assert_eq!(flipped, c.corrupted);
        let share = c.corrupted as f64 / sent.len() as f64;
        assert!((share - 0.5).abs() < 0.05, "{share}");
    }

    #[test]
    fn the_bottleneck_sends_at_its_rate_and_drops_the_tail() {
        let mut cfg = cfg(0);
        cfg.bottleneck_bps = Some(8_000_000); // 1000 bytes take 1 ms
        cfg.bottleneck_queue = 10;
        let mut line = Line::new(&cfg, 5);
        // 100 frames in 10 ms: ten times the rate.
        let arrivals: Vec<(u64, Vec<u8>)> = (0..100u32)
            .map(|i| (u64::from(i) * 100_000, frame(i, 1000)))
            .collect();
        let sent = run(&mut line, &arrivals, 10_000, 100 * MS);
        let c = line.counts();
        assert_eq!(c.frames_out + c.queue_full, 100);
        // The link carries one frame per ms over the 10 ms, then empties its queue of 10.
        assert!((19..=21).contains(&c.frames_out), "{c:?}");
        for w in sent.windows(2) {
            assert!(w[1].0 - w[0].0 >= MS - 10_000, "{} then {}", w[0].0, w[1].0);
        }
    }

    #[test]
    fn a_full_store_drops_and_counts() {
        let mut cfg = cfg(100);
        cfg.frames = 16;
        let mut line = Line::new(&cfg, 6);
        for i in 0..40u32 {
            line.admit(u64::from(i) * 1000, &frame(i, 64));
        }
        line.admit(50_000, &vec![0u8; 2000]);
        line.admit_cut_short();
        let c = line.counts();
        assert_eq!(
            (c.held, c.hold_full, c.too_long, c.frames_in),
            (16, 24, 2, 42)
        );
        assert_eq!(line.ready(49 * MS), 0);
        assert_eq!(line.ready(200 * MS), 16);
        let mut buf = [0u8; MAX_FRAME];
        for i in 0..10u32 {
            assert_eq!(line.send_next(200 * MS, &mut buf), 64);
            assert_eq!(number(&buf), i);
        }
        assert_eq!(line.counts().held, 6);
        while line.send_next(200 * MS, &mut buf) > 0 {}
        assert_eq!(line.counts().held, 0);
        assert_eq!(line.next_due(), None);
    }
}
