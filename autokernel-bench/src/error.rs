//! Errors from starting or talking to the bench worker.

use std::path::PathBuf;

use autokernel_core::BenchError;

/// Errors from starting or talking to the bench worker. A candidate that fails, crashes or
/// hangs is a verdict, not one of these, except through [`crate::Worker::call_script`],
/// which has no verdicts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// No interpreter could be found.
    #[error("no python interpreter found; tried:\n  {tried}\nhint: pass `--python` a path or a command name on PATH, set AUTOKERNEL_PYTHON, or activate a virtualenv")]
    PythonNotFound {
        /// What was tried, in order, one `` `path`: why it was passed over `` per line.
        tried: String,
    },
    /// The interpreter the user named (`--python`, or `AUTOKERNEL_PYTHON` when no
    /// `--python` is given) cannot be used: a path that is not an executable file, or a
    /// name found in no folder of `PATH`. No other interpreter is tried in its place.
    #[error("python `{path}` (from {origin}) {reason}\nhint: point {origin} at an interpreter with torch, triton and numpy: a path such as `.venv/bin/python`, or a command name on PATH such as `python3`")]
    PythonMissing {
        /// The value given: a path, or a name looked up on `PATH`.
        path: PathBuf,
        /// Where it was given: `--python` or `AUTOKERNEL_PYTHON`.
        origin: &'static str,
        /// Why it was refused, e.g. `does not exist`, or `is not on PATH; tried:` with one
        /// line per folder.
        reason: String,
    },
    /// The interpreter could not be run to ask its version.
    #[error("cannot run python at `{path}`: {message}")]
    PythonProbe {
        /// The interpreter.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The chosen interpreter's minor version differs from the linked libpython.
    #[error("python at `{path}` is {found}, but this build links libpython {linked}\nhint: pass `--python` a {linked} interpreter, or rebuild with PYO3_PYTHON set to yours")]
    PythonMismatch {
        /// The interpreter.
        path: PathBuf,
        /// Its `major.minor`.
        found: String,
        /// The linked libpython's `major.minor`.
        linked: String,
    },
    /// torch, triton or numpy cannot be imported by the interpreter.
    #[error("python at `{path}` lacks {}\nhint: run `{} -m pip install -r python/requirements.txt`", missing.join(", "), path.display())]
    MissingPackages {
        /// The interpreter.
        path: PathBuf,
        /// Module names that were not found.
        missing: Vec<String>,
    },
    /// The worker program could not be started.
    #[error("cannot start the bench worker `{exe}`")]
    Spawn {
        /// The program.
        exe: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The worker started but did not get ready (Python failed to initialise, the harness
    /// failed to import, CUDA was asked for and is absent).
    #[error("bench worker failed to start: {message}{}", tail_suffix(stderr_tail))]
    Startup {
        /// What the worker said.
        message: String,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// No reply within the deadline; the worker's process group was killed.
    #[error(
        "bench worker gave no reply within {limit_s} s (killed; it restarts on the next request){}",
        tail_suffix(stderr_tail)
    )]
    Timeout {
        /// The limit, in seconds.
        limit_s: f64,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// The worker died while handling a request.
    #[error("bench worker died ({status}){}", tail_suffix(stderr_tail))]
    Crashed {
        /// Exit status or signal.
        status: String,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// Python code raised.
    #[error("python raised: {message}")]
    Python {
        /// `Type: message`.
        message: String,
        /// The formatted traceback.
        traceback: String,
    },
    /// The worker sent something that is not a reply to the request (a candidate may have
    /// written to the reply channel); the worker was killed.
    #[error("bench worker protocol error: {message}")]
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// Reading or writing the worker's pipes failed.
    #[error("i/o with the bench worker failed")]
    Io(#[from] std::io::Error),
}

fn tail_suffix(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("\nworker stderr (last lines):\n{tail}")
    }
}

impl WorkerError {
    /// Whether the error is about the Python environment (exit code 2, fix the setup).
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            WorkerError::PythonNotFound { .. }
                | WorkerError::PythonMissing { .. }
                | WorkerError::PythonProbe { .. }
                | WorkerError::PythonMismatch { .. }
                | WorkerError::MissingPackages { .. }
                | WorkerError::Startup { .. }
        )
    }
}

impl From<WorkerError> for BenchError {
    fn from(e: WorkerError) -> Self {
        if e.is_environment() {
            BenchError::Environment {
                message: e.to_string(),
            }
        } else {
            BenchError::Worker {
                message: e.to_string(),
            }
        }
    }
}
