//! Hand-written messages: one per record type, compression forward and through record data, a
//! truncated answer, and one per refusal reason.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::*;

/// www.example.com A: two addresses whose owners point at the question, and an OPT record
/// stating 1232 bytes.
const A_COMPRESSED: &[u8] = b"\xbe\xef\x81\x80\x00\x01\x00\x02\x00\x00\x00\x01\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\xc6\x12\x00\x01\
\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\xc6\x12\x00\x02\
\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00";

/// A referral from a com server for www.example.com A: two NS records for example.com (their
/// hosts compressed against the question), and glue, A and AAAA, whose owners point into the NS
/// records' data.
const REFERRAL: &[u8] = b"\x12\x34\x80\x00\x00\x01\x00\x00\x00\x02\x00\x02\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x10\x00\x02\x00\x01\x00\x02\xa3\x00\x00\x06\x03ns1\xc0\x10\
\xc0\x10\x00\x02\x00\x01\x00\x02\xa3\x00\x00\x06\x03ns2\xc0\x10\
\xc0\x2d\x00\x01\x00\x01\x00\x02\xa3\x00\x00\x04\xc6\x12\x00\x35\
\xc0\x3f\x00\x1c\x00\x01\x00\x02\xa3\x00\x00\x10\
\x20\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x35";

/// example.com MX: an MX, a TXT of two strings, a CAA and a type sonde does not know (HTTPS, 65).
const MX_TXT_CAA: &[u8] = b"\x00\x07\x81\x80\x00\x01\x00\x04\x00\x00\x00\x00\
\x07example\x03com\x00\x00\x0f\x00\x01\
\xc0\x0c\x00\x0f\x00\x01\x00\x00\x0e\x10\x00\x09\x00\x0a\x04mail\xc0\x0c\
\xc0\x0c\x00\x10\x00\x01\x00\x00\x0e\x10\x00\x13\x0bv=spf1 -all\x06second\
\xc0\x0c\x01\x01\x00\x01\x00\x00\x0e\x10\x00\x11\x00\x05issueca.example\
\xc0\x0c\x00\x41\x00\x01\x00\x00\x0e\x10\x00\x03\x00\x01\x00";

/// www.example.com A through a chain: CNAME web.example.net, CNAME edge.cdn.net (compressed
/// against the first CNAME's data), then the address of edge.cdn.net.
const CNAME_CHAIN: &[u8] = b"\x00\x08\x81\x80\x00\x01\x00\x03\x00\x00\x00\x00\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x0c\x00\x05\x00\x01\x00\x00\x01\x2c\x00\x11\x03web\x07example\x03net\x00\
\xc0\x2d\x00\x05\x00\x01\x00\x00\x01\x2c\x00\x0b\x04edge\x03cdn\xc0\x39\
\xc0\x4a\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xc6\x12\x00\x63";

/// nope.example.com A: NXDOMAIN, with the zone's SOA in the authority section.
const NXDOMAIN_SOA: &[u8] = b"\x00\x09\x81\x83\x00\x01\x00\x00\x00\x01\x00\x00\
\x04nope\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x11\x00\x06\x00\x01\x00\x00\x03\x84\x00\x27\
\x03ns1\xc0\x11\x0ahostmaster\xc0\x11\
\x78\x4a\x29\x01\x00\x00\x1c\x20\x00\x00\x0e\x10\x00\x09\x3a\x80\x00\x00\x03\x84";

/// 1.0.18.198.in-addr.arpa PTR host.example.com.
const PTR: &[u8] = b"\x00\x0a\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\
\x011\x010\x0218\x03198\x07in-addr\x04arpa\x00\x00\x0c\x00\x01\
\xc0\x0c\x00\x0c\x00\x01\x00\x00\x0e\x10\x00\x12\x04host\x07example\x03com\x00";

/// example.com TXT, truncated (TC): the answer did not fit, so the server sent none.
const TRUNCATED: &[u8] = b"\x00\x0b\x83\x80\x00\x01\x00\x00\x00\x00\x00\x00\
\x07example\x03com\x00\x00\x10\x00\x01";

