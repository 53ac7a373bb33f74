//! The core loop end to end with the real store, checked from outside with git.

use autokernel_core::testing::{FakeBenchmarker, ScriptedAgent};
use autokernel_core::{Decision, Interrupt, LoopOptions, OptimizationLoop, ResultsLog, StopReason};

use crate::support::*;

fn src(latency: f64, extra: &str) -> String {
    format!("KERNEL_KIND = \"softmax\"\n# latency_us = {latency}\n{extra}\n")
}

#[tokio::test]
async fn an_optimization_loop_leaves_a_repository_that_agrees_with_results_tsv() {
    let fx = Fixture::new();
    let ws = fx.ws();
    let store = fx.open("e2e");
    let candidates = [
        ("faster", src(80.0, "")),
        ("wrong", src(10.0, "# verdict = FAIL")),
        ("crashes", src(10.0, "# verdict = CRASH")),
        ("faster again", src(70.0, "")),
        ("noise", src(69.8, "")),
    ];
    let items: Vec<(&str, &str)> = candidates.iter().map(|(d, s)| (*d, s.as_str())).collect();
    let starter = src(100.0, "");
    let log = ResultsLog::open(ws.join("results.tsv")).unwrap();
    let mut l = OptimizationLoop::new(
        ScriptedAgent::candidates(&items),
        FakeBenchmarker::from_comments(),
        store,
        log,
        LoopOptions::new(ws.join(".autokernel/scratch")),
    );
    let out = l
        .run(vec![(target("t"), starter.clone())], &Interrupt::new())
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::AllTargetsDone);
    let rows = l.log().rows().to_vec();
    let decisions: Vec<&str> = rows.iter().map(|r| r.decision.label()).collect();
    assert_eq!(
        decisions,
        ["baseline", "keep", "revert", "revert", "keep", "revert"]
    );
    assert!(
        rows.iter()
            .all(|r| r.correctness != autokernel_core::Verdict::Tamper),
        "benched bytes = committed bytes"
    );

    // git log <branch>: exactly the baseline and kept experiments, in order
    let kept: Vec<String> = rows
        .iter()
        .filter(|r| matches!(r.decision, Decision::Baseline | Decision::Keep))
        .rev()
        .map(|r| r.commit.clone().unwrap())
        .collect();
    assert_eq!(
        git_lines(&ws, &["log", "--format=%H", "autokernel/e2e"]),
        kept
    );
    // git log --all: every experiment
    let all = git_lines(&ws, &["log", "--all", "--format=%H"]);
    for r in &rows {
        assert!(
            all.contains(r.commit.as_ref().unwrap()),
            "row {} missing",
            r.experiment
        );
    }
    // each row's commit holds the kernel.py that was benchmarked for it
    let sources: Vec<&str> = std::iter::once(starter.as_str())
        .chain(candidates.iter().map(|(_, s)| s.as_str()))
        .collect();
    for (r, expected) in rows.iter().zip(sources) {
        let commit = r.commit.as_ref().unwrap();
        assert_eq!(
            git(
                &ws,
                &["rev-parse", "--verify", &format!("{commit}^{{commit}}")]
            )
            .trim(),
            commit
        );
        assert_eq!(
            git(
                &ws,
                &["cat-file", "-p", &format!("{commit}:targets/t/kernel.py")]
            ),
            expected,
            "row {}",
            r.experiment
        );
        let subject = git(&ws, &["log", "-1", "--format=%s", commit]);
        assert!(
            subject.starts_with(&format!("exp {}: t: ", r.experiment)),
            "{subject}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("targets/t/kernel.py")).unwrap(),
        src(70.0, "")
    );
    assert_clean(&ws);
    drop(l);

    // a resumed run continues the numbering on the same branch
    let store = fx.open("e2e");
    let log = ResultsLog::open(ws.join("results.tsv")).unwrap();
    let more = src(50.0, "# resumed");
    let mut l = OptimizationLoop::new(
        ScriptedAgent::candidates(&[("after resume", more.as_str())]),
        FakeBenchmarker::from_comments(),
        store,
        log,
        LoopOptions::new(ws.join(".autokernel/scratch")),
    );
    l.run(vec![(target("t"), starter.clone())], &Interrupt::new())
        .await
        .unwrap();
    let last = l.log().rows().last().unwrap().clone();
    assert_eq!((last.experiment, last.decision), (7, Decision::Keep));
    assert_eq!(
        git(&ws, &["rev-parse", "autokernel/e2e"]).trim(),
        last.commit.unwrap()
    );
    assert_eq!(
        git_lines(&ws, &["log", "--format=%H", "autokernel/e2e"]).len(),
        4
    );
    assert_clean(&ws);
}
