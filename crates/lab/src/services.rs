//! The lab's other real servers (`lab up --services ssh,smtp,imap,pop3,ftp,tls13,tls10`), from
//! Debian's packages, on every responsive address, inside the lab's net namespace only:
//!
//! | service | port | server |
//! |---|---|---|
//! | ssh   | 22   | OpenSSH's sshd, run directly with a config and an Ed25519 host key made at `up` |
//! | smtp  | 25   | exim4 (`-bdf`), STARTTLS, greeting `220 sonde lab <address> ESMTP` |
//! | imap  | 143  | dovecot, STARTTLS |
//! | pop3  | 110  | the same dovecot, STLS |
//! | ftp   | 21   | vsftpd, AUTH TLS (anonymous, read-only, an empty root), greeting `220 sonde lab FTP` |
//! | tls13 | 8443 | nginx speaking TLS 1.3 only (TLS_AES_128_GCM_SHA256); `GET /` as on port 80 |
//! | tls10 | 9443 | the same nginx speaking TLS 1.0 only, RSA key exchange (AES128-SHA, SECLEVEL 0) |
//!
//! Each service has its own certificate (signed by the lab's CA: [`crate::ca`]) or host key, made
//! at `up`. Everything the servers use (configs, keys, pid files, logs, spool and run folders)
//! lives in `/run/sonde/lab/<name>-services/`,
//! which `down` removes; `down` stops the servers by their recorded pids and then every process
//! left in the namespace, so a server killed with SIGKILL leaves none of its children behind.
//!
//! What each service shows is recorded in the lab's state ([`ServiceStatus`]): the greeting as
//! the server sent it to `up`'s own probe (from the scanner namespace, to a live address, as
//! any client sees it: dovecot offers more to a client on loopback), the SHA-256 of
//! its certificate's DER form, and the TLS version and cipher that can be negotiated. The truth
//! turns that into expected grab fields ([`ServiceStatus::fields`]).

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::ca::Ca;
use crate::ca::{EC_KEY, RSA_KEY};
use crate::cmd::run;
use crate::config::{LabService, ServiceStatus, ADDR_PLACEHOLDER};
use crate::files::{find_program, path_arg, write};
use crate::{server, state};

/// exim's greeting: `220 ` and its smtp_banner, which names the address connected to.
const SMTP_BANNER: &str = "220 sonde lab {addr} ESMTP\r\n";
/// vsftpd's greeting: `220 ` and its ftpd_banner.
const FTP_BANNER: &str = "220 sonde lab FTP\r\n";
/// What dovecot says after its capabilities (IMAP) or `+OK` (POP3).
const MAIL_GREETING: &str = "sonde lab";
/// The only TLS 1.3 suite the tls13 server offers, and the only suite of the tls10 server
/// (OpenSSL's AES128-SHA: RSA key exchange).
const TLS13_CIPHER: &str = "TLS_AES_128_GCM_SHA256";
const TLS10_CIPHER: &str = "TLS_RSA_WITH_AES_128_CBC_SHA";
/// How long `up` waits for a server's greeting.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many nginx workers for the two TLS servers.
const MAX_WORKERS: usize = 4;
/// Connection slots of each nginx worker.
const NGINX_SLOTS: usize = 16_384;
/// exim's and dovecot's account (made by their Debian packages).
const EXIM_USER: &str = "Debian-exim";

