//! The zygote (issue 36, points 4 and 5): one process per [`crate::Worker`] that starts
//! CPython and imports torch, numpy and triton once, without starting CUDA, then forks a
//! worker for each candidate (and the trusted reference worker) instead of the parent
//! executing a fresh binary that imports them again: a worker is ready a fork and the
//! harness's start-up after it is asked for, not seconds of imports later (the figures in
//! docs/benchmarks.md, "The zygote").
//!
//! ```text
//! parent ──socketpair──▶ zygote (Python, torch and triton imported; no CUDA; undumpable)
//!                          └─ fork ─▶ worker: stdio and payload/lease fds from the parent,
//!                                     then the same start-up as an executed worker
//!                                     (sandbox, limits, harness, hello, requests)
//! ```
//!
//! - **Isolation as before.** The forked child is single-threaded (fork copies the calling
//!   thread only), so it enters its sandbox exactly as an executed worker does, before any
//!   thread starts (`sandbox::isolate`, then `sandbox::restrict`); it closes every fd it did
//!   not get from the parent (the zygote's socket included), takes a session of its own, and
//!   gets the environment the parent would have given an executed worker. The zygote never
//!   loads a candidate, so every worker starts from the same state, whatever an earlier
//!   candidate did in its own copy.
//! - **No CUDA in the zygote.** A CUDA context does not survive a fork; the zygote checks
//!   that its imports left CUDA unstarted (`torch.cuda.is_initialized()`), and refuses to
//!   serve otherwise.
//! - **The parent keeps control.** The zygote sends back a pidfd of each child
//!   (`pidfd_open`, before anything can reap it): the parent signals through the pid as
//!   before, sees the exit through the pidfd becoming readable, and only then asks the
//!   zygote to reap it ([`Op::Wait`]), so a pid (the process group's name) is never reused
//!   while the parent may still kill it.
//! - **Fallback.** Where the zygote cannot start (its imports fail, no pidfd, a kernel
//!   without `SCM_RIGHTS`), or `AUTOKERNEL_ZYGOTE=off`, workers are executed as before.
//!
//! The wire: a Unix stream socket; each message a 4-byte little-endian length and a JSON
//! body, the fds (`SCM_RIGHTS`) on the message's first bytes.

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex as StdMutex;

use pyo3::prelude::*;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};

use crate::protocol::env;

/// Most fds one message carries: a fork's stdin, stdout, stderr, payload area and lease.
const MAX_FDS: usize = 5;
/// Largest message body, in bytes (a fork's environment with the catalogue is ~100 kB).
const MAX_MESSAGE: usize = 16 << 20;

/// What the parent asks the zygote.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op {
    /// Fork a worker. The message carries its stdin, stdout and stderr, then one fd for each
    /// name of `fd_vars` (the child sets that variable to the fd's number).
    Fork {
        /// Variables to set (`Some`) or remove (`None`) in the child's environment.
        env: Vec<(OsString, Option<OsString>)>,
        /// The child's working directory.
        cwd: Option<PathBuf>,
        /// The environment variables that name the extra fds, in the message's order.
        fd_vars: Vec<String>,
    },
    /// Reap the child `pid` if it has exited: `{status}`, the raw wait status, or `null`.
    Wait {
        /// The child's pid.
        pid: i32,
    },
    /// The parent is done with the child `pid`: reap it whenever it exits.
    Abandon {
        /// The child's pid.
        pid: i32,
    },
}

/// The zygote's first message: ready (with how long the imports took), or why not.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Ready {
    /// The zygote's pid.
    pub pid: u32,
    /// Seconds the imports took.
    pub import_s: f64,
    /// Triton was imported in its interpreter's mode: the workers it forks run on the CPU.
    pub interpret: bool,
    /// Why it cannot serve.
    pub error: Option<String>,
}

