//! Loop tests with the in-memory doubles of `crate::testing`.

use super::*;
use crate::testing::{FakeBenchmarker, MemoryStore, ScriptedAgent};
use crate::{Comparison, DType, KernelKind, Verdict};

fn target(id: &str, fraction: f64) -> Target {
    Target::new(id, KernelKind::Softmax)
        .with_shapes(vec![crate::Shape(vec![64, 64])])
        .with_dtype(DType::Float16)
        .with_fraction(fraction)
        .with_op("aten::softmax")
}

fn src(latency: f64, extra: &str) -> String {
    format!("KERNEL_KIND = \"softmax\"\n# latency_us = {latency}\n{extra}\n")
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn log(&self) -> ResultsLog {
        ResultsLog::open(self.dir.path().join("results.tsv")).unwrap()
    }
    fn options(&self) -> LoopOptions {
        LoopOptions::new(self.dir.path().join("scratch"))
    }
}

#[tokio::test]
async fn kept_failed_crashed_and_noisy_candidates_are_decided_and_logged() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[
        ("faster", &src(80.0, "")),
        ("wrong", &src(10.0, "# verdict = FAIL")),
        ("crashes", &src(10.0, "# verdict = CRASH")),
        ("noise", &src(79.6, "")), // 0.5% faster than 80: below the 1% threshold
    ]);
    let store = MemoryStore::new(fx.dir.path());
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        store,
        fx.log(),
        fx.options(),
    );
    let out = l
        .run(vec![(target("t", 0.5), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let decisions: Vec<(String, &str)> = l
        .log()
        .rows()
        .iter()
        .map(|r| (r.description.clone(), r.decision.label()))
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("baseline: softmax starter kernel".to_string(), "baseline"),
            ("faster".to_string(), "keep"),
            ("wrong".to_string(), "revert"),
            ("crashes".to_string(), "revert"),
            ("noise".to_string(), "revert"),
        ]
    );
    assert_eq!(l.log().rows()[2].correctness.label(), "FAIL");
    assert_eq!(l.log().rows()[3].correctness.label(), "CRASH");
    assert_eq!(l.store().reverted, vec![3, 4, 5]);
    // the work tree holds the kept kernel again after the reverts
    let on_disk = std::fs::read_to_string(fx.dir.path().join("targets/t/kernel.py")).unwrap();
    assert_eq!(on_disk, src(80.0, ""));
    assert_eq!(out.stop, StopReason::AllTargetsDone);
    assert_eq!(out.experiments, 4);
    // 100 → 80 us is 1.25x on half the time: 1 / (1 - 0.5 * 0.2) = 1.111
    assert!(
        (out.projected_speedup - 1.0 / 0.9).abs() < 1e-9,
        "{}",
        out.projected_speedup
    );
}

#[tokio::test]
async fn a_baseline_from_a_users_file_says_so_in_its_row() {
    let fx = Fixture::new();
    let mut options = fx.options();
    options.baseline_source = Some("my_softmax.py".into());
    let mut l = OptimizationLoop::new(
        ScriptedAgent::candidates(&[]),
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        options,
    );
    l.run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let rows = l.log().rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].description,
        "baseline: softmax kernel from my_softmax.py"
    );
    assert_eq!(rows[0].decision, Decision::Baseline);
}

#[tokio::test]
async fn a_plateau_moves_on_to_the_next_target() {
    let fx = Fixture::new();
    let slow: Vec<(String, String)> = (0..5)
        .map(|i| (format!("slow {i}"), src(200.0, &format!("# {i}"))))
        .collect();
    let items: Vec<(&str, &str)> = slow.iter().map(|(d, s)| (d.as_str(), s.as_str())).collect();
    let agent = ScriptedAgent::candidates(&items);
    let mut options = fx.options();
    options.orchestrator.plateau = 3;
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        options,
    );
    let out = l
        .run(
            vec![
                (target("big", 0.6), src(100.0, "")),
                (target("small", 0.1), src(100.0, "")),
            ],
            &Interrupt::new(),
        )
        .await
        .unwrap();
    let targets: Vec<&str> = l.log().rows().iter().map(|r| r.target.as_str()).collect();
    // big: baseline + 3 reverts (plateau), then small: baseline + the 2 proposals left
    assert_eq!(
        targets,
        vec!["big", "big", "big", "big", "small", "small", "small"]
    );
    assert_eq!(out.states[0].done, Some(MoveOn::Plateau(3)));
}

