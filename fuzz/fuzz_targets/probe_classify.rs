#![no_main]
//! `Probe::classify` on hostile frames: the first byte picks the module, the rest is a whole
//! Ethernet frame (IPv4 or IPv6, fragments and extension headers included). Classification must
//! never panic, and a reply it accepts must be of the frame's family and come from the probe's
//! source ports.

use std::net::IpAddr;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde_scan::probe::{tcp_ack_number, ModuleKind, ModuleOptions, Probe, ProbeSetup, Verdict};
use sonde_scan::validate::{PortRange, Validator};

fn probes() -> &'static [Probe] {
    static PROBES: OnceLock<Vec<Probe>> = OnceLock::new();
    PROBES.get_or_init(|| {
        let setup = ProbeSetup {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip: Some("198.19.255.1".parse().unwrap()),
            src_ip6: Some("2001:2::ffff:1".parse().unwrap()),
            validator: Validator::from_seed(1),
            ports: PortRange::DEFAULT,
            ttl: 64,
        };
        let options = ModuleOptions {
            payload: b"fuzz".to_vec(),
            dns_name: "example.com".into(),
            dns_type: 1,
        };
        ModuleKind::ALL
            .iter()
            .map(|&kind| Probe::build(kind, &setup, &options).unwrap())
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, frame)) = data.split_first() else {
        return;
    };
    let probe = &probes()[usize::from(selector) % ModuleKind::ALL.len()];
    let _ = tcp_ack_number(frame);
    if let Verdict::Valid(reply) = probe.classify(frame, 12345) {
        let ipv6 = frame.get(12..14) == Some(&[0x86, 0xdd][..]);
        assert_eq!(reply.daddr.is_ipv6(), ipv6, "a reply of another family");
        if reply.icmp_type.is_none() && probe.kind() != ModuleKind::IcmpEcho {
            assert!(PortRange::DEFAULT.contains(reply.dport), "{reply:?}");
        }
        assert!(matches!(reply.saddr, IpAddr::V4(_)) != ipv6);
    }
});
