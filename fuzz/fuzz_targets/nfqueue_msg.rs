#![no_main]

// Arbitrary bytes as one datagram from an NFQUEUE netlink socket to `sonde intercept`'s reader
// (`sonde_io::nfqueue_msg`): every message must end in a packet, an error, or a skip, never a
// panic, and every packet's payload must lie inside the datagram. The module is included by
// path (it uses nothing else of sonde-io), so this target needs no AF_XDP or libpcap build.

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/io/src/nfqueue_msg.rs"]
#[allow(dead_code)]
mod nfqueue_msg;

use nfqueue_msg::{messages, next_message, Msg};

fuzz_target!(|datagram: &[u8]| {
    for msg in messages(datagram) {
        if let Msg::Packet(p) = msg {
            assert!(p.payload.start <= p.payload.end && p.payload.end <= datagram.len());
            let _ = p.wire_len();
        }
    }
    // Starting anywhere (as after a previous message) is just as safe.
    for pos in [1, 4, 16, datagram.len().saturating_sub(1), datagram.len(), usize::MAX] {
        if let Some((_, Some(next))) = next_message(datagram, pos) {
            assert!(next > pos && next < datagram.len());
        }
    }
});
