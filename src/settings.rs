//! Settings resolved in one place: what the caller gives (a flag, or a field an embedder
//! sets) over the workspace's `autokernel.toml`, over the environment, over the defaults,
//! as uv's `settings.rs` resolves its arguments against its configuration files. The
//! command-line flags map onto these types field for field; nothing else merges settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::bail;
use autokernel_core::{Agent, DType, Device, LoopOptions};

use crate::services;
use crate::workspace::Workspace;

/// The time limit of a baseline, and the cap of a candidate's scaled limit, in seconds,
/// when no bench timeout is given.
pub const DEFAULT_BENCH_TIMEOUT_S: u64 = 600;

/// How many of the plan's targets `run` optimises when neither the caller nor
/// `autokernel.toml` says.
pub const DEFAULT_TOP: usize = 5;

/// Parses a duration such as `45m`, `8h`, `1h30m` or `90s`.
///
/// # Errors
/// A message with examples of what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is not a duration like 45m, 8h or 1h30m: {e}"))
}

/// Which built-in agent proposes candidates (an embedder may pass any [`Agent`] instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentChoice {
    /// Coordinate descent over each kernel's TUNABLES; needs no network
    Tune,
    /// An OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, llama.cpp)
    Openai,
    /// The LLM proposes structure; the tuner refines each kept candidate's CONFIG
    Hybrid,
}

/// The agent asked for, and the LLM server's settings where it needs one.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Which agent.
    pub choice: AgentChoice,
    /// Base URL of an OpenAI-compatible server; over `llm_base_url` in autokernel.toml,
    /// over `OPENAI_BASE_URL`.
    pub llm_base_url: Option<String>,
    /// Model name on that server; over `llm_model` in autokernel.toml, over
    /// `AUTOKERNEL_LLM_MODEL`.
    pub llm_model: Option<String>,
}

impl AgentSettings {
    /// The tuner, which needs no server.
    pub fn tuner() -> Self {
        AgentSettings {
            choice: AgentChoice::Tune,
            llm_base_url: None,
            llm_model: None,
        }
    }

    /// The agent, configured for the workspace `ws` (an LLM agent reads the workspace's
    /// `program.md`, written from the built-in copy on a first run so that the user can
    /// edit it, unless `AUTOKERNEL_PROGRAM_MD` names another).
    ///
    /// # Errors
    /// An LLM agent without a model name, or aimed at OpenAI's API without a key.
    pub fn agent(&self, ws: &Workspace) -> anyhow::Result<Box<dyn Agent>> {
        let llm = || -> anyhow::Result<autokernel_agent::OpenAiAgent> {
            let model = self
                .llm_model
                .clone()
                .or_else(|| ws.settings.llm_model.clone());
            let base_url = self
                .llm_base_url
                .clone()
                .or_else(|| ws.settings.llm_base_url.clone());
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
                bail!(
                    "--agent openai talks to {} by default, and OPENAI_API_KEY is not set\nhint: set OPENAI_API_KEY, or point --llm-base-url at a local server (vLLM, Ollama, llama.cpp)",
                    autokernel_agent::DEFAULT_BASE_URL
                );
            }
            if std::env::var_os(autokernel_agent::env::AUTOKERNEL_PROGRAM_MD).is_none() {
                services::install_program_md(ws)?;
                config.program_md = ws.path("program.md");
            }
            Ok(autokernel_agent::OpenAiAgent::new(config)?)
        };
        Ok(match self.choice {
            AgentChoice::Tune => Box::new(autokernel_agent::TunerAgent::new()),
            AgentChoice::Openai => Box::new(llm()?),
            AgentChoice::Hybrid => Box::new(autokernel_agent::HybridAgent::new(
                llm()?,
                autokernel_agent::TunerAgent::new(),
            )),
        })
    }
}

/// The loop's budget and bench settings, common to `run` and `tune`. `None` leaves a value
/// to autokernel.toml, then to the default.
#[derive(Debug, Clone, Default)]
pub struct LoopSettings {
    /// Stop after this many experiments (baselines not counted; a resumed run counts afresh).
    pub max_experiments: Option<u64>,
    /// Stop after this much wall time.
    pub budget: Option<Duration>,
    /// Wall time per target before moving on.
    pub target_budget: Option<Duration>,
    /// Consecutive experiments not kept before moving on [default: the loop's, 8].
    pub plateau: Option<u32>,
    /// Keep a candidate only when this much faster than the best, in percent [default: 1].
    pub keep_threshold_pct: Option<f64>,
    /// Where kernels run.
    pub device: Device,
    /// The Python interpreter whose torch and triton to use (a path or a command name);
    /// `None`: `$AUTOKERNEL_PYTHON`, `$VIRTUAL_ENV`, `python3`.
    pub python: Option<PathBuf>,
    /// Time limit of every benchmark, in seconds; `None`: a baseline gets
    /// [`DEFAULT_BENCH_TIMEOUT_S`], a candidate a multiple of the best's own evaluation time
    /// ([`autokernel_core::TimeoutScale`]).
    pub bench_timeout_s: Option<u64>,
}

