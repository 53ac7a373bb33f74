//! Verification: plug a workspace's kept kernels into its model and check the model end
//! to end (outputs against the unmodified model, and both timed). The record it returns is
//! [`Verification`]; the workspace saves it as `verify.json`.

use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use autokernel_bench::WorkerError;
use autokernel_core::{DType, Device, ExperimentRecord, Interrupt, ModelSpec, Target};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::report;
use crate::services::{install_scripts, Services};
use crate::verification::{Excluded, Verification};
use crate::workspace::Workspace;

/// How long a verification may take by default when nothing bounds it (`autokernel verify`
/// without `--verify-budget`, `run` without `--budget`), in seconds, and the default limit
/// after which a worker that has not answered counts as hung (a large model on the CPU
/// interpreter takes minutes).
pub const VERIFY_TIMEOUT_S: u64 = 1800;

/// The share of `run --budget` kept for the verification by default
/// ([`verify_share`]).
pub const VERIFY_SHARE: f64 = 0.25;

/// The least verification share of a budget, in seconds (unless that is more than half
/// the budget): a small model's verification in the deploy mode and eager (loading the
/// model, each kernel alone, the table's rounds) takes a few seconds on a GPU, torch.compile
/// of a small model tens of seconds; below this, a short budget's verification would be cut
/// short before its first decision.
pub const VERIFY_SHARE_MIN_S: u64 = 30;

/// The largest verification share of a budget, in seconds: an overnight budget should go
/// to the loop, and the default verification (deploy mode and eager, its rounds stopping
/// once they decide) of a model with five kernels, compiled variants included, fits in it.
pub const VERIFY_SHARE_MAX_S: u64 = 900;

/// Seconds of a `run --budget` kept for the report at the end (report.md and its two
/// charts: about a second on the CPU).
pub const REPORT_RESERVE_S: u64 = 5;

/// Seconds a verification gets at least, even when the loop's last experiment ran past the
/// loop's share of the budget (the loop checks its budget between experiments): a run can
/// end past its budget by that experiment's overrun and this, never more.
pub const VERIFY_MIN_S: u64 = 10;

/// The verification's share of a `run --budget` of `budget` when `--verify-budget` is not
/// given: [`VERIFY_SHARE`] of it, at least [`VERIFY_SHARE_MIN_S`] and at most
/// [`VERIFY_SHARE_MAX_S`], and never more than half the budget (the loop's share is the
/// point of a run).
pub fn verify_share(budget: Duration) -> Duration {
    budget
        .mul_f64(VERIFY_SHARE)
        .clamp(
            Duration::from_secs(VERIFY_SHARE_MIN_S),
            Duration::from_secs(VERIFY_SHARE_MAX_S),
        )
        .min(budget / 2)
}

/// How long past its deadline a verification script that has not answered is stopped
/// (the hard limit): it checks the deadline between rounds, variants and modes, so it
/// overruns only by the step in flight (a forward, a capture, one torch.compile). A tenth
/// of its budget, at least 5 s and at most 60 s.
pub fn verify_grace(budget: Duration) -> Duration {
    budget
        .mul_f64(0.1)
        .clamp(Duration::from_secs(5), Duration::from_secs(60))
}

/// One step of a running verification, as its script reports it (a line of
/// `.autokernel/verify.progress.jsonl`).
#[derive(Debug, Clone, Deserialize)]
pub struct VerifyProgress {
    /// `load`, `alone` (each kernel alone in the model), `deploy` (each kernel alone in the
    /// mode deployed in), `together`, `modes` (the modes table), `done`.
    pub stage: String,
    /// What runs, in words (`timing eager without kernels, round 2 of 5`).
    pub text: String,
    /// The deploy mode being timed or prepared, if any.
    #[serde(default)]
    pub mode: Option<String>,
    /// The variant of the model: `without kernels`, or target ids joined by `+`.
    #[serde(default)]
    pub variant: Option<String>,
    /// The timing round, from 1.
    #[serde(default)]
    pub round: Option<u32>,
    /// The rounds a mode's timing takes at most (it stops early once they decide).
    #[serde(default)]
    pub rounds: Option<u32>,
    /// Seconds left to the verification's deadline.
    #[serde(default)]
    pub left_s: Option<f64>,
}

