//! The DNS answerer (xdp/answerer.c) run on frames with BPF_PROG_TEST_RUN: queries written by
//! sonde-dns's `Query::write`, answers read by its `Message::parse` and checked record by record
//! against the tree's resolution (dns_tree::spec) for every question of the truth and every type
//! at the names it leaves out; hostile
//! queries answered FORMERR (or NOTIMP, REFUSED) or dropped, and counted; and the frames that
//! are not the answerer's left to the responder or the kernel.

use std::net::Ipv4Addr;

use sonde_dns::{rcode, Message, NameBuf, Query, Rdata, Type};
use sonde_wire::checksum::{checksum, fold, pseudo_header_v4, sum};

use super::tests::{
    can_load, ipv4, ipv4_from, spec, with_checksum, LAB_MAC, SCAN_MAC, XDP_DROP, XDP_PASS, XDP_TX,
};
use super::{DnsCounts, Loaded, ResponderSpec, TreeSpec};
use crate::config::SCAN_IP;
use crate::dns_tree::spec::{sld_name, Data, Rcode, Rtype, Tree, BIG_STRINGS};
use crate::truth::Population;

const SEED: u64 = 11;
const ZONES: u64 = 12;
const HOSTS: u32 = 3;
const ANSWERER: Ipv4Addr = Ipv4Addr::new(198, 19, 54, 1);
const CLIENT_PORT: u16 = 40_053;

fn tree() -> TreeSpec {
    TreeSpec {
        seed: SEED,
        zones: ZONES,
        hosts: HOSTS,
        answer: true,
    }
}

/// The XDP responder with the tree's answerer, its population all of 198.18.0.0/15 (which
/// covers the tree's addresses).
fn tree_spec() -> ResponderSpec {
    let mut s = spec();
    s.pop = Population {
        net: "198.18.0.0/15".parse().unwrap(),
        seed: SEED,
        share: 1.0,
    };
    s.tree = Some(tree());
    s
}

fn load(spec: &ResponderSpec) -> Option<Loaded> {
    can_load().then(|| Loaded::load(spec).expect("the verifier takes the answerer"))
}

/// What a resolver answers: the rcode, TC, and the answer section as (owner, type, data) in
/// presentation form, in order.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    rcode: u16,
    tc: bool,
    records: Vec<(String, Type, String)>,
}

/// What the answerer must say to (`name`, `qtype`): the tree's resolution (spec.rs), but for
/// `big` TXT, which does not fit in UDP: TC and no records.
fn truth(tree: &Tree, name: &str, qtype: Type) -> Answer {
    let r = tree.resolve(name, Rtype::from_code(qtype.0));
    let too_big = r
        .records
        .iter()
        .any(|rec| matches!(&rec.data, Data::Txt(s) if s.len() == BIG_STRINGS));
    Answer {
        rcode: match r.rcode {
            Rcode::NoError => rcode::NOERROR,
            Rcode::NxDomain => rcode::NXDOMAIN,
            Rcode::ServFail => rcode::SERVFAIL,
        },
        tc: too_big,
        records: if too_big {
            Vec::new()
        } else {
            r.records
                .iter()
                .map(|rec| {
                    (
                        rec.name.clone(),
                        Type(rec.data.rtype().code()),
                        rec.data.to_string(),
                    )
                })
                .collect()
        },
    }
}

/// Names the truth's questions leave out: every zone's apex and servers, the slow and lame
/// zones, and names that do not exist in many ways.
fn other_names() -> Vec<String> {
    let mut names: Vec<String> = [
        ".",
        "ns.",
        "test.",
        "example.",
        "ns.test.",
        "ns.example.",
        "slow.test.",
        "ns.slow.test.",
        "www.slow.test.",
        "nx.slow.test.",
        "lame.test.",
        "a.b.lame.test.",
        "ns.lame.test.",
        "www.d1.test.",
        "www.d00.test.",
        "www.d99999999999999999999.test.",
        "www.d0.com.",
        "www.d0.tests.",
        "com.",
        "ns.ns.",
    ]
    .map(String::from)
    .to_vec();
    names.push(format!("www.d{ZONES}.test."));
    for j in [0, 1, ZONES - 1] {
        let zone = sld_name(j);
        for host in [
            "", "www.", "mail.", "ns.", "alias.", "chain.", "far.", "big.", "h0.", "h01.", "nx.",
            "x.www.",
        ] {
            names.push(format!("{host}{zone}"));
        }
        names.push(format!("h{HOSTS}.{zone}"));
    }
    names
}

