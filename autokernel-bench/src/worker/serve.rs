//! The child side: [`serve_worker`] embeds CPython, imports the harness once (torch, triton,
//! the catalogue), then answers JSON-line requests until its stdin closes.
//!
//! The correctness stages are driven from here, in Rust: the harness runs one case at a
//! time and returns float32 numpy copies, which [`crate::judge`] compares. Rust keeps its
//! own references to the harness functions and to the library functions the harness relies
//! on (taken before any candidate loads) and re-checks them by identity after every stage.
//!
//! This process's stderr is the worker's log: the parent keeps its last lines for
//! `CRASH`/`TIMEOUT` reasons. Writing there directly (not through `tracing`) is deliberate:
//! the worker has no subscriber and its stderr is a protocol side channel.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use autokernel_core::{
    lookup_gpu, BenchResult, Comparison, Correctness, DType, KernelKind, Metrics, Shape, ShapeSet,
    Stage, StageReport,
};
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::judge::{self, CaseContext};
use crate::protocol::{env, BenchJob, CompareJob, Envelope, Hello, Reply, ReplyBody, Request};

/// Entry point of the worker process; any binary can host it (the `autokernel` binary's
/// hidden `worker` verb, or a test-only bin). It reads its configuration from environment
/// variables set by [`crate::Worker`] and serves requests on stdin until it closes.
///
/// Exit status: 0 when stdin closed, 0 after a reply that asked for a restart (CUDA error,
/// tampering), 3 when start-up failed (the reason is in the hello line and on stderr).
pub fn serve_worker() -> ExitCode {
    match serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            log(&format!("fatal: {message}"));
            ExitCode::from(3)
        }
    }
}

/// One line on stderr, prefixed so it reads well inside a parent's error message.
fn log(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "autokernel-worker: {line}");
}

/// The reply channel and request channel, moved off fds 1 and 0.
struct Channels {
    replies: File,
    requests: BufReader<File>,
}

fn take_channels() -> Result<Channels, String> {
    // SAFETY: plain POSIX fd calls on fds this process owns; the duplicates are owned by the
    // returned Files from here on and nothing else closes them.
    unsafe {
        let out = libc::dup(1);
        let inp = libc::dup(0);
        if out < 0 || inp < 0 {
            return Err("cannot duplicate stdin/stdout".into());
        }
        libc::fcntl(out, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(inp, libc::F_SETFD, libc::FD_CLOEXEC);
        // Python's prints (fd 1) go to stderr; nothing can read the requests (fd 0).
        if libc::dup2(2, 1) < 0 {
            return Err("cannot point stdout at stderr".into());
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        Ok(Channels {
            replies: File::from_raw_fd(out),
            requests: BufReader::new(File::from_raw_fd(inp)),
        })
    }
}

fn send<T: serde::Serialize>(out: &mut File, value: &T) -> Result<(), String> {
    let mut line = serde_json::to_string(value).map_err(|e| e.to_string())?;
    line.push('\n');
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write a reply: {e}"))
}

/// Ends the worker within half a second of its parent's death, whatever it is doing. A
/// closed stdin says so only between requests, and a kernel that never returns (or a
/// worker living through a SIGTERM that ended its parent) would otherwise run on as an
/// orphan, holding a CPU or the GPU. A thread of its own that needs no GIL: it watches
/// for the parent pid to change (the orphan is adopted by init or a subreaper).
fn exit_with_parent() {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    std::thread::spawn(move || loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        // SAFETY: as above.
        if unsafe { libc::getppid() } != parent {
            log("the parent process is gone: exiting");
            // SAFETY: _exit ends the process at once, without running Python's finalisers
            // (which would wait for the GIL a hung kernel holds).
            unsafe { libc::_exit(0) };
        }
    });
}

/// Lets the worker live through SIGTERM. Its parent decides when it stops (stdin closes, or
/// SIGKILL to its process group on a deadline); a batch system (Slurm, `docker stop`) sends
/// SIGTERM to every process at once, and a worker dying under the experiment in flight,
/// which the parent finishes gracefully, would be logged as that kernel's CRASH. A handler
/// (not SIG_IGN) so that the processes Python starts get the default action back at exec;
/// SA_RESTART so that no read is cut short.
fn outlive_sigterm() {
    extern "C" fn ignore(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe (does nothing).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            log("cannot install the SIGTERM handler: a SIGTERM will end this worker");
        }
    }
}

/// A warning when the libpython this process loaded is not the version of the venv whose
/// interpreter is `python` (its `pyvenv.cfg`; nothing to compare for a python outside a
/// venv). The loader finds libpython by the binary's run-time path: a binary built without
/// it (an embedding program, autokernel-bench's crate docs) can load a system libpython of
/// the same minor version and run the venv's packages on it, which nothing else would say.
fn libpython_mismatch(python: &Path, loaded: pyo3::PythonVersionInfo) -> Option<String> {
    let cfg = python.parent()?.parent()?.join("pyvenv.cfg");
    let venv = venv_version(&std::fs::read_to_string(&cfg).ok()?)?;
    let loaded = format!("{}.{}.{}", loaded.major, loaded.minor, loaded.patch);
    (venv != loaded).then(|| {
        format!(
            "this process runs libpython {loaded}, the venv of `{}` is Python {venv} \
             ({}): link the binary with libpython's run-time path (the autokernel-bench \
             crate documentation, \"Embedding\")",
            python.display(),
            cfg.display()
        )
    })
}

/// The `X.Y.Z` of a `pyvenv.cfg`'s `version` (or `version_info`, `X.Y.Z.final.0`) line.
fn venv_version(cfg: &str) -> Option<String> {
    cfg.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        matches!(key.trim(), "version" | "version_info").then(|| {
            value
                .trim()
                .split('.')
                .take(3)
                .collect::<Vec<_>>()
                .join(".")
        })
    })
}

fn apply_memory_limit() {
    let Some(mb) = std::env::var(env::MEMORY_LIMIT_MB)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let bytes = mb.saturating_mul(1 << 20) as libc::rlim_t;
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit with a valid struct pointer.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    if rc != 0 {
        log(&format!("cannot set RLIMIT_AS to {mb} MB"));
    }
}

