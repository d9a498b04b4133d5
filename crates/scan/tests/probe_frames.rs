//! Probe frames byte for byte: the generic probe modules write exactly the frames the former
//! per-family modules wrote (recorded in `data/probe_frames.txt`), for every module, both
//! families, and the RST.

mod probe_frames {
    use std::net::IpAddr;

    use sonde_scan::probe::{ModuleKind, ModuleOptions, Probe, ProbeSetup, RstTemplate};
    use sonde_scan::validate::{PortRange, Validator};

    const RECORDED: &str = include_str!("data/probe_frames.txt");

    fn setup() -> ProbeSetup {
        ProbeSetup {
            src_mac: "02:00:00:00:00:01".parse().unwrap(),
            dst_mac: "02:00:00:00:00:02".parse().unwrap(),
            src_ip: Some("198.19.255.1".parse().unwrap()),
            src_ip6: Some("2001:2::ffff:1".parse().unwrap()),
            validator: Validator::from_seed(42),
            ports: PortRange::DEFAULT,
            ttl: 64,
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn frames_match_the_recorded_ones() {
        let options = ModuleOptions {
            payload: b"hello world".to_vec(),
            dns_name: "example.com".into(),
            dns_type: 16,
        };
        let rst = RstTemplate::new(&setup());
        let mut buf = vec![0u8; sonde_craft::MAX_FRAME];
        let mut checked = [0usize; 5];
        for line in RECORDED.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split(' ').collect();
            let target: IpAddr = f[2].parse().unwrap();
            let number = |i: usize| f[i].parse::<u32>().unwrap();
            let (len, slot) = if f[0] == "rst" {
                let i = number(3);
                let n = rst.write(
                    &mut buf,
                    target,
                    (i * 7) as u16,
                    61000 + i as u16,
                    i.wrapping_mul(0x123_4567),
                );
                (n, 4)
            } else {
                let kind: ModuleKind = f[0].parse().unwrap();
                let probe = Probe::build(kind, &setup(), &options).unwrap();
                let n = probe.write(&mut buf, target, number(3) as u16, number(4));
                (n, kind as usize)
            };
            let recorded = if f[0] == "rst" { f[4] } else { f[5] };
            assert_eq!(
                hex(&buf[..len]),
                recorded,
                "{}",
                &line[..line.len().min(60)]
            );
            checked[slot] += 1;
        }
        assert_eq!(
            checked,
            [6, 6, 6, 6, 4],
            "frames checked per module and RST"
        );
    }
}
