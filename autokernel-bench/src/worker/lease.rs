//! The GPU lease (issue 36): while a measurement is taken, no other worker of this user runs
//! work on the GPU. Two processes' contexts on one GPU are time-sliced by the driver, so a
//! spare worker starting CUDA and compiling its warm-up kernel, or the reference worker
//! timing PyTorch, while another worker times a kernel, stretches that kernel's events by
//! whole time slices (docs/bench.md, "The GPU lease"; the figures in docs/benchmarks.md).
//!
//! The lease is an exclusive `flock` on one file, `$TMPDIR/autokernel-<uid>/gpu/lease`. The
//! parent opens the file anew for each worker it launches ([`LeaseFile::open`]), so that each
//! worker has an open file description of its own (a `flock` belongs to the description: two
//! processes sharing one would never exclude each other), and the worker inherits that fd
//! alone, as it inherits its payload area. Workers take it around their GPU work that must
//! not overlap a measurement: a measurement itself ([`acquire`], from the timed loop), and a
//! fresh worker's first CUDA work (`harness.gpu_lease`, in Python, around the warm-up
//! kernel). A worker that dies releases it with its last fd; a worker that hangs holding it
//! is killed at its request's deadline. Every `autokernel` process of the user (two runs on
//! one GPU) shares the file, and so the rule.
//!
//! On the CPU no worker gets the fd: the interpreter's timings are not representative, and
//! tests running side by side would wait on each other for nothing.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;
use std::time::Instant;

use crate::protocol::env;

/// The parent's handle on the lease file, opened for one worker.
pub(crate) struct LeaseFile {
    file: File,
}

impl LeaseFile {
    /// Opens (creating it where missing, mode 0600) the lease file in a private folder of
    /// the user's, close-on-exec: [`LeaseFile::inherit_in_child`] hands it to one child.
    ///
    /// # Errors
    /// The folder cannot be made ([`crate::private_temp_dir`]'s message) or the file opened.
    pub(crate) fn open() -> Result<LeaseFile, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = crate::private_temp_dir("gpu")?;
        let path = dir.join("lease");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("cannot open the GPU lease `{}`: {e}", path.display()))?;
        Ok(LeaseFile { file })
    }

    /// The fd's number, the same in the child that inherits it.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The lease fd this worker inherited, made close-on-exec (nothing the worker starts
/// inherits it); `None` without one (on the CPU, a worker started by hand).
fn inherited() -> Option<RawFd> {
    static FD: OnceLock<Option<RawFd>> = OnceLock::new();
    *FD.get_or_init(|| {
        let fd: RawFd = std::env::var(env::GPU_LEASE_FD).ok()?.parse().ok()?;
        // SAFETY: fcntl with integer arguments on an fd number; a closed one fails.
        (unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } >= 0).then_some(fd)
    })
}

/// The lease, held until dropped.
pub(crate) struct Lease {
    fd: Option<RawFd>,
    /// How long taking it waited for another worker, in milliseconds.
    pub waited_ms: f64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(fd) = self.fd {
            // SAFETY: flock on an fd this process keeps open for its life.
            unsafe { libc::flock(fd, libc::LOCK_UN) };
        }
    }
}

impl Lease {
    /// A lease that excludes nobody (on the CPU).
    pub(crate) fn none() -> Lease {
        Lease {
            fd: None,
            waited_ms: 0.0,
        }
    }
}

/// Takes the lease this worker inherited, waiting while another worker holds it; without
/// one, a lease that excludes nobody. A lock that cannot be taken (the fd closed by a
/// candidate) is taken as none: what it costs is that candidate's own quiet.
pub(crate) fn acquire() -> Lease {
    let t0 = Instant::now();
    let fd = inherited().filter(|&fd| lock(fd));
    Lease {
        fd,
        waited_ms: t0.elapsed().as_secs_f64() * 1e3,
    }
}

/// An exclusive `flock` on `fd`, retried when a signal interrupts the wait.
fn lock(fd: RawFd) -> bool {
    loop {
        // SAFETY: flock with integer arguments.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
            return true;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// A handle on the lease file at `path` with an open file description of its own, as each
/// worker has (for tests).
#[cfg(test)]
fn reopen(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Takes `file`'s lock without waiting: whether it was free (for tests).
#[cfg(test)]
fn try_lock(file: &File) -> bool {
    // SAFETY: flock with integer arguments on an open fd.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_workers_descriptions_exclude_each_other_and_a_drop_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lease");
        std::fs::write(&path, b"").unwrap();
        // what two workers hold: one open file description each
        let first = reopen(&path);
        let second = reopen(&path);
        assert!(try_lock(&first), "a free lease is taken");
        assert!(
            !try_lock(&second),
            "a held lease excludes another description"
        );
        let lease = Lease {
            fd: Some(first.as_raw_fd()),
            waited_ms: 0.0,
        };
        drop(lease);
        assert!(try_lock(&second), "dropping the lease frees it");
    }

    #[test]
    fn a_worker_without_the_fd_excludes_nobody() {
        // the test process was not given one
        if std::env::var_os(env::GPU_LEASE_FD).is_none() {
            let lease = acquire();
            assert!(lease.fd.is_none());
        }
    }
}