/// Writes the embedded Python files to a private per-user cache folder keyed by their
/// content (Triton and importlib need real files), atomically. The folder goes first on
/// `sys.path`, hence private ([`crate::private_temp_dir`]).
fn write_python_files() -> Result<PathBuf, String> {
    let mut h = Sha256::new();
    h.update(crate::HARNESS_PY);
    h.update(crate::CATALOGUE_PY);
    let digest = format!("{:x}", h.finalize());
    let dir = crate::private_temp_dir(&format!("bench-{}", &digest[..12]))?;
    for (name, text) in [
        ("harness.py", crate::HARNESS_PY),
        ("catalogue.py", crate::CATALOGUE_PY),
    ] {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    Ok(dir)
}

fn serve() -> Result<(), String> {
    outlive_sigterm();
    exit_with_parent();
    let mut ch = take_channels()?;
    apply_memory_limit();
    let pid = std::process::id();
    let hello_err = |ch: &mut Channels, message: String| -> Result<(), String> {
        send(
            &mut ch.replies,
            &Hello {
                pid,
                error: Some(message.clone()),
                device: String::new(),
                device_name: String::new(),
                import_s: 0.0,
                warning: None,
            },
        )?;
        Err(message)
    };
    let Some(python) = std::env::var_os(env::PYTHON).map(PathBuf::from) else {
        return hello_err(
            &mut ch,
            format!(
                "{} is not set (the worker is started by autokernel itself)",
                env::PYTHON
            ),
        );
    };
    let device = std::env::var(env::DEVICE).unwrap_or_else(|_| "auto".into());
    let dir = match write_python_files() {
        Ok(d) => d,
        Err(e) => return hello_err(&mut ch, e),
    };
    if let Err(e) = crate::py::init::initialize(&python) {
        return hello_err(&mut ch, e);
    }
    let harness = match Python::attach(|py| Harness::start(py, &dir, &device)) {
        Ok(h) => h,
        Err(e) => return hello_err(&mut ch, e),
    };
    send(
        &mut ch.replies,
        &Hello {
            pid,
            error: None,
            device: harness.device.clone(),
            device_name: harness.device_name.clone(),
            import_s: harness.import_s,
            warning: Python::attach(|py| libpython_mismatch(&python, py.version_info())),
        },
    )?;
    log(&format!(
        "ready: python {}, device {} ({}), imports took {:.1} s",
        python.display(),
        harness.device,
        harness.device_name,
        harness.import_s
    ));

    let mut line = String::new();
    loop {
        line.clear();
        let n = ch
            .requests
            .read_line(&mut line)
            .map_err(|e| format!("cannot read a request: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        let envelope: Envelope = match serde_json::from_str(line.trim()) {
            Ok(e) => e,
            Err(e) => return Err(format!("unreadable request: {e}")),
        };
        let (body, restart) = Python::attach(|py| harness.handle(py, envelope.request));
        send(
            &mut ch.replies,
            &Reply {
                id: envelope.id,
                nonce: envelope.nonce,
                pid,
                restart,
                body,
            },
        )?;
        if restart {
            log("exiting so that the next request gets a fresh process");
            return Ok(());
        }
    }
}

/// What the harness's `load` reports.
#[derive(Deserialize)]
struct LoadMeta {
    ok: bool,
    sha256: String,
    kind: Option<String>,
    message: Option<String>,
    line: Option<u32>,
    #[serde(default)]
    cuda_error: bool,
}

/// What the harness's `run_case` reports besides the arrays.
#[derive(Deserialize)]
struct CaseMeta {
    expected_shape: Vec<usize>,
    expected_dtype: String,
    out_shape: Option<Vec<usize>>,
    out_dtype: Option<String>,
    problems: Vec<Problem>,
    error: Option<CandidateError>,
    note: Option<String>,
}

#[derive(Deserialize)]
struct Problem {
    kind: String,
    message: String,
}

#[derive(Deserialize)]
struct CandidateError {
    message: String,
    line: Option<u32>,
    traceback: String,
    cuda_error: bool,
}

#[derive(Deserialize)]
struct TimingMeta {
    latency_us: f64,
    reference_latency_us: f64,
    compiled_latency_us: Option<f64>,
    compiled_error: Option<String>,
    peak_vram_mb: Option<f64>,
    #[serde(default)]
    config_keys_read: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct CompareMeta {
    incumbent_us: Vec<f64>,
    candidate_us: Vec<f64>,
}

#[derive(Deserialize)]
struct InitMeta {
    device: String,
    device_name: String,
    import_s: f64,
}

/// The imported harness, with Rust's own references to everything it relies on.
struct Harness {
    /// Harness functions, looked up once before any candidate ran.
    funcs: std::collections::HashMap<&'static str, Py<PyAny>>,
    /// (dotted name, object) pairs re-checked by identity after each candidate.
    guards: Vec<(String, Py<PyAny>)>,
    /// Whole namespaces snapshotted before any candidate (see `guarded_namespaces`).
    namespaces: Vec<Namespace>,
    /// Modes and library kernels present before any candidate.
    interposers: Interposers,
    device: String,
    device_name: String,
    import_s: f64,
}

/// A namespace's entries as they were before any candidate ran.
struct Namespace {
    name: String,
    /// The namespace object itself (module, class or dict).
    object: Py<PyAny>,
    /// "callables", "all" or "class" (see `harness.guarded_namespaces`).
    scope: String,
    /// (key, value) of each guarded entry.
    entries: Vec<(String, Py<PyAny>)>,
    /// Number of entries of a class namespace (where a new entry is tampering too).
    len: usize,
}

/// The mapping of a namespace object: a dict as it is, else its `__dict__`.
fn mapping<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if obj.is_instance_of::<pyo3::types::PyDict>() {
        Ok(obj.clone())
    } else {
        obj.getattr("__dict__")
    }
}

impl Namespace {
    fn snapshot(py: Python<'_>, name: &str, scope: &str) -> PyResult<Namespace> {
        let object = resolve_dotted(py, name)?;
        let map = mapping(&object)?;
        let callable = py.import("builtins")?.getattr("callable")?;
        let mut entries = Vec::new();
        let items = map.call_method0("items")?;
        for item in items.try_iter()? {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let Ok(key) = key.extract::<String>() else {
                continue;
            };
            let dunder = key.starts_with("__") && key.ends_with("__");
            let keep = match scope {
                "class" | "all" => scope == "class" || !dunder,
                _ => !dunder && callable.call1((&value,))?.is_truthy()?,
            };
            if keep {
                entries.push((key, value.unbind()));
            }
        }
        Ok(Namespace {
            name: name.to_string(),
            len: map.len()?,
            object: object.unbind(),
            scope: scope.to_string(),
            entries,
        })
    }

    /// `name.key` for every guarded entry replaced or removed (and, for a class, added).
    fn changes(&self, py: Python<'_>) -> Vec<String> {
        let now = match resolve_dotted(py, &self.name) {
            Ok(now) if now.is(&self.object) => now,
            _ => return vec![format!("{} (replaced)", self.name)],
        };
        let Ok(map) = mapping(&now) else {
            return vec![format!("{} (no namespace)", self.name)];
        };
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|(key, value)| match map.get_item(key) {
                Ok(v) => !v.is(value),
                Err(_) => true,
            })
            .map(|(key, _)| format!("{}.{key}", self.name))
            .collect();
        if self.scope == "class" && map.len().map_or(true, |n| n != self.len) {
            out.push(format!("{} (attributes added)", self.name));
        }
        out
    }
}

const FUNCS: [&str; 9] = [
    "status",
    "load",
    "unload",
    "run_case",
    "time_kernel",
    "compare",
    "call_script",
    "describe_exception",
    "guarded_names",
];

/// What a candidate can leave behind to intercept every torch call without rebinding a
/// name: torch function or dispatch modes left active, or kernels registered through
/// `torch.library`. Counted through the guarded (identity-checked) `torch._C` and
/// `torch.library` namespaces; a count this torch cannot give is `None` and not checked.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Interposers {
    function_modes: Option<usize>,
    dispatch_modes: Option<usize>,
    library_impls: Option<usize>,
}

