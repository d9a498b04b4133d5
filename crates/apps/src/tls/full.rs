//! The full TLS 1.2/1.3 handshake, with `rustls` driven sans-I/O over the bytes the engine
//! hands a connection's [`Session`]: the ClientHello is the session's first bytes, each reply
//! byte goes to `read_tls` once, and what `write_tls` gives (the client's second flight, the
//! HTTP request inside the session for `https`) is sent after it.
//!
//! - The certificate verifier accepts any chain, so that the handshake goes on whatever the
//!   certificate says; it still checks the handshake's signatures with the provider's (ring's)
//!   algorithms, so a row says the server holds the key of the certificate it showed. Whether
//!   the chain validates against the root store is asked afterwards, when the row is written,
//!   and recorded with the reason it does not.
//! - The fallback: rustls speaks TLS 1.2 and 1.3 with forward-secret AEAD suites only. So that
//!   servers of RSA key exchange (or CBC suites) still show their certificate, its ClientHello
//!   also offers, last, the legacy suites the first-flight hello offers. A server that picks one
//!   of them, or a version below 1.2, has sent its whole first flight in clear before rustls
//!   gives up on it: the session then reads that flight from the raw bytes (as the first-flight
//!   `tls` did), on the same connection, and the row says `tls_path` `first-flight`. Why not a
//!   second connection: it needs none of the engine's state, and a server that answers at all
//!   answers this way. Its limit: a TLS 1.0/1.1-only server that honours supported_versions
//!   (OpenSSL 3) refuses the hello with a protocol_version alert; for those `sonde grab -M tls`
//!   makes a second connection with the first-flight hello alone (`--tls-max` 1.1).

use std::io::{ErrorKind, Read, Write};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CipherSuite, CipherSuiteCommon, ClientConfig, ClientConnection, DigitallySignedStruct,
    RootCertStore, SignatureScheme, SupportedCipherSuite, Tls12CipherSuite,
};
use sonde_tcp::{ReplyCursor, Session, MAX_SESSION_SEND};

use super::flight;
use crate::http::HttpApp;
use crate::progress::Mark;
use crate::TlsVersion;

/// Legacy suites offered last so that old servers answer with their first flight (see the
/// module documentation): ECDHE with AES-CBC (SHA-1, SHA-256, SHA-384 MACs), finite-field
/// DHE (servers of DHE suites only), and RSA key exchange, as the first-flight hello offers
/// them.
pub(crate) const LEGACY_SUITES: &[u16] = &[
    0xc013, // TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA
    0xc014, // TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA
    0xc009, // TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA
    0xc00a, // TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA
    0xc027, // TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256
    0xc028, // TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384
    0xc023, // TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256
    0xc024, // TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384
    0x009e, // TLS_DHE_RSA_WITH_AES_128_GCM_SHA256
    0x009f, // TLS_DHE_RSA_WITH_AES_256_GCM_SHA384
    0xccaa, // TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256
    0x0067, // TLS_DHE_RSA_WITH_AES_128_CBC_SHA256
    0x006b, // TLS_DHE_RSA_WITH_AES_256_CBC_SHA256
    0x0033, // TLS_DHE_RSA_WITH_AES_128_CBC_SHA
    0x0039, // TLS_DHE_RSA_WITH_AES_256_CBC_SHA
    0x009c, // TLS_RSA_WITH_AES_128_GCM_SHA256
    0x009d, // TLS_RSA_WITH_AES_256_GCM_SHA384
    0x003c, // TLS_RSA_WITH_AES_128_CBC_SHA256
    0x003d, // TLS_RSA_WITH_AES_256_CBC_SHA256
    0x002f, // TLS_RSA_WITH_AES_128_CBC_SHA
    0x0035, // TLS_RSA_WITH_AES_256_CBC_SHA
    0x000a, // TLS_RSA_WITH_3DES_EDE_CBC_SHA
];

/// The port `https` leaves out of the Host header.
const HTTPS_PORT: u16 = 443;

