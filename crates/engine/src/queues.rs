//! Opening a run's I/O: one transmit queue per sender thread, and the receivers that get only
//! what can be a reply, filtered in the kernel.
//!
//! With `--rx-backend xdp` each queue gets an AF_XDP receiver behind sonde's reply filter (an
//! AF_XDP socket sees only its own queue), sharing the socket with that queue's sender when it
//! transmits over AF_XDP too (the kernel allows one AF_XDP socket per queue). Any other
//! receiver is one packet socket with a classic BPF filter, which sees every queue.

use anyhow::{bail, Context};
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
        };
        ReplyFilter {
            spec,
            expr: probe.bpf_filter(),
        }
    }

    /// A TCP client's segments (grab): every TCP segment to our addresses and ports, except
    /// those of the host's own sockets there (an application's listener, say).
    pub fn for_tcp_client(run: &RunPlan, v4: bool, v6: bool) -> ReplyFilter {
        let (ipv4, ipv6) = (run.src_ip.filter(|_| v4), run.src_ip6.filter(|_| v6));
        let hosts: Vec<String> = [ipv4.map(|ip| ip.to_string()), ipv6.map(|ip| ip.to_string())]
            .into_iter()
            .flatten()
            .map(|ip| format!("dst host {ip}"))
            .collect();
        ReplyFilter {
            spec: FilterSpec {
                ipv4,
                ipv6,
                tcp: TcpTake::All,
                udp: false,
                icmp: false,
                icmp6: false,
                ports: (run.ports.first, run.ports.last),
                echo_id: None,
                spare_host_sockets: true,
            },
            expr: format!(
                "({}) and tcp and dst portrange {}",
                hosts.join(" or "),
                run.ports
            ),
        }
    }
}

pub struct Queues {
    pub senders: Vec<AnyTx>,
    pub receivers: Vec<AnyRx>,
}

/// Opens the run's queues; refuses at once more sender threads than the interface has queues.
pub fn open_queues(run: &RunPlan, filter: &ReplyFilter) -> anyhow::Result<Queues> {
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
            let io = run.io_config(q);
            if run.backend == BackendKind::Xdp && q < run.threads {
                let (tx, rx) = sonde_io::open_xdp_pair(&io, spec)?;
                shared[q as usize] = Some(tx);
                receivers.push(rx);
            } else {
                receivers.push(AnyRx::open_filtered(BackendKind::Xdp, &io, spec, expr)?);
            }
        }
    } else {
        let rx = AnyRx::open_filtered(run.rx_backend, &run.io_config(0), spec, expr)
            .with_context(|| format!("opening the {} receiver on {}", run.rx_backend, run.iface))?;
        receivers.push(rx);
    }
    let senders = (0..run.threads)
        .map(|t| {
            let q = t % queues;
            match shared[q as usize].take() {
                Some(tx) => Ok(tx),
                None => AnyTx::open(run.backend, &run.io_config(q))
                    .with_context(|| format!("opening {} on {} queue {q}", run.backend, run.iface)),
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Queues { senders, receivers })
}
