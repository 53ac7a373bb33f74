//! The core of autokernel: the domain types, the four traits, and the loop built on them.
//!
//! autokernel takes a PyTorch model, finds the GPU kernels that cost the most time, and
//! improves them with an edit → benchmark → keep-or-revert loop over one file, `kernel.py`.
//! This crate holds everything that loop needs except the mechanisms:
//!
//! - what a kernel is: [`KernelKind`] (the kinds, their inputs, shape sets,
//!   tolerances, forbidden reference ops, FLOP and byte formulas), [`DType`], [`Shape`],
//!   and [`GpuSpec`] with [`lookup_gpu`] for the roofline;
//! - the four roles, as object-safe async traits: a [`Profiler`] finds where time goes
//!   ([`ProfileReport`]), an [`Agent`] proposes a candidate ([`Proposal`]), a [`VersionStore`]
//!   commits it, a [`Benchmarker`] judges it ([`BenchResult`], [`Correctness`]) and times it
//!   head to head against the incumbent ([`Comparison`]);
//! - the loop itself, [`OptimizationLoop`]: for the target the [`Orchestrator`] picks
//!   (ranked by Amdahl gain), propose → commit → bench → [`keep::decide`] → keep or revert →
//!   append a row to `results.tsv` ([`ResultsLog`]).
//!
//! The default implementations live in sibling crates (`autokernel-bench`,
//! `autokernel-profiler`, `autokernel-agent`, `autokernel-vcs`); this crate depends on none
//! of them, nor on pyo3, gix or an HTTP client. With the `testing` feature,
//! the `testing` module offers in-memory doubles of the traits for tests of code built on the loop.
//!
//! ```
//! use autokernel_core::{KernelKind, Shape, DType, run::keep::end_to_end_speedup};
//! let kind: KernelKind = "softmax".parse().unwrap();
//! let bytes = kind.min_bytes(&Shape(vec![4096, 4096]), DType::Float16);
//! assert_eq!(bytes, 2.0 * 4096.0 * 4096.0 * 2.0);
//! // a kernel that is 60% of the model's time, made 1.5x faster: 1.25x end to end
//! assert!((end_to_end_speedup(&[(0.6, 1.5)]) - 1.25).abs() < 1e-12);
//! ```
#![warn(missing_docs)]

mod agent;
mod benchmarker;
mod catalogue;
mod gpu;
mod kernel;
mod params;
mod profiler;
pub mod pyliteral;
mod results;
pub mod run;
mod target;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod version_store;

pub use agent::{Agent, AgentError, InvalidClass, Proposal, ProposalContext, TokenUsage};
pub use benchmarker::{
    BenchError, BenchRequest, BenchResult, Benchmarker, CompareRequest, Comparison, Correctness,
    Device, GpuConditions, Metrics, Stage, StageReport, Verdict,
};
pub use catalogue::{
    eval_dims, Catalogue, DTypes, ElementType, Formulas, InputRole, InputSpec, KindSpec,
    OutputSpec, ShapeSets, Tolerances, ALLOWED_OPS,
};
pub use gpu::{
    lookup_gpu, GpuLookup, GpuSpec, REACHABLE_BANDWIDTH_FRACTION, REACHABLE_COMPUTE_FRACTION,
};
pub use kernel::{Bound, DType, KernelKind, ParseError, Shape, ShapeSet, Tolerance};
pub use params::{
    params_label, parse_param, resolve as resolve_params, value_text, ParamError, ParamSpec,
    ParamType, Params,
};
pub use profiler::{
    CallSite, InputsFn, ModelInput, ModelSource, ModelSpec, OpProfile, ProfileError, ProfileReport,
    Profiler, INPUT_DTYPES,
};
pub use results::{
    audit_rows, Decision, ExperimentRecord, KeptVerdict, ResultsError, ResultsLog, SetAside,
    RESULTS_HEADER,
};
pub use run::keep;
pub use run::orchestrator::{MoveOn, Orchestrator, OrchestratorOptions, TargetState};
pub use run::{
    Interrupt, LoopError, LoopOptions, LoopOutcome, NoReporter, OptimizationLoop, Phase, Reporter,
    ResumeSummary, StopReason, TimeoutScale, ABANDONED_REASON, INTERRUPTED_PROPOSING,
    STARTER_AGENT, UNCHANGED_REASON,
};
pub use target::{Headroom, Layout, Target};
pub use version_store::{
    CommitId, ExperimentDraft, Reconciliation, StoreError, UnloggedExperiment, VersionStore,
};
