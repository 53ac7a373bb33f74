//! The options every verb takes (verbosity, quiet, progress bars), in a module of their own:
//! the verbs and the progress display read them, and the command-line definition
//! ([`crate::cli`]) flattens them in, so that neither depends on the other.

use clap::Args;

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