/// The reply to [`Op::Fork`] (the child's pidfd rides on it) and [`Op::Wait`].
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Answer {
    /// The forked child's pid.
    pub pid: Option<i32>,
    /// The raw wait status of a reaped child.
    pub status: Option<i32>,
    /// Why the operation failed.
    pub error: Option<String>,
}

impl Answer {
    /// An answer that says why the operation failed.
    fn failed(error: String) -> Answer {
        Answer {
            error: Some(error),
            ..Default::default()
        }
    }
}

/// Sends `body` as one message with `fds` on it.
fn send<T: Serialize>(sock: &UnixStream, body: &T, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let json = serde_json::to_vec(body)?;
    let len = u32::try_from(json.len())
        .map_err(|_| std::io::Error::other("message too long"))?
        .to_le_bytes();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many fds for one message"));
    }
    let sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&len), IoSlice::new(&json)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    // the fds went with the first bytes; whatever the socket did not take goes on plainly
    let mut rest = [len.as_slice(), json.as_slice()].concat();
    rest.drain(..sent);
    (&*sock).write_all(&rest)
}

/// Receives one message: its body and the fds on it (close-on-exec). `Ok(None)` at EOF.
fn receive<T: for<'de> Deserialize<'de>>(
    sock: &UnixStream,
) -> std::io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut len = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut len)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Ok(None);
    }
    (&*sock).read_exact(&mut len[got.bytes..])?;
    let n = u32::from_le_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(std::io::Error::other(format!("a message of {n} bytes")));
    }
    let mut body = vec![0u8; n];
    (&*sock).read_exact(&mut body)?;
    Ok(Some((serde_json::from_slice(&body)?, fds)))
}

/// Imports what every worker imports before its harness starts (`harness.init`'s imports),
/// Triton in its interpreter's mode where the workers will run on the CPU (`device` "cpu",
/// or "auto" with a torch built without CUDA or no NVIDIA driver's device file), which
/// Triton's language module needs set at import; then says whether CUDA stayed unstarted.
/// (Asking CUDA or NVML whether there is a GPU would leave their state, and the driver's
/// open files, to every child.)
const PREIMPORT: &std::ffi::CStr = c"
import os
import numpy, torch
if device == 'auto':
    interpret = torch.version.cuda is None or not os.path.exists('/dev/nvidiactl')
else:
    interpret = device == 'cpu'
if interpret:
    os.environ['TRITON_INTERPRET'] = '1'
import triton, triton.language, triton.testing
import torch._dynamo
cuda_started = bool(torch.cuda.is_initialized())
";

