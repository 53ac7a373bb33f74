//! Candidates that try to game the judge get TAMPER or FAIL, never PASS.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{Correctness, Shape, Stage};

use super::*;

const HEADER: &str = "import torch\nKERNEL_KIND = \"softmax\"\nCONFIG = {}\nTUNABLES = {}\n";

/// Benches each (name, body) on one worker and returns the verdicts in order.
async fn verdicts(bodies: &[(&str, &str)]) -> Vec<(String, Correctness)> {
    let dir = tempfile::tempdir().unwrap();
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut out = Vec::new();
    for (name, body) in bodies {
        let k = write(
            dir.path(),
            &format!("{name}.py"),
            &format!("{HEADER}{body}"),
        );
        let r = bench(&b, &k, true, 120).await;
        out.push((name.to_string(), r.correctness));
    }
    out
}

#[tokio::test]
async fn integrity_violations_are_tamper_and_bad_outputs_fail() {
    // these compute with a kernel of their own (`SOFTMAX_KERNEL`): only the trick fails them
    let replays = format!(
        "{SOFTMAX_KERNEL}_cache = {{}}\ndef kernel_fn(x):\n    if 'y' not in _cache:\n        _cache['y'] = _softmax(x)\n    return _cache['y']\n"
    );
    let subclass = format!(
        "{SOFTMAX_KERNEL}class T(torch.Tensor):\n    pass\ndef kernel_fn(x):\n    return _softmax(x).as_subclass(T)\n"
    );
    let wrong_dtype =
        format!("{SOFTMAX_KERNEL}def kernel_fn(x):\n    return _softmax(x, torch.float32)\n");
    let got = verdicts(&[
        // computes the answer with the reference's own op
        ("calls_reference", "def kernel_fn(x):\n    return torch.softmax(x.float(), dim=-1).to(x.dtype)\n"),
        // returns its input after writing the answer into it
        ("writes_input", "def kernel_fn(x):\n    x.copy_(torch.exp(x.float() - x.float().amax(-1, keepdim=True)).div_(torch.exp(x.float() - x.float().amax(-1, keepdim=True)).sum(-1, keepdim=True)))\n    return x\n"),
        // patches a function the harness compares with
        ("patches_equal", "torch.equal = lambda a, b: True\ndef kernel_fn(x):\n    return torch.zeros_like(x)\n"),
        // caches its first output and returns it again
        ("replays", &replays),
        // a subclass is not a plain tensor
        ("subclass", &subclass),
        // always float32, whatever the input dtype
        ("wrong_dtype", &wrong_dtype),
    ])
    .await;
    let reason = |i: usize| got[i].1.reason().unwrap_or_default().to_string();
    assert!(
        matches!(got[0].1, Correctness::Tamper { .. }),
        "{:?}",
        got[0]
    );
    assert!(reason(0).contains("aten::_softmax"), "{}", reason(0));
    assert!(
        matches!(got[1].1, Correctness::Tamper { .. }),
        "{:?}",
        got[1]
    );
    assert!(
        reason(1).contains("modified its input `x`"),
        "{}",
        reason(1)
    );
    assert!(
        matches!(got[2].1, Correctness::Tamper { .. }),
        "{:?}",
        got[2]
    );
    assert!(reason(2).contains("torch.equal"), "{}", reason(2));
    assert!(
        matches!(got[3].1, Correctness::Tamper { .. }),
        "{:?}",
        got[3]
    );
    assert!(reason(3).contains("earlier call"), "{}", reason(3));
    assert!(
        matches!(
            got[4].1,
            Correctness::Fail {
                stage: Stage::Smoke,
                ..
            }
        ),
        "{:?}",
        got[4]
    );
    assert!(
        reason(4).contains("not a plain torch.Tensor"),
        "{}",
        reason(4)
    );
    assert!(matches!(got[5].1, Correctness::Fail { .. }), "{:?}", got[5]);
    assert!(
        reason(5).contains("output dtype float32, expected float16"),
        "{}",
        reason(5)
    );
}