impl VerifyProgress {
    /// The progress line: `verify: timing eager without kernels, round 2 of 5 · 41s of the
    /// verification's budget left`.
    pub fn line(&self) -> String {
        match self.left_s {
            Some(left) => format!(
                "verify: {} · {}s of the verification's budget left",
                self.text,
                left.max(0.0).round() as u64
            ),
            None => format!("verify: {}", self.text),
        }
    }
}

/// The bounds and choices of one verification run ([`verify_workspace`]).
#[derive(Debug, Clone)]
pub struct VerifySettings {
    /// When the verification must be over: the script stops cleanly at its next check past
    /// it, and is stopped [`verify_grace`] later if it has not answered (what it measured
    /// by then is kept: [`Verification::cut_short`]).
    pub deadline: Instant,
    /// How long one call of the script may go without an answer before it counts as hung
    /// and the kernel that hangs it is looked for (each kernel alone, this long each);
    /// never past the deadline's hard limit.
    pub timeout: Duration,
    /// The mode whose timings decide; `None`: `cudagraph` on a GPU, `eager` on the CPU.
    pub deploy: Option<DeployMode>,
    /// Time every mode the device has, not only the deploy mode and eager.
    pub all_modes: bool,
}

impl VerifySettings {
    /// Settings whose deadline is `budget` from now.
    pub fn within(
        budget: Duration,
        timeout: Duration,
        deploy: Option<DeployMode>,
        all_modes: bool,
    ) -> Self {
        VerifySettings {
            deadline: Instant::now() + budget,
            timeout,
            deploy,
            all_modes,
        }
    }
}

/// How to verify a workspace.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Where to run; `None`: the device the workspace's run recorded, else auto.
    pub device: Option<Device>,
    /// The Python interpreter whose torch and triton to use (see
    /// [`autokernel_bench::resolve_python`]).
    pub python: Option<PathBuf>,
    /// How long the verification may take before the worker is stopped; a kernel that
    /// hangs inside the model is then found (each kernel alone, this long each) and left out.
    pub timeout: Duration,
    /// The mode the model is deployed in, whose timings decide which kernels go in;
    /// `None`: `cudagraph` on a GPU, `eager` on the CPU.
    pub deploy: Option<DeployMode>,
    /// How long the whole verification may take (it is then cut short, keeping what it
    /// decided); `None`: [`VERIFY_TIMEOUT_S`], or [`VerifyOptions::timeout`] when longer.
    pub budget: Option<Duration>,
    /// Time the model in every deploy mode the device has, not only the deploy mode and
    /// eager.
    pub all_modes: bool,
}

/// How a user runs the model, as `verify --deploy` takes it: a kernel that loses in eager
/// mode (where the host sets the pace) can win inside a CUDA graph, and the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeployMode {
    /// The model called as it is.
    Eager,
    /// One forward captured into a CUDA graph and replayed (GPU only).
    Cudagraph,
    /// `torch.compile(model)`.
    Compile,
    /// `torch.compile(model, mode="reduce-overhead")`: compiled, and replayed from CUDA
    /// graphs (GPU only).
    #[value(name = "reduce-overhead")]
    ReduceOverhead,
}

impl DeployMode {
    /// The name the verification script and `verify.json` use.
    pub fn name(self) -> &'static str {
        match self {
            DeployMode::Eager => "eager",
            DeployMode::Cudagraph => "cudagraph",
            DeployMode::Compile => "compile",
            DeployMode::ReduceOverhead => "reduce-overhead",
        }
    }

    /// The mode named `name` ([`DeployMode::name`]), `None` for another word.
    pub fn from_name(name: &str) -> Option<Self> {
        <Self as clap::ValueEnum>::from_str(name, false).ok()
    }

    /// Whether the mode replays CUDA graphs, so it needs a GPU.
    pub fn gpu_only(self) -> bool {
        matches!(self, DeployMode::Cudagraph | DeployMode::ReduceOverhead)
    }
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            device: None,
            python: None,
            timeout: Duration::from_secs(VERIFY_TIMEOUT_S),
            deploy: None,
            budget: None,
            all_modes: false,
        }
    }
}

