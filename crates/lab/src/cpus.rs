//! `--target-cpus`: the CPUs the lab's side runs on, so a scanner on the other CPUs is measured
//! without the lab's work on its own CPU.
//!
//! veth delivers a frame to its peer on the CPU that sent it, inside the sender's system call,
//! so without steering the lab's kernel answers every probe on the scanner's CPU. With target
//! CPUs, `up` sets RPS on every receive queue of nx0 (the lab's receive processing moves to
//! them), XPS on every transmit queue of nx0, and starts the lab's servers under
//! `taskset -c LIST` (every thread and child process they ever make inherits it, nginx's
//! workers included, with no window in which one runs elsewhere). The queue files are written
//! through `ip netns exec`, which mounts the lab namespace's own /sys: nothing outside the lab's
//! namespaces changes, and `down` has nothing to restore (the settings go with the namespace).

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};

use crate::cmd::in_ns;

const ONLINE: &str = "/sys/devices/system/cpu/online";

/// Parses a CPU list as the kernel and taskset write them: numbers and ranges separated by
/// commas ("1", "0,2", "2-3", "0-1,4"). Ascending, without repeats; an error (one line) for
/// anything else or an empty list.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>> {
    let bad = || {
        anyhow!("{list:?} is not a CPU list: use CPU numbers and ranges separated by commas, e.g. 1 or 2-3 or 1,3")
    };
    let number = |s: &str| -> Result<usize> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let mut cpus = BTreeSet::new();
    for part in list.trim().split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last || last - first > 65_536 {
            return Err(bad());
        }
        cpus.extend(first..=last);
    }
    Ok(cpus.into_iter().collect())
}

/// The online CPUs, from /sys/devices/system/cpu/online (`available_parallelism` counts only
/// the CPUs this process may use, and not which they are).
pub fn online_cpus() -> Result<Vec<usize>> {
    let text = std::fs::read_to_string(ONLINE).map_err(|e| anyhow!("cannot read {ONLINE}: {e}"))?;
    parse_cpu_list(text.trim()).map_err(|e| anyhow!("{ONLINE}: {e}"))
}

/// `cpus` written as a list (ranges joined): "1", "0,2", "2-3".
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Checks target CPUs against the online ones: each must be online, and at least one online CPU
/// must be left for the scanner.
pub(crate) fn check_target_cpus(cpus: &[usize], online: &[usize]) -> Result<()> {
    let online_list = cpu_list(online);
    if cpus.is_empty() {
        bail!("--target-cpus is empty: name the CPUs the lab's side runs on, e.g. 1");
    }
    if let Some(cpu) = cpus.iter().find(|c| !online.contains(c)) {
        bail!(
            "--target-cpus {}: CPU {cpu} is not online (online CPUs: {online_list})",
            cpu_list(cpus)
        );
    }
    if online.iter().all(|c| cpus.contains(c)) {
        bail!(
            "--target-cpus {} takes every online CPU ({online_list}): leave at least one for the scanner",
            cpu_list(cpus)
        );
    }
    Ok(())
}

/// The kernel's hexadecimal CPU mask of `cpus`: 32-bit groups, most significant first,
/// separated by commas ("00000002"; "00000001,00000000" for CPU 32).
pub(crate) fn cpu_mask(cpus: &[usize]) -> String {
    let groups = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut words = vec![0u32; groups];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    let hex: Vec<String> = words.iter().rev().map(|w| format!("{w:08x}")).collect();
    hex.join(",")
}

