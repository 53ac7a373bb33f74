//! The work tree and the index: gix writes objects and refs only, so the store writes files
//! and the index itself, and checks that nobody else changed tracked files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;
use gix::objs::tree::EntryMode;
use gix::ObjectId;

/// Every non-tree entry of a tree, by slash-separated path relative to its root.
pub(crate) type TreeMap = BTreeMap<String, (ObjectId, EntryMode)>;

/// Lines written to `.git/info/exclude`: the workspace's own files that are not experiments.
pub const EXCLUDES: &[&str] = &[
    "/results.tsv",
    "/results.tsv.torn",
    "*.log",
    "/logs/",
    "/report.md",
    "/progress.png",
    "/modes.png",
    "/profiles/",
    "/traces/",
    "/autokernel.toml",
    "/program.md",
    "/plan.json",
    "/verify.json",
    "/.autokernel/",
    "__pycache__/",
    "*.pyc",
];

const EXCLUDE_HEADER: &str = "# autokernel: workspace files that are not experiments";

/// Flattens tree `id` into a [`TreeMap`].
pub(crate) fn flatten(repo: &gix::Repository, id: ObjectId) -> Result<TreeMap, gix::Error> {
    fn walk(
        repo: &gix::Repository,
        id: ObjectId,
        prefix: &str,
        out: &mut TreeMap,
    ) -> Result<(), gix::Error> {
        let tree = repo.find_tree(id)?;
        let entries: Vec<(String, ObjectId, EntryMode)> = tree
            .decode()?
            .entries
            .iter()
            .map(|e| {
                (
                    e.filename.to_str_lossy().into_owned(),
                    e.oid.to_owned(),
                    e.mode,
                )
            })
            .collect();
        for (name, oid, mode) in entries {
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if mode.is_tree() {
                walk(repo, oid, &path, out)?;
            } else {
                out.insert(path, (oid, mode));
            }
        }
        Ok(())
    }
    let mut out = TreeMap::new();
    walk(repo, id, "", &mut out)?;
    Ok(out)
}

/// Errors of work-tree writes: the path and what failed.
#[derive(Debug)]
pub(crate) enum TreeError {
    Io(PathBuf, std::io::Error),
    Git(String),
}

impl From<gix::Error> for TreeError {
    fn from(e: gix::Error) -> Self {
        TreeError::Git(e.to_string())
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |e| TreeError::Io(path.to_path_buf(), e)
}

/// The bytes git would store for the file at `path`: its content, or a symlink's target.
fn disk_bytes(path: &Path) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        Ok(std::fs::read_link(path)?
            .as_os_str()
            .as_encoded_bytes()
            .to_vec())
    } else {
        std::fs::read(path)
    }
}

/// Writes blob `id` to `workdir/rel` with `mode`, unless the file already holds it.
fn checkout_file(
    repo: &gix::Repository,
    workdir: &Path,
    rel: &str,
    id: ObjectId,
    mode: EntryMode,
) -> Result<(), TreeError> {
    if mode.is_commit() {
        return Ok(()); // a submodule: nothing of ours
    }
    let path = workdir.join(rel);
    let blob = repo.find_blob(id)?;
    let data = &blob.data;
    let is_link = mode.is_link();
    let same = std::fs::symlink_metadata(&path)
        .is_ok_and(|m| m.file_type().is_symlink() == is_link)
        && disk_bytes(&path).is_ok_and(|b| b == *data);
    if !same {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).map_err(io(&path))?,
            Ok(_) => std::fs::remove_file(&path).map_err(io(&path))?,
            Err(_) => {}
        }
        if is_link {
            use std::os::unix::ffi::OsStrExt;
            let target = std::ffi::OsStr::from_bytes(data);
            std::os::unix::fs::symlink(target, &path).map_err(io(&path))?;
        } else {
            std::fs::write(&path, data).map_err(io(&path))?;
        }
    }
    if !is_link {
        use std::os::unix::fs::PermissionsExt;
        let want = if mode.is_executable() { 0o755 } else { 0o644 };
        let meta = std::fs::metadata(&path).map_err(io(&path))?;
        if meta.permissions().mode() & 0o111 != want & 0o111 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(want))
                .map_err(io(&path))?;
        }
    }
    Ok(())
}

/// Removes `workdir/rel` and then its parents while they are empty (never `workdir`).
fn remove_file_and_empty_parents(workdir: &Path, rel: &str) -> Result<(), TreeError> {
    let path = workdir.join(rel);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).map_err(io(&path))?,
        Ok(_) => std::fs::remove_file(&path).map_err(io(&path))?,
        Err(_) => {}
    }
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == workdir || !d.starts_with(workdir) {
            break;
        }
        // fails when not empty: that ends the climb
        if std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// Every file and symlink under `workdir/scope`, as workspace-relative slash paths.
