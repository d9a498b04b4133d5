//! Peak resident memory of holding 10 million established connections (or `SONDE_TCP_HOLD`):
//! the engine writes SYNs, a server loop answers each with a SYN-ACK (frames in a reused
//! buffer, no I/O), and the connections stay open. Prints the engine's own count
//! (`memory_bytes`) and the process's peak RSS (VmHWM) before and after.
//!
//! `cargo bench -p sonde-tcp --bench hold`

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use sonde_tcp::Engine;
use support::*;

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let n: u64 = std::env::var("SONDE_TCP_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let before = peak_rss().unwrap_or(0);
    let mut cfg = config(n as usize);
    cfg.request_in_ack = true;
    cfg.first_byte_timeout_us = 600_000_000;
    cfg.total_timeout_us = 600_000_000;
    let mut engine = Engine::new(cfg, Http).unwrap();
    let (mut syn, mut synack) = (vec![0u8; 1514], vec![0u8; 1514]);
    let started = Instant::now();
    let mut now = 1_000_000;
    for i in 0..n {
        let (addr, port) = target(i, false);
        let len = engine.write_syn(&mut syn, addr, port, now);
        let s = read_syn(&syn[..len]).expect("a SYN");
        let len = write_synack(&mut synack, &s);
        engine.on_frame(&synack[..len], now);
        if i % 4096 == 4095 {
            now += 100;
            engine.on_tick(now);
            while engine.write_tx(&mut syn, now) > 0 {}
        }
    }
    while engine.write_tx(&mut syn, now) > 0 {}
    assert_eq!(engine.outstanding() as u64, n);
    let elapsed = started.elapsed();
    let peak = peak_rss().unwrap_or(0);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!("hold: {n} established connections in {elapsed:.1?} (SYN, SYN-ACK built and parsed, request written)");
    println!(
        "hold: engine memory_bytes {:.1} MiB = {:.1} bytes per connection",
        mib(engine.memory_bytes() as u64),
        engine.memory_bytes() as f64 / n as f64
    );
    println!(
        "hold: peak RSS {:.1} MiB ({:.1} MiB before the engine) = {:.1} bytes per connection",
        mib(peak),
        mib(before),
        (peak - before) as f64 / n as f64
    );
}
