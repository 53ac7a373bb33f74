//! `autokernel bench` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs `autokernel bench`.
pub async fn run(_args: BenchArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel bench` is not implemented yet")
}