impl LoopSettings {
    /// Refuses values that would run nothing, before anything is written.
    ///
    /// # Errors
    /// A message naming the flag and a value that works.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.max_experiments == Some(0) {
            bail!("--max-experiments 0 runs no experiment; pass 1 or more");
        }
        if self.budget.is_some_and(|b| b.is_zero()) {
            bail!("--budget 0 leaves no time for an experiment; pass a duration such as 20m or 8h");
        }
        if self.target_budget.is_some_and(|b| b.is_zero()) {
            bail!("--target-budget 0 leaves no time for an experiment on a target; pass a duration such as 30m");
        }
        if self.plateau == Some(0) {
            bail!("--plateau 0 moves on from a target before any experiment counts; pass 1 or more (the default is 8)");
        }
        if self.bench_timeout_s == Some(0) {
            bail!(
                "--bench-timeout 0 would time out every benchmark; pass a limit in seconds, e.g. 600"
            );
        }
        if self
            .keep_threshold_pct
            .is_some_and(|p| !(0.0..100.0).contains(&p))
        {
            bail!("--keep-threshold-pct must be in [0, 100), e.g. 1 for 1%");
        }
        Ok(())
    }

    /// Refuses bfloat16 where it will run on the CPU, before a workspace folder is touched:
    /// on `Device::Cpu`, and on `Device::Auto` when torch sees no GPU (asked of the
    /// interpreter in a subprocess, a torch import: only for bfloat16). Where that question
    /// cannot be answered, the worker's own check later decides.
    ///
    /// # Errors
    /// [`refuse_bfloat16_on_cpu`]'s.
    pub fn refuse_bfloat16_where_it_cannot_run(&self, dtype: DType) -> anyhow::Result<()> {
        let on_cpu = match self.device {
            Device::Cpu => true,
            Device::Cuda => false,
            Device::Auto => dtype == DType::Bfloat16 && torch_sees_no_gpu(self.python.as_deref()),
        };
        refuse_bfloat16_on_cpu(dtype, on_cpu)
    }

    /// The loop's options: these settings over the workspace's autokernel.toml over the
    /// loop's defaults.
    pub fn options(&self, ws: &Workspace) -> LoopOptions {
        let mut options = LoopOptions::new(ws.path(".autokernel/scratch"));
        options.device = self.device;
        options.max_experiments = self.max_experiments;
        options.budget = self.budget;
        // a limit given is every request's; by default a candidate's limit follows the
        // incumbent's own evaluation time, capped at the default limit
        match self.bench_timeout_s {
            Some(secs) => {
                options.bench_timeout = Duration::from_secs(secs);
                options.scale_timeout = None;
            }
            None => {
                options.bench_timeout = Duration::from_secs(DEFAULT_BENCH_TIMEOUT_S);
                options.scale_timeout = Some(autokernel_core::TimeoutScale::default());
            }
        }
        options.keep_threshold = self
            .keep_threshold_pct
            .map(|p| p / 100.0)
            .or(ws.settings.keep_threshold)
            .unwrap_or(options.keep_threshold);
        options.orchestrator.plateau = self
            .plateau
            .or(ws.settings.plateau)
            .unwrap_or(options.orchestrator.plateau);
        options.orchestrator.target_budget = self.target_budget;
        if let Some(goal) = ws.settings.roofline_goal_pct {
            options.orchestrator.roofline_goal_pct = goal;
        }
        options
    }

    /// The default services for the workspace (a worker on this interpreter and device,
    /// with the workspace's measured bandwidth), and the folder of the scripts it runs.
    ///
    /// # Errors
    /// No usable Python, or the scripts cannot be written into the workspace.
    pub fn services(&self, ws: &Workspace) -> anyhow::Result<(services::Services, PathBuf)> {
        let started = services::Services::start(
            self.python.as_deref(),
            self.device,
            ws.settings.measured_bandwidth_gb_s,
        )?;
        Ok((started, services::install_scripts(ws)?))
    }
}

/// The run tag of a workspace: the one given, else the one autokernel.toml recorded, else
/// `fresh()` (a new workspace's: date and model, or date and kernel kind).
pub fn run_tag(given: Option<&str>, ws: &Workspace, fresh: impl FnOnce() -> String) -> String {
    given
        .map(str::to_string)
        .or_else(|| ws.settings.run_tag.clone())
        .unwrap_or_else(fresh)
}

/// Refuses bfloat16 when `on_cpu` (`Device::Cpu`, or what `auto` resolved to), the bench
/// worker's rule, so that `run` and `tune` say it before they profile or create anything.
///
/// # Errors
/// The message the worker would give, with the flag to change.
pub fn refuse_bfloat16_on_cpu(dtype: DType, on_cpu: bool) -> anyhow::Result<()> {
    if on_cpu && dtype == DType::Bfloat16 {
        bail!("--dtype bfloat16 cannot run on the CPU (Triton's interpreter uses numpy, which has no bfloat16)\nhint: pass --dtype float16 or float32, or run on a GPU");
    }
    Ok(())
}

/// Whether the interpreter's torch says plainly that it sees no GPU; `false` when the
/// interpreter cannot be found or run (its own errors come later, from the worker).
fn torch_sees_no_gpu(python: Option<&Path>) -> bool {
    let Ok(python) = autokernel_bench::resolve_python(python) else {
        return false;
    };
    std::process::Command::new(python)
        .args(["-c", "import torch; print(torch.cuda.is_available())"])
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "False"
        })
}
