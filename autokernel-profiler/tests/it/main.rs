//! Integration tests of autokernel-profiler: the shared trace cases, hand-built traces for
//! each attribution rule, and (with a real worker) a CPU profile of the bundled `tiny` model.

mod cases;
mod rules;
mod util;
mod worker;
