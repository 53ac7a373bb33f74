//! One module per verb; each exposes its clap `…Args` and an async `run` returning the
//! process exit code (`main` dispatches).

pub mod bench;
pub mod bench_problem;
pub mod experiments;
pub mod export;
pub mod log;
pub mod new_kernel;
pub mod profile;
pub mod report;
pub mod run;
pub mod score;
pub mod tune;
pub mod verify;

/// The `-w DIR` flag of the verbs that read a workspace (`report`, `log`, `verify`,
/// `export`).
#[derive(Debug, clap::Args)]
pub struct WorkspaceArg {
    /// The workspace: the folder `autokernel run` or `autokernel tune` wrote
    #[arg(
        id = "workspace",
        long = "workspace",
        short = 'w',
        default_value = autokernel::workspace::DEFAULT_DIR,
        value_name = "DIR"
    )]
    pub dir: std::path::PathBuf,
}