const TYPES: [Type; 8] = [
    Type::A,
    Type::NS,
    Type::CNAME,
    Type::SOA,
    Type::MX,
    Type::TXT,
    Type::AAAA,
    Type(99),
];

/// A UDP datagram from the scanner to port 53 of `dst`, in a whole frame.
fn query_frame(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&CLIENT_PORT.to_be_bytes());
    u[2..4].copy_from_slice(&53u16.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend(payload);
    let pseudo = pseudo_header_v4(SCAN_IP, dst, 17, u.len() as u16);
    ipv4(dst, 17, &with_checksum(u, 6, pseudo))
}

fn query(id: u16, name: &str, qtype: Type, rd: bool, edns: bool) -> Vec<u8> {
    let name = NameBuf::from_text(name).unwrap();
    let q = Query {
        id,
        name: &name,
        qtype,
        recursion_desired: rd,
        udp_payload: edns.then_some(1232),
    };
    let mut buf = vec![0u8; q.len()];
    q.write(&mut buf).unwrap();
    buf
}

/// The reply frame checked as the scanner's kernel would (MACs, addresses and ports swapped,
/// lengths, both checksums): its DNS payload.
fn reply_payload(frame: &[u8]) -> &[u8] {
    assert!(frame.len() >= 42, "reply of {} bytes", frame.len());
    assert_eq!(&frame[0..6], &SCAN_MAC);
    assert_eq!(&frame[6..12], &LAB_MAC);
    assert_eq!(&frame[12..14], &[0x08, 0x00]);
    let ip = &frame[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(checksum(ip), 0, "IP checksum");
    assert_eq!(
        usize::from(u16::from_be_bytes([ip[2], ip[3]])),
        frame.len() - 14
    );
    assert_eq!(ip[9], 17);
    let (src, dst) = (
        Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()),
        Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap()),
    );
    assert_eq!(dst, SCAN_IP);
    let udp = &frame[34..];
    assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 53);
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), CLIENT_PORT);
    assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
    assert_ne!(&udp[6..8], &[0, 0], "a UDP checksum is there");
    let pseudo = pseudo_header_v4(src, dst, 17, udp.len() as u16);
    assert_eq!(fold(pseudo + sum(udp)), 0xffff, "UDP checksum");
    &udp[8..]
}

/// A name as the truth writes it: lowercase, with the final dot.
fn fqdn(n: sonde_dns::Name<'_>) -> String {
    let text = n.to_string().to_ascii_lowercase();
    if n.is_root() {
        text
    } else {
        text + "."
    }
}

/// A record's data in presentation form (DNS-TREE.md).
fn present(data: Rdata<'_>) -> String {
    let name = fqdn;
    match data {
        Rdata::A(a) => a.to_string(),
        Rdata::Aaaa(a) => a.to_string(),
        Rdata::Ns(n) | Rdata::Cname(n) => name(n),
        Rdata::Mx {
            preference,
            exchange,
        } => format!("{preference} {}", name(exchange)),
        Rdata::Txt(strings) => strings
            .iter()
            .map(|s| format!("\"{}\"", String::from_utf8_lossy(s)))
            .collect::<Vec<_>>()
            .join(" "),
        Rdata::Soa(s) => format!(
            "{} {} {} {} {} {} {}",
            name(s.mname),
            name(s.rname),
            s.serial,
            s.refresh,
            s.retry,
            s.expire,
            s.minimum
        ),
        other => panic!("unexpected data {other:?}"),
    }
}

/// Asks `name` `qtype` and reads the answer, checking what every answer must be: a response
/// to this query (ID, the question echoed byte for byte), RA set, AA clear, RD as asked, an OPT
/// record exactly when the query had one.
fn ask(l: &mut Loaded, name: &str, qtype: Type, rd: bool, edns: bool) -> Answer {
    let q = query(0x5eed, name, qtype, rd, edns);
    let (action, frame) = l.run(&query_frame(ANSWERER, &q)).unwrap();
    assert_eq!(action, XDP_TX, "{name} {qtype}");
    let payload = reply_payload(&frame);
    let msg = Message::parse(payload).unwrap_or_else(|e| panic!("{name} {qtype}: {e:?}"));
    let h = msg.header();
    assert_eq!(h.id(), 0x5eed);
    assert!(h.is_response() && h.recursion_available() && !h.is_authoritative());
    assert_eq!(h.recursion_desired(), rd);
    assert_eq!(h.opcode(), 0);
    assert_eq!(h.question_count(), 1);
    let question_len = q.len() - if edns { 11 } else { 0 };
    assert_eq!(&payload[12..question_len], &q[12..question_len]);
    assert_eq!(h.authority_count(), 0);
    match msg.edns() {
        Some(e) => {
            assert!(edns, "{name}: an OPT record answers one");
            assert_eq!((e.udp_payload_size, e.version), (1232, 0));
        }
        None => assert!(!edns, "{name}: no OPT record in the answer"),
    }
    Answer {
        rcode: msg.rcode(),
        tc: h.is_truncated(),
        records: msg
            .answers()
            .map(|r| {
                assert_eq!((r.class, r.ttl), (1, 3600));
                (fqdn(r.owner), r.rtype, present(r.data().unwrap()))
            })
            .collect(),
    }
}

