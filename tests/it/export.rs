//! `autokernel export`: the verified kernels of a tiny-model workspace as a Python package,
//! installed with pip into a fresh venv without the network and used as a user would
//! (`tests/python/export_check.py`); and the refusals that keep an export honest.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{autokernel, judged, new_kernel, tempdir, tiny_workspace};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Python the worker uses (the project's .venv unless AUTOKERNEL_PYTHON says).
fn project_python() -> PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| root().join(".venv/bin/python"))
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().expect("runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A fresh venv (no pip of its own) that sees the project's packages through a `.pth`
/// file, as a user's environment with torch and triton installed would; returns its python.
fn fresh_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let (ok, log) = run(Command::new(project_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv));
    assert!(ok, "{log}");
    let site = |python: &Path| {
        let (ok, out) = run(Command::new(python).args([
            "-c",
            "import site, sys; sys.stdout.write(site.getsitepackages()[0])",
        ]));
        assert!(ok, "{out}");
        PathBuf::from(out)
    };
    let python = venv.join("bin/python");
    let project_site = site(&project_python());
    std::fs::write(
        site(&python).join("autokernel_project.pth"),
        format!("{}\n", project_site.display()),
    )
    .unwrap();
    python
}

/// A tiny-model workspace with kernels (their starters, as judged bests) for the first
/// planned target of each kind that plugs into one model instance (rmsnorm or its fused
/// chain add_rmsnorm, matmul, fused_mlp: which of them the CPU profile ranks in the top 4
/// varies) besides the run's
/// one experiment, verified on the CPU. Returns the verification's included targets.
fn verified_tiny_workspace(ws: &Path) -> Vec<String> {
    let plan = tiny_workspace(ws, 4);
    for kind in ["rmsnorm", "add_rmsnorm", "matmul", "fused_mlp"] {
        let Some(target) = plan.as_array().unwrap().iter().find(|t| t["kind"] == kind) else {
            continue;
        };
        let id = target["id"].as_str().unwrap();
        let path = ws.join(format!("targets/{id}/kernel.py"));
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            new_kernel(kind, &path);
            judged(ws, id, &std::fs::read_to_string(&path).unwrap());
        }
    }
    let (ok, log) = run(autokernel()
        .args(["verify", "--device", "cpu", "--json", "-w"])
        .arg(ws));
    assert!(ok, "{log}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    v["included"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_exported_package_installs_offline_and_optimizes_a_fresh_model_in_eager_forced_and_compiled() {
    let (dir, ws) = tempdir();
    let included = verified_tiny_workspace(&ws);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let kind_of = |id: &str| {
        plan.as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["kind"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // the tiny model calls SDPA directly (not through transformers' registry): plugging
    // attention there would patch torch for the whole process, which optimize does not do
    let expected: Vec<String> = included
        .iter()
        .filter(|id| {
            !["flash_attention", "softmax", "cross_entropy"].contains(&kind_of(id).as_str())
        })
        .cloned()
        .collect();
    assert!(expected.len() >= 2, "{included:?}");

    let out = dir.path().join("tiny-kernels");
    let (ok, log) = run(autokernel()
        .args(["export", "--name", "tiny_kernels", "-w"])
        .arg(&ws)
        .arg("-o")
        .arg(&out));
    assert!(ok, "{log}");
    assert!(
        log.contains(&format!("exported {} kernel(s)", included.len()))
            && log.contains("import tiny_kernels; report = tiny_kernels.optimize(model)"),
        "{log}"
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("tiny_kernels/manifest.json")).unwrap(),
    )
    .unwrap();
    let exported: Vec<&str> = manifest["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(exported, included, "{manifest}");
    assert_eq!(manifest["verified_on"]["device"], "cpu", "{manifest}");
    // each kernel as verified
    for id in &included {
        assert_eq!(
            std::fs::read(out.join(format!("tiny_kernels/kernels/{id}.py"))).unwrap(),
            std::fs::read(ws.join(format!("targets/{id}/kernel.py"))).unwrap()
        );
    }

    let python = fresh_venv(dir.path());
    let (ok, log) = run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
        ])
        .arg(&out)
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"));
    assert!(ok, "{log}");
    for check in ["use", "contexts", "wrong"] {
        let (ok, log) = run(Command::new(&python)
            .arg(root().join("tests/python/export_check.py"))
            .arg(check)
            .arg(root().join("examples/models/tiny.py"))
            .arg("tiny_kernels")
            .arg(expected.join(","))
            // not the repository: the package must come from the venv
            .current_dir(dir.path())
            .env("TRITON_INTERPRET", "1")
            .env_remove("AUTOKERNEL_FORCE_KERNEL"));
        assert!(ok && log.trim_end().ends_with("ok"), "{check}: {log}");
    }
}

#[test]
fn export_refuses_without_a_current_verification_and_never_replaces_a_folder_of_yours() {
    let (dir, ws) = tempdir();
    tiny_workspace(&ws, 1);
    let export = |out: &Path, extra: &[&str]| {
        let o = autokernel()
            .args(["export", "-w"])
            .arg(&ws)
            .arg("-o")
            .arg(out)
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let out = dir.path().join("pkg");
    let (code, err) = export(&out, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("has no verification") && err.contains("autokernel verify --workspace"),
        "{err}"
    );
    assert!(!out.exists());

    let (ok, log) = run(autokernel()
        .args(["verify", "--device", "cpu", "-w"])
        .arg(&ws));
    assert!(ok, "{log}");
    let (code, err) = export(&out, &["--name", "not-a-name"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be a Python package name"), "{err}");

    // a folder that is not an earlier export is never replaced, --force or not
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let (code, err) = export(&mine, &["--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not an autokernel export"), "{err}");
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "keep me"
    );

    // the default name comes from the model; an earlier export is replaced with --force only
    let (code, err) = export(&out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.join("autokernel_tiny/manifest.json").exists());
    let (code, err) = export(&out, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("holds an earlier export"), "{err}");

    // a kernel edited after the verification is not what was verified
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let id = plan[0]["id"].as_str().unwrap();
    let kernel = ws.join(format!("targets/{id}/kernel.py"));
    let source = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(&kernel, format!("{source}\n# edited\n")).unwrap();
    let (code, err) = export(&out, &["--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "the kernel.py of {id} changed since the last verification"
        )),
        "{err}"
    );
    // the earlier export is still there, whole
    assert!(out.join("autokernel_tiny/manifest.json").exists());
}
