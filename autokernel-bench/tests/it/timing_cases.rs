//! Timing calls are judged calls (issue 21, point 2): kernels right in the correctness
//! stages and wrong when timed (`tests/cases/timing/`, see its README) fail at the timing
//! stage, and an honest kernel judged after each passes. On the CPU.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{Correctness, Stage};

use super::*;

async fn fails_where_it_is_timed(name: &str) {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &cases_dir("timing").join(name), true, 300).await;
    let Correctness::Fail { stage, reason } = &r.correctness else {
        panic!("{name}: {:?}", r.correctness)
    };
    assert_eq!(*stage, Stage::Timing, "{name}: {reason}");
    assert!(
        reason.contains("a timed call's output") && reason.contains("differs from the reference"),
        "{name}: {reason}"
    );
    let honest = bench(&b, &good_softmax(), true, 300).await;
    assert!(honest.correctness.is_pass(), "{:?}", honest.correctness);
}

#[tokio::test]
async fn a_kernel_wrong_from_the_fourth_call_on_an_input_fails_at_timing() {
    fails_where_it_is_timed("wrong_from_the_fourth_call_on_an_input.py").await;
}

#[tokio::test]
async fn a_kernel_wrong_while_a_timer_is_on_the_stack_fails_at_timing() {
    fails_where_it_is_timed("wrong_while_a_timer_is_on_the_stack.py").await;
}

#[tokio::test]
async fn a_kernel_right_only_where_it_sees_a_check_coming_fails_at_timing() {
    fails_where_it_is_timed("right_only_where_it_sees_a_check.py").await;
}

#[tokio::test]
async fn a_kernel_wrong_only_beside_the_incumbent_gets_no_head_to_head() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let sly = cases_dir("timing").join("wrong_beside_another_kernel.py");
    // alone, it is right everywhere it is judged and timed
    let r = bench(&b, &sly, true, 300).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let request = |candidate| softmax_compare(candidate, 3);
    let err = b.compare(&request(sly.clone())).await.unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains("the candidate went wrong in the head-to-head")
            && err.contains("differs from the reference"),
        "{err}"
    );
    // the starter against itself: both right, a comparison
    let c = b.compare(&request(starter_path("softmax"))).await.unwrap();
    assert_eq!(c.repetitions, 3);
}

#[tokio::test]
async fn a_kernel_that_pins_the_rotation_and_replays_fails_at_timing() {
    fails_where_it_is_timed("pins_the_rotation_offsets.py").await;
}

#[tokio::test]
async fn a_kernel_that_pads_the_timer_gets_its_own_latency() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let honest = bench(&b, &good_softmax(), true, 300).await;
    let padder = bench(
        &b,
        &cases_dir("timing").join("pads_the_timer_samples.py"),
        true,
        300,
    )
    .await;
    // its outputs are right everywhere: a PASS, at the time its kernel takes. Padded, the
    // median read 0.001 µs; the honest starter's, in the same run, is a row-per-program
    // softmax like its own (the CPU's interpreter: milliseconds), and a fifth of it leaves
    // room for noise
    assert!(padder.correctness.is_pass(), "{:?}", padder.correctness);
    let (honest_us, padded_us) = (
        honest.metrics.as_ref().expect("metrics").latency_us,
        padder.metrics.as_ref().expect("metrics").latency_us,
    );
    assert!(
        padded_us > honest_us / 5.0,
        "{padded_us} µs against the starter's {honest_us} µs"
    );
}

#[tokio::test]
async fn a_kernel_that_looks_for_the_offsets_to_rewrite_finds_none_and_passes() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("timing").join("reports_timed_inputs_out_of_range.py"),
        true,
        300,
    )
    .await;
    // its answers are right and the offsets it would rewrite are not Python's: a PASS,
    // where the Python loop's were rewritten into a failed check (and, before, an exit 2)
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
}

#[tokio::test]
async fn a_kernel_that_computes_where_the_judge_copies_its_output_fails_at_timing() {
    fails_where_it_is_timed("computes_where_the_judge_copies.py").await;
}

#[tokio::test]
async fn a_timed_output_in_another_dtype_fails_at_timing() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("timing").join("returns_float64_when_timed.py"),
        true,
        300,
    )
    .await;
    let Correctness::Fail { stage, reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert_eq!(*stage, Stage::Timing, "{reason}");
    assert!(
        reason.contains("returned dtype float64, not float32"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_mode_left_active_in_a_timed_call_is_tamper() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("timing").join("leaves_a_mode_active.py"),
        true,
        300,
    )
    .await;
    let Correctness::Tamper { reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert!(
        reason.contains("a timed call left a torch function or dispatch mode active"),
        "{reason}"
    );
    let honest = bench(&b, &good_softmax(), true, 300).await;
    assert!(honest.correctness.is_pass(), "{:?}", honest.correctness);
}

#[tokio::test]
async fn a_kernel_that_hides_an_input_from_the_rotation_gets_its_own_latency() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let honest = bench(&b, &good_softmax(), true, 300).await;
    let r = bench(
        &b,
        &cases_dir("timing").join("hides_an_input_from_the_rotation.py"),
        true,
        300,
    )
    .await;
    // the real input is rotated, so it computes every timed call: a PASS at its kernel's
    // time (it read 26 µs against the starter's 16 ms while its decoy was rotated instead)
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let (honest_us, its_us) = (
        honest.metrics.as_ref().expect("metrics").latency_us,
        r.metrics.as_ref().expect("metrics").latency_us,
    );
    assert!(
        its_us > honest_us / 5.0,
        "{its_us} µs against the starter's {honest_us} µs"
    );
}
