//! Test-only host of the bench worker: `serve_worker()` unconditionally (worker-api.md §1).
fn main() -> std::process::ExitCode {
    autokernel_bench::serve_worker()
}
