use std::collections::HashSet;
use std::path::Path;

use autokernel_agent::TunerAgent;
use autokernel_core::pyliteral::{PyValue, TunableSource};
use autokernel_core::{Agent, BenchResult, Decision, Proposal, ProposalContext};

use crate::support::{differing_lines, measured, row, timed_reading, Fixture, KERNEL};

/// KERNEL with its CONFIG set to `(BLOCK_SIZE, num_warps, num_stages)`.
fn with_config((bs, warps, stages): (i64, i64, i64)) -> String {
    let parsed = TunableSource::parse(KERNEL).unwrap();
    let config = vec![
        ("BLOCK_SIZE".to_string(), PyValue::Int(bs)),
        ("num_warps".to_string(), PyValue::Int(warps)),
        ("num_stages".to_string(), PyValue::Int(stages)),
    ];
    parsed.with_config(KERNEL, &config)
}

/// `(BLOCK_SIZE, num_warps, num_stages)` of a source's CONFIG.
fn triple(source: &str) -> (i64, i64, i64) {
    let config = TunableSource::parse(source).unwrap().config;
    let get = |k: &str| match config.iter().find(|(key, _)| key == k).map(|(_, v)| v) {
        Some(PyValue::Int(v)) => *v,
        other => panic!("{k} = {other:?}"),
    };
    (get("BLOCK_SIZE"), get("num_warps"), get("num_stages"))
}

async fn candidate(agent: &mut TunerAgent, fx: &Fixture) -> Option<(String, String)> {
    match agent.propose(&fx.ctx()).await.unwrap() {
        Proposal::Candidate {
            description,
            source,
            usage,
        } => {
            assert_eq!(usage, None, "the tuner spends no tokens");
            Some((description, source))
        }
        Proposal::Exhausted => None,
        other => panic!("the tuner never answers {other:?}"),
    }
}

#[tokio::test]
async fn proposals_change_only_the_config_line_never_repeat_and_cover_every_axis_then_stop() {
    let fx = Fixture::new(KERNEL);
    let mut agent = TunerAgent::new();
    assert_eq!(agent.name(), "tune");
    let config_line = KERNEL
        .lines()
        .position(|l| l.starts_with("CONFIG"))
        .unwrap();
    let mut seen = Vec::new();
    while let Some((description, source)) = candidate(&mut agent, &fx).await {
        assert_eq!(
            differing_lines(KERNEL, &source),
            vec![config_line],
            "{source}"
        );
        // the rest of the CONFIG line, its trailing comment included, is kept
        let line = source.lines().nth(config_line).unwrap();
        assert!(
            line.starts_with("CONFIG = {") && line.ends_with("}  # launch parameters"),
            "{line}"
        );
        let t = triple(&source);
        assert!(
            description.starts_with(&format!(
                "tune: BLOCK_SIZE={} num_warps={} num_stages={} (",
                t.0, t.1, t.2
            )),
            "{description}"
        );
        seen.push(t);
        assert!(seen.len() <= 40, "the tuner does not stop: {seen:?}");
    }
    // nearest values first, keys in turn: one step up, one step down, then two steps
    assert_eq!(
        seen[..8],
        [
            (2048, 4, 2),
            (1024, 8, 2),
            (1024, 4, 3),
            (512, 4, 2),
            (1024, 2, 2),
            (1024, 4, 1),
            (4096, 4, 2),
            (256, 4, 2),
        ]
    );
    // then pairs of keys, each to one of its two nearest values, nearest pairs first
    assert_eq!(seen[8..], PAIRS_AROUND_THE_BASE);
    // and it stays exhausted
    assert!(candidate(&mut agent, &fx).await.is_none());
}

/// The paired moves around KERNEL's CONFIG (1024, 4, 2), worked out by hand: nearest
/// values BLOCK_SIZE 2048 then 512, num_warps 8 then 2, num_stages 3 then 1; pairs in
/// TUNABLES order; rank sums 0, 1, 2.
const PAIRS_AROUND_THE_BASE: [(i64, i64, i64); 12] = [
    (2048, 8, 2),
    (2048, 4, 3),
    (1024, 8, 3),
    (2048, 2, 2),
    (512, 8, 2),
    (2048, 4, 1),
    (512, 4, 3),
    (1024, 8, 1),
    (1024, 2, 3),
    (512, 2, 2),
    (512, 4, 1),
    (1024, 2, 1),
];

