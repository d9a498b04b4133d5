//! The slow server of the DNS tree: on `listen` port 53 (UDP and TCP) it passes each query to
//! `upstream` (an NSD on loopback that serves `slow.test.`) only after `delay`, and the answer
//! back at once. It runs in the lab's network namespace as `sonde lab __serve --slow-dns …`.
//!
//! UDP queries wait in one delay queue: the delay is the same for all, so they leave in the
//! order they came, and one thread sleeps only until the oldest is due. Each goes upstream
//! under an ID of the proxy's own (a slot of `in_flight` that remembers the client and its
//! ID), so answers find their way back whatever their order. TCP, which only answers too big
//! for UDP need, takes a thread per connection that holds each of its queries until due.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use std::convert::Infallible;

use anyhow::{anyhow, bail, Result};

use super::servers::SLOW_UPSTREAM;
use super::spec::SLOW_SERVER;

/// The largest UDP message it passes (the largest EDNS0 buffer size clients state).
const MAX_UDP: usize = 65_535;
/// How long a TCP connection may stay idle, and the upstream may take.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The tree's slow server: on [`SLOW_SERVER`], in front of the NSD of `slow.test.`, holding
/// each query `delay`. Serves forever; an error only when a socket cannot be opened.
pub fn serve_slow(delay: Duration) -> Result<Infallible> {
    serve_slow_dns(SLOW_SERVER, SLOW_UPSTREAM, delay)
}

fn serve_slow_dns(listen: Ipv4Addr, upstream: SocketAddrV4, delay: Duration) -> Result<Infallible> {
    let udp = UdpSocket::bind((listen, 53))
        .map_err(|e| anyhow!("slow server: cannot bind UDP {listen}:53: {e}"))?;
    let tcp = TcpListener::bind((listen, 53))
        .map_err(|e| anyhow!("slow server: cannot bind TCP {listen}:53: {e}"))?;
    let up = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|s| s.connect(upstream).map(|()| s))
        .map_err(|e| anyhow!("slow server: cannot open a UDP socket to {upstream}: {e}"))?;
    let in_flight = Arc::new(Mutex::new(InFlight::default()));
    let (queue, due) = mpsc::channel::<(Instant, SocketAddr, Vec<u8>)>();
    let receive = {
        let udp = udp.try_clone()?;
        thread::spawn(move || loop {
            let mut buf = vec![0; MAX_UDP];
            if let Ok((n, from)) = udp.recv_from(&mut buf) {
                buf.truncate(n);
                if n >= 12 && queue.send((Instant::now() + delay, from, buf)).is_err() {
                    return;
                }
            }
        })
    };
    let forward = {
        let (up, in_flight) = (up.try_clone()?, Arc::clone(&in_flight));
        thread::spawn(move || {
            for (when, client, mut query) in due {
                thread::sleep(when.saturating_duration_since(Instant::now()));
                let Ok(mut slots) = in_flight.lock() else {
                    return;
                };
                let id = slots.take(client, [query[0], query[1]]);
                query[..2].copy_from_slice(&id.to_be_bytes());
                drop(slots);
                let _ = up.send(&query);
            }
        })
    };
    let answer = thread::spawn(move || loop {
        let mut buf = vec![0; MAX_UDP];
        let Ok(n) = up.recv(&mut buf) else { continue };
        if n < 12 {
            continue;
        }
        let id = u16::from_be_bytes([buf[0], buf[1]]);
        let Some((client, their_id)) = in_flight.lock().ok().and_then(|mut s| s.give(id)) else {
            continue;
        };
        buf[..2].copy_from_slice(&their_id);
        let _ = udp.send_to(&buf[..n], client);
    });
    thread::spawn(move || {
        for conn in tcp.incoming().flatten() {
            thread::spawn(move || {
                let _ = relay_tcp(conn, upstream, delay);
            });
        }
    });
    for t in [receive, forward, answer] {
        let _ = t.join();
    }
    bail!("the slow server's threads stopped")
}

/// The upstream IDs in use, each with the client and the ID it asked with. A slot is reused
/// after 65,536 more queries, long after its answer came or was lost.
struct InFlight {
    slots: Vec<Option<(SocketAddr, [u8; 2])>>,
    next: u16,
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight {
            slots: vec![None; 1 << 16],
            next: 0,
        }
    }
}

impl InFlight {
    fn take(&mut self, client: SocketAddr, id: [u8; 2]) -> u16 {
        let ours = self.next;
        self.next = self.next.wrapping_add(1);
        self.slots[usize::from(ours)] = Some((client, id));
        ours
    }

    fn give(&mut self, ours: u16) -> Option<(SocketAddr, [u8; 2])> {
        self.slots[usize::from(ours)].take()
    }
}

/// Each query of one TCP connection (two-byte length, message) goes to a new upstream TCP
/// connection once `delay` has passed since it arrived; its answer comes back as it is.
fn relay_tcp(mut conn: TcpStream, upstream: SocketAddrV4, delay: Duration) -> Result<()> {
    conn.set_read_timeout(Some(TCP_IDLE))?;
    loop {
        let mut len = [0; 2];
        conn.read_exact(&mut len)?;
        let due = Instant::now() + delay;
        let mut query = vec![0; usize::from(u16::from_be_bytes(len))];
        conn.read_exact(&mut query)?;
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let answer = ask_tcp(upstream, &query)?;
        conn.write_all(&(answer.len() as u16).to_be_bytes())?;
        conn.write_all(&answer)?;
    }
}

fn ask_tcp(upstream: SocketAddrV4, query: &[u8]) -> Result<Vec<u8>> {
    let mut up = TcpStream::connect_timeout(&upstream.into(), TCP_IDLE)?;
    up.set_read_timeout(Some(TCP_IDLE))?;
    up.write_all(&(query.len() as u16).to_be_bytes())?;
    up.write_all(query)?;
    let mut len = [0; 2];
    up.read_exact(&mut len)?;
    let mut answer = vec![0; usize::from(u16::from_be_bytes(len))];
    up.read_exact(&mut answer)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_ids_come_back_to_their_clients() {
        let mut f = InFlight::default();
        let a: SocketAddr = "198.19.255.1:4000".parse().unwrap();
        let b: SocketAddr = "198.19.255.1:4001".parse().unwrap();
        let (ia, ib) = (f.take(a, [0, 7]), f.take(b, [0, 7]));
        assert_ne!(ia, ib);
        assert_eq!(f.give(ib), Some((b, [0, 7])));
        assert_eq!(f.give(ib), None, "an answer goes back once");
        assert_eq!(f.give(ia), Some((a, [0, 7])));
    }
}