/// Servers started by [`start`]: each server's pid and what it is, and the services' status.
#[derive(Default)]
pub(crate) struct Running {
    pub servers: Vec<(u32, &'static str)>,
    pub services: Vec<ServiceStatus>,
}

/// Starts the servers of `services` for lab `name` in namespace `ns` (listening over IPv6 as
/// well with `v6`, only on `cpus` if given), each with its certificate made now, and reads
/// each greeting from the scanner namespace at address `probe` (a live, not silent, host; with
/// none, greetings that are not known in advance stay unknown).
pub(crate) fn start(
    name: &str,
    ns: &str,
    v6: bool,
    cpus: Option<&[usize]>,
    services: &[LabService],
    probe: Option<IpAddr>,
    ca: &Ca,
) -> Result<Running> {
    let mut running = Running::default();
    if services.is_empty() {
        return Ok(running);
    }
    let dir = state::scratch_dir(name, "-services")?;
    let has = |s: LabService| services.contains(&s);
    let place = Place {
        ns,
        v6,
        cpus,
        dir: &dir,
        ca,
    };
    if has(LabService::Ssh) {
        start_sshd(&place, &mut running)?;
    }
    if has(LabService::Smtp) {
        start_exim(&place, &mut running)?;
    }
    let mail: Vec<LabService> = [LabService::Imap, LabService::Pop3]
        .into_iter()
        .filter(|s| has(*s))
        .collect();
    if !mail.is_empty() {
        start_dovecot(&place, &mail, name, &mut running)?;
    }
    if has(LabService::Ftp) {
        start_vsftpd(&place, &mut running)?;
    }
    let tls: Vec<LabService> = [LabService::Tls13, LabService::Tls10]
        .into_iter()
        .filter(|s| has(*s))
        .collect();
    if !tls.is_empty() {
        start_tls_nginx(&place, &tls, &mut running)?;
    }
    if let Some(addr) = probe {
        probe_banners(name, addr, &mut running.services)?;
    }
    running.services.sort_by_key(|s| s.service);
    Ok(running)
}

/// Where the servers run.
struct Place<'a> {
    ns: &'a str,
    v6: bool,
    cpus: Option<&'a [usize]>,
    dir: &'a Path,
    /// Signs the servers' certificates.
    ca: &'a Ca,
}

impl Place<'_> {
    fn file(&self, name: &str) -> Result<String> {
        path_arg(&self.dir.join(name))
    }

    /// Starts `cmd` and waits until it listens on `ports`; a failure quotes the end of `log`.
    fn start(&self, cmd: &[String], ports: &[u16], what: &'static str, log: &str) -> Result<u32> {
        server::start(self.ns, self.cpus, cmd, ports, self.v6, what)
            .map_err(|e| anyhow!("{e}{}", last_line(&self.dir.join(log), what)))
    }
}

// ---- ssh ------------------------------------------------------------------------------------

fn start_sshd(p: &Place, running: &mut Running) -> Result<()> {
    let sshd = find_program("sshd", "openssh-server")?;
    // sshd insists on its privilege separation folder (Debian's service makes it at start).
    std::fs::create_dir_all("/run/sshd")
        .map_err(|e| anyhow!("cannot create /run/sshd for sshd: {e}"))?;
    let key = p.file("ssh_host_ed25519_key")?;
    run(
        "ssh-keygen",
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "sonde lab",
            "-f",
            &key,
        ],
    )?;
    let public = std::fs::read_to_string(format!("{key}.pub"))
        .map_err(|e| anyhow!("cannot read {key}.pub: {e}"))?;
    let host_key_sha256 = public_key_sha256(&public)
        .ok_or_else(|| anyhow!("{key}.pub is not an OpenSSH public key"))?;
    let conf = p.dir.join("sshd_config");
    write(&conf, sshd_config(p.dir, p.v6).as_bytes())?;
    let cmd = vec![
        sshd,
        "-D".into(),
        "-f".into(),
        path_arg(&conf)?,
        "-E".into(),
        p.file("sshd.log")?,
    ];
    let pid = p.start(&cmd, &[22], "sshd", "sshd.log")?;
    running.servers.push((pid, "sshd"));
    running.services.push(ServiceStatus {
        host_key_sha256: Some(host_key_sha256),
        ..ServiceStatus::started(LabService::Ssh, pid)
    });
    Ok(())
}

/// sshd_config: the lab's host key and pid file, no way to log in, and room for many
/// connections being greeted at once (MaxStartups). sshd's listen backlog is fixed at 128 (in
/// its source): a client that completes more handshakes than that at once overflows it, and
/// the kernel's SYN-ACK retries take seconds to bring the rest in, so pace large grabs of port
/// 22 (`-r`; 491 hosts at once: 86 % greeted within 5 s, at -r 1000: all).
fn sshd_config(dir: &Path, v6: bool) -> String {
    let d = dir.display();
    let mut c = String::from("# Written by `sonde lab up --services ssh`.\n");
    c.push_str("ListenAddress 0.0.0.0:22\n");
    if v6 {
        c.push_str("ListenAddress [::]:22\n");
    }
    c.push_str(&format!(
        "HostKey {d}/ssh_host_ed25519_key\nPidFile {d}/sshd.pid\n"
    ));
    for line in [
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication no",
        "AuthorizedKeysFile none",
        "PermitRootLogin no",
        "StrictModes no",
        "MaxStartups 100000",
        "LoginGraceTime 30",
    ] {
        c.push_str(line);
        c.push('\n');
    }
    c
}

