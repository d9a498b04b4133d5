//! Packet formats for sonde: checked zero-copy views plus small parse/emit
//! representations.
//!
//! Takes byte buffers; gives checked views and `Repr`s of Ethernet, ARP, IPv4, IPv6, TCP, UDP,
//! ICMPv4/v6 and DNS, and checksums. Uses no other crate: everything above builds on it.
//!
//! A *view* (`Packet<T>`, `Frame<T>` for Ethernet) wraps any `T: AsRef<[u8]>`
//! without copying. `new_checked` validates every length the header claims
//! against the buffer once, so no getter or `payload()` can panic afterwards;
//! setters exist when `T` is also `AsMut<[u8]>`. A *`Repr`* is a small `Copy`
//! value with the fields callers reason about: `Repr::parse` reads one from a
//! view (verifying checksums per [`ChecksumMode`]) and `Repr::emit` writes one
//! into a buffer of `buffer_len()` bytes, computing checksums over the payload
//! already there, so write the payload first. Errors are one `Copy` enum,
//! [`Error`], so the per-packet path never allocates.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

pub mod arp;
pub mod checksum;
pub mod dns;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;

mod bytes;
#[cfg(test)]
mod testdata;

pub use checksum::IpPair;
pub use ethernet::{EtherType, MacAddr, ParseMacAddrError};
pub use ipv4::Protocol as IpProtocol;
pub use tcp::{Flags as TcpFlags, TcpOption};

/// Why a buffer was rejected. Cheap to create and copy: the per-packet path
/// never allocates for an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length the header
    /// claims.
    Truncated,
    /// A field holds a value the format forbids (bad version, a length below
    /// the header size, a malformed option, ...).
    Malformed,
    /// The checksum does not match the contents.
    Checksum,
    /// Well formed, but not something this crate represents (a non
    /// Ethernet/IPv4 ARP, an IPv4 fragment, ...).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "checksum mismatch",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

/// Whether `Repr::parse` should verify checksums. Skipping is useful for
/// packets captured on a host whose NIC computes checksums on transmit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChecksumMode {
    /// Reject packets whose checksum does not match with [`Error::Checksum`].
    #[default]
    Verify,
    /// Accept packets whatever their checksum field says.
    Ignore,
}

impl ChecksumMode {
    pub(crate) fn verify(self) -> bool {
        self == ChecksumMode::Verify
    }
}

/// Shorthand for results carrying this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
