//! The NFQUEUE netlink messages, read and written by hand (safe code only): a checked reader
//! for what the kernel sends on a `NETLINK_NETFILTER` socket bound to a queue (packet messages,
//! error/ack messages), and writers for what sonde sends (queue configuration, verdicts).
//!
//! The layouts follow the kernel's UAPI headers `linux/netlink.h`, `linux/netfilter/nfnetlink.h`
//! and `linux/netfilter/nfnetlink_queue.h`: every message is a `nlmsghdr` (host byte order)
//! followed, for nfnetlink, by a 4-byte `nfgenmsg` (family, version, queue number big-endian)
//! and then netlink attributes (`nlattr`: length and type in host byte order, data big-endian,
//! each padded to 4 bytes). The reader never panics, whatever the bytes: every length is
//! checked against what is there, and a message that does not add up is reported as such.
//!
//! This file uses nothing from the rest of the crate, so the fuzz target includes it as is.

use std::ops::Range;

/// `NETLINK_NETFILTER`, the netlink family of nfnetlink.
pub const NETLINK_NETFILTER: i32 = 12;

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLA_HDRLEN: usize = 4;
/// `nlattr.nla_type` carries two flag bits above the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

const NLMSG_ERROR: u16 = 2;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;

/// nfnetlink subsystem number of the queue (`NFNL_SUBSYS_QUEUE`); a message type is
/// `subsystem << 8 | message`.
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = NFNL_SUBSYS_QUEUE << 8;
const NFQNL_MSG_VERDICT: u16 = NFNL_SUBSYS_QUEUE << 8 | 1;
const NFQNL_MSG_CONFIG: u16 = NFNL_SUBSYS_QUEUE << 8 | 2;
const NFQNL_MSG_VERDICT_BATCH: u16 = NFNL_SUBSYS_QUEUE << 8 | 3;

// Packet message attributes (`enum nfqnl_attr_type`).
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CAP_LEN: u16 = 13;
const NFQA_SKB_INFO: u16 = 14;

// Configuration attributes (`enum nfqnl_attr_config`).
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;

const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_CFG_CMD_UNBIND: u8 = 2;
const NFQNL_COPY_PACKET: u8 = 2;

/// Queue flags (`NFQA_CFG_F_*`).
pub const NFQA_CFG_F_FAIL_OPEN: u32 = 1 << 0;
pub const NFQA_CFG_F_GSO: u32 = 1 << 2;

/// `NFQA_SKB_INFO` bits: the transport checksum is not filled in yet (`CHECKSUM_PARTIAL`: the
/// field holds only the pseudo-header sum), and the packet is an unsegmented GSO packet.
pub const NFQA_SKB_CSUMNOTREADY: u32 = 1 << 0;
pub const NFQA_SKB_GSO: u32 = 1 << 1;

/// The largest packet part the kernel copies into one message (`NFQNL_MAX_COPY_RANGE`: what
/// fits a 16-bit attribute length).
pub const MAX_COPY_RANGE: u32 = 0xffff - NLA_HDRLEN as u32;

/// Netfilter verdicts (`NF_DROP`, `NF_ACCEPT`, `NF_REPEAT`).
pub const NF_DROP: u32 = 0;
pub const NF_ACCEPT: u32 = 1;
pub const NF_REPEAT: u32 = 4;

/// One packet message, with offsets into the datagram it was read from (so the caller can
/// lend the payload out mutably).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketMsg {
    /// The queue number (`nfgenmsg.res_id`).
    pub queue: u16,
    pub id: u32,
    /// EtherType of the packet (network order in the message, host order here).
    pub hw_protocol: u16,
    /// Netfilter hook number (`NF_INET_LOCAL_OUT` is 3).
    pub hook: u8,
    /// Where the copied packet lies in the datagram (empty without `NFQA_PAYLOAD`).
    pub payload: Range<usize>,
    /// The packet's whole length when the kernel copied less of it (`NFQA_CAP_LEN`).
    pub cap_len: Option<u32>,
    /// `NFQA_SKB_INFO` bits (0 when absent).
    pub skb_info: u32,
}

