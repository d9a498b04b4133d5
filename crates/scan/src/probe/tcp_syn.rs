//! `tcp_syn`: a SYN with Linux's usual options (MSS, SACK-permitted, timestamps, window scale).
//! The sequence number and source port come from the validation token; the timestamp carries
//! the send time, which the peer echoes, so SYN-ACKs give RTTs without any per-probe state.
//! Also the RST that answers a SYN-ACK.

use std::net::IpAddr;

use sonde_wire::{tcp, IpProtocol, TcpFlags, TcpOption};

use super::family::{hi, lo, Family, Received, Source, Template, V4, V6};
use super::{Module, ProbeSetup, Verdict};
use crate::reply::Reply;

/// Offset of the checksum in the TCP header.
const CHECKSUM_AT: usize = 16;

pub(super) struct TcpSyn<F: Family> {
    src: Source<F>,
    template: Template<F>,
    /// Offset of the TSval within the TCP header.
    tsval_at: usize,
}

fn syn_repr() -> tcp::Repr {
    tcp::Repr {
        src_port: 0,
        dst_port: 0,
        seq_number: 0,
        ack_number: None,
        flags: TcpFlags::SYN,
        window_len: 65535,
        window_scale: Some(7),
        max_seg_size: Some(1460),
        sack_permitted: true,
        sack_ranges: [None; 3],
        timestamp: Some((0, 0)),
        payload_len: 0,
    }
}

impl<F: Family> TcpSyn<F> {
    pub fn new(src: Source<F>) -> TcpSyn<F> {
        let syn = syn_repr();
        let mut tsval_at = 0;
        let template = Template::new(
            &src,
            IpProtocol::TCP,
            syn.buffer_len(),
            CHECKSUM_AT,
            |l4, ips| {
                syn.emit(&mut tcp::Packet::new_unchecked(&mut *l4), ips);
                tsval_at = tcp::HEADER_LEN + timestamp_offset(&l4[tcp::HEADER_LEN..]);
            },
        );
        TcpSyn {
            src,
            template,
            tsval_at,
        }
    }
}

/// Where the TSval of the timestamps option starts within `options`.
fn timestamp_offset(options: &[u8]) -> usize {
    let mut at = 0;
    while at + 1 < options.len() {
        match options[at] {
            8 => return at + 2,
            0 | 1 => at += 1,
            _ => at += options[at + 1].max(2) as usize,
        }
    }
    unreachable!("the SYN template always carries a timestamps option")
}

/// SYN-ACK and RST are the answers to a SYN; anything else is other traffic.
fn tcp_class(flags: TcpFlags) -> Option<&'static str> {
    if flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
        Some("synack")
    } else if flags.contains(TcpFlags::RST) {
        Some("rst")
    } else {
        None
    }
}

impl<F: Family> Module<F> for TcpSyn<F> {
    fn frame_len(&self) -> usize {
        self.template.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: F::Addr, port: u16, now_us: u32) -> usize {
        let token = self.src.token(target, port);
        let seq = token as u32;
        let rest = [
            (0, self.src.ports.port_for(token)),
            (2, port),
            (4, hi(seq)),
            (6, lo(seq)),
            (self.tsval_at, hi(now_us)),
            (self.tsval_at + 2, lo(now_us)),
        ];
        self.template.write(buf, target, rest)
    }

    fn bpf_filter(&self) -> String {
        let flags = F::bpf_l4("tcp", 13);
        format!(
            "{} and tcp and dst portrange {} and ({flags} & 0x04 != 0 or {flags} & 0x12 = 0x12)",
            self.src.bpf_to_us(),
            self.src.ports
        )
    }

    fn answers_in(&self, protocol: IpProtocol) -> bool {
        protocol == IpProtocol::TCP
    }

    fn classify(&self, rx: &Received<'_, F>, now_us: u32) -> Verdict {
        if rx.protocol != IpProtocol::TCP {
            return Verdict::NotOurs;
        }
        let Ok(seg) = tcp::Packet::new_checked(rx.transport) else {
            return Verdict::NotOurs;
        };
        let Some(class) = tcp_class(seg.flags()) else {
            return Verdict::NotOurs;
        };
        if !self.src.ports.contains(seg.dst_port()) {
            return Verdict::NotOurs;
        }
        let token = self.src.token(rx.src, seg.src_port());
        if seg.dst_port() != self.src.ports.port_for(token)
            || seg.ack_number() != (token as u32).wrapping_add(1)
        {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(seg.src_port(), class, class == "synack");
        r.dport = seg.dst_port();
        r.window = seg.window_len();
        read_options(&seg, &mut r, now_us);
        Verdict::Valid(r)
    }
}

fn read_options(seg: &tcp::Packet<&[u8]>, r: &mut Reply, now_us: u32) {
    for option in seg.iter_options().map_while(Result::ok) {
        match option {
            TcpOption::Mss(v) => r.tcp_mss = Some(v),
            TcpOption::WindowScale(v) => r.tcp_wscale = Some(v),
            TcpOption::SackPermitted => r.tcp_sack_ok = true,
            TcpOption::Timestamps { tsval, tsecr } => {
                r.tcp_ts = Some(tsval);
                // A zero echo means the peer echoed nothing, not a send time of zero.
                if tsecr != 0 {
                    r.rtt_us = Some(u64::from(now_us.wrapping_sub(tsecr)));
                }
            }
            _ => {}
        }
    }
}

/// The RST a scanner sends for each SYN-ACK, so the target drops its half-open connection
/// (needed when the source address is not the host's own, whose kernel would reset it anyway),
/// for either family.
#[derive(Clone, Debug)]
pub struct RstTemplate {
    v4: Option<Template<V4>>,
    v6: Option<Template<V6>>,
}

/// The bare RST: ports and sequence number are patched per reset.
fn rst_template<F: Family>(src: &Source<F>) -> Template<F> {
    let rst = tcp::Repr {
        flags: TcpFlags::RST,
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        timestamp: None,
        ..syn_repr()
    };
    Template::new(
        src,
        IpProtocol::TCP,
        tcp::HEADER_LEN,
        CHECKSUM_AT,
        |l4, ips| rst.emit(&mut tcp::Packet::new_unchecked(l4), ips),
    )
}

fn write_rst<F: Family>(
    template: &Template<F>,
    buf: &mut [u8],
    target: F::Addr,
    port: u16,
    sport: u16,
    seq: u32,
) -> usize {
    let rest = [(0, sport), (2, port), (4, hi(seq)), (6, lo(seq))];
    template.write(buf, target, rest)
}

impl RstTemplate {
    /// A template for each family `setup` has a source address of.
    pub fn new(setup: &ProbeSetup) -> RstTemplate {
        RstTemplate {
            v4: setup.source::<V4>().map(|src| rst_template(&src)),
            v6: setup.source::<V6>().map(|src| rst_template(&src)),
        }
    }

    /// Writes the RST answering a SYN-ACK from `target:port` to our `sport`; `seq` is the ACK
    /// number the SYN-ACK carried. Returns the frame's length, 0 when the setup had no source
    /// address of the target's family.
    pub fn write(&self, buf: &mut [u8], target: IpAddr, port: u16, sport: u16, seq: u32) -> usize {
        match target {
            IpAddr::V4(a) => self
                .v4
                .as_ref()
                .map_or(0, |t| write_rst(t, buf, a, port, sport, seq)),
            IpAddr::V6(a) => self
                .v6
                .as_ref()
                .map_or(0, |t| write_rst(t, buf, a, port, sport, seq)),
        }
    }
}
