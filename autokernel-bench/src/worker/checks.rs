//! The parent's side of the checks (issue 21, point 1): a candidate's worker sends its
//! outputs ([`super::parent`]); the parent reads them into its own memory, has the trusted
//! reference worker compute the reference from the same seed, and compares the two with
//! the judge ([`crate::judge`]). [`Scope`] pins what a check may ask for to the request the
//! parent sent, and [`Tally`] keeps what was checked, so that a PASS the candidate's process
//! reports must be backed by the parent's own comparison of every planned case.

use autokernel_core::{BenchResult, Catalogue, Correctness, DType, KindSpec, Stage};
use ndarray::{ArrayViewD, IxDyn};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::plan;
use crate::judge::{self, CaseContext};
use crate::protocol::{BenchJob, ReferenceJob, Request};

/// The most outputs one check may carry (the determinism stage's 3 calls, with room).
const MAX_OUTPUTS: usize = 8;

/// `values` as bytes in native order, without a copy: outputs reach 800 MB (float32 at
/// 4096×50257), and the other side, on the same machine, reads them in the same order.
pub(crate) fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte may be read; the length is the slice's own
    // size in bytes, and the borrow keeps `values` alive.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) }
}

fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `as_bytes`; every bit pattern is a valid f32, so any bytes written are too.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), size_of_val(values)) }
}

/// Reads `numel` float32 values from `reader` (a payload after a line of the protocol).
///
/// # Errors
/// The reader's error, or end of file before the last byte.
pub(super) async fn read_f32s<R: AsyncRead + Unpin>(
    reader: &mut R,
    numel: usize,
) -> std::io::Result<Vec<f32>> {
    let mut values = vec![0f32; numel];
    reader.read_exact(as_bytes_mut(&mut values)).await?;
    Ok(values)
}

/// What the checks of one request may ask for (the kind, the layout and the parameters
/// come from the request the parent sent, never from the candidate's process), and what
/// they found.
pub(super) struct Scope<'c> {
    /// Every check answered so far.
    pub tally: Tally,
    catalogue: &'c Catalogue,
    /// The kind: the request's, else the first check's (the file's `KERNEL_KIND`).
    kind: Option<String>,
    layout: String,
    /// The request's parameters (unresolved: resolved once the kind is known).
    params: autokernel_core::Params,
}

impl<'c> Scope<'c> {
    /// The scope of `request`, or `None` for a request that runs no candidate.
    pub(super) fn of(catalogue: &'c Catalogue, request: &Request) -> Option<Self> {
        match request {
            Request::Bench(job) => Some(Scope {
                tally: Tally::default(),
                catalogue,
                kind: job.kind.clone(),
                layout: job.layout.name().into(),
                params: job.params.clone(),
            }),
            Request::Compare(job) => Some(Scope {
                tally: Tally::default(),
                catalogue,
                kind: Some(job.kind.clone()),
                layout: job.layout.name().into(),
                params: job.params.clone(),
            }),
            _ => None,
        }
    }

    /// `case` with the request's kind, layout and parameters, and its kind's catalogue
    /// entry.
    ///
    /// # Errors
    /// A message for a case of another kind than the request's (or than the first check's),
    /// or of a kind the catalogue lacks.
    pub(super) fn pin(
        &mut self,
        mut case: ReferenceJob,
    ) -> Result<(ReferenceJob, &'c KindSpec), String> {
        let kind = self.kind.get_or_insert_with(|| case.kind.clone());
        if *kind != case.kind {
            return Err(format!(
                "a check of kind `{}` in a request for `{kind}`",
                case.kind
            ));
        }
        let spec = self
            .catalogue
            .get(kind)
            .ok_or_else(|| format!("a check of unknown kind `{kind}`"))?;
        let params = spec
            .resolve_params(&self.params)
            .map_err(|e| e.to_string())?;
        case.params = serde_json::to_string(&params).map_err(|e| e.to_string())?;
        case.layout.clone_from(&self.layout);
        Ok((case, spec))
    }
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
    outputs: &[Vec<f32>],
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
            let out =
                ArrayViewD::from_shape(IxDyn(&shape), o.as_slice()).map_err(|e| e.to_string())?;
            judge::compare_outputs(out, reference.view(), out_dt, tol, &ctx).map(|a| a.rel_l2)
        })
        .collect()
}

/// One check the parent ran.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Checked {
    pub stage: Stage,
    pub case: ReferenceJob,
    /// How many outputs it compared.
    pub outputs: usize,
    /// Why the first that differed did, if one did.
    pub failure: Option<String>,
}

/// The checks of one request, in order.
#[derive(Debug, Default)]
pub(super) struct Tally {
    checks: Vec<Checked>,
}

