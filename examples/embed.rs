//! The whole main job (profile → plan → loop → verify → report) through the facade, with an
//! agent of your own: this one appends a comment to the best kernel, so the judge passes
//! each candidate and the keep rule decides on noise.
//!
//! ```sh
//! cargo run --example embed -- WORKSPACE    # the tiny example model, on the CPU
//! ```
#![allow(clippy::print_stdout)] // an example prints its outcome

use async_trait::async_trait;
use autokernel::{report, Agent, AgentError, Device, Job, ModelSpec, Proposal, ProposalContext};

/// Proposes the best kernel with one more comment line.
struct CommentAgent;

#[async_trait]
impl Agent for CommentAgent {
    fn name(&self) -> String {
        "comment".into()
    }

    async fn propose(&mut self, cx: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        Ok(Proposal::Candidate {
            description: format!("comment {}", cx.experiment),
            source: format!("{}\n# experiment {}\n", cx.best_source, cx.experiment),
            usage: None,
        })
    }
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    // the default benchmarker's worker is this program, started with `worker`
    if std::env::args().nth(1).as_deref() == Some("worker") {
        return Ok(autokernel::serve_worker());
    }
    let workspace = std::env::args().nth(1).unwrap_or("embed-workspace".into());
    let model = ModelSpec::example("tiny", Device::Cpu);
    let runtime = tokio::runtime::Runtime::new()?;
    let outcome = runtime.block_on(
        Job::new(workspace, model)
            .agent(Box::new(CommentAgent))
            .top(1)
            .max_experiments(2)
            .run(),
    )?;
    let summaries = report::summarize(&outcome.targets, &outcome.experiments.rows);
    println!("{}", report::summary_table(&summaries));
    let verified = outcome.verification.done().map(|v| v.verdict());
    println!("verified: {}", verified.unwrap_or("not run".into()));
    println!("report: {}", outcome.report.display());
    Ok(std::process::ExitCode::SUCCESS)
}
