//! A connection's frames that reach two threads' queues are taken in the order they reached
//! the host (issue 30): the owner takes what other threads handed it before its own queue's
//! later frames.

use std::time::Duration;

use sonde_io::{mem, AnyRx, AnyTx, FrameRx, FrameTx};
use sonde_wire::TcpFlags;

use super::{peer, plan, tempdir};
use crate::grab::dispatch::Mailbox;
use crate::grab::user::{GrabIo, Looper, Marks};

const SERVER_ISS: u32 = 0x5000_0000;

/// Issue 30: a connection's frames that came in on two queues are taken in the order they
/// reached the host. The owner's connection gets its reply in two segments: the first
/// came in on another thread's queue (handed over), the second, later, on the owner's own
/// queue; the owner reads both in one pass. Taking its own queue's frame first (as before)
/// made the first segment look late: an out-of-order segment the network never caused.
#[test]
fn a_connections_frames_from_two_queues_are_taken_in_arrival_order() {
    let dir = tempdir::Dir::new("order");
    let mut plan = plan("198.18.0.0/30", 0.0, &dir);
    plan.run.threads = 2;
    let (ours, theirs) = mem::pair(64);
    let (mut server_rx, mut server_tx) = (theirs.another_handle(), theirs);
    let mut boxes = Mailbox::for_threads(2, plan.tcp.ports).unwrap();
    let mut marks = Marks::for_threads(&plan, 2);
    let (owner_box, mut other) = (boxes.pop().unwrap(), boxes.pop().unwrap());
    let io = GrabIo {
        tx: AnyTx::Mem(ours.another_handle()),
        rxs: vec![AnyRx::Mem(ours)],
    };
    let mut owner = Looper::new(&plan, 1, io, owner_box, None, marks.pop().unwrap()).unwrap();
    // The owner's SYN, the server's SYN-ACK, the owner's ACK.
    assert_eq!(owner.transmit(1, owner.now_us()).unwrap(), 1);
    let mut syn = Vec::new();
    server_rx
        .rx_batch(1, Duration::from_secs(1), |f| syn = f.to_vec())
        .unwrap();
    let (addr, syn, _) = peer::read(&syn);
    let target = peer::Target {
        client_port: syn.src_port,
        client_iss: syn.seq_number,
        ..Default::default()
    };
    let segment = |flags, seq, payload: &[u8]| {
        let seg = peer::segment(&target, flags, seq, payload.len());
        peer::frame(addr, &seg, payload, None)
    };
    let synack = segment(TcpFlags::SYN | TcpFlags::ACK, SERVER_ISS, b"");
    send(&mut server_tx, &synack);
    owner.receive(true).unwrap();
    assert_eq!(owner.engine_stats().established, 1);
    // The reply: its first half reached the other thread first, then the second half
    // reached the owner's queue.
    let (head, tail) = (&b"SONDE "[..], &b"ordered\r\n"[..]);
    let data = TcpFlags::ACK | TcpFlags::PSH;
    let first = segment(data, SERVER_ISS + 1, head);
    let second = segment(data, SERVER_ISS + 1 + head.len() as u32, tail);
    assert_eq!(other.other_owner(&first), Some(1));
    other.hand_over(1, &first, owner.now_us(), false);
    send(&mut server_tx, &second);
    owner.receive(true).unwrap();
    let stats = owner.engine_stats();
    assert_eq!(stats.ooo_segments, 0, "{stats:?}");
    assert_eq!(stats.success, 1, "{stats:?}");
}

fn send(port: &mut mem::MemPort, frame: &[u8]) {
    let sent = port
        .tx_batch(1, |_, buf| {
            buf[..frame.len()].copy_from_slice(frame);
            frame.len()
        })
        .unwrap();
    assert_eq!(sent, 1);
}
