#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_wire::arp::{Packet, Repr, PACKET_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.hardware_type(),
        packet.protocol_type(),
        packet.hardware_len(),
    );
    let _ = (
        packet.protocol_len(),
        packet.operation(),
        packet.is_ethernet_ipv4(),
    );
    let _ = (
        packet.sender_mac(),
        packet.sender_ip(),
        packet.target_mac(),
        packet.target_ip(),
    );
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };

    let mut out = vec![0; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    // An accepted packet is fully described by its Repr.
    assert_eq!(&out[..], &data[..PACKET_LEN]);
    let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
    assert_eq!(again, repr);
    let _ = repr.reply(sonde_wire::MacAddr::BROADCAST);
});
