//! Case execution: judging one kernel file. [`bench()`] loads the candidate, asks the planner
//! ([`super::plan`]) what to run, then runs each case through the harness's `run_case` and
//! has the parent compare its outputs with the trusted reference ([`super::parent`]), times
//! the candidate, and re-checks it on fresh inputs, checking the guards after every stage.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;

use autokernel_core::{
    lookup_gpu, BenchResult, Correctness, DType, KernelKind, KindSpec, Metrics, Shape, Stage,
    StageReport,
};
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;
use serde::Deserialize;

use super::cupti;
use super::harness::{Failure, Harness};
use super::log::log;
use super::parent::ParentLink;
use super::plan::{self, Case, Plan};
use super::timing::{self, KeptOutput, Timed, TimingError};
use crate::judge;
use crate::protocol::{BenchJob, ReferenceJob, ReferenceTiming};

/// What the harness's `run_case` reports besides the arrays.
#[derive(Deserialize)]
struct CaseMeta {
    out_shape: Option<Vec<usize>>,
    out_dtype: Option<String>,
    problems: Vec<Problem>,
    error: Option<CandidateError>,
    /// Aten ops the calls dispatched, nested ones included (`harness._TimedOps`).
    ops: Vec<String>,
    /// Those the calls dispatched themselves.
    own_ops: Vec<String>,
    /// Calls with a non-empty output that launched no Triton kernel of the candidate's file.
    launchless_calls: u32,
}

/// The candidate's conduct around a call, as the harness found it (inputs modified, an
/// aliased or replayed output, not a tensor, …).
#[derive(Deserialize)]
struct Problem {
    kind: String,
    message: String,
}

/// The candidate raised.
#[derive(Deserialize)]
struct CandidateError {
    message: String,
    line: Option<u32>,
    traceback: String,
    cuda_error: bool,
}

