//! `ssh`: our identification string, then the server's (RFC 4253 §4.2) and its first binary
//! packet, the KEXINIT (§7.1): the algorithm lists it offers. When the server offers
//! `curve25519-sha256` (RFC 8731), the session answers with a KEXINIT that can only negotiate
//! it and an SSH_MSG_KEX_ECDH_INIT with an ephemeral X25519 key (RFC 5656 §4), and reads the
//! SSH_MSG_KEX_ECDH_REPLY: the server's host key K_S, recorded as its type and SHA-256. The
//! reply's signature is not checked and no shared secret is computed: the host key is what the
//! server presents, not proof that it holds the private key. The connection ends once the
//! reply is in. A server that offers no curve25519 gives no host key (those fields absent).

use std::net::IpAddr;

use ring::agreement::{EphemeralPrivateKey, X25519};
use ring::rand::{SecureRandom, SystemRandom};
use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::{App, Session};

use crate::progress::{find, looked_at};
use crate::text::{lossy, sha256_hex};
use crate::AppOutcome;

/// What sonde says it is.
const IDENTIFICATION: &[u8] =
    concat!("SSH-2.0-sonde_", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes();
/// RFC 4253 §4.2: lines before the identification are allowed; past this many bytes without
/// one the server is not speaking SSH.
const MAX_PREAMBLE: usize = 8192;
/// RFC 4253 §6.1: packets of at least 35000 bytes need not be handled; a KEXINIT or a KEX
/// reply is far shorter.
const MAX_PACKET: usize = 35000;
/// The most reply bytes a session keeps: the preamble, the KEXINIT and the KEX reply (with
/// any IGNORE or DEBUG packets before it).
const MAX_REPLY: usize = MAX_PREAMBLE + 3 * MAX_PACKET;

const SSH_MSG_IGNORE: u8 = 2;
const SSH_MSG_DEBUG: u8 = 4;
const SSH_MSG_KEXINIT: u8 = 20;
const SSH_MSG_KEX_ECDH_INIT: u8 = 30;
const SSH_MSG_KEX_ECDH_REPLY: u8 = 31;

/// The key exchanges sonde runs (RFC 8731; the second is the same method's older name).
const CURVE25519: [&str; 2] = ["curve25519-sha256", "curve25519-sha256@libssh.org"];

/// Our KEXINIT's name-lists: the kex is one of [`CURVE25519`]; the rest list what OpenSSH and
/// other common servers offer, so that negotiation succeeds and the server sends its reply.
/// Host key algorithms: the first of ours the server has decides which key it shows.
const OUR_LISTS: [&str; 10] = [
    "curve25519-sha256,curve25519-sha256@libssh.org",
    "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,\
     rsa-sha2-512,rsa-sha2-256,ssh-rsa,ssh-dss",
    CIPHERS,
    CIPHERS,
    MACS,
    MACS,
    "none,zlib@openssh.com,zlib",
    "none,zlib@openssh.com,zlib",
    "",
    "",
];
const CIPHERS: &str = "aes128-ctr,aes192-ctr,aes256-ctr,aes128-gcm@openssh.com,\
     aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-cbc,aes256-cbc,3des-cbc";
const MACS: &str = "hmac-sha2-256,hmac-sha2-512,hmac-sha1,hmac-sha2-256-etm@openssh.com,\
     hmac-sha2-512-etm@openssh.com,hmac-sha1-etm@openssh.com,umac-64-etm@openssh.com,\
     umac-128-etm@openssh.com,umac-64@openssh.com,umac-128@openssh.com";

/// The KEXINIT's name-lists, in order (RFC 4253 §7.1).
const LISTS: [&str; 10] = [
    "ssh_kex_algorithms",
    "ssh_host_key_algorithms",
    "ssh_ciphers_c2s",
    "ssh_ciphers_s2c",
    "ssh_macs_c2s",
    "ssh_macs_s2c",
    "ssh_compression_c2s",
    "ssh_compression_s2c",
    "ssh_languages_c2s",
    "ssh_languages_s2c",
];

/// Fields of the `ssh` app.
pub static SSH_FIELDS: &[Field] = &[
    Field {
        name: "ssh_banner",
        kind: FieldType::Str,
        help: "the server's identification string (SSH-2.0-…), without its line end",
    },
    Field {
        name: "ssh_kex_algorithms",
        kind: FieldType::Str,
        help: "key-exchange methods the server's KEXINIT offers, comma-separated",
    },
    Field {
        name: "ssh_host_key_algorithms",
        kind: FieldType::Str,
        help: "host key algorithms offered",
    },
    Field {
        name: "ssh_ciphers_c2s",
        kind: FieldType::Str,
        help: "ciphers offered, client to server",
    },
    Field {
        name: "ssh_ciphers_s2c",
        kind: FieldType::Str,
        help: "ciphers offered, server to client",
    },
    Field {
        name: "ssh_macs_c2s",
        kind: FieldType::Str,
        help: "MACs offered, client to server",
    },
    Field {
        name: "ssh_macs_s2c",
        kind: FieldType::Str,
        help: "MACs offered, server to client",
    },
    Field {
        name: "ssh_compression_c2s",
        kind: FieldType::Str,
        help: "compression offered, client to server",
    },
    Field {
        name: "ssh_compression_s2c",
        kind: FieldType::Str,
        help: "compression offered, server to client",
    },
    Field {
        name: "ssh_host_key_type",
        kind: FieldType::Str,
        help: "the host key's type as the curve25519 key exchange reply names it (ssh-ed25519, \
               ssh-rsa, …); absent when the server offers no curve25519-sha256",
    },
    Field {
        name: "ssh_host_key_sha256",
        kind: FieldType::Str,
        help: "lower-case hex SHA-256 of the host key blob K_S (what ssh-keygen -l shows in \
               base64); the server's signature is not checked",
    },
];

/// Sends sonde's identification, then (when the server offers curve25519) its KEXINIT and
/// ECDH init; the reply is complete at the KEX reply, or when it cannot go further.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SshApp;

/// Where reading a reply stands: a later call with more bytes goes on from here, so that a
/// reply read segment by segment is read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// Looking for the identification line, which would start at `line`; the bytes from it
    /// to `searched` hold no line end.
    Identification { line: usize, searched: usize },
    /// The identification is in; the first packet (a KEXINIT) starts at `at`.
    Kexinit { at: usize },
    /// The KEXINIT offers curve25519: our KEX init is due and its reply awaited. The next
    /// packet starts at `at` (IGNORE and DEBUG packets are passed over).
    KexReply { at: usize },
    /// Nothing more to read: the KEX reply is in, or the server went another way.
    Ended,
}

