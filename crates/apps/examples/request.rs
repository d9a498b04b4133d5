//! Writes the request an app sends to a target on standard output, for inspection and for
//! capturing test fixtures: `request <app> <addr> <port> [tls-max [sni]]`.

use std::io::Write;

use sonde_apps::{AnyApp, App, AppOptions};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, addr, port, rest @ ..] = args.as_slice() else {
        return Err("usage: request <app> <addr> <port> [tls-max [sni]]".to_string());
    };
    let mut options = AppOptions {
        payload: b"ping\n".to_vec(),
        ..AppOptions::default()
    };
    if let Some(version) = rest.first() {
        options.tls_max = version.parse()?;
    }
    options.tls_sni = rest.get(1).cloned();
    let app = AnyApp::build(kind.parse()?, &options)?;
    let addr = addr
        .parse()
        .map_err(|e| format!("bad address {addr:?}: {e}"))?;
    let port = port
        .parse()
        .map_err(|e| format!("bad port {port:?}: {e}"))?;
    let mut buf = vec![0; app.max_request_len()];
    let len = app.write_request(&mut buf, addr, port);
    std::io::stdout()
        .write_all(&buf[..len])
        .map_err(|e| format!("cannot write the request: {e}"))
}
