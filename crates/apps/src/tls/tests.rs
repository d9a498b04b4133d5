use tls_parser::{
    parse_tls_client_hello_extensions, parse_tls_plaintext, TlsExtension, TlsExtensionType,
    TlsMessage, TlsMessageHandshake,
};

use super::*;
use crate::progress::testing;
use crate::TlsVersion;

const RSA_CHAIN: &[u8] = include_bytes!("../../testdata/tls12_rsa_chain.bin");
const ECDSA_SELF_SIGNED: &[u8] = include_bytes!("../../testdata/tls12_ecdsa_selfsigned.bin");
const ALERT: &[u8] = include_bytes!("../../testdata/tls12_alert_handshake_failure.bin");
const TLS13: &[u8] = include_bytes!("../../testdata/tls13_rsa.bin");
const HELLO_RETRY: &[u8] = include_bytes!("../../testdata/tls13_hello_retry.bin");

/// SHA-256 of the certificates' DER as `openssl x509 -outform DER | sha256sum` gave them when
/// the fixtures were made (testdata/capture.sh).
const LEAF_SHA256: &str = "a6ec0c5b5684e0076a5dedd3ef0b821bddeb0bc6acc613f9990bc1f25fa7a700";
const CA_SHA256: &str = "3a8828785d4bd68e8b99072e1a4e35c338ba9b993059dadd86513ba67b3a1ae8";
const ECDSA_SHA256: &str = "1de39bf691682de93fb3e37ab991392e498be6ea0c06489729efb8bdda59c930";

fn app(tls_max: TlsVersion, sni: Option<&str>) -> TlsApp {
    TlsApp::new(&AppOptions {
        tls_max,
        tls_sni: sni.map(str::to_string),
        ..AppOptions::default()
    })
    .unwrap()
}

fn default_app() -> TlsApp {
    app(TlsVersion::default(), None)
}

/// The ClientHello `app` sends to 198.18.0.7:443, parsed back by tls-parser: its version,
/// cipher suites, and extensions.
fn sent_hello(app: &TlsApp) -> (u16, Vec<u16>, Vec<TlsExtension<'static>>) {
    let mut buf = vec![0; app.max_request_len()];
    let len = app.write_request(&mut buf, "198.18.0.7".parse().unwrap(), 443);
    assert_eq!(len, buf.len());
    let bytes: &'static [u8] = buf.leak();
    let (rest, record) = parse_tls_plaintext(bytes).expect("a TLS record");
    assert!(rest.is_empty());
    let [TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello))] = record.msg.as_slice()
    else {
        panic!("not one ClientHello: {:?}", record.msg);
    };
    let (rest, extensions) = parse_tls_client_hello_extensions(hello.ext.unwrap()).unwrap();
    assert!(rest.is_empty(), "extensions parse to the end");
    let ciphers = hello.ciphers.iter().map(|c| c.0).collect();
    (hello.version.0, ciphers, extensions)
}

fn values(received: &[u8]) -> Vec<Value> {
    let mut values = Vec::new();
    default_app().describe_into(received, &mut values);
    assert_eq!(values.len(), TLS_FIELDS.len());
    values
}

fn field<'v>(values: &'v [Value], name: &str) -> &'v Value {
    let at = TLS_FIELDS.iter().position(|f| f.name == name).unwrap();
    &values[at]
}

fn text(value: &str) -> Value {
    Value::Str(value.to_string())
}

/// Where the flight's first handshake record (the ServerHello) ends.
fn first_record_end(flight: &[u8]) -> usize {
    5 + usize::from(u16::from_be_bytes([flight[3], flight[4]]))
}

/// `flight`'s records with their handshake messages re-framed: all in one record
/// (`size` None), or cut into records of `size` bytes so that messages span records.
fn reframed(flight: &[u8], size: Option<usize>) -> Vec<u8> {
    let mut handshake = Vec::new();
    let mut rest = flight;
    while rest.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        assert_eq!(rest[0], 22, "only handshake records");
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    let mut out = Vec::new();
    for piece in handshake.chunks(size.unwrap_or(handshake.len())) {
        out.extend_from_slice(&[22, 3, 3]);
        out.extend_from_slice(&(piece.len() as u16).to_be_bytes());
        out.extend_from_slice(piece);
    }
    out
}