impl Reading {
    const START: Reading = Reading::Identification {
        line: 0,
        searched: 0,
    };
}

/// What a reply says so far: every slice is a checked view into the reply's bytes.
#[derive(Debug, PartialEq, Eq)]
struct Reply<'a> {
    banner: Option<&'a [u8]>,
    /// The first packet's payload, when it is a KEXINIT.
    kexinit: Option<&'a [u8]>,
    /// K_S of the KEX reply.
    host_key: Option<&'a [u8]>,
}

/// A binary packet (RFC 4253 §6) at the start of some bytes, unencrypted.
#[derive(Debug, PartialEq, Eq)]
enum Framed<'a> {
    Incomplete,
    /// A length or padding that no packet of ours can have.
    Malformed,
    /// The packet's payload, and how many bytes the whole packet takes.
    Packet {
        payload: &'a [u8],
        len: usize,
    },
}

/// The packet at the start of `bytes`: its header is checked before any slice is taken, so
/// no length the peer sends can make an index go out of bounds.
fn frame(bytes: &[u8]) -> Framed<'_> {
    let Some(header) = bytes.get(..5) else {
        return Framed::Incomplete;
    };
    looked_at(header.len());
    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let padding = usize::from(header[4]);
    if !(1 + 4..=MAX_PACKET).contains(&length) || padding + 1 >= length {
        return Framed::Malformed;
    }
    match bytes.get(5..4 + length) {
        Some(body) => Framed::Packet {
            payload: &body[..length - 1 - padding],
            len: 4 + length,
        },
        None => Framed::Incomplete,
    }
}

