//! `icmp_echo`: an echo request whose identifier is the scan's own, whose sequence number comes
//! from the validation token, and whose data carries the send time (echoed back, so replies give
//! RTTs) and 32 more bits of the token. Errors about a request (unreachable, time exceeded)
//! validate through what they quote of it.
//!
//! The identifier is one per scan (a keyed hash of the scan's key alone), not one per target:
//! the kernel's XDP reply filter can check a fixed value, and so tells sonde's echo replies from
//! those to the host's own `ping` (whose identifier is another one, unless it happens to be the
//! same 16 bits). Per target, a reply validates through its sequence number (16 bits) and echoed
//! data (32 bits); an error through the sequence number it quotes, and the data too when it
//! quotes that far (IPv4 routers may quote only the 8-byte ICMP header).

use std::net::{IpAddr, Ipv4Addr};

use sonde_wire::IpProtocol;

use super::family::{
    hi, icmp_error_class, lo, quoted_datagram, Family, IcmpHeader, Received, Source, Template,
    ICMP_HEADER_LEN,
};
use super::{Module, Verdict};
use crate::validate::Validator;

/// Bytes of echo data: the send time, then the token's check word.
const ECHO_DATA: usize = 8;
/// Where the check word lies in the echo data.
const CHECK_AT: usize = 4;
/// Offset of the checksum in the ICMP header.
const CHECKSUM_AT: usize = 2;

pub(super) struct IcmpEcho<F: Family> {
    src: Source<F>,
    template: Template<F>,
    ident: u16,
}

/// What a request to one target carries for validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ids {
    ident: u16,
    seq: u16,
    /// Echo data bytes CHECK_AT..CHECK_AT + 4.
    check: u32,
}

impl<F: Family> IcmpEcho<F> {
    pub fn new(src: Source<F>) -> IcmpEcho<F> {
        let l4_len = ICMP_HEADER_LEN + ECHO_DATA;
        let template = Template::new(&src, F::ICMP, l4_len, CHECKSUM_AT, |l4, _| {
            F::emit_echo_request(l4, src.ip)
        });
        let ident = scan_ident(&src.validator);
        IcmpEcho {
            src,
            template,
            ident,
        }
    }

    /// What the request to `target` carries: the scan's identifier, then the token's upper 16
    /// bits as sequence number and its lower 32 bits as check word.
    fn ids(&self, target: F::Addr) -> Ids {
        let token = self.src.token(target, 0);
        Ids {
            ident: self.ident,
            seq: (token >> 48) as u16,
            check: token as u32,
        }
    }

    /// Whether an echo message (a reply, or a quoted request) carries `target`'s ids: its
    /// identifier and sequence number, and the check word when `data` reaches it (a reply
    /// must carry it, `whole`; a quote may be cut short).
    fn carries_ids(&self, target: F::Addr, icmp: IcmpHeader, data: &[u8], whole: bool) -> bool {
        let ids = self.ids(target);
        if (ids.ident, ids.seq) != (icmp.ident, icmp.seq) {
            return false;
        }
        match data.get(CHECK_AT..CHECK_AT + 4) {
            Some(check) => check == ids.check.to_be_bytes(),
            None => !whole,
        }
    }

    fn classify_reply(&self, rx: &Received<'_, F>, icmp: IcmpHeader, now_us: u32) -> Verdict {
        let data = rx.transport.get(ICMP_HEADER_LEN..).unwrap_or_default();
        if !self.carries_ids(rx.src, icmp, data, true) {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(0, "echoreply", true);
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
        let data = quoted.get(ICMP_HEADER_LEN..).unwrap_or_default();
        if !self.carries_ids(target, request, data, false) {
            return Verdict::Invalid;
        }
        let mut r = rx.reply(0, icmp_error_class::<F>(icmp.kind), false);
        r.saddr = target.into();
        r.icmp_type = Some(icmp.kind);
        r.icmp_code = Some(icmp.code);
        Verdict::Valid(r)
    }
}

/// The identifier of every echo request of a scan keyed with `validator`: the same for both
/// families, so one value tells the reply filter which echo replies are the scan's.
pub(super) fn scan_ident(validator: &Validator) -> u16 {
    let none = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    (validator.token(none, none, 0) >> 16) as u16
}

impl<F: Family> Module<F> for IcmpEcho<F> {
    fn frame_len(&self) -> usize {
        self.template.frame_len()
    }

    #[inline]
    fn write(&self, buf: &mut [u8], target: F::Addr, _port: u16, now_us: u32) -> usize {
        let ids = self.ids(target);
        let check_at = ICMP_HEADER_LEN + CHECK_AT;
        let rest = [
            (4, ids.ident),
            (6, ids.seq),
            (ICMP_HEADER_LEN, hi(now_us)),
            (ICMP_HEADER_LEN + 2, lo(now_us)),
            (check_at, hi(ids.check)),
            (check_at + 2, lo(ids.check)),
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

    fn echo_ident(&self) -> Option<u16> {
        Some(self.ident)
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
