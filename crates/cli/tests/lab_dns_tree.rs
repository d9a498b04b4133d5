//! The lab's DNS tree (`lab up --dns-tree`): unbound on a resolver address answers every
//! question of `lab truth --dns` as the truth says (CNAME chains across zones, NXDOMAIN,
//! NODATA, SERVFAIL for the lame delegation, the big TXT over TCP), the root, TLD and zone
//! servers refer down to the answer, the lame server refuses, the slow server waits, and
//! `lab score` scores those answers written as sonde dns rows. Needs root; every query goes
//! from the lab's scanner namespace to the lab's own servers, and the lab is removed by its
//! guard.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sonde_dns::{rcode, Message, NameBuf, Query, Rdata, Type};

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

const RESOLVER: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 64);
const ROOT: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 1);
const LAME: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 20);
const SLOW: Ipv4Addr = Ipv4Addr::new(198, 19, 53, 21);
const SLOW_MS: u64 = 300;
const TIMEOUT: Duration = Duration::from_secs(5);

/// What came back for one question.
#[derive(Debug)]
struct Reply {
    /// The whole response, for the sections a test reads.
    bytes: Vec<u8>,
    /// Whether it came over TCP after a truncated UDP answer.
    tcp: bool,
}

impl Reply {
    fn message(&self) -> Message<'_> {
        Message::parse(&self.bytes).expect("a well-formed response")
    }
}

/// Asks `server` (`name`, `qtype`) over UDP with EDNS0 (1232 bytes), and again over TCP when
/// the answer is truncated. `rd`: recursion desired.
fn ask(server: Ipv4Addr, name: &str, qtype: Type, rd: bool) -> Reply {
    let name = NameBuf::from_text(name).unwrap();
    let mut query = [0u8; 512];
    let len = Query {
        id: 0x5a5a,
        name: &name,
        qtype,
        recursion_desired: rd,
        udp_payload: Some(1232),
    }
    .write(&mut query)
    .unwrap();
    let query = &query[..len];
    let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
    socket.set_read_timeout(Some(TIMEOUT)).unwrap();
    socket.send_to(query, (server, 53)).unwrap();
    let mut buf = vec![0; 65_535];
    let n = socket
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("{server}: no answer to {name:?} {qtype:?}: {e}"));
    buf.truncate(n);
    let truncated = Message::parse(&buf).unwrap().header().is_truncated();
    if !truncated {
        return Reply {
            bytes: buf,
            tcp: false,
        };
    }
    let mut tcp = TcpStream::connect_timeout(&SocketAddr::from((server, 53)), TIMEOUT).unwrap();
    tcp.set_read_timeout(Some(TIMEOUT)).unwrap();
    tcp.write_all(&(query.len() as u16).to_be_bytes()).unwrap();
    tcp.write_all(query).unwrap();
    let mut len = [0; 2];
    tcp.read_exact(&mut len).unwrap();
    let mut bytes = vec![0; usize::from(u16::from_be_bytes(len))];
    tcp.read_exact(&mut bytes).unwrap();
    Reply { bytes, tcp: true }
}

fn rcode_name(code: u16) -> String {
    match code {
        rcode::NOERROR => "NOERROR".into(),
        rcode::NXDOMAIN => "NXDOMAIN".into(),
        rcode::SERVFAIL => "SERVFAIL".into(),
        rcode::REFUSED => "REFUSED".into(),
        other => format!("RCODE{other}"),
    }
}

/// A record's data in the truth's presentation form.
fn present(data: Rdata<'_>) -> String {
    match data {
        Rdata::A(a) => a.to_string(),
        Rdata::Aaaa(a) => a.to_string(),
        Rdata::Cname(n) | Rdata::Ns(n) => format!("{n}."),
        Rdata::Mx {
            preference,
            exchange,
        } => format!("{preference} {exchange}."),
        Rdata::Txt(strings) => strings
            .iter()
            .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" "),
        other => format!("{other:?}"),
    }
}

/// The reply as a sonde dns row (the contract's form): status, chain, every answer record.
fn row(name: &str, rtype: &str, reply: &Reply) -> Value {
    let m = reply.message();
    let answers: Vec<Value> = m
        .answers()
        .map(|r| {
            json!({
                "name": format!("{}.", r.owner),
                "type": r.rtype.name().unwrap_or("?"),
                "ttl": r.ttl,
                "data": present(r.data().unwrap()),
            })
        })
        .collect();
    let chain: Vec<Value> = answers
        .iter()
        .filter(|a| a["type"] == "CNAME")
        .map(|a| a["data"].clone())
        .collect();
    json!({
        "name": name, "type": rtype, "status": rcode_name(m.rcode()), "chain": chain,
        "answers": answers, "server": RESOLVER.to_string(), "attempts": 1, "tcp": reply.tcp,
    })
}

