//! `autokernel report` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {}

/// Runs `autokernel report`.
pub async fn run(_args: ReportArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel report` is not implemented yet")
}