/// An SSH `string` (uint32 length, bytes) at the start of `bytes`, and what follows it.
fn string(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let value = bytes.get(4..4usize.checked_add(len)?)?;
    Some((value, &bytes[4 + len..]))
}

/// Reads `received` on from `reading` until it needs more bytes or has ended, noting in
/// `reply` what it passes: the identification, the first packet after it and, when that is a
/// KEXINIT offering curve25519, the KEX reply after it (IGNORE and DEBUG packets are passed
/// over). Each byte of the preamble is searched once and each packet's header read once, however
/// the reply is cut into calls.
/// `received` starts `consumed` bytes into the reply (what a session has read past and let go).
fn read_on<'a>(
    received: &'a [u8],
    consumed: usize,
    mut reading: Reading,
    reply: &mut Reply<'a>,
) -> Reading {
    loop {
        reading = match reading {
            Reading::Identification { line, searched } => {
                let Some(end) = find(received, searched, b'\n') else {
                    if consumed + received.len() > MAX_PREAMBLE {
                        return Reading::Ended;
                    }
                    return Reading::Identification {
                        line,
                        searched: received.len(),
                    };
                };
                let text = &received[line..end];
                if text.starts_with(b"SSH-") {
                    reply.banner = Some(text.strip_suffix(b"\r").unwrap_or(text));
                    Reading::Kexinit { at: end + 1 }
                } else if consumed + end + 1 > MAX_PREAMBLE {
                    Reading::Ended
                } else {
                    Reading::Identification {
                        line: end + 1,
                        searched: end + 1,
                    }
                }
            }
            Reading::Kexinit { at } => match frame(&received[at..]) {
                Framed::Incomplete => return reading,
                Framed::Malformed => Reading::Ended,
                Framed::Packet { payload, len } => {
                    if payload.first() != Some(&SSH_MSG_KEXINIT) {
                        return Reading::Ended;
                    }
                    reply.kexinit = Some(payload);
                    if !name_lists(payload).is_some_and(|lists| offers_curve25519(lists[0])) {
                        return Reading::Ended;
                    }
                    Reading::KexReply { at: at + len }
                }
            },
            Reading::KexReply { at } => match frame(&received[at..]) {
                Framed::Incomplete => return reading,
                Framed::Malformed => Reading::Ended,
                Framed::Packet { payload, len } => match payload.first() {
                    Some(&SSH_MSG_IGNORE | &SSH_MSG_DEBUG) => Reading::KexReply { at: at + len },
                    Some(&SSH_MSG_KEX_ECDH_REPLY) => {
                        reply.host_key = string(&payload[1..])
                            .map(|(key, _)| key)
                            .filter(|key| host_key_type(key).is_some());
                        Reading::Ended
                    }
                    // SSH_MSG_DISCONNECT (no algorithm in common) or anything else: no key.
                    _ => Reading::Ended,
                },
            },
            Reading::Ended => return reading,
        };
    }
}

/// What the whole of `received` says, and where reading it stopped.
fn read(received: &[u8]) -> (Reply<'_>, Reading) {
    let mut reply = Reply {
        banner: None,
        kexinit: None,
        host_key: None,
    };
    let reading = read_on(received, 0, Reading::START, &mut reply);
    (reply, reading)
}

/// Whether the KEXINIT's kex list names a method of [`CURVE25519`].
fn offers_curve25519(kex_list: &[u8]) -> bool {
    looked_at(kex_list.len());
    kex_list
        .split(|&b| b == b',')
        .any(|name| CURVE25519.iter().any(|c| c.as_bytes() == name))
}

/// The key type a host key blob starts with (RFC 4253 §6.6: a string, e.g. `ssh-ed25519`).
fn host_key_type(blob: &[u8]) -> Option<&[u8]> {
    string(blob).map(|(name, _)| name).filter(|n| !n.is_empty())
}

/// The KEXINIT payload's ten name-lists, after its type byte and 16-byte cookie; `None` when
/// it is cut or malformed.
fn name_lists(payload: &[u8]) -> Option<[&[u8]; 10]> {
    let mut rest = payload.get(1 + 16..)?;
    let mut lists = [&[][..]; 10];
    for list in &mut lists {
        (*list, rest) = string(rest)?;
    }
    Some(lists)
}

