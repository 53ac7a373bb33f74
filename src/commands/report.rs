//! `autokernel report`: `report.md`, `progress.png` and the summary table for a workspace,
//! from its `results.tsv`, plan and verification. Works during or after a run.

use std::process::ExitCode;

use anyhow::bail;

use crate::global_args::GlobalArgs;
use autokernel::workspace::Workspace;
use autokernel::{report, SavedVerification};

/// Arguments of `autokernel report`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "The workspace is only read, except for report.md and progress.png: on a
workspace that cannot be written (another user's, a read-only mount) the summary is
printed all the same, with a warning, and the exit code is 0. The exit code is 0 as well
when the saved verification failed: the line `verification:` of the summary says so (PASS,
FAIL, stale, none yet, or unreadable when verify.json is corrupt; an `autokernel tune`
workspace has no model and no such line).

Examples:
  autokernel report -w autokernel-workspace"
)]
pub struct ReportArgs {
    #[command(flatten)]
    pub workspace: super::WorkspaceArg,
    /// Print the summary as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// Runs `autokernel report`.
pub async fn run(args: ReportArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace.dir)?;
    let Some(targets) = ws.load_plan()? else {
        bail!(
            "workspace `{}` has no plan.json yet\nhint: run `autokernel run` first",
            ws.root.display()
        );
    };
    // read-only: a workspace one may only read (another user's, a read-only mount) is
    // reported on, and a log a run is appending to is never repaired from here
    let rows = ws.rows()?;
    // a verify.json that cannot be read loses nothing else: the summary is still printed.
    // A `tune` workspace has no model to verify: a verify.json there is not read.
    let saved = match ws.settings.tuned_kernel {
        None => ws.saved_verification(),
        Some(_) => SavedVerification::None,
    };
    if let SavedVerification::Unreadable(e) = &saved {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("warning: {e}");
        }
    }
    let stale = ws.stale_kernels(&targets, saved.get());
    if !stale.is_empty() {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "warning: the verification is stale: the kernel.py of {} changed after it\nhint: run `autokernel verify --workspace {}` again",
                stale.join(", "),
                ws.root.display()
            );
        }
    }
    let written = report::write(&ws, &targets, &rows, &saved, &stale);
    let summaries = report::summarize(&targets, &rows);
    if args.json {
        if let Err(e) = &written {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("warning: {e:#}; the summary is printed only");
            }
        }
        let baselines = rows
            .iter()
            .filter(|r| r.decision == autokernel_core::Decision::Baseline)
            .count();
        let model = ws.settings.tuned_kernel.is_none();
        let verification = match &saved {
            _ if !model => serde_json::Value::Null,
            SavedVerification::None => serde_json::json!({"state": "none"}),
            SavedVerification::Unreadable(e) => {
                serde_json::json!({"state": "unreadable", "error": e})
            }
            SavedVerification::Saved(v) => serde_json::json!({
                "state": if !stale.is_empty() { "stale" } else if v.passed { "passed" } else { "failed" },
                "stale_targets": stale,
                "result": v,
            }),
        };
        let summary = serde_json::json!({
            "workspace": ws.root,
            "experiments": rows.len() - baselines,
            "baselines": baselines,
            "targets": summaries,
            "projected_speedup": model.then(|| report::projected(&summaries)),
            "verification": verification,
            "report": written.is_ok().then(|| ws.path("report.md")),
        });
        crate::output::print_stdout(&serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::print_stdout(&report::summary_table(&summaries));
    // a `tune` workspace has no model: no end-to-end speedup to project, nothing to verify
    let model_lines = match ws.settings.tuned_kernel {
        None => format!(
            "projected_speedup: {:.3}\n{}\n",
            report::projected(&summaries),
            autokernel::verification::verification_summary(&ws.root, &saved, &stale)
        ),
        Some(_) => String::new(),
    };
    let report_line = match written {
        Ok(()) => ws.path("report.md").display().to_string(),
        Err(e) => {
            // the summary is still worth having from a workspace one cannot write to
            #[allow(clippy::print_stderr)]
            {
                eprintln!("warning: {e:#}; the summary below is printed only");
            }
            "not written".to_string()
        }
    };
    // experiments as the table and `run` count them: the baselines apart
    let baselines = rows
        .iter()
        .filter(|r| r.decision == autokernel_core::Decision::Baseline)
        .count();
    crate::output::print_stdout(&format!(
        "---\nexperiments: {}\nbaselines: {baselines}\n{model_lines}report: {report_line}",
        rows.len() - baselines,
    ));
    Ok(ExitCode::SUCCESS)
}
