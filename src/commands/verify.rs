//! `autokernel verify` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {}

/// Runs `autokernel verify`.
pub async fn run(_args: VerifyArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel verify` is not implemented yet")
}
