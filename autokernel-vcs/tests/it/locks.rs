//! Git locks: bounded waits, stale locks (the in-repo case of `tests/cases/git/` always,
//! the shared `../shared/cases/git/stale_lock.sh` when present), a kill in the middle of a
//! commit.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use autokernel_core::{Decision, ExperimentDraft, StoreError, VersionStore};
use autokernel_vcs::GixStore;

use crate::support::*;

fn age(path: &std::path::Path, by: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - by).unwrap();
}

/// Log lines captured from `tracing` while `f` runs.
fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// Runs the case `script` to build the workspace of `fx`, and checks that it left `locks`
/// (paths relative to the workspace).
fn stale_lock_repo(fx: &Fixture, script: &Path, locks: &[&str]) -> PathBuf {
    let ws = fx.ws();
    let out = std::process::Command::new("sh")
        .arg(script)
        .arg(&ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for lock in locks {
        assert!(
            ws.join(lock).exists(),
            "{lock} not made by {}",
            script.display()
        );
    }
    ws
}

/// Young locks left by a killed writer: the open fails within about the 0.5 s timeout
/// (not before it, never hanging) with `Locked`, naming one of `locks` and its age (0 s:
/// just made), and removes none of them.
fn check_young_locks_fail_in_bounded_time(script: &Path, locks: &[&str]) {
    let fx = Fixture::new();
    let ws = stale_lock_repo(&fx, script, locks);
    let t0 = Instant::now();
    let err = GixStore::open(&ws, options("s")).unwrap_err();
    let waited = t0.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert!(
        waited >= Duration::from_millis(450),
        "gave up before the timeout: {waited:?}"
    );
    let StoreError::Locked { path, age_s, .. } = &err else {
        panic!("expected Locked, got {err:?}");
    };
    assert!(
        locks.iter().any(|l| path.ends_with(l)),
        "{} is none of {locks:?}",
        path.display()
    );
    assert!(*age_s < 5, "{age_s}");
    let name = path.file_name().unwrap().to_str().unwrap();
    let text = err.to_string();
    assert!(
        text.contains(name) && text.contains("age 0 s") && text.contains("rm "),
        "{text}"
    );
    for lock in locks {
        assert!(
            ws.join(lock).exists(),
            "a young lock ({lock}) is never removed"
        );
    }
}

/// The same locks aged an hour (older than the timeout, no live owner): all removed at
/// open, each with its age and a WARN line, and the run then commits on a clean tree.
async fn check_old_locks_are_removed_with_a_warning(script: &Path, locks: &[&str]) {
    let fx = Fixture::new();
    let ws = stale_lock_repo(&fx, script, locks);
    for lock in locks {
        age(&ws.join(lock), Duration::from_secs(3600));
    }
    let (store, logs) = capture_logs(|| GixStore::open(&ws, options("s")));
    let mut store = store.unwrap();
    let mut removed: Vec<(String, bool)> = store
        .open_report()
        .removed_locks
        .iter()
        .map(|r| {
            let rel = r.path.strip_prefix(ws.canonicalize().unwrap()).unwrap();
            (rel.display().to_string(), r.age_s >= 3600)
        })
        .collect();
    removed.sort();
    let mut expected: Vec<(String, bool)> = locks.iter().map(|l| (l.to_string(), true)).collect();
    expected.sort();
    assert_eq!(removed, expected);
    assert!(
        logs.contains("WARN") && logs.contains("removed a stale git lock"),
        "{logs}"
    );
    for lock in locks {
        let name = Path::new(lock).file_name().unwrap().to_str().unwrap();
        assert!(logs.contains(name), "{name} not in {logs}");
        assert!(!ws.join(lock).exists(), "{lock} still there");
    }
    let c1 = experiment(&mut store, 1, "t", true).await;
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c1.0);
    assert_clean(&ws);
}

/// The in-repo case: HEAD.lock, index.lock and the `trunk` branch's ref lock.
const KILLED_WRITER_LOCKS: [&str; 3] = [
    ".git/HEAD.lock",
    ".git/index.lock",
    ".git/refs/heads/trunk.lock",
];

fn killed_writer_script() -> PathBuf {
    cases_dir("git").join("killed_writer_left_head_index_and_branch_locks.sh")
}

#[test]
fn killed_writer_young_locks_fail_in_bounded_time_naming_path_and_age() {
    check_young_locks_fail_in_bounded_time(&killed_writer_script(), &KILLED_WRITER_LOCKS);
}

#[tokio::test]
async fn killed_writer_old_locks_without_a_live_owner_are_removed_with_a_warning() {
    check_old_locks_are_removed_with_a_warning(&killed_writer_script(), &KILLED_WRITER_LOCKS).await;
}

/// Every file in tests/cases/git/ is listed in its README.
#[test]
fn every_in_repo_git_case_is_listed_in_the_readme() {
    let dir = cases_dir("git");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "README.md" {
            assert!(readme.contains(&format!("`{name}`")), "{name} not listed");
        }
    }
}

