#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_wire::ipv6::{Packet, Repr};

fn touch<T: AsRef<[u8]>>(packet: &Packet<T>) {
    let _ = (
        packet.version(),
        packet.traffic_class(),
        packet.flow_label(),
    );
    let _ = (
        packet.payload_len(),
        packet.next_header(),
        packet.hop_limit(),
    );
    let _ = (packet.src_addr(), packet.dst_addr(), packet.payload());
}

fuzz_target!(|data: &[u8]| {
    if let Ok(quoted) = Packet::new_quoted(data) {
        touch(&quoted);
    }
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    touch(&packet);
    let repr = Repr::parse(&packet).expect("a checked packet always parses");

    let mut out = vec![0; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..repr.buffer_len()]);
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
});