/// Why a workspace cannot be verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// An `autokernel tune` workspace: one kernel, no model.
    #[error("workspace `{workspace}` is `autokernel tune`'s, for `{kernel}`: it has no model to plug its kernel into\nhint: `autokernel report -w {workspace}` summarises it")]
    TuneWorkspace {
        /// The workspace.
        workspace: PathBuf,
        /// The kernel file it tunes.
        kernel: PathBuf,
    },
    /// autokernel.toml records no model.
    #[error("workspace `{0}` records no model (autokernel.toml has no [model])")]
    NoModel(PathBuf),
    /// No `plan.json` yet.
    #[error("workspace `{0}` has no plan.json yet\nhint: run `autokernel run` first")]
    NoPlan(PathBuf),
    /// Anything else: the worker, the model, the workspace's files.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The workspace's model as its first run recorded it, on `device`, with its plan.
///
/// # Errors
/// A `tune` workspace, one without a model or a plan, or settings that no longer parse.
pub fn model_and_plan(
    ws: &Workspace,
    device: Option<Device>,
) -> Result<(ModelSpec, Vec<Target>), VerifyError> {
    if let Some(kernel) = &ws.settings.tuned_kernel {
        return Err(VerifyError::TuneWorkspace {
            workspace: ws.root.clone(),
            kernel: kernel.clone(),
        });
    }
    let Some(identity) = ws.settings.model.clone() else {
        return Err(VerifyError::NoModel(ws.root.clone()));
    };
    let Some(targets) = ws.load_plan()? else {
        return Err(VerifyError::NoPlan(ws.root.clone()));
    };
    let device = device
        .or_else(|| ws.settings.device.as_deref().and_then(|d| d.parse().ok()))
        .unwrap_or(Device::Auto);
    let spec = ModelSpec {
        source: identity.source.clone(),
        kwargs: if identity.kwargs.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&identity.kwargs)
                .context("autokernel.toml's model kwargs are not JSON")?
        },
        input_shape: identity.input_shape.clone(),
        inputs: identity.inputs.clone(),
        inputs_fn: identity.inputs_fn.clone(),
        pretrained: identity.pretrained.clone(),
        // a defaulted dtype: the one the plan was made in
        dtype: if identity.dtype.is_empty() {
            targets.first().map_or(DType::Float32, |t| t.dtype)
        } else {
            identity
                .dtype
                .parse::<DType>()
                .context("autokernel.toml's model dtype")?
        },
        device,
    };
    Ok((spec, targets))
}

/// Verifies the workspace's kept kernels in its model on a worker of its own
/// ([`verify_workspace`] over [`model_and_plan`]), without saving the result: the caller
/// decides ([`Workspace::save_verification`]). `progress` hears each step; `interrupt`
/// cuts the verification short (what it decided by then is returned, marked
/// [`Verification::cut_short`]).
///
/// # Errors
/// [`VerifyError`]: not a model's workspace, no plan, no usable Python, the model does not
/// load, or the verification script fails with none of the kernels plugged in.
pub async fn verify(
    ws: &Workspace,
    options: &VerifyOptions,
    progress: &(dyn Fn(&VerifyProgress) + Sync),
    interrupt: &Interrupt,
) -> Result<Verification, VerifyError> {
    // by default the budget is no tighter than the hang limit: a call that does not answer
    // within --timeout is a hang to look for, not the verification's end
    let settings = VerifySettings::within(
        options
            .budget
            .unwrap_or(options.timeout.max(Duration::from_secs(VERIFY_TIMEOUT_S))),
        options.timeout,
        options.deploy,
        options.all_modes,
    );
    let (spec, targets) = model_and_plan(ws, options.device)?;
    let mut services = Services::start(
        options.python.as_deref(),
        spec.device,
        ws.settings.measured_bandwidth_gb_s,
    )?;
    let rows = match ws.path("results.tsv") {
        p if p.exists() => autokernel_core::ResultsLog::read(p).map_err(anyhow::Error::from)?,
        _ => Vec::new(),
    };
    let verified = verify_workspace(
        &mut services,
        ws,
        &spec,
        &targets,
        &rows,
        &settings,
        progress,
        interrupt,
    )
    .await;
    services.worker().shutdown().await;
    Ok(verified?)
}

