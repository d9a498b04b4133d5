//! Opening a run's I/O: one transmit queue per sender thread, and the receivers that get only
//! what can be a reply, filtered in the kernel.
//!
//! With `--rx-backend xdp` each queue gets an AF_XDP receiver behind sonde's reply filter (an
//! AF_XDP socket sees only its own queue), sharing the socket with that queue's sender when it
//! transmits over AF_XDP too (the kernel allows one AF_XDP socket per queue). Any other
//! receiver is one packet socket with a classic BPF filter, which sees every queue.

use std::net::{Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Context};
use sonde_craft::cookie::PortRange;
use sonde_io::{AnyRx, AnyTx, BackendKind, FilterSpec, TcpTake};
use sonde_scan::probe::{ModuleKind, Probe};

use crate::plan::RunPlan;

/// What the receivers take, for both filter paths: the XDP reply filter's spec and the same
/// frames as a tcpdump expression (for classic BPF on packet sockets).
pub struct ReplyFilter {
    pub spec: FilterSpec,
    pub expr: String,
}

impl ReplyFilter {
    /// The replies of a probe module: for a SYN scan only SYN-ACKs and RSTs to our ports, for
    /// the others what the module's expression describes (ICMP, UDP, DNS). The XDP filter takes
    /// echo replies only with the scan's echo identifier, ICMP errors only about its probes,
    /// and nothing whose flow a socket of the host owns: the host shares the address.
    pub fn for_probe(run: &RunPlan, probe: &Probe) -> ReplyFilter {
        let module = probe.kind();
        let (v4, v6) = (probe.has_family(false), probe.has_family(true));
        let udp = matches!(module, ModuleKind::Udp | ModuleKind::Dns);
        let icmp = module != ModuleKind::TcpSyn;
        let spec = FilterSpec {
            ipv4: run.src_ip.filter(|_| v4),
            ipv6: run.src_ip6.filter(|_| v6),
            tcp: if module == ModuleKind::TcpSyn {
                TcpTake::SynAckOrRst
            } else {
                TcpTake::None
            },
            udp,
            icmp: icmp && v4,
            icmp6: icmp && v6,
            ports: (run.ports.first, run.ports.last),
            echo_id: probe.echo_ident().filter(|_| icmp),
            spare_host_sockets: true,
            stamp_arrivals: false,
        };
        ReplyFilter {
            spec,
            expr: probe.bpf_filter(),
        }
    }

    /// A TCP client's segments (grab): every TCP segment to our addresses and ports, except
    /// those of the host's own sockets there (an application's listener, say); and the ICMP
    /// errors the client reads (destination unreachable, fragmentation needed, Packet Too Big)
    /// when they quote a TCP segment from our address and ports.
    pub fn for_tcp_client(run: &RunPlan, v4: bool, v6: bool) -> ReplyFilter {
        tcp_client(
            run.src_ip.filter(|_| v4),
            run.src_ip6.filter(|_| v6),
            run.ports,
        )
    }
}

/// [`ReplyFilter::for_tcp_client`] for our addresses and source ports. The XDP filter checks
/// an ICMP error's quote itself (from our address and port range, no host socket's); the
/// tcpdump expression checks the same with fixed offsets, as our segments have them (IPv4
/// without options, IPv6 without extension headers).
fn tcp_client(ipv4: Option<Ipv4Addr>, ipv6: Option<Ipv6Addr>, ports: PortRange) -> ReplyFilter {
    let hosts: Vec<String> = [ipv4.map(|ip| ip.to_string()), ipv6.map(|ip| ip.to_string())]
        .into_iter()
        .flatten()
        .map(|ip| format!("dst host {ip}"))
        .collect();
    let mut expr = format!(
        "(({}) and tcp and dst portrange {ports})",
        hosts.join(" or ")
    );
    if let Some(ip) = ipv4 {
        expr += &format!(" or ({})", icmp_errors_v4(ip, ports));
    }
    if let Some(ip) = ipv6 {
        expr += &format!(" or ({})", icmp_errors_v6(ip, ports));
    }
    ReplyFilter {
        spec: FilterSpec {
            ipv4,
            ipv6,
            tcp: TcpTake::All,
            udp: false,
            icmp: ipv4.is_some(),
            icmp6: ipv6.is_some(),
            ports: (ports.first, ports.last),
            echo_id: None,
            spare_host_sockets: true,
            stamp_arrivals: true,
        },
        expr,
    }
}

/// tcpdump's expression for ICMP destination unreachables (fragmentation needed included) to
/// `ours` quoting a TCP segment from `ours` and a port of `ports`. The quote starts at byte 8
/// of the message: version and header length (0x45), protocol at +9, source at +12, and the
/// TCP source port right after the 20-byte header.
fn icmp_errors_v4(ours: Ipv4Addr, ports: PortRange) -> String {
    format!(
        "icmp and dst host {ours} and icmp[0] = 3 and icmp[8] = 0x45 and icmp[17] = 6 \
         and icmp[20:4] = {} and icmp[28:2] >= {} and icmp[28:2] <= {}",
        u32::from(ours),
        ports.first,
        ports.last
    )
}

