//! The lookups a run makes: names from a file or the command line, each with its types, or the
//! reverse names of an address range (`--ptr`); numbered in input order, split into shards.
//! Read as the run goes, so ten million names cost no memory up front.

use std::io::BufRead;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use sonde_dns::{NameBuf, Type};

/// One lookup: a name and a type, and its place in the input.
#[derive(Clone, Debug)]
pub struct Ask {
    pub index: u64,
    pub name: NameBuf,
    pub qtype: Type,
}

/// A line that is not a lookup (skipped, counted, the first few said).
#[derive(Clone, Debug)]
pub struct BadLine {
    pub line: u64,
    pub why: String,
}

/// Where names come from.
pub enum Source {
    /// Lines of `name` or `name,type` (`#` comments, blank lines skipped).
    Lines(Box<dyn BufRead + Send>),
    /// Names given on the command line.
    Names(std::vec::IntoIter<String>),
    /// The reverse names (in-addr.arpa) of every address of a prefix, in order.
    Ptr { net: Ipv4Net, next: u64 },
}

/// The lookups of a run, in input order: each name with each type of `types` (a line's own type
/// instead, when it names one); only those of this shard (`index % shards == shard`).
pub struct Asks {
    source: Source,
    types: Vec<Type>,
    shard: (u64, u64),
    line: u64,
    index: u64,
    pending: Option<(NameBuf, usize)>,
    pub bad: Vec<BadLine>,
    pub bad_count: u64,
    /// Lookups numbered below this are skipped (a resumed run's checkpoint: they were asked).
    pub skip_below: u64,
    /// Lookups given before the input's (a resumed run's unfinished ones).
    pub redo: std::collections::VecDeque<Ask>,
}

const BAD_LINES_KEPT: usize = 5;

impl Asks {
    pub fn new(source: Source, types: Vec<Type>, shard: (u32, u32)) -> Asks {
        Asks {
            source,
            types,
            shard: (u64::from(shard.0), u64::from(shard.1.max(1))),
            line: 0,
            index: 0,
            pending: None,
            bad: Vec::new(),
            bad_count: 0,
            skip_below: 0,
            redo: Default::default(),
        }
    }

    /// How many lookups of the input come before the next one (all shards counted).
    pub fn read_so_far(&self) -> u64 {
        self.index
    }

    /// The next (name, list of types) of the source; `None` at its end.
    fn next_name(&mut self) -> Option<(NameBuf, Option<Type>)> {
        loop {
            let text = match &mut self.source {
                Source::Names(names) => names.next()?,
                Source::Ptr { net, next } => {
                    let size = 1u64 << (32 - net.prefix_len());
                    if *next >= size {
                        return None;
                    }
                    let addr = u32::from(net.network()) + *next as u32;
                    *next += 1;
                    reverse_name(Ipv4Addr::from(addr))
                }
                Source::Lines(reader) => {
                    let mut text = String::new();
                    match reader.read_line(&mut text) {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => text,
                    }
                }
            };
            self.line += 1;
            let text = text.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            match parse_line(text) {
                Ok(found) => return Some(found),
                Err(why) => self.bad_line(why),
            }
        }
    }

    fn bad_line(&mut self, why: String) {
        self.bad_count += 1;
        if self.bad.len() < BAD_LINES_KEPT {
            self.bad.push(BadLine {
                line: self.line,
                why,
            });
        }
    }
}

impl Iterator for Asks {
    type Item = Ask;

    fn next(&mut self) -> Option<Ask> {
        if let Some(ask) = self.redo.pop_front() {
            return Some(ask);
        }
        loop {
            let (name, type_at) = match self.pending.take() {
                Some(p) => p,
                None => match self.next_name()? {
                    (name, Some(own)) => {
                        let ask = self.number(name, own);
                        match ask {
                            Some(a) => return Some(a),
                            None => continue,
                        }
                    }
                    (name, None) => (name, 0),
                },
            };
            let qtype = self.types[type_at];
            if type_at + 1 < self.types.len() {
                self.pending = Some((name, type_at + 1));
            }
            if let Some(a) = self.number(name, qtype) {
                return Some(a);
            }
        }
    }
}

impl Asks {
    /// Numbers a lookup; `None` when it belongs to another shard or is skipped.
    fn number(&mut self, name: NameBuf, qtype: Type) -> Option<Ask> {
        let index = self.index;
        self.index += 1;
        if index % self.shard.1 != self.shard.0 {
            return None;
        }
        if index < self.skip_below {
            return None;
        }
        Some(Ask { index, name, qtype })
    }
}

