//! The main job, `autokernel run` as a library call: profile the model, plan the targets,
//! run the loop over each, verify the kept kernels inside the model, write the report.
//! Running the same job again on the same workspace resumes where it stopped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use autokernel_core::{
    Agent, Device, Interrupt, KernelKind, ModelSpec, NoReporter, Reporter, Target,
};
use autokernel_profiler::ImportedTrace;

use crate::experiments::{run_experiments, Baselines, Experiments, SharedReporter};
use crate::settings::{self, AgentSettings, LoopSettings};
use crate::verification::Verification;
use crate::verify::{
    verify_share, verify_workspace, DeployMode, VerifyProgress, VerifySettings, REPORT_RESERVE_S,
    VERIFY_MIN_S, VERIFY_TIMEOUT_S,
};
use crate::workspace::{CreatedFolder, ModelIdentity, Workspace};
use crate::{report, services};

/// A step of the job around the loop, for a [`JobReporter`] (the loop's own progress
/// arrives through [`Reporter`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Step<'a> {
    /// Profiling the model (no saved plan to resume).
    Profiling {
        /// The model, as messages name it.
        model: &'a str,
    },
    /// The profile was imported; `not_planned` are the classified ops with no standard call
    /// site to plug a kernel into (op, kind, share of the model's time).
    Profiled {
        /// The ranked trace.
        trace: &'a ImportedTrace,
        /// Ops left out of the plan.
        not_planned: &'a [(&'a str, KernelKind, f64)],
        /// Call sites no plug matches at the plan's dtype, each with why
        /// ([`autokernel_profiler::not_planned_call_sites`]).
        unmatched_sites: &'a [(&'a autokernel_core::CallSite, String)],
    },
    /// The targets, planned now or resumed from `plan.json`.
    Planned {
        /// The targets, in plan order.
        targets: &'a [Target],
    },
    /// How `--budget` is split, before the loop starts (only with a budget).
    BudgetSplit {
        /// The whole job's budget.
        budget: Duration,
        /// What the device check and the profile took.
        profile: Duration,
        /// The loop's share: what is left after the others.
        loop_budget: Duration,
        /// The verification's share (`None`: not verifying).
        verify: Option<Duration>,
        /// Kept for the report.
        report: Duration,
    },
    /// The loop starts.
    Experiments,
    /// The loop is over (finished, out of budget, or interrupted).
    ExperimentsOver,
    /// The verification starts.
    Verifying,
    /// A step of the verification (a mode, a variant, a round), as its script reports it.
    VerifyProgress(&'a VerifyProgress),
    /// The verification is over (or was cut short).
    VerifyingOver,
}