/// Runs the verification script in the worker over the workspace's current kernels (the
/// branch tip: the best kept kernel of each target), leaving out those that `rows` (the
/// workspace's results) show slower than PyTorch at the model's shape, and those that kill
/// or hang the worker when plugged in (found one by one after the worker died or
/// `settings.timeout` passed); targets without a kernel.py, and those whose kernel was never
/// judged PASS ([`report::never_judged_pass`]), are listed as excluded. The workspace's last
/// verification (`verify.json`) is left as it is: the caller saves the new one.
///
/// Bounded by `settings.deadline`: the script checks it between rounds, variants and modes
/// and returns what it decided, cut short; one that has not answered [`verify_grace`] past
/// it, or an `interrupt`, is stopped, and the result is what it had written to
/// `.autokernel/verify.partial.json` (each decision as it is reached), marked
/// [`Verification::cut_short`]. A verification cut short before it wrote anything is an
/// error. `progress` hears the script's steps (tailed from
/// `.autokernel/verify.progress.jsonl`).
#[allow(clippy::too_many_arguments)] // the workspace's parts, the bounds, the listeners
pub async fn verify_workspace(
    services: &mut Services,
    ws: &Workspace,
    spec: &ModelSpec,
    targets: &[Target],
    rows: &[ExperimentRecord],
    settings: &VerifySettings,
    progress: &(dyn Fn(&VerifyProgress) + Sync),
    interrupt: &Interrupt,
) -> anyhow::Result<Verification> {
    let deploy = settings.deploy;
    let scripts = install_scripts(ws)?;
    let script = scripts.join("verify_model.py");
    // a kernel slower than PyTorch at the model's shape is never plugged in (on a GPU: the
    // interpreter's timings on the CPU say nothing about speed)
    let device = services.device_name(&scripts, spec.device).await?;
    if let Some(mode) = deploy.filter(|m| m.gpu_only() && !device.starts_with("cuda")) {
        anyhow::bail!(
            "--deploy {} needs a GPU (CUDA graphs) and this verification runs on the CPU; use --deploy eager or compile",
            mode.name()
        );
    }
    let slower = if device.starts_with("cuda") {
        report::slower_than_pytorch(&report::summarize(targets, rows))
    } else {
        Vec::new()
    };
    // the kernels as the verification sees them, read once: an edit after this makes the
    // verdict stale; a target without a kernel.py (none written yet, or deleted) is said,
    // not skipped
    let kernel_sha256: BTreeMap<String, String> = targets
        .iter()
        .filter_map(|t| {
            Some((
                t.id.clone(),
                crate::verification::file_sha256(&ws.path(&t.kernel_relpath()))?,
            ))
        })
        .collect();
    // a kernel the judge never passed is never plugged in, whatever kernel.py holds: a
    // target without a judged best, or whose kernel.py is not its judged best (a run killed
    // mid-experiment leaves the candidate there until it resumes; a hand edit)
    let mut unjudged: Vec<Excluded> = report::never_judged_pass(targets, rows)
        .into_iter()
        .filter(|e| kernel_sha256.contains_key(&e.target))
        .collect();
    for (id, (experiment, commit)) in report::judged_bests(targets, rows) {
        // the file as read above, by its digest: no second read
        let (Some(t), Some(now)) = (targets.iter().find(|t| t.id == id), kernel_sha256.get(&id))
        else {
            continue;
        };
        let judged = autokernel_vcs::read_kernel_at(
            &ws.root,
            &autokernel_core::CommitId(commit.clone()),
            &id,
        )
        .with_context(|| format!("cannot read the kernel of experiment {experiment}"))?;
        let judged_sha256 = judged.map(|text| format!("{:x}", Sha256::digest(text.as_bytes())));
        if judged_sha256.as_ref() != Some(now) {
            unjudged.push(Excluded {
                target: id.clone(),
                reason: format!(
                    "`{path}` is not the kernel the judge passed (experiment {experiment}, commit {}): a run killed mid-experiment leaves its candidate there (`autokernel run` on this workspace resumes and restores the best), or the file was edited by hand (`git -C {} restore {path}` brings back the one that passed; `autokernel bench {path}` judges yours)",
                    &commit[..commit.len().min(12)],
                    ws.root.display(),
                    path = t.kernel_relpath(),
                ),
                broken: false,
                undecided: false,
            });
        }
    }
    let missing: Vec<Excluded> = targets
        .iter()
        .filter(|t| !kernel_sha256.contains_key(&t.id))
        .map(|t| Excluded {
            target: t.id.clone(),
            reason: format!(
                "no kernel: `{}` does not exist (the run has not reached this target, or it was deleted)",
                t.kernel_relpath()
            ),
            broken: false,
            undecided: false,
        })
        .collect();
    let present: Vec<serde_json::Value> = targets
        .iter()
        .filter(|t| kernel_sha256.contains_key(&t.id))
        .filter(|t| !slower.iter().any(|e| e.target == t.id))
        .filter(|t| !unjudged.iter().any(|e| e.target == t.id))
        .map(|t| {
            let shapes: Vec<&[u64]> = t.shapes.iter().map(|s| s.0.as_slice()).collect();
            serde_json::json!({
                "id": t.id,
                "kind": t.kind.name(),
                "path": ws.path(&t.kernel_relpath()),
                "shapes": shapes,
                // every parameter (defaults filled): the plug matches modules by them
                "params": t.kind.spec().resolve_params(&t.params).unwrap_or_else(|_| t.params.clone()),
                // matmul: the layout of B it was judged in (nn.Linear's Wᵀ, Conv1D's W)
                "layout": t.layout.name(),
            })
        })
        .collect();
    // the model and its inputs exactly as the profiler passed them
    let mut kwargs = autokernel_profiler::loader_kwargs(spec);
    kwargs["dtype"] = serde_json::json!(planned_dtype(spec.dtype, targets));
    kwargs["device"] = serde_json::json!(device);
    kwargs["loader_dir"] = serde_json::json!(scripts);
    kwargs["deploy"] = serde_json::json!(deploy.map(DeployMode::name));
    kwargs["all_modes"] = serde_json::json!(settings.all_modes);
    let scratch = ws.path(".autokernel");
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("cannot create `{}`", scratch.display()))?;
    let partial = scratch.join("verify.partial.json");
    let progress_file = scratch.join("verify.progress.jsonl");
    kwargs["partial_path"] = serde_json::json!(partial);
    kwargs["progress_path"] = serde_json::json!(progress_file);
    let budget = settings.deadline.saturating_duration_since(Instant::now());
    let grace = verify_grace(budget);
    // Each call of the script: what it answered, or `None` when interrupted. Its partial
    // result and progress start afresh, so that what is read back is this call's.
    let verify = |targets: &[serde_json::Value]| {
        let mut kwargs = kwargs.clone();
        kwargs["targets"] = serde_json::json!(targets);
        let left = settings.deadline.saturating_duration_since(Instant::now());
        kwargs["budget_s"] = serde_json::json!(left.as_secs_f64());
        // hung, or past the deadline's hard limit, whichever comes first
        let limit = settings.timeout.min(left + grace);
        let worker = services.worker();
        let (script, partial, progress_file) =
            (script.clone(), partial.clone(), progress_file.clone());
        async move {
            for stale in [&partial, &progress_file] {
                match std::fs::remove_file(stale) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Some(Err(WorkerError::Io(e)));
                    }
                    _ => {}
                }
            }
            let call = worker.call_script(&script, "verify", kwargs, limit);
            let mut tail = ProgressTail::new(progress_file);
            tokio::pin!(call);
            loop {
                tokio::select! {
                    reply = &mut call => {
                        tail.read(progress);
                        return Some(reply);
                    }
                    () = interrupt.stopped() => {
                        tail.read(progress);
                        return None;
                    }
                    () = tokio::time::sleep(Duration::from_millis(200)) => tail.read(progress),
                }
            }
        }
    };
    // the script's verification with what only this side knows: the kernels that killed or
    // hung the worker, those never plugged in, and the digests of the kernels it saw
    let finish = |mut verification: Verification, culprits: Vec<Excluded>| {
        if !culprits.is_empty() {
            verification.passed = false;
        }
        verification.excluded.extend(culprits);
        verification.excluded.extend(slower.iter().cloned());
        verification.excluded.extend(unjudged.iter().cloned());
        verification.excluded.extend(missing.iter().cloned());
        verification.kernel_sha256 = Some(kernel_sha256.clone());
        Ok(verification)
    };
    let past_deadline = || Instant::now() >= settings.deadline;
    // cut short (interrupted, or stopped at the hard limit): the worker goes, and the last
    // partial result stands, if there is one
    let cut_short = |why: &str| -> anyhow::Result<Verification> {
        match read_partial(&partial, why)? {
            Some(v) => Ok(v),
            None => anyhow::bail!(
                "the verification was {why} before it decided anything (nothing measured, nothing saved)"
            ),
        }
    };
    let interrupted = "interrupted (Ctrl-C or SIGTERM)";
    let hard_limit = format!(
        "stopped {:.0} s past the end of its budget ({:.0} s), its script not answering",
        grace.as_secs_f64(),
        budget.as_secs_f64()
    );
    let first = verify(&present).await;
    let (reply, culprits) = match first {
        None => {
            services.worker().shutdown().await;
            return finish(cut_short(interrupted)?, Vec::new());
        }
        Some(Err(WorkerError::Timeout { .. })) if past_deadline() => {
            services.worker().shutdown().await;
            return finish(cut_short(&hard_limit)?, Vec::new());
        }
        // A kernel that kills the process (os._exit, a fatal signal) or hangs takes every
        // other kernel's verdict with it: find it by plugging each kernel in alone, each on
        // a fresh worker (one kernel may leave the process broken for the next), then
        // verify the others without it.
        Some(Err(e @ (WorkerError::Crashed { .. } | WorkerError::Timeout { .. })))
            if !present.is_empty() =>
        {
            let mut culprits = Vec::new();
            for target in &present {
                if past_deadline() {
                    break;
                }
                services.worker().shutdown().await;
                match verify(std::slice::from_ref(target)).await {
                    None => {
                        services.worker().shutdown().await;
                        return finish(cut_short(interrupted)?, culprits);
                    }
                    Some(Err(e @ (WorkerError::Crashed { .. } | WorkerError::Timeout { .. })))
                        if !past_deadline() =>
                    {
                        let id = target["id"].as_str().unwrap_or_default().to_string();
                        culprits.push(worker_culprit(id, &e));
                    }
                    Some(_) => {}
                }
            }
            if culprits.is_empty() {
                return Err(anyhow::Error::new(e).context(
                    "the verification failed with the kernels plugged in together, and with none of them alone (the model, or kernels only together)",
                ));
            }
            let rest: Vec<serde_json::Value> = present
                .iter()
                .filter(|t| !culprits.iter().any(|k| t["id"] == k.target.as_str()))
                .cloned()
                .collect();
            services.worker().shutdown().await;
            match verify(&rest).await {
                None => {
                    services.worker().shutdown().await;
                    return finish(cut_short(interrupted)?, culprits);
                }
                Some(Err(WorkerError::Timeout { .. })) if past_deadline() => {
                    services.worker().shutdown().await;
                    return finish(cut_short(&hard_limit)?, culprits);
                }
                Some(reply) => (reply?, culprits),
            }
        }
        Some(reply) => (reply?, Vec::new()),
    };
    let verification: Verification = serde_json::from_value(reply)
        .context("the verification script returned an unexpected reply")?;
    if verification.cut_short && !verification.decided_anything() {
        anyhow::bail!(
            "the verification was cut short before it decided anything ({}); nothing saved\nhint: give it more time (--verify-budget, or a larger --budget)",
            verification.cut_short_reason.as_deref().unwrap_or("cut short")
        );
    }
    finish(verification, culprits)
}

