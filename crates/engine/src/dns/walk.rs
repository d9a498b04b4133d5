//! `--iterative`: a lookup walks from the root (or the deepest zone cut already known) down the
//! referrals to the zone that answers, follows CNAMEs (across zones too: the walk starts again
//! at the target), and keeps every step for `--trace`. Zone cuts learnt from referrals, with
//! their glue, go into one cache that every lookup of the run shares, so the root and the TLDs
//! are asked once per zone below them, not once per name.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::rc::Rc;

use sonde_dns::{Fqdn, Message, NameBuf, Rdata, Type};

use super::row::{rcode_name, Answer, Step};

/// Most queries one lookup may send, all steps and CNAMEs together.
const MOST_QUERIES: u32 = 40;
/// Most CNAMEs followed.
const MOST_CNAMES: u32 = 8;

/// The zone cuts learnt so far: a zone's name (lowercase wire form) and its servers' addresses.
pub struct Delegations {
    zones: HashMap<Box<[u8]>, Rc<[Ipv4Addr]>>,
}

impl Delegations {
    /// Starts with the root's servers.
    pub fn new(roots: &[Ipv4Addr]) -> Delegations {
        let mut zones = HashMap::new();
        zones.insert(NameBuf::root().wire().into(), roots.into());
        Delegations { zones }
    }

    /// The deepest known zone that holds `name`, and its servers.
    pub fn closest(&self, name: &NameBuf) -> (NameBuf, Rc<[Ipv4Addr]>) {
        let wire = name.wire();
        let mut at = 0;
        loop {
            if let Some(servers) = self.zones.get(&wire[at..]) {
                return (zone_at(wire, at), servers.clone());
            }
            match wire.get(at) {
                Some(&len) if len > 0 => at += 1 + usize::from(len),
                // The root is always there; this is not reached.
                _ => return (NameBuf::root(), Rc::from(Vec::new())),
            }
        }
    }

    fn learn(&mut self, zone: &NameBuf, servers: &[Ipv4Addr]) -> Rc<[Ipv4Addr]> {
        let servers: Rc<[Ipv4Addr]> = servers.into();
        self.zones.insert(zone.wire().into(), servers.clone());
        servers
    }

    /// Zone cuts known (the root included).
    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }
}

fn zone_at(wire: &[u8], at: usize) -> NameBuf {
    let mut zone = NameBuf::root();
    let mut pos = at;
    while let Some(&len) = wire.get(pos).filter(|&&l| l > 0) {
        let label = &wire[pos + 1..pos + 1 + usize::from(len)];
        let _ = zone.push_label(label);
        pos += 1 + usize::from(len);
    }
    zone
}

/// Where one lookup's walk is.
pub struct Walk {
    /// The name asked now (the lookup's, or the target of the last CNAME).
    pub qname: NameBuf,
    zone: NameBuf,
    servers: Rc<[Ipv4Addr]>,
    /// The server of the current zone asked next.
    turn: usize,
    /// Timeouts at the current step.
    timeouts: u32,
    /// The CNAMEs met so far, then the final records.
    answers: Vec<Answer>,
    cnames: u32,
    pub steps: Option<Vec<Step>>,
}

/// What a lookup does next.
pub enum Next {
    /// Ask `server` about `walk.qname` (without recursion).
    Ask(Ipv4Addr),
    /// The lookup ends with this status and answer section.
    Done {
        status: String,
        answers: Vec<Answer>,
    },
    /// It cannot go on.
    Fail(String),
}

impl Walk {
    pub fn new(name: &NameBuf, cache: &Delegations, trace: bool) -> Walk {
        let (zone, servers) = cache.closest(name);
        Walk {
            qname: *name,
            zone,
            servers,
            turn: 0,
            timeouts: 0,
            answers: Vec::new(),
            cnames: 0,
            steps: trace.then(Vec::new),
        }
    }

    /// The first server to ask.
    pub fn start(&mut self, allowed: &dyn Fn(Ipv4Addr) -> bool) -> Next {
        self.next_server(allowed)
    }