/// Hears the loop's progress and the job's steps. Every method has a default that does
/// nothing: implement those you show.
pub trait JobReporter: Reporter {
    /// A step of the job starts or ends.
    fn on_step(&self, _step: Step<'_>) {}
}

impl JobReporter for NoReporter {}

/// Who proposes candidates: one of the built-in agents, or the caller's own.
enum AgentSource {
    Settings(AgentSettings),
    Custom(Box<dyn Agent>),
}

/// How the verification went, when the job got that far.
// one value per verification: boxing the record would buy nothing
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum VerificationRun {
    /// It ran, whole or cut short ([`Verification::cut_short`]: its budget ran out, or an
    /// interrupt, after it had decided something); `verify.json` holds it.
    Done(Verification),
    /// Not run: turned off, or the loop was interrupted.
    NotRun,
    /// Cut short by an interrupt before it decided anything; the last `verify.json` stays
    /// (stale once a kernel changed).
    Interrupted,
    /// It could not run (the worker, the model); the error, also logged as a warning.
    CouldNotRun(String),
}

impl VerificationRun {
    /// The verification, when one ran.
    pub fn done(&self) -> Option<&Verification> {
        match self {
            VerificationRun::Done(v) => Some(v),
            _ => None,
        }
    }
}

/// What a finished job hands back.
#[derive(Debug)]
pub struct JobOutcome {
    /// The workspace, its settings as saved.
    pub workspace: Workspace,
    /// Where the kernels ran: `cuda` or `cpu`.
    pub device: String,
    /// The plan.
    pub targets: Vec<Target>,
    /// The loop's outcome and every row of `results.tsv`.
    pub experiments: Experiments,
    /// The verification of this job.
    pub verification: VerificationRun,
    /// `report.md`.
    pub report: PathBuf,
}

impl JobOutcome {
    /// Whether the timings mean anything: on a GPU, not Triton's interpreter on the CPU.
    pub fn timing_representative(&self) -> bool {
        self.device.starts_with("cuda")
    }
}

/// The main job over one workspace and one model, configured with chained setters.
///
/// ```no_run
/// # async fn f() -> anyhow::Result<()> {
/// use autokernel::{Job, ModelSpec, Device};
/// let outcome = Job::new("autokernel-workspace", ModelSpec::example("tiny", Device::Cpu))
///     .max_experiments(4)
///     .run()
///     .await?;
/// println!("{}", autokernel::report::summary_table(&autokernel::report::summarize(
///     &outcome.targets, &outcome.experiments.rows)));
/// # Ok(()) }
/// ```
pub struct Job {
    workspace: PathBuf,
    model: ModelSpec,
    dtype_given: bool,
    agent: AgentSource,
    loop_settings: LoopSettings,
    top: Option<usize>,
    run_tag: Option<String>,
    profile_iterations: u32,
    verify: bool,
    verify_timeout: Duration,
    verify_budget: Option<Duration>,
    all_modes: bool,
    deploy: Option<DeployMode>,
    reporter: Arc<dyn JobReporter>,
    interrupt: Arc<Interrupt>,
}

impl Job {
    /// The job for `model` in the workspace folder `workspace` (created when missing): the
    /// tuner as agent, the loop's default budget (none: until every target plateaus), the
    /// model's device for the kernels, its dtype taken as the default one
    /// ([`Job::dtype_given`]), verification on, no progress shown.
    pub fn new(workspace: impl Into<PathBuf>, model: ModelSpec) -> Self {
        Job {
            workspace: workspace.into(),
            loop_settings: LoopSettings {
                device: model.device,
                ..LoopSettings::default()
            },
            model,
            dtype_given: false,
            agent: AgentSource::Settings(AgentSettings::tuner()),
            top: None,
            run_tag: None,
            profile_iterations: autokernel_profiler::DEFAULT_ITERATIONS,
            verify: true,
            verify_timeout: Duration::from_secs(VERIFY_TIMEOUT_S),
            verify_budget: None,
            all_modes: false,
            deploy: None,
            reporter: Arc::new(NoReporter),
            interrupt: Arc::new(Interrupt::new()),
        }
    }

    /// Your own agent instead of a built-in one.
    pub fn agent(mut self, agent: Box<dyn Agent>) -> Self {
        self.agent = AgentSource::Custom(agent);
        self
    }

    /// A built-in agent, with its LLM settings.
    pub fn agent_settings(mut self, settings: AgentSettings) -> Self {
        self.agent = AgentSource::Settings(settings);
        self
    }

    /// The loop's budget and bench settings; their device is the model's.
    pub fn loop_settings(mut self, settings: LoopSettings) -> Self {
        self.loop_settings = LoopSettings {
            device: self.model.device,
            ..settings
        };
        self
    }

    /// Stop after this many experiments (baselines not counted).
    pub fn max_experiments(mut self, n: u64) -> Self {
        self.loop_settings.max_experiments = Some(n);
        self
    }

    /// The whole job's wall time: profile, loop, verification and report end within it
    /// (the loop gets what the profile and the verification's share leave: [`Job::run`]).
    pub fn budget(mut self, budget: Duration) -> Self {
        self.loop_settings.budget = Some(budget);
        self
    }

    /// How many targets of the plan to optimise (over autokernel.toml's `top`, default
    /// [`settings::DEFAULT_TOP`]).
    pub fn top(mut self, n: usize) -> Self {
        self.top = Some(n);
        self
    }

    /// The branch suffix: experiments go to `autokernel/<tag>` [default: the workspace's,
    /// else date and model].
    pub fn run_tag(mut self, tag: impl Into<String>) -> Self {
        self.run_tag = Some(tag.into());
        self
    }

    /// Whether the user chose the model's dtype (`false`: the default, float16 on a GPU and
    /// float32 on the CPU, so that runs of one model on either device share a workspace).
    pub fn dtype_given(mut self, given: bool) -> Self {
        self.dtype_given = given;
        self
    }