/// Plaintext read from the session per call.
const READ_CHUNK: usize = 4096;

/// What every connection of a run shares: the client configuration, and for `https` the
/// request.
pub(crate) struct FullTls {
    config: Arc<ClientConfig>,
    /// The run-wide SNI (a checked host name); `None`: none is sent (an IP address target).
    server_name: Option<ServerName<'static>>,
    /// `https`: the HTTP app whose request goes inside the session and whose completeness
    /// check reads the plaintext.
    pub http: Option<HttpApp>,
    /// The length of the ClientHello without SNI, and with the longest SNI name (a hello
    /// grows by a name's length, and by the extension's 9 bytes for the first).
    hello_without_sni: usize,
    hello_with_longest_sni: usize,
}

/// The longest DNS name SNI carries, in bytes.
pub(crate) const LONGEST_NAME: usize = 253;

/// The longest DNS name SNI carries: 253 bytes, in labels of at most 63.
fn longest_name() -> String {
    [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".")
}

/// The length of the ClientHello a session of `config` sends for `name` (an address: no SNI).
fn hello_len(config: &Arc<ClientConfig>, name: &str) -> Result<usize, String> {
    let name = ServerName::try_from(name.to_string())
        .map_err(|e| format!("internal error: TLS server name: {e}"))?;
    let mut conn = ClientConnection::new(config.clone(), name)
        .map_err(|e| format!("internal error: TLS client: {e}"))?;
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello)
            .map_err(|e| format!("internal error: TLS client: {e}"))?;
    }
    Ok(hello.len())
}

/// The client's last handshake flight, at most (TLS 1.3: TLS 1.2's is shorter): a
/// ChangeCipherSpec record (6 bytes), an empty Certificate when the server asks for one (8
/// bytes in a record that adds 5 + 1 + 16), and Finished (4 + 48 bytes of SHA-384, likewise).
const LAST_FLIGHT: usize = 6 + (8 + 22) + (4 + 48 + 22);

/// What a record adds to the data it carries, at most: a 5-byte header, and TLS 1.2 AES-GCM's
/// 8-byte nonce and 16-byte tag (TLS 1.3 adds 1 + 16).
pub(crate) const RECORD_OVERHEAD: usize = 5 + 8 + 16;

impl std::fmt::Debug for FullTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullTls")
            .field("server_name", &self.server_name)
            .field("https", &self.http.is_some())
            .finish()
    }
}

impl FullTls {
    /// The configuration for versions up to `max` (1.2 or 1.3), offering `alpn`, with the
    /// run-wide SNI `server_name`.
    pub fn new(
        max: TlsVersion,
        server_name: Option<&str>,
        alpn: &[&[u8]],
        http: Option<HttpApp>,
    ) -> Result<FullTls, String> {
        let provider = Arc::new(provider_with_legacy_suites());
        let versions: &[&rustls::SupportedProtocolVersion] = if max >= TlsVersion::Tls13 {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS12]
        };
        let verifier = Arc::new(RecordAll {
            algorithms: provider.signature_verification_algorithms,
        });
        let mut config = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("internal error: TLS configuration: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // Every connection is new: no tickets kept, no resumption offered.
        config.resumption = rustls::client::Resumption::disabled();
        let server_name = server_name
            .map(|name| {
                ServerName::try_from(name.to_string())
                    .map_err(|e| format!("bad TLS server name {name:?}: {e}"))
            })
            .transpose()?;
        let config = Arc::new(config);
        let hello_without_sni = hello_len(&config, "198.18.0.1")?;
        let hello_with_longest_sni = hello_len(&config, &longest_name())?;
        Ok(FullTls {
            config,
            server_name,
            http,
            hello_without_sni,
            hello_with_longest_sni,
        })
    }

    /// The longest SNI name of the run-wide one and `names_longest` (a target's own), 0 for
    /// none.
    pub fn longest_sni(&self, names_longest: usize) -> usize {
        let run_wide = match &self.server_name {
            Some(ServerName::DnsName(name)) => name.as_ref().len(),
            _ => 0,
        };
        run_wide.max(names_longest).min(LONGEST_NAME)
    }

