//! Command-line definition (clap derive): globals, verbs, exit codes, logging setup.

use clap::{Args, Parser, Subcommand};

use crate::commands;

/// Exit codes, listed in `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 did what was asked; 1 finished but the answer is no \
(e.g. `bench` verdict not PASS); 2 error (bad input, environment, bug); 130 interrupted.";

/// Find the GPU kernels that cost a PyTorch model the most time and make them faster,
/// unattended: profile, then edit → benchmark → keep or revert, one `kernel.py` at a time.
#[derive(Debug, Parser)]
#[command(name = "autokernel", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// Options every verb takes.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// More log output on stderr (-v debug, -vv trace); RUST_LOG overrides
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = "Global options")]
    pub verbose: u8,
    /// Only errors on stderr; no progress bars
    #[arg(short, long, global = true, help_heading = "Global options")]
    pub quiet: bool,
    /// Never draw progress bars (they are also hidden when stderr is not a terminal)
    #[arg(long, global = true, help_heading = "Global options")]
    pub no_progress: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Judge one kernel.py: every correctness stage, then timing against PyTorch
    Bench(commands::bench::BenchArgs),
    /// Write a starter kernel.py for a kernel kind
    NewKernel(commands::new_kernel::NewKernelArgs),
    /// Profile a model (or import a torch.profiler trace) and show the ranked plan
    Profile(commands::profile::ProfileArgs),
    /// The main job: profile a model, optimise its top kernels, verify, report
    Run(commands::run::RunArgs),
    /// Write report.md and progress.png for a workspace and print the summary
    Report(commands::report::ReportArgs),
    /// Plug a workspace's kept kernels into the model and check it end to end
    Verify(commands::verify::VerifyArgs),
    /// Internal: the bench worker process (started by autokernel itself)
    #[command(hide = true)]
    Worker,
}

/// Sets up `tracing` on stderr: `-v` = autokernel debug, `-vv` = trace, `RUST_LOG` overrides.
pub fn init_logging(global: &GlobalArgs) {
    use tracing_subscriber::EnvFilter;
    let default = match (global.quiet, global.verbose) {
        (true, _) => "error",
        (false, 0) => "warn,autokernel=info",
        (false, 1) => "warn,autokernel=debug,autokernel_core=debug,autokernel_bench=debug,autokernel_profiler=debug,autokernel_agent=debug,autokernel_vcs=debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
}

/// Prints an error chain once: `error: …`, one `Caused by:` line per source, and `hint:`
/// lines carried in the messages.
#[allow(clippy::print_stderr)]
pub fn print_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  Caused by: {cause}");
    }
}
