//! What a connection says and when its reply is complete: the seam between the TCP engine and
//! the applications (`sonde-apps`: http, banner, payload, tls). A request-then-read app holds
//! no per-connection state: the engine keeps the bytes received in order, and the app looks at
//! them; for a reply read as it grows, the engine may also keep one [`ReplyCursor`] word that
//! says where the app stopped looking.
//!
//! An app that talks in turns (a TLS handshake: ClientHello, then the client's second flight
//! once the server's first has come, then a request inside the session) opens a [`Session`]
//! per connection instead, when the connection opens: the session writes the first bytes, reads
//! each reply byte once, in order, and may append more bytes to send after any of them. The
//! engine keeps every byte a session sent (at most [`MAX_SESSION_SEND`]) for retransmission.

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

    /// For an app that talks in turns: the connection's state, made when the connection to
    /// (`addr`, `port`) opens, having appended its first bytes to `first` (instead of
    /// [`App::write_request`], which such an app is not asked for). `None`, the default: the app
    /// is request-then-read. Called once per connection; the engine drops the session once the
    /// connection's outcome has been drained.
    /// The most bytes a connection sends in all: the request's length, or for an app that
    /// talks in turns what its sessions send at most (at most [`MAX_SESSION_SEND`]). Segments
    /// acknowledging more than this are not of a connection of ours.
    fn max_sent_len(&self) -> usize {
        self.max_request_len()
    }

    fn open_session(
        &self,
        addr: IpAddr,
        port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        let _ = (addr, port, first);
        None
    }
}

/// The most bytes a connection's session sends in all (every turn together): the engine keeps
/// them for retransmission, and counts them in 11 bits of its connection entry. Bytes a session
/// appends beyond it are not sent, and the connection ends there as `Success`, with what it
/// received (the app's fields tell how far the exchange got).
pub const MAX_SESSION_SEND: usize = 2047;

/// One connection of an app that talks in turns (see [`App::open_session`]).
pub trait Session: Send {
    /// Reads `new`, the reply's next bytes in order (every reply byte is handed over once),
    /// and appends to `send` what to send next (nothing: wait for more). Returns true when the
    /// exchange is complete, so that the connection can close now.
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool;

    /// The session as `Any`, so that the app that opened it can read it back when it describes
    /// the reply.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Where an app's completeness check stopped in one reply (see [`App::is_complete_after`]):
/// one word, kept beside the reply's bytes, that only the app reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReplyCursor(pub u64);
