//! NFQUEUE against the kernel, in a private network namespace: an iptables rule queues UDP
//! datagrams to 198.18.0.1:9999 (a lab address on that namespace's `lo`) to queue 7.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use crate::test_support::in_private_netns;

const QUEUE: u16 = 7;
const TARGET: &str = "198.18.0.1:9999";
const DATAGRAM_LEN: usize = 32;

fn run(cmd: &str, args: &[&str]) {
    let status = Command::new(cmd)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(status.success(), "{cmd} {args:?} failed");
}

fn have_iptables() -> bool {
    let found = Command::new("iptables")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: needs iptables (apt-get install iptables)");
    }
    found
}

/// Runs `work` in a private namespace with 198.18.0.1 on `lo` and the queue rule; skips
/// without root or iptables. The namespace (and its rule) goes when the thread ends.
fn with_queue_rule(work: impl FnOnce() + Send + 'static) {
    in_private_netns(move || {
        if !have_iptables() {
            return;
        }
        run("ip", &["addr", "add", "198.18.0.1/32", "dev", "lo"]);
        run(
            "iptables",
            &[
                "-w",
                "-A",
                "OUTPUT",
                "-d",
                "198.18.0.1",
                "-p",
                "udp",
                "--dport",
                "9999",
                "-j",
                "NFQUEUE",
                "--queue-num",
                "7",
            ],
        );
        work();
    });
}

/// A socket with a receive or send buffer large enough for every datagram of a test.
fn socket(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        set_option(s.as_raw_fd(), libc::SOL_SOCKET, opt, &(4i32 << 20)).unwrap();
    }
    s
}

fn datagram(seq: u32) -> [u8; DATAGRAM_LEN] {
    let mut d = [0xab; DATAGRAM_LEN];
    d[..4].copy_from_slice(&seq.to_be_bytes());
    d
}

/// The UDP payload of an IPv4 packet (and the offset of the UDP header).
fn udp_payload(ip: &mut [u8]) -> (usize, &mut [u8]) {
    let udp = usize::from(ip[0] & 0x0f) * 4;
    (udp, &mut ip[udp + 8..])
}

/// Receives every datagram waiting on `rx` (waits briefly for the last).
fn drain(rx: &UdpSocket) -> Vec<Vec<u8>> {
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok(n) = rx.recv(&mut buf) {
        got.push(buf[..n].to_vec());
    }
    got
}

/// Decides until `want` packets were decided (bounded by time); the size of every batch.
fn process(
    q: &mut NfQueue,
    want: usize,
    mut decide: impl FnMut(&mut QueuedPacket) -> NfVerdict,
) -> Vec<usize> {
    let mut batches = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while batches.iter().sum::<usize>() < want && Instant::now() < end {
        let stats = q
            .process_batch(Duration::from_millis(50), &mut decide)
            .unwrap();
        if stats.packets > 0 {
            assert_eq!(
                stats.bytes,
                (28 + DATAGRAM_LEN as u64) * stats.packets as u64
            );
            batches.push(stats.packets);
        }
    }
    batches
}

/// Every 3rd dropped, every 5th (of the rest) rewritten: byte 4 becomes 0xee, checksum zeroed.
fn drop_and_rewrite(p: &mut QueuedPacket) -> NfVerdict {
    assert_eq!(p.hw_protocol, 0x0800);
    assert_eq!(p.hook, 3, "NF_INET_LOCAL_OUT");
    assert_eq!(p.wire_len as usize, p.payload.len());
    let (udp, data) = udp_payload(p.payload);
    let seq = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
    if seq % 3 == 0 {
        return NfVerdict::Drop;
    }
    if seq % 5 == 1 {
        data[4] = 0xee;
        // The kernel takes a rewritten packet's checksums as final; 0 means none (UDP/IPv4).
        p.payload[udp + 6..udp + 8].fill(0);
        return NfVerdict::AcceptRewritten;
    }
    NfVerdict::Accept
}

