//! Asking again over TCP when a UDP answer came truncated (TC set): a few worker threads with
//! the kernel's TCP sockets, each exchange bounded by the run's timeout. Truncated answers are
//! rare (answers over the 1,232 bytes EDNS0 states), so they leave the batched path.
//!
//! The issue asked for sonde's own TCP client here; the kernel's is used instead, since a
//! handful of connections a second gains nothing from sonde's, and its sockets need no share
//! of the reply filter (which spares what a host socket owns).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::frame::DNS_PORT;

/// A query to ask over TCP, for the lookup in `slot` at generation `gen`.
pub struct TcpAsk {
    pub slot: u32,
    pub gen: u32,
    pub server: Ipv4Addr,
    pub query: Vec<u8>,
}

/// Its answer (the DNS message), or why there is none.
pub struct TcpAnswer {
    pub slot: u32,
    pub gen: u32,
    pub result: Result<Vec<u8>, String>,
    pub rtt_us: u64,
}

pub struct TcpPool {
    asks: Option<Sender<TcpAsk>>,
    answers: Receiver<TcpAnswer>,
    pub in_flight: usize,
}

const WORKERS: usize = 4;

impl TcpPool {
    pub fn new(timeout: Duration) -> TcpPool {
        let (ask_tx, ask_rx) = channel::<TcpAsk>();
        let (answer_tx, answers) = channel();
        let ask_rx = Arc::new(Mutex::new(ask_rx));
        for _ in 0..WORKERS {
            let (asks, out) = (ask_rx.clone(), answer_tx.clone());
            std::thread::spawn(move || work(&asks, &out, timeout));
        }
        TcpPool {
            asks: Some(ask_tx),
            answers,
            in_flight: 0,
        }
    }

    pub fn ask(&mut self, ask: TcpAsk) {
        if let Some(asks) = &self.asks {
            if asks.send(ask).is_ok() {
                self.in_flight += 1;
            }
        }
    }

    /// The answers that came, without waiting.
    pub fn take(&mut self) -> Vec<TcpAnswer> {
        let got: Vec<TcpAnswer> = self.answers.try_iter().collect();
        self.in_flight -= got.len().min(self.in_flight);
        got
    }
}

impl Drop for TcpPool {
    fn drop(&mut self) {
        // The workers end when the queue closes.
        self.asks.take();
    }
}

fn work(asks: &Mutex<Receiver<TcpAsk>>, out: &Sender<TcpAnswer>, timeout: Duration) {
    loop {
        let next = asks.lock().map(|rx| rx.recv());
        let Ok(Ok(ask)) = next else { return };
        let start = Instant::now();
        let result = exchange(ask.server, &ask.query, timeout);
        let answer = TcpAnswer {
            slot: ask.slot,
            gen: ask.gen,
            result,
            rtt_us: start.elapsed().as_micros() as u64,
        };
        if out.send(answer).is_err() {
            return;
        }
    }
}

/// One query and its answer over a TCP connection (RFC 1035 4.2.2: each message after its
/// length in two bytes), all within `timeout`.
fn exchange(server: Ipv4Addr, query: &[u8], timeout: Duration) -> Result<Vec<u8>, String> {
    let words = |e: std::io::Error| format!("TCP to {server}: {e}");
    let addr = SocketAddr::from((server, DNS_PORT));
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(words)?;
    stream.set_read_timeout(Some(timeout)).map_err(words)?;
    stream.set_write_timeout(Some(timeout)).map_err(words)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).map_err(words)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).map_err(words)?;
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut message).map_err(words)?;
    Ok(message)
}