/// Runs the tuner against `cost` (lower is better) until it is exhausted, keeping each
/// proposal that lowers the cost, as the loop's keep rule would; asserts that no
/// configuration is proposed twice and that it stops within `limit` proposals.
async fn descend(cost: impl Fn((i64, i64, i64)) -> f64, limit: u64) -> Fixture {
    let mut fx = Fixture::new(KERNEL);
    let mut agent = TunerAgent::new();
    let mut seen: HashSet<(i64, i64, i64)> = HashSet::from([triple(KERNEL)]);
    let mut n = 1;
    while let Some((description, source)) = candidate(&mut agent, &fx).await {
        n += 1;
        let t = triple(&source);
        assert!(seen.insert(t), "{t:?} was proposed twice");
        let kept = cost(t) < cost(triple(&fx.source));
        let decision = if kept {
            Decision::Keep
        } else {
            Decision::Revert
        };
        fx.history
            .push(measured(n, decision, &description, &source));
        if kept {
            fx.source = source;
        }
        assert!(n < limit, "no convergence");
    }
    fx
}

/// A stand-in for the benchmark: a separable cost with its minimum at 2048 / 8 / 1.
fn cost((bs, warps, stages): (i64, i64, i64)) -> f64 {
    ((bs as f64).log2() - 11.0).abs()
        + ((warps as f64).log2() - 3.0).abs()
        + (stages - 1).abs() as f64
}

#[tokio::test]
async fn kept_improvements_move_the_search_to_the_optimum_without_repeats() {
    let fx = descend(cost, 60).await;
    assert_eq!(triple(&fx.source), (2048, 8, 1));
    // 1024/4/2 → 2048/4/2 → 2048/8/2 → 2048/8/1, each move found among the nearest values
    assert!(
        fx.history
            .iter()
            .filter(|r| r.decision == Decision::Keep)
            .count()
            == 3
    );
}

/// After a restart the tuner knows what was measured from the records' configurations
/// alone: no description here says `tune:`.
#[tokio::test]
async fn a_restarted_tuner_skips_configurations_the_history_measured() {
    let mut fx = Fixture::new(KERNEL);
    let mut first = TunerAgent::new();
    let mut earlier = Vec::new();
    for n in 2..=4 {
        let (_, source) = candidate(&mut first, &fx).await.unwrap();
        earlier.push(triple(&source));
        let description = format!("experiment {n}");
        fx.history
            .push(measured(n, Decision::Revert, &description, &source));
    }
    // an invalid row does not count as measured, whatever it carries
    fx.history.push(measured(
        5,
        Decision::Invalid,
        "no_code: a reply without code",
        &with_config((512, 4, 2)),
    ));
    assert!(fx.history.iter().all(|r| !r.description.contains("tune:")));
    let mut restarted = TunerAgent::new();
    let mut later = Vec::new();
    while let Some((_, source)) = candidate(&mut restarted, &fx).await {
        later.push(triple(&source));
    }
    assert_eq!(earlier, vec![(2048, 4, 2), (1024, 8, 2), (1024, 4, 3)]);
    assert_eq!(
        later[..5],
        [
            (512, 4, 2),
            (1024, 2, 2),
            (1024, 4, 1),
            (4096, 4, 2),
            (256, 4, 2)
        ]
    );
    assert_eq!(later[5..], PAIRS_AROUND_THE_BASE);
}

