//! `autokernel verify`: plug a workspace's kept kernels into its model and check the model
//! end to end (outputs against the unmodified model, and both timed).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use autokernel_bench::WorkerError;
use autokernel_core::{DType, Device, ExperimentRecord, ModelSource, ModelSpec, Target};
use sha2::{Digest, Sha256};

use crate::cli::GlobalArgs;
use crate::defaults::Services;
use crate::progress::spinner;
use crate::report::{self, Verification};
use crate::workspace::Workspace;

/// How long a verification may take by default, in seconds (a large model on the CPU
/// interpreter takes minutes).
pub const VERIFY_TIMEOUT_S: u64 = 1800;

/// The verification script, run inside the bench worker.
pub const VERIFY_PY: &str = include_str!("../../python/verify_model.py");

/// Arguments of `autokernel verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Each kept kernel is plugged into the model alone, then all together, and the
model's output is compared with the unmodified model's. A kernel is left out (an
`excluded:` line says why) when it is wrong: it cannot be loaded, raises inside the model,
changes the model's output beyond the tolerance, or kills or hangs the process (each kernel
is then plugged in alone on a fresh worker to find it, and the others are verified without
it; --timeout says when a verification counts as hung); or when it is merely of no use: the
model has no call site for it at its shapes, or (on a GPU) it does not make the model at
least 1% faster.

Examples:
  autokernel verify -w autokernel-workspace
  autokernel verify -w autokernel-workspace --device cpu --json

Exit codes: 0 the model with the kernels matches and no kernel is wrong (also when none was
plugged in: `verified: n/a`); 1 a kernel is wrong (it breaks the model or cannot be loaded);
2 error (not a workspace, no usable python, the model does not load)."
)]
pub struct VerifyArgs {
    /// The workspace to verify
    #[arg(
        long,
        short = 'w',
        default_value = "autokernel-workspace",
        value_name = "DIR"
    )]
    pub workspace: PathBuf,
    /// Where to run: auto, cuda or cpu [default: the workspace's]
    #[arg(long, value_name = "auto|cuda|cpu")]
    pub device: Option<Device>,
    /// The Python interpreter whose torch and triton to use
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Seconds the verification may take before the worker is stopped; a kernel that
    /// hangs inside the model is then found (each kernel alone, this long each) and left out
    #[arg(long, value_name = "SECS", default_value_t = VERIFY_TIMEOUT_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