/// The zygote's side: imports, says it is ready on `sock_fd`, then forks workers until the
/// socket closes (`Ok(false)`). Returns `Ok(true)` in a forked child, whose stdio, fds,
/// environment and working directory are then the parent's for it, with Python started:
/// `bootstrap` goes on with the worker's start-up there.
///
/// # Errors
/// Start-up failed (reported to the parent too) or the socket broke.
///
/// `python_files`: where the embedded Python files were written, or why not
/// (`bootstrap::write_python_files`, called there with the SIGTERM handler installed, so
/// that this module needs nothing of `bootstrap`'s).
pub(crate) fn serve(sock_fd: RawFd, python_files: Result<PathBuf, String>) -> Result<bool, String> {
    // SAFETY: the fd the parent passed for this purpose, owned from here on.
    let sock = unsafe { UnixStream::from_raw_fd(sock_fd) };
    // SAFETY: fcntl with integer arguments on our own fd.
    unsafe { libc::fcntl(sock_fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // a candidate of the same user must not read or write the zygote's memory, which every
    // later worker starts from (Landlock's ptrace scope refuses it too, where there is one)
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
    let pid = std::process::id();
    let fail = |message: String| -> Result<bool, String> {
        let _ = send(
            &sock,
            &Ready {
                pid,
                import_s: 0.0,
                interpret: false,
                error: Some(message.clone()),
            },
            &[],
        );
        Err(message)
    };
    let Some(python) = std::env::var_os(env::PYTHON).map(PathBuf::from) else {
        return fail(format!("{} is not set", env::PYTHON));
    };
    if let Err(e) = python_files {
        return fail(e);
    }
    if let Err(e) = crate::py::init::initialize(&python) {
        return fail(e);
    }
    let t0 = std::time::Instant::now();
    let device = std::env::var(env::DEVICE).unwrap_or_else(|_| "auto".into());
    let imported = Python::attach(|py| -> PyResult<(bool, bool)> {
        let globals = pyo3::types::PyDict::new(py);
        globals.set_item("device", &device)?;
        py.run(PREIMPORT, Some(&globals), None)?;
        let flag = |name: &str| -> PyResult<bool> {
            globals
                .get_item(name)?
                .map_or(Ok(true), |v| v.extract::<bool>())
        };
        Ok((flag("cuda_started")?, flag("interpret")?))
    });
    let interpret = match imported {
        Ok((false, interpret)) => interpret,
        Ok((true, _)) => return fail("importing torch and triton started CUDA".into()),
        Err(e) => return fail(Python::attach(|py| e.value(py).to_string())),
    };
    let import_s = t0.elapsed().as_secs_f64();
    send(
        &sock,
        &Ready {
            pid,
            import_s,
            interpret,
            error: None,
        },
        &[],
    )
    .map_err(|e| format!("cannot report ready: {e}"))?;
    let mut abandoned: Vec<i32> = Vec::new();
    loop {
        // reap the children the parent is done with while waiting for the next message
        let mut poll = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, 500) };
        abandoned.retain(|&child| {
            let mut status = 0;
            // SAFETY: waitpid with a valid status pointer on our own child.
            unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) == 0 }
        });
        if ready <= 0 {
            continue;
        }
        let Some((op, fds)) = receive::<Op>(&sock).map_err(|e| format!("zygote: {e}"))? else {
            return Ok(false);
        };
        match op {
            Op::Fork { env, cwd, fd_vars } => {
                if fds.len() != 3 + fd_vars.len() {
                    let error = format!("{} fds for {} expected", fds.len(), 3 + fd_vars.len());
                    let _ = send(&sock, &Answer::failed(error), &[]);
                    continue;
                }
                match fork_python() {
                    Ok(0) => {
                        become_worker(fds, &fd_vars, &env, cwd.as_ref())?;
                        // closed already (`become_worker`): its number may name another fd
                        std::mem::forget(sock);
                        return Ok(true);
                    }
                    Ok(child) => {
                        drop(fds);
                        let reply = match rustix::process::Pid::from_raw(child)
                            .ok_or(rustix::io::Errno::SRCH)
                            .and_then(|p| {
                                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                            }) {
                            Ok(pidfd) => send(
                                &sock,
                                &Answer {
                                    pid: Some(child),
                                    ..Default::default()
                                },
                                &[pidfd.as_fd()],
                            ),
                            Err(e) => {
                                // SAFETY: kill and waitpid of our own child.
                                unsafe {
                                    libc::kill(child, libc::SIGKILL);
                                    libc::waitpid(child, std::ptr::null_mut(), 0);
                                }
                                let error = format!("no pidfd for the child: {e}");
                                send(&sock, &Answer::failed(error), &[])
                            }
                        };
                        reply.map_err(|e| format!("zygote: {e}"))?;
                    }
                    Err(e) => {
                        let error = format!("cannot fork: {e}");
                        let _ = send(&sock, &Answer::failed(error), &[]);
                    }
                }
            }
            Op::Wait { pid: child } => {
                let mut status = 0;
                // SAFETY: waitpid with a valid status pointer.
                let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
                let answer = if r == child {
                    Answer {
                        status: Some(status),
                        ..Default::default()
                    }
                } else if r == 0 {
                    Answer::default()
                } else {
                    Answer {
                        error: Some(std::io::Error::last_os_error().to_string()),
                        ..Default::default()
                    }
                };
                send(&sock, &answer, &[]).map_err(|e| format!("zygote: {e}"))?;
            }
            Op::Abandon { pid: child } => abandoned.push(child),
        }
    }
}