/// The shared case: `git/stale_lock.sh` leaves index.lock and the `main` branch's lock.
const SHARED_STALE_LOCKS: [&str; 2] = [".git/index.lock", ".git/refs/heads/main.lock"];

#[test]
fn shared_stale_lock_young_locks_fail_in_bounded_time_naming_path_and_age() {
    let Some(dir) = shared_cases_dir("git", "shared_stale_lock_young") else {
        return;
    };
    check_young_locks_fail_in_bounded_time(&dir.join("stale_lock.sh"), &SHARED_STALE_LOCKS);
}

#[tokio::test]
async fn shared_stale_lock_old_locks_without_a_live_owner_are_removed_with_a_warning() {
    let Some(dir) = shared_cases_dir("git", "shared_stale_lock_old") else {
        return;
    };
    check_old_locks_are_removed_with_a_warning(&dir.join("stale_lock.sh"), &SHARED_STALE_LOCKS)
        .await;
}

#[tokio::test]
async fn a_lock_taken_during_the_run_fails_the_write_in_bounded_time_and_changes_nothing() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("held");
    experiment(&mut store, 1, "t", true).await;
    let c2 = experiment(&mut store, 2, "u", true).await;
    // a commit to a target the branch has (t) and to a new one (v)
    for id in ["t", "v"] {
        let t = target(id);
        let draft = ExperimentDraft {
            experiment: 3,
            target: &t,
            description: "blocked",
            agent: "scripted",
            source: "new\n",
        };
        for lock in [".git/index.lock", ".git/refs/heads/autokernel/held.lock"] {
            std::fs::write(ws.join(lock), "").unwrap();
            let t0 = Instant::now();
            let err = store.commit(&draft).await.unwrap_err();
            assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
            let StoreError::Locked { path, .. } = &err else {
                panic!("expected Locked for {lock}, got {err:?}");
            };
            assert!(path.ends_with(lock), "{} vs {lock}", path.display());
            // the work tree still holds the kept kernels, the branch did not move
            assert_eq!(
                std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
                source(1)
            );
            assert_eq!(
                std::fs::read_to_string(ws.join("targets/u/kernel.py")).unwrap(),
                source(2)
            );
            assert!(!ws.join("targets/v").exists());
            assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c2.0);
            std::fs::remove_file(ws.join(lock)).unwrap();
        }
    }
    assert!(!ws.join(".autokernel/pending-write").exists());
    assert_clean(&ws);
}

#[tokio::test]
async fn a_kill_during_a_commit_is_recovered_at_reopen() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("kill");
    let c1 = experiment(&mut store, 1, "t", true).await;
    drop(store);
    // what a process killed inside `commit` leaves: its pid file, the write journal, the
    // new kernel.py, git's index lock and a half-written loose object
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    std::fs::write(ws.join(".autokernel/owner.pid"), format!("{dead}\n")).unwrap();
    std::fs::write(ws.join(".autokernel/pending-write"), "targets/t\n").unwrap();
    std::fs::write(ws.join("targets/t/kernel.py"), "half-way experiment 2\n").unwrap();
    std::fs::write(ws.join("targets/t/kernel_utils.py"), "stray\n").unwrap();
    std::fs::write(ws.join(".git/index.lock"), "DIRC partial").unwrap();
    age(&ws.join(".git/index.lock"), Duration::from_secs(60));
    std::fs::create_dir_all(ws.join(".git/objects/4b")).unwrap();
    std::fs::write(
        ws.join(".git/objects/4b/tmp_obj_kX3e9Q"),
        [0x78, 0x01, 0x2b, 0x49],
    )
    .unwrap();

    let (store, logs) = capture_logs(|| GixStore::open(&ws, options("kill")));
    let mut store = store.unwrap();
    let report = store.open_report().clone();
    assert_eq!(report.previous_dead_owner, Some(dead as i32));
    assert!(report.recovered_interrupted_write);
    assert!(report.resumed);
    assert_eq!(report.removed_locks.len(), 1);
    assert!(logs.contains("removed a stale git lock"), "{logs}");
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        source(1)
    );
    assert!(!ws.join("targets/t/kernel_utils.py").exists());
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c1.0);
    assert_clean(&ws);
    // and the run goes on
    let c2 = experiment(&mut store, 2, "t", true).await;
    assert_eq!(
        git_lines(&ws, &["log", "--format=%H"]),
        vec![c2.0.clone(), c1.0]
    );
    assert_eq!(
        git(
            &ws,
            &["cat-file", "-p", &format!("{}:targets/t/kernel.py", c2.0)]
        ),
        source(2)
    );
    store
        .revert(&record(2, "t", &c2, Decision::Revert))
        .await
        .unwrap();
    assert_clean(&ws);
}