/// `name` with every other letter in upper case.
fn mixed_case(name: &str) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

#[test]
fn answers_the_tree_as_a_resolver() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let tree = Tree::new(SEED, ZONES, HOSTS);
    let mut asked = 0;
    // Every question of the truth, with and without RD and EDNS, and in mixed case (ignored;
    // the question comes back as asked: `ask` checks it).
    for (name, rtype) in tree.questions() {
        let qtype = Type(rtype.code());
        let want = truth(&tree, &name, qtype);
        for (rd, edns) in [(true, true), (true, false), (false, true)] {
            assert_eq!(ask(&mut l, &name, qtype, rd, edns), want, "{name} {qtype}");
            asked += 1;
        }
        let upper = mixed_case(&name);
        assert_eq!(
            ask(&mut l, &upper, qtype, true, true),
            want,
            "{upper} {qtype}"
        );
        asked += 1;
    }
    // Every type at the other names.
    for name in other_names() {
        for qtype in TYPES {
            let edns = asked % 2 == 0;
            let want = truth(&tree, &name, qtype);
            assert_eq!(
                ask(&mut l, &name, qtype, true, edns),
                want,
                "{name} {qtype}"
            );
            asked += 1;
        }
    }
    let counts = l.dns_counts().unwrap();
    assert_eq!(
        counts,
        DnsCounts {
            answered: asked,
            ..DnsCounts::default()
        }
    );
}

#[test]
fn answers_the_last_zone_far_into_the_first() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let tree = Tree::new(SEED, ZONES, HOSTS);
    let far = format!("far.{}", sld_name(ZONES - 1));
    let got = ask(&mut l, &far, Type::AAAA, true, true);
    assert_eq!(got, truth(&tree, &far, Type::AAAA));
    assert_eq!(got.records[0].2, "www.d0.test.");
    assert_eq!(got.records[1].2, tree.www6(0).to_string());
}

/// Zones with many digits: the answerer's numbers are not limited to small ones.
#[test]
fn answers_zones_of_a_ten_million_name_tree() {
    const MANY: u64 = 2_500_000;
    let mut s = tree_spec();
    s.tree = Some(TreeSpec {
        zones: MANY,
        ..tree()
    });
    let Some(mut l) = load(&s) else {
        return;
    };
    let tree = Tree::new(SEED, MANY, HOSTS);
    for name in [
        format!("chain.{}", sld_name(MANY - 1)),
        format!("far.{}", sld_name(MANY - 2)),
        sld_name(1_234_567),
        format!("h2.{}", sld_name(999_999)),
        format!("www.{}", sld_name(MANY)),
    ] {
        for qtype in [Type::A, Type::TXT, Type::SOA] {
            let want = truth(&tree, &name, qtype);
            assert_eq!(
                ask(&mut l, &name, qtype, true, true),
                want,
                "{name} {qtype}"
            );
        }
    }
}

/// A header-only answer with `rcode` to `payload`, or None when it was dropped.
fn header_answer(l: &mut Loaded, payload: &[u8]) -> Option<u16> {
    let (action, frame) = l.run(&query_frame(ANSWERER, payload)).unwrap();
    if action == XDP_DROP {
        return None;
    }
    assert_eq!(action, XDP_TX);
    let reply = reply_payload(&frame);
    let msg = Message::parse(reply).expect("a header-only answer parses");
    let h = msg.header();
    assert!(h.is_response() && h.recursion_available());
    assert_eq!(h.id(), u16::from_be_bytes([payload[0], payload[1]]));
    assert_eq!(reply.len(), 12, "a header alone");
    Some(msg.rcode())
}

