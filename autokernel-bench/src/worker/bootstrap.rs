//! Process bootstrap of the worker (the child side): [`serve_worker`] takes the request
//! and reply channels off fds 0 and 1, sets up signals, the parent watch and the memory
//! limit, writes the embedded Python files, starts CPython and the harness, then answers
//! JSON-line requests until its stdin closes.
//!
//! The rest of the child is one idea per file: [`super::harness`] (Rust's handle on the
//! imported harness), [`super::guards`] (the tamper guards), [`super::requests`] (one
//! request in, one reply out), [`super::plan`] (which cases a bench runs, pure Rust) and
//! [`super::execute`] (running them through the harness and the judge).
//!
//! This process's stderr is the worker's log: the parent keeps its last lines for
//! `CRASH`/`TIMEOUT` reasons. Writing there directly (not through `tracing`) is deliberate:
//! the worker has no subscriber and its stderr is a protocol side channel.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use autokernel_core::Catalogue;
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;
use sha2::{Digest, Sha256};

use super::harness::Harness;
use super::log::log;
use super::parent::ParentLink;
use super::payload::PayloadWriter;
use super::requests;
use crate::protocol::{env, Envelope, Hello, Reply, ReplyBody, Request};
use crate::sandbox;

/// Entry point of the worker process; any binary can host it (the `autokernel` binary's
/// hidden `worker` verb, or a test-only bin). It reads its configuration from environment
/// variables set by [`crate::Worker`] and serves requests on stdin until it closes.
///
/// Exit status: 0 when stdin closed, 0 after a reply that asked for a restart (CUDA error,
/// tampering), 3 when start-up failed (the reason is in the hello line and on stderr).
pub fn serve_worker() -> ExitCode {
    let zygote_fd = std::env::var(env::ZYGOTE_FD)
        .ok()
        .and_then(|v| v.parse::<std::os::fd::RawFd>().ok());
    let zygote = zygote_fd.map(|fd| {
        // a zygote lives through SIGTERM as its workers do
        outlive_sigterm();
        super::zygote::serve(fd, write_python_files())
    });
    let forked = match zygote {
        None => false,
        Some(Ok(true)) => true,
        Some(Ok(false)) => return ExitCode::SUCCESS,
        Some(Err(message)) => {
            log(&format!("zygote: {message}"));
            return ExitCode::from(3);
        }
    };
    match serve(forked) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            log(&format!("fatal: {message}"));
            ExitCode::from(3)
        }
    }
}

/// The reply channel and request channel, moved off fds 1 and 0, and the payload area the
/// parent gave (`None` for a worker started by hand).
struct Channels {
    replies: File,
    requests: BufReader<File>,
    payload: Option<PayloadWriter>,
}

/// Moves the channels off fds 1 and 0: replies go to a private close-on-exec duplicate of
/// stdout, requests come from one of stdin; fd 1 then points at stderr and fd 0 at
/// `/dev/null`, so nothing Python prints or reads can touch the protocol.
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
            payload: PayloadWriter::from_env(),
        })
    }
}

/// Writes `value` as one JSON line on the reply channel.
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

/// Limits the address space (RLIMIT_AS) to the parent's `env::MEMORY_LIMIT_MB`, when set.
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
pub(crate) fn write_python_files() -> Result<PathBuf, String> {
    let mut h = Sha256::new();
    h.update(crate::HARNESS_PY);
    h.update(crate::CATALOGUE_PY);
    h.update(crate::PROBLEMS_PY);
    let digest = format!("{:x}", h.finalize());
    let dir = crate::private_temp_dir(&format!("bench-{}", &digest[..12]))?;
    for (name, text) in [
        ("harness.py", crate::HARNESS_PY),
        ("catalogue.py", crate::CATALOGUE_PY),
        ("problems.py", crate::PROBLEMS_PY),
    ] {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            continue;
        }
        // a temporary file of a unique name, not one named by the pid: sandboxed workers
        // starting together each have a pid namespace, where their pids are the same
        let write = || -> std::io::Result<()> {
            let mut tmp = tempfile::Builder::new()
                .prefix(&format!(".{name}."))
                .tempfile_in(&dir)?;
            std::io::Write::write_all(&mut tmp, text.as_bytes())?;
            tmp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        };
        write().map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    Ok(dir)
}

