"""Which global loads and stores Triton emits for the wide-row softmax and cross-entropy
kernels, by compiling them to PTX for sm_90 (the H200) on any machine, GPU or not.

A row of an odd width (a vocabulary of 50257) starts off a 16-byte boundary, and Triton
then loads and stores it one 2-byte element at a time (`ld.global.b16`) instead of 16 bytes
at a time (`ld.global.v4.b32`). This prints, per kernel and row width, the count of each
global load/store instruction in the PTX (instructions in the code, not executions).
Usage: .venv/bin/python benches/gpu/ptx_probe.py   (needs torch and triton, no GPU)
"""
import importlib.util
import os

import triton

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STARTERS = os.path.join(ROOT, "autokernel-bench", "python", "starters")
VARIANTS = os.path.join(ROOT, "benches", "gpu", "variants")


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the compile-and-count of the CI check on the starters (which specialises every integer
# argument as a multiple of 16; here the row width is left out for the odd widths)
_CHECK = load(os.path.join(ROOT, "autokernel-bench", "python", "tests", "check_ptx.py"))


def global_ops(fn, signature, constexprs, divisible, num_warps=8):
    """Counter of ld.global/st.global variants in fn's PTX for sm_90; `divisible`: the
    indices of the arguments specialised as multiples of 16 (Triton's specialisation of a
    width like 50256 = 16 · 3141, and not of 50257)."""
    return _CHECK.global_ops(fn, signature, constexprs, num_warps, divisible)


def main():
    softmax = load(os.path.join(STARTERS, "softmax.py"))
    cross_entropy = load(os.path.join(STARTERS, "cross_entropy.py"))
    aligned = load(os.path.join(VARIANTS, "softmax_aligned.py"))
    sm_sig = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_rows": "i32", "n_cols": "i32",
              "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr", "ONE_PASS": "constexpr"}
    sm_const = {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "ONE_PASS": False}
    ce_sig = {"x_ptr": "*fp16", "t_ptr": "*i64", "loss_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
              "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr"}
    ce_const = {"BLOCK_ROWS": 1, "BLOCK_N": 4096}
    al_sig = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_rows": "i32", "n_cols": "i32", "n_total": "i32",
              "BLOCK_N": "constexpr", "ALIGN": "constexpr"}
    rows = [
        ("softmax starter, wide rows", "50257", global_ops(softmax._softmax_kernel, sm_sig, sm_const, [0, 1, 2])),
        ("softmax starter, wide rows", "50256", global_ops(softmax._softmax_kernel, sm_sig, sm_const, [0, 1, 2, 3])),
        ("cross_entropy starter", "50257", global_ops(cross_entropy._row_loss_kernel, ce_sig, ce_const, [0, 1, 2, 3])),
        ("cross_entropy starter", "50256", global_ops(cross_entropy._row_loss_kernel, ce_sig, ce_const, [0, 1, 2, 3, 4])),
        ("variants/softmax_aligned.py", "50257", global_ops(aligned._wide_kernel, al_sig, {"BLOCK_N": 4096, "ALIGN": 8},
                                                            [0, 1, 2, 4])),
    ]
    print(f"triton {triton.__version__}, PTX for sm_90, float16\n")
    print("| kernel | row width | global loads and stores in the PTX |\n| --- | --- | --- |")
    for name, width, ops in rows:
        print(f"| {name} | {width} | " + ", ".join(f"{k} ×{v}" for k, v in sorted(ops.items())) + " |")


if __name__ == "__main__":
    main()
