//! Running either mode: rules compiled per thread, the path changes made (and undone), the
//! workers started (`sonde_intercept::workers`) and watched, the summary written.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sonde_engine::status::human_seconds;
use sonde_intercept::flow::OrderCheck;
use sonde_intercept::path::{Guard, InstallRule, PathChanges, Queues};
use sonde_intercept::workers::Workers;
use sonde_intercept::{bridge, stack, Link, Rule, RuleSet, Totals};
use sonde_meter::CpuTimes;

use super::summary::{self, RuleLine};
use super::Common;
use crate::capture::BadExpression;
use crate::metrics::{LivePage, Metrics, RunLabels};

/// Rules from the file, then the command line.
fn load_rules(common: &Common) -> anyhow::Result<Vec<Rule>> {
    let mut rules = match &common.rules_file {
        Some(path) => Rule::read_file(path).map_err(|e| BadExpression(format!("{e:#}")))?,
        None => Vec::new(),
    };
    for text in &common.rules {
        rules.push(Rule::parse(text).map_err(|e| BadExpression(format!("{e:#}")))?);
    }
    Ok(rules)
}

/// One compiled rule set per thread (each thread counts on its own).
fn rule_sets(rules: &[Rule], link: Link, threads: usize) -> anyhow::Result<Vec<RuleSet>> {
    (0..threads)
        .map(|_| {
            RuleSet::new(rules, link, threads).map_err(|e| BadExpression(format!("{e:#}")).into())
        })
        .collect()
}

/// Ctrl-C, SIGTERM, SIGHUP (a dropped terminal) and SIGQUIT set `stop` (the set every
/// long-running command uses); the threads see it within one wait (20 ms), and everything sonde
/// changed is undone. Installed before the first change, so no signal can end sonde between a
/// change and its undo.
fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    sonde_engine::stop::set_on_stop_signals(&stop)?;
    Ok(stop)
}

/// The path changes to come, with the fail-open guard (started now, before the first of
/// them) when --fail-open asks for it.
fn path_changes(common: &Common) -> anyhow::Result<PathChanges> {
    let guard = match common.fail_open {
        true => Some(Guard::start(
            &std::env::current_exe()?,
            &["intercept", "guard"],
        )?),
        false => None,
    };
    Ok(PathChanges::new(guard))
}

pub fn stack(
    queue: Vec<u16>,
    install: Vec<String>,
    gso: bool,
    common: Common,
) -> anyhow::Result<()> {
    let queues: Vec<u16> = match (queue.as_slice(), common.threads) {
        ([first], t) => (0..t).map(|i| first.checked_add(i).ok_or_else(|| anyhow!("--queue {first} + --threads {t} passes 65535"))).collect::<anyhow::Result<_>>()?,
        (list, 1) => list.to_vec(),
        (list, t) => bail!("--queue lists {} queues and --threads says {t}: give one queue and --threads, or the list alone", list.len()),
    };
    if !install.is_empty() && !consecutive(&queues) {
        bail!("--install-rule balances over consecutive queues: give --queue N --threads T");
    }
    for spec in &install {
        InstallRule::parse(spec)?; // refused before any queue is bound
    }
    let stop = stop_flag()?;
    let metrics = start_metrics(&common, "stack", "nfqueue")?;
    let rules = load_rules(&common)?;
    let sets = rule_sets(&rules, Link::RawIp, queues.len())?;
    let rewrites_ports = rules.iter().any(|r| {
        matches!(&r.action, sonde_intercept::Action::Rewrite(rw) if rw.sport.is_some() || rw.dport.is_some())
    });
    let cfg = stack::StackConfig {
        queues: queues.clone(),
        batch: usize::from(common.batch),
        fail_open: common.fail_open,
        gso: gso && !rewrites_ports,
        // Only what the rules read (and the flow check's ports) crosses to user space.
        copy_bytes: sets[0]
            .bytes_needed(HEADERS)
            .unwrap_or(sonde_io::nfqueue_msg::MAX_COPY_RANGE),
    };
    let opened = stack::open(&cfg)?;
    let mut changes = path_changes(&common)?;
    let span = Queues {
        first: queues[0],
        count: queues.len() as u16,
    };
    for spec in &install {
        changes.add_nfqueue_rule(spec, span, common.fail_open)?;
    }
    let order = Arc::new(OrderCheck::default());
    let cpu = CpuTimes::now();
    let run = Workers::start(
        stop,
        sets,
        opened,
        move |port, filter, stop, counters, start| {
            stack::run_thread(port, filter, stop, counters, &order, start)
        },
    );
    let io = "NFQUEUE, one recvmmsg and one sendmsg per batch".to_string();
    finish(
        (run, cpu),
        changes,
        &common,
        &rules,
        ("stack", io),
        metrics,
        |totals| {
            for &q in &queues {
                if let Some(c) = sonde_io::nfqueue::queue_counters(q) {
                    totals.lost += c.queue_dropped + c.user_dropped;
                }
            }
        },
    )
}