impl Interposers {
    fn count(py: Python<'_>) -> Interposers {
        let call = |helper: &str| {
            resolve_dotted(py, helper)
                .and_then(|f| f.call0())
                .and_then(|n| n.extract::<usize>())
                .ok()
        };
        Interposers {
            function_modes: call("torch._C._len_torch_function_stack"),
            dispatch_modes: call("torch._C._len_torch_dispatch_stack"),
            // overrides of aten ops only: torch.compile registers kernels of its own
            // namespaces (`_c10d_functional/...`), which no reference calls
            library_impls: resolve_dotted(py, "torch.library._impls")
                .and_then(|set| {
                    let mut n = 0;
                    for entry in set.try_iter()? {
                        if entry?.extract::<String>()?.starts_with("aten/") {
                            n += 1;
                        }
                    }
                    Ok(n)
                })
                .ok(),
        }
    }

    /// What grew since `before`, in words.
    fn added_since(&self, before: &Interposers) -> Vec<String> {
        let grew = |now: Option<usize>, then: Option<usize>| matches!((now, then), (Some(a), Some(b)) if a > b);
        let mut out = Vec::new();
        if grew(self.function_modes, before.function_modes) {
            out.push("a torch function mode was left active".to_string());
        }
        if grew(self.dispatch_modes, before.dispatch_modes) {
            out.push("a torch dispatch mode was left active".to_string());
        }
        if grew(self.library_impls, before.library_impls) {
            out.push("aten kernels were overridden through torch.library".to_string());
        }
        out
    }
}

/// The last component of `path` (`kernel.py` when it has none), for messages.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || "kernel.py".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn resolve_dotted<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let modules = py.import("sys")?.getattr("modules")?;
    let mut parts = name.split('.');
    let first = parts.next().unwrap_or_default();
    let mut obj = modules.get_item(first)?;
    for part in parts {
        obj = obj.getattr(part)?;
    }
    Ok(obj)
}

impl Harness {
    fn start(py: Python<'_>, dir: &Path, device: &str) -> Result<Harness, String> {
        let run = || -> PyResult<Harness> {
            let sys = py.import("sys")?;
            let path = sys.getattr("path")?.cast_into::<PyList>()?;
            path.insert(0, dir.to_string_lossy().as_ref())?;
            let module = py.import("harness")?;
            let info: String = module.getattr("init")?.call1((device,))?.extract()?;
            let info: InitMeta = serde_json::from_str(&info)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let mut funcs = std::collections::HashMap::new();
            for f in FUNCS {
                funcs.insert(f, module.getattr(f)?.unbind());
            }
            let names: String = module.getattr("guarded_names")?.call0()?.extract()?;
            let names: Vec<String> = serde_json::from_str(&names)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let mut guards = Vec::new();
            for n in names {
                let obj = resolve_dotted(py, &n)?;
                guards.push((n, obj.unbind()));
            }
            #[derive(serde::Deserialize)]
            struct Space {
                name: String,
                scope: String,
            }
            let spaces: String = module.getattr("guarded_namespaces")?.call0()?.extract()?;
            let spaces: Vec<Space> = serde_json::from_str(&spaces)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let mut namespaces = Vec::new();
            for sp in spaces {
                // a namespace this torch lacks is skipped, not fatal
                if let Ok(ns) = Namespace::snapshot(py, &sp.name, &sp.scope) {
                    namespaces.push(ns);
                }
            }
            Ok(Harness {
                funcs,
                guards,
                namespaces,
                interposers: Interposers::count(py),
                device: info.device,
                device_name: info.device_name,
                import_s: info.import_s,
            })
        };
        run().map_err(|e| {
            // harness.SetupError: the user's to fix, and its message says how
            let is_setup = e.get_type(py).name().is_ok_and(|n| n == "SetupError");
            if is_setup {
                e.value(py).to_string()
            } else {
                python_error_text(py, &e)
            }
        })
    }

