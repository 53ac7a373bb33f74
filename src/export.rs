//! `autokernel export`: a workspace's verified kernels as an installable Python package
//! with one entry point, `optimize(model)`, that a user's own code imports (neither
//! autokernel's binary nor its worker needed). See `docs/deploy.md`.
//!
//! What is exported is what the last verification put into the model: its `included`
//! targets, each kernel as verified (the verification's digest of every `kernel.py` must
//! still hold), with the target's parameters, shapes and dtype, in a `manifest.json` the
//! package reads. The package ships the same plugs (`plugs.py`), call-site matcher
//! (`call_sites.py`) and operators (`kernel_ops.py` with the catalogue) that verification
//! uses, and `deploy.py`, which installs them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use autokernel_core::Target;
use serde_json::json;

use crate::verification::{file_sha256, Excluded, Verification};
use crate::workspace::Workspace;

/// The exported package's `__init__.py`: `optimize` bound to the package's manifest.
pub const PACKAGE_INIT_PY: &str = include_str!("../python/package_init.py");

/// The manifest's format; `deploy.py` reads this one.
pub const MANIFEST_FORMAT: u32 = 1;

/// What to export, and where.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExportOptions {
    /// The folder to write the package project into (its `pyproject.toml` at the top).
    pub out: PathBuf,
    /// The Python package name; default `autokernel_<model>` ([`default_package_name`]).
    pub name: Option<String>,
    /// Replace `out` when it holds an earlier export (never another folder).
    pub force: bool,
}

impl ExportOptions {
    /// Export into `out` under the default name, refusing an existing folder.
    pub fn new(out: impl Into<PathBuf>) -> Self {
        ExportOptions {
            out: out.into(),
            name: None,
            force: false,
        }
    }

    /// The package name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Whether an earlier export in `out` may be replaced.
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }
}

/// What [`export`] wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Exported {
    /// The Python package name (`import <package>`).
    pub package: String,
    /// The project folder (`pip install <dir>`).
    pub dir: PathBuf,
    /// The targets whose kernels the package installs, in plan order.
    pub targets: Vec<String>,
    /// The plan's targets left out of the model by the verification, with its reasons.
    pub left_out: Vec<Excluded>,
}

/// The package name when none is given: `autokernel_` and the model's class or example
/// name in lower case (`autokernel_gpt2lmheadmodel`), or `autokernel_kernels` for a
/// workspace without a model.
pub fn default_package_name(ws: &Workspace) -> String {
    let slug: String = ws
        .settings
        .model
        .as_ref()
        .map(|m| m.slug().replace('-', "_"))
        .unwrap_or_default();
    if slug.is_empty() {
        "autokernel_kernels".into()
    } else {
        format!("autokernel_{slug}")
    }
}

/// Whether `name` can be a Python package name that `import` takes: an ASCII identifier
/// that is not a keyword. (ASCII only: pip's normalised project names are, too.)
fn valid_package_name(name: &str) -> bool {
    const KEYWORDS: [&str; 35] = [
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
        "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
        "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
        "try", "while", "with", "yield",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name)
}

/// The targets the verification put into the model, checked to be the kernels it saw. A
/// verification cut short ([`Verification::cut_short`]) serves as a whole one does: its
/// `included` kernels were decided (checked alone and together), and a warning says it was
/// cut short.
///
/// # Errors
/// No plan or no verification; a failed verification; a `kernel.py` changed since it (or
/// a `verify.json` too old to tell); a verification that plugged in no kernel. Each error
/// says which command to run.
pub fn verified_targets(ws: &Workspace) -> anyhow::Result<(Vec<Target>, Verification)> {
    let dir = ws.root.display();
    let Some(plan) = ws.load_plan()? else {
        bail!("`{dir}` has no plan.json: nothing was planned here\nhint: `autokernel run --workspace {dir} ...` profiles a model, tunes its kernels and verifies them");
    };
    let Some(v) = ws.load_verification()? else {
        bail!("`{dir}` has no verification: export ships what verification put into the model\nhint: run `autokernel verify --workspace {dir}` first");
    };
    if !v.passed {
        bail!("the last verification of `{dir}` FAILED (a kernel is wrong: report.md and `autokernel verify --workspace {dir}` say which); nothing exported");
    }
    if !v.has_hashes() {
        bail!("`{dir}/verify.json` predates kernel digests, so whether its kernels are the ones verified cannot be told\nhint: run `autokernel verify --workspace {dir}` again");
    }
    let stale = ws.stale_kernels(&plan, Some(&v));
    if !stale.is_empty() {
        bail!(
            "the kernel.py of {} changed since the last verification\nhint: run `autokernel verify --workspace {dir}` again, then export",
            stale.join(", ")
        );
    }
    // a verification cut short (its budget, an interrupt) exports the kernels it decided
    // in, each checked alone and together as in a whole one; those it did not decide are
    // left out, saying so
    if v.cut_short {
        tracing::warn!(
            "the last verification of `{dir}` was cut short ({}): the package holds the kernels it decided in; `autokernel verify --workspace {dir}` decides the others",
            v.cut_short_reason.as_deref().unwrap_or("no reason recorded")
        );
    }
    let included: Vec<Target> = plan
        .into_iter()
        .filter(|t| v.included.contains(&t.id))
        .collect();
    if included.is_empty() {
        let why: String = v
            .excluded
            .iter()
            .map(|e| format!("\n  {}: {}", e.target, e.reason))
            .collect();
        bail!("the last verification of `{dir}` plugged no kernel into the model: nothing to export{why}");
    }
    Ok((included, v))
}

