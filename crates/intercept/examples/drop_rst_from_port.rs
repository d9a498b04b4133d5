//! A custom filter on sonde's intercept engine: drop TCP resets sent from one port, pass
//! everything else. Runs in stack mode on an NFQUEUE queue you route traffic into yourself:
//!
//!   iptables -A INPUT -p tcp --sport 5201 -j NFQUEUE --queue-num 3
//!   cargo run --release -p sonde-intercept --example drop_rst_from_port -- 3 5201 10
//!
//! (queue 3, resets from port 5201, for 10 seconds). It prints what it saw and dropped.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use sonde_intercept::flow::OrderCheck;
use sonde_intercept::stack::{self, StackConfig};
use sonde_intercept::{Filter, Packet, ThreadCounters, Verdict};

/// Drops TCP segments with RST set whose source port is `port`.
struct DropRstFrom {
    port: u16,
}

impl Filter for DropRstFrom {
    fn decide(&mut self, packet: &mut Packet<'_>) -> Verdict {
        let Some(ip) = packet.ip() else {
            return Verdict::Pass;
        };
        // The TCP header, for IPv4 (after IHL words) or IPv6 without extension headers.
        let tcp = match ip[0] >> 4 {
            4 if ip.get(9) == Some(&6) => ip.get(usize::from(ip[0] & 0x0f) * 4..),
            6 if ip.get(6) == Some(&6) => ip.get(40..),
            _ => None,
        };
        match tcp {
            Some(t) if t.len() >= 14 => {
                let sport = u16::from_be_bytes([t[0], t[1]]);
                let rst = t[13] & 0x04 != 0;
                if rst && sport == self.port {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                }
            }
            _ => Verdict::Pass,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [queue, port, seconds] = args.as_slice() else {
        anyhow::bail!("usage: drop_rst_from_port QUEUE PORT SECONDS");
    };
    let cfg = StackConfig {
        queues: vec![queue.parse()?],
        batch: 64,
        fail_open: false,
        gso: true,
        // The filter reads the IP and TCP headers only.
        copy_bytes: 128,
    };
    let queue = stack::open(&cfg)?.pop().expect("one queue");
    let mut filter = DropRstFrom {
        port: port.parse()?,
    };
    let (stop, counters) = (AtomicBool::new(false), ThreadCounters::default());
    let order = OrderCheck::default();
    let duration = Duration::from_secs_f64(seconds.parse()?);
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            stack::run_thread(queue, &mut filter, &stop, &counters, &order, Instant::now())
        });
        std::thread::sleep(duration);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        worker.join().expect("worker")
    })?;
    let t = counters.totals();
    println!(
        "{} packets, {} dropped (resets from port {port})",
        t.packets, t.dropped
    );
    Ok(())
}