#[test]
fn the_first_flight_hello_for_tls_1_2_offers_a_modern_suite_list() {
    let (version, ciphers, extensions) = sent_hello(&app(TlsVersion::Tls12, None));
    assert_eq!(version, 0x0303);
    assert_eq!(&ciphers[..2], &[0xc02b, 0xc02f], "ECDHE AES-GCM first");
    for suite in [0xcca8, 0xcca9, 0xc013, 0x002f] {
        assert!(ciphers.contains(&suite), "{suite:04x}");
    }
    assert!(
        !ciphers.contains(&0x1301),
        "no TLS 1.3 suite without TLS 1.3"
    );
    assert!(extensions.iter().all(|e| !matches!(
        e,
        TlsExtension::SNI(_) | TlsExtension::SupportedVersions(_) | TlsExtension::KeyShare(_)
    )));
    let has = |kind: TlsExtensionType| extensions.iter().any(|e| TlsExtensionType::from(e) == kind);
    for kind in [
        TlsExtensionType::SupportedGroups,
        TlsExtensionType::EcPointFormats,
        TlsExtensionType::SignatureAlgorithms,
        TlsExtensionType::RenegotiationInfo,
        TlsExtensionType::ExtendedMasterSecret,
    ] {
        assert!(has(kind), "{kind:?}");
    }
}

#[test]
fn a_tls_1_3_hello_adds_its_suites_versions_and_an_x25519_key_share() {
    let (version, ciphers, extensions) = sent_hello(&app(TlsVersion::Tls13, Some("sonde.test")));
    assert_eq!(version, 0x0303, "the legacy version stays 1.2");
    assert_eq!(&ciphers[..3], &[0x1301, 0x1302, 0x1303]);
    let versions = extensions.iter().find_map(|e| match e {
        TlsExtension::SupportedVersions(v) => Some(v.iter().map(|v| v.0).collect::<Vec<_>>()),
        _ => None,
    });
    assert_eq!(versions, Some(vec![0x0304, 0x0303]));
    let key_share = extensions.iter().find_map(|e| match e {
        TlsExtension::KeyShare(bytes) => Some(*bytes),
        _ => None,
    });
    // client_shares length 36, group x25519 (29), key length 32, the key.
    let mut expected = vec![0, 36, 0, 29, 0, 32];
    expected.extend_from_slice(&hello::X25519_PUBLIC_KEY);
    assert_eq!(key_share, Some(expected.as_slice()));
    let sni = extensions.iter().find_map(|e| match e {
        TlsExtension::SNI(names) => Some(names.clone()),
        _ => None,
    });
    assert_eq!(sni.unwrap()[0].1, b"sonde.test");
}

#[test]
fn older_maximum_versions_lower_the_legacy_version() {
    assert_eq!(sent_hello(&app(TlsVersion::Tls10, None)).0, 0x0301);
    assert_eq!(sent_hello(&app(TlsVersion::Tls11, None)).0, 0x0302);
}

#[test]
fn the_random_depends_only_on_the_target() {
    let app = app(TlsVersion::Tls13, None);
    let render = |addr: &str, port| {
        let mut buf = vec![0; app.max_request_len()];
        let len = app.write_request(&mut buf, addr.parse().unwrap(), port);
        buf.truncate(len);
        buf
    };
    let first = render("198.18.0.7", 443);
    assert_eq!(
        first,
        render("198.18.0.7", 443),
        "a retransmission is identical"
    );
    let other = render("198.18.0.8", 443);
    let other_port = render("198.18.0.7", 8443);
    let random = 11..43;
    assert_ne!(first[random.clone()], other[random.clone()]);
    assert_ne!(first[random.clone()], other_port[random.clone()]);
    assert_ne!(first[44..76], other[44..76], "the session id too");
    assert_eq!(first[..11], other[..11]);
    assert_eq!(first[76..], other[76..]);
    let mut short = vec![0; app.max_request_len() - 1];
    assert_eq!(
        app.write_request(&mut short, "198.18.0.7".parse().unwrap(), 443),
        0
    );
}

