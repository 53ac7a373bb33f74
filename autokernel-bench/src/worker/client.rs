//! The parent side: spawning the worker, the per-request deadline, restarts.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use autokernel_core::{Catalogue, Device};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::protocol::{env, Envelope, Hello, Reply, ReplyBody, Request};
use crate::python_env::{preflight, resolve_python};
use crate::WorkerError;

/// Lines of the worker's stderr kept for `CRASH`/`TIMEOUT` reasons.
const STDERR_LINES: usize = 40;
/// Longest stderr line kept, in bytes.
const STDERR_LINE_MAX: usize = 400;

/// How to start the worker process. Default: this executable with the argument `worker`
/// (the `autokernel` binary has a hidden `worker` verb that calls
/// [`crate::serve_worker`]). With `args` empty, the program must call `serve_worker()`
/// unconditionally (a test-only bin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProgram {
    /// The executable.
    pub exe: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

impl Default for WorkerProgram {
    fn default() -> Self {
        WorkerProgram {
            exe: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("autokernel")),
            args: vec!["worker".to_string()],
        }
    }
}

/// How to run the worker.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The interpreter to adopt; `None` → [`resolve_python`]`(None)`.
    pub python: Option<PathBuf>,
    /// The program hosting [`crate::serve_worker`].
    pub program: WorkerProgram,
    /// Where kernels run. A request for `Device::Auto` (the default of a `BenchRequest`)
    /// runs here; a request for another device restarts the worker on that one.
    pub device: Device,
    /// A measured copy bandwidth in GB/s (1e9 B/s) overriding the GPU table's, for % of peak.
    pub gpu_bandwidth_gb_s: Option<f64>,
}

impl WorkerOptions {
    /// Defaults: interpreter resolved from the environment, this executable's `worker` verb.
    pub fn new(device: Device) -> Self {
        WorkerOptions {
            python: None,
            program: WorkerProgram::default(),
            device,
            gpu_bandwidth_gb_s: None,
        }
    }
}

/// What a warm worker reports about itself.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct WorkerStatus {
    /// Its process id.
    pub pid: u32,
    /// Seconds since it finished importing torch, triton and the harness.
    pub imported_s_ago: f64,
    /// `cuda` or `cpu`.
    pub device: String,
}

/// A running worker process.
struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    ring: Arc<StdMutex<VecDeque<String>>>,
    stderr_task: Option<JoinHandle<()>>,
    pid: u32,
    device: Device,
    hello: Hello,
}

