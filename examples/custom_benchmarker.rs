//! Plug your own `Benchmarker` into the loop.
//!
//! This one wraps the default judge with a house rule: a candidate must also stay within a
//! source-size budget (here 200 lines), so the history never keeps an unreadable kernel
//! however fast it is. Everything else — stages, timing, crash handling — is the default
//! benchmarker's. The agent is the built-in tuner; the store is the default git store.
//!
//! ```sh
//! cargo run --example custom_benchmarker -- [WORKSPACE]
//! ```
//!
//! The program hosts the bench worker itself: the default worker is this same executable
//! started with the argument `worker`, which `main` hands to `serve_worker` first thing.
#![allow(clippy::print_stdout, clippy::print_stderr)] // an example prints its outcome

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions};
use autokernel_core::{
    BenchError, BenchRequest, BenchResult, Benchmarker, CompareRequest, Comparison, Correctness,
    DType, Device, Interrupt, KernelKind, LoopOptions, OptimizationLoop, ResultsLog, Shape, Stage,
    Target,
};

/// Longest kernel.py the house rule accepts, in lines.
const MAX_LINES: usize = 200;

/// The default benchmarker plus a size rule checked before anything runs.
struct SizeLimited<B> {
    inner: B,
}

#[async_trait]
impl<B: Benchmarker> Benchmarker for SizeLimited<B> {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        let source = std::fs::read_to_string(&request.kernel_path).map_err(|source| {
            BenchError::KernelFile {
                path: request.kernel_path.clone(),
                source,
            }
        })?;
        let lines = source.lines().count();
        let mut result = self.inner.bench(request).await?;
        if lines > MAX_LINES && result.correctness.is_pass() {
            result.correctness = Correctness::Fail {
                stage: Stage::Load,
                reason: format!("{lines} lines is over the house limit of {MAX_LINES}"),
            };
        }
        Ok(result)
    }

    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        self.inner.compare(request).await
    }
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return autokernel_bench::serve_worker();
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(tune()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn tune() -> anyhow::Result<()> {
    let workspace = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "custom-bench-workspace".into()),
    );
    std::fs::create_dir_all(&workspace)?;
    // the worker: this executable again, with `worker` (see main)
    let options = WorkerOptions::new(Device::Auto);
    let bench = SizeLimited {
        inner: PyWorkerBenchmarker::with_worker(Arc::new(Worker::new(options))),
    };
    let target = Target::new("rmsnorm", KernelKind::Rmsnorm)
        .with_shapes(vec![Shape(vec![32, 512])])
        .with_dtype(DType::Float32)
        .with_op("example");
    let loop_options =
        LoopOptions::new(workspace.join(".autokernel/scratch")).with_max_experiments(3);
    let mut the_loop = OptimizationLoop::new(
        autokernel_agent::TunerAgent::new(),
        bench,
        autokernel_vcs::GixStore::open(
            &workspace,
            autokernel_vcs::StoreOptions::new("custom-bench"),
        )?,
        ResultsLog::open(workspace.join("results.tsv"))?,
        loop_options,
    );
    let starter = autokernel_bench::starter_source(KernelKind::Rmsnorm).to_string();
    let outcome = the_loop
        .run(vec![(target, starter)], &Interrupt::new())
        .await?;
    println!(
        "{} experiments, stop: {:?}",
        outcome.experiments, outcome.stop
    );
    Ok(())
}
