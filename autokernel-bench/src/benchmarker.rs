//! [`PyWorkerBenchmarker`]: the default [`Benchmarker`], a [`Worker`] judging kernel files.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use autokernel_core::{
    BenchError, BenchRequest, BenchResult, Benchmarker, CompareRequest, Comparison, Correctness,
    KernelKind,
};
use sha2::{Digest, Sha256};

use crate::protocol::{BenchJob, CompareJob, ReplyBody, Request};
use crate::{Worker, WorkerError, WorkerOptions};

/// The default [`Benchmarker`]: every request goes to one warm [`Worker`] (started on the
/// first request, restarted after anything a candidate does to it). Cheap to clone.
#[derive(Debug, Clone)]
pub struct PyWorkerBenchmarker {
    worker: Arc<Worker>,
}

impl PyWorkerBenchmarker {
    /// A benchmarker with its own worker, started lazily.
    pub fn new(options: WorkerOptions) -> Self {
        PyWorkerBenchmarker {
            worker: Arc::new(Worker::new(options)),
        }
    }

    /// A benchmarker sharing an existing worker (e.g. with the profiler).
    pub fn with_worker(worker: Arc<Worker>) -> Self {
        PyWorkerBenchmarker { worker }
    }

    /// The worker, for [`Worker::call_script`] or [`Worker::status`].
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }
}

/// The `KERNEL_KIND = "..."` literal of a kernel.py source, when it is written as one
/// (a line `KERNEL_KIND = "softmax"` or with single quotes); `None` otherwise, or when the
/// name is not a kind. The worker's load stage is the authority on a kernel's kind; this
/// reads it without Python (to label a result when the worker died before it could report
/// the kind, or to plan a `tune` target).
pub fn declared_kind(source: &str) -> Option<KernelKind> {
    source.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("KERNEL_KIND")?;
        let rest = rest.trim_start().strip_prefix('=')?.trim();
        let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let inner = &rest[1..];
        let end = inner.find(quote)?;
        inner[..end].parse().ok()
    })
}

#[async_trait]
impl Benchmarker for PyWorkerBenchmarker {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        let path =
            std::path::absolute(&request.kernel_path).map_err(|source| BenchError::KernelFile {
                path: request.kernel_path.clone(),
                source,
            })?;
        let bytes = std::fs::read(&path).map_err(|source| BenchError::KernelFile {
            path: request.kernel_path.clone(),
            source,
        })?;
        let sha = format!("{:x}", Sha256::digest(&bytes));
        let copy = PrivateCopy::of(&path, &bytes)?;
        let job = BenchJob {
            kernel_path: copy.path.clone(),
            kind: request.kind.map(|k| k.name().to_string()),
            extra_shapes: request.extra_shapes.clone(),
            timing: request.timing.clone(),
            dtypes: request.dtypes.clone(),
            quick: request.quick,
            time_compiled: request.time_compiled,
            gpu_bandwidth_gb_s: self.worker.options().gpu_bandwidth_gb_s,
            layout: request.layout,
            params: request.params.clone(),
        };
        let reply = self
            .worker
            .request(request.device, Request::Bench(job), request.timeout)
            .await;
        let verdict = match reply {
            Ok(ReplyBody::Ok { value }) => {
                let mut result: BenchResult =
                    serde_json::from_value(value).map_err(|e| BenchError::Worker {
                        message: format!("unreadable bench result: {e}"),
                    })?;
                if result.source_sha256.is_empty() {
                    result.source_sha256 = sha;
                }
                if let Some(reason) = copy.changed(&path, &bytes) {
                    result.correctness = Correctness::Tamper { reason };
                    result.metrics = None;
                }
                return Ok(result);
            }
            Ok(ReplyBody::Error { message }) => return Err(BenchError::Request(message)),
            Ok(ReplyBody::PythonError { message, traceback }) => {
                return Err(BenchError::Worker {
                    message: format!("the harness raised: {message}\n{traceback}"),
                })
            }
            Err(WorkerError::Timeout {
                limit_s,
                stderr_tail,
            }) => Correctness::Timeout {
                reason: format!(
                    "no verdict within {limit_s} s; the worker was killed and restarts on the next request{}",
                    last_stage(&stderr_tail)
                ),
            },
            Err(WorkerError::Crashed {
                status,
                stderr_tail,
            }) => Correctness::Crash {
                reason: format!("the worker died ({status}){}\n{stderr_tail}", last_stage(&stderr_tail)),
            },
            Err(WorkerError::Protocol { message }) => Correctness::Tamper {
                reason: format!("the reply channel was written to by something other than the harness: {message}"),
            },
            Err(e) => return Err(e.into()),
        };
        // the worker died before reporting the kind: the request's, else the file's literal
        let kind = request
            .kind
            .or_else(|| declared_kind(&String::from_utf8_lossy(&bytes)));
        let device = match self.worker.device_name().await {
            Some((d, name)) if d == "cuda" => format!("cuda ({name})"),
            _ => match request.device {
                autokernel_core::Device::Cuda => "cuda".to_string(),
                _ => "cpu".to_string(),
            },
        };
        Ok(BenchResult {
            kind,
            correctness: verdict,
            stages: Vec::new(),
            metrics: None,
            timing_representative: device.starts_with("cuda"),
            device,
            source_sha256: sha,
        })
    }

    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        let abs = |p: &Path| {
            std::path::absolute(p).map_err(|source| BenchError::KernelFile {
                path: p.to_path_buf(),
                source,
            })
        };
        // each kernel runs from a copy of its own: one that deletes or rewrites its file
        // harms neither the other nor a later comparison
        let mut copies = Vec::new();
        for p in [&request.incumbent, &request.candidate] {
            let bytes = std::fs::read(p).map_err(|source| BenchError::KernelFile {
                path: p.clone(),
                source,
            })?;
            copies.push(PrivateCopy::of(&abs(p)?, &bytes)?);
        }
        let job = CompareJob {
            incumbent: copies[0].path.clone(),
            candidate: copies[1].path.clone(),
            kind: request.kind.name().to_string(),
            timing: request.timing.clone(),
            repetitions: request.repetitions,
            layout: request.layout,
            params: request.params.clone(),
        };
        match self
            .worker
            .request(request.device, Request::Compare(job), request.timeout)
            .await?
        {
            ReplyBody::Ok { value } => {
                serde_json::from_value(value).map_err(|e| BenchError::Worker {
                    message: format!("unreadable comparison: {e}"),
                })
            }
            ReplyBody::Error { message } => Err(BenchError::Request(message)),
            ReplyBody::PythonError { message, traceback } => Err(BenchError::Worker {
                message: format!("{message}\n{traceback}"),
            }),
        }
    }
}

