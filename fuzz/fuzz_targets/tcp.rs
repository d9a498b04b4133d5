#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use sonde_wire::tcp::{Packet, Repr};
use sonde_wire::{ChecksumMode, IpPair};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the pseudo-header so both checksum paths run.
    let Some((&selector, segment)) = data.split_first() else {
        return;
    };
    let ips = if selector & 1 == 0 {
        IpPair::V4 {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(198, 51, 100, 2),
        }
    } else {
        IpPair::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
        }
    };
    let Ok(packet) = Packet::new_checked(segment) else {
        return;
    };
    let _ = (
        packet.src_port(),
        packet.dst_port(),
        packet.seq_number(),
        packet.ack_number(),
    );
    let _ = (
        packet.header_len(),
        packet.flags(),
        packet.window_len(),
        packet.checksum(),
    );
    let _ = (
        packet.urgent_at(),
        packet.options(),
        packet.payload(),
        packet.segment_len(),
    );
    let _ = (packet.verify_checksum(&ips), packet.flags().to_string());
    let mut options = 0;
    for option in packet.iter_options() {
        options += 1;
        if let Ok(option) = option {
            let _ = (option.kind(), option.buffer_len());
        }
    }
    assert!(options <= packet.options().len());
    let Ok(repr) = Repr::parse(&packet, &ips, ChecksumMode::Ignore) else {
        return;
    };

    let mut out = vec![0; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), &ips);
    let again = Packet::new_checked(&out[..]).expect("emitted segment is valid");
    assert!(again.verify_checksum(&ips));
    let again = Repr::parse(&again, &ips, ChecksumMode::Verify).expect("emitted segment parses");
    // Only SACK blocks that no longer fit beside the other options may be lost.
    let kept = again.sack_ranges.iter().flatten().count();
    assert_eq!(again.sack_ranges[..kept], repr.sack_ranges[..kept]);
    assert_eq!(
        again,
        Repr {
            sack_ranges: again.sack_ranges,
            ..repr
        }
    );
});
