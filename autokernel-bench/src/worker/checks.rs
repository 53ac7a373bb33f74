//! The parent's side of the checks (issue 21, point 1): a candidate's worker sends its
//! outputs ([`super::parent`]); the parent reads them into its own memory, has the trusted
//! reference worker compute the reference from the same seed, and compares the two with
//! the judge ([`crate::judge`]). [`Scope`] admits a check only as the next one the parent's
//! own plan of the request expects, and keeps what was checked ([`Tally`]), so that a PASS
//! the candidate's process reports must be backed by the parent's own comparison of every
//! planned case.

use autokernel_core::{BenchResult, Catalogue, Correctness, DType, KindSpec, Stage};
use ndarray::{ArrayViewD, IxDyn};

use super::plan;
use super::timing;
use crate::judge::{self, CaseContext};
use crate::protocol::{ReferenceJob, ReferenceTiming, Request};

/// The most outputs one check may carry (the determinism stage's 3 calls, with room).
const MAX_OUTPUTS: usize = 8;

/// The most timed outputs one measurement keeps (`timing::CHECKED_TIMED_CALLS` + the
/// last call), per kernel.
const MAX_TIMED: usize = super::timing::CHECKED_TIMED_CALLS + 1;

/// One check the plan expects, in order.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    stage: Stage,
    shape: autokernel_core::Shape,
    dtype: DType,
    mode: &'static str,
    seed: u64,
    /// Outputs (calls) of a case; for the timing, any number from 1 to [`MAX_TIMED`] (per
    /// kernel in a head-to-head), each with its inputs' offsets.
    outputs: usize,
    timed: bool,
}

/// What the checks of one request may ask for, and what they found. Every check is
/// admitted only as the next one the parent's own plan of the request expects (the kind,
/// the layout and the parameters the request's; shape, dtype, mode, seed and the number
/// of outputs the plan's), before a byte of its outputs is read: a check's size is never
/// the candidate's process's to choose.
pub(super) struct Scope<'c> {
    /// Every check answered so far.
    pub tally: Tally,
    /// The reference timings the parent served, one per repetition of the bench's
    /// interleaved timing, which the reply's metrics must carry.
    pub timed: Vec<ReferenceTiming>,
    /// When the last of them was answered: a repetition right after it needs no spin-up.
    pub last_timed: Option<std::time::Instant>,
    catalogue: &'c Catalogue,
    request: Request,
    on_gpu: bool,
    /// The kind: the request's, else the first check's (the file's `KERNEL_KIND`).
    kind: Option<String>,
    /// The checks the plan expects (known once the kind is), and the next one's index.
    expected: Vec<Expected>,
    next: usize,
    /// Timed outputs admitted at the current timing entry.
    timed_outputs: usize,
}

impl<'c> Scope<'c> {
    /// The scope of `request` to a worker on the GPU when `on_gpu`, or `None` for a request
    /// that runs no candidate.
    pub(super) fn of(catalogue: &'c Catalogue, request: &Request, on_gpu: bool) -> Option<Self> {
        let kind = match request {
            Request::Bench(job) => job.kind.clone(),
            Request::Compare(job) => Some(job.kind.clone()),
            _ => return None,
        };
        Some(Scope {
            tally: Tally::default(),
            timed: Vec::new(),
            last_timed: None,
            catalogue,
            request: request.clone(),
            on_gpu,
            kind,
            expected: Vec::new(),
            next: 0,
            timed_outputs: 0,
        })
    }