impl PacketMsg {
    /// The packet's length on the wire: `NFQA_CAP_LEN` when present, else the copied length.
    pub fn wire_len(&self) -> u32 {
        self.cap_len.unwrap_or(self.payload.len() as u32)
    }
}

/// What one netlink message in a received datagram is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// A queued packet.
    Packet(PacketMsg),
    /// `NLMSG_ERROR`: `errno` 0 is an acknowledgement, else the (positive) error of the request
    /// whose sequence number was `seq`.
    Error { errno: i32, seq: u32 },
    /// A message cut short (the datagram was larger than the buffer, or the length field lies):
    /// the packet id when the packet header was still readable, so the packet can get a verdict.
    Truncated { id: Option<u32> },
    /// Any other well-formed message (`NLMSG_NOOP`, `NLMSG_DONE`, other types): skip it.
    Other { kind: u16 },
    /// A message that does not parse; `why` says what was wrong.
    Malformed { why: &'static str },
}

/// Reads the message at `pos` of `datagram`: what it is, and where the next one starts (`None`
/// when nothing follows: the end of the datagram, or a header that cannot be trusted to say
/// where the next message is).
pub fn next_message(datagram: &[u8], pos: usize) -> Option<(Msg, Option<usize>)> {
    let rest = datagram.get(pos..)?;
    if rest.is_empty() {
        return None;
    }
    let Some(header) = rest.get(..NLMSG_HDRLEN) else {
        return Some((Msg::Truncated { id: None }, None));
    };
    let len = ne_u32(header, 0) as usize;
    let kind = ne_u16(header, 4);
    let seq = ne_u32(header, 8);
    if len < NLMSG_HDRLEN {
        return Some((
            Msg::Malformed {
                why: "netlink message length below its header",
            },
            None,
        ));
    }
    if len > rest.len() {
        let id = (kind == NFQNL_MSG_PACKET)
            .then(|| first_packet_id(rest))
            .flatten();
        return Some((Msg::Truncated { id }, None));
    }
    let aligned = align4(len).min(rest.len());
    let next = (aligned < rest.len()).then_some(pos + aligned);
    let msg = match kind {
        NFQNL_MSG_PACKET => match parse_packet(&rest[..len], NLMSG_HDRLEN) {
            Ok(mut packet) => {
                packet.payload = packet.payload.start + pos..packet.payload.end + pos;
                Msg::Packet(packet)
            }
            Err(why) => Msg::Malformed { why },
        },
        NLMSG_ERROR => match rest
            .get(NLMSG_HDRLEN..NLMSG_HDRLEN + 4)
            .filter(|_| len >= 20)
        {
            Some(code) => Msg::Error {
                errno: i32::from_ne_bytes([code[0], code[1], code[2], code[3]]).wrapping_neg(),
                seq,
            },
            None => Msg::Malformed {
                why: "netlink error message without its error code",
            },
        },
        _ => Msg::Other { kind },
    };
    Some((msg, next))
}

/// Every message of a datagram, in order (stops after one that hides where the next starts).
pub fn messages(datagram: &[u8]) -> impl Iterator<Item = Msg> + '_ {
    let mut pos = Some(0);
    std::iter::from_fn(move || {
        let (msg, next) = next_message(datagram, pos?)?;
        pos = next;
        Some(msg)
    })
}

/// For a truncated packet message: the id in its packet header attribute, if that is whole.
fn first_packet_id(message: &[u8]) -> Option<u32> {
    let attrs = message.get(NLMSG_HDRLEN + NFGENMSG_LEN..)?;
    let (kind, data) = attributes(attrs).next()?.ok()?;
    (kind == NFQA_PACKET_HDR && data.len() >= 4).then(|| be_u32(data, 0))
}

