//! [`GixStore`]: the default [`VersionStore`], a git repository written with gix.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use autokernel_core::{
    CommitId, Decision, ExperimentDraft, ExperimentRecord, Reconciliation, StoreError, Target,
    UnloggedExperiment, VersionStore,
};
use gix::bstr::ByteSlice;
use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
use gix::refs::{FullName, Target as RefTarget};
use gix::ObjectId;

use crate::lock::{self, OwnerPid, RemovedLock, SCRATCH_DIR};
use crate::message::{format_message, parse_message, ParsedMessage};
use crate::notes::{note_text, NOTES_REF};
use crate::worktree::{self, TreeError, TreeMap};

/// The underlying error of a [`StoreError::Git`].
type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The prefix of the refs keeping reverted experiments reachable: `<prefix><n>`.
pub const REVERTED_PREFIX: &str = "refs/autokernel/reverted/";
/// The prefix of run branches: `<prefix><run_tag>`.
pub const BRANCH_PREFIX: &str = "refs/heads/autokernel/";

/// The journal of a work-tree write in progress (inside [`SCRATCH_DIR`]): the folders it
/// touches, one a line. Present at open means the last writer was killed mid-write; the
/// store then restores those folders from `HEAD`, since that change was its own.
const JOURNAL_FILE: &str = "pending-write";

/// How to open a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// The run's tag: experiments go on branch `autokernel/<run_tag>` (a valid ref
    /// component, e.g. `2026-11-30-llama`).
    pub run_tag: String,
    /// The longest wait for a git lock held by another writer (default 5 s). Also the age
    /// beyond which a lock left by a dead owner counts as stale.
    pub lock_timeout: Duration,
    /// Author and committer name of experiment commits (default `autokernel`).
    pub author_name: String,
    /// Author and committer e-mail (default `autokernel@localhost`).
    pub author_email: String,
}

impl StoreOptions {
    /// Defaults for run `run_tag`.
    pub fn new(run_tag: impl Into<String>) -> Self {
        StoreOptions {
            run_tag: run_tag.into(),
            lock_timeout: Duration::from_secs(5),
            author_name: "autokernel".into(),
            author_email: "autokernel@localhost".into(),
        }
    }
}

/// What [`GixStore::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The repository did not exist and was created.
    pub created_repository: bool,
    /// The run branch existed: the run continues on it.
    pub resumed: bool,
    /// Stale git locks removed (their owner was dead and they were older than the timeout).
    pub removed_locks: Vec<RemovedLock>,
    /// The pid of a dead earlier owner whose pid file was still present.
    pub previous_dead_owner: Option<i32>,
    /// A work-tree write interrupted by a kill was rolled back to `HEAD`.
    pub recovered_interrupted_write: bool,
}

/// One experiment commit of a target, kept (on the run branch) or reverted (under
/// `refs/autokernel/reverted/<n>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentCommit {
    /// The experiment number.
    pub experiment: u64,
    /// The commit.
    pub commit: CommitId,
    /// The full commit message.
    pub message: String,
    /// Its first parent (`None` for a root commit).
    pub parent: Option<CommitId>,
    /// Whether it is on the run branch (kept or baseline) rather than reverted.
    pub kept: bool,
}

