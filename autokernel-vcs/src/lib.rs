//! The default [`VersionStore`](autokernel_core::VersionStore) of autokernel: every
//! experiment a git commit, written with gix, nothing tried ever lost.
//!
//! The workspace is a git repository that people browse with ordinary git tools:
//!
//! - one branch per run, `autokernel/<run_tag>`, checked out; its first-parent history is the
//!   baseline and the kept experiments, in order;
//! - one commit per experiment, changing `targets/<id>/kernel.py` only, with the message
//!   `exp <n>: <target>: <description>` and the trailers `Autokernel-Agent`,
//!   `Autokernel-Experiment`, `Autokernel-Target`;
//! - a reverted experiment leaves the branch (which returns to the last kept commit; work
//!   tree and index follow) and stays reachable as `refs/autokernel/reverted/<n>`, so
//!   `git log --all` shows every attempt;
//! - the verdict, key metrics, deciding head-to-head timing and measured `CONFIG` of each
//!   decided experiment are a git note under `refs/notes/autokernel` (`git log --notes=autokernel`; read back
//!   with [`read_notes`]): published commits are never amended;
//! - `results.tsv`, logs, reports, profiles, `autokernel.toml`, `program.md` and the scratch
//!   folder `.autokernel/` are listed in `.git/info/exclude`, so `git status` stays clean.
//!
//! [`GixStore::open`] claims the workspace with a pid file, removes provably stale git
//! locks, refuses a detached `HEAD` or changes it did not make, and creates or continues the
//! run branch. Every write takes git's locks with a bounded wait.
//!
//! ```no_run
//! use autokernel_vcs::{GixStore, StoreOptions};
//! # fn main() -> Result<(), autokernel_core::StoreError> {
//! let store = GixStore::open("autokernel-workspace".as_ref(), StoreOptions::new("2026-11-30-llama"))?;
//! for e in store.experiments("01-matmul")? {
//!     println!("{} {} kept={}", e.experiment, e.commit, e.kept);
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod lock;
mod message;
mod notes;
mod read_only;
mod store;
mod worktree;

pub use lock::{RemovedLock, OWNER_PID_FILE, SCRATCH_DIR};
pub use message::{
    format_message, parse_message, ParsedMessage, TRAILER_AGENT, TRAILER_EXPERIMENT, TRAILER_TARGET,
};
pub use notes::{kept_verdicts, merge_notes, parse_note, read_notes, ExperimentNote, NOTES_REF};
pub use read_only::read_kernel_at;
pub use store::{
    ExperimentCommit, GixStore, OpenReport, StoreOptions, BRANCH_PREFIX, REVERTED_PREFIX,
};
pub use worktree::EXCLUDES;

/// Git's object id (SHA-1, 40 hex digits) of a blob holding `bytes`: what `git hash-object`
/// prints for a file with this content. A stable fingerprint of a file's text, e.g. to tell
/// whether the kernel a workspace was started from has been edited since.
///
/// # Panics
/// Never in practice: SHA-1 hashing in memory cannot fail (gix reports only a detected
/// collision attack, which this content cannot be).
pub fn blob_id(bytes: &[u8]) -> String {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
        .expect("hashing bytes in memory")
        .to_string()
}