/// Appends `payload` to `out` as an unencrypted binary packet: padded to a multiple of 8
/// with at least 4 bytes of padding (RFC 4253 §6; zeros are allowed before keys exist).
fn push_packet(out: &mut Vec<u8>, payload: &[u8]) {
    let padding = 4 + (8 - (4 + 1 + payload.len() + 4) % 8) % 8;
    let length = 1 + payload.len() + padding;
    out.extend_from_slice(&(length as u32).to_be_bytes());
    out.push(padding as u8);
    out.extend_from_slice(payload);
    out.resize(out.len() + padding, 0);
}

fn push_string(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
}

/// Our KEXINIT and the KEX init with a fresh X25519 public key, framed as packets; `None`
/// when the system gives no randomness.
fn kex_init_packets() -> Option<Vec<u8>> {
    let random = SystemRandom::new();
    let mut cookie = [0u8; 16];
    random.fill(&mut cookie).ok()?;
    let private = EphemeralPrivateKey::generate(&X25519, &random).ok()?;
    let public = private.compute_public_key().ok()?;

    let mut kexinit = vec![SSH_MSG_KEXINIT];
    kexinit.extend_from_slice(&cookie);
    for list in OUR_LISTS {
        push_string(&mut kexinit, list.as_bytes());
    }
    // first_kex_packet_follows = false, reserved uint32.
    kexinit.extend_from_slice(&[0; 5]);
    let mut init = vec![SSH_MSG_KEX_ECDH_INIT];
    push_string(&mut init, public.as_ref());

    let mut packets = Vec::with_capacity(kexinit.len() + init.len() + 64);
    push_packet(&mut packets, &kexinit);
    push_packet(&mut packets, &init);
    Some(packets)
}

impl SshApp {
    /// Values of [`SSH_FIELDS`] for the reply `received` (read from the bytes alone: the
    /// session only decides what to send); SSH is what an identification line starts.
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) -> AppOutcome {
        let (reply, _) = read(received);
        let outcome = match reply.banner {
            Some(_) => AppOutcome::Success,
            None => AppOutcome::ProtocolError,
        };
        values.push(reply.banner.map_or(Value::Null, lossy));
        let lists = reply.kexinit.and_then(name_lists);
        // The languages lists are almost always empty: not fields.
        for i in 0..LISTS.len() - 2 {
            values.push(lists.map_or(Value::Null, |l| lossy(l[i])));
        }
        let key = reply.host_key;
        values.push(key.and_then(host_key_type).map_or(Value::Null, lossy));
        values.push(key.map_or(Value::Null, |k| Value::Str(sha256_hex(k))));
        outcome
    }
}

impl App for SshApp {
    /// The identification, as the session's first bytes (the engine asks the session).
    fn write_request(&self, buf: &mut [u8], _addr: IpAddr, _port: u16) -> usize {
        match buf.get_mut(..IDENTIFICATION.len()) {
            Some(out) => {
                out.copy_from_slice(IDENTIFICATION);
                IDENTIFICATION.len()
            }
            None => 0,
        }
    }

    fn max_request_len(&self) -> usize {
        IDENTIFICATION.len()
    }

    fn max_sent_len(&self) -> usize {
        IDENTIFICATION.len() + MAX_KEX_INIT_LEN
    }

    /// Bounded work per call: the identification is looked for in the first
    /// [`MAX_PREAMBLE`] bytes, and a packet is at most [`MAX_PACKET`].
    fn is_complete(&self, received: &[u8]) -> bool {
        read(received).1 == Reading::Ended
    }

    fn open_session(
        &self,
        _addr: IpAddr,
        _port: u16,
        first: &mut Vec<u8>,
    ) -> Option<Box<dyn Session>> {
        first.extend_from_slice(IDENTIFICATION);
        Some(Box::new(SshSession::default()))
    }
}

/// The most bytes our KEXINIT and KEX init take: each packet's payload, with its length,
/// padding length and at most 11 bytes of padding.
const MAX_KEX_INIT_LEN: usize = {
    let mut lists = 0;
    let mut i = 0;
    while i < OUR_LISTS.len() {
        lists += 4 + OUR_LISTS[i].len();
        i += 1;
    }
    let kexinit = 1 + 16 + lists + 5;
    let init = 1 + 4 + 32;
    kexinit + init + 2 * (4 + 1 + 11)
};