/// SHA-256 (hex) of the key blob of an OpenSSH public key line (`type base64 comment`).
fn public_key_sha256(line: &str) -> Option<String> {
    let blob = base64_decode(line.split_whitespace().nth(1)?)?;
    Some(crate::sha256_hex(&blob))
}

/// Standard base64 (RFC 4648 §4, padding optional); None on any other character.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

// ---- smtp -----------------------------------------------------------------------------------

fn start_exim(p: &Place, running: &mut Running) -> Result<()> {
    let exim = find_program("exim4", "exim4-daemon-light")?;
    let cert_sha256 =
        p.ca.sign(p.dir, "smtp-", &EC_KEY, "/O=sonde/CN=sonde lab smtp")?;
    // exim reads its key, and writes its spool and logs, as its own user after dropping root:
    // the key is its group's to read, and no one else's.
    let key = p.file("smtp-key.pem")?;
    share_with_group(&key, EXIM_USER)?;
    for folder in ["exim-spool", "exim-log"] {
        let path = p.file(folder)?;
        std::fs::create_dir_all(&path).map_err(|e| anyhow!("cannot create {path}: {e}"))?;
        run("chown", &[&format!("{EXIM_USER}:{EXIM_USER}"), &path])?;
    }
    let conf = p.dir.join("exim.conf");
    write(&conf, exim_config(p.dir).as_bytes())?;
    let cmd = vec![exim, "-C".into(), path_arg(&conf)?, "-bdf".into()];
    let pid = p.start(&cmd, &[25], "exim", "exim-log/paniclog")?;
    running.servers.push((pid, "exim"));
    running.services.push(ServiceStatus {
        banner: Some(SMTP_BANNER.to_string()),
        cert_sha256: Some(cert_sha256),
        cert: Some(p.file("smtp-cert.pem")?),
        ..ServiceStatus::started(LabService::Smtp, pid)
    });
    Ok(())
}

/// exim's whole configuration: a daemon on port 25 that offers STARTTLS with the lab's
/// certificate, greets with the address connected to, looks nothing up, takes any number of
/// connections, and accepts no mail. It listens on every address of both families (its
/// default: exim tolerates the wildcards' overlap only when it picks them itself).
fn exim_config(dir: &Path) -> String {
    let d = dir.display();
    let banner = SMTP_BANNER
        .trim_start_matches("220 ")
        .trim_end_matches("\r\n")
        .replace(ADDR_PLACEHOLDER, "$interface_address");
    format!(
        "# Written by `sonde lab up --services smtp`.
keep_environment =
exim_user = {EXIM_USER}
exim_group = {EXIM_USER}
primary_hostname = sonde-lab
spool_directory = {d}/exim-spool
log_file_path = {d}/exim-log/%slog
pid_file_path = {d}/exim.pid
daemon_smtp_ports = 25
smtp_banner = {banner}
smtp_accept_max = 0
smtp_connect_backlog = 65535
host_lookup =
rfc1413_hosts =
rfc1413_query_timeout = 0s
tls_advertise_hosts = *
tls_certificate = {d}/smtp-cert.pem
tls_privatekey = {d}/smtp-key.pem
acl_smtp_rcpt = deny
begin acl
"
    )
}

// ---- imap and pop3 --------------------------------------------------------------------------

fn start_dovecot(p: &Place, mail: &[LabService], name: &str, running: &mut Running) -> Result<()> {
    let dovecot = find_program("dovecot", "dovecot-imapd and dovecot-pop3d")?;
    let mut shown = Vec::new();
    for &service in mail {
        let stem = format!("{}-", service.name());
        let subject = format!("/O=sonde/CN=sonde lab {}", service.name());
        shown.push((service, p.ca.sign(p.dir, &stem, &EC_KEY, &subject)?));
    }
    for folder in ["dovecot-run", "dovecot-state"] {
        let path = p.file(folder)?;
        std::fs::create_dir_all(&path).map_err(|e| anyhow!("cannot create {path}: {e}"))?;
    }
    write(&p.dir.join("dovecot-users"), b"")?;
    let conf = p.dir.join("dovecot.conf");
    write(&conf, dovecot_config(p.dir, p.v6, mail, name).as_bytes())?;
    let cmd = vec![dovecot, "-F".into(), "-c".into(), path_arg(&conf)?];
    let ports: Vec<u16> = mail.iter().map(|s| s.port()).collect();
    let pid = p.start(&cmd, &ports, "dovecot", "dovecot.log")?;
    running.servers.push((pid, "dovecot"));
    for (service, cert_sha256) in shown {
        running.services.push(ServiceStatus {
            cert_sha256: Some(cert_sha256),
            cert: Some(p.file(&format!("{}-cert.pem", service.name()))?),
            ..ServiceStatus::started(service, pid)
        });
    }
    Ok(())
}

