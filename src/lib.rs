//! autokernel as a library: profile a PyTorch model, find the GPU kernels that cost it the
//! most time, and improve each with an edit → benchmark → keep-or-revert loop over one
//! `kernel.py`, every experiment a git commit and a `results.tsv` row.
//!
//! This crate is the facade. It re-exports the parts (the loop and its four traits from
//! [`autokernel_core`]; the defaults: the Triton bench [`autokernel_bench`], the
//! torch.profiler importer [`autokernel_profiler`], the agents [`autokernel_agent`], the git
//! store [`autokernel_vcs`]) and owns what the `autokernel` command does with them: the
//! [`Workspace`] folder, the main [`Job`], [`verify`] and [`report`]. The command only turns
//! its flags into these types ([`settings`]) and prints.
//!
//! The whole main job with an agent of your own (`examples/embed.rs`; run it with
//! `cargo run --example embed -- WORKSPACE`):
//!
#![doc = concat!("```no_run\n", include_str!("../examples/embed.rs"), "\n```")]
//!
//! The default benchmarker runs kernels in a worker process that is the embedding program
//! itself, started with the argument `worker`: `main` hands that case to [`serve_worker`]
//! before anything else, as the example does.

pub mod experiments;
pub mod export;
mod fonts;
pub mod job;
pub mod numfmt;
pub mod report;
pub mod services;
pub mod settings;
pub mod verification;
pub mod verify;
pub mod workspace;

pub use autokernel_agent;
pub use autokernel_bench;
pub use autokernel_core;
pub use autokernel_profiler;
pub use autokernel_vcs;

pub use autokernel_agent::{HybridAgent, OpenAiAgent, OpenAiConfig, TunerAgent};
pub use autokernel_bench::{
    resolve_python, serve_worker, PyWorkerBenchmarker, Worker, WorkerOptions,
};
pub use autokernel_core::{
    Agent, AgentError, Benchmarker, DType, Decision, Device, ExperimentRecord, InputsFn, Interrupt,
    InvalidClass, KernelKind, Layout, LoopOptions, ModelInput, ModelSource, ModelSpec, NoReporter,
    OptimizationLoop, Profiler, Proposal, ProposalContext, Reporter, ResultsLog, Shape, Target,
    Verdict, VersionStore,
};
pub use autokernel_profiler::{ChromeTraceProfiler, ImportedTrace};
pub use autokernel_vcs::{GixStore, StoreOptions};

pub use experiments::{Baselines, Experiments};
pub use export::{ExportOptions, Exported};
pub use job::{Job, JobOutcome, JobReporter, Step, VerificationRun};
pub use services::Services;
pub use settings::{AgentChoice, AgentSettings, LoopSettings};
pub use verification::{Excluded, SavedVerification, Verification};
pub use verify::{VerifyError, VerifyOptions};
pub use workspace::{ModelIdentity, Settings, Workspace};