#[tokio::test]
async fn the_experiment_cap_stops_the_run() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[
        ("a", &src(90.0, "")),
        ("b", &src(80.0, "")),
        ("c", &src(70.0, "")),
    ]);
    let mut options = fx.options();
    options.max_experiments = Some(2);
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        options,
    );
    let out = l
        .run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::ExperimentCap);
    assert_eq!(l.log().rows().len(), 3, "baseline + 2");
}

#[tokio::test]
async fn an_invalid_proposal_is_logged_without_commit_or_bench() {
    let fx = Fixture::new();
    let mut agent = ScriptedAgent::default();
    agent.script.push_back(Proposal::Invalid {
        class: crate::InvalidClass::Truncated,
        detail: "finish_reason length".into(),
        usage: None,
    });
    let bench = FakeBenchmarker::from_comments();
    let mut l = OptimizationLoop::new(
        agent,
        bench,
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let row = &l.log().rows()[1];
    assert_eq!(row.decision, Decision::Invalid);
    assert_eq!(row.correctness.label(), "NOT_RUN");
    assert_eq!(row.commit, None);
    assert!(row.description.starts_with("truncated"));
    assert_eq!(
        l.bench.benched.lock().unwrap().len(),
        1,
        "only the baseline was benched"
    );
}

/// An agent whose third proposal completes a streak of failures: it gives up on that
/// request instead of answering it, as the LLM agent does.
struct GivesUpOnTheThird(u32);

#[async_trait::async_trait]
impl Agent for GivesUpOnTheThird {
    fn name(&self) -> String {
        "gives-up".into()
    }
    async fn propose(&mut self, _: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        self.0 += 1;
        if self.0 < 3 {
            return Ok(Proposal::Invalid {
                class: crate::InvalidClass::Http(500),
                detail: format!("failure {}", self.0),
                usage: None,
            });
        }
        Err(AgentError::Fatal(
            "http_500: failure 3 (3 proposals in a row without a chat completion)".into(),
        ))
    }
}

/// The tester's finding: the proposal an agent gave up on had no row (rows 2 and 3 were
/// logged, the fourth attempt was not). Every attempted proposal is a row.
#[tokio::test]
async fn the_proposal_an_agent_gives_up_on_is_logged_then_the_run_stops() {
    let fx = Fixture::new();
    let mut l = OptimizationLoop::new(
        GivesUpOnTheThird(0),
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    let err = l
        .run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LoopError::Agent(AgentError::Fatal(_))),
        "{err:?}"
    );
    let rows = l.log().rows();
    assert_eq!(
        rows.iter().map(|r| r.experiment).collect::<Vec<_>>(),
        vec![1, 2, 3, 4],
        "baseline, two invalid proposals, and the one given up on"
    );
    let last = &rows[3];
    assert_eq!(last.decision, Decision::Invalid);
    assert_eq!(last.correctness.label(), "NOT_RUN");
    assert_eq!(last.commit, None);
    assert_eq!(last.agent, "gives-up");
    assert_eq!(
        last.description,
        "agent gave up: http_500: failure 3 (3 proposals in a row without a chat completion)"
    );
    // the row is on disk, not only in memory
    let reread = ResultsLog::open(fx.dir.path().join("results.tsv")).unwrap();
    assert_eq!(reread.rows().len(), 4);
    assert_eq!(
        l.bench.benched.lock().unwrap().len(),
        1,
        "only the baseline was benched"
    );
}