/// dovecot.conf: IMAP on 143 and/or POP3 on 110 with STARTTLS/STLS, each protocol with its own
/// certificate, nobody able to log in, every folder in the lab's, and the implicit-TLS ports
/// (993, 995) closed. Login processes each serve many clients (high-performance mode).
fn dovecot_config(dir: &Path, v6: bool, mail: &[LabService], name: &str) -> String {
    let d = dir.display();
    let protocols: Vec<&str> = mail.iter().map(|s| s.name()).collect();
    let listen = if v6 { "*, ::" } else { "*" };
    let mut c = format!(
        "# Written by `sonde lab up --services imap,pop3`.
base_dir = {d}/dovecot-run
state_dir = {d}/dovecot-state
instance_name = sonde-{name}
protocols = {protocols}
listen = {listen}
log_path = {d}/dovecot.log
info_log_path = {d}/dovecot.log
ssl = yes
login_greeting = {MAIL_GREETING}
disable_plaintext_auth = yes
auth_mechanisms = plain
passdb {{
  driver = passwd-file
  args = {d}/dovecot-users
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home=/nonexistent
}}
default_internal_user = dovecot
default_login_user = dovenull
default_process_limit = 1000
default_client_limit = 10000
",
        protocols = protocols.join(" ")
    );
    for service in mail {
        let (proto, implicit) = match service {
            LabService::Imap => ("imap", "imaps"),
            _ => ("pop3", "pop3s"),
        };
        c.push_str(&format!(
            "protocol {proto} {{
  ssl_cert = <{d}/{proto}-cert.pem
  ssl_key = <{d}/{proto}-key.pem
}}
service {proto}-login {{
  service_count = 0
  process_min_avail = 1
  inet_listener {implicit} {{
    port = 0
  }}
}}
"
        ));
    }
    c
}

// ---- ftp ------------------------------------------------------------------------------------

fn start_vsftpd(p: &Place, running: &mut Running) -> Result<()> {
    let vsftpd = find_program("vsftpd", "vsftpd")?;
    let cert_sha256 =
        p.ca.sign(p.dir, "ftp-", &EC_KEY, "/O=sonde/CN=sonde lab ftp")?;
    // vsftpd refuses a chroot folder or an anonymous root that others may write to.
    for folder in ["vsftpd-empty", "ftp-root"] {
        let path = p.file(folder)?;
        std::fs::create_dir_all(&path).map_err(|e| anyhow!("cannot create {path}: {e}"))?;
        set_mode(&path, 0o755)?;
    }
    let conf = p.dir.join("vsftpd.conf");
    write(&conf, vsftpd_config(p.dir, p.v6).as_bytes())?;
    let cmd = vec![vsftpd, path_arg(&conf)?];
    let pid = p.start(&cmd, &[LabService::Ftp.port()], "vsftpd", "vsftpd.log")?;
    running.servers.push((pid, "vsftpd"));
    running.services.push(ServiceStatus {
        banner: Some(FTP_BANNER.to_string()),
        cert_sha256: Some(cert_sha256),
        cert: Some(p.file("ftp-cert.pem")?),
        ..ServiceStatus::started(LabService::Ftp, pid)
    });
    Ok(())
}

