//! `examples/embed.rs`: the whole main job through the library facade with a custom agent,
//! on the CPU with the tiny example model, read back from outside (results.tsv, `git`).

use std::path::PathBuf;
use std::process::Command;

use crate::util::{git, rows, run_branch};

/// The example's executable. `cargo test` builds the examples beside the test binaries;
/// a filtered run (`--test it`) does not, so it is built then, with the cargo running us.
fn embed_example() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/it-<hash> → target/<profile>/examples/embed
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join("embed");
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", "embed"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo build --example embed failed");
    }
    path
}

#[test]
fn the_embed_example_runs_the_main_job_with_its_own_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let mut cmd = Command::new(embed_example());
    if std::env::var_os("AUTOKERNEL_PYTHON").is_none() {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
        cmd.env("AUTOKERNEL_PYTHON", venv);
    }
    let out = cmd.arg(&ws).env("TRITON_INTERPRET", "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "embed failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // top 1, two experiments: one baseline row, then two by the example's agent
    let rows = rows(&ws);
    let theirs: Vec<_> = rows.iter().filter(|r| r["agent"] == "comment").collect();
    assert_eq!(theirs.len(), 2, "{rows:?}");
    assert_eq!(rows.len(), 3, "{rows:?}");
    let targets: std::collections::BTreeSet<_> = rows.iter().map(|r| r["target"].clone()).collect();
    assert_eq!(targets.len(), 1, "{rows:?}");
    // each experiment is a commit of the workspace's repository, on a run branch
    assert!(run_branch(&ws).starts_with("autokernel/"));
    for r in &rows {
        assert_eq!(
            git(&ws, &["cat-file", "-t", &r["commit"]]).trim(),
            "commit",
            "{r:?}"
        );
    }
    // the candidates carry the agent's comment; the judge passed them (a comment changes
    // nothing the kernel computes)
    for r in &theirs {
        assert_eq!(r["correctness"], "PASS", "{r:?}");
        let text = git(
            &ws,
            &[
                "show",
                &format!("{}:targets/{}/kernel.py", r["commit"], r["target"]),
            ],
        );
        assert!(
            text.contains(&format!("# experiment {}", r["experiment"])),
            "{text}"
        );
    }
    // then verify and report, as `autokernel run` does
    assert!(ws.join("verify.json").is_file());
    assert!(ws.join("report.md").is_file());
    assert!(stdout.contains("verified: "), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "report: {}",
            ws.join("report.md").canonicalize().unwrap().display()
        )),
        "{stdout}"
    );
}
