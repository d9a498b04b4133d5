//! Ethernet frames, then whatever they carry: the whole parse path of a
//! received frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_wire::ethernet::{Frame, Repr};
use sonde_wire::{arp, ipv4, ipv6, EtherType};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::new_checked(data) else {
        assert!(data.len() < sonde_wire::ethernet::HEADER_LEN);
        return;
    };
    let _ = (frame.dst_addr(), frame.src_addr(), frame.header_len());
    let payload = frame.payload();
    let repr = Repr::parse(&frame).expect("a checked frame always parses");

    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut Frame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..repr.buffer_len()]);
    let _ = (repr.dst_addr.to_string(), repr.ethertype.to_string());

    // Walk into the payload as a receive path would.
    match frame.ethertype() {
        EtherType::Arp => {
            if let Ok(packet) = arp::Packet::new_checked(payload) {
                let _ = arp::Repr::parse(&packet);
            }
        }
        EtherType::Ipv4 => {
            if let Ok(packet) = ipv4::Packet::new_checked(payload) {
                let _ = (packet.payload(), packet.verify_checksum());
                let _ = ipv4::Repr::parse(&packet, sonde_wire::ChecksumMode::Verify);
            }
        }
        EtherType::Ipv6 => {
            if let Ok(packet) = ipv6::Packet::new_checked(payload) {
                let _ = (packet.payload(), ipv6::Repr::parse(&packet));
            }
        }
        EtherType::Vlan | EtherType::Unknown(_) => {}
    }
});