/// The truth's fields of a row, to compare with: (rcode, chain, sorted answers of the type).
fn as_truth(row: &Value) -> (String, Vec<String>, Vec<String>) {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let mut answers: Vec<String> = row["answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["type"] == row["type"])
        .map(|a| a["data"].as_str().unwrap().to_string())
        .collect();
    answers.sort();
    (
        row["status"].as_str().unwrap().to_string(),
        strings(&row["chain"]),
        answers,
    )
}

#[test]
fn the_dns_tree_answers_as_its_truth_says() {
    if !can_run_labs() {
        return;
    }
    let slow = SLOW_MS.to_string();
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--dns-tree",
        "12",
        "--dns-hosts",
        "2",
        "--dns-slow-ms",
        &slow,
    ]);
    let status = lab.status();
    let tree = &status["dns_tree"];
    assert_eq!(tree["zones"], 12, "{status}");
    assert_eq!(tree["hosts"], 2);
    assert_eq!(tree["root"], ROOT.to_string());
    assert_eq!(tree["resolvers"].as_array().unwrap().len(), 16);
    assert_eq!(tree["resolvers"][0], RESOLVER.to_string());

    let out = sonde(&["lab", "truth", "--name", &lab.name, "--dns"]);
    assert!(out.status.success(), "lab truth --dns: {}", stderr(&out));
    let truth: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 11 questions a zone, one a host, then the slow and the lame names.
    assert_eq!(truth.len(), 12 * (11 + 2) + 2);

    let (rows, slow_took, referrals) = lab.in_scan(|| {
        // The slow server first, asked directly and cold: it holds the query D ms.
        let start = Instant::now();
        let direct = ask(SLOW, "www.slow.test.", Type::A, false);
        let slow_took = start.elapsed();
        assert_eq!(
            present(direct.message().answers().next().unwrap().data().unwrap()),
            "198.18.0.53"
        );
        // The lame server has no zone for lame.test.
        let lame = ask(LAME, "www.lame.test.", Type::A, false);
        assert_eq!(rcode_name(lame.message().rcode()), "REFUSED");
        let rows: Vec<Value> = truth
            .iter()
            .map(|t| {
                let (name, rtype) = (t["name"].as_str().unwrap(), t["type"].as_str().unwrap());
                let reply = ask(RESOLVER, name, rtype.parse::<Type>().unwrap(), true);
                row(name, rtype, &reply)
            })
            .collect();
        (rows, slow_took, referral_chain())
    });
    assert!(
        slow_took >= Duration::from_millis(SLOW_MS),
        "the slow server answered in {slow_took:?}, before its {SLOW_MS} ms"
    );
    assert!(slow_took < Duration::from_millis(SLOW_MS) + TIMEOUT);
    assert_eq!(referrals, ["example.", "d3.example.", "www.d3.example. A"]);

    let mut wrong = Vec::new();
    for (t, r) in truth.iter().zip(&rows) {
        let want = (
            t["rcode"].as_str().unwrap().to_string(),
            as_strings(&t["chain"]),
            as_strings(&t["answers"]),
        );
        if as_truth(r) != want {
            wrong.push(format!(
                "{} {}: got {:?}, want {want:?}",
                t["name"],
                t["type"],
                as_truth(r)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // The big TXT came over TCP (too big for 1232 bytes), the lame name as SERVFAIL.
    let big = rows.iter().find(|r| r["name"] == "big.d0.test.").unwrap();
    assert_eq!(big["tcp"], true, "{big}");
    let lame = rows.iter().find(|r| r["name"] == "www.lame.test.").unwrap();
    assert_eq!(lame["status"], "SERVFAIL");

    // The same answers, as sonde dns rows, score all correct; one changed is wrong.
    let file = lab.file("dns.ndjson");
    let mut text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&file, &text).unwrap();
    let line = lab.score(&[&file]);
    let n = truth.len();
    assert!(
        line.starts_with(&format!("dns: correct {n} of {n} (100.000 %), wrong 0")),
        "{line}"
    );
    text = text.replacen("\"NXDOMAIN\"", "\"TIMEOUT\"", 1);
    std::fs::write(&file, &text).unwrap();
    let line = lab.score(&[&file]);
    assert!(
        line.contains("wrong 1 (rcode 1, chain 0, answers 0)"),
        "{line}"
    );
}

fn as_strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Follows `www.d3.example. A` from the root without recursion: the zone each referral
/// delegates (checked to come with its glue, and followed to it), then the answer's owner and
/// type.
fn referral_chain() -> Vec<String> {
    let mut seen = Vec::new();
    let mut server = ROOT;
    for _ in 0..4 {
        let reply = ask(server, "www.d3.example.", Type::A, false);
        let m = reply.message();
        if let Some(a) = m.answers().next() {
            assert!(m.header().is_authoritative());
            seen.push(format!("{}. {}", a.owner, a.rtype.name().unwrap()));
            return seen;
        }
        let ns = m
            .authorities()
            .find(|r| r.rtype == Type::NS)
            .unwrap_or_else(|| panic!("{server} gave neither answer nor referral"));
        seen.push(format!("{}.", ns.owner));
        let glue = m.additionals().find_map(|r| match r.data() {
            Ok(Rdata::A(a)) => Some(a),
            _ => None,
        });
        server = glue.unwrap_or_else(|| panic!("{server}'s referral to {} has no glue", ns.owner));
    }
    panic!("no answer after 4 referrals: {seen:?}")
}