#[test]
fn batches_drop_rewrite_and_keep_order() {
    with_queue_rule(|| {
        let rx = socket(TARGET);
        let tx = socket("198.18.0.1:0");
        let mut cfg = NfqConfig::new(QUEUE);
        cfg.batch = 64;
        let mut q = NfQueue::open(&cfg).unwrap();
        for seq in 0..200 {
            tx.send_to(&datagram(seq), TARGET).unwrap();
        }
        let batches = process(&mut q, 200, drop_and_rewrite);
        assert_eq!(batches.iter().sum::<usize>(), 200, "batches {batches:?}");
        assert!(batches.iter().all(|&n| n <= 64), "batches {batches:?}");
        assert!(
            batches.iter().any(|&n| n > 1),
            "no batch held more than one packet: {batches:?}"
        );

        let want: Vec<Vec<u8>> = (0..200u32)
            .filter(|seq| seq % 3 != 0)
            .map(|seq| {
                let mut d = datagram(seq);
                if seq % 5 == 1 {
                    d[4] = 0xee;
                }
                d.to_vec()
            })
            .collect();
        let got = drain(&rx);
        assert_eq!(got.len(), want.len(), "datagrams received");
        assert!(got == want, "received datagrams differ (order or bytes)");
        assert_eq!(q.skipped(), SkipCounts::default());
    });
}

#[test]
fn batch_of_one_decides_one_packet_per_call() {
    with_queue_rule(|| {
        let rx = socket(TARGET);
        let tx = socket("198.18.0.1:0");
        let mut cfg = NfqConfig::new(QUEUE);
        cfg.batch = 1;
        let mut q = NfQueue::open(&cfg).unwrap();
        for seq in 0..20 {
            tx.send_to(&datagram(seq), TARGET).unwrap();
        }
        let batches = process(&mut q, 20, drop_and_rewrite);
        assert_eq!(batches, vec![1; 20]);
        eprintln!(
            "a packet message from the kernel: {}",
            hex(q.last_datagram(0))
        );
        let got = drain(&rx);
        let seqs: Vec<u32> = got
            .iter()
            .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        let want: Vec<u32> = (0..20).filter(|s| s % 3 != 0).collect();
        assert_eq!(seqs, want);
        assert!(got.iter().all(|d| (d[4] == 0xee) == (d[3] % 5 == 1)));
    });
}

#[test]
fn a_batch_with_more_rewrites_than_one_send_carries_stays_in_order() {
    // 700 rewritten packets need 1 + 2 * 700 iovecs, beyond the 1024 one sendmsg takes: the
    // verdicts go out in more than one send, still in arrival order.
    const COUNT: u32 = 700;
    with_queue_rule(|| {
        let rx = socket(TARGET);
        let tx = socket("198.18.0.1:0");
        let mut cfg = NfqConfig::new(QUEUE);
        cfg.batch = MAX_BATCH;
        let mut q = NfQueue::open(&cfg).unwrap();
        for seq in 0..COUNT {
            tx.send_to(&datagram(seq), TARGET).unwrap();
        }
        let batches = process(&mut q, COUNT as usize, |p| {
            let (udp, data) = udp_payload(p.payload);
            data[5] = data[0] ^ data[1] ^ data[2] ^ data[3];
            p.payload[udp + 6..udp + 8].fill(0);
            NfVerdict::AcceptRewritten
        });
        assert!(batches.iter().any(|&n| n > 511), "batches {batches:?}");
        let got = drain(&rx);
        assert_eq!(got.len(), COUNT as usize);
        for (seq, d) in (0..COUNT).zip(&got) {
            let mut want = datagram(seq);
            want[5] = want[0] ^ want[1] ^ want[2] ^ want[3];
            assert_eq!(d[..], want[..], "datagram {seq}");
        }
    });
}

#[test]
fn gso_packets_come_whole_and_a_tcp_stream_goes_through() {
    // 4 MiB over TCP on lo: with GSO on, the kernel queues unsegmented packets of up to 64 KiB.
    const BYTES: usize = 4 << 20;
    with_queue_rule(|| {
        run(
            "iptables",
            &[
                "-w",
                "-A",
                "OUTPUT",
                "-d",
                "198.18.0.1",
                "-p",
                "tcp",
                "--dport",
                "9998",
                "-j",
                "NFQUEUE",
                "--queue-num",
                "7",
            ],
        );
        let mut q = NfQueue::open(&NfqConfig::new(QUEUE)).unwrap();
        let listener = std::net::TcpListener::bind("198.18.0.1:9998").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let decider = std::thread::spawn(move || {
            let (mut largest, mut gso, mut cut, mut wire) = (0, 0, 0, 0);
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                q.process_batch(Duration::from_millis(20), |p| {
                    largest = largest.max(p.payload.len());
                    gso += usize::from(p.gso);
                    cut += usize::from(p.is_truncated());
                    wire = wire.max(p.wire_len);
                    NfVerdict::Accept
                })
                .unwrap();
            }
            (largest, gso, cut, wire)
        });
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut sink = Vec::new();
            std::io::Read::read_to_end(&mut conn, &mut sink).unwrap();
            sink.len()
        });
        let mut client = std::net::TcpStream::connect("198.18.0.1:9998").unwrap();
        std::io::Write::write_all(&mut client, &vec![0x5a; BYTES]).unwrap();
        drop(client);
        let received = server.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (largest, gso, cut, wire) = decider.join().unwrap();
        eprintln!(
            "largest copy {largest} bytes, largest packet {wire}, {gso} GSO packets, {cut} cut short"
        );
        assert_eq!(received, BYTES);
        assert!(gso > 0 && largest > 1500, "largest {largest}, gso {gso}");
    });
}