impl Tally {
    /// Records a check of `outputs` outputs of `case` at `stage` with its `results`.
    pub(super) fn record(
        &mut self,
        stage: Stage,
        case: ReferenceJob,
        results: &[Result<f64, String>],
    ) {
        self.checks.push(Checked {
            stage,
            case,
            outputs: results.len(),
            failure: results.iter().find_map(|r| r.as_ref().err().cloned()),
        });
    }

    /// The first failed check's reason.
    pub(super) fn first_failure(&self) -> Option<&str> {
        self.checks.iter().find_map(|c| c.failure.as_deref())
    }

    /// Why the candidate's worker's PASS for `job` (on the GPU when `on_gpu`) is not backed
    /// by these checks, or `None` when it is: every case of the plan, in order and with its
    /// seed (the worker's: 1001 on, one per case and one for the timing), checked with all
    /// its calls' outputs and passed, at least one timed output checked, nothing else.
    pub(super) fn unbacked_pass(
        &self,
        catalogue: &Catalogue,
        job: &BenchJob,
        on_gpu: bool,
    ) -> Option<String> {
        if let Some(f) = self.first_failure() {
            return Some(format!("a check failed: {f}"));
        }
        let Some(kind) = self.checks.first().map(|c| c.case.kind.as_str()) else {
            return Some("no output was checked".into());
        };
        let plan = catalogue
            .get(kind)
            .ok_or_else(|| format!("unknown kind `{kind}`"))
            .and_then(|spec| {
                let params = spec
                    .resolve_params(&job.params)
                    .map_err(|e| e.to_string())?;
                plan::plan(spec, job, &params, on_gpu)
            });
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return Some(format!("the parent cannot plan the request: {e}")),
        };
        let mut seed = FIRST_SEED;
        let mut expected = Vec::new();
        let mut push = |stage: Stage, case: &plan::Case, seed: &mut u64| {
            *seed += 1;
            expected.push((
                stage,
                case.shape.clone(),
                case.dtype,
                case.mode.name(),
                *seed,
                case.repeats as usize,
            ));
        };
        for s in &plan.stages {
            for c in &s.cases {
                push(s.stage, c, &mut seed);
            }
        }
        seed += 1;
        let timing_seed = seed;
        let mut checks = self.checks.iter().peekable();
        for (stage, shape, dtype, mode, seed, repeats) in &expected {
            match checks.next() {
                Some(c) if c.stage == *stage
                    && c.case.shape == *shape
                    && c.case.dtype == *dtype
                    && c.case.mode == *mode
                    && c.case.seed == *seed
                    && c.case.offsets.is_none()
                    && c.outputs == *repeats => {}
                other => {
                    return Some(format!(
                        "the {stage} case {dtype} {shape} {mode} (seed {seed}) was not checked as planned{}",
                        other.map(|c| format!("; the parent checked {} {} {} (seed {}) instead", c.stage, c.case.dtype, c.case.shape, c.case.seed)).unwrap_or_default()
                    ))
                }
            }
        }
        let mut timed = 0;
        while let Some(c) = checks.next_if(|c| c.stage == Stage::Timing) {
            if c.case.seed != timing_seed
                || c.case.shape != plan.timing_shape
                || c.case.dtype != plan.timing_dtype
                || c.case.offsets.is_none()
            {
                return Some(format!(
                    "a timed output of {} {} (seed {}) is not of the planned timing case",
                    c.case.dtype, c.case.shape, c.case.seed
                ));
            }
            timed += 1;
        }
        if timed == 0 {
            return Some("no timed output was checked".into());
        }
        let mut seed = timing_seed;
        for c in &plan.integrity.cases {
            seed += 1;
            match checks.next() {
                Some(k)
                    if k.stage == plan.integrity.stage
                        && k.case.shape == c.shape
                        && k.case.dtype == c.dtype
                        && k.case.mode == c.mode.name()
                        && k.case.seed == seed
                        && k.outputs == c.repeats as usize => {}
                _ => {
                    return Some(format!(
                        "the {} case {} {} (seed {seed}) was not checked as planned",
                        plan.integrity.stage, c.dtype, c.shape
                    ))
                }
            }
        }
        checks.next().map(|c| {
            format!(
                "an unplanned check of {} {} (seed {})",
                c.case.dtype, c.case.shape, c.case.seed
            )
        })
    }
}

/// The seed before the first case's (`execute::Run`'s counter starts here).
pub(super) const FIRST_SEED: u64 = 1000;

