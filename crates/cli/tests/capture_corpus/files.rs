//! Capture files made byte by byte from the corpus's frames, for what `tcpdump -r` reads and a
//! strict reader might refuse: every framing libpcap forgives (short snap lengths, records
//! longer than the snap length or than the wire, FCS bits above the link type, microsecond
//! fields past a second, old versions with swapped lengths, big-endian files, pcapng options
//! without an end marker, interfaces with snap length 0, simple and obsolete packet blocks,
//! several timestamp resolutions) and link types other than Ethernet (raw IP, Linux cooked v1
//! and v2, BSD loopback, OpenBSD loopback, PPP, 802.11 with radiotap, IPv4, IPv6).
//!
//! Fields are written as given, not as a library would validate them. Only lab addresses
//! appear (the frames are the corpus's).

use super::{Frame, ETH_ARP, ETH_IPV4, ETH_IPV6};

/// LINKTYPE_ETHERNET.
const ETHERNET: u32 = 1;

/// One record of a classic pcap file, its fields as written.
pub struct Record {
    pub sec: u32,
    pub frac: u32,
    pub caplen: u32,
    pub len: u32,
    pub data: Vec<u8>,
}

/// A classic pcap file, written field by field.
pub struct Pcap {
    pub big_endian: bool,
    pub nano: bool,
    pub version: (u16, u16),
    pub snaplen: u32,
    /// The header's link type field, FCS bits included.
    pub linktype: u32,
    pub records: Vec<Record>,
}

impl Pcap {
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let u32_ = |out: &mut Vec<u8>, v: u32| {
            out.extend_from_slice(&if self.big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        };
        let u16_ = |out: &mut Vec<u8>, v: u16| {
            out.extend_from_slice(&if self.big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            })
        };
        u32_(&mut out, if self.nano { 0xA1B2_3C4D } else { 0xA1B2_C3D4 });
        u16_(&mut out, self.version.0);
        u16_(&mut out, self.version.1);
        u32_(&mut out, 0);
        u32_(&mut out, 0);
        u32_(&mut out, self.snaplen);
        u32_(&mut out, self.linktype);
        for r in &self.records {
            for v in [r.sec, r.frac, r.caplen, r.len] {
                u32_(&mut out, v);
            }
            out.extend_from_slice(&r.data);
        }
        out
    }
}

/// A pcapng block, little-endian.
pub enum Block {
    Section,
    Interface {
        linktype: u16,
        snaplen: u32,
        /// (code, value) pairs.
        options: Vec<(u16, Vec<u8>)>,
        end_marker: bool,
    },
    Enhanced {
        interface: u32,
        ts: u64,
        len: u32,
        data: Vec<u8>,
    },
    /// The obsolete packet block (type 2).
    Obsolete {
        interface: u16,
        ts: u64,
        len: u32,
        data: Vec<u8>,
    },
    /// A simple packet block: `data` is what it holds before the padding.
    Simple {
        len: u32,
        data: Vec<u8>,
    },
}

fn padded(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(data.len().div_ceil(4) * 4, 0);
    v
}

impl Block {
    fn body(&self) -> (u32, Vec<u8>) {
        let mut b = Vec::new();
        let words = |b: &mut Vec<u8>, ws: &[u32]| {
            for w in ws {
                b.extend_from_slice(&w.to_le_bytes());
            }
        };
        match self {
            Block::Section => {
                words(&mut b, &[0x1A2B_3C4D, 1]);
                b.extend_from_slice(&u64::MAX.to_le_bytes());
                (0x0A0D_0D0A, b)
            }
            Block::Interface {
                linktype,
                snaplen,
                options,
                end_marker,
            } => {
                b.extend_from_slice(&linktype.to_le_bytes());
                b.extend_from_slice(&[0, 0]);
                words(&mut b, &[*snaplen]);
                for (code, value) in options {
                    b.extend_from_slice(&code.to_le_bytes());
                    b.extend_from_slice(&(value.len() as u16).to_le_bytes());
                    b.extend_from_slice(&padded(value));
                }
                if *end_marker {
                    words(&mut b, &[0]);
                }
                (1, b)
            }
            Block::Enhanced {
                interface,
                ts,
                len,
                data,
            } => {
                let (high, low) = ((ts >> 32) as u32, *ts as u32);
                words(&mut b, &[*interface, high, low, data.len() as u32, *len]);
                b.extend_from_slice(&padded(data));
                (6, b)
            }
            Block::Obsolete {
                interface,
                ts,
                len,
                data,
            } => {
                b.extend_from_slice(&interface.to_le_bytes());
                b.extend_from_slice(&[0, 0]);
                let (high, low) = ((ts >> 32) as u32, *ts as u32);
                words(&mut b, &[high, low, data.len() as u32, *len]);
                b.extend_from_slice(&padded(data));
                (2, b)
            }
            Block::Simple { len, data } => {
                words(&mut b, &[*len]);
                b.extend_from_slice(&padded(data));
                (3, b)
            }
        }
    }
}

