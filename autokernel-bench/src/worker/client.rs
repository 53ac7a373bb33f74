//! The parent side: spawning the workers (a warm one for scripts, one per candidate, and the
//! trusted reference worker), the per-request deadline, restarts, and the answers to a
//! candidate's worker's calls for checks ([`super::checks`]).

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use autokernel_core::{Catalogue, Device};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::Child;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::checks::{self, Scope};
use super::launchers::LauncherSignatures;
use super::lease::LeaseFile;
use super::payload::PayloadArea;
use super::requests::PROBLEM_OUTPUTS;
use super::timing;
use super::zygote::{self, ForkedProcess, ZygoteLink};
use crate::protocol::{
    env, Answer, Call, Envelope, Hello, ParentAnswer, ParentCall, ProblemJob, ReferenceJob,
    ReferenceTiming, Reply, ReplyBody, Request,
};
use crate::python_env::{preflight, resolve_python};
use crate::sandbox::{self, SandboxOptions};
use crate::WorkerError;

/// Lines of the worker's stderr kept for `CRASH`/`TIMEOUT` reasons.
const STDERR_LINES: usize = 40;
/// Longest stderr line kept, in bytes.
const STDERR_LINE_MAX: usize = 400;
/// Longest line the parent reads from a worker's reply channel, in bytes: a bench's reply
/// is a few kB, and a candidate's process can write to the channel, so a line without end
/// must not grow the parent's memory without end.
const REPLY_LINE_MAX: u64 = 16 << 20;

/// The name of the exception the trusted worker raises for offsets of a timed call's inputs
/// that no rotation draws (`harness.OffsetsRefused`), as its error message carries it.
const OFFSETS_REFUSED: &str = "OffsetsRefused";

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

/// A worker's process: executed by this process, or forked by the zygote.
enum Process {
    Spawned(Child),
    Forked(ForkedProcess),
}

impl Process {
    /// As `std::process::Child::try_wait`.
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        match self {
            Process::Spawned(c) => c.try_wait(),
            Process::Forked(f) => f.try_wait(),
        }
    }

    /// Waits for the process to exit and reaps it.
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Process::Spawned(c) => c.wait().await,
            Process::Forked(f) => f.wait().await,
        }
    }
}

/// The parent's end of a worker's request channel (its stdin).
type RequestChannel = Box<dyn AsyncWrite + Unpin + Send>;
/// The parent's end of a worker's reply channel (its stdout) or of its stderr.
type ReplyChannel = Box<dyn AsyncRead + Unpin + Send>;

/// A running worker process.
struct Running {
    child: Process,
    stdin: RequestChannel,
    stdout: BufReader<ReplyChannel>,
    ring: Arc<StdMutex<VecDeque<String>>>,
    stderr_task: Option<JoinHandle<()>>,
    pid: u32,
    device: Device,
    /// What it is for.
    role: Role,
    hello: Hello,
    /// A candidate's worker: its private scratch folder (removed when this is dropped, after
    /// the process), and a launcher that ends it cleanly on [`sandbox::STOP_SIGNAL`].
    scratch: Option<tempfile::TempDir>,
    /// Where its check outputs or references arrive (`payload.rs`), and the parent's own
    /// copy of the last ones, its memory reused from check to check.
    payload: PayloadArea,
    received: Vec<f32>,
}

impl Running {
    /// Ends a sandboxed worker through its launcher, which returns once every process of the
    /// candidate is gone (a namespace torn down, a subreaper's sweep); false when it did not
    /// within `limit`, or this worker has no launcher.
    async fn stop_through_launcher(&mut self, limit: Duration) -> bool {
        if self.scratch.is_none() {
            return false;
        }
        if !matches!(self.child.try_wait(), Ok(None)) {
            // gone already (and now reaped): its pid may name another process from here on
            return true;
        }
        // SAFETY: kill with the pid of our child, alive a moment ago and not reaped.
        unsafe {
            libc::kill(self.pid as libc::pid_t, sandbox::STOP_SIGNAL);
        }
        matches!(
            tokio::time::timeout(limit, self.child.wait()).await,
            Ok(Ok(_))
        )
    }

    /// Ends a candidate's worker after its one request: through the launcher, else as
    /// [`Running::kill`]. Returns when the process and its descendants are gone.
    async fn retire(mut self) {
        if !self.stop_through_launcher(Duration::from_secs(10)).await {
            self.kill().await;
        }
    }