/// Bytes always copied in stack mode: an IPv6 header and a TCP header, or an IPv4 header with
/// options and the ports, whatever the rules read.
const HEADERS: u32 = 128;

fn consecutive(queues: &[u16]) -> bool {
    queues.windows(2).all(|w| w[1] == w[0].wrapping_add(1))
}

pub fn bridge(
    iface_a: String,
    iface_b: String,
    backend: bridge::Backend,
    common: Common,
) -> anyhow::Result<()> {
    if iface_a == iface_b {
        bail!("-i and -j are both {iface_a}: a bridge joins two different interfaces");
    }
    let stop = stop_flag()?;
    let backend_name = match backend {
        bridge::Backend::Ring => "ring",
        bridge::Backend::Xdp(_) => "xdp",
    };
    let metrics = start_metrics(&common, "bridge", backend_name)?;
    let rules = load_rules(&common)?;
    let threads = usize::from(common.threads);
    let sets = rule_sets(&rules, Link::Ethernet, threads)?;
    let cfg = bridge::BridgeConfig {
        iface_a: iface_a.clone(),
        iface_b: iface_b.clone(),
        threads,
        batch: usize::from(common.batch),
        backend,
    };
    for iface in [&iface_a, &iface_b] {
        sonde_intercept::path::check_iface_name(iface)?;
    }
    let mut changes = path_changes(&common)?;
    if matches!(backend, bridge::Backend::Xdp(_)) {
        // Opening the sockets attaches libxdp's program to both interfaces; closing them
        // takes it off, but after a crash it stays, so the guard learns how to remove it.
        let exe = std::env::current_exe()?.display().to_string();
        let detach = [&exe, "intercept", "detach-xdp", &iface_a, &iface_b];
        changes.about_to(detach.map(str::to_string).into())?;
    }
    let ports = bridge::open(&cfg)?;
    let io = ports[0].describe();
    // With xdp the frames sonde takes never reach this table (XDP redirects them first), but
    // it is what keeps the path shut if sonde dies: the sockets close with it, and libxdp's
    // program, left attached, then passes every frame to the kernel's bridge.
    changes.take_off_wire(&[&iface_a, &iface_b])?;
    let order = Arc::new(bridge::Directions::default());
    let batch = cfg.batch;
    let cpu = CpuTimes::now();
    let run = Workers::start(
        stop,
        sets,
        ports,
        move |ports, filter, stop, counters, start| {
            bridge::run_thread(ports, filter, batch, stop, counters, &order, start)
        },
    );
    finish(
        (run, cpu),
        changes,
        &common,
        &rules,
        ("bridge", io),
        metrics,
        |_| {},
    )
}

/// The exporter of `--metrics`, bound before anything on the path changes.
fn start_metrics(common: &Common, mode: &str, backend: &str) -> anyhow::Result<Metrics> {
    let labels = RunLabels {
        command: "intercept",
        module: mode,
        backend,
        shard: 0,
        target_rate: 0.0,
    };
    common.metrics.start(labels, common.quiet)
}