/// The last component of `path` (`kernel.py` when it has none), for messages.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || "kernel.py".to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Judges the kernel file of `job`: the load, the correctness stages of its [`Plan`], the
/// timing and the integrity re-check. Returns the result, and whether the worker must
/// restart after replying (a CUDA error, tampering).
///
/// # Errors
/// [`Failure`] when the harness could not do its job (a request it cannot run, Python
/// raising outside the candidate); a candidate's failure is a verdict in the result.
pub(super) fn bench(
    h: &Harness,
    py: Python<'_>,
    job: &BenchJob,
    parent: &mut ParentLink<'_>,
) -> Result<(BenchResult, bool), Failure> {
    let device = if h.on_gpu() {
        format!("cuda ({})", h.device_name)
    } else {
        "cpu".to_string()
    };
    // the kernel names the file defines, read before any of its code runs
    let own_kernels = cupti::names_defined_in(&job.kernel_path);
    let (meta, cand) = match h.load(py, &job.kernel_path) {
        Ok(loaded) => loaded,
        // the candidate's import left the harness unable to report on it: its verdict
        Err(failure) => {
            let reason = broken_harness(h, py, Stage::Load, failure);
            return Ok((load_failed_in_harness(job, h, reason), true));
        }
    };
    // labelled with the request's kind, else the file's, until the load says which it is
    let label = job.kind.as_deref().or(meta.kind.as_deref());
    let mut result = BenchResult {
        kind: label.and_then(|n| n.parse::<KernelKind>().ok()),
        correctness: Correctness::Pass,
        stages: Vec::new(),
        metrics: None,
        device,
        timing_representative: h.on_gpu(),
        source_sha256: meta.sha256.clone(),
    };
    let load_fail = |result: &mut BenchResult, reason: String| {
        result.stages.push(StageReport {
            stage: Stage::Load,
            passed: false,
            cases: 1,
            detail: reason.clone(),
            duration_s: 0.0,
        });
        result.correctness = Correctness::Fail {
            stage: Stage::Load,
            reason,
        };
    };
    let Some(cand) = cand.filter(|_| meta.ok) else {
        if meta.cuda_error {
            result.correctness = Correctness::Crash {
                reason: format!(
                    "CUDA error while importing kernel.py: {}",
                    meta.message.unwrap_or_default()
                ),
            };
            return Ok((result, true));
        }
        let file = file_name(&job.kernel_path);
        let at = meta
            .line
            .map(|l| format!(" ({file} line {l})"))
            .unwrap_or_default();
        load_fail(
            &mut result,
            format!("{}{at}", meta.message.unwrap_or_default()),
        );
        let restart = !h.guards.changed(py).is_empty();
        return Ok((result, restart));
    };
    let declared = meta.kind.clone().unwrap_or_default();
    let Some(spec) = h.catalogue.get(&declared) else {
        load_fail(
            &mut result,
            format!(
                "unknown KERNEL_KIND `{declared}`; expected one of: {}",
                h.catalogue.names().join(", ")
            ),
        );
        return Ok((result, false));
    };
    let kind = spec.name.as_str();
    if let Some(wanted) = job.kind.as_deref().filter(|w| *w != kind) {
        load_fail(
            &mut result,
            format!("kernel.py declares KERNEL_KIND = \"{kind}\", but it is judged as {wanted}"),
        );
        return Ok((result, false));
    }
    // the request's parameters, checked against the kind the file declared: a wrong name
    // or value is the caller's mistake, not a verdict on the kernel
    let resolved = match spec.resolve_params(&job.params) {
        Ok(p) => p,
        Err(e) => {
            let _ = h.func(py, "unload").call1((&cand,));
            return Err(Failure::Harness(e.to_string()));
        }
    };
    let params = serde_json::to_string(&resolved).map_err(|e| Failure::Harness(e.to_string()))?;
    result.kind = kind.parse().ok();
    result.stages.push(StageReport {
        stage: Stage::Load,
        passed: true,
        cases: 1,
        detail: format!("KERNEL_KIND {kind}, sha256 {}", &meta.sha256[..12]),
        duration_s: 0.0,
    });
    let mut run = Run {
        py,
        h,
        parent,
        cand: cand.clone(),
        spec,
        seed: super::checks::FIRST_SEED,
        layout: job.layout.name(),
        params,
        file: file_name(&job.kernel_path),
        own_kernels,
        restart: false,
        stages: std::mem::take(&mut result.stages),
    };
    let verdict = plan::plan(spec, job, &resolved, h.on_gpu())
        .map_err(Failure::Harness)
        .and_then(|plan| run.execute(&plan, job));
    let _ = h.func(py, "unload").call1((&cand,));
    result.stages = std::mem::take(&mut run.stages);
    let restart = run.restart;
    match verdict? {
        (Correctness::Pass, metrics) => result.metrics = metrics,
        (v, _) => result.correctness = v,
    }
    Ok((result, restart))
}

/// The kind's forbidden ops (the reference's own operation) among `every` op that calls
/// dispatched, nested ones included: why `who` (`kernel_fn`, "the timed calls") is TAMPER,
/// or `None`. A stage judges it before the outputs; the timing, after the timed outputs'
/// check (a wrong timed output is FAIL first).
pub(crate) fn forbidden_in_calls(spec: &KindSpec, who: &str, every: &[String]) -> Option<String> {
    let hit: Vec<&str> = every
        .iter()
        .filter(|op| spec.forbidden_ops.contains(op))
        .map(String::as_str)
        .collect();
    (!hit.is_empty()).then(|| {
        format!(
            "{who} dispatched {}, the reference's own operation; a kernel must compute the result itself",
            hit.join(", ")
        )
    })
}

/// Why a right result of calls did not come from the candidate's own Triton kernels (issue
/// 21, point 3), or `None`: an op the calls dispatched themselves (`own`) outside the
/// kind's allowlist ([`autokernel_core::KindSpec::allowed_ops`]), or calls with an output
/// that launched no Triton kernel defined in `file` (`launchless`). One rule for the checked
/// calls of every stage (`who` = `kernel_fn`) and the timed ones ("the timed calls");
/// judged once the outputs are right, so that a wrong result is FAIL whoever computed it.
pub(crate) fn borrowed_in_calls(
    spec: &KindSpec,
    who: &str,
    own: &[String],
    launchless: u32,
    file: &str,
) -> Option<String> {
    let allowed = spec.allowed_ops();
    let extra: Vec<&str> = own
        .iter()
        .map(String::as_str)
        .filter(|op| !allowed.contains(op))
        .collect();
    let mut why = Vec::new();
    if !extra.is_empty() {
        why.push(format!(
            "{who} dispatched {}, not among the allocation, view, copy and cast ops a kernel may use",
            extra.join(", ")
        ));
    }
    if launchless > 0 {
        why.push(format!(
            "{who} launched no Triton kernel defined in {file} in {launchless} call(s)"
        ));
    }
    (!why.is_empty()).then(|| {
        format!(
            "{}; the result must come from Triton kernels launched by its own file",
            why.join("; ")
        )
    })
}

