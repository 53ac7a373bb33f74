//! Commit / keep / revert sequences read back with git.

use autokernel_core::{Decision, VersionStore};
use autokernel_vcs::{format_message, GixStore};

use crate::support::*;

#[tokio::test]
async fn commit_keep_revert_sequence_reads_back_with_git() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("run1");
    assert!(store.open_report().created_repository);
    assert!(!store.open_report().resumed);
    assert_eq!(
        store.tip().unwrap(),
        None,
        "an empty repository starts unborn"
    );

    let c1 = experiment(&mut store, 1, "t", true).await;
    let c2 = experiment(&mut store, 2, "t", true).await;
    let c3 = experiment(&mut store, 3, "t", false).await;
    let c4 = experiment(&mut store, 4, "t", true).await;
    // a results log beside the experiments is not git's business
    std::fs::write(ws.join("results.tsv"), "experiment\n1\n").unwrap();

    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/autokernel/run1"
    );
    assert_eq!(
        git_lines(&ws, &["log", "--format=%H", "autokernel/run1"]),
        vec![c4.0.clone(), c2.0.clone(), c1.0.clone()],
        "the branch holds exactly the kept experiments, newest first"
    );
    assert_eq!(
        git(&ws, &["rev-parse", "refs/autokernel/reverted/3"]).trim(),
        c3.0
    );
    let all = git_lines(&ws, &["log", "--all", "--format=%s"]);
    for n in 1..=4 {
        assert!(
            all.iter()
                .any(|s| s == &format!("exp {n}: t: experiment {n}")),
            "exp {n} missing from git log --all: {all:?}"
        );
    }
    // message and trailers, as git parses them
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%B", &c2.0]).trim_end(),
        format_message(2, "t", "experiment 2", "scripted").trim_end()
    );
    assert_eq!(
        git(
            &ws,
            &[
                "log",
                "-1",
                "--format=%(trailers:key=Autokernel-Experiment,valueonly)",
                &c3.0
            ]
        )
        .trim(),
        "3"
    );
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%an <%ae>", &c1.0]).trim(),
        "autokernel <autokernel@localhost>"
    );
    // each experiment commit changes kernel.py only, with the proposed bytes
    assert_eq!(
        git(
            &ws,
            &["cat-file", "-p", &format!("{}:targets/t/kernel.py", c3.0)]
        ),
        source(3)
    );
    assert_eq!(
        git_lines(
            &ws,
            &["diff-tree", "--no-commit-id", "--name-only", "-r", &c4.0]
        ),
        vec!["targets/t/kernel.py"]
    );
    // verdicts as notes, commits untouched
    let note2 = git(&ws, &["notes", "--ref=autokernel", "show", &c2.0]);
    assert!(
        note2.contains("decision: keep") && note2.contains("correctness: PASS"),
        "{note2}"
    );
    assert!(note2.contains("latency_us: 98"), "{note2}");
    let note3 = git(&ws, &["notes", "--ref=autokernel", "show", &c3.0]);
    assert!(
        note3.contains("decision: revert") && note3.contains("correctness: FAIL"),
        "{note3}"
    );
    // the objects are well-formed for git itself
    git(&ws, &["fsck", "--strict", "--no-dangling"]);
    assert_clean(&ws);
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        source(4)
    );

    // history through the API
    let history = store.experiments("t").unwrap();
    let summary: Vec<(u64, bool, Option<String>)> = history
        .iter()
        .map(|e| (e.experiment, e.kept, e.parent.as_ref().map(|p| p.0.clone())))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, true, None),
            (2, true, Some(c1.0.clone())),
            (3, false, Some(c2.0.clone())),
            (4, true, Some(c2.0.clone())),
        ]
    );
    assert!(history[2].message.starts_with("exp 3: t: experiment 3\n"));
    assert_eq!(store.read_kernel(&c3, "t").unwrap(), source(3));
    assert_eq!(
        store.best(&target("t")).await.unwrap(),
        Some((c4.clone(), source(4)))
    );
    assert_eq!(store.best(&target("other")).await.unwrap(), None);
}