    /// Forward passes the profiler records.
    pub fn profile_iterations(mut self, n: u32) -> Self {
        self.profile_iterations = n;
        self
    }

    /// Verify the kept kernels inside the model after the loop (default), or not (the last
    /// `verify.json` stays, stale once a kernel changed).
    pub fn verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// How long the verification may take, instead of its share of the budget
    /// ([`crate::verify::verify_share`]) or, without a budget,
    /// [`crate::verify::VERIFY_TIMEOUT_S`]; past it, it is cut short and keeps what it
    /// decided.
    pub fn verify_budget(mut self, budget: Option<Duration>) -> Self {
        self.verify_budget = budget;
        self
    }

    /// Time the model in every deploy mode the device has when verifying, not only the
    /// deploy mode and eager.
    pub fn all_modes(mut self, all: bool) -> Self {
        self.all_modes = all;
        self
    }

    /// The mode the model will be deployed in, whose timings decide which kernels the
    /// verification keeps ([`DeployMode`]), recorded in the workspace's settings (default:
    /// the workspace's, else `cudagraph` on a GPU, `eager` on the CPU).
    pub fn deploy(mut self, deploy: Option<DeployMode>) -> Self {
        self.deploy = deploy;
        self
    }

    /// Where the loop's progress and the job's steps go.
    pub fn reporter(mut self, reporter: Arc<dyn JobReporter>) -> Self {
        self.reporter = reporter;
        self
    }

    /// The flag that stops the job: the loop after the experiment in flight (a second
    /// request abandons it), or the verification at once, keeping what it decided
    /// ([`Verification::cut_short`]).
    pub fn interrupt(mut self, interrupt: Arc<Interrupt>) -> Self {
        self.interrupt = interrupt;
        self
    }

