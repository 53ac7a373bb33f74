//! Reconciling the repository with results.tsv after a crash.

use autokernel_core::{CommitId, Decision, ExperimentDraft, VersionStore};

use crate::support::*;

#[tokio::test]
async fn an_unlogged_commit_is_found_and_reverting_it_restores_the_kept_state() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("rc");
    let c1 = experiment(&mut store, 1, "t", true).await;
    let c2 = experiment(&mut store, 2, "t", false).await;
    let t = target("t");
    // experiment 3 is committed, then the process dies mid-bench: no row
    let c3 = store
        .commit(&ExperimentDraft {
            experiment: 3,
            target: &t,
            description: "died here",
            agent: "llm",
            source: &source(3),
        })
        .await
        .unwrap();
    drop(store);

    let mut store = fx.open("rc");
    let logged = vec![
        record(1, "t", &c1, Decision::Baseline),
        record(2, "t", &c2, Decision::Revert),
        record(
            9,
            "t",
            &CommitId("0123456789abcdef0123456789abcdef01234567".into()),
            Decision::Keep,
        ),
    ];
    let rec = store.reconcile(&logged).await.unwrap();
    assert_eq!(rec.unlogged.len(), 1, "{rec:?}");
    let lost = &rec.unlogged[0];
    assert_eq!(
        (lost.experiment, lost.target.as_str(), &lost.commit),
        (3, "t", &c3)
    );
    assert_eq!(
        (lost.description.as_str(), lost.agent.as_str()),
        ("died here", "llm")
    );
    assert_eq!(
        rec.missing_commits,
        vec![(9, "0123456789abcdef0123456789abcdef01234567".to_string())]
    );

    // the loop logs it as CRASH/revert and reverts it: the unlogged commit is the tip
    store
        .revert(&record(3, "t", &c3, Decision::Revert))
        .await
        .unwrap();
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c1.0);
    assert_eq!(
        git(&ws, &["rev-parse", "refs/autokernel/reverted/3"]).trim(),
        c3.0
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        source(1)
    );
    assert_clean(&ws);
    let mut all = logged.clone();
    all.push(record(3, "t", &c3, Decision::Revert));
    let rec = store.reconcile(&all).await.unwrap();
    assert!(rec.unlogged.is_empty(), "{rec:?}");
}

#[tokio::test]
async fn an_experiment_reverted_but_not_logged_is_reported_and_reverting_again_is_harmless() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("rc2");
    let c1 = experiment(&mut store, 1, "t", true).await;
    // reverted, then killed before the row was appended
    let c2 = experiment(&mut store, 2, "t", false).await;
    let rec = store
        .reconcile(&[record(1, "t", &c1, Decision::Baseline)])
        .await
        .unwrap();
    let found: Vec<(u64, CommitId)> = rec
        .unlogged
        .iter()
        .map(|u| (u.experiment, u.commit.clone()))
        .collect();
    assert_eq!(found, vec![(2, c2.clone())]);
    store
        .revert(&record(2, "t", &c2, Decision::Revert))
        .await
        .unwrap();
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), c1.0);
    assert_eq!(
        git_lines(
            &ws,
            &["for-each-ref", "--format=%(refname)", "refs/autokernel"]
        ),
        vec!["refs/autokernel/reverted/2"]
    );
    assert_clean(&ws);
}
