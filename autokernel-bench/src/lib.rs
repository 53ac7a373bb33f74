//! The default Benchmarker (work in progress).

/// Entry point of the bench worker process (placeholder).
pub fn serve_worker() -> std::process::ExitCode {
    std::process::ExitCode::from(2)
}