/// `result` (a candidate's worker's PASS) made TAMPER when the parent's checks do not back
/// it ([`Tally::unbacked_pass`]).
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
    use autokernel_core::{Layout, Params, Shape};

    fn job() -> BenchJob {
        BenchJob {
            kernel_path: "kernel.py".into(),
            kind: Some("rmsnorm".into()),
            extra_shapes: Vec::new(),
            timing: None,
            dtypes: Vec::new(),
            quick: true,
            time_compiled: false,
            gpu_bandwidth_gb_s: None,
            layout: Layout::default(),
            params: Params::default(),
        }
    }

    fn case(shape: &Shape, dtype: DType, mode: &str, seed: u64) -> ReferenceJob {
        ReferenceJob {
            kind: "rmsnorm".into(),
            shape: shape.clone(),
            dtype,
            seed,
            mode: mode.into(),
            layout: "contiguous".into(),
            params: "{}".into(),
            offsets: None,
        }
    }

    /// The checks an honest worker makes for `job` on the CPU, worked out from the plan
    /// (seeds from 1001, the timing's between the stages and the integrity re-check).
    fn honest(job: &BenchJob) -> Tally {
        let spec = Catalogue::builtin().get("rmsnorm").unwrap();
        let params = spec.resolve_params(&job.params).unwrap();
        let plan = plan::plan(spec, job, &params, false).unwrap();
        let mut tally = Tally::default();
        let mut seed = FIRST_SEED;
        for s in &plan.stages {
            for c in &s.cases {
                seed += 1;
                let ok = vec![Ok(0.0); c.repeats as usize];
                tally.record(s.stage, case(&c.shape, c.dtype, c.mode.name(), seed), &ok);
            }
        }
        seed += 1;
        for offset in [3, 5] {
            let mut timed = case(&plan.timing_shape, plan.timing_dtype, "normal", seed);
            timed.offsets = Some([("x".to_string(), offset)].into());
            tally.record(Stage::Timing, timed, &[Ok(0.0)]);
        }
        for c in &plan.integrity.cases {
            seed += 1;
            let ok = vec![Ok(0.0); c.repeats as usize];
            tally.record(
                plan.integrity.stage,
                case(&c.shape, c.dtype, c.mode.name(), seed),
                &ok,
            );
        }
        tally
    }

    #[test]
    fn every_planned_case_checked_in_order_backs_a_pass() {
        let job = job();
        assert_eq!(
            honest(&job).unbacked_pass(Catalogue::builtin(), &job, false),
            None
        );
    }

    #[test]
    fn a_pass_with_a_case_left_unchecked_is_not_backed() {
        let job = job();
        let mut tally = honest(&job);
        tally.checks.remove(1);
        let why = tally
            .unbacked_pass(Catalogue::builtin(), &job, false)
            .unwrap();
        assert!(why.contains("was not checked as planned"), "{why}");
    }

    #[test]
    fn a_pass_with_a_failed_check_is_not_backed() {
        let job = job();
        let mut tally = honest(&job);
        tally.checks[2].failure = Some("1 of 8 elements differ".into());
        let why = tally
            .unbacked_pass(Catalogue::builtin(), &job, false)
            .unwrap();
        assert!(why.contains("1 of 8 elements differ"), "{why}");
    }

    #[test]
    fn a_check_at_another_seed_or_without_its_repeats_is_not_backing() {
        let job = job();
        let mut reseeded = honest(&job);
        reseeded.checks[0].case.seed += 100;
        assert!(reseeded
            .unbacked_pass(Catalogue::builtin(), &job, false)
            .is_some());
        let mut fewer = honest(&job);
        let determinism = fewer
            .checks
            .iter_mut()
            .find(|c| c.stage == Stage::Determinism)
            .unwrap();
        assert!(determinism.outputs > 1);
        determinism.outputs = 1;
        assert!(fewer
            .unbacked_pass(Catalogue::builtin(), &job, false)
            .is_some());
    }

    #[test]
    fn no_timed_output_or_no_check_at_all_is_not_backing() {
        let job = job();
        let mut untimed = honest(&job);
        untimed.checks.retain(|c| c.stage != Stage::Timing);
        let why = untimed
            .unbacked_pass(Catalogue::builtin(), &job, false)
            .unwrap();
        assert!(why.contains("no timed output"), "{why}");
        let none = Tally::default().unbacked_pass(Catalogue::builtin(), &job, false);
        assert_eq!(none.as_deref(), Some("no output was checked"));
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
            &[reference.to_vec(), vec![0.0; 4]],
        );
        assert_eq!(results[0], Ok(0.0));
        // all zeros against a reference of norm √30: relative L2 error exactly 1
        let why = results[1].clone().unwrap_err();
        assert!(why.contains("4 of 4 elements differ"), "{why}");
    }

    #[test]
    fn floats_survive_the_byte_view_both_ways() {
        let values = [1.5f32, -0.0, f32::NAN, f32::INFINITY];
        let bytes = as_bytes(&values).to_vec();
        let back = tokio_test_read(&bytes, values.len());
        assert_eq!(
            back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    fn tokio_test_read(bytes: &[u8], numel: usize) -> Vec<f32> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut reader = bytes;
            read_f32s(&mut reader, numel).await.unwrap()
        })
    }
}
