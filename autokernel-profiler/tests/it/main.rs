//! Integration tests of autokernel-profiler: the shared trace cases, hand-built traces for
//! each attribution rule, and (with a real worker) a CPU profile of the bundled `tiny` model.

mod cases;
mod rules;
mod util;
/// A real worker profiling a model: the default feature `model-profiler` only.
#[cfg(feature = "model-profiler")]
mod worker;