    /// The most bytes the handshake sends with an SNI name of `sni` bytes (0: none) when the
    /// server follows the protocol and sends no HelloRetryRequest: the ClientHello and the
    /// client's last flight. (A HelloRetryRequest adds a second ClientHello; a session that
    /// then has no room stops there and says so, as for key updates and the like.)
    pub fn handshake_most(&self, sni: usize) -> usize {
        let hello = match sni {
            0 => self.hello_without_sni,
            n => self.hello_with_longest_sni - (LONGEST_NAME - n.min(LONGEST_NAME)),
        };
        hello + LAST_FLIGHT
    }

    /// A session for a new connection to (`addr`, `port`), its ClientHello appended to `first`;
    /// `name` (the target's own) overrides the run-wide SNI. The session sends at most `budget`
    /// bytes, its ClientHello included (`None` if that does not fit).
    pub fn open(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        first: &mut Vec<u8>,
        budget: usize,
    ) -> Option<TlsSession> {
        // A target's name that is no DNS name (an address) sends no SNI, as RFC 6066 asks.
        let own = name.and_then(|name| ServerName::try_from(name.to_string()).ok());
        let server_name = own
            .or_else(|| self.server_name.clone())
            .unwrap_or(ServerName::IpAddress(addr.into()));
        let sent_name = matches!(server_name, ServerName::DnsName(_)).then(|| server_name.clone());
        let mut conn = ClientConnection::new(self.config.clone(), server_name).ok()?;
        let before = first.len();
        while conn.wants_write() {
            conn.write_tls(first).ok()?;
        }
        let sent = first.len() - before;
        if sent > budget {
            first.truncate(before);
            return None;
        }
        // Host: the target's name, else --http-host, else the SNI, else the address.
        let sni = match &self.server_name {
            Some(ServerName::DnsName(dns)) if http_host_unset(self.http.as_ref()) => {
                Some(dns.as_ref())
            }
            _ => None,
        };
        let request = self
            .http
            .as_ref()
            .map(|http| http.request_for(addr, port, name.or(sni), HTTPS_PORT));
        Some(TlsSession {
            conn,
            sni: sent_name,
            handshake: Vec::new(),
            done: false,
            failure: None,
            sent,
            budget,
            request,
            https: self.http.as_ref().map(HttpApp::head_request),
            plaintext: Vec::new(),
            cursor: ReplyCursor::default(),
            flight_cursor: ReplyCursor::default(),
            closed: false,
        })
    }
}

fn http_host_unset(http: Option<&HttpApp>) -> bool {
    http.is_some_and(|http| !http.has_fixed_host())
}

/// ring's provider with [`LEGACY_SUITES`] appended. They borrow the machinery of an ECDHE
/// AES-GCM suite only so that rustls offers them and takes a ServerHello that picks one: the
/// session stops following the handshake there (see [`TlsSession::legacy_suite`]), sends
/// nothing more, and reads the server's first flight from the raw bytes.
fn provider_with_legacy_suites() -> CryptoProvider {
    static LEGACY: OnceLock<Vec<SupportedCipherSuite>> = OnceLock::new();
    let legacy = LEGACY.get_or_init(|| {
        let SupportedCipherSuite::Tls12(model) =
            ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
        else {
            unreachable!("a TLS 1.2 suite");
        };
        LEGACY_SUITES
            .iter()
            .map(|&id| {
                // Leaked once per process: rustls takes suites by 'static reference.
                let suite: &'static Tls12CipherSuite = Box::leak(Box::new(Tls12CipherSuite {
                    common: CipherSuiteCommon {
                        suite: CipherSuite::from(id),
                        hash_provider: model.common.hash_provider,
                        confidentiality_limit: model.common.confidentiality_limit,
                    },
                    prf_provider: model.prf_provider,
                    kx: model.kx,
                    sign: model.sign,
                    aead_alg: model.aead_alg,
                }));
                SupportedCipherSuite::Tls12(suite)
            })
            .collect()
    });
    let mut provider = ring::default_provider();
    provider.cipher_suites.extend(legacy.iter().copied());
    provider
}

