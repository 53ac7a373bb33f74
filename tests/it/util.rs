//! Shared helpers: the binary under test, its Python, and reading a workspace from outside.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `autokernel` binary built for this test run.
pub fn autokernel() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_autokernel"));
    if std::env::var_os("AUTOKERNEL_PYTHON").is_none() {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
        assert!(
            venv.exists(),
            "no Python for the worker: set AUTOKERNEL_PYTHON or run `make setup` (tried {})",
            venv.display()
        );
        cmd.env("AUTOKERNEL_PYTHON", venv);
    }
    cmd.env("NO_COLOR", "1");
    // no spare worker: a test's command judges a few candidates, and a spare started ahead
    // is killed unused at its exit, its imports the CPU of the tests beside it
    if std::env::var_os(autokernel_bench::SPARE_WORKERS_ENV).is_none() {
        cmd.env(autokernel_bench::SPARE_WORKERS_ENV, "0");
    }
    cmd
}

/// `autokernel report -w ws`, run to the end.
pub fn report(ws: &Path) -> std::process::Output {
    autokernel()
        .args(["report", "-w"])
        .arg(ws)
        .output()
        .unwrap()
}

/// `git -C dir args…`, asserting success; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// One row of results.tsv as a map from column name to value.
pub fn rows(ws: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(ws.join("results.tsv")).expect("results.tsv exists");
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .split('\t')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                fields.len(),
                header.len(),
                "row has {} fields: {l}",
                fields.len()
            );
            header
                .iter()
                .cloned()
                .zip(fields.iter().map(|f| f.to_string()))
                .collect()
        })
        .collect()
}

/// The run branch of a workspace (`autokernel/<tag>`).
pub fn run_branch(ws: &Path) -> String {
    let refs = git(
        ws,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/autokernel/",
        ],
    );
    let branches: Vec<&str> = refs.lines().collect();
    assert_eq!(
        branches.len(),
        1,
        "expected one run branch, got {branches:?}"
    );
    branches[0].to_string()
}

/// Asserts what must hold of any workspace after a run, killed or not: experiment numbers
/// are 1..=n with none lost or repeated; every row's commit resolves to a commit whose
/// kernel.py is that target's; the branch holds exactly the baseline (with a verdict) and
/// kept commits, in order; `git status` is clean.
pub fn assert_consistent(ws: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let rows = rows(ws);
    let numbers: Vec<u64> = rows
        .iter()
        .map(|r| r["experiment"].parse().expect("number"))
        .collect();
    assert_eq!(
        numbers,
        (1..=rows.len() as u64).collect::<Vec<_>>(),
        "experiment numbers"
    );
    for r in &rows {
        if r["decision"] == "invalid" {
            assert!(r["commit"].is_empty());
            continue;
        }
        let path = format!("{}:targets/{}/kernel.py", r["commit"], r["target"]);
        git(ws, &["cat-file", "-e", &path]);
    }
    let on_branch: Vec<String> = rows
        .iter()
        // a baseline cut short (INTERRUPTED) was taken off the branch, to be judged again
        .filter(|r| {
            r["decision"] == "keep"
                || (r["decision"] == "baseline" && r["correctness"] != "INTERRUPTED")
        })
        .map(|r| r["commit"].clone())
        .collect();
    let branch = run_branch(ws);
    let log = git(ws, &["rev-list", "--reverse", &branch]);
    assert_eq!(
        log.lines().map(str::to_string).collect::<Vec<_>>(),
        on_branch,
        "branch vs kept rows"
    );
    assert_eq!(
        git(ws, &["status", "--porcelain"]),
        "",
        "workspace not clean"
    );
    rows
}

/// A fresh temporary folder.
pub fn tempdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    (dir, ws)
}