#[tokio::test]
async fn a_candidate_that_rewires_the_references_torch_is_tamper_and_the_worker_recovers() {
    // each answers zeros and makes the reference answer zeros too, in another way
    let zeros = "def kernel_fn(x):\n    return torch.zeros_like(x)\n";
    let honest = format!("{SOFTMAX_KERNEL}def kernel_fn(x):\n    return _softmax(x)\n");
    let got = verdicts(&[
        ("rebinds_softmax", &format!("torch.softmax = lambda x, dim=-1, **k: torch.zeros_like(x)\n{zeros}")),
        ("rebinds_functional", &format!("import torch.nn.functional as F\nF.softmax = lambda x, dim=-1, **k: torch.zeros_like(x)\n{zeros}")),
        ("adds_a_tensor_method", &format!("torch.Tensor.softmax = lambda self, dim=-1, **k: torch.zeros_like(self)\n{zeros}")),
        ("edits_the_harness_table", &format!("import sys\nsys.modules['harness']._P['reference'] = lambda kind, inputs: torch.zeros_like(inputs['x']).float()\n{zeros}")),
        ("leaves_a_mode_active", &format!("from torch.overrides import TorchFunctionMode\nclass Z(TorchFunctionMode):\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n        return func(*args, **(kwargs or {{}}))\nZ().__enter__()\n{zeros}")),
        ("overrides_aten", &format!("_lib = torch.library.Library('aten', 'IMPL')\n_lib.impl('_softmax', lambda x, d, h: torch.zeros_like(x), 'CPU')\n{zeros}")),
        // and the next, honest candidate on the same benchmarker still passes
        ("honest", &honest),
    ])
    .await;
    let expect = [
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor",
        "harness._P.reference",
        "torch function mode",
        "torch.library",
    ];
    for (i, what) in expect.iter().enumerate() {
        let (name, verdict) = &got[i];
        assert!(
            matches!(verdict, Correctness::Tamper { .. }),
            "{name}: {verdict:?}"
        );
        let reason = verdict.reason().unwrap_or_default();
        assert!(reason.contains(what), "{name}: {reason}");
    }
    assert!(got[6].1.is_pass(), "{:?}", got[6]);
}

#[tokio::test]
async fn a_kernel_that_is_wrong_only_at_non_power_of_two_widths_fails_edge() {
    // correct where cols is a power of two; elsewhere its block is the power of two below
    // cols, unmasked: each row's head normalised alone, its tail left zero
    let body = r#"import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty))


def kernel_fn(x):
    x = x.contiguous()
    cols = x.shape[-1]
    p = triton.next_power_of_2(cols)
    y = torch.zeros_like(x)
    _softmax_kernel[(x.numel() // cols,)](x, y, cols, BLOCK=p if p == cols else p // 2)
    return y
"#;
    let got = verdicts(&[("masking", body)]).await;
    let Correctness::Fail { stage, reason } = &got[0].1 else {
        panic!("{:?}", got[0])
    };
    assert_eq!(*stage, Stage::Edge, "{reason}");
    assert!(
        reason.contains("masking bug at non-power-of-two shape?"),
        "{reason}"
    );
}

/// A softmax kernel right on finite rows that walks rows wider than 256 in chunks of 64 with
/// a running max that starts at -inf (no shift while it is -inf), first to last chunk or
/// last to first.
fn chunked_softmax(reverse: bool) -> String {
    let reverse = if reverse { "True" } else { "False" };
    format!(
        r#"import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, n_chunks, CHUNKED: tl.constexpr,
                    REVERSE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    offs = tl.arange(0, BLOCK)
    if CHUNKED:
        m = tl.full([], float("-inf"), tl.float32)
        s = tl.full([], 0.0, tl.float32)
        for i in range(0, n_chunks):
            if REVERSE:
                c = n_chunks - 1 - i
            else:
                c = i
            cols = c * BLOCK + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        for c in range(0, n_chunks):
            cols = c * BLOCK + offs
            x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m) / s).to(y_ptr.dtype.element_ty), mask=cols < n_cols)
    else:
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    chunked = n_cols > 256
    block = 64 if chunked else triton.next_power_of_2(n_cols)
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, triton.cdiv(n_cols, block),
                                            CHUNKED=chunked, REVERSE={reverse}, BLOCK=block)
    return y
