//! `ssh`: our identification string, then the server's (RFC 4253 §4.2) and its first binary
//! packet, the KEXINIT (§7.1): the algorithm lists it offers. Nothing is negotiated: the
//! connection ends once the KEXINIT is in.

use std::net::IpAddr;

use sonde_scan::reply::{Field, FieldType, Value};
use sonde_tcp::App;

use crate::text::lossy;

/// What sonde says it is.
const IDENTIFICATION: &[u8] =
    concat!("SSH-2.0-sonde_", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes();
/// RFC 4253 §4.2: lines before the identification are allowed; past this many bytes without
/// one the server is not speaking SSH.
const MAX_PREAMBLE: usize = 8192;
/// RFC 4253 §6.1: packets of at least 35000 bytes need not be handled; a KEXINIT is far
/// shorter.
const MAX_PACKET: usize = 35000;
const SSH_MSG_KEXINIT: u8 = 20;

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
];

/// Sends sonde's identification; the reply is complete at the end of the server's first
/// packet after its identification, or when it cannot be SSH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SshApp;

/// How far a reply has got.
#[derive(Debug, PartialEq, Eq)]
enum Reading<'a> {
    /// More bytes are needed.
    Incomplete,
    /// Not SSH, or a first packet that cannot be a KEXINIT.
    Unreadable { banner: Option<&'a [u8]> },
    /// The identification, and the KEXINIT's payload when the first packet is one.
    Done {
        banner: &'a [u8],
        kexinit: Option<&'a [u8]>,
    },
}

/// Reads the identification line and the first packet after it.
fn read(received: &[u8]) -> Reading<'_> {
    let mut at = 0;
    let banner = loop {
        let Some(end) = received[at..].iter().position(|&b| b == b'\n') else {
            return if received.len() > MAX_PREAMBLE {
                Reading::Unreadable { banner: None }
            } else {
                Reading::Incomplete
            };
        };
        let line = &received[at..at + end];
        at += end + 1;
        if line.starts_with(b"SSH-") {
            break line.strip_suffix(b"\r").unwrap_or(line);
        }
        if at > MAX_PREAMBLE {
            return Reading::Unreadable { banner: None };
        }
    };
    let packet = &received[at..];
    let Some(header) = packet.get(..5) else {
        return Reading::Incomplete;
    };
    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let padding = usize::from(header[4]);
    if !(1 + 4..=MAX_PACKET).contains(&length) || padding + 1 >= length {
        return Reading::Unreadable {
            banner: Some(banner),
        };
    }
    let Some(body) = packet.get(5..4 + length) else {
        return Reading::Incomplete;
    };
    let payload = &body[..length - 1 - padding];
    Reading::Done {
        banner,
        kexinit: (payload.first() == Some(&SSH_MSG_KEXINIT)).then_some(payload),
    }
}

/// The KEXINIT payload's ten name-lists, after its type byte and 16-byte cookie; `None` when
/// it is cut or malformed.
fn name_lists(payload: &[u8]) -> Option<[&[u8]; 10]> {
    let mut rest = payload.get(1 + 16..)?;
    let mut lists = [&[][..]; 10];
    for list in &mut lists {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        *list = rest.get(4..4 + len)?;
        rest = &rest[4 + len..];
    }
    Some(lists)
}

impl SshApp {
    /// Values of [`SSH_FIELDS`] for the reply `received`.
    pub fn describe_into(&self, received: &[u8], values: &mut Vec<Value>) {
        let (banner, kexinit) = match read(received) {
            Reading::Done { banner, kexinit } => (Some(banner), kexinit),
            Reading::Unreadable { banner } => (banner, None),
            Reading::Incomplete => (None, None),
        };
        values.push(banner.map_or(Value::Null, lossy));
        let lists = kexinit.and_then(name_lists);
        // The languages lists are almost always empty: not fields.
        for i in 0..LISTS.len() - 2 {
            values.push(lists.map_or(Value::Null, |l| lossy(l[i])));
        }
    }
}

impl App for SshApp {
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

    /// Bounded work per call: the identification is looked for in the first
    /// [`MAX_PREAMBLE`] bytes, and a packet is at most [`MAX_PACKET`].
    fn is_complete(&self, received: &[u8]) -> bool {
        read(received) != Reading::Incomplete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KEXINIT as OpenSSH 9.2 (Debian 12) sends it, written by hand from RFC 4253 §7.1.
    fn kexinit() -> Vec<u8> {
        let lists: [&str; 10] = [
            "sntrup761x25519-sha512@openssh.com,curve25519-sha256,ecdh-sha2-nistp256",
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
            payload.extend_from_slice(&(list.len() as u32).to_be_bytes());
            payload.extend_from_slice(list.as_bytes());
        }
        payload.extend_from_slice(&[0, 0, 0, 0, 0]); // first_kex_packet_follows, reserved
        let padding = 8 - (payload.len() + 5) % 8 + 4;
        let mut packet = ((1 + payload.len() + padding) as u32)
            .to_be_bytes()
            .to_vec();
        packet.push(padding as u8);
        packet.extend_from_slice(&payload);
        packet.extend(std::iter::repeat_n(0, padding));
        packet
    }

    fn reply() -> Vec<u8> {
        let mut reply = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n".to_vec();
        reply.extend_from_slice(&kexinit());
        reply
    }

    fn values(received: &[u8]) -> Vec<Value> {
        let mut values = Vec::new();
        SshApp.describe_into(received, &mut values);
        assert_eq!(values.len(), SSH_FIELDS.len());
        values
    }

    #[test]
    fn the_identification_and_kexinit_lists_are_read_and_complete_only_when_whole() {
        let reply = reply();
        for cut in 0..reply.len() {
            assert!(!SshApp.is_complete(&reply[..cut]), "cut {cut}");
        }
        assert!(SshApp.is_complete(&reply));
        let v = values(&reply);
        assert_eq!(
            v[0],
            Value::Str("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3".into())
        );
        assert_eq!(
            v[1],
            Value::Str(
                "sntrup761x25519-sha512@openssh.com,curve25519-sha256,ecdh-sha2-nistp256".into()
            )
        );
        assert_eq!(v[8], Value::Str("none,zlib@openssh.com".into()));
        // Lines before the identification are allowed (RFC 4253 §4.2).
        let mut preamble = b"hello there\r\n".to_vec();
        preamble.extend_from_slice(&reply);
        assert_eq!(values(&preamble), v);
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
        let mut other = reply();
        let at = other.iter().position(|&b| b == SSH_MSG_KEXINIT).unwrap();
        other[at] = 21;
        assert_eq!(values(&other)[1], Value::Null);
        let mut seed = 7u32;
        for len in 0..600 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) as u8
                })
                .collect();
            let mut framed = b"SSH-2.0-fuzz\n".to_vec();
            framed.extend_from_slice(&bytes);
            let _ = SshApp.is_complete(&framed);
            values(&framed);
        }
    }

    #[test]
    fn the_request_is_our_identification() {
        let mut buf = [0u8; 64];
        let len = SshApp.write_request(&mut buf, "198.18.0.7".parse().unwrap(), 22);
        assert!(buf[..len].starts_with(b"SSH-2.0-sonde_") && buf[..len].ends_with(b"\r\n"));
    }
}