/// Descriptions are never parsed: a row that only says `tune: …` in its text, with no
/// recorded configuration (its kernel unreadable, say), tells the tuner nothing.
#[tokio::test]
async fn a_tune_description_without_a_recorded_configuration_is_not_read() {
    let mut fx = Fixture::new(KERNEL);
    fx.history.push(row(
        2,
        Decision::Revert,
        "tune: BLOCK_SIZE=2048 num_warps=4 num_stages=2 (BLOCK_SIZE 1024 -> 2048)",
    ));
    let (_, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(triple(&source), (2048, 4, 2));
}

/// An experiment cut short (a kill found on resume, a second Ctrl-C) measured nothing: its
/// configuration is proposed once more, and after a second interruption it counts as
/// tried (one workspace committed the same move four times when a kill was a `CRASH`).
#[tokio::test]
async fn an_interrupted_configuration_is_tried_once_more_not_again_and_again() {
    let mut interrupted = measured(2, Decision::Revert, "cut short", &with_config((2048, 4, 2)));
    interrupted.correctness = autokernel_core::Verdict::Interrupted;
    interrupted.latency_us = None;
    let mut fx = Fixture::new(KERNEL);
    fx.history.push(interrupted.clone());
    let (_, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(triple(&source), (2048, 4, 2), "tried once more");
    interrupted.experiment = 3;
    fx.history.push(interrupted);
    let (_, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(
        triple(&source),
        (1024, 8, 2),
        "twice cut short: counted as tried"
    );
}

#[tokio::test]
async fn configurations_measured_on_an_older_structure_may_be_tried_again() {
    let mut fx = Fixture::new(KERNEL);
    fx.history.push(measured(
        2,
        Decision::Revert,
        "a move",
        &with_config((2048, 4, 2)),
    ));
    let changed = KERNEL.replace("e / tl.sum(e, axis=0)", "e * (1.0 / tl.sum(e, axis=0))");
    assert_ne!(changed, KERNEL);
    let mut llm_row = measured(3, Decision::Keep, "Online softmax: one pass", &changed);
    llm_row.agent = "openai:m".into();
    fx.history.push(llm_row);
    fx.source = changed;
    let (_, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(triple(&source), (2048, 4, 2));
    // and back on the first structure, what was measured there still counts
    fx.source = KERNEL.to_string();
    let (_, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(triple(&source), (1024, 8, 2));
}

#[tokio::test]
async fn a_file_without_tunables_has_nothing_to_tune() {
    let without = KERNEL.replace("TUNABLES = {", "OPTIONS = {");
    let fx = Fixture::new(&without);
    assert!(candidate(&mut TunerAgent::new(), &fx).await.is_none());
    let expression = KERNEL.replace("\"num_warps\": 4,", "\"num_warps\": 2 * 2,");
    let fx = Fixture::new(&expression);
    assert!(candidate(&mut TunerAgent::new(), &fx).await.is_none());
}

#[tokio::test]
async fn every_starter_kernel_parses_and_gets_a_config_only_proposal() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../autokernel-bench/python/starters");
    assert!(dir.is_dir(), "starters not found at `{}`", dir.display());
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("py") {
            continue;
        }
        count += 1;
        let source = std::fs::read_to_string(&path).unwrap();
        let parsed =
            TunableSource::parse(&source).unwrap_or_else(|e| panic!("`{}`: {e}", path.display()));
        for (key, values) in &parsed.tunables {
            assert!(
                parsed.config.iter().any(|(k, _)| k == key),
                "`{}`: TUNABLES key {key} is not in CONFIG",
                path.display()
            );
            assert!(
                !values.is_empty(),
                "`{}`: {key} has no values",
                path.display()
            );
        }
        let fx = Fixture::new(&source);
        let config_line = source
            .lines()
            .position(|l| l.starts_with("CONFIG ="))
            .unwrap();
        let (_, proposed) = candidate(&mut TunerAgent::new(), &fx)
            .await
            .unwrap_or_else(|| panic!("`{}`: nothing to tune", path.display()));
        assert_eq!(
            differing_lines(&source, &proposed),
            vec![config_line],
            "{}",
            path.display()
        );
    }
    assert_eq!(
        count,
        autokernel_core::KernelKind::ALL.len(),
        "one starter per kernel kind"
    );
}

#[tokio::test]
async fn after_a_resume_the_baseline_configuration_is_not_proposed_again() {
    // found by a fresh-user test: resumed runs re-measured the starter's CONFIG; the
    // baseline row's recorded configuration is what says it was measured
    let mut fx = Fixture::new(KERNEL);
    let (description, source) = candidate(&mut TunerAgent::new(), &fx).await.unwrap();
    assert_eq!(triple(&source), (2048, 4, 2));
    fx.history
        .push(measured(2, Decision::Keep, &description, &source));
    fx.source = source;
    let mut restarted = TunerAgent::new();
    let mut proposed = Vec::new();
    while let Some((description, source)) = candidate(&mut restarted, &fx).await {
        proposed.push(triple(&source));
        fx.history.push(measured(
            3 + proposed.len() as u64,
            Decision::Revert,
            &description,
            &source,
        ));
    }
    assert!(!proposed.is_empty());
    assert!(
        !proposed.contains(&(1024, 4, 2)),
        "re-proposed the baseline: {proposed:?}"
    );
}

#[tokio::test]
async fn a_paired_move_finds_an_optimum_no_single_move_reaches() {
    // only BLOCK_SIZE 2048 with 8 warps together is better than the base
    let fx = descend(|t| if (t.0, t.1) == (2048, 8) { 0.0 } else { 1.0 }, 80).await;
    assert_eq!(triple(&fx.source), (2048, 8, 2));
    let kept: Vec<&str> = fx
        .history
        .iter()
        .filter(|r| r.decision == Decision::Keep)
        .map(|r| r.description.as_str())
        .collect();
    assert_eq!(
        kept,
        ["tune: BLOCK_SIZE=2048 num_warps=8 num_stages=2 (BLOCK_SIZE 1024 -> 2048, num_warps 4 -> 8)"]
    );
}

/// A paired move measured by anyone (here an LLM agent's row) is not proposed again.
#[tokio::test]
async fn a_resumed_tuner_reads_paired_moves_from_the_records() {
    let mut fx = Fixture::new(KERNEL);
    let mut llm_row = measured(
        2,
        Decision::Revert,
        "more warps, wider blocks",
        &with_config((2048, 8, 2)),
    );
    llm_row.agent = "openai:m".into();
    fx.history.push(llm_row);
    let mut agent = TunerAgent::new();
    let mut proposed = Vec::new();
    while let Some((_, source)) = candidate(&mut agent, &fx).await {
        proposed.push(triple(&source));
    }
    assert!(!proposed.contains(&(2048, 8, 2)), "{proposed:?}");
    // everything else around the base: the 8 single moves and the 11 other pairs
    assert_eq!(proposed.len(), 8 + 11);
}

/// Every proposal until exhaustion, with `best` as the best's timed result.
async fn all_proposals(best: Option<&BenchResult>) -> Vec<(i64, i64, i64)> {
    let fx = Fixture::new(KERNEL);
    let mut agent = TunerAgent::new();
    let mut seen = Vec::new();
    loop {
        let ctx = ProposalContext {
            best_result: best,
            ..fx.ctx()
        };
        match agent.propose(&ctx).await.unwrap() {
            Proposal::Candidate { source, .. } => seen.push(triple(&source)),
            Proposal::Exhausted => return seen,
            other => panic!("{other:?}"),
        }
        assert!(seen.len() <= 40, "the tuner does not stop: {seen:?}");
    }
}

#[tokio::test]
async fn the_keys_the_best_read_move_first_then_every_key() {
    let every = all_proposals(None).await;
    // num_stages unread: first the same search, in the same order, without the moves that
    // change it (singles and pairs alike; KERNEL's num_stages is 2), then the rest of the
    // search over every key, in its order, nothing proposed twice
    let read = timed_reading(&["BLOCK_SIZE", "num_warps"]);
    let first: Vec<_> = every.iter().copied().filter(|t| t.2 == 2).collect();
    assert!(first.len() < every.len());
    let then = every.iter().copied().filter(|t| !first.contains(t));
    let want: Vec<_> = first.iter().copied().chain(then).collect();
    assert_eq!(all_proposals(Some(&read)).await, want);
    // reads that name no tunable (or nothing known): every key moves, as without a result
    let none = timed_reading(&["NOT_A_TUNABLE"]);
    assert_eq!(all_proposals(Some(&none)).await, every);
}