/// Start-up, the hello line, then the request loop: one reply per request line, until stdin
/// closes or a reply asks for a restart. `forked`: a zygote's child, Python started and
/// torch and triton imported already (`zygote.rs`).
fn serve(forked: bool) -> Result<(), String> {
    outlive_sigterm();
    // first, while this process has a single thread: a candidate's worker enters its
    // sandbox (only the sandboxed worker process returns from `isolate`)
    let sandbox = std::env::var(env::SANDBOX)
        .ok()
        .map(|text| serde_json::from_str::<sandbox::Spec>(&text))
        .transpose()
        .map_err(|e| format!("unreadable sandbox specification: {e}"))?
        .map(|spec| {
            let isolation = sandbox::isolate(&spec);
            (spec, isolation)
        });
    exit_with_parent();
    let reference_role = std::env::var_os(env::REFERENCE).is_some();
    if reference_role {
        // the trusted reference worker: /proc/<pid>/{mem,fd} of an undumpable process are
        // root's, so a candidate of the same user cannot read its references there
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
    }
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
    let mut warnings = match &sandbox {
        Some((spec, isolation)) => sandbox::restrict(spec, isolation),
        None => Vec::new(),
    };
    let started = if forked {
        // Python read its environment when the zygote started: the sandbox's variables too
        super::zygote::set_environment(&super::zygote::process_environment())
    } else {
        crate::py::init::initialize(&python)
    };
    if let Err(e) = started {
        return hello_err(&mut ch, e);
    }
    // the catalogue the parent sent (the built-in one when started by hand), and the
    // extension's registry modules
    let catalogue = match std::env::var(env::CATALOGUE) {
        Ok(text) => match Catalogue::from_json(&text) {
            Ok(c) => c,
            Err(e) => return hello_err(&mut ch, format!("unreadable catalogue: {e}")),
        },
        Err(_) => Catalogue::builtin().clone(),
    };
    let modules: Vec<PathBuf> = std::env::var_os(env::REGISTRY)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    let launchers = std::env::var(env::TRITON_LAUNCHERS).unwrap_or_else(|_| "[]".into());
    let harness = match Python::attach(|py| {
        Harness::start(py, &dir, &device, catalogue, &modules, &launchers)
    }) {
        Ok(h) => h,
        Err(e) => return hello_err(&mut ch, e),
    };
    if sandbox.is_some() {
        warnings.extend(sandbox::refuse_unix_sockets());
    }
    send(
        &mut ch.replies,
        &Hello {
            pid,
            error: None,
            device: harness.device.clone(),
            device_name: harness.device_name.clone(),
            import_s: harness.import_s,
            warning: {
                warnings.extend(Python::attach(|py| {
                    libpython_mismatch(&python, py.version_info())
                }));
                (!warnings.is_empty()).then(|| warnings.join("; "))
            },
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
    // the last reference computed, until the parent has it delivered to the payload area
    let mut pending: Option<Py<PyArrayDyn<f32>>> = None;
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
        let candidate = matches!(
            envelope.request,
            Request::Bench(_) | Request::Compare(_) | Request::Problem(_)
        );
        let refused = reference_role
            && !matches!(
                envelope.request,
                Request::Reference(_)
                    | Request::Deliver
                    | Request::TimeReference { .. }
                    | Request::Status
            );
        let deliver = reference_role && matches!(envelope.request, Request::Deliver);
        let restart = Python::attach(|py| {
            let (body, restart, payload, launchers) = if refused {
                // the trusted reference worker never runs a candidate or a script
                let message = "the trusted reference worker serves only references".into();
                (ReplyBody::Error { message }, false, None, Vec::new())
            } else if deliver {
                let body = match pending.take() {
                    Some(out) => deliver_reference(out.bind(py), ch.payload.as_mut()),
                    None => ReplyBody::Error {
                        message: "no reference to deliver".into(),
                    },
                };
                (body, false, None, Vec::new())
            } else {
                let mut parent = ParentLink::new(
                    &mut ch.replies,
                    &mut ch.requests,
                    ch.payload.as_mut(),
                    envelope.id,
                    envelope.nonce.clone(),
                );
                let (body, restart, payload) =
                    requests::handle(&harness, py, envelope.request, &mut parent);
                let launchers = if candidate {
                    harness.launcher_signatures(py)
                } else {
                    Vec::new()
                };
                (body, restart, payload, launchers)
            };
            // a reference output: kept until the parent asks for it to be delivered
            pending = payload.map(Bound::unbind);
            send(
                &mut ch.replies,
                &Reply {
                    id: envelope.id,
                    nonce: envelope.nonce,
                    pid,
                    restart,
                    body,
                    launchers,
                },
            )?;
            Ok::<_, String>(restart)
        })?;
        if restart {
            log("exiting so that the next request gets a fresh process");
            return Ok(());
        }
    }
}

/// Writes the reference `out` to the payload `area`: the reply to [`Request::Deliver`],
/// `{bytes}`, or why it could not be written.
fn deliver_reference(
    out: &Bound<'_, PyArrayDyn<f32>>,
    area: Option<&mut PayloadWriter>,
) -> ReplyBody {
    let out = out.readonly();
    let written = match (out.as_slice(), area) {
        (Ok(values), Some(area)) => area
            .write(&[values])
            .map(|()| size_of_val(values))
            .map_err(|e| e.to_string()),
        (Err(e), _) => Err(e.to_string()),
        (_, None) => Err(format!("no payload area ({} is unset)", env::PAYLOAD_FD)),
    };
    match written {
        Ok(bytes) => ReplyBody::Ok {
            value: serde_json::json!({ "bytes": bytes }),
        },
        Err(e) => ReplyBody::Error {
            message: format!("cannot write the reference to the payload area: {e}"),
        },
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
}
