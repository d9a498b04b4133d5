//! Reading a capture file (`-r`): classic pcap (micro- or nanosecond, either byte order) or
//! pcapng (enhanced and simple packet blocks, any timestamp resolution), Ethernet only.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

/// A packet read from a file.
pub struct FilePacket<'a> {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub data: &'a [u8],
}

/// What the file says of itself.
#[derive(Clone, Copy, Debug)]
pub struct FileHeader {
    pub snaplen: u32,
}

/// Opens `path` (`-` for stdin) and calls `on_packet` for each packet in order, until it
/// returns false. Returns how many packets it read. A truncated or corrupt file is an error
/// that names the file and the packet where reading stopped; the packets before it have been
/// handed over. Hostile input ends in an error, never a panic (fuzzed: `fuzz/capture_read`).
pub fn read_file(
    path: &str,
    on_header: impl FnMut(FileHeader) -> anyhow::Result<()>,
    on_packet: impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let input: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).with_context(|| format!("cannot read {path}"))?)
    };
    read_stream(input, on_header, on_packet).with_context(|| path.to_string())
}

/// [`read_file`] of a stream (errors do not name it).
pub fn read_stream(
    mut input: impl Read,
    mut on_header: impl FnMut(FileHeader) -> anyhow::Result<()>,
    mut on_packet: impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut magic = [0u8; 4];
    input
        .read_exact(&mut magic)
        .map_err(|_| anyhow!("too short to be a capture file"))?;
    let input = BufReader::with_capacity(1 << 20, io::Cursor::new(magic).chain(input));
    match u32::from_le_bytes(magic) {
        0x0A0D_0D0A => read_pcapng(input, &mut on_header, &mut on_packet),
        0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 => {
            read_pcap(input, &mut on_header, &mut on_packet)
        }
        _ => bail!("not a pcap or pcapng file"),
    }
}

fn read_pcap(
    input: impl Read,
    on_header: &mut impl FnMut(FileHeader) -> anyhow::Result<()>,
    on_packet: &mut impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut reader = PcapReader::new(input).map_err(|e| anyhow!("bad pcap header: {e}"))?;
    let header = reader.header();
    ethernet_only(header.datalink)?;
    on_header(FileHeader {
        snaplen: header.snaplen,
    })?;
    let mut n = 0;
    while let Some(packet) = reader.next_packet() {
        let p = packet.map_err(|e| corrupt(n, e))?;
        n += 1;
        let go_on = on_packet(&FilePacket {
            ts_ns: p.timestamp.as_nanos() as u64,
            wire_len: p.orig_len,
            data: &p.data,
        })?;
        if !go_on {
            break;
        }
    }
    Ok(n)
}

fn read_pcapng(
    input: impl Read,
    on_header: &mut impl FnMut(FileHeader) -> anyhow::Result<()>,
    on_packet: &mut impl FnMut(&FilePacket<'_>) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut reader = PcapNgReader::new(input).map_err(|e| anyhow!("bad pcapng header: {e}"))?;
    let mut n = 0;
    let mut told_header = false;
    // Each interface's `if_tsresol`, as the blocks describing them go by.
    let mut resolutions: Vec<u8> = Vec::new();
    while let Some(block) = reader.next_block() {
        let block = block.map_err(|e| corrupt(n, e))?;
        let (interface, ts_raw, wire_len, data) = match &block {
            Block::SectionHeader(_) => {
                resolutions.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                ethernet_only(idb.linktype)?;
                resolutions.push(
                    idb.options
                        .iter()
                        .find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                            _ => None,
                        })
                        .unwrap_or(6),
                );
                if !told_header {
                    on_header(FileHeader {
                        snaplen: idb.snaplen,
                    })?;
                    told_header = true;
                }
                continue;
            }
            Block::EnhancedPacket(p) => {
                (p.interface_id, p.timestamp, p.original_len, p.data.as_ref())
            }
            Block::SimplePacket(p) => (0, Duration::ZERO, p.original_len, p.data.as_ref()),
            _ => continue,
        };
        let units = *resolutions.get(interface as usize).ok_or_else(|| {
            anyhow!(
                "packet {} names interface {interface}, which the file never described",
                n + 1
            )
        })?;
        n += 1;
        let go_on = on_packet(&FilePacket {
            ts_ns: to_nanos(ts_raw.as_nanos() as u64, units),
            wire_len,
            data,
        })?;
        if !go_on {
            break;
        }
    }
    Ok(n)
}

/// pcapng stamps count units of `if_tsresol` (pcap-file reads the raw count as nanoseconds).
fn to_nanos(count: u64, tsresol: u8) -> u64 {
    let exp = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 != 0 {
        // Units of 2^-exp seconds.
        return ((u128::from(count) * 1_000_000_000) >> exp.min(127)) as u64;
    }
    match exp {
        9 => count,
        0..=8 => count.saturating_mul(10u64.pow(9 - exp)),
        _ => count / 10u64.saturating_pow(exp - 9),
    }
}

fn ethernet_only(link: DataLink) -> anyhow::Result<()> {
    if link != DataLink::ETHERNET {
        bail!("link type {link:?}: sonde capture reads Ethernet captures only");
    }
    Ok(())
}

fn corrupt(read: u64, err: pcap_file::PcapError) -> anyhow::Error {
    anyhow!(
        "truncated or corrupt after packet {read} ({})",
        match err {
            pcap_file::PcapError::IncompleteBuffer => "the file ends inside a packet".to_string(),
            other => other.to_string(),
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcapng_resolutions_become_nanoseconds() {
        assert_eq!(to_nanos(5, 9), 5);
        assert_eq!(to_nanos(5, 6), 5_000);
        assert_eq!(to_nanos(5, 0), 5_000_000_000);
        assert_eq!(to_nanos(5_000, 12), 5);
        assert_eq!(to_nanos(1 << 20, 0x80 | 20), 1_000_000_000);
    }
}
