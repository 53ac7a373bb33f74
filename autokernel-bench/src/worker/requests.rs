//! One request in, one reply out: [`handle`] dispatches a [`Request`] to the harness
//! (`status`, `call_script`, and in the trusted reference worker a case's reference output
//! and the reference's timing), the head-to-head comparison of two kernel files (here) or
//! the judging of one ([`super::execute::bench`]), and says whether the worker must restart.

use std::path::Path;

use autokernel_core::{Comparison, Stage};
use numpy::{PyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::cupti;
use super::execute;
use super::harness::{Failure, Harness};
use super::parent::ParentLink;
use super::plan::{check_request, COMPARE_SEED};
use super::timing::{self, median};
use crate::protocol::{CompareJob, ProblemJob, ReferenceJob, ReplyBody, Request};

/// Answers `request`, asking `parent` what a candidate's process must not compute itself:
/// the reply's body, whether the worker must exit after sending it (a CUDA error or
/// tampering: the next request gets a fresh process), and the float32 array of a reference
/// output, which the request loop keeps until [`Request::Deliver`] (`None` for every other
/// request).
pub(super) fn handle<'py>(
    h: &Harness,
    py: Python<'py>,
    request: Request,
    parent: &mut ParentLink<'_>,
) -> (ReplyBody, bool, Option<Bound<'py, PyArrayDyn<f32>>>) {
    let mut payload = None;
    let result: Result<(serde_json::Value, bool), Failure> = match request {
        Request::Status => status(h, py).map(|v| (v, false)),
        Request::Bench(job) => execute::bench(h, py, &job, parent).and_then(|(r, restart)| {
            serde_json::to_value(&r)
                .map(|v| (v, restart))
                .map_err(|e| Failure::Harness(e.to_string()))
        }),
        Request::Compare(job) => compare(h, py, &job, parent).and_then(|c| {
            serde_json::to_value(&c)
                .map(|v| (v, false))
                .map_err(|e| Failure::Harness(e.to_string()))
        }),
        Request::Reference(job) => reference(h, py, &job).map(|(value, out)| {
            payload = Some(out);
            (value, false)
        }),
        // the request loop keeps the last reference and answers this itself
        Request::Deliver => Err(Failure::Request(
            "only the trusted reference worker delivers references".into(),
        )),
        Request::TimeReference {
            case,
            quick,
            compiled,
            spin_up,
        } => time_reference(h, py, &case, quick, compiled, spin_up).map(|v| (v, false)),
        Request::Problem(job) => problem(h, py, &job),
        Request::CallScript {
            script,
            function,
            kwargs,
        } => call_script(h, py, &script, &function, &kwargs),
    };
    let (body, restart) = match result {
        Ok((value, restart)) => (ReplyBody::Ok { value }, restart),
        Err(Failure::Harness(message) | Failure::Request(message)) => {
            (ReplyBody::Error { message }, false)
        }
        // the worker's torch is no longer trustworthy: answered, then restarted
        Err(Failure::Tampered(message)) => (ReplyBody::Error { message }, true),
        Err(Failure::Python(e)) => {
            let (message, traceback, cuda) = h.describe(py, &e);
            (ReplyBody::PythonError { message, traceback }, cuda)
        }
    };
    if !matches!(body, ReplyBody::Ok { .. }) {
        payload = None;
    }
    (body, restart, payload)
}

