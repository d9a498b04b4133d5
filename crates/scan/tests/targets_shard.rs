//! Shard selection from flags, Slurm arrays and Kubernetes indexed jobs.

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::collections::HashMap;

    use sonde_scan::targets::{shard_from_env, shard_from_vars, Part, Permutation};

    fn with_env(
        shards: Option<u32>,
        shard: Option<u32>,
        vars: &[(&str, &str)],
    ) -> anyhow::Result<Option<(u32, u32)>> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        shard_from_vars(shards, shard, |name| env.get(name).cloned())
    }

    fn message(result: anyhow::Result<Option<(u32, u32)>>) -> String {
        format!("{:#}", result.unwrap_err())
    }

    #[test]
    fn explicit_flags_win() {
        assert_eq!(with_env(Some(4), Some(1), &[]).unwrap(), Some((1, 4)));
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ];
        assert_eq!(with_env(Some(2), Some(0), &slurm).unwrap(), Some((0, 2)));
        assert_eq!(shard_from_env(Some(3), Some(2)).unwrap(), Some((2, 3)));
    }

    #[test]
    fn nothing_means_unsharded() {
        assert_eq!(with_env(None, None, &[]).unwrap(), None);
    }

    #[test]
    fn slurm_arrays() {
        let plain = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ];
        assert_eq!(with_env(None, None, &plain).unwrap(), Some((3, 8)));
        assert_eq!(with_env(Some(8), None, &plain).unwrap(), Some((3, 8)));
        assert!(message(with_env(Some(4), None, &plain)).contains("disagrees"));
        // --array=1-8
        let from_one = [
            ("SLURM_ARRAY_TASK_ID", "8"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        assert_eq!(with_env(None, None, &from_one).unwrap(), Some((7, 8)));
        // --array=0-30:3
        let stepped = [
            ("SLURM_ARRAY_TASK_ID", "9"),
            ("SLURM_ARRAY_TASK_COUNT", "11"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "3"),
        ];
        assert_eq!(with_env(None, None, &stepped).unwrap(), Some((3, 11)));
        // --array=1,5,9: not evenly spaced from the count's point of view
        let sparse = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        assert!(message(with_env(None, None, &sparse)).contains("--array=0-2"));
        assert!(
            message(with_env(None, None, &[("SLURM_ARRAY_TASK_ID", "1")]))
                .contains("SLURM_ARRAY_TASK_COUNT")
        );
        let garbage = [
            ("SLURM_ARRAY_TASK_ID", "x"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
        ];
        assert!(message(with_env(None, None, &garbage)).contains("SLURM_ARRAY_TASK_ID=\"x\""));
    }

    #[test]
    fn kubernetes_indexed_jobs_need_the_count() {
        let k8s = [("JOB_COMPLETION_INDEX", "2")];
        assert_eq!(with_env(Some(4), None, &k8s).unwrap(), Some((2, 4)));
        let error = message(with_env(None, None, &k8s));
        assert!(error.contains("pass --shards N"), "{error}");
        assert!(message(with_env(Some(2), None, &k8s)).contains("not in 0..2"));
    }

    #[test]
    fn incomplete_or_invalid_flags() {
        assert!(message(with_env(None, Some(1), &[])).contains("needs --shards"));
        assert!(message(with_env(Some(3), None, &[])).contains("needs --shard I"));
        assert!(message(with_env(Some(3), Some(3), &[])).contains("not in 0..3"));
        assert!(message(with_env(Some(0), Some(0), &[])).contains("at least 1"));
    }

    /// The indexed-job manifest in docs/sharding.md: the yaml block's text.
    fn kubernetes_manifest() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sharding.md");
        let doc = std::fs::read_to_string(path).expect("docs/sharding.md");
        let start = doc
            .find("```yaml\n")
            .expect("a yaml block in docs/sharding.md")
            + 8;
        let len = doc[start..].find("```").expect("the yaml block's end");
        doc[start..start + len].to_string()
    }

    /// The number after `key` in the manifest (`completions: 4`, `--shards 4`).
    fn number_after(manifest: &str, key: &str) -> u32 {
        let at = manifest
            .find(key)
            .unwrap_or_else(|| panic!("{key} in the manifest"))
            + key.len();
        let digits: String = manifest[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("a number after {key}"))
    }

    /// What Kubernetes gives each pod of the documented indexed job (JOB_COMPLETION_INDEX 0 to
    /// completions - 1, nothing else), with the manifest's `--shards`: the pods' shards cover
    /// a target space exactly once.
    #[test]
    fn the_documented_kubernetes_job_covers_every_target_once() {
        let manifest = kubernetes_manifest();
        assert!(manifest.contains("completionMode: Indexed"), "{manifest}");
        let completions = number_after(&manifest, "completions:");
        let shards = number_after(&manifest, "--shards");
        assert_eq!(
            shards, completions,
            "--shards must be the job's completions"
        );
        assert!(completions > 1, "{manifest}");

        let permutation = Permutation::new(10_007, 7);
        let mut seen = vec![0u8; 10_007];
        for index in 0..completions {
            let index = index.to_string();
            let pod = [("JOB_COMPLETION_INDEX", index.as_str())];
            let (shard, n) = with_env(Some(shards), None, &pod).unwrap().unwrap();
            assert_eq!((shard.to_string(), n), (index, completions));
            for target in permutation.cursor(Part::new(shard, n, 0, 1).unwrap()) {
                seen[target as usize] += 1;
            }
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "a target missed or probed twice"
        );
        // The pod of an index past the job's completions is refused, not folded in.
        let past = completions.to_string();
        let stray = [("JOB_COMPLETION_INDEX", past.as_str())];
        let refused = message(with_env(Some(completions), None, &stray));
        assert!(
            refused.contains(&format!("not in 0..{completions}")),
            "{refused}"
        );
    }
}