#[test]
fn refuses_what_it_cannot_read() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let good = query(7, "www.d2.test.", Type::A, true, true);
    let mut expect = DnsCounts::default();
    // Every truncation: FORMERR once the header is whole, dropped before.
    for len in 0..good.len() {
        let got = header_answer(&mut l, &good[..len]);
        if len < 12 {
            assert_eq!(got, None, "{len} bytes");
            expect.short += 1;
        } else {
            assert_eq!(got, Some(rcode::FORMERR), "{len} bytes");
            expect.formerr += 1;
        }
    }
    let patched = |at: usize, bytes: &[u8]| {
        let mut q = good.clone();
        q[at..at + bytes.len()].copy_from_slice(bytes);
        q
    };
    let formerr = [
        // A compression pointer as the question's name, and one after its first label.
        [&good[..12], &[0xc0, 12, 0, 1, 0, 1][..]].concat(),
        [&good[..16], &[0xc0, 12, 0, 1, 0, 1][..]].concat(),
        // Huge counts, and none.
        patched(4, &[0xff, 0xff]),
        patched(6, &[0xff, 0xff]),
        patched(8, &[0, 1]),
        patched(10, &[0xff, 0xff]),
        patched(4, &[0, 0]),
        // A label longer than 63 (an extended label type).
        patched(12, &[0x43]),
        // A record in the additional section that is not OPT, and an OPT of EDNS version 1.
        patched(good.len() - 10, &[0, 1]),
        patched(good.len() - 5, &[1]),
        // Bytes left over.
        [&good[..], &[0][..]].concat(),
        // A name over 255 bytes.
        {
            let mut q = good[..12].to_vec();
            for _ in 0..5 {
                q.push(63);
                q.extend([b'a'; 63]);
            }
            q.extend([0, 0, 1, 0, 1]);
            q[10..12].copy_from_slice(&[0, 0]);
            q
        },
        // Longer than the 512 bytes read.
        {
            let mut q = good.clone();
            q.extend([0u8; 600]);
            q
        },
    ];
    for (i, q) in formerr.iter().enumerate() {
        assert_eq!(header_answer(&mut l, q), Some(rcode::FORMERR), "case {i}");
        expect.formerr += 1;
    }
    // Opcode 2 (STATUS): not implemented. Class CH: refused.
    assert_eq!(
        header_answer(&mut l, &patched(2, &[0x11])),
        Some(rcode::NOTIMP)
    );
    expect.notimp += 1;
    let chaos = patched(good.len() - 11 - 2, &[0, 3]);
    assert_eq!(header_answer(&mut l, &chaos), Some(rcode::REFUSED));
    expect.refused += 1;
    // A response is never answered.
    assert_eq!(header_answer(&mut l, &patched(2, &[0x81])), None);
    expect.response += 1;
    assert_eq!(l.dns_counts().unwrap(), expect);
}

#[test]
fn drops_bad_frames_and_counts_them() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let q = query(9, "www.d2.test.", Type::A, true, false);
    let good = query_frame(ANSWERER, &q);
    let run = |l: &mut Loaded, f: &[u8]| l.run(f).unwrap().0;
    assert_eq!(run(&mut l, &good), XDP_TX);
    // A bad UDP checksum.
    let mut bad = good.clone();
    bad[40] ^= 0x55;
    assert_eq!(run(&mut l, &bad), XDP_DROP);
    // A bad IP checksum; a fragment; lengths that disagree; the frame cut short.
    let mut bad_ip = good.clone();
    bad_ip[24] ^= 1;
    assert_eq!(run(&mut l, &bad_ip), XDP_DROP);
    let mut fragment = good.clone();
    fragment[20] = 0x20; // MF
    let c = checksum(&{
        let mut h = fragment[14..34].to_vec();
        h[10..12].fill(0);
        h
    });
    fragment[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(run(&mut l, &fragment), XDP_DROP);
    let mut long_udp = good.clone();
    long_udp[38..40].copy_from_slice(&200u16.to_be_bytes());
    assert_eq!(run(&mut l, &long_udp), XDP_DROP);
    assert_eq!(run(&mut l, &good[..good.len() - 3]), XDP_DROP);
    // No UDP checksum at all is allowed over IPv4.
    let mut none = good.clone();
    none[40..42].fill(0);
    assert_eq!(run(&mut l, &none), XDP_TX);
    let counts = l.dns_counts().unwrap();
    assert_eq!(
        counts,
        DnsCounts {
            answered: 2,
            bad_checksum: 1,
            bad_ip: 4,
            ..DnsCounts::default()
        }
    );
}

