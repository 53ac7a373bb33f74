//! `autokernel tune` on the CPU: one kernel file refined at a shape without a model, the
//! best version written out, resumed, and bad input refused before anything is written.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::util::{assert_consistent, autokernel, git, run_branch, tempdir};

/// A softmax starter written to `dir/softmax.py`.
fn starter(dir: &Path) -> PathBuf {
    let path = dir.join("softmax.py");
    let out = autokernel()
        .args(["new-kernel", "softmax", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn tune(kernel: &Path, ws: &Path, extra: &[&str]) -> Output {
    autokernel()
        .arg("tune")
        .arg(kernel)
        .args(["--device", "cpu", "--no-progress", "-w"])
        .arg(ws)
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn tune_refines_a_file_at_a_shape_and_writes_the_best_version() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let original = std::fs::read_to_string(&kernel).unwrap();
    let best = dir.path().join("best.py");
    let out = tune(
        &kernel,
        &ws,
        &[
            "--shape",
            "8,96",
            "--max-experiments",
            "2",
            "-o",
            best.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let rows = assert_consistent(&ws);
    // the file as given is the baseline; then two configurations from its TUNABLES
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows[0]["description"],
        format!("baseline: softmax kernel from {}", kernel.display())
    );
    assert!(
        rows[1..]
            .iter()
            .all(|r| r["description"].starts_with("tune: ")),
        "{rows:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("configurations_measured: 3"), "{stdout}");
    // the copy is the branch's head: the last kept configuration (or the file itself)
    let head = git(
        &ws,
        &[
            "show",
            &format!("{}:targets/01-softmax/kernel.py", run_branch(&ws)),
        ],
    );
    assert_eq!(std::fs::read_to_string(&best).unwrap(), head);
    let kept: Vec<_> = rows.iter().filter(|r| r["decision"] == "keep").collect();
    if kept.is_empty() {
        assert_eq!(head, original);
    } else {
        assert_ne!(head, original);
    }
    // the file given is left as it was
    assert_eq!(std::fs::read_to_string(&kernel).unwrap(), original);
    assert!(ws.join("report.md").is_file());
}

#[test]
fn tune_resumes_and_refuses_another_problem_or_a_run() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let first = tune(&kernel, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    assert!(first.status.success(), "{}", text(&first));
    let again = tune(&kernel, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    assert!(again.status.success(), "{}", text(&again));
    let rows = assert_consistent(&ws);
    // one baseline across both invocations, one experiment each
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(
        rows.iter().filter(|r| r["decision"] == "baseline").count(),
        1
    );

    // an edited file is not resumed from its old text
    let edited = std::fs::read_to_string(&kernel).unwrap() + "# edited\n";
    let copy = dir.path().join("edited.py");
    std::fs::write(&copy, edited).unwrap();
    let changed = tune(&copy, &ws, &["--shape", "8,96", "--max-experiments", "1"]);
    assert_eq!(changed.status.code(), Some(2), "{}", text(&changed));
    assert!(
        text(&changed).contains("has changed since"),
        "{}",
        text(&changed)
    );

    let other = tune(
        &kernel,
        &ws,
        &["--shape", "16,96", "--max-experiments", "1"],
    );
    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    assert!(
        text(&other).contains("tunes another problem"),
        "{}",
        text(&other)
    );
    let run = autokernel()
        .args(["run", "--example", "tiny", "--device", "cpu", "--workspace"])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(
        text(&run).contains("is `autokernel tune`'s"),
        "{}",
        text(&run)
    );
    // neither refusal wrote a row
    assert_eq!(assert_consistent(&ws).len(), 3);
}

#[test]
fn tune_refuses_bad_input_before_creating_a_workspace() {
    let (dir, ws) = tempdir();
    let kernel = starter(dir.path());
    let cases: Vec<(PathBuf, Vec<&str>, &str)> = vec![
        (
            dir.path().join("missing.py"),
            vec!["--shape", "8,96"],
            "not found",
        ),
        (kernel.clone(), vec!["--shape", "8,96,4"], "--shape"),
        (
            kernel.clone(),
            vec!["--shape", "8,96", "--max-experiments", "0"],
            "--max-experiments 0",
        ),
    ];
    let no_kind = dir.path().join("no_kind.py");
    let source = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(&no_kind, source.replace("KERNEL_KIND = \"softmax\"", "")).unwrap();
    let no_tunables = dir.path().join("no_tunables.py");
    std::fs::write(&no_tunables, source.replace("TUNABLES = {", "OPTIONS = {")).unwrap();
    let cases = cases.into_iter().chain([
        (no_kind, vec!["--shape", "8,96"], "declares no KERNEL_KIND"),
        (no_tunables, vec!["--shape", "8,96"], "TUNABLES"),
    ]);
    for (file, args, message) in cases {
        let out = tune(&file, &ws, &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}: {}",
            file.display(),
            text(&out)
        );
        assert!(
            text(&out).contains(message),
            "{}: {}",
            file.display(),
            text(&out)
        );
        assert!(!ws.exists(), "{} left a workspace behind", file.display());
    }
}