/// Why the time of `calls` (a kernel's timed calls; `who` names them) is not of the kernel's
/// own work, or `None`: one of the kind's forbidden ops, an op off the allowlist or a call
/// that launched none of its file's kernels ([`borrowed_in_calls`]; launches counted by
/// the harness and, on the GPU, by the device), or what the device ran beside the kernels
/// its file defines (`own_kernels`, [`cupti::judge`]). Judged once the timed outputs are
/// right.
pub(crate) fn not_its_own(
    spec: &KindSpec,
    who: &str,
    calls: &timing::TimedCalls,
    own_kernels: &BTreeSet<String>,
    file: &str,
) -> Option<String> {
    let (on_device, device_launchless) = calls
        .device
        .as_ref()
        .map_or((None, 0), |a| cupti::judge(a, own_kernels, who, file));
    let launchless = calls.launchless.max(device_launchless);
    // the profiler's aten names first: they say what to move into the kernel more plainly
    // than the device's mangled kernel names
    forbidden_in_calls(spec, who, &calls.ops)
        .or_else(|| borrowed_in_calls(spec, who, &calls.own_ops, launchless, file))
        .or(on_device)
}

/// Has the parent compare the outputs the timed loop kept ([`timing::Rotation`]) with the
/// references of their inputs: `case` at each output's input offsets. Ok(Err(reason)) for
/// `unkept` (a checked call whose output could not be kept), or the first output that
/// differs or has another shape or dtype than the catalogue's.
///
/// # Errors
/// A failure of the parent's link, or a CUDA error reading a kept output back.
pub(crate) fn check_timed_outputs(
    parent: &mut ParentLink<'_>,
    spec: &KindSpec,
    case: &ReferenceJob,
    stage: Stage,
    kept: Vec<KeptOutput>,
    unkept: Option<String>,
) -> Result<Result<(), String>, Failure> {
    if let Some(why) = unkept {
        return Ok(Err(why));
    }
    let (shape, dtype) = (&case.shape, case.dtype);
    let (expected_shape, expected_dtype) =
        spec.output_for(shape, dtype).map_err(Failure::Harness)?;
    let expected_shape: Vec<usize> = expected_shape.iter().map(|&d| d as usize).collect();
    for out in kept {
        if out.shape != expected_shape {
            return Ok(Err(format!(
                "a timed call at {dtype} {shape} returned shape {:?}, not {expected_shape:?}",
                out.shape
            )));
        }
        if out.dtype != expected_dtype {
            return Ok(Err(format!(
                "a timed call at {dtype} {shape} returned dtype {}, not {expected_dtype}",
                out.dtype
            )));
        }
        let at = ReferenceJob {
            offsets: Some(out.offsets.clone()),
            ..case.clone()
        };
        let values = out.into_array()?;
        if let Some(Err(reason)) = parent
            .check(stage, at, &[values.view()])?
            .into_iter()
            .next()
        {
            return Ok(Err(format!(
                "a timed call's output (its inputs overwritten with another seed's before \
                 the call) differs from the reference: {reason}"
            )));
        }
    }
    Ok(Ok(()))
}

