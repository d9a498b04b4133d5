//! The lab's web server: nginx (Debian's `nginx-light`) in the lab namespace, on ports 80 and
//! 443 (TLS, a certificate the lab's CA signs at `up`: see [`crate::ca`]) of every population
//! address. The kernel
//! delivers every address's connections to its wildcard listeners; nftables has already dropped
//! what goes to the addresses that do not answer.
//!
//! - `GET /` answers `sonde lab <address>\n`: the address the connection came to, so every
//!   reply can be checked byte for byte ([`crate::http_body`]).
//! - `GET /big` answers [`big_body`], 1 MiB, for window and SACK tests.
//! - Anything else is nginx's 404.
//!
//! Everything nginx uses (config, certificate and key, the big body, pid file, error log,
//! temporary folders) lives in the lab's folder `/run/sonde/lab/<name>-http/`, which `down`
//! removes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use crate::ca::{Ca, EC_KEY};
use crate::config::{HTTPS_PORT, HTTP_PORT};
use crate::files::{find_program, path_arg, sha256_hex, write};
use crate::{server, state};

/// The path of the large body.
pub const BIG_PATH: &str = "/big";
/// The large body is BIG_LINES lines of BIG_LINE bytes (1 MiB).
const BIG_LINES: usize = 32_768;
const BIG_LINE: usize = 32;

/// At most this many nginx workers (one per CPU below it). Two on the 2-vCPU hosts sonde is
/// developed on: one per CPU, sharing them with the client in the scanner namespace. Every
/// worker allocates its whole connection table at start (about 450 bytes a slot), so the
/// slots are a budget split between the workers rather than a figure per worker.
const MAX_WORKERS: usize = 4;
/// Connection slots of all workers together: 100 K+ concurrent connections with room for an
/// uneven split (SO_REUSEPORT spreads connections over the workers' listeners by a hash).
const CONNECTION_SLOTS: usize = 262_144;
/// Descriptors a worker needs beyond its connections (listeners, log, files it sends).
const SPARE_FILES: usize = 1024;
/// The listen backlog: `up` raises net.core.somaxconn to the same.
const BACKLOG: u32 = 65_535;

/// What `up` records of a running nginx.
pub(crate) struct Http {
    pub pid: u32,
    /// Connections nginx can hold at once (workers × connection slots).
    pub connections: u64,
    pub cert_pem: PathBuf,
    pub cert_sha256: String,
    pub big_len: u64,
    pub big_sha256: String,
}

/// The body of `GET /big`: 32,768 lines of 32 bytes, each line its own byte offset in the body
/// in decimal, zero-padded to 31 digits, then `\n` ("0000…0000\n", "0000…0032\n", …).
pub fn big_body() -> Vec<u8> {
    let mut body = String::with_capacity(BIG_LINES * BIG_LINE);
    for line in 0..BIG_LINES {
        let _ = writeln!(body, "{:031}", line * BIG_LINE);
    }
    body.into_bytes()
}

/// Writes nginx's files for lab `name` and starts it in namespace `ns` (listening over IPv6 as
/// well with `v6`); returns once it listens on 80 and 443. With `cpus`, nginx and its workers run
/// only there, one worker per CPU (at most MAX_WORKERS).
pub(crate) fn start(
    name: &str,
    ns: &str,
    v6: bool,
    cpus: Option<&[usize]>,
    ca: &Ca,
) -> Result<Http> {
    let nginx = find_program("nginx", "nginx-light")?;
    let dir = state::scratch_dir(name, "-http")?;
    let big = big_body();
    write(&dir.join("big"), &big)?;
    let cert_sha256 = ca.sign(&dir, "", &EC_KEY, "/O=sonde/CN=sonde lab")?;
    let conf = dir.join("nginx.conf");
    let workers = cpus.map_or_else(workers, |c| c.len().clamp(1, MAX_WORKERS));
    let slots = CONNECTION_SLOTS.div_ceil(workers);
    // nginx inherits the limit; without CAP_SYS_RESOURCE it cannot pass the hard limit.
    let files = server::raise_open_files((slots + SPARE_FILES) as u64);
    let files = usize::try_from(files).unwrap_or(usize::MAX);
    let slots = slots.min(files.saturating_sub(SPARE_FILES)).max(1024);
    write(&conf, config(&dir, v6, workers, slots).as_bytes())?;
    let cmd = [
        nginx,
        "-p".into(),
        path_arg(&dir)?,
        "-c".into(),
        path_arg(&conf)?,
        "-e".into(),
        path_arg(&dir.join("error.log"))?,
    ];
    let pid = server::start(ns, cpus, &cmd, &[HTTP_PORT, HTTPS_PORT], v6, "nginx")
        .map_err(|e| anyhow!("{e}{}", last_error(&dir)))?;
    Ok(Http {
        pid,
        connections: (workers * slots) as u64,
        cert_pem: dir.join("cert.pem"),
        cert_sha256,
        big_len: big.len() as u64,
        big_sha256: sha256_hex(&big),
    })
}

