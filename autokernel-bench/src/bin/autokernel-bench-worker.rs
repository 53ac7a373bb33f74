//! Test-only host of the bench worker: `serve_worker()` unconditionally (`WorkerProgram` with no arguments; docs/bench.md).
fn main() -> std::process::ExitCode {
    autokernel_bench::serve_worker()
}
