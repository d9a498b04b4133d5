//! `--dryrun`: the frames the scan would send, decoded one per line on stdout; nothing is sent.
//! It walks the same permutation and shard as the real scan, so it also shows the order.

use std::io::Write;

use sonde_engine::feed::Feed;
use sonde_engine::scan::ScanPlan;
use sonde_wire::{ethernet, icmpv4, ipv4, ipv6, tcp, udp, EtherType, IpProtocol};

pub fn run(plan: &ScanPlan) -> anyhow::Result<()> {
    let run = &plan.run;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut buf = vec![0u8; sonde_io::MAX_FRAME];
    let mut shown = 0u64;
    for t in 0..run.threads {
        let mut feed = Feed::open(&run.feed_spec(), t, run.resumed_thread(t))?;
        while let Some(index) = feed.next_target() {
            let (addr, port) = run.space.target_at(index);
            let len = plan.probe.write(&mut buf, addr, port, 0);
            if writeln!(out, "{}", describe(&buf[..len])).is_err() {
                return Ok(()); // stdout closed (| head): done
            }
            shown += 1;
        }
    }
    let _ = out.flush();
    if !run.quiet {
        eprintln!(
            "dry run: {shown} frames of up to {} bytes shown, none sent; peak RSS {} MiB",
            plan.probe.frame_len(),
            sonde_meter::peak_rss_bytes() >> 20
        );
    }
    Ok(())
}

/// One line per frame: addresses, ports, protocol details, length.
fn describe(frame: &[u8]) -> String {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return "truncated frame".into();
    };
    if eth.ethertype() == EtherType::Ipv6 {
        return describe6(&eth, frame.len());
    }
    let Ok(ip) = ipv4::Packet::new_checked(eth.payload()) else {
        return "not IPv4".into();
    };
    let head = format!(
        "{} > {} ttl {} id {} len {}",
        eth.src_addr(),
        eth.dst_addr(),
        ip.ttl(),
        ip.ident(),
        frame.len()
    );
    let body = match ip.protocol() {
        IpProtocol::TCP => tcp::Packet::new_checked(ip.payload()).map(|t| {
            format!(
                "{}:{} > {}:{} tcp {:?} seq {} win {}",
                ip.src_addr(),
                t.src_port(),
                ip.dst_addr(),
                t.dst_port(),
                t.flags(),
                t.seq_number(),
                t.window_len()
            )
        }),
        IpProtocol::UDP => udp::Packet::new_checked(ip.payload()).map(|u| {
            format!(
                "{}:{} > {}:{} udp payload {}",
                ip.src_addr(),
                u.src_port(),
                ip.dst_addr(),
                u.dst_port(),
                u.payload().len()
            )
        }),
        IpProtocol::ICMP => icmpv4::Packet::new_checked(ip.payload()).map(|i| {
            format!(
                "{} > {} icmp type {} id {} seq {}",
                ip.src_addr(),
                ip.dst_addr(),
                i.msg_type().0,
                i.echo_ident(),
                i.echo_seq_no()
            )
        }),
        other => Ok(format!(
            "{} > {} protocol {}",
            ip.src_addr(),
            ip.dst_addr(),
            other.0
        )),
    };
    match body {
        Ok(b) => format!("{b}  [{head}]"),
        Err(e) => format!("{e}  [{head}]"),
    }
}

/// One line for an IPv6 probe frame.
fn describe6(eth: &ethernet::Frame<&[u8]>, len: usize) -> String {
    let Ok(ip) = ipv6::Packet::new_checked(eth.payload()) else {
        return "truncated IPv6".into();
    };
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let body = match ip.next_header() {
        IpProtocol::TCP => tcp::Packet::new_checked(ip.payload())
            .map(|t| {
                format!(
                    "[{src}]:{} > [{dst}]:{} tcp {:?} seq {}",
                    t.src_port(),
                    t.dst_port(),
                    t.flags(),
                    t.seq_number()
                )
            })
            .unwrap_or_else(|e| e.to_string()),
        IpProtocol::UDP => udp::Packet::new_checked(ip.payload())
            .map(|u| {
                format!(
                    "[{src}]:{} > [{dst}]:{} udp payload {}",
                    u.src_port(),
                    u.dst_port(),
                    u.payload().len()
                )
            })
            .unwrap_or_else(|e| e.to_string()),
        other => format!("{src} > {dst} next header {}", other.0),
    };
    format!(
        "{body}  [{} > {} hop limit {} len {len}]",
        eth.src_addr(),
        eth.dst_addr(),
        ip.hop_limit()
    )
}
