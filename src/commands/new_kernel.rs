//! `autokernel new-kernel`: write the starter kernel.py of a kind.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use autokernel_core::KernelKind;

use crate::global_args::GlobalArgs;

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

/// Runs `autokernel new-kernel`: the starter on stdout (nothing else: it is the data), or
/// in `-o PATH` (refusing to overwrite without `--force`), then one line on stderr naming
/// what was written and the commands that take it next ([`written_message`]), unless
/// `--quiet`.
pub async fn run(args: NewKernelArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
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
            if !global.quiet {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{}", written_message(args.kind, path));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The line said after writing `kind`'s starter to `path`: its `kernel_fn` signature and
/// the `bench` and `tune` commands for it, the shape given as the kind's dim names (for a
/// softmax in `k.py`: `kernel_fn(x)` and `autokernel tune k.py --shape rows,cols`).
pub fn written_message(kind: KernelKind, path: &std::path::Path) -> String {
    let p = path.display();
    format!(
        "wrote {p}: {kind} starter, kernel_fn({}); judge it with `autokernel bench {p}`, tune it with `autokernel tune {p} --shape {}`",
        kind.spec()
            .default_inputs()
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        kind.dim_names().join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signature and the shape placeholder are the kind's own (written out here from
    /// the catalogue: matmul takes A and B, its problem shape is M,N,K).
    #[test]
    fn the_message_names_the_file_signature_and_next_commands() {
        assert_eq!(
            written_message(KernelKind::Matmul, std::path::Path::new("dir/mm.py")),
            "wrote dir/mm.py: matmul starter, kernel_fn(A, B); judge it with `autokernel bench dir/mm.py`, tune it with `autokernel tune dir/mm.py --shape M,N,K`"
        );
    }
}
