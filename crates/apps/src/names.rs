//! Names per target (`-I` lines `address[:port],name`, as ZGrab2 reads them): the name a
//! connection to an address and port puts into Host and SNI, and into its row.

use std::collections::HashMap;
use std::net::IpAddr;

use sonde_scan::targets::NamedTarget;

/// The names of a run's targets, looked up per connection (once, when it opens).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetNames {
    /// By address and port (`None`: every port), the names in input order.
    names: HashMap<(IpAddr, Option<u16>), Vec<String>>,
    longest: usize,
}

impl TargetNames {
    pub fn new(named: &[NamedTarget]) -> TargetNames {
        let mut names: HashMap<(IpAddr, Option<u16>), Vec<String>> = HashMap::new();
        for target in named {
            let list = names.entry((target.addr, target.port)).or_default();
            if !list.contains(&target.name) {
                list.push(target.name.clone());
            }
        }
        let longest = named.iter().map(|t| t.name.len()).max().unwrap_or(0);
        TargetNames { names, longest }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names of (`addr`, `port`): those given with this port, else those given for every
    /// port of the address.
    pub fn names_of(&self, addr: IpAddr, port: u16) -> &[String] {
        self.names
            .get(&(addr, Some(port)))
            .or_else(|| self.names.get(&(addr, None)))
            .map_or(&[], Vec::as_slice)
    }

    /// The first name of (`addr`, `port`), if it has one.
    pub fn name_of(&self, addr: IpAddr, port: u16) -> Option<&str> {
        self.names_of(addr, port).first().map(String::as_str)
    }

    /// The targets' `round`-th names only (0: the first): the names of one round of a run
    /// whose targets have several (each name its own connection, so one per round).
    pub fn round(&self, round: usize) -> TargetNames {
        let names: HashMap<_, _> = self
            .names
            .iter()
            .filter_map(|(key, names)| Some((*key, vec![names.get(round)?.clone()])))
            .collect();
        TargetNames {
            names,
            longest: self.longest,
        }
    }

    /// The addresses and ports (`None`: every port) that have a `round`-th name.
    pub fn targets_of_round(
        &self,
        round: usize,
    ) -> impl Iterator<Item = (IpAddr, Option<u16>)> + '_ {
        self.names
            .iter()
            .filter(move |(_, names)| names.len() > round)
            .map(|(key, _)| *key)
    }

    /// The most names one address and port has.
    pub fn most_per_target(&self) -> usize {
        self.names.values().map(Vec::len).max().unwrap_or(0)
    }

    /// The longest name, in bytes.
    pub fn longest(&self) -> usize {
        self.longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_s_own_names_come_before_the_address_s() {
        let named = |addr: &str, port, name: &str| NamedTarget {
            addr: addr.parse().unwrap(),
            port,
            name: name.to_string(),
        };
        let names = TargetNames::new(&[
            named("198.18.0.1", Some(443), "a.test"),
            named("198.18.0.1", Some(443), "b.test"),
            named("198.18.0.1", Some(443), "a.test"),
            named("198.18.0.1", None, "any-port.test"),
        ]);
        let addr = "198.18.0.1".parse().unwrap();
        assert_eq!(names.names_of(addr, 443), ["a.test", "b.test"]);
        assert_eq!(names.name_of(addr, 80), Some("any-port.test"));
        assert_eq!(names.name_of("198.18.0.2".parse().unwrap(), 443), None);
        assert_eq!((names.most_per_target(), names.longest()), (2, 13));
        let second = names.round(1);
        assert_eq!(second.names_of(addr, 443), ["b.test"]);
        assert_eq!(second.name_of(addr, 80), None);
        let round1: Vec<_> = names.targets_of_round(1).collect();
        assert_eq!(round1, [(addr, Some(443))]);
    }
}