/// The reason of a verdict for a harness that failed while a candidate was loaded: its
/// module code or its call left the harness unable to finish (an output it cannot copy, an
/// exception it cannot print). Logged in full; the worker restarts after the reply.
fn broken_harness(h: &Harness, py: Python<'_>, stage: Stage, failure: Failure) -> String {
    let message = match failure {
        Failure::Harness(m) | Failure::Request(m) | Failure::Tampered(m) => m,
        Failure::Python(e) => {
            let (message, traceback, _) = h.describe(py, &e);
            tracing::debug!(%traceback, "the harness raised while judging a candidate");
            message
        }
    };
    log(&format!(
        "the harness failed during {stage} with a candidate loaded: {message}"
    ));
    format!("the candidate left the harness unable to judge it ({message}); the worker restarts")
}

/// A result that fails at the load stage with `reason`, labelled with the request's kind.
fn load_failed_in_harness(job: &BenchJob, h: &Harness, reason: String) -> BenchResult {
    BenchResult {
        kind: job
            .kind
            .as_deref()
            .and_then(|n| n.parse::<KernelKind>().ok()),
        correctness: Correctness::Fail {
            stage: Stage::Load,
            reason: reason.clone(),
        },
        stages: vec![StageReport {
            stage: Stage::Load,
            passed: false,
            cases: 1,
            detail: reason,
            duration_s: 0.0,
        }],
        metrics: None,
        device: if h.on_gpu() {
            format!("cuda ({})", h.device_name)
        } else {
            "cpu".to_string()
        },
        timing_representative: h.on_gpu(),
        source_sha256: String::new(),
    }
}

/// The state of one bench request's stages.
struct Run<'a, 'py, 'l> {
    py: Python<'py>,
    h: &'a Harness,
    /// Where the outputs are compared with the trusted reference.
    parent: &'a mut ParentLink<'l>,
    cand: Bound<'py, PyAny>,
    /// The kind's catalogue entry.
    spec: &'a KindSpec,
    seed: u64,
    /// How the inputs are laid out (`Layout::name`), for every case and the timing.
    layout: &'static str,
    /// Every parameter of the kind (the request's, defaults filled), as a JSON object, for
    /// every case and the timing.
    params: String,
    /// The candidate's file name, for messages that point at a line of it.
    file: String,
    /// The names its file defines ([`cupti::defined_names`]): its own kernels on the device.
    own_kernels: BTreeSet<String>,
    restart: bool,
    stages: Vec<StageReport>,
}

type StageOutcome = Result<Option<Correctness>, Failure>;