/// vsftpd.conf: one standalone vsftpd in the foreground on port 21 (one socket: IPv6 with `v6`,
/// which takes IPv4 too, else IPv4), AUTH TLS with the lab's certificate and TLS required of
/// nobody, anonymous read-only logins to an empty root, no limit on clients (from one address
/// either: the scanner is one), and no namespace or seccomp sandbox per connection (each would
/// cost a network namespace per grab). vsftpd's listen backlog is fixed at 32 (in its source):
/// pace large grabs of port 21 (`-r`), as for sshd.
fn vsftpd_config(dir: &Path, v6: bool) -> String {
    let d = dir.display();
    let (listen, listen_ipv6) = if v6 { ("NO", "YES") } else { ("YES", "NO") };
    let banner = FTP_BANNER
        .trim_start_matches("220 ")
        .trim_end_matches("\r\n");
    format!(
        "# Written by `sonde lab up --services ftp`.
listen={listen}
listen_ipv6={listen_ipv6}
background=NO
ftpd_banner={banner}
anonymous_enable=YES
anon_root={d}/ftp-root
ftp_username=nobody
nopriv_user=nobody
local_enable=NO
write_enable=NO
secure_chroot_dir={d}/vsftpd-empty
ssl_enable=YES
allow_anon_ssl=YES
force_local_logins_ssl=NO
force_local_data_ssl=NO
force_anon_logins_ssl=NO
force_anon_data_ssl=NO
ssl_sslv2=NO
ssl_sslv3=NO
ssl_request_cert=NO
ssl_ciphers=HIGH
rsa_cert_file={d}/ftp-cert.pem
rsa_private_key_file={d}/ftp-key.pem
max_clients=0
max_per_ip=0
seccomp_sandbox=NO
isolate=NO
isolate_network=NO
connect_from_port_20=NO
xferlog_enable=NO
vsftpd_log_file={d}/vsftpd.log
syslog_enable=NO
"
    )
}

// ---- tls13 and tls10 ------------------------------------------------------------------------

fn start_tls_nginx(p: &Place, tls: &[LabService], running: &mut Running) -> Result<()> {
    let nginx = find_program("nginx", "nginx-light")?;
    let mut shown = Vec::new();
    for &service in tls {
        let key = if service == LabService::Tls10 {
            &RSA_KEY
        } else {
            &EC_KEY
        };
        let stem = format!("{}-", service.name());
        let subject = format!("/O=sonde/CN=sonde lab {}", service.name());
        shown.push((service, p.ca.sign(p.dir, &stem, key, &subject)?));
    }
    std::fs::create_dir_all(p.dir.join("nginx-tmp"))
        .map_err(|e| anyhow!("cannot create {}/nginx-tmp: {e}", p.dir.display()))?;
    let workers = p
        .cpus
        .map_or_else(crate::http::workers, |c| c.len().clamp(1, MAX_WORKERS));
    let files = server::raise_open_files((NGINX_SLOTS + 1024) as u64);
    let slots = usize::try_from(files)
        .unwrap_or(usize::MAX)
        .saturating_sub(1024)
        .clamp(1024, NGINX_SLOTS);
    let conf = p.dir.join("nginx.conf");
    write(
        &conf,
        tls_config(p.dir, p.v6, tls, workers, slots).as_bytes(),
    )?;
    let log = "nginx-error.log";
    let cmd = vec![
        nginx,
        "-p".into(),
        path_arg(p.dir)?,
        "-c".into(),
        path_arg(&conf)?,
        "-e".into(),
        p.file(log)?,
    ];
    let ports: Vec<u16> = tls.iter().map(|s| s.port()).collect();
    let pid = p.start(&cmd, &ports, "nginx (TLS)", log)?;
    running.servers.push((pid, "nginx (TLS)"));
    for (service, cert_sha256) in shown {
        let (version, cipher) = match service {
            LabService::Tls10 => ("TLSv1.0", TLS10_CIPHER),
            _ => ("TLSv1.3", TLS13_CIPHER),
        };
        running.services.push(ServiceStatus {
            cert_sha256: Some(cert_sha256),
            cert: Some(p.file(&format!("{}-cert.pem", service.name()))?),
            tls_version: Some(version.into()),
            tls_cipher: Some(cipher.into()),
            ..ServiceStatus::started(service, pid)
        });
    }
    Ok(())
}

