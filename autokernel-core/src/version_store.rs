//! The [`VersionStore`] trait: one commit per experiment, keep or revert, history.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{ExperimentRecord, KeptVerdict, Target};

/// A commit id, full lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CommitId(pub String);

impl std::fmt::Display for CommitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An experiment about to be committed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentDraft<'a> {
    /// Its number (the `experiment` column).
    pub experiment: u64,
    /// The target it belongs to.
    pub target: &'a Target,
    /// The agent's one-line description.
    pub description: &'a str,
    /// The agent's name.
    pub agent: &'a str,
    /// The complete `kernel.py`.
    pub source: &'a str,
}

/// An experiment found in the repository but not in `results.tsv`: the process died between
/// the commit and the log row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnloggedExperiment {
    /// Its number, from the commit message.
    pub experiment: u64,
    /// Its target id.
    pub target: String,
    /// The commit.
    pub commit: CommitId,
    /// The description from the commit message.
    pub description: String,
    /// The agent from the commit's trailer.
    pub agent: String,
}

/// What reconciling the repository with `results.tsv` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciliation {
    /// Committed but never logged; the caller logs each as `CRASH`/`revert` and reverts it.
    pub unlogged: Vec<UnloggedExperiment>,
    /// Logged with a commit id the repository does not have (reported, not ignored).
    pub missing_commits: Vec<(u64, String)>,
}

/// Errors of the version store. Each names the repository, the ref and the operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The repository is in a state the store will not work on (detached HEAD, changes it
    /// did not make); `hint` says how to fix it.
    #[error("{message}\nhint: {hint}")]
    Refused {
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// A git lock is held by another writer.
    #[error("lock `{path}` is held (age {age_s} s); {advice}")]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Its age in seconds.
        age_s: u64,
        /// What to do.
        advice: String,
    },
    /// Any other failure of a git operation.
    #[error("{operation} failed in `{repo}` on `{reference}`: {source}")]
    Git {
        /// e.g. `commit`, `revert`, `read blob`.
        operation: String,
        /// The repository path.
        repo: PathBuf,
        /// The ref involved.
        reference: String,
        /// The underlying error: the git library's own (its `source()` chain kept), or a
        /// message where the store found the problem itself.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// Reading or writing the work tree failed.
    #[error("cannot write `{path}`")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Keeps every experiment as a commit. The default is a gix repository; the trait lets an
/// integrator keep experiments elsewhere.
#[async_trait]
pub trait VersionStore: Send + Sync {
    /// The path of `target`'s `kernel.py` in the work tree.
    fn kernel_path(&self, target: &Target) -> PathBuf;

    /// Writes `draft.source` to the target's `kernel.py` and commits it on the run branch
    /// (the branch advances; [`VersionStore::revert`] moves it back).
    ///
    /// # Errors
    /// [`StoreError`] when the commit cannot be made; the work tree is unchanged then.
    async fn commit(&mut self, draft: &ExperimentDraft<'_>) -> Result<CommitId, StoreError>;

    /// Confirms a kept experiment; `record` carries the verdict and metrics to attach.
    ///
    /// # Errors
    /// [`StoreError`] on a git failure.
    async fn keep(&mut self, record: &ExperimentRecord) -> Result<(), StoreError>;

    /// Moves the run branch back to the last kept commit, restores the work tree and index
    /// to it exactly, and keeps the reverted commit reachable under
    /// `refs/autokernel/reverted/<n>`.
    ///
    /// # Errors
    /// [`StoreError`] on a git failure.
    async fn revert(&mut self, record: &ExperimentRecord) -> Result<(), StoreError>;

    /// The source of the target's best kept `kernel.py` and its commit, if any.
    ///
    /// # Errors
    /// [`StoreError`] on a git failure.
    async fn best(&self, target: &Target) -> Result<Option<(CommitId, String)>, StoreError>;

    /// Compares the repository with the rows already in `results.tsv`.
    ///
    /// # Errors
    /// [`StoreError`] on a git failure.
    async fn reconcile(
        &mut self,
        logged: &[ExperimentRecord],
    ) -> Result<Reconciliation, StoreError>;

    /// Fills in, on rows read back from `results.tsv`, what the store kept with each
    /// experiment beyond the file's columns (the record it was given at
    /// [`VersionStore::keep`] or [`VersionStore::revert`]):
    /// [`ExperimentRecord::head_to_head`] and [`ExperimentRecord::config`], where a row
    /// lacks them. The default keeps nothing beyond the columns and changes no row.
    ///
    /// # Errors
    /// [`StoreError`] when what the store kept cannot be read.
    async fn recall(&self, rows: &mut [ExperimentRecord]) -> Result<(), StoreError> {
        let _ = rows;
        Ok(())
    }

    /// The verdict kept with each experiment's commit (by commit id), against which the
    /// loop checks the rows of `results.tsv` on resume ([`crate::audit_rows`]): a row that
    /// disagrees with it was not written by the loop. The default keeps none and so checks
    /// none.
    ///
    /// # Errors
    /// [`StoreError`] when what the store kept cannot be read.
    async fn kept_verdicts(
        &self,
    ) -> Result<std::collections::BTreeMap<String, KeptVerdict>, StoreError> {
        Ok(std::collections::BTreeMap::new())
    }

    /// The `kernel.py` of target `target_id` as committed in `commit`, when the store still
    /// has it; `None` when it does not (the default: a store that cannot read history).
    /// The loop reads a row's configuration from it when [`VersionStore::recall`] found
    /// none (a workspace written before configurations were kept).
    ///
    /// # Errors
    /// [`StoreError`] when the store cannot be read at all.
    async fn source_at(
        &self,
        target_id: &str,
        commit: &CommitId,
    ) -> Result<Option<String>, StoreError> {
        let _ = (target_id, commit);
        Ok(None)
    }
}

#[async_trait]
impl<T: VersionStore + ?Sized> VersionStore for Box<T> {
    fn kernel_path(&self, target: &Target) -> PathBuf {
        (**self).kernel_path(target)
    }
    async fn commit(&mut self, draft: &ExperimentDraft<'_>) -> Result<CommitId, StoreError> {
        (**self).commit(draft).await
    }
    async fn keep(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        (**self).keep(record).await
    }
    async fn revert(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        (**self).revert(record).await
    }
    async fn best(&self, target: &Target) -> Result<Option<(CommitId, String)>, StoreError> {
        (**self).best(target).await
    }
    async fn reconcile(
        &mut self,
        logged: &[ExperimentRecord],
    ) -> Result<Reconciliation, StoreError> {
        (**self).reconcile(logged).await
    }
    async fn recall(&self, rows: &mut [ExperimentRecord]) -> Result<(), StoreError> {
        (**self).recall(rows).await
    }
    async fn kept_verdicts(
        &self,
    ) -> Result<std::collections::BTreeMap<String, KeptVerdict>, StoreError> {
        (**self).kept_verdicts().await
    }
    async fn source_at(
        &self,
        target_id: &str,
        commit: &CommitId,
    ) -> Result<Option<String>, StoreError> {
        (**self).source_at(target_id, commit).await
    }
}
