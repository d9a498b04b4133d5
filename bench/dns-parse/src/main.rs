//! Parsing realistic DNS responses with sonde-dns's checked view and with hickory-proto's
//! `Message::from_vec`: nanoseconds and heap allocations per message, for the work a lookup
//! client does on each response (validate the header, match the question) and for the work it
//! does when writing a row (typed answers, names as text).
//!
//! Run: `cargo run --release` in bench/dns-parse (the responses are the crate's fixtures, read
//! from fuzz/seeds/dns_message).

use std::fmt::Write;
use std::hint::black_box;
use std::time::Instant;

use hickory_proto::op::{Message as HMessage, MessageType, OpCode};
use hickory_proto::rr::{Name as HName, RData, RecordType};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

struct Case {
    label: &'static str,
    bytes: Vec<u8>,
    id: u16,
    qname: &'static str,
    qtype: u16,
}

fn cases() -> Vec<Case> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/dns_message");
    let read = |file: &str| std::fs::read(format!("{dir}/{file}.bin")).expect("fixture");
    let case = |label, file, id, qname, qtype| Case {
        label,
        bytes: read(file),
        id,
        qname,
        qtype,
    };
    vec![
        case(
            "A, compressed, OPT",
            "a_compressed",
            0xbeef,
            "www.example.com",
            1,
        ),
        case("referral NS+glue", "referral", 0x1234, "www.example.com", 1),
        case("MX/TXT/CAA", "mx_txt_caa", 7, "example.com", 15),
        case("CNAME chain", "cname_chain", 8, "www.example.com", 1),
        case("NXDOMAIN+SOA", "nxdomain_soa", 9, "nope.example.com", 1),
    ]
}

/// What the client does with every response: is it a standard response to our ID and question?
fn sonde_accept(msg: &[u8], id: u16, qname: &sonde_dns::NameBuf, qtype: sonde_dns::Type) -> bool {
    let Ok(m) = sonde_dns::Message::parse(msg) else {
        return false;
    };
    let h = m.header();
    h.is_response() && h.opcode() == 0 && h.id() == id && m.asks(qname.wire(), qtype, 1)
}

/// And when writing a row: every section's typed data, names as text.
fn sonde_row(msg: &[u8], row: &mut String) -> usize {
    use sonde_dns::Rdata;
    let m = sonde_dns::Message::parse(msg).unwrap();
    row.clear();
    let _ = write!(row, "{}", m.rcode());
    for r in m.answers().chain(m.authorities()).chain(m.additionals()) {
        let _ = write!(row, ",{} ", r.owner);
        let _ = match r.data().unwrap() {
            Rdata::A(a) => write!(row, "{a}"),
            Rdata::Aaaa(a) => write!(row, "{a}"),
            Rdata::Ns(n) | Rdata::Cname(n) | Rdata::Ptr(n) => write!(row, "{n}"),
            Rdata::Mx {
                preference,
                exchange,
            } => write!(row, "{preference} {exchange}"),
            Rdata::Txt(s) => s.iter().try_for_each(|s| write!(row, "{}", s.len())),
            Rdata::Soa(s) => write!(row, "{} {} {}", s.mname, s.rname, s.serial),
            Rdata::Caa { flags, .. } => write!(row, "{flags}"),
            Rdata::Opt(_) | Rdata::Unknown(..) => Ok(()),
        };
    }
    row.len()
}

fn hickory_accept(msg: &[u8], id: u16, qname: &HName, qtype: RecordType) -> bool {
    let Ok(m) = HMessage::from_vec(msg) else {
        return false;
    };
    m.message_type() == MessageType::Response
        && m.op_code() == OpCode::Query
        && m.id() == id
        && m.queries().len() == 1
        && m.queries()[0].name() == qname
        && m.queries()[0].query_type() == qtype
}

