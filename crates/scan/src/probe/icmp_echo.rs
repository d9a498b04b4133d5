//! `icmp_echo`: an echo request whose identifier and sequence number come from the validation
//! token and whose data carries the send time (echoed back, so replies give RTTs). Errors about
//! a request (unreachable, time exceeded) validate through the identifiers they quote.

use sonde_wire::IpProtocol;

use super::family::{
    hi, icmp_error_class, lo, quoted_datagram, Family, IcmpHeader, Received, Source, Template,
    ICMP_HEADER_LEN,
};
use super::{Module, Verdict};

/// Bytes of echo data: the send time, then zeros.
const ECHO_DATA: usize = 8;
/// Offset of the checksum in the ICMP header.
const CHECKSUM_AT: usize = 2;

pub(super) struct IcmpEcho<F: Family> {
    src: Source<F>,
    template: Template<F>,
}

impl<F: Family> IcmpEcho<F> {
    pub fn new(src: Source<F>) -> IcmpEcho<F> {
        let l4_len = ICMP_HEADER_LEN + ECHO_DATA;
        let template = Template::new(&src, F::ICMP, l4_len, CHECKSUM_AT, |l4, _| {
            F::emit_echo_request(l4, src.ip)
        });
        IcmpEcho { src, template }
    }

    /// Identifier and sequence number for `target`: the token's upper half.
    fn ids(&self, target: F::Addr) -> (u16, u16) {
        let token = self.src.token(target, 0);
        ((token >> 32) as u16, (token >> 48) as u16)
    }

    fn classify_reply(&self, rx: &Received<'_, F>, icmp: IcmpHeader, now_us: u32) -> Verdict {
        if self.ids(rx.src) != (icmp.ident, icmp.seq) {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(0, "echoreply", true);
        let data = rx.transport.get(ICMP_HEADER_LEN..).unwrap_or_default();
        if let Some(sent) = data.first_chunk::<4>() {
            r.rtt_us = Some(u64::from(now_us.wrapping_sub(u32::from_be_bytes(*sent))));
        }
        r.icmp_type = Some(icmp.kind);
        r.icmp_code = Some(icmp.code);
        Verdict::Valid(r)
    }

    /// An error about one of our echo requests quotes it: validate the quoted identifiers.
    fn classify_error(&self, rx: &Received<'_, F>, icmp: IcmpHeader) -> Verdict {
        let Some((target, quoted)) = quoted_datagram::<F>(rx.transport, F::ICMP) else {
            return Verdict::NotOurs;
        };
        let Some(request) = IcmpHeader::read(quoted) else {
            return Verdict::Invalid;
        };
        if self.ids(target) != (request.ident, request.seq) {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(0, icmp_error_class::<F>(icmp.kind), false);
        r.saddr = target.into();
        r.icmp_type = Some(icmp.kind);
        r.icmp_code = Some(icmp.code);
        Verdict::Valid(r)
    }
}

impl<F: Family> Module<F> for IcmpEcho<F> {
    fn frame_len(&self) -> usize {
        self.template.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: F::Addr, _port: u16, now_us: u32) -> usize {
        let (ident, seq) = self.ids(target);
        let rest = [
            (4, ident),
            (6, seq),
            (ICMP_HEADER_LEN, hi(now_us)),
            (ICMP_HEADER_LEN + 2, lo(now_us)),
        ];
        self.template.write(buf, target, rest)
    }

    fn bpf_filter(&self) -> String {
        let kind = F::bpf_l4(F::BPF_ICMP, 0);
        format!(
            "{} and {} and ({kind} = {} or {kind} = {} or {kind} = {})",
            self.src.bpf_to_us(),
            F::BPF_ICMP,
            F::ECHO_REPLY,
            F::DST_UNREACHABLE,
            F::TIME_EXCEEDED
        )
    }

    fn answers_in(&self, protocol: IpProtocol) -> bool {
        protocol == F::ICMP
    }

    fn classify(&self, rx: &Received<'_, F>, now_us: u32) -> Verdict {
        if rx.protocol != F::ICMP {
            return Verdict::NotOurs;
        }
        let Some(icmp) = IcmpHeader::read(rx.transport) else {
            return Verdict::NotOurs;
        };
        if icmp.kind == F::ECHO_REPLY {
            self.classify_reply(rx, icmp, now_us)
        } else {
            self.classify_error(rx, icmp)
        }
    }
}
