//! Every starter passes every stage on the CPU (Triton's interpreter).

use std::time::Duration;

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{BenchRequest, Benchmarker, Device, KernelKind, Layout, Params, Stage};

use super::*;

#[tokio::test]
async fn every_starter_passes_all_stages_on_the_cpu() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut cases: Vec<(KernelKind, Layout, Params)> = KernelKind::ALL
        .iter()
        .map(|&k| (k, Layout::Contiguous, Params::new()))
        .collect();
    // matmul's epilogue and nn.Linear's transposed weight: the layouts and the bias the
    // model's call sites hand over (GPT-2's Conv1D contiguous, nn.Linear b_transposed)
    for (layout, bias) in [
        (Layout::Contiguous, true),
        (Layout::BTransposed, false),
        (Layout::BTransposed, true),
    ] {
        let params = Params::from([("has_bias".to_string(), serde_json::json!(bias))]);
        cases.push((KernelKind::Matmul, layout, params));
    }
    // fused_mlp's GeGLU gate (Gemma's tanh GELU)
    cases.push((
        KernelKind::FusedMlp,
        Layout::Contiguous,
        Params::from([("activation".to_string(), serde_json::json!("gelu_tanh"))]),
    ));
    // rotary_embedding's half-split pairing (HF transformers' rotate_half)
    cases.push((
        KernelKind::RotaryEmbedding,
        Layout::Contiguous,
        Params::from([("pairing".to_string(), serde_json::json!("half_split"))]),
    ));
    // the fused add-norms at the variants HF models call them with: LlamaRMSNorm's cast
    // order, a layer norm without a bias
    cases.push((
        KernelKind::AddRmsnorm,
        Layout::Contiguous,
        Params::from([("cast_order".to_string(), serde_json::json!("llama"))]),
    ));
    cases.push((
        KernelKind::AddLayernorm,
        Layout::Contiguous,
        Params::from([("has_bias".to_string(), serde_json::json!(false))]),
    ));
    for (kind, layout, params) in cases {
        let path = starter_path(kind.name());
        let mut req = BenchRequest::new(&path);
        req.device = Device::Cpu;
        req.timeout = Duration::from_secs(300);
        req.layout = layout;
        req.params = params.clone();
        let r = b.bench(&req).await.expect("the harness runs");
        let kind = format!("{kind} {layout} {params:?}");
        assert!(
            r.correctness.is_pass(),
            "{kind}: {:?}\n{:#?}",
            r.correctness,
            r.stages
        );
        let stages: Vec<Stage> = r.stages.iter().map(|s| s.stage).collect();
        assert_eq!(
            stages,
            [
                Stage::Load,
                Stage::Smoke,
                Stage::ShapeSweep,
                Stage::Stability,
                Stage::Determinism,
                Stage::Edge,
                Stage::Timing,
                Stage::Integrity
            ],
            "{kind}"
        );
        let m = r.metrics.as_ref().expect("timed");
        assert!(m.latency_us > 0.0 && m.reference_latency_us > 0.0, "{m:?}");
        assert!(!r.timing_representative);
        assert_eq!(r.device, "cpu");
    }
}

/// The row starters' loads are 16-byte vectors when rows are 16-byte aligned, their
/// exponentials flush subnormals (`ex2.approx.ftz`), the softmax starter's wide-row loop
/// carries its L2 hints (`evict_last`, `evict_first`, streaming stores) and its
/// shared-memory kernel copies and stores 16 bytes at a time even on odd widths, two
/// programs to an SM, checked in their PTX for sm_90 without a GPU
/// (`python/tests/check_ptx.py`; it fails, naming the kernels, when the row width is not
/// known to be a multiple of 16, with the softmax starter of before `tl.math.exp2`, with
/// the one of before the hints, or with the shared-memory kernel copying from the row's
/// own start or masking its stores element by element).
#[test]
fn row_starters_compile_to_vector_loads_and_flushing_exponentials() {
    run_check_script("check_ptx.py");
}

/// The matmul and fused_mlp starters' TMA kernels, compiled for sm_90 with their CONFIG
/// (no GPU), take their operands only by TMA (`cp.async.bulk.tensor`, no `ld.global`) into
/// `wgmma.mma_async`; their wrappers send exactly the 16-bit, 16-byte-aligned tensors down
/// that path, and shrink a tile too large for shared memory instead of looping for ever
/// (`python/tests/check_tma.py`, which names what failed).
#[test]
fn matmul_starters_compile_to_tma_and_wgmma() {
    run_check_script("check_tma.py");
}

/// The C launcher Triton builds for a kernel is the one a worker builds ahead from the
/// kernel's argument type names alone, at other constexpr values and another dtype too
/// (`python/tests/check_launchers.py`; no GPU: only the C source is made), so a launcher an
/// earlier candidate's worker reported is found built in the next worker's cache.
#[test]
fn a_launcher_built_ahead_from_type_names_is_the_one_triton_builds() {
    run_check_script("check_launchers.py");
}

/// Runs `python/tests/<name>` with the compiler (TRITON_INTERPRET unset); it must print "ok".
fn run_check_script(name: &str) {
    assert_eq!(check_script(name, false), "ok");
}

/// Runs `python/tests/<name>`, in Triton's interpreter or not, asserts that it exits 0 and
/// returns its stdout, trimmed.
fn check_script(name: &str, interpret: bool) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python/tests")
        .join(name);
    let mut cmd = std::process::Command::new(python());
    cmd.arg(&script);
    if interpret {
        cmd.env("TRITON_INTERPRET", "1");
    } else {
        cmd.env_remove("TRITON_INTERPRET");
    }
    let out = cmd.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
