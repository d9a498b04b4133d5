//! One row of scan output: what a valid reply says, with the field names ZMap users expect.

use std::net::IpAddr;

/// A reply that passed validation, as the output writers see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// Who answered (the probed address) and from which port (0 for ICMP).
    pub saddr: IpAddr,
    pub sport: u16,
    /// Our address and port the answer came to.
    pub daddr: IpAddr,
    pub dport: u16,
    /// Probe-specific class: `synack`, `rst`, `echoreply`, `unreach`, `udp`, `dns`, …
    pub classification: &'static str,
    /// Whether the class counts as a hit (open port, live host, answering service).
    pub success: bool,
    /// A duplicate of a reply already reported.
    pub repeat: bool,
    pub ttl: u8,
    pub ipid: u16,
    pub window: u16,
    pub tcp_mss: Option<u16>,
    pub tcp_wscale: Option<u8>,
    pub tcp_sack_ok: bool,
    /// TCP timestamp option: the peer's TSval.
    pub tcp_ts: Option<u32>,
    /// Microseconds from the probe's transmission to this reply, when known.
    pub rtt_us: Option<u64>,
    /// Arrival time, microseconds since the Unix epoch.
    pub timestamp_us: u64,
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
    pub udp_len: Option<u16>,
    pub dns_rcode: Option<u8>,
    pub dns_answers: Option<u16>,
    /// The answer came in IP fragments: only the first, which carries the transport header,
    /// was read (so `udp_len` is what the UDP header claims, not what arrived).
    pub fragmented: bool,
}

/// A field's value, typed, for writers and filters.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(u64),
    Str(String),
    /// A structured value (a [`FieldType::Map`] or [`FieldType::Records`] field): nested JSON
    /// in ndjson, its JSON text in csv, a MAP or a LIST of structs in parquet.
    Json(serde_json::Value),
}

/// The type a field always has (parquet needs it up front). Text formats write the narrow
/// integers and times as `Int`, and addresses as `Str`; parquet gives each its own column type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// A JSON object of text values (HTTP headers): a `Value::Json` object, MAP<STRING,
    /// STRING> in parquet.
    Map,
    /// A JSON array of objects with these members (a certificate chain): a `Value::Json`
    /// array, a LIST of structs in parquet. Members are of the plain types (no address, no
    /// nesting).
    Records(&'static [Field]),
    Bool,
    /// An unsigned integer of up to 64 bits.
    Int,
    /// Unsigned integers known to fit 8, 16 or 32 bits (TTLs, ports, TCP timestamps).
    U8,
    U16,
    U32,
    /// Microseconds since the Unix epoch, UTC.
    Micros,
    Str,
    /// An IP address (v4 or v6) in its text form.
    Addr,
}

impl FieldType {
    /// Whether values are `Value::Int` (compared as numbers by output filters).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            FieldType::Int | FieldType::U8 | FieldType::U16 | FieldType::U32 | FieldType::Micros
        )
    }

    /// The largest integer a field of this type holds; `None` if its values are not integers.
    pub fn int_max(self) -> Option<u64> {
        match self {
            FieldType::U8 => Some(u8::MAX.into()),
            FieldType::U16 => Some(u16::MAX.into()),
            FieldType::U32 => Some(u32::MAX.into()),
            FieldType::Int | FieldType::Micros => Some(u64::MAX),
            FieldType::Bool
            | FieldType::Str
            | FieldType::Addr
            | FieldType::Map
            | FieldType::Records(_) => None,
        }
    }

    /// Whether values are `Value::Str` (compared for equality only by output filters).
    pub fn is_text(self) -> bool {
        matches!(self, FieldType::Str | FieldType::Addr)
    }

    /// Whether values are `Value::Json` (a map or a list of records).
    pub fn is_nested(self) -> bool {
        matches!(self, FieldType::Map | FieldType::Records(_))
    }
}

/// A named output field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub kind: FieldType,
    pub help: &'static str,
}

const fn field(name: &'static str, kind: FieldType, help: &'static str) -> Field {
    Field { name, kind, help }
}

/// Every field, in default output order.
pub const FIELDS: &[Field] = &[
    field("saddr", FieldType::Addr, "address that answered"),
    field(
        "sport",
        FieldType::U16,
        "port it answered from (0 for ICMP)",
    ),
    field("daddr", FieldType::Addr, "our address the answer came to"),
    field("dport", FieldType::U16, "our port the answer came to"),
    field(
        "classification",
        FieldType::Str,
        "kind of answer: synack, rst, echoreply, unreach, udp, dns",
    ),
    field("success", FieldType::Bool, "whether the answer is a hit"),
    field(
        "repeat",
        FieldType::Bool,
        "a duplicate of an answer already seen",
    ),
    field("ttl", FieldType::U8, "IP TTL / hop limit of the answer"),
    field("ipid", FieldType::U16, "IPv4 identification of the answer"),
    field("window", FieldType::U16, "TCP window of the answer"),
    field("tcp_mss", FieldType::U16, "TCP MSS option"),
    field("tcp_wscale", FieldType::U8, "TCP window scale option"),
    field("tcp_sack_ok", FieldType::Bool, "TCP SACK-permitted option"),
    field("tcp_ts", FieldType::U32, "TCP timestamp option: TSval"),
    field("rtt_us", FieldType::Int, "round-trip time in microseconds"),
    field(
        "timestamp",
        FieldType::Micros,
        "arrival time, microseconds since the Unix epoch",
    ),
    field("icmp_type", FieldType::U8, "ICMP type (icmp_echo)"),
    field("icmp_code", FieldType::U8, "ICMP code (icmp_echo)"),
    field(
        "udp_len",
        FieldType::U16,
        "UDP payload length of the answer (udp, dns)",
    ),
    field("dns_rcode", FieldType::U8, "DNS response code (dns)"),
    field("dns_answers", FieldType::U16, "DNS answer count (dns)"),
    field(
        "fragmented",
        FieldType::Bool,
        "the answer came in IP fragments; only the first was read (udp, dns)",
    ),
];

