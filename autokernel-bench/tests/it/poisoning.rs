//! A candidate cannot poison the next one (issue 21, point 1): each is judged in a worker
//! of its own, so a swapped function, a thread left running or an armed timer dies with it.
//! Each attack (`tests/cases/poison/`, see its README) is judged, then an honest starter on
//! the same benchmarker, which must pass; before, each honest file got a wrong verdict.

use autokernel_bench::PyWorkerBenchmarker;

use super::*;

/// (attack file, the starter judged next: one whose reference the attack reaches)
const CASES: &[(&str, &str)] = &[
    // the softmax reference's code returned zeros: the next softmax FAILed
    ("swaps_reference_code.py", "softmax"),
    // torch.rsqrt rebound after the attack's own evaluation: the next rmsnorm was TAMPER
    ("rebinds_rsqrt_from_a_thread.py", "rmsnorm"),
    // SIGALRM 2 s after the attack's last call: the next kernel CRASHed with signal 14
    ("arms_a_timer.py", "rmsnorm"),
];

#[tokio::test]
async fn an_honest_kernel_judged_after_an_attack_passes() {
    let dir = tempfile::tempdir().unwrap();
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut wrong = Vec::new();
    for (attack, next) in CASES {
        let path = dir.path().join(attack);
        std::fs::copy(cases_dir("poison").join(attack), &path).expect("copy a case");
        let first = bench(&b, &path, true, 120).await;
        // the honest file with every stage, so that it runs long enough for a timer or a
        // thread the attack left behind to strike
        let honest = bench(&b, &starter_path(next), false, 300).await;
        if !honest.correctness.is_pass() {
            wrong.push(format!(
                "the {next} starter after {attack} ({}): {:?}",
                first.correctness.label(),
                honest.correctness
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