    /// Writes `answer` to call `id` (`nonce`) on the worker's request channel before
    /// `deadline`: a worker that stops reading its answers must not hold the parent.
    ///
    /// # Errors
    /// [`WorkerError::Timeout`] past the deadline, [`WorkerError::Crashed`] when the channel
    /// broke (the caller fills in their details).
    async fn send_answer(
        &mut self,
        id: u64,
        nonce: &str,
        answer: ParentAnswer,
        deadline: tokio::time::Instant,
    ) -> Result<(), WorkerError> {
        let mut line = serde_json::to_string(&Answer {
            id,
            nonce: nonce.to_string(),
            answer,
        })
        .map_err(|e| WorkerError::Protocol {
            message: e.to_string(),
        })?;
        line.push('\n');
        let write = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(crashed()),
            Err(_) => Err(timed_out()),
        }
    }

    /// Appends the worker's next line to `line`, at most [`REPLY_LINE_MAX`] bytes of it (a
    /// line that long without its newline was cut there), waiting until `deadline` at most.
    ///
    /// # Errors
    /// `Err(Elapsed)` at the deadline; `Ok(Err(_))` when the reply channel fails; `Ok(Ok(0))`
    /// means it is closed.
    async fn read_line(
        &mut self,
        line: &mut String,
        deadline: tokio::time::Instant,
    ) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
        let mut bounded = (&mut self.stdout).take(REPLY_LINE_MAX);
        tokio::time::timeout_at(deadline, bounded.read_line(line)).await
    }

    /// Reads the worker's next line before `deadline`, which must be a call of request `id`
    /// (`nonce`).
    ///
    /// # Errors
    /// As [`Running::send_answer`], and [`WorkerError::Protocol`] for any other line.
    async fn read_call(
        &mut self,
        id: u64,
        nonce: &str,
        deadline: tokio::time::Instant,
    ) -> Result<ParentCall, WorkerError> {
        let mut line = String::new();
        match self.read_line(&mut line, deadline).await {
            Err(_) => return Err(timed_out()),
            Ok(Err(_)) | Ok(Ok(0)) => return Err(crashed()),
            Ok(Ok(_)) => {}
        }
        match serde_json::from_str::<Call>(line.trim_end()) {
            Ok(call) if call.id == id && call.nonce == nonce => Ok(call.call),
            _ => Err(WorkerError::Protocol {
                message: format!(
                    "a line that is not a call of request {id}: `{}`",
                    line.trim_end().chars().take(200).collect::<String>()
                ),
            }),
        }
    }

    /// Kills the whole process group (the worker and anything it started) and reaps it.
    /// Returns the exit description.
    async fn kill(mut self) -> (String, String) {
        // a sandboxed worker: the launcher first, so that the candidate's daemons go too
        if !self.stop_through_launcher(Duration::from_secs(3)).await {
            // The child is not reaped yet (at worst a zombie), so its pid still names its
            // group.
            // SAFETY: killpg with a pid we spawned as a group leader and have not reaped.
            unsafe {
                libc::killpg(self.pid as libc::pid_t, libc::SIGKILL);
            }
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

/// What a worker process is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Requests that run no candidate (status, scripts), kept warm.
    Shared,
    /// One candidate's request, sandboxed, then retired.
    Candidate,
    /// The trusted reference worker ([`State::reference`]).
    Reference,
}

/// The first `numel` float32 values of a worker's payload `area`, copied into `buffer`
/// (its memory reused) on a blocking thread: up to 800 MB.
async fn read_payload(
    area: PayloadArea,
    numel: usize,
    mut buffer: Vec<f32>,
) -> std::io::Result<Vec<f32>> {
    tokio::task::spawn_blocking(move || area.read_into(numel, &mut buffer).map(|()| buffer))
        .await
        .map_err(std::io::Error::other)?
}

/// A worker that died mid-request, its details left for the caller.
fn crashed() -> WorkerError {
    WorkerError::Crashed {
        status: String::new(),
        stderr_tail: String::new(),
    }
}

/// A worker past its request's deadline, its details left for the caller.
fn timed_out() -> WorkerError {
    WorkerError::Timeout {
        limit_s: 0.0,
        stderr_tail: String::new(),
    }
}

struct State {
    /// The worker of requests that run no candidate (status, scripts), kept warm.
    running: Option<Running>,
    /// The trusted reference worker (issue 21, point 1): computes and times references for
    /// the candidates' checks, runs nothing else, and is never handed a candidate.
    reference: Option<Running>,
    /// Candidates' workers started ahead of need (imports under way or done), each to serve
    /// one candidate request and be retired.
    spares: VecDeque<Running>,
    /// The hello of the last candidate's worker (its device), for [`Worker::device_name`].
    last_candidate_hello: Option<Hello>,
    /// Warnings of workers already logged (a sandbox warning would repeat per candidate).
    warned: std::collections::HashSet<String>,
    /// The interpreter, once resolved and checked.
    python: Option<PathBuf>,
    /// The zygote that forks the candidates' and the reference's workers (`zygote.rs`).
    zygote: Option<Arc<ZygoteLink>>,
    /// A zygote failed to start or broke: workers are executed from then on.
    zygote_failed: bool,
    next_id: u64,
}

impl State {
    fn new() -> State {
        State {
            running: None,
            reference: None,
            spares: VecDeque::new(),
            last_candidate_hello: None,
            warned: Default::default(),
            python: None,
            zygote: None,
            zygote_failed: false,
            next_id: 1,
        }
    }

    /// The hello of the warm worker, else of the last candidate's worker.
    fn last_hello(&self) -> Option<&Hello> {
        self.running
            .as_ref()
            .map(|r| &r.hello)
            .or(self.last_candidate_hello.as_ref())
    }

    /// `device`, with `Auto` taken as the device an earlier worker of this `Worker` found
    /// (its hello), so that a candidate's worker never settles on the CPU where the one
    /// before it had the GPU: when it cannot start CUDA, it fails and says why.
    fn resolved(&self, device: Device) -> Device {
        if device != Device::Auto {
            return device;
        }
        match self.last_hello().map(|h| h.device.as_str()) {
            Some("cuda") => Device::Cuda,
            Some("cpu") => Device::Cpu,
            _ => Device::Auto,
        }
    }
}

/// A warm worker process, started on the first request and restarted after a crash, a
/// timeout, a CUDA error or tampering. Requests are served one at a time (`&self` methods
/// wait their turn). Dropping the `Worker` kills the process group.
pub struct Worker {
    options: WorkerOptions,
    memory_limit_mb: Option<u64>,
    sandbox: SandboxOptions,
    /// How many candidates' workers start ahead of need ([`Worker::with_spare_workers`]).
    spare_workers: usize,
    /// The catalogue sent to the worker when it starts, and extra registry modules.
    kinds: Option<(Catalogue, Vec<PathBuf>)>,
    startup_timeout: Duration,
    state: Mutex<State>,
    /// The Triton launcher signatures candidates' workers reported, built ahead by the
    /// workers launched after them.
    launchers: StdMutex<LauncherSignatures>,
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
            sandbox: SandboxOptions::default(),
            spare_workers: default_spare_workers(),
            kinds: None,
            startup_timeout: Duration::from_secs(180),
            state: Mutex::new(State::new()),
            launchers: StdMutex::new(LauncherSignatures::default()),
        }
    }

    /// Limits the worker's address space (RLIMIT_AS) to `mb` MB (2²⁰ B), so a runaway
    /// allocation fails inside Python instead of exhausting the machine. CPU only: CUDA
    /// reserves far more address space than it uses.
    pub fn with_memory_limit_mb(mut self, mb: u64) -> Worker {
        self.memory_limit_mb = Some(mb);
        self
    }

    /// Keeps `n` candidates' workers starting ahead of need instead of the default,
    /// [`default_spare_workers`]; 0 starts each one when its request comes.
    pub fn with_spare_workers(mut self, n: usize) -> Worker {
        self.spare_workers = n;
        self
    }

    /// Sandboxes the workers that run candidates with `options` instead of the default
    /// (the strongest the kernel allows; docs/bench.md, "The sandbox").
    pub fn with_sandbox(mut self, options: SandboxOptions) -> Worker {
        self.sandbox = options;
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

    /// Stops the worker now, and the candidates' spare workers (they start again on the next
    /// request).
    pub async fn shutdown(&self) {
        let mut state = self.state.lock().await;
        if let Some(r) = state.running.take() {
            r.kill().await;
        }
        if let Some(r) = state.reference.take() {
            r.kill().await;
        }
        while let Some(r) = state.spares.pop_front() {
            r.retire().await;
        }
        state.zygote = None;
    }

    /// The process ids of the candidates' workers started ahead of need, oldest first (for
    /// diagnostics and tests: [`Worker::with_spare_workers`] says how many are kept).
    pub async fn spare_pids(&self) -> Vec<u32> {
        self.state
            .lock()
            .await
            .spares
            .iter()
            .map(|r| r.pid)
            .collect()
    }

    /// The process id of the trusted reference worker, once a candidate's request started
    /// it (for diagnostics and tests: it computes every reference, and no candidate may
    /// reach it).
    pub async fn reference_pid(&self) -> Option<u32> {
        self.state.lock().await.reference.as_ref().map(|r| r.pid)
    }

    /// The device name the running worker reported (`cuda`/`cpu` and the GPU's name), if
    /// one is running.
    pub async fn device_name(&self) -> Option<(String, String)> {
        let state = self.state.lock().await;
        state
            .last_hello()
            .map(|h| (h.device.clone(), h.device_name.clone()))
    }

    /// Sends one request, starting (or restarting, for another device) the worker first. A
    /// request that runs a candidate (bench, compare) goes to a sandboxed worker of its own
    /// that nothing later reuses ([`Worker::candidate_request`]).
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
        if matches!(request, Request::Bench(_) | Request::Compare(_)) {
            return self.candidate_request(device, request, timeout, None).await;
        }
        let mut state = self.state.lock().await;
        if state.running.as_ref().is_some_and(|r| r.device != device) {
            if let Some(r) = state.running.take() {
                r.kill().await;
            }
        }
        let running = match state.running.take() {
            Some(r) => r,
            None => {
                let python = self.python(&mut state)?;
                let launched = self.launch(&state, &python, device, Role::Shared)?;
                self.ready(&mut state, launched).await?
            }
        };
        let (reply, back) = self.exchange(&mut state, running, request, timeout).await;
        state.running = back;
        reply
    }

    /// Runs a candidate's request on a fresh, sandboxed worker: a spare started ahead (its
    /// imports done while the previous candidate was judged), a new spare launched at once
    /// for the next candidate, and the worker retired after its reply, so nothing a candidate
    /// leaves behind (a swapped function, a thread, a timer, a daemon) reaches the next.
    /// `collect`: where the files the worker wrote under its scratch folder's
    /// [`PROBLEM_OUTPUTS`] are moved once it replied, before its scratch folder goes.
    async fn candidate_request(
        &self,
        device: Device,
        request: Request,
        timeout: Duration,
        collect: Option<&Path>,
    ) -> Result<ReplyBody, WorkerError> {
        let mut state = self.state.lock().await;
        let device = state.resolved(device);
        let python = self.python(&mut state)?;
        self.ensure_zygote(&mut state, &python, device).await;
        while state.spares.front().is_some_and(|r| r.device != device) {
            if let Some(r) = state.spares.pop_front() {
                r.retire().await;
            }
        }
        let launched = match state.spares.pop_front() {
            Some(r) => r,
            None => self.launch(&state, &python, device, Role::Candidate)?,
        };
        // the trusted reference worker, started with the first candidate's
        if state.reference.as_ref().is_some_and(|r| r.device != device) {
            if let Some(r) = state.reference.take() {
                r.kill().await;
            }
        }
        let reference = match state.reference.take() {
            Some(ready) => Ok(ready),
            None => Err(self.launch(&state, &python, device, Role::Reference)?),
        };
        let running = self.ready(&mut state, launched).await?;
        state.reference = Some(match reference {
            Ok(ready) => ready,
            Err(started) => self.ready(&mut state, started).await?,
        });
        // the next candidates' workers import while this one is judged (launched only now
        // that this one is ready: on a machine of few cores two imports at once would each
        // take twice as long; on many cores several overlap, see `spare_workers`)
        while state.spares.len() < self.spare_workers {
            match self.launch(&state, &python, device, Role::Candidate) {
                Ok(spare) => state.spares.push_back(spare),
                Err(e) => {
                    tracing::debug!("no spare bench worker: {e}");
                    break;
                }
            }
        }
        state.last_candidate_hello = Some(running.hello.clone());
        let (reply, back) = self.exchange(&mut state, running, request, timeout).await;
        let mut collected = Ok(());
        if let Some(r) = back {
            if let (Some(to), Some(scratch)) = (collect, r.scratch.as_ref()) {
                collected = collect_outputs(&scratch.path().join(PROBLEM_OUTPUTS), to);
            }
            r.retire().await;
        }
        collected?;
        reply
    }

    /// Runs the candidate `job.kernel`'s `ModelNew` on `job`'s cases of the problem
    /// `job.problem` in a fresh sandboxed worker, as a bench does, and moves the output
    /// files it wrote into `collect` (an existing, private folder). Returns
    /// `harness.run_problem`'s JSON (with `guards_changed`).
    ///
    /// # Errors
    /// [`WorkerError::Timeout`] / [`WorkerError::Crashed`] when the candidate hangs or kills
    /// its worker (a verdict for the caller to give), environment errors as for any request.
    pub(crate) async fn run_problem(
        &self,
        device: Device,
        job: ProblemJob,
        collect: &Path,
        timeout: Duration,
    ) -> Result<serde_json::Value, WorkerError> {
        let device = if device == Device::Auto {
            self.options.device
        } else {
            device
        };
        let reply = self
            .candidate_request(device, Request::Problem(job), timeout, Some(collect))
            .await?;
        match reply {
            ReplyBody::Ok { value } => Ok(value),
            ReplyBody::PythonError { message, traceback } => {
                Err(WorkerError::Python { message, traceback })
            }
            ReplyBody::Error { message } => Err(WorkerError::Protocol { message }),
        }
    }

    /// The interpreter, resolved and checked once.
    fn python(&self, state: &mut State) -> Result<PathBuf, WorkerError> {
        if let Some(p) = &state.python {
            return Ok(p.clone());
        }
        let p = preflight(&resolve_python(self.options.python.as_deref())?)?;
        state.python = Some(p.clone());
        Ok(p)
    }

    /// Sends `request` to `running` and reads its reply within `timeout`, answering the
    /// calls a candidate's worker makes in between ([`Worker::answer`]). Returns the reply
    /// and the worker when it can serve again (not after a timeout, a crash, a stray line or
    /// a reply that asked for a restart: those are killed or reaped here). A bench's PASS
    /// that the parent's own checks do not back is made TAMPER ([`Scope::unbacked_pass`]).
    async fn exchange(
        &self,
        state: &mut State,
        mut running: Running,
        request: Request,
        timeout: Duration,
    ) -> (Result<ReplyBody, WorkerError>, Option<Running>) {
        let deadline = tokio::time::Instant::now() + timeout;
        let id = state.next_id;
        state.next_id += 1;
        let nonce = nonce(id);
        let catalogue = self.catalogue();
        let mut scope = Scope::of(catalogue, &request, running.hello.device == "cuda");
        let envelope = Envelope {
            id,
            nonce: nonce.clone(),
            request,
        };
        let mut line = match serde_json::to_string(&envelope) {
            Ok(l) => l,
            Err(e) => {
                let error = WorkerError::Protocol {
                    message: e.to_string(),
                };
                return (Err(error), Some(running));
            }
        };
        line.push('\n');
        tracing::trace!(%line, "request to the bench worker");
        let mut written = async {
            running.stdin.write_all(line.as_bytes()).await?;
            running.stdin.flush().await
        }
        .await;
        loop {
            let mut reply_line = String::new();
            let read = match written {
                Ok(()) => running.read_line(&mut reply_line, deadline).await,
                Err(e) => Ok(Err(e)),
            };
            let protocol_error = |message: String| WorkerError::Protocol { message };
            match read {
                Err(_elapsed) => {
                    let (_status, stderr_tail) = running.kill().await;
                    let error = WorkerError::Timeout {
                        limit_s: timeout.as_secs_f64(),
                        stderr_tail,
                    };
                    return (Err(error), None);
                }
                Ok(Err(_)) | Ok(Ok(0)) => {
                    let (status, stderr_tail) = running.reap().await;
                    let error = WorkerError::Crashed {
                        status,
                        stderr_tail,
                    };
                    return (Err(error), None);
                }
                Ok(Ok(n)) if n as u64 == REPLY_LINE_MAX && !reply_line.ends_with('\n') => {
                    running.kill().await;
                    let error = protocol_error(format!(
                        "a line of more than {} MiB on the reply channel",
                        REPLY_LINE_MAX >> 20
                    ));
                    return (Err(error), None);
                }
                Ok(Ok(_)) => {}
            }
            tracing::trace!(line = %reply_line.trim_end(), "from the bench worker");
            // a candidate's worker asking for a check, in the middle of its request
            if let (Ok(call), Some(scope)) = (
                serde_json::from_str::<Call>(reply_line.trim_end()),
                scope.as_mut(),
            ) {
                if call.id != id || call.nonce != nonce {
                    running.kill().await;
                    let error = protocol_error(format!("a call that is not of request {id}"));
                    return (Err(error), None);
                }
                let answered = match self
                    .answer(
                        state,
                        &mut running,
                        (id, &nonce),
                        call.call,
                        scope,
                        deadline,
                    )
                    .await
                {
                    Ok(answer) => running.send_answer(id, &nonce, answer, deadline).await,
                    Err(e) => Err(e),
                };
                match answered {
                    Ok(()) => {}
                    // the worker died or ran out of time while sending its outputs: as if
                    // it had while computing them
                    Err(WorkerError::Crashed { .. }) => {
                        let (status, stderr_tail) = running.reap().await;
                        let error = WorkerError::Crashed {
                            status,
                            stderr_tail,
                        };
                        return (Err(error), None);
                    }
                    Err(WorkerError::Timeout { .. }) => {
                        let (_status, stderr_tail) = running.kill().await;
                        let error = WorkerError::Timeout {
                            limit_s: timeout.as_secs_f64(),
                            stderr_tail,
                        };
                        return (Err(error), None);
                    }
                    Err(error) => {
                        running.kill().await;
                        return (Err(error), None);
                    }
                };
                written = Ok(());
                continue;
            }
            let reply: Result<Reply, _> = serde_json::from_str(reply_line.trim_end());
            let Ok(mut reply) = reply.map_err(drop).and_then(|r| {
                if r.id == id && r.nonce == nonce {
                    Ok(r)
                } else {
                    Err(())
                }
            }) else {
                running.kill().await;
                let error = protocol_error(format!(
                    "a line on the reply channel is not the reply to request {id}: `{}`",
                    reply_line.trim_end().chars().take(200).collect::<String>()
                ));
                return (Err(error), None);
            };
            if let Ok(mut seen) = self.launchers.lock() {
                seen.add(std::mem::take(&mut reply.launchers));
            }
            if let Some(scope) = &scope {
                reply.body = backed(reply.body, scope);
            }
            if reply.restart {
                tracing::debug!(pid = running.pid, "bench worker asked to be restarted");
                running.reap().await;
                return (Ok(reply.body), None);
            }
            return (Ok(reply.body), Some(running));
        }
    }

    /// The catalogue the workers were started with.
    fn catalogue(&self) -> &Catalogue {
        match &self.kinds {
            Some((c, _)) => c,
            None => Catalogue::builtin(),
        }
    }

    /// Answers a candidate's worker's `call` (issue 21, point 1): its outputs are read into
    /// the parent's memory and compared with the reference the trusted reference worker
    /// computes from the same seed; or the reference is timed there. The case is pinned to
    /// the request, and every check is kept, in `scope`.
    ///
    /// # Errors
    /// [`WorkerError::Protocol`] for a call the request cannot make (another kind, an
    /// output of another shape than the catalogue's); [`WorkerError::Crashed`] or
    /// [`WorkerError::Timeout`], their details left for the caller, when the worker dies or
    /// the deadline passes before it has written its outputs; [`WorkerError::Io`] when the
    /// parent cannot size or read a payload area (its own failure: the areas admit no seal
    /// a worker could add). A reference worker that fails is an [`ParentAnswer::Error`] for
    /// the candidate's worker, not its verdict, except when it refuses the offsets a timed
    /// output's inputs were reported at: they come from the candidate's process, so that is
    /// a failed check.
    async fn answer(
        &self,
        state: &mut State,
        running: &mut Running,
        (id, nonce): (u64, &str),
        call: ParentCall,
        scope: &mut Scope<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<ParentAnswer, WorkerError> {
        let protocol = |message: String| WorkerError::Protocol {
            message: format!("a check the request cannot make: {message}"),
        };
        match call {
            ParentCall::Check {
                stage,
                case,
                outputs,
            } => {
                let (case, spec) = scope
                    .admit(Some(stage), case, outputs.len())
                    .map_err(protocol)?;
                let numel = checks::payload_numel(spec, &case, &outputs).map_err(protocol)?;
                let count = outputs.len();
                let bytes = numel
                    .checked_mul(count * 4)
                    .ok_or_else(|| protocol(format!("{count} outputs of {numel} values")))?;
                running.payload.reserve(bytes as u64)?;
                running
                    .send_answer(id, nonce, ParentAnswer::Ready, deadline)
                    .await?;
                let device = running.device;
                // Ok(Err(reason)): the worker could not write its outputs
                let receive = async {
                    match running.read_call(id, nonce, deadline).await? {
                        ParentCall::Written => {}
                        ParentCall::NotWritten { reason } => return Ok(Err(reason)),
                        other => {
                            return Err(protocol(format!(
                                "{other:?} where the outputs were to be written"
                            )))
                        }
                    }
                    let area = running.payload.try_clone()?;
                    let buffer = std::mem::take(&mut running.received);
                    Ok(Ok(read_payload(area, numel * count, buffer).await?))
                };
                // The reference is computed while the candidate's worker writes its outputs,
                // but written where the parent reads it only once those outputs are in the
                // parent's memory: without Landlock a candidate can open the parent's fds
                // (the reference's payload area among them) through /proc.
                let (outs, computed) =
                    tokio::join!(receive, self.reference(state, device, &case, deadline));
                let outs = match outs? {
                    Ok(outs) => outs,
                    Err(reason) => {
                        let why = format!(
                            "{} {}: its outputs could not be sent to the judge: {reason}",
                            case.dtype.name(),
                            case.shape
                        );
                        let results = vec![Err(why); count];
                        scope.tally.record(&results);
                        return Ok(ParentAnswer::Checked { results });
                    }
                };
                let reference = match computed {
                    Ok(note) => self
                        .trusted(state, device, Request::Deliver, Some(numel), deadline)
                        .await
                        .map(|(_, values)| (note, values)),
                    Err(message) => Err(message),
                };
                let (note, reference) = match reference {
                    Ok(r) => r,
                    // A timed output comes with the offsets its inputs were taken at, as the
                    // candidate's process reports them: offsets the trusted worker refuses
                    // (harness.py's `OffsetsRefused`) are the candidate's doing, a failed
                    // check; any other failure of that worker stays an error of its own
                    Err(message) if case.offsets.is_some() && message.contains(OFFSETS_REFUSED) => {
                        running.received = outs;
                        let why = format!(
                            "{} {}: the trusted worker cannot rebuild the inputs this timed \
                             output was reported to come from: {message}",
                            case.dtype.name(),
                            case.shape
                        );
                        let results = vec![Err(why); count];
                        scope.tally.record(&results);
                        return Ok(ParentAnswer::Checked { results });
                    }
                    Err(message) => {
                        running.received = outs;
                        return Ok(ParentAnswer::Error { message });
                    }
                };
                // the judge scans every element: off the async executor's thread
                let spec = spec.clone();
                let (results, outs, reference) = tokio::task::spawn_blocking(move || {
                    let parts: Vec<&[f32]> = outs.chunks(numel).collect();
                    let results =
                        checks::compare(&spec, stage, &case, note.as_deref(), &reference, &parts);
                    (results, outs, reference)
                })
                .await
                .map_err(|e| WorkerError::Protocol {
                    message: format!("the comparison failed: {e}"),
                })?;
                running.received = outs;
                if let Some(r) = state.reference.as_mut() {
                    r.received = reference;
                }
                scope.tally.record(&results);
                Ok(ParentAnswer::Checked { results })
            }
            ParentCall::Written | ParentCall::NotWritten { .. } => {
                Err(protocol("outputs written before a check".into()))
            }
            ParentCall::TimeReference {
                case,
                quick,
                compiled,
            } => {
                let (case, _) = scope.admit(None, case, 0).map_err(protocol)?;
                // a repetition right after another measurement finds the clocks up; after
                // a pause (the candidate's worker decides the gap) they are spun up again
                let spin_up = scope.last_timed.is_none_or(|at| at.elapsed() > WARM_GAP);
                let request = Request::TimeReference {
                    case,
                    quick,
                    compiled,
                    spin_up,
                };
                match self
                    .trusted(state, running.device, request, None, deadline)
                    .await
                {
                    Ok((value, _)) => match serde_json::from_value::<ReferenceTiming>(value) {
                        Ok(t) => {
                            scope.timed.push(t.clone());
                            scope.last_timed = Some(std::time::Instant::now());
                            Ok(ParentAnswer::Timed(t))
                        }
                        Err(e) => Ok(ParentAnswer::Error {
                            message: format!("unreadable reference timing: {e}"),
                        }),
                    },
                    Err(message) => Ok(ParentAnswer::Error { message }),
                }
            }
        }
    }

    /// Has the trusted reference worker compute the reference output of `case` and keep it
    /// until [`Request::Deliver`]: the catalogue's note on a mismatch.
    async fn reference(
        &self,
        state: &mut State,
        device: Device,
        case: &ReferenceJob,
        deadline: tokio::time::Instant,
    ) -> Result<Option<String>, String> {
        let request = Request::Reference(case.clone());
        let (value, _) = self.trusted(state, device, request, None, deadline).await?;
        Ok(value
            .get("note")
            .and_then(|n| n.as_str())
            .map(str::to_string))
    }

    /// Sends `request` to the trusted reference worker (started when there is none for
    /// `device`, within `deadline`) and reads its reply before `deadline`; with
    /// `payload: Some(numel)`, the area is sized for `numel` float32 values first, the reply
    /// must announce them (`bytes`) and they are read from the area. A worker that crashed,
    /// hung, broke the protocol or asked for a restart is not kept; one that had died since
    /// its last request (a broken pipe at once) is replaced and the request sent again,
    /// once, unless it is a [`Request::Deliver`] (the new worker holds nothing to deliver).
    async fn trusted(
        &self,
        state: &mut State,
        device: Device,
        request: Request,
        payload: Option<usize>,
        deadline: tokio::time::Instant,
    ) -> Result<(serde_json::Value, Vec<f32>), String> {
        if state.reference.as_ref().is_some_and(|r| r.device != device) {
            if let Some(r) = state.reference.take() {
                r.kill().await;
            }
        }
        let mut retried = false;
        loop {
            let (mut worker, fresh) = match state.reference.take() {
                Some(r) => (r, false),
                None => {
                    let python = self.python(state).map_err(|e| e.to_string())?;
                    self.ensure_zygote(state, &python, device).await;
                    let started = self
                        .launch(state, &python, device, Role::Reference)
                        .map_err(|e| e.to_string())?;
                    let ready = tokio::time::timeout_at(deadline, self.ready(state, started))
                        .await
                        .map_err(|_| {
                            "the trusted reference worker did not start before the deadline"
                        })?;
                    (ready.map_err(|e| e.to_string())?, true)
                }
            };
            let id = state.next_id;
            state.next_id += 1;
            let nonce = nonce(id);
            let mut line = serde_json::to_string(&Envelope {
                id,
                nonce: nonce.clone(),
                request: request.clone(),
            })
            .map_err(|e| e.to_string())?;
            line.push('\n');
            let exchange = async {
                if let Some(numel) = payload {
                    worker.payload.reserve(numel as u64 * 4)?;
                }
                worker.stdin.write_all(line.as_bytes()).await?;
                worker.stdin.flush().await?;
                let mut reply = String::new();
                if worker.stdout.read_line(&mut reply).await? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                let reply: Reply = serde_json::from_str(reply.trim_end())
                    .map_err(|e| std::io::Error::other(format!("unreadable reply: {e}")))?;
                if reply.id != id || reply.nonce != nonce {
                    return Err(std::io::Error::other("a reply to another request"));
                }
                let value = match reply.body {
                    ReplyBody::Ok { value } => value,
                    ReplyBody::PythonError { message, traceback } => {
                        return Ok((Err(format!("{message}\n{traceback}")), reply.restart))
                    }
                    ReplyBody::Error { message } => return Ok((Err(message), reply.restart)),
                };
                let Some(numel) = payload else {
                    return Ok((Ok((value, Vec::new())), reply.restart));
                };
                let bytes = value.get("bytes").and_then(|b| b.as_u64()).unwrap_or(0);
                if bytes != numel as u64 * 4 {
                    let message = format!("{bytes} bytes of reference for {numel} values");
                    return Ok((Err(message), reply.restart));
                }
                let area = worker.payload.try_clone()?;
                let buffer = std::mem::take(&mut worker.received);
                let values = read_payload(area, numel, buffer).await?;
                Ok((Ok((value, values)), reply.restart))
            };
            match tokio::time::timeout_at(deadline, exchange).await {
                Ok(Ok((answer, restart))) => {
                    if restart {
                        worker.reap().await;
                    } else {
                        state.reference = Some(worker);
                    }
                    return answer.map_err(|m| format!("the trusted reference worker failed: {m}"));
                }
                Ok(Err(e)) => {
                    let (status, tail) = worker.kill().await;
                    // a fresh worker holds no reference to deliver: only a request that
                    // stands alone is sent again
                    if !fresh && !retried && !matches!(request, Request::Deliver) {
                        tracing::debug!("the trusted reference worker had stopped ({status}): {e}; starting another");
                        retried = true;
                        continue;
                    }
                    return Err(format!(
                        "the trusted reference worker stopped ({status}): {e}\n{tail}"
                    ));
                }
                Err(_) => {
                    worker.kill().await;
                    return Err(
                        "the trusted reference worker did not answer before the deadline".into(),
                    );
                }
            }
        }
    }

    /// The worker program's executable, made absolute when it is a relative path (a
    /// candidate's worker runs in its scratch folder).
    fn exe(&self) -> std::io::Result<PathBuf> {
        let exe = &self.options.program.exe;
        if exe.components().count() > 1 {
            std::path::absolute(exe)
        } else {
            Ok(exe.clone())
        }
    }

    /// Starts the zygote (`zygote.rs`) when there is none and none failed, and waits for its
    /// imports; where it cannot start, says why at debug level and leaves workers to be
    /// executed.
    async fn ensure_zygote(&self, state: &mut State, python: &Path, device: Device) {
        if state.zygote.as_ref().is_some_and(|z| z.broken()) {
            tracing::debug!("the zygote broke: executing workers from now on");
            state.zygote = None;
            state.zygote_failed = true;
        }
        if state.zygote.as_ref().is_some_and(|z| !z.serves(device)) {
            // Triton's mode is fixed at its import: another device needs another zygote
            state.zygote = None;
        }
        if state.zygote.is_some() || state.zygote_failed || !zygote::enabled() {
            return;
        }
        let exe = match self.exe() {
            Ok(exe) => exe,
            Err(_) => return,
        };
        let mut cmd = tokio::process::Command::new(exe);
        let device_name = match device {
            Device::Auto => "auto",
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        };
        cmd.args(&self.options.program.args)
            .env(env::PYTHON, python)
            .env(env::DEVICE, device_name);
        match ZygoteLink::start(cmd, self.startup_timeout).await {
            Ok(z) => state.zygote = Some(Arc::new(z)),
            Err(e) => {
                tracing::debug!("no zygote ({e}): executing each worker");
                state.zygote_failed = true;
            }
        }
    }

    /// Starts a worker process without waiting for it to be ready ([`Worker::ready`] does);
    /// `role` [`Role::Candidate`] for a candidate's worker (a scratch folder, the sandbox, the memory limit
    /// on the CPU).
    fn launch(
        &self,
        state: &State,
        python: &Path,
        device: Device,
        role: Role,
    ) -> Result<Running, WorkerError> {
        let sandboxed = role == Role::Candidate;
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
        // the worker's environment, as changes to this process's: set (`Some`) or removed
        let mut vars: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = Vec::new();
        let mut set = |k: &str, v: Option<std::ffi::OsString>| vars.push((k.into(), v));
        set(env::PYTHON, Some(python.into()));
        set(env::DEVICE, Some(device_name.into()));
        let (catalogue, modules) = match &self.kinds {
            Some((c, m)) => (c, m.as_slice()),
            None => (Catalogue::builtin(), &[][..]),
        };
        set(env::CATALOGUE, Some(catalogue.to_json().into()));
        set(
            env::REFERENCE,
            (role == Role::Reference).then(|| "1".into()),
        );
        let launchers = match self.launchers.lock() {
            Ok(seen) if sandboxed && seen.len() > 0 => Some(seen.to_json().into()),
            _ => None,
        };
        set(env::TRITON_LAUNCHERS, launchers);
        let modules = modules
            .iter()
            .map(std::path::absolute)
            .collect::<Result<Vec<_>, _>>()?;
        let registry = match std::env::join_paths(&modules) {
            Ok(joined) if !modules.is_empty() => Some(joined),
            _ => None,
        };
        set(env::REGISTRY, registry);
        // a candidate's worker on the CPU: the address space limited to the machine's memory
        // at most, so a runaway allocation fails inside Python instead of swapping the host
        let memory_limit_mb = match self.memory_limit_mb {
            None if sandboxed && device == Device::Cpu => physical_memory_mb(),
            limit => limit,
        };
        set(
            env::MEMORY_LIMIT_MB,
            memory_limit_mb.map(|mb| mb.to_string().into()),
        );
        if sandboxed {
            static SHIELD: std::sync::Once = std::sync::Once::new();
            SHIELD.call_once(|| {
                if sandbox::shield_parent(sandbox::landlock_abi()) {
                    tracing::warn!(
                        "no Landlock on this kernel: this process made itself undumpable                          (PR_SET_DUMPABLE 0, no core dump) so that a candidate cannot open its                          files through /proc (docs/bench.md, the weaker guarantees)"
                    );
                }
            });
        }
        let scratch = if sandboxed {
            let parent =
                crate::private_temp_dir("scratch").map_err(|message| WorkerError::Startup {
                    message,
                    stderr_tail: String::new(),
                })?;
            let dir = tempfile::Builder::new()
                .prefix("candidate-")
                .tempdir_in(&parent)?;
            let spec = sandbox::Spec {
                scratch: dir.path().to_path_buf(),
                namespaces: self.sandbox.namespaces,
                max_file_size_mb: self.sandbox.max_file_size_mb,
                pid_namespace: device == Device::Cpu,
            };
            let spec = serde_json::to_string(&spec).map_err(|e| WorkerError::Protocol {
                message: e.to_string(),
            })?;
            set(env::SANDBOX, Some(spec.into()));
            Some(dir)
        } else {
            set(env::SANDBOX, None);
            None
        };
        if device == Device::Cpu {
            // before triton is imported; the harness sets it too
            set("TRITON_INTERPRET", Some("1".into()));
        }
        let cwd = scratch.as_ref().map(|d| d.path().to_path_buf());
        let payload = PayloadArea::create()?;
        // the GPU lease (worker/lease.rs): a description of the file of its own per worker,
        // kept open here only until the child has its copy; none on the CPU
        // AUTOKERNEL_GPU_LEASE=off gives none, to measure what the lease removes
        let lease = match device {
            Device::Cpu => None,
            _ if std::env::var("AUTOKERNEL_GPU_LEASE").is_ok_and(|v| v == "off") => None,
            _ => match LeaseFile::open() {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(
                        "no GPU lease, measurements may overlap other workers' GPU work: {e}"
                    );
                    None
                }
            },
        };
        // a candidate's and the reference's worker come from the zygote where there is one
        let zygote = state
            .zygote
            .as_ref()
            .filter(|z| role != Role::Shared && !z.broken() && z.serves(device));
        let forked = match zygote {
            Some(z) => match fork_worker(z, &vars, cwd.clone(), &payload, lease.as_ref()) {
                Ok(forked) => Some(forked),
                Err(e) => {
                    tracing::debug!("the zygote did not fork a worker ({e}): executing one");
                    None
                }
            },
            None => None,
        };
        let (child, stdin, stdout, stderr): Launched = match forked {
            Some(f) => f,
            None => {
                let mut cmd = tokio::process::Command::new(self.exe()?);
                cmd.args(&program.args)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                for (k, v) in &vars {
                    match v {
                        Some(v) => cmd.env(k, v),
                        None => cmd.env_remove(k),
                    };
                }
                if let Some(dir) = &cwd {
                    cmd.current_dir(dir);
                }
                let mut child = spawn_worker(cmd, &payload, lease.as_ref()).map_err(|source| {
                    WorkerError::Spawn {
                        exe: program.exe.clone(),
                        source,
                    }
                })?;
                let (Some(stdin), Some(stdout), Some(stderr)) =
                    (child.stdin.take(), child.stdout.take(), child.stderr.take())
                else {
                    return Err(WorkerError::Protocol {
                        message: "the worker's pipes were not created".into(),
                    });
                };
                (
                    Process::Spawned(child),
                    Box::new(stdin),
                    Box::new(stdout),
                    Box::new(stderr),
                )
            }
        };
        drop(lease);
        let pid = match &child {
            Process::Spawned(c) => c.id().unwrap_or(0),
            Process::Forked(f) => f.pid(),
        };
        tracing::debug!(pid, forked = matches!(child, Process::Forked(_)), exe = %program.exe.display(), python = %python.display(), device = device_name, "starting the bench worker");
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
        Ok(Running {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            ring,
            stderr_task: Some(stderr_task),
            pid,
            device,
            role,
            hello: Hello {
                pid,
                error: None,
                device: String::new(),
                device_name: String::new(),
                import_s: 0.0,
                warning: None,
            },
            scratch,
            payload,
            received: Vec::new(),
        })
    }

    /// Waits for a launched worker's hello (torch, triton and the harness imported); the
    /// start-up is not counted in any request's deadline.
    async fn ready(&self, state: &mut State, running: Running) -> Result<Running, WorkerError> {
        let (role, device) = (running.role, running.device);
        let forked = matches!(running.child, Process::Forked(_));
        match self.ready_once(state, running).await {
            Err(e) if forked => {
                // no candidate was loaded yet: the zygote's child or the set-up is at fault,
                // not a kernel; an executed worker says which (a set-up error once, as ever)
                tracing::debug!(
                    "a worker forked by the zygote did not start ({e}): executing workers \
                     from now on (AUTOKERNEL_ZYGOTE=off does so from the start)"
                );
                state.zygote = None;
                state.zygote_failed = true;
                let python = self.python(state)?;
                let relaunched = self.launch(state, &python, device, role)?;
                self.ready_once(state, relaunched).await
            }
            ready => ready,
        }
    }

    /// [`Worker::ready`] without the fallback from a zygote's child.
    async fn ready_once(
        &self,
        state: &mut State,
        mut running: Running,
    ) -> Result<Running, WorkerError> {
        let pid = running.pid;
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
                    if state.warned.insert(w.clone()) {
                        tracing::warn!("bench worker: {w}");
                    }
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

/// A worker's process, request channel, reply channel and stderr.
type Launched = (Process, RequestChannel, ReplyChannel, ReplyChannel);

/// Forks a worker from `zygote` with the environment changes `vars`, in `cwd`, handing it
/// pipes for its stdio and its `payload` area and `lease` fds.
///
/// # Errors
/// A pipe could not be made, or the zygote did not fork.
fn fork_worker(
    zygote: &Arc<ZygoteLink>,
    vars: &[(std::ffi::OsString, Option<std::ffi::OsString>)],
    cwd: Option<PathBuf>,
    payload: &PayloadArea,
    lease: Option<&LeaseFile>,
) -> std::io::Result<Launched> {
    use std::os::fd::{AsFd, BorrowedFd};
    use tokio::net::unix::pipe;
    let (stdin_r, stdin_w) = zygote::pipe()?;
    let (stdout_r, stdout_w) = zygote::pipe()?;
    let (stderr_r, stderr_w) = zygote::pipe()?;
    // SAFETY: the area and the lease file are open for as long as these borrows (this call).
    let payload_fd = unsafe { BorrowedFd::borrow_raw(payload.raw_fd()) };
    let mut extra = vec![(env::PAYLOAD_FD, payload_fd)];
    if let Some(l) = lease {
        // SAFETY: as above.
        extra.push((env::GPU_LEASE_FD, unsafe {
            BorrowedFd::borrow_raw(l.raw_fd())
        }));
    }
    let (pid, pidfd) = zygote.fork(
        [stdin_r.as_fd(), stdout_w.as_fd(), stderr_w.as_fd()],
        &extra,
        vars.to_vec(),
        cwd,
    )?;
    // the child's ends are the child's alone from here on
    drop((stdin_r, stdout_w, stderr_w));
    let process = Process::Forked(ForkedProcess::new(pid, pidfd, Arc::clone(zygote)));
    Ok((
        process,
        Box::new(pipe::Sender::from_owned_fd(stdin_w)?),
        Box::new(pipe::Receiver::from_owned_fd(stdout_r)?),
        Box::new(pipe::Receiver::from_owned_fd(stderr_r)?),
    ))
}

/// Executes a worker from `cmd` in a session of its own, inheriting its `payload` area and
/// `lease` fds (their numbers in the worker's environment).
///
/// # Errors
/// The program could not be started.
fn spawn_worker(
    mut cmd: tokio::process::Command,
    payload: &PayloadArea,
    lease: Option<&LeaseFile>,
) -> std::io::Result<Child> {
    let payload_fd = payload.raw_fd();
    cmd.env(env::PAYLOAD_FD, payload_fd.to_string());
    let lease_fd = lease.map(LeaseFile::raw_fd);
    match lease_fd {
        Some(fd) => cmd.env(env::GPU_LEASE_FD, fd.to_string()),
        None => cmd.env_remove(env::GPU_LEASE_FD),
    };
    // SAFETY: the hooks run in the child between fork and exec: setsid and fcntl on the
    // child's copy of the area's fd (`inherit_in_child`) only.
    unsafe {
        // A session of its own: a process group to kill as one (its pid names it), and
        // no controlling terminal, whose input a candidate could type into (TIOCSTI)
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
        cmd.pre_exec(move || PayloadArea::inherit_in_child(payload_fd));
        if let Some(fd) = lease_fd {
            // the same fcntl as the payload area's: the fd inherited by this child alone
            cmd.pre_exec(move || PayloadArea::inherit_in_child(fd));
        }
    }
    cmd.spawn()
}

/// `body`, a candidate's worker's reply, as the parent's checks (`scope`) allow: a bench's
/// PASS they do not back is TAMPER ([`Scope::unbacked_pass`]) and its reference latencies
/// are the ones the parent served; a head-to-head whose checks failed, or that checked
/// fewer outputs than one per kernel, is refused.
fn backed(body: ReplyBody, scope: &Scope<'_>) -> ReplyBody {
    let ReplyBody::Ok { value } = body else {
        return body;
    };
    let Some(Ok(mut result)) = scope
        .is_bench()
        .then(|| serde_json::from_value::<autokernel_core::BenchResult>(value.clone()))
    else {
        let why = match scope.tally.first_failure() {
            Some(why) => format!("a timed call's output differs from the reference: {why}"),
            None if scope.tally.len() < 2 => {
                "fewer timed outputs were checked than one per kernel".to_string()
            }
            None => return ReplyBody::Ok { value },
        };
        return ReplyBody::Error {
            message: format!("a kernel went wrong in the head-to-head: {why}"),
        };
    };
    if result.correctness != autokernel_core::Correctness::Pass {
        return ReplyBody::Ok { value };
    }
    let why = scope
        .unbacked_pass(result.kind.map(|k| k.name()))
        .or_else(|| match (scope.timed.is_empty(), &mut result.metrics) {
            (false, Some(m)) => {
                let t = timing::combined_references(&scope.timed);
                m.reference_latency_us = t.reference_latency_us;
                m.compiled_latency_us = t.compiled_latency_us;
                m.speedup_vs_reference = timing::paired_speedup(&t.samples_us, &m.samples_us)
                    .unwrap_or(if m.latency_us > 0.0 {
                        t.reference_latency_us / m.latency_us
                    } else {
                        0.0
                    });
                m.reference_samples_us = t.samples_us;
                None
            }
            _ => Some("the reference was not timed by the parent".into()),
        });
    if let Some(why) = why {
        checks::overrule(&mut result, why);
    }
    match serde_json::to_value(&result) {
        Ok(value) => ReplyBody::Ok { value },
        Err(e) => ReplyBody::Error {
            message: e.to_string(),
        },
    }
}

/// The longest pause after a reference timing within which the next repetition of an
/// interleaved timing skips the spin-up (`harness.spin_up`): the clocks of a GPU that was
/// busy moments ago are still at their working level (one repetition of the candidate in
/// between takes about 50 ms).
const WARM_GAP: Duration = Duration::from_millis(500);

/// Moves the regular files directly under `from` (a candidate's output folder; absent when
/// it wrote none) into `to`. A link or folder a candidate left there is skipped: only what
/// it wrote as a file is read, and never through a link to a file of the user's.
fn collect_outputs(from: &Path, to: &Path) -> Result<(), WorkerError> {
    let Ok(entries) = std::fs::read_dir(from) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let target = to.join(entry.file_name());
            if std::fs::rename(entry.path(), &target).is_err() {
                std::fs::copy(entry.path(), &target)?;
            }
        }
    }
    Ok(())
}