/// The CPUs of a kernel CPU mask (as `cpu_mask` writes it, or as sysfs shows it).
pub(crate) fn mask_cpus(mask: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for (i, group) in mask.trim().rsplit(',').enumerate() {
        let word =
            u32::from_str_radix(group, 16).map_err(|_| anyhow!("{mask:?} is not a CPU mask"))?;
        cpus.extend((0..32).filter(|b| word & (1 << b) != 0).map(|b| i * 32 + b));
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// The queue files `steer` writes for `queues` queues: RPS of every receive queue, and XPS of
/// every transmit queue when there are several (with one there is nothing to choose, and the
/// kernel refuses the setting).
fn queue_files(queues: u32) -> &'static str {
    if queues > 1 {
        "rx-*/rps_cpus tx-*/xps_cpus"
    } else {
        "rx-*/rps_cpus"
    }
}

/// The queue settings of `iface` (of `queues` queues) in namespace `ns`, as sysfs there shows
/// them: (`rx-N/rps_cpus` or `tx-N/xps_cpus`, its CPUs) for every queue.
fn queue_cpus(ns: &str, iface: &str, queues: u32) -> Result<Vec<(String, Vec<usize>)>> {
    let dir = format!("/sys/class/net/{iface}/queues");
    let script = format!("cd {dir} && grep -H . {}", queue_files(queues));
    let text = in_ns(ns, "sh", &["-c", &script])?;
    text.lines()
        .map(|line| {
            let (file, mask) = line
                .split_once(':')
                .ok_or_else(|| anyhow!("unexpected line {line:?} from {dir}"))?;
            Ok((file.to_string(), mask_cpus(mask)?))
        })
        .collect()
}

/// Steers the queues of `iface` (the lab's nx0) in namespace `ns` to `cpus`: RPS on every receive
/// queue, XPS on every transmit queue (see `queue_files`). Reads them back and fails unless every one shows `cpus`.
pub(crate) fn steer(ns: &str, iface: &str, cpus: &[usize], queues: u32) -> Result<()> {
    let mask = cpu_mask(cpus);
    // The mask goes in as $1: the script itself is fixed text.
    let script = format!(
        "cd /sys/class/net/{iface}/queues && \
         for f in {}; do echo \"$1\" > \"$f\" || exit 1; done",
        queue_files(queues)
    );
    in_ns(ns, "sh", &["-c", &script, "sh", &mask]).map_err(|e| {
        anyhow!(
            "cannot steer {iface}'s queues to CPUs {}: {e}",
            cpu_list(cpus)
        )
    })?;
    let seen = queue_cpus(ns, iface, queues)?;
    let want = if queues > 1 { 2 } else { 1 } * queues as usize;
    if seen.len() != want || seen.iter().any(|(_, c)| c != cpus) {
        bail!(
            "{iface}'s queues do not show CPUs {} after steering ({} of {want} files: {seen:?})",
            cpu_list(cpus),
            seen.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_print() {
        for (text, cpus) in [
            ("1", vec![1]),
            ("0,2", vec![0, 2]),
            ("2-3", vec![2, 3]),
            ("0-1,4", vec![0, 1, 4]),
            ("3,1,1-2", vec![1, 2, 3]),
            (" 5 ", vec![5]),
            ("0-0", vec![0]),
        ] {
            assert_eq!(parse_cpu_list(text).unwrap(), cpus, "{text:?}");
        }
        for bad in [
            "",
            "x",
            "1,",
            ",1",
            "1-",
            "-1",
            "3-1",
            "1 2",
            "1;2",
            "+1",
            "0x1",
            "1-99999999",
        ] {
            let e = parse_cpu_list(bad).unwrap_err().to_string();
            assert!(e.contains("is not a CPU list"), "{bad:?}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(
            parse_cpu_list(&cpu_list(&[0, 3, 4, 9])).unwrap(),
            [0, 3, 4, 9]
        );
    }

    #[test]
    fn masks_round_trip() {
        assert_eq!(cpu_mask(&[1]), "00000002");
        assert_eq!(cpu_mask(&[0, 1]), "00000003");
        assert_eq!(cpu_mask(&[32]), "00000001,00000000");
        assert_eq!(cpu_mask(&[4, 35]), "00000008,00000010");
        for cpus in [vec![1], vec![0, 31], vec![32, 33, 64], vec![2, 3, 100]] {
            assert_eq!(mask_cpus(&cpu_mask(&cpus)).unwrap(), cpus);
        }
        // As sysfs shows masks: no leading zeros, or wider than written.
        assert_eq!(mask_cpus("2\n").unwrap(), [1]);
        assert_eq!(mask_cpus("00000000,00000002").unwrap(), [1]);
        assert_eq!(mask_cpus("0").unwrap(), Vec::<usize>::new());
        assert!(mask_cpus("xyz").is_err());
    }

    #[test]
    fn target_cpus_must_be_online_and_leave_one() {
        let online = [0, 1];
        check_target_cpus(&[1], &online).unwrap();
        check_target_cpus(&[0], &online).unwrap();
        for (cpus, why) in [
            (vec![2], "CPU 2 is not online (online CPUs: 0-1)"),
            (vec![1, 7], "CPU 7 is not online"),
            (
                vec![0, 1],
                "takes every online CPU (0-1): leave at least one for the scanner",
            ),
            (vec![], "is empty"),
        ] {
            let e = check_target_cpus(&cpus, &online).unwrap_err().to_string();
            assert!(e.contains(why), "{cpus:?}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
        // Offline CPUs in between do not count as online.
        check_target_cpus(&[4], &[0, 4]).unwrap();
        assert!(check_target_cpus(&[2], &[0, 4]).is_err());
    }

    #[test]
    fn this_machine_has_online_cpus() {
        let online = online_cpus().unwrap();
        assert!(!online.is_empty());
        assert!(online.windows(2).all(|w| w[0] < w[1]));
    }
}
