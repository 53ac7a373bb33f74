//! One module per verb; each exposes its clap `…Args` and an async `run` returning the
//! process exit code.

pub mod bench;
pub mod experiments;
pub mod log;
pub mod new_kernel;
pub mod profile;
pub mod report;
pub mod run;
pub mod tune;
pub mod verify;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs the verb the user typed.
pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Bench(args) => bench::run(args, &global).await,
        Command::NewKernel(args) => new_kernel::run(args, &global).await,
        Command::Profile(args) => profile::run(args, &global).await,
        Command::Run(args) => run::run(args, &global).await,
        Command::Tune(args) => tune::run(args, &global).await,
        Command::Report(args) => report::run(args, &global).await,
        Command::Log(args) => log::run(args, &global).await,
        Command::Verify(args) => verify::run(args, &global).await,
        Command::Worker => unreachable!("handled in main before the runtime starts"),
    }
}
