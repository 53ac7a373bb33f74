//! `autokernel run` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Runs `autokernel run`.
pub async fn run(_args: RunArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel run` is not implemented yet")
}
