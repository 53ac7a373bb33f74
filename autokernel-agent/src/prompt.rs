//! The user message of the LLM agent: the target, the GPU and its roofline, the metrics to
//! beat, the current best `kernel.py` and the recent experiments, within a token budget.

use std::fmt::Write as _;

use autokernel_core::{Decision, ExperimentRecord, ProposalContext};

/// Characters per token assumed when estimating a prompt's size. English prose and Python
/// average 3.5–4.5 characters per token with current BPE tokenizers; 4 is the usual rule
/// of thumb (OpenAI, "What are tokens and how to count them", help center, 2024).
pub const CHARS_PER_TOKEN: usize = 4;

/// At most this many earlier experiments are listed, however large the budget.
pub const MAX_HISTORY_ROWS: usize = 30;

/// Estimated tokens of `text`: characters / [`CHARS_PER_TOKEN`], rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(CHARS_PER_TOKEN)
}

/// The user message, and what had to be left out to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    /// The message text.
    pub text: String,
    /// Experiments listed.
    pub history_rows: usize,
    /// Experiments dropped (oldest first) to fit the budget or [`MAX_HISTORY_ROWS`].
    pub history_dropped: usize,
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn target_section(ctx: &ProposalContext<'_>) -> String {
    let t = ctx.target;
    let kind = t.kind;
    let mut s = String::new();
    let _ = writeln!(s, "## Target `{}`", t.id);
    // the inputs and keywords of this target's parameters (a bias or a mask only where
    // the model passes one)
    let mut signature: Vec<String> = kind
        .spec()
        .inputs_at(&t.params)
        .iter()
        .map(|i| i.name.clone())
        .collect();
    signature.extend(
        t.params
            .iter()
            .map(|(k, v)| format!("{k}={}", autokernel_core::value_text(v))),
    );
    let _ = writeln!(s, "- kind: {kind}; `kernel_fn({})`", signature.join(", "));
    let dims = kind.dim_names().join(" x ");
    let shapes: Vec<String> = t.shapes.iter().map(ToString::to_string).collect();
    if shapes.is_empty() {
        let _ = writeln!(s, "- shapes ({dims}): the kind's standard sets");
    } else {
        let _ = writeln!(
            s,
            "- shapes ({dims}) the model calls it with: {}",
            shapes.join(", ")
        );
    }
    let _ = writeln!(s, "- dtype: {}", t.dtype);
    if t.fraction > 0.0 {
        let _ = writeln!(
            s,
            "- share of the model's GPU time: {:.1}% (from `{}`); a 2x speedup here saves {:.1}% end to end",
            100.0 * t.fraction,
            t.op,
            50.0 * t.fraction
        );
    }
    let _ = writeln!(
        s,
        "- bound: {} (throughput in {})",
        match kind.bound() {
            autokernel_core::Bound::Memory => "memory",
            autokernel_core::Bound::Compute => "compute",
        },
        kind.bound().throughput_unit()
    );
    s
}

fn gpu_section(ctx: &ProposalContext<'_>) -> String {
    let mut s = String::from("## GPU\n");
    let Some(gpu) = ctx.gpu else {
        s.push_str("- unknown (no figures): % of peak is not reported; judge by latency\n");
        return s;
    };
    let t = ctx.target;
    let _ = writeln!(
        s,
        "- {}: {} TFLOP/s fp16/bf16 tensor, {} TFLOP/s fp32, {} GB/s DRAM, {} MB L2",
        gpu.name,
        fmt_num(gpu.fp16_tflops),
        fmt_num(gpu.fp32_tflops),
        fmt_num(gpu.mem_bandwidth_gb_s),
        fmt_num(gpu.l2_mb)
    );
    let _ = writeln!(
        s,
        "- ridge point at {}: {} FLOP/byte",
        t.dtype,
        fmt_num(gpu.ridge_point(t.dtype))
    );
    if let Some(shape) = t.shapes.first() {
        let ai = t.kind.arithmetic_intensity(shape, t.dtype);
        let bytes = t.kind.min_bytes(shape, t.dtype);
        let flops = t.kind.flops(shape);
        let floor_us_mem = bytes / (gpu.mem_bandwidth_gb_s * 1e9) * 1e6;
        let floor_us_compute = flops / (gpu.peak_tflops(t.dtype) * 1e12) * 1e6;
        let _ = writeln!(
            s,
            "- at {shape}: {} FLOP/byte ({} the ridge: {}-bound); roofline floor {} us (memory {} us, compute {} us)",
            fmt_num(ai),
            if ai < gpu.ridge_point(t.dtype) { "below" } else { "above" },
            if ai < gpu.ridge_point(t.dtype) { "memory" } else { "compute" },
            fmt_num(floor_us_mem.max(floor_us_compute)),
            fmt_num(floor_us_mem),
            fmt_num(floor_us_compute)
        );
    }
    s
}

