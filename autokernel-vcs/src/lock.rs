//! Who owns the workspace (a pid file) and git's lock files (bounded waits, stale locks).
//!
//! Git serialises writers with `<file>.lock` files created next to what they replace
//! (`index.lock`, `refs/heads/<branch>.lock`). A writer that is killed leaves its lock behind,
//! and every later writer fails (or, with a naive retry, waits forever). The store therefore
//! waits at most [`crate::StoreOptions::lock_timeout`] for a lock, and at open removes a lock
//! only when it is provably stale: no live autokernel process owns the workspace (the pid
//! file `.autokernel/owner.pid` names a dead process or is absent) and the lock is older than
//! the timeout.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use autokernel_core::StoreError;

/// The workspace-relative folder of the store's private files (excluded from git).
pub const SCRATCH_DIR: &str = ".autokernel";
/// The pid file naming the process that owns the workspace, inside [`SCRATCH_DIR`].
pub const OWNER_PID_FILE: &str = "owner.pid";

/// A lock file removed at open because it was provably stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedLock {
    /// The lock file.
    pub path: PathBuf,
    /// Its age when removed, in seconds.
    pub age_s: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether process `pid` exists (it may belong to another user: `EPERM` counts as alive).
pub(crate) fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The claim of this process on a workspace: `.autokernel/owner.pid` holding our pid,
/// removed when dropped.
#[derive(Debug)]
pub(crate) struct OwnerPid {
    path: PathBuf,
    /// The pid of a dead earlier owner, if its pid file was still there.
    pub(crate) previous_dead_owner: Option<i32>,
}

impl OwnerPid {
    /// Claims `workspace` for this process.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a live process (this one included, through another
    /// store) owns it; [`StoreError::Io`] when the pid file cannot be written.
    pub(crate) fn claim(workspace: &Path) -> Result<OwnerPid, StoreError> {
        let dir = workspace.join(SCRATCH_DIR);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let path = dir.join(OWNER_PID_FILE);
        let me = std::process::id() as i32;
        let mut previous_dead_owner = None;
        if let Ok(text) = std::fs::read_to_string(&path) {
            match text.trim().parse::<i32>() {
                Ok(pid) if pid == me => {
                    return Err(StoreError::Refused {
                        message: format!(
                            "workspace `{}` is already open in this process (pid {pid})",
                            workspace.display()
                        ),
                        hint: "drop the other GixStore before opening the workspace again".into(),
                    })
                }
                Ok(pid) if pid_alive(pid) => {
                    return Err(StoreError::Refused {
                        message: format!(
                            "workspace `{}` is owned by process {pid}, which is still running \
                             (pid file `{}`)",
                            workspace.display(),
                            path.display()
                        ),
                        hint: format!(
                            "wait for it to finish or stop it (`kill {pid}`); if {pid} is not an \
                             autokernel process, delete `{}`",
                            path.display()
                        ),
                    })
                }
                Ok(pid) => {
                    tracing::info!(pid, path = %path.display(), "previous owner of the workspace is gone");
                    previous_dead_owner = Some(pid);
                }
                Err(_) => {
                    tracing::warn!(path = %path.display(), "ignoring unreadable pid file");
                }
            }
        }
        // write-then-rename so a reader never sees a half-written pid
        let tmp = dir.join(format!("{OWNER_PID_FILE}.{me}.tmp"));
        std::fs::write(&tmp, format!("{me}\n")).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
        Ok(OwnerPid {
            path,
            previous_dead_owner,
        })
    }
}

impl Drop for OwnerPid {
    fn drop(&mut self) {
        let me = std::process::id().to_string();
        let ours = std::fs::read_to_string(&self.path).is_ok_and(|t| t.trim() == me);
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove pid file");
            }
        }
    }
}

/// The age of `path` from its modification time, zero when it is in the future.
pub(crate) fn age_of(path: &Path) -> Option<Duration> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    Some(
        SystemTime::now()
            .duration_since(modified)
            .unwrap_or(Duration::ZERO),
    )
}