/// Accepts any certificate chain (it is recorded and validated when the row is written) but
/// checks the handshake's signatures.
#[derive(Debug)]
struct RecordAll {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for RecordAll {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// One connection's TLS: made when it opens (the ClientHello is its first bytes), dropped once
/// its row is written.
pub(crate) struct TlsSession {
    pub conn: ClientConnection,
    /// The name sent as SNI, which the chain is validated for; `None` for an address (no SNI
    /// is sent, and a chain is not checked against the address: a publicly trusted
    /// certificate names hosts, not the addresses they are reached at).
    pub sni: Option<ServerName<'static>>,
    /// The server's bytes of its first flight not yet read past: from the last record
    /// boundary with no handshake message open, until the flight is complete (then nothing).
    /// Its completeness is read from them when rustls cannot go on (the row reads the flight
    /// from the connection's bytes).
    handshake: Vec<u8>,
    /// The handshake is done.
    pub done: bool,
    /// Why the handshake stopped, if it did.
    pub failure: Option<Stop>,
    /// Bytes the session has sent, its ClientHello included, and the most it may send.
    sent: usize,
    budget: usize,
    /// `https`: the request, sent once the handshake is done.
    request: Option<Vec<u8>>,
    /// `https` (with whether the request is HEAD): the exchange ends with the response.
    https: Option<bool>,
    /// What the server sent inside the session.
    pub plaintext: Vec<u8>,
    cursor: ReplyCursor,
    /// How far the clear first flight in `handshake` has been read (its position relative to
    /// the start of `handshake`).
    flight_cursor: ReplyCursor,
    /// The server's close_notify arrived.
    closed: bool,
}

/// Why a session's handshake stopped.
#[derive(Debug)]
pub(crate) enum Stop {
    /// rustls failed (an alert received, a message it refuses).
    Rustls(rustls::Error),
    /// The server chose this suite of [`LEGACY_SUITES`], which rustls does not speak.
    LegacySuite(u16),
    /// The session would have sent this many bytes, more than its budget.
    SendBudget(usize),
}

impl Stop {
    /// The alert the server sent, when that is what stopped the handshake.
    pub fn alert(&self) -> Option<u8> {
        match self {
            Stop::Rustls(rustls::Error::AlertReceived(alert)) => Some(u8::from(*alert)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Rustls(e) => write!(f, "{e}"),
            Stop::LegacySuite(suite) => write!(
                f,
                "the server chose {}, which rustls does not speak: its first flight answers",
                super::cipher_name(*suite)
            ),
            Stop::SendBudget(bytes) => write!(
                f,
                "session cut: the server asked sonde to send {bytes} bytes in all, more than \
                 the {MAX_SESSION_SEND} a session sends"
            ),
        }
    }
}

impl TlsSession {
    /// Reads the server's bytes `new` into rustls; returns false once it fails.
    fn read(&mut self, mut new: &[u8]) -> bool {
        while !new.is_empty() {
            match self.conn.read_tls(&mut new) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    self.failure = Some(Stop::Rustls(rustls::Error::General(
                        "receive buffer full".into(),
                    )));
                    return false;
                }
            }
            if let Err(e) = self.conn.process_new_packets() {
                self.failure = Some(Stop::Rustls(e));
                return false;
            }
            self.drain_plaintext();
        }
        true
    }