"#
    )
}

/// Benches `body` (after the softmax header) on the CPU, not quick, with `shapes` as extra
/// shapes, and returns the stage and reason of its FAIL.
async fn masked_failure(body: &str, shapes: &[&[u64]]) -> (Stage, String) {
    let dir = tempfile::tempdir().unwrap();
    let k = write(dir.path(), "k.py", &format!("{HEADER}{body}"));
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut r = BenchRequest::new(&k);
    r.device = Device::Cpu;
    r.extra_shapes = shapes.iter().map(|s| Shape(s.to_vec())).collect();
    r.timeout = Duration::from_secs(300);
    let got = b.bench(&r).await.expect("the harness runs");
    match got.correctness {
        Correctness::Fail { stage, reason } => (stage, reason),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn softmaxes_that_turn_masked_rows_into_nan_fail_stability_at_the_shapes_that_chunk() {
    // the first CPU shape (8x128) never takes the chunked path: the edge shape 7x1000 does,
    // with no --shape given
    let (stage, reason) = masked_failure(&chunked_softmax(false), &[]).await;
    assert_eq!(stage, Stage::Stability, "{reason}");
    assert!(reason.contains("7x1000 masked inputs"), "{reason}");
    assert!(reason.contains("got NaN"), "{reason}");
    assert!(reason.contains("a running max still at -inf"), "{reason}");
    // walking from the last chunk: only rows masked at their end give NaN; the timing
    // shape is judged on masked rows first
    let (stage, reason) = masked_failure(&chunked_softmax(true), &[&[4, 1000]]).await;
    assert_eq!(stage, Stage::Stability, "{reason}");
    assert!(reason.contains("4x1000 masked inputs"), "{reason}");
    assert!(reason.contains("got NaN"), "{reason}");
}

#[tokio::test]
async fn a_softmax_that_gives_masked_columns_weight_fails_with_the_masked_cause() {
    // -inf read as 0: finite, wrong, and only on masked rows
    let body = r#"import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    x = tl.where(mask & (tl.abs(x) == float("inf")), 0.0, x)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y
"#;
    let (stage, reason) = masked_failure(body, &[]).await;
    assert_eq!(stage, Stage::Stability, "{reason}");
    assert!(reason.contains("masked inputs"), "{reason}");
    assert!(!reason.contains("NaN"), "{reason}");
    assert!(
        reason.contains("each must add exp(-inf) = 0 to the sum and get probability 0"),
        "{reason}"
    );
    assert!(!reason.contains("subtract the row max"), "{reason}");
}

#[tokio::test]
async fn a_softmax_wrong_on_large_values_only_at_wide_rows_fails_at_the_timing_shape() {
    // rows wider than the CPU set's (128, 256) take the exponent as an FMA does,
    // x·log2 e − rn(m·log2 e): the product exact (float64 here), the shift rounded, so
    // every exponent carries the shift's rounding, up to half an ulp of |m|·log2 e (the
    // softmax starter's shared-memory rows once did this). Normal values and the narrow
    // rows are right, so only `large` at the timing shape shows it.
    let body = r#"import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    if WIDE:
        shift = m * 1.4426950408889634
        log2e = tl.full([], 1.4426950408889634, tl.float64)
        e = tl.exp2((x.to(tl.float64) * log2e - shift.to(tl.float64)).to(tl.float32))
    else:
        e = tl.exp(x - m)
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, WIDE=n_cols > 256,
                                            BLOCK=triton.next_power_of_2(n_cols))
    return y
"#;
    let (stage, reason) = masked_failure(body, &[&[4, 300]]).await;
    assert_eq!(stage, Stage::Stability, "{reason}");
    assert!(reason.contains("4x300 large inputs"), "{reason}");
}