/// Eleven bytes: no whole header.
const HEADER_TOO_SHORT: &[u8] = b"\x00\x0c\x81\x80\x00\x01\x00\x00\x00\x00\x00";
/// 65,535 answers claimed in 33 bytes.
const COUNT_PAST_END: &[u8] = b"\x00\x0d\x81\x80\x00\x01\xff\xff\x00\x00\x00\x00\
\x03www\x07example\x03com\x00\x00\x01\x00\x01";
/// A question whose 7-byte label stops after 4.
const NAME_PAST_END: &[u8] = b"\x00\x0e\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x07exam";
/// A question whose name is a pointer to offset 255 of an 18-byte message.
const POINTER_PAST_END: &[u8] =
    b"\x00\x0f\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\xc0\xff\x00\x01\x00\x01";
/// An answer whose owner is a pointer to itself (offset 33).
const POINTER_LOOP: &[u8] = b"\x00\x10\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x21\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\xc6\x12\x00\x01";
/// A question whose first length byte is 64 (0b01 prefix).
const LABEL_TOO_LONG: &[u8] = b"\x00\x11\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\
\x40www\x07example\x03com\x00\x00\x01\x00\x01";
/// A question whose type is there but not its class.
const RECORD_PAST_END: &[u8] = b"\x00\x12\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\
\x07example\x03com\x00\x00\x01";
/// An A record claiming 16 bytes of data, 4 present.
const RDATA_PAST_END: &[u8] = b"\x00\x13\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x10\xc6\x12\x00\x01";
/// An A record of 3 bytes: the message parses, its data does not.
const BAD_RDATA: &[u8] = b"\x00\x14\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x03\xc6\x12\x00";

/// A question of five 63-byte labels: 321 bytes uncompressed.
fn name_too_long() -> Vec<u8> {
    let mut msg = b"\x00\x15\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00".to_vec();
    for _ in 0..5 {
        msg.push(63);
        msg.extend_from_slice(&[b'a'; 63]);
    }
    msg.extend_from_slice(b"\x00\x00\x01\x00\x01");
    msg
}

fn name(text: &str) -> NameBuf {
    NameBuf::from_text(text).unwrap()
}

fn texts<'a>(names: impl Iterator<Item = Name<'a>>) -> Vec<String> {
    names.map(|n| n.to_string()).collect()
}

