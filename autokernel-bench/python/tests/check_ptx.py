"""Properties of the row starters' PTX for sm_90 (the H200), checked on any machine.

Compiles each row kernel to PTX, no GPU needed, with the row width specialised as a
multiple of 16 (what Triton infers at launch for 4096 or 50256 columns), and checks:

- 16-byte loads: 16-byte vector loads (`ld.global.v4.b32`) and no 2-byte ones
  (`ld.global.b16`) beyond those named. Scalar loads cost ~30% of bandwidth on the H200
  (softmax at 4096x50257, whose rows are not aligned, against 50256: docs/benchmarks.md).
- Exponentials that flush subnormals: no `ex2.approx.f32` without `.ftz`, whose subnormal
  fix-up is four more instructions per element on sm_90 (docs/benchmarks.md, "Instructions
  per element").

- L2 hints on the softmax starter's wide rows: the first pass's loads `evict_last`, the
  second's `evict_first`, its stores streaming (`st.global.cs`); 19% at 4096x32000 on the
  H200 (docs/benchmarks.md, session 7). Cross-entropy's row kernel loads `evict_first`.
- The softmax starter's shared-memory path (Gluon) at 4096x50257 float16, whose rows start
  off the 16-byte boundary: the row comes in by 16-byte `cp.async` copies, the output goes
  out by 16-byte stores (2-byte ones only for the row's first and last partial vectors), and
  two programs fit in one SM's 228 KiB of shared memory (H100/H200: NVIDIA Hopper Tuning
  Guide, "Shared memory"), one loading while the other writes: 390 → 218 µs on the H200
  (docs/benchmarks.md, session 8).

A starter edit that lost any of them is caught without a GPU. Run with TRITON_INTERPRET unset
(the interpreter replaces the compiler).
Usage: .venv/bin/python autokernel-bench/python/tests/check_ptx.py  → prints "ok"
"""
import collections
import importlib.util
import os
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource

STARTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "starters")
DIV16 = [["tt.divisibility", 16]]
F16 = "*fp16"


def load(kind):
    """The starter module of `kind`, imported from its file."""
    path = os.path.join(STARTERS, f"{kind}.py")
    spec = importlib.util.spec_from_file_location(f"starter_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_sm90(fn, signature, constexprs, num_warps, divisible=None, num_stages=1, source=ASTSource):
    """fn compiled by Triton for sm_90 (its `.asm` holds "ptx" and "cubin"). `divisible`:
    the indices of the arguments specialised as multiples of 16 (default: every pointer
    and integer argument). `source`: GluonASTSource for a `@gluon.jit` kernel."""
    if divisible is None:
        divisible = [i for i, t in enumerate(signature.values()) if t.startswith("*") or t == "i32"]
    src = source(fn=fn, signature=signature, constexprs=constexprs,
                 attrs={(i,): DIV16 for i in divisible})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages})


def ptx(fn, signature, constexprs, num_warps, divisible=None):
    """fn's PTX for sm_90 (`compile_sm90`'s arguments)."""
    return compile_sm90(fn, signature, constexprs, num_warps, divisible).asm["ptx"]


def count_global_ops(text):
    """Counter of the ld.global/st.global forms in PTX text, cache hints left out
    (`ld.global.L1::evict_first.L2::cache_hint.v4.b32` counts as `ld.global.v4.b32`)."""
    forms = re.findall(r"\b(?:ld|st)\.global[\w.:]*", text)
    return collections.Counter(re.sub(r"\.L[12]::\w+", "", f) for f in forms)


def global_ops(fn, signature, constexprs, num_warps, divisible=None):
    """Counter of the ld.global/st.global forms in fn's PTX for sm_90 (`ptx`'s arguments)."""
    return count_global_ops(ptx(fn, signature, constexprs, num_warps, divisible))


def slow_exponentials(text):
    """Count of `ex2.approx.f32` (no `.ftz`) in PTX text."""
    return len(re.findall(r"\bex2\.approx\.f32\b", text))