/// Parses a packet message's body (`message` is the whole message, `body` where the
/// `nfgenmsg` starts). Payload offsets are relative to `message`.
fn parse_packet(message: &[u8], body: usize) -> Result<PacketMsg, &'static str> {
    let nfgen = message
        .get(body..body + NFGENMSG_LEN)
        .ok_or("packet message without its nfgenmsg")?;
    let queue = u16::from_be_bytes([nfgen[2], nfgen[3]]);
    let attrs_at = body + NFGENMSG_LEN;
    let mut packet = PacketMsg {
        queue,
        id: 0,
        hw_protocol: 0,
        hook: 0,
        payload: 0..0,
        cap_len: None,
        skb_info: 0,
    };
    let mut has_header = false;
    let mut offset = attrs_at;
    for attr in attributes(&message[attrs_at..]) {
        let (kind, data) = attr?;
        let data_at = offset + NLA_HDRLEN;
        offset += align4(NLA_HDRLEN + data.len());
        match kind {
            NFQA_PACKET_HDR => {
                if data.len() < 7 {
                    return Err("packet header attribute shorter than 7 bytes");
                }
                packet.id = be_u32(data, 0);
                packet.hw_protocol = u16::from_be_bytes([data[4], data[5]]);
                packet.hook = data[6];
                has_header = true;
            }
            NFQA_PAYLOAD => packet.payload = data_at..data_at + data.len(),
            NFQA_CAP_LEN if data.len() >= 4 => packet.cap_len = Some(be_u32(data, 0)),
            NFQA_SKB_INFO if data.len() >= 4 => packet.skb_info = be_u32(data, 0),
            _ => {}
        }
    }
    if !has_header {
        return Err("packet message without a packet header attribute");
    }
    Ok(packet)
}

/// The attributes in `bytes`: (type without flag bits, data), or an error for one whose
/// length does not fit (the walk stops there).
fn attributes(bytes: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), &'static str>> + '_ {
    let mut pos = 0;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let rest = bytes.get(pos..).filter(|r| r.len() >= NLA_HDRLEN)?;
        let len = ne_u16(rest, 0) as usize;
        let kind = ne_u16(rest, 2) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > rest.len() {
            failed = true;
            return Some(Err("netlink attribute length out of bounds"));
        }
        pos += align4(len);
        Some(Ok((kind, &rest[NLA_HDRLEN..len])))
    })
}

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

fn ne_u16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn ne_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

// ---- writers ----

/// Bytes of a verdict message without payload: header, nfgenmsg, verdict attribute.
pub const VERDICT_LEN: usize = NLMSG_HDRLEN + NFGENMSG_LEN + NLA_HDRLEN + 8;
/// Bytes of a verdict message before its payload's bytes (the payload attribute's header too).
pub const VERDICT_WITH_PAYLOAD_HEAD: usize = VERDICT_LEN + NLA_HDRLEN;

