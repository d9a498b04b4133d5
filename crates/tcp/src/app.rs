//! What a connection says and when its reply is complete: the seam between the TCP engine and
//! the applications (`sonde-apps`: http, banner, payload, tls). An app holds no per-connection
//! state: the engine keeps the bytes received in order, and the app looks at them; for a reply
//! read as it grows, the engine may also keep one [`ReplyCursor`] word that says where the app
//! stopped looking.

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

    /// As [`App::is_complete`] (the same answer), for a reply read as it grows: `received`
    /// extends the bytes of the previous call made with this `cursor`, which starts as
    /// `ReplyCursor::default()` for each reply. The app records in `cursor` how far it has
    /// read and looks only at the new bytes, so checking after every segment costs time linear
    /// in the reply, not quadratic. The default remembers nothing and asks `is_complete`.
    fn is_complete_after(&self, received: &[u8], cursor: &mut ReplyCursor) -> bool {
        let _ = cursor;
        self.is_complete(received)
    }
}

/// Where an app's completeness check stopped in one reply (see [`App::is_complete_after`]):
/// one word, kept beside the reply's bytes, that only the app reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReplyCursor(pub u64);