// The modules' default output sets. Every one starts with `saddr` and holds `classification`
// and `success`: `sonde lab score` reads them.

/// Fields written for `tcp_syn` when none are chosen: what ZMap users expect from a TCP scan.
pub const DEFAULT_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "ipid",
    "window",
    "tcp_mss",
    "tcp_wscale",
    "tcp_sack_ok",
    "tcp_ts",
    "rtt_us",
    "timestamp",
];

/// Fields written for `icmp_echo` when none are chosen: no ports, no TCP.
pub const ICMP_FIELDS: &[&str] = &[
    "saddr",
    "daddr",
    "classification",
    "success",
    "repeat",
    "ttl",
    "ipid",
    "icmp_type",
    "icmp_code",
    "rtt_us",
    "timestamp",
];

/// Fields written for `udp` when none are chosen: the answer's length, the ICMP error that
/// came instead, and whether it was fragmented.
pub const UDP_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "udp_len",
    "icmp_type",
    "icmp_code",
    "fragmented",
    "timestamp",
];

/// Fields written for `dns` when none are chosen: as for `udp`, plus the response code and the
/// number of answers.
pub const DNS_FIELDS: &[&str] = &[
    "saddr",
    "sport",
    "daddr",
    "dport",
    "classification",
    "success",
    "repeat",
    "ttl",
    "udp_len",
    "dns_rcode",
    "dns_answers",
    "icmp_type",
    "icmp_code",
    "fragmented",
    "timestamp",
];

impl Reply {
    /// The value of field `name` (one of [`FIELDS`]); `Null` for an unknown name.
    pub fn get(&self, name: &str) -> Value {
        let int = |v: Option<u64>| v.map_or(Value::Null, Value::Int);
        match name {
            "saddr" => Value::Str(self.saddr.to_string()),
            "sport" => Value::Int(self.sport.into()),
            "daddr" => Value::Str(self.daddr.to_string()),
            "dport" => Value::Int(self.dport.into()),
            "classification" => Value::Str(self.classification.to_string()),
            "success" => Value::Bool(self.success),
            "repeat" => Value::Bool(self.repeat),
            "ttl" => Value::Int(self.ttl.into()),
            "ipid" => Value::Int(self.ipid.into()),
            "window" => Value::Int(self.window.into()),
            "tcp_mss" => int(self.tcp_mss.map(u64::from)),
            "tcp_wscale" => int(self.tcp_wscale.map(u64::from)),
            "tcp_sack_ok" => Value::Bool(self.tcp_sack_ok),
            "tcp_ts" => int(self.tcp_ts.map(u64::from)),
            "rtt_us" => int(self.rtt_us),
            "timestamp" => Value::Int(self.timestamp_us),
            "icmp_type" => int(self.icmp_type.map(u64::from)),
            "icmp_code" => int(self.icmp_code.map(u64::from)),
            "udp_len" => int(self.udp_len.map(u64::from)),
            "dns_rcode" => int(self.dns_rcode.map(u64::from)),
            "dns_answers" => int(self.dns_answers.map(u64::from)),
            "fragmented" => Value::Bool(self.fragmented),
            _ => Value::Null,
        }
    }

    /// An example row for tests and docs.
    pub fn example() -> Reply {
        Reply {
            saddr: "198.18.0.7".parse().unwrap(),
            sport: 80,
            daddr: "198.19.255.1".parse().unwrap(),
            dport: 40123,
            classification: "synack",
            success: true,
            repeat: false,
            ttl: 64,
            ipid: 0,
            window: 64240,
            tcp_mss: Some(1460),
            tcp_wscale: Some(7),
            tcp_sack_ok: true,
            tcp_ts: None,
            rtt_us: Some(35),
            timestamp_us: 1_795_000_000_000_000,
            icmp_type: None,
            icmp_code: None,
            udp_len: None,
            dns_rcode: None,
            dns_answers: None,
            fragmented: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply whose every number is the largest its Rust type holds.
    fn widest() -> Reply {
        Reply {
            sport: u16::MAX,
            dport: u16::MAX,
            ttl: u8::MAX,
            ipid: u16::MAX,
            window: u16::MAX,
            tcp_mss: Some(u16::MAX),
            tcp_wscale: Some(u8::MAX),
            tcp_ts: Some(u32::MAX),
            rtt_us: Some(u64::MAX),
            timestamp_us: u64::MAX,
            icmp_type: Some(u8::MAX),
            icmp_code: Some(u8::MAX),
            udp_len: Some(u16::MAX),
            dns_rcode: Some(u8::MAX),
            dns_answers: Some(u16::MAX),
            ..Reply::example()
        }
    }

    /// Every value has its field's type, and the narrow integer types (parquet's UINT_8 etc.)
    /// hold the largest value the reply can carry.
    #[test]
    fn every_field_has_a_value_of_its_type() {
        for r in [Reply::example(), widest()] {
            for f in FIELDS {
                match (r.get(f.name), f.kind) {
                    (Value::Null, _) | (Value::Bool(_), FieldType::Bool) => {}
                    (Value::Int(n), k) if k.is_int() => {
                        assert!(Some(n) <= k.int_max(), "{} = {n} exceeds {k:?}", f.name)
                    }
                    (Value::Str(_), k) if k.is_text() => {}
                    (v, k) => panic!("{} is {v:?}, declared {k:?}", f.name),
                }
            }
        }
        assert_eq!(Reply::example().get("nonsense"), Value::Null);
    }
}
