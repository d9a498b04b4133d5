#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_wire::ipv4::{Packet, Repr};
use sonde_wire::ChecksumMode;

fn touch<T: AsRef<[u8]>>(packet: &Packet<T>) {
    let _ = (
        packet.version(),
        packet.header_len(),
        packet.dscp(),
        packet.ecn(),
    );
    let _ = (
        packet.total_len(),
        packet.ident(),
        packet.dont_frag(),
        packet.more_frags(),
    );
    let _ = (
        packet.frag_offset(),
        packet.is_fragment(),
        packet.ttl(),
        packet.protocol(),
    );
    let _ = (packet.checksum(), packet.src_addr(), packet.dst_addr());
    let _ = (packet.options(), packet.payload(), packet.verify_checksum());
}

fuzz_target!(|data: &[u8]| {
    // The lenient constructor for ICMP-quoted headers must be just as safe.
    if let Ok(quoted) = Packet::new_quoted(data) {
        touch(&quoted);
    }
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    touch(&packet);
    assert!(packet.payload().len() + packet.header_len() <= data.len());
    let Ok(repr) = Repr::parse(&packet, ChecksumMode::Ignore) else {
        return;
    };

    let mut out = vec![0; repr.buffer_len()];
    out[repr.header_len()..].copy_from_slice(packet.payload());
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    let again = Packet::new_checked(&out[..]).expect("emitted packet is valid");
    assert_eq!(again.payload(), packet.payload());
    assert_eq!(Repr::parse(&again, ChecksumMode::Verify), Ok(repr));
});