fn hickory_row(msg: &[u8], row: &mut String) -> usize {
    let m = HMessage::from_vec(msg).unwrap();
    row.clear();
    let _ = write!(row, "{}", u16::from(m.response_code()));
    for r in m
        .answers()
        .iter()
        .chain(m.name_servers())
        .chain(m.additionals())
    {
        let _ = write!(row, ",{} ", r.name());
        let _ = match r.data() {
            RData::A(a) => write!(row, "{a}"),
            RData::AAAA(a) => write!(row, "{a}"),
            RData::NS(n) => write!(row, "{n}"),
            RData::CNAME(n) => write!(row, "{n}"),
            RData::PTR(n) => write!(row, "{n}"),
            RData::MX(mx) => write!(row, "{} {}", mx.preference(), mx.exchange()),
            RData::TXT(t) => t.iter().try_for_each(|s| write!(row, "{}", s.len())),
            RData::SOA(s) => write!(row, "{} {} {}", s.mname(), s.rname(), s.serial()),
            RData::CAA(c) => write!(row, "{}", c.issuer_critical()),
            _ => Ok(()),
        };
    }
    row.len()
}

/// Nanoseconds per call of `f`, the best of five rounds of `rounds` calls.
fn time(rounds: u32, mut f: impl FnMut() -> usize) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..rounds {
                black_box(f());
            }
            start.elapsed().as_nanos() as f64 / f64::from(rounds)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Heap blocks allocated by one call of `f`.
fn allocations(mut f: impl FnMut() -> usize) -> u64 {
    let before = dhat::HeapStats::get().total_blocks;
    black_box(f());
    dhat::HeapStats::get().total_blocks - before
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let cases = cases();
    let mut row = String::with_capacity(1024);
    let mut results = Vec::new();
    for c in &cases {
        let sq = sonde_dns::NameBuf::from_text(c.qname).unwrap();
        let st = sonde_dns::Type(c.qtype);
        let hq = HName::from_ascii(format!("{}.", c.qname)).unwrap();
        let ht = RecordType::from(c.qtype);
        assert!(sonde_accept(&c.bytes, c.id, &sq, st));
        if let Err(e) = HMessage::from_vec(&c.bytes) {
            panic!("hickory refuses {}: {e}", c.label);
        }
        assert!(hickory_accept(&c.bytes, c.id, &hq, ht), "{}", c.label);
        let msg = black_box(&c.bytes[..]);
        let times = [
            time(rounds, || usize::from(sonde_accept(msg, c.id, &sq, st))),
            time(rounds, || usize::from(hickory_accept(msg, c.id, &hq, ht))),
            time(rounds, || sonde_row(msg, &mut row)),
            time(rounds, || hickory_row(msg, &mut row)),
        ];
        results.push((c, times, sq, st, hq, ht));
    }
    // Allocations are counted with the profiler on, after the timings (it slows allocation).
    let _profiler = dhat::Profiler::builder().testing().build();
    println!(
        "{:<20} {:>5} | {:>16} {:>16} | {:>16} {:>16}",
        "response", "bytes", "accept sonde", "accept hickory", "row sonde", "row hickory"
    );
    println!(
        "{:<20} {:>5} | {:>16} {:>16} | {:>16} {:>16}",
        "", "", "ns (allocs)", "ns (allocs)", "ns (allocs)", "ns (allocs)"
    );
    for (c, t, sq, st, hq, ht) in &results {
        let msg = &c.bytes[..];
        let a = [
            allocations(|| usize::from(sonde_accept(msg, c.id, sq, *st))),
            allocations(|| usize::from(hickory_accept(msg, c.id, hq, *ht))),
            allocations(|| sonde_row(msg, &mut row)),
            allocations(|| hickory_row(msg, &mut row)),
        ];
        println!(
            "{:<20} {:>5} | {:>9.0} ({:>4}) {:>9.0} ({:>4}) | {:>9.0} ({:>4}) {:>9.0} ({:>4})",
            c.label,
            msg.len(),
            t[0],
            a[0],
            t[1],
            a[1],
            t[2],
            a[2],
            t[3],
            a[3]
        );
    }
}
