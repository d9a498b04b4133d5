//! `udp` and `dns`: a datagram with a fixed payload; the source port comes from the validation
//! token, and for `dns` the query id too. Replies are datagrams back to that port, or ICMP
//! errors quoting the probe.
//!
//! A large answer may come in IP fragments. The first one carries the UDP header (and the DNS
//! header) but not the whole datagram its length claims: it is validated from what it carries
//! and reported with `fragmented` set. Later fragments carry no header at all; the caller
//! counts them ([`Verdict::Fragment`]).

use sonde_wire::{dns, udp, IpProtocol};

use super::family::{
    bpf_icmp_errors, icmp_error_class, quoted_datagram, Family, Fragment, IcmpHeader, Received,
    Source, Template,
};
use super::{Module, Verdict};
use crate::reply::Reply;

/// Offset of the checksum in the UDP header.
const CHECKSUM_AT: usize = 6;

pub(super) struct UdpProbe<F: Family> {
    src: Source<F>,
    template: Template<F>,
    /// Offset of the DNS query id within the UDP datagram, for `dns`.
    dns_id_at: Option<usize>,
}

/// The DNS query for `name` and `qtype` with id 0 (the id is patched per probe).
pub(super) fn dns_query(name: &str, qtype: u16) -> Result<Vec<u8>, String> {
    let len = dns::query_len(name).map_err(|_| format!("invalid DNS name \"{name}\""))?;
    let mut query = vec![0u8; len];
    dns::emit_query(&mut query, 0, name, qtype)
        .map_err(|e| format!("DNS query for \"{name}\": {e}"))?;
    Ok(query)
}

impl<F: Family> UdpProbe<F> {
    /// `dns_id_at`: offset of the query id within `payload`, for `dns`.
    pub fn new(
        src: Source<F>,
        payload: &[u8],
        dns_id_at: Option<usize>,
    ) -> Result<UdpProbe<F>, String> {
        let l4_len = udp::HEADER_LEN + payload.len();
        if F::L4_AT + l4_len > sonde_craft::MAX_FRAME {
            return Err(format!(
                "UDP payload of {} bytes does not fit in one {} frame (at most {})",
                payload.len(),
                F::NAME,
                sonde_craft::MAX_FRAME - F::L4_AT - udp::HEADER_LEN
            ));
        }
        let dns_id_at = dns_id_at.map(|at| udp::HEADER_LEN + at);
        let template = Template::new(&src, IpProtocol::UDP, l4_len, CHECKSUM_AT, |l4, ips| {
            l4[udp::HEADER_LEN..].copy_from_slice(payload);
            if let Some(at) = dns_id_at {
                l4[at..at + 2].fill(0);
            }
            let dgram = udp::Repr {
                src_port: 0,
                dst_port: 0,
                payload_len: payload.len(),
            };
            dgram.emit(&mut udp::Packet::new_unchecked(l4), ips);
        });
        Ok(UdpProbe {
            src,
            template,
            dns_id_at,
        })
    }

    /// A datagram back to the probe's source port. A first fragment is read from what it
    /// carries: the UDP header, and for `dns` the DNS header.
    fn classify_udp(&self, rx: &Received<'_, F>) -> Verdict {
        let dgram = match rx.fragment {
            Fragment::Whole => udp::Packet::new_checked(rx.transport),
            _ => udp::Packet::new_quoted(rx.transport),
        };
        let Ok(dgram) = dgram else {
            return Verdict::NotOurs;
        };
        if !self.src.ports.contains(dgram.dst_port()) {
            return Verdict::NotOurs;
        }
        let token = self.src.token(rx.src, dgram.src_port());
        if dgram.dst_port() != self.src.ports.port_for(token) {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(dgram.src_port(), "udp", true);
        r.dport = dgram.dst_port();
        r.udp_len = Some(dgram.len() - udp::HEADER_LEN as u16);
        if self.dns_id_at.is_some() && !read_dns(dgram.payload(), token, &mut r) {
            return Verdict::Invalid;
        }
        Verdict::Valid(r)
    }

    /// An ICMP error quoting the probe: validate the quoted source port.
    fn classify_icmp(&self, rx: &Received<'_, F>) -> Verdict {
        let Some(icmp) = IcmpHeader::read(rx.transport) else {
            return Verdict::NotOurs;
        };
        let Some((target, quoted)) = quoted_datagram::<F>(rx.transport, IpProtocol::UDP) else {
            return Verdict::NotOurs;
        };
        let Ok(head) = udp::Packet::new_quoted(quoted) else {
            return Verdict::Invalid;
        };
        if head.src_port()
            != self
                .src
                .ports
                .port_for(self.src.token(target, head.dst_port()))
        {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(head.dst_port(), icmp_error_class::<F>(icmp.kind), false);
        r.saddr = target.into();
        r.dport = head.src_port();
        r.icmp_type = Some(icmp.kind);
        r.icmp_code = Some(icmp.code);
        Verdict::Valid(r)
    }
}

/// Fills the DNS fields from a response to the query `token` identifies; false if it is not one
/// (no whole DNS header, a query, or another id).
fn read_dns(payload: &[u8], token: u64, r: &mut Reply) -> bool {
    let Ok(msg) = dns::Packet::new_checked(payload) else {
        return false;
    };
    if msg.id() != (token >> 16) as u16 || !msg.is_response() {
        return false;
    }
    r.classification = "dns";
    r.dns_rcode = Some(msg.rcode());
    r.dns_answers = Some(msg.answer_count());
    true
}

impl<F: Family> Module<F> for UdpProbe<F> {
    fn frame_len(&self) -> usize {
        self.template.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: F::Addr, port: u16, _now_us: u32) -> usize {
        let token = self.src.token(target, port);
        let ports = [(0, self.src.ports.port_for(token)), (2, port)];
        match self.dns_id_at {
            Some(at) => {
                let [sport, dport] = ports;
                let id = (token >> 16) as u16;
                self.template.write(buf, target, [sport, dport, (at, id)])
            }
            None => self.template.write(buf, target, ports),
        }
    }

    fn bpf_filter(&self) -> String {
        format!(
            "{} and ((udp and dst portrange {}) or {} or ({}))",
            self.src.bpf_to_us(),
            self.src.ports,
            F::bpf_udp_fragments(self.src.ports),
            bpf_icmp_errors::<F>()
        )
    }

    fn answers_in(&self, protocol: IpProtocol) -> bool {
        protocol == IpProtocol::UDP || protocol == F::ICMP
    }

    fn classify(&self, rx: &Received<'_, F>, _now_us: u32) -> Verdict {
        if rx.protocol == IpProtocol::UDP {
            self.classify_udp(rx)
        } else if rx.protocol == F::ICMP {
            self.classify_icmp(rx)
        } else {
            Verdict::NotOurs
        }
    }
}
