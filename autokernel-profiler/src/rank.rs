//! From linked groups to the ranked [`ProfileReport`], the per-op Amdahl figures, the
//! targets of the loop ([`plan`]), and the two renderings (table and JSON).

use std::fmt::Write as _;

use autokernel_core::keep::end_to_end_speedup;
use autokernel_core::{
    lookup_gpu, params_label, Bound, CallSite, DType, GpuLookup, GpuSpec, Headroom, KernelKind,
    Layout, OpProfile, Params, ProfileReport, Shape, Target,
};
use serde::Serialize;

use crate::classify::{bound, classify_group, problem_layout, problem_shape};
use crate::import::{Trace, TransferStats, MODULE_PREFIX};
use crate::link::Linked;

/// Figures derived for one ranked op, aligned with [`ProfileReport::ops`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedOp {
    /// Sum of the fractions of this op and every op ranked above it, in `[0, 1]`.
    pub cumulative_fraction: f64,
    /// Amdahl ceiling: the end-to-end speedup if this op took no time at all,
    /// `1 / (1 − fraction)` (infinite when it is all of the time).
    pub amdahl_ceiling: f64,
    /// The dtype of its inputs, from `Input type`, when recorded.
    pub dtype: Option<DType>,
    /// Its kind's problem shape ([`KernelKind::dim_names`]), when the kind and the recorded
    /// shapes allow one.
    pub problem_shape: Option<Shape>,
    /// Memory- or compute-bound on the trace's GPU, for classified ops.
    pub bound: Option<Bound>,
    /// The shortest and the longest call of the op, in µs (device time, or CPU self time in
    /// a trace without kernels), over its calls that took any time; `None` with fewer than
    /// two such calls. One call is one range naming the op (a module's forward, an
    /// outermost aten op), whatever kernels it launched.
    pub call_us_range: Option<(f64, f64)>,
}

/// The spread (longest call over shortest) above which an op's timings are called noisy.
pub const SPREAD_LIMIT: f64 = 2.0;

/// The share of the total time an op must hold for its spread to be warned about: smaller
/// ops move the plan too little to matter.
pub const SPREAD_MIN_FRACTION: f64 = 0.01;

/// The shortest and longest of `call_us` that are above zero, when there are two or more.
fn call_range(call_us: &[f64]) -> Option<(f64, f64)> {
    let mut timed = call_us.iter().copied().filter(|&t| t > 0.0);
    let first = timed.next()?;
    let (mut lo, mut hi, mut n) = (first, first, 1);
    for t in timed {
        lo = lo.min(t);
        hi = hi.max(t);
        n += 1;
    }
    (n >= 2).then_some((lo, hi))
}

/// An imported trace: the report and what else the import found.
#[derive(Debug, Clone)]
pub struct ImportedTrace {
    /// The ranked report.
    pub report: ProfileReport,
    /// Per-op derived figures, aligned with `report.ops`.
    pub ranked: Vec<RankedOp>,
    /// The GPU name from the trace's `deviceProperties`, if any.
    pub gpu_name: Option<String>,
    /// Its figures when the GPU is in autokernel's table.
    pub gpu: Option<GpuSpec>,
    /// Device memory copies (not kernels; not in `total_device_time_us`).
    pub memcpy: TransferStats,
    /// Device memory sets (not kernels; not in `total_device_time_us`).
    pub memset: TransferStats,
    /// Number of `gpu_user_annotation` spans seen (never counted as work).
    pub gpu_annotations: u64,
    /// Number of trace events read.
    pub events: u64,
}

pub(crate) fn build(trace: Trace, linked: Linked) -> ImportedTrace {
    let gpu_lookup = trace.gpu_name.as_deref().map(lookup_gpu);
    let gpu = gpu_lookup.as_ref().and_then(|l| l.spec().cloned());
    let mut warnings = Vec::new();
    if trace.repaired_events > 0 {
        warnings.push(format!(
            "repaired {} event(s) with malformed text (raw control characters, raw quotes, \
             lone backslashes or invalid UTF-8, as export_chrome_trace writes them)",
            trace.repaired_events
        ));
    }
    if trace.skipped_events > 0 {
        warnings.push(format!(
            "skipped {} event(s) that could not be parsed even after repair",
            trace.skipped_events
        ));
    }
    if trace.invalid_timing > 0 {
        warnings.push(format!(
            "{} event(s) with invalid timing (zero timestamp and duration, negative, missing or \
             not finite) were not counted",
            trace.invalid_timing
        ));
    }
    if trace.truncated {
        warnings.push(
            "the trace ends before its JSON does (truncated file?); imported what was there"
                .to_string(),
        );
    }
    let coverage = if !linked.device {
        warnings.push(
            "no device activity (no GPU kernels) in this trace: ops are ranked by CPU self \
             time, which is not GPU time"
                .to_string(),
        );
        0.0
    } else if linked.kernel_launches > 0 {
        linked.launches_with_kernel as f64 / linked.kernel_launches as f64
    } else {
        1.0
    };
    let missing = linked
        .kernel_launches
        .saturating_sub(linked.launches_with_kernel);
    if missing > 0 {
        warnings.push(format!(
            "{missing} of {} kernel launches have no device record (coverage {:.1}%): device \
             time is incomplete (the profiler's buffer may have overflowed or the trace was cut)",
            linked.kernel_launches,
            coverage * 100.0
        ));
    }
    if linked.kernels_without_launch > 0 {
        warnings.push(format!(
            "{} kernel(s) have no launch record; attributed by External id or kernel name",
            linked.kernels_without_launch
        ));
    }
    if let Some(GpuLookup::Unknown { .. }) = &gpu_lookup {
        if let Some(h) = gpu_lookup.as_ref().and_then(GpuLookup::hint) {
            warnings.push(h);
        }
    }
    let device = if linked.device {
        match &trace.gpu_name {
            Some(n) => format!("cuda: {n}"),
            None => "cuda".to_string(),
        }
    } else {
        "cpu (CPU self time per op; the trace has no device activity)".to_string()
    };

    let total = linked.total_us;
    let mut groups = linked.groups;
    groups.sort_by(|a, b| b.time_us.total_cmp(&a.time_us).then(a.op.cmp(&b.op)));
    let mut ops = Vec::with_capacity(groups.len());
    let mut ranked = Vec::with_capacity(groups.len());
    let mut cumulative = 0.0;
    for (i, g) in groups.into_iter().enumerate() {
        let fraction = if total > 0.0 { g.time_us / total } else { 0.0 };
        cumulative += fraction;
        let kind = classify_group(
            &g.op,
            g.chain_ops.iter().map(String::as_str),
            g.kernels.iter().map(String::as_str),
        );
        let problem = kind.and_then(|k| problem_shape(k, &g.op, &g.shapes));
        let dtype = g.dtype.unwrap_or(DType::Float32);
        ranked.push(RankedOp {
            cumulative_fraction: cumulative.min(1.0),
            amdahl_ceiling: end_to_end_speedup(&[(fraction, f64::INFINITY)]),
            dtype: g.dtype,
            bound: kind.map(|k| bound(k, problem.as_ref(), dtype, gpu.as_ref())),
            problem_shape: problem,
            call_us_range: call_range(&g.call_us),
        });
        ops.push(OpProfile {
            rank: i + 1,
            op: g.op,
            kind,
            shapes: g.shapes,
            device_time_us: g.time_us,
            calls: g.calls,
            fraction,
            kernels: g.kernels,
        });
    }
    let mut imported = ImportedTrace {
        report: ProfileReport {
            device,
            total_device_time_us: total,
            coverage,
            warnings,
            ops,
            call_sites: Vec::new(),
        },
        ranked,
        gpu_name: trace.gpu_name,
        gpu,
        memcpy: trace.memcpy,
        memset: trace.memset,
        gpu_annotations: trace.gpu_annotations,
        events: trace.events,
    };
    if let Some(w) = imported.spread_warning() {
        imported.report.warnings.push(w);
    }
    imported
}