/// The same for ICMPv6 destination unreachables and Packet Too Big (types 1 and 2): the
/// message at byte 40 of the packet, the quoted IPv6 header at 48 (next header at 54, source
/// at 56), the quoted TCP source port at 88.
fn icmp_errors_v6(ours: Ipv6Addr, ports: PortRange) -> String {
    let source = ours
        .octets()
        .chunks(4)
        .enumerate()
        .map(|(i, word)| {
            let word = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
            format!("ip6[{}:4] = {word}", 56 + 4 * i)
        })
        .collect::<Vec<_>>()
        .join(" and ");
    format!(
        "icmp6 and dst host {ours} and (ip6[40] = 1 or ip6[40] = 2) and ip6[54] = 6 \
         and {source} and ip6[88:2] >= {} and ip6[88:2] <= {}",
        ports.first, ports.last
    )
}

pub struct Queues {
    pub senders: Vec<AnyTx>,
    pub receivers: Vec<AnyRx>,
}

/// Opens the run's queues; refuses at once more sender threads than the interface has queues.
pub fn open_queues(run: &RunPlan, filter: &ReplyFilter) -> anyhow::Result<Queues> {
    let on = QueuesOn {
        iface: &run.iface,
        queues: run.queues,
        threads: run.threads,
        backend: run.backend,
        rx_backend: run.rx_backend,
        io_config: &|q| run.io_config(q),
    };
    open_queues_on(&on, filter)
}

/// Where and how to open queues, for a run without a [`RunPlan`] (`sonde dns`).
pub struct QueuesOn<'a> {
    pub iface: &'a str,
    pub queues: u32,
    pub threads: u32,
    pub backend: BackendKind,
    pub rx_backend: BackendKind,
    pub io_config: &'a dyn Fn(u32) -> sonde_io::IoConfig,
}