/// A pcapng file of `blocks` (the first should be a section header).
pub fn pcapng(blocks: &[Block]) -> Vec<u8> {
    let mut out = Vec::new();
    for block in blocks {
        let (kind, body) = block.body();
        let total = (body.len() + 12) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&total.to_le_bytes());
        out.extend_from_slice(&body);
        out.extend_from_slice(&total.to_le_bytes());
    }
    out
}

/// The n-th packet's stamp: seconds and microseconds.
fn stamp(n: usize) -> (u32, u32) {
    (1_700_000_000 + n as u32, (n as u32 * 7_919) % 1_000_000)
}

/// `frames` as records of a microsecond pcap file, whole.
fn records(frames: &[Frame]) -> Vec<Record> {
    frames
        .iter()
        .enumerate()
        .map(|(n, f)| {
            let (sec, frac) = stamp(n);
            Record {
                sec,
                frac,
                caplen: f.data.len() as u32,
                len: f.wire_len,
                data: f.data.clone(),
            }
        })
        .collect()
}

fn ethernet_pcap(records: Vec<Record>) -> Pcap {
    Pcap {
        big_endian: false,
        nano: false,
        version: (2, 4),
        snaplen: 65_535,
        linktype: ETHERNET,
        records,
    }
}

fn interface(snaplen: u32, options: Vec<(u16, Vec<u8>)>, end_marker: bool) -> Block {
    Block::Interface {
        linktype: ETHERNET as u16,
        snaplen,
        options,
        end_marker,
    }
}

/// The framings libpcap reads (each a file of Ethernet frames), by name.
pub fn framing_cases(frames: &[Frame]) -> Vec<(&'static str, Vec<u8>)> {
    let mut cases = Vec::new();
    // A capture taken with -s 96: wire lengths above the snap length.
    let short = records(frames)
        .into_iter()
        .map(|mut r| {
            r.data.truncate(96);
            r.caplen = r.data.len() as u32;
            r
        })
        .collect();
    cases.push((
        "snap length 96",
        Pcap {
            snaplen: 96,
            ..ethernet_pcap(short)
        }
        .bytes(),
    ));
    // Records longer than the snap length: libpcap cuts them to it.
    cases.push((
        "records longer than the snap length",
        Pcap {
            snaplen: 64,
            ..ethernet_pcap(records(frames))
        }
        .bytes(),
    ));
    // FCS bits above the link type: a 4-byte FCS (2 words), flagged present.
    cases.push((
        "FCS bits above the link type",
        Pcap {
            linktype: 0x2400_0000 | ETHERNET,
            ..ethernet_pcap(records(frames))
        }
        .bytes(),
    ));
    // Captured lengths above the wire length, on every third record.
    let above = records(frames)
        .into_iter()
        .enumerate()
        .map(|(n, mut r)| {
            if n % 3 == 0 && r.caplen > 20 {
                r.len = r.caplen - 17;
            }
            r
        })
        .collect();
    cases.push((
        "captured length above the wire length",
        ethernet_pcap(above).bytes(),
    ));
    // Microsecond fields of a second or more, on every other record.
    let late = records(frames)
        .into_iter()
        .enumerate()
        .map(|(n, mut r)| {
            if n % 2 == 0 {
                r.frac += 1_000_000 * (1 + n as u32 % 3);
            }
            r
        })
        .collect();
    cases.push((
        "microsecond fields of a second or more",
        ethernet_pcap(late).bytes(),
    ));
    // Big-endian, nanosecond stamps.
    let nano = records(frames)
        .into_iter()
        .map(|mut r| {
            r.frac = r.frac * 1_000 + 321;
            r
        })
        .collect();
    cases.push((
        "big-endian nanosecond file",
        Pcap {
            big_endian: true,
            nano: true,
            ..ethernet_pcap(nano)
        }
        .bytes(),
    ));
    // Version 2.2: captured and wire lengths written the other way round.
    let old = records(frames)
        .into_iter()
        .map(|mut r| {
            std::mem::swap(&mut r.caplen, &mut r.len);
            r
        })
        .collect();
    cases.push((
        "version 2.2, lengths swapped",
        Pcap {
            version: (2, 2),
            ..ethernet_pcap(old)
        }
        .bytes(),
    ));
    cases.extend(pcapng_cases(frames));
    cases
}