    /// The next server of the current zone that may be asked, round robin.
    fn next_server(&mut self, allowed: &dyn Fn(Ipv4Addr) -> bool) -> Next {
        for _ in 0..self.servers.len() {
            let server = self.servers[self.turn % self.servers.len()];
            self.turn += 1;
            if allowed(server) {
                return Next::Ask(server);
            }
        }
        if self.servers.is_empty() {
            Next::Fail(format!(
                "no server known for {}",
                Fqdn(&self.zone.as_name())
            ))
        } else {
            Next::Fail(format!(
                "every server of {} is blocklisted",
                Fqdn(&self.zone.as_name())
            ))
        }
    }

    fn trace(&mut self, server: Ipv4Addr, qtype: Type, result: String, next: String, rtt_us: u64) {
        if let Some(steps) = &mut self.steps {
            steps.push(Step {
                server,
                zone: Fqdn(&self.zone.as_name()).to_string(),
                name: Fqdn(&self.qname.as_name()).to_string(),
                qtype,
                result,
                next,
                rtt_us,
            });
        }
    }

    /// No answer in time from `server`: the next server of the zone, until `tries` timeouts at
    /// this step.
    pub fn on_timeout(
        &mut self,
        server: Ipv4Addr,
        qtype: Type,
        tries: u32,
        allowed: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Next {
        self.trace(server, qtype, "timeout".into(), String::new(), 0);
        self.timeouts += 1;
        if self.timeouts >= tries {
            return Next::Done {
                status: "TIMEOUT".into(),
                answers: std::mem::take(&mut self.answers),
            };
        }
        self.next_server(allowed)
    }

    /// An answer `m` from `server` to the query about `qname`/`qtype` (already matched).
    #[allow(clippy::too_many_arguments)]
    pub fn on_answer(
        &mut self,
        m: &Message<'_>,
        server: Ipv4Addr,
        qtype: Type,
        rtt_us: u64,
        queries: u32,
        cache: &mut Delegations,
        allowed: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Next {
        let rcode = m.rcode();
        if rcode == 3 {
            self.trace(server, qtype, "NXDOMAIN".into(), String::new(), rtt_us);
            return self.done("NXDOMAIN");
        }
        if rcode != 0 {
            // A lame or failing server: the zone's next one, if any is left to try.
            self.trace(server, qtype, rcode_name(rcode), String::new(), rtt_us);
            self.timeouts += 1;
            if self.timeouts as usize >= self.servers.len() {
                return self.done("SERVFAIL");
            }
            return self.next_server(allowed);
        }
        if queries >= MOST_QUERIES {
            return Next::Fail(format!("no answer after {MOST_QUERIES} queries"));
        }
        if let Some(next) = self.follow_answers(m, server, qtype, rtt_us, cache, allowed) {
            return next;
        }
        if let Some(next) = self.follow_referral(m, server, qtype, rtt_us, cache, allowed) {
            return next;
        }
        // NOERROR, nothing for the name and no referral: the name has no such record.
        self.trace(server, qtype, "NODATA".into(), String::new(), rtt_us);
        self.done("NOERROR")
    }

    fn done(&mut self, status: &str) -> Next {
        Next::Done {
            status: status.into(),
            answers: std::mem::take(&mut self.answers),
        }
    }

    /// Records for the name: the final ones end the lookup; a CNAME chain that leaves the
    /// message's records starts the walk again at its target.
    fn follow_answers(
        &mut self,
        m: &Message<'_>,
        server: Ipv4Addr,
        qtype: Type,
        rtt_us: u64,
        cache: &Delegations,
        allowed: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Option<Next> {
        // Only what the server is authoritative for counts (bailiwick): records of names
        // outside the zone it was asked as a server of are asked of their own zone's servers.
        let zone = self.zone;
        let zone_name = zone.as_name();
        let section: Vec<Answer> = Answer::section(m)
            .into_iter()
            .zip(m.answers().filter(|r| r.rtype != Type::OPT))
            .filter(|(_, r)| r.owner.is_under(&zone_name))
            .map(|(a, _)| a)
            .collect();
        let mut current = self.qname;
        let mut moved = false;
        loop {
            let owner = Fqdn(&current.as_name()).to_string();
            let finals: Vec<&Answer> = section
                .iter()
                .filter(|a| a.rtype == qtype.to_string() && a.name.eq_ignore_ascii_case(&owner))
                .collect();
            if !finals.is_empty() {
                self.trace(server, qtype, "NOERROR".into(), String::new(), rtt_us);
                self.answers.extend(finals.into_iter().cloned());
                return Some(self.done("NOERROR"));
            }
            let Some(cname) = m.answers().find(|r| {
                r.rtype == Type::CNAME
                    && r.owner.eq_wire(current.wire())
                    && r.owner.is_under(&zone_name)
                    && r.data().is_ok()
            }) else {
                // The chain stops at a name with other records only: the walk goes on there.
                if moved {
                    break;
                }
                return None;
            };
            let Ok(Rdata::Cname(target)) = cname.data() else {
                return None;
            };
            self.cnames += 1;
            if self.cnames > MOST_CNAMES {
                return Some(Next::Fail(format!("more than {MOST_CNAMES} CNAMEs")));
            }
            self.answers.push(Answer {
                name: owner,
                rtype: "CNAME".into(),
                ttl: cname.ttl,
                data: Fqdn(&target).to_string(),
            });
            current = target.to_buf();
            current.make_ascii_lowercase();
            moved = true;
            if !section.iter().any(|a| {
                a.name
                    .eq_ignore_ascii_case(&Fqdn(&current.as_name()).to_string())
            }) {
                break;
            }
        }
        self.trace(
            server,
            qtype,
            "cname".into(),
            Fqdn(&current.as_name()).to_string(),
            rtt_us,
        );
        self.qname = current;
        let (zone, servers) = cache.closest(&self.qname);
        self.zone = zone;
        self.servers = servers;
        self.turn = 0;
        self.timeouts = 0;
        Some(self.next_server(allowed))
    }

    /// A referral: NS records of a zone below the current one that holds the name, and the
    /// glue addresses of those servers.
    fn follow_referral(
        &mut self,
        m: &Message<'_>,
        server: Ipv4Addr,
        qtype: Type,
        rtt_us: u64,
        cache: &mut Delegations,
        allowed: &dyn Fn(Ipv4Addr) -> bool,
    ) -> Option<Next> {
        let zone_now = self.zone.as_name();
        let qname = self.qname.as_name();
        let ns = m.authorities().find(|r| {
            r.rtype == Type::NS
                && qname.is_under(&r.owner)
                && r.owner.is_under(&zone_now)
                && !r.owner.eq_name(&zone_now)
        })?;
        let mut cut = ns.owner.to_buf();
        cut.make_ascii_lowercase();
        let targets: Vec<NameBuf> = m
            .authorities()
            .filter(|r| r.rtype == Type::NS && r.owner.eq_wire(cut.wire()))
            .filter_map(|r| match r.data() {
                Ok(Rdata::Ns(target)) => Some(target.to_buf()),
                _ => None,
            })
            .collect();
        let glue: Vec<Ipv4Addr> = m
            .additionals()
            .filter(|r| targets.iter().any(|t| r.owner.eq_wire(t.wire())))
            .filter_map(|r| match r.data() {
                Ok(Rdata::A(a)) => Some(a),
                _ => None,
            })
            .collect();
        let next = Fqdn(&cut.as_name()).to_string();
        self.trace(server, qtype, "referral".into(), next.clone(), rtt_us);
        if glue.is_empty() {
            return Some(Next::Fail(format!(
                "the referral to {next} has no glue (servers named outside the zone are not looked up)"
            )));
        }
        self.servers = cache.learn(&cut, &glue);
        self.zone = cut;
        self.turn = 0;
        self.timeouts = 0;
        Some(self.next_server(allowed))
    }

    /// The walk's answers so far (the CNAMEs met), for a lookup that ends early.
    pub fn take_answers(&mut self) -> Vec<Answer> {
        std::mem::take(&mut self.answers)
    }
}
