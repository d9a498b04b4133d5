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
use sonde_tcp::{ReplyCursor, Session};

use super::flight::{read_flight, FlightEnd};
use crate::http::HttpApp;
use crate::TlsVersion;

/// Legacy suites offered last so that old servers answer with their first flight (see the
/// module documentation): the RSA key exchange and ECDHE-CBC suites of the first-flight hello.
pub(crate) const LEGACY_SUITES: &[u16] = &[
    0xc013, // TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA
    0xc014, // TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA
    0xc009, // TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA
    0xc00a, // TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA
    0x009c, // TLS_RSA_WITH_AES_128_GCM_SHA256
    0x009d, // TLS_RSA_WITH_AES_256_GCM_SHA384
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
}

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
        Ok(FullTls {
            config: Arc::new(config),
            server_name,
            http,
        })
    }

    /// A session for a new connection to (`addr`, `port`), its ClientHello appended to `first`;
    /// `name` (the target's own) overrides the run-wide SNI.
    pub fn open(
        &self,
        addr: IpAddr,
        port: u16,
        name: Option<&str>,
        first: &mut Vec<u8>,
    ) -> Option<TlsSession> {
        // A target's name that is no DNS name (an address) sends no SNI, as RFC 6066 asks.
        let own = name.and_then(|name| ServerName::try_from(name.to_string()).ok());
        let server_name = own
            .or_else(|| self.server_name.clone())
            .unwrap_or(ServerName::IpAddress(addr.into()));
        let mut conn = ClientConnection::new(self.config.clone(), server_name.clone()).ok()?;
        while conn.wants_write() {
            conn.write_tls(first).ok()?;
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
            name: server_name,
            handshake: Vec::new(),
            done: false,
            failure: None,
            request,
            https: self.http.as_ref().map(HttpApp::head_request),
            plaintext: Vec::new(),
            cursor: ReplyCursor::default(),
            closed: false,
        })
    }
}

fn http_host_unset(http: Option<&HttpApp>) -> bool {
    http.is_some_and(|http| !http.has_fixed_host())
}

/// ring's provider with [`LEGACY_SUITES`] appended. They borrow the machinery of an ECDHE
/// AES-GCM suite: a server that picks one is not followed past its first flight (rustls fails
/// at its ServerHello's version, at a missing ServerKeyExchange, or at the Finished, and the
/// session reads the flight from the raw bytes instead).
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
    /// The name the session validates for (SNI, or the target's address).
    pub name: ServerName<'static>,
    /// The server's bytes until the handshake is done (or for good once rustls failed): the
    /// first flight is read from them when rustls cannot go on.
    handshake: Vec<u8>,
    /// The handshake is done.
    pub done: bool,
    /// Why rustls stopped, if it did.
    pub failure: Option<rustls::Error>,
    /// `https`: the request, sent once the handshake is done.
    request: Option<Vec<u8>>,
    /// `https` (with whether the request is HEAD): the exchange ends with the response.
    https: Option<bool>,
    /// What the server sent inside the session.
    pub plaintext: Vec<u8>,
    cursor: ReplyCursor,
    /// The server's close_notify arrived.
    closed: bool,
}

impl TlsSession {
    /// Reads the server's bytes `new` into rustls; returns false once it fails.
    fn read(&mut self, mut new: &[u8]) -> bool {
        while !new.is_empty() {
            match self.conn.read_tls(&mut new) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    self.failure = Some(rustls::Error::General("receive buffer full".into()));
                    return false;
                }
            }
            if let Err(e) = self.conn.process_new_packets() {
                self.failure = Some(e);
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

    /// After rustls stopped: the first flight in the raw bytes is complete.
    fn first_flight_complete(&self) -> bool {
        read_flight(&self.handshake, false).end != FlightEnd::Incomplete
    }
}

impl Session for TlsSession {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        if !self.done {
            self.handshake.extend_from_slice(new);
        }
        if self.failure.is_some() {
            return self.first_flight_complete();
        }
        if !self.read(new) {
            return self.first_flight_complete();
        }
        if !self.done && !self.conn.is_handshaking() {
            self.done = true;
            if let Some(request) = self.request.take() {
                // The plaintext buffer takes it (rustls buffers until it can send).
                let _ = self.conn.writer().write_all(&request);
            }
        }
        while self.conn.wants_write() {
            if self.conn.write_tls(send).is_err() {
                break;
            }
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
