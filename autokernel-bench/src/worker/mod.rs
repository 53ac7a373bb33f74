//! The worker process: the parent's side ([`client`]) and the child's, one idea per file:
//! [`bootstrap`] (the process: channels, signals, start-up, the request loop),
//! [`requests`] (one request in, one reply out), [`harness`] (Rust's handle on the imported
//! `harness.py`), [`guards`] (the tamper guards), [`plan`] (which cases a bench runs: pure
//! Rust, no Python) and [`execute`] (running a plan's cases through the harness and the
//! judge); both of the last write their lines through [`log`]. [`launchers`] carries the
//! Triton launcher signatures a candidate's worker built to the next workers' start;
//! [`payload`] carries the checks' outputs and references through shared memory;
//! [`lease`] keeps one worker at a time on the GPU while a measurement is taken;
//! [`timing`] is the timed loop, with the CUDA driver calls it makes in [`cuda`], the
//! device's record of the candidate's timed calls in [`cupti`] and the torch callables it
//! calls in [`torch_ops`]. [`zygote`] forks the workers from one process that imported
//! torch and triton once.
//!
//! Data flows `bootstrap` → `requests` → `execute`, which asks `plan` what to run and calls
//! the harness for each case; `guards` are taken when the harness starts and checked after
//! the load and every stage.
pub(crate) mod bootstrap;
mod checks;
pub(crate) mod client;
mod cuda;
mod cupti;
mod execute;
mod guards;
mod harness;
pub(crate) mod launchers;
mod lease;
pub(crate) mod log;
mod nvml;
mod parent;
mod payload;
mod plan;
mod requests;
mod timing;
mod torch_ops;
mod zygote;
