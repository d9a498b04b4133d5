//! User-space cost of building one frame from the template and posting it: the frame is written
//! into a ring-sized slab of 2 KiB slots (as into UMEM frames), and its descriptor (offset, length)
//! is pushed onto a ring of descriptors, as an AF_XDP TX ring is filled. No system call is
//! involved: this is the per-frame work sonde adds on top of what the kernel does.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sonde_craft::{ProbeKind, Targets, Template, TemplateSpec};

const SLOTS: usize = 4096;
const SLOT: usize = 2048;

fn template(kind: ProbeKind) -> Template {
    Template::new(&TemplateSpec {
        src_mac: "02:00:00:00:00:01".parse().unwrap(),
        dst_mac: "02:00:00:00:00:02".parse().unwrap(),
        src_ip: Ipv4Addr::new(198, 19, 255, 1),
        src_port: 40000,
        kind,
        frame_size: 60,
    })
    .unwrap()
}

fn build_and_post(c: &mut Criterion) {
    let mut group = c.benchmark_group("build_post");
    group.throughput(Throughput::Elements(1));
    for kind in [ProbeKind::TcpSyn, ProbeKind::Udp] {
        let t = template(kind);
        let mut targets = Targets::new(Ipv4Addr::new(198, 18, 0, 0), 16, &[80, 443]).unwrap();
        let mut slab = vec![0u8; SLOTS * SLOT];
        let mut ring = vec![(0u64, 0u32); SLOTS];
        let mut head = 0usize;
        group.bench_function(format!("{kind}_60B"), |b| {
            b.iter(|| {
                let slot = head & (SLOTS - 1);
                let (addr, port) = targets.next_target();
                let len = t.write(&mut slab[slot * SLOT..(slot + 1) * SLOT], addr, port);
                ring[slot] = ((slot * SLOT) as u64, len as u32);
                head = head.wrapping_add(1);
                black_box(&ring[slot]);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, build_and_post);
criterion_main!(benches);
