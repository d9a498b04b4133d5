#![no_main]
//! `sonde-dns` on hostile messages: parse, walk every question and record of every section,
//! read every record's typed data and its presentation form, render every name. Nothing may panic, and every name must
//! survive its text form: the text parses back to the same name, and its uncompressed copy has
//! the length the view reports. The same bytes, read as a name and a type, are written as a query
//! that must parse back to what was asked.

use std::fmt::Write;

use libfuzzer_sys::fuzz_target;
use sonde_dns::{
    Fqdn, Header, Message, Name, NameBuf, Query, Rdata, Type, CLASS_IN, DEFAULT_UDP_PAYLOAD,
};

fn check_name(name: &Name<'_>, text: &mut String) {
    text.clear();
    write!(text, "{name}").unwrap();
    let copy = name.to_buf();
    assert_eq!(copy.wire().len(), name.wire_len());
    assert!(name.eq_wire(copy.wire()) && name.eq_name(name));
    let back = NameBuf::from_text(text).expect("a rendered name parses back");
    assert!(name.eq_wire(back.wire()), "{text} does not read back");
    assert!(name.is_under(&*name));
}

/// The input as a name and a type, written as a query: the query must parse, ask exactly that,
/// and say what was set.
fn check_query(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (name, rtype) = text.rsplit_once(' ').unwrap_or((&text, "A"));
    let (Ok(name), Ok(rtype)) = (NameBuf::from_text(name), rtype.parse::<Type>()) else {
        return;
    };
    let recursion_desired = data.len() % 2 == 0;
    let udp_payload = (data.len() % 3 != 0).then_some(DEFAULT_UDP_PAYLOAD);
    let query = Query {
        id: data.len() as u16,
        name: &name,
        qtype: rtype,
        recursion_desired,
        udp_payload,
    };
    let mut buf = [0u8; 512];
    let n = query.write(&mut buf).expect("a query fits in 512 bytes");
    let message = Message::parse(&buf[..n]).expect("a written query parses");
    assert!(message.asks(name.wire(), rtype, CLASS_IN));
    assert_eq!(message.header().recursion_desired(), recursion_desired);
    assert_eq!(message.edns().map(|e| e.udp_payload_size), udp_payload);
    assert_eq!(message.len(), n);
}

fuzz_target!(|data: &[u8]| {
    check_query(data);
    let header = Header::new(data);
    assert_eq!(header.is_ok(), data.len() >= 12);
    let Ok(message) = Message::parse(data) else {
        return;
    };
    let mut text = String::new();
    let header = message.header();
    let _ = (
        header.id(),
        header.opcode(),
        header.rcode(),
        header.is_truncated(),
    );
    let _ = (message.rcode(), message.edns(), message.len());
    assert_eq!(
        message.questions().count(),
        usize::from(header.question_count())
    );
    for question in message.questions() {
        check_name(&question.name, &mut text);
        let wire = question.name.to_buf();
        assert_eq!(
            message.asks(wire.wire(), question.qtype, question.class),
            header.question_count() == 1
        );
    }
    let sections = [
        (message.answers(), header.answer_count()),
        (message.authorities(), header.authority_count()),
        (message.additionals(), header.additional_count()),
    ];
    for (records, count) in sections {
        let mut seen = 0;
        for record in records {
            seen += 1;
            check_name(&record.owner, &mut text);
            let _ = record.rdata();
            // The presentation form a row shows: never a panic, never empty but for OPT.
            if let Ok(data) = record.data() {
                text.clear();
                write!(text, "{data} {}", Fqdn(&record.owner)).unwrap();
                assert!(record.rtype == Type::OPT || !text.starts_with(' '));
            }
            match record.data() {
                Ok(Rdata::Ns(n) | Rdata::Cname(n) | Rdata::Ptr(n)) => check_name(&n, &mut text),
                Ok(Rdata::Mx { exchange, .. }) => check_name(&exchange, &mut text),
                Ok(Rdata::Soa(soa)) => {
                    check_name(&soa.mname, &mut text);
                    check_name(&soa.rname, &mut text);
                }
                Ok(Rdata::Txt(strings)) => {
                    let total: usize = strings.iter().map(|s| 1 + s.len()).sum();
                    assert_eq!(total, record.rdata().len());
                }
                Ok(Rdata::Opt(options)) => {
                    let total: usize = options.iter().map(|(_, v)| 4 + v.len()).sum();
                    assert_eq!(total, record.rdata().len());
                }
                Ok(Rdata::A(_) | Rdata::Aaaa(_) | Rdata::Caa { .. } | Rdata::Unknown(..)) => {}
                Err(_) => {}
            }
        }
        assert_eq!(seen, usize::from(count));
    }
});