// Everything an ssh session sends fits what the engine keeps of a session.
const _: () = assert!(IDENTIFICATION.len() + MAX_KEX_INIT_LEN <= sonde_tcp::MAX_SESSION_SEND);

/// One connection's exchange: the reply's bytes so far, where reading them stands (each
/// segment is read on from there), and whether our KEX init is out.
#[derive(Debug)]
struct SshSession {
    /// The reply from the first byte not yet read past (`consumed` bytes before it are).
    received: Vec<u8>,
    consumed: usize,
    reading: Reading,
    kex_sent: bool,
}

impl Default for SshSession {
    fn default() -> SshSession {
        SshSession {
            received: Vec::new(),
            consumed: 0,
            reading: Reading::START,
            kex_sent: false,
        }
    }
}

impl SshSession {
    /// Drops the bytes before where reading stands (a line or packet that starts there is
    /// kept whole), so that the session holds the part of the reply not yet read past.
    fn forget_what_is_read(&mut self) {
        let start = match self.reading {
            Reading::Identification { line, .. } => line,
            Reading::Kexinit { at } | Reading::KexReply { at } => at,
            Reading::Ended => return,
        };
        if start == 0 {
            return;
        }
        self.received.drain(..start.min(self.received.len()));
        self.consumed += start;
        self.reading = match self.reading {
            Reading::Identification { line, searched } => Reading::Identification {
                line: line - start,
                searched: searched - start,
            },
            Reading::Kexinit { .. } => Reading::Kexinit { at: 0 },
            Reading::KexReply { .. } => Reading::KexReply { at: 0 },
            Reading::Ended => Reading::Ended,
        };
    }
}

