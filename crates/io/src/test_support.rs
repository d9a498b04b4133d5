//! For tests that need real sockets: a network namespace of their own, with only `lo` (up) in
//! it, so nothing they send can leave it; and the frames they send (lab addresses only).

use std::net::Ipv4Addr;

/// The address sonde receives on in these tests (a lab address).
pub(crate) const SCAN4: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);

/// An Ethernet/IPv4/TCP SYN-ACK from 198.18.0.7:80 to `dst`:`dport` (checksums left zero:
/// nothing here checks them).
pub(crate) fn synack(dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[198, 18, 0, 7]);
    ip[16..20].copy_from_slice(&dst.octets());
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&dport.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x12;
    f.extend_from_slice(&ip);
    f.extend_from_slice(&tcp);
    f
}

/// Runs `work` in a new thread moved into a new network namespace whose `lo` is up; skips (with
/// a note) without root. The namespace goes away with the thread.
pub(crate) fn in_private_netns(work: impl FnOnce() + Send + 'static) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: needs root (a network namespace of its own)");
        return;
    }
    std::thread::spawn(move || {
        // SAFETY: unshare only changes this thread's namespaces (no other flags given).
        let ret = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(ret, 0, "unshare: {}", std::io::Error::last_os_error());
        // Child processes start in the calling thread's namespace.
        let up = std::process::Command::new("ip")
            .args(["link", "set", "dev", "lo", "up"])
            .status()
            .expect("running ip");
        assert!(up.success(), "ip link set dev lo up");
        work();
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
}
