//! The presentation form of record data (RFC 1035 section 5.1, RFC 3597 for unknown types), as
//! zone files and `dig` write it: what a row shows and what the lab's truth compares.

use std::fmt::{self, Write};

use crate::name::Name;
use crate::rdata::{Rdata, Strings};

/// A name with its final dot (`www.example.`; the root is `.`).
pub struct Fqdn<'n, 'a>(pub &'n Name<'a>);

impl fmt::Display for Fqdn<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_root() {
            f.write_char('.')
        } else {
            write!(f, "{}.", self.0)
        }
    }
}

impl fmt::Display for Rdata<'_> {
    /// A: `198.18.0.1`; AAAA as `Ipv6Addr` prints it; NS, CNAME, PTR: the name with its dot;
    /// MX: `10 mail.example.`; TXT: each string in double quotes, one space between; SOA: the
    /// seven fields; CAA: `0 issue "ca.example"`; OPT: nothing; any other type: `\# LEN HEX`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rdata::A(a) => write!(f, "{a}"),
            Rdata::Aaaa(a) => write!(f, "{a}"),
            Rdata::Ns(n) | Rdata::Cname(n) | Rdata::Ptr(n) => write!(f, "{}", Fqdn(n)),
            Rdata::Mx {
                preference,
                exchange,
            } => write!(f, "{preference} {}", Fqdn(exchange)),
            Rdata::Txt(strings) => write_strings(strings, f),
            Rdata::Soa(s) => write!(
                f,
                "{} {} {} {} {} {} {}",
                Fqdn(&s.mname),
                Fqdn(&s.rname),
                s.serial,
                s.refresh,
                s.retry,
                s.expire,
                s.minimum
            ),
            Rdata::Caa { flags, tag, value } => {
                write!(f, "{flags} ")?;
                write_plain(tag, f)?;
                f.write_char(' ')?;
                write_quoted(value, f)
            }
            Rdata::Opt(_) => Ok(()),
            Rdata::Unknown(_, data) => {
                write!(f, "\\# {}", data.len())?;
                if !data.is_empty() {
                    f.write_char(' ')?;
                }
                data.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

fn write_strings(strings: &Strings<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for (i, s) in strings.iter().enumerate() {
        if i > 0 {
            f.write_char(' ')?;
        }
        write_quoted(s, f)?;
    }
    Ok(())
}

/// A character string in double quotes; `"` and `\` escaped with a backslash, bytes outside
/// printable ASCII as `\DDD`.
fn write_quoted(s: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_char('"')?;
    write_plain(s, f)?;
    f.write_char('"')
}

fn write_plain(s: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for &b in s {
        match b {
            b'"' | b'\\' => {
                f.write_char('\\')?;
                f.write_char(char::from(b))?;
            }
            0x20..=0x7e => f.write_char(char::from(b))?,
            _ => write!(f, "\\{b:03}")?,
        }
    }
    Ok(())
}