/// Runs `autokernel verify`; exit 1 when the model with the kernels does not match, or a
/// kernel was left out for being wrong (it cannot be loaded, raises inside the model, or
/// changes its output); a kernel left out for having no call site or for not making the
/// model faster is no failure.
pub async fn run(args: VerifyArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace)?;
    if let Some(kernel) = &ws.settings.tuned_kernel {
        bail!(
            "workspace `{}` is `autokernel tune`'s, for `{}`: it has no model to plug its kernel into\nhint: `autokernel report -w {}` summarises it",
            ws.root.display(),
            kernel.display(),
            ws.root.display()
        );
    }
    let Some(identity) = ws.settings.model.clone() else {
        bail!(
            "workspace `{}` records no model (autokernel.toml has no [model])",
            ws.root.display()
        );
    };
    let Some(targets) = ws.load_plan()? else {
        bail!(
            "workspace `{}` has no plan.json yet\nhint: run `autokernel run` first",
            ws.root.display()
        );
    };
    let device = args
        .device
        .or_else(|| ws.settings.device.as_deref().and_then(|d| d.parse().ok()))
        .unwrap_or(Device::Auto);
    let spec = ModelSpec {
        source: identity.source.clone(),
        kwargs: if identity.kwargs.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&identity.kwargs)?
        },
        input_shape: identity.input_shape.clone(),
        // a defaulted dtype: the one the plan was made in
        dtype: if identity.dtype.is_empty() {
            targets.first().map_or(DType::Float32, |t| t.dtype)
        } else {
            identity.dtype.parse::<DType>()?
        },
        device,
    };
    let mut services = Services::start(
        args.python.as_deref(),
        device,
        ws.settings.measured_bandwidth_gb_s,
    )?;
    let bar = spinner(global, "verifying the kept kernels inside the model");
    let rows = match ws.path("results.tsv") {
        p if p.exists() => autokernel_core::ResultsLog::read(p)?,
        _ => Vec::new(),
    };
    let timeout = Duration::from_secs(args.timeout);
    let v = tokio::select! {
        v = verify_workspace(&mut services, &ws, &spec, &targets, &rows, timeout) => v,
        signal = crate::commands::experiments::stop_signal() => {
            bar.finish_and_clear();
            services.worker().shutdown().await;
            #[allow(clippy::print_stderr)]
            {
                eprintln!("\n{signal}: verification stopped; nothing saved");
            }
            return Ok(ExitCode::from(130));
        }
    };
    bar.finish_and_clear();
    let v = v?;
    ws.save_verification(&v)?;
    if args.json {
        crate::print_stdout(&serde_json::to_string_pretty(&v)?);
    } else {
        let verdict = v.verdict();
        let included = if v.included.is_empty() {
            "none".to_string()
        } else {
            v.included.join(", ")
        };
        crate::print_stdout(&format!(
            "verified: {verdict}\nincluded: {included}\n{}eager_ms: {}\noptimized_ms: {}\nspeedup: {}",
            v.excluded
                .iter()
                .map(|e| format!("excluded: {}: {}\n", e.target, e.reason))
                .collect::<String>(),
            v.eager_ms.map_or("n/a".into(), |x| format!("{x:.3}")),
            v.optimized_ms.map_or("n/a".into(), |x| format!("{x:.3}")),
            v.speedup.map_or("n/a".into(), |x| format!("{x:.3}")),
        ));
        if !v.timing_representative {
            crate::print_stdout(
                "timings: Triton's interpreter on the CPU, not representative (the speedup says nothing)",
            );
        }
    }
    Ok(if v.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Writes the Python scripts the worker runs for a workspace (the verifier, the profiler's
/// model loader and the bundled example models) into `.autokernel/scripts`; returns that folder.
pub fn install_scripts(ws: &Workspace) -> anyhow::Result<PathBuf> {
    let scripts = ws.path(".autokernel/scripts");
    let examples = scripts.join("examples");
    std::fs::create_dir_all(&examples)
        .with_context(|| format!("cannot create `{}`", examples.display()))?;
    let mut files = vec![
        (scripts.join("verify_model.py"), VERIFY_PY),
        (
            scripts.join("profile_model.py"),
            autokernel_profiler::PROFILE_MODEL_PY,
        ),
    ];
    for (name, text) in autokernel_profiler::EXAMPLES {
        files.push((examples.join(format!("{name}.py")), text));
    }
    for (path, text) in files {
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(scripts)
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
) -> anyhow::Result<Verification> {
    let scripts = install_scripts(ws)?;
    let script = scripts.join("verify_model.py");
    // a kernel slower than PyTorch at the model's shape is never plugged in (on a GPU: the
    // interpreter's timings on the CPU say nothing about speed)
    let device = services.device_name(&scripts, spec.device).await?;
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
                report::file_sha256(&ws.path(&t.kernel_relpath()))?,
            ))
        })
        .collect();
    // a kernel the judge never passed is never plugged in, whatever kernel.py holds: a
    // target without a judged best, or whose kernel.py is not its judged best (a run killed
    // mid-experiment leaves the candidate there until it resumes; a hand edit)
    let mut unjudged: Vec<report::Excluded> = report::never_judged_pass(targets, rows)
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
            unjudged.push(report::Excluded {
                target: id.clone(),
                reason: format!(
                    "`{}` is not the kernel the judge passed (experiment {experiment}, commit {}): a run killed mid-experiment leaves its candidate there, or the file was edited; `autokernel run` on this workspace resumes and restores the best, `autokernel bench` judges the file",
                    t.kernel_relpath(),
                    &commit[..commit.len().min(12)]
                ),
                broken: false,
            });
        }
    }
    let missing: Vec<report::Excluded> = targets
        .iter()
        .filter(|t| !kernel_sha256.contains_key(&t.id))
        .map(|t| report::Excluded {
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
            })
        })
        .collect();
    let model = match &spec.source {
        ModelSource::File { path, class } => {
            serde_json::json!({"source": "file", "path": path, "class": class})
        }
        ModelSource::Import { module, class } => {
            serde_json::json!({"source": "import", "module": module, "class": class})
        }
        ModelSource::Example { name } => serde_json::json!({"source": "example", "name": name}),
    };
    let kwargs = serde_json::json!({
        "model": model,
        "model_kwargs": if spec.kwargs.is_null() { serde_json::json!({}) } else { spec.kwargs.clone() },
        "dtype": planned_dtype(spec.dtype, targets),
        "device": device,
        "input_shape": spec.input_shape,
        "loader_dir": scripts,
    });
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
fn worker_culprit(target: String, error: &WorkerError) -> report::Excluded {
    let what = match error {
        WorkerError::Crashed { status, .. } => format!("kills the bench worker ({status})"),
        WorkerError::Timeout { limit_s, .. } => {
            format!("hangs: no reply within {limit_s:.0} s")
        }
        other => other.to_string(),
    };
    report::Excluded {
        target,
        reason: format!("{what} inside the model: left out, the others verified without it"),
        broken: true,
    }
}

/// The dtype the model was planned in (`plan.json` records it per target), else the spec's.
fn planned_dtype(spec_dtype: DType, targets: &[Target]) -> &'static str {
    targets.first().map_or(spec_dtype, |t| t.dtype).name()
}
