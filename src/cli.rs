//! Command-line definition (clap derive): globals, verbs, exit codes, logging setup.

use clap::{Parser, Subcommand};

use crate::commands;
use crate::global_args::GlobalArgs;

/// Exit codes, listed in `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 did what was asked; 1 finished but the answer is no \
(e.g. `bench` verdict not PASS, `verify` or `run` finding a kernel that breaks the model); 2 error (bad \
input, environment, bug); 130 interrupted (Ctrl-C or SIGTERM).";

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Judge kernel.py files: every correctness stage, then timing against PyTorch
    Bench(commands::bench::BenchArgs),
    /// Write a starter kernel.py for a kernel kind
    NewKernel(commands::new_kernel::NewKernelArgs),
    /// Profile a model (or import a torch.profiler trace) and show the ranked plan
    Profile(commands::profile::ProfileArgs),
    /// The main job: profile a model, optimise its top kernels, verify, report
    Run(commands::run::RunArgs),
    /// Tune one kernel.py at given shapes, without a model: the tuner's search, kept when faster
    Tune(commands::tune::TuneArgs),
    /// Write report.md and progress.png for a workspace and print the summary
    Report(commands::report::ReportArgs),
    /// List a workspace's experiments: decision, verdict, latency, speedup, commit
    Log(commands::log::LogArgs),
    /// Plug a workspace's kept kernels into the model and check it end to end
    Verify(commands::verify::VerifyArgs),
    /// Write the verified kernels as a Python package: `import pkg; pkg.optimize(model)`
    Export(commands::export::ExportArgs),
    /// Judge a folder of ModelNew candidates on KernelBench-format problems: correctness and fast_p
    Score(commands::score::ScoreArgs),
    /// Internal: the bench worker process (started by autokernel itself)
    #[command(hide = true)]
    Worker,
}

/// Sets up `tracing`: stderr gets warnings (`-v` = autokernel debug, `-vv` = trace,
/// `RUST_LOG` overrides); `log_file`, when given (the workspace's `autokernel.log`), gets
/// every autokernel event at debug level so a night's run can be read back.
pub fn init_logging(global: &GlobalArgs, log_file: Option<&std::path::Path>) {
    use tracing_subscriber::{
        fmt, layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer,
    };
    let crates = "autokernel=LEVEL,autokernel_core=LEVEL,autokernel_bench=LEVEL,autokernel_profiler=LEVEL,autokernel_agent=LEVEL,autokernel_vcs=LEVEL";
    let default = match (global.quiet, global.verbose) {
        (true, _) => "error".to_string(),
        (false, 0) => format!("warn,{}", crates.replace("LEVEL", "warn")),
        (false, 1) => format!("warn,{}", crates.replace("LEVEL", "debug")),
        (false, _) => "trace".to_string(),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .without_time()
        .with_filter(filter);
    let file = log_file.map(|p| {
        fmt::layer()
            .with_ansi(false)
            .with_writer(LazyFile::new(p))
            .with_filter(EnvFilter::new(format!(
                "info,{}",
                crates.replace("LEVEL", "debug")
            )))
    });
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
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

/// The log file, created (with its folder) at the first event, so that a command refused for
/// a bad flag leaves no workspace folder behind. Writes that fail are dropped: logging must
/// never stop the run.
pub struct LazyFile {
    path: std::path::PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

impl LazyFile {
    fn new(path: &std::path::Path) -> Self {
        LazyFile {
            path: path.to_path_buf(),
            file: std::sync::Mutex::new(None),
        }
    }
}

impl std::io::Write for &LazyFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            *slot = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        match slot.as_mut() {
            Some(f) => f.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_mut().map_or(Ok(()), std::io::Write::flush)
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LazyFile {
    type Writer = &'a LazyFile;
    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}
