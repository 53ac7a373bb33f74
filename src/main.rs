//! The `autokernel` command: profile a PyTorch model, then optimise its hottest kernels
//! with an edit → benchmark → keep-or-revert loop. `main` only parses and dispatches; each
//! verb lives in `commands/<verb>.rs`.

mod cli;
mod commands;
mod global_args;
mod model_args;
mod output;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // The bench worker is this same binary started with a hidden verb: it must not set up
    // logging or a runtime of its own before embedding Python.
    if let cli::Command::Worker = cli.command {
        return autokernel_bench::serve_worker();
    }
    let log_file = match &cli.command {
        cli::Command::Run(args) => Some(args.workspace.join("autokernel.log")),
        cli::Command::Tune(args) => Some(args.workspace.join("autokernel.log")),
        _ => None,
    };
    cli::init_logging(&cli.global, log_file.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            cli::print_error(&anyhow::anyhow!(e).context("cannot start the async runtime"));
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            cli::print_error(&e);
            ExitCode::from(2)
        }
    }
}

/// Runs the verb the user typed.
async fn dispatch(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    use cli::Command;
    let global = cli.global;
    match cli.command {
        Command::Bench(args) => commands::bench::run(args, &global).await,
        Command::NewKernel(args) => commands::new_kernel::run(args, &global).await,
        Command::Profile(args) => commands::profile::run(args, &global).await,
        Command::Run(args) => commands::run::run(args, &global).await,
        Command::Tune(args) => commands::tune::run(args, &global).await,
        Command::Report(args) => commands::report::run(args, &global).await,
        Command::Log(args) => commands::log::run(args, &global).await,
        Command::Verify(args) => commands::verify::run(args, &global).await,
        Command::Export(args) => commands::export::run(args, &global).await,
        Command::Score(args) => commands::score::run(args, &global).await,
        Command::Worker => unreachable!("handled in main before the runtime starts"),
    }
}
