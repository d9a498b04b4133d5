//! A grab row's fields: the target's port named from the reply's side as in scan rows, and
//! `status` (the protocol's outcome, ZGrab2's words) beside `tcp_status` (the connection's).

use sonde_apps::{AnyApp, AppKind, AppOptions, AppOutcome};
use sonde_scan::output::Row;
use sonde_scan::reply::Value;
use sonde_tcp::{Outcome, Status};

use super::super::{row_status, GrabApp, GrabRow};

fn outcome(status: Status) -> Outcome {
    Outcome {
        addr: "198.18.0.7".parse().unwrap(),
        port: 443,
        sport: 61000,
        status,
        rtt_us: Some(40),
        t_first_byte_us: Some(90),
        t_total_us: 200,
        bytes: 0,
        truncated: false,
        retransmits_received: 0,
        ooo_segments: 0,
        icmp: None,
    }
}

#[test]
fn status_is_the_protocol_s_word_and_tcp_status_the_connection_s() {
    use AppOutcome::{ApplicationError, ProtocolError, Success};
    let cases = [
        (Status::Success, Some(Success), "success"),
        (Status::Success, Some(ProtocolError), "protocol-error"),
        (Status::Success, Some(ApplicationError), "application-error"),
        // What came before the connection went wrong already told the protocol apart.
        (Status::Reset, Some(ProtocolError), "protocol-error"),
        (
            Status::DataTimeout,
            Some(ApplicationError),
            "application-error",
        ),
        // A good start that never finished is the connection's failure.
        (Status::DataTimeout, Some(Success), "io-timeout"),
        (Status::DataTimeout, None, "io-timeout"),
        (Status::Refused, None, "connection-refused"),
        (Status::SynTimeout, None, "connection-timeout"),
        (Status::Reset, None, "connection-closed"),
        (Status::Closed, None, "connection-closed"),
        (Status::Unreachable, None, "unreachable"),
    ];
    for (tcp, app, want) in cases {
        assert_eq!(row_status(tcp, app), want, "{tcp:?} {app:?}");
    }
}

/// `-M tls` against an HTTP server: the connection went well (`tcp_status` success), the
/// protocol did not (`status` protocol-error); the target's port is `sport`, as in a scan.
#[test]
fn a_row_names_the_target_s_port_sport_and_says_both_outcomes() {
    let app = AnyApp::build(AppKind::Tls, &AppOptions::default()).unwrap();
    let reply = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    let (values, said) = app.describe_reply(reply, None);
    let outcome = Outcome {
        bytes: reply.len() as u64,
        ..outcome(Status::Success)
    };
    let row = GrabRow {
        outcome: &outcome,
        app_outcome: Some(said),
        name: None,
        app_fields: GrabApp::fields(&app),
        app_values: &values,
        timestamp_us: 1,
    };
    assert_eq!(row.get("saddr"), Value::Str("198.18.0.7".into()));
    assert_eq!(row.get("sport"), Value::Int(443));
    assert_eq!(row.get("dport"), Value::Int(61000));
    assert_eq!(row.get("status"), Value::Str("protocol-error".into()));
    assert_eq!(row.get("tcp_status"), Value::Str("success".into()));
}
