//! Compiles the XDP drop sink (xdp/drop.c) into OUT_DIR/drop.o, which the
//! crate embeds with `include_bytes!`.
//!
//! Without clang the crate still builds (the rest of the lab does not need
//! it): an empty object is embedded and `Sink::Drop` reports at run time that
//! clang was missing.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "xdp/drop.c";
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("drop.o");
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-c", src, "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("`{clang} -target bpf -c {src}` failed ({s})"),
        Err(e) => {
            println!("cargo:warning=cannot run {clang} ({e}): the lab's XDP drop sink is disabled; install clang and rebuild");
            std::fs::write(&out, b"").expect("write empty drop.o");
        }
    }
}
