//! Record types by number and by name (`A`, `aaaa`, `TYPE65`).

use std::fmt;
use std::str::FromStr;

/// A record (or query) type: any 16-bit number, with names for the ones sonde knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Type(pub u16);

impl Type {
    /// IPv4 address.
    pub const A: Type = Type(1);
    /// Name server of a zone.
    pub const NS: Type = Type(2);
    /// Canonical name (an alias).
    pub const CNAME: Type = Type(5);
    /// Start of a zone's authority.
    pub const SOA: Type = Type(6);
    /// Domain name pointer (reverse lookups).
    pub const PTR: Type = Type(12);
    /// Mail exchange.
    pub const MX: Type = Type(15);
    /// Text strings.
    pub const TXT: Type = Type(16);
    /// IPv6 address.
    pub const AAAA: Type = Type(28);
    /// EDNS0 pseudo-record (RFC 6891).
    pub const OPT: Type = Type(41);
    /// Any type (a query only).
    pub const ANY: Type = Type(255);
    /// Certification authority authorization (RFC 8659).
    pub const CAA: Type = Type(257);

    /// The named types, for parsing and display.
    pub const NAMED: [(&'static str, Type); 11] = [
        ("A", Type::A),
        ("NS", Type::NS),
        ("CNAME", Type::CNAME),
        ("SOA", Type::SOA),
        ("PTR", Type::PTR),
        ("MX", Type::MX),
        ("TXT", Type::TXT),
        ("AAAA", Type::AAAA),
        ("OPT", Type::OPT),
        ("ANY", Type::ANY),
        ("CAA", Type::CAA),
    ];

    /// The mnemonic of a named type (`"MX"`), or `None` for the others.
    pub fn name(self) -> Option<&'static str> {
        Type::NAMED
            .iter()
            .find(|(_, t)| *t == self)
            .map(|(n, _)| *n)
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "TYPE{}", self.0),
        }
    }
}

/// A type name that is neither known nor of the `TYPE<number>` form (RFC 3597).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownType(pub String);

impl fmt::Display for UnknownType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown DNS type {:?}: use A, AAAA, NS, CNAME, SOA, PTR, MX, TXT, CAA, ANY or TYPE<number>",
            self.0
        )
    }
}

impl std::error::Error for UnknownType {}

impl FromStr for Type {
    type Err = UnknownType;

    /// `A`, `aaaa`, `Mx` (any case), or `TYPE65` for a number of 0..=65535.
    fn from_str(s: &str) -> Result<Type, UnknownType> {
        if let Some((_, t)) = Type::NAMED.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)) {
            return Ok(*t);
        }
        let number = s
            .get(..4)
            .filter(|prefix| prefix.eq_ignore_ascii_case("TYPE"))
            .and_then(|_| s.get(4..))
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u16>().ok());
        number.map(Type).ok_or_else(|| UnknownType(s.to_string()))
    }
}

/// The Internet class, the only one sonde asks about.
pub const CLASS_IN: u16 = 1;