#[test]
fn a_answer_with_compression_and_edns() {
    let m = Message::parse(A_COMPRESSED).unwrap();
    let h = m.header();
    assert_eq!((h.id(), h.is_response(), h.opcode()), (0xbeef, true, 0));
    assert!(h.recursion_desired() && h.recursion_available() && !h.is_truncated());
    assert_eq!(m.rcode(), rcode::NOERROR);
    assert!(m.asks(name("www.example.com").wire(), Type::A, CLASS_IN));
    assert!(m.asks(name("WWW.Example.COM.").wire(), Type::A, CLASS_IN));
    assert!(!m.asks(name("www.example.net").wire(), Type::A, CLASS_IN));
    assert!(!m.asks(name("example.com").wire(), Type::A, CLASS_IN));
    assert!(!m.asks(name("www.example.com").wire(), Type::AAAA, CLASS_IN));
    let addresses: Vec<_> = m
        .answers()
        .map(|r| {
            assert_eq!(
                (r.owner.to_string(), r.ttl),
                ("www.example.com".into(), 3600)
            );
            match r.data().unwrap() {
                Rdata::A(a) => a,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(
        addresses,
        [Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)]
    );
    assert_eq!(
        m.edns(),
        Some(Edns {
            udp_payload_size: 1232,
            extended_rcode: 0,
            version: 0,
            dnssec_ok: false
        })
    );
    assert_eq!(m.len(), A_COMPRESSED.len());
}

#[test]
fn referral_with_ns_and_glue() {
    let m = Message::parse(REFERRAL).unwrap();
    assert!(!m.header().is_authoritative() && !m.header().recursion_desired());
    assert_eq!(m.answers().count(), 0);
    let zone = name("example.com");
    let servers: Vec<String> = m
        .authorities()
        .map(|r| {
            assert!(r.owner.eq_wire(zone.wire()) && r.rtype == Type::NS);
            match r.data().unwrap() {
                Rdata::Ns(host) => {
                    assert!(host.is_under(&r.owner));
                    host.to_string()
                }
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(servers, ["ns1.example.com", "ns2.example.com"]);
    assert_eq!(
        texts(m.additionals().map(|r| r.owner)),
        ["ns1.example.com", "ns2.example.com"]
    );
    let glue: Vec<_> = m.additionals().map(|r| r.data().unwrap()).collect();
    assert!(matches!(glue[0], Rdata::A(a) if a == Ipv4Addr::new(198, 18, 0, 53)));
    assert!(matches!(glue[1], Rdata::Aaaa(a) if a == "2001:2::35".parse::<Ipv6Addr>().unwrap()));
    assert_eq!(m.edns(), None);
}

#[test]
fn mx_txt_caa_and_an_unknown_type() {
    let m = Message::parse(MX_TXT_CAA).unwrap();
    assert!(m.asks(name("example.com").wire(), Type::MX, CLASS_IN));
    let data: Vec<_> = m.answers().map(|r| r.data().unwrap()).collect();
    match data[0] {
        Rdata::Mx {
            preference,
            exchange,
        } => assert_eq!(
            (preference, exchange.to_string()),
            (10, "mail.example.com".into())
        ),
        other => panic!("{other:?}"),
    }
    match data[1] {
        Rdata::Txt(strings) => assert_eq!(
            strings.iter().collect::<Vec<_>>(),
            [&b"v=spf1 -all"[..], b"second"]
        ),
        other => panic!("{other:?}"),
    }
    match data[2] {
        Rdata::Caa { flags, tag, value } => {
            assert_eq!((flags, tag, value), (0, &b"issue"[..], &b"ca.example"[..]))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(data[3], Rdata::Unknown(Type(65), b"\x00\x01\x00")));
    assert_eq!(m.answers().nth(3).unwrap().rtype.to_string(), "TYPE65");
}

#[test]
fn cname_chain_compressed_through_record_data() {
    let m = Message::parse(CNAME_CHAIN).unwrap();
    let steps: Vec<String> = m
        .answers()
        .map(|r| match r.data().unwrap() {
            Rdata::Cname(target) => format!("{} CNAME {target}", r.owner),
            Rdata::A(a) => format!("{} A {a}", r.owner),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "www.example.com CNAME web.example.net",
            "web.example.net CNAME edge.cdn.net",
            "edge.cdn.net A 198.18.0.99",
        ]
    );
    // Following the chain: each target is the next record's owner.
    let records: Vec<_> = m.answers().collect();
    let Rdata::Cname(first) = records[0].data().unwrap() else {
        unreachable!()
    };
    assert!(first.eq_name(&records[1].owner));
    assert!(!first.eq_name(&records[2].owner));
    assert_eq!(first.to_buf(), name("web.example.net"));
}

#[test]
fn nxdomain_with_soa() {
    let m = Message::parse(NXDOMAIN_SOA).unwrap();
    assert_eq!(m.rcode(), rcode::NXDOMAIN);
    let soa = m.authorities().next().unwrap();
    assert_eq!(soa.owner.to_string(), "example.com");
    let Rdata::Soa(soa) = soa.data().unwrap() else {
        panic!("not an SOA")
    };
    assert_eq!(
        (soa.mname.to_string(), soa.rname.to_string()),
        ("ns1.example.com".into(), "hostmaster.example.com".into())
    );
    assert_eq!(
        (soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum),
        (2018126081, 7200, 3600, 604800, 900)
    );
}

#[test]
fn ptr_answer() {
    let m = Message::parse(PTR).unwrap();
    let q = m.question().unwrap();
    assert_eq!(
        (q.name.to_string(), q.qtype),
        ("1.0.18.198.in-addr.arpa".into(), Type::PTR)
    );
    let Rdata::Ptr(host) = m.answers().next().unwrap().data().unwrap() else {
        panic!("not a PTR")
    };
    assert_eq!(host.to_string(), "host.example.com");
}

#[test]
fn truncated_answer_is_read_and_says_so() {
    let m = Message::parse(TRUNCATED).unwrap();
    assert!(m.header().is_truncated());
    assert!(m.asks(name("example.com").wire(), Type::TXT, CLASS_IN));
    assert_eq!(m.answers().count(), 0);
}

#[test]
fn every_refusal_reason_has_its_fixture() {
    let too_long = name_too_long();
    let cases: [(&[u8], Malformed); 9] = [
        (HEADER_TOO_SHORT, Malformed::HeaderTooShort),
        (COUNT_PAST_END, Malformed::CountPastEnd),
        (NAME_PAST_END, Malformed::NamePastEnd),
        (POINTER_PAST_END, Malformed::PointerPastEnd),
        (POINTER_LOOP, Malformed::PointerLoop),
        (LABEL_TOO_LONG, Malformed::LabelTooLong),
        (&too_long, Malformed::NameTooLong),
        (RECORD_PAST_END, Malformed::RecordPastEnd),
        (RDATA_PAST_END, Malformed::RdataPastEnd),
    ];
    let mut counts = [0; Malformed::ALL.len()];
    for (msg, reason) in cases {
        let refused = Message::parse(msg).unwrap_err();
        assert_eq!(refused, reason, "{}", reason.name());
        counts[refused.index()] += 1;
    }
    let bad = Message::parse(BAD_RDATA).unwrap();
    let refused = bad.answers().next().unwrap().data().unwrap_err();
    assert_eq!(refused, Malformed::BadRdata);
    counts[refused.index()] += 1;
    assert_eq!(counts, [1; Malformed::ALL.len()], "one fixture per reason");
    for (i, reason) in Malformed::ALL.into_iter().enumerate() {
        assert_eq!(reason.index(), i);
    }
}

#[test]
fn header_of_a_refused_message_is_still_readable() {
    assert!(Message::parse(RDATA_PAST_END).is_err());
    let h = Header::new(RDATA_PAST_END).unwrap();
    assert_eq!((h.id(), h.answer_count()), (0x13, 1));
    assert_eq!(
        Header::new(HEADER_TOO_SHORT).unwrap_err(),
        Malformed::HeaderTooShort
    );
}

#[test]
fn loops_of_two_pointers_and_forward_pointers_are_refused() {
    // Question name at 12 points to 14, which points back to 12.
    let two = b"\x00\x01\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0e\xc0\x0c\x00\x01\x00\x01";
    assert_eq!(Message::parse(two).unwrap_err(), Malformed::PointerLoop);
    // A forward pointer, even to a good name later on.
    let forward = b"\x00\x01\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x12\x00\x01\x00\x01\x00";
    assert_eq!(Message::parse(forward).unwrap_err(), Malformed::PointerLoop);
    // Chains of pointers, each to the one before: backward, so accepted up to the bound.
    assert!(Message::parse(&pointer_chain(126)).is_ok());
    assert_eq!(
        Message::parse(&pointer_chain(127)).unwrap_err(),
        Malformed::PointerLoop
    );
}

/// Two answers: an unknown record at 12 whose owner is the root and whose data is `n` pointers,
/// the first to that root and each other to the one before it; then an A record whose owner is
/// a pointer to the last of them, so reading it follows `n + 1` pointers.
fn pointer_chain(n: u16) -> Vec<u8> {
    let mut msg = b"\x00\x01\x81\x80\x00\x00\x00\x02\x00\x00\x00\x00".to_vec();
    msg.extend_from_slice(b"\x00\x00\x41\x00\x01\x00\x00\x00\x00");
    msg.extend_from_slice(&(2 * n).to_be_bytes());
    let rdata_at = 23u16;
    for k in 0..n {
        let target = if k == 0 { 12 } else { rdata_at + 2 * (k - 1) };
        msg.extend_from_slice(&(0xc000 | target).to_be_bytes());
    }
    msg.extend_from_slice(&(0xc000 | (rdata_at + 2 * (n - 1))).to_be_bytes());
    msg.extend_from_slice(b"\x00\x01\x00\x01\x00\x00\x00\x00\x00\x04\xc6\x12\x00\x01");
    msg
}

#[test]
fn names_in_record_data_are_bounded_by_it() {
    // A CNAME whose data is 2 bytes but whose name is the 5-byte "\x03www\x00".
    let msg = b"\x00\x01\x81\x80\x00\x00\x00\x01\x00\x00\x00\x00\
\x00\x00\x05\x00\x01\x00\x00\x00\x01\x00\x02\x03www\x00";
    let m = Message::parse(msg).unwrap();
    let cname = m.answers().next().unwrap();
    assert_eq!(cname.rdata(), b"\x03w");
    assert_eq!(cname.data().unwrap_err(), Malformed::NamePastEnd);
    // An NS whose name ends before its data does.
    let msg = b"\x00\x01\x81\x80\x00\x00\x00\x01\x00\x00\x00\x00\
\x00\x00\x02\x00\x01\x00\x00\x00\x01\x00\x03\x00\x00\x00";
    let m = Message::parse(msg).unwrap();
    assert_eq!(
        m.answers().next().unwrap().data().unwrap_err(),
        Malformed::BadRdata
    );
}

#[test]
fn every_prefix_of_every_fixture_is_refused_or_read_without_panic() {
    for fixture in [
        A_COMPRESSED,
        REFERRAL,
        MX_TXT_CAA,
        CNAME_CHAIN,
        NXDOMAIN_SOA,
        PTR,
    ] {
        Message::parse(fixture).unwrap();
        for cut in 0..fixture.len() {
            // Trailing records cut off: the counts no longer fit, whatever the reason given.
            assert!(Message::parse(&fixture[..cut]).is_err(), "cut at {cut}");
        }
    }
}

#[test]
fn writes_a_resolver_query_with_edns() {
    let www = name("www.example.com");
    let query = Query {
        id: 0x1234,
        name: &www,
        qtype: Type::A,
        recursion_desired: true,
        udp_payload: Some(DEFAULT_UDP_PAYLOAD),
    };
    let mut buf = [0xaa; 512];
    let n = query.write(&mut buf).unwrap();
    let expected: &[u8] = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01\
\x03www\x07example\x03com\x00\x00\x01\x00\x01\
\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00";
    assert_eq!(&buf[..n], expected);
    assert_eq!(query.len(), n);
    let m = Message::parse(&buf[..n]).unwrap();
    assert!(!m.header().is_response() && m.asks(www.wire(), Type::A, CLASS_IN));
    assert_eq!(m.edns().unwrap().udp_payload_size, 1232);
}

#[test]
fn writes_an_iterative_query_without_edns() {
    let zone = name("example.com.");
    let query = Query {
        id: 7,
        name: &zone,
        qtype: Type::NS,
        recursion_desired: false,
        udp_payload: None,
    };
    let mut buf = [0; 64];
    let n = query.write(&mut buf).unwrap();
    let expected: &[u8] = b"\x00\x07\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\
\x07example\x03com\x00\x00\x02\x00\x01";
    assert_eq!(&buf[..n], expected);
    assert_eq!(
        query.write(&mut buf[..n - 1]),
        Err(BufferTooSmall { needed: n })
    );
}

#[test]
fn names_from_text() {
    assert_eq!(name(".").wire(), b"\x00");
    assert_eq!(name("").wire(), b"\x00");
    assert_eq!(name("a.b.").wire(), b"\x01a\x01b\x00");
    assert_eq!(name(".").to_string(), ".");
    assert_eq!(NameBuf::from_text("a..b"), Err(NameError::EmptyLabel));
    assert_eq!(NameBuf::from_text(".a"), Err(NameError::EmptyLabel));
    assert_eq!(
        NameBuf::from_text(&"x".repeat(64)),
        Err(NameError::LabelTooLong)
    );
    assert!(NameBuf::from_text(&"x".repeat(63)).is_ok());
    let long = ["abcdefghi"; 26].join(".");
    assert_eq!(NameBuf::from_text(&long), Err(NameError::NameTooLong));
    assert!(NameBuf::from_text(&long[10..]).is_ok());
    assert_eq!(NameBuf::from_text("a\\"), Err(NameError::BadEscape));
    assert_eq!(NameBuf::from_text("a\\256"), Err(NameError::BadEscape));
    // Escapes read back what the text form writes.
    let odd = name("a\\.b\\\\c\\000\\255.d e");
    assert_eq!(odd.wire(), b"\x07a.b\\c\x00\xff\x03d e\x00");
    assert_eq!(odd.to_string(), "a\\.b\\\\c\\000\\255.d\\032e");
    assert_eq!(name(&odd.to_string()), odd);
    let mut mixed = name("WWW.Example.com");
    assert_ne!(mixed, name("www.example.com"));
    mixed.make_ascii_lowercase();
    assert_eq!(mixed, name("www.example.com"));
}

#[test]
fn types_by_name() {
    assert_eq!("aaaa".parse(), Ok(Type::AAAA));
    assert_eq!("Mx".parse(), Ok(Type::MX));
    assert_eq!("CAA".parse(), Ok(Type(257)));
    assert_eq!("TYPE65".parse(), Ok(Type(65)));
    assert_eq!("type1".parse(), Ok(Type::A));
    for bad in ["", "TYPE", "TYPE70000", "TYPE-1", "TYPE+1", "BOGUS"] {
        assert!(bad.parse::<Type>().is_err(), "{bad}");
    }
    assert_eq!(Type::CNAME.to_string(), "CNAME");
    assert_eq!(Type(65).to_string(), "TYPE65");
}

/// Writes every fixture to `fuzz/seeds/dns_message/` (run with `--ignored` after changing them).
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/dns_message");
    std::fs::create_dir_all(dir).unwrap();
    let too_long = name_too_long();
    let seeds: [(&str, &[u8]); 17] = [
        ("a_compressed", A_COMPRESSED),
        ("referral", REFERRAL),
        ("mx_txt_caa", MX_TXT_CAA),
        ("cname_chain", CNAME_CHAIN),
        ("nxdomain_soa", NXDOMAIN_SOA),
        ("ptr", PTR),
        ("truncated", TRUNCATED),
        ("header_too_short", HEADER_TOO_SHORT),
        ("count_past_end", COUNT_PAST_END),
        ("name_past_end", NAME_PAST_END),
        ("pointer_past_end", POINTER_PAST_END),
        ("pointer_loop", POINTER_LOOP),
        ("label_too_long", LABEL_TOO_LONG),
        ("name_too_long", &too_long),
        ("record_past_end", RECORD_PAST_END),
        ("rdata_past_end", RDATA_PAST_END),
        ("bad_rdata", BAD_RDATA),
    ];
    for (name, bytes) in seeds {
        std::fs::write(format!("{dir}/{name}.bin"), bytes).unwrap();
    }
}

#[test]
fn record_data_in_presentation_form() {
    let m = Message::parse(MX_TXT_CAA).unwrap();
    let texts: Vec<String> = m.answers().map(|r| r.data().unwrap().to_string()).collect();
    assert_eq!(
        texts,
        [
            "10 mail.example.com.",
            "\"v=spf1 -all\" \"second\"",
            "0 issue \"ca.example\"",
            "\\# 3 000100",
        ]
    );
    let m = Message::parse(CNAME_CHAIN).unwrap();
    let texts: Vec<String> = m.answers().map(|r| r.data().unwrap().to_string()).collect();
    assert_eq!(texts, ["web.example.net.", "edge.cdn.net.", "198.18.0.99"]);
    let owner = m.answers().next().unwrap().owner;
    assert_eq!(Fqdn(&owner).to_string(), "www.example.com.");
}

#[test]
fn quotes_backslashes_and_unprintable_bytes_in_strings_are_escaped() {
    // TXT data: one string `a"b\c` then a byte 0x07.
    let rdata = b"\x05a\"b\\c\x01\x07";
    let mut msg = vec![0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0];
    msg.extend_from_slice(&[0, 0, 16, 0, 1, 0, 0, 0, 60, 0, rdata.len() as u8]);
    msg.extend_from_slice(rdata);
    let m = Message::parse(&msg).unwrap();
    let text = m.answers().next().unwrap().data().unwrap().to_string();
    assert_eq!(text, r#""a\"b\\c" "\007""#);
}