/// Writes the netlink and nfgenmsg headers of a message of `len` bytes into `out[..20]`.
fn put_headers(out: &mut [u8], len: usize, kind: u16, flags: u16, seq: u32, queue: u16) {
    out[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    out[4..6].copy_from_slice(&kind.to_ne_bytes());
    out[6..8].copy_from_slice(&flags.to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    out[12..16].copy_from_slice(&0u32.to_ne_bytes()); // port id 0: the kernel
    out[16] = 0; // AF_UNSPEC: the queue is named by number alone
    out[17] = 0; // NFNETLINK_V0
    out[18..20].copy_from_slice(&queue.to_be_bytes());
}

/// Writes an attribute header (for `data_len` bytes of data) at `out[..4]`.
fn put_attr_header(out: &mut [u8], kind: u16, data_len: usize) {
    out[0..2].copy_from_slice(&((NLA_HDRLEN + data_len) as u16).to_ne_bytes());
    out[2..4].copy_from_slice(&kind.to_ne_bytes());
}

/// A verdict for packet `id`: the message's first bytes and how many of them to send.
/// With `payload_len`, the message goes on with that many payload bytes (sent from the
/// caller's buffer), and the bytes returned end with the payload attribute's header; the
/// caller pads the payload to 4 bytes. The sequence number is the packet id, so an error the
/// kernel answers names the packet. `None` for a payload longer than [`MAX_COPY_RANGE`]: its
/// length does not fit the attribute, and a message that said less than it carries would be
/// misread by the kernel.
pub fn verdict(
    queue: u16,
    id: u32,
    verdict: u32,
    payload_len: Option<usize>,
) -> Option<([u8; VERDICT_WITH_PAYLOAD_HEAD], usize)> {
    let mut out = [0u8; VERDICT_WITH_PAYLOAD_HEAD];
    let (head, payload_len) = match payload_len {
        Some(len) if len > MAX_COPY_RANGE as usize => return None,
        Some(len) => (VERDICT_WITH_PAYLOAD_HEAD, len),
        None => (VERDICT_LEN, 0),
    };
    put_verdict(
        &mut out,
        head + payload_len,
        NFQNL_MSG_VERDICT,
        queue,
        id,
        verdict,
    );
    if head == VERDICT_WITH_PAYLOAD_HEAD {
        put_attr_header(&mut out[VERDICT_LEN..], NFQA_PAYLOAD, payload_len);
    }
    Some((out, head))
}

/// One verdict for every packet of the queue whose id is at most `id` (`NFQNL_MSG_VERDICT_BATCH`).
pub fn batch_verdict(queue: u16, id: u32, verdict: u32) -> [u8; VERDICT_LEN] {
    let mut out = [0u8; VERDICT_LEN];
    put_verdict(
        &mut out,
        VERDICT_LEN,
        NFQNL_MSG_VERDICT_BATCH,
        queue,
        id,
        verdict,
    );
    out
}

fn put_verdict(out: &mut [u8], len: usize, kind: u16, queue: u16, id: u32, verdict: u32) {
    put_headers(out, len, kind, NLM_F_REQUEST, id, queue);
    put_attr_header(&mut out[20..], NFQA_VERDICT_HDR, 8);
    out[24..28].copy_from_slice(&verdict.to_be_bytes());
    out[28..32].copy_from_slice(&id.to_be_bytes());
}

/// What to ask of the queue when binding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSetup {
    pub queue: u16,
    /// Bytes of each packet to copy (at most [`MAX_COPY_RANGE`]).
    pub copy_range: u32,
    pub max_len: u32,
    /// `NFQA_CFG_F_*` bits to set; the mask covers FAIL_OPEN and GSO, so the ones not given
    /// are cleared.
    pub flags: u32,
}

/// A configuration message that binds the queue to this socket and sets copy mode (whole
/// packets), queue length and flags, asking for an acknowledgement (sequence number `seq`).
pub fn bind_config(setup: &QueueSetup, seq: u32) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDRLEN + NFGENMSG_LEN];
    append_attr(&mut out, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_BIND, 0, 0, 0]);
    let range = setup.copy_range.min(MAX_COPY_RANGE).to_be_bytes();
    append_attr(
        &mut out,
        NFQA_CFG_PARAMS,
        &[range[0], range[1], range[2], range[3], NFQNL_COPY_PACKET],
    );
    append_attr(
        &mut out,
        NFQA_CFG_QUEUE_MAXLEN,
        &setup.max_len.to_be_bytes(),
    );
    let mask = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
    append_attr(&mut out, NFQA_CFG_MASK, &mask.to_be_bytes());
    append_attr(
        &mut out,
        NFQA_CFG_FLAGS,
        &(setup.flags & mask).to_be_bytes(),
    );
    let len = out.len();
    put_headers(
        &mut out,
        len,
        NFQNL_MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
        setup.queue,
    );
    out
}

/// A configuration message that unbinds the queue (no acknowledgement asked).
pub fn unbind_config(queue: u16) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDRLEN + NFGENMSG_LEN];
    append_attr(&mut out, NFQA_CFG_CMD, &[NFQNL_CFG_CMD_UNBIND, 0, 0, 0]);
    let len = out.len();
    put_headers(&mut out, len, NFQNL_MSG_CONFIG, NLM_F_REQUEST, 0, queue);
    out
}