    /// Moves the plaintext rustls holds into `plaintext`.
    fn drain_plaintext(&mut self) {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match self.conn.reader().read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => self.plaintext.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    // Closed without close_notify: what came is all there is.
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// The suite the server chose, when it is one of [`LEGACY_SUITES`] (rustls does not speak
    /// them) and the handshake is not done.
    fn legacy_suite(&self) -> Option<u16> {
        let suite = u16::from(self.conn.negotiated_cipher_suite()?.suite());
        (!self.done && LEGACY_SUITES.contains(&suite)).then_some(suite)
    }

    /// Appends what rustls has to send to `send`; false, with nothing appended and the
    /// session stopped, when it would take the session past its budget (a HelloRetryRequest's
    /// long cookie, many key updates: a server that asks more than the engine keeps).
    fn write(&mut self, send: &mut Vec<u8>) -> bool {
        let before = send.len();
        while self.conn.wants_write() {
            if self.conn.write_tls(send).is_err() {
                break;
            }
        }
        let new = send.len() - before;
        if self.sent + new > self.budget {
            send.truncate(before);
            self.failure = Some(Stop::SendBudget(self.sent + new));
            return false;
        }
        self.sent += new;
        true
    }

    /// Reads the server's bytes `new` on into the first flight: whether it is complete (read
    /// on from where the last call stopped, so a flight fed in small segments is read once).
    /// Only what is not yet read past is kept: the bytes from the last boundary, and nothing
    /// once the flight is complete.
    fn read_flight(&mut self, new: &[u8]) -> bool {
        let mark = Mark::load(self.flight_cursor);
        if mark.phase == 1 {
            return true;
        }
        self.handshake.extend_from_slice(new);
        let complete = flight::is_complete_after(&self.handshake, &mut self.flight_cursor);
        if complete {
            self.handshake = Vec::new();
            return true;
        }
        let mark = Mark::load(self.flight_cursor);
        if mark.pos > 0 {
            self.handshake.drain(..mark.pos.min(self.handshake.len()));
            self.flight_cursor = Mark { pos: 0, ..mark }.store();
        }
        false
    }

    /// After rustls stopped: whether the first flight in the raw bytes is complete.
    fn first_flight_complete(&mut self) -> bool {
        self.read_flight(&[])
    }
}

impl Session for TlsSession {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        let flight_complete = !self.done && self.read_flight(new);
        if self.failure.is_some() {
            return flight_complete;
        }
        let read = self.read(new);
        if let Some(suite) = self.legacy_suite() {
            // Not followed (whether or not rustls already failed on it): what rustls would
            // send is not of this suite. Its first flight answers, in clear.
            self.failure = Some(Stop::LegacySuite(suite));
            return self.first_flight_complete();
        }
        if !read {
            return self.first_flight_complete();
        }
        if !self.done && !self.conn.is_handshaking() {
            self.done = true;
            if let Some(request) = self.request.take() {
                // The plaintext buffer takes it (rustls buffers until it can send).
                let _ = self.conn.writer().write_all(&request);
            }
        }
        if !self.write(send) {
            return true;
        }
        if !self.done {
            return false;
        }
        match self.https {
            None => true,
            Some(head) => {
                self.closed
                    || crate::http::is_complete_response(&self.plaintext, head, &mut self.cursor)
            }
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Root certificates from a PEM file (`--root-cas`); the error is one line naming it.
pub(crate) fn roots_from_pem(path: &std::path::Path) -> Result<RootCertStore, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read --root-cas {}: {e}: give a PEM file of CA certificates",
            path.display()
        )
    })?;
    let mut roots = RootCertStore::empty();
    for (i, cert) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
        let cert = cert.map_err(|e| {
            format!("bad --root-cas {}: certificate {} is not PEM ({e:?}): give a PEM file of CA certificates", path.display(), i + 1)
        })?;
        roots.add(cert).map_err(|e| {
            format!("bad --root-cas {}: certificate {} is not a usable CA certificate ({e}): give a PEM file of CA certificates", path.display(), i + 1)
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "bad --root-cas {}: no PEM certificate in it: give a PEM file of CA certificates",
            path.display()
        ));
    }
    Ok(roots)
}

/// The Mozilla roots of `webpki-roots`: the default root store.
pub(crate) fn default_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}