/// Turns the top classified ops of `report` into the loop's targets.
///
/// Ops are taken in rank order; unclassified ops (`other`) are skipped. Each op's recorded
/// shapes become its kind's problem [`Shape`] ([`crate::problem_shape`]; empty when they do
/// not fit). Ops of the same kind and problem shape are merged into one target (fractions
/// added, the first op's name kept). At most `top` targets, numbered in order:
/// `01-matmul`, `02-layernorm`, … (valid per [`Target::id_is_valid`]).
pub fn plan(report: &ProfileReport, top: usize, dtype: DType) -> Vec<Target> {
    plan_where(report, top, dtype, false)
}

/// [`plan`] for work on a whole model: kinds that cannot be plugged back into a model
/// ([`KernelKind::pluggable`]: reductions) are skipped like unclassified ops, and so are
/// rotary ops without a matched rotary call site (a rotary module's or HF's
/// `apply_rotary_pos_emb`, planned at the site's shape and `pairing`), so that they take no
/// place among the `top` targets and no share of the budget (a LLaMA-style model's rotary
/// embedding, 35% of its device time, was target 01 and then could not be verified).
/// [`unpluggable_ops`] and [`not_planned_call_sites`] list what was skipped.
pub fn plan_for_model(report: &ProfileReport, top: usize, dtype: DType) -> Vec<Target> {
    plan_where(report, top, dtype, true)
}

/// The classified ops [`plan_for_model`] skips for want of a call site, with their kind and
/// fraction of the time: kinds that have none ([`KernelKind::pluggable`]), and rotary ops
/// for which the profiler recorded no rotary call site (an op named rotary whose code is
/// neither a rotary module with an `inv_freq` nor HF's `apply_rotary_pos_emb`). A rotary op
/// whose call sites did not match is listed by [`not_planned_call_sites`] instead, with the
/// matcher's reason.
pub fn unpluggable_ops(report: &ProfileReport) -> Vec<(&str, KernelKind, f64)> {
    report
        .ops
        .iter()
        .filter_map(|op| {
            let kind = op.kind.filter(|k| {
                !k.pluggable() || (site_only(*k) && op_sites(report, *k, &op.op).is_empty())
            })?;
            Some((op.op.as_str(), kind, op.fraction))
        })
        .collect()
}

/// The ops that compute with the kinds' ops yet are none of them
/// ([`crate::classify::no_kind_reason`]: a grouped matmul, a mixture of experts' router),
/// with why and their fraction of the time, so that a profile says what it did not plan
/// rather than planning them as the kind of an op inside.
pub fn no_kind_ops(report: &ProfileReport) -> Vec<(&str, &'static str, f64)> {
    report
        .ops
        .iter()
        .filter(|op| op.kind.is_none())
        .filter_map(|op| {
            let why = crate::classify::no_kind_reason(&op.op)?;
            Some((op.op.as_str(), why, op.fraction))
        })
        .collect()
}

/// The [`no_kind_ops`] as one line for people, `None` when there are none.
pub fn no_kind_ops_text(report: &ProfileReport) -> Option<String> {
    let ops = no_kind_ops(report);
    (!ops.is_empty()).then(|| {
        let list: Vec<String> = ops
            .iter()
            .map(|(op, why, f)| format!("{op} ({:.1}%): {why}", f * 100.0))
            .collect();
        format!("not planned, no kind: {}", list.join("; "))
    })
}

/// Whether `kind` is planned only where the profiler recorded a matched call site of it:
/// rotary_embedding, whose code models write in their own modules and functions (issue 19:
/// the bundled llama's `RotaryEmbedding` was planned and could never be plugged in).
fn site_only(kind: KernelKind) -> bool {
    kind == KernelKind::RotaryEmbedding
}

/// The call sites of `kind` recorded for `op`: named after the op's module class
/// (`nn.Module: LlamaRMSNorm` and `LlamaRMSNorm`). A rotary site must name it exactly
/// (`RotaryEmbedding` is not `LlamaRotaryEmbedding`, which computes HF's tables); the other
/// kinds keep the suffix match they were planned with.
fn op_sites<'a>(report: &'a ProfileReport, kind: KernelKind, op: &str) -> Vec<&'a CallSite> {
    report
        .call_sites
        .iter()
        .filter(|c| c.kind == kind.name())
        .filter(|c| {
            if site_only(kind) {
                op.strip_prefix(MODULE_PREFIX).unwrap_or(op).trim() == c.module
            } else {
                op.ends_with(c.module.as_str())
            }
        })
        .collect()
}

/// [`plan`] (`for_model` false) or [`plan_for_model`]: for a model, kinds that cannot be
/// plugged in are skipped and rotary ops are planned only from their matched call sites.
fn plan_where(report: &ProfileReport, top: usize, dtype: DType, for_model: bool) -> Vec<Target> {
    let gpu = report
        .device
        .strip_prefix("cuda: ")
        .and_then(|name| lookup_gpu(name).spec().cloned());
    // on a known GPU every candidate is weighed by what it can win before the top are kept
    let collect = if gpu.is_some() {
        top.max(PLAN_CANDIDATES)
    } else {
        top
    };
    let top_given = top;
    let top = collect;
    let mut targets: Vec<Planned> = Vec::new();
    // targets beyond the first of the ops split by matmul call site
    let mut split = 0;
    for op in &report.ops {
        let Some(kind) = op.kind.filter(|k| !for_model || k.pluggable()) else {
            continue;
        };
        let entries = module_site_entries(
            report,
            kind,
            &op.op,
            (op.fraction, op.calls),
            dtype,
            for_model,
        );
        if let Some(entries) = entries {
            // the op counts once toward `top`, as before it was split by call site
            let before = targets.len();
            let room = if before < top + split {
                usize::MAX
            } else {
                before
            };
            for (shape, layout, params, fraction, calls) in entries {
                let entry = (
                    kind,
                    Some(shape),
                    layout,
                    params,
                    fraction,
                    op.op.clone(),
                    calls,
                );
                add_planned(&mut targets, room, entry);
            }
            split += (targets.len() - before).saturating_sub(1);
            continue;
        }
        let shape = problem_shape(kind, &op.op, &op.shapes);
        let layout = problem_layout(kind, &op.op, &op.shapes);
        let Some(params) = site_params(report, kind, &op.op, shape.as_ref(), dtype) else {
            continue; // a norm or attention no plug matches: listed by `unmatched_call_sites`
        };
        add_planned(
            &mut targets,
            top + split,
            (
                kind,
                shape,
                layout,
                params,
                op.fraction,
                op.op.clone(),
                op.calls as f64,
            ),
        );
    }
    let mut planned: Vec<(Planned, Option<Headroom>)> = targets
        .into_iter()
        .map(|p| {
            let h = gpu
                .as_ref()
                .and_then(|g| headroom(g, &p, report.total_device_time_us, dtype));
            (p, h)
        })
        .collect();
    if gpu.is_some() {
        let saving = |(p, h): &(Planned, Option<Headroom>)| {
            h.map_or(p.4 * 0.5, |h| {
                p.4 * (1.0 - h.reachable_us / h.pytorch_us).clamp(0.0, 1.0)
            })
        };
        // stable: equal savings (library kernels, 0) keep the order of their shares
        planned.sort_by(|a, b| saving(b).total_cmp(&saving(a)));
        planned.truncate(top_given);
    }
    planned
        .into_iter()
        .enumerate()
        .map(|(i, ((kind, shape, layout, params, fraction, op, _), h))| {
            let t = Target::new(format!("{:02}-{}", i + 1, kind.name()), kind)
                .with_shapes(shape.into_iter().collect())
                .with_dtype(dtype)
                .with_fraction(fraction.min(1.0))
                .with_op(op)
                .with_layout(layout)
                .with_params(params);
            match h {
                Some(h) => t.with_headroom(h),
                None => t,
            }
        })
        .collect()
}