impl Session for SshSession {
    fn on_received(&mut self, new: &[u8], send: &mut Vec<u8>) -> bool {
        self.received.extend_from_slice(new);
        if self.consumed + self.received.len() > MAX_REPLY {
            return true;
        }
        let mut passed = Reply {
            banner: None,
            kexinit: None,
            host_key: None,
        };
        self.reading = read_on(&self.received, self.consumed, self.reading, &mut passed);
        self.forget_what_is_read();
        match self.reading {
            Reading::Identification { .. } | Reading::Kexinit { .. } => false,
            Reading::Ended => true,
            Reading::KexReply { .. } if self.kex_sent => false,
            Reading::KexReply { .. } => match kex_init_packets() {
                Some(packets) => {
                    send.extend_from_slice(&packets);
                    self.kex_sent = true;
                    false
                }
                None => true,
            },
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnyApp, AppKind, AppOptions};

    /// An Ed25519 host key blob from `ssh-keygen -t ed25519` (the public key line's base64),
    /// and its SHA-256 as `ssh-keygen -l` printed it (SHA256:p0EidklO5Sj+svW68coJ6Slw9rYLnx
    /// sSP8yBbyGuoYE), turned from base64 into hex.
    const HOST_KEY: &str = "0000000b7373682d65643235353139000000205c10f0a5da310d68ebe7ca02b72e\
                            09148c4b1053e66d4cac1e7f69c95b7a9e9b";
    const HOST_KEY_SHA256: &str =
        "a7412276494ee528feb2f5baf1ca09e92970f6b60b9f1b123fcc816f21aea181";
    const OPENSSH_KEX: &str = "sntrup761x25519-sha512@openssh.com,curve25519-sha256,\
                               curve25519-sha256@libssh.org,ecdh-sha2-nistp256";

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    fn ssh_string(value: &[u8]) -> Vec<u8> {
        let mut out = (value.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(value);
        out
    }

    /// An unencrypted binary packet, framed by hand from RFC 4253 §6.
    fn packet(payload: &[u8]) -> Vec<u8> {
        let padding = 8 - (payload.len() + 5) % 8 + 4;
        let mut packet = ((1 + payload.len() + padding) as u32)
            .to_be_bytes()
            .to_vec();
        packet.push(padding as u8);
        packet.extend_from_slice(payload);
        packet.extend(std::iter::repeat_n(0, padding));
        packet
    }

    /// A KEXINIT as OpenSSH 9.2 (Debian 12) sends it, with `kex` as its kex list, written by
    /// hand from RFC 4253 §7.1.
    fn kexinit(kex: &str) -> Vec<u8> {
        let lists: [&str; 10] = [
            kex,
            "rsa-sha2-512,rsa-sha2-256,ecdsa-sha2-nistp256,ssh-ed25519",
            "chacha20-poly1305@openssh.com,aes128-ctr,aes256-gcm@openssh.com",
            "chacha20-poly1305@openssh.com,aes128-ctr,aes256-gcm@openssh.com",
            "umac-64-etm@openssh.com,hmac-sha2-256-etm@openssh.com",
            "umac-64-etm@openssh.com,hmac-sha2-256-etm@openssh.com",
            "none,zlib@openssh.com",
            "none,zlib@openssh.com",
            "",
            "",
        ];
        let mut payload = vec![SSH_MSG_KEXINIT];
        payload.extend_from_slice(&[0xab; 16]);
        for list in lists {
            payload.extend_from_slice(&ssh_string(list.as_bytes()));
        }
        payload.extend_from_slice(&[0, 0, 0, 0, 0]); // first_kex_packet_follows, reserved
        packet(&payload)
    }

    /// SSH_MSG_KEX_ECDH_REPLY (RFC 5656 §4): K_S, Q_S and a signature blob.
    fn ecdh_reply(host_key: &[u8]) -> Vec<u8> {
        let mut payload = vec![SSH_MSG_KEX_ECDH_REPLY];
        payload.extend_from_slice(&ssh_string(host_key));
        payload.extend_from_slice(&ssh_string(&[0x42; 32]));
        let mut signature = ssh_string(b"ssh-ed25519");
        signature.extend_from_slice(&ssh_string(&[0x17; 64]));
        payload.extend_from_slice(&ssh_string(&signature));
        packet(&payload)
    }

    const NEWKEYS: &[u8] = &[21];

    fn greeting(kex: &str) -> Vec<u8> {
        let mut reply = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n".to_vec();
        reply.extend_from_slice(&kexinit(kex));
        reply
    }

    /// The whole reply of a server offering curve25519: greeting, KEX reply, NEWKEYS.
    fn reply() -> Vec<u8> {
        let mut reply = greeting(OPENSSH_KEX);
        reply.extend_from_slice(&ecdh_reply(&unhex(HOST_KEY)));
        reply.extend_from_slice(&packet(NEWKEYS));
        reply
    }

    fn values(received: &[u8]) -> Vec<Value> {
        let mut values = Vec::new();
        SshApp.describe_into(received, &mut values);
        assert_eq!(values.len(), SSH_FIELDS.len());
        values
    }

    fn field<'v>(values: &'v [Value], name: &str) -> &'v Value {
        let at = SSH_FIELDS.iter().position(|f| f.name == name).unwrap();
        &values[at]
    }

    /// Feeds the server's `flights` (what it sends before and after our KEX init) to a new
    /// session in `segment`-byte pieces; what the session sent (identification first), and
    /// the bytes it took before saying the exchange is complete (`usize::MAX`: never).
    fn converse(flights: &[&[u8]], segment: usize) -> (Vec<u8>, usize) {
        let app = AnyApp::build(AppKind::Ssh, &AppOptions::default()).unwrap();
        let mut sent = Vec::new();
        let addr = "198.18.0.7".parse().unwrap();
        let mut session = app.open_session(addr, 22, &mut sent).unwrap();
        assert_eq!(sent, IDENTIFICATION);
        let mut taken = 0;
        for piece in flights.iter().flat_map(|flight| flight.chunks(segment)) {
            taken += piece.len();
            if session.on_received(piece, &mut sent) {
                return (sent, taken);
            }
        }
        (sent, usize::MAX)
    }

