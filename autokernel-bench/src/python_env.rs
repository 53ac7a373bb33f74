//! Choosing the Python interpreter and checking it can host the worker.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::WorkerError;

/// Environment variable naming the interpreter (after `--python`).
pub(crate) const ENV_PYTHON: &str = "AUTOKERNEL_PYTHON";

/// The interpreter to adopt: `explicit` (`--python`), else `$AUTOKERNEL_PYTHON`, else
/// `$VIRTUAL_ENV/bin/python`, else `python3` on `PATH`.
///
/// An interpreter the user named (`explicit`, or `AUTOKERNEL_PYTHON` when `explicit` is
/// `None`) is the only one considered: when it does not exist the answer is an error, never
/// another interpreter found further down the list.
///
/// # Errors
/// [`WorkerError::PythonMissing`] when the named interpreter does not exist;
/// [`WorkerError::PythonNotFound`] when nothing was named and neither `$VIRTUAL_ENV`'s
/// python nor `python3` on `PATH` exists.
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
    if let Some((path, origin)) = named {
        if path.exists() {
            tracing::debug!(python = %path.display(), origin, "python chosen");
            return Ok(path);
        }
        // the user chose this interpreter: falling back to another one would run their
        // model under a torch they did not pick, and blame that one in any error
        return Err(WorkerError::PythonMissing { path, origin });
    }
    let mut tried = Vec::new();
    if let Some(venv) = var("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(venv).join("bin").join("python");
        if p.exists() {
            return Ok(p);
        }
        tried.push(format!("VIRTUAL_ENV python `{}`", p.display()));
    }
    if let Some(paths) = var("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join("python3");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    tried.push("`python3` on PATH".to_string());
    Err(WorkerError::PythonNotFound {
        tried: tried.join(", "),
    })
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
pub(crate) fn preflight(python: &Path) -> Result<(), WorkerError> {
    const PROBE: &str = "import sys, importlib.util as u\n\
print('%d.%d' % sys.version_info[:2])\n\
print(' '.join(m for m in ('torch', 'triton', 'numpy') if u.find_spec(m) is None))";
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
    Ok(())
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

    /// A broken AUTOKERNEL_PYTHON is refused in its own name, not replaced by the python3
    /// on PATH (which `profile` and `run` used to adopt, then blame for lacking torch).
    #[test]
    fn a_missing_autokernel_python_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let python3 = dir.path().join("python3");
        std::fs::write(&python3, "#!/bin/sh\n").unwrap();
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
}