/// How many candidates a plan on a known GPU weighs before it keeps the `top` with the
/// largest expected saving.
const PLAN_CANDIDATES: usize = 64;

/// What can be won at a planned target on `gpu`: PyTorch's device time per call (the
/// target's share of `total_us` over its calls) and the best to expect, PyTorch's own for a
/// kind whose op is a tuned library kernel ([`KernelKind::library_reference`]), else the
/// kind's roofline at the shape ([`GpuSpec::reachable_us`]), never above PyTorch's. `None`
/// without a problem shape or calls.
fn headroom(gpu: &GpuSpec, p: &Planned, total_us: f64, dtype: DType) -> Option<Headroom> {
    let (kind, shape, fraction, calls) = (p.0, p.1.as_ref()?, p.4, p.6);
    if calls <= 0.0 || total_us <= 0.0 {
        return None;
    }
    let pytorch_us = fraction.min(1.0) * total_us / calls;
    let reachable_us = if kind.library_reference() {
        pytorch_us
    } else {
        gpu.reachable_us(kind.flops(shape), kind.min_bytes(shape, dtype), dtype)
            .min(pytorch_us)
    };
    Some(Headroom {
        pytorch_us,
        reachable_us,
    })
}

/// One matched call site of a module op: problem shape, layout, params, its share of the
/// op's fraction, its share of the op's calls.
type SiteEntry = (Shape, Layout, Params, f64, f64);

/// A target being planned: kind, problem shape, layout, params, fraction, op, and its calls
/// in the profile (a site's share of its op's).
type Planned = (KernelKind, Option<Shape>, Layout, Params, f64, String, f64);

/// Adds `entry` to `targets`: merged into a target of the same kind, shape, layout and
/// params (fractions added), else appended while fewer than `top` are planned.
fn add_planned(targets: &mut Vec<Planned>, top: usize, entry: Planned) {
    if let Some(t) = targets
        .iter_mut()
        .find(|t| t.0 == entry.0 && t.1 == entry.1 && t.2 == entry.2 && t.3 == entry.3)
    {
        t.4 += entry.4;
        t.6 += entry.6;
    } else if targets.len() < top {
        targets.push(entry);
    }
}

/// The matmul, fused_mlp or rotary_embedding targets of an op named after a module class
/// (or function) the profiler recorded call sites of that kind for (`nn.Linear`, GPT-2's
/// `Conv1D`; a gated MLP such as HF's `LlamaMLP`; a rotary module, HF's
/// `apply_rotary_pos_emb`): one per matched site in the plan's `dtype`, at the site's
/// problem shape, layout and params (`has_bias`; `activation`; `pairing`), with the op's
/// `fraction` shared by the sites' work (the shape's product times calls: `2·M·N·K`,
/// `6·T·H·I` and `3·B·H·S·D` up to a constant; HF's function rotates Q and K, two sites
/// when K has fewer heads). The op merges every instance of the class, whatever its shape
/// (GPT-2's four Conv1D), so its own recorded shapes say nothing of most of them (issue 19:
/// planned with `shapes: []`). `None` when the op is not such a module (an `aten::mm`, an
/// imported trace): planned as before, but a rotary op of a model (`for_model`), which is
/// planned only from its sites. An empty list when no site of it matched in `dtype`: not planned
/// (`not_planned_call_sites` or [`unpluggable_ops`] says why).
fn module_site_entries(
    report: &ProfileReport,
    kind: KernelKind,
    op: &str,
    (fraction, op_calls): (f64, u64),
    dtype: DType,
    for_model: bool,
) -> Option<Vec<SiteEntry>> {
    if !matches!(
        kind,
        KernelKind::Matmul | KernelKind::FusedMlp | KernelKind::RotaryEmbedding
    ) {
        return None;
    }
    let sites = op_sites(report, kind, op);
    if sites.is_empty() {
        return (for_model && site_only(kind)).then(Vec::new);
    }
    let work = |c: &CallSite| c.shape.iter().product::<u64>() as f64 * c.calls as f64;
    let total: f64 = sites.iter().map(|c| work(c)).sum();
    // the op's calls (over every profiled forward) shared as the sites' calls per forward are
    let site_calls: u64 = sites.iter().map(|c| c.calls).sum();
    let dims = kind.dim_names().len();
    let planned = sites
        .iter()
        .filter(|c| c.dtype == dtype.name() && c.shape.len() == dims)
        .filter_map(|c| {
            let params = c.params.clone()?;
            let share = if total > 0.0 { work(c) / total } else { 0.0 };
            let calls = op_calls as f64 * c.calls as f64 / site_calls.max(1) as f64;
            Some((
                Shape(c.shape.clone()),
                c.layout,
                params,
                fraction * share,
                calls,
            ))
        })
        .collect();
    Some(planned)
}

/// Whether `kind` is planned from the profiler's call sites (its parameters come from the
/// model): the norms, the fused add-norms and attention.
fn planned_from_call_sites(kind: KernelKind) -> bool {
    matches!(
        kind,
        KernelKind::Rmsnorm
            | KernelKind::Layernorm
            | KernelKind::AddRmsnorm
            | KernelKind::AddLayernorm
            | KernelKind::FlashAttention
    )
}

/// The parameters of an attention op of a model run: those of a call site
/// (`call_sites.attention_call_sites`) at the op's shape `[batch, heads, seq, head_dim]`,
/// called in the plan's `dtype`, that the kernel computes; `None` otherwise. The op is an
/// aten name (`aten::scaled_dot_product_attention` and its backends, e.g.
/// `aten::_scaled_dot_product_flash_attention_for_cpu`), not the module's, so sites are
/// matched by kind and shape: an attention op the capture saw no site for (a call that goes
/// neither through SDPA nor transformers' attention registry) has nothing a plug would
/// take, and is not planned.
fn attention_site_params(
    report: &ProfileReport,
    shape: Option<&Shape>,
    dtype: DType,
) -> Option<Params> {
    let shape = shape?;
    report
        .call_sites
        .iter()
        .filter(|c| c.kind == KernelKind::FlashAttention.name())
        .filter(|c| c.shape == shape.0 && c.dtype == dtype.name())
        .find_map(|c| c.params.clone())
}