    /// `case` with the request's kind, layout and parameters, and its kind's catalogue
    /// entry, if it is the next check the plan expects with `outputs` outputs at `stage`
    /// (`None` for a [`crate::protocol::ParentCall::TimeReference`]).
    ///
    /// # Errors
    /// A message naming what the plan expected instead, or why there is no plan.
    pub(super) fn admit(
        &mut self,
        stage: Option<Stage>,
        mut case: ReferenceJob,
        outputs: usize,
    ) -> Result<(ReferenceJob, &'c KindSpec), String> {
        let kind = self.kind.get_or_insert_with(|| case.kind.clone()).clone();
        if kind != case.kind {
            return Err(format!(
                "a check of kind `{}` in a request for `{kind}`",
                case.kind
            ));
        }
        let spec = self
            .catalogue
            .get(&kind)
            .ok_or_else(|| format!("a check of unknown kind `{kind}`"))?;
        let (layout, params) = match &self.request {
            Request::Bench(job) => (job.layout, &job.params),
            Request::Compare(job) => (job.layout, &job.params),
            _ => return Err("a check in a request that runs no candidate".into()),
        };
        let resolved = spec.resolve_params(params).map_err(|e| e.to_string())?;
        case.params = serde_json::to_string(&resolved).map_err(|e| e.to_string())?;
        case.layout = layout.name().into();
        if self.expected.is_empty() {
            self.expected = expected_checks(spec, &self.request, &resolved, self.on_gpu)?;
        }
        let Some(stage) = stage else {
            // the reference's timing: at a bench's timing case, once per repetition of its
            // interleaved timing, after the stages' checks and before the integrity re-check
            let at = self.expected.get(self.next).filter(|e| e.timed);
            let fits = at.is_some_and(|e| {
                e.shape == case.shape && e.dtype == case.dtype && e.seed == case.seed
            });
            if !fits || self.timed.len() >= self.reference_timings() {
                return Err("a reference timing the plan does not expect here".into());
            }
            return Ok((case, spec));
        };
        let matches = |e: &Expected| {
            e.stage == stage
                && e.shape == case.shape
                && e.dtype == case.dtype
                && e.mode == case.mode
                && e.seed == case.seed
                && e.timed == case.offsets.is_some()
                && (e.timed || e.outputs == outputs)
                && (!e.timed || outputs == 1)
        };
        let at_timing = self.expected.get(self.next).is_some_and(|e| e.timed);
        if at_timing && self.timed_outputs > 0 && !matches(&self.expected[self.next]) {
            // past the timed outputs: on to the next entry
            self.next += 1;
            self.timed_outputs = 0;
        }
        let Some(e) = self.expected.get(self.next) else {
            return Err(format!(
                "an unplanned check of {} {} (seed {})",
                case.dtype, case.shape, case.seed
            ));
        };
        if !matches(e) {
            return Err(format!(
                "a check of {stage} {} {} {} (seed {}) where the plan expects {} {} {} {} (seed {})",
                case.dtype, case.shape, case.mode, case.seed, e.stage, e.dtype, e.shape, e.mode, e.seed
            ));
        }
        if e.timed {
            if self.timed_outputs == e.outputs {
                return Err("more timed outputs checked than a measurement keeps".into());
            }
            self.timed_outputs += 1;
        } else {
            self.next += 1;
        }
        Ok((case, spec))
    }

    /// Whether the request is a bench (else a head-to-head).
    pub(super) fn is_bench(&self) -> bool {
        matches!(self.request, Request::Bench(_))
    }

    /// How many reference timings the request's plan asks for: one per repetition of a
    /// bench's interleaved timing (`execute::Run::interleaved`), none for a head-to-head.
    fn reference_timings(&self) -> usize {
        match &self.request {
            Request::Bench(job) if job.quick || !self.on_gpu => {
                timing::TIMING_REPETITIONS_QUICK as usize
            }
            Request::Bench(_) => timing::TIMING_REPETITIONS as usize,
            _ => 0,
        }
    }