#[tokio::test]
async fn a_resumed_run_logs_the_unlogged_commit_as_interrupted_and_continues_numbering() {
    let fx = Fixture::new();
    let mut store = MemoryStore::new(fx.dir.path());
    let t = target("t", 1.0);
    // a first run: baseline logged; experiment 2 committed, then the process died
    {
        let mut log = fx.log();
        // an agent with nothing to propose: the baseline runs, then the target is exhausted
        let agent = ScriptedAgent::default();
        let mut l = OptimizationLoop::new(
            agent,
            FakeBenchmarker::from_comments(),
            store,
            log,
            fx.options(),
        );
        l.run(vec![(t.clone(), src(100.0, ""))], &Interrupt::new())
            .await
            .unwrap();
        log = ResultsLog::open(fx.dir.path().join("results.tsv")).unwrap();
        assert_eq!(log.rows().len(), 1);
        store = std::mem::replace(&mut l.store, MemoryStore::new(fx.dir.path()));
        let s = src(50.0, "");
        store
            .commit(&ExperimentDraft {
                experiment: 2,
                target: &t,
                description: "half",
                agent: "scripted",
                source: &s,
            })
            .await
            .unwrap();
    }
    let agent = ScriptedAgent::candidates(&[("next", &src(90.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        store,
        fx.log(),
        fx.options(),
    );
    l.run(vec![(t, src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let rows = l.log().rows();
    assert_eq!(
        rows.iter().map(|r| r.experiment).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // a kill is not the candidate's fault: INTERRUPTED, its description the agent's own
    assert_eq!(rows[1].correctness, Verdict::Interrupted);
    assert_eq!(rows[1].decision, Decision::Revert);
    assert_eq!(rows[1].description, "half");
    assert_eq!(rows[2].description, "next");
    assert_eq!(rows[2].decision, Decision::Keep);
    // no second baseline
    assert_eq!(
        rows.iter()
            .filter(|r| r.decision == Decision::Baseline)
            .count(),
        1
    );
}

#[tokio::test]
async fn a_stop_request_ends_the_run_before_the_next_experiment() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[("a", &src(90.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    let interrupt = Interrupt::new();
    interrupt.request();
    let out = l
        .run(vec![(target("t", 1.0), src(100.0, ""))], &interrupt)
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::Interrupted);
    assert!(l.log().rows().is_empty());
}

#[tokio::test]
async fn a_result_for_other_source_bytes_is_not_kept() {
    let fx = Fixture::new();
    // a benchmarker that lies about what it ran
    let bench = FakeBenchmarker::new(|s| {
        (
            Correctness::Pass,
            if s.contains("fast") { 10.0 } else { 100.0 },
        )
    });
    struct Lying(FakeBenchmarker);
    #[async_trait::async_trait]
    impl Benchmarker for Lying {
        async fn bench(&self, r: &BenchRequest) -> Result<BenchResult, BenchError> {
            let mut out = self.0.bench(r).await?;
            if out.metrics.as_ref().is_some_and(|m| m.latency_us < 50.0) {
                out.source_sha256 = "0".repeat(64);
            }
            Ok(out)
        }
        async fn compare(&self, r: &CompareRequest) -> Result<Comparison, BenchError> {
            self.0.compare(r).await
        }
    }
    let agent = ScriptedAgent::candidates(&[("fast", "KERNEL_KIND = \"softmax\"\n# fast\n")]);
    let mut l = OptimizationLoop::new(
        agent,
        Lying(bench),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(
        vec![(target("t", 1.0), "KERNEL_KIND = \"softmax\"\n".into())],
        &Interrupt::new(),
    )
    .await
    .unwrap();
    assert_eq!(l.log().rows()[1].correctness.label(), "TAMPER");
    assert_eq!(l.log().rows()[1].decision, Decision::Revert);
}

/// Records every verdict and decision, in order.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl Reporter for Recorder {
    fn on_verdict(&self, experiment: u64, verdict: &KeepVerdict) {
        let text = match verdict {
            KeepVerdict::Keep { speedup } => format!("verdict {experiment} keep {speedup:.2}"),
            KeepVerdict::Revert { reason } => format!("verdict {experiment} revert: {reason}"),
        };
        self.0.lock().unwrap().push(text);
    }
    fn on_decision(&self, record: &ExperimentRecord, _result: Option<&BenchResult>) {
        self.0.lock().unwrap().push(format!(
            "decision {} {}",
            record.experiment,
            record.decision.label()
        ));
    }
}

#[tokio::test]
async fn the_reporter_hears_why_each_candidate_was_kept_or_reverted_before_its_row() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[
        ("faster", &src(80.0, "")),
        ("noise", &src(79.6, "")), // 0.5% faster than 80: below the 1% threshold
    ]);
    let recorder = std::sync::Arc::new(Recorder::default());
    struct Shared(std::sync::Arc<Recorder>);
    impl Reporter for Shared {
        fn on_verdict(&self, n: u64, v: &KeepVerdict) {
            self.0.on_verdict(n, v)
        }
        fn on_decision(&self, r: &ExperimentRecord, b: Option<&BenchResult>) {
            self.0.on_decision(r, b)
        }
    }
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    )
    .with_reporter(Box::new(Shared(recorder.clone())));
    l.run(vec![(target("t", 0.5), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let events = recorder.0.lock().unwrap().clone();
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(events[0], "decision 1 baseline");
    // 100 → 80 µs head to head
    assert_eq!(events[1], "verdict 2 keep 1.25");
    assert_eq!(events[2], "decision 2 keep");
    assert!(
        events[3].starts_with("verdict 3 revert: ") && events[3].contains("threshold"),
        "{events:?}"
    );
    assert_eq!(events[4], "decision 3 revert");
}

/// The phases a progress line shows, in order: the baseline is `Baseline` (never
/// "proposing"); a candidate is `Proposing`, `Judging`, and `Comparing` only when it
/// passed; a kept row carries the head-to-head that decided it.
#[tokio::test]
async fn the_reporter_hears_each_phase_in_order_and_the_row_its_head_to_head() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[
        ("faster", &src(80.0, "")),
        ("wrong", &src(10.0, "# verdict = FAIL")),
    ]);
    #[derive(Default)]
    struct Phases(std::sync::Mutex<Vec<String>>);
    struct Shared(std::sync::Arc<Phases>);
    impl Reporter for Shared {
        fn on_phase(&self, _t: &Target, n: u64, p: Phase) {
            self.0 .0.lock().unwrap().push(format!("{n} {}", p.label()));
        }
        fn on_decision(&self, r: &ExperimentRecord, _b: Option<&BenchResult>) {
            let h = r.head_to_head.as_ref().map(|h| h.median_speedup);
            self.0
                 .0
                .lock()
                .unwrap()
                .push(format!("{n} {h:?}", n = r.experiment));
        }
    }
    let phases = std::sync::Arc::new(Phases::default());
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    )
    .with_reporter(Box::new(Shared(phases.clone())));
    l.run(vec![(target("t", 0.5), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let events = phases.0.lock().unwrap().clone();
    assert_eq!(
        events,
        vec![
            "1 baseline",
            "1 None",
            "2 proposing",
            "2 judging",
            "2 comparing",
            "2 Some(1.25)",
            "3 proposing",
            "3 judging",
            "3 None",
            "4 proposing",
        ]
    );
}

#[tokio::test]
async fn a_targets_layout_reaches_every_bench_and_compare_request() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[("faster", &src(80.0, ""))]);
    let mut t = target("t", 0.5);
    t.kind = KernelKind::Matmul;
    t.layout = crate::Layout::BTransposed;
    let bench = std::sync::Arc::new(FakeBenchmarker::from_comments());
    let mut l = OptimizationLoop::new(
        agent,
        SharedBench(bench.clone()),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(vec![(t, src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let layouts = bench.layouts.lock().unwrap().clone();
    // the baseline's bench, the candidate's bench and its head-to-head comparison
    assert_eq!(layouts, vec![crate::Layout::BTransposed; 3]);
}

/// Lets a test keep a handle on the benchmarker the loop owns.
struct SharedBench(std::sync::Arc<FakeBenchmarker>);

#[async_trait::async_trait]
impl Benchmarker for SharedBench {
    async fn bench(&self, request: &BenchRequest) -> Result<BenchResult, BenchError> {
        self.0.bench(request).await
    }
    async fn compare(&self, request: &CompareRequest) -> Result<Comparison, BenchError> {
        self.0.compare(request).await
    }
}

/// A proposal that is the best kernel.py byte for byte is logged `invalid` without a commit
/// or a measurement (measured against itself it could only be noise, or a "keep" of
/// nothing), and the agent hears of it among its failures; a later real candidate is judged.
#[tokio::test]
async fn a_proposal_identical_to_the_best_is_not_measured() {
    let fx = Fixture::new();
    let starter = src(100.0, "");
    let agent = ScriptedAgent::candidates(&[("same again", &starter), ("faster", &src(80.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(vec![(target("t", 1.0), starter.clone())], &Interrupt::new())
        .await
        .unwrap();
    let rows = l.log().rows();
    assert_eq!(rows[1].decision, Decision::Invalid);
    assert_eq!(rows[1].commit, None);
    assert_eq!(rows[1].correctness.label(), "NOT_RUN");
    assert_eq!(
        rows[1].description,
        format!("{UNCHANGED_REASON}: same again")
    );
    assert_eq!(rows[2].decision, Decision::Keep, "{:?}", rows[2]);
    assert_eq!(
        l.bench.benched.lock().unwrap().len(),
        2,
        "the baseline and the real candidate only"
    );
    assert!(l
        .failures
        .iter()
        .any(|(n, r)| *n == rows[1].experiment && r.starts_with("unchanged")));
}

/// An agent that never answers (an LLM server that hangs).
struct NeverAnswers;

#[async_trait::async_trait]
impl Agent for NeverAnswers {
    fn name(&self) -> String {
        "silent".into()
    }
    async fn propose(&mut self, _: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        std::future::pending().await
    }
}

/// A stop request (Ctrl-C, SIGTERM) while the agent is still proposing ends the run at once
/// with that experiment logged `invalid` (nothing committed or measured), instead of waiting
/// out the agent's own limit.
#[tokio::test]
async fn a_stop_request_cuts_a_pending_proposal_short() {
    let fx = Fixture::new();
    let mut l = OptimizationLoop::new(
        NeverAnswers,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    let interrupt = std::sync::Arc::new(Interrupt::new());
    let signal = interrupt.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        signal.request();
    });
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        l.run(vec![(target("t", 1.0), src(100.0, ""))], &interrupt),
    )
    .await
    .expect("the run ends soon after the request")
    .unwrap();
    assert_eq!(out.stop, StopReason::Interrupted);
    let rows = l.log().rows();
    assert_eq!(rows.len(), 2, "the baseline and the interrupted proposal");
    assert_eq!(rows[1].decision, Decision::Invalid);
    assert_eq!(rows[1].commit, None);
    assert_eq!(rows[1].description, INTERRUPTED_PROPOSING);
}

#[tokio::test]
async fn a_second_interrupt_during_the_head_to_head_abandons_the_experiment() {
    let fx = Fixture::new();
    // the candidate is faster and passes; the second Ctrl-C arrives while it is compared
    struct InterruptedCompare(FakeBenchmarker, std::sync::Arc<Interrupt>);
    #[async_trait::async_trait]
    impl Benchmarker for InterruptedCompare {
        async fn bench(&self, r: &BenchRequest) -> Result<BenchResult, BenchError> {
            self.0.bench(r).await
        }
        async fn compare(&self, r: &CompareRequest) -> Result<Comparison, BenchError> {
            self.1.request();
            self.1.request();
            self.0.compare(r).await
        }
    }
    let interrupt = std::sync::Arc::new(Interrupt::new());
    let agent = ScriptedAgent::candidates(&[("faster", &src(50.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        InterruptedCompare(FakeBenchmarker::from_comments(), interrupt.clone()),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    let out = l
        .run(vec![(target("t", 1.0), src(100.0, ""))], &interrupt)
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::Interrupted);
    let rows = l.log().rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1].decision, Decision::Revert, "{:?}", rows[1]);
    assert_eq!(rows[1].correctness, Verdict::Interrupted, "{:?}", rows[1]);
    assert_eq!(rows[1].description, "faster");
}

/// A benchmarker whose bench waits until the test's interrupt has been requested twice
/// (two Ctrl-C a second apart during a baseline), for the baseline of `slow_source` only.
struct InterruptedBaseline {
    inner: FakeBenchmarker,
    interrupt: std::sync::Arc<Interrupt>,
    armed: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl Benchmarker for InterruptedBaseline {
    async fn bench(&self, r: &BenchRequest) -> Result<BenchResult, BenchError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.interrupt.request();
            self.interrupt.request();
            // a bench that never ends on its own: only the abandon can cut it short
            std::future::pending::<()>().await;
        }
        self.inner.bench(r).await
    }
    async fn compare(&self, r: &CompareRequest) -> Result<Comparison, BenchError> {
        self.inner.compare(r).await
    }
}

/// Two interrupts during a target's baseline (seen: `[1] baseline NOT_RUN`, the target
/// marked done, and `tune` resumed exiting 1 for good): the baseline is INTERRUPTED,
/// taken off the branch, the target is not done, and a resume judges it again.
#[tokio::test]
async fn an_abandoned_baseline_is_judged_again_on_resume() {
    let fx = Fixture::new();
    let t = target("t", 1.0);
    let interrupt = std::sync::Arc::new(Interrupt::new());
    let bench = InterruptedBaseline {
        inner: FakeBenchmarker::from_comments(),
        interrupt: interrupt.clone(),
        armed: std::sync::atomic::AtomicBool::new(true),
    };
    let mut l = OptimizationLoop::new(
        ScriptedAgent::default(),
        bench,
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    let out = l
        .run(vec![(t.clone(), src(100.0, ""))], &interrupt)
        .await
        .unwrap();
    assert_eq!(out.stop, StopReason::Interrupted);
    assert!(out.states[0].done.is_none(), "{:?}", out.states[0].done);
    let rows = l.log().rows().to_vec();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].decision, Decision::Baseline);
    assert_eq!(rows[0].correctness, Verdict::Interrupted);
    assert_eq!(l.store().reverted, vec![1], "taken off the branch");
    let store = std::mem::replace(&mut l.store, MemoryStore::new(fx.dir.path()));
    drop(l);

    // the resume: the baseline is judged again (a new row), then the agent's candidate
    let agent = ScriptedAgent::candidates(&[("faster", &src(50.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        store,
        fx.log(),
        fx.options(),
    );
    l.run(vec![(t, src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let rows = l.log().rows();
    let words: Vec<(u64, &str, &str)> = rows
        .iter()
        .map(|r| (r.experiment, r.decision.label(), r.correctness.label()))
        .collect();
    assert_eq!(
        words,
        vec![
            (1, "baseline", "INTERRUPTED"),
            (2, "baseline", "PASS"),
            (3, "keep", "PASS")
        ]
    );
}

/// A workspace made before `INTERRUPTED`: its abandoned baseline row reads `NOT_RUN`
/// (and stayed on the branch). A resume judges it again instead of ending the target.
#[tokio::test]
async fn an_old_not_run_baseline_is_judged_again_on_resume() {
    let fx = Fixture::new();
    let t = target("t", 1.0);
    let mut store = MemoryStore::new(fx.dir.path());
    let starter = src(100.0, "");
    let commit = store
        .commit(&ExperimentDraft {
            experiment: 1,
            target: &t,
            description: "baseline: softmax starter kernel",
            agent: "starter",
            source: &starter,
        })
        .await
        .unwrap();
    let mut log = fx.log();
    log.append(unmeasured_record(
        1,
        "t",
        KernelKind::Softmax,
        "starter",
        "abandoned (Ctrl-C): baseline: softmax starter kernel".into(),
        Some(commit.0),
        Decision::Baseline,
        &Correctness::NotRun,
        0.5,
    ))
    .unwrap();
    let mut l = OptimizationLoop::new(
        ScriptedAgent::default(),
        FakeBenchmarker::from_comments(),
        store,
        log,
        fx.options(),
    );
    l.run(vec![(t, starter)], &Interrupt::new()).await.unwrap();
    let rows = l.log().rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1].decision, Decision::Baseline);
    assert_eq!(rows[1].correctness, Verdict::Pass);
}

/// With a scaled limit, a candidate's bench request gets `factor ×` the incumbent's own
/// evaluation time, between the floor and `bench_timeout`; a baseline gets `bench_timeout`.
#[test]
fn a_candidate_limit_follows_the_incumbents_evaluation_time() {
    let scale = TimeoutScale {
        factor: 10.0,
        floor: Duration::from_secs(60),
    };
    let cap = Duration::from_secs(600);
    assert_eq!(scale.limit(2.0, cap), Duration::from_secs(60), "floor");
    assert_eq!(scale.limit(12.5, cap), Duration::from_secs(125));
    assert_eq!(scale.limit(300.0, cap), cap, "cap");
    assert_eq!(scale.limit(f64::INFINITY, cap), cap);
}

#[tokio::test]
async fn candidates_get_the_scaled_limit_and_baselines_the_full_one() {
    let fx = Fixture::new();
    struct Limits(FakeBenchmarker, std::sync::Mutex<Vec<Duration>>);
    #[async_trait::async_trait]
    impl Benchmarker for Limits {
        async fn bench(&self, r: &BenchRequest) -> Result<BenchResult, BenchError> {
            self.1.lock().unwrap().push(r.timeout);
            self.0.bench(r).await
        }
        async fn compare(&self, r: &CompareRequest) -> Result<Comparison, BenchError> {
            self.0.compare(r).await
        }
    }
    let mut options = fx.options();
    options.bench_timeout = Duration::from_secs(600);
    options.scale_timeout = Some(TimeoutScale {
        factor: 10.0,
        floor: Duration::from_secs(5),
    });
    let agent = ScriptedAgent::candidates(&[("a", &src(90.0, ""))]);
    let mut l = OptimizationLoop::new(
        agent,
        Limits(FakeBenchmarker::from_comments(), Default::default()),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        options,
    );
    l.run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let limits = l.bench.1.lock().unwrap().clone();
    assert_eq!(limits.len(), 2);
    assert_eq!(limits[0], Duration::from_secs(600), "the baseline");
    // the fake judges in microseconds: 10 x that is below the floor
    assert_eq!(limits[1], Duration::from_secs(5), "the candidate");
}

/// Shows what the history it is given says of each row's configuration, then gives up.
#[derive(Default)]
struct ConfigProbe {
    seen: Vec<Option<String>>,
}

#[async_trait::async_trait]
impl Agent for ConfigProbe {
    fn name(&self) -> String {
        "probe".into()
    }
    async fn propose(&mut self, ctx: &ProposalContext<'_>) -> Result<Proposal, AgentError> {
        self.seen = ctx
            .history
            .iter()
            .map(|r| {
                r.config
                    .as_ref()
                    .map(|c| crate::pyliteral::PyValue::Dict(c.values.clone()).to_string())
            })
            .collect();
        Ok(Proposal::Exhausted)
    }
}

fn configured(latency: f64, block: i64, extra: &str) -> String {
    src(
        latency,
        &format!("CONFIG = {{\"BLOCK\": {block}}}\n{extra}"),
    )
}

/// Runs a baseline (BLOCK 1), a kept candidate (BLOCK 2), a failed one (BLOCK 4) and an
/// invalid proposal; returns the store and what a fresh loop over the reopened log shows
/// its agent, after `prepare` has had the store.
async fn resumed_history(prepare: impl FnOnce(&mut MemoryStore)) -> Vec<Option<String>> {
    let fx = Fixture::new();
    let t = target("t", 1.0);
    let mut agent = ScriptedAgent::candidates(&[
        ("two", &configured(80.0, 2, "")),
        ("four", &configured(70.0, 4, "# verdict = FAIL")),
    ]);
    agent.script.push_back(Proposal::Invalid {
        class: crate::InvalidClass::NoCode,
        detail: "no code".into(),
        usage: None,
    });
    let mut l = OptimizationLoop::new(
        agent,
        FakeBenchmarker::from_comments(),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(
        vec![(t.clone(), configured(100.0, 1, ""))],
        &Interrupt::new(),
    )
    .await
    .unwrap();
    // the loop's own rows carry what the candidates declared
    let configs: Vec<Option<String>> = l
        .log()
        .rows()
        .iter()
        .map(|r| r.config.as_ref().map(|c| format!("{:?}", c.values)))
        .collect();
    assert_eq!(configs.len(), 4);
    assert!(configs[..3].iter().all(Option::is_some), "{configs:?}");
    assert_eq!(configs[3], None, "an invalid row benchmarked nothing");
    let mut store = std::mem::replace(&mut l.store, MemoryStore::new(fx.dir.path()));
    prepare(&mut store);
    // reopened from results.tsv alone: no configuration column there
    let log = fx.log();
    assert!(log.rows().iter().all(|r| r.config.is_none()));
    let mut l = OptimizationLoop::new(
        ConfigProbe::default(),
        FakeBenchmarker::from_comments(),
        store,
        log,
        fx.options(),
    );
    l.run(vec![(t, configured(100.0, 1, ""))], &Interrupt::new())
        .await
        .unwrap();
    std::mem::take(&mut l.agent.seen)
}

#[tokio::test]
async fn a_resumed_run_shows_its_agent_the_configurations_kept_in_the_notes() {
    let seen = resumed_history(|_| {}).await;
    assert_eq!(
        seen,
        [
            Some("{\"BLOCK\": 1}".to_string()),
            Some("{\"BLOCK\": 2}".to_string()),
            Some("{\"BLOCK\": 4}".to_string()),
            None,
        ]
    );
}

/// A workspace written before notes kept configurations: each benchmarked row's
/// configuration is read from the kernel.py its commit holds.
#[tokio::test]
async fn without_configurations_in_the_notes_a_resume_reads_them_from_the_commits() {
    let seen = resumed_history(MemoryStore::forget_notes).await;
    assert_eq!(
        seen,
        [
            Some("{\"BLOCK\": 1}".to_string()),
            Some("{\"BLOCK\": 2}".to_string()),
            Some("{\"BLOCK\": 4}".to_string()),
            None,
        ]
    );
}

/// A benchmarker on "representative" timings whose head-to-heads give the spreads of
/// `spreads` in turn (then 0), the speedup of the fake's latencies each time.
struct NoisyBench {
    inner: FakeBenchmarker,
    spreads: std::sync::Mutex<std::collections::VecDeque<f64>>,
    compares: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl Benchmarker for NoisyBench {
    async fn bench(&self, r: &BenchRequest) -> Result<BenchResult, BenchError> {
        let mut out = self.inner.bench(r).await?;
        out.timing_representative = true;
        Ok(out)
    }
    async fn compare(&self, r: &CompareRequest) -> Result<Comparison, BenchError> {
        self.compares
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut c = self.inner.compare(r).await?;
        c.spread = self.spreads.lock().unwrap().pop_front().unwrap_or(0.0);
        Ok(c)
    }
}

fn noisy(spreads: &[f64]) -> NoisyBench {
    NoisyBench {
        inner: FakeBenchmarker::from_comments(),
        spreads: std::sync::Mutex::new(spreads.iter().copied().collect()),
        compares: Default::default(),
    }
}

/// A head-to-head too noisy to decide is timed again, and the one that is quiet enough
/// decides (issue 36: a decision the noise blocks is an experiment lost); the row's
/// comparison says how many were run again.
#[tokio::test]
async fn a_noisy_head_to_head_is_timed_again_before_it_is_decided() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[("faster", &src(80.0, ""))]);
    let spread = keep::MAX_SPREAD * 2.0;
    let mut l = OptimizationLoop::new(
        agent,
        noisy(&[spread, spread]),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let row = &l.log().rows()[1];
    assert_eq!(row.decision, Decision::Keep);
    let c = row.head_to_head.as_ref().unwrap();
    assert_eq!((c.retries, c.spread), (2, 0.0));
    assert_eq!(
        l.bench().compares.load(std::sync::atomic::Ordering::SeqCst),
        3
    );
}

/// Noise that lasts through every retry is reverted as too noisy, after
/// `keep::NOISY_RETRIES` more head-to-heads, never more.
#[tokio::test]
async fn noise_through_every_retry_reverts_as_too_noisy() {
    let fx = Fixture::new();
    let agent = ScriptedAgent::candidates(&[("faster", &src(80.0, ""))]);
    let spread = keep::MAX_SPREAD * 2.0;
    let spreads = vec![spread; keep::NOISY_RETRIES as usize + 5];
    let mut l = OptimizationLoop::new(
        agent,
        noisy(&spreads),
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        fx.options(),
    );
    l.run(vec![(target("t", 1.0), src(100.0, ""))], &Interrupt::new())
        .await
        .unwrap();
    let row = &l.log().rows()[1];
    assert_eq!(row.decision, Decision::Revert);
    assert_eq!(
        row.head_to_head.as_ref().unwrap().retries,
        keep::NOISY_RETRIES
    );
    assert_eq!(
        l.bench().compares.load(std::sync::atomic::Ordering::SeqCst),
        keep::NOISY_RETRIES + 1
    );
}

#[tokio::test]
async fn a_target_that_cannot_reach_parity_in_its_share_hands_the_budget_on() {
    let fx = Fixture::new();
    // every kernel is 200 µs against PyTorch's 100 (the fake's reference): 0.5x, never parity
    let proposals: Vec<(String, String)> = (0..400)
        .map(|i| {
            (
                format!("slower {i}"),
                src(200.0 + i as f64, &format!("# {i}")),
            )
        })
        .collect();
    let items: Vec<(&str, &str)> = proposals
        .iter()
        .map(|(d, s)| (d.as_str(), s.as_str()))
        .collect();
    let bench = FakeBenchmarker::new(|src| {
        std::thread::sleep(Duration::from_millis(10));
        let latency = src
            .lines()
            .find_map(|l| l.strip_prefix("# latency_us = "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(100.0);
        (Correctness::Pass, latency)
    });
    let mut options = fx.options().with_budget(Duration::from_millis(1500));
    options.orchestrator.plateau = 10_000;
    let planned = |id: &str, f: f64, reachable_us: f64| {
        target(id, f).with_headroom(crate::Headroom {
            pytorch_us: 100.0,
            reachable_us,
        })
    };
    let mut l = OptimizationLoop::new(
        ScriptedAgent::candidates(&items),
        bench,
        MemoryStore::new(fx.dir.path()),
        fx.log(),
        options,
    );
    let out = l
        .run(
            vec![
                // savings 0.25 and 0.1875: shares of 57% and 43% of the budget
                (planned("wide", 0.5, 50.0), src(200.0, "")),
                (planned("narrow", 0.25, 25.0), src(200.0, "")),
            ],
            &Interrupt::new(),
        )
        .await
        .unwrap();
    match &out.states[0].done {
        Some(MoveOn::NoParity { vs_pytorch, share }) => {
            assert_eq!(*vs_pytorch, Some(0.5));
            let expected = 1.5 * 0.25 / 0.4375;
            assert!((share.as_secs_f64() - expected).abs() < 1e-3, "{share:?}");
        }
        other => panic!("wide should have handed its time on: {other:?}"),
    }
    let rows = l.log().rows();
    let first_narrow = rows.iter().position(|r| r.target == "narrow").unwrap();
    // every row of wide comes before narrow's: the loop moved on, not hopping back
    assert!(rows[first_narrow..].iter().all(|r| r.target == "narrow"));
    assert!(
        first_narrow >= 2,
        "wide had its baseline and experiments first"
    );
}