/// The parameters to plan an op of `kind` with: for a norm of a model run (the report has
/// call sites), those of a call site of the op's module at its shape, called in the plan's
/// `dtype`, that a plug matched; `None` when no such site matched (not planned: the plug
/// takes only calls in the target's dtype, so a site matched in another dtype would never
/// be plugged in); for attention, [`attention_site_params`]; otherwise (other kinds, an
/// imported trace, a norm the model did not call through a module) none: the defaults.
fn site_params(
    report: &ProfileReport,
    kind: KernelKind,
    op: &str,
    shape: Option<&Shape>,
    dtype: DType,
) -> Option<Params> {
    if !planned_from_call_sites(kind) || report.call_sites.is_empty() {
        return Some(Params::new());
    }
    if kind == KernelKind::FlashAttention {
        return attention_site_params(report, shape, dtype);
    }
    let sites: Vec<&CallSite> = report
        .call_sites
        .iter()
        .filter(|c| c.kind == kind.name() && op.ends_with(c.module.as_str()))
        .collect();
    if sites.is_empty() {
        // a functional call (F.layer_norm) or another module: no site to take values from
        return Some(Params::new());
    }
    sites
        .iter()
        .filter(|c| shape.is_none_or(|s| s.0 == c.shape) && c.dtype == dtype.name())
        .find_map(|c| c.params.clone())
}

/// Corrects the kind of ops from the model's call sites: an op named after a module class
/// whose call sites the matcher recorded as the other norm kind takes that kind (the
/// classifier goes by the name, and `T5LayerNorm` is an RMS norm, no mean, no bias:
/// planned as a layernorm it would take no plug, issue 19); an op named after a module the
/// matcher found a gated MLP is a fused_mlp whatever its ops (HF's `GemmaMLP` runs a GELU,
/// which the classifier's SwiGLU rule does not know). Ranks and fractions unchanged.
pub fn apply_call_site_kinds(report: &mut ProfileReport) {
    let sites = std::mem::take(&mut report.call_sites);
    for op in &mut report.ops {
        let mlp = KernelKind::FusedMlp.name();
        if sites
            .iter()
            .any(|c| c.kind == mlp && c.params.is_some() && op.op.ends_with(c.module.as_str()))
        {
            op.kind = Some(KernelKind::FusedMlp);
            continue;
        }
        let Some(kind) = op.kind.filter(|k| planned_from_call_sites(*k)) else {
            continue;
        };
        let by_site = sites
            .iter()
            .filter(|c| op.op.ends_with(c.module.as_str()))
            .find_map(|c| KernelKind::ALL.into_iter().find(|k| k.name() == c.kind));
        if let Some(site_kind) = by_site.filter(|k| *k != kind && planned_from_call_sites(*k)) {
            op.kind = Some(site_kind);
        }
    }
    report.call_sites = sites;
}

/// Retypes the norm ops whose calls are mostly fed by a residual add (the model's
/// `add_rmsnorm` and `add_layernorm` call sites, `call_sites.add_norm_call_sites`) as the
/// fused kind: the op's share becomes that of the chained calls plus the adds' device time
/// (`added_us` per call, which the trace books to the module making the add) and its calls
/// those of the chains. A norm class fed by an add in fewer than half its calls stays a
/// norm. Run after [`apply_call_site_kinds`]; ranks unchanged.
pub fn apply_chains(report: &mut ProfileReport) {
    let total_us = report.total_device_time_us;
    for op in &mut report.ops {
        let Some(fused) = op.kind.and_then(fused_with_add) else {
            continue;
        };
        let of = |kind: KernelKind| {
            report
                .call_sites
                .iter()
                .filter(move |c| c.kind == kind.name() && c.params.is_some())
                .filter(|c| op.op.ends_with(c.module.as_str()))
        };
        let norm_calls: u64 = of(op.kind.unwrap()).map(|c| c.calls).sum();
        let chain_calls: u64 = of(fused).map(|c| c.calls).sum();
        if norm_calls == 0 || chain_calls * 2 < norm_calls || total_us <= 0.0 {
            continue;
        }
        // the profile ran `forwards` forward passes; the sites count calls in one
        let forwards = op.calls as f64 / norm_calls as f64;
        let added_us: f64 = of(fused)
            .map(|c| c.calls as f64 * c.added_us.unwrap_or(0.0))
            .sum::<f64>()
            * forwards;
        let chained = chain_calls.min(norm_calls) as f64 / norm_calls as f64;
        op.fraction = (op.fraction * chained + added_us / total_us).min(1.0);
        op.device_time_us = op.fraction * total_us;
        op.calls = (chain_calls as f64 * forwards).round() as u64;
        op.kind = Some(fused);
    }
}

/// The fused kind a norm becomes when a residual add feeds it.
fn fused_with_add(kind: KernelKind) -> Option<KernelKind> {
    match kind {
        KernelKind::Rmsnorm => Some(KernelKind::AddRmsnorm),
        KernelKind::Layernorm => Some(KernelKind::AddLayernorm),
        _ => None,
    }
}

/// The call sites no plug matches (each with the reason and the measured error), for the
/// "not planned" list.
pub fn unmatched_call_sites(report: &ProfileReport) -> Vec<&CallSite> {
    report
        .call_sites
        .iter()
        .filter(|c| c.params.is_none() && !is_chain(c))
        .collect()
}

/// A fused add-norm site: where it is not planned, its norm's own site (same module, shape,
/// dtype and matcher) says why, once.
fn is_chain(site: &CallSite) -> bool {
    [KernelKind::AddRmsnorm, KernelKind::AddLayernorm]
        .iter()
        .any(|k| k.name() == site.kind)
}

/// The call sites a plan in `dtype` leaves out, each with why: no plug matches it (the
/// matcher's reason, with the measured error), or a plug matches it but the model calls it
/// in another dtype than the plan's (verification plugs a kernel only into calls in the
/// dtype it was judged in, so such a site would never take it).
pub fn not_planned_call_sites(report: &ProfileReport, dtype: DType) -> Vec<(&CallSite, String)> {
    report
        .call_sites
        .iter()
        .filter(|c| !is_chain(c))
        .filter_map(|c| match (&c.params, &c.reason) {
            (None, reason) => Some((
                c,
                reason
                    .clone()
                    .unwrap_or_else(|| "no plug matches it".into()),
            )),
            (Some(p), _) if c.dtype != dtype.name() => Some((
                c,
                format!(
                    "matches {} at {} but is called in {}, not in the plan's {}",
                    c.kind,
                    if p.is_empty() {
                        "its defaults".to_string()
                    } else {
                        params_label(p)
                    },
                    c.dtype,
                    dtype.name()
                ),
            )),
            _ => None,
        })
        .collect()
}

/// One line of the "not planned" list for a call site and its reason:
/// `LlamaRMSNorm (rmsnorm [16,64] float32, 2 modules, 4 calls): <reason>`.
pub fn call_site_line(site: &CallSite, reason: &str) -> String {
    format!(
        "{} ({} {} {}, {} module{}, {} call{}): {}",
        site.module,
        site.kind,
        shapes_text(&[site.shape.iter().map(|&d| d as i64).collect()]),
        site.dtype,
        site.instances,
        if site.instances == 1 { "" } else { "s" },
        site.calls,
        if site.calls == 1 { "" } else { "s" },
        reason
    )
}

/// The "not planned" lines of [`not_planned_call_sites`]: a heading and one
/// [`call_site_line`] per site; `None` when there are none.
pub fn not_planned_call_sites_text(sites: &[(&CallSite, String)]) -> Option<String> {
    if sites.is_empty() {
        return None;
    }
    let mut text = String::from("not planned, no plug matches these call sites:");
    for (site, reason) in sites {
        text.push_str("\n  ");
        text.push_str(&call_site_line(site, reason));
    }
    Some(text)
}