/// How many candidates' workers start ahead of need by default: `AUTOKERNEL_SPARE_WORKERS`
/// where it is set (0 to [`MAX_SPARE_WORKERS`]; 0 starts each candidate's worker when its
/// request comes), else one per 4 cores the process may use, 1 to 4. Each candidate gets a
/// fresh worker whose imports and CUDA start take about 10 s (the H200 machine, 2026-12-02,
/// docs/benchmarks.md) while judging one takes a few seconds, so with one spare the judge
/// waits on imports; 4 cores a worker leave the imports room to overlap without slowing
/// each other. A value that is not a number is warned about and the default taken.
pub fn default_spare_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let setting = std::env::var(SPARE_WORKERS_ENV).ok();
    spare_workers(setting.as_deref(), cores).unwrap_or_else(|why| {
        tracing::warn!("{why}: taking the default");
        spare_workers(None, cores).unwrap_or(1)
    })
}

/// [`default_spare_workers`] for the variable's value `setting` on `cores` cores.
///
/// # Errors
/// A setting that is not a whole number, naming it.
fn spare_workers(setting: Option<&str>, cores: usize) -> Result<usize, String> {
    match setting {
        Some(text) => text
            .trim()
            .parse::<usize>()
            .map(|n| n.min(MAX_SPARE_WORKERS))
            .map_err(|_| {
                format!("{SPARE_WORKERS_ENV}={text:?} is not a number of workers (0 to {MAX_SPARE_WORKERS})")
            }),
        None => Ok((cores / 4).clamp(1, 4)),
    }
}