/// [`open_queues`] for `run`.
pub fn open_queues_on(run: &QueuesOn<'_>, filter: &ReplyFilter) -> anyhow::Result<Queues> {
    let queues = run.queues.max(1);
    if run.threads > queues {
        bail!(
            "--threads {} is more than the {queues} queues of {}: each sender needs a queue of its own (use --threads {queues} or fewer)",
            run.threads,
            run.iface
        );
    }
    let (spec, expr) = (&filter.spec, &filter.expr);
    let mut shared: Vec<Option<AnyTx>> = (0..queues).map(|_| None).collect();
    let mut receivers = Vec::new();
    if run.rx_backend == BackendKind::Xdp {
        for q in 0..queues {
            let io = (run.io_config)(q);
            if run.backend == BackendKind::Xdp && q < run.threads {
                let (tx, rx) = sonde_io::open_xdp_pair(&io, spec)?;
                shared[q as usize] = Some(tx);
                receivers.push(rx);
            } else {
                receivers.push(AnyRx::open_filtered(BackendKind::Xdp, &io, spec, expr)?);
            }
        }
    } else {
        let rx = AnyRx::open_filtered(run.rx_backend, &(run.io_config)(0), spec, expr)
            .with_context(|| format!("opening the {} receiver on {}", run.rx_backend, run.iface))?;
        receivers.push(rx);
    }
    let senders = (0..run.threads)
        .map(|t| {
            let q = t % queues;
            match shared[q as usize].take() {
                Some(tx) => Ok(tx),
                None => AnyTx::open(run.backend, &(run.io_config)(q))
                    .with_context(|| format!("opening {} on {} queue {q}", run.backend, run.iface)),
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Queues { senders, receivers })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use sonde_io::filter;
    use sonde_wire::{ethernet, ipv4, ipv6, EtherType, IpProtocol, MacAddr};

    use super::*;

    const OURS: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 1);
    const OURS6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xffff, 0, 0, 0, 1);
    const PORTS: PortRange = PortRange {
        first: 61000,
        last: 65535,
    };

    /// An Ethernet frame of an IP packet from `src` to `dst` carrying `payload` of `protocol`.
    fn frame(src: IpAddr, dst: IpAddr, protocol: IpProtocol, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![0u8; 14];
        let ethertype = match (src, dst) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
                frame.extend_from_slice(&ip_header_v4(src_addr, dst_addr, protocol, payload.len()));
                EtherType::Ipv4
            }
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
                frame.extend_from_slice(&ip_header_v6(src_addr, dst_addr, protocol, payload.len()));
                EtherType::Ipv6
            }
            _ => unreachable!(),
        };
        ethernet::Repr {
            src_addr: MacAddr([2, 0, 0, 0, 0, 2]),
            dst_addr: MacAddr([2, 0, 0, 0, 0, 1]),
            ethertype,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut frame[..]));
        frame.extend_from_slice(payload);
        frame
    }

    fn ip_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, len: usize) -> Vec<u8> {
        let mut ip = vec![0u8; 20];
        ipv4::Repr {
            src_addr: src,
            dst_addr: dst,
            protocol,
            payload_len: len,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
        ip
    }

    fn ip_header_v6(src: Ipv6Addr, dst: Ipv6Addr, protocol: IpProtocol, len: usize) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        ipv6::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: protocol,
            payload_len: len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
        ip
    }

    /// An ICMP(v6) error of `kind`/`code` from a router to `to`, quoting a segment of
    /// `protocol` from (`quoted_src`, `sport`) to a target.
    fn icmp_error(to: IpAddr, kind: u8, code: u8, quoted_src: IpAddr, sport: u16) -> Vec<u8> {
        let mut message = vec![kind, code, 0, 0, 0, 0, 0x05, 0x00];
        let ports = [
            &sport.to_be_bytes()[..],
            &80u16.to_be_bytes(),
            &[0, 0, 0, 1],
        ]
        .concat();
        let (router, protocol, quoted_ip) = match quoted_src {
            IpAddr::V4(src) => (
                IpAddr::V4(Ipv4Addr::new(198, 19, 255, 254)),
                IpProtocol::ICMP,
                ip_header_v4(src, Ipv4Addr::new(198, 18, 0, 7), IpProtocol::TCP, 40),
            ),
            IpAddr::V6(src) => (
                IpAddr::V6("2001:2:0:ffff::fe".parse().unwrap()),
                IpProtocol::ICMPV6,
                ip_header_v6(src, "2001:2::7".parse().unwrap(), IpProtocol::TCP, 40),
            ),
        };
        message.extend_from_slice(&quoted_ip);
        message.extend_from_slice(&ports);
        frame(router, to, protocol, &message)
    }

    fn taken(expr: &str, frame: &[u8]) -> bool {
        let program = filter::compile(expr).expect("the expression compiles");
        filter::matches(&program, frame, frame.len() as u32)
    }

    #[test]
    fn the_tcp_client_takes_its_segments_and_the_icmp_errors_about_them() {
        let filter = tcp_client(Some(OURS), Some(OURS6), PORTS);
        let expr = &filter.expr;
        let (ours, ours6) = (IpAddr::V4(OURS), IpAddr::V6(OURS6));
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&61234u16.to_be_bytes());
        tcp[12] = 5 << 4;
        let target: IpAddr = "198.18.0.7".parse().unwrap();
        assert!(taken(expr, &frame(target, ours, IpProtocol::TCP, &tcp)));
        // Destination unreachable (host; fragmentation needed) and ICMPv6's unreachable and
        // Packet Too Big, quoting our segments.
        for (to, kind, code) in [
            (ours, 3, 1),
            (ours, 3, 4),
            (ours, 3, 13),
            (ours6, 1, 3),
            (ours6, 2, 0),
        ] {
            assert!(
                taken(expr, &icmp_error(to, kind, code, to, 61234)),
                "{kind}/{code}"
            );
            assert!(
                taken(expr, &icmp_error(to, kind, code, to, 65535)),
                "{kind}/{code}"
            );
        }
        // Not: other errors and messages, quotes of other ports or of another source address,
        // errors to another address.
        let other: IpAddr = "198.19.255.2".parse().unwrap();
        let other6: IpAddr = "2001:2:0:ffff::2".parse().unwrap();
        let refused = [
            icmp_error(ours, 11, 0, ours, 61234),
            icmp_error(ours, 0, 0, ours, 61234),
            icmp_error(ours, 3, 1, ours, 60999),
            icmp_error(ours, 3, 1, other, 61234),
            icmp_error(other, 3, 1, other, 61234),
            icmp_error(ours6, 3, 0, ours6, 61234),
            icmp_error(ours6, 129, 0, ours6, 61234),
            icmp_error(ours6, 1, 3, ours6, 40000),
            icmp_error(ours6, 1, 3, other6, 61234),
            icmp_error(other6, 1, 3, other6, 61234),
        ];
        for (i, frame) in refused.iter().enumerate() {
            assert!(!taken(expr, frame), "frame {i}");
        }
        // The XDP filter takes both families' ICMP (and checks the quotes itself).
        assert!(filter.spec.icmp && filter.spec.icmp6);
        assert_eq!(filter.spec.tcp, TcpTake::All);
    }

    #[test]
    fn one_family_takes_only_its_icmp() {
        let filter = tcp_client(Some(OURS), None, PORTS);
        assert!(filter.spec.icmp && !filter.spec.icmp6);
        assert!(!filter.expr.contains("icmp6"));
        let ours = IpAddr::V4(OURS);
        assert!(taken(&filter.expr, &icmp_error(ours, 3, 1, ours, 61234)));
        let filter = tcp_client(None, Some(OURS6), PORTS);
        assert!(!filter.spec.icmp && filter.spec.icmp6);
        let ours6 = IpAddr::V6(OURS6);
        assert!(taken(&filter.expr, &icmp_error(ours6, 2, 0, ours6, 61234)));
        assert!(!taken(&filter.expr, &icmp_error(ours, 3, 1, ours, 61234)));
    }
}