/// A nanosecond stamp for the n-th packet.
fn ts_ns(n: usize) -> u64 {
    let (sec, usec) = stamp(n);
    u64::from(sec) * 1_000_000_000 + u64::from(usec) * 1_000 + 17
}

fn enhanced(f: &Frame, interface: u32, ts: u64) -> Block {
    Block::Enhanced {
        interface,
        ts,
        len: f.wire_len,
        data: f.data.clone(),
    }
}

fn pcapng_cases(frames: &[Frame]) -> Vec<(&'static str, Vec<u8>)> {
    let nanosecond = (9u16, vec![9u8]);
    let mut cases = Vec::new();
    // Options that end at the end of the block, with no end-of-options marker.
    let mut blocks = vec![
        Block::Section,
        interface(65_535, vec![nanosecond.clone()], false),
    ];
    blocks.extend(
        frames
            .iter()
            .enumerate()
            .map(|(n, f)| enhanced(f, 0, ts_ns(n))),
    );
    cases.push(("pcapng options without an end marker", pcapng(&blocks)));
    // An interface with snap length 0: no limit.
    let mut blocks = vec![Block::Section, interface(0, vec![nanosecond.clone()], true)];
    blocks.extend(
        frames
            .iter()
            .enumerate()
            .map(|(n, f)| enhanced(f, 0, ts_ns(n))),
    );
    cases.push(("pcapng interface with snap length 0", pcapng(&blocks)));
    // Simple packet blocks: the captured part is the wire length up to the snap length; the
    // rest is padding.
    let mut blocks = vec![Block::Section, interface(100, vec![], true)];
    blocks.extend(
        frames
            .iter()
            .filter(|f| f.data.len() == f.wire_len as usize)
            .map(|f| Block::Simple {
                len: f.wire_len,
                data: f.data[..f.data.len().min(100)].to_vec(),
            }),
    );
    cases.push(("pcapng simple packet blocks", pcapng(&blocks)));
    // Two interfaces of the same link type with different resolutions (microseconds, and
    // 2^-20 s with an offset of 100 s), then a second section; and obsolete packet blocks.
    let binary = (9u16, vec![0x80 | 20]);
    let offset = (14u16, 100u64.to_le_bytes().to_vec());
    let mut blocks = vec![
        Block::Section,
        interface(65_535, vec![], true),
        interface(65_535, vec![binary.clone(), offset.clone()], true),
    ];
    for (n, f) in frames.iter().enumerate() {
        let (sec, usec) = stamp(n);
        blocks.push(match n % 3 {
            0 => enhanced(f, 0, u64::from(sec) * 1_000_000 + u64::from(usec)),
            1 => enhanced(f, 1, (u64::from(sec - 100) << 20) + u64::from(usec)),
            _ => Block::Obsolete {
                interface: 0,
                ts: u64::from(sec) * 1_000_000 + u64::from(usec),
                len: f.wire_len,
                data: f.data.clone(),
            },
        });
        if n == frames.len() / 2 {
            // The next section describes its interfaces anew (the first one now in ns).
            blocks.push(Block::Section);
            blocks.push(interface(65_535, vec![nanosecond.clone()], true));
            blocks.push(interface(
                65_535,
                vec![binary.clone(), offset.clone()],
                true,
            ));
        }
    }
    cases.push((
        "pcapng resolutions, offsets, sections, obsolete blocks",
        pcapng(&blocks),
    ));
    cases
}

/// The link header for an Ethernet frame's EtherType, source MAC, destination MAC and number
/// in the corpus; `None` leaves the frame out.
type LinkHeader = fn(u16, [u8; 6], [u8; 6], usize) -> Option<Vec<u8>>;

/// A link type other than Ethernet and how a frame looks on it.
pub struct LinkCase {
    pub name: &'static str,
    pub linktype: u32,
    /// Its header (the frame's number varies directions).
    header: LinkHeader,
}

fn only_ip(ethertype: u16) -> bool {
    ethertype == ETH_IPV4 || ethertype == ETH_IPV6
}