/// `name` or `name,type` (the type by name: A, MX, TYPE65…), or a JSON object with `name` and
/// `type` (a row of `sonde dns`, or of `lab truth --dns`).
fn parse_line(text: &str) -> Result<(NameBuf, Option<Type>), String> {
    if text.starts_with('{') {
        return parse_json_line(text);
    }
    let (name, qtype) = match text.split_once(',') {
        Some((n, t)) => {
            let t = t.trim();
            let qtype = t
                .parse::<Type>()
                .map_err(|_| format!("`{t}` is no DNS type (A, AAAA, MX, TXT, TYPE65…)"))?;
            (n.trim(), Some(qtype))
        }
        None => (text, None),
    };
    let mut buf = NameBuf::from_text(name).map_err(|e| format!("`{name}`: {e}"))?;
    buf.make_ascii_lowercase();
    Ok((buf, qtype))
}

fn parse_json_line(text: &str) -> Result<(NameBuf, Option<Type>), String> {
    let row: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let name = row["name"].as_str().ok_or("a JSON line without a `name`")?;
    let qtype = match row["type"].as_str() {
        Some(t) => Some(t.parse::<Type>().map_err(|e| e.to_string())?),
        None => None,
    };
    let mut buf = NameBuf::from_text(name).map_err(|e| format!("`{name}`: {e}"))?;
    buf.make_ascii_lowercase();
    Ok((buf, qtype))
}

/// `4.3.2.1.in-addr.arpa` for 1.2.3.4.
pub fn reverse_name(addr: Ipv4Addr) -> String {
    let [a, b, c, d] = addr.octets();
    format!("{d}.{c}.{b}.{a}.in-addr.arpa")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &'static str) -> Source {
        Source::Lines(Box::new(std::io::Cursor::new(text)))
    }

    fn texts(asks: Asks) -> Vec<String> {
        asks.map(|a| format!("{} {} {}", a.index, a.name, a.qtype))
            .collect()
    }

    #[test]
    fn each_name_gets_each_type_unless_its_line_names_one() {
        let asks = Asks::new(
            lines("# names\nWWW.Example.com\n\nmail.example.com,mx\n{\"name\":\"a.test.\",\"type\":\"TXT\"}\n"),
            vec![Type::A, Type::AAAA],
            (0, 1),
        );
        assert_eq!(
            texts(asks),
            [
                "0 www.example.com A",
                "1 www.example.com AAAA",
                "2 mail.example.com MX",
                "3 a.test TXT"
            ]
        );
    }

    #[test]
    fn shards_split_the_lookups_and_a_resume_skips_what_was_admitted() {
        let all = "a.test\nb.test\nc.test\nd.test\ne.test\n";
        let s0 = texts(Asks::new(lines(all), vec![Type::A], (0, 2)));
        let s1 = texts(Asks::new(lines(all), vec![Type::A], (1, 2)));
        assert_eq!(s0, ["0 a.test A", "2 c.test A", "4 e.test A"]);
        assert_eq!(s1, ["1 b.test A", "3 d.test A"]);
        let mut resumed = Asks::new(lines(all), vec![Type::A], (0, 2));
        resumed.skip_below = 3;
        resumed.redo.push_back(Ask {
            index: 2,
            name: NameBuf::from_text("c.test").unwrap(),
            qtype: Type::A,
        });
        assert_eq!(texts(resumed), ["2 c.test A", "4 e.test A"]);
    }

    #[test]
    fn bad_lines_are_counted_and_the_first_kept() {
        let mut asks = Asks::new(
            lines("ok.test\na..b\nok.test,NOPE\nfine.test\n"),
            vec![Type::A],
            (0, 1),
        );
        let got: Vec<u64> = asks.by_ref().map(|a| a.index).collect();
        assert_eq!(got, [0, 1]);
        assert_eq!(asks.bad_count, 2);
        assert_eq!(asks.bad[0].line, 2);
        assert!(asks.bad[1].why.contains("NOPE"), "{}", asks.bad[1].why);
    }

    #[test]
    fn ptr_names_of_a_prefix_in_order() {
        let asks = Asks::new(
            Source::Ptr {
                net: "198.18.0.0/31".parse().unwrap(),
                next: 0,
            },
            vec![Type::PTR],
            (0, 1),
        );
        assert_eq!(
            texts(asks),
            [
                "0 0.0.18.198.in-addr.arpa PTR",
                "1 1.0.18.198.in-addr.arpa PTR"
            ]
        );
    }
}
