//! `sonde intercept` in a bridge lab (A — mid — B): bridge mode in mid, stack mode on A's own
//! traffic. Transfers pass intact, a drop rule drops exactly its packets (counted at B), two
//! threads reorder nothing, a killed sonde fails open or closed as asked, Ctrl-C, SIGHUP and
//! SIGQUIT remove every rule and table, cleanup removes what a kill -9 left (any table, both
//! families, libxdp's program), the AF_XDP bridge serves every queue, status lines reach a
//! file, and bad input gets one clear line. Every packet stays in the lab's namespaces,
//! between 198.19.254.1 and 198.19.254.2 (2001:2:0:fe::1 and ::2).

mod common;

use std::net::{SocketAddrV4, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{can_run_labs, sonde, stderr, Lab, SONDE};
use nix::sys::signal::Signal;
use serde_json::Value;
use sonde_lab::bridge::{A_V4, B_V4, B_V6};

fn ns(lab: &Lab, which: &str) -> String {
    format!("sonde-{}-{which}", lab.name)
}

fn in_ns(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec")
}

/// sonde intercept running in a namespace; stopped with SIGINT (or killed) and awaited on drop.
struct Intercept {
    child: Child,
    summary: String,
}

impl Intercept {
    /// Starts `sonde intercept ARGS --quiet` in `ns` and waits until `ready` says its rules
    /// are in.
    fn start(lab: &Lab, ns: &str, args: &[&str], ready: impl Fn() -> bool) -> Intercept {
        let mut quiet = args.to_vec();
        quiet.push("--quiet");
        Intercept::start_loud(lab, ns, &quiet, ready)
    }

    /// As [`Intercept::start`], with the status going to stderr (a pipe).
    fn start_loud(lab: &Lab, ns: &str, args: &[&str], ready: impl Fn() -> bool) -> Intercept {
        let summary = lab.file(&format!("summary-{}.json", args.join("_").len()));
        // SIGHUP back to its default first: under `nohup` the test would hand sonde an ignored
        // SIGHUP, which sonde then honours (as nohup asks), and the hang-up test could not
        // hang it up. `env` and `ip` exec, so the pid is sonde's.
        let mut all = vec![
            "--default-signal=HUP",
            "ip",
            "netns",
            "exec",
            ns,
            SONDE,
            "intercept",
        ];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--summary-json", &summary]);
        let child = Command::new("env")
            .args(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting sonde intercept");
        let mut run = Intercept { child, summary };
        let end = Instant::now() + Duration::from_secs(10);
        while !ready() {
            if let Ok(Some(_)) = run.child.try_wait() {
                let out = run.wait();
                panic!("sonde intercept {args:?} exited early: {}", stderr(&out));
            }
            assert!(
                Instant::now() < end,
                "sonde intercept {args:?} not ready in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        run
    }

    fn signal(&self, signal: Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signalling sonde");
    }

    /// Sends `signal` and waits for the end: the output.
    fn end_with(mut self, signal: Signal) -> Output {
        self.signal(signal);
        self.wait()
    }

    /// Ctrl-C, then its output and summary.
    fn stop(mut self) -> (Output, Value) {
        self.signal(Signal::SIGINT);
        let out = self.wait();
        assert!(out.status.success(), "sonde intercept: {}", stderr(&out));
        let text = std::fs::read_to_string(&self.summary).expect("the summary JSON");
        (out, serde_json::from_str(&text).expect("summary JSON"))
    }

    fn wait(&mut self) -> Output {
        let end = Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().expect("waiting").is_none() {
            if Instant::now() > end {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = Output {
            status: self.child.wait().unwrap(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        use std::io::Read;
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_end(&mut out.stderr);
        }
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_end(&mut out.stdout);
        }
        out
    }
}

impl Drop for Intercept {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// sonde's netdev tables in `ns`.
fn sonde_tables(ns: &str) -> String {
    let out = in_ns(ns, &["nft", "list", "tables", "netdev"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("sonde_intercept_"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// sonde's NFQUEUE rules in `ns`, in every table of iptables and ip6tables (each line
/// prefixed with its program and table).
fn sonde_rules(ns: &str) -> String {
    let mut found = Vec::new();
    for program in ["iptables", "ip6tables"] {
        for table in ["filter", "mangle", "raw", "security"] {
            let out = in_ns(ns, &[program, "-w", "-t", table, "-S"]);
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if is_sonde_rule(line) {
                    found.push(format!("{program} {table}: {line}"));
                }
            }
        }
    }
    found.join("\n")
}

/// Whether a line of `iptables -S` is a rule sonde added: its comment is `sonde-intercept`
/// (older sondes) or `sonde-intercept-PID-START` (the process that added it).
fn is_sonde_rule(line: &str) -> bool {
    line.split(" --comment ").skip(1).any(|rest| {
        let comment = rest.split(' ').next().unwrap_or("");
        match comment.strip_prefix("sonde-intercept") {
            Some("") => true,
            Some(owner) => {
                let parts: Vec<&str> = owner.split('-').collect();
                parts.len() == 3
                    && parts[0].is_empty()
                    && parts[1..]
                        .iter()
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            }
            None => false,
        }
    })
}

/// Whether an XDP program is attached to `dev` in `ns`.
fn xdp_attached(ns: &str, dev: &str) -> bool {
    let out = in_ns(ns, &["ip", "-d", "link", "show", dev]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(dev), "{text}");
    text.contains("prog/xdp")
}

/// Whether A can ping B over IPv6 (three echoes, any answered).
fn ping6_ok(lab: &Lab) -> bool {
    let b6 = B_V6.to_string();
    let args = ["ping", "-6", "-c", "3", "-i", "0.2", "-W", "1", &b6];
    in_ns(&ns(lab, "a"), &args).status.success()
}

/// `sonde intercept cleanup` in `ns`: it succeeds, and its line says how much it removed.
fn cleanup_in(ns: &str) -> String {
    let out = in_ns(ns, &[SONDE, "intercept", "cleanup"]);
    assert!(out.status.success(), "cleanup: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `sonde intercept bridge -i ma -j mb EXTRA…` in mid, to its end.
fn bridge_in(mid: &str, extra: &[&str]) -> Output {
    let mut args = vec![SONDE, "intercept", "bridge", "-i", "ma", "-j", "mb"];
    args.extend_from_slice(extra);
    in_ns(mid, &args)
}

/// The NFQUEUE queues bound in `ns` (one line each in the kernel's table).
fn bound_queues(ns: &str) -> String {
    let out = in_ns(ns, &["cat", "/proc/net/netfilter/nfnetlink_queue"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A short stream of datagrams from A to B:`port` arrives whole (`why` says what it shows).
fn assert_all_arrive(lab: &Lab, port: u16, why: &str) {
    let (sent, got) = udp_stream(
        lab,
        port,
        Duration::from_millis(2),
        Duration::from_millis(300),
    );
    assert_eq!(got.len() as u32, sent, "{why}");
}

/// A bridge lab for one test, or `None` (the test passes vacuously) where labs cannot run.
fn bridge_lab() -> Option<Lab> {
    can_run_labs().then(|| Lab::up(&["--bridge"]))
}

/// iperf3 from A to B (bounded), its JSON.
fn iperf(lab: &Lab, args: &[&str]) -> Value {
    let b = B_V4.to_string();
    let mut all = vec!["timeout", "30", "iperf3", "-c", &b, "-J"];
    all.extend_from_slice(args);
    let out = in_ns(&ns(lab, "a"), &all);
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("iperf3 {args:?}: {}", stderr(&out)));
    assert!(
        json.get("error").is_none(),
        "iperf3 {args:?}: {}",
        json["error"]
    );
    json
}

/// An iperf3 transfer ran without error and B received nearly all the client wrote (what was
/// still in flight when iperf3's clock stopped is not counted at B).
fn assert_tcp_intact(json: &Value) {
    let sent = json["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    let received = json["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(sent > 1_000_000, "only {sent} bytes sent");
    assert!(
        received * 100 >= sent * 95,
        "B received {received} of {sent} bytes"
    );
}

/// A TCP connection from A to B:`port` carries `len` bytes of a known pattern; B checks every
/// byte and the count. Returns what B got right.
fn tcp_transfer_intact(lab: &Lab, port: u16, len: usize) {
    use std::io::{Read, Write};
    let (a, b) = (ns(lab, "a"), ns(lab, "b"));
    let pattern = |i: usize| (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        sonde_lab::enter_ns(&b).expect("entering B");
        let listener =
            std::net::TcpListener::bind(SocketAddrV4::new(B_V4, port)).expect("listen on B");
        ready_tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().expect("accept");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (mut got, mut bad, mut buf) = (0usize, 0usize, vec![0u8; 65536]);
        loop {
            let n = conn.read(&mut buf).expect("read on B");
            if n == 0 {
                break;
            }
            bad += buf[..n]
                .iter()
                .enumerate()
                .filter(|(i, &v)| v != pattern(got + i))
                .count();
            got += n;
        }
        (got, bad)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("B listening");
    let sender = std::thread::spawn(move || {
        sonde_lab::enter_ns(&a).expect("entering A");
        let mut conn = std::net::TcpStream::connect_timeout(
            &SocketAddrV4::new(B_V4, port).into(),
            Duration::from_secs(5),
        )
        .expect("connect to B");
        conn.set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let data: Vec<u8> = (0..len).map(pattern).collect();
        conn.write_all(&data).expect("write to B");
    });
    sender.join().expect("sender");
    let (got, bad) = receiver.join().expect("receiver");
    assert_eq!(
        (got, bad),
        (len, 0),
        "B got {got} of {len} bytes, {bad} wrong"
    );
}

/// Datagrams numbered 0.. sent from A to B:`port` every `gap` for `duration`, each received
/// one stamped with its arrival time (since the start). Both ends run in threads that enter
/// A's and B's network namespaces.
fn udp_stream(
    lab: &Lab,
    port: u16,
    gap: Duration,
    duration: Duration,
) -> (u32, Vec<(u32, Duration)>) {
    let (a, b) = (ns(lab, "a"), ns(lab, "b"));
    let start = Instant::now();
    let receiver = std::thread::spawn(move || {
        sonde_lab::enter_ns(&b).expect("entering B");
        let sock = UdpSocket::bind(SocketAddrV4::new(B_V4, port)).expect("binding on B");
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while start.elapsed() < duration + Duration::from_secs(1) {
            if let Ok(n) = sock.recv(&mut buf) {
                if n >= 4 {
                    got.push((
                        u32::from_be_bytes(buf[..4].try_into().unwrap()),
                        start.elapsed(),
                    ));
                }
            }
        }
        got
    });
    std::thread::sleep(Duration::from_millis(100)); // the receiver binds first
    let sender = std::thread::spawn(move || {
        sonde_lab::enter_ns(&a).expect("entering A");
        let sock = UdpSocket::bind(SocketAddrV4::new(A_V4, 0)).unwrap();
        let mut n = 0u32;
        while start.elapsed() < duration {
            let _ = sock.send_to(&n.to_be_bytes(), SocketAddrV4::new(B_V4, port));
            n += 1;
            std::thread::sleep(gap);
        }
        n
    });
    let sent = sender.join().expect("sender");
    (sent, receiver.join().expect("receiver"))
}

#[test]
fn bridge_mode_passes_transfers_whole_and_drops_exactly_its_packets() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    bridge_passes_whole_and_drops_exactly(&lab, "ring");
}

#[test]
fn xdp_bridge_passes_transfers_whole_and_drops_exactly_its_packets() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    bridge_passes_whole_and_drops_exactly(&lab, "xdp");
    let mid = ns(&lab, "mid");
    for dev in ["ma", "mb"] {
        assert!(!xdp_attached(&mid, dev), "an XDP program stayed on {dev}");
    }
}

/// The kernel bridge forwards before; with sonde's bridge on `backend` in between an iperf3
/// run and a 32 MiB transfer pass whole, a drop rule drops exactly its datagrams (counted at
/// B), a count rule counts exactly its own, nothing is reordered; after Ctrl-C sonde's table
/// is gone and the kernel forwards again.
fn bridge_passes_whole_and_drops_exactly(lab: &Lab, backend: &str) {
    let mid = ns(lab, "mid");
    // Before sonde: the kernel's bridge forwards port 9 too (so a drop later is sonde's).
    assert_all_arrive(lab, 9, "the kernel bridge lost datagrams");

    let run = Intercept::start(
        lab,
        &mid,
        &[
            "bridge",
            "-i",
            "ma",
            "-j",
            "mb",
            "--backend",
            backend,
            "drop udp dst port 9",
            "count udp dst port 10",
        ],
        || !sonde_tables(&mid).is_empty(),
    );
    assert_tcp_intact(&iperf(lab, &["-p", "5201", "-t", "2"]));
    tcp_transfer_intact(lab, 7100, 32 << 20);
    let (to9, got9) = udp_stream(lab, 9, Duration::from_millis(2), Duration::from_millis(400));
    let (to10, got10) = udp_stream(
        lab,
        10,
        Duration::from_millis(2),
        Duration::from_millis(400),
    );
    let (_, summary) = run.stop();
    eprintln!("{summary:#}");
    assert_eq!(
        got9.len(),
        0,
        "datagrams to port 9 reached B through the drop rule"
    );
    assert_eq!(got10.len() as u32, to10, "datagrams to port 10 were lost");
    let rules = summary["rules"].as_array().unwrap();
    assert_eq!(
        rules[0]["dropped"].as_u64(),
        Some(u64::from(to9)),
        "{summary}"
    );
    assert_eq!(
        rules[1]["packets"].as_u64(),
        Some(u64::from(to10)),
        "{summary}"
    );
    assert_eq!(summary["dropped"].as_u64(), Some(u64::from(to9)));
    assert_eq!(summary["reordered"].as_u64(), Some(0));
    assert!(summary["packets"].as_u64().unwrap() > 1000, "{summary}");
    // Ctrl-C took sonde's table away, and the kernel forwards again.
    assert_eq!(sonde_tables(&mid), "");
    assert_all_arrive(lab, 9, "the kernel does not forward after sonde left");
}

#[test]
fn two_threads_keep_every_flow_in_order() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let mid = ns(&lab, "mid");
    let run = Intercept::start(
        &lab,
        &mid,
        &["bridge", "-i", "ma", "-j", "mb", "--threads", "2"],
        || !sonde_tables(&mid).is_empty(),
    );
    let udp = iperf(
        &lab,
        &[
            "-p", "5202", "-u", "-b", "20M", "-l", "1200", "-P", "16", "-t", "2",
        ],
    );
    let tcp = iperf(&lab, &["-p", "5203", "-P", "4", "-t", "2"]);
    let (_, summary) = run.stop();
    let out_of_order: u64 = udp["end"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["udp"]["out_of_order"].as_u64().unwrap_or(0))
        .sum();
    eprintln!("UDP out of order at B: {out_of_order}; {summary:#}");
    assert_eq!(out_of_order, 0, "B saw datagrams out of order");
    assert_eq!(summary["reordered"].as_u64(), Some(0), "{summary}");
    assert_tcp_intact(&tcp);
    let per_thread: Vec<u64> = summary["per_thread"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["packets"].as_u64().unwrap())
        .collect();
    assert!(
        per_thread.iter().all(|&p| p > 0),
        "16 flows all on one thread? {per_thread:?}"
    );
}

#[test]
fn stack_mode_batches_verdicts_and_removes_its_rules() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let a = ns(&lab, "a");
    let (to_b, from_b) = (format!("OUTPUT -d {B_V4}"), format!("INPUT -s {B_V4}"));
    let run = Intercept::start(
        &lab,
        &a,
        &[
            "stack",
            "--queue",
            "0",
            "--threads",
            "2",
            "--batch",
            "64",
            "--install-rule",
            &to_b,
            "--install-rule",
            &from_b,
            "drop udp dst port 9",
        ],
        || sonde_rules(&a).lines().count() == 2,
    );
    assert_tcp_intact(&iperf(&lab, &["-p", "5201", "-t", "2"]));
    tcp_transfer_intact(&lab, 7100, 32 << 20);
    let udp = iperf(
        &lab,
        &["-p", "5202", "-u", "-b", "20M", "-P", "8", "-t", "1"],
    );
    let (to9, got9) = udp_stream(
        &lab,
        9,
        Duration::from_millis(2),
        Duration::from_millis(300),
    );
    let (_, summary) = run.stop();
    eprintln!("{summary:#}");
    assert_eq!(got9.len(), 0);
    assert_eq!(
        summary["rules"][0]["dropped"].as_u64(),
        Some(u64::from(to9))
    );
    assert!(
        summary["mean_batch"].as_f64().unwrap() > 1.0,
        "verdicts were not batched: {summary}"
    );
    assert_eq!(summary["reordered"].as_u64(), Some(0));
    let ooo: u64 = udp["end"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["udp"]["out_of_order"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(ooo, 0, "B saw datagrams out of order");
    assert_eq!(sonde_rules(&a), "", "Ctrl-C left rules behind");
    assert_eq!(bound_queues(&a), "", "a queue is still bound");
}

/// Kills sonde (SIGKILL) a second into a stream of datagrams; returns how many arrived at B
/// more than half a second after the kill, and how many were sent in that time.
fn kill_mid_stream(lab: &Lab, fail_open: bool) -> (usize, u32) {
    let a = ns(lab, "a");
    let rule = format!("OUTPUT -d {B_V4}");
    let mut args = vec!["stack", "--queue", "3", "--install-rule", &rule];
    if fail_open {
        args.push("--fail-open");
    }
    let run = Intercept::start(lab, &a, &args, || !sonde_rules(&a).is_empty());
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1000));
        run.signal(Signal::SIGKILL);
        run
    });
    let (sent, got) = udp_stream(
        lab,
        7,
        Duration::from_millis(5),
        Duration::from_millis(2500),
    );
    drop(killer.join().unwrap());
    let after = got
        .iter()
        .filter(|(_, t)| *t > Duration::from_millis(1600))
        .count();
    let sent_after = sent.saturating_sub((sent as f64 * 1600.0 / 2500.0) as u32);
    (after, sent_after)
}

#[test]
fn a_killed_sonde_fails_open_or_closed_as_asked() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let a = ns(&lab, "a");
    let (after, sent_after) = kill_mid_stream(&lab, true);
    eprintln!("--fail-open: {after} of about {sent_after} datagrams arrived after the kill");
    assert!(
        after as u32 >= sent_after * 8 / 10,
        "--fail-open stopped traffic: {after} of {sent_after}"
    );
    // The guard took the rule away.
    let end = Instant::now() + Duration::from_secs(5);
    while !sonde_rules(&a).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sonde_rules(&a), "", "the fail-open guard left the rule");

    let (after, sent_after) = kill_mid_stream(&lab, false);
    eprintln!("fail-closed: {after} of about {sent_after} datagrams arrived after the kill");
    assert_eq!(after, 0, "traffic went on after a fail-closed sonde died");
    assert!(!sonde_rules(&a).is_empty(), "the fail-closed rule is gone");
    assert_eq!(
        bound_queues(&a),
        "",
        "a killed sonde's queue is still bound"
    );
    cleanup_in(&a);
    assert_eq!(sonde_rules(&a), "", "cleanup left the rule");
    assert_all_arrive(&lab, 7, "traffic did not come back after cleanup");
}

#[test]
fn bad_input_gets_one_clear_line_and_leaves_nothing() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let (a, mid) = (ns(&lab, "a"), ns(&lab, "mid"));
    let one_line = |out: &Output, code: i32, needle: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{needle}: {err}"
        );
    };
    let run = Intercept::start(&lab, &a, &["stack", "--queue", "5"], || true);
    std::thread::sleep(Duration::from_millis(300));
    let out = in_ns(
        &a,
        &[
            SONDE,
            "intercept",
            "stack",
            "--queue",
            "5",
            "--duration",
            "1",
        ],
    );
    one_line(&out, 1, "already bound");
    drop(run);
    let out = in_ns(
        &mid,
        &[SONDE, "intercept", "bridge", "-i", "nosuch0", "-j", "mb"],
    );
    one_line(&out, 1, "nosuch0");
    let out = bridge_in(&mid, &["--backend", "xdp", "--threads", "2"]);
    one_line(&out, 1, "which have 1 in common");
    let out = bridge_in(&mid, &["drop tcp prot 9"]);
    one_line(&out, 2, "invalid filter expression");
    let out = bridge_in(&mid, &["reject tcp"]);
    one_line(&out, 2, "unknown action");
    let out = bridge_in(&mid, &["rewrite ttl=300 udp"]);
    one_line(
        &out,
        2,
        "ttl=300: the TTL (hop limit) is a whole number from 0 to 255",
    );
    let quoted = in_ns(
        &mid,
        &[SONDE, "intercept", "bridge", "-i", "ma\";", "-j", "mb"],
    );
    one_line(&quoted, 1, "is not an interface name");
    let nat = format!("OUTPUT -t nat -d {B_V4}");
    let out = in_ns(
        &a,
        &[
            SONDE,
            "intercept",
            "stack",
            "--queue",
            "6",
            "--install-rule",
            &nat,
            "--duration",
            "1",
        ],
    );
    one_line(&out, 1, "table nat");
    let rule = format!("OUTPUT -d {B_V4}");
    let out = in_ns(
        &a,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            SONDE,
            "intercept",
            "stack",
            "--queue",
            "6",
            "--install-rule",
            &rule,
            "--duration",
            "1",
        ],
    );
    one_line(&out, 1, "CAP_NET_ADMIN");
    assert_eq!(sonde_rules(&a), "");
    assert_eq!(sonde_tables(&mid), "");
}

/// A signal to a running intercept, each mode once: SIGHUP (a dropped SSH session) and SIGQUIT
/// end it as Ctrl-C does, every rule and table removed and traffic flowing again. The status
/// reaches stderr as lines although it is a pipe, not a terminal.
#[test]
fn a_hang_up_or_quit_removes_every_rule_and_status_lines_reach_a_pipe() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let (a, mid) = (ns(&lab, "a"), ns(&lab, "mid"));
    let (v4, v6) = (
        format!("OUTPUT -d {B_V4}"),
        format!("OUTPUT -t mangle -d {B_V6}"),
    );
    let run = Intercept::start_loud(
        &lab,
        &a,
        &[
            "stack",
            "--queue",
            "8",
            "--install-rule",
            &v4,
            "--install-rule",
            &v6,
            "count",
        ],
        || sonde_rules(&a).lines().count() == 2,
    );
    assert!(ping6_ok(&lab), "IPv6 did not pass through sonde");
    std::thread::sleep(Duration::from_millis(2500)); // two status lines at least
    let out = run.end_with(Signal::SIGHUP);
    let err = stderr(&out);
    assert!(out.status.success(), "after SIGHUP: {err}");
    assert_eq!(sonde_rules(&a), "", "SIGHUP left rules behind");
    let status_lines = err.lines().filter(|l| l.contains(" packets  ")).count();
    assert!(status_lines >= 2, "no status lines on a pipe: {err:?}");
    assert_all_arrive(&lab, 7, "traffic did not come back after SIGHUP");
    assert!(ping6_ok(&lab), "IPv6 did not come back after SIGHUP");

    let run = Intercept::start(&lab, &mid, &["bridge", "-i", "ma", "-j", "mb"], || {
        !sonde_tables(&mid).is_empty()
    });
    let out = run.end_with(Signal::SIGQUIT);
    assert!(out.status.success(), "after SIGQUIT: {}", stderr(&out));
    assert_eq!(sonde_tables(&mid), "", "SIGQUIT left the table");
    assert_all_arrive(&lab, 7, "the kernel does not forward after SIGQUIT");
}

/// kill -9 leaves a fail-closed intercept's rules, here in the mangle table of iptables and of
/// ip6tables: traffic stops both ways. cleanup removes exactly sonde's rules (a rule whose
/// comment only starts with sonde's stays) and traffic flows again.
#[test]
fn cleanup_after_kill_9_removes_mangle_rules_of_both_families() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let a = ns(&lab, "a");
    let decoy = [
        "iptables",
        "-w",
        "-t",
        "mangle",
        "-A",
        "OUTPUT",
        "-p",
        "udp",
        "--dport",
        "9999",
        "-m",
        "comment",
        "--comment",
        "sonde-intercept-mine",
        "-j",
        "ACCEPT",
    ];
    assert!(in_ns(&a, &decoy).status.success(), "adding the decoy rule");
    let (v4, v6) = (
        format!("OUTPUT -t mangle -d {B_V4}"),
        format!("-6 OUTPUT -t mangle -d {B_V6}"),
    );
    let run = Intercept::start(
        &lab,
        &a,
        &[
            "stack",
            "--queue",
            "9",
            "--install-rule",
            &v4,
            "--install-rule",
            &v6,
        ],
        || sonde_rules(&a).lines().count() == 2,
    );
    let rules = sonde_rules(&a);
    assert!(
        rules.contains("iptables mangle") && rules.contains("ip6tables mangle"),
        "{rules}"
    );
    run.end_with(Signal::SIGKILL);
    let (sent, got) = udp_stream(
        &lab,
        7,
        Duration::from_millis(5),
        Duration::from_millis(300),
    );
    assert!(
        sent > 0 && got.is_empty(),
        "{} of {sent} passed a fail-closed rule",
        got.len()
    );
    assert!(!ping6_ok(&lab), "IPv6 passed a fail-closed rule");

    let said = cleanup_in(&a);
    assert!(said.starts_with("removed 2 "), "{said}");
    assert_eq!(sonde_rules(&a), "", "cleanup left rules");
    let left = in_ns(&a, &["iptables", "-w", "-t", "mangle", "-S", "OUTPUT"]);
    assert!(
        String::from_utf8_lossy(&left.stdout).contains("sonde-intercept-mine"),
        "cleanup removed a rule that is not sonde's"
    );
    assert_all_arrive(&lab, 7, "IPv4 did not come back after cleanup");
    assert!(ping6_ok(&lab), "IPv6 did not come back after cleanup");
}

/// `sonde intercept cleanup` used to remove a running intercept's rule: it went on without
/// dropping, and noticed only at its exit. Cleanup spares what a running sonde added now, and
/// says so; `--force` removes it, and the intercept then stops at once, saying why.
#[test]
fn cleanup_spares_a_running_intercept_and_a_forced_one_notices() {
    let Some(lab) = bridge_lab() else {
        return;
    };
    let a = ns(&lab, "a");
    let to_b = format!("OUTPUT -d {B_V4}");
    let mut run = Intercept::start(
        &lab,
        &a,
        &[
            "stack",
            "--queue",
            "5",
            "--install-rule",
            &to_b,
            "drop udp dst port 9",
        ],
        || sonde_rules(&a).lines().count() == 1,
    );
    let spared = in_ns(&a, &[SONDE, "intercept", "cleanup"]);
    assert!(spared.status.success(), "cleanup: {}", stderr(&spared));
    let said = String::from_utf8_lossy(&spared.stdout).into_owned();
    assert_eq!(
        sonde_rules(&a).lines().count(),
        1,
        "cleanup removed a running intercept's rule: {said}"
    );
    assert!(said.contains("--force"), "{said}");
    let (sent, got) = udp_stream(
        &lab,
        9,
        Duration::from_millis(5),
        Duration::from_millis(200),
    );
    assert!(sent > 0 && got.is_empty(), "{} of {sent} passed", got.len());

    let forced = in_ns(&a, &[SONDE, "intercept", "cleanup", "--force"]);
    assert!(
        forced.status.success(),
        "cleanup --force: {}",
        stderr(&forced)
    );
    assert_eq!(sonde_rules(&a), "", "--force left the rule");
    let removed_at = Instant::now();
    while run.child.try_wait().unwrap().is_none() {
        assert!(
            removed_at.elapsed() < Duration::from_secs(5),
            "the intercept went on without its rule"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run.wait();
    assert!(!out.status.success(), "it stopped as if all was well");
    let err = stderr(&out);
    assert!(err.contains("removed") && err.contains(&to_b), "{err}");
}

/// Datagrams from `flows` sockets of A (each its own source port, so the veth spreads them
/// over its queues) to B:`port`, `per_flow` each; how many were sent and arrived.
fn udp_flows(lab: &Lab, port: u16, flows: usize, per_flow: usize) -> (usize, usize) {
    let (a, b) = (ns(lab, "a"), ns(lab, "b"));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        sonde_lab::enter_ns(&b).expect("entering B");
        let sock = UdpSocket::bind(SocketAddrV4::new(B_V4, port)).expect("binding on B");
        sock.set_read_timeout(Some(Duration::from_millis(1000)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut got = 0;
        let mut buf = [0u8; 64];
        while sock.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("B bound");
    let sender = std::thread::spawn(move || {
        sonde_lab::enter_ns(&a).expect("entering A");
        let socks: Vec<UdpSocket> = (0..flows)
            .map(|_| UdpSocket::bind(SocketAddrV4::new(A_V4, 0)).unwrap())
            .collect();
        for i in 0..per_flow {
            for sock in &socks {
                let _ = sock.send_to(&(i as u32).to_be_bytes(), SocketAddrV4::new(B_V4, port));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        flows * per_flow
    });
    (
        sender.join().expect("sender"),
        receiver.join().expect("receiver"),
    )
}

/// The rx queues of `dev` (in `ns`) whose XDP program saw packets (veth's per-queue counters).
fn queues_with_xdp_packets(ns: &str, dev: &str) -> usize {
    let out = in_ns(ns, &["ethtool", "-S", dev]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("rx_queue_") && l.contains("_xdp_packets:"))
        .filter(|l| l.rsplit(':').next().is_some_and(|n| n.trim() != "0"))
        .count()
}

/// On veths with 4 queues the AF_XDP bridge with its default single thread binds all four:
/// every datagram of 16 flows arrives, though the flows spread over the queues. Killed, it
/// leaves libxdp's program and its table (traffic stops); cleanup takes both away, as the
/// guard does itself with --fail-open.
#[test]
fn the_xdp_bridge_serves_every_queue_and_cleanup_detaches_its_program() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--bridge", "--queues", "4"]);
    let mid = ns(&lab, "mid");
    let run = Intercept::start(
        &lab,
        &mid,
        &[
            "bridge",
            "-i",
            "ma",
            "-j",
            "mb",
            "--backend",
            "xdp",
            "count udp dst port 9100",
        ],
        || !sonde_tables(&mid).is_empty(),
    );
    let (sent, got) = udp_flows(&lab, 9100, 16, 20);
    let spread = queues_with_xdp_packets(&mid, "ma");
    let (out, summary) = run.stop();
    eprintln!("{} {summary:#}", stderr(&out));
    assert!(
        spread >= 2,
        "the flows all came on one queue: the test shows nothing"
    );
    assert_eq!(got, sent, "datagrams vanished on queues without a socket");
    assert_eq!(summary["rules"][0]["packets"].as_u64(), Some(sent as u64));
    assert!(
        summary["io"].as_str().unwrap_or("").contains("4 queues"),
        "{summary}"
    );

    let run = Intercept::start(
        &lab,
        &mid,
        &["bridge", "-i", "ma", "-j", "mb", "--backend", "xdp"],
        || !sonde_tables(&mid).is_empty(),
    );
    run.end_with(Signal::SIGKILL);
    assert!(
        xdp_attached(&mid, "ma") && xdp_attached(&mid, "mb"),
        "nothing was left"
    );
    let (sent, got) = udp_flows(&lab, 9101, 4, 5);
    assert_eq!(
        got, 0,
        "{got} of {sent} crossed a killed fail-closed bridge"
    );
    let said = cleanup_in(&mid);
    assert!(
        said.starts_with("removed 3 "),
        "the table and two programs: {said}"
    );
    assert_eq!(sonde_tables(&mid), "");
    assert!(
        !xdp_attached(&mid, "ma") && !xdp_attached(&mid, "mb"),
        "a program stayed"
    );
    let (sent, got) = udp_flows(&lab, 9102, 4, 5);
    assert_eq!(got, sent, "traffic did not come back after cleanup");

    // With --fail-open the guard takes both away itself.
    let args = [
        "bridge",
        "-i",
        "ma",
        "-j",
        "mb",
        "--backend",
        "xdp",
        "--fail-open",
    ];
    let run = Intercept::start(&lab, &mid, &args, || !sonde_tables(&mid).is_empty());
    run.end_with(Signal::SIGKILL);
    let end = Instant::now() + Duration::from_secs(5);
    while (xdp_attached(&mid, "ma") || !sonde_tables(&mid).is_empty()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sonde_tables(&mid), "", "the fail-open guard left the table");
    assert!(
        !xdp_attached(&mid, "ma") && !xdp_attached(&mid, "mb"),
        "the guard left a program"
    );
}

/// The rule syntax and the fail-open behaviour are on the help screens that have the options.
#[test]
fn help_shows_the_rule_syntax_and_what_fail_open_does() {
    for mode in ["stack", "bridge"] {
        let out = sonde(&["intercept", mode, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{help}");
        for needle in [
            "pass",
            "drop",
            "count",
            "rate-limit N/s",
            "rewrite F=V",
            "ttl=0-255",
            "sonde intercept cleanup",
            "guard process removes sonde's rules",
        ] {
            assert!(
                help.contains(needle),
                "{mode} --help lacks {needle:?}: {help}"
            );
        }
        assert!(
            !help.contains("see above"),
            "{mode} --help points at text it does not show"
        );
    }
}
