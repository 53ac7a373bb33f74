//! Wiring of the default implementations: one warm bench worker shared by the profiler, the
//! benchmarker and verification; the scripts it runs; the gix store. (The agent is chosen
//! by [`crate::settings::AgentSettings`].)

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions, WorkerProgram};
use autokernel_core::{DType, Device, ModelSpec};
use autokernel_profiler::{ChromeTraceProfiler, ImportedTrace};

use crate::workspace::Workspace;

/// The bundled `program.md`, copied into each workspace where the user may edit it.
pub const PROGRAM_MD: &str = include_str!("../program.md");

/// Writes `program.md` into the workspace unless the user already has a copy there.
pub fn install_program_md(ws: &Workspace) -> anyhow::Result<()> {
    let p = ws.path("program.md");
    if !p.exists() {
        std::fs::write(&p, PROGRAM_MD)
            .with_context(|| format!("cannot write `{}`", p.display()))?;
    }
    Ok(())
}

/// The default services over one bench worker process.
pub struct Services {
    worker: Arc<Worker>,
    /// The GPU's name as PyTorch reports it, once a request ran on CUDA.
    pub gpu_name: Option<String>,
}

impl Services {
    /// Prepares the worker (started lazily on the first request).
    ///
    /// # Errors
    /// When no usable Python interpreter is found.
    pub fn start(
        python: Option<&Path>,
        device: Device,
        measured_bandwidth_gb_s: Option<f64>,
    ) -> anyhow::Result<Self> {
        let python = autokernel_bench::resolve_python(python)?;
        let options = WorkerOptions {
            python: Some(python),
            program: WorkerProgram::default(),
            device,
            gpu_bandwidth_gb_s: measured_bandwidth_gb_s,
        };
        Ok(Services {
            worker: Arc::new(Worker::new(options)),
            gpu_name: None,
        })
    }

    /// The shared worker.
    pub fn worker(&self) -> Arc<Worker> {
        self.worker.clone()
    }

    /// The default benchmarker on the shared worker.
    pub fn benchmarker(&self) -> PyWorkerBenchmarker {
        PyWorkerBenchmarker::with_worker(self.worker.clone())
    }

    /// Resolves `requested` (auto/cuda/cpu) to `cuda` or `cpu` in the worker, and records
    /// the GPU's name.
    pub async fn device_name(
        &mut self,
        scripts: &Path,
        requested: Device,
    ) -> anyhow::Result<String> {
        let script = scripts.join("verify_model.py");
        let requested = match requested {
            Device::Auto => "auto",
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        };
        let reply = self
            .worker
            .call_script(
                &script,
                "device_info",
                serde_json::json!({ "requested": requested }),
                Duration::from_secs(300),
            )
            .await?;
        self.gpu_name = reply["gpu_name"].as_str().map(str::to_string);
        Ok(reply["device"].as_str().unwrap_or("cpu").to_string())
    }

    /// Profiles `spec` over `iterations` recorded forward passes, writing the trace to
    /// `trace_out`; returns the imported trace and the dtype the model ran in (a default
    /// half dtype runs as float32 on the CPU). Timings too noisy to rank by are warned
    /// about ([`ImportedTrace::spread_warning`]).
    pub async fn profile(
        &self,
        spec: &ModelSpec,
        dtype_is_default: bool,
        iterations: u32,
        scripts: &Path,
        trace_out: &Path,
    ) -> anyhow::Result<(ImportedTrace, DType)> {
        let profiler = ChromeTraceProfiler::new(self.worker.clone())
            .with_cache_dir(scripts)
            .with_dtype_is_default(dtype_is_default)
            .with_iterations(autokernel_profiler::DEFAULT_WARMUP, iterations);
        let (imported, run) = profiler.profile_imported(spec, trace_out).await?;
        if let Some(w) = imported.spread_warning() {
            tracing::warn!("{w}");
        }
        let dtype = run["dtype"]
            .as_str()
            .and_then(|d| d.parse().ok())
            .unwrap_or(spec.dtype);
        Ok((imported, dtype))
    }
}

