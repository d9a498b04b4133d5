//! A scan split as a Slurm job array splits it (issue 22): four tasks of one `sonde scan --seed
//! S` that take their shard from Slurm's variables alone, one of them stopped as `scancel` stops
//! it (SIGTERM) and resubmitted alone with `--resume` (`sbatch --array=2`: an array of one task
//! as far as its variables go), and the five parquet files read with DuckDB in one query: every
//! target exactly once, typed columns, the run's metadata; their union scored against the truth.
//! bench/slurm-shards does the same under a real Slurm. Lab tests need root; the lab has a unique
//! name and is removed by its guard, also on failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{can_run_labs, stderr, Lab, SONDE};

const SEED: &str = "4242";
const PREFIX: &str = "198.18.0.0/20";
/// Port 80 answers SYN-ACK, 81 RST: every (address, port) answers once.
const PORTS: &str = "80,81";
const TARGETS: usize = 4096 * 2;

/// Variables of the batch schedulers that pick a shard: removed from every run, so only what a
/// test sets reaches sonde.
const SCHEDULER_VARS: &[&str] = &[
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

/// The Python that has DuckDB: scripts/setup makes a venv in the repository's .venv;
/// SONDE_PYTHON overrides it.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SONDE_PYTHON") {
        return p.into();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3")
}

/// `sonde scan` of the lab's /20 on ports 80 and 81 into `out`, as Slurm array task `task` of an
/// array whose variables are `array` (`(count, min, max)`), started in the background.
fn slurm_task(lab: &Lab, task: u32, array: (u32, u32, u32), out: &str, extra: &[&str]) -> Child {
    let mut command = Command::new(SONDE);
    command.args(["scan", "--lab", &lab.name, "--no-default-blocklist", "-q"]);
    command.args([PREFIX, "-p", PORTS, "--seed", SEED, "-c", "1"]);
    command.args(["--output-filter", "repeat = 0", "-O", "parquet", "-o", out]);
    command.args(extra);
    for var in SCHEDULER_VARS {
        command.env_remove(var);
    }
    let (count, min, max) = array;
    command
        .env("SLURM_ARRAY_TASK_ID", task.to_string())
        .env("SLURM_ARRAY_TASK_COUNT", count.to_string())
        .env("SLURM_ARRAY_TASK_MIN", min.to_string())
        .env("SLURM_ARRAY_TASK_MAX", max.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command.spawn().expect("starting sonde")
}

fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("sonde did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting output")
}

fn finished(child: Child, what: &str) {
    ended_with(child, what, 0);
}

/// Waits for `child` and checks its exit status: 0 at its end, 130 when a signal stopped it.
fn ended_with(child: Child, what: &str, code: i32) {
    let out = wait_bounded(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(code), "{what}: {}", stderr(&out));
}

#[test]
fn slurm_array_shards_resume_and_read_as_one_table_in_duckdb() {
    if !can_run_labs() {
        return;
    }
    let python = python();
    let has_duckdb = Command::new(&python)
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_duckdb,
        "{} cannot import duckdb: run scripts/setup (it makes .venv), or set SONDE_PYTHON",
        python.display()
    );
    let lab = Lab::up(&[
        "--population",
        PREFIX,
        "--responsive",
        "1.0",
        "--tcp-open",
        "80",
    ]);
    let array = (4, 0, 3);
    let out = |name: &str| lab.file(name);
    for task in [0, 1, 3] {
        let child = slurm_task(
            &lab,
            task,
            array,
            &out(&format!("shard-{task}.parquet")),
            &[],
        );
        finished(child, &format!("task {task}"));
    }
    // Task 2 at 500 probes/s: its 2,048 targets take 4 s; scancel's SIGTERM comes after the
    // first second of sending (its status file gains a line a second after the header).
    let first = out("shard-2.parquet");
    let status = out("shard-2.status.csv");
    let killed = slurm_task(
        &lab,
        2,
        array,
        &first,
        &["-r", "500", "--status-file", &status],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&status).map_or(0, |s| s.lines().count()) < 2 {
        assert!(Instant::now() < deadline, "task 2 never started sending");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(killed.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    ended_with(killed, "the stopped task", 130);
    let checkpoint = format!("{first}.checkpoint.json");
    assert!(Path::new(&checkpoint).exists(), "no checkpoint written");
    // Resubmitted alone: Slurm tells it it is task 2 of an array of one (2-2); the checkpoint
    // says which shard it is.
    let resumed = out("shard-2.resumed.parquet");
    let child = slurm_task(&lab, 2, (1, 2, 2), &resumed, &["--resume", &checkpoint]);
    finished(child, "the resumed task");

    let files: Vec<String> = ["0", "1", "2", "2.resumed", "3"]
        .iter()
        .map(|s| out(&format!("shard-{s}.parquet")))
        .collect();
    let merged = out("merged.parquet");
    let check = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check_shards.py"))
        .arg("--files")
        .args(&files)
        .args(["--targets", &TARGETS.to_string(), "--shards", "4"])
        .args(["--seed", SEED, "--lab", &lab.name, "--merged", &merged])
        .output()
        .expect("running check_shards.py");
    let figures = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{}{figures}", stderr(&check));
    eprintln!("duckdb: {figures}");
    let rows = |file: &str| -> i64 {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
        reader.metadata().file_metadata().num_rows()
    };
    assert!(
        rows(&first) > 0 && rows(&resumed) > 0,
        "the SIGTERM did not split task 2"
    );
    // Port 80 is open on every address, 81 on none: the hits are exactly port 80's.
    let score = lab.score(&["--port", "80", &merged]);
    assert!(
        score.contains("found 4096 of 4096 (100.000 %), false positives 0"),
        "{score}"
    );
}
