//! sonde's own filter: rules of the form `ACTION [ARGUMENT] [EXPRESSION]`, where EXPRESSION is
//! a tcpdump expression compiled by libpcap (as `sonde capture` does) and run on each packet.
//! The first rule that matches decides; a packet no rule matches passes.
//!
//! | rule | what it does to a matching packet |
//! |---|---|
//! | `pass EXPR` | lets it through |
//! | `drop EXPR` | drops it |
//! | `count EXPR` | lets it through (every rule counts its matches; this one only counts) |
//! | `rate-limit N/s EXPR` | lets N packets a second through (per thread N/threads), drops the rest |
//! | `rewrite ttl=..,dscp=..,sport=..,dport=.. EXPR` | changes those fields, checksums fixed incrementally |

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};

use crate::filter::{Filter, Link, Packet, Verdict};
use crate::rewrite::Rewrite;

/// What a rule does to the packets it matches.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Pass,
    Drop,
    Count,
    /// Packets per second let through; the rest are dropped.
    RateLimit(u64),
    Rewrite(Rewrite),
}

/// One rule as written: its action and its tcpdump expression (empty: every packet).
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub text: String,
    pub action: Action,
    pub expression: String,
}

impl Rule {
    /// Parses `ACTION [ARGUMENT] [EXPRESSION]`; the expression is checked when compiled.
    pub fn parse(text: &str) -> anyhow::Result<Rule> {
        let text = text.trim();
        let (word, rest) = split_word(text);
        let (action, expression) = match word {
            "pass" | "accept" => (Action::Pass, rest),
            "drop" => (Action::Drop, rest),
            "count" => (Action::Count, rest),
            "rate-limit" => {
                let (rate, rest) = split_word(rest);
                (Action::RateLimit(parse_rate(rate).with_context(|| format!("rule \"{text}\""))?), rest)
            }
            "rewrite" => {
                let (fields, rest) = split_word(rest);
                let rw = Rewrite::parse(fields).with_context(|| format!("rule \"{text}\""))?;
                (Action::Rewrite(rw), rest)
            }
            "" => bail!("an empty rule: write ACTION [ARGUMENT] [EXPRESSION], e.g. \"drop tcp port 9\""),
            other => bail!(
                "rule \"{text}\": unknown action \"{other}\" (pass, drop, count, rate-limit N/s, rewrite FIELD=VALUE,...)"
            ),
        };
        Ok(Rule {
            text: text.to_string(),
            action,
            expression: expression.to_string(),
        })
    }

    /// Reads rules from a file: one per line; blank lines and `#` comments are skipped.
    pub fn read_file(path: &std::path::Path) -> anyhow::Result<Vec<Rule>> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("rules file {}: {e}", path.display()))?;
        text.lines()
            .enumerate()
            .map(|(n, line)| (n, line.split('#').next().unwrap_or("").trim()))
            .filter(|(_, line)| !line.is_empty())
            .map(|(n, line)| {
                Rule::parse(line).map_err(|e| anyhow!("{}:{}: {e:#}", path.display(), n + 1))
            })
            .collect()
    }
}

fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim()),
        None => (text, ""),
    }
}

/// `1000/s`, `1000pps` or `1000`: packets per second, more than 0.
fn parse_rate(text: &str) -> anyhow::Result<u64> {
    let digits = text
        .strip_suffix("/s")
        .or_else(|| text.strip_suffix("pps"))
        .unwrap_or(text);
    match digits.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("rate-limit takes packets per second, e.g. 1000/s (got \"{text}\")"),
    }
}

/// How often one rule matched, and the bytes of those packets; written by one thread, read by
/// the status line (plain loads and stores, no atomic read-modify-write on the hot path).
#[derive(Default, Debug)]
pub struct RuleCounter {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Of the matches, how many the rule dropped (rate-limit's excess, or every `drop` match).
    pub dropped: AtomicU64,
}

impl RuleCounter {
    fn add(&self, bytes: u32, dropped: bool) {
        bump(&self.packets, 1);
        bump(&self.bytes, u64::from(bytes));
        if dropped {
            bump(&self.dropped, 1);
        }
    }
}

/// Adds to a counter only this thread writes.
pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed) + by, Relaxed);
}