/// `os.fork()`: Python's own fork, which takes the interpreter's locks around the call and
/// resets its state in the child (`PyOS_AfterFork_Child`, the `os.register_at_fork` hooks).
fn fork_python() -> Result<i32, String> {
    Python::attach(|py| {
        py.import("os")
            .and_then(|os| os.call_method0("fork"))
            .and_then(|pid| pid.extract::<i32>())
            .map_err(|e| e.value(py).to_string())
    })
}

/// In the forked child: stdio from `fds[0..3]`, each later fd at 3, 4, … named by its
/// variable of `fd_vars`, every other fd closed (the zygote's socket with them), a session
/// of its own, the parent's environment changes (through `os.environ`, which also sets
/// the process's), and `cwd`.
fn become_worker(
    fds: Vec<OwnedFd>,
    fd_vars: &[String],
    env_changes: &[(OsString, Option<OsString>)],
    cwd: Option<&PathBuf>,
) -> Result<(), String> {
    let extra = fds.len() - 3;
    // SAFETY: dup2, fcntl, close_range and setsid on this single-threaded child's own fd
    // table; every source fd is one of `fds`, open until they are dropped below.
    unsafe {
        // the targets 0..3+extra may be taken by some of `fds` themselves: duplicate them all
        // above the range first
        // (their own numbers are closed below, with every other fd: owned no more)
        let high: Vec<RawFd> = fds
            .into_iter()
            .map(|fd| libc::fcntl(fd.into_raw_fd(), libc::F_DUPFD_CLOEXEC, 64))
            .collect();
        if high.iter().any(|&fd| fd < 0) {
            return Err("cannot duplicate the worker's fds".into());
        }
        for (target, &fd) in high.iter().enumerate() {
            if libc::dup2(fd, target as RawFd) < 0 {
                return Err(format!("cannot move fd {fd} to {target}"));
            }
        }
        // stdio and the payload/lease fds stay open in every process of the worker's
        for target in 0..3 + extra {
            libc::fcntl(target as RawFd, libc::F_SETFD, 0);
        }
        libc::syscall(libc::SYS_close_range, 3 + extra as u32, u32::MAX, 0u32);
        if libc::setsid() == -1 {
            return Err(format!(
                "cannot start a session: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let mut changes: Vec<(OsString, Option<OsString>)> = env_changes.to_vec();
    changes.push((env::ZYGOTE_FD.into(), None));
    for (i, var) in fd_vars.iter().enumerate() {
        changes.push((var.into(), Some((3 + i).to_string().into())));
    }
    set_environment(&changes)?;
    if let Some(dir) = cwd {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("cannot enter `{}`: {e}", dir.display()))?;
    }
    // an executed worker is dumpable (a candidate's CUDA writes its own /proc/self); the
    // reference worker makes itself undumpable again in its start-up
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
    Ok(())
}

/// Applies environment changes through Python's `os.environ`, which also calls `putenv`,
/// so that Python (which reads its own copy, taken when the zygote started) and Rust see
/// the same environment; and drops `tempfile`'s cached folder, taken under the zygote's.
pub(crate) fn set_environment(changes: &[(OsString, Option<OsString>)]) -> Result<(), String> {
    Python::attach(|py| -> PyResult<()> {
        let os = py.import("os")?;
        let environ = os.getattr("environ")?;
        for (key, value) in changes {
            match value {
                Some(v) => environ.set_item(key, v)?,
                None => {
                    environ.call_method1("pop", (key, py.None()))?;
                }
            }
        }
        py.import("tempfile")?.setattr("tempdir", py.None())?;
        Ok(())
    })
    .map_err(|e| Python::attach(|py| format!("cannot set the environment: {}", e.value(py))))
}

/// The process environment as changes for [`set_environment`]: after the sandbox set its
/// variables (`sandbox::restrict`, through `std::env`), Python's copy made to agree.
pub(crate) fn process_environment() -> Vec<(OsString, Option<OsString>)> {
    std::env::vars_os().map(|(k, v)| (k, Some(v))).collect()
}

/// The parent's handle on a running zygote.
pub(crate) struct ZygoteLink {
    sock: StdMutex<UnixStream>,
    /// The zygote's process (never read: held to be killed when the link is dropped (its children notice their
    /// parent's death and end, `bootstrap::exit_with_parent`, `sandbox::supervise`)).
    #[allow(dead_code)]
    process: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
    /// [`Ready::interpret`]: its workers run on the CPU.
    pub interpret: bool,
    /// Set when an exchange failed: the zygote is not used again.
    broken: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ZygoteLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZygoteLink")
            .field("pid", &self.pid)
            .finish()
    }
}

/// Whether workers may come from a zygote: `AUTOKERNEL_ZYGOTE=off` executes each one, as
/// before the zygote (to measure what it saves).
pub(crate) fn enabled() -> bool {
    std::env::var("AUTOKERNEL_ZYGOTE").map_or(true, |v| v != "off")
}

impl ZygoteLink {
    /// Starts a zygote from `cmd` (the worker program, with the interpreter and the device
    /// in its environment) and waits, at most `timeout`, for its imports.
    ///
    /// # Errors
    /// Why it did not start or is not ready: the caller executes workers instead.
    pub(crate) async fn start(
        mut cmd: tokio::process::Command,
        timeout: std::time::Duration,
    ) -> Result<ZygoteLink, String> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("no socket pair: {e}"))?;
        let fd = theirs.as_raw_fd();
        cmd.env(env::ZYGOTE_FD, fd.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        // SAFETY: between fork and exec, setsid and fcntl on the child's own fds only.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let process = cmd
            .spawn()
            .map_err(|e| format!("cannot start the zygote: {e}"))?;
        drop(theirs);
        let pid = process.id().unwrap_or(0);
        let reader = ours.try_clone().map_err(|e| e.to_string())?;
        let ready = tokio::task::spawn_blocking(move || receive::<Ready>(&reader));
        let ready = match tokio::time::timeout(timeout, ready).await {
            Err(_) => return Err(format!("not ready within {} s", timeout.as_secs())),
            Ok(Err(e)) => return Err(e.to_string()),
            Ok(Ok(Err(e))) => return Err(e.to_string()),
            Ok(Ok(Ok(None))) => return Err("it exited before it was ready".into()),
            Ok(Ok(Ok(Some((ready, _))))) => ready,
        };
        if let Some(e) = ready.error {
            return Err(e);
        }
        tracing::debug!(pid, import_s = ready.import_s, "zygote ready");
        Ok(ZygoteLink {
            sock: StdMutex::new(ours),
            process,
            pid,
            interpret: ready.interpret,
            broken: Default::default(),
        })
    }

    /// One request and its answer, with the fds that came on it.
    fn exchange(&self, op: &Op, fds: &[BorrowedFd<'_>]) -> std::io::Result<(Answer, Vec<OwnedFd>)> {
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let answer = send(&sock, op, fds).and_then(|()| {
            receive::<Answer>(&sock)?
                .ok_or_else(|| std::io::Error::other("the zygote closed its socket"))
        });
        if answer.is_err() {
            self.broken
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        answer
    }

    /// Forks a worker with `stdio` (its stdin, stdout, stderr) and `extra` fds (each named to
    /// the child by its variable), `env` changed and in `cwd`: its pid and pidfd.
    ///
    /// # Errors
    /// The zygote refused or is gone.
    pub(crate) fn fork(
        &self,
        stdio: [BorrowedFd<'_>; 3],
        extra: &[(&str, BorrowedFd<'_>)],
        env: Vec<(OsString, Option<OsString>)>,
        cwd: Option<PathBuf>,
    ) -> std::io::Result<(u32, OwnedFd)> {
        let mut fds: Vec<BorrowedFd<'_>> = stdio.to_vec();
        fds.extend(extra.iter().map(|(_, fd)| *fd));
        let op = Op::Fork {
            env,
            cwd,
            fd_vars: extra.iter().map(|(v, _)| v.to_string()).collect(),
        };
        let (answer, mut received) = self.exchange(&op, &fds)?;
        match (answer.pid, received.pop(), answer.error) {
            (Some(pid), Some(pidfd), _) => Ok((pid as u32, pidfd)),
            (_, _, error) => Err(std::io::Error::other(
                error.unwrap_or_else(|| "no child and no reason".into()),
            )),
        }
    }

    /// Reaps the exited child `pid`: its raw wait status (`None`: still running).
    ///
    /// # Errors
    /// The zygote could not reap it or is gone.
    pub(crate) fn wait(&self, pid: u32) -> std::io::Result<Option<i32>> {
        let (answer, _) = self.exchange(&Op::Wait { pid: pid as i32 }, &[])?;
        match answer.error {
            Some(e) => Err(std::io::Error::other(e)),
            None => Ok(answer.status),
        }
    }

    /// Leaves the child `pid` to the zygote, which reaps it once it exits.
    pub(crate) fn abandon(&self, pid: u32) {
        let sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let _ = send(&sock, &Op::Abandon { pid: pid as i32 }, &[]);
    }

    /// Whether it can fork a worker for `device`: Triton imported in the interpreter's mode
    /// for the CPU, in the GPU's for CUDA, either for a worker left to choose.
    pub(crate) fn serves(&self, device: autokernel_core::Device) -> bool {
        use autokernel_core::Device;
        match device {
            Device::Cpu => self.interpret,
            Device::Cuda => !self.interpret,
            Device::Auto => true,
        }
    }

    /// Whether an exchange with it failed (it died, or broke the protocol).
    pub(crate) fn broken(&self) -> bool {
        self.broken.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A worker forked by a zygote, as the parent holds it: its pid, a pidfd that becomes
/// readable when it exits, and the zygote that reaps it.
pub(crate) struct ForkedProcess {
    pid: u32,
    pidfd: OwnedFd,
    zygote: std::sync::Arc<ZygoteLink>,
    status: Option<std::process::ExitStatus>,
}

impl ForkedProcess {
    /// The process `pid` that `zygote` forked, with its `pidfd`.
    pub(crate) fn new(pid: u32, pidfd: OwnedFd, zygote: std::sync::Arc<ZygoteLink>) -> Self {
        ForkedProcess {
            pid,
            pidfd,
            zygote,
            status: None,
        }
    }

    /// Its pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it has exited (its pidfd is readable), without waiting.
    fn exited(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd, no wait.
        unsafe { libc::poll(&mut poll, 1, 0) > 0 }
    }

    /// Its exit status when it has exited (reaped then, by the zygote), else `None`, as
    /// `std::process::Child::try_wait`.
    ///
    /// # Errors
    /// The zygote could not reap it (the zygote is gone: init reaped it).
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if self.status.is_some() || !self.exited() {
            return Ok(self.status);
        }
        match self.zygote.wait(self.pid)? {
            Some(raw) => {
                self.status = Some(std::process::ExitStatus::from_raw(raw));
                Ok(self.status)
            }
            None => Err(std::io::Error::other(
                "its pidfd says it exited, the zygote that it has not",
            )),
        }
    }

    /// Waits for it to exit (polling its pidfd every 5 ms) and reaps it.
    ///
    /// # Errors
    /// As [`ForkedProcess::try_wait`].
    pub(crate) async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(status);
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl Drop for ForkedProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.zygote.abandon(self.pid);
        }
    }
}

/// A pipe whose both ends are close-on-exec: `(read, write)`.
///
/// # Errors
/// `pipe2` failed (out of fds).
pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 with a 2-int buffer; the fds it returns are owned from here on.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
