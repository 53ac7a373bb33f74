//! Wiring of the default implementations: one warm bench worker shared by the profiler, the
//! benchmarker and verification; the agent chosen on the command line; the gix store.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions, WorkerProgram};
use autokernel_core::{Agent, DType, Device, ModelSpec};
use autokernel_profiler::{ChromeTraceProfiler, ImportedTrace};

use crate::commands::run::AgentChoice;
use crate::workspace::Workspace;

/// The bundled `program.md`, copied into each workspace where the user may edit it.
pub const PROGRAM_MD: &str = include_str!("../program.md");

/// Parses a duration such as `45m`, `8h`, `1h30m` or `90s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration like 45m, 8h or 1h30m: {e}"))
}

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

/// The agent for `choice`.
pub fn agent(
    choice: AgentChoice,
    ws: &Workspace,
    base_url: Option<String>,
    model: Option<String>,
) -> anyhow::Result<Box<dyn Agent>> {
    let llm = || -> anyhow::Result<autokernel_agent::OpenAiAgent> {
        let model = model.clone().or_else(|| ws.settings.llm_model.clone());
        let base_url = base_url
            .clone()
            .or_else(|| ws.settings.llm_base_url.clone());
        // flags and autokernel.toml override the environment
        let mut config = autokernel_agent::OpenAiConfig::from_lookup(|name| match name {
            autokernel_agent::env::AUTOKERNEL_LLM_MODEL if model.is_some() => model.clone(),
            autokernel_agent::env::OPENAI_BASE_URL if base_url.is_some() => base_url.clone(),
            other => std::env::var(other).ok(),
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}\nhint: pass --llm-model NAME (and --llm-base-url URL for a local server)"
            )
        })?;
        if config.base_url == autokernel_agent::DEFAULT_BASE_URL && config.api_key.is_none() {
            anyhow::bail!(
                "--agent openai talks to {} by default, and OPENAI_API_KEY is not set\nhint: set OPENAI_API_KEY, or point --llm-base-url at a local server (vLLM, Ollama, llama.cpp)",
                autokernel_agent::DEFAULT_BASE_URL
            );
        }
        // the workspace's program.md (written from the built-in copy on a first run, so
        // that the user can edit it), unless AUTOKERNEL_PROGRAM_MD names another
        if std::env::var_os(autokernel_agent::env::AUTOKERNEL_PROGRAM_MD).is_none() {
            install_program_md(ws)?;
            config.program_md = ws.path("program.md");
        }
        Ok(autokernel_agent::OpenAiAgent::new(config)?)
    };
    Ok(match choice {
        AgentChoice::Tune => Box::new(autokernel_agent::TunerAgent::new()),
        AgentChoice::Openai => Box::new(llm()?),
        AgentChoice::Hybrid => Box::new(autokernel_agent::HybridAgent::new(
            llm()?,
            autokernel_agent::TunerAgent::new(),
        )),
    })
}

/// The gix store on the workspace, on branch `autokernel/<run_tag>`.
pub fn store(ws: &Workspace, run_tag: &str) -> anyhow::Result<autokernel_vcs::GixStore> {
    let options = autokernel_vcs::StoreOptions::new(run_tag);
    autokernel_vcs::GixStore::open(&ws.root, options).with_context(|| {
        format!(
            "cannot open the workspace repository `{}`",
            ws.root.display()
        )
    })
}