    fn func<'py>(&self, py: Python<'py>, name: &str) -> Bound<'py, PyAny> {
        self.funcs
            .get(name)
            .map(|f| f.bind(py).clone())
            .expect("every name in FUNCS was looked up at start")
    }

    /// Names of guarded objects that were replaced or removed since start, then entries of
    /// guarded namespaces, then global interposers (torch function or dispatch modes left
    /// active, kernels registered through `torch.library`).
    fn tampered(&self, py: Python<'_>) -> Vec<String> {
        let mut out: Vec<String> = self
            .guards
            .iter()
            .filter(|(name, obj)| match resolve_dotted(py, name) {
                Ok(now) => !now.is(obj),
                Err(_) => true,
            })
            .map(|(n, _)| n.clone())
            .collect();
        for ns in &self.namespaces {
            out.extend(ns.changes(py));
        }
        if out.is_empty() {
            out.extend(Interposers::count(py).added_since(&self.interposers));
        }
        out
    }

    fn on_gpu(&self) -> bool {
        self.device == "cuda"
    }

    fn handle(&self, py: Python<'_>, request: Request) -> (ReplyBody, bool) {
        let result: Result<(serde_json::Value, bool), Failure> = match request {
            Request::Status => self.status(py).map(|v| (v, false)),
            Request::Bench(job) => self.bench(py, &job).and_then(|(r, restart)| {
                serde_json::to_value(&r)
                    .map(|v| (v, restart))
                    .map_err(|e| Failure::Harness(e.to_string()))
            }),
            Request::Compare(job) => self.compare(py, &job).and_then(|c| {
                // both kernels' module code ran again here: no verdict was taken after it
                let changed = self.tampered(py);
                if !changed.is_empty() {
                    return Err(Failure::Tampered(format!(
                        "during the head-to-head timing, a kernel changed what the judge relies on: {}",
                        changed.join(", ")
                    )));
                }
                serde_json::to_value(&c)
                    .map(|v| (v, false))
                    .map_err(|e| Failure::Harness(e.to_string()))
            }),
            Request::CallScript {
                script,
                function,
                kwargs,
            } => self.call_script(py, &script, &function, &kwargs),
        };
        match result {
            Ok((value, restart)) => (ReplyBody::Ok { value }, restart),
            Err(Failure::Harness(message)) => (ReplyBody::Error { message }, false),
            // the worker's torch is no longer trustworthy: answered, then restarted
            Err(Failure::Tampered(message)) => (ReplyBody::Error { message }, true),
            Err(Failure::Python(e)) => {
                let (message, traceback, cuda) = self.describe(py, &e);
                (ReplyBody::PythonError { message, traceback }, cuda)
            }
        }
    }

    fn describe(&self, py: Python<'_>, e: &PyErr) -> (String, String, bool) {
        let described = self
            .func(py, "describe_exception")
            .call1((e.value(py),))
            .and_then(|r| r.extract::<(String, String, bool)>());
        described.unwrap_or_else(|_| (e.to_string(), String::new(), false))
    }

    fn status(&self, py: Python<'_>) -> Result<serde_json::Value, Failure> {
        let text: String = self.func(py, "status").call0()?.extract()?;
        serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))
    }

    fn call_script(
        &self,
        py: Python<'_>,
        script: &Path,
        function: &str,
        kwargs: &serde_json::Value,
    ) -> Result<(serde_json::Value, bool), Failure> {
        let text: String = self
            .func(py, "call_script")
            .call1((
                script.to_string_lossy().as_ref(),
                function,
                kwargs.to_string(),
            ))?
            .extract()?;
        let value = serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))?;
        Ok((value, false))
    }

    fn load<'py>(
        &self,
        py: Python<'py>,
        path: &Path,
    ) -> Result<(LoadMeta, Option<Bound<'py, PyAny>>), Failure> {
        let (meta, cand): (String, Bound<'py, PyAny>) = self
            .func(py, "load")
            .call1((path.to_string_lossy().as_ref(),))?
            .extract()?;
        let meta: LoadMeta =
            serde_json::from_str(&meta).map_err(|e| Failure::Harness(e.to_string()))?;
        Ok((meta, if cand.is_none() { None } else { Some(cand) }))
    }

    fn compare(&self, py: Python<'_>, job: &CompareJob) -> Result<Comparison, Failure> {
        let (shape, dtype) = &job.timing;
        check_request(job.kind, shape, *dtype, self.on_gpu()).map_err(Failure::Harness)?;
        let mut loaded = Vec::new();
        for (role, path) in [("incumbent", &job.incumbent), ("candidate", &job.candidate)] {
            let (meta, cand) = self.load(py, path)?;
            match cand {
                Some(c) if meta.ok => loaded.push(c),
                _ => {
                    return Err(Failure::Harness(format!(
                        "the {role} `{}` does not load: {}",
                        path.display(),
                        meta.message.unwrap_or_default()
                    )))
                }
            }
        }
        let reps = job.repetitions.max(1);
        let text: String = self
            .func(py, "compare")
            .call1((
                &loaded[0],
                &loaded[1],
                job.kind.name(),
                shape.0.clone(),
                dtype.name(),
                7u64,
                reps,
                job.layout.name(),
            ))?
            .extract()?;
        for c in &loaded {
            let _ = self.func(py, "unload").call1((c,));
        }
        let m: CompareMeta =
            serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))?;
        Ok(comparison_from(&m.incumbent_us, &m.candidate_us))
    }

    fn bench(&self, py: Python<'_>, job: &BenchJob) -> Result<(BenchResult, bool), Failure> {
        let device = if self.on_gpu() {
            format!("cuda ({})", self.device_name)
        } else {
            "cpu".to_string()
        };
        let (meta, cand) = self.load(py, &job.kernel_path)?;
        let declared = meta.kind.as_deref().map(str::parse::<KernelKind>);
        let fallback_kind = job
            .kind
            .or_else(|| declared.clone().and_then(Result::ok))
            .unwrap_or(KernelKind::Softmax);
        let mut result = BenchResult {
            kind: fallback_kind,
            correctness: Correctness::Pass,
            stages: Vec::new(),
            metrics: None,
            device,
            timing_representative: self.on_gpu(),
            source_sha256: meta.sha256.clone(),
        };
        let load_fail = |result: &mut BenchResult, reason: String| {
            result.stages.push(StageReport {
                stage: Stage::Load,
                passed: false,
                cases: 1,
                detail: reason.clone(),
                duration_s: 0.0,
            });
            result.correctness = Correctness::Fail {
                stage: Stage::Load,
                reason,
            };
        };
        let Some(cand) = cand.filter(|_| meta.ok) else {
            if meta.cuda_error {
                result.correctness = Correctness::Crash {
                    reason: format!(
                        "CUDA error while importing kernel.py: {}",
                        meta.message.unwrap_or_default()
                    ),
                };
                return Ok((result, true));
            }
            let file = file_name(&job.kernel_path);
            let at = meta
                .line
                .map(|l| format!(" ({file} line {l})"))
                .unwrap_or_default();
            load_fail(
                &mut result,
                format!("{}{at}", meta.message.unwrap_or_default()),
            );
            let restart = !self.tampered(py).is_empty();
            return Ok((result, restart));
        };
        let kind = match declared {
            Some(Ok(k)) => k,
            _ => {
                load_fail(
                    &mut result,
                    format!(
                        "unknown KERNEL_KIND `{}`; expected one of: {}",
                        meta.kind.unwrap_or_default(),
                        KernelKind::ALL.map(KernelKind::name).join(", ")
                    ),
                );
                return Ok((result, false));
            }
        };
        if let Some(wanted) = job.kind.filter(|w| *w != kind) {
            load_fail(
                &mut result,
                format!(
                    "kernel.py declares KERNEL_KIND = \"{kind}\", but it is judged as {wanted}"
                ),
            );
            return Ok((result, false));
        }
        result.kind = kind;
        result.stages.push(StageReport {
            stage: Stage::Load,
            passed: true,
            cases: 1,
            detail: format!("KERNEL_KIND {kind}, sha256 {}", &meta.sha256[..12]),
            duration_s: 0.0,
        });
        let mut run = Run {
            py,
            h: self,
            cand: cand.clone(),
            kind,
            seed: 1000,
            forbidden: kind.forbidden_ops().iter().map(|s| s.to_string()).collect(),
            layout: job.layout.name(),
            file: file_name(&job.kernel_path),
            restart: false,
            stages: std::mem::take(&mut result.stages),
        };
        let verdict = run.all_stages(job);
        let _ = self.func(py, "unload").call1((&cand,));
        result.stages = std::mem::take(&mut run.stages);
        let restart = run.restart;
        match verdict? {
            (Correctness::Pass, metrics) => result.metrics = metrics,
            (v, _) => result.correctness = v,
        }
        Ok((result, restart))
    }
}

