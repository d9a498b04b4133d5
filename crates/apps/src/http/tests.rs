use super::*;
use crate::progress::testing;

const NGINX_LENGTH: &[u8] = include_bytes!("../../testdata/http_nginx_content_length.bin");
const NGINX_CHUNKED: &[u8] = include_bytes!("../../testdata/http_nginx_chunked.bin");
const NGINX_301: &[u8] = include_bytes!("../../testdata/http_nginx_301.bin");
const CHUNKED: &[u8] = include_bytes!("../../testdata/http_chunked.bin");
const CLOSE: &[u8] = include_bytes!("../../testdata/http_close.bin");
const NO_CONTENT: &[u8] = include_bytes!("../../testdata/http_204.bin");
const EARLY_HINTS: &[u8] = include_bytes!("../../testdata/http_redirect_early_hints.bin");
const BINARY: &[u8] = include_bytes!("../../testdata/http_binary_body.bin");
const GARBAGE: &[u8] = include_bytes!("../../testdata/http_garbage.bin");

fn app_with(options: AppOptions) -> HttpApp {
    HttpApp::new(&options).unwrap()
}

fn app() -> HttpApp {
    app_with(AppOptions::default())
}

fn request(app: &HttpApp, addr: &str, port: u16) -> String {
    let mut buf = vec![0; app.max_request_len()];
    let len = app.write_request(&mut buf, addr.parse().unwrap(), port);
    String::from_utf8(buf[..len].to_vec()).unwrap()
}

fn values(app: &HttpApp, received: &[u8]) -> Vec<Value> {
    let mut values = Vec::new();
    app.describe_into(received, &mut values);
    assert_eq!(values.len(), HTTP_FIELDS.len());
    values
}

fn field<'v>(values: &'v [Value], name: &str) -> &'v Value {
    &values[HTTP_FIELDS.iter().position(|f| f.name == name).unwrap()]
}

fn text(value: &str) -> Value {
    Value::Str(value.to_string())
}

fn headers(values: &[Value]) -> serde_json::Value {
    let Value::Json(headers) = field(values, "http_headers") else {
        panic!("{values:?}")
    };
    headers.clone()
}

/// Asserts the reply is incomplete at every cut before its end and complete at the end.
fn complete_only_at_the_end(app: &HttpApp, reply: &[u8]) {
    for cut in 0..reply.len() {
        assert!(
            !app.is_complete(&reply[..cut]),
            "cut {cut} of {}",
            reply.len()
        );
        assert_eq!(values(app, &reply[..cut]).len(), HTTP_FIELDS.len());
    }
    assert!(app.is_complete(reply));
}

