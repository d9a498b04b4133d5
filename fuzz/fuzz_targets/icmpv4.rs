#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_wire::icmpv4::{Packet, Repr};
use sonde_wire::{ipv4, ChecksumMode};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        packet.msg_type(),
        packet.msg_code(),
        packet.checksum(),
        packet.rest_of_header(),
    );
    let _ = (
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.next_hop_mtu(),
    );
    let _ = (packet.payload(), packet.verify_checksum());
    if let Some(original) = packet.original_datagram() {
        // What a traceroute does with the quote.
        if let Ok(quoted) = ipv4::Packet::new_quoted(original) {
            let _ = (
                quoted.src_addr(),
                quoted.dst_addr(),
                quoted.ident(),
                quoted.payload(),
            );
        }
    }
    let repr = Repr::parse(&packet, ChecksumMode::Ignore).expect("checked message parses");

    let mut out = vec![0; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let again = Packet::new_checked(&out[..]).expect("emitted message is valid");
    assert!(again.verify_checksum());
    assert_eq!(Repr::parse(&again, ChecksumMode::Verify), Ok(repr));
});
