//! Compiles sonde's XDP reply filter (xdp/reply_filter.c) into OUT_DIR/reply_filter.o, which
//! src/xdp_filter.rs embeds with `include_bytes!`.

use std::path::{Path, PathBuf};
use std::process::Command;

const SRC: &str = "xdp/reply_filter.c";

fn main() {
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("reply_filter.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]);
    // With -target bpf clang searches neither the multiarch directory (<asm/types.h>, which
    // <linux/bpf.h> includes) nor anything host-specific: name both include directories.
    cmd.arg("-I/usr/include");
    if let Some(dir) = multiarch_include() {
        cmd.arg(format!("-I{}", dir.display()));
    }
    cmd.args(["-c", SRC, "-o"]).arg(&out);
    match cmd.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`{clang} -target bpf -c {SRC}` failed ({}):\n{}\nThe XDP reply filter needs the headers of \
             libbpf-dev (<bpf/bpf_helpers.h>) and linux-libc-dev (<linux/bpf.h>): \
             apt-get install libbpf-dev linux-libc-dev (scripts/setup installs them)",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "cannot run {clang} ({e}): sonde-io compiles its XDP reply filter with clang; \
             install the clang package (apt-get install clang; scripts/setup installs it), \
             or point CLANG at a clang binary"
        ),
    }
}

/// Debian's per-architecture include directory, e.g. /usr/include/x86_64-linux-gnu.
fn multiarch_include() -> Option<PathBuf> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    let triple = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "x86" => "i386-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "riscv64" => "riscv64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        _ => return None,
    };
    let dir = Path::new("/usr/include").join(triple);
    dir.is_dir().then_some(dir)
}
