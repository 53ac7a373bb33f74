//! No reference in a candidate's process (issue 21, point 1): the trusted reference worker
//! computes every reference from the case's seed, and the parent compares
//! (`tests/cases/reference/`, see its README).

use autokernel_bench::{PyWorkerBenchmarker, SandboxOptions, Worker};
use autokernel_core::{Correctness, Stage};

use super::*;

/// A candidate that copies whatever tensor of the output's shape it finds in the
/// harness's frames into its own kernel's output passed every correctness stage before (the
/// reference was computed there) and was caught only at the timing; now its own copy kernel
/// is all it has, and the first case fails.
#[tokio::test]
async fn a_candidate_that_looks_for_the_reference_in_the_harness_frames_finds_none() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("reference").join("steals_it_from_the_harness_frames.py"),
        true,
        120,
    )
    .await;
    match &r.correctness {
        Correctness::Fail { stage, reason } => assert_eq!(
            *stage,
            Stage::Smoke,
            "it failed only at {stage}, so a reference was within reach: {reason}"
        ),
        other => panic!("expected FAIL at smoke, got {other:?}"),
    }
    let mut wrong = Vec::new();
    the_starter_passes_after(&b, "steals_it_from_the_harness_frames.py", 120, &mut wrong).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The reference worker is another process than the candidate's, and the candidate can
/// neither open its open files (its reply pipe) nor its memory through `/proc`, even in the
/// fallback sandbox (no namespaces): Landlock refuses ptrace access outside the candidate's
/// domain, and the reference worker is undumpable for kernels without Landlock.
#[tokio::test]
async fn a_candidate_cannot_reach_the_reference_workers_pipes_or_memory() {
    let options = SandboxOptions {
        namespaces: false,
        ..SandboxOptions::default()
    };
    let worker = std::sync::Arc::new(Worker::new(super::options()).with_sandbox(options));
    let b = PyWorkerBenchmarker::with_worker(worker.clone());
    let first = bench(&b, &starter_path("rmsnorm"), true, 120).await;
    assert!(first.correctness.is_pass(), "{:?}", first.correctness);
    let pid = worker
        .reference_pid()
        .await
        .expect("a reference worker after a bench");
    let dir = tempfile::tempdir().unwrap();
    let source =
        std::fs::read_to_string(cases_dir("reference").join("probes_the_reference_worker.py"))
            .unwrap()
            .replace("REFERENCE_PID = 0", &format!("REFERENCE_PID = {pid}"))
            .replace(
                "PARENT_PID = 0",
                &format!("PARENT_PID = {}", std::process::id()),
            );
    let probe = write(dir.path(), "probes_the_reference_worker.py", &source);
    let r = bench(&b, &probe, true, 120).await;
    let reason = r.correctness.reason().unwrap_or_default().to_string();
    assert!(
        reason.contains(&format!(
            "probe of pid {pid}: alive: True, fd: refused, mem: refused"
        )),
        "{reason}"
    );
    // the parent's handle on the reference's payload area: out of reach where Landlock is
    // in force (its ptrace scope covers /proc/<pid>/fd); without it, open, as the threat
    // model in docs/bench.md says
    let parent = if reason.contains("writes outside: refused") {
        "the parent's payload areas: refused"
    } else {
        "the parent's payload areas: open"
    };
    assert!(reason.contains(parent), "{reason}");
    assert_eq!(
        worker.reference_pid().await,
        Some(pid),
        "the same reference worker serves on"
    );
}
