#![no_main]

// Arbitrary frames to everything `sonde latency` reads from the network: the reflector's
// request check and the echo it builds (which must then be recognised by the client it answers),
// and the client's echo check.

use libfuzzer_sys::fuzz_target;
use sonde_latency::frame::{echo_into, echo_of, is_echo_request, EchoMatch, FrameEnds};
use sonde_latency::Stamp;
use sonde_wire::MacAddr;

fuzz_target!(|frame: &[u8]| {
    let any = EchoMatch {
        port: 7007,
        addr: None,
    };
    let _ = Stamp::read(frame);
    let client = FrameEnds {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src: "198.19.255.1:40000".parse().unwrap(),
        dst: "198.19.255.254:7007".parse().unwrap(),
    };
    let _ = echo_of(&client, frame);
    if is_echo_request(frame, &any) {
        let mut buf = vec![0u8; 1514];
        let n = echo_into(frame, &mut buf);
        assert!(n <= frame.len());
        let _ = echo_of(&client, &buf[..n]);
    }
});