/// The environment variable that sets [`default_spare_workers`].
pub const SPARE_WORKERS_ENV: &str = "AUTOKERNEL_SPARE_WORKERS";
/// The most spare workers `AUTOKERNEL_SPARE_WORKERS` may ask for: each holds a Python with
/// torch imported (about 0.5 GB) and, on a GPU, a CUDA context.
pub const MAX_SPARE_WORKERS: usize = 16;

fn physical_memory_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024)
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
    use super::{spare_workers, tail_without_message, Device, Hello, State, MAX_SPARE_WORKERS};

    #[test]
    fn spare_workers_are_one_per_4_cores_unless_the_variable_sets_them() {
        assert_eq!(spare_workers(None, 2), Ok(1));
        assert_eq!(spare_workers(None, 16), Ok(4));
        assert_eq!(spare_workers(None, 128), Ok(4));
        assert_eq!(spare_workers(Some("0"), 16), Ok(0));
        assert_eq!(spare_workers(Some(" 6 "), 2), Ok(6));
        assert_eq!(spare_workers(Some("100"), 2), Ok(MAX_SPARE_WORKERS));
        let why = spare_workers(Some("many"), 16).unwrap_err();
        assert!(why.contains("AUTOKERNEL_SPARE_WORKERS=\"many\""), "{why}");
    }

    #[test]
    fn a_device_left_open_is_the_one_an_earlier_worker_found() {
        let hello = |device: &str| Hello {
            pid: 1,
            error: None,
            device: device.into(),
            device_name: device.into(),
            import_s: 0.0,
            warning: None,
        };
        let mut state = State::new();
        assert_eq!(state.resolved(Device::Auto), Device::Auto);
        state.last_candidate_hello = Some(hello("cuda"));
        assert_eq!(state.resolved(Device::Auto), Device::Cuda);
        assert_eq!(state.resolved(Device::Cpu), Device::Cpu);
        state.last_candidate_hello = Some(hello("cpu"));
        assert_eq!(state.resolved(Device::Auto), Device::Cpu);
    }

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
