//! Plug your own `Agent` into the default loop.
//!
//! This agent replays hand-written candidates from a folder (`*.py`, in name order) for a
//! softmax target: a person's ideas get the same judge, git history and `results.tsv` as
//! the built-in agents'. The benchmarker and the version store are the defaults.
//!
//! ```sh
//! cargo run --example custom_agent -- CANDIDATES_DIR [WORKSPACE]
//! ```
//!
//! The program hosts the bench worker itself: the default worker is this same executable
//! started with the argument `worker`, which `main` hands to `serve_worker` first thing.
#![allow(clippy::print_stdout, clippy::print_stderr)] // an example prints its outcome

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions};
use autokernel_core::{
    Agent, AgentError, DType, Device, Interrupt, KernelKind, LoopOptions, OptimizationLoop,
    Proposal, ProposalContext, ResultsLog, Shape, Target,
};
use autokernel_vcs::{GixStore, StoreOptions};

/// Proposes the files of a folder, one per experiment, then says it is done.
struct FolderAgent {
    queue: VecDeque<PathBuf>,
}

#[async_trait]
impl Agent for FolderAgent {
    fn name(&self) -> String {
        "folder".into()
    }

    async fn propose(&mut self, _context: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        let Some(path) = self.queue.pop_front() else {
            return Ok(Proposal::Exhausted);
        };
        Ok(match std::fs::read_to_string(&path) {
            Ok(source) => Proposal::Candidate {
                description: format!("hand-written: {}", path.display()),
                source,
                usage: None,
            },
            // an unreadable file is a failed proposal (an `invalid` row), not a crash
            Err(e) => Proposal::Invalid {
                class: autokernel_core::InvalidClass::Other("unreadable_file".into()),
                detail: format!("cannot read {}: {e}", path.display()),
                usage: None,
            },
        })
    }
}

fn main() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return autokernel_bench::serve_worker();
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(replay()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn replay() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let folder = PathBuf::from(
        args.next()
            .ok_or_else(|| anyhow::anyhow!("usage: custom_agent CANDIDATES_DIR [WORKSPACE]"))?,
    );
    let workspace = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "custom-agent-workspace".into()),
    );
    let mut queue: Vec<PathBuf> = std::fs::read_dir(&folder)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    queue.sort();

    let target = Target::new("softmax", KernelKind::Softmax)
        .with_shapes(vec![Shape(vec![64, 1000])])
        .with_dtype(DType::Float32)
        .with_op("hand-picked");
    std::fs::create_dir_all(&workspace)?;
    // the worker: this executable again, with `worker` (see main)
    let options = WorkerOptions::new(Device::Auto);
    let bench = PyWorkerBenchmarker::with_worker(Arc::new(Worker::new(options)));
    let store = GixStore::open(&workspace, StoreOptions::new("custom-agent"))?;
    let log = ResultsLog::open(workspace.join("results.tsv"))?;
    let mut the_loop = OptimizationLoop::new(
        FolderAgent {
            queue: queue.into(),
        },
        bench,
        store,
        log,
        LoopOptions::new(workspace.join(".autokernel/scratch")),
    );
    let starter = autokernel_bench::starter_source(KernelKind::Softmax).to_string();
    let outcome = the_loop
        .run(vec![(target, starter)], &Interrupt::new())
        .await?;
    println!(
        "{} experiments, stop: {:?}; see {}/results.tsv",
        outcome.experiments,
        outcome.stop,
        workspace.display()
    );
    Ok(())
}