/// Per-request failure that is not a verdict.
enum Failure {
    /// The request or the harness is at fault; a message.
    Harness(String),
    /// A kernel changed what the judge relies on outside a bench (in a comparison).
    Tampered(String),
    /// Python raised in the harness.
    Python(PyErr),
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Python(e)
    }
}

fn python_error_text(py: Python<'_>, e: &PyErr) -> String {
    let tb = e
        .traceback(py)
        .and_then(|t| t.format().ok())
        .unwrap_or_default();
    format!("{tb}{e}")
}

/// Refuses shapes of the wrong rank and bfloat16 on the CPU.
fn check_request(
    kind: KernelKind,
    shape: &Shape,
    dtype: DType,
    on_gpu: bool,
) -> Result<(), String> {
    if shape.0.len() != kind.dim_names().len() {
        return Err(format!(
            "a {kind} shape has {} dims ({}), got `{shape}`",
            kind.dim_names().len(),
            kind.dim_names().join(", ")
        ));
    }
    if !on_gpu && dtype == DType::Bfloat16 {
        return Err("bfloat16 cannot run on the CPU (Triton's interpreter uses numpy, which has no bfloat16); use float16 or float32".into());
    }
    Ok(())
}

/// Medians and spread of interleaved repetitions.
pub(crate) fn comparison_from(incumbent_us: &[f64], candidate_us: &[f64]) -> Comparison {
    let ratios: Vec<f64> = incumbent_us
        .iter()
        .zip(candidate_us)
        .map(|(i, c)| if *c > 0.0 { i / c } else { f64::INFINITY })
        .collect();
    let med = median(&ratios);
    let (lo, hi) = ratios
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    Comparison {
        incumbent_latency_us: median(incumbent_us),
        candidate_latency_us: median(candidate_us),
        median_speedup: med,
        repetitions: ratios.len() as u32,
        spread: if med > 0.0 && med.is_finite() && !ratios.is_empty() {
            (hi - lo) / med
        } else {
            0.0
        },
    }
}

/// Median (mean of the middle two for an even count); 0 for an empty slice.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One case to run.
struct Case {
    shape: Shape,
    dtype: DType,
    mode: &'static str,
    repeats: u32,
    record_ops: bool,
}

/// The state of one bench request's stages.
struct Run<'a, 'py> {
    py: Python<'py>,
    h: &'a Harness,
    cand: Bound<'py, PyAny>,
    kind: KernelKind,
    seed: u64,
    forbidden: Vec<String>,
    /// How the inputs are laid out (`Layout::name`), for every case and the timing.
    layout: &'static str,
    /// The candidate's file name, for messages that point at a line of it.
    file: String,
    restart: bool,
    stages: Vec<StageReport>,
}

type StageOutcome = Result<Option<Correctness>, Failure>;

impl Run<'_, '_> {
    fn all_stages(&mut self, job: &BenchJob) -> Result<(Correctness, Option<Metrics>), Failure> {
        let kind = self.kind;
        let on_gpu = self.h.on_gpu();
        for s in &job.extra_shapes {
            check_request(kind, s, DType::Float32, on_gpu).map_err(Failure::Harness)?;
        }
        let (timing_shape, timing_dtype) = match &job.timing {
            Some((s, d)) => (s.clone(), *d),
            None => (
                job.extra_shapes.first().cloned().unwrap_or_else(|| {
                    kind.shapes(if on_gpu { ShapeSet::Gpu } else { ShapeSet::Cpu })[0].clone()
                }),
                // a request judged in one dtype is timed in it; else fp16 on a GPU, fp32 on CPU
                match job.dtypes.as_slice() {
                    [only] => *only,
                    _ if on_gpu => DType::Float16,
                    _ => DType::Float32,
                },
            ),
        };
        check_request(kind, &timing_shape, timing_dtype, on_gpu).map_err(Failure::Harness)?;
        // module-level code of kernel.py has run: check the harness is intact
        if let Some(v) = self.guard_check(Stage::Load) {
            self.fail_report(Stage::Load, &v);
            return Ok((v, None));
        }
        let set = kind.shapes(if on_gpu { ShapeSet::Gpu } else { ShapeSet::Cpu });
        let small = kind.shapes(ShapeSet::Cpu)[0].clone();
        let dtypes = judged_dtypes(kind.dtypes(on_gpu), &job.dtypes);
        let quick = job.quick;
        let sweep_dtypes: Vec<DType> = if quick {
            dtypes[..1].to_vec()
        } else {
            dtypes.clone()
        };
        let case =
            |shape: &Shape, dtype: DType, mode: &'static str, repeats: u32, record_ops: bool| {
                Case {
                    shape: shape.clone(),
                    dtype,
                    mode,
                    repeats,
                    record_ops,
                }
            };

