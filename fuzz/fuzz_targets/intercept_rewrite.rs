#![no_main]

// Arbitrary bytes as a packet `sonde intercept` rewrites (`sonde_intercept::rewrite`): the
// first 6 bytes pick the fields (TTL, DSCP, ports), the rest is the IP packet. A rewrite never
// panics, never changes the length, and keeps a correct IPv4 header checksum correct. The
// module is included by path (it needs only sonde-wire), so no libpcap or AF_XDP build.

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/intercept/src/rewrite.rs"]
#[allow(dead_code)]
mod rewrite;

use rewrite::Rewrite;
use sonde_wire::checksum::checksum;

fuzz_target!(|data: &[u8]| {
    let Some((pick, packet)) = data.split_first_chunk::<6>() else {
        return;
    };
    let rw = Rewrite {
        ttl: (pick[0] & 1 == 1).then_some(pick[1]),
        dscp: (pick[0] & 2 == 2).then_some(pick[2] & 63),
        sport: (pick[0] & 4 == 4).then_some(u16::from_be_bytes([pick[3], pick[4]])),
        dport: (pick[0] & 8 == 8).then_some(u16::from_be_bytes([pick[4], pick[5]])),
    };
    let mut p = packet.to_vec();
    let header_ok = |p: &[u8]| {
        let ihl = usize::from(p.first().copied().unwrap_or(0) & 0x0f) * 4;
        p.first().is_some_and(|b| b >> 4 == 4) && ihl >= 20 && p.len() >= ihl && checksum(&p[..ihl]) == 0
    };
    let was_ok = header_ok(&p);
    rw.apply(&mut p);
    assert_eq!(p.len(), packet.len());
    if was_ok {
        assert!(header_ok(&p), "a rewrite broke a correct IPv4 header checksum");
    }
});
