//! The `autokernel` command: profile a PyTorch model, then optimise its hottest kernels
//! with an edit → benchmark → keep-or-revert loop. `main` only parses and dispatches; each
//! verb lives in `commands/<verb>.rs`.

mod cli;
mod commands;
mod defaults;

mod fonts;
mod model_args;
mod numfmt;
mod progress;
mod report;
mod workspace;

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
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            cli::print_error(&e);
            ExitCode::from(2)
        }
    }
}

/// A line of information: on stdout with the summary it belongs to, or on stderr when
/// stdout carries JSON (`--json`), which must stay one document a reader can parse.
pub fn print_info(json: bool, text: &str) {
    if json {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{}", text.trim_end_matches('\n'));
        }
    } else {
        print_stdout(text);
    }
}

/// Writes data for the user to stdout (the one place the binary prints results).
#[allow(clippy::print_stdout)]
pub fn print_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // a closed pipe (`| head`) is not an error worth reporting
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
}