/// A candidate's bytes in a private folder of their own (mode 0700, removed on drop), under
/// the file's own name: the worker loads this copy, so a kernel that deletes or rewrites
/// its file (`__file__`) cannot break a later bench or head-to-head of the original.
struct PrivateCopy {
    /// The copy (`<private folder>/<file name>`).
    path: std::path::PathBuf,
    /// `<private folder>/.lock`, locked (`flock`) while the copy lives: a sweep removes
    /// only folders whose lock it can take, i.e. whose owner is gone, in any pid namespace.
    _lock: std::fs::File,
    _dir: tempfile::TempDir,
}

impl PrivateCopy {
    /// Writes `bytes`, read from `original`, to a fresh private folder.
    fn of(original: &Path, bytes: &[u8]) -> Result<PrivateCopy, BenchError> {
        use std::os::unix::fs::PermissionsExt;
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(|| {
            sweep_stale_copies(&std::env::temp_dir());
        });
        // tempfile creates folders with the umask's mode (0755) unless told
        let dir = tempfile::Builder::new()
            .prefix(&format!("{COPY_PREFIX}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| BenchError::KernelFile {
                path: original.to_path_buf(),
                source,
            })?;
        let name = original
            .file_name()
            .unwrap_or_else(|| std::ffi::OsStr::new("kernel.py"));
        let io = |source| BenchError::KernelFile {
            path: original.to_path_buf(),
            source,
        };
        let lock = std::fs::File::create(dir.path().join(LOCK_FILE)).map_err(io)?;
        if !try_lock(&lock) {
            return Err(io(std::io::Error::last_os_error()));
        }
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).map_err(io)?;
        Ok(PrivateCopy {
            path,
            _lock: lock,
            _dir: dir,
        })
    }

    /// Why the candidate is TAMPER when it removed or rewrote its own file (the copy it was
    /// loaded from, or the original): what was judged must be what is recorded.
    fn changed(&self, original: &Path, bytes: &[u8]) -> Option<String> {
        [
            (&self.path, "the copy it was loaded from"),
            (&original.to_path_buf(), "the kernel file"),
        ]
        .into_iter()
        .find_map(|(p, what)| match std::fs::read(p) {
            Ok(now) if now == bytes => None,
            Ok(_) => Some(format!(
                "the candidate rewrote {what} `{}` while it was judged",
                p.display()
            )),
            Err(_) => Some(format!(
                "the candidate removed {what} `{}` while it was judged",
                p.display()
            )),
        })
    }
}