/// A rule compiled for one link type, with its counter and (for rate-limit) its token bucket.
struct Compiled {
    program: Vec<libc::sock_filter>,
    action: Action,
    bucket: TokenBucket,
}

/// The rules of one thread: the [`Filter`] sonde's command line runs.
pub struct RuleSet {
    rules: Vec<Compiled>,
    counters: Arc<[RuleCounter]>,
}

impl RuleSet {
    /// Compiles `rules` for packets starting with `link`. Rate limits are shared out over
    /// `threads` (each thread lets 1/threads of the rate through).
    pub fn new(rules: &[Rule], link: Link, threads: usize) -> anyhow::Result<RuleSet> {
        let compiled = rules
            .iter()
            .map(|rule| {
                let program = if rule.expression.is_empty() {
                    Vec::new()
                } else {
                    sonde_io::filter::compile_for(&rule.expression, link)
                        .with_context(|| format!("rule \"{}\"", rule.text))?
                };
                let rate = match rule.action {
                    Action::RateLimit(pps) => (pps / threads.max(1) as u64).max(1),
                    _ => 0,
                };
                Ok(Compiled {
                    program,
                    action: rule.action.clone(),
                    bucket: TokenBucket::new(rate),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let counters = (0..rules.len()).map(|_| RuleCounter::default()).collect();
        Ok(RuleSet {
            rules: compiled,
            counters,
        })
    }

    /// Leading bytes of a packet the rules can read (at least `floor`), or `None` if a rule
    /// rewrites (a rewritten packet must be copied whole) or its reach has no bound.
    pub fn bytes_needed(&self, floor: u32) -> Option<u32> {
        let mut need = floor;
        for rule in &self.rules {
            if matches!(rule.action, Action::Rewrite(_)) {
                return None;
            }
            need = need.max(sonde_io::filter::bytes_needed(&rule.program));
        }
        (need != u32::MAX).then_some(need)
    }

    /// Each rule's counter, in rule order (for the status line and the summary).
    pub fn counters(&self) -> Arc<[RuleCounter]> {
        Arc::clone(&self.counters)
    }
}

impl Filter for RuleSet {
    fn decide(&mut self, packet: &mut Packet<'_>) -> Verdict {
        let wire_len = packet.wire_len;
        for (rule, counter) in self.rules.iter_mut().zip(self.counters.iter()) {
            if !sonde_io::filter::matches(&rule.program, packet.data, wire_len) {
                continue;
            }
            let verdict = match &rule.action {
                Action::Pass | Action::Count => Verdict::Pass,
                Action::Drop => Verdict::Drop,
                Action::RateLimit(_) if rule.bucket.take(packet.now_ns) => Verdict::Pass,
                Action::RateLimit(_) => Verdict::Drop,
                Action::Rewrite(rw) => match packet.ip_mut().map(|ip| rw.apply(ip)) {
                    Some(true) => Verdict::Rewritten,
                    _ => Verdict::Pass,
                },
            };
            counter.add(wire_len, verdict == Verdict::Drop);
            return verdict;
        }
        Verdict::Pass
    }
}

/// A token bucket of `rate` tokens a second holding at most a tenth of a second's worth (at
/// least one), refilled from the batch clock.
struct TokenBucket {
    rate: u64,
    capacity_nano_tokens: u64,
    nano_tokens: u64,
    last_ns: u64,
}

impl TokenBucket {
    fn new(rate: u64) -> Self {
        let capacity = (rate / 10).max(1) * 1_000_000_000;
        TokenBucket {
            rate,
            capacity_nano_tokens: capacity,
            nano_tokens: capacity,
            last_ns: 0,
        }
    }

    /// Takes one token if there is one at time `now_ns`.
    fn take(&mut self, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        // Tokens are kept in billionths so a refill needs no division.
        self.nano_tokens = self
            .nano_tokens
            .saturating_add(elapsed.saturating_mul(self.rate))
            .min(self.capacity_nano_tokens);
        if self.nano_tokens >= 1_000_000_000 {
            self.nano_tokens -= 1_000_000_000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_to(port: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[198, 19, 254, 1]);
        p[16..20].copy_from_slice(&[198, 19, 254, 2]);
        p[20..22].copy_from_slice(&5555u16.to_be_bytes());
        p[22..24].copy_from_slice(&port.to_be_bytes());
        p[24..26].copy_from_slice(&8u16.to_be_bytes());
        p
    }

    fn decide(set: &mut RuleSet, bytes: &mut [u8], now_ns: u64) -> Verdict {
        let wire_len = bytes.len() as u32;
        set.decide(&mut Packet {
            data: bytes,
            link: Link::RawIp,
            wire_len,
            now_ns,
        })
    }

    fn rules(texts: &[&str]) -> Vec<Rule> {
        texts.iter().map(|t| Rule::parse(t).unwrap()).collect()
    }

    #[test]
    fn rules_parse_into_action_and_expression() {
        let r = Rule::parse("  rate-limit 1000/s udp and dst port 53 ").unwrap();
        assert_eq!(r.action, Action::RateLimit(1000));
        assert_eq!(r.expression, "udp and dst port 53");
        assert_eq!(Rule::parse("drop").unwrap().expression, "");
        assert_eq!(Rule::parse("count icmp").unwrap().action, Action::Count);
        assert_eq!(
            Rule::parse("rate-limit 5pps").unwrap().action,
            Action::RateLimit(5)
        );
        let r = Rule::parse("rewrite ttl=3,dport=80 tcp").unwrap();
        assert_eq!(
            r.action,
            Action::Rewrite(Rewrite {
                ttl: Some(3),
                dport: Some(80),
                ..Rewrite::default()
            })
        );
        assert_eq!(r.expression, "tcp");
    }

    #[test]
    fn bad_rules_say_what_is_wrong_in_one_line() {
        for (text, needle) in [
            ("", "empty rule"),
            ("reject tcp", "unknown action \"reject\""),
            ("rate-limit fast udp", "packets per second"),
            ("rate-limit 0/s udp", "packets per second"),
            ("rewrite ttl=x tcp", "ttl=x"),
        ] {
            let e = format!("{:#}", Rule::parse(text).unwrap_err());
            assert!(e.contains(needle) && !e.contains('\n'), "{text}: {e}");
        }
        let e = RuleSet::new(&rules(&["drop tcp prot 9"]), Link::RawIp, 1)
            .err()
            .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("rule \"drop tcp prot 9\"") && e.contains("invalid filter"),
            "{e}"
        );
    }

    #[test]
    fn the_first_matching_rule_decides_and_the_default_is_pass() {
        let mut set = RuleSet::new(
            &rules(&["pass udp dst port 53", "drop udp", "count"]),
            Link::RawIp,
            1,
        )
        .unwrap();
        assert_eq!(decide(&mut set, &mut udp_to(53), 0), Verdict::Pass);
        assert_eq!(decide(&mut set, &mut udp_to(54), 0), Verdict::Drop);
        let mut not_udp = udp_to(1);
        not_udp[9] = 6;
        assert_eq!(decide(&mut set, &mut not_udp, 0), Verdict::Pass);
        let counts: Vec<_> = set
            .counters()
            .iter()
            .map(|c| c.packets.load(Relaxed))
            .collect();
        assert_eq!(counts, [1, 1, 1]);
        assert_eq!(set.counters()[1].dropped.load(Relaxed), 1);
        let mut empty = RuleSet::new(&[], Link::RawIp, 1).unwrap();
        assert_eq!(decide(&mut empty, &mut udp_to(54), 0), Verdict::Pass);
    }

    #[test]
    fn rewrite_rules_change_matching_packets_only() {
        let mut set =
            RuleSet::new(&rules(&["rewrite dport=99 udp port 7"]), Link::RawIp, 1).unwrap();
        let mut p = udp_to(7);
        assert_eq!(decide(&mut set, &mut p, 0), Verdict::Rewritten);
        assert_eq!(&p[22..24], &[0, 99]);
        assert_eq!(decide(&mut set, &mut udp_to(8), 0), Verdict::Pass);
    }

    #[test]
    fn rate_limits_let_their_rate_through() {
        // 100/s over 2 threads: 50/s here, a burst of 5, then 50 more over one second.
        let mut set = RuleSet::new(&rules(&["rate-limit 100/s udp"]), Link::RawIp, 2).unwrap();
        let passed = (0..1000u64)
            .filter(|i| decide(&mut set, &mut udp_to(9), i * 1_000_000) == Verdict::Pass)
            .count();
        assert!((54..=56).contains(&passed), "{passed}");
    }
}
