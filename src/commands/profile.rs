//! `autokernel profile` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {}

/// Runs `autokernel profile`.
pub async fn run(_args: ProfileArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel profile` is not implemented yet")
}
