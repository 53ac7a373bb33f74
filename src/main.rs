//! The `autokernel` command: profile a PyTorch model, then optimise its hottest kernels
//! with an edit → benchmark → keep-or-revert loop. `main` only parses and dispatches; each
//! verb lives in `commands/<verb>.rs`.

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // The bench worker is this same binary started with a hidden verb: it must not set up
    // logging or a runtime of its own before embedding Python.
    if let cli::Command::Worker = cli.command {
        return autokernel_bench::serve_worker();
    }
    cli::init_logging(&cli.global);
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
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            cli::print_error(&e);
            ExitCode::from(2)
        }
    }
}
