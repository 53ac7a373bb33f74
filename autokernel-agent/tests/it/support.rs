//! Fixtures: the LLM regression cases (in-repo and shared), targets, contexts, rows, a
//! starter-like kernel.

use std::path::{Path, PathBuf};

use autokernel_core::pyliteral::KernelConfig;
use autokernel_core::{
    lookup_gpu, BenchResult, Correctness, DType, Decision, ExperimentRecord, GpuSpec, KernelKind,
    Metrics, ProposalContext, Shape, Target,
};

/// The in-repo regression cases of `area` (`tests/cases/<area>/`, see its README); they
/// ship with the repository, so a missing folder is a broken checkout and fails loudly.
pub fn cases_dir(area: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(area);
    assert!(
        dir.is_dir(),
        "in-repo cases folder not found at `{}`",
        dir.display()
    );
    dir
}

/// The text of the in-repo case `area/name`.
pub fn case(area: &str, name: &str) -> String {
    read(&cases_dir(area).join(name))
}

/// The shared cases folder of an area, when present (one source: `tests/support/`).
#[path = "../../../tests/support/shared_cases.rs"]
mod shared_cases;
pub use shared_cases::shared_cases_dir;

/// The text of the shared case `area/name`, or `None` (skipped) without the shared folder.
pub fn shared_case(area: &str, name: &str, test: &str) -> Option<String> {
    shared_cases_dir(area, test).map(|d| read(&d.join(name)))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read `{}`: {e}", p.display()))
}

/// A starter-like softmax kernel.py: CONFIG on one line with a trailing comment,
/// TUNABLES over several lines with comments.
pub const KERNEL: &str = r#""""Row-wise softmax (test kernel)."""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "softmax"
CONFIG = {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2}  # launch parameters
TUNABLES = {
    "BLOCK_SIZE": [256, 512, 1024, 2048, 4096],  # columns per program
    "num_warps": [2, 4, 8],
    "num_stages": [1, 2, 3],
}


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def kernel_fn(x):
    y = torch.empty_like(x)
    _softmax[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=CONFIG["BLOCK_SIZE"],
                            num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
"#;

pub fn target(id: &str) -> Target {
    Target::new(id, KernelKind::Softmax)
        .with_shapes(vec![Shape(vec![4096, 4096])])
        .with_dtype(DType::Float16)
        .with_fraction(0.25)
        .with_op("aten::_softmax")
}

pub fn h200() -> GpuSpec {
    lookup_gpu("NVIDIA H200")
        .spec()
        .cloned()
        .expect("the H200 is in the table")
}

pub fn row(n: u64, decision: Decision, description: &str) -> ExperimentRecord {
    ExperimentRecord {
        experiment: n,
        timestamp: "2026-11-29T22:00:00Z".into(),
        target: "01-softmax".into(),
        kind: KernelKind::Softmax,
        agent: "tune".into(),
        description: description.into(),
        commit: (decision != Decision::Invalid).then(|| format!("{n:040}")),
        decision,
        correctness: if decision == Decision::Invalid {
            autokernel_core::Verdict::NotRun
        } else {
            autokernel_core::Verdict::Pass
        },
        latency_us: Some(10.0 + n as f64),
        throughput: Some(2000.0),
        throughput_unit: "GB/s".into(),
        pct_peak: Some(41.7),
        speedup_vs_reference: Some(1.2),
        peak_vram_mb: Some(64.0),
        duration_s: 1.0,
        head_to_head: None,
        bench_samples_us: Vec::new(),
        bench_reference_samples_us: Vec::new(),
        config: None,
    }
}

/// A row of `source` benchmarked, carrying the configuration the loop records for it.
pub fn measured(n: u64, decision: Decision, description: &str, source: &str) -> ExperimentRecord {
    ExperimentRecord {
        config: KernelConfig::read(source),
        ..row(n, decision, description)
    }
}

/// Owns everything a [`ProposalContext`] borrows.
pub struct Fixture {
    pub target: Target,
    pub gpu: Option<GpuSpec>,
    pub source: String,
    pub history: Vec<ExperimentRecord>,
    pub failures: Vec<(u64, String)>,
}

impl Fixture {
    pub fn new(source: &str) -> Self {
        Fixture {
            target: target("01-softmax"),
            gpu: Some(h200()),
            source: source.to_string(),
            history: vec![measured(
                1,
                Decision::Baseline,
                "baseline: softmax starter kernel",
                source,
            )],
            failures: Vec::new(),
        }
    }

    pub fn ctx(&self) -> ProposalContext<'_> {
        ProposalContext {
            target: &self.target,
            gpu: self.gpu.as_ref(),
            best_source: &self.source,
            best_result: None,
            history: &self.history,
            failures: &self.failures,
            experiment: self.history.iter().map(|r| r.experiment).max().unwrap_or(0) + 1,
        }
    }
}

/// Indices of the lines where `a` and `b` differ (both must have as many lines).
pub fn differing_lines(a: &str, b: &str) -> Vec<usize> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.split('\n').collect(), b.split('\n').collect());
    assert_eq!(la.len(), lb.len(), "line counts differ:\n{a}\n---\n{b}");
    (0..la.len()).filter(|&i| la[i] != lb[i]).collect()
}

/// A timed result of the best whose `kernel_fn` read `keys` of its CONFIG.
pub fn timed_reading(keys: &[&str]) -> BenchResult {
    let shape = Shape(vec![1024, 1024]);
    BenchResult {
        kind: Some(KernelKind::Softmax),
        correctness: Correctness::Pass,
        stages: vec![],
        metrics: Some(Metrics {
            shape,
            dtype: DType::Float16,
            latency_us: 10.0,
            reference_latency_us: 20.0,
            compiled_latency_us: None,
            speedup_vs_reference: 2.0,
            samples_us: Vec::new(),
            reference_samples_us: Vec::new(),
            throughput: 1.0,
            throughput_unit: "GB/s".into(),
            pct_peak: None,
            peak_vram_mb: 1.0,
            config_keys_read: Some(keys.iter().map(|k| k.to_string()).collect()),
            conditions: None,
        }),
        device: "cuda NVIDIA H200".into(),
        timing_representative: true,
        source_sha256: String::new(),
    }
}