fn shapes_text(shapes: &[Vec<i64>]) -> String {
    shapes
        .iter()
        .map(|s| {
            let dims: Vec<String> = s.iter().map(i64::to_string).collect();
            format!("[{}]", dims.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

impl ImportedTrace {
    /// A warning naming the ops whose calls spread widely: among ops holding at least
    /// [`SPREAD_MIN_FRACTION`] of the time, those whose longest call took more than
    /// [`SPREAD_LIMIT`] times their shortest (same op and shapes, so the same work), the
    /// three widest named with their range; `None` when there are none. Such timings are
    /// noise (a CPU's scheduling, frequency changes): the totals, and so the ranking, can
    /// change from one profile to the next, and more forward passes average them out.
    /// [`import_trace`](crate::import_trace) adds it to the report's warnings.
    pub fn spread_warning(&self) -> Option<String> {
        let mut noisy: Vec<(f64, &OpProfile, f64, f64)> = self
            .report
            .ops
            .iter()
            .zip(&self.ranked)
            .filter(|(op, _)| op.fraction >= SPREAD_MIN_FRACTION)
            .filter_map(|(op, d)| {
                let (lo, hi) = d.call_us_range?;
                let spread = hi / lo;
                (spread > SPREAD_LIMIT).then_some((spread, op, lo, hi))
            })
            .collect();
        if noisy.is_empty() {
            return None;
        }
        noisy.sort_by(|a, b| b.0.total_cmp(&a.0));
        let named: Vec<String> = noisy
            .iter()
            .take(3)
            .map(|(spread, op, lo, hi)| {
                format!(
                    "{} {} took {lo:.3} to {hi:.3} us a call ({spread:.1}x)",
                    op.op,
                    shapes_text(&op.shapes)
                )
            })
            .collect();
        let more = match noisy.len() {
            n if n > 3 => format!(", and {} more ops", n - 3),
            _ => String::new(),
        };
        Some(format!(
            "timings are noisy: calls of the same op and shapes differ by more than {SPREAD_LIMIT}x: {}{more}; the ranking may change from one profile to the next: profile more forward passes (`--iterations N` of `autokernel profile` or `autokernel run`, {} by default) so that each op's total averages more calls",
            named.join("; "),
            crate::DEFAULT_ITERATIONS
        ))
    }

    /// A readable ranked table of the first `top` ops (all when `top` is 0), with a header
    /// naming the device and coverage, and a line under it saying what its
    /// `amdahl_ceiling` column is. The report's warnings are not in it.
    pub fn table(&self, top: usize) -> String {
        let r = &self.report;
        let mut s = String::new();
        let unit = if r.device.starts_with("cpu") {
            "cpu_self_us"
        } else {
            "device_us"
        };
        let _ = writeln!(s, "device: {}", r.device);
        let _ = writeln!(
            s,
            "total_time_us: {:.3}   coverage: {:.1}%   ops: {}",
            r.total_device_time_us,
            r.coverage * 100.0,
            r.ops.len()
        );
        let _ = writeln!(
            s,
            "{:>4}  {:<36} {:<16} {:<7} {:<28} {:>12} {:>7} {:>6} {:>6} {:>14}",
            "rank", "op", "kind", "bound", "shapes", unit, "calls", "%", "cum%", "amdahl_ceiling"
        );
        let n = if top == 0 {
            r.ops.len()
        } else {
            top.min(r.ops.len())
        };
        for (op, d) in r.ops.iter().zip(&self.ranked).take(n) {
            let ceiling = if d.amdahl_ceiling.is_finite() {
                format!("{:.2}x", d.amdahl_ceiling)
            } else {
                "inf".to_string()
            };
            let _ = writeln!(
                s,
                "{:>4}  {:<36} {:<16} {:<7} {:<28} {:>12.3} {:>7} {:>6.1} {:>6.1} {:>14}",
                op.rank,
                clip(&op.op, 36),
                op.kind.map_or("other", KernelKind::name),
                d.bound.map_or("-", |b| match b {
                    Bound::Memory => "memory",
                    Bound::Compute => "compute",
                }),
                clip(&shapes_text(&op.shapes), 28),
                op.device_time_us,
                op.calls,
                op.fraction * 100.0,
                d.cumulative_fraction * 100.0,
                ceiling
            );
        }
        if n < r.ops.len() {
            let _ = writeln!(
                s,
                "      … {} more ops (--top 0 shows all)",
                r.ops.len() - n
            );
        }
        // "ceiling" alone reads as a roofline's; say what this one bounds
        let _ = writeln!(
            s,
            "amdahl_ceiling: the whole model's speedup if that op took no time, 1/(1 - %/100)"
        );
        if self.memcpy.events + self.memset.events > 0 {
            let _ = writeln!(
                s,
                "not kernels: memcpy {} events {:.3} us, memset {} events {:.3} us",
                self.memcpy.events, self.memcpy.time_us, self.memset.events, self.memset.time_us
            );
        }
        s
    }

    /// The JSON form: `device, total_device_time_us, coverage, warnings, ops` (each op
    /// `rank, op, kind, shapes, device_time_us, calls, fraction, kernels` plus
    /// `cumulative_fraction`, `amdahl_ceiling` (null when infinite), `bound`), and
    /// `memcpy`/`memset` totals. `kind` is the kind's name or `"other"`.
    pub fn to_json(&self, top: usize) -> serde_json::Value {
        let r = &self.report;
        let n = if top == 0 {
            r.ops.len()
        } else {
            top.min(r.ops.len())
        };
        let ops: Vec<serde_json::Value> = r
            .ops
            .iter()
            .zip(&self.ranked)
            .take(n)
            .map(|(op, d)| {
                serde_json::json!({
                    "rank": op.rank,
                    "op": op.op,
                    "kind": op.kind.map_or("other", KernelKind::name),
                    "shapes": op.shapes,
                    "device_time_us": op.device_time_us,
                    "calls": op.calls,
                    "fraction": op.fraction,
                    "kernels": op.kernels,
                    "cumulative_fraction": d.cumulative_fraction,
                    "amdahl_ceiling": if d.amdahl_ceiling.is_finite() { Some(d.amdahl_ceiling) } else { None },
                    "bound": d.bound,
                })
            })
            .collect();
        serde_json::json!({
            "device": r.device,
            "total_device_time_us": r.total_device_time_us,
            "coverage": r.coverage,
            "warnings": r.warnings,
            "ops": ops,
            "memcpy": self.memcpy,
            "memset": self.memset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUDA profile of 100 µs holding `ops`.
    fn report_of(ops: Vec<OpProfile>) -> ProfileReport {
        ProfileReport {
            device: "cuda".into(),
            total_device_time_us: 100.0,
            coverage: 1.0,
            warnings: vec![],
            ops,
            call_sites: vec![],
        }
    }

    fn op(
        rank: usize,
        name: &str,
        kind: Option<KernelKind>,
        shapes: Vec<Vec<i64>>,
        f: f64,
    ) -> OpProfile {
        OpProfile {
            rank,
            op: name.into(),
            kind,
            shapes,
            device_time_us: f * 100.0,
            calls: 1,
            fraction: f,
            kernels: vec![],
        }
    }

    #[test]
    fn plan_merges_same_kind_and_shape_and_skips_other() {
        let report = report_of(vec![
            op(
                1,
                "Linear",
                Some(KernelKind::Matmul),
                vec![vec![1, 512, 768], vec![2304, 768]],
                0.4,
            ),
            op(2, "aten::relu", None, vec![vec![512, 768]], 0.2),
            op(
                3,
                "aten::linear",
                Some(KernelKind::Matmul),
                vec![vec![512, 768], vec![2304, 768], vec![2304]],
                0.15,
            ),
            op(
                4,
                "LayerNorm",
                Some(KernelKind::Layernorm),
                vec![vec![1, 512, 768]],
                0.1,
            ),
            op(
                5,
                "aten::softmax",
                Some(KernelKind::Softmax),
                vec![vec![12, 512, 512]],
                0.05,
            ),
        ]);
        let t = plan(&report, 2, DType::Float16);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].id, "01-matmul");
        assert_eq!(t[0].shapes, vec![Shape(vec![512, 2304, 768])]);
        // Linear and aten::linear have the same problem shape and layout: one target,
        // 0.4 + 0.15
        assert!((t[0].fraction - 0.55).abs() < 1e-12);
        assert_eq!(t[1].id, "02-layernorm");
        assert_eq!(t[1].shapes, vec![Shape(vec![512, 768])]);
        assert!(t
            .iter()
            .all(|t| Target::id_is_valid(&t.id) && t.dtype == DType::Float16));
        let all = plan(&report, 10, DType::Float16);
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].id, "03-softmax");
        assert_eq!(all[2].shapes, vec![Shape(vec![12 * 512, 512])]);
    }

    #[test]
    fn a_matmul_from_nn_linear_is_planned_with_b_transposed_and_addmm_contiguous() {
        let report = report_of(vec![
            // nn.Linear(768, 50257): weight [50257, 768], used as its transpose
            op(
                1,
                "Linear",
                Some(KernelKind::Matmul),
                vec![vec![1, 1024, 768], vec![50257, 768]],
                0.5,
            ),
            // Hugging Face Conv1D: addmm with a contiguous [K, N] weight
            op(
                2,
                "aten::addmm",
                Some(KernelKind::Matmul),
                vec![vec![2304], vec![1024, 768], vec![768, 2304]],
                0.2,
            ),
            // the same problem shape as a Linear, but from mm: not merged with it
            op(
                3,
                "aten::mm",
                Some(KernelKind::Matmul),
                vec![vec![1024, 768], vec![768, 50257]],
                0.1,
            ),
        ]);
        let t = plan(&report, 5, DType::Float16);
        let got: Vec<(&str, Layout, &Shape)> = t
            .iter()
            .map(|t| (t.op.as_str(), t.layout, &t.shapes[0]))
            .collect();
        let lm = Shape(vec![1024, 50257, 768]);
        let qkv = Shape(vec![1024, 2304, 768]);
        assert_eq!(
            got,
            vec![
                ("Linear", Layout::BTransposed, &lm),
                ("aten::addmm", Layout::Contiguous, &qkv),
                ("aten::mm", Layout::Contiguous, &lm),
            ]
        );
    }

    #[test]
    fn a_model_plan_skips_kinds_that_cannot_be_plugged_in_and_lists_them() {
        let report = report_of(vec![
            op(
                1,
                "RotaryEmbedding",
                Some(KernelKind::RotaryEmbedding),
                vec![],
                0.35,
            ),
            op(
                2,
                "RMSNorm",
                Some(KernelKind::Rmsnorm),
                vec![vec![512, 768]],
                0.25,
            ),
            op(
                3,
                "aten::sum",
                Some(KernelKind::Reduce),
                vec![vec![512, 768]],
                0.1,
            ),
            op(
                4,
                "Linear",
                Some(KernelKind::Matmul),
                vec![vec![1, 512, 768], vec![768, 768]],
                0.05,
            ),
        ]);
        // the plain plan keeps the rotary embedding as target 01
        assert_eq!(
            plan(&report, 2, DType::Float16)[0].id,
            "01-rotary_embedding"
        );
        let t = plan_for_model(&report, 2, DType::Float16);
        let ids: Vec<&str> = t.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["01-rmsnorm", "02-matmul"]);
        let skipped = unpluggable_ops(&report);
        assert_eq!(
            skipped,
            [
                ("RotaryEmbedding", KernelKind::RotaryEmbedding, 0.35),
                ("aten::sum", KernelKind::Reduce, 0.1)
            ]
        );
    }

    /// A norm call site of module `module` at `shape` in `dtype`, matched at `eps` when
    /// given, else unmatched with a reason.
    fn site(module: &str, shape: [u64; 2], dtype: &str, eps: Option<f64>) -> CallSite {
        CallSite {
            module: module.into(),
            kind: "rmsnorm".into(),
            params: eps.map(|e| Params::from([("eps".to_string(), serde_json::json!(e))])),
            shape: shape.to_vec(),
            dtype: dtype.into(),
            reason: eps
                .is_none()
                .then(|| "matches no rmsnorm variant: error 0.5".into()),
            instances: 2,
            calls: 4,
            added_us: None,
            layout: Layout::Contiguous,
        }
    }

    fn norm_op(rank: usize, name: &str, rows: i64, f: f64) -> OpProfile {
        op(
            rank,
            name,
            Some(KernelKind::Rmsnorm),
            vec![vec![1, rows, 64]],
            f,
        )
    }

    #[test]
    fn a_norm_fed_by_residual_adds_is_planned_as_the_fused_kind_with_the_adds_time() {
        // 2 profiled forwards: the op's 10 calls are 5 a forward, 4 of them fed by an add
        // of 2 µs: the fused target's share is 0.8 of the norm's 10 µs plus 4·2·2 µs
        let mut norm = norm_op(1, "nn.Module: LlamaRMSNorm", 16, 0.1);
        norm.calls = 10;
        let mut report = report_of(vec![norm]);
        let mut chain = site("LlamaRMSNorm", [16, 64], "float16", Some(1e-5));
        chain.kind = "add_rmsnorm".into();
        chain.calls = 4;
        chain.added_us = Some(2.0);
        let mut plain = site("LlamaRMSNorm", [16, 64], "float16", Some(1e-5));
        plain.calls = 5;
        report.call_sites = vec![plain.clone(), chain.clone()];
        apply_chains(&mut report);
        let op = &report.ops[0];
        assert_eq!(op.kind, Some(KernelKind::AddRmsnorm));
        assert!(
            (op.fraction - (0.1 * 0.8 + 16.0 / 100.0)).abs() < 1e-12,
            "{}",
            op.fraction
        );
        assert_eq!(op.calls, 8);
        let t = plan_for_model(&report, 3, DType::Float16);
        assert_eq!(t[0].id, "01-add_rmsnorm");
        assert_eq!(t[0].params, chain.params.clone().unwrap());
        assert_eq!(t[0].shapes, [Shape(vec![16, 64])]);

        // fed by an add in fewer than half its calls: it stays a norm
        let mut norm = norm_op(1, "nn.Module: LlamaRMSNorm", 16, 0.1);
        norm.calls = 10;
        let mut report = report_of(vec![norm]);
        chain.calls = 2;
        report.call_sites = vec![plain, chain];
        apply_chains(&mut report);
        assert_eq!(report.ops[0].kind, Some(KernelKind::Rmsnorm));
        assert!((report.ops[0].fraction - 0.1).abs() < 1e-12);
    }

    #[test]
    fn a_norm_is_planned_with_the_params_of_its_matched_call_site_in_the_plans_dtype() {
        let mut report = report_of(vec![norm_op(1, "nn.Module: LlamaRMSNorm", 16, 0.5)]);
        report.call_sites = vec![
            // same class at another shape (its eps must not leak into the 16-row target)
            site("LlamaRMSNorm", [8, 64], "float16", Some(1e-6)),
            // the right shape in another dtype: not the plan's
            site("LlamaRMSNorm", [16, 64], "float32", Some(1e-3)),
            site("LlamaRMSNorm", [16, 64], "float16", Some(1e-5)),
        ];
        let shape = Shape(vec![16, 64]);
        let p = site_params(
            &report,
            KernelKind::Rmsnorm,
            &report.ops[0].op,
            Some(&shape),
            DType::Float16,
        );
        assert_eq!(p.unwrap()["eps"], serde_json::json!(1e-5));
        // planned in float32, the float32 site's params are taken
        let t = plan_for_model(&report, 4, DType::Float32);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].params["eps"], serde_json::json!(1e-3));
        // bfloat16: no site of that dtype, so no target
        assert!(plan_for_model(&report, 4, DType::Bfloat16).is_empty());
    }

    #[test]
    fn a_norm_whose_only_site_is_unmatched_is_not_planned_and_others_keep_the_defaults() {
        let mut report = report_of(vec![
            norm_op(1, "nn.Module: T5LayerNorm", 16, 0.5),
            // no call site names this class (a functional norm): planned at the defaults
            norm_op(2, "aten::rms_norm", 8, 0.2),
        ]);
        report.call_sites = vec![site("T5LayerNorm", [16, 64], "float32", None)];
        let t = plan_for_model(&report, 4, DType::Float32);
        let planned: Vec<(&str, bool)> = t
            .iter()
            .map(|t| (t.op.as_str(), t.params.is_empty()))
            .collect();
        assert_eq!(planned, [("aten::rms_norm", true)]);
        assert_eq!(unmatched_call_sites(&report), [&report.call_sites[0]]);
        // an imported trace (no call sites) plans the same op at the defaults
        report.call_sites.clear();
        assert_eq!(plan_for_model(&report, 4, DType::Float32).len(), 2);
    }

    #[test]
    fn not_planned_call_sites_give_the_matchers_reason_or_the_other_dtype() {
        let mut report = report_of(vec![]);
        report.call_sites = vec![
            site("T5LayerNorm", [16, 64], "float32", None),
            site("LlamaRMSNorm", [16, 64], "float32", Some(1e-5)),
            site("LlamaRMSNorm", [16, 64], "float16", Some(1e-5)),
        ];
        // the chains of the same norms: their norms' own lines say it once
        let chains: Vec<CallSite> = report.call_sites[..2]
            .iter()
            .map(|c| CallSite {
                kind: "add_rmsnorm".into(),
                ..c.clone()
            })
            .collect();
        report.call_sites.extend(chains);
        let sites = not_planned_call_sites(&report, DType::Float16);
        let lines: Vec<String> = sites.iter().map(|(c, r)| call_site_line(c, r)).collect();
        assert_eq!(
            lines,
            [
                "T5LayerNorm (rmsnorm [16,64] float32, 2 modules, 4 calls): matches no rmsnorm variant: error 0.5",
                "LlamaRMSNorm (rmsnorm [16,64] float32, 2 modules, 4 calls): matches rmsnorm at eps=0.00001 but is called in float32, not in the plan's float16",
            ]
        );
        let text = not_planned_call_sites_text(&sites).unwrap();
        assert!(
            text.starts_with("not planned, no plug matches these call sites:\n  T5LayerNorm"),
            "{text}"
        );
        // in float32 the float16 site is the one in another dtype
        let sites = not_planned_call_sites(&report, DType::Float32);
        assert_eq!(sites.len(), 2);
        assert!(
            sites[1]
                .1
                .ends_with("called in float16, not in the plan's float32"),
            "{sites:?}"
        );
        assert_eq!(not_planned_call_sites_text(&[]), None);
    }

    #[test]
    fn a_module_the_matcher_found_an_rms_norm_is_planned_as_rmsnorm_whatever_its_name() {
        let mut report = report_of(vec![op(
            1,
            "T5LayerNorm",
            Some(KernelKind::Layernorm),
            vec![vec![1, 16, 64]],
            0.5,
        )]);
        let mut t5 = site("T5LayerNorm", [16, 64], "float32", Some(1e-6));
        t5.params
            .as_mut()
            .unwrap()
            .insert("cast_order".into(), serde_json::json!("t5"));
        report.call_sites = vec![t5];
        // as classified by name: a layernorm with no layernorm site, at the defaults
        assert_eq!(
            plan_for_model(&report, 4, DType::Float32)[0].kind,
            KernelKind::Layernorm
        );
        apply_call_site_kinds(&mut report);
        let t = plan_for_model(&report, 4, DType::Float32);
        assert_eq!(t[0].id, "01-rmsnorm");
        assert_eq!(t[0].params["cast_order"], serde_json::json!("t5"));
        assert_eq!(t[0].shapes, [Shape(vec![16, 64])]);
    }

    #[test]
    fn a_gated_mlp_the_matcher_found_is_planned_as_fused_mlp_at_its_sites_shape_and_activation() {
        // GemmaMLP runs a GELU: the classifier does not take it for a SwiGLU
        let mut report = report_of(vec![op(
            1,
            "nn.Module: GemmaMLP",
            None,
            vec![vec![1, 16, 64], vec![128, 64]],
            0.6,
        )]);
        let geglu = |params: Option<Params>, reason: Option<&str>| CallSite {
            module: "GemmaMLP".into(),
            kind: "fused_mlp".into(),
            params,
            shape: vec![16, 64, 128],
            dtype: "float32".into(),
            reason: reason.map(Into::into),
            instances: 2,
            calls: 2,
            added_us: None,
            layout: Layout::Contiguous,
        };
        let activation = Params::from([("activation".to_string(), serde_json::json!("gelu_tanh"))]);
        report.call_sites = vec![geglu(Some(activation), None)];
        assert!(plan_for_model(&report, 4, DType::Float32).is_empty());
        apply_call_site_kinds(&mut report);
        let t = plan_for_model(&report, 4, DType::Float32);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].id, "01-fused_mlp");
        // [tokens, hidden, intermediate] from the site, not the op's recorded dims
        assert_eq!(t[0].shapes, [Shape(vec![16, 64, 128])]);
        assert_eq!(t[0].params["activation"], serde_json::json!("gelu_tanh"));
        assert!((t[0].fraction - 0.6).abs() < 1e-12);
        // in float16 the float32 site is not the plan's: nothing planned, the reason listed
        assert!(plan_for_model(&report, 4, DType::Float16).is_empty());
        assert_eq!(not_planned_call_sites(&report, DType::Float16).len(), 1);
        // a module no activation matched does not become a fused_mlp
        let mut report = report_of(vec![op(1, "nn.Module: GemmaMLP", None, vec![], 0.6)]);
        report.call_sites = vec![geglu(None, Some("matches no gated MLP: error 0.3"))];
        apply_call_site_kinds(&mut report);
        assert_eq!(report.ops[0].kind, None);
    }

    /// An attention call site of `module` at `shape` in float32: pluggable at `params`
    /// when given, else not, with `reason`.
    fn attention_site(
        module: &str,
        shape: [u64; 4],
        params: Option<Params>,
        reason: &str,
    ) -> CallSite {
        CallSite {
            module: module.into(),
            kind: "flash_attention".into(),
            reason: params.is_none().then(|| reason.into()),
            params,
            shape: shape.to_vec(),
            dtype: "float32".into(),
            layout: Default::default(),
            instances: 1,
            calls: 1,
            added_us: None,
        }
    }

    #[test]
    fn rotary_is_planned_for_a_model_only_from_its_matched_call_sites_at_their_pairing() {
        let rotary = |module: &str, shape: &[u64], pairing: Option<&str>, reason: &str| CallSite {
            kind: "rotary_embedding".into(),
            params: pairing.map(|p| Params::from([("pairing".to_string(), serde_json::json!(p))])),
            reason: pairing.is_none().then(|| reason.into()),
            shape: shape.to_vec(),
            ..attention_site(module, [0; 4], None, reason)
        };
        let rope =
            |rank, name: &str, f| op(rank, name, Some(KernelKind::RotaryEmbedding), vec![], f);
        let mut report = report_of(vec![
            rope(1, "nn.Module: apply_rotary_pos_emb", 0.3),
            rope(2, "nn.Module: LlamaRotaryEmbedding", 0.05),
        ]);
        report.call_sites = vec![
            // HF's function rotates Q (4 heads) and K (2 K/V heads): two shapes, one pairing
            rotary(
                "apply_rotary_pos_emb",
                &[1, 4, 16, 16],
                Some("half_split"),
                "",
            ),
            rotary(
                "apply_rotary_pos_emb",
                &[1, 2, 16, 16],
                Some("half_split"),
                "",
            ),
            rotary(
                "LlamaRotaryEmbedding",
                &[1, 16, 64],
                None,
                "LlamaRotaryEmbedding returns a tuple of 2 (the cos/sin tables)",
            ),
        ];
        let t = plan_for_model(&report, 5, DType::Float32);
        let got: Vec<(&str, &[Shape], &Params)> = t
            .iter()
            .map(|t| (t.id.as_str(), t.shapes.as_slice(), &t.params))
            .collect();
        let half = Params::from([("pairing".to_string(), serde_json::json!("half_split"))]);
        assert_eq!(
            got,
            [
                (
                    "01-rotary_embedding",
                    &[Shape(vec![1, 4, 16, 16])][..],
                    &half
                ),
                (
                    "02-rotary_embedding",
                    &[Shape(vec![1, 2, 16, 16])][..],
                    &half
                )
            ]
        );
        // the op's time shared by the work of each site: Q twice K's
        assert!((t[0].fraction - 0.2).abs() < 1e-9 && (t[1].fraction - 0.1).abs() < 1e-9);
        // the table module is not planned, with the matcher's reason; nothing lacks a site
        let lines: Vec<String> = not_planned_call_sites(&report, DType::Float32)
            .iter()
            .map(|(c, r)| call_site_line(c, r))
            .collect();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("LlamaRotaryEmbedding (rotary_embedding [1,16,64] float32"),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("returns a tuple of 2 (the cos/sin tables)"));
        assert!(unpluggable_ops(&report).is_empty());
        // `RotaryEmbedding` sites do not plan `LlamaRotaryEmbedding` (exact class names)
        report.call_sites = vec![rotary(
            "RotaryEmbedding",
            &[1, 2, 16, 16],
            Some("interleaved"),
            "",
        )];
        assert!(plan_for_model(&report, 5, DType::Float32).is_empty());
        // a site called in another dtype than the plan's is not planned
        report.call_sites = vec![rotary(
            "apply_rotary_pos_emb",
            &[1, 2, 16, 16],
            Some("interleaved"),
            "",
        )];
        assert_eq!(plan_for_model(&report, 5, DType::Float32).len(), 1);
        assert!(plan_for_model(&report, 5, DType::Float16).is_empty());
        // no site at all: not planned for a model (listed as having no call site), but
        // planned by `plan` (an imported trace)
        report.call_sites.clear();
        assert!(plan_for_model(&report, 5, DType::Float32).is_empty());
        assert_eq!(unpluggable_ops(&report).len(), 2);
        assert_eq!(plan(&report, 5, DType::Float32).len(), 1);
    }

    #[test]
    fn attention_is_planned_only_from_a_call_site_at_its_shape_with_the_sites_params() {
        let attn = |rank, name: &str, heads: i64| {
            op(
                rank,
                name,
                Some(KernelKind::FlashAttention),
                vec![
                    vec![1, heads, 16, 16],
                    vec![1, 2, 16, 16],
                    vec![1, 2, 16, 16],
                ],
                0.3,
            )
        };
        let gqa: Params = serde_json::from_value(serde_json::json!(
            {"causal": true, "scale": null, "kv_heads": 2, "has_mask": false}
        ))
        .unwrap();
        let mut report = report_of(vec![
            attn(1, "aten::scaled_dot_product_attention", 4),
            attn(2, "aten::_scaled_dot_product_flash_attention_for_cpu", 8),
        ]);
        report.call_sites = vec![
            attention_site("LlamaAttention", [1, 4, 16, 16], Some(gqa.clone()), ""),
            attention_site(
                "F.scaled_dot_product_attention",
                [1, 8, 16, 16],
                None,
                "dropout 0.1",
            ),
        ];
        let t = plan_for_model(&report, 4, DType::Float32);
        assert_eq!(t.len(), 1, "{t:?}");
        assert_eq!(t[0].id, "01-flash_attention");
        assert_eq!(t[0].params, gqa);
        let lines: Vec<String> = not_planned_call_sites(&report, DType::Float32)
            .iter()
            .map(|(c, r)| call_site_line(c, r))
            .collect();
        assert_eq!(
            lines,
            ["F.scaled_dot_product_attention (flash_attention [1,8,16,16] float32, 1 module, 1 call): dropout 0.1"]
        );
        // an imported trace (no call sites) plans attention at the kind's defaults
        report.call_sites.clear();
        let t = plan_for_model(&report, 4, DType::Float32);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|t| t.params.is_empty()));
    }

    #[test]
    fn on_a_known_gpu_the_plan_ranks_by_expected_saving_and_shows_it() {
        let mut report = report_of(vec![
            op(
                1,
                "aten::mm",
                Some(KernelKind::Matmul),
                vec![vec![1024, 768], vec![768, 3072]],
                0.6,
            ),
            op(
                2,
                "aten::_softmax",
                Some(KernelKind::Softmax),
                vec![vec![4096, 4096]],
                0.1,
            ),
        ]);
        report.device = "cuda: NVIDIA H100 80GB HBM3".into();
        report.total_device_time_us = 1000.0;
        let t = plan(&report, 5, DType::Float16);
        let order: Vec<&str> = t.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(order, ["01-softmax", "02-matmul"]);
        // softmax: 100 µs per call in the profile; at best it reads and writes 4096² fp16
        // once at 88% of the H100 SXM's 3350 GB/s
        let h = t[0].headroom.unwrap();
        assert!((h.pytorch_us - 100.0).abs() < 1e-9);
        let best_us = 2.0 * 4096.0 * 4096.0 * 2.0 / (3350.0 * 0.88 * 1e3);
        assert!((h.reachable_us - best_us).abs() < 1e-6, "{h:?}");
        let saving = 0.1 * (1.0 - best_us / 100.0);
        assert!((t[0].expected_saving().unwrap() - saving).abs() < 1e-9);
        // cuBLAS's matmul: parity at best, whatever its 60% share
        let h = t[1].headroom.unwrap();
        assert_eq!((h.pytorch_us, h.reachable_us), (600.0, 600.0));
        assert_eq!(t[1].expected_saving(), Some(0.0));
        // the top one is the one with the most to win
        assert_eq!(
            plan(&report, 1, DType::Float16)[0].kind,
            KernelKind::Softmax
        );
        // without a known GPU: no roofline, ranked by share as before
        report.device = "cuda".into();
        let t = plan(&report, 5, DType::Float16);
        assert_eq!(t[0].id, "01-matmul");
        assert!(t.iter().all(|t| t.headroom.is_none()));
    }
}