#[tokio::test]
async fn best_names_the_commit_that_introduced_the_kept_kernel_across_targets() {
    let fx = Fixture::new();
    let mut store = fx.open("two");
    let a1 = experiment(&mut store, 1, "a", true).await;
    let b2 = experiment(&mut store, 2, "b", true).await;
    let _a3 = experiment(&mut store, 3, "a", false).await;
    let b4 = experiment(&mut store, 4, "b", true).await;
    // a's kernel was last changed by experiment 1, although the tip is b's experiment 4
    assert_eq!(
        store.best(&target("a")).await.unwrap(),
        Some((a1.clone(), source(1)))
    );
    assert_eq!(
        store.best(&target("b")).await.unwrap(),
        Some((b4.clone(), source(4)))
    );
    let tree = git_lines(&fx.ws(), &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert_eq!(tree, vec!["targets/a/kernel.py", "targets/b/kernel.py"]);
    assert_eq!(store.experiments("b").unwrap().len(), 2);
    assert_eq!(store.experiments("b").unwrap()[0].commit, b2);
    assert_clean(&fx.ws());
}

#[tokio::test]
async fn excludes_keep_workspace_files_out_of_git_status() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("ex");
    experiment(&mut store, 1, "t", true).await;
    for f in [
        "results.tsv",
        "results.tsv.torn",
        "autokernel.log",
        "logs/x.txt",
        "report.md",
        "progress.png",
        "modes.png",
        "profiles/trace.json",
        "traces/t.json",
        "autokernel.toml",
        "program.md",
        ".autokernel/scratch/t-incumbent.py",
        "targets/t/__pycache__/kernel.cpython-312.pyc",
    ] {
        let p = ws.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }
    assert_clean(&ws);
    // opening again does not add the lines twice
    drop(store);
    let _store = fx.open("ex");
    let exclude = std::fs::read_to_string(ws.join(".git/info/exclude")).unwrap();
    assert_eq!(exclude.matches("/results.tsv\n").count(), 1, "{exclude}");
}

#[tokio::test]
async fn reopening_continues_the_run_branch_and_a_new_tag_starts_from_head() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("first");
    let c1 = experiment(&mut store, 1, "t", true).await;
    drop(store);
    let mut store = fx.open("first");
    assert!(store.open_report().resumed);
    let c2 = experiment(&mut store, 2, "t", true).await;
    assert_eq!(
        git_lines(&ws, &["log", "--format=%H", "HEAD"]),
        vec![c2.0.clone(), c1.0.clone()]
    );
    drop(store);

    let mut store = fx.open("second");
    assert!(!store.open_report().resumed);
    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/autokernel/second"
    );
    let c3 = experiment(&mut store, 3, "t", false).await;
    assert_eq!(
        git(&ws, &["rev-parse", "HEAD"]).trim(),
        c2.0,
        "second starts from first's tip"
    );
    drop(store);

    // switching back checks the other branch out
    let store = fx.open("first");
    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/autokernel/first"
    );
    assert_eq!(
        store
            .experiments("t")
            .unwrap()
            .iter()
            .filter(|e| !e.kept)
            .count(),
        1
    );
    assert_eq!(store.read_kernel(&c3, "t").unwrap(), source(3));
    assert_clean(&ws);
}

#[tokio::test]
async fn an_existing_repository_with_user_commits_gets_a_run_branch_from_head() {
    let fx = Fixture::new();
    let ws = fx.ws();
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "mine\n").unwrap();
    git(&ws, &["add", "README"]);
    git(&ws, &["commit", "-q", "-m", "user commit"]);
    let base = git(&ws, &["rev-parse", "HEAD"]).trim().to_string();
    let mut store = GixStore::open(&ws, options("r")).unwrap();
    let c1 = experiment(&mut store, 1, "t", true).await;
    assert_eq!(git(&ws, &["rev-parse", &format!("{}^", c1.0)]).trim(), base);
    assert_eq!(
        git(&ws, &["rev-parse", "main"]).trim(),
        base,
        "main is untouched"
    );
    assert_eq!(
        git(&ws, &["cat-file", "-p", &format!("{}:README", c1.0)]),
        "mine\n"
    );
    experiment(&mut store, 2, "t", false).await;
    assert_eq!(
        std::fs::read_to_string(ws.join("README")).unwrap(),
        "mine\n"
    );
    assert_clean(&ws);
    // the user's commit is not an experiment
    assert_eq!(store.experiments("t").unwrap().len(), 2);
    let rec = store
        .reconcile(&[
            record(1, "t", &c1, Decision::Keep),
            record(2, "t", &c1, Decision::Revert),
        ])
        .await
        .unwrap();
    assert!(rec.unlogged.is_empty(), "{rec:?}");
}

#[test]
fn blob_id_is_what_git_hash_object_prints() {
    use std::io::Write;
    for content in [
        "",
        "KERNEL_KIND = \"softmax\"\n",
        "CONFIG = {\"BLOCK\": 1024}  # ü\n",
    ] {
        let mut child = std::process::Command::new("git")
            .args(["hash-object", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("git runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(content.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let git_id = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            autokernel_vcs::blob_id(content.as_bytes()),
            git_id.trim(),
            "{content:?}"
        );
    }
}

/// A failure of the git library keeps that library's error as the `source()` of the
/// store's error (it was flattened into a string), so callers and the command's `Caused
/// by:` lines see the whole chain.
#[tokio::test]
async fn a_git_failure_keeps_the_libraries_error_as_its_source() {
    let fx = Fixture::new();
    let mut store = fx.open("run1");
    experiment(&mut store, 1, "t", true).await;
    let missing = autokernel_core::CommitId("1".repeat(40));
    let err = store.read_kernel(&missing, "t").unwrap_err();
    let autokernel_core::StoreError::Git { operation, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(operation, "read kernel");
    let source = std::error::Error::source(&err).expect("the git library's error");
    assert!(err.to_string().ends_with(&source.to_string()), "{err}");
}
