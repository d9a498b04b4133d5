//! `lab up --dns-tree N --dns-answerer xdp --dns-servers none`: the XDP answerer alone serves
//! the tree on 198.19.54.0/24. Queries sent from the scanner namespace over a kernel UDP socket
//! (sonde-dns writes them and reads the answers) get every truth question answered as
//! `dns_tree::spec` resolves it, on any address of the prefix, while the kernel still answers
//! the population. Needs root; the lab has a unique name and is removed by its guard, also on
//! failure.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use sonde_dns::{rcode, Message, NameBuf, Query, Type};
use sonde_lab::dns_tree::spec::{Rcode, Rtype, Tree};

mod common;
use common::{can_run_labs, Lab};

const ZONES: u64 = 12;
const HOSTS: u32 = 2;
const SEED: u64 = 21;

fn answerer_lab() -> Lab {
    Lab::up(&[
        "--population",
        "198.18.0.0/24",
        "--responsive",
        "0.5",
        "--seed",
        &SEED.to_string(),
        "--dns-tree",
        &ZONES.to_string(),
        "--dns-hosts",
        &HOSTS.to_string(),
        "--dns-answerer",
        "xdp",
        "--dns-servers",
        "none",
    ])
}

/// The answer to one query from `sock` to `server`: (rcode, TC, the answer section's data of
/// the asked type in presentation form, sorted, and the CNAME targets in order).
fn ask(
    sock: &UdpSocket,
    server: Ipv4Addr,
    id: u16,
    name: &str,
    qtype: Type,
) -> (u16, bool, Vec<String>, Vec<String>) {
    let qname = NameBuf::from_text(name).unwrap();
    let q = Query {
        id,
        name: &qname,
        qtype,
        recursion_desired: true,
        udp_payload: Some(1232),
    };
    let mut buf = [0u8; 1500];
    let len = q.write(&mut buf).unwrap();
    sock.send_to(&buf[..len], SocketAddr::from((server, 53)))
        .unwrap();
    let (got, from) = sock
        .recv_from(&mut buf)
        .expect("an answer within the timeout");
    assert_eq!(from, SocketAddr::from((server, 53)));
    let msg = Message::parse(&buf[..got]).unwrap();
    assert_eq!(msg.header().id(), id);
    assert!(msg.asks(qname.wire(), qtype, 1), "{name} {qtype}");
    assert!(msg.header().recursion_available());
    let mut data = Vec::new();
    let mut chain = Vec::new();
    for r in msg.answers() {
        let text = match r.data().unwrap() {
            sonde_dns::Rdata::A(a) => a.to_string(),
            sonde_dns::Rdata::Aaaa(a) => a.to_string(),
            sonde_dns::Rdata::Cname(n) => {
                chain.push(format!("{n}."));
                continue;
            }
            sonde_dns::Rdata::Mx {
                preference,
                exchange,
            } => format!("{preference} {exchange}."),
            sonde_dns::Rdata::Txt(s) => s
                .iter()
                .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
                .collect::<Vec<_>>()
                .join(" "),
            other => panic!("{name} {qtype}: unexpected {other:?}"),
        };
        if r.rtype == qtype {
            data.push(text);
        }
    }
    data.sort();
    (msg.rcode(), msg.header().is_truncated(), data, chain)
}

#[test]
fn the_answerer_alone_answers_the_truth_from_the_scanner_namespace() {
    if !can_run_labs() {
        return;
    }
    let lab = answerer_lab();
    let status = lab.status();
    assert_eq!(status["dns_tree"]["answerers"], "198.19.54.0/24");
    assert_eq!(status["dns_tree"]["resolvers"], serde_json::json!([]));
    let tree = Tree::new(SEED, ZONES, HOSTS);
    let questions: Vec<(String, Rtype)> = tree.questions().collect();
    let answered = lab.in_scan(|| {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut answered = 0;
        for (i, (name, rtype)) in questions.iter().enumerate() {
            // Any address of the prefix answers.
            let server = Ipv4Addr::new(198, 19, 54, 1 + (i % 254) as u8);
            let qtype = Type(rtype.code());
            let (rc, tc, data, chain) = ask(&sock, server, i as u16, name, qtype);
            let want = tree.resolve(name, *rtype);
            if name.starts_with("big.") {
                // Too big for UDP: TC and nothing else.
                assert!(tc && data.is_empty() && rc == rcode::NOERROR, "{name}");
                continue;
            }
            let want_rc = match want.rcode {
                Rcode::NoError => rcode::NOERROR,
                Rcode::NxDomain => rcode::NXDOMAIN,
                Rcode::ServFail => rcode::SERVFAIL,
            };
            assert_eq!(rc, want_rc, "{name} {qtype}");
            assert_eq!(chain, want.chain, "{name} {qtype}");
            assert_eq!(data, want.answers(*rtype), "{name} {qtype}");
            assert!(!tc, "{name}");
            answered += 1;
        }
        answered
    });
    assert_eq!(answered, questions.len() - ZONES as usize);
    // The kernel still answers the population: a UDP probe to a closed port of a responsive
    // address gets its port unreachable, which a connected socket reads as a refusal.
    let responsive: Vec<Ipv4Addr> = lab
        .truth(&["--ports", "80"])
        .iter()
        .filter(|r| r[2] == "synack")
        .map(|r| r[0].parse().unwrap())
        .collect();
    let target = *responsive.first().expect("a responsive address");
    lab.in_scan(|| {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sock.connect((target, 9)).unwrap();
        sock.send(b"x").unwrap();
        let err = sock.recv(&mut [0u8; 16]).expect_err("port unreachable");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    });
}
