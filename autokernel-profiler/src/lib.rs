//! The default [`Profiler`](autokernel_core::Profiler) of autokernel: runs a model under
//! `torch.profiler` (through the bench worker) and imports Chrome-trace JSON into a ranked,
//! Amdahl-ordered [`ProfileReport`](autokernel_core::ProfileReport).
//!
//! It sits at the start of the loop: the report says where a model's GPU time goes, and
//! [`plan`] turns its top ops into the [`Target`](autokernel_core::Target)s the loop
//! optimises.
//!
//! - [`import_trace`] streams a `.json` or `.json.gz` trace (bounded memory, repairs the
//!   malformed names `export_chrome_trace` writes), links each kernel to its launch and the
//!   launch to its CPU op, groups device time by the op a user recognises (module range,
//!   else outermost aten op, else user annotation, else kernel name) and classifies each
//!   group into a [`KernelKind`](autokernel_core::KernelKind) ([`classify_group`]).
//! - [`ImportedTrace`] carries the report with per-op cumulative fractions, Amdahl ceilings,
//!   memory/compute bounds and the range of each op's call times (a wide one is warned
//!   about: [`ImportedTrace::spread_warning`]), and renders as a table or JSON.
//! - [`ChromeTraceProfiler`] profiles a model through the bench worker with
//!   `python/profile_model.py` and imports the trace it writes.
//!
//! ```no_run
//! use autokernel_profiler::{import_trace, plan};
//! use autokernel_core::DType;
//! let imported = import_trace("profiles/trace.json".as_ref())?;
//! print!("{}", imported.table(20));
//! let targets = plan(&imported.report, 5, DType::Float16);
//! # Ok::<(), autokernel_core::ProfileError>(())
//! ```
#![warn(missing_docs)]

mod classify;
mod import;
mod link;
#[cfg(feature = "model-profiler")]
mod profiler;
mod rank;
mod scan;

use std::io::Read;
use std::path::Path;

use autokernel_core::ProfileError;

pub use classify::{
    bound, classify_group, kind_of_kernel, kind_of_op, no_kind_reason, problem_layout,
    problem_shape,
};
pub use import::TransferStats;
pub use import::MODULE_PREFIX;
#[cfg(feature = "model-profiler")]
pub use profiler::{
    loader_kwargs, ChromeTraceProfiler, ModelRun, CALL_SITES_PY, EXAMPLES, PROFILE_MODEL_PY,
};
pub use rank::{
    call_site_line, no_kind_ops, no_kind_ops_text, not_planned_call_sites,
    not_planned_call_sites_text, plan, plan_for_model, unmatched_call_sites, unpluggable_ops,
    ImportedTrace, RankedOp, SPREAD_LIMIT, SPREAD_MIN_FRACTION,
};

/// Forward passes run before recording, by default: the first calls pay for lazy
/// initialisation (allocator, cuBLAS handles, Triton compiles) a steady model does not.
pub const DEFAULT_WARMUP: u32 = 2;

/// Forward passes recorded, by default (`autokernel profile --iterations`). CPU timings
/// are noisy enough that more are worth it there ([`ImportedTrace::spread_warning`]).
pub const DEFAULT_ITERATIONS: u32 = 3;

/// Imports a Chrome trace file (`.json`, or gzip-compressed, detected by its magic bytes).
///
/// # Errors
/// [`ProfileError::Io`] when the file cannot be read, [`ProfileError::NotATrace`] when it
/// is not a Chrome trace. Malformed events are repaired or skipped and counted in the
/// report's warnings, never an error.
pub fn import_trace(path: &Path) -> Result<ImportedTrace, ProfileError> {
    let trace = import::read_trace(path)?;
    let linked = link::link(&trace);
    Ok(rank::build(trace, linked))
}

/// Imports an uncompressed Chrome trace from a reader; `name` is only used in errors.
///
/// # Errors
/// As [`import_trace`].
pub fn import_trace_from(
    reader: impl Read + Send,
    name: &Path,
) -> Result<ImportedTrace, ProfileError> {
    let trace = import::read_trace_from(reader, name)?;
    let linked = link::link(&trace);
    Ok(rank::build(trace, linked))
}
