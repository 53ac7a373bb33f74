//! Choosing the Python interpreter and checking it can host the worker.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::WorkerError;

/// Environment variable naming the interpreter (after `--python`).
pub(crate) const ENV_PYTHON: &str = "AUTOKERNEL_PYTHON";

/// The interpreter to adopt: `explicit` (`--python`), else `$AUTOKERNEL_PYTHON`, else
/// `$VIRTUAL_ENV/bin/python`, else `python3` on `PATH`.
///
/// `--python` and `AUTOKERNEL_PYTHON` take a path (any value with a `/`, relative to the
/// current folder or absolute) or a command name, looked up in the folders of `PATH` in
/// order as a shell does (`python3`, `python3.12`). The first executable file found is
/// returned as it was reached, without following symlinks, so that a venv's `bin/python`
/// keeps the venv it belongs to.
///
/// An interpreter the user named (`explicit`, or `AUTOKERNEL_PYTHON` when `explicit` is
/// `None`) is the only one considered: when it cannot be found the answer is an error, never
/// another interpreter found further down the list.
///
/// # Errors
/// [`WorkerError::PythonMissing`] when the named interpreter is not an executable file (or,
/// for a name, not on `PATH`), with each place tried and why it was passed over;
/// [`WorkerError::PythonNotFound`] when nothing was named and neither `$VIRTUAL_ENV`'s
/// python nor `python3` on `PATH` is usable, likewise with what was tried.
pub fn resolve_python(explicit: Option<&Path>) -> Result<PathBuf, WorkerError> {
    resolve_python_with(explicit, |name| std::env::var_os(name))
}

/// [`resolve_python`] with the environment read through `var`.
fn resolve_python_with(
    explicit: Option<&Path>,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, WorkerError> {
    let named = match explicit {
        Some(p) => Some((p.to_path_buf(), "--python")),
        None => var(ENV_PYTHON)
            .filter(|v| !v.is_empty())
            .map(|p| (PathBuf::from(p), ENV_PYTHON)),
    };
    let path_var = var("PATH");
    if let Some((value, origin)) = named {
        // the user chose this interpreter: falling back to another one would run their
        // model under a torch they did not pick, and blame that one in any error
        return match find_interpreter(&value, path_var.as_deref()) {
            Ok(path) => {
                tracing::debug!(python = %path.display(), origin, "python chosen");
                Ok(path)
            }
            Err(reason) => Err(WorkerError::PythonMissing {
                path: value,
                origin,
                reason,
            }),
        };
    }
    let mut tried = Vec::new();
    if let Some(venv) = var("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(venv).join("bin").join("python");
        match unusable(&p) {
            None => return Ok(p),
            Some(why) => tried.push(format!("`{}` (from VIRTUAL_ENV): {why}", p.display())),
        }
    }
    match search_path(OsStr::new("python3"), path_var.as_deref()) {
        Ok(p) => Ok(p),
        Err(on_path) if on_path.is_empty() => {
            tried.push("`python3` on PATH: PATH is empty or not set".into());
            Err(WorkerError::PythonNotFound {
                tried: tried.join("\n  "),
            })
        }
        Err(on_path) => {
            tried.extend(on_path);
            Err(WorkerError::PythonNotFound {
                tried: tried.join("\n  "),
            })
        }
    }
}

/// `value` as a path when it holds a `/`, else as a command name looked up on `path_var`.
///
/// # Errors
/// Why nothing usable was found: the path's problem (`does not exist`), or `is not on PATH`
/// followed by one line per folder tried.
fn find_interpreter(value: &Path, path_var: Option<&OsStr>) -> Result<PathBuf, String> {
    if value.as_os_str().as_bytes().contains(&b'/') {
        return match unusable(value) {
            None => Ok(value.to_path_buf()),
            Some(why) => Err(why),
        };
    }
    search_path(value.as_os_str(), path_var).map_err(|tried| {
        if tried.is_empty() {
            "is not on PATH (PATH is empty or not set)".to_string()
        } else {
            format!("is not on PATH; tried:\n  {}", tried.join("\n  "))
        }
    })
}

/// The first executable file named `name` in the folders of `path_var`, in order (as the
/// shell's lookup). Empty entries, which POSIX reads as the current folder, are skipped: a
/// `python3` dropped in whatever folder autokernel was started from must not be adopted.
///
/// # Errors
/// One `` `candidate`: why `` line per folder tried.
fn search_path(name: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, Vec<String>> {
    let mut tried = Vec::new();
    for dir in path_var.map(std::env::split_paths).into_iter().flatten() {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let candidate = dir.join(name);
        match unusable(&candidate) {
            None => return Ok(candidate),
            Some(why) => tried.push(format!("`{}`: {why}", candidate.display())),
        }
    }
    Err(tried)
}

/// Why `path` cannot be run as an interpreter, or `None` when it is an executable file
/// (symlinks followed, as `exec` follows them).
fn unusable(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Some("is a folder, not an interpreter".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Some("is not executable".into()),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                Some("is a symlink to nothing".into())
            } else {
                Some("does not exist".into())
            }
        }
        Err(e) => Some(format!("cannot be read ({e})")),
    }
}

