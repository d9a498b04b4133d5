//! What a connection says and when its reply is complete: the seam between the TCP engine and
//! the applications (`sonde-apps`: http, banner, payload, tls). An app holds no per-connection
//! state: the engine keeps the bytes received in order, and the app looks at them.

use std::net::IpAddr;

/// A request/reply application.
pub trait App {
    /// Writes the request for (`addr`, `port`) into `buf` and returns its length; 0 sends
    /// nothing and waits for the server to speak first (banners). `buf` holds at least
    /// [`App::max_request_len`] bytes. Called once per connection, and again, identically, when
    /// the request is retransmitted, so it must be a pure function of its arguments.
    fn write_request(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize;

    /// The longest request `write_request` writes (the engine sends a request as one segment
    /// and checks at start-up that it fits the MSS).
    fn max_request_len(&self) -> usize;

    /// Whether `received`, the reply's bytes so far in order, is a complete reply, so that the
    /// connection can close now instead of waiting for the server's FIN or a timeout.
    fn is_complete(&self, received: &[u8]) -> bool;
}