/// The verification script, run inside the bench worker.
pub const VERIFY_PY: &str = include_str!("../python/verify_model.py");

/// The kernels as PyTorch operators (`python/kernel_ops.py`): registration, the fake and
/// CPU implementations, the cached launcher. See `docs/deploy.md`.
pub const KERNEL_OPS_PY: &str = include_str!("../python/kernel_ops.py");

/// The plugs (`python/plugs.py`): a kept kernel installed into one model instance where
/// the call-site matcher gives a call its target's parameters, and undone. Verification
/// and an exported package use it.
pub const PLUGS_PY: &str = include_str!("../python/plugs.py");

/// `deploy.py`: `optimize(model)` and its report, shipped inside an exported package; the
/// verification uses its rule of where the kernels run (`_contexts`).
pub const DEPLOY_PY: &str = include_str!("../python/deploy.py");

/// The deploy modes verification times a model in (`python/model_modes.py`): eager, a
/// CUDA graph, `torch.compile` and its `reduce-overhead` mode.
pub const MODEL_MODES_PY: &str = include_str!("../python/model_modes.py");

/// Writes the Python scripts the worker runs for a workspace (the verifier, the plugs and
/// the call-site matcher they use, the operators' module with the catalogue it reads, the
/// profiler's model loader and the bundled example models) into `.autokernel/scripts`;
/// returns that folder.
///
/// # Errors
/// When the folder or a file cannot be written.
pub fn install_scripts(ws: &Workspace) -> anyhow::Result<PathBuf> {
    let scripts = ws.path(".autokernel/scripts");
    let examples = scripts.join("examples");
    std::fs::create_dir_all(&examples)
        .with_context(|| format!("cannot create `{}`", examples.display()))?;
    write_kernel_ops(&scripts)?;
    let mut files = vec![
        (scripts.join("verify_model.py"), VERIFY_PY),
        (scripts.join("plugs.py"), PLUGS_PY),
        (scripts.join("deploy.py"), DEPLOY_PY),
        (scripts.join("model_modes.py"), MODEL_MODES_PY),
        (
            scripts.join("call_sites.py"),
            autokernel_profiler::CALL_SITES_PY,
        ),
        (
            scripts.join("profile_model.py"),
            autokernel_profiler::PROFILE_MODEL_PY,
        ),
    ];
    for (name, text) in autokernel_profiler::EXAMPLES {
        files.push((examples.join(format!("{name}.py")), text));
    }
    write_files(files)?;
    Ok(scripts)
}

/// Writes the operators' module into `dir` with what it imports: `kernel_ops.py`,
/// `catalogue.py` (the references) and `catalogue.json` (the built-in catalogue,
/// [`autokernel_core::Catalogue::to_json`]: each kind's inputs and output dims). `dir` must
/// exist. Verification imports them from the workspace's scripts folder; an exported
/// package ships the same three files.
///
/// # Errors
/// When a file cannot be written.
pub fn write_kernel_ops(dir: &Path) -> anyhow::Result<()> {
    let catalogue = autokernel_core::Catalogue::builtin().to_json();
    write_files(vec![
        (dir.join("kernel_ops.py"), KERNEL_OPS_PY),
        (dir.join("catalogue.py"), autokernel_bench::CATALOGUE_PY),
        (dir.join("catalogue.json"), catalogue.as_str()),
    ])
}

fn write_files(files: Vec<(PathBuf, &str)>) -> anyhow::Result<()> {
    for (path, text) in files {
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(())
}

/// Opens the gix store on the workspace, on branch `autokernel/<run_tag>`; this takes the
/// workspace's owner lock, so that two runs on one workspace refuse each other.
///
/// # Errors
/// When the repository cannot be opened or another run holds the lock.
pub fn store(ws: &Workspace, run_tag: &str) -> anyhow::Result<autokernel_vcs::GixStore> {
    let options = autokernel_vcs::StoreOptions::new(run_tag);
    autokernel_vcs::GixStore::open(&ws.root, options).with_context(|| {
        format!(
            "cannot open the workspace repository `{}`",
            ws.root.display()
        )
    })
}