impl Running {
    /// Kills the whole process group (the worker and anything it started) and reaps it.
    /// Returns the exit description.
    async fn kill(mut self) -> (String, String) {
        // The child is not reaped yet (at worst a zombie), so its pid still names its group.
        // SAFETY: killpg with a pid we spawned as a group leader and have not reaped.
        unsafe {
            libc::killpg(self.pid as libc::pid_t, libc::SIGKILL);
        }
        let status = match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(Ok(s)) => describe_status(s),
            Ok(Err(e)) => format!("status unknown: {e}"),
            Err(_) => "did not exit after SIGKILL".to_string(),
        };
        let tail = self.tail().await;
        (status, tail)
    }

    /// The worker exited on its own (EOF on the reply channel): reap, kill stragglers.
    async fn reap(mut self) -> (String, String) {
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(Ok(s)) => {
                let tail = self.tail().await;
                (describe_status(s), tail)
            }
            _ => self.kill().await,
        }
    }

    async fn tail(&mut self) -> String {
        if let Some(task) = self.stderr_task.take() {
            // the pipe closes once the group is dead; give the reader a moment to drain it
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = &self.stderr_task {
            task.abort();
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: the child is alive, so its pid names the group we created.
            unsafe {
                libc::killpg(self.pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "signal",
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        _ => status.to_string(),
    }
}

struct State {
    running: Option<Running>,
    /// The interpreter, once resolved and checked.
    python: Option<PathBuf>,
    next_id: u64,
}

/// A warm worker process, started on the first request and restarted after a crash, a
/// timeout, a CUDA error or tampering. Requests are served one at a time (`&self` methods
/// wait their turn). Dropping the `Worker` kills the process group.
pub struct Worker {
    options: WorkerOptions,
    memory_limit_mb: Option<u64>,
    /// The catalogue sent to the worker when it starts, and extra registry modules.
    kinds: Option<(Catalogue, Vec<PathBuf>)>,
    startup_timeout: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker that starts lazily, on the first request.
    pub fn new(options: WorkerOptions) -> Worker {
        Worker {
            options,
            memory_limit_mb: None,
            kinds: None,
            startup_timeout: Duration::from_secs(180),
            state: Mutex::new(State {
                running: None,
                python: None,
                next_id: 1,
            }),
        }
    }

    /// Limits the worker's address space (RLIMIT_AS) to `mb` MB (2²⁰ B), so a runaway
    /// allocation fails inside Python instead of exhausting the machine. CPU only: CUDA
    /// reserves far more address space than it uses.
    pub fn with_memory_limit_mb(mut self, mb: u64) -> Worker {
        self.memory_limit_mb = Some(mb);
        self
    }

    /// Judges the kinds of `catalogue` instead of the built-in ones: the worker gets it as
    /// JSON when it starts, imports each Python file of `registry_modules` after the
    /// built-in registry (each registers its kinds' reference and input generator with
    /// `catalogue.register`), and refuses to start, naming the kind, when the catalogue and
    /// the registry disagree. The extension hook for a kind without a
    /// [`autokernel_core::KernelKind`] variant (tests, experiments): docs/kernels.md,
    /// "Adding a kind".
    pub fn with_kinds(mut self, catalogue: Catalogue, registry_modules: Vec<PathBuf>) -> Worker {
        self.kinds = Some((catalogue, registry_modules));
        self
    }

    /// The options this worker was made with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Runs `function(**kwargs)` from the Python file `script` inside the warm worker and
    /// returns its JSON-serialisable result.
    ///
    /// # Errors
    /// [`WorkerError::Python`] when it raises (message and traceback);
    /// [`WorkerError::Timeout`] / [`WorkerError::Crashed`] when it hangs or kills the
    /// worker (restarted on the next call); environment errors as for any request.
    pub async fn call_script(
        &self,
        script: &Path,
        function: &str,
        kwargs: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, WorkerError> {
        let script = std::path::absolute(script)?;
        let request = Request::CallScript {
            script,
            function: function.to_string(),
            kwargs,
        };
        match self.request(self.options.device, request, timeout).await? {
            ReplyBody::Ok { value } => Ok(value),
            ReplyBody::PythonError { message, traceback } => {
                Err(WorkerError::Python { message, traceback })
            }
            ReplyBody::Error { message } => Err(WorkerError::Protocol { message }),
        }
    }

    /// Starts the worker if needed and returns its pid and how long ago it imported torch
    /// (a warm worker answers in milliseconds with the same pid).
    ///
    /// # Errors
    /// As [`Worker::call_script`].
    pub async fn status(&self, timeout: Duration) -> Result<WorkerStatus, WorkerError> {
        match self
            .request(self.options.device, Request::Status, timeout)
            .await?
        {
            ReplyBody::Ok { value } => {
                serde_json::from_value(value).map_err(|e| WorkerError::Protocol {
                    message: e.to_string(),
                })
            }
            other => Err(WorkerError::Protocol {
                message: format!("unexpected reply to status: {other:?}"),
            }),
        }
    }

    /// Stops the worker now (it starts again on the next request).
    pub async fn shutdown(&self) {
        let mut state = self.state.lock().await;
        if let Some(r) = state.running.take() {
            r.kill().await;
        }
    }

    /// The device name the running worker reported (`cuda`/`cpu` and the GPU's name), if
    /// one is running.
    pub async fn device_name(&self) -> Option<(String, String)> {
        let state = self.state.lock().await;
        state
            .running
            .as_ref()
            .map(|r| (r.hello.device.clone(), r.hello.device_name.clone()))
    }

    /// Sends one request, starting (or restarting, for another device) the worker first.
    pub(crate) async fn request(
        &self,
        device: Device,
        request: Request,
        timeout: Duration,
    ) -> Result<ReplyBody, WorkerError> {
        // a request that leaves the device open runs where the worker was configured to
        // (else a worker shared by requests of both kinds restarted at every switch)
        let device = if device == Device::Auto {
            self.options.device
        } else {
            device
        };
        let mut state = self.state.lock().await;
        if state.running.as_ref().is_some_and(|r| r.device != device) {
            if let Some(r) = state.running.take() {
                r.kill().await;
            }
        }
        if state.running.is_none() {
            let python = match &state.python {
                Some(p) => p.clone(),
                None => {
                    let p = resolve_python(self.options.python.as_deref())?;
                    let p = preflight(&p)?;
                    state.python = Some(p.clone());
                    p
                }
            };
            state.running = Some(self.spawn(&python, device).await?);
        }
        let id = state.next_id;
        state.next_id += 1;
        let nonce = nonce(id);
        let envelope = Envelope {
            id,
            nonce: nonce.clone(),
            request,
        };
        let mut line = serde_json::to_string(&envelope).map_err(|e| WorkerError::Protocol {
            message: e.to_string(),
        })?;
        line.push('\n');
        tracing::trace!(%line, "request to the bench worker");
        let running = state.running.as_mut().expect("started above");
        let written = async {
            running.stdin.write_all(line.as_bytes()).await?;
            running.stdin.flush().await
        }
        .await;
        let mut reply_line = String::new();
        let read = match written {
            Ok(()) => {
                tokio::time::timeout(timeout, running.stdout.read_line(&mut reply_line)).await
            }
            Err(e) => Ok(Err(e)),
        };
        match read {
            Err(_elapsed) => {
                let r = state.running.take().expect("running");
                let (_status, stderr_tail) = r.kill().await;
                Err(WorkerError::Timeout {
                    limit_s: timeout.as_secs_f64(),
                    stderr_tail,
                })
            }
            Ok(Err(_)) | Ok(Ok(0)) => {
                let r = state.running.take().expect("running");
                let (status, stderr_tail) = r.reap().await;
                Err(WorkerError::Crashed {
                    status,
                    stderr_tail,
                })
            }
            Ok(Ok(_)) => {
                tracing::trace!(line = %reply_line.trim_end(), "reply from the bench worker");
                let reply: Result<Reply, _> = serde_json::from_str(reply_line.trim_end());
                match reply {
                    Ok(reply) if reply.id == id && reply.nonce == nonce => {
                        if reply.restart {
                            if let Some(r) = state.running.take() {
                                tracing::debug!(pid = r.pid, "bench worker asked to be restarted");
                                r.reap().await;
                            }
                        }
                        Ok(reply.body)
                    }
                    _ => {
                        if let Some(r) = state.running.take() {
                            r.kill().await;
                        }
                        Err(WorkerError::Protocol {
                            message: format!(
                                "a line on the reply channel is not the reply to request {id}: `{}`",
                                reply_line.trim_end().chars().take(200).collect::<String>()
                            ),
                        })
                    }
                }
            }
        }
    }

    async fn spawn(&self, python: &Path, device: Device) -> Result<Running, WorkerError> {
        let program = &self.options.program;
        if std::env::var_os(env::PYTHON).is_some() {
            // This process was itself started as a worker (the parent sets env::PYTHON for
            // it) and runs main() instead of serve_worker(): starting another worker here
            // would nest processes without end.
            return Err(WorkerError::Startup {
                message: format!(
                    "this process was started as a bench worker ({} is set) but did not \
                     serve: a program that hosts the default WorkerProgram must begin main() \
                     with `if std::env::args().nth(1).as_deref() == Some(\"worker\") {{ return \
                     autokernel_bench::serve_worker(); }}`",
                    env::PYTHON
                ),
                stderr_tail: String::new(),
            });
        }
        let device_name = match device {
            Device::Auto => "auto",
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        };
        let mut cmd = tokio::process::Command::new(&program.exe);
        cmd.args(&program.args)
            .env(env::PYTHON, python)
            .env(env::DEVICE, device_name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let (catalogue, modules) = match &self.kinds {
            Some((c, m)) => (c, m.as_slice()),
            None => (Catalogue::builtin(), &[][..]),
        };
        cmd.env(env::CATALOGUE, catalogue.to_json());
        match std::env::join_paths(modules) {
            Ok(joined) if !modules.is_empty() => cmd.env(env::REGISTRY, joined),
            _ => cmd.env_remove(env::REGISTRY),
        };
        match self.memory_limit_mb {
            Some(mb) => cmd.env(env::MEMORY_LIMIT_MB, mb.to_string()),
            None => cmd.env_remove(env::MEMORY_LIMIT_MB),
        };
        if device == Device::Cpu {
            // before triton is imported; the harness sets it too
            cmd.env("TRITON_INTERPRET", "1");
        }
        let mut child = cmd.spawn().map_err(|source| WorkerError::Spawn {
            exe: program.exe.clone(),
            source,
        })?;
        let pid = child.id().unwrap_or(0);
        tracing::debug!(pid, exe = %program.exe.display(), python = %python.display(), device = device_name, "starting the bench worker");
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(WorkerError::Protocol {
                message: "the worker's pipes were not created".into(),
            });
        };
        let ring = Arc::new(StdMutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let ring_w = Arc::clone(&ring);
        let stderr_task = tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let mut line = String::from_utf8_lossy(&buf).trim_end().to_string();
                        if line.len() > STDERR_LINE_MAX {
                            let mut cut = STDERR_LINE_MAX;
                            while !line.is_char_boundary(cut) {
                                cut -= 1;
                            }
                            line.truncate(cut);
                            line.push('…');
                        }
                        tracing::trace!(target: "autokernel_bench::worker_stderr", "{line}");
                        let mut ring = ring_w.lock().unwrap_or_else(|p| p.into_inner());
                        if ring.len() == STDERR_LINES {
                            ring.pop_front();
                        }
                        ring.push_back(line);
                    }
                }
            }
        });
        let mut running = Running {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            ring,
            stderr_task: Some(stderr_task),
            pid,
            device,
            hello: Hello {
                pid,
                error: None,
                device: String::new(),
                device_name: String::new(),
                import_s: 0.0,
                warning: None,
            },
        };
        let mut line = String::new();
        let read =
            tokio::time::timeout(self.startup_timeout, running.stdout.read_line(&mut line)).await;
        let hello: Result<Hello, String> = match read {
            Err(_) => Err(format!(
                "no hello within {} s",
                self.startup_timeout.as_secs()
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(0)) => Err(format!(
                "the worker exited before it was ready; `{}` must call \
                 autokernel_bench::serve_worker() when run with {:?} (see WorkerProgram)",
                self.options.program.exe.display(),
                self.options.program.args
            )),
            Ok(Ok(_)) => serde_json::from_str::<Hello>(line.trim_end())
                .map_err(|e| format!("unreadable hello `{}`: {e}", line.trim_end())),
        };
        match hello {
            Ok(h) if h.error.is_none() => {
                if let Some(w) = &h.warning {
                    tracing::warn!("bench worker: {w}");
                }
                tracing::debug!(pid, device = %h.device, name = %h.device_name, import_s = h.import_s, "bench worker ready");
                running.hello = h;
                Ok(running)
            }
            Ok(h) => {
                let (_, tail) = running.reap().await;
                let message = h.error.unwrap_or_default();
                Err(WorkerError::Startup {
                    stderr_tail: tail_without_message(&tail, &message),
                    message,
                })
            }
            Err(message) => {
                let (status, tail) = running.kill().await;
                Err(WorkerError::Startup {
                    message: format!("{message} ({status})"),
                    stderr_tail: tail,
                })
            }
        }
    }
}

fn nonce(id: u64) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(id);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:016x}", h.finish())
}

/// The worker's stderr tail up to the line that logs `fatal: <message>`, which repeats the
/// message it sent (a start-up error would otherwise be printed twice); the lines before it
/// are kept, and the whole tail where no line repeats the message.
fn tail_without_message(tail: &str, message: &str) -> String {
    match tail.find(&format!("fatal: {message}")) {
        Some(at) => tail[..at]
            .rsplit_once('\n')
            .map_or("", |(before, _)| before)
            .to_string(),
        None => tail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::tail_without_message;

    #[test]
    fn a_tail_that_repeats_the_startup_message_is_cut_before_it() {
        let message = "Traceback (most recent call last):\n  x\nRuntimeError: no GPU";
        let tail = format!("import warning\nautokernel-worker: fatal: {message}\n");
        assert_eq!(tail_without_message(&tail, message), "import warning");
        let only = format!("autokernel-worker: fatal: {message}");
        assert_eq!(tail_without_message(&only, message), "");
        assert_eq!(tail_without_message("segfault\n", message), "segfault\n");
    }
}
