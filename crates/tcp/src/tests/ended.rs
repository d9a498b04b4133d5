//! Segments queued for a connection that then ends in the same pass (the peer's RST or FIN
//! later in the batch, a timeout in `on_tick`): they go out as queued, with the bytes the
//! connection's session sent, before the RST or FIN that closes it, and in the count
//! `tx_pending` gave.

use std::any::Any;
use std::net::IpAddr;

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{App, CloseMode, Config, Rx, Session, Status, MAX_SESSION_SEND};

const ACK: TcpFlags = TcpFlags::ACK;
const FIN: TcpFlags = TcpFlags::FIN;
const RST: TcpFlags = TcpFlags::RST;
/// Each flight's length: the second one ends past the 1400 bytes of the request scratch.
const FLIGHT: usize = 1000;

/// The byte a session sends at offset `off` of its stream.
fn byte_at(off: usize) -> u8 {
    (off % 251) as u8 + 1
}

/// Sends a flight of [`FLIGHT`] bytes first, and another after each `?` received. It has no
/// request of its own (as a TLS app): `write_request` writes nothing.
struct Flights;

struct FlightSession {
    sent: usize,
}

impl FlightSession {
    fn flight(&mut self, send: &mut Vec<u8>) {
        send.extend((self.sent..self.sent + FLIGHT).map(byte_at));
        self.sent += FLIGHT;
    }
}

impl App for Flights {
    fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        0
    }
    fn max_request_len(&self) -> usize {
        0
    }
    fn max_sent_len(&self) -> usize {
        MAX_SESSION_SEND
    }
    fn is_complete(&self, _received: &[u8]) -> bool {
        false
    }
    fn open_session(
        &self,
        _addr: IpAddr,
        _port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        let mut session = FlightSession { sent: 0 };
        session.flight(first);
        Some(Box::new(session))
    }
}

impl Session for FlightSession {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        for _ in new.iter().filter(|&&b| b == b'?') {
            self.flight(send);
        }
        false
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn harness(close: CloseMode, cfg: impl FnOnce(&mut Config)) -> Harness<Flights> {
    let mut config = config();
    config.close = close;
    cfg(&mut config);
    Harness::new(config, Flights, Server::new("198.18.0.7", 443))
}

/// Asserts that every data segment carries the session's bytes at its offset, and returns
/// the end of the stream sent.
fn assert_session_bytes(h: &Harness<Flights>, sent: &[Sent]) -> u32 {
    let mut end = 0;
    for s in sent.iter().filter(|s| !s.payload.is_empty()) {
        let off = s.tcp.seq_number.wrapping_sub(h.server.client_seq(0));
        let expected: Vec<u8> = (off as usize..off as usize + s.payload.len())
            .map(byte_at)
            .collect();
        assert_eq!(s.payload, expected, "the bytes at offset {off}");
        end = end.max(off + s.payload.len() as u32);
    }
    end
}

/// The second flight is queued: the server acknowledges the first and asks.
fn second_flight_queued(h: &mut Harness<Flights>) {
    let first = h.established();
    assert_eq!(assert_session_bytes(h, &first), FLIGHT as u32);
    h.input(&h.server.segment(ACK, 0, FLIGHT as u32, b"?"));
    assert_eq!(
        h.engine.tx_pending(),
        1,
        "the second flight, in one segment"
    );
}

#[test]
fn a_flight_queued_before_the_peers_rst_goes_out_with_its_bytes() {
    let mut h = harness(CloseMode::Rst, |_| {});
    second_flight_queued(&mut h);
    h.input(&h.server.segment(RST, 1, 0, b""));
    assert_eq!(h.engine.outstanding(), 0);
    let sent = h.flush();
    assert_eq!(assert_session_bytes(&h, &sent), 2 * FLIGHT as u32);
    assert!(
        sent.iter().all(|s| !s.flags().contains(RST)),
        "an RST is not answered"
    );
    let (outcome, bytes) = h.outcome();
    assert_eq!(
        (outcome.status, bytes.as_slice()),
        (Status::Reset, &b"?"[..])
    );
}

#[test]
fn a_flight_queued_before_the_peers_fin_goes_out_before_our_fin() {
    let mut h = harness(CloseMode::Fin, |_| {});
    second_flight_queued(&mut h);
    h.input(&h.server.segment(ACK | FIN, 1, FLIGHT as u32, b""));
    assert_eq!(h.outcome().0.status, Status::Success);
    let sent = h.flush();
    let end = assert_session_bytes(&h, &sent);
    assert_eq!(end, 2 * FLIGHT as u32);
    let fin = sent.last().unwrap();
    assert_eq!(fin.flags(), FIN | ACK);
    assert_eq!(
        fin.tcp.seq_number,
        h.server.client_seq(end),
        "after the flight"
    );
    // The server acknowledges the flight and our FIN: the close is complete.
    h.input(&h.server.segment(ACK, 2, end + 1, b""));
    assert_eq!(h.engine.outstanding(), 0);
}

#[test]
fn a_flight_queued_before_a_timeout_goes_out_before_the_rst() {
    let mut h = harness(CloseMode::Rst, |cfg| cfg.total_timeout_us = 1_000_000);
    let first = h.established();
    assert_session_bytes(&h, &first);
    h.now += 995_000;
    h.input(&h.server.segment(ACK, 0, FLIGHT as u32, b"?"));
    h.tick(10_000); // the total timeout, in the same pass
    assert_eq!(h.engine.outstanding(), 0);
    let sent = h.flush();
    let end = assert_session_bytes(&h, &sent);
    assert_eq!(end, 2 * FLIGHT as u32);
    let rst = sent.last().unwrap();
    assert!(rst.flags().contains(RST));
    assert_eq!(
        rst.tcp.seq_number,
        h.server.client_seq(end),
        "after the flight"
    );
    assert_eq!(h.outcome().0.status, Status::DataTimeout);
}

#[test]
fn a_flights_bytes_survive_its_outcome_drained_and_a_new_session_before_the_flush() {
    let mut h = harness(CloseMode::Rst, |_| {});
    second_flight_queued(&mut h);
    h.input(&h.server.segment(RST, 1, 0, b""));
    // Against the run loop's order: the outcome is drained, and another connection opens
    // (its session takes a buffer), before the queue is written.
    assert_eq!(h.outcome().0.status, Status::Reset);
    let first = h.server.clone();
    h.server = Server::new("198.18.0.8", 443);
    assert!(matches!(h.handshake(10_000), Rx::Answered { .. }));
    let sent = h.flush();
    h.server = first;
    let ours: Vec<Sent> = sent
        .into_iter()
        .filter(|s| s.dst == h.server.addr)
        .collect();
    assert_eq!(assert_session_bytes(&h, &ours), 2 * FLIGHT as u32);
}