/// The exclusion of a kernel that killed the bench worker, or hung it, inside the model:
/// broken, so that `verify` fails (exit 1) naming it.
fn worker_culprit(target: String, error: &WorkerError) -> Excluded {
    let what = match error {
        WorkerError::Crashed { status, .. } => format!("kills the bench worker ({status})"),
        WorkerError::Timeout { limit_s, .. } => {
            format!("hangs: no reply within {limit_s:.0} s")
        }
        other => other.to_string(),
    };
    Excluded {
        target,
        reason: format!("{what} inside the model: left out, the others verified without it"),
        broken: true,
        undecided: false,
    }
}

/// The dtype the model was planned in (`plan.json` records it per target), else the spec's.
fn planned_dtype(spec_dtype: DType, targets: &[Target]) -> &'static str {
    targets.first().map_or(spec_dtype, |t| t.dtype).name()
}

/// The partial result the script wrote last (`verify.partial.json`), as a verification cut
/// short for `why` (`interrupted …`); `None` when there is none, or when it decided nothing.
///
/// # Errors
/// A partial file that cannot be read or is not a verification.
fn read_partial(path: &Path, why: &str) -> anyhow::Result<Option<Verification>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read `{}`", path.display())),
    };
    let mut v: Verification = serde_json::from_str(&text)
        .with_context(|| format!("`{}` is not a verification", path.display()))?;
    if !v.decided_anything() {
        return Ok(None);
    }
    v.cut_short = true;
    // the script's word says where it was ("stopped while timing eager …")
    v.cut_short_reason = Some(match v.cut_short_reason.take() {
        Some(where_) => format!("{why}: {where_}"),
        None => why.to_string(),
    });
    Ok(Some(v))
}