    #[test]
    fn the_identification_kexinit_lists_and_host_key_are_read_and_complete_only_when_whole() {
        let reply = reply();
        let end_of_kex_reply = reply.len() - packet(NEWKEYS).len();
        for cut in 0..end_of_kex_reply {
            assert!(!SshApp.is_complete(&reply[..cut]), "cut {cut}");
        }
        assert!(SshApp.is_complete(&reply[..end_of_kex_reply]));
        let v = values(&reply);
        assert_eq!(
            v[0],
            Value::Str("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3".into())
        );
        assert_eq!(v[1], Value::Str(OPENSSH_KEX.into()));
        assert_eq!(v[8], Value::Str("none,zlib@openssh.com".into()));
        assert_eq!(
            field(&v, "ssh_host_key_type"),
            &Value::Str("ssh-ed25519".into())
        );
        assert_eq!(
            field(&v, "ssh_host_key_sha256"),
            &Value::Str(HOST_KEY_SHA256.into())
        );
        // Lines before the identification are allowed (RFC 4253 §4.2).
        let mut preamble = b"hello there\r\n".to_vec();
        preamble.extend_from_slice(&reply);
        assert_eq!(values(&preamble), v);
    }

    #[test]
    fn the_session_sends_one_curve25519_kexinit_and_ecdh_init_after_the_servers_kexinit() {
        let reply = reply();
        let greeting_len = greeting(OPENSSH_KEX).len();
        let (first, second) = reply.split_at(greeting_len);
        let end_of_kex_reply = reply.len() - packet(NEWKEYS).len();
        for segment in [1, 7, 64, 1500] {
            let (sent, taken) = converse(&[first, second], segment);
            assert!(
                taken >= end_of_kex_reply && taken < end_of_kex_reply + segment,
                "{segment}: {taken}"
            );
            assert!(sent.len() <= SshApp.max_sent_len());
            assert!(SshApp.max_sent_len() <= sonde_tcp::MAX_SESSION_SEND);
            // Nothing but the identification before the whole KEXINIT is in.
            let (before, _) = converse(&[&reply[..greeting_len - 1]], segment);
            assert_eq!(before, IDENTIFICATION, "{segment}");

            let ours = &sent[IDENTIFICATION.len()..];
            let Framed::Packet { payload, len } = frame(ours) else {
                panic!("no KEXINIT in {ours:?}");
            };
            assert_eq!(len % 8, 0);
            assert_eq!(payload[0], SSH_MSG_KEXINIT);
            let lists = name_lists(payload).unwrap();
            assert_eq!(lists[0], b"curve25519-sha256,curve25519-sha256@libssh.org");
            assert!(lists[1].starts_with(b"ssh-ed25519,"));
            // first_kex_packet_follows false, reserved 0: the payload's last five bytes.
            assert_eq!(payload[payload.len() - 5..], [0; 5]);
            let Framed::Packet {
                payload: init,
                len: init_len,
            } = frame(&ours[len..])
            else {
                panic!("no KEX init");
            };
            assert_eq!(len + init_len, ours.len());
            assert_eq!(init[0], SSH_MSG_KEX_ECDH_INIT);
            let (public, rest) = string(&init[1..]).unwrap();
            assert_eq!((public.len(), rest.len()), (32, 0));
        }
        // Each session's key is its own.
        let key = |sent: &[u8]| sent[sent.len() - 32 - 4..].to_vec();
        let sent = || converse(&[first, second], 1500).0;
        assert_ne!(key(&sent()), key(&sent()));
    }

    #[test]
    fn without_curve25519_the_exchange_ends_at_the_kexinit_without_a_host_key() {
        let old = greeting("diffie-hellman-group14-sha256,ecdh-sha2-nistp256");
        let (sent, taken) = converse(&[&old], 1);
        assert_eq!((sent.as_slice(), taken), (IDENTIFICATION, old.len()));
        assert!(SshApp.is_complete(&old));
        let v = values(&old);
        assert_eq!(field(&v, "ssh_host_key_type"), &Value::Null);
        assert_eq!(field(&v, "ssh_host_key_sha256"), &Value::Null);
        assert_ne!(v[1], Value::Null);
    }

