//! sonde outside a lab: the real-network path (no --lab, no lab namespace to recognise), run in
//! a namespace this test makes and routes only into a lab's network, against the lab's
//! population (198.18.0.0/15), scored against the lab's truth. Nothing here reaches any other
//! address: the test namespace's only route leads into the lab, and the lab has none out.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;
use common::{can_run_labs, stderr, Lab, SONDE};

/// A namespace of this test's own, joined to the lab's net namespace by a veth pair on
/// 198.19.254.0/24 (lab space, off the population), its default route into the lab. Removed on
/// drop (which removes the veth pair with it).
struct Outside {
    ns: String,
}

const OUTSIDE_IP: &str = "198.19.254.1";
const LAB_SIDE_IP: &str = "198.19.254.254";

impl Outside {
    fn join(lab: &Lab) -> Outside {
        static N: AtomicUsize = AtomicUsize::new(0);
        let ns = format!(
            "sondeout-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let outside = Outside { ns: ns.clone() };
        let net = format!("sonde-{}-net", lab.name);
        let steps = [
            format!("netns add {ns}"),
            format!("-n {ns} link set lo up"),
            format!("link add ox0 netns {ns} type veth peer name ox1 netns {net}"),
            format!("-n {ns} addr add {OUTSIDE_IP}/24 dev ox0"),
            format!("-n {net} addr add {LAB_SIDE_IP}/24 dev ox1"),
            format!("-n {ns} link set ox0 up"),
            format!("-n {net} link set ox1 up"),
            format!("-n {ns} route add default via {LAB_SIDE_IP} dev ox0"),
        ];
        for step in steps {
            let out = Command::new("ip")
                .args(step.split_whitespace())
                .output()
                .unwrap();
            assert!(out.status.success(), "ip {step}: {}", stderr(&out));
        }
        outside
    }

    /// `sonde ARGS` inside this namespace, as a user would run it there: plain `ip netns exec`.
    fn sonde(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, SONDE])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

#[test]
fn a_scan_without_a_lab_finds_the_truth_from_its_own_namespace() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&[
        "--population",
        "198.18.0.0/20",
        "--responsive",
        "0.2",
        "--tcp-open",
        "80",
    ]);
    let outside = Outside::join(&lab);
    let (results, summary) = (lab.file("out.csv"), lab.file("out.json"));

    // The default blocklist applies outside a lab, and says how to lift it.
    let refused = outside.sonde(&["scan", "198.18.0.0/20", "-p", "80", "-o", &results]);
    let err = stderr(&refused);
    assert!(!refused.status.success());
    assert!(
        err.contains("198.18.0.0/15") && err.contains("--no-default-blocklist"),
        "{err}"
    );

    let out = outside.sonde(&[
        "scan",
        "198.18.0.0/20",
        "-p",
        "80",
        "--no-default-blocklist",
        "-r",
        "0",
        "-c",
        "2",
        "-o",
        &results,
        "--summary-json",
        &summary,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("from {OUTSIDE_IP} on ox0")),
        "the plan line names the host's own source and interface: {err}"
    );
    let score = lab.score(&["--port", "80", &results]);
    let found: u64 = score.split_whitespace().nth(1).unwrap().parse().unwrap();
    let truth: u64 = score.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(score.contains("false positives 0"), "{score}");
    assert!(
        truth > 0 && found * 1000 >= truth * 999,
        "found {found} of {truth}"
    );
}

#[test]
fn inside_a_lab_an_off_population_target_is_refused_even_in_a_dry_run() {
    if !can_run_labs() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/24", "--tcp-open", "80"]);
    for extra in [&[][..], &["--dryrun"][..]] {
        let mut args = vec!["scan", "--lab", &lab.name, "198.18.0.0/24", "198.18.1.0/30"];
        args.extend_from_slice(extra);
        let out = common::sonde(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.lines()
                .next()
                .unwrap_or_default()
                .contains("outside lab"),
            "{args:?}: {err}"
        );
    }
}
