//! `autokernel export`: a workspace's verified kernels as a Python package
//! ([`autokernel::export`]), then what was written and how to use it.

use std::path::PathBuf;
use std::process::ExitCode;

use autokernel::export::{default_package_name, ExportOptions};
use autokernel::Workspace;

use crate::global_args::GlobalArgs;

/// Arguments of `autokernel export`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Writes a Python project (pyproject.toml and one package) holding the
kernels the last `autokernel verify` plugged into the model, each as verified, with the
plugs that install them and their registration as PyTorch operators. In your own code,
with neither autokernel nor its worker:

  pip install DIR
  import torch, PACKAGE
  report = PACKAGE.optimize(model)      # prints what it replaced and left, and why
  model = torch.compile(model)          # optional: no graph break at the kernels
  report.undo()                         # the model as it was

optimize() installs the kernels on that model instance only, for calls at the parameters,
shapes and dtype they were verified at (every other call runs the model's own code), and
warns when the GPU, torch or triton differ from the verification's.

Examples:
  autokernel export -w autokernel-workspace -o gpt2-kernels
  autokernel export -w ws -o out --name my_kernels --force --json

Exit codes: 0 exported; 2 error (no verification, a failed or stale one, no kernel plugged
in, an existing folder that is not an earlier export)."
)]
pub struct ExportArgs {
    #[command(flatten)]
    pub workspace: super::WorkspaceArg,
    /// The folder to write the Python project into
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// The Python package name [default: autokernel_<model class or example>]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Replace DIR when it holds an earlier export (never another folder)
    #[arg(long)]
    pub force: bool,
    /// Print what was exported as JSON
    #[arg(long)]
    pub json: bool,
}

/// Runs `autokernel export`.
pub async fn run(args: ExportArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace.dir)?;
    let name = args.name.unwrap_or_else(|| default_package_name(&ws));
    let options = ExportOptions::new(&args.out)
        .with_name(name)
        .with_force(args.force);
    let exported = autokernel::export::export(&ws, &options)?;
    if args.json {
        crate::output::print_stdout(&serde_json::to_string_pretty(&exported)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "exported {} kernel(s) to {} as the package `{}`: {}\n",
        exported.targets.len(),
        exported.dir.display(),
        exported.package,
        exported.targets.join(", ")
    );
    for e in &exported.left_out {
        text.push_str(&format!("left out: {}: {}\n", e.target, e.reason));
    }
    text.push_str(&format!(
        "install: pip install {}\nuse:     import {pkg}; report = {pkg}.optimize(model)",
        exported.dir.display(),
        pkg = exported.package
    ));
    crate::output::print_stdout(&text);
    Ok(ExitCode::SUCCESS)
}