fn best_section(ctx: &ProposalContext<'_>) -> String {
    let mut s = String::from("## To beat\n");
    if let Some(m) = ctx.best_result.and_then(|r| r.metrics.as_ref()) {
        let _ = writeln!(
            s,
            "- current best at {} {}: {} us, {} {}{}, {}x the PyTorch reference ({} us), peak memory {} MB",
            m.shape,
            m.dtype,
            fmt_num(m.latency_us),
            fmt_num(m.throughput),
            m.throughput_unit,
            m.pct_peak
                .map(|p| format!(" ({}% of peak)", fmt_num(p)))
                .unwrap_or_default(),
            fmt_num(m.speedup_vs_reference),
            fmt_num(m.reference_latency_us),
            fmt_num(m.peak_vram_mb)
        );
        if ctx.best_result.is_some_and(|r| !r.timing_representative) {
            s.push_str("- timings come from Triton's CPU interpreter: not a GPU's speed; correctness still counts\n");
        }
        if let Some(keys) = &m.config_keys_read {
            // a CONFIG key outside this list changes nothing at the timed shape
            let _ = writeln!(
                s,
                "- CONFIG keys kernel_fn reads at that shape: {}",
                keys.join(", ")
            );
        }
    } else if let Some(r) = ctx
        .history
        .iter()
        .rev()
        .find(|r| matches!(r.decision, Decision::Keep | Decision::Baseline))
    {
        let _ = writeln!(s, "- current best: {}", row_metrics(r));
    } else {
        s.push_str("- no measurement yet\n");
    }
    s.push_str("- a candidate is kept only if it passes every stage and is more than 1% faster in a head-to-head timing\n");
    s
}

fn row_metrics(r: &ExperimentRecord) -> String {
    let mut parts = vec![r.correctness.label().to_string()];
    if let Some(l) = r.latency_us {
        parts.push(format!("{} us", fmt_num(l)));
    }
    if let Some(t) = r.throughput {
        parts.push(format!("{} {}", fmt_num(t), r.throughput_unit));
    }
    if let Some(p) = r.pct_peak {
        parts.push(format!("{}% of peak", fmt_num(p)));
    }
    if let Some(x) = r.speedup_vs_reference {
        parts.push(format!("{}x reference", fmt_num(x)));
    }
    parts.join(", ")
}

fn history_line(r: &ExperimentRecord, failures: &[(u64, String)]) -> String {
    let mut line = format!(
        "- #{} {} [{}] {}: {}\n",
        r.experiment,
        r.decision.label(),
        r.agent,
        row_metrics(r),
        r.description
    );
    if r.decision != Decision::Invalid {
        for (_, reason) in failures.iter().filter(|(n, _)| *n == r.experiment) {
            let short: String = reason.chars().take(600).collect();
            let _ = writeln!(line, "  failure: {short}");
        }
    }
    line
}

/// Builds the user message for `ctx` so that it, plus `system_tokens` of system prompt,
/// stays within `budget_tokens` (estimated by [`estimate_tokens`]). The target, GPU,
/// metrics, the current kernel and the instructions are always included; experiments are
/// added newest first and the oldest are dropped when the budget runs out.
pub fn build_user_message(
    ctx: &ProposalContext<'_>,
    system_tokens: usize,
    budget_tokens: usize,
) -> UserMessage {
    let mut head = String::new();
    head.push_str(&target_section(ctx));
    head.push('\n');
    head.push_str(&gpu_section(ctx));
    head.push('\n');
    head.push_str(&best_section(ctx));
    head.push_str("\n## Current best kernel.py\n```python\n");
    head.push_str(ctx.best_source);
    if !ctx.best_source.ends_with('\n') {
        head.push('\n');
    }
    head.push_str("```\n");
    let tail = format!(
        "\n## Your turn (experiment {})\nPropose the next kernel.py. First line: one line saying what you changed. Then the complete file in one ```python block.\n",
        ctx.experiment
    );
    let fixed = system_tokens + estimate_tokens(&head) + estimate_tokens(&tail) + 40;
    let mut left = budget_tokens.saturating_sub(fixed);
    let rows: Vec<&ExperimentRecord> = ctx.history.iter().collect();
    let mut lines: Vec<String> = Vec::new();
    for r in rows.iter().rev().take(MAX_HISTORY_ROWS) {
        let line = history_line(r, ctx.failures);
        let cost = estimate_tokens(&line);
        if cost > left {
            break;
        }
        left -= cost;
        lines.push(line);
    }
    lines.reverse();
    let dropped = rows.len() - lines.len();
    let mut text = head;
    if !rows.is_empty() {
        text.push_str("\n## Recent experiments on this target (oldest first)\n");
        if dropped > 0 {
            let _ = writeln!(
                text,
                "({dropped} older experiment(s) left out to fit the context budget)"
            );
        }
        for l in &lines {
            text.push_str(l);
        }
    }
    text.push_str(&tail);
    UserMessage {
        text,
        history_rows: lines.len(),
        history_dropped: dropped,
    }
}
