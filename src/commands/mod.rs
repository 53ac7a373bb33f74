//! One module per verb; each exposes its clap `…Args` and an async `run` returning the
//! process exit code (`main` dispatches).

pub mod bench;
pub mod experiments;
pub mod log;
pub mod new_kernel;
pub mod profile;
pub mod report;
pub mod run;
pub mod tune;
pub mod verify;