fn files_under(workdir: &Path, scope: &str) -> Result<Vec<String>, TreeError> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), TreeError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(TreeError::Io(dir.to_path_buf(), e)),
        };
        for entry in entries {
            let entry = entry.map_err(io(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = format!("{rel}/{name}");
            let kind = entry.file_type().map_err(io(dir))?;
            if kind.is_dir() {
                walk(&entry.path(), &child, out)?;
            } else {
                out.push(child);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&workdir.join(scope), scope, &mut out)?;
    Ok(out)
}

/// Makes the work tree match `new` where it differs from `old` (the tree the work tree was
/// at), and makes every folder in `scopes` match `new` exactly: files there that `new` does
/// not hold are removed (an experiment's stray files), the others rewritten byte for byte.
pub(crate) fn apply(
    repo: &gix::Repository,
    workdir: &Path,
    old: &TreeMap,
    new: &TreeMap,
    scopes: &[String],
) -> Result<(), TreeError> {
    let paths: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for path in paths {
        match (old.get(path), new.get(path)) {
            (a, Some(b)) if a != Some(b) => checkout_file(repo, workdir, path, b.0, b.1)?,
            (Some(_), None) => remove_file_and_empty_parents(workdir, path)?,
            _ => {}
        }
    }
    for scope in scopes {
        for rel in files_under(workdir, scope)? {
            if !new.contains_key(&rel) {
                tracing::debug!(path = %rel, "removing a file the experiment left behind");
                remove_file_and_empty_parents(workdir, &rel)?;
            }
        }
        let prefix = format!("{scope}/");
        for (rel, (id, mode)) in new.range(prefix.clone()..) {
            if !rel.starts_with(&prefix) {
                break;
            }
            checkout_file(repo, workdir, rel, *id, *mode)?;
        }
    }
    Ok(())
}

/// Builds the index of tree `tree` with the work tree's stat data (so `git status` need not
/// rehash) and writes it through `lock`, which it commits.
pub(crate) fn write_index(
    repo: &gix::Repository,
    workdir: &Path,
    tree: ObjectId,
    mut lock: gix::lock::File,
) -> Result<(), TreeError> {
    let mut index = repo.index_from_tree(&tree)?;
    {
        let (entries, backing) = index.entries_mut_and_pathbacking();
        for entry in entries {
            let rel = entry.path_in(backing).to_str_lossy().into_owned();
            let path = workdir.join(&rel);
            if let Ok(meta) = gix::index::fs::Metadata::from_path_no_follow(&path) {
                if let Ok(stat) = gix::index::entry::Stat::from_fs(&meta) {
                    entry.stat = stat;
                }
            }
        }
    }
    index
        .write_to(&mut lock, gix::index::write::Options::default())
        .map_err(|e| TreeError::Git(format!("cannot write the index: {e}")))?;
    lock.commit()
        .map_err(|e| TreeError::Git(format!("cannot commit the index lock: {}", e.error)))?;
    Ok(())
}

/// Tracked paths whose work-tree content differs from `head` (`modified`/`deleted`), and
/// index entries that differ from `head` (`staged`). Empty when the work tree is clean.
pub(crate) fn changes_against(
    repo: &gix::Repository,
    workdir: &Path,
    head: &TreeMap,
) -> Result<Vec<String>, TreeError> {
    let mut changes = Vec::new();
    for (rel, (id, mode)) in head {
        if mode.is_commit() {
            continue;
        }
        let path = workdir.join(rel);
        match disk_bytes(&path) {
            Ok(bytes) => {
                let hash =
                    gix::objs::compute_hash(repo.object_hash(), gix::objs::Kind::Blob, &bytes)
                        .map_err(|e| TreeError::Git(e.to_string()))?;
                if hash != *id {
                    changes.push(format!("modified: {rel}"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                changes.push(format!("deleted: {rel}"));
            }
            Err(e) => return Err(TreeError::Io(path, e)),
        }
    }
    if repo.index_path().exists() {
        let index = repo.open_index()?;
        let mut staged: BTreeMap<String, ObjectId> = BTreeMap::new();
        for entry in index.entries() {
            staged.insert(entry.path(&index).to_str_lossy().into_owned(), entry.id);
        }
        for (rel, id) in &staged {
            if head.get(rel).map(|(h, _)| h) != Some(id) {
                changes.push(format!("staged: {rel}"));
            }
        }
        for rel in head.keys() {
            if !staged.contains_key(rel) {
                changes.push(format!("staged for removal: {rel}"));
            }
        }
    }
    Ok(changes)
}

/// Adds the [`EXCLUDES`] lines missing from `git_dir/info/exclude` (idempotent).
pub(crate) fn write_excludes(git_dir: &Path) -> Result<(), TreeError> {
    let info = git_dir.join("info");
    std::fs::create_dir_all(&info).map_err(io(&info))?;
    let path = info.join("exclude");
    let current = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(TreeError::Io(path, e)),
    };
    let present: BTreeSet<&str> = current.lines().map(str::trim).collect();
    let missing: Vec<&str> = EXCLUDES
        .iter()
        .copied()
        .filter(|l| !present.contains(l))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut text = current.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if !present.contains(EXCLUDE_HEADER) {
        text.push_str(EXCLUDE_HEADER);
        text.push('\n');
    }
    for line in missing {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&path, text).map_err(io(&path))
}