    /// Why the candidate's worker's PASS is not backed by the parent's checks, or `None`
    /// when it is: every check the plan expects answered and passed (at least one timed
    /// output), the kind the one checked.
    pub(super) fn unbacked_pass(&self, kind: Option<&str>) -> Option<String> {
        if let Some(f) = self.tally.first_failure() {
            return Some(format!("a check failed: {f}"));
        }
        if let (Some(reported), Some(checked)) = (kind, self.kind.as_deref()) {
            if reported != checked {
                return Some(format!(
                    "it reports kind `{reported}`, the checks were of `{checked}`"
                ));
            }
        }
        if self.expected.is_empty() {
            return Some("no output was checked".into());
        }
        let done = self.next + usize::from(self.timed_outputs > 0);
        match self.expected.get(done) {
            None => None,
            Some(e) if e.timed => Some("no timed output was checked".into()),
            Some(e) => Some(format!(
                "the {} case {} {} {} (seed {}) was not checked",
                e.stage, e.dtype, e.shape, e.mode, e.seed
            )),
        }
    }
}

/// The checks a request's plan expects, in order: for a bench, each case of each stage
/// with its seed (`execute::Run`: from [`FIRST_SEED`] + 1, one per case and one for the
/// timing, which comes between the stages and the integrity re-check), and its timed
/// outputs; for a head-to-head, the timed outputs of both kernels.
fn expected_checks(
    spec: &KindSpec,
    request: &Request,
    params: &autokernel_core::Params,
    on_gpu: bool,
) -> Result<Vec<Expected>, String> {
    let timed =
        |shape: &autokernel_core::Shape, dtype: DType, seed: u64, outputs: usize| Expected {
            stage: Stage::Timing,
            shape: shape.clone(),
            dtype,
            mode: "normal",
            seed,
            outputs,
            timed: true,
        };
    let job = match request {
        Request::Bench(job) => job,
        Request::Compare(job) => {
            let (shape, dtype) = &job.timing;
            return Ok(vec![timed(
                shape,
                *dtype,
                plan::COMPARE_SEED,
                2 * MAX_TIMED,
            )]);
        }
        _ => return Err("a request that runs no candidate".into()),
    };
    let plan = plan::plan(spec, job, params, on_gpu)?;
    let mut seed = FIRST_SEED;
    let mut expected = Vec::new();
    let case = |stage: Stage, c: &plan::Case, seed: u64| Expected {
        stage,
        shape: c.shape.clone(),
        dtype: c.dtype,
        mode: c.mode.name(),
        seed,
        outputs: c.repeats as usize,
        timed: false,
    };
    for s in &plan.stages {
        for c in &s.cases {
            seed += 1;
            expected.push(case(s.stage, c, seed));
        }
    }
    seed += 1;
    expected.push(timed(
        &plan.timing_shape,
        plan.timing_dtype,
        seed,
        MAX_TIMED,
    ));
    for c in &plan.integrity.cases {
        seed += 1;
        expected.push(case(plan.integrity.stage, c, seed));
    }
    Ok(expected)
}

/// The output shape every payload of a check of `case` must have, checked before a byte is
/// read: a payload's size is never taken from the candidate's process.
///
/// # Errors
/// A message when `shapes` are more than [`MAX_OUTPUTS`], or one differs from the catalogue's.
pub(super) fn payload_numel(
    spec: &KindSpec,
    case: &ReferenceJob,
    shapes: &[Vec<usize>],
) -> Result<usize, String> {
    let (expected, _) = spec.output_for(&case.shape, case.dtype)?;
    let expected: Vec<usize> = expected.iter().map(|&d| d as usize).collect();
    if shapes.is_empty() || shapes.len() > MAX_OUTPUTS {
        return Err(format!("a check with {} outputs", shapes.len()));
    }
    if let Some(other) = shapes.iter().find(|s| **s != expected) {
        return Err(format!(
            "a check's output of shape {other:?}, not the catalogue's {expected:?}"
        ));
    }
    Ok(expected.iter().product())
}

