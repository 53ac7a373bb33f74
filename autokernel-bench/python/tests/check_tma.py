"""The matmul and fused_mlp starters feed the tensor cores by TMA on sm_90 (the H200).

Compiles each starter's TMA kernel to PTX with its CONFIG, no GPU needed, and checks that
the operands arrive only by the Tensor Memory Accelerator (`cp.async.bulk.tensor`, no
`ld.global`) and meet in Hopper's asynchronous tensor-core instruction (`wgmma.mma_async`):
the pointer kernels they replaced were 6-11% slower on the H200 (docs/benchmarks.md). Also
checks which tensors the wrappers send down the TMA path: 16-bit, 16-byte-aligned rows
(or, for matmul's B, columns), as cuTensorMapEncodeTiled requires; and that a tile too
large for shared memory is shrunk, not looped on for ever.
Run with TRITON_INTERPRET unset (the interpreter replaces the compiler).
Usage: .venv/bin/python autokernel-bench/python/tests/check_tma.py  → prints "ok"
"""
import os
import re
import signal
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ptx import compile_sm90, load  # noqa: E402 - the starters' loader and sm_90 compiler

SIZES = {"M": "i32", "N": "i32", "K": "i32", "num_tiles": "i32"}


def desc(rows, cols):
    """The signature type of a float16 tensor descriptor with [rows, cols] blocks."""
    return f"tensordesc<fp16[{rows}, {cols}]>"


def ptx(fn, descs, constexprs, config):
    """fn's PTX for sm_90 with the descriptor arguments `descs` (name → type), no argument
    specialised as a multiple of 16, at its CONFIG's warps and stages."""
    signature = dict(descs, **SIZES, **{name: "constexpr" for name in constexprs})
    return compile_sm90(fn, signature, constexprs, config["num_warps"], divisible=[],
                        num_stages=config["num_stages"]).asm["ptx"]


def cases():
    """(name, PTX) of each TMA kernel with its starter's CONFIG."""
    mm, mlp = load("matmul"), load("fused_mlp")
    c = mm.CONFIG
    bm, bn, bk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]
    # without a bias: the operands' loads are the only ones (the bias epilogue adds one
    # plain load of a row per tile)
    mm_consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c["GROUP_M"],
                     SPLIT_EPILOGUE=bool(c["SPLIT_EPILOGUE"]), FLATTEN=bool(c["FLATTEN"]), HAS_BIAS=False)
    c_block = desc(bm, bn // 2 if c["SPLIT_EPILOGUE"] else bn)
    out = [
        ("matmul, B row-major", ptx(mm._matmul_tma_kernel, {"a_desc": desc(bm, bk), "b_desc": desc(bk, bn), "c_desc": c_block, "bias_ptr": "*fp16"},
                                    dict(mm_consts, B_TRANSPOSED=False), c)),
        ("matmul, B transposed", ptx(mm._matmul_tma_kernel, {"a_desc": desc(bm, bk), "b_desc": desc(bn, bk), "c_desc": c_block, "bias_ptr": "*fp16"},
                                     dict(mm_consts, B_TRANSPOSED=True), c)),
    ]
    c = mlp.CONFIG
    bm, bk = c["BLOCK_M"], c["BLOCK_K"]
    for gated in (True, False):
        bn = c["BLOCK_N"] if gated else c["DOWN_BLOCK_N"]
        descs = {"a_desc": desc(bm, bk), "w_desc": desc(bn, bk), "w2_desc": desc(bn, bk), "c_desc": desc(bm, bn)}
        consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c["GROUP_M"], GATED=gated, FLATTEN=bool(c["FLATTEN"]), ACT=0)
        out.append((f"fused_mlp, {'gate/up' if gated else 'down'}", ptx(mlp._mlp_tma_kernel, descs, consts, c)))
    return out


def dispatch_failures():
    """Tensors the wrappers' TMA test (`_tma_ready`) classifies wrongly."""
    mm, mlp = load("matmul"), load("fused_mlp")
    f16 = torch.empty(64, 64, dtype=torch.float16)
    expect = [
        ("float16 rows of 128 bytes", f16, True, True),
        ("float16 transpose (columns of 128 bytes)", f16.t(), True, False),
        ("float32", torch.empty(64, 64), False, False),
        ("float16 rows of 126 bytes", torch.empty(64, 63, dtype=torch.float16), False, False),
        ("float16 starting 2 bytes past a boundary", torch.empty(64 * 64 + 1, dtype=torch.float16)[1:].view(64, 64), False, False),
    ]
    failures = []
    for name, t, for_matmul, for_mlp in expect:
        if mm._tma_ready(t) != for_matmul:
            failures.append(f"matmul._tma_ready({name}) is {not for_matmul}")
        if mlp._tma_ready(t) != for_mlp:
            failures.append(f"fused_mlp._tma_ready({name}) is {not for_mlp}")
    return failures


def fit_failures():
    """TMA launches whose shrinking (`_fit`) does not end within the shared-memory budget:
    a CONFIG is a hint, so a tile whose store staging alone passes the budget (256 × 512
    float16 is 256 KB) must shrink, not hang (it once looped for ever)."""
    def timed_out(*_):
        raise TimeoutError("_fit did not end in 5 s")

    signal.signal(signal.SIGALRM, timed_out)
    failures = []
    for name, n_b in (("matmul", 1), ("fused_mlp", 2)):
        module = load(name)
        b_tiles = () if name == "matmul" else (n_b,)
        signal.alarm(5)
        try:
            bm, bn, bk, stages = module._fit(256, 512, 64, 4, 2, *b_tiles, module.TMA_SMEM_BUDGET, 1.0)
        except TimeoutError as e:
            failures.append(f"{name}: {e}")
            continue
        finally:
            signal.alarm(0)
        need = (stages * (bm * bk + n_b * bk * bn) + bm * bn) * 2
        if need > module.TMA_SMEM_BUDGET:
            failures.append(f"{name}: _fit gave {bm}x{bn}x{bk}, {stages} stages: {need} bytes > {module.TMA_SMEM_BUDGET}")
    return failures


def main():
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("unset TRITON_INTERPRET: this check compiles kernels, the interpreter does not")
    failures = dispatch_failures() + fit_failures()
    for name, text in cases():
        tma = len(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.shared::cluster\.global", text))
        loads = len(re.findall(r"\bld\.global", text))
        mma = len(re.findall(r"\bwgmma\.mma_async", text))
        if tma == 0 or loads or mma == 0:
            failures.append(f"{name}: {tma} TMA loads, {loads} ld.global, {mma} wgmma.mma_async")
    if failures:
        sys.exit("\n".join(failures))
    print("ok")


if __name__ == "__main__":
    main()
