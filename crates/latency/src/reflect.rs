//! Reflectors echo each datagram to a port back to its sender, payload unchanged, at the
//! application layer. [`reflect_kernel`] is an ordinary program on the kernel's UDP socket path
//! (blocking `recv_from`, `send_to`); sonde's frame reflector (`reflect_frames`, in
//! `frames_io`) reads frames from a packet ring or AF_XDP, turns each into its echo in place
//! ([`crate::frame::echo_into`]) and sends it back.

use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest wait, so a stop request (Ctrl-C, the end of `--duration`) is seen quickly.
pub(crate) const WAIT_STEP: Duration = Duration::from_millis(100);

/// What a reflector did.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReflectCount {
    pub echoed: u64,
    /// Frames that were not datagrams to the reflector's port (frame path only).
    pub ignored: u64,
    /// Echoes given up because the transmit queue stayed full (frame path only).
    pub queue_full: u64,
    /// Frames the kernel dropped before the reflector read them: its receive rings were full
    /// (frame path only).
    pub rx_dropped: u64,
}

/// Echoes every datagram to `bind` until `stop` is set or `until` passes.
pub fn reflect_kernel(
    bind: SocketAddrV4,
    stop: &AtomicBool,
    until: Option<Instant>,
) -> io::Result<ReflectCount> {
    let socket = UdpSocket::bind(bind)?;
    socket.set_read_timeout(Some(WAIT_STEP))?;
    let mut buf = [0u8; 65536];
    let mut count = ReflectCount::default();
    while !should_stop(stop, until) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                socket.send_to(&buf[..n], from)?;
                count.echoed += 1;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(count)
}
pub(crate) fn should_stop(stop: &AtomicBool, until: Option<Instant>) -> bool {
    stop.load(Ordering::Relaxed) || until.is_some_and(|t| Instant::now() >= t)
}
