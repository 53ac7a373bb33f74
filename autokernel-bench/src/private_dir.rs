//! A folder under the temporary directory that only the current user can write to.
//!
//! Python imports the files autokernel writes there (the harness, the profiling script, the
//! example models), and the bench worker puts the folder first on `sys.path`. A folder that
//! another user could write to would let them plant a module (`torch.py`) that runs as the
//! user of autokernel. The names are predictable (they are reused across runs, so that a
//! cache of scripts survives), so the folder is checked rather than trusted: it must be a
//! real folder (not a link), owned by the current user and writable by no one else.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `$TMPDIR/autokernel-<uid>/<name>` (`std::env::temp_dir`; `/tmp` when that is empty or
/// relative), created with mode 0700 where missing; see [`private_dir_in`] for the checks.
///
/// # Errors
/// A message naming the folder and what to do, as [`private_dir_in`].
pub fn private_temp_dir(name: &str) -> Result<PathBuf, String> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    // an empty or relative TMPDIR would put the folder (first on sys.path) wherever the
    // command runs: as Python's tempfile does, take the system's default instead
    let tmp = Some(std::env::temp_dir())
        .filter(|t| t.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let root = private_dir_in(&tmp, &format!("autokernel-{uid}"))?;
    private_dir_in(&root, name)
}

/// `base/name`, created with mode 0700 if it does not exist, and checked: a folder (not a
/// symbolic link) owned by the current user that neither group nor others can write to.
/// A folder of the user's that others cannot write to but can read is narrowed to 0700.
///
/// # Errors
/// A message naming the folder, its owner and mode, and what to do (remove it, or set
/// `TMPDIR` to a folder of one's own), when a check fails or the folder cannot be created.
pub fn private_dir_in(base: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = base.join(name);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create `{}`: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| format!("cannot inspect `{}`: {e}", dir.display()))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mode = meta.mode() & 0o7777;
    if !meta.is_dir() || meta.uid() != uid || mode & 0o022 != 0 {
        let what = if meta.file_type().is_symlink() {
            "a symbolic link".to_string()
        } else if !meta.is_dir() {
            "not a folder".to_string()
        } else {
            format!("owned by uid {}, mode {mode:o}", meta.uid())
        };
        return Err(format!(
            "`{}` is {what}: another user could put Python modules there that autokernel \
             would import. Remove it, or set TMPDIR to a folder of your own",
            dir.display()
        ));
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make `{}` private (mode 700): {e}", dir.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_new_folder_is_created_private_and_reused() {
        let base = tempfile::tempdir().unwrap();
        let dir = private_dir_in(base.path(), "cache").unwrap();
        assert_eq!(dir, base.path().join("cache"));
        assert_eq!(mode_of(&dir), 0o700);
        std::fs::write(dir.join("kept.py"), "x = 1").unwrap();
        assert_eq!(private_dir_in(base.path(), "cache").unwrap(), dir);
        assert!(dir.join("kept.py").exists(), "reuse keeps the cache");
    }

    #[test]
    fn a_folder_others_can_write_to_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir_in(base.path(), "open").unwrap_err();
        assert!(err.contains("mode 777") && err.contains("TMPDIR"), "{err}");
        assert_eq!(mode_of(&dir), 0o777, "left as it was");
    }

    #[test]
    fn a_readable_folder_of_ones_own_is_narrowed_to_0700() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("old");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir_in(base.path(), "old").unwrap();
        assert_eq!(mode_of(&dir), 0o700);
    }

    #[test]
    fn a_symbolic_link_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let target = base.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, base.path().join("link")).unwrap();
        let err = private_dir_in(base.path(), "link").unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
    }

    #[test]
    #[allow(clippy::print_stderr)] // says why it did not run, where it cannot
    fn a_folder_of_another_user_is_refused() {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            eprintln!("skipped: giving a folder to another user needs root (CI runs as root)");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("theirs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let err = private_dir_in(base.path(), "theirs").unwrap_err();
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}