impl Run<'_, '_, '_> {
    /// Runs `plan` after the load: the guards first (the module-level code of kernel.py
    /// has run), the correctness stages, the timing, the plausibility gate, the integrity
    /// re-check. The first verdict other than `PASS` ends it.
    fn execute(
        &mut self,
        plan: &Plan,
        job: &BenchJob,
    ) -> Result<(Correctness, Option<Metrics>), Failure> {
        let on_gpu = self.h.on_gpu();
        let (timing_shape, timing_dtype) = (&plan.timing_shape, plan.timing_dtype);
        // module-level code of kernel.py has run: check the harness is intact
        if let Some(v) = self.guard_check(Stage::Load) {
            self.fail_report(Stage::Load, &v);
            return Ok((v, None));
        }
        for stage in &plan.stages {
            if let Some(v) = self.stage(stage.stage, &stage.cases)? {
                return Ok((v, None));
            }
        }

        // timing
        let t0 = Instant::now();
        log(&format!("stage timing {timing_dtype} {timing_shape}"));
        let seed = self.next_seed();
        let case = self.reference_job(timing_shape, timing_dtype, seed, "normal");
        let repetitions = if job.quick || !on_gpu {
            timing::TIMING_REPETITIONS_QUICK
        } else {
            timing::TIMING_REPETITIONS
        };
        let timed =
            self.interleaved(job, (timing_shape, timing_dtype), seed, &case, repetitions)?;
        let (mut t, r) = match timed {
            Ok(t) => t,
            Err(TimingError::Tampered(why)) => {
                self.restart = true;
                let v = Correctness::Tamper {
                    reason: format!("{timing_dtype} {timing_shape}: {why}"),
                };
                self.fail_report(Stage::Timing, &v);
                return Ok((v, None));
            }
            Err(TimingError::Python(e)) => {
                let (message, _tb, cuda) = self.h.describe(self.py, &e);
                return Ok((
                    self.candidate_raised(
                        Stage::Timing,
                        timing_shape,
                        timing_dtype,
                        message,
                        None,
                        cuda,
                    ),
                    None,
                ));
            }
        };
        // timing calls are judged calls: a few of them, on inputs overwritten in place
        // before each call, checked against the reference of those inputs
        if let Err(reason) = check_timed_outputs(
            self.parent,
            self.spec,
            &case,
            Stage::Timing,
            std::mem::take(&mut t.calls.kept),
            t.calls.unkept.take(),
        )? {
            let v = Correctness::Fail {
                stage: Stage::Timing,
                reason,
            };
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        // right, and as in every checked call: the time must be of the candidate's own kernels
        if let Some(why) = not_its_own(
            self.spec,
            "the timed calls",
            &t.calls,
            &self.own_kernels,
            &self.file,
        ) {
            self.restart = true;
            let v = Correctness::Tamper {
                reason: format!("{timing_dtype} {timing_shape}: {why}"),
            };
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        let metrics = self.metrics(&t, &r, timing_shape, timing_dtype, job.gpu_bandwidth_gb_s);
        let compiled_note = r
            .compiled_error
            .as_ref()
            .map(|e| format!("; torch.compile failed: {e}"))
            .unwrap_or_default();
        let kernels_note = t
            .calls
            .device
            .as_ref()
            .map(cupti::kernels_note)
            .unwrap_or_default();
        self.stages.push(StageReport {
            stage: Stage::Timing,
            passed: true,
            cases: 1,
            detail: format!(
                "{timing_dtype} {timing_shape}: {:.2} us, reference {:.2} us ({:.2}x){compiled_note}{kernels_note}",
                metrics.latency_us, metrics.reference_latency_us, metrics.speedup_vs_reference
            ),
            duration_s: t0.elapsed().as_secs_f64(),
        });
        if let Some(v) = self.guard_check(Stage::Timing) {
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        // plausibility gate: faster than the hardware allows means work escaped the timer
        if let Some(pct) = metrics.pct_peak.filter(|p| on_gpu && *p > 100.0) {
            self.restart = true;
            let v = Correctness::Tamper {
                reason: format!(
                    "implausible timing: {:.1} {} at {timing_dtype} {timing_shape} is {pct:.0}% of the GPU's peak; work left running on another stream, or a result computed outside the timed call?",
                    metrics.throughput, metrics.throughput_unit
                ),
            };
            self.fail_report(Stage::Timing, &v);
            return Ok((v, None));
        }
        // integrity: correctness re-checked after timing, on fresh inputs
        if let Some(v) = self.stage(plan.integrity.stage, &plan.integrity.cases)? {
            return Ok((v, None));
        }
        Ok((Correctness::Pass, Some(metrics)))
    }

    /// The timing case measured in `repetitions` interleaved repetitions (issue 36, point
    /// 2): the candidate here ([`timing::CandidateTimer`]) and the reference where it is
    /// computed, in the trusted reference worker (through the parent), alternating which
    /// goes first as a head-to-head does; torch.compile of the reference, when the job
    /// asks, with the last. The candidate's timing error is the inner `Err`.
    ///
    /// # Errors
    /// The parent's failures (the channel, the reference worker).
    fn interleaved(
        &mut self,
        job: &BenchJob,
        (shape, dtype): (&Shape, DType),
        seed: u64,
        case: &ReferenceJob,
        repetitions: u32,
    ) -> Result<Result<(Timed, ReferenceTiming), TimingError>, Failure> {
        let mut timer = match timing::CandidateTimer::new(
            self.h,
            self.py,
            &self.cand,
            self.spec.name.as_str(),
            shape.0.clone(),
            dtype.name(),
            seed,
            self.layout,
            self.params.as_str(),
            repetitions,
        ) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        let mut references = Vec::new();
        for r in 0..repetitions {
            let compiled = job.time_compiled && r + 1 == repetitions;
            if r % 2 == 1 {
                references.push(self.parent.time_reference(case.clone(), true, compiled)?);
            }
            if let Err(e) = timer.repetition(self.h, self.py) {
                return Ok(Err(e));
            }
            if r % 2 == 0 {
                references.push(self.parent.time_reference(case.clone(), true, compiled)?);
            }
        }
        Ok(Ok((
            timer.finish(),
            timing::combined_references(&references),
        )))
    }

    fn metrics(
        &self,
        t: &Timed,
        r: &ReferenceTiming,
        shape: &Shape,
        dtype: DType,
        bandwidth: Option<f64>,
    ) -> Metrics {
        let kind = self.spec;
        let throughput = kind.throughput(shape, dtype, t.latency_us);
        let unit = kind.bound.throughput_unit().to_string();
        let pct_peak = if self.h.on_gpu() {
            lookup_gpu(&self.h.device_name).spec().map(|spec| {
                let spec = match bandwidth {
                    Some(bw) => spec.clone().with_measured_bandwidth(bw),
                    None => spec.clone(),
                };
                spec.pct_peak(throughput, &unit, dtype)
            })
        } else {
            None
        };
        Metrics {
            shape: shape.clone(),
            dtype,
            latency_us: t.latency_us,
            reference_latency_us: r.reference_latency_us,
            compiled_latency_us: r.compiled_latency_us,
            speedup_vs_reference: timing::paired_speedup(&r.samples_us, &t.samples_us).unwrap_or(
                if t.latency_us > 0.0 {
                    r.reference_latency_us / t.latency_us
                } else {
                    0.0
                },
            ),
            samples_us: t.samples_us.clone(),
            reference_samples_us: r.samples_us.clone(),
            throughput,
            throughput_unit: unit,
            pct_peak,
            peak_vram_mb: t.peak_vram_mb.unwrap_or(0.0),
            config_keys_read: t.config_keys_read.clone(),
            conditions: match (&t.conditions, &r.conditions) {
                (Some(c), Some(more)) => {
                    let mut c = c.clone();
                    c.absorb(more);
                    Some(c)
                }
                (c, more) => c.clone().or_else(|| more.clone()),
            },
        }
    }

    /// The trusted reference worker's description of a case run with `seed`.
    fn reference_job(&self, shape: &Shape, dtype: DType, seed: u64, mode: &str) -> ReferenceJob {
        ReferenceJob {
            kind: self.spec.name.clone(),
            shape: shape.clone(),
            dtype,
            seed,
            mode: mode.into(),
            layout: self.layout.into(),
            params: self.params.clone(),
            offsets: None,
        }
    }

    fn next_seed(&mut self) -> u64 {
        self.seed += 1;
        self.seed
    }

    /// Marks `stage`'s report (the last one, already pushed as passed) failed with the
    /// verdict's reason, or adds a failed one: a verdict reached after a stage's report
    /// must show in the stage table, and in `failed_stage`, as that stage.
    fn fail_report(&mut self, stage: Stage, verdict: &Correctness) {
        let detail = verdict.reason().unwrap_or_default().to_string();
        match self.stages.last_mut() {
            Some(last) if last.stage == stage => {
                last.passed = false;
                last.detail = detail;
            }
            _ => self.stages.push(StageReport {
                stage,
                passed: false,
                cases: 0,
                detail,
                duration_s: 0.0,
            }),
        }
    }

    fn guard_check(&mut self, stage: Stage) -> Option<Correctness> {
        let changed = self.h.guards.changed(self.py);
        if changed.is_empty() {
            return None;
        }
        self.restart = true;
        Some(Correctness::Tamper {
            reason: format!(
                "during {stage}, the candidate changed what the judge relies on: {}",
                changed.join(", ")
            ),
        })
    }

    fn stage(&mut self, stage: Stage, cases: &[Case]) -> StageOutcome {
        let t0 = Instant::now();
        let mut worst_l2 = 0.0f64;
        for c in cases {
            log(&format!(
                "stage {stage} {} {} {}",
                c.dtype,
                c.shape,
                c.mode.name()
            ));
            let outcome = self.case(stage, c).or_else(|failure| {
                if let Failure::Request(_) = failure {
                    // a refusal that follows a change to what the judge relies on (a
                    // harness table edited in place) is the candidate's, not the request's
                    if let Some(tamper) = self.guard_check(stage) {
                        return Ok(Err(tamper));
                    }
                    return Err(failure);
                }
                // the candidate ran in this case: whatever broke the harness came from it
                self.restart = true;
                let reason = broken_harness(self.h, self.py, stage, failure);
                Ok::<_, Failure>(Err(Correctness::Fail {
                    stage,
                    reason: format!("{} {}: {reason}", c.dtype, c.shape),
                }))
            })?;
            match outcome {
                Ok(l2) => worst_l2 = worst_l2.max(l2),
                Err(verdict) => {
                    self.stages.push(StageReport {
                        stage,
                        passed: false,
                        cases: cases.len() as u32,
                        detail: verdict.reason().unwrap_or_default().to_string(),
                        duration_s: t0.elapsed().as_secs_f64(),
                    });
                    return Ok(Some(verdict));
                }
            }
        }
        if let Some(v) = self.guard_check(stage) {
            self.stages.push(StageReport {
                stage,
                passed: false,
                cases: cases.len() as u32,
                detail: v.reason().unwrap_or_default().to_string(),
                duration_s: t0.elapsed().as_secs_f64(),
            });
            return Ok(Some(v));
        }
        self.stages.push(StageReport {
            stage,
            passed: true,
            cases: cases.len() as u32,
            detail: format!(
                "{} cases, worst relative L2 error {worst_l2:.2e}",
                cases.len()
            ),
            duration_s: t0.elapsed().as_secs_f64(),
        });
        Ok(None)
    }

    fn candidate_raised(
        &mut self,
        stage: Stage,
        shape: &Shape,
        dtype: DType,
        message: String,
        line: Option<u32>,
        cuda: bool,
    ) -> Correctness {
        let at = line
            .map(|l| format!(" ({} line {l})", self.file))
            .unwrap_or_default();
        if cuda {
            self.restart = true;
            return Correctness::Crash {
                reason: format!(
                    "CUDA error at {dtype} {shape}: {message}{at}; the worker was restarted (a poisoned CUDA context is never reused)"
                ),
            };
        }
        Correctness::Fail {
            stage,
            reason: format!("kernel_fn raised at {dtype} {shape}: {message}{at}"),
        }
    }

    /// Runs one case: Ok(Ok(rel_l2)) when it passed, Ok(Err(verdict)) when not.
    fn case(&mut self, stage: Stage, c: &Case) -> Result<Result<f64, Correctness>, Failure> {
        let py = self.py;
        let seed = self.next_seed();
        let res = self.h.func(py, "run_case").call1((
            &self.cand,
            self.spec.name.as_str(),
            c.shape.0.clone(),
            c.dtype.name(),
            seed,
            c.mode.name(),
            c.repeats,
            self.layout,
            self.params.as_str(),
        ));
        let res = match res {
            Ok(r) => r,
            Err(e) => {
                // the harness itself raised: inputs/reference generation, or the candidate broke it
                let (message, traceback, cuda) = self.h.describe(py, &e);
                if e.get_type(py).name().is_ok_and(|n| n == "InputsRefused") {
                    return Err(Failure::Request(format!(
                        "{} cannot make inputs at {} {}: {message}",
                        self.spec.name, c.dtype, c.shape
                    )));
                }
                if cuda {
                    return Ok(Err(
                        self.candidate_raised(stage, &c.shape, c.dtype, message, None, true)
                    ));
                }
                return Err(Failure::Harness(format!(
                    "the harness failed at {stage} {} {}: {message}\n{traceback}",
                    c.dtype, c.shape
                )));
            }
        };
        let (meta, outputs): (String, Vec<Bound<'_, PyAny>>) = res.extract()?;
        let meta: CaseMeta =
            serde_json::from_str(&meta).map_err(|e| Failure::Harness(e.to_string()))?;
        let where_ = format!(
            "{} {}{}",
            c.dtype,
            c.shape,
            if c.mode == plan::InputMode::Normal {
                String::new()
            } else {
                format!(" {} inputs", c.mode.name())
            }
        );
        if let Some(why) = forbidden_in_calls(self.spec, "kernel_fn", &meta.ops) {
            self.restart = true;
            return Ok(Err(Correctness::Tamper {
                reason: format!("{where_}: {why}"),
            }));
        }
        if let Some(p) = meta.problems.first() {
            let reason = format!("{where_}: {}", p.message);
            return Ok(Err(match p.kind.as_str() {
                "not_tensor" | "wrong_device" => Correctness::Fail { stage, reason },
                _ => {
                    self.restart = true;
                    Correctness::Tamper { reason }
                }
            }));
        }
        if let Some(e) = meta.error {
            let last = e
                .traceback
                .lines()
                .rev()
                .find(|l| l.trim_start().starts_with("File "))
                .unwrap_or_default();
            tracing::debug!(last, "candidate traceback");
            return Ok(Err(self.candidate_raised(
                stage,
                &c.shape,
                c.dtype,
                e.message,
                e.line,
                e.cuda_error,
            )));
        }
        let (Some(out_shape), Some(out_dtype)) = (meta.out_shape, meta.out_dtype) else {
            return Err(Failure::Harness(
                "the harness returned no output description".into(),
            ));
        };
        // the expected output comes from the catalogue, not from Python a candidate can reach
        let (expected_shape, expected_dtype) = self
            .spec
            .output_for(&c.shape, c.dtype)
            .map_err(Failure::Harness)?;
        let expected_shape: Vec<usize> = expected_shape.iter().map(|&d| d as usize).collect();
        if let Err(reason) =
            judge::check_spec(&out_shape, &out_dtype, &expected_shape, &expected_dtype)
        {
            return Ok(Err(Correctness::Fail {
                stage,
                reason: format!("{where_}: {reason}"),
            }));
        }
        let arrays: Vec<Bound<'_, PyArrayDyn<f32>>> = outputs
            .into_iter()
            .map(|o| o.cast_into::<PyArrayDyn<f32>>().map_err(PyErr::from))
            .collect::<Result<_, _>>()?;
        let readonly: Vec<_> = arrays.iter().map(|a| a.readonly()).collect();
        let views: Vec<_> = readonly.iter().map(|r| r.as_array()).collect();
        if views.is_empty() {
            return Err(Failure::Harness("the harness returned no outputs".into()));
        }
        // the repeats' shapes too (the spec check saw the last call's), before the parent
        // is asked: it refuses outputs of another shape than the catalogue's
        if let Some(v) = views
            .iter()
            .find(|v| v.shape() != expected_shape.as_slice())
        {
            return Ok(Err(Correctness::Fail {
                stage,
                reason: format!(
                    "{where_}: a call returned shape {:?}, another returned {expected_shape:?}",
                    v.shape()
                ),
            }));
        }
        // every call's output against the trusted reference, in the parent (the repeats'
        // too: a wrong repeat is FAIL whoever computed it); the first call's agreement is
        // the case's
        let case = self.reference_job(&c.shape, c.dtype, seed, c.mode.name());
        let mut agreement = None;
        for result in self.parent.check(stage, case, &views)? {
            match result {
                Ok(rel_l2) => {
                    agreement.get_or_insert(rel_l2);
                }
                Err(reason) => return Ok(Err(Correctness::Fail { stage, reason })),
            }
        }
        let Some(agreement) = agreement else {
            return Err(Failure::Harness("the harness returned no outputs".into()));
        };
        // right results, but not computed by the candidate's own kernels (issue 21, point
        // 3); before the repeats' bitwise check, which a kernel that computes its repeats
        // some other way fails too, with a less telling reason
        if let Some(why) = borrowed_in_calls(
            self.spec,
            "kernel_fn",
            &meta.own_ops,
            meta.launchless_calls,
            &self.file,
        ) {
            self.restart = true;
            return Ok(Err(Correctness::Tamper {
                reason: format!("{where_}: {why}"),
            }));
        }
        if views.len() > 1 {
            let ctx = judge::CaseContext {
                kind: &self.spec.name,
                stage,
                shape: &c.shape,
                dtype: c.dtype,
                mode: c.mode.name(),
                note: None,
            };
            if let Err(reason) = judge::check_bitwise_identical(&views, &ctx) {
                return Ok(Err(Correctness::Fail { stage, reason }));
            }
        }
        Ok(Ok(agreement))
    }
}