/// Each of `outputs` against `reference` (both of `case`'s output shape, float32), at the
/// kind's tolerance: its relative L2 error, or the judge's reason.
pub(super) fn compare(
    spec: &KindSpec,
    stage: Stage,
    case: &ReferenceJob,
    note: Option<&str>,
    reference: &[f32],
    outputs: &[&[f32]],
) -> Vec<Result<f64, String>> {
    let fail = |reason: String| outputs.iter().map(|_| Err(reason.clone())).collect();
    let (shape, out_dtype) = match spec.output_for(&case.shape, case.dtype) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let Ok(reference) = ArrayViewD::from_shape(IxDyn(&shape), reference) else {
        return fail(format!("the reference is not of shape {shape:?}"));
    };
    let out_dt: DType = out_dtype.parse().unwrap_or(case.dtype);
    let ctx = CaseContext {
        kind: &spec.name,
        stage,
        shape: &case.shape,
        dtype: case.dtype,
        mode: &case.mode,
        note,
    };
    let tol = spec.tolerance(case.dtype);
    outputs
        .iter()
        .map(|o| {
            let out = ArrayViewD::from_shape(IxDyn(&shape), o).map_err(|e| e.to_string())?;
            judge::compare_outputs(out, reference.view(), out_dt, tol, &ctx).map(|a| a.rel_l2)
        })
        .collect()
}

/// What the checks of one request found: how many were answered, and the first reason
/// an output differed (what backs or refuses a reply; the admission keeps the order).
#[derive(Debug, Default)]
pub(super) struct Tally {
    checks: usize,
    failure: Option<String>,
}

impl Tally {
    /// How many checks were answered.
    pub(super) fn len(&self) -> usize {
        self.checks
    }

    /// Records a check's `results`, one per output.
    pub(super) fn record(&mut self, results: &[Result<f64, String>]) {
        self.checks += 1;
        if self.failure.is_none() {
            self.failure = results.iter().find_map(|r| r.as_ref().err().cloned());
        }
    }

