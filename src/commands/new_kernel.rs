//! `autokernel new-kernel`: write the starter kernel.py of a kind.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use autokernel_core::KernelKind;

use crate::cli::GlobalArgs;

const EXAMPLES: &str = "Examples:
  autokernel new-kernel softmax -o kernel.py
  autokernel new-kernel matmul > my_matmul.py
  autokernel new-kernel rmsnorm -o kernel.py --force   (overwrite)";

/// Arguments of `autokernel new-kernel`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct NewKernelArgs {
    /// The kind: matmul, softmax, layernorm, rmsnorm, flash_attention, fused_mlp,
    /// cross_entropy, rotary_embedding or reduce
    pub kind: KernelKind,
    /// Where to write it (default: stdout)
    #[arg(short, long, value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Overwrite PATH if it exists
    #[arg(long)]
    pub force: bool,
}

/// Runs `autokernel new-kernel`: the starter on stdout, or in `-o PATH` (refusing to
/// overwrite without `--force`).
pub async fn run(args: NewKernelArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let source = autokernel_bench::starter_source(args.kind);
    match &args.output {
        None => {
            std::io::stdout().lock().write_all(source.as_bytes())?;
        }
        Some(path) => {
            if path.exists() && !args.force {
                anyhow::bail!(
                    "`{}` already exists\nhint: pass --force to overwrite it",
                    path.display()
                );
            }
            std::fs::write(path, source)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
            tracing::info!(kind = %args.kind, path = %path.display(), "wrote the starter kernel");
        }
    }
    Ok(ExitCode::SUCCESS)
}