#[test]
fn the_request_names_the_target_as_host() {
    assert_eq!(
        request(&app(), "198.18.0.7", 80),
        "GET / HTTP/1.1\r\nHost: 198.18.0.7\r\nUser-Agent: sonde/0.1.0\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    );
    let v6 = request(&app(), "2001:2::7", 8080);
    assert!(
        v6.starts_with("GET / HTTP/1.1\r\nHost: [2001:2::7]:8080\r\n"),
        "{v6}"
    );
    // The longest lab address is 3 characters shorter than the longest IPv6 text
    // (ffff:ffff:… has 39), which max_request_len allows for.
    let longest = request(&app(), "2001:2:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
    assert_eq!(longest.len() + 3, app().max_request_len());
}

#[test]
fn options_shape_the_request() {
    let app = app_with(AppOptions {
        http_method: "HEAD".to_string(),
        http_path: "/status?full=1".to_string(),
        http_host: Some("www.sonde.test".to_string()),
        http_headers: vec!["Accept-Language: en".to_string(), "X-Scan:1".to_string()],
        user_agent: "research-scan (+https://sonde.test/about)".to_string(),
        ..AppOptions::default()
    });
    let sent = request(&app, "198.18.0.7", 80);
    assert_eq!(
        sent,
        "HEAD /status?full=1 HTTP/1.1\r\nHost: www.sonde.test\r\n\
         User-Agent: research-scan (+https://sonde.test/about)\r\nAccept: */*\r\n\
         Accept-Language: en\r\nX-Scan:1\r\nConnection: close\r\n\r\n"
    );
    // On another port the name carries it, as curl sends it; max_request_len has room.
    let on_65535 = request(&app, "198.18.0.7", 65535);
    assert!(
        on_65535.contains("\r\nHost: www.sonde.test:65535\r\n"),
        "{on_65535}"
    );
    assert_eq!(on_65535.len(), app.max_request_len());
    // A reply to HEAD has no body, whatever its Content-Length says.
    let head_of_page = &NGINX_LENGTH[..NGINX_LENGTH.len() - 177];
    assert!(app.is_complete(head_of_page));
    let v = values(&app, head_of_page);
    assert_eq!(field(&v, "http_body_len"), &Value::Int(0));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
    let no_agent = app_with(AppOptions {
        user_agent: String::new(),
        ..AppOptions::default()
    });
    assert!(!request(&no_agent, "198.18.0.7", 80).contains("User-Agent"));
}

#[test]
fn bad_options_are_refused_with_one_line() {
    let cases = [
        AppOptions {
            http_path: "index.html".into(),
            ..AppOptions::default()
        },
        AppOptions {
            http_path: "/a b".into(),
            ..AppOptions::default()
        },
        AppOptions {
            http_path: "/caf\u{e9}".into(),
            ..AppOptions::default()
        },
        AppOptions {
            http_method: "GET /".into(),
            ..AppOptions::default()
        },
        AppOptions {
            http_method: String::new(),
            ..AppOptions::default()
        },
        AppOptions {
            http_host: Some("a\r\nX: y".into()),
            ..AppOptions::default()
        },
        AppOptions {
            http_host: Some(String::new()),
            ..AppOptions::default()
        },
        AppOptions {
            http_headers: vec!["NoColon".into()],
            ..AppOptions::default()
        },
        AppOptions {
            http_headers: vec!["X: a\r\nInjected: b".into()],
            ..AppOptions::default()
        },
        AppOptions {
            http_headers: vec![": empty name".into()],
            ..AppOptions::default()
        },
        AppOptions {
            http_headers: vec!["Bad Name: x".into()],
            ..AppOptions::default()
        },
        AppOptions {
            user_agent: "a\nb".into(),
            ..AppOptions::default()
        },
    ];
    for options in cases {
        let err = HttpApp::new(&options).unwrap_err();
        assert!(err.starts_with("bad --"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn a_content_length_reply_from_nginx() {
    let app = app();
    complete_only_at_the_end(&app, NGINX_LENGTH);
    let v = values(&app, NGINX_LENGTH);
    assert_eq!(field(&v, "http_status"), &Value::Int(200));
    assert_eq!(field(&v, "http_reason"), &text("OK"));
    let h = headers(&v);
    assert_eq!(h["server"], "nginx/1.22.1");
    assert_eq!(h["content-length"], "177");
    assert_eq!(h["etag"], "\"6b03583d-b1\"");
    let body = &NGINX_LENGTH[NGINX_LENGTH.len() - 177..];
    assert!(body.starts_with(b"<!DOCTYPE html>"));
    assert_eq!(
        field(&v, "http_body"),
        &text(std::str::from_utf8(body).unwrap())
    );
    assert_eq!(field(&v, "http_body_len"), &Value::Int(177));
    assert_eq!(field(&v, "http_body_sha256"), &Value::Str(sha256_hex(body)));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
}

#[test]
fn a_cut_content_length_body_is_truncated() {
    let cut = &NGINX_LENGTH[..NGINX_LENGTH.len() - 77];
    let v = values(&app(), cut);
    assert_eq!(field(&v, "http_body_len"), &Value::Int(100));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(true));
    // Bytes after the announced length are not body.
    let mut longer = NGINX_LENGTH.to_vec();
    longer.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let v = values(&app(), &longer);
    assert_eq!(field(&v, "http_body_len"), &Value::Int(177));
    assert!(app().is_complete(&longer));
}

#[test]
fn a_chunked_reply_from_nginx_is_decoded() {
    let app = app();
    complete_only_at_the_end(&app, NGINX_CHUNKED);
    let v = values(&app, NGINX_CHUNKED);
    let Value::Str(body) = field(&v, "http_body") else {
        panic!()
    };
    assert!(
        body.starts_with("<!DOCTYPE html>") && body.ends_with("</html>\n"),
        "{body}"
    );
    assert!(body.contains("It works, chunked") && !body.contains("\r\n0\r\n"));
    assert_eq!(field(&v, "http_body_len"), &Value::Int(0xba));
    assert_eq!(headers(&v)["transfer-encoding"], "chunked");
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
}

#[test]
fn chunks_and_trailers_are_decoded_and_cuts_are_truncated() {
    let app = app();
    complete_only_at_the_end(&app, CHUNKED);
    let v = values(&app, CHUNKED);
    let expected = r#"{"status":"ok","items":[1,2,3],"note":"chunked"}"#.to_string() + "\n";
    assert_eq!(field(&v, "http_body"), &text(&expected));
    assert_eq!(
        field(&v, "http_body_sha256"),
        &Value::Str(sha256_hex(expected.as_bytes()))
    );
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
    // Cut inside the second chunk: the first chunk and part of the second, truncated.
    let head_len = CHUNKED.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // "f\r\n", 15 bytes, CRLF, "10\r\n", then 6 of the second chunk's 16.
    let cut = &CHUNKED[..head_len + 3 + 15 + 2 + 4 + 6];
    let v = values(&app, cut);
    assert_eq!(field(&v, "http_body"), &text(r#"{"status":"ok","items"#));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(true));
}

#[test]
fn a_malformed_chunked_body_is_truncated_not_complete() {
    let reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n";
    assert!(!app().is_complete(reply));
    let v = values(&app(), reply);
    assert_eq!(field(&v, "http_body"), &text("hello"));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(true));
}

#[test]
fn a_close_delimited_body_is_never_complete_by_itself() {
    let app = app();
    for cut in 0..=CLOSE.len() {
        assert!(!app.is_complete(&CLOSE[..cut]), "cut {cut}");
    }
    let v = values(&app, CLOSE);
    assert_eq!(
        field(&v, "http_body"),
        &text("hello from a close-delimited body\n")
    );
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
}

#[test]
fn no_content_has_no_body() {
    let app = app();
    complete_only_at_the_end(&app, NO_CONTENT);
    let v = values(&app, NO_CONTENT);
    assert_eq!(field(&v, "http_status"), &Value::Int(204));
    assert_eq!(field(&v, "http_reason"), &text("No Content"));
    assert_eq!(field(&v, "http_body"), &text(""));
    assert_eq!(field(&v, "http_body_len"), &Value::Int(0));
    assert_eq!(
        field(&v, "http_body_sha256"),
        &text("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    );
}

#[test]
fn the_final_response_follows_early_hints() {
    let app = app();
    complete_only_at_the_end(&app, EARLY_HINTS);
    let v = values(&app, EARLY_HINTS);
    assert_eq!(field(&v, "http_status"), &Value::Int(301));
    assert_eq!(headers(&v)["location"], "https://sonde.test/");
    assert!(
        headers(&v).get("link").is_none(),
        "the 103's headers are not the final ones"
    );
    let v = values(&app, NGINX_301);
    assert_eq!(field(&v, "http_status"), &Value::Int(301));
    assert_eq!(field(&v, "http_reason"), &text("Moved Permanently"));
    assert!(headers(&v)["location"]
        .as_str()
        .unwrap()
        .ends_with("/index.html"));
    complete_only_at_the_end(&app, NGINX_301);
}

#[test]
fn binary_bodies_are_hashed_byte_for_byte() {
    let v = values(&app(), BINARY);
    let bytes: Vec<u8> = (0..=255).collect();
    assert_eq!(field(&v, "http_body_len"), &Value::Int(256));
    assert_eq!(
        field(&v, "http_body_sha256"),
        &Value::Str(hex(&Sha256::digest(&bytes)))
    );
    assert_eq!(
        field(&v, "http_body_sha256"),
        &text("40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880")
    );
    let Value::Str(body) = field(&v, "http_body") else {
        panic!()
    };
    assert!(
        body.contains('\u{fffd}'),
        "invalid UTF-8 replaced in the text"
    );
}

#[test]
fn repeated_headers_are_joined_and_names_lower_cased() {
    let reply = b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSET-COOKIE: b=2\r\nX-Empty:\r\nContent-Length: 0\r\n\r\n";
    let h = headers(&values(&app(), reply));
    assert_eq!(h["set-cookie"], "a=1, b=2");
    assert_eq!(h["x-empty"], "");
    assert_eq!(h.as_object().unwrap().len(), 3);
}

#[test]
fn what_is_not_http_is_complete_at_once_and_kept_raw() {
    let app = app();
    assert!(app.is_complete(GARBAGE));
    assert!(!app.is_complete(b""));
    let v = values(&app, GARBAGE);
    assert_eq!(field(&v, "http_status"), &Value::Null);
    assert_eq!(field(&v, "http_headers"), &Value::Null);
    assert_eq!(
        field(&v, "http_body_len"),
        &Value::Int(GARBAGE.len() as u64)
    );
    assert_eq!(
        field(&v, "http_body_sha256"),
        &Value::Str(sha256_hex(GARBAGE))
    );
    assert_eq!(field(&v, "http_truncated"), &Value::Null);
    let nothing = values(&app, b"");
    assert_eq!(field(&nothing, "http_status"), &Value::Null);
    assert_eq!(field(&nothing, "http_body"), &Value::Null);
}

#[test]
fn a_cut_head_keeps_its_status() {
    let cut = &NGINX_LENGTH[..40];
    let v = values(&app(), cut);
    assert_eq!(field(&v, "http_status"), &Value::Int(200));
    assert_eq!(field(&v, "http_headers"), &Value::Null);
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(true));
}

#[test]
fn pseudo_random_bytes_never_panic() {
    let app = app();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for len in 0..2000 {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut reply = head.to_vec();
        reply.extend((0..len % 200).map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let alphabet = b"0123456789abcdef\r\n;: xH";
            alphabet[(state % alphabet.len() as u64) as usize]
        }));
        for bytes in [&reply[..], &reply[head.len()..]] {
            let _ = app.is_complete(bytes);
            assert_eq!(values(&app, bytes).len(), HTTP_FIELDS.len());
        }
    }
}

fn head_app() -> HttpApp {
    app_with(AppOptions {
        http_method: "HEAD".to_string(),
        ..AppOptions::default()
    })
}

/// A chunked body with bare LF line ends (RFC 9112 §2.2), mixed with CRLF, with extensions
/// and trailers: decoded byte for byte, complete exactly at its end.
#[test]
fn a_chunked_body_with_bare_lf_line_ends_is_decoded() {
    let body: &[u8] = b"1a;name=value\nabcdefghijklmnopqrstuvwxyz\n5\r\n\x00\r\n\n\xff\r\n\
        10 ; q=\"a b\"\r\n0123456789abcdef\n0;end\nX-Checksum: 42\r\nX-More: yes\n\n";
    let expected: &[u8] = b"abcdefghijklmnopqrstuvwxyz\x00\r\n\n\xff0123456789abcdef";
    for head in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n",
    ] {
        let reply = [head, body].concat();
        let app = app();
        complete_only_at_the_end(&app, &reply);
        let v = values(&app, &reply);
        assert_eq!(
            field(&v, "http_body_len"),
            &Value::Int(expected.len() as u64)
        );
        assert_eq!(
            field(&v, "http_body_sha256"),
            &Value::Str(sha256_hex(expected))
        );
        assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
        assert_eq!(headers(&v)["transfer-encoding"], "chunked");
    }
}

/// Whatever the segments, the check that reads on from its cursor answers as the check of
/// the whole prefix, for every fixture, GET and HEAD.
#[test]
fn fed_by_segments_it_answers_as_on_the_whole() {
    let bare_lf: &[u8] = b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3;x\nabc\n0\nA: b\n\n";
    let early_interims: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n\r\nHTTP/1.1 103 Early Hints\n\
        Link: </a>\n\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP";
    let folded: &[u8] = b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n \r\nContent-Length: 1\r\n\r\nz";
    for reply in [
        NGINX_LENGTH,
        NGINX_CHUNKED,
        NGINX_301,
        CHUNKED,
        CLOSE,
        NO_CONTENT,
        EARLY_HINTS,
        BINARY,
        GARBAGE,
        bare_lf,
        early_interims,
        folded,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",
        b"\r\n\nHTTP/1.1 204 No Content\r\n\r\n",
    ] {
        for app in [app(), head_app()] {
            testing::assert_any_segmenting_agrees(&app, reply);
        }
    }
}

/// Reads what `feed` reports for `reply` in segments of `segment` bytes, checking it is
/// complete exactly at its end.
fn fed_whole(reply: &[u8], segment: usize) -> u64 {
    let fed = testing::feed(&app(), reply, segment);
    assert_eq!(fed.complete_at, Some(reply.len()));
    fed.looked_at
}

/// The engine asks after every segment. A head with a 256 KiB header line (or reason phrase,
/// or 20,000 short lines) fed in 100-byte segments is read a few times in all, not once per
/// segment as a parse of everything so far would (some 335 M bytes).
#[test]
fn a_long_head_fed_by_segments_is_read_in_linear_work() {
    let long = "x".repeat(256 * 1024);
    let many_lines = "X-A: b\r\n".repeat(20_000);
    let heads = [
        format!("HTTP/1.1 200 OK\r\nX-Long: {long}\r\nContent-Length: 2\r\n\r\n"),
        format!("HTTP/1.1 200 {long}\r\nContent-Length: 2\r\n\r\n"),
        format!("HTTP/1.1 200 OK\n{many_lines}Content-Length: 2\n\n"),
        format!("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nX: {long}\r\nContent-Length: 2\r\n\r\n"),
    ];
    for head in heads {
        let reply = [head.as_bytes(), b"ok"].concat();
        let work = fed_whole(&reply, 100);
        // Each byte searched for LF once, the heads parsed once or twice at their ends, and
        // the first KiB parsed after each of the first segments.
        let bound = 3 * reply.len() as u64 + 20 * complete::EAGER_HEAD as u64;
        assert!(work <= bound, "{work} bytes read for {}", reply.len());
    }
}

/// After a long head, a long body framed by Content-Length costs nothing per segment.
#[test]
fn a_body_after_a_long_head_does_not_parse_the_head_again() {
    let head = format!(
        "HTTP/1.1 200 OK\r\nX-Long: {}\r\nContent-Length: 1048576\r\n\r\n",
        "y".repeat(64 * 1024)
    );
    let reply = [head.as_bytes(), &vec![b'z'; 1 << 20]].concat();
    let work = fed_whole(&reply, 1460);
    let bound = 3 * head.len() as u64 + 20 * complete::EAGER_HEAD as u64;
    assert!(
        work <= bound,
        "{work} bytes read for a {}-byte head",
        head.len()
    );
}

/// A chunked body with a long extension, a long trailer and many small chunks, fed in small
/// segments: each line is read a few times in all.
#[test]
fn a_chunked_body_fed_by_segments_is_read_in_linear_work() {
    let mut reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    reply.extend_from_slice(format!("3;{}\r\nabc\n", "e".repeat(128 * 1024)).as_bytes());
    reply.extend_from_slice(&b"1\r\nz\r\n2\nzz\n".repeat(10_000));
    reply.extend_from_slice(
        format!("0\r\nX-Trailer: {}\r\n\r\n", "t".repeat(128 * 1024)).as_bytes(),
    );
    let work = fed_whole(&reply, 100);
    let bound = 4 * reply.len() as u64 + 20 * complete::EAGER_HEAD as u64;
    assert!(work <= bound, "{work} bytes read for {}", reply.len());
    let v = values(&app(), &reply);
    assert_eq!(field(&v, "http_body_len"), &Value::Int(3 + 30_000));
    assert_eq!(field(&v, "http_truncated"), &Value::Bool(false));
}

/// Bytes that are not HTTP show in the first line: complete at once, even when they come in
/// small pieces.
#[test]
fn what_is_not_http_is_complete_at_its_first_bad_byte() {
    let ssh = b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nProtocol mismatch.\n";
    let fed = testing::feed(&app(), ssh, 1);
    assert_eq!(fed.complete_at, Some(1));
    let bad_header = b"HTTP/1.1 200 OK\r\nX: a\rb\r\n";
    let fed = testing::feed(&app(), bad_header, 1);
    // httparse sees the CR is no line end at the byte after it.
    assert_eq!(fed.complete_at, Some(bad_header.len() - 2));
}

/// A name in Host (`--http-host`, `-I`'s, `https`'s SNI) carries a port that is not the
/// scheme's own, unless it has one already (curl sends `name:4439`).
#[test]
fn a_name_in_host_carries_a_port_other_than_the_default() {
    let named = |host: &str| {
        app_with(AppOptions {
            http_host: Some(host.to_string()),
            ..AppOptions::default()
        })
    };
    let host_line = |app: &HttpApp, port| {
        let sent = request(app, "198.18.0.7", port);
        sent.lines().nth(1).unwrap().to_string()
    };
    assert_eq!(
        host_line(&named("www.sonde.test"), 4439),
        "Host: www.sonde.test:4439"
    );
    assert_eq!(
        host_line(&named("www.sonde.test"), 80),
        "Host: www.sonde.test"
    );
    assert_eq!(
        host_line(&named("www.sonde.test:81"), 4439),
        "Host: www.sonde.test:81"
    );
    assert_eq!(
        host_line(&named("[2001:2::7]"), 4439),
        "Host: [2001:2::7]:4439"
    );
    assert_eq!(
        host_line(&named("[2001:2::7]:81"), 4439),
        "Host: [2001:2::7]:81"
    );
    let app = named("www.sonde.test");
    let https = |port, name| {
        String::from_utf8(app.request_for("198.18.0.7".parse().unwrap(), port, name, 443)).unwrap()
    };
    assert!(https(4439, Some("a.sonde.test")).contains("\r\nHost: a.sonde.test:4439\r\n"));
    assert!(https(443, Some("a.sonde.test")).contains("\r\nHost: a.sonde.test\r\n"));
    assert!(https(4439, None).contains("\r\nHost: www.sonde.test:4439\r\n"));
    assert!(app.request_len_with_host(253 + 6) >= https(65535, Some(&"a".repeat(253))).len());
}
