//! Compiles the lab's XDP programs into OUT_DIR, which the crate embeds with `include_bytes!`:
//! the drop sink (xdp/drop.c → drop.o) and the responder (xdp/responder.c → responder.o, with the
//! DNS answerer xdp/answerer.c that it includes).
//!
//! Without clang the crate still builds (the rest of the lab does not need them): empty objects
//! are embedded and `Sink::Drop` and `Responder::Xdp` report at run time that clang was missing.
//! The responder also needs the headers of libbpf-dev and linux-libc-dev, as sonde-io's reply
//! filter does.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // drop.c includes nothing, so it needs no include directories.
    compile(&clang, "xdp/drop.c", &out.join("drop.o"), &[]);
    let mut includes = vec!["-I/usr/include".to_string()];
    if let Some(dir) = multiarch_include() {
        includes.push(format!("-I{}", dir.display()));
    }
    // responder.c includes the DNS answerer.
    println!("cargo:rerun-if-changed=xdp/answerer.c");
    compile(
        &clang,
        "xdp/responder.c",
        &out.join("responder.o"),
        &includes,
    );
}

fn compile(clang: &str, src: &str, out: &Path, includes: &[String]) {
    println!("cargo:rerun-if-changed={src}");
    let output = Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .args(includes)
        .args(["-c", src, "-o"])
        .arg(out)
        .output();
    match output {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`{clang} -target bpf -c {src}` failed ({}):\n{}\nThe lab's XDP programs need the \
             headers of libbpf-dev and linux-libc-dev: apt-get install libbpf-dev linux-libc-dev \
             (scripts/setup installs them)",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            println!("cargo:warning=cannot run {clang} ({e}): the lab's XDP programs ({src}) are disabled; install clang and rebuild");
            std::fs::write(out, b"").expect("write an empty object");
        }
    }
}

/// Debian's per-architecture include directory (which holds <asm/types.h>), e.g.
/// /usr/include/x86_64-linux-gnu: with -target bpf, clang does not search it.
fn multiarch_include() -> Option<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    let triple = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "x86" => "i386-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "riscv64" => "riscv64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        _ => return None,
    };
    let dir = Path::new("/usr/include").join(triple);
    dir.is_dir().then_some(dir)
}