/// Writes the package project for `ws` into `options.out` and returns what it holds.
///
/// Layout: `pyproject.toml`, `README.md`, and the package: `__init__.py`, `manifest.json`,
/// `kernels/<target>.py` (each as verified), `_autokernel/` (`deploy.py`, `plugs.py`,
/// `call_sites.py`, `kernel_ops.py`, `catalogue.py`, `catalogue.json`). Written into a
/// sibling folder first and renamed into place, so an error leaves no half package.
///
/// # Errors
/// Those of [`verified_targets`]; an invalid package name; `out` existing and not empty
/// (with `force`: not an earlier export); a file that cannot be written.
pub fn export(ws: &Workspace, options: &ExportOptions) -> anyhow::Result<Exported> {
    let package = options
        .name
        .clone()
        .unwrap_or_else(|| default_package_name(ws));
    if !valid_package_name(&package) {
        bail!("`{package}` cannot be a Python package name: use letters, digits and `_`, not starting with a digit (e.g. --name my_kernels)");
    }
    let (targets, v) = verified_targets(ws)?;
    let out = &options.out;
    let replacing = check_out_dir(out, options.force)?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot create `{}`", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".autokernel-export-")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot create a folder in `{}`", parent.display()))?;
    write_package(ws, &package, &targets, &v, staging.path())?;
    if replacing {
        std::fs::remove_dir_all(out)
            .with_context(|| format!("cannot remove the earlier export `{}`", out.display()))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, out).with_context(|| {
        format!(
            "cannot move the package from `{}` to `{}`",
            staged.display(),
            out.display()
        )
    })?;
    let left_out = left_out(&v);
    Ok(Exported {
        package,
        dir: out.clone(),
        targets: targets.into_iter().map(|t| t.id).collect(),
        left_out,
    })
}

/// The plan's targets the verification left out of the model, with its reasons.
fn left_out(v: &Verification) -> Vec<Excluded> {
    v.excluded
        .iter()
        .filter(|e| !v.included.contains(&e.target))
        .cloned()
        .collect()
}

/// Whether `out` holds an earlier export to replace (`Ok(true)`), is free (`Ok(false)`:
/// absent or empty), or must not be touched (an error).
fn check_out_dir(out: &Path, force: bool) -> anyhow::Result<bool> {
    let Ok(mut entries) = std::fs::read_dir(out) else {
        if out.exists() {
            bail!("`{}` exists and is not a folder", out.display());
        }
        return Ok(false);
    };
    if entries.next().is_none() {
        std::fs::remove_dir(out).with_context(|| format!("cannot replace `{}`", out.display()))?;
        return Ok(false);
    }
    let earlier = std::fs::read_to_string(out.join("pyproject.toml"))
        .is_ok_and(|text| text.contains(EXPORT_MARK));
    match (earlier, force) {
        (true, true) => Ok(true),
        (true, false) => bail!(
            "`{}` holds an earlier export\nhint: --force replaces it",
            out.display()
        ),
        (false, _) => bail!(
            "`{}` exists and is not an autokernel export: choose an empty or new folder (--force replaces only an earlier export)",
            out.display()
        ),
    }
}

/// The line in `pyproject.toml` by which `--force` knows an earlier export.
const EXPORT_MARK: &str = "# written by `autokernel export`";