/// The start of a private copy's folder name, followed by the creating process's pid and a
/// random tail: the pid lets a later run tell a folder whose owner is gone.
const COPY_PREFIX: &str = "autokernel-candidate-";

/// Removes the private-copy folders under `tmp` whose creating process no longer exists: a
/// run killed with SIGKILL never drops its copies. A folder goes only when its pid is not
/// a process here and its lock file can be locked (its owner may live in another pid
/// namespace sharing `tmp`); folders of other users, of other names or without a lock file
/// are left alone, and one that cannot be removed is skipped. Returns how many were
/// removed.
fn sweep_stale_copies(tmp: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(COPY_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // symlink_metadata: a link planted under the prefix is not followed
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !ours || process_exists(pid) {
            continue;
        }
        // the pid may be of another pid namespace sharing this folder: the lock decides
        let unlocked =
            std::fs::File::open(entry.path().join(LOCK_FILE)).is_ok_and(|f| try_lock(&f));
        if unlocked && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The lock file in a private copy's folder.
const LOCK_FILE: &str = ".lock";

/// Takes an exclusive `flock` on `file` without waiting; whether it got it. The kernel
/// drops it when the last fd of that open file closes, a SIGKILL included.
fn try_lock(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd the File owns
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Whether a process with this pid exists here (signal 0 checks without sending; EPERM
/// means it exists under another user).
fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing
    let sent = unsafe { libc::kill(pid, 0) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// `; it was in stage X` from the worker's `stage …` log lines.
fn last_stage(tail: &str) -> String {
    tail.lines()
        .rev()
        .find_map(|l| l.strip_prefix("autokernel-worker: stage "))
        .map(|s| format!("; last stage started: {s}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_kind_reads_a_literal_assignment() {
        assert_eq!(
            declared_kind("import torch\nKERNEL_KIND = \"softmax\"\n"),
            Some(KernelKind::Softmax)
        );
        assert_eq!(
            declared_kind("KERNEL_KIND='matmul'"),
            Some(KernelKind::Matmul)
        );
        assert_eq!(declared_kind("KERNEL_KIND = kind_from_somewhere()"), None);
        assert_eq!(declared_kind("KERNEL_KINDS = 'x'"), None);
    }

    #[test]
    fn last_stage_comes_from_the_worker_log() {
        let tail = "noise\nautokernel-worker: stage smoke float32 8x128 normal\nautokernel-worker: stage shape_sweep float16 16x256 normal\nTraceback";
        assert_eq!(
            last_stage(tail),
            "; last stage started: shape_sweep float16 16x256 normal"
        );
        assert_eq!(last_stage("nothing"), "");
    }

    #[test]
    fn a_private_copy_lives_in_a_folder_only_its_user_can_enter_and_goes_with_it() {
        use std::os::unix::fs::PermissionsExt;
        let copy =
            PrivateCopy::of(Path::new("/somewhere/kernel.py"), b"KERNEL_KIND = 'x'\n").unwrap();
        assert_eq!(copy.path.file_name().unwrap(), "kernel.py");
        assert_eq!(std::fs::read(&copy.path).unwrap(), b"KERNEL_KIND = 'x'\n");
        let dir = copy.path.parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let name = dir.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with(&format!("{COPY_PREFIX}{}-", std::process::id())),
            "{name}"
        );
        drop(copy);
        assert!(!dir.exists());
    }

    #[test]
    fn the_sweep_removes_only_copies_whose_process_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let folder = |name: &str| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("kernel.py"), "x").unwrap();
            std::fs::File::create(d.join(LOCK_FILE)).unwrap();
            d
        };
        let stale = folder(&format!("{COPY_PREFIX}{gone}-aB3dE9"));
        let live = folder(&format!("{COPY_PREFIX}{}-Zz9Yy8", std::process::id()));
        // a gone pid whose folder is still locked: an owner in another pid namespace
        let elsewhere = folder(&format!("{COPY_PREFIX}{gone}-Qq7Ww6"));
        let held = std::fs::File::open(elsewhere.join(LOCK_FILE)).unwrap();
        assert!(try_lock(&held));
        let older_format = folder(&format!("{COPY_PREFIX}Fp1XsI"));
        let other = folder(&format!("other-{gone}-aB3dE9"));
        assert_eq!(sweep_stale_copies(tmp.path()), 1);
        assert!(!stale.exists());
        assert!(live.join("kernel.py").exists());
        assert!(elsewhere.join("kernel.py").exists());
        assert!(older_format.exists());
        assert!(other.exists());
        assert_eq!(sweep_stale_copies(tmp.path()), 0);
        drop(held);
        assert_eq!(sweep_stale_copies(tmp.path()), 1);
        assert!(!elsewhere.exists());
    }
}
