//! Verification: plug a workspace's kept kernels into its model and check the model end
//! to end (outputs against the unmodified model, and both timed). The record it returns is
//! [`Verification`]; the workspace saves it as `verify.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use autokernel_bench::WorkerError;
use autokernel_core::{DType, Device, ExperimentRecord, ModelSpec, Target};
use sha2::{Digest, Sha256};

use crate::report;
use crate::services::{install_scripts, Services};
use crate::verification::{Excluded, Verification};
use crate::workspace::Workspace;

/// How long a verification may take by default, in seconds (a large model on the CPU
/// interpreter takes minutes).
pub const VERIFY_TIMEOUT_S: u64 = 1800;

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
/// decides ([`Workspace::save_verification`]).
///
/// # Errors
/// [`VerifyError`]: not a model's workspace, no plan, no usable Python, the model does not
/// load, or the verification script fails with none of the kernels plugged in.
pub async fn verify(ws: &Workspace, options: &VerifyOptions) -> Result<Verification, VerifyError> {
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
        options.timeout,
        options.deploy,
    )
    .await;
    services.worker().shutdown().await;
    Ok(verified?)
}

/// Runs the verification script in the worker over the workspace's current kernels (the
/// branch tip: the best kept kernel of each target), leaving out those that `rows` (the
/// workspace's results) show slower than PyTorch at the model's shape, and those that kill
/// or hang the worker when plugged in (found one by one after the worker died or `timeout`
/// passed); targets without a kernel.py, and those whose kernel was never judged PASS
/// ([`report::never_judged_pass`]), are listed as excluded. The workspace's last
/// verification (`verify.json`) is left as it is: the caller saves the new one, and one cut
/// short leaves the last, which reads as stale once the kernels differ from it.
pub async fn verify_workspace(
    services: &mut Services,
    ws: &Workspace,
    spec: &ModelSpec,
    targets: &[Target],
    rows: &[ExperimentRecord],
    timeout: Duration,
    deploy: Option<DeployMode>,
) -> anyhow::Result<Verification> {
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
    let verify = |targets: &[serde_json::Value]| {
        let mut kwargs = kwargs.clone();
        kwargs["targets"] = serde_json::json!(targets);
        let worker = services.worker();
        let script = script.clone();
        async move { worker.call_script(&script, "verify", kwargs, timeout).await }
    };
    let (reply, culprits) = match verify(&present).await {
        // A kernel that kills the process (os._exit, a fatal signal) or hangs takes every
        // other kernel's verdict with it: find it by plugging each kernel in alone, each on
        // a fresh worker (one kernel may leave the process broken for the next), then
        // verify the others without it.
        Err(e @ (WorkerError::Crashed { .. } | WorkerError::Timeout { .. }))
            if !present.is_empty() =>
        {
            let mut culprits = Vec::new();
            for target in &present {
                services.worker().shutdown().await;
                if let Err(e @ (WorkerError::Crashed { .. } | WorkerError::Timeout { .. })) =
                    verify(std::slice::from_ref(target)).await
                {
                    let id = target["id"].as_str().unwrap_or_default().to_string();
                    culprits.push(worker_culprit(id, &e));
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
            (verify(&rest).await?, culprits)
        }
        reply => (reply?, Vec::new()),
    };
    let mut verification: Verification = serde_json::from_value(reply)
        .context("the verification script returned an unexpected reply")?;
    if !culprits.is_empty() {
        verification.passed = false;
    }
    verification.excluded.extend(culprits);
    verification.excluded.extend(slower);
    verification.excluded.extend(unjudged);
    verification.excluded.extend(missing);
    verification.kernel_sha256 = Some(kernel_sha256);
    Ok(verification)
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
    }
}

/// The dtype the model was planned in (`plan.json` records it per target), else the spec's.
fn planned_dtype(spec_dtype: DType, targets: &[Target]) -> &'static str {
    targets.first().map_or(spec_dtype, |t| t.dtype).name()
}