/// nginx.conf of the TLS servers: 8443 speaks TLS 1.3 only with one suite; 9443 TLS 1.0 only
/// with RSA key exchange (AES128-SHA), which OpenSSL 3 allows at security level 0 only. Both
/// answer `GET /` with `sonde lab <address>\n`, as nginx does on port 80.
fn tls_config(dir: &Path, v6: bool, tls: &[LabService], workers: usize, slots: usize) -> String {
    let d = dir.display();
    let mut servers = String::new();
    for service in tls {
        let port = service.port();
        let name = service.name();
        let protocol = match service {
            LabService::Tls10 => {
                "ssl_protocols TLSv1;\n        ssl_ciphers AES128-SHA:@SECLEVEL=0;".to_string()
            }
            _ => format!(
                "ssl_protocols TLSv1.3;\n        ssl_conf_command Ciphersuites {TLS13_CIPHER};"
            ),
        };
        let six = if v6 {
            format!("\n        listen [::]:{port} ssl ipv6only=on reuseport backlog=65535;")
        } else {
            String::new()
        };
        servers.push_str(&format!(
            "
    server {{
        listen {port} ssl reuseport backlog=65535;{six}
        ssl_certificate {d}/{name}-cert.pem;
        ssl_certificate_key {d}/{name}-key.pem;
        {protocol}
        location = / {{
            return 200 \"sonde lab $server_addr\\n\";
        }}
        location / {{
            return 404;
        }}
    }}
"
        ));
    }
    format!(
        "# Written by `sonde lab up --services tls13,tls10`: nginx inside the lab's net namespace.
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile {files};
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;

events {{
    worker_connections {slots};
    multi_accept on;
}}

http {{
    access_log off;
    server_tokens off;
    keepalive_timeout 0;
    reset_timedout_connection on;
    types {{ }}
    default_type text/plain;
    client_body_temp_path {d}/nginx-tmp;
    proxy_temp_path {d}/nginx-tmp;
    fastcgi_temp_path {d}/nginx-tmp;
    uwsgi_temp_path {d}/nginx-tmp;
    scgi_temp_path {d}/nginx-tmp;
    ssl_session_cache off;
    ssl_session_tickets off;
{servers}}}
",
        files = slots + 1024
    )
}

// ---- greetings ------------------------------------------------------------------------------

/// Reads each greeting once, from lab `name`'s scanner namespace to `addr`. A service whose
/// greeting is known in advance (smtp) must send exactly that.
fn probe_banners(name: &str, addr: IpAddr, services: &mut [ServiceStatus]) -> Result<()> {
    let greeting_first = |s: &ServiceStatus| s.service.banner_field().is_some();
    let ports: Vec<u16> = services
        .iter()
        .filter(|s| greeting_first(s))
        .map(|s| s.port)
        .collect();
    if ports.is_empty() {
        return Ok(());
    }
    let lines = std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<Vec<String>> {
                crate::netns::enter_scan_ns(name)?;
                ports.iter().map(|&port| first_line(addr, port)).collect()
            })
            .join()
            .map_err(|_| anyhow!("the greeting probe panicked"))?
    })?;
    let mut lines = lines.into_iter();
    for s in services.iter_mut().filter(|s| greeting_first(s)) {
        let line = lines.next().unwrap_or_default();
        match &s.banner {
            Some(want) => {
                let want = want.replace(ADDR_PLACEHOLDER, &addr.to_string());
                if line != want {
                    bail!(
                        "{} on port {} greeted with {line:?}, not {want:?}",
                        s.service,
                        s.port
                    );
                }
            }
            None => s.banner = Some(line),
        }
    }
    Ok(())
}

/// The first line (up to and with `\n`) that `addr`:`port` sends, within PROBE_TIMEOUT.
fn first_line(addr: IpAddr, port: u16) -> Result<String> {
    let addr = SocketAddr::from((addr, port));
    let fail = |e: std::io::Error| anyhow!("cannot read the greeting of port {port}: {e}");
    let mut stream = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(fail)?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.contains(&b'\n') {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || got.len() > 4096 {
            bail!("port {port} sent no greeting line within {PROBE_TIMEOUT:?} (got {got:?})");
        }
        stream.set_read_timeout(Some(left)).map_err(fail)?;
        match stream.read(&mut buf).map_err(fail)? {
            0 => bail!("port {port} closed before a greeting line (got {got:?})"),
            n => got.extend_from_slice(&buf[..n]),
        }
    }
    let end = got
        .iter()
        .position(|&b| b == b'\n')
        .map_or(got.len(), |i| i + 1);
    String::from_utf8(got[..end].to_vec())
        .map_err(|_| anyhow!("port {port} greeted with bytes that are not UTF-8"))
}

