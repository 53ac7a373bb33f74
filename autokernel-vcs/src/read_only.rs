//! Reading a workspace's history without taking it: what reports and verification need
//! while a run may own the workspace (the store's own methods take its owner lock).

use std::path::Path;

use autokernel_core::{CommitId, StoreError};

/// The `targets/<target>/kernel.py` that `commit` holds in the workspace's repository, read
/// without taking the workspace; `None` when the commit has no such file.
///
/// # Errors
/// [`StoreError::Git`] when the repository, the commit or the blob cannot be read, or the
/// file is not UTF-8.
pub fn read_kernel_at(
    workspace: &Path,
    commit: &CommitId,
    target: &str,
) -> Result<Option<String>, StoreError> {
    let err = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Git {
        operation: "read kernel".into(),
        repo: workspace.to_path_buf(),
        reference: commit.0.clone(),
        source: e,
    };
    let repo =
        gix::open_opts(workspace, gix::open::Options::isolated()).map_err(|e| err(e.into()))?;
    let id = gix::ObjectId::from_hex(commit.0.as_bytes()).map_err(|e| err(e.into()))?;
    let tree = repo
        .find_commit(id)
        .map_err(|e| err(e.into()))?
        .tree()
        .map_err(|e| err(e.into()))?;
    let rel = format!("targets/{target}/kernel.py");
    let Some(entry) = tree.lookup_entry_by_path(&rel).map_err(|e| err(e.into()))? else {
        return Ok(None);
    };
    let blob = repo
        .find_blob(entry.object_id())
        .map_err(|e| err(e.into()))?;
    String::from_utf8(blob.data.clone())
        .map(Some)
        .map_err(|_| err(format!("`{rel}` at {commit} is not UTF-8").into()))
}
