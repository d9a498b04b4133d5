//! Shard selection from flags, Slurm arrays and Kubernetes indexed jobs.

// In a module named `targets` so that `cargo test -p sonde-scan targets` selects these too.
mod targets {
    use std::collections::HashMap;

    use sonde_scan::targets::{shard_from_env, shard_from_vars};

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
}