// ---- helpers --------------------------------------------------------------------------------

/// Makes `path` root's, readable by `group` as well (0640), and by no one else.
fn share_with_group(path: &str, group: &str) -> Result<()> {
    let gid = nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .ok_or_else(|| {
            anyhow!("the group {group} is missing (its package makes it: run scripts/setup)")
        })?
        .gid;
    set_mode(path, 0o600)?;
    std::os::unix::fs::chown(path, Some(0), Some(gid.as_raw()))
        .map_err(|e| anyhow!("cannot give {path} to the group {group}: {e}"))?;
    set_mode(path, 0o640)
}

fn set_mode(path: &str, mode: u32) -> Result<()> {
    let perms = std::os::unix::fs::PermissionsExt::from_mode(mode);
    std::fs::set_permissions(path, perms).map_err(|e| anyhow!("cannot chmod {path}: {e}"))
}

/// The last line of a server's log, as "; <what> said: …", or nothing.
fn last_line(log: &Path, what: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!("; {what} said: {}", l.trim()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{field_matches, parse_services, EXPECT_FIELDS};

    #[test]
    fn services_parse_and_refuse_unknown_names() {
        let all = parse_services("ssh,smtp,imap,pop3,ftp,tls13,tls10").unwrap();
        assert_eq!(all, LabService::ALL);
        let ports: Vec<u16> = all.iter().map(|s| s.port()).collect();
        assert_eq!(ports, [22, 25, 143, 110, 21, 8443, 9443]);
        assert_eq!(
            parse_services("tls10, ssh").unwrap(),
            [LabService::Tls10, LabService::Ssh]
        );
        let e = parse_services("ssh,telnet").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown service \"telnet\" (use ssh, smtp, imap, pop3, ftp, tls13 or tls10)"
        );
        let e = parse_services("ssh,ssh").unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        for s in LabService::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name()));
            assert_eq!(serde_json::from_str::<LabService>(&json).unwrap(), s);
        }
    }

    #[test]
    fn base64_and_host_key_hash() {
        assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
        assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
        assert_eq!(base64_decode("TQ==").unwrap(), b"M");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("TW!u"), None);
        let line = "ssh-ed25519 TWFu sonde lab";
        assert_eq!(public_key_sha256(line).unwrap(), crate::sha256_hex(b"Man"));
        assert_eq!(public_key_sha256("ssh-ed25519"), None);
    }

    #[test]
    fn fields_name_what_each_service_shows() {
        let addr: std::net::IpAddr = "198.18.0.5".parse().unwrap();
        let smtp = ServiceStatus {
            banner: Some(SMTP_BANNER.into()),
            cert_sha256: Some("ab".repeat(32)),
            ..ServiceStatus::started(LabService::Smtp, 1)
        };
        assert_eq!(
            smtp.fields(addr),
            [
                ("smtp_banner", "220 sonde lab 198.18.0.5 ESMTP".to_string()),
                ("banner", "220 sonde lab 198.18.0.5 ESMTP\r\n".to_string()),
                ("tls_cert_sha256", "ab".repeat(32)),
            ]
        );
        let tls10 = ServiceStatus {
            cert_sha256: Some("cd".repeat(32)),
            tls_version: Some("TLSv1.0".into()),
            tls_cipher: Some(TLS10_CIPHER.into()),
            ..ServiceStatus::started(LabService::Tls10, 1)
        };
        let names: Vec<&str> = tls10.fields(addr).iter().map(|f| f.0).collect();
        assert_eq!(names, ["tls_cert_sha256", "tls_version", "tls_cipher"]);
        let ssh = ServiceStatus {
            banner: Some("SSH-2.0-OpenSSH_9.2p1\r\n".into()),
            host_key_sha256: Some("ef".repeat(32)),
            ..ServiceStatus::started(LabService::Ssh, 1)
        };
        let names: Vec<&str> = ssh.fields(addr).iter().map(|f| f.0).collect();
        assert_eq!(names, ["ssh_banner", "banner", "ssh_host_key_sha256"]);
        let ftp = ServiceStatus {
            banner: Some(FTP_BANNER.into()),
            cert_sha256: Some("01".repeat(32)),
            ..ServiceStatus::started(LabService::Ftp, 1)
        };
        assert_eq!(
            ftp.fields(addr),
            [
                ("ftp_banner", "220 sonde lab FTP".to_string()),
                ("banner", "220 sonde lab FTP\r\n".to_string()),
                ("tls_cert_sha256", "01".repeat(32)),
            ]
        );
        for s in [smtp, tls10, ssh, ftp] {
            for (name, _) in s.fields(addr) {
                assert!(EXPECT_FIELDS.contains(&name), "{name}");
            }
        }
    }

    #[test]
    fn fields_match_by_their_kind() {
        assert!(field_matches("tls_cert_sha256", "abcd", "ABCD"));
        assert!(!field_matches("tls_cert_sha256", "abcd", "abce"));
        assert!(field_matches("ssh_banner", "SSH-2.0-x", "SSH-2.0-x\r\n"));
        assert!(!field_matches("ssh_banner", "SSH-2.0-x", "SSH-2.0-y"));
        // The banner module's field keeps its line end: it is compared byte for byte.
        assert!(!field_matches("banner", "SSH-2.0-x\r\n", "SSH-2.0-x"));
        assert!(field_matches("tls_version", "TLSv1.0", "TLSv1.0"));
        assert!(!field_matches("tls_version", "TLSv1.0", "tlsv1.0"));
    }

    #[test]
    fn configs_keep_everything_in_the_lab_folder() {
        let dir = Path::new("/run/sonde/lab/x-services");
        let ssh = sshd_config(dir, false);
        assert!(
            ssh.contains("ListenAddress 0.0.0.0:22\n") && !ssh.contains("[::]"),
            "{ssh}"
        );
        assert!(
            ssh.contains("PidFile /run/sonde/lab/x-services/sshd.pid"),
            "{ssh}"
        );
        assert!(sshd_config(dir, true).contains("ListenAddress [::]:22\n"));
        let exim = exim_config(dir);
        assert!(
            exim.contains("smtp_banner = sonde lab $interface_address ESMTP\n"),
            "{exim}"
        );
        assert!(exim.contains("pid_file_path = /run/sonde/lab/x-services/exim.pid"));
        assert!(exim.contains("tls_advertise_hosts = *"));
        assert!(!exim.contains("local_interfaces"), "{exim}");
        let dovecot = dovecot_config(dir, false, &[LabService::Imap, LabService::Pop3], "x");
        assert!(dovecot.contains("protocols = imap pop3\n"), "{dovecot}");
        assert!(dovecot.contains("ssl_cert = </run/sonde/lab/x-services/pop3-cert.pem"));
        assert!(
            dovecot.contains("inet_listener imaps {\n    port = 0"),
            "{dovecot}"
        );
        assert!(dovecot.contains("base_dir = /run/sonde/lab/x-services/dovecot-run"));
        let tls = tls_config(dir, true, &[LabService::Tls13, LabService::Tls10], 2, 4096);
        assert!(tls.contains("listen 8443 ssl reuseport"), "{tls}");
        assert!(tls.contains("listen [::]:9443 ssl ipv6only=on"), "{tls}");
        assert!(tls.contains("ssl_protocols TLSv1;\n        ssl_ciphers AES128-SHA:@SECLEVEL=0;"));
        assert!(tls.contains("ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;"));
        assert!(tls.contains("return 200 \"sonde lab $server_addr\\n\";"));
        let ftp = vsftpd_config(dir, false);
        assert!(ftp.contains("listen=YES\nlisten_ipv6=NO\n"), "{ftp}");
        assert!(vsftpd_config(dir, true).contains("listen=NO\nlisten_ipv6=YES\n"));
        assert!(ftp.contains("ftpd_banner=sonde lab FTP\n"), "{ftp}");
        assert!(
            ftp.contains("ssl_enable=YES\nallow_anon_ssl=YES\n"),
            "{ftp}"
        );
        assert!(ftp.contains("rsa_cert_file=/run/sonde/lab/x-services/ftp-cert.pem\n"));
        assert!(ftp.contains("max_per_ip=0\n") && ftp.contains("background=NO\n"));
        for c in [ssh, exim, dovecot, tls, ftp] {
            // No folder of the system-wide daemons is used.
            assert!(!c.contains("/etc/") && !c.contains("/var/"), "{c}");
        }
    }
}