fn write_package(
    ws: &Workspace,
    package: &str,
    targets: &[Target],
    v: &Verification,
    root: &Path,
) -> anyhow::Result<()> {
    let pkg = root.join(package);
    let internals = pkg.join("_autokernel");
    let kernels = pkg.join("kernels");
    for dir in [&internals, &kernels] {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create `{}`", dir.display()))?;
    }
    let model = ws
        .settings
        .model
        .as_ref()
        .map_or_else(|| "no model".to_string(), |m| m.describe());
    let mut entries = Vec::new();
    for t in targets {
        let source = ws.path(&t.kernel_relpath());
        let file = format!("kernels/{}.py", t.id);
        std::fs::copy(&source, pkg.join(&file))
            .with_context(|| format!("cannot copy `{}` into the package", source.display()))?;
        let shapes: Vec<&[u64]> = t.shapes.iter().map(|s| s.0.as_slice()).collect();
        entries.push(json!({
            "id": t.id,
            "kind": t.kind.name(),
            // every parameter, defaults filled: the plug matches calls by them
            "params": t.kind.spec().resolve_params(&t.params).unwrap_or_else(|_| t.params.clone()),
            "shapes": shapes,
            "dtype": t.dtype.name(),
            // matmul: the layout of B it was judged in (nn.Linear's Wᵀ, Conv1D's W)
            "layout": t.layout.name(),
            "op": t.op,
            "kernel": file,
            "sha256": file_sha256(&source),
        }));
    }
    let manifest = json!({
        "format": MANIFEST_FORMAT,
        "package": package,
        "exported_by": format!("autokernel {}", env!("CARGO_PKG_VERSION")),
        "model": model,
        "verified_on": {
            "device": v.device,
            "torch": v.torch_version,
            "triton": v.triton_version,
        },
        "verification": {
            "eager_ms": v.eager_ms,
            "optimized_ms": v.optimized_ms,
            "speedup": v.speedup,
            "timing_representative": v.timing_representative,
            // the mode whose timings chose these kernels, and the model in every mode:
            // `optimize` says both, since a kernel chosen for a CUDA graph can lose under
            // torch.compile
            "deploy": v.deploy,
            "modes": v.modes,
            // where the plugs take calls (`optimize` reads it; absent: from `modes`)
            "contexts": v.contexts,
            // a verification cut short decided only some kernels (the others are left out)
            "cut_short": v.cut_short,
        },
        "targets": entries,
        "left_out": left_out(v),
    });
    let catalogue = autokernel_core::Catalogue::builtin().to_json();
    let pyproject = pyproject_toml(package, &model);
    let readme = readme_md(package, &model, targets);
    let manifest = serde_json::to_string_pretty(&manifest)?;
    let files: Vec<(PathBuf, &str)> = vec![
        (root.join("pyproject.toml"), &pyproject),
        (root.join("README.md"), &readme),
        (pkg.join("__init__.py"), PACKAGE_INIT_PY),
        (pkg.join("manifest.json"), &manifest),
        (
            internals.join("__init__.py"),
            "\"\"\"autokernel's plugs and operators, shipped with the kernels.\"\"\"\n",
        ),
        (internals.join("deploy.py"), crate::services::DEPLOY_PY),
        (internals.join("plugs.py"), crate::services::PLUGS_PY),
        (
            internals.join("call_sites.py"),
            autokernel_profiler::CALL_SITES_PY,
        ),
        (
            internals.join("kernel_ops.py"),
            crate::services::KERNEL_OPS_PY,
        ),
        (
            internals.join("catalogue.py"),
            autokernel_bench::CATALOGUE_PY,
        ),
        (internals.join("catalogue.json"), &catalogue),
    ];
    for (path, text) in files {
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(())
}

/// The project file: setuptools, the package and its data. torch is the user's own (no
/// dependency declared, so installing never replaces it); `manifest.json` records the
/// versions the kernels were verified with, and `optimize` warns where they differ.
fn pyproject_toml(package: &str, model: &str) -> String {
    let description = format!("autokernel's kernels for {model}").replace('"', "'");
    format!(
        r#"{EXPORT_MARK}
[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "{project}"
version = "0.1.0"
description = "{description}"
requires-python = ">=3.9"

[tool.setuptools]
packages = ["{package}", "{package}._autokernel"]

[tool.setuptools.package-data]
"{package}" = ["manifest.json", "kernels/*.py"]
"{package}._autokernel" = ["catalogue.json"]
"#,
        project = package.replace('_', "-"),
    )
}

fn readme_md(package: &str, model: &str, targets: &[Target]) -> String {
    let list: String = targets
        .iter()
        .map(|t| format!("- `{}` ({}, from `{}`)\n", t.id, t.kind.name(), t.op))
        .collect();
    format!(
        "# {package}\n\nautokernel's verified kernels for {model}, written by `autokernel export`.\n\n\
         ```python\nimport torch, {package}\nreport = {package}.optimize(model)  # installs the kernels on this model instance\n\
         model = torch.compile(model)  # optional: the kernels are operators, no graph break\n\
         report.undo()  # the model as it was\n```\n\n\
         Kernels:\n\n{list}\n`manifest.json` lists each kernel's parameters, shapes and dtype, and the GPU, torch \
         and triton it was verified with.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_are_python_identifiers_that_are_not_keywords() {
        assert!(valid_package_name("autokernel_gpt2"));
        assert!(valid_package_name("_k9"));
        assert!(!valid_package_name("9lives"));
        assert!(!valid_package_name("my-kernels"));
        assert!(!valid_package_name("import"));
        assert!(!valid_package_name(""));
        assert!(!valid_package_name("café"));
    }

    #[test]
    fn an_existing_folder_is_replaced_only_when_it_is_an_earlier_export_and_force_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let free = dir.path().join("new");
        assert!(!check_out_dir(&free, false).unwrap());
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(!check_out_dir(&empty, false).unwrap());
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        let err = check_out_dir(&other, true).unwrap_err().to_string();
        assert!(err.contains("is not an autokernel export"), "{err}");
        assert!(other.join("notes.txt").exists());
        let earlier = dir.path().join("earlier");
        std::fs::create_dir(&earlier).unwrap();
        std::fs::write(earlier.join("pyproject.toml"), pyproject_toml("p", "m")).unwrap();
        let err = check_out_dir(&earlier, false).unwrap_err().to_string();
        assert!(err.contains("--force replaces it"), "{err}");
        assert!(check_out_dir(&earlier, true).unwrap());
    }
}