/// Writes the `kind` starter to `path` with `autokernel new-kernel`, asserting success.
pub fn new_kernel(kind: &str, path: &Path) {
    let out = autokernel()
        .args(["new-kernel", kind, "-o"])
        .arg(path)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes `source` the judged best kernel of target `id`, as a run leaves one: committed on
/// the run branch, logged as a kept PASS row and noted with that verdict. A kernel can pass
/// the judge at its own shapes and still break the model (these tests' subject); `verify`
/// plugs in only a kernel.py the judge passed, so a kernel edited by hand would be left out
/// unjudged.
pub fn judged(ws: &Path, id: &str, source: &str) {
    let path = ws.join(format!("targets/{id}/kernel.py"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, source).unwrap();
    git(ws, &["add", "targets"]);
    git(
        ws,
        &[
            // a machine without a git identity commits all the same
            "-c",
            "user.name=autokernel tests",
            "-c",
            "user.email=tests@127.0.0.1",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            &format!("a judged kernel for {id}"),
        ],
    );
    let commit = git(ws, &["rev-parse", "HEAD"]).trim().to_string();
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let kind = plan
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()["kind"]
        .as_str()
        .unwrap()
        .to_string();
    let log = ws.join("results.tsv");
    let text = std::fs::read_to_string(&log).unwrap();
    let n = text.lines().count(); // the header and n − 1 rows: the next number is n
    let row = format!(
        "{n}\t2026-12-01T22:00:00Z\t{id}\t{kind}\ttest\ta kernel the test made the best\t{commit}\tkeep\tPASS\t1.0\t\t\t\t\t\t0.10\n"
    );
    std::fs::write(&log, text + &row).unwrap();
    // the verdict the loop records with each commit, or a resume and `report` set the row
    // aside as one the loop did not write
    git(
        ws,
        &[
            "notes",
            "--ref=autokernel",
            "add",
            "-f",
            "-m",
            &format!("experiment: {n}\ntarget: {id}\ndecision: keep\ncorrectness: PASS\n"),
            &commit,
        ],
    );
}

/// A workspace of the tiny example with its `top` largest targets planned and one
/// experiment run, not verified; returns its plan.
pub fn tiny_workspace(ws: &Path, top: u32) -> serde_json::Value {
    tiny_workspace_with(ws, top, &[])
}

/// The kernel.py of target `i` of `plan` in `ws`: the one the run kept, or, when its
/// experiment kept none (it did not pass, as on a loaded machine: seen in clean-clone CI
/// runs), the kind's starter made the judged best with [`judged`].
pub fn kernel_or_starter(ws: &Path, plan: &serde_json::Value, i: usize) -> PathBuf {
    let id = plan[i]["id"].as_str().expect("a planned target");
    let path = ws.join(format!("targets/{id}/kernel.py"));
    if !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        new_kernel(plan[i]["kind"].as_str().expect("its kind"), &path);
        judged(ws, id, &std::fs::read_to_string(&path).unwrap());
    }
    path
}

/// [`tiny_workspace`] with more `run` flags (a resumed run when `ws` has a plan already).
pub fn tiny_workspace_with(ws: &Path, top: u32, extra: &[&str]) -> serde_json::Value {
    let out = autokernel()
        .args(["run", "--example", "tiny", "--device", "cpu", "--top"])
        .arg(top.to_string())
        .args(["--max-experiments", "1", "--no-verify"])
        .args(extra)
        .arg("-w")
        .arg(ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap()
}

/// The Python the worker would use (as [`autokernel`] picks it).
pub fn python() -> PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// Runs check `name` of the plug-check script `tests/python/<script>` (argv: CHECK
/// OPS_DIR ROOT, OPS_DIR holding `kernel_ops.py` and the catalogue as autokernel writes
/// them) under Triton's interpreter; panics with its output unless it prints `ok` last.
pub fn python_check(script: &str, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    autokernel::services::write_kernel_ops(dir.path()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(python())
        .arg(root.join("tests/python").join(script))
        .arg(name)
        .arg(dir.path())
        .arg(root)
        .env("TRITON_INTERPRET", "1")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("ok"),
        "check `{script} {name}` failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