/// Follows the script's progress file: each whole line appended since the last read, in
/// order. Unreadable or partly written lines wait for the next read; a line that is no
/// progress is skipped (progress is best effort, never a reason to fail).
struct ProgressTail {
    path: PathBuf,
    offset: u64,
    pending: String,
}

impl ProgressTail {
    fn new(path: PathBuf) -> Self {
        ProgressTail {
            path,
            offset: 0,
            pending: String::new(),
        }
    }

    /// Hands each new whole line to `progress`.
    fn read(&mut self, progress: &(dyn Fn(&VerifyProgress) + Sync)) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let Ok(n) = file.read_to_end(&mut bytes) else {
            return;
        };
        self.offset += n as u64;
        self.pending.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            match serde_json::from_str::<VerifyProgress>(line.trim()) {
                Ok(step) => progress(&step),
                Err(e) => {
                    tracing::debug!("a verification progress line that is none ({e}): {line}")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verification_share_is_a_quarter_within_its_floor_and_ceiling() {
        let s = |secs| verify_share(Duration::from_secs(secs)).as_secs();
        // a quarter of a 20-minute budget
        assert_eq!(s(1200), 300);
        // a minute's budget: the floor, 30 s, which is also half of it
        assert_eq!(s(60), 30);
        // never more than half a budget
        assert_eq!(s(40), 20);
        // an overnight budget: the ceiling
        assert_eq!(s(8 * 3600), VERIFY_SHARE_MAX_S);
    }

    #[test]
    fn progress_lines_are_read_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let seen = std::sync::Mutex::new(Vec::new());
        let record = |p: &VerifyProgress| seen.lock().unwrap().push(p.text.clone());
        let mut tail = ProgressTail::new(path.clone());
        tail.read(&record); // no file yet: nothing
        std::fs::write(
            &path,
            "{\"stage\": \"load\", \"text\": \"a\"}\n{\"stage\": \"mo",
        )
        .unwrap();
        tail.read(&record);
        assert_eq!(*seen.lock().unwrap(), ["a"]);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(
            &mut f,
            b"des\", \"text\": \"b\", \"round\": 1}\nnot json\n{\"stage\": \"done\", \"text\": \"c\"}\n",
        )
        .unwrap();
        tail.read(&record);
        assert_eq!(*seen.lock().unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn a_partial_result_reads_as_a_verification_cut_short_unless_it_decided_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verify.partial.json");
        assert!(read_partial(&path, "interrupted").unwrap().is_none());
        let undecided = serde_json::json!({
            "passed": true, "included": [], "device": "cpu", "timing_representative": false,
            "max_abs_error": 0.0, "eager_ms": null, "optimized_ms": null, "speedup": null,
            "excluded": [{"target": "01-a", "reason": "not decided", "undecided": true}],
            "cut_short": true, "cut_short_reason": "stopped while checking 01-a alone in the model",
        });
        std::fs::write(&path, undecided.to_string()).unwrap();
        assert!(read_partial(&path, "interrupted").unwrap().is_none());
        let mut decided = undecided;
        decided["included"] = serde_json::json!(["02-b"]);
        std::fs::write(&path, decided.to_string()).unwrap();
        let v = read_partial(&path, "interrupted (Ctrl-C or SIGTERM)")
            .unwrap()
            .unwrap();
        assert!(v.cut_short);
        assert_eq!(v.included, ["02-b"]);
        assert_eq!(
            v.cut_short_reason.as_deref(),
            Some("interrupted (Ctrl-C or SIGTERM): stopped while checking 01-a alone in the model")
        );
        assert!(v.excluded[0].undecided);
    }
}