/// Every `*.lock` file git may leave in `git_dir`: at its top level (`index.lock`,
/// `HEAD.lock`, `packed-refs.lock`, `config.lock`) and anywhere under `refs/`.
pub(crate) fn find_lock_files(git_dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, recurse: bool, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && recurse {
                walk(&path, true, out);
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "lock") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(git_dir, false, &mut out);
    walk(&git_dir.join("refs"), true, &mut out);
    out.sort();
    out
}

/// `path` with `.lock` appended, as git names the lock of a file.
pub(crate) fn with_lock_suffix(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The error for a lock that is still held.
pub(crate) fn locked(path: PathBuf, timeout: Duration) -> StoreError {
    let age_s = age_of(&path).map(|d| d.as_secs()).unwrap_or(0);
    StoreError::Locked {
        advice: format!(
            "waited {:.1} s; if no git or autokernel process is using the repository, remove \
             it (`rm {}`) and start again",
            timeout.as_secs_f64(),
            path.display()
        ),
        path,
        age_s,
    }
}

/// Checks the repository's lock files once, at open, after this process has claimed the
/// workspace (so no live autokernel process owns it).
///
/// A lock older than `timeout` is stale: it is removed, with a warning. A younger one may
/// belong to a running `git` command: it is given until `timeout` to disappear.
///
/// # Errors
/// [`StoreError::Locked`] naming the lock and its age when a young lock outlives the wait;
/// [`StoreError::Io`] when a stale lock cannot be removed.
pub(crate) fn clear_stale_locks(
    git_dir: &Path,
    timeout: Duration,
) -> Result<Vec<RemovedLock>, StoreError> {
    let mut removed = Vec::new();
    let deadline = Instant::now() + timeout;
    for path in find_lock_files(git_dir) {
        let Some(age) = age_of(&path) else { continue };
        if age >= timeout {
            std::fs::remove_file(&path).map_err(io_err(&path))?;
            tracing::warn!(
                path = %path.display(),
                age_s = age.as_secs(),
                "removed a stale git lock: older than the {:.1} s lock timeout and no live autokernel process owns the workspace",
                timeout.as_secs_f64()
            );
            removed.push(RemovedLock {
                path,
                age_s: age.as_secs(),
            });
            continue;
        }
        let mut pause = Duration::from_millis(5);
        while path.exists() {
            let now = Instant::now();
            if now >= deadline {
                return Err(locked(path, timeout));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
    Ok(removed)
}

/// Takes `index.lock` with a bounded wait; the returned lock file receives the new index.
///
/// # Errors
/// [`StoreError::Locked`] when another writer holds it longer than `timeout`;
/// [`StoreError::Git`] for any other failure.
pub(crate) fn acquire_index_lock(
    repo_path: &Path,
    index_path: &Path,
    timeout: Duration,
    operation: &str,
) -> Result<gix::lock::File, StoreError> {
    gix::lock::File::acquire_to_update_resource(
        index_path,
        gix::lock::acquire::Fail::from(timeout),
        None,
        0,
    )
    .map_err(|e| {
        let lock = with_lock_suffix(index_path);
        if lock.exists() {
            locked(lock, timeout)
        } else {
            StoreError::Git {
                operation: operation.to_string(),
                repo: repo_path.to_path_buf(),
                reference: "index".into(),
                source: format!("cannot lock `{}`: {e}", index_path.display()).into(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!pid_alive(pid));
        assert!(!pid_alive(0));
    }

    #[test]
    fn lock_files_are_found_at_the_top_and_under_refs_only() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path();
        std::fs::create_dir_all(g.join("refs/heads/autokernel")).unwrap();
        std::fs::create_dir_all(g.join("objects/ab")).unwrap();
        for f in [
            "index.lock",
            "refs/heads/autokernel/run.lock",
            "objects/ab/x.lock",
            "refs/heads/main",
        ] {
            std::fs::write(g.join(f), "").unwrap();
        }
        assert_eq!(
            find_lock_files(g),
            vec![
                g.join("index.lock"),
                g.join("refs/heads/autokernel/run.lock")
            ]
        );
    }
}
