//! A lookup's row: one per (name, type), whatever became of it.

use std::net::Ipv4Addr;

use serde_json::{json, Value as Json};
use sonde_dns::{Fqdn, Message, NameBuf, Type};
use sonde_scan::output::Row;
use sonde_scan::reply::{Field, FieldType, Value};

const fn field(name: &'static str, kind: FieldType, help: &'static str) -> Field {
    Field { name, kind, help }
}

const ANSWER_MEMBERS: &[Field] = &[
    field(
        "name",
        FieldType::Str,
        "the record's owner, with its final dot",
    ),
    field("type", FieldType::Str, "its type"),
    field("ttl", FieldType::U32, "seconds it may be cached"),
    field("data", FieldType::Str, "its data in presentation form"),
];

const TRACE_MEMBERS: &[Field] = &[
    field("server", FieldType::Str, "the server asked"),
    field(
        "zone",
        FieldType::Str,
        "the zone it was asked as a server of",
    ),
    field("name", FieldType::Str, "the name asked"),
    field("type", FieldType::Str, "the type asked"),
    field(
        "result",
        FieldType::Str,
        "its rcode, or referral, cname, timeout, truncated",
    ),
    field(
        "next",
        FieldType::Str,
        "the zone referred to, or the CNAME's target",
    ),
    field("rtt_us", FieldType::Int, "query to answer, microseconds"),
];

/// Every field of a dns row, in output order.
pub const FIELDS: &[Field] = &[
    field("name", FieldType::Str, "the name asked, with its final dot"),
    field("type", FieldType::Str, "the type asked"),
    field(
        "status",
        FieldType::Str,
        "the answer's rcode (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, …), or TIMEOUT (no answer after every try), ERROR (none could be had: see error)",
    ),
    field(
        "answers",
        FieldType::Records(ANSWER_MEMBERS),
        "the answer section, in order: a CNAME chain first, then the records of the type asked",
    ),
    field(
        "server",
        FieldType::Addr,
        "the resolver that answered, or in --iterative the last server asked",
    ),
    field("attempts", FieldType::U32, "queries sent for this lookup"),
    field(
        "rtt_us",
        FieldType::Int,
        "the answering query's round trip, microseconds",
    ),
    field(
        "tcp",
        FieldType::Bool,
        "the answer came over TCP (the UDP one was truncated)",
    ),
    field("error", FieldType::Str, "why there is no answer (status ERROR)"),
    field(
        "trace",
        FieldType::Records(TRACE_MEMBERS),
        "--iterative --trace: every query of the walk from the root",
    ),
    field("timestamp", FieldType::Micros, "when the row was made"),
];

/// The fields written by default (`trace` only with --trace).
pub fn default_fields(trace: bool) -> Vec<&'static Field> {
    FIELDS
        .iter()
        .filter(|f| trace || f.name != "trace")
        .collect()
}

/// One record of an answer section, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub name: String,
    pub rtype: String,
    pub ttl: u32,
    pub data: String,
}

impl Answer {
    /// The answer section of `m`, each record's data in presentation form (a record whose data
    /// cannot be read is given as `\#` and its bytes, as unknown types are).
    pub fn section(m: &Message<'_>) -> Vec<Answer> {
        m.answers()
            .filter(|r| r.rtype != Type::OPT)
            .map(|r| Answer {
                name: Fqdn(&r.owner).to_string(),
                rtype: r.rtype.to_string(),
                ttl: r.ttl,
                data: match r.data() {
                    Ok(d) => d.to_string(),
                    Err(_) => sonde_dns::Rdata::Unknown(r.rtype, r.rdata()).to_string(),
                },
            })
            .collect()
    }
}

/// One query of an iterative walk.
#[derive(Clone, Debug)]
pub struct Step {
    pub server: Ipv4Addr,
    pub zone: String,
    pub name: String,
    pub qtype: Type,
    pub result: String,
    pub next: String,
    pub rtt_us: u64,
}

/// How a lookup ended.
#[derive(Clone, Debug)]
pub struct DnsRow {
    pub name: NameBuf,
    pub qtype: Type,
    pub status: String,
    pub answers: Vec<Answer>,
    pub server: Option<Ipv4Addr>,
    pub attempts: u32,
    pub rtt_us: Option<u64>,
    pub tcp: bool,
    pub error: Option<String>,
    pub trace: Option<Vec<Step>>,
    pub timestamp_us: u64,
}

impl DnsRow {
    pub fn name_text(&self) -> String {
        let text = self.name.to_string();
        if text == "." {
            text
        } else {
            text + "."
        }
    }
}

impl Row for DnsRow {
    fn get(&self, name: &str) -> Value {
        match name {
            "name" => Value::Str(self.name_text()),
            "type" => Value::Str(self.qtype.to_string()),
            "status" => Value::Str(self.status.clone()),
            "answers" => Value::Json(Json::Array(
                self.answers
                    .iter()
                    .map(|a| json!({"name": a.name, "type": a.rtype, "ttl": a.ttl, "data": a.data}))
                    .collect(),
            )),
            "server" => self
                .server
                .map_or(Value::Null, |s| Value::Str(s.to_string())),
            "attempts" => Value::Int(self.attempts.into()),
            "rtt_us" => self.rtt_us.map_or(Value::Null, Value::Int),
            "tcp" => Value::Bool(self.tcp),
            "error" => self.error.clone().map_or(Value::Null, Value::Str),
            "trace" => self.trace.as_ref().map_or(Value::Null, |steps| {
                Value::Json(Json::Array(
                    steps
                        .iter()
                        .map(|s| {
                            json!({"server": s.server.to_string(), "zone": s.zone, "name": s.name,
                                   "type": s.qtype.to_string(), "result": s.result, "next": s.next,
                                   "rtt_us": s.rtt_us})
                        })
                        .collect(),
                ))
            }),
            "timestamp" => Value::Int(self.timestamp_us),
            _ => Value::Null,
        }
    }
}

/// The status word of an rcode.
pub fn rcode_name(rcode: u16) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        9 => "NOTAUTH".into(),
        other => format!("RCODE{other}"),
    }
}