/// Worker processes: one per CPU, at most MAX_WORKERS.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_WORKERS)
}

/// nginx.conf for the folder `dir`: `workers` processes of `slots` connections each.
fn config(dir: &Path, v6: bool, workers: usize, slots: usize) -> String {
    let d = dir.display();
    let files = slots + SPARE_FILES;
    let mut listen = vec![
        format!("listen {HTTP_PORT} reuseport backlog={BACKLOG};"),
        format!("listen {HTTPS_PORT} ssl reuseport backlog={BACKLOG};"),
    ];
    if v6 {
        listen.push(format!(
            "listen [::]:{HTTP_PORT} ipv6only=on reuseport backlog={BACKLOG};"
        ));
        listen.push(format!(
            "listen [::]:{HTTPS_PORT} ssl ipv6only=on reuseport backlog={BACKLOG};"
        ));
    }
    let listen = listen.join("\n        ");
    format!(
        r#"# Written by `sonde lab up --http`: nginx inside the lab's net namespace.
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile {files};
pid {d}/nginx.pid;
error_log {d}/error.log warn;

events {{
    worker_connections {slots};
    multi_accept on;
}}

http {{
    access_log off;
    server_tokens off;
    # One request per connection: clients close (grab with an RST) after the reply.
    keepalive_timeout 0;
    reset_timedout_connection on;
    sendfile on;
    tcp_nopush on;
    types {{ }}
    default_type text/plain;
    client_body_temp_path {d}/tmp-body;
    proxy_temp_path {d}/tmp-proxy;
    fastcgi_temp_path {d}/tmp-fastcgi;
    uwsgi_temp_path {d}/tmp-uwsgi;
    scgi_temp_path {d}/tmp-scgi;
    ssl_certificate {d}/cert.pem;
    ssl_certificate_key {d}/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off;
    ssl_session_tickets off;

    server {{
        {listen}
        location = / {{
            return 200 "sonde lab $server_addr\n";
        }}
        location = {BIG_PATH} {{
            default_type application/octet-stream;
            alias {d}/big;
        }}
        location / {{
            return 404;
        }}
    }}
}}
"#
    )
}

/// The last line of nginx's error log, as "; nginx said: …", or nothing.
fn last_error(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!("; nginx said: {}", l.trim()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_body_is_the_documented_pattern() {
        let big = big_body();
        assert_eq!(big.len(), 1 << 20);
        assert_eq!(&big[..32], b"0000000000000000000000000000000\n");
        assert_eq!(&big[32..64], b"0000000000000000000000000000032\n");
        let last = &big[big.len() - 32..];
        assert_eq!(last, format!("{:031}\n", (1 << 20) - 32).as_bytes());
        assert_eq!(sha256_hex(&big), sha256_hex(&big_body()));
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn config_serves_both_ports_from_the_lab_folder() {
        let c = config(Path::new("/run/sonde/lab/x-http"), false, 2, 131_072);
        for needle in [
            "daemon off;",
            "worker_processes 2;",
            "worker_connections 131072;",
            "worker_rlimit_nofile 132096;",
            "keepalive_timeout 0;",
            "access_log off;",
            "pid /run/sonde/lab/x-http/nginx.pid;",
            "error_log /run/sonde/lab/x-http/error.log warn;",
            "listen 80 reuseport backlog=65535;",
            "listen 443 ssl reuseport backlog=65535;",
            "return 200 \"sonde lab $server_addr\\n\";",
            "alias /run/sonde/lab/x-http/big;",
            "ssl_certificate /run/sonde/lab/x-http/cert.pem;",
        ] {
            assert!(c.contains(needle), "{needle} missing from:\n{c}");
        }
        assert!(!c.contains("[::]"));
        // No path of the system-wide nginx is used.
        assert!(!c.contains("/var/") && !c.contains("/etc/nginx"), "{c}");
        let c6 = config(Path::new("/d"), true, 1, 262_144);
        assert!(c6.contains("listen [::]:80 ipv6only=on reuseport backlog=65535;"));
        assert!(c6.contains("listen [::]:443 ssl ipv6only=on reuseport backlog=65535;"));
        assert!(c6.contains("worker_connections 262144;"));
    }

    #[test]
    fn workers_stay_within_the_cap() {
        let w = workers();
        assert!((1..=MAX_WORKERS).contains(&w), "{w}");
    }
}