    /// The first failed check's reason.
    pub(super) fn first_failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

/// The seed before the first case's (`execute::Run`'s counter starts here).
pub(super) const FIRST_SEED: u64 = 1000;

/// `result` (a candidate's worker's PASS) made TAMPER when the parent's checks do not back
/// it ([`Scope::unbacked_pass`]).
pub(super) fn overrule(result: &mut BenchResult, why: String) {
    if result.correctness == Correctness::Pass {
        result.correctness = Correctness::Tamper {
            reason: format!(
                "the verdict of the candidate's worker is not backed by the parent's checks: {why}"
            ),
        };
        result.metrics = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::BenchJob;
    use autokernel_core::{Layout, Params, Shape};

    fn bench_request() -> Request {
        Request::Bench(BenchJob {
            kernel_path: "kernel.py".into(),
            kind: None,
            extra_shapes: Vec::new(),
            timing: None,
            dtypes: Vec::new(),
            quick: true,
            time_compiled: false,
            gpu_bandwidth_gb_s: None,
            layout: Layout::default(),
            params: Params::default(),
        })
    }

    fn case(shape: &Shape, dtype: DType, mode: &str, seed: u64) -> ReferenceJob {
        ReferenceJob {
            kind: "rmsnorm".into(),
            shape: shape.clone(),
            dtype,
            seed,
            mode: mode.into(),
            layout: "anything: the parent sets the request's".into(),
            params: "{}".into(),
            offsets: None,
        }
    }

    /// The checks an honest worker makes for a quick rmsnorm bench on the CPU, worked out
    /// from the plan (seeds from 1001, the timing's between the stages and the integrity
    /// re-check, two timed outputs): (stage, case, outputs).
    fn honest() -> Vec<(Stage, ReferenceJob, usize)> {
        let Request::Bench(job) = bench_request() else {
            unreachable!()
        };
        let spec = Catalogue::builtin().get("rmsnorm").unwrap();
        let params = spec.resolve_params(&job.params).unwrap();
        let plan = plan::plan(spec, &job, &params, false).unwrap();
        let mut calls = Vec::new();
        let mut seed = FIRST_SEED;
        for s in &plan.stages {
            for c in &s.cases {
                seed += 1;
                calls.push((
                    s.stage,
                    case(&c.shape, c.dtype, c.mode.name(), seed),
                    c.repeats as usize,
                ));
            }
        }
        seed += 1;
        for offset in [3, 5] {
            let mut timed = case(&plan.timing_shape, plan.timing_dtype, "normal", seed);
            timed.offsets = Some([("x".to_string(), offset)].into());
            calls.push((Stage::Timing, timed, 1));
        }
        for c in &plan.integrity.cases {
            seed += 1;
            calls.push((
                plan.integrity.stage,
                case(&c.shape, c.dtype, c.mode.name(), seed),
                c.repeats as usize,
            ));
        }
        calls
    }

    /// A scope fed `calls`, each answered as passed: the first refusal, if any.
    fn feed(scope: &mut Scope<'_>, calls: &[(Stage, ReferenceJob, usize)]) -> Result<(), String> {
        for (stage, c, outputs) in calls {
            let (c, _) = scope.admit(Some(*stage), c.clone(), *outputs)?;
            assert_eq!(
                c.layout, "contiguous",
                "the request's layout, not the call's"
            );
            scope.tally.record(&vec![Ok(0.0); *outputs]);
        }
        Ok(())
    }

    #[test]
    fn every_planned_case_checked_in_order_backs_a_pass() {
        let request = bench_request();
        let mut scope = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        feed(&mut scope, &honest()).unwrap();
        assert_eq!(scope.unbacked_pass(Some("rmsnorm")), None);
    }

    #[test]
    fn a_pass_with_the_last_case_unchecked_is_not_backed() {
        let request = bench_request();
        let mut scope = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        let calls = honest();
        feed(&mut scope, &calls[..calls.len() - 1]).unwrap();
        let why = scope.unbacked_pass(Some("rmsnorm")).unwrap();
        assert!(why.contains("was not checked"), "{why}");
    }

    #[test]
    fn a_pass_with_a_failed_check_or_of_another_kind_is_not_backed() {
        let request = bench_request();
        let mut scope = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        feed(&mut scope, &honest()).unwrap();
        assert!(scope
            .unbacked_pass(Some("softmax"))
            .unwrap()
            .contains("`rmsnorm`"));
        scope
            .tally
            .record(&[Ok(0.0), Err("1 of 8 elements differ".into())]);
        let why = scope.unbacked_pass(Some("rmsnorm")).unwrap();
        assert!(why.contains("1 of 8 elements differ"), "{why}");
    }

    #[test]
    fn a_check_out_of_plan_is_refused_before_its_outputs_are_read() {
        let request = bench_request();
        let calls = honest();
        // skipped a case, another seed, fewer calls, a huge shape, the timing's mode changed
        let mut skipped = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        assert!(feed(&mut skipped, &calls[1..]).is_err());
        let mut reseeded = calls.clone();
        reseeded[0].1.seed += 100;
        let mut fewer = calls.clone();
        let determinism = fewer
            .iter_mut()
            .find(|c| c.0 == Stage::Determinism)
            .unwrap();
        assert!(determinism.2 > 1);
        determinism.2 = 1;
        let mut huge = calls.clone();
        huge[0].1.shape = Shape(vec![1 << 20, 1 << 20]);
        let mut zeros = calls.clone();
        zeros
            .iter_mut()
            .find(|c| c.0 == Stage::Timing)
            .unwrap()
            .1
            .mode = "zeros".into();
        for bad in [reseeded, fewer, huge, zeros] {
            let mut scope = Scope::of(Catalogue::builtin(), &request, false).unwrap();
            assert!(feed(&mut scope, &bad).is_err());
        }
    }

    #[test]
    fn no_timed_output_no_check_or_too_many_timed_ones_is_not_backing() {
        let request = bench_request();
        let mut untimed = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        let calls: Vec<_> = honest()
            .into_iter()
            .filter(|c| c.0 != Stage::Timing)
            .collect();
        let stages: Vec<_> = calls
            .iter()
            .take_while(|c| c.0 != Stage::Integrity)
            .cloned()
            .collect();
        feed(&mut untimed, &stages).unwrap();
        assert_eq!(
            untimed.unbacked_pass(None).as_deref(),
            Some("no timed output was checked")
        );
        let none = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        assert_eq!(
            none.unbacked_pass(None).as_deref(),
            Some("no output was checked")
        );
        let mut calls = honest();
        let timed = calls.iter().position(|c| c.0 == Stage::Timing).unwrap();
        for _ in 0..MAX_TIMED {
            calls.insert(timed, calls[timed].clone());
        }
        let mut flooded = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        assert!(feed(&mut flooded, &calls).is_err());
    }

    #[test]
    fn the_reference_is_timed_once_per_repetition_between_the_stages_and_the_integrity_check() {
        let request = bench_request();
        let mut scope = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        let calls = honest();
        let timed = calls.iter().position(|c| c.0 == Stage::Timing).unwrap();
        let mut at = calls[timed].1.clone();
        at.offsets = None;
        feed(&mut scope, &calls[..timed - 1]).unwrap();
        assert!(
            scope.admit(None, at.clone(), 0).is_err(),
            "before the last stage's check"
        );
        feed(&mut scope, &calls[timed - 1..timed]).unwrap();
        let mut other_seed = at.clone();
        other_seed.seed += 1;
        assert!(scope.admit(None, other_seed, 0).is_err(), "another case");
        // a quick bench (and any on the CPU) times 3 repetitions
        for _ in 0..3 {
            assert!(scope.admit(None, at.clone(), 0).is_ok());
            scope.timed.push(ReferenceTiming {
                reference_latency_us: 1.0,
                compiled_latency_us: None,
                compiled_error: None,
                conditions: None,
                samples_us: Vec::new(),
            });
        }
        assert!(
            scope.admit(None, at.clone(), 0).is_err(),
            "one more than the repetitions"
        );
        let mut done = Scope::of(Catalogue::builtin(), &request, false).unwrap();
        feed(&mut done, &calls).unwrap();
        assert!(
            done.admit(None, at, 0).is_err(),
            "after the integrity re-check"
        );
    }

    #[test]
    fn a_pass_overruled_is_tamper_without_metrics() {
        let mut result = BenchResult {
            kind: None,
            correctness: Correctness::Pass,
            stages: Vec::new(),
            metrics: None,
            device: "cpu".into(),
            timing_representative: false,
            source_sha256: String::new(),
        };
        overrule(&mut result, "no output was checked".into());
        assert!(
            matches!(&result.correctness, Correctness::Tamper { reason } if reason.contains("no output was checked"))
        );
    }

    #[test]
    fn payloads_of_another_shape_or_too_many_are_refused_before_a_byte_is_read() {
        let spec = Catalogue::builtin().get("rmsnorm").unwrap();
        let shape = Shape(vec![4, 8]);
        let c = case(&shape, DType::Float32, "normal", 1001);
        assert_eq!(payload_numel(spec, &c, &[vec![4, 8]]), Ok(32));
        assert!(payload_numel(spec, &c, &[vec![4, 8], vec![8, 4]]).is_err());
        assert!(payload_numel(spec, &c, &vec![vec![4, 8]; MAX_OUTPUTS + 1]).is_err());
        assert!(payload_numel(spec, &c, &[]).is_err());
    }

    #[test]
    fn compare_gives_each_outputs_error_or_the_judges_reason() {
        let spec = Catalogue::builtin().get("rmsnorm").unwrap();
        let c = case(&Shape(vec![2, 2]), DType::Float32, "normal", 1001);
        let reference = [1.0f32, 2.0, 3.0, 4.0];
        let results = compare(
            spec,
            Stage::Smoke,
            &c,
            None,
            &reference,
            &[&reference, &[0.0; 4]],
        );
        assert_eq!(results[0], Ok(0.0));
        let why = results[1].clone().unwrap_err();
        assert!(why.contains("4 of 4 elements differ"), "{why}");
    }
}
