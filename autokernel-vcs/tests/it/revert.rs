//! Revert restores the kept state exactly and leaves results.tsv alone.

use autokernel_core::{Decision, ExperimentDraft, VersionStore};

use crate::support::*;

#[tokio::test]
async fn revert_removes_the_stray_file_restores_kernel_and_index_and_keeps_results_tsv() {
    // the described case of tests/cases/git/README.md (and of the shared cases' README):
    // the experiment also created kernel_utils.py next to kernel.py while results.tsv
    // gained a row
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("case");
    let kept = experiment(&mut store, 1, "t", true).await;
    let header = "experiment\tcommit\n";
    std::fs::write(ws.join("results.tsv"), format!("{header}1\t{}\n", kept.0)).unwrap();

    let t = target("t");
    let candidate = "KERNEL_KIND = \"softmax\"\nfrom kernel_utils import helper\n";
    let c2 = store
        .commit(&ExperimentDraft {
            experiment: 2,
            target: &t,
            description: "split into two files",
            agent: "llm",
            source: candidate,
        })
        .await
        .unwrap();
    std::fs::write(ws.join("targets/t/kernel_utils.py"), "def helper(): pass\n").unwrap();
    std::fs::create_dir_all(ws.join("targets/t/__pycache__")).unwrap();
    std::fs::write(
        ws.join("targets/t/__pycache__/kernel.cpython-312.pyc"),
        "stale",
    )
    .unwrap();
    let log = format!("{header}1\t{}\n2\t{}\n", kept.0, c2.0);
    std::fs::write(ws.join("results.tsv"), &log).unwrap();

    store
        .revert(&record(2, "t", &c2, Decision::Revert))
        .await
        .unwrap();

    let kept_blob = git(
        &ws,
        &[
            "cat-file",
            "blob",
            &format!("{}:targets/t/kernel.py", kept.0),
        ],
    );
    assert_eq!(
        std::fs::read(ws.join("targets/t/kernel.py")).unwrap(),
        kept_blob.as_bytes()
    );
    assert!(
        !ws.join("targets/t/kernel_utils.py").exists(),
        "stray file left behind"
    );
    assert!(
        !ws.join("targets/t/__pycache__").exists(),
        "stale bytecode left behind"
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), kept.0);
    assert_eq!(
        git(&ws, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/autokernel/case"
    );
    assert_eq!(
        git(&ws, &["rev-parse", "refs/autokernel/reverted/2"]).trim(),
        c2.0
    );
    assert_eq!(
        git_lines(&ws, &["ls-files", "-s"]),
        git_lines(&ws, &["ls-tree", "-r", "HEAD"])
            .iter()
            .map(|l| {
                // ls-tree: "<mode> blob <id>\t<path>" ; ls-files -s: "<mode> <id> 0\t<path>"
                let (meta, path) = l.split_once('\t').unwrap();
                let parts: Vec<&str> = meta.split(' ').collect();
                format!("{} {} 0\t{path}", parts[0], parts[2])
            })
            .collect::<Vec<_>>()
    );
    assert_clean(&ws);
    assert_eq!(
        std::fs::read_to_string(ws.join("results.tsv")).unwrap(),
        log,
        "results.tsv touched"
    );
}

#[tokio::test]
async fn revert_twice_is_harmless_and_keep_after_revert_is_an_error() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("idem");
    let c1 = experiment(&mut store, 1, "t", true).await;
    let c2 = experiment(&mut store, 2, "t", false).await;
    let refs_before = git(&ws, &["for-each-ref", "refs/heads", "refs/autokernel"]);
    assert_eq!(
        refs_before,
        format!(
            "{} commit\trefs/autokernel/reverted/2\n{} commit\trefs/heads/autokernel/idem\n",
            c2.0, c1.0
        )
    );
    store
        .revert(&record(2, "t", &c2, Decision::Revert))
        .await
        .unwrap();
    assert_eq!(
        git(&ws, &["for-each-ref", "refs/heads", "refs/autokernel"]),
        refs_before
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c1.0);
    let err = store
        .keep(&record(2, "t", &c2, Decision::Keep))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("keep") && text.contains("not on the run branch"),
        "{text}"
    );
    assert!(
        text.contains(&ws.canonicalize().unwrap().display().to_string()),
        "names the repo: {text}"
    );
    assert_clean(&ws);
}

#[tokio::test]
async fn reverting_the_first_commit_of_an_empty_repository_leaves_an_unborn_branch() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("orphan");
    let c1 = experiment(&mut store, 1, "t", false).await;
    assert_eq!(store.tip().unwrap(), None);
    assert!(
        !ws.join("targets").exists(),
        "the target folder is gone with its only commit"
    );
    assert_eq!(
        git(&ws, &["rev-parse", "refs/autokernel/reverted/1"]).trim(),
        c1.0
    );
    assert_eq!(
        git(&ws, &["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    // the next commit is a root commit on the run branch
    let c2 = experiment(&mut store, 2, "t", true).await;
    assert_eq!(git_lines(&ws, &["log", "--format=%H", "HEAD"]), vec![c2.0]);
}
