#![no_main]

use std::net::Ipv6Addr;

use libfuzzer_sys::fuzz_target;
use sonde_wire::icmpv6::{Packet, Repr, HEADER_LEN};
use sonde_wire::{ipv6, ChecksumMode};

const SRC: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const DST: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 2);

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
        packet.mtu(),
        packet.neighbor_flags(),
    );
    let _ = (packet.target_addr(), packet.ndp_options(), packet.payload());
    let _ = packet.verify_checksum(&SRC, &DST);
    if let Some(original) = packet.original_packet() {
        if let Ok(quoted) = ipv6::Packet::new_quoted(original) {
            let _ = (quoted.src_addr(), quoted.flow_label(), quoted.payload());
        }
    }
    let Ok(repr) = Repr::parse(&packet, &SRC, &DST, ChecksumMode::Ignore) else {
        return;
    };

    let mut out = vec![0; repr.buffer_len()];
    if repr.header_len() == HEADER_LEN {
        // Echo and error messages only count their payload: carry it over.
        out[HEADER_LEN..].copy_from_slice(packet.payload());
    }
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), &SRC, &DST);
    let again = Packet::new_checked(&out[..]).expect("emitted message is valid");
    assert!(again.verify_checksum(&SRC, &DST));
    assert_eq!(
        Repr::parse(&again, &SRC, &DST, ChecksumMode::Verify),
        Ok(repr)
    );
});