fn append_attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let at = out.len();
    out.resize(at + align4(NLA_HDRLEN + data.len()), 0);
    put_attr_header(&mut out[at..], kind, data.len());
    out[at + NLA_HDRLEN..at + NLA_HDRLEN + data.len()].copy_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    /// A packet message as the kernel sent it (Linux 6.18, captured by the nfqueue test with
    /// batch 1): queue 7, id 20, IPv4, hook LOCAL_OUT, out interface 1, checksum not ready,
    /// and a 60-byte UDP datagram 198.18.0.1:57463 -> 198.18.0.1:9999.
    const KERNEL_PACKET: &str = "70000000 00030000 00000000 00000000 02000007 \
        0b000100 00000014 08000300 08000600 00000001 08000e00 00000001 40000a00 \
        4500003c a0504000 40110e3a c6120001 c6120001 e077270f 00288c60 00000013 \
        abababab abababab abababab abababab abababab abababab abababab";

    #[test]
    fn a_kernel_packet_message() {
        let m = hex(KERNEL_PACKET);
        assert_eq!(m.len(), 112);
        let got: Vec<Msg> = messages(&m).collect();
        let [Msg::Packet(p)] = &got[..] else {
            panic!("one packet expected, got {got:?}")
        };
        assert_eq!((p.queue, p.id, p.hw_protocol, p.hook), (7, 20, 0x0800, 3));
        assert_eq!(p.payload, 52..112);
        assert_eq!(&m[p.payload.start..p.payload.start + 2], &[0x45, 0]);
        assert_eq!((p.cap_len, p.wire_len()), (None, 60));
        assert_eq!(p.skb_info, NFQA_SKB_CSUMNOTREADY);
    }

    #[test]
    fn a_packet_followed_by_an_error_in_one_datagram() {
        let mut m = hex(KERNEL_PACKET);
        m.extend_from_slice(&20u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&(-1i32).to_ne_bytes());
        let got: Vec<Msg> = messages(&m).collect();
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], Msg::Packet(p) if p.payload == (52..112)));
        assert_eq!(got[1], Msg::Error { errno: 1, seq: 0 });
        // The second message's offsets are relative to the datagram.
        let mut twice = hex(KERNEL_PACKET);
        twice.extend_from_slice(&hex(KERNEL_PACKET));
        let second = messages(&twice).nth(1).unwrap();
        assert!(matches!(second, Msg::Packet(p) if p.payload == (164..224)));
    }

    #[test]
    fn a_cut_packet_message_still_names_its_id() {
        let m = hex(KERNEL_PACKET);
        // Cut inside the payload: the id is readable, the packet is not whole.
        assert_eq!(
            messages(&m[..80]).collect::<Vec<_>>(),
            [Msg::Truncated { id: Some(20) }]
        );
        // Cut inside the packet header attribute: no id.
        assert_eq!(
            messages(&m[..26]).collect::<Vec<_>>(),
            [Msg::Truncated { id: None }]
        );
    }

    #[test]
    fn a_packet_copied_in_part_reports_its_whole_length() {
        let mut m = hex(KERNEL_PACKET);
        // Replace the SKB_INFO attribute by CAP_LEN 1500 (as the kernel adds past copy_range).
        m[42..44].copy_from_slice(&NFQA_CAP_LEN.to_ne_bytes());
        m[44..48].copy_from_slice(&1500u32.to_be_bytes());
        let Some(Msg::Packet(p)) = messages(&m).next() else {
            panic!("packet expected")
        };
        assert_eq!((p.cap_len, p.wire_len(), p.skb_info), (Some(1500), 1500, 0));
    }

    #[test]
    fn every_prefix_and_byte_flip_of_a_kernel_message_parses_without_panic() {
        let m = hex(KERNEL_PACKET);
        for cut in 0..=m.len() {
            for msg in messages(&m[..cut]) {
                if let Msg::Packet(p) = msg {
                    assert!(p.payload.end <= cut);
                }
            }
        }
        for at in 0..m.len() {
            for value in [0x00, 0x01, 0x03, 0x7f, 0x80, 0xff] {
                let mut bent = m.clone();
                bent[at] = value;
                for msg in messages(&bent) {
                    if let Msg::Packet(p) = msg {
                        assert!(p.payload.start <= p.payload.end && p.payload.end <= bent.len());
                    }
                }
            }
        }
    }

    #[test]
    fn error_and_ack_messages() {
        // nlmsgerr: error -2 (ENOENT) for the request with sequence number 7.
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-2i32).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        let got: Vec<Msg> = messages(&m).collect();
        assert_eq!(got, [Msg::Error { errno: 2, seq: 7 }]);
        m[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert_eq!(
            next_message(&m, 0).unwrap().0,
            Msg::Error { errno: 0, seq: 7 }
        );
        // Cut before the error code.
        m[0..4].copy_from_slice(&18u32.to_ne_bytes());
        assert!(matches!(
            next_message(&m[..18], 0).unwrap().0,
            Msg::Malformed { .. }
        ));
    }

    #[test]
    fn a_config_message_round_trips_through_the_attribute_walk() {
        let setup = QueueSetup {
            queue: 7,
            copy_range: 65535,
            max_len: 4096,
            flags: NFQA_CFG_F_GSO,
        };
        let m = bind_config(&setup, 1);
        assert_eq!(ne_u32(&m, 0) as usize, m.len());
        assert_eq!(ne_u16(&m, 4), NFQNL_MSG_CONFIG);
        assert_eq!(&m[18..20], &7u16.to_be_bytes());
        let attrs: Vec<(u16, Vec<u8>)> = attributes(&m[20..])
            .map(|a| a.map(|(k, d)| (k, d.to_vec())).unwrap())
            .collect();
        assert_eq!(
            attrs,
            [
                (NFQA_CFG_CMD, vec![1, 0, 0, 0]),
                (NFQA_CFG_PARAMS, vec![0, 0, 0xff, 0xfb, 2]),
                (NFQA_CFG_QUEUE_MAXLEN, 4096u32.to_be_bytes().to_vec()),
                (NFQA_CFG_MASK, 5u32.to_be_bytes().to_vec()),
                (NFQA_CFG_FLAGS, 4u32.to_be_bytes().to_vec()),
            ]
        );
    }

    #[test]
    fn verdict_messages() {
        let (v, n) = verdict(7, 0x0102_0304, NF_DROP, None).unwrap();
        assert_eq!(n, VERDICT_LEN);
        assert_eq!(ne_u32(&v, 0), 32);
        assert_eq!(ne_u16(&v, 4), NFQNL_MSG_VERDICT);
        assert_eq!(ne_u32(&v, 8), 0x0102_0304, "sequence number is the id");
        assert_eq!(&v[24..32], &[0, 0, 0, 0, 1, 2, 3, 4]);
        let (v, n) = verdict(7, 9, NF_ACCEPT, Some(29)).unwrap();
        assert_eq!(n, 36);
        assert_eq!(
            ne_u32(&v, 0),
            36 + 29,
            "the message length covers the payload"
        );
        assert_eq!((ne_u16(&v, 32), ne_u16(&v, 34)), (33, NFQA_PAYLOAD));
        let (v, _) = verdict(7, 9, NF_ACCEPT, Some(MAX_COPY_RANGE as usize)).unwrap();
        assert_eq!(
            ne_u16(&v, 32),
            0xffff,
            "the longest payload an attribute can say"
        );
        assert_eq!(
            verdict(7, 9, NF_ACCEPT, Some(MAX_COPY_RANGE as usize + 1)),
            None,
            "a payload too long for its attribute is refused, not cut"
        );
        let b = batch_verdict(7, 99, NF_ACCEPT);
        assert_eq!(ne_u16(&b, 4), NFQNL_MSG_VERDICT_BATCH);
        assert_eq!(&b[24..32], &[0, 0, 0, 1, 0, 0, 0, 99]);
    }

    #[test]
    fn hostile_lengths_end_in_malformed_or_truncated() {
        // Length field below the header, beyond the datagram, attribute lengths of 0 and
        // beyond the message: never a panic, never a packet.
        let mut m = vec![0u8; 40];
        m[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(messages(&m).next(), Some(Msg::Malformed { .. })));
        m[0..4].copy_from_slice(&4000u32.to_ne_bytes());
        m[4..6].copy_from_slice(&NFQNL_MSG_PACKET.to_ne_bytes());
        assert_eq!(messages(&m).next(), Some(Msg::Truncated { id: None }));
        m[0..4].copy_from_slice(&40u32.to_ne_bytes());
        assert!(matches!(messages(&m).next(), Some(Msg::Malformed { .. })));
        m[20..22].copy_from_slice(&200u16.to_ne_bytes());
        assert!(matches!(messages(&m).next(), Some(Msg::Malformed { .. })));
        assert_eq!(
            messages(&m[..10]).collect::<Vec<_>>(),
            [Msg::Truncated { id: None }]
        );
        assert_eq!(messages(&[]).count(), 0);
    }
}
