//! Helpers: a `git` runner, where the regression cases live, fixtures, records.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use autokernel_core::{
    CommitId, DType, Decision, ExperimentDraft, ExperimentRecord, KernelKind, Shape, Target,
    VersionStore,
};
use autokernel_vcs::{GixStore, StoreOptions};

/// `git -C dir args…`, isolated from the machine's git config; panics with stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_raw(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `git -C dir args…` returning the whole output, success or not.
pub fn git_raw(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "user")
        .env("GIT_AUTHOR_EMAIL", "user@example.invalid")
        .env("GIT_COMMITTER_NAME", "user")
        .env("GIT_COMMITTER_EMAIL", "user@example.invalid")
        .output()
        .expect("the git command runs")
}

/// Lines of `git …` output.
pub fn git_lines(dir: &Path, args: &[&str]) -> Vec<String> {
    git(dir, args).lines().map(String::from).collect()
}

/// The in-repo regression cases of `area` (`tests/cases/<area>/`, see its README); they
/// ship with the repository, so a missing folder is a broken checkout and fails loudly.
pub fn cases_dir(area: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(area);
    assert!(
        dir.is_dir(),
        "in-repo cases folder not found at `{}`",
        dir.display()
    );
    dir
}

/// The shared cases folder of an area, when present (one source: `tests/support/`).
#[path = "../../../tests/support/shared_cases.rs"]
mod shared_cases;
pub use shared_cases::shared_cases_dir;

pub fn target(id: &str) -> Target {
    Target::new(id, KernelKind::Softmax)
        .with_shapes(vec![Shape(vec![64, 64])])
        .with_dtype(DType::Float16)
        .with_fraction(0.5)
        .with_op("aten::softmax")
}

pub fn options(tag: &str) -> StoreOptions {
    let mut o = StoreOptions::new(tag);
    o.lock_timeout = Duration::from_millis(500);
    o
}

/// A temp dir with a `ws` workspace path inside (not created).
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn ws(&self) -> PathBuf {
        self.dir.path().join("ws")
    }
    pub fn open(&self, tag: &str) -> GixStore {
        GixStore::open(&self.ws(), options(tag)).unwrap()
    }
}

pub fn record(n: u64, target: &str, commit: &CommitId, decision: Decision) -> ExperimentRecord {
    ExperimentRecord {
        experiment: n,
        timestamp: "2026-11-30T00:00:00Z".into(),
        target: target.into(),
        kind: KernelKind::Softmax,
        agent: "scripted".into(),
        description: format!("experiment {n}"),
        commit: Some(commit.0.clone()),
        decision,
        correctness: if decision == Decision::Revert {
            autokernel_core::Verdict::Fail
        } else {
            autokernel_core::Verdict::Pass
        },
        latency_us: Some(100.0 - n as f64),
        throughput: None,
        throughput_unit: "GB/s".into(),
        pct_peak: None,
        speedup_vs_reference: Some(1.0 + n as f64 / 100.0),
        peak_vram_mb: None,
        duration_s: 0.1,
        head_to_head: None,
        bench_samples_us: Vec::new(),
        bench_reference_samples_us: Vec::new(),
        config: None,
    }
}

pub fn source(n: u64) -> String {
    format!("KERNEL_KIND = \"softmax\"\n# version {n}\n")
}

/// Commits experiment `n` of `target` and keeps or reverts it; returns the commit.
pub async fn experiment(store: &mut GixStore, n: u64, target_id: &str, keep: bool) -> CommitId {
    let t = target(target_id);
    let src = source(n);
    let commit = store
        .commit(&ExperimentDraft {
            experiment: n,
            target: &t,
            description: &format!("experiment {n}"),
            agent: "scripted",
            source: &src,
        })
        .await
        .unwrap();
    if keep {
        store
            .keep(&record(n, target_id, &commit, Decision::Keep))
            .await
            .unwrap();
    } else {
        store
            .revert(&record(n, target_id, &commit, Decision::Revert))
            .await
            .unwrap();
    }
    commit
}

/// Asserts `git status --porcelain` (untracked included) is empty and the index matches HEAD.
pub fn assert_clean(ws: &Path) {
    assert_eq!(
        git(ws, &["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert!(git_raw(ws, &["diff", "--cached", "--quiet"])
        .status
        .success());
}