/// The reference output of `job` (`harness.reference_output`): the reply's value
/// `{shape, note, bytes}` and the output (float32, C-contiguous: its bytes are sent as
/// they lie).
fn reference<'py>(
    h: &Harness,
    py: Python<'py>,
    job: &ReferenceJob,
) -> Result<(serde_json::Value, Bound<'py, PyArrayDyn<f32>>), Failure> {
    let offsets =
        serde_json::to_string(&job.offsets).map_err(|e| Failure::Harness(e.to_string()))?;
    let (note, out): (Option<String>, Bound<'_, PyAny>) = h
        .func(py, "reference_output")
        .call1((
            job.kind.as_str(),
            job.shape.0.clone(),
            job.dtype.name(),
            job.seed,
            job.mode.as_str(),
            job.layout.as_str(),
            job.params.as_str(),
            offsets,
        ))?
        .extract()?;
    let out = out.cast_into::<PyArrayDyn<f32>>().map_err(PyErr::from)?;
    if !out.is_c_contiguous() {
        return Err(Failure::Harness(
            "the harness's reference output is not C-contiguous".into(),
        ));
    }
    let value = serde_json::json!({
        "shape": out.shape(),
        "note": note,
        "bytes": PyUntypedArrayMethods::len(&out) * size_of::<f32>(),
    });
    Ok((value, out))
}

/// The reference's latencies at the timing case `job` ([`timing::time_reference`]), as a
/// [`crate::protocol::ReferenceTiming`]'s JSON.
fn time_reference(
    h: &Harness,
    py: Python<'_>,
    job: &ReferenceJob,
    quick: bool,
    compiled: bool,
    spin_up: bool,
) -> Result<serde_json::Value, Failure> {
    let times = timing::time_reference(
        h,
        py,
        job.kind.as_str(),
        job.shape.0.clone(),
        job.dtype.name(),
        job.seed,
        quick,
        compiled,
        spin_up,
        job.layout.as_str(),
        job.params.as_str(),
    )?;
    Ok(serde_json::json!({
        "reference_latency_us": times.eager_us,
        "compiled_latency_us": times.compiled_us,
        "compiled_error": times.compiled_error,
        "conditions": times.conditions,
    }))
}

/// The harness's `status` (pid, device, warmth), as JSON.
fn status(h: &Harness, py: Python<'_>) -> Result<serde_json::Value, Failure> {
    let text: String = h.func(py, "status").call0()?.extract()?;
    serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))
}

/// A candidate's run on a problem's cases (`harness.run_problem`), with the names of the
/// harness's functions it replaced (`guards_changed`).
fn problem(
    h: &Harness,
    py: Python<'_>,
    job: &ProblemJob,
) -> Result<(serde_json::Value, bool), Failure> {
    let cases = serde_json::to_string(&job.cases).map_err(|e| Failure::Harness(e.to_string()))?;
    let text: String = h
        .func(py, "run_problem")
        .call1((
            job.problem.to_string_lossy().as_ref(),
            job.kernel.to_string_lossy().as_ref(),
            cases,
            PROBLEM_OUTPUTS,
            job.trials,
        ))?
        .extract()?;
    let mut value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))?;
    value["guards_changed"] = serde_json::json!(h.guards.changed(py));
    // no restart asked: the parent collects the outputs from the scratch folder of a worker
    // still running, then retires it, as it retires every candidate's worker
    Ok((value, false))
}

/// The folder, under a candidate's scratch folder (its working directory), where
/// [`Request::Problem`] writes the outputs for the parent to collect.
pub(crate) const PROBLEM_OUTPUTS: &str = "problem-outputs";

/// `function(**kwargs)` of the Python file `script`, its JSON result.
fn call_script(
    h: &Harness,
    py: Python<'_>,
    script: &Path,
    function: &str,
    kwargs: &serde_json::Value,
) -> Result<(serde_json::Value, bool), Failure> {
    let text: String = h
        .func(py, "call_script")
        .call1((
            script.to_string_lossy().as_ref(),
            function,
            kwargs.to_string(),
        ))?
        .extract()?;
    let value = serde_json::from_str(&text).map_err(|e| Failure::Harness(e.to_string()))?;
    Ok((value, false))
}

