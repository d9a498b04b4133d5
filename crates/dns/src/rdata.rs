//! Typed views of record data.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::name::{read_name, Name};
use crate::{Malformed, Type};

/// A record's data, by type.
#[derive(Debug, Clone, Copy)]
pub enum Rdata<'a> {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// A name server of the owner's zone.
    Ns(Name<'a>),
    /// The canonical name the owner is an alias of.
    Cname(Name<'a>),
    /// The name an address (a reverse name) points to.
    Ptr(Name<'a>),
    /// A mail exchange and its preference (lower first).
    Mx {
        /// Lower is tried first.
        preference: u16,
        /// The mail server.
        exchange: Name<'a>,
    },
    /// One or more character strings.
    Txt(Strings<'a>),
    /// The start of a zone's authority.
    Soa(Soa<'a>),
    /// A CAA property (RFC 8659).
    Caa {
        /// Flags; 128 is "issuer critical".
        flags: u8,
        /// The property's tag (`issue`, `issuewild`, `iodef`).
        tag: &'a [u8],
        /// Its value.
        value: &'a [u8],
    },
    /// EDNS0 options, as (code, data) pairs.
    Opt(Options<'a>),
    /// Any other type, its data as sent.
    Unknown(Type, &'a [u8]),
}

/// An SOA record's fields.
#[derive(Debug, Clone, Copy)]
pub struct Soa<'a> {
    /// The zone's primary server.
    pub mname: Name<'a>,
    /// The mailbox of its administrator, as a name.
    pub rname: Name<'a>,
    /// Version of the zone.
    pub serial: u32,
    /// Seconds between secondaries' checks.
    pub refresh: u32,
    /// Seconds between failed checks.
    pub retry: u32,
    /// Seconds after which a secondary stops answering.
    pub expire: u32,
    /// TTL of negative answers (RFC 2308).
    pub minimum: u32,
}

impl<'a> Rdata<'a> {
    /// Reads the data of a record of type `rtype` that lies at `at..end` of `msg`.
    pub(crate) fn parse(
        msg: &'a [u8],
        rtype: Type,
        at: usize,
        end: usize,
    ) -> Result<Rdata<'a>, Malformed> {
        let data = msg.get(at..end).ok_or(Malformed::RdataPastEnd)?;
        Ok(match rtype {
            Type::A => Rdata::A(Ipv4Addr::from(
                <[u8; 4]>::try_from(data).map_err(|_| Malformed::BadRdata)?,
            )),
            Type::AAAA => Rdata::Aaaa(Ipv6Addr::from(
                <[u8; 16]>::try_from(data).map_err(|_| Malformed::BadRdata)?,
            )),
            Type::NS => Rdata::Ns(whole_name(msg, at, end)?),
            Type::CNAME => Rdata::Cname(whole_name(msg, at, end)?),
            Type::PTR => Rdata::Ptr(whole_name(msg, at, end)?),
            Type::MX => {
                let preference = u16::from_be_bytes(fixed(data, 0)?);
                Rdata::Mx {
                    preference,
                    exchange: whole_name(msg, at + 2, end)?,
                }
            }
            Type::TXT => Rdata::Txt(Strings::new(data)?),
            Type::SOA => Rdata::Soa(soa(msg, at, end)?),
            Type::CAA => caa(data)?,
            Type::OPT => Rdata::Opt(Options::new(data)?),
            other => Rdata::Unknown(other, data),
        })
    }
}

fn fixed<const N: usize>(data: &[u8], at: usize) -> Result<[u8; N], Malformed> {
    data.get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(Malformed::BadRdata)
}

/// A name that must fill the data to its end.
fn whole_name(msg: &[u8], at: usize, end: usize) -> Result<Name<'_>, Malformed> {
    let (name, next) = read_name(msg, at, end)?;
    if next != end {
        return Err(Malformed::BadRdata);
    }
    Ok(name)
}

fn soa(msg: &[u8], at: usize, end: usize) -> Result<Soa<'_>, Malformed> {
    let (mname, at) = read_name(msg, at, end)?;
    let (rname, at) = read_name(msg, at, end)?;
    let numbers = msg.get(at..end).ok_or(Malformed::BadRdata)?;
    if numbers.len() != 20 {
        return Err(Malformed::BadRdata);
    }
    let word = |i: usize| fixed(numbers, i * 4).map(u32::from_be_bytes);
    Ok(Soa {
        mname,
        rname,
        serial: word(0)?,
        refresh: word(1)?,
        retry: word(2)?,
        expire: word(3)?,
        minimum: word(4)?,
    })
}

fn caa(data: &[u8]) -> Result<Rdata<'_>, Malformed> {
    let [flags, tag_len] = fixed(data, 0)?;
    let tag_end = 2 + usize::from(tag_len);
    if tag_len == 0 {
        return Err(Malformed::BadRdata);
    }
    let tag = data.get(2..tag_end).ok_or(Malformed::BadRdata)?;
    Ok(Rdata::Caa {
        flags,
        tag,
        value: data.get(tag_end..).unwrap_or_default(),
    })
}

/// The character strings of a TXT record, each up to 255 bytes; checked to fill the data exactly.
#[derive(Debug, Clone, Copy)]
pub struct Strings<'a> {
    data: &'a [u8],
}

impl<'a> Strings<'a> {
    fn new(data: &'a [u8]) -> Result<Strings<'a>, Malformed> {
        if data.is_empty() {
            return Err(Malformed::BadRdata);
        }
        let mut at = 0;
        while at < data.len() {
            at += 1 + usize::from(data[at]);
        }
        if at != data.len() {
            return Err(Malformed::BadRdata);
        }
        Ok(Strings { data })
    }

    /// The strings, in order.
    pub fn iter(&self) -> StringsIter<'a> {
        StringsIter { rest: self.data }
    }
}

impl<'a> IntoIterator for Strings<'a> {
    type Item = &'a [u8];
    type IntoIter = StringsIter<'a>;

    fn into_iter(self) -> StringsIter<'a> {
        self.iter()
    }
}

/// Iterator over the strings of a TXT record.
#[derive(Debug, Clone)]
pub struct StringsIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for StringsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, rest) = self.rest.split_first()?;
        let (string, rest) = rest.split_at_checked(usize::from(len))?;
        self.rest = rest;
        Some(string)
    }
}

/// The options of an OPT record; checked to fill the data exactly.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    data: &'a [u8],
}

impl<'a> Options<'a> {
    fn new(data: &'a [u8]) -> Result<Options<'a>, Malformed> {
        let mut at = 0;
        while at < data.len() {
            let [_, _, hi, lo] = fixed(data, at)?;
            at += 4 + usize::from(u16::from_be_bytes([hi, lo]));
        }
        if at != data.len() {
            return Err(Malformed::BadRdata);
        }
        Ok(Options { data })
    }

    /// The (option code, option data) pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &'a [u8])> + 'a {
        let mut rest = self.data;
        std::iter::from_fn(move || {
            let (head, tail) = rest.split_at_checked(4)?;
            let code = u16::from_be_bytes([head[0], head[1]]);
            let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
            let (value, tail) = tail.split_at_checked(len)?;
            rest = tail;
            Some((code, value))
        })
    }
}