/// `major.minor` of the libpython this crate was built against (from pyo3's build config).
pub fn linked_python_version() -> &'static str {
    env!("AUTOKERNEL_LINKED_PYTHON")
}

/// Runs `python` once (no torch import: `importlib.util.find_spec` only) to check its
/// minor version against the linked libpython and that torch, triton and numpy exist.
///
/// # Errors
/// [`WorkerError::PythonProbe`], [`WorkerError::PythonMismatch`],
/// [`WorkerError::MissingPackages`].
pub(crate) fn preflight(python: &Path) -> Result<PathBuf, WorkerError> {
    const PROBE: &str = "import sys, importlib.util as u\n\
print('%d.%d' % sys.version_info[:2])\n\
print(' '.join(m for m in ('torch', 'triton', 'numpy') if u.find_spec(m) is None))\n\
print(sys.executable)";
    let out = Command::new(python)
        .args(["-c", PROBE])
        .output()
        .map_err(|e| WorkerError::PythonProbe {
            path: python.to_path_buf(),
            message: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(WorkerError::PythonProbe {
            path: python.to_path_buf(),
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let found = lines.next().unwrap_or_default().trim().to_string();
    if found.is_empty() {
        return Err(WorkerError::PythonProbe {
            path: python.to_path_buf(),
            message: "it printed no version: is it a Python interpreter?".into(),
        });
    }
    let linked = linked_python_version();
    if found != linked {
        return Err(WorkerError::PythonMismatch {
            path: python.to_path_buf(),
            found,
            linked: linked.to_string(),
        });
    }
    let missing: Vec<String> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !missing.is_empty() {
        return Err(WorkerError::MissingPackages {
            path: python.to_path_buf(),
            missing,
        });
    }
    Ok(adopted_interpreter(python, lines.next()))
}

/// The interpreter the worker adopts for `python`: `python` itself, unless it is a script
/// (`#!`: a wrapper that `exec`s a Python, a pyenv shim), whose path would make the
/// embedded CPython look for its packages beside the script; then the `sys.executable` it
/// reported, the Python it ran.
fn adopted_interpreter(python: &Path, reported: Option<&str>) -> PathBuf {
    let is_script = std::fs::File::open(python)
        .and_then(|mut f| {
            let mut head = [0u8; 2];
            std::io::Read::read_exact(&mut f, &mut head).map(|()| head == *b"#!")
        })
        .unwrap_or(false);
    match reported.map(str::trim).filter(|r| !r.is_empty()) {
        Some(real) if is_script && Path::new(real).is_file() => {
            tracing::debug!(script = %python.display(), python = real, "the interpreter is a script: adopting the Python it runs");
            PathBuf::from(real)
        }
        _ => python.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that runs but prints no version (`AUTOKERNEL_PYTHON=/usr/bin/true`) is
    /// named as not being a Python, not reported as "python at … is , but …".
    #[test]
    fn a_program_that_prints_no_version_is_not_taken_for_a_python() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let err = preflight(&fake).unwrap_err().to_string();
        assert!(
            err.contains("printed no version: is it a Python interpreter?"),
            "{err}"
        );
    }

    #[test]
    fn an_explicit_path_that_does_not_exist_is_refused_with_its_name() {
        let err = resolve_python(Some(Path::new("/no/such/python"))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("python `/no/such/python` (from --python) does not exist"),
            "{err}"
        );
    }

    /// An executable file at `path` (a shell script), its folder created.
    fn executable(path: &Path) -> PathBuf {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path.to_path_buf()
    }

    /// `dirs` joined as a PATH value.
    fn path_of(dirs: &[&Path]) -> std::ffi::OsString {
        std::env::join_paths(dirs).unwrap()
    }

    /// A broken AUTOKERNEL_PYTHON is refused in its own name, not replaced by the python3
    /// on PATH (which `profile` and `run` used to adopt, then blame for lacking torch).
    #[test]
    fn a_missing_autokernel_python_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let python3 = executable(&dir.path().join("python3"));
        let env = |name: &str| match name {
            ENV_PYTHON => Some("/nonexistent/python".into()),
            "PATH" => Some(dir.path().as_os_str().to_owned()),
            _ => None,
        };
        let err = resolve_python_with(None, env).unwrap_err();
        assert!(matches!(err, WorkerError::PythonMissing { .. }), "{err}");
        assert!(
            err.to_string().starts_with(
                "python `/nonexistent/python` (from AUTOKERNEL_PYTHON) does not exist"
            ),
            "{err}"
        );
        // --python wins over the variable, and is named as the source
        let err = resolve_python_with(Some(Path::new("/no/flag/python")), env).unwrap_err();
        assert!(err.to_string().contains("(from --python)"), "{err}");
        let found = resolve_python_with(Some(&python3), env).unwrap();
        assert_eq!(found, python3);
        // nothing named: python3 on PATH
        let unnamed = |name: &str| if name == "PATH" { env(name) } else { None };
        assert_eq!(resolve_python_with(None, unnamed).unwrap(), python3);
    }

    /// `AUTOKERNEL_PYTHON=mypython` (no slash) is a command name: the first folder of PATH
    /// holding an executable `mypython` gives it, as the symlink found there (not its
    /// target, which may lie outside the venv); a folder before it that lacks the file, or
    /// holds one that cannot be run, is passed over. `--python NAME` behaves the same.
    #[test]
    fn a_name_is_looked_up_on_path_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (empty, not_exec, found, later) = (
            dir.path().join("empty"),
            dir.path().join("not_exec"),
            dir.path().join("found"),
            dir.path().join("later"),
        );
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::create_dir_all(&not_exec).unwrap();
        std::fs::write(not_exec.join("mypython"), "#!/bin/sh\n").unwrap();
        let target = executable(&dir.path().join("elsewhere/python3.11"));
        std::fs::create_dir_all(&found).unwrap();
        std::os::unix::fs::symlink(&target, found.join("mypython")).unwrap();
        executable(&later.join("mypython"));
        let path = path_of(&[&empty, &not_exec, &found, &later]);
        let env = |name: &str| match name {
            ENV_PYTHON => Some("mypython".into()),
            "PATH" => Some(path.clone()),
            _ => None,
        };
        assert_eq!(
            resolve_python_with(None, env).unwrap(),
            found.join("mypython")
        );
        let flag_only = |name: &str| if name == "PATH" { env(name) } else { None };
        assert_eq!(
            resolve_python_with(Some(Path::new("mypython")), flag_only).unwrap(),
            found.join("mypython")
        );
    }

    /// A name found nowhere on PATH is refused with each folder's candidate and why it was
    /// passed over, in PATH order; the python3 that is on PATH is not taken instead. A
    /// value with a slash is a path and is not looked up on PATH.
    #[test]
    fn a_missing_name_lists_what_was_tried() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("mypython")).unwrap();
        std::fs::create_dir_all(&c).unwrap();
        std::fs::write(c.join("mypython"), "not executable\n").unwrap();
        executable(&c.join("python3"));
        let path = path_of(&[&a, &b, &c]);
        let env = |name: &str| match name {
            ENV_PYTHON => Some("mypython".into()),
            "PATH" => Some(path.clone()),
            _ => None,
        };
        let err = resolve_python_with(None, env).unwrap_err();
        assert!(matches!(err, WorkerError::PythonMissing { .. }), "{err}");
        let expected = format!(
            "python `mypython` (from AUTOKERNEL_PYTHON) is not on PATH; tried:\n  \
             `{}/mypython`: does not exist\n  \
             `{}/mypython`: is a folder, not an interpreter\n  \
             `{}/mypython`: is not executable\nhint: ",
            a.display(),
            b.display(),
            c.display()
        );
        assert!(err.to_string().starts_with(&expected), "{err}");

        // with a slash it is a path, relative to the current folder: not looked up on PATH
        let err = resolve_python_with(Some(Path::new("no-such-dir/python3")), env).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("python `no-such-dir/python3` (from --python) does not exist"),
            "{err}"
        );

        // nothing named and nothing usable: every candidate, with its reason
        let venv = dir.path().join("venv");
        let unnamed = |name: &str| match name {
            "VIRTUAL_ENV" => Some(venv.clone().into_os_string()),
            "PATH" => Some(path_of(&[&a, &b])),
            _ => None,
        };
        let err = resolve_python_with(None, unnamed).unwrap_err();
        assert!(matches!(err, WorkerError::PythonNotFound { .. }), "{err}");
        let expected = format!(
            "no python interpreter found; tried:\n  \
             `{}/bin/python` (from VIRTUAL_ENV): does not exist\n  \
             `{}/python3`: does not exist\n  \
             `{}/python3`: does not exist\nhint: ",
            venv.display(),
            a.display(),
            b.display()
        );
        assert!(err.to_string().starts_with(&expected), "{err}");
        let err = resolve_python_with(None, |_| None).unwrap_err();
        assert!(
            err.to_string()
                .contains("`python3` on PATH: PATH is empty or not set"),
            "{err}"
        );
    }

    #[test]
    fn a_script_reporting_another_minor_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        std::fs::write(&fake, "#!/bin/sh\necho 2.7\necho\n").unwrap();
        let mut perms = std::fs::metadata(&fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&fake, perms).unwrap();
        let err = preflight(&fake).unwrap_err();
        assert!(matches!(err, WorkerError::PythonMismatch { .. }), "{err}");
        assert!(err.to_string().contains("is 2.7"), "{err}");
        assert!(err.to_string().contains(linked_python_version()), "{err}");
    }

    #[test]
    fn missing_packages_are_named_with_the_install_command() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("python");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho {}\necho triton numpy\n",
                linked_python_version()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&fake).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&fake, perms).unwrap();
        let err = preflight(&fake).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("lacks triton, numpy"), "{text}");
        assert!(
            text.contains("-m pip install -r python/requirements.txt"),
            "{text}"
        );
    }

    /// A wrapper script (a pyenv shim, `exec …/python "$@"`) passes the probe through the
    /// Python it runs; the worker adopts that Python (its `sys.executable`), not the
    /// script, whose folder has no packages (seen: `No module named 'numpy'` at start).
    #[test]
    fn a_wrapper_script_is_replaced_by_the_python_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real-python");
        std::fs::write(&real, b"\x7fELF not really").unwrap();
        let wrapper = dir.path().join("python");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho {}\necho\necho {}\n",
                linked_python_version(),
                real.display()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&wrapper, perms).unwrap();
        assert_eq!(preflight(&wrapper).unwrap(), real);
        // a binary is adopted as named, whatever it reports (a venv's python reports itself)
        assert_eq!(
            adopted_interpreter(&real, Some("/usr/bin/python3")),
            real,
            "not a script"
        );
        // a script that reports nothing usable is kept as named
        assert_eq!(adopted_interpreter(&wrapper, Some("")), wrapper);
    }
}