/// The default [`VersionStore`]: a git repository in the workspace, written with gix (no
/// `git` binary at run time). One branch per run, one commit per experiment; reverted
/// experiments stay reachable under `refs/autokernel/reverted/<n>`; verdicts are git notes
/// under [`NOTES_REF`]. See the crate documentation for the layout.
///
/// Writes block the calling thread for at most [`StoreOptions::lock_timeout`] per lock.
#[derive(Debug)]
pub struct GixStore {
    repo: Mutex<gix::Repository>,
    workdir: PathBuf,
    git_dir: PathBuf,
    branch: FullName,
    options: StoreOptions,
    report: OpenReport,
    signature: (String, String),
    _owner: OwnerPid,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl GixStore {
    /// Opens the workspace repository at `workspace`, creating the folder and the repository
    /// when absent, and checks out the run branch `autokernel/<run_tag>`: continued when it
    /// exists, else created from `HEAD` (or left unborn in an empty repository, so that the
    /// first experiment is the root commit).
    ///
    /// Before anything else it claims the workspace (`.autokernel/owner.pid`), clears stale
    /// git locks, rolls back a work-tree write interrupted by a kill, and adds the workspace's
    /// own files to `.git/info/exclude`.
    ///
    /// # Errors
    /// - [`StoreError::Refused`]: a live process owns the workspace, `HEAD` is detached,
    ///   tracked files or the index differ from `HEAD`, or `run_tag` is not a valid ref
    ///   name; the hint says how to fix it.
    /// - [`StoreError::Locked`]: a git lock younger than the timeout outlived the wait.
    /// - [`StoreError::Git`] / [`StoreError::Io`]: the repository or the work tree could not
    ///   be read or written.
    pub fn open(workspace: &Path, options: StoreOptions) -> Result<GixStore, StoreError> {
        std::fs::create_dir_all(workspace).map_err(io_err(workspace))?;
        let workdir = std::fs::canonicalize(workspace).map_err(io_err(workspace))?;
        let branch_name = format!("{BRANCH_PREFIX}{}", options.run_tag);
        let branch = FullName::try_from(branch_name.as_str()).map_err(|e| StoreError::Refused {
            message: format!(
                "run tag `{}` cannot name a git branch: {e}",
                options.run_tag
            ),
            hint: "use letters, digits, `-`, `_` and `.` in the run tag".into(),
        })?;
        let git_err = |operation: &str, e: BoxError| StoreError::Git {
            operation: operation.into(),
            repo: workdir.clone(),
            reference: branch_name.clone(),
            source: e,
        };
        let mut report = OpenReport::default();
        if !workdir.join(".git").exists() {
            gix::init(&workdir).map_err(|e| git_err("init repository", e.into()))?;
            report.created_repository = true;
            tracing::info!(repo = %workdir.display(), "created the workspace repository");
        }
        let owner = OwnerPid::claim(&workdir)?;
        report.previous_dead_owner = owner.previous_dead_owner;
        let timeout_ms = options.lock_timeout.as_millis().max(1);
        let open_options = gix::open::Options::isolated().config_overrides([
            format!("core.filesRefLockTimeout={timeout_ms}"),
            format!("core.packedRefsTimeout={timeout_ms}"),
        ]);
        let repo = gix::open_opts(&workdir, open_options)
            .map_err(|e| git_err("open repository", e.into()))?;
        let git_dir = repo.git_dir().to_path_buf();
        report.removed_locks = lock::clear_stale_locks(&git_dir, options.lock_timeout)?;
        worktree::write_excludes(&git_dir)
            .map_err(|e| tree_err("write info/exclude", &workdir, &branch_name, e))?;

        let mut store = GixStore {
            repo: Mutex::new(repo),
            workdir,
            git_dir,
            branch,
            signature: (options.author_name.clone(), options.author_email.clone()),
            options,
            report,
            _owner: owner,
        };
        store.prepare_branch()?;
        Ok(store)
    }

    /// The work tree's root (canonical path).
    pub fn workspace(&self) -> &Path {
        &self.workdir
    }

    /// The run branch's full name, `refs/heads/autokernel/<run_tag>`.
    pub fn branch(&self) -> String {
        self.branch.as_bstr().to_string()
    }

    /// What [`GixStore::open`] found and did.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The run branch's tip, `None` before the first commit.
    ///
    /// # Errors
    /// [`StoreError::Git`] when the branch cannot be read.
    pub fn tip(&self) -> Result<Option<CommitId>, StoreError> {
        let repo = self.repo();
        Ok(self.branch_tip(&repo, "read branch")?.map(to_commit_id))
    }

    /// Every experiment commit of `target`: those on the run branch (`kept: true`: the
    /// baseline and kept experiments) and those under `refs/autokernel/reverted/`, ordered by
    /// experiment number.
    ///
    /// # Errors
    /// [`StoreError::Git`] when the history cannot be read.
    pub fn experiments(&self, target: &str) -> Result<Vec<ExperimentCommit>, StoreError> {
        let repo = self.repo();
        let mut out: Vec<ExperimentCommit> = self
            .all_experiment_commits(&repo, "list experiments")?
            .into_iter()
            .filter(|c| c.parsed.target == target)
            .map(|c| ExperimentCommit {
                experiment: c.parsed.experiment,
                commit: to_commit_id(c.id),
                message: c.message,
                parent: c.parent.map(to_commit_id),
                kept: c.kept,
            })
            .collect();
        out.sort_by_key(|a| (a.experiment, !a.kept));
        Ok(out)
    }

    /// The `targets/<target>/kernel.py` that `commit` holds.
    ///
    /// # Errors
    /// [`StoreError::Git`] when the commit or the file does not exist or is not UTF-8.
    pub fn read_kernel(&self, commit: &CommitId, target: &str) -> Result<String, StoreError> {
        let repo = self.repo();
        let id = self.parse_commit_id(commit, "read kernel")?;
        let rel = kernel_relpath(target);
        let err = |m: BoxError| self.git_error("read kernel", &commit.0, m);
        let tree = repo
            .find_commit(id)
            .and_then(|c| c.tree())
            .map_err(|e| err(e.into()))?;
        let entry = tree
            .lookup_entry_by_path(&rel)
            .map_err(|e| err(e.into()))?
            .ok_or_else(|| err(format!("commit has no `{rel}`").into()))?;
        let blob = repo
            .find_blob(entry.object_id())
            .map_err(|e| err(e.into()))?;
        String::from_utf8(blob.data.clone())
            .map_err(|_| err(format!("`{rel}` is not UTF-8").into()))
    }

    fn repo(&self) -> MutexGuard<'_, gix::Repository> {
        // a panic while holding the lock leaves the repository as consistent as git's own
        // files are, so a poisoned mutex is still usable
        self.repo.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A [`StoreError::Git`] for this repository; `source` is the git library's error (its
    /// chain kept) or a message of the store's own.
    fn git_error(
        &self,
        operation: &str,
        reference: &str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> StoreError {
        StoreError::Git {
            operation: operation.into(),
            repo: self.workdir.clone(),
            reference: reference.into(),
            source: source.into(),
        }
    }

    fn branch_str(&self) -> String {
        self.branch.as_bstr().to_string()
    }

    fn parse_commit_id(&self, commit: &CommitId, operation: &str) -> Result<ObjectId, StoreError> {
        ObjectId::from_hex(commit.0.as_bytes())
            .map_err(|e| self.git_error(operation, &commit.0, format!("not a commit id: {e}")))
    }

    fn signature(&self) -> gix::actor::Signature {
        gix::actor::Signature {
            name: self.signature.0.as_str().into(),
            email: self.signature.1.as_str().into(),
            time: gix::date::Time::now_local_or_utc(),
        }
    }

    /// The tip of the run branch.
    fn branch_tip(
        &self,
        repo: &gix::Repository,
        operation: &str,
    ) -> Result<Option<ObjectId>, StoreError> {
        let r = repo
            .try_find_reference(self.branch.as_ref())
            .map_err(|e| self.git_error(operation, &self.branch_str(), e))?;
        Ok(r.and_then(|r| r.try_id().map(|id| id.detach())))
    }

    fn tree_of(
        &self,
        repo: &gix::Repository,
        commit: Option<ObjectId>,
        operation: &str,
    ) -> Result<ObjectId, StoreError> {
        match commit {
            None => Ok(ObjectId::empty_tree(repo.object_hash())),
            Some(c) => repo
                .find_commit(c)
                .and_then(|c| c.tree_id().map(|t| t.detach()))
                .map_err(|e| self.git_error(operation, &c.to_string(), e)),
        }
    }

    fn flat(
        &self,
        repo: &gix::Repository,
        tree: ObjectId,
        operation: &str,
    ) -> Result<TreeMap, StoreError> {
        worktree::flatten(repo, tree).map_err(|e| {
            self.git_error(
                operation,
                &tree.to_string(),
                format!("cannot read tree: {e}"),
            )
        })
    }

    fn first_parent(
        &self,
        repo: &gix::Repository,
        id: ObjectId,
        operation: &str,
    ) -> Result<Option<ObjectId>, StoreError> {
        let commit = repo
            .find_commit(id)
            .map_err(|e| self.git_error(operation, &id.to_string(), e))?;
        let parent = commit.parent_ids().next().map(|p| p.detach());
        Ok(parent)
    }

    fn message_of(
        &self,
        repo: &gix::Repository,
        id: ObjectId,
        operation: &str,
    ) -> Result<String, StoreError> {
        let commit = repo
            .find_commit(id)
            .map_err(|e| self.git_error(operation, &id.to_string(), e))?;
        let raw = commit
            .message_raw()
            .map_err(|e| self.git_error(operation, &id.to_string(), e))?;
        Ok(raw.to_str_lossy().into_owned())
    }

    /// Applies reference edits, logging as the store's signature, mapping a held lock to
    /// [`StoreError::Locked`].
    fn edit_refs(
        &self,
        repo: &gix::Repository,
        edits: Vec<RefEdit>,
        operation: &str,
    ) -> Result<(), StoreError> {
        let names: Vec<String> = edits.iter().map(|e| e.name.as_bstr().to_string()).collect();
        let sig = self.signature();
        let mut buf = gix::date::parse::TimeBuf::default();
        repo.edit_references_as(edits, Some(sig.to_ref(&mut buf)))
            .map(|_| ())
            .map_err(|e| self.ref_error(operation, &names, e))
    }

    fn ref_error(
        &self,
        operation: &str,
        names: &[String],
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> StoreError {
        for name in names {
            let lock = self.git_dir.join(format!("{name}.lock"));
            if lock.exists() {
                return lock::locked(lock, self.options.lock_timeout);
            }
        }
        self.git_error(operation, &names.join(", "), source)
    }

    fn journal_path(&self) -> PathBuf {
        self.workdir.join(SCRATCH_DIR).join(JOURNAL_FILE)
    }

    fn begin_write(&self, scopes: &[String]) -> Result<(), StoreError> {
        let path = self.journal_path();
        std::fs::write(&path, scopes.join("\n") + "\n").map_err(io_err(&path))
    }

    fn end_write(&self) -> Result<(), StoreError> {
        let path = self.journal_path();
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    fn index_lock(&self, operation: &str) -> Result<gix::lock::File, StoreError> {
        let repo = self.repo();
        let index_path = repo.index_path();
        drop(repo);
        lock::acquire_index_lock(
            &self.workdir,
            &index_path,
            self.options.lock_timeout,
            operation,
        )
    }

    /// Checks `HEAD`, recovers an interrupted write, refuses foreign changes, and checks out
    /// the run branch.
    fn prepare_branch(&mut self) -> Result<(), StoreError> {
        let op = "open run branch";
        let repo_guard = self.repo.lock().unwrap_or_else(|p| p.into_inner());
        let repo = &*repo_guard;
        let mut recovered = false;
        let mut resumed = false;
        let head = repo.head().map_err(|e| self.git_error(op, "HEAD", e))?;
        let (head_ref, head_commit) = match &head.kind {
            gix::head::Kind::Detached { target, .. } => {
                return Err(StoreError::Refused {
                    message: format!(
                        "the workspace repository `{}` has a detached HEAD at {target}",
                        self.workdir.display()
                    ),
                    hint: format!(
                        "check out a branch first (`git -C {} switch <branch>`), or create one \
                         here (`git -C {} switch -c autokernel/{}`)",
                        self.workdir.display(),
                        self.workdir.display(),
                        self.options.run_tag
                    ),
                })
            }
            gix::head::Kind::Unborn(name) => (name.clone(), None),
            gix::head::Kind::Symbolic(r) => {
                (r.name.clone(), r.target.try_id().map(|i| i.to_owned()))
            }
        };
        drop(head);
        let head_tree = self.tree_of(repo, head_commit, op)?;
        let head_map = self.flat(repo, head_tree, op)?;

        // a write of ours was interrupted: it was made on the run branch, roll it back
        if let Ok(text) = std::fs::read_to_string(self.journal_path()) {
            if head_ref == self.branch {
                let scopes: Vec<String> = text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect();
                tracing::warn!(
                    ?scopes,
                    "rolling back a work-tree write interrupted by a kill"
                );
                worktree::apply(repo, &self.workdir, &head_map, &head_map, &scopes)
                    .map_err(|e| tree_err(op, &self.workdir, &self.branch_str(), e))?;
                let lock = lock::acquire_index_lock(
                    &self.workdir,
                    &repo.index_path(),
                    self.options.lock_timeout,
                    op,
                )?;
                worktree::write_index(repo, &self.workdir, head_tree, lock)
                    .map_err(|e| tree_err(op, &self.workdir, &self.branch_str(), e))?;
                recovered = true;
            } else {
                tracing::warn!("ignoring a write journal: HEAD is no longer on the run branch");
            }
            self.end_write()?;
        }

        let changes = worktree::changes_against(repo, &self.workdir, &head_map)
            .map_err(|e| tree_err(op, &self.workdir, &head_ref.as_bstr().to_string(), e))?;
        if !changes.is_empty() {
            let shown: Vec<&str> = changes.iter().take(10).map(String::as_str).collect();
            return Err(StoreError::Refused {
                message: format!(
                    "the workspace repository `{}` has changes autokernel did not make on `{}`: {}{}",
                    self.workdir.display(),
                    head_ref.as_bstr(),
                    shown.join(", "),
                    if changes.len() > shown.len() { ", ..." } else { "" }
                ),
                hint: format!(
                    "commit them (`git -C {0} commit -am ...`) or discard them (`git -C {0} \
                     restore --staged --worktree .`), then start again",
                    self.workdir.display()
                ),
            });
        }

        let tip = self.branch_tip(repo, op)?;
        let branch_name = self.branch_str();
        match tip {
            Some(tip) => {
                resumed = true;
                if head_ref != self.branch {
                    let new_tree = self.tree_of(repo, Some(tip), op)?;
                    let new_map = self.flat(repo, new_tree, op)?;
                    worktree::apply(repo, &self.workdir, &head_map, &new_map, &[])
                        .map_err(|e| tree_err(op, &self.workdir, &branch_name, e))?;
                }
                tracing::info!(branch = %branch_name, %tip, "continuing the run branch");
            }
            None => {
                if let Some(start) = head_commit {
                    self.edit_refs(
                        repo,
                        vec![update(
                            self.branch.clone(),
                            start,
                            PreviousValue::MustNotExist,
                            "autokernel: start run branch",
                        )],
                        op,
                    )?;
                }
                tracing::info!(branch = %branch_name, from = %head_ref.as_bstr(), "created the run branch");
            }
        }
        if head_ref != self.branch {
            let edit = RefEdit {
                change: Change::Update {
                    log: LogChange {
                        mode: RefLog::AndReference,
                        force_create_reflog: false,
                        message: format!("autokernel: switch to {branch_name}").into(),
                    },
                    expected: PreviousValue::Any,
                    new: RefTarget::Symbolic(self.branch.clone()),
                },
                name: "HEAD".try_into().expect("HEAD is a valid name"),
                deref: false,
            };
            self.edit_refs(repo, vec![edit], op)?;
        }
        // the index matches the branch tip from now on
        let tip = self.branch_tip(repo, op)?;
        let tree = self.tree_of(repo, tip, op)?;
        let lock = lock::acquire_index_lock(
            &self.workdir,
            &repo.index_path(),
            self.options.lock_timeout,
            op,
        )?;
        worktree::write_index(repo, &self.workdir, tree, lock)
            .map_err(|e| tree_err(op, &self.workdir, &branch_name, e))?;
        drop(repo_guard);
        self.report.recovered_interrupted_write = recovered;
        self.report.resumed = resumed;
        Ok(())
    }

    /// Every experiment commit: first-parent history of the run branch (kept), then the
    /// reverted refs.
    fn all_experiment_commits(
        &self,
        repo: &gix::Repository,
        operation: &str,
    ) -> Result<Vec<FoundCommit>, StoreError> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut next = self.branch_tip(repo, operation)?;
        while let Some(id) = next {
            let message = self.message_of(repo, id, operation)?;
            let parent = self.first_parent(repo, id, operation)?;
            if let Some(parsed) = parse_message(&message) {
                seen.insert(id);
                out.push(FoundCommit {
                    id,
                    parent,
                    message,
                    parsed,
                    kept: true,
                });
            }
            next = parent;
        }
        for id in self.reverted_refs(repo, operation)? {
            if !seen.insert(id) {
                continue;
            }
            let message = self.message_of(repo, id, operation)?;
            let parent = self.first_parent(repo, id, operation)?;
            if let Some(parsed) = parse_message(&message) {
                out.push(FoundCommit {
                    id,
                    parent,
                    message,
                    parsed,
                    kept: false,
                });
            }
        }
        Ok(out)
    }

    /// The commits under `refs/autokernel/reverted/`.
    fn reverted_refs(
        &self,
        repo: &gix::Repository,
        operation: &str,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let err = |e: BoxError| self.git_error(operation, REVERTED_PREFIX, e);
        let platform = repo.references().map_err(|e| err(e.into()))?;
        let iter = platform
            .prefixed(REVERTED_PREFIX)
            .map_err(|e| err(e.into()))?;
        let mut out = Vec::new();
        for r in iter {
            let mut r = r.map_err(|e| err(e.into()))?;
            let id = r.peel_to_id().map_err(|e| err(e.into()))?;
            out.push(id.detach());
        }
        Ok(out)
    }

    /// Adds (or replaces) the note of `commit` under [`NOTES_REF`].
    fn write_note(
        &self,
        repo: &gix::Repository,
        commit: ObjectId,
        text: &str,
        operation: &str,
    ) -> Result<(), StoreError> {
        let err = |e: BoxError| self.git_error(operation, NOTES_REF, e);
        let previous = repo
            .try_find_reference(NOTES_REF)
            .map_err(|e| err(e.into()))?
            .and_then(|r| r.try_id().map(|i| i.detach()));
        let base = self.tree_of(repo, previous, operation)?;
        let tree = tree_with_file(repo, base, &commit.to_string(), text).map_err(err)?;
        let sig = self.signature();
        let mut buf = gix::date::parse::TimeBuf::default();
        let sig_ref = sig.to_ref(&mut buf);
        repo.commit_as(
            sig_ref,
            sig_ref,
            NOTES_REF,
            format!("Notes added by autokernel for {commit}"),
            tree,
            previous,
        )
        .map_err(|e| self.ref_error(operation, &[NOTES_REF.to_string()], e))?;
        Ok(())
    }

    /// Makes `refs/autokernel/reverted/<n>` point at `commit` (a suffixed name when that ref
    /// already holds another commit, so nothing is overwritten).
    fn keep_reachable(
        &self,
        repo: &gix::Repository,
        n: u64,
        commit: ObjectId,
        operation: &str,
    ) -> Result<(), StoreError> {
        let mut name = format!("{REVERTED_PREFIX}{n}");
        let existing = repo
            .try_find_reference(name.as_str())
            .map_err(|e| self.git_error(operation, &name, e))?
            .and_then(|r| r.try_id().map(|i| i.detach()));
        match existing {
            Some(id) if id == commit => return Ok(()),
            Some(_) => name = format!("{name}-{}", &commit.to_string()[..12]),
            None => {}
        }
        let full =
            FullName::try_from(name.as_str()).map_err(|e| self.git_error(operation, &name, e))?;
        self.edit_refs(
            repo,
            vec![update(
                full,
                commit,
                PreviousValue::Any,
                &format!("autokernel: revert experiment {n}"),
            )],
            operation,
        )
    }

    fn commit_impl(&mut self, draft: &ExperimentDraft<'_>) -> Result<CommitId, StoreError> {
        let op = "commit";
        let target = &draft.target.id;
        if !Target::id_is_valid(target) {
            return Err(self.git_error(
                op,
                &self.branch_str(),
                format!("target id `{target}` cannot be a folder name (letters, digits, `-`, `_`)"),
            ));
        }
        let rel = kernel_relpath(target);
        let lock = self.index_lock(op)?;
        let repo = self.repo();
        let branch = self.branch_str();
        let err = |e: BoxError| self.git_error(op, &branch, e);
        let tip = self.branch_tip(&repo, op)?;
        let base = self.tree_of(&repo, tip, op)?;
        let tree = tree_with_file(&repo, base, rel.as_str(), draft.source).map_err(err)?;

        self.begin_write(&[format!("targets/{target}")])?;
        let path = self.workdir.join(&rel);
        let write = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, draft.source));
        if let Err(source) = write {
            self.restore_file(&repo, base, &rel);
            self.end_write()?;
            return Err(StoreError::Io { path, source });
        }
        let message = format_message(draft.experiment, target, draft.description, draft.agent);
        let sig = self.signature();
        let mut buf = gix::date::parse::TimeBuf::default();
        let sig_ref = sig.to_ref(&mut buf);
        let id = match repo.commit_as(sig_ref, sig_ref, self.branch.as_ref(), &message, tree, tip) {
            Ok(id) => id.detach(),
            Err(e) => {
                self.restore_file(&repo, base, &rel);
                self.end_write()?;
                return Err(self.ref_error(op, std::slice::from_ref(&branch), e));
            }
        };
        worktree::write_index(&repo, &self.workdir, tree, lock)
            .map_err(|e| tree_err(op, &self.workdir, &branch, e))?;
        self.end_write()?;
        tracing::debug!(experiment = draft.experiment, %target, commit = %id, "committed");
        Ok(to_commit_id(id))
    }

    /// Puts back `rel` as tree `base` holds it (or removes it), after a failed commit;
    /// nothing else in the work tree is touched.
    fn restore_file(&self, repo: &gix::Repository, base: ObjectId, rel: &str) {
        let restored = worktree::flatten(repo, base)
            .map_err(TreeError::from)
            .and_then(|map| {
                // `old` says "unknown content", so `apply` rewrites or removes just this path
                let mut old = TreeMap::new();
                old.insert(
                    rel.to_string(),
                    (
                        ObjectId::null(repo.object_hash()),
                        gix::objs::tree::EntryKind::Blob.into(),
                    ),
                );
                let mut new = TreeMap::new();
                if let Some(v) = map.get(rel) {
                    new.insert(rel.to_string(), *v);
                }
                worktree::apply(repo, &self.workdir, &old, &new, &[])
            });
        if let Err(e) = restored {
            tracing::warn!(path = rel, error = ?e, "cannot restore the file after a failed commit");
        }
    }

    fn keep_impl(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        let op = "keep";
        let Some(commit) = &record.commit else {
            return Ok(());
        };
        let id = self.parse_commit_id(&CommitId(commit.clone()), op)?;
        let repo = self.repo();
        // the branch must hold the kept commit; keep never moves it
        let mut on_branch = false;
        let mut next = self.branch_tip(&repo, op)?;
        while let Some(c) = next {
            if c == id {
                on_branch = true;
                break;
            }
            next = self.first_parent(&repo, c, op)?;
        }
        if !on_branch {
            return Err(self.git_error(op, &self.branch_str(), format!(
                "experiment {} (commit {commit}) is not on the run branch; was it reverted already?",
                record.experiment
            )));
        }
        self.write_note(&repo, id, &note_text(record), op)?;
        tracing::debug!(experiment = record.experiment, %commit, "kept");
        Ok(())
    }

    fn revert_impl(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        let op = "revert";
        let n = record.experiment;
        let lock = self.index_lock(op)?;
        let repo = self.repo();
        let branch = self.branch_str();
        let tip = self.branch_tip(&repo, op)?;
        // pop the experiment's commits off the tip (normally exactly one; none when the
        // revert already happened)
        let mut popped = Vec::new();
        let mut new_tip = tip;
        while let Some(c) = new_tip {
            let message = self.message_of(&repo, c, op)?;
            if parse_message(&message).map(|p| p.experiment) != Some(n) {
                break;
            }
            popped.push(c);
            new_tip = self.first_parent(&repo, c, op)?;
        }
        let recorded = match &record.commit {
            Some(c) => Some(self.parse_commit_id(&CommitId(c.clone()), op)?),
            None => None,
        };
        if let Some(c) = recorded {
            if !popped.contains(&c) {
                if !repo.has_object(c) {
                    return Err(self.git_error(
                        op,
                        &branch,
                        format!(
                            "experiment {n} names commit {c}, which the repository does not have"
                        ),
                    ));
                }
                // deeper on the branch: later kept experiments stay; say so
                let mut next = new_tip;
                while let Some(x) = next {
                    if x == c {
                        tracing::warn!(experiment = n, commit = %c, "experiment is not the branch tip; later commits stay on the branch");
                        break;
                    }
                    next = self.first_parent(&repo, x, op)?;
                }
            }
        }
        let mut keep: Vec<ObjectId> = popped.clone();
        if let Some(c) = recorded {
            if !keep.contains(&c) {
                keep.push(c);
            }
        }
        for c in &keep {
            self.keep_reachable(&repo, n, *c, op)?;
        }
        let scopes = vec![format!("targets/{}", record.target)];
        self.begin_write(&scopes)?;
        if !popped.is_empty() {
            let old = tip.expect("popped commits come from a tip");
            let edit = match new_tip {
                Some(to) => update(
                    self.branch.clone(),
                    to,
                    PreviousValue::MustExistAndMatch(RefTarget::Object(old)),
                    &format!("autokernel: revert experiment {n}"),
                ),
                None => RefEdit {
                    change: Change::Delete {
                        expected: PreviousValue::MustExistAndMatch(RefTarget::Object(old)),
                        log: RefLog::AndReference,
                    },
                    name: self.branch.clone(),
                    deref: false,
                },
            };
            self.edit_refs(&repo, vec![edit], op)?;
        }
        let old_tree = self.tree_of(&repo, tip, op)?;
        let new_tree = self.tree_of(&repo, new_tip, op)?;
        let old_map = self.flat(&repo, old_tree, op)?;
        let new_map = self.flat(&repo, new_tree, op)?;
        worktree::apply(&repo, &self.workdir, &old_map, &new_map, &scopes)
            .map_err(|e| tree_err(op, &self.workdir, &branch, e))?;
        worktree::write_index(&repo, &self.workdir, new_tree, lock)
            .map_err(|e| tree_err(op, &self.workdir, &branch, e))?;
        self.end_write()?;
        for c in &keep {
            self.write_note(&repo, *c, &note_text(record), op)?;
        }
        tracing::debug!(experiment = n, reverted = popped.len(), to = ?new_tip, "reverted");
        Ok(())
    }

    fn best_impl(&self, target: &Target) -> Result<Option<(CommitId, String)>, StoreError> {
        let op = "best";
        let repo = self.repo();
        let rel = kernel_relpath(&target.id);
        let Some(tip) = self.branch_tip(&repo, op)? else {
            return Ok(None);
        };
        let blob_at = |c: ObjectId| -> Result<Option<ObjectId>, StoreError> {
            let tree = repo
                .find_commit(c)
                .and_then(|c| c.tree())
                .map_err(|e| self.git_error(op, &c.to_string(), e))?;
            Ok(tree
                .lookup_entry_by_path(&rel)
                .map_err(|e| self.git_error(op, &c.to_string(), e))?
                .map(|e| e.object_id()))
        };
        let Some(blob) = blob_at(tip)? else {
            return Ok(None);
        };
        // the commit that introduced this content: walk back while the parent has it too
        let mut commit = tip;
        while let Some(parent) = self.first_parent(&repo, commit, op)? {
            if blob_at(parent)? != Some(blob) {
                break;
            }
            commit = parent;
        }
        let data = repo
            .find_blob(blob)
            .map_err(|e| self.git_error(op, &blob.to_string(), e))?
            .data
            .clone();
        let source = String::from_utf8(data).map_err(|_| {
            self.git_error(op, &commit.to_string(), format!("`{rel}` is not UTF-8"))
        })?;
        Ok(Some((to_commit_id(commit), source)))
    }

    fn reconcile_impl(
        &mut self,
        logged: &[ExperimentRecord],
    ) -> Result<Reconciliation, StoreError> {
        let op = "reconcile";
        let repo = self.repo();
        let numbers: HashSet<u64> = logged.iter().map(|r| r.experiment).collect();
        let mut out = Reconciliation::default();
        for c in self.all_experiment_commits(&repo, op)? {
            if !numbers.contains(&c.parsed.experiment) {
                out.unlogged.push(UnloggedExperiment {
                    experiment: c.parsed.experiment,
                    target: c.parsed.target,
                    commit: to_commit_id(c.id),
                    description: c.parsed.description,
                    agent: c.parsed.agent,
                });
            }
        }
        // newest first: reverting the tip first lets each revert pop its own commit
        out.unlogged
            .sort_by_key(|u| std::cmp::Reverse(u.experiment));
        for r in logged {
            let Some(commit) = &r.commit else { continue };
            if r.decision == Decision::Invalid {
                continue;
            }
            let resolves = ObjectId::from_hex(commit.as_bytes())
                .ok()
                .and_then(|id| repo.try_find_header(id).ok().flatten())
                .is_some_and(|h| h.kind() == gix::objs::Kind::Commit);
            if !resolves {
                out.missing_commits.push((r.experiment, commit.clone()));
            }
        }
        if !out.unlogged.is_empty() || !out.missing_commits.is_empty() {
            tracing::warn!(
                unlogged = out.unlogged.len(),
                missing = out.missing_commits.len(),
                "the repository and results.tsv disagree"
            );
        }
        Ok(out)
    }
}

struct FoundCommit {
    id: ObjectId,
    parent: Option<ObjectId>,
    message: String,
    parsed: ParsedMessage,
    kept: bool,
}

fn to_commit_id(id: ObjectId) -> CommitId {
    CommitId(id.to_string())
}

fn kernel_relpath(target: &str) -> String {
    format!("targets/{target}/kernel.py")
}

fn update(name: FullName, to: ObjectId, expected: PreviousValue, message: &str) -> RefEdit {
    RefEdit {
        change: Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: message.into(),
            },
            expected,
            new: RefTarget::Object(to),
        },
        name,
        deref: false,
    }
}