/// xorshift64*: mutations that are the same on every run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn mangled_queries_get_a_well_formed_answer_or_none() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let seeds = [
        query(1, "chain.d3.example.", Type::A, true, true),
        query(2, "h1.d4.test.", Type::A, true, false),
        query(3, "d5.example.", Type::SOA, true, true),
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut answered = 0;
    for round in 0..1500 {
        let mut q = seeds[round % seeds.len()].clone();
        for _ in 0..1 + next(&mut state) % 4 {
            let r = next(&mut state);
            match r % 4 {
                0 | 1 if !q.is_empty() => {
                    let at = (r >> 8) as usize % q.len();
                    q[at] = (r >> 32) as u8;
                }
                2 => q.truncate((r >> 8) as usize % (q.len() + 1)),
                3 => q.push((r >> 8) as u8),
                _ => {}
            }
        }
        let (action, frame) = l.run(&query_frame(ANSWERER, &q)).unwrap();
        if action == XDP_DROP {
            continue;
        }
        assert_eq!(action, XDP_TX, "{q:02x?}");
        let reply = reply_payload(&frame);
        let msg = Message::parse(reply).unwrap_or_else(|e| panic!("{q:02x?}: {e:?}"));
        assert!(msg.header().is_response());
        for r in msg.answers() {
            r.data().unwrap();
        }
        answered += 1;
    }
    assert!(answered > 0);
}

#[test]
fn leaves_other_frames_to_the_responder_and_the_kernel() {
    let Some(mut l) = load(&tree_spec()) else {
        return;
    };
    let q = query(3, "www.d2.test.", Type::A, true, false);
    // The tree's servers, covered by the population, go to the kernel, whatever they are.
    let server = Ipv4Addr::new(198, 19, 53, 64);
    assert_eq!(l.run(&query_frame(server, &q)).unwrap().0, XDP_PASS);
    let echo = [8, 0, 0, 0, 0, 1, 0, 2];
    let echo = with_checksum(echo.to_vec(), 2, 0);
    assert_eq!(l.run(&ipv4(server, 1, &echo)).unwrap().0, XDP_PASS);
    // So does what goes to the answerer's prefix and is no DNS query over UDP.
    assert_eq!(l.run(&ipv4(ANSWERER, 1, &echo)).unwrap().0, XDP_PASS);
    let mut to_other_port = query_frame(ANSWERER, &q);
    to_other_port[36..38].copy_from_slice(&54u16.to_be_bytes());
    let fixed = with_checksum(
        {
            let mut u = to_other_port[34..].to_vec();
            u[6..8].fill(0);
            u
        },
        6,
        pseudo_header_v4(SCAN_IP, ANSWERER, 17, (to_other_port.len() - 34) as u16),
    );
    to_other_port.truncate(34);
    to_other_port.extend(fixed);
    assert_eq!(l.run(&to_other_port).unwrap().0, XDP_PASS);
    // The population's own probes are still the responder's: an echo to 198.18.0.1 is
    // answered.
    let pop_host = Ipv4Addr::new(198, 18, 0, 1);
    assert_eq!(l.run(&ipv4(pop_host, 1, &echo)).unwrap().0, XDP_TX);
    assert_eq!(l.dns_counts().unwrap(), DnsCounts::default());
}

#[test]
fn with_the_kernel_responder_answers_dns_and_passes_the_rest() {
    let mut s = tree_spec();
    s.kernel_responds = true;
    let Some(mut l) = load(&s) else {
        return;
    };
    let q = query(3, "www.d2.test.", Type::A, true, false);
    assert_eq!(l.run(&query_frame(ANSWERER, &q)).unwrap().0, XDP_TX);
    let echo = with_checksum([8, 0, 0, 0, 0, 1, 0, 2].to_vec(), 2, 0);
    for dst in [Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 200, 7)] {
        assert_eq!(l.run(&ipv4(dst, 1, &echo)).unwrap().0, XDP_PASS);
    }
    let other_source = ipv4_from(Ipv4Addr::new(198, 19, 255, 9), ANSWERER, 1, &echo);
    assert_eq!(l.run(&other_source).unwrap().0, XDP_PASS);
}

#[test]
fn without_the_answerer_the_tree_is_the_kernels() {
    let mut s = tree_spec();
    s.tree = Some(TreeSpec {
        answer: false,
        ..tree()
    });
    let Some(mut l) = load(&s) else {
        return;
    };
    let q = query(3, "www.d2.test.", Type::A, true, false);
    for dst in [ANSWERER, Ipv4Addr::new(198, 19, 53, 1)] {
        assert_eq!(l.run(&query_frame(dst, &q)).unwrap().0, XDP_PASS);
    }
}