    /// Runs the job: profile → plan → loop → verify → report.
    ///
    /// With a budget ([`Job::budget`]) the whole job ends within it: the verification's
    /// share ([`Job::verify_budget`], else [`verify_share`]) and [`REPORT_RESERVE_S`] for
    /// the report are kept from what the profile leaves, and the loop gets the rest. The
    /// loop checks its budget between experiments, so its last experiment may end past its
    /// share; the verification then gets what is left, at least [`VERIFY_MIN_S`].
    ///
    /// # Errors
    /// Settings that would run nothing; a workspace of another model, or planned in another
    /// dtype; no usable Python; a model that does not load; a profile with nothing to
    /// optimise; the store or the log failing. A folder this job created is removed again
    /// when it fails before it has a plan.
    pub async fn run(self) -> anyhow::Result<JobOutcome> {
        let Job {
            workspace,
            model: spec,
            dtype_given,
            agent,
            loop_settings,
            top,
            run_tag,
            profile_iterations,
            verify,
            verify_timeout,
            verify_budget,
            all_modes,
            deploy,
            reporter,
            interrupt,
        } = self;
        // the budget is the whole job's: its clock starts now, before the profile
        let started = Instant::now();
        let mut loop_settings = loop_settings;
        let total_budget = loop_settings.budget;
        if verify_budget.is_some_and(|b| b.is_zero()) {
            bail!("--verify-budget 0 leaves no time to verify; pass a duration such as 2m, or --no-verify");
        }
        if top == Some(0) {
            bail!("--top 0 leaves nothing to optimise; pass --top 1 or more");
        }
        loop_settings.check()?;
        loop_settings.refuse_bfloat16_where_it_cannot_run(spec.dtype)?;
        let mut created = CreatedFolder::new(&workspace);
        let mut ws = Workspace::open(&workspace)?;
        let identity = ModelIdentity::of(&spec, dtype_given);
        check_same_model(&ws, &identity, dtype_given.then_some(&spec))?;
        // the agent is configured (and an LLM's settings checked) before any work is done
        let agent = match agent {
            AgentSource::Settings(s) => s.agent(&ws)?,
            AgentSource::Custom(a) => a,
        };
        let run_tag = settings::run_tag(run_tag.as_deref(), &ws, || {
            format!(
                "{}-{}",
                chrono::Utc::now().format("%Y%m%d-%H%M"),
                identity.slug()
            )
        });
        // opening the store takes the workspace's owner lock: nothing is written before it
        let store = services::store(&ws, &run_tag)?;
        services::install_program_md(&ws)?;
        let (mut services, scripts) = loop_settings.services(&ws)?;
        // the device first: a dtype it cannot run is refused before a profile is taken
        let device = services.device_name(&scripts, spec.device).await?;
        tracing::info!(device = %device, gpu = ?services.gpu_name, "bench device");
        // a resumed run keeps the deploy mode the workspace was run for
        let deploy = deploy.or_else(|| {
            ws.settings
                .deploy
                .as_deref()
                .and_then(DeployMode::from_name)
        });
        // refused now, not after the experiments: the verification could not run in it
        if let Some(mode) = deploy.filter(|m| verify && m.gpu_only() && !device.starts_with("cuda"))
        {
            bail!(
                "--deploy {} needs a GPU (CUDA graphs) and this run is on the CPU; use --deploy eager or compile",
                mode.name()
            );
        }
        let saved_plan = ws.load_plan()?;
        let dtype = saved_plan
            .as_ref()
            .and_then(|p| p.first())
            .map_or(spec.dtype, |t| t.dtype);
        settings::refuse_bfloat16_on_cpu(dtype, !device.starts_with("cuda"))?;

        let targets = match saved_plan {
            Some(t) => {
                tracing::info!(targets = t.len(), "resuming with the saved plan");
                t
            }
            None => {
                let label = identity.label();
                reporter.on_step(Step::Profiling { model: &label });
                let trace = ws.path("profiles/trace.json");
                std::fs::create_dir_all(ws.path("profiles"))?;
                let (imported, dtype) = services
                    .profile(&spec, !dtype_given, profile_iterations, &scripts, &trace)
                    .await
                    .context("profiling the model failed")?;
                let not_planned = autokernel_profiler::unpluggable_ops(&imported.report);
                let unmatched_sites =
                    autokernel_profiler::not_planned_call_sites(&imported.report, dtype);
                reporter.on_step(Step::Profiled {
                    trace: &imported,
                    not_planned: &not_planned,
                    unmatched_sites: &unmatched_sites,
                });
                let top = top.or(ws.settings.top).unwrap_or(settings::DEFAULT_TOP);
                let t = autokernel_profiler::plan_for_model(&imported.report, top, dtype);
                if t.is_empty() {
                    bail!("the profile has no kernel autokernel can optimise (no op classified as one of its kinds)");
                }
                ws.save_plan(&t)?;
                created.keep();
                t
            }
        };
        // the workspace belongs to this model once it has a plan for it (not before: a run
        // that failed to load the model must not lock the folder to it); a resumed run
        // keeps the model as first recorded, whatever this one left to defaults
        if ws.settings.model.is_none() {
            ws.settings.model = Some(identity.clone());
        }
        ws.settings.run_tag = Some(run_tag);
        ws.settings.device = Some(device_name(spec.device).to_string());
        if let Some(mode) = deploy {
            ws.settings.deploy = Some(mode.name().to_string());
        }
        ws.save_settings()?;
        reporter.on_step(Step::Planned { targets: &targets });

        // the loop's share of the budget: what the profile, the verification's share and
        // the report's leave
        let verify_share = verify_budget
            .or(total_budget.map(verify_share))
            .unwrap_or(Duration::from_secs(VERIFY_TIMEOUT_S));
        let end = total_budget.map(|b| started + b);
        if let Some(end) = end {
            let kept = if verify {
                verify_share + Duration::from_secs(REPORT_RESERVE_S)
            } else {
                Duration::from_secs(REPORT_RESERVE_S)
            };
            let loop_budget = end.saturating_duration_since(Instant::now() + kept);
            tracing::info!(
                profile_s = started.elapsed().as_secs_f64(),
                loop_s = loop_budget.as_secs_f64(),
                verify_s = verify.then_some(verify_share.as_secs_f64()),
                report_s = REPORT_RESERVE_S,
                "the budget's split"
            );
            reporter.on_step(Step::BudgetSplit {
                budget: total_budget.unwrap_or_default(),
                profile: started.elapsed(),
                loop_budget,
                verify: verify.then_some(verify_share),
                report: Duration::from_secs(REPORT_RESERVE_S),
            });
            if loop_budget.is_zero() {
                reporter.on_warning(&format!(
                    "the budget leaves the loop no time: {:.0} s went to the device check and the profile, {:.0} s are kept for the verification and the report; pass a larger --budget (or a smaller --verify-budget)",
                    started.elapsed().as_secs_f64(),
                    kept.as_secs_f64()
                ));
            }
            loop_settings.budget = Some(loop_budget);
        }

        reporter.on_step(Step::Experiments);
        let experiments = run_experiments(
            &ws,
            &loop_settings,
            &services,
            agent,
            store,
            Baselines::starters(&targets),
            Box::new(SharedReporter(reporter.clone())),
            &interrupt,
        )
        .await;
        reporter.on_step(Step::ExperimentsOver);
        let experiments = experiments?;

        let verification = if !verify || experiments.interrupted() {
            VerificationRun::NotRun
        } else {
            reporter.on_step(Step::Verifying);
            // within the budget's end (less the report's reserve), and within its share
            let now = Instant::now();
            let mut deadline = now + verify_share;
            if let Some(end) = end {
                let report_starts = end
                    .checked_sub(Duration::from_secs(REPORT_RESERVE_S))
                    .unwrap_or(end);
                deadline = deadline
                    .min(report_starts)
                    .max(now + Duration::from_secs(VERIFY_MIN_S).min(verify_share));
            }
            let settings = VerifySettings {
                deadline,
                timeout: verify_timeout,
                deploy,
                all_modes,
            };
            let progress = |p: &VerifyProgress| reporter.on_step(Step::VerifyProgress(p));
            // an interrupt now (the loop is over) cuts the verification short, keeping what
            // it decided, and goes on to the report
            let v = verify_workspace(
                &mut services,
                &ws,
                &spec,
                &targets,
                &experiments.rows,
                &settings,
                &progress,
                &interrupt,
            )
            .await;
            reporter.on_step(Step::VerifyingOver);
            match v {
                Ok(v) => {
                    ws.save_verification(&v)?;
                    VerificationRun::Done(v)
                }
                Err(_) if interrupt.stop_requested() => VerificationRun::Interrupted,
                Err(e) => {
                    tracing::warn!("verification could not run: {e:#}");
                    VerificationRun::CouldNotRun(format!("{e:#}"))
                }
            }
        };

        let saved = ws.saved_verification();
        let stale = ws.stale_kernels(&targets, saved.get());
        report::write(&ws, &targets, &experiments.rows, &saved, &stale)?;
        Ok(JobOutcome {
            report: ws.path("report.md"),
            workspace: ws,
            device,
            targets,
            experiments,
            verification,
        })
    }
}

/// The workspace's device setting as autokernel.toml writes it.
fn device_name(device: Device) -> &'static str {
    match device {
        Device::Auto => "auto",
        Device::Cuda => "cuda",
        Device::Cpu => "cpu",
    }
}