fn tree_err(operation: &str, repo: &Path, reference: &str, e: TreeError) -> StoreError {
    match e {
        TreeError::Io(path, source) => StoreError::Io { path, source },
        TreeError::Git(message) => StoreError::Git {
            operation: operation.into(),
            repo: repo.to_path_buf(),
            reference: reference.into(),
            source: message.into(),
        },
    }
}

#[async_trait]
impl VersionStore for GixStore {
    fn kernel_path(&self, target: &Target) -> PathBuf {
        self.workdir.join(target.kernel_relpath())
    }

    async fn commit(&mut self, draft: &ExperimentDraft<'_>) -> Result<CommitId, StoreError> {
        self.commit_impl(draft)
    }

    async fn keep(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        self.keep_impl(record)
    }

    async fn revert(&mut self, record: &ExperimentRecord) -> Result<(), StoreError> {
        self.revert_impl(record)
    }

    async fn best(&self, target: &Target) -> Result<Option<(CommitId, String)>, StoreError> {
        self.best_impl(target)
    }

    async fn reconcile(
        &mut self,
        logged: &[ExperimentRecord],
    ) -> Result<Reconciliation, StoreError> {
        self.reconcile_impl(logged)
    }

    /// Merges the notes under [`NOTES_REF`] ([`crate::merge_notes`]).
    async fn recall(&self, rows: &mut [ExperimentRecord]) -> Result<(), StoreError> {
        crate::merge_notes(rows, &crate::read_notes(&self.workdir)?);
        Ok(())
    }

