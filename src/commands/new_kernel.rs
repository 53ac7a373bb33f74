//! `autokernel new-kernel` (not implemented yet).

use std::process::ExitCode;

use crate::cli::GlobalArgs;

/// Arguments of `autokernel new-kernel`.
#[derive(Debug, clap::Args)]
pub struct NewKernelArgs {}

/// Runs `autokernel new-kernel`.
pub async fn run(_args: NewKernelArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`autokernel new-kernel` is not implemented yet")
}
