//! The ClientHello `tls` sends, written by hand: `tls-parser` can serialize only a few
//! extensions, so its types give the numbers (cipher suites by IANA name, groups, signature
//! schemes, extension and message types) and this file lays out the bytes (RFC 5246 §7.4.1.2,
//! RFC 8446 §4.1.2). It is rendered once; per target only the random (and for TLS 1.3 the
//! legacy session id) is patched in, both derived from the target so a retransmission is
//! byte for byte the same.

use std::net::IpAddr;

use sha2::{Digest, Sha256};
use tls_parser::{
    NamedGroup, SignatureScheme, TlsCipherSuite, TlsExtensionType, TlsHandshakeType, TlsRecordType,
};

use crate::TlsVersion;

/// TLS 1.2 suites in order of preference: forward-secret AEAD first, then ECDHE with AES-CBC,
/// then finite-field DHE (servers of DHE suites only), then RSA key exchange for old servers.
/// Servers of TLS 1.0/1.1 skip the SHA-256 and SHA-384 ones, which are TLS 1.2's.
const TLS12_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
];

/// TLS 1.3 suites, offered first when TLS 1.3 is.
const TLS13_SUITES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

const GROUPS: &[NamedGroup] = &[
    NamedGroup::EcdhX25519,
    NamedGroup::Secp256r1,
    NamedGroup::Secp384r1,
    NamedGroup::Secp521r1,
];

const SIGNATURE_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::ecdsa_secp256r1_sha256,
    SignatureScheme::rsa_pss_rsae_sha256,
    SignatureScheme::rsa_pkcs1_sha256,
    SignatureScheme::ecdsa_secp384r1_sha384,
    SignatureScheme::rsa_pss_rsae_sha384,
    SignatureScheme::rsa_pkcs1_sha384,
    SignatureScheme::rsa_pss_rsae_sha512,
    SignatureScheme::rsa_pkcs1_sha512,
    SignatureScheme::ed25519,
    SignatureScheme::rsa_pkcs1_sha1,
    SignatureScheme::ecdsa_sha1,
];

/// The x25519 key share offered with TLS 1.3: a fixed public key, the one of Alice in RFC 7748
/// §6.1. It is a valid curve point, so servers accept it; its secret is public, which does not
/// matter because sonde never finishes a handshake (it reads the ServerHello and closes).
pub(crate) const X25519_PUBLIC_KEY: [u8; 32] = [
    0x85, 0x20, 0xf0, 0x09, 0x89, 0x30, 0xa7, 0x54, 0x74, 0x8b, 0x7d, 0xdc, 0xb4, 0x3e, 0xf7, 0x5a,
    0x0d, 0xbf, 0x3a, 0x0d, 0x26, 0x38, 0x1a, 0xf4, 0xeb, 0xa4, 0xa9, 0x8e, 0xaa, 0x9b, 0x4e, 0x6a,
];

/// A rendered ClientHello record and where its per-target bytes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientHello {
    pub bytes: Vec<u8>,
    /// Offset of the 32-byte random.
    pub random_at: usize,
    /// Offset of the 32-byte legacy session id (TLS 1.3 offers only, for middlebox
    /// compatibility, RFC 8446 §D.4).
    pub session_id_at: Option<usize>,
}

impl ClientHello {
    /// Renders the ClientHello offering versions up to `max`, with SNI `server_name` when given
    /// (a checked host name).
    pub fn new(max: TlsVersion, server_name: Option<&str>) -> Result<ClientHello, String> {
        let tls13 = max >= TlsVersion::Tls13;
        let legacy_version = max.min(TlsVersion::Tls12).wire();
        let mut suites = Vec::new();
        let names = TLS13_SUITES.iter().filter(|_| tls13).chain(TLS12_SUITES);
        for &name in names {
            let suite = TlsCipherSuite::from_name(name)
                .ok_or_else(|| format!("internal error: unknown cipher suite {name}"))?;
            suites.push(suite.id.0);
        }

        let mut out = Vec::with_capacity(512);
        out.push(TlsRecordType::Handshake.0);
        put_u16(&mut out, legacy_version);
        let mut random_at = 0;
        let mut session_id_at = None;
        with_len(&mut out, 2, |record| {
            record.push(TlsHandshakeType::ClientHello.0);
            with_len(record, 3, |hello| {
                put_u16(hello, legacy_version);
                random_at = hello.len();
                hello.extend_from_slice(&[0; 32]);
                with_len(hello, 1, |session_id| {
                    if tls13 {
                        session_id_at = Some(session_id.len());
                        session_id.extend_from_slice(&[0; 32]);
                    }
                });
                with_len(hello, 2, |list| {
                    suites.iter().for_each(|&id| put_u16(list, id))
                });
                hello.extend_from_slice(&[1, 0]); // compression methods: null only
                with_len(hello, 2, |extensions| {
                    write_extensions(extensions, tls13, server_name)
                });
            });
        });
        Ok(ClientHello {
            bytes: out,
            random_at,
            session_id_at,
        })
    }