#[test]
fn sni_comes_from_tls_sni_or_a_host_name_never_an_address() {
    let sni = |options: AppOptions| {
        let app = TlsApp::new(&options).unwrap();
        let (_, _, extensions) = sent_hello(&app);
        extensions.iter().find_map(|e| match e {
            TlsExtension::SNI(names) => Some(String::from_utf8(names[0].1.to_vec()).unwrap()),
            _ => None,
        })
    };
    let host = |host: &str| AppOptions {
        http_host: Some(host.to_string()),
        ..AppOptions::default()
    };
    assert_eq!(
        sni(host("www.sonde.test:8443")),
        Some("www.sonde.test".to_string())
    );
    assert_eq!(sni(host("sonde.test")), Some("sonde.test".to_string()));
    assert_eq!(sni(host("198.18.0.7")), None);
    assert_eq!(sni(host("198.18.0.7:443")), None);
    assert_eq!(sni(host("[2001:2::7]:443")), None);
    let sni_option = AppOptions {
        tls_sni: Some("a.sonde.test".to_string()),
        ..host("b.sonde.test")
    };
    assert_eq!(sni(sni_option), Some("a.sonde.test".to_string()));

    let long_label = format!("{}.test", "a".repeat(64));
    for bad in [
        "198.18.0.7",
        "2001:2::7",
        "bad name",
        "",
        &"a".repeat(254),
        &long_label,
    ] {
        let options = AppOptions {
            tls_sni: Some(bad.to_string()),
            ..AppOptions::default()
        };
        let err = TlsApp::new(&options).unwrap_err();
        assert!(err.starts_with("bad --tls-sni"), "{err}");
    }
    let label = "a".repeat(63);
    let longest = AppOptions {
        tls_sni: Some(format!("{label}.{label}.{label}.{}", "a".repeat(61))),
        tls_max: TlsVersion::Tls13,
        ..AppOptions::default()
    };
    assert!(TlsApp::new(&longest).unwrap().max_request_len() <= crate::MAX_REQUEST_LEN);
}

#[test]
fn a_tls_1_2_flight_is_complete_exactly_at_its_server_hello_done() {
    for flight in [RSA_CHAIN, ECDSA_SELF_SIGNED] {
        let app = default_app();
        for cut in 0..flight.len() {
            assert!(!app.is_complete(&flight[..cut]), "cut {cut}");
            assert_eq!(values(&flight[..cut]).len(), TLS_FIELDS.len());
        }
        assert!(app.is_complete(flight));
    }
}