/// Watches until the end, stops the threads, undoes the path changes (sending the fail-open
/// guard away) and writes the summary.
fn finish(
    (mut run, cpu): (Workers, CpuTimes),
    mut changes: PathChanges,
    common: &Common,
    rules: &[Rule],
    (mode, io): (&str, String),
    metrics: Metrics,
    add_lost: impl FnOnce(&mut Totals),
) -> anyhow::Result<()> {
    let mut live = metrics.publisher().map(LivePage::new);
    let removed = watch(&run, &mut changes, common, live.as_mut());
    let stop_error = removed.err().or(run.stop_and_join());
    let wall = run.start.elapsed();
    let cpu = CpuTimes::now().since(&cpu);
    let mut totals = run.totals();
    add_lost(&mut totals);
    let undone = changes.undo_all();
    let rule_lines = RuleLine::collect(rules, &run.rule_counters);
    let per_thread: Vec<Totals> = run.counters.iter().map(|c| c.totals()).collect();
    let s = summary::Summary::new(mode, io, common, totals, &per_thread, rule_lines, wall, cpu);
    s.print();
    if let Some(path) = &common.summary_json {
        s.write_json(path)?;
    }
    undone?;
    if let Some(live) = &mut live {
        publish(live, &totals, common, false);
    }
    metrics.end(&s)?;
    match stop_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// How the status goes out: redrawn in place on a terminal (twice a second), or, when stderr
/// is a file or pipe, as a line of its own every second (as scan's does); nothing with --quiet.
enum StatusOut {
    Hidden,
    Bar(ProgressBar),
    Lines,
}

impl StatusOut {
    fn new(quiet: bool) -> StatusOut {
        use std::io::IsTerminal;
        if quiet {
            StatusOut::Hidden
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(2));
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} {msg}").expect("valid template"),
            );
            StatusOut::Bar(bar)
        } else {
            StatusOut::Lines
        }
    }

    /// Seconds between two samples.
    fn every(&self) -> f64 {
        match self {
            StatusOut::Lines => 1.0,
            _ => 0.5,
        }
    }

    fn show(&self, elapsed: Duration, text: String) {
        match self {
            StatusOut::Hidden => {}
            StatusOut::Bar(bar) => bar.set_message(text),
            StatusOut::Lines => {
                use std::io::Write;
                // A closed stderr (a dropped session) must not end the run.
                let s = elapsed.as_secs_f64();
                let _ = writeln!(std::io::stderr(), "{:>5} {text}", human_seconds(s));
            }
        }
    }

    fn finish(self) {
        if let StatusOut::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Intercept's page for `--metrics`: the totals its status line reads.
fn publish(live: &mut LivePage, t: &Totals, common: &Common, running: bool) {
    let done = match common.duration {
        Some(s) => live.elapsed() / s.max(1e-9),
        None => f64::NAN,
    };
    live.publish(t.packets, done.min(1.0), running, |page| {
        page.counter(
            "sonde_received_total",
            "Packets taken off the path",
            t.packets,
        );
        page.counter(
            "sonde_received_bytes_total",
            "Bytes of the packets taken",
            t.bytes,
        );
        page.counters(
            "sonde_verdicts_total",
            "Packets by verdict: passed on (rewritten ones included), dropped",
            "verdict",
            &[("passed", t.passed), ("dropped", t.dropped)],
        );
        page.counter(
            "sonde_rewritten_total",
            "Packets passed on rewritten",
            t.rewritten,
        );
        page.counter(
            "sonde_reordered_total",
            "Packets seen out of their flow's order",
            t.reordered,
        );
        page.counters(
            "sonde_drops_total",
            "Packets lost before sonde saw them (ring or queue drops)",
            "cause",
            &[("before_sonde", t.lost)],
        );
    });
}

/// How often a running intercept checks that its rules and table are still in place.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The status, until the duration passes, a signal, or a thread fails; or until a rule or table
/// of `changes` is found removed (checked every [`CHECK_EVERY`]), which is returned.
fn watch(
    run: &Workers,
    changes: &mut PathChanges,
    common: &Common,
    mut live: Option<&mut LivePage>,
) -> anyhow::Result<()> {
    let out = StatusOut::new(common.quiet);
    let deadline = common
        .duration
        .map(|s| run.start + Duration::from_secs_f64(s.max(0.0)));
    let mut last = (Instant::now(), Totals::default());
    let mut checked = Instant::now();
    while !run.stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if checked.elapsed() >= CHECK_EVERY {
            checked = Instant::now();
            if let Err(e) = changes.check_in_place() {
                out.finish();
                return Err(e);
            }
        }
        if let Some(live) = live.as_deref_mut().filter(|l| l.due()) {
            let now = run.totals();
            publish(live, &now, common, true);
        }
        let dt = last.0.elapsed().as_secs_f64();
        if dt < out.every() {
            continue;
        }
        let now = run.totals();
        let packets = now.packets - last.1.packets;
        let batches = (now.batches - last.1.batches).max(1);
        out.show(
            run.start.elapsed(),
            format!(
                "{} packets  {}pps  {:.0} Mbit/s  batch fill {:.1}  dropped {}  lost {}  reordered {}",
                now.packets,
                sonde_meter::human_rate(packets as f64 / dt),
                (now.bytes - last.1.bytes) as f64 * 8.0 / dt / 1e6,
                packets as f64 / batches as f64,
                now.dropped,
                now.lost,
                now.reordered
            ),
        );
        last = (Instant::now(), now);
    }
    out.finish();
    Ok(())
}