/// The link types checked, with the header each puts before the network layer.
pub fn link_types() -> Vec<LinkCase> {
    vec![
        LinkCase {
            name: "RAW",
            linktype: 101,
            header: |t, _, _, _| only_ip(t).then(Vec::new),
        },
        LinkCase {
            // The raw-IP DLT number of older files.
            name: "RAW (as 12)",
            linktype: 12,
            header: |t, _, _, _| only_ip(t).then(Vec::new),
        },
        LinkCase {
            name: "IPV4",
            linktype: 228,
            header: |t, _, _, _| (t == ETH_IPV4).then(Vec::new),
        },
        LinkCase {
            name: "IPV6",
            linktype: 229,
            header: |t, _, _, _| (t == ETH_IPV6).then(Vec::new),
        },
        LinkCase {
            name: "LINUX_SLL",
            linktype: 113,
            header: |t, src, _, n| {
                // Packet types: to us, broadcast, multicast, to another host, outgoing.
                let kind = [0u16, 1, 2, 3, 4][n % 5];
                let mut h = Vec::new();
                h.extend_from_slice(&kind.to_be_bytes());
                h.extend_from_slice(&1u16.to_be_bytes());
                h.extend_from_slice(&6u16.to_be_bytes());
                h.extend_from_slice(&src);
                h.extend_from_slice(&[0, 0]);
                h.extend_from_slice(&t.to_be_bytes());
                Some(h)
            },
        },
        LinkCase {
            name: "LINUX_SLL2",
            linktype: 276,
            header: |t, src, _, n| {
                let mut h = Vec::new();
                h.extend_from_slice(&t.to_be_bytes());
                h.extend_from_slice(&[0, 0]);
                h.extend_from_slice(&(2 + n as u32 % 3).to_be_bytes());
                h.extend_from_slice(&1u16.to_be_bytes());
                h.push([0u8, 4][n % 2]);
                h.push(6);
                h.extend_from_slice(&src);
                h.extend_from_slice(&[0, 0]);
                Some(h)
            },
        },
        LinkCase {
            // BSD loopback: the address family in the writer's byte order (little-endian here).
            name: "NULL",
            linktype: 0,
            header: |t, _, _, _| match t {
                ETH_IPV4 => Some(2u32.to_le_bytes().to_vec()),
                ETH_IPV6 => Some(30u32.to_le_bytes().to_vec()),
                _ => None,
            },
        },
        LinkCase {
            // OpenBSD loopback: the family in network byte order.
            name: "LOOP",
            linktype: 108,
            header: |t, _, _, _| match t {
                ETH_IPV4 => Some(2u32.to_be_bytes().to_vec()),
                ETH_IPV6 => Some(24u32.to_be_bytes().to_vec()),
                _ => None,
            },
        },
        LinkCase {
            // PPP in HDLC-like framing: address, control, protocol.
            name: "PPP",
            linktype: 9,
            header: |t, _, _, _| match t {
                ETH_IPV4 => Some(vec![0xff, 0x03, 0x00, 0x21]),
                ETH_IPV6 => Some(vec![0xff, 0x03, 0x00, 0x57]),
                _ => None,
            },
        },
        LinkCase {
            // 802.11 data frames from the distribution system, behind an 8-byte radiotap
            // header, with an LLC/SNAP header before the network layer.
            name: "IEEE802_11_RADIO",
            linktype: 127,
            header: |t, src, dst, _| {
                if !only_ip(t) && t != ETH_ARP {
                    return None;
                }
                let mut h = vec![0, 0, 8, 0, 0, 0, 0, 0];
                h.extend_from_slice(&[0x08, 0x02, 0, 0]);
                h.extend_from_slice(&dst);
                h.extend_from_slice(&[0x02, 0x00, 0x5e, 0x10, 0x00, 0xaa]);
                h.extend_from_slice(&src);
                h.extend_from_slice(&[0x10, 0x00]);
                h.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0]);
                h.extend_from_slice(&t.to_be_bytes());
                Some(h)
            },
        },
    ]
}

impl LinkCase {
    /// A microsecond pcap file of the corpus's untagged frames on this link type.
    pub fn file(&self, frames: &[Frame]) -> Vec<u8> {
        let mut out = Vec::new();
        for (n, f) in frames.iter().enumerate() {
            if f.data.len() < 14 {
                continue;
            }
            let ethertype = u16::from_be_bytes([f.data[12], f.data[13]]);
            let dst: [u8; 6] = f.data[0..6].try_into().unwrap();
            let src: [u8; 6] = f.data[6..12].try_into().unwrap();
            let Some(mut data) = (self.header)(ethertype, src, dst, n) else {
                continue;
            };
            let link_len = data.len() as u32;
            data.extend_from_slice(&f.data[14..]);
            let (sec, frac) = stamp(n);
            out.push(Record {
                sec,
                frac,
                caplen: data.len() as u32,
                len: f.wire_len - 14 + link_len,
                data,
            });
        }
        Pcap {
            linktype: self.linktype,
            ..ethernet_pcap(out)
        }
        .bytes()
    }
}