def rows_sig(*pointers, extra=()):
    sig = {name: F16 for name in pointers}
    sig.update({"n_rows": "i32", "n_cols": "i32"})
    sig.update({name: "fp32" for name in extra})
    return sig


def cases():
    """(name, kernel, signature, constexprs, scalar 2-byte loads allowed[, the arguments
    specialised as multiples of 16, when not all of them])."""
    softmax, rmsnorm, layernorm = load("softmax"), load("rmsnorm"), load("layernorm")
    reduce, cross_entropy = load("reduce"), load("cross_entropy")
    sm = dict(rows_sig("x_ptr", "y_ptr"), BLOCK_ROWS="constexpr", BLOCK_N="constexpr", ONE_PASS="constexpr")
    norm = dict(BLOCK_ROWS="constexpr", BLOCK_N="constexpr", ONE_PASS="constexpr")
    ce = {"x_ptr": F16, "t_ptr": "*i64", "loss_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
          "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr"}
    ce_odd = {"x_ptr": F16, "t_ptr": "*i64", "loss_ptr": "*fp32", "n_cols": "i32", "n_total": "i32",
              "BLOCK_N": "constexpr", "ALIGN": "constexpr"}
    return [
        ("softmax, row in registers", softmax._softmax_kernel, sm,
         {"BLOCK_ROWS": 2, "BLOCK_N": 4096, "ONE_PASS": True}, 0),
        ("softmax, wide rows", softmax._softmax_kernel, sm,
         {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "ONE_PASS": False}, 0),
        ("rmsnorm", rmsnorm._rmsnorm_kernel,
         dict(rows_sig("x_ptr", "w_ptr", "y_ptr", extra=["eps", "w_offset"]), **norm, ROUND_FIRST="constexpr"),
         {"BLOCK_ROWS": 2, "BLOCK_N": 4096, "ONE_PASS": True, "ROUND_FIRST": False}, 0),
        ("layernorm", layernorm._layernorm_kernel,
         dict(rows_sig("x_ptr", "w_ptr", "b_ptr", "y_ptr", extra=["eps"]), **norm, HAS_BIAS="constexpr"),
         {"BLOCK_ROWS": 1, "BLOCK_N": 4096, "ONE_PASS": True, "HAS_BIAS": True}, 0),
        ("reduce", reduce._sum_kernel, dict(rows_sig("x_ptr", "y_ptr"), BLOCK_ROWS="constexpr", BLOCK_N="constexpr"),
         {"BLOCK_ROWS": 1, "BLOCK_N": 2048}, 0),
        # one 2-byte load: the target logit, gathered at a data-dependent column
        ("cross_entropy", cross_entropy._row_loss_kernel, ce, {"BLOCK_ROWS": 1, "BLOCK_N": 4096}, 1),
        # n_cols not a multiple of 16 (50257): the rows start off a 16-byte boundary
        ("cross_entropy, rows off the 16-byte boundary", cross_entropy._aligned_row_loss_kernel, ce_odd,
         {"BLOCK_N": 4096, "ALIGN": 8}, 1, [0, 1, 2, 4]),
    ]


def main():
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("unset TRITON_INTERPRET: this check compiles kernels, the interpreter does not")
    failures = []
    for name, fn, signature, constexprs, scalar_ok, *divisible in cases():
        text = ptx(fn, signature, constexprs, num_warps=8, divisible=divisible[0] if divisible else None)
        ops = count_global_ops(text)
        if ops["ld.global.v4.b32"] == 0 or ops["ld.global.b16"] > scalar_ok:
            failures.append(f"{name}: loads not vectorised at 16-byte aligned rows: {dict(ops)}")
        if slow_exponentials(text):
            failures.append(f"{name}: {slow_exponentials(text)} ex2.approx.f32 without .ftz "
                            "(use tl.math.exp2 of v · log2 e, not tl.exp)")
    failures += l2_hint_failures()
    failures += smem_row_failures()
    if failures:
        sys.exit("\n".join(failures))
    print("ok")