    /// Writes the hello for `addr`:`port` into `buf`; 0 when `buf` is too short.
    pub fn write(&self, buf: &mut [u8], addr: IpAddr, port: u16) -> usize {
        let Some(out) = buf.get_mut(..self.bytes.len()) else {
            return 0;
        };
        out.copy_from_slice(&self.bytes);
        out[self.random_at..self.random_at + 32].copy_from_slice(&derived(b"random", addr, port));
        if let Some(at) = self.session_id_at {
            out[at..at + 32].copy_from_slice(&derived(b"session id", addr, port));
        }
        self.bytes.len()
    }
}

fn write_extensions(out: &mut Vec<u8>, tls13: bool, server_name: Option<&str>) {
    if let Some(name) = server_name {
        extension(out, TlsExtensionType::ServerName, |ext| {
            with_len(ext, 2, |list| {
                list.push(0); // host_name
                with_len(list, 2, |host| host.extend_from_slice(name.as_bytes()));
            });
        });
    }
    extension(out, TlsExtensionType::ExtendedMasterSecret, |_| {});
    // Secure renegotiation (RFC 5746): an empty renegotiated_connection.
    extension(out, TlsExtensionType::RenegotiationInfo, |ext| ext.push(0));
    extension(out, TlsExtensionType::SupportedGroups, |ext| {
        with_len(ext, 2, |list| {
            GROUPS.iter().for_each(|group| put_u16(list, group.0))
        });
    });
    // Uncompressed points only.
    extension(out, TlsExtensionType::EcPointFormats, |ext| {
        ext.extend_from_slice(&[1, 0])
    });
    extension(out, TlsExtensionType::SignatureAlgorithms, |ext| {
        with_len(ext, 2, |list| {
            SIGNATURE_SCHEMES
                .iter()
                .for_each(|scheme| put_u16(list, scheme.0))
        });
    });
    if tls13 {
        extension(out, TlsExtensionType::SupportedVersions, |ext| {
            with_len(ext, 1, |list| {
                put_u16(list, TlsVersion::Tls13.wire());
                put_u16(list, TlsVersion::Tls12.wire());
            });
        });
        extension(out, TlsExtensionType::KeyShare, |ext| {
            with_len(ext, 2, |shares| {
                put_u16(shares, NamedGroup::EcdhX25519.0);
                with_len(shares, 2, |key| key.extend_from_slice(&X25519_PUBLIC_KEY));
            });
        });
    }
}

fn extension(out: &mut Vec<u8>, kind: TlsExtensionType, body: impl FnOnce(&mut Vec<u8>)) {
    put_u16(out, kind.0);
    with_len(out, 2, body);
}

fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Writes what `body` writes (into the same buffer, so offsets taken inside are absolute)
/// behind a big-endian length of `width` bytes. Everything here is far shorter than 2^8
/// (lists) or 2^16 bytes: [`crate::MAX_REQUEST_LEN`] bounds the hello.
fn with_len(out: &mut Vec<u8>, width: usize, body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.resize(at + width, 0);
    body(out);
    let len = ((out.len() - at - width) as u32).to_be_bytes();
    out[at..at + width].copy_from_slice(&len[4 - width..]);
}

/// 32 bytes that depend only on the target: SHA-256 over a label, the address and the port.
fn derived(label: &[u8], addr: IpAddr, port: u16) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"sonde tls ");
    hash.update(label);
    match addr {
        IpAddr::V4(v4) => hash.update(v4.octets()),
        IpAddr::V6(v6) => hash.update(v6.octets()),
    }
    hash.update(port.to_be_bytes());
    hash.finalize().into()
}
