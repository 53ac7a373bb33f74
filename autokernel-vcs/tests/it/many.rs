//! Many experiments in a row.

use std::time::Instant;

use crate::support::*;

#[tokio::test]
async fn two_hundred_experiments_in_a_row_finish_correctly() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let mut store = fx.open("many");
    let t0 = Instant::now();
    let mut kept = vec![experiment(&mut store, 1, "t", true).await];
    for n in 2..=201u64 {
        let keep = n % 10 == 0;
        let c = experiment(&mut store, n, "t", keep).await;
        if keep {
            kept.push(c);
        }
    }
    let elapsed = t0.elapsed();
    kept.reverse();
    let on_branch: Vec<String> = git_lines(&ws, &["log", "--format=%H", "HEAD"]);
    assert_eq!(
        on_branch,
        kept.iter().map(|c| c.0.clone()).collect::<Vec<_>>()
    );
    assert_eq!(on_branch.len(), 21);
    let reverted = git_lines(
        &ws,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/autokernel/reverted",
        ],
    );
    assert_eq!(reverted.len(), 180);
    let subjects = git_lines(&ws, &["log", "--all", "--format=%s", "--", "targets"]);
    assert_eq!(subjects.len(), 201, "every experiment is in git log --all");
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        source(200)
    );
    assert_eq!(store.experiments("t").unwrap().len(), 201);
    assert_clean(&ws);
    git(&ws, &["fsck", "--no-dangling"]);
    // about 5 s in a debug build on the 2-core VM; a lock wait per experiment would exceed this
    assert!(elapsed.as_secs() < 60, "201 experiments took {elapsed:?}");
}
