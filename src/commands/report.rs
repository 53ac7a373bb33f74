//! `autokernel report`: `report.md`, `progress.png` and the summary table for a workspace,
//! from its `results.tsv`, plan and verification. Works during or after a run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use autokernel_core::{ExperimentRecord, ResultsLog, Target};

use crate::cli::GlobalArgs;
use crate::report::{self, Verification};
use crate::workspace::Workspace;

/// Arguments of `autokernel report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The workspace to report on
    #[arg(
        long,
        short = 'w',
        default_value = "autokernel-workspace",
        value_name = "DIR"
    )]
    pub workspace: PathBuf,
}

/// Writes `report.md` and `progress.png` into the workspace.
pub fn write_report(
    ws: &Workspace,
    targets: &[Target],
    rows: &[ExperimentRecord],
    verification: Option<&Verification>,
) -> anyhow::Result<()> {
    let md = report::render_markdown(ws, targets, rows, verification);
    let path = ws.path("report.md");
    std::fs::write(&path, md).with_context(|| format!("cannot write `{}`", path.display()))?;
    report::draw_progress(&ws.path("progress.png"), targets, rows)
}

/// Runs `autokernel report`.
pub async fn run(args: ReportArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace)?;
    let Some(targets) = ws.load_plan()? else {
        bail!(
            "workspace `{}` has no plan.json yet\nhint: run `autokernel run` first",
            ws.root.display()
        );
    };
    let log = ResultsLog::open(ws.path("results.tsv"))?;
    let verification = ws.load_verification()?;
    write_report(&ws, &targets, log.rows(), verification.as_ref())?;
    let summaries = report::summarize(&targets, log.rows());
    crate::print_stdout(&report::summary_table(&summaries));
    // a `tune` workspace has no model: no end-to-end speedup to project
    let projected = match ws.settings.tuned_kernel {
        None => format!("projected_speedup: {:.3}\n", report::projected(&summaries)),
        Some(_) => String::new(),
    };
    crate::print_stdout(&format!(
        "---\nexperiments: {}\n{projected}report: {}",
        log.rows().len(),
        ws.path("report.md").display()
    ));
    Ok(ExitCode::SUCCESS)
}
