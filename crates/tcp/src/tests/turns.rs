//! Apps that talk in turns: a session's first bytes, bytes sent after reply bytes, their
//! retransmission, and the session handed over with the outcome.

use std::any::Any;
use std::net::IpAddr;

use sonde_wire::TcpFlags;

use super::peer::*;
use crate::{App, Session, Status, MAX_SESSION_SEND};

const ACK: TcpFlags = TcpFlags::ACK;

/// Says `HELLO`; after each `?` received says `NEXT`; complete at `END`.
struct TurnApp;

#[derive(Default)]
struct Turns {
    received: Vec<u8>,
}

impl App for TurnApp {
    fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        panic!("an app that talks in turns is not asked for a request");
    }
    fn max_request_len(&self) -> usize {
        0
    }
    fn max_sent_len(&self) -> usize {
        MAX_SESSION_SEND
    }
    fn is_complete(&self, _received: &[u8]) -> bool {
        panic!("a session says when the reply is complete");
    }
    fn open_session(
        &self,
        _addr: IpAddr,
        _port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        first.extend_from_slice(b"HELLO");
        Some(Box::new(Turns::default()))
    }
}

impl Session for Turns {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        self.received.extend_from_slice(new);
        for &byte in new {
            if byte == b'?' {
                send.extend_from_slice(b"NEXT");
            }
        }
        self.received.ends_with(b"END")
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn payloads(sent: &[Sent]) -> Vec<(u32, Vec<u8>)> {
    sent.iter()
        .filter(|s| !s.payload.is_empty())
        .map(|s| (s.tcp.seq_number, s.payload.clone()))
        .collect()
}

#[test]
fn a_session_sends_after_reply_bytes_and_its_bytes_are_retransmitted() {
    let mut h = Harness::new(config(), TurnApp, Server::new("198.18.0.7", 443));
    // RTT 10 ms: the RTO is its floor, 200 ms.
    assert!(matches!(h.handshake(10_000), crate::Rx::Answered { .. }));
    let first = h.flush();
    assert_eq!(
        payloads(&first),
        [(h.server.client_seq(0), b"HELLO".to_vec())]
    );
    // The server acknowledges HELLO and asks, 150 ms after the SYN-ACK.
    h.tick(150_000);
    h.input(&h.server.segment(ACK, 0, 5, b"hi?"));
    let next = h.flush();
    assert_eq!(
        payloads(&next),
        [(h.server.client_seq(5), b"NEXT".to_vec())]
    );
    // The bytes carry the ACK of "hi?": no pure ACK besides.
    assert_eq!(next.len(), 1, "{next:?}");
    assert_eq!(next[0].tcp.ack_number, Some(h.server.seq(3)));
    // NEXT is lost: it goes again one RTO after it was first sent (not after the SYN-ACK,
    // which would be 50 ms from now).
    let mut again = Vec::new();
    for _ in 0..260 {
        h.tick(1000);
        for s in h.flush() {
            if !s.payload.is_empty() {
                again.push((h.now, s.tcp.seq_number, s.payload));
            }
        }
    }
    assert_eq!(again.len(), 1, "{again:?}");
    let (at, seq, payload) = &again[0];
    assert_eq!(
        (*seq, payload.as_slice()),
        (h.server.client_seq(5), &b"NEXT"[..])
    );
    let sent_at = 1_000_000 + 10_000 + 150_000;
    assert!(*at >= sent_at + 200_000 && *at <= sent_at + 201_000, "{at}");
    // Acknowledged, then the end: the outcome comes with the session.
    h.input(&h.server.segment(ACK, 3, 9, b"END"));
    let mut replies = Vec::new();
    h.engine.drain_replies(|outcome, bytes, session| {
        let turns = session.and_then(|s| s.as_any().downcast_ref::<Turns>());
        let received = turns.map(|t| t.received.clone());
        replies.push((outcome.status, bytes.to_vec(), received));
    });
    assert_eq!(
        replies,
        [(
            Status::Success,
            b"hi?END".to_vec(),
            Some(b"hi?END".to_vec())
        )]
    );
}

#[test]
fn acks_of_session_bytes_count_and_more_than_were_sent_do_not() {
    let mut h = Harness::new(config(), TurnApp, Server::new("198.18.0.7", 443));
    h.established();
    h.input(&h.server.segment(ACK, 0, 5, b"?"));
    h.flush();
    // An ACK of 10 bytes when 9 were sent is out of range: a challenge ACK, no data taken.
    h.input(&h.server.segment(ACK, 1, 10, b"END"));
    let sent = h.flush();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].payload.is_empty());
    assert_eq!(sent[0].tcp.ack_number, Some(h.server.seq(1)));
    assert!(h.outcomes().is_empty());
    // The ACK of all 9 is fine, and a FIN ends it.
    h.input(&h.server.segment(ACK | TcpFlags::FIN, 1, 9, b"x"));
    assert_eq!(h.outcome().0.status, Status::Success);
}

#[test]
fn a_session_that_would_send_too_much_ends_its_connection() {
    struct Greedy;
    impl Session for Greedy {
        fn on_received(&mut self, _new: &[u8], send: &mut Vec<u8>) -> bool {
            send.resize(MAX_SESSION_SEND + 1, b'x');
            false
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }
    struct GreedyApp;
    impl App for GreedyApp {
        fn write_request(&self, _buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
            0
        }
        fn max_request_len(&self) -> usize {
            0
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
            first.push(b'a');
            Some(Box::new(Greedy))
        }
    }
    let mut h = Harness::new(config(), GreedyApp, Server::new("198.18.0.7", 443));
    h.established();
    h.input(&h.server.segment(ACK, 0, 1, b"?"));
    let sent = h.flush();
    assert!(
        payloads(&sent).is_empty(),
        "nothing beyond the limit goes out"
    );
    let (outcome, bytes) = h.outcome();
    assert_eq!(
        (outcome.status, outcome.truncated),
        (Status::Success, false)
    );
    assert_eq!(bytes, b"?");
}