    #[test]
    fn ignore_packets_are_passed_over_and_a_disconnect_or_broken_reply_gives_no_key() {
        let key = unhex(HOST_KEY);
        let mut ignored = greeting(OPENSSH_KEX);
        ignored.extend_from_slice(&packet(&[SSH_MSG_IGNORE, 0, 0, 0, 1, b'x']));
        ignored.extend_from_slice(&packet(&[SSH_MSG_DEBUG, 0]));
        ignored.extend_from_slice(&ecdh_reply(&key));
        assert_eq!(
            field(&values(&ignored), "ssh_host_key_sha256"),
            &Value::Str(HOST_KEY_SHA256.into())
        );

        let mut disconnect = greeting(OPENSSH_KEX);
        disconnect.extend_from_slice(&packet(&[1, 0, 0, 0, 3]));
        assert!(SshApp.is_complete(&disconnect));
        assert_eq!(
            field(&values(&disconnect), "ssh_host_key_sha256"),
            &Value::Null
        );

        // K_S whose length runs past the packet; K_S with no key type inside.
        let mut cut = greeting(OPENSSH_KEX);
        cut.extend_from_slice(&packet(&[SSH_MSG_KEX_ECDH_REPLY, 0, 0, 9, 0, 1, 2]));
        let mut typeless = greeting(OPENSSH_KEX);
        typeless.extend_from_slice(&ecdh_reply(&[0, 0, 0, 0]));
        for broken in [cut, typeless] {
            assert!(SshApp.is_complete(&broken));
            let v = values(&broken);
            assert_eq!(field(&v, "ssh_host_key_type"), &Value::Null);
            assert_eq!(field(&v, "ssh_host_key_sha256"), &Value::Null);
        }
    }

    #[test]
    fn what_is_not_ssh_ends_the_reply_without_panicking() {
        assert!(SshApp.is_complete(&vec![b'x'; MAX_PREAMBLE + 1]));
        let mut huge = b"SSH-2.0-x\r\n".to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 4]);
        assert!(SshApp.is_complete(&huge));
        assert_eq!(values(&huge)[0], Value::Str("SSH-2.0-x".into()));
        assert_eq!(values(&huge)[1], Value::Null);
        // A first packet that is no KEXINIT, or one cut inside its lists.
        let mut other = greeting(OPENSSH_KEX);
        let at = other.iter().position(|&b| b == SSH_MSG_KEXINIT).unwrap();
        other[at] = 21;
        assert!(SshApp.is_complete(&other));
        assert_eq!(values(&other)[1], Value::Null);
        let mut seed = 7u32;
        for start in [&b"SSH-2.0-fuzz\n"[..], &greeting(OPENSSH_KEX)] {
            for len in 0..600 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                        (seed >> 16) as u8
                    })
                    .collect();
                let mut framed = start.to_vec();
                framed.extend_from_slice(&bytes);
                let _ = SshApp.is_complete(&framed);
                values(&framed);
                converse(&[&framed], 1 + len % 13);
            }
        }
    }

    /// A reply fed one byte at a time is read on from where the last segment stopped: the
    /// bytes examined stay within a small multiple of the reply (counted, not timed), even
    /// with the longest preamble and many IGNORE packets before the KEX reply.
    #[test]
    fn a_reply_in_one_byte_segments_is_read_once() {
        let mut flights = Vec::new();
        let line = b"a line before the identification, as RFC 4253 allows\r\n";
        for _ in 0..(MAX_PREAMBLE - 100) / line.len() {
            flights.extend_from_slice(line);
        }
        flights.extend_from_slice(&greeting(OPENSSH_KEX));
        let greeting_len = flights.len();
        for _ in 0..500 {
            flights.extend_from_slice(&packet(&[SSH_MSG_IGNORE, 0, 0, 0, 1, b'x']));
        }
        flights.extend_from_slice(&ecdh_reply(&unhex(HOST_KEY)));
        let (first, second) = flights.split_at(greeting_len);
        crate::progress::take_looked_at();
        let (_, taken) = converse(&[first, second], 1);
        let examined = crate::progress::take_looked_at();
        assert_eq!(taken, flights.len());
        // Each byte once, and per segment the header of the packet still cut.
        let bound = 6 * flights.len() as u64;
        assert!(
            examined <= bound,
            "{examined} bytes examined for a reply of {}",
            flights.len()
        );
    }
}