#[test]
fn a_second_open_of_the_queue_says_it_is_bound() {
    with_queue_rule(|| {
        let first = NfQueue::open(&NfqConfig::new(QUEUE)).unwrap();
        let err = NfQueue::open(&NfqConfig::new(QUEUE))
            .err()
            .expect("a second bind of one queue must fail");
        assert_eq!(
            format!("{err:#}"),
            "NFQUEUE 7 is already bound by another program: stop it or pick another --queue"
        );
        drop(first);
        // Unbound on drop: it can be opened again.
        NfQueue::open(&NfqConfig::new(QUEUE)).unwrap();
    });
}

#[test]
fn counters_show_waiting_packets() {
    with_queue_rule(|| {
        assert_eq!(
            queue_counters(QUEUE),
            None,
            "no program has bound queue 7 yet"
        );
        let _rx = socket(TARGET);
        let tx = socket("198.18.0.1:0");
        let mut q = NfQueue::open(&NfqConfig::new(QUEUE)).unwrap();
        for seq in 0..5 {
            tx.send_to(&datagram(seq), TARGET).unwrap();
        }
        let waiting = queue_counters(QUEUE).expect("queue 7 is bound");
        assert_eq!(
            waiting,
            QueueCounters {
                queue_total: 5,
                queue_dropped: 0,
                user_dropped: 0
            }
        );
        assert_eq!(process(&mut q, 5, |_| NfVerdict::Accept), vec![5]);
        assert_eq!(queue_counters(QUEUE).unwrap().queue_total, 0);
    });
}

#[test]
fn a_rejected_verdict_is_reported_once_and_not_taken_for_a_packet() {
    with_queue_rule(|| {
        let rx = socket(TARGET);
        let tx = socket("198.18.0.1:0");
        let mut q = NfQueue::open(&NfqConfig::new(QUEUE)).unwrap();
        // A verdict for a packet that was never queued: the kernel answers ENOENT.
        let (bogus, n) = msg::verdict(QUEUE, 0xdead_beef, msg::NF_ACCEPT, None).unwrap();
        q.send_raw(&bogus[..n]).unwrap();
        for seq in 1..=3 {
            tx.send_to(&datagram(seq), TARGET).unwrap();
        }
        let mut decided = 0;
        let err = q
            .process_batch(Duration::from_secs(1), |_| {
                decided += 1;
                NfVerdict::Accept
            })
            .expect_err("the kernel's error must be reported");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("NFQUEUE 7"), "{err}");
        assert_eq!(decided, 3, "the packets of the batch were still decided");
        assert_eq!(drain(&rx).len(), 3, "and given their verdicts");

        // Reported once: a second rejection is only counted.
        q.send_raw(&bogus[..n]).unwrap();
        tx.send_to(&datagram(4), TARGET).unwrap();
        let stats = q
            .process_batch(Duration::from_secs(1), |_| NfVerdict::Accept)
            .unwrap();
        assert_eq!(stats.packets, 1);
        assert_eq!(q.skipped().netlink_errors, 2);
        assert_eq!(drain(&rx).len(), 1);
    });
}

#[test]
fn config_out_of_range_is_refused_before_any_socket() {
    let mut cfg = NfqConfig::new(QUEUE);
    cfg.batch = 0;
    let err = NfQueue::open(&cfg).err().unwrap();
    assert!(err.to_string().contains("1 to 1024"), "{err}");
    cfg.batch = MAX_BATCH + 1;
    assert!(NfQueue::open(&cfg).is_err());
}

#[test]
fn queue_table_lines() {
    let table = "    3  12345     0 2 65531     0     0        0  1\n    \
                     7  4021     5 2 65531     9    11      205  1\n";
    assert_eq!(
        parse_queue_table(table, 7),
        Some(QueueCounters {
            queue_total: 5,
            queue_dropped: 9,
            user_dropped: 11
        })
    );
    assert_eq!(parse_queue_table(table, 4), None);
    assert_eq!(parse_queue_table("7 garbage", 7), None);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