def l2_hint_failures():
    """What the softmax and cross-entropy starters lack of their L2 hints (module docstring)."""
    softmax = load("softmax")
    sig = dict(rows_sig("x_ptr", "y_ptr"), BLOCK_ROWS="constexpr", BLOCK_N="constexpr", ONE_PASS="constexpr")
    text = ptx(softmax._softmax_kernel, sig, {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "ONE_PASS": False}, num_warps=16)
    forms = collections.Counter(re.findall(r"\b(?:ld|st)\.global[\w.:]*", text))
    policies = set(re.findall(r"createpolicy\.fractional\.L2::(\w+)", text))
    wanted = {
        "loads evict_last (pass 1)": any("evict_last" in f for f in forms if f.startswith("ld")),
        "loads evict_first (pass 2)": any("evict_first" in f for f in forms if f.startswith("ld")),
        "L2 policies evict_last and evict_first": {"evict_last", "evict_first"} <= policies,
        "streaming stores only": forms and all(".cs." in f for f in forms if f.startswith("st")),
    }
    failures = [f"softmax, wide rows: missing {what}: {dict(forms)}" for what, ok in wanted.items() if not ok]
    # cross-entropy reads each logit once: its row kernel's loads go first
    ce = load("cross_entropy")
    sig = {"x_ptr": F16, "t_ptr": "*i64", "loss_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
           "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr"}
    text = ptx(ce._row_loss_kernel, sig, {"BLOCK_ROWS": 1, "BLOCK_N": 4096}, num_warps=4)
    if "createpolicy.fractional.L2::evict_first" not in text:
        failures.append("cross_entropy: the row kernel's loads are not evict_first")
    return failures


SM90_SMEM_PER_SM = 228 * 1024
"""Shared memory of one sm_90 SM, in bytes (NVIDIA Hopper Tuning Guide, "Shared memory":
up to 228 KB per SM, 227 KB of it for one thread block)."""


def smem_row_failures():
    """What the softmax starter's shared-memory kernel lacks (module docstring), compiled as
    `kernel_fn` launches it at 4096x50257 float16 with CONFIG's SMEM_CHUNK and SMEM_WARPS."""
    softmax = load("softmax")
    chunk, warps, vec = softmax.CONFIG["SMEM_CHUNK"], softmax.CONFIG["SMEM_WARPS"], 8
    n_chunks = triton.cdiv(50257 + vec - 1, chunk)
    sig = {"x_ptr": F16, "y_ptr": F16, "n_cols": "i32", "n_total": "i32",
           "CHUNK": "constexpr", "N_CHUNKS": "constexpr", "VEC": "constexpr"}
    # 50257 is not a multiple of 16, 4096·50257 is: Triton specialises the same way at launch
    kernel = compile_sm90(softmax._smem_row_kernel, sig, {"CHUNK": chunk, "N_CHUNKS": n_chunks, "VEC": vec},
                          warps, divisible=[0, 1, 3], source=GluonASTSource)
    text = kernel.asm["ptx"]
    copies = re.findall(r"cp\.async\.\w+\.shared\.global[^;]*;", text)
    ops = count_global_ops(text)
    failures = []
    if not copies or not all(c.endswith("0x10, 0x10;") for c in copies):
        failures.append(f"softmax, shared-memory rows: the row is not copied by 16-byte cp.async: {copies[:3]}")
    if ops["st.global.cs.v4.b32"] == 0 or ops["st.global.b16"] + ops["st.global.cs.b16"] > 1:
        failures.append(f"softmax, shared-memory rows: stores not 16 bytes wide: {dict(ops)}")
    if slow_exponentials(text):
        failures.append(f"softmax, shared-memory rows: {slow_exponentials(text)} ex2.approx.f32 without .ftz")
    if 2 * kernel.metadata.shared > SM90_SMEM_PER_SM:
        failures.append(f"softmax, shared-memory rows: {kernel.metadata.shared} bytes of shared memory "
                        "a program; two no longer fit on an SM")
    return failures


if __name__ == "__main__":
    main()
