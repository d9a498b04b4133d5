#![no_main]

// Arbitrary bytes as a capture file to `sonde capture -r`'s reader: every pcap and pcapng
// header, block and record it parses must end in an error or a packet, never a panic, and every
// packet it hands over must be no longer than the input.

use libfuzzer_sys::fuzz_target;
use sonde_capture::read::read_stream;

fuzz_target!(|file: &[u8]| {
    let _ = read_stream(
        file,
        |_| Ok(()),
        |p| {
            assert!(p.data.len() <= file.len());
            Ok(true)
        },
    );
});