/// Refuses a workspace of `autokernel tune`, of another model, or (when `given` holds the
/// dtype the caller chose) planned in another dtype.
fn check_same_model(
    ws: &Workspace,
    identity: &ModelIdentity,
    given: Option<&ModelSpec>,
) -> anyhow::Result<()> {
    if let Some(kernel) = &ws.settings.tuned_kernel {
        bail!(
            "workspace `{}` is `autokernel tune`'s, for `{}`, not a model's\nhint: pass another --workspace",
            ws.root.display(),
            kernel.display()
        );
    }
    if let Some(previous) = &ws.settings.model {
        if !previous.same_model(identity) {
            bail!(
                "workspace `{}` belongs to another model ({}), not {}\nhint: pass a new --workspace, or delete that folder to start over",
                ws.root.display(),
                previous.describe(),
                identity.describe()
            );
        }
    }
    // a dtype given now must be the one the saved plan was made in (a first run that left
    // the dtype to its default recorded none, so the identity alone cannot tell)
    if let (Some(spec), Some(planned)) = (given, ws.load_plan()?) {
        if let Some(was) = planned
            .first()
            .map(|t| t.dtype)
            .filter(|d| *d != spec.dtype)
        {
            bail!(
                "workspace `{}` was planned and measured in {was}, not {}\nhint: resume without --dtype (or with --dtype {was}), or pass a new --workspace to start over in {}",
                ws.root.display(),
                spec.dtype,
                spec.dtype
            );
        }
    }
    Ok(())
}