/// Times the incumbent and the candidate interleaved at the job's shape and dtype.
fn compare(
    h: &Harness,
    py: Python<'_>,
    job: &CompareJob,
    parent: &mut ParentLink<'_>,
) -> Result<Comparison, Failure> {
    let (shape, dtype) = &job.timing;
    let spec = h.catalogue.get(&job.kind).ok_or_else(|| {
        Failure::Harness(format!(
            "unknown kind `{}`; this worker's catalogue has: {}",
            job.kind,
            h.catalogue.names().join(", ")
        ))
    })?;
    check_request(spec, shape, *dtype, h.on_gpu()).map_err(Failure::Harness)?;
    let params = spec
        .resolve_params(&job.params)
        .map_err(|e| Failure::Harness(e.to_string()))?;
    let params = serde_json::to_string(&params).map_err(|e| Failure::Harness(e.to_string()))?;
    // the kernel names each file defines, read before any of their code runs
    let own_kernels = [&job.incumbent, &job.candidate].map(|p| cupti::names_defined_in(p));
    let mut loaded = Vec::new();
    for (role, path) in [("incumbent", &job.incumbent), ("candidate", &job.candidate)] {
        let (meta, cand) = h.load(py, path)?;
        match cand {
            Some(c) if meta.ok => loaded.push(c),
            _ => {
                return Err(Failure::Harness(format!(
                    "the {role} `{}` does not load: {}",
                    path.display(),
                    meta.message.unwrap_or_default()
                )))
            }
        }
    }
    let timed = timing::compare_kernels(
        h,
        py,
        [&loaded[0], &loaded[1]],
        job.kind.as_str(),
        shape.0.clone(),
        dtype.name(),
        COMPARE_SEED,
        job.repetitions,
        job.layout.name(),
        params.as_str(),
    );
    for c in &loaded {
        let _ = h.func(py, "unload").call1((c,));
    }
    let ([mut incumbent, mut candidate], conditions) = timed.map_err(|e| match e {
        timing::TimingError::Python(e) => Failure::Python(e),
        timing::TimingError::Tampered(why) => Failure::Tampered(format!(
            "during the head-to-head timing, a kernel {}",
            why.trim_start_matches("a timed call ")
        )),
    })?;
    // both kernels' module code ran again here: no verdict was taken after it
    let changed = h.guards.changed(py);
    if !changed.is_empty() {
        return Err(Failure::Tampered(format!(
            "during the head-to-head timing, a kernel changed what the judge relies on: {}",
            changed.join(", ")
        )));
    }
    // the head-to-head's calls are judged calls too: a kernel right when benched alone and
    // wrong beside the incumbent (or at this CONFIG only here) gets no comparison
    let case = ReferenceJob {
        kind: job.kind.clone(),
        shape: shape.clone(),
        dtype: *dtype,
        seed: COMPARE_SEED,
        mode: "normal".into(),
        layout: job.layout.name().into(),
        params,
        offsets: None,
    };
    for (role, side) in [("incumbent", &mut incumbent), ("candidate", &mut candidate)] {
        let kept = std::mem::take(&mut side.calls.kept);
        if let Err(reason) = execute::check_timed_outputs(
            parent,
            spec,
            &case,
            Stage::Timing,
            kept,
            side.calls.unkept.take(),
        )? {
            // a kernel that behaves only when judged alone: its process is not reused
            return Err(Failure::Tampered(format!(
                "the {role} went wrong in the head-to-head: {reason}"
            )));
        }
    }
    for ((role, path, side), own) in [
        ("incumbent", &job.incumbent, &incumbent),
        ("candidate", &job.candidate, &candidate),
    ]
    .into_iter()
    .zip(&own_kernels)
    {
        let who = format!("the {role}'s timed calls in the head-to-head");
        let file = path.display().to_string();
        if let Some(why) = execute::not_its_own(spec, &who, &side.calls, own, &file) {
            return Err(Failure::Tampered(why));
        }
    }
    let mut comparison = comparison_from(&incumbent.us, &candidate.us);
    comparison.conditions = conditions;
    Ok(comparison)
}

/// Medians and spread of interleaved repetitions.
pub(crate) fn comparison_from(incumbent_us: &[f64], candidate_us: &[f64]) -> Comparison {
    let ratios: Vec<f64> = incumbent_us
        .iter()
        .zip(candidate_us)
        .map(|(i, c)| if *c > 0.0 { i / c } else { f64::INFINITY })
        .collect();
    let med = median(&ratios);
    let (lo, hi) = ratios
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
    Comparison {
        incumbent_latency_us: median(incumbent_us),
        candidate_latency_us: median(candidate_us),
        median_speedup: med,
        repetitions: ratios.len() as u32,
        spread: if med > 0.0 && med.is_finite() && !ratios.is_empty() {
            (hi - lo) / med
        } else {
            0.0
        },
        incumbent_samples_us: incumbent_us.to_vec(),
        candidate_samples_us: candidate_us.to_vec(),
        retries: 0,
        conditions: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_takes_medians_and_the_spread_of_ratios() {
        // ratios 2.0, 1.0, 1.5 → median 1.5, spread (2.0 − 1.0) / 1.5
        let c = comparison_from(&[20.0, 10.0, 15.0], &[10.0, 10.0, 10.0]);
        assert_eq!(c.incumbent_latency_us, 15.0);
        assert_eq!(c.candidate_latency_us, 10.0);
        assert_eq!(c.median_speedup, 1.5);
        assert_eq!(c.repetitions, 3);
        assert_eq!(c.incumbent_samples_us, [20.0, 10.0, 15.0]);
        assert_eq!(c.candidate_samples_us, [10.0, 10.0, 10.0]);
        assert!((c.spread - 1.0 / 1.5).abs() < 1e-12);
    }
}
