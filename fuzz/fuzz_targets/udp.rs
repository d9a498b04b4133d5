#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use sonde_wire::udp::{Packet, Repr};
use sonde_wire::{ChecksumMode, IpPair};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, datagram)) = data.split_first() else {
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
    if let Ok(quoted) = Packet::new_quoted(datagram) {
        let _ = (
            quoted.src_port(),
            quoted.dst_port(),
            quoted.payload(),
            quoted.verify_checksum(&ips),
        );
    }
    let Ok(packet) = Packet::new_checked(datagram) else {
        return;
    };
    let _ = (
        packet.src_port(),
        packet.dst_port(),
        packet.len(),
        packet.is_empty(),
    );
    let _ = (
        packet.checksum(),
        packet.payload(),
        packet.verify_checksum(&ips),
    );
    let repr = Repr::parse(&packet, &ips, ChecksumMode::Ignore).expect("checked datagram parses");

    let mut out = vec![0; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), &ips);
    let again = Packet::new_checked(&out[..]).expect("emitted datagram is valid");
    assert_ne!(
        again.checksum(),
        0,
        "a computed checksum is never sent as 0"
    );
    assert_eq!(Repr::parse(&again, &ips, ChecksumMode::Verify), Ok(repr));
});