    /// The verdicts of the notes under [`NOTES_REF`] ([`crate::kept_verdicts`]).
    async fn kept_verdicts(
        &self,
    ) -> Result<std::collections::BTreeMap<String, autokernel_core::KeptVerdict>, StoreError> {
        Ok(crate::kept_verdicts(&crate::read_notes(&self.workdir)?))
    }

    /// `None` when the repository lacks the commit (a row naming one it never had, or a
    /// history rewritten since).
    async fn source_at(
        &self,
        target_id: &str,
        commit: &CommitId,
    ) -> Result<Option<String>, StoreError> {
        let Ok(id) = ObjectId::from_hex(commit.0.as_bytes()) else {
            return Ok(None);
        };
        if !self.repo().has_object(id) {
            return Ok(None);
        }
        self.read_kernel(commit, target_id).map(Some)
    }
}

/// Writes the tree `base` with the file at `path` set to `text` (a blob written for it),
/// and returns the new tree's id: a commit's tree and a note's both are made so.
fn tree_with_file(
    repo: &gix::Repository,
    base: ObjectId,
    path: &str,
    text: &str,
) -> Result<ObjectId, BoxError> {
    let blob = repo.write_blob(text.as_bytes())?.detach();
    let mut editor = repo.edit_tree(base)?;
    editor.upsert(path, gix::objs::tree::EntryKind::Blob, blob)?;
    Ok(editor.write()?.detach())
}