#[test]
fn the_rsa_chain_is_described_in_full() {
    let v = values(RSA_CHAIN);
    assert_eq!(field(&v, "tls_version"), &text("TLSv1.2"));
    assert_eq!(
        field(&v, "tls_cipher"),
        &text("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    );
    assert_eq!(field(&v, "tls_alert"), &Value::Null);
    assert_eq!(
        field(&v, "tls_cert_subject"),
        &text("C=DE, O=Sonde Lab, CN=sonde.test")
    );
    assert_eq!(
        field(&v, "tls_cert_issuer"),
        &text("C=DE, O=Sonde Lab, CN=Sonde Lab Test CA")
    );
    assert_eq!(
        field(&v, "tls_cert_sans"),
        &text("sonde.test,www.sonde.test,198.18.0.7,2001:2::7")
    );
    assert_eq!(
        field(&v, "tls_cert_not_before"),
        &text("2026-11-22T20:50:58Z")
    );
    assert_eq!(
        field(&v, "tls_cert_not_after"),
        &text("2029-02-24T20:50:58Z")
    );
    assert_eq!(field(&v, "tls_cert_sha256"), &text(LEAF_SHA256));
    assert_eq!(field(&v, "tls_chain_len"), &Value::Int(2));
    let Value::Json(chain) = field(&v, "tls_chain") else {
        panic!()
    };
    assert_eq!(chain[0]["sha256"], LEAF_SHA256);
    assert_eq!(chain[0]["subject"], "C=DE, O=Sonde Lab, CN=sonde.test");
    assert_eq!(chain[1]["sha256"], CA_SHA256);
    assert_eq!(
        chain[1]["subject"],
        "C=DE, O=Sonde Lab, CN=Sonde Lab Test CA"
    );
    assert_eq!(
        chain[1]["issuer"], chain[1]["subject"],
        "the CA is self-signed"
    );
}

#[test]
fn the_self_signed_ecdsa_certificate_is_described() {
    let v = values(ECDSA_SELF_SIGNED);
    assert_eq!(
        field(&v, "tls_cipher"),
        &text("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
    );
    assert_eq!(
        field(&v, "tls_cert_subject"),
        &text("CN=self-signed.sonde.test")
    );
    assert_eq!(
        field(&v, "tls_cert_issuer"),
        &text("CN=self-signed.sonde.test")
    );
    assert_eq!(field(&v, "tls_cert_sans"), &text("self-signed.sonde.test"));
    assert_eq!(field(&v, "tls_cert_sha256"), &text(ECDSA_SHA256));
    assert_eq!(field(&v, "tls_chain_len"), &Value::Int(1));
}

#[test]
fn reassembly_does_not_depend_on_record_boundaries() {
    let whole = values(RSA_CHAIN);
    let app = default_app();
    // 10-byte records: about 220 of them, every message spanning many.
    for size in [None, Some(10), Some(100), Some(1000)] {
        let flight = reframed(RSA_CHAIN, size);
        assert_eq!(values(&flight), whole, "records of {size:?}");
        assert!(app.is_complete(&flight));
        for cut in 0..flight.len() {
            assert!(
                !app.is_complete(&flight[..cut]),
                "records of {size:?}, cut {cut}"
            );
        }
    }
    let one_byte_records = reframed(RSA_CHAIN, Some(1));
    assert_eq!(
        read_flight(&one_byte_records, false).end,
        FlightEnd::TooManyRecords,
        "2000 records are more than a flight has"
    );
}

#[test]
fn an_alert_is_complete_and_named() {
    let app = default_app();
    for cut in 0..ALERT.len() {
        assert!(!app.is_complete(&ALERT[..cut]), "cut {cut}");
    }
    assert!(app.is_complete(ALERT));
    let v = values(ALERT);
    assert_eq!(field(&v, "tls_alert"), &text("handshake_failure"));
    assert_eq!(field(&v, "tls_version"), &Value::Null);
    assert_eq!(field(&v, "tls_cert_sha256"), &Value::Null);
    assert_eq!(field(&v, "tls_chain_len"), &Value::Null);
}

#[test]
fn a_tls_1_3_server_hello_is_complete_and_hides_the_certificate() {
    let app = app(TlsVersion::Tls13, Some("sonde.test"));
    for flight in [TLS13, HELLO_RETRY] {
        let end = first_record_end(flight);
        for cut in 0..flight.len() {
            assert_eq!(app.is_complete(&flight[..cut]), cut >= end, "cut {cut}");
        }
        let v = values(flight);
        assert_eq!(field(&v, "tls_version"), &text("TLSv1.3"));
        assert_eq!(field(&v, "tls_cipher"), &text("TLS_AES_128_GCM_SHA256"));
        assert_eq!(field(&v, "tls_alert"), &Value::Null);
        for name in [
            "tls_cert_subject",
            "tls_cert_sha256",
            "tls_chain_len",
            "tls_chain",
        ] {
            assert_eq!(field(&v, name), &Value::Null, "{name}");
        }
    }
}

#[test]
fn bytes_that_are_not_tls_end_the_reply_with_nulls() {
    let app = default_app();
    for reply in [
        &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..],
        b"SSH-2.0-OpenSSH_9.2p1\r\n",
        b"\x80\x2e\x01\x00\x02", // SSLv2
        b"\x16\x07",             // major version 7
    ] {
        assert!(app.is_complete(reply), "{reply:?}");
        assert!(values(reply).iter().all(|v| *v == Value::Null), "{reply:?}");
    }
    assert!(!app.is_complete(b"\x16"), "a record's first byte alone");
    assert!(!app.is_complete(b""));
}

#[test]
fn garbled_records_end_the_reply_without_panicking() {
    let app = default_app();
    // A handshake record whose ServerHello does not parse.
    let bad_hello = b"\x16\x03\x03\x00\x06\x02\x00\x00\x02\x99\x99";
    assert!(app.is_complete(bad_hello));
    // A record longer than TLS allows.
    assert!(app.is_complete(b"\x16\x03\x03\xff\xff"));
    // A one-byte alert.
    assert!(app.is_complete(b"\x15\x03\x03\x00\x01\x02"));
    // The real flight with its certificate bytes flipped: values, no panic.
    let mut broken = RSA_CHAIN.to_vec();
    for byte in &mut broken[200..900] {
        *byte ^= 0x5a;
    }
    let v = values(&broken);
    assert_eq!(field(&v, "tls_version"), &text("TLSv1.2"));
    assert_eq!(field(&v, "tls_cert_subject"), &Value::Null);
}

#[test]
fn pseudo_random_bytes_never_panic() {
    let app = default_app();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for len in 0..2000 {
        let bytes: Vec<u8> = (0..len % 300)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let mut prefixed = vec![0x16, 0x03, 0x03];
        prefixed.extend_from_slice(&bytes);
        for reply in [&bytes[..], &prefixed] {
            let _ = app.is_complete(reply);
            assert_eq!(values(reply).len(), TLS_FIELDS.len());
        }
    }
}

#[test]
fn alerts_have_their_rfc_names() {
    assert_eq!(alert_name(40), "handshake_failure");
    assert_eq!(alert_name(48), "unknown_ca");
    assert_eq!(alert_name(70), "protocol_version");
    assert_eq!(alert_name(112), "unrecognized_name");
    assert_eq!(alert_name(111), "certificate_unobtainable");
    assert_eq!(alert_name(0), "close_notify");
    assert_eq!(alert_name(200), "alert_200");
    assert_eq!(cipher_name(0xc02f), "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
    assert_eq!(cipher_name(0xfefe), "0xfefe");
    assert_eq!(version_name(0x0301), "TLSv1.0");
    assert_eq!(version_name(0x7f12), "0x7f12");
}

/// Whatever the segments and records, the check that reads on from its cursor answers as the
/// check of the whole prefix.
#[test]
fn fed_by_segments_it_answers_as_on_the_whole() {
    let app = default_app();
    let mut garbled_later = reframed(RSA_CHAIN, Some(100));
    garbled_later[2 * 105] = 0x99; // the third record's content type
    for flight in [
        RSA_CHAIN.to_vec(),
        reframed(RSA_CHAIN, Some(10)),
        reframed(RSA_CHAIN, Some(1000)),
        reframed(RSA_CHAIN, Some(1)),
        garbled_later,
        ECDSA_SELF_SIGNED.to_vec(),
        ALERT.to_vec(),
        TLS13.to_vec(),
        HELLO_RETRY.to_vec(),
        b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
    ] {
        testing::assert_any_segmenting_agrees(&app, &flight);
    }
}

/// A handshake record holding `message` whole.
fn record(message: &[u8]) -> Vec<u8> {
    let mut out = vec![22, 3, 3];
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// A flight of 250 records fed in 20-byte segments: each record's header is read about once,
/// not once per segment from the first record on.
#[test]
fn a_flight_of_many_records_fed_by_segments_is_read_in_linear_work() {
    let hello_len = 4 + usize::from(u16::from_be_bytes([RSA_CHAIN[7], RSA_CHAIN[8]]));
    let handshake = reframed(RSA_CHAIN, None);
    assert_eq!(handshake[5], 2, "the flight starts with its ServerHello");
    let mut flight = record(&handshake[5..5 + hello_len]);
    // CertificateStatus messages, which the check skips without reading their bodies.
    let mut status = vec![22, 0, 0, 40];
    status.extend_from_slice(&[0xab; 40]);
    for _ in 0..250 {
        flight.extend_from_slice(&record(&status));
    }
    flight.extend_from_slice(&record(&[14, 0, 0, 0]));
    let fed = testing::feed(&default_app(), &flight, 20);
    assert_eq!(fed.complete_at, Some(flight.len()));
    // A record header and a message header per record, the ServerHello's body, and per
    // call the header of the record still cut.
    let headers = 252 * (5 + 4) + hello_len as u64;
    let bound = headers + 5 * fed.calls;
    assert!(
        fed.looked_at <= bound,
        "{} bytes read for {headers} bytes of headers in {} calls",
        fed.looked_at,
        fed.calls
    );
}

#[test]
fn a_server_hello_longer_than_any_is_garbled() {
    let mut flight = vec![22, 3, 3, 0, 4, 2, 0x01, 0x01, 0x00];
    assert_eq!(read_flight(&flight, false).end, FlightEnd::Garbled);
    flight[6..9].copy_from_slice(&[0x01, 0x00, 0x47]);
    assert_eq!(read_flight(&flight, false).end, FlightEnd::Incomplete);
}