        // smoke: one small call of each dtype; the first under the op recorder
        let smoke: Vec<Case> = dtypes
            .iter()
            .enumerate()
            .map(|(i, d)| case(&small, *d, "normal", 1, i == 0))
            .collect();
        // shape sweep: the set's shapes (the first only when quick) plus the extra shapes
        let mut shapes: Vec<Shape> = if quick {
            set[..1].to_vec()
        } else {
            set.clone()
        };
        for s in &job.extra_shapes {
            if !shapes.contains(s) {
                shapes.push(s.clone());
            }
        }
        let sweep: Vec<Case> = shapes
            .iter()
            .flat_map(|s| sweep_dtypes.iter().map(move |d| (s.clone(), *d)))
            .map(|(s, d)| case(&s, d, "normal", 1, false))
            .collect();
        let modes: &[&'static str] = if quick {
            &["large", "zeros"]
        } else {
            &["large", "small", "mixed", "zeros", "constant"]
        };
        let all_edge_shapes = kind.shapes(ShapeSet::Edge);
        // Every mode at set[0] and at the timing shape, whose paths set[0] may never reach:
        // the softmax starter's shared-memory rows (4096×50257 on a GPU) once lost float32's
        // `large` rows to rounding in the exponent, where set[0]'s rows, held in registers,
        // were right.
        let mut stability_shapes = vec![&set[0]];
        if timing_shape != set[0] {
            stability_shapes.push(&timing_shape);
        }
        let mut stability: Vec<Case> = stability_shapes
            .iter()
            .flat_map(|s| modes.iter().map(move |m| (*s, *m)))
            .flat_map(|(s, m)| sweep_dtypes.iter().map(move |d| (s, m, *d)))
            .map(|(s, m, d)| case(s, d, m, 1, false))
            .collect();
        // Masked rows (-inf columns at either end) at the timing shape, whose wide rows may
        // take chunked paths that set[0] never reaches, even when quick; otherwise also at
        // set[0] and the edge shapes, where width-specific bugs show.
        if kind.takes_masked_rows() {
            let mut masked_shapes = vec![&timing_shape];
            if !quick {
                for shape in std::iter::once(&set[0]).chain(all_edge_shapes.iter()) {
                    if !masked_shapes.contains(&shape) {
                        masked_shapes.push(shape);
                    }
                }
            }
            for shape in masked_shapes {
                stability.extend(
                    sweep_dtypes
                        .iter()
                        .map(|d| case(shape, *d, "masked", 1, false)),
                );
            }
        }
        let determinism: Vec<Case> = sweep_dtypes
            .iter()
            .map(|d| case(&set[0], *d, "normal", 3, false))
            .collect();
        let edge_shapes = if quick {
            all_edge_shapes[..1].to_vec()
        } else {
            all_edge_shapes
        };
        let edge: Vec<Case> = edge_shapes
            .iter()
            .flat_map(|s| sweep_dtypes.iter().map(move |d| (s.clone(), *d)))
            .map(|(s, d)| case(&s, d, "normal", 1, false))
            .collect();

        for (stage, cases) in [
            (Stage::Smoke, smoke),
            (Stage::ShapeSweep, sweep),
            (Stage::Stability, stability),
            (Stage::Determinism, determinism),
            (Stage::Edge, edge),
        ] {
            if let Some(v) = self.stage(stage, &cases)? {
                return Ok((v, None));
            }
        }

        // timing
        let t0 = Instant::now();
        log(&format!("stage timing {timing_dtype} {timing_shape}"));
        let seed = self.next_seed();
        let timed = self
            .h
            .func(self.py, "time_kernel")
            .call1((
                &self.cand,
                kind.name(),
                timing_shape.0.clone(),
                timing_dtype.name(),
                seed,
                quick,
                job.time_compiled,
                self.layout,
            ))
            .and_then(|r| r.extract::<String>());
        let timed = match timed {
            Ok(t) => t,
            Err(e) => {
                let (message, _tb, cuda) = self.h.describe(self.py, &e);
                return Ok((
                    self.candidate_raised(
                        Stage::Timing,
                        &timing_shape,
                        timing_dtype,
                        message,
                        None,
                        cuda,
                    ),
                    None,
                ));
            }
        };
        let t: TimingMeta =
            serde_json::from_str(&timed).map_err(|e| Failure::Harness(e.to_string()))?;
        let metrics = self.metrics(&t, &timing_shape, timing_dtype, job.gpu_bandwidth_gb_s);
        let compiled_note = t
            .compiled_error
            .as_ref()
            .map(|e| format!("; torch.compile failed: {e}"))
            .unwrap_or_default();
        self.stages.push(StageReport {
            stage: Stage::Timing,
            passed: true,
            cases: 1,
            detail: format!(
                "{timing_dtype} {timing_shape}: {:.2} us, reference {:.2} us ({:.2}x){compiled_note}",
                metrics.latency_us, metrics.reference_latency_us, metrics.speedup_vs_reference
            ),
            duration_s: t0.elapsed().as_secs_f64(),
        });
        if let Some(v) = self.guard_check(Stage::Timing) {
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        // plausibility gate: faster than the hardware allows means work escaped the timer
        if let Some(pct) = metrics.pct_peak.filter(|p| on_gpu && *p > 100.0) {
            self.restart = true;
            let v = Correctness::Tamper {
                reason: format!(
                    "implausible timing: {:.1} {} at {timing_dtype} {timing_shape} is {pct:.0}% of the GPU's peak; work left running on another stream, or a result computed outside the timed call?",
                    metrics.throughput, metrics.throughput_unit
                ),
            };
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        // integrity: correctness re-checked after timing, on fresh inputs, ops recorded
        let recheck = vec![case(&timing_shape, timing_dtype, "normal", 1, true)];
        if let Some(v) = self.stage(Stage::Integrity, &recheck)? {
            return Ok((v, None));
        }
        Ok((Correctness::Pass, Some(metrics)))
    }

    fn metrics(
        &self,
        t: &TimingMeta,
        shape: &Shape,
        dtype: DType,
        bandwidth: Option<f64>,
    ) -> Metrics {
        let kind = self.kind;
        let throughput = kind.throughput(shape, dtype, t.latency_us);
        let unit = kind.bound().throughput_unit().to_string();
        let pct_peak = if self.h.on_gpu() {
            lookup_gpu(&self.h.device_name).spec().map(|spec| {
                let spec = match bandwidth {
                    Some(bw) => spec.clone().with_measured_bandwidth(bw),
                    None => spec.clone(),
                };
                spec.pct_peak(throughput, &unit, dtype)
            })
        } else {
            None
        };
        Metrics {
            shape: shape.clone(),
            dtype,
            latency_us: t.latency_us,
            reference_latency_us: t.reference_latency_us,
            compiled_latency_us: t.compiled_latency_us,
            speedup_vs_reference: if t.latency_us > 0.0 {
                t.reference_latency_us / t.latency_us
            } else {
                0.0
            },
            throughput,
            throughput_unit: unit,
            pct_peak,
            peak_vram_mb: t.peak_vram_mb.unwrap_or(0.0),
            config_keys_read: t.config_keys_read.clone(),
        }
    }

    fn next_seed(&mut self) -> u64 {
        self.seed += 1;
        self.seed
    }

    /// Marks `stage`'s report (the last one, already pushed as passed) failed with the
    /// verdict's reason, or adds a failed one: a verdict reached after a stage's report
    /// must show in the stage table, and in `failed_stage`, as that stage.
    fn fail_report(&mut self, stage: Stage, verdict: &Correctness) {
        let detail = verdict.reason().unwrap_or_default().to_string();
        match self.stages.last_mut() {
            Some(last) if last.stage == stage => {
                last.passed = false;
                last.detail = detail;
            }
            _ => self.stages.push(StageReport {
                stage,
                passed: false,
                cases: 0,
                detail,
                duration_s: 0.0,
            }),
        }
    }

    fn guard_check(&mut self, stage: Stage) -> Option<Correctness> {
        let changed = self.h.tampered(self.py);
        if changed.is_empty() {
            return None;
        }
        self.restart = true;
        Some(Correctness::Tamper {
            reason: format!(
                "during {stage}, the candidate changed what the judge relies on: {}",
                changed.join(", ")
            ),
        })
    }

    fn stage(&mut self, stage: Stage, cases: &[Case]) -> StageOutcome {
        let t0 = Instant::now();
        let mut worst_l2 = 0.0f64;
        for c in cases {
            log(&format!("stage {stage} {} {} {}", c.dtype, c.shape, c.mode));
            match self.case(stage, c)? {
                Ok(l2) => worst_l2 = worst_l2.max(l2),
                Err(verdict) => {
                    self.stages.push(StageReport {
                        stage,
                        passed: false,
                        cases: cases.len() as u32,
                        detail: verdict.reason().unwrap_or_default().to_string(),
                        duration_s: t0.elapsed().as_secs_f64(),
                    });
                    return Ok(Some(verdict));
                }
            }
        }
        if let Some(v) = self.guard_check(stage) {
            self.stages.push(StageReport {
                stage,
                passed: false,
                cases: cases.len() as u32,
                detail: v.reason().unwrap_or_default().to_string(),
                duration_s: t0.elapsed().as_secs_f64(),
            });
            return Ok(Some(v));
        }
        self.stages.push(StageReport {
            stage,
            passed: true,
            cases: cases.len() as u32,
            detail: format!(
                "{} cases, worst relative L2 error {worst_l2:.2e}",
                cases.len()
            ),
            duration_s: t0.elapsed().as_secs_f64(),
        });
        Ok(None)
    }

    fn candidate_raised(
        &mut self,
        stage: Stage,
        shape: &Shape,
        dtype: DType,
        message: String,
        line: Option<u32>,
        cuda: bool,
    ) -> Correctness {
        let at = line
            .map(|l| format!(" ({} line {l})", self.file))
            .unwrap_or_default();
        if cuda {
            self.restart = true;
            return Correctness::Crash {
                reason: format!(
                    "CUDA error at {dtype} {shape}: {message}{at}; the worker was restarted (a poisoned CUDA context is never reused)"
                ),
            };
        }
        Correctness::Fail {
            stage,
            reason: format!("kernel_fn raised at {dtype} {shape}: {message}{at}"),
        }
    }

    /// Runs one case: Ok(Ok(rel_l2)) when it passed, Ok(Err(verdict)) when not.
    fn case(&mut self, stage: Stage, c: &Case) -> Result<Result<f64, Correctness>, Failure> {
        let py = self.py;
        let seed = self.next_seed();
        let res = self.h.func(py, "run_case").call1((
            &self.cand,
            self.kind.name(),
            c.shape.0.clone(),
            c.dtype.name(),
            seed,
            c.mode,
            c.repeats,
            c.record_ops,
            self.forbidden.clone(),
            self.layout,
        ));
        let res = match res {
            Ok(r) => r,
            Err(e) => {
                // the harness itself raised: inputs/reference generation, or the candidate broke it
                let (message, traceback, cuda) = self.h.describe(py, &e);
                if cuda {
                    return Ok(Err(
                        self.candidate_raised(stage, &c.shape, c.dtype, message, None, true)
                    ));
                }
                return Err(Failure::Harness(format!(
                    "the harness failed at {stage} {} {}: {message}\n{traceback}",
                    c.dtype, c.shape
                )));
            }
        };
        let (meta, outputs, reference): (String, Vec<Bound<'_, PyAny>>, Bound<'_, PyAny>) =
            res.extract()?;
        let meta: CaseMeta =
            serde_json::from_str(&meta).map_err(|e| Failure::Harness(e.to_string()))?;
        let where_ = format!(
            "{} {}{}",
            c.dtype,
            c.shape,
            if c.mode == "normal" {
                String::new()
            } else {
                format!(" {} inputs", c.mode)
            }
        );
        if let Some(p) = meta.problems.first() {
            let reason = format!("{where_}: {}", p.message);
            return Ok(Err(match p.kind.as_str() {
                "not_tensor" | "wrong_device" => Correctness::Fail { stage, reason },
                _ => {
                    self.restart = true;
                    Correctness::Tamper { reason }
                }
            }));
        }
        if let Some(e) = meta.error {
            let last = e
                .traceback
                .lines()
                .rev()
                .find(|l| l.trim_start().starts_with("File "))
                .unwrap_or_default();
            tracing::debug!(last, "candidate traceback");
            return Ok(Err(self.candidate_raised(
                stage,
                &c.shape,
                c.dtype,
                e.message,
                e.line,
                e.cuda_error,
            )));
        }
        let (Some(out_shape), Some(out_dtype)) = (meta.out_shape, meta.out_dtype) else {
            return Err(Failure::Harness(
                "the harness returned no output description".into(),
            ));
        };
        if let Err(reason) = judge::check_spec(
            &out_shape,
            &out_dtype,
            &meta.expected_shape,
            &meta.expected_dtype,
        ) {
            return Ok(Err(Correctness::Fail {
                stage,
                reason: format!("{where_}: {reason}"),
            }));
        }
        let reference = reference
            .cast_into::<PyArrayDyn<f32>>()
            .map_err(PyErr::from)?;
        let reference = reference.readonly();
        let arrays: Vec<Bound<'_, PyArrayDyn<f32>>> = outputs
            .into_iter()
            .map(|o| o.cast_into::<PyArrayDyn<f32>>().map_err(PyErr::from))
            .collect::<Result<_, _>>()?;
        let readonly: Vec<_> = arrays.iter().map(|a| a.readonly()).collect();
        let views: Vec<_> = readonly.iter().map(|r| r.as_array()).collect();
        let out_dt: DType = meta.expected_dtype.parse().unwrap_or(c.dtype);
        let ctx = CaseContext {
            kind: self.kind,
            stage,
            shape: &c.shape,
            dtype: c.dtype,
            mode: c.mode,
            note: meta.note.as_deref(),
        };
        let Some(first) = views.first() else {
            return Err(Failure::Harness("the harness returned no outputs".into()));
        };
        let tol = self.kind.tolerance(c.dtype);
        let agreement =
            match judge::compare_outputs(first.view(), reference.as_array(), out_dt, tol, &ctx) {
                Ok(a) => a,
                Err(reason) => return Ok(Err(Correctness::Fail { stage, reason })),
            };
        if views.len() > 1 {
            if let Err(reason) = judge::check_bitwise_identical(&views, &ctx) {
                return Ok(Err(Correctness::Fail { stage, reason }));
            }
        }
        Ok(Ok(agreement.rel_l2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u8, minor: u8, patch: u8) -> pyo3::PythonVersionInfo {
        pyo3::PythonVersionInfo {
            major,
            minor,
            patch,
            suffix: None,
        }
    }

    #[test]
    fn a_libpython_of_another_version_than_the_venvs_is_named() {
        let venv = tempfile::tempdir().unwrap();
        std::fs::create_dir(venv.path().join("bin")).unwrap();
        let python = venv.path().join("bin/python");
        std::fs::write(
            venv.path().join("pyvenv.cfg"),
            "home = /opt/py/bin\nversion = 3.11.7\n",
        )
        .unwrap();
        assert_eq!(libpython_mismatch(&python, v(3, 11, 7)), None);
        let w = libpython_mismatch(&python, v(3, 11, 2)).expect("a warning");
        assert!(
            w.contains("libpython 3.11.2") && w.contains("Python 3.11.7"),
            "{w}"
        );
        // not a venv: nothing to compare with
        assert_eq!(
            libpython_mismatch(Path::new("/usr/bin/python3"), v(3, 11, 2)),
            None
        );
        assert_eq!(
            venv_version("version_info = 3.12.1.final.0\n").as_deref(),
            Some("3.12.1")
        );
    }

    #[test]
    fn comparison_takes_medians_and_the_spread_of_ratios() {
        // ratios 2.0, 1.0, 1.5 → median 1.5, spread (2.0 − 1.0) / 1.5
        let c = comparison_from(&[20.0, 10.0, 15.0], &[10.0, 10.0, 10.0]);
        assert_eq!(c.incumbent_latency_us, 15.0);
        assert_eq!(c.candidate_latency_us, 10.0);
        assert_eq!(c.median_speedup, 1.5);
        assert_eq!(c.repetitions, 3);
        assert!((c.spread - 1.0 / 1.5).abs() < 1e-12);
    }

    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}

/// The dtypes a job judges: the requested ones the device supports (no bfloat16 in the CPU
/// interpreter), else every dtype of the kind for the device.
fn judged_dtypes(supported: Vec<DType>, requested: &[DType]) -> Vec<DType> {
    let wanted: Vec<DType> = requested
        .iter()
        .copied()
        .filter(|d| supported.contains(d))
        .collect();
    if wanted.is_empty() {
        supported
    } else {
        wanted
    }
}

#[cfg(test)]
mod judged_dtypes_tests {
    use super::*;

    #[test]
    fn a_target_dtype_narrows_the_sweep_and_unsupported_ones_fall_back() {
        let gpu = DType::ALL.to_vec();
        assert_eq!(
            judged_dtypes(gpu.clone(), &[DType::Float16]),
            vec![DType::Float16]
        );
        assert_eq!(judged_dtypes(gpu.clone(), &[]), gpu);
        let cpu = vec![DType::Float32, DType::Float16];
        assert_eq!(judged_dtypes(cpu.clone(), &[DType::Bfloat16]), cpu);
    }
}
