"""Instructions per element in the inner loops of the wide-row softmax and cross-entropy
kernels (starters, and the aligned variants in variants/), from their SASS for sm_90 (the
H200), on any machine, GPU or not.

A memory-bound kernel can still be held back by the instructions it issues: at 4096x50257
float16 the H200 ran the softmax starter 1.42x slower than at 50256 columns, and its loops
issue 1.49x the instructions per element there (2-byte loads instead of 16-byte ones:
ptx_probe.py). This compiles each kernel with Triton, disassembles the cubin with the
nvdisasm that Triton ships, finds each innermost loop (a label and the backward branch to
it), and prints its instructions per element per thread:

    loop instructions / (BLOCK_ROWS · BLOCK_N / (num_warps · 32))

Counts are of the code, not of time: an `ex2` also waits on the special-function unit and
a load on memory. What they cost is for the GPU measurement (docs/benchmarks.md).
Usage: .venv/bin/python benches/gpu/sass_probe.py [STARTERS_DIR]
       (default: the repository's starters; give another folder, say one written with
       `git show REV:autokernel-bench/python/starters/softmax.py`, to compare versions)
"""
import collections
import importlib.util
import os
import re
import sys

import triton
from triton.tools.disasm import get_sass

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STARTERS = os.path.join(ROOT, "autokernel-bench", "python", "starters")
VARIANTS = os.path.join(ROOT, "benches", "gpu", "variants")


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the CI check's compile for sm_90 (check_ptx.py), not a copy of it
_CHECK = load(os.path.join(ROOT, "autokernel-bench", "python", "tests", "check_ptx.py"))


def sass(fn, signature, constexprs, divisible, num_warps):
    """fn's SASS for sm_90 as text; `divisible`: the indices of the arguments specialised as
    multiples of 16 (as Triton specialises a width like 50256 at launch, and not 50257)."""
    kernel = _CHECK.compile_sm90(fn, signature, constexprs, num_warps, divisible)
    return get_sass(kernel.asm["cubin"])


def inner_loops(text):
    """[(instructions, opcode Counter)] of each innermost loop, in code order: the
    instructions from a label to the last branch back to it, with no other loop inside."""
    lines = text.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\w+):\s*$", line))}
    loops = []
    for i, line in enumerate(lines):
        m = re.search(r"\bBRA (\w+);", line)
        # (a label followed by nothing but the branch to itself closes every kernel: skipped)
        if m and m.group(1) in labels and labels[m.group(1)] < i - 1:
            loops.append((labels[m.group(1)], i))
    innermost = [(a, b) for a, b in loops if not any(a < c and d <= b and (c, d) != (a, b) for c, d in loops)]
    result = []
    for a, b in sorted(set(innermost)):
        ops = [opcode(line) for line in lines[a + 1:b + 1] if "\t" in line]
        result.append((len(ops), collections.Counter(ops)))
    return result


def opcode(line):
    """'--:-:-:-:5\t@!P1 FMUL.FTZ R2, R3, R4;' → 'FMUL'."""
    instruction = re.sub(r"^@!?U?P\w+ ", "", line.split("\t", 1)[1].strip())
    return instruction.split()[0].split(".")[0].rstrip(";")


def rows(starters):
    softmax = load(os.path.join(starters, "softmax.py"))
    cross_entropy = load(os.path.join(starters, "cross_entropy.py"))
    sm_sig = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_rows": "i32", "n_cols": "i32",
              "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr", "ONE_PASS": "constexpr"}
    ce_sig = {"x_ptr": "*fp16", "t_ptr": "*i64", "loss_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32",
              "BLOCK_ROWS": "constexpr", "BLOCK_N": "constexpr"}
    # (name, width, kernel, signature, constexprs, divisible, num_warps, inner loop names)
    wide = {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "ONE_PASS": False}
    ce = {"BLOCK_ROWS": 1, "BLOCK_N": 4096}
    # the 16-byte-aligned variants (rows read from the boundary at or below their start)
    sm_aligned = load(os.path.join(VARIANTS, "softmax_aligned_exp2.py"))
    ce_aligned = load(os.path.join(VARIANTS, "cross_entropy_aligned_exp2.py"))
    sma_sig = {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_rows": "i32", "n_cols": "i32", "n_total": "i32",
               "BLOCK_N": "constexpr", "ALIGN": "constexpr"}
    cea_sig = {"x_ptr": "*fp16", "t_ptr": "*i64", "loss_ptr": "*fp32", "n_cols": "i32", "n_total": "i32",
               "BLOCK_N": "constexpr", "ALIGN": "constexpr"}
    return [
        ("softmax, wide rows", "50256", softmax._softmax_kernel, sm_sig, wide, [0, 1, 2, 3], 8,
         ["pass 1 (max, sum)", "pass 2 (write)"]),
        ("softmax, wide rows", "50257", softmax._softmax_kernel, sm_sig, wide, [0, 1, 2], 8,
         ["pass 1 (max, sum)", "pass 2 (write)"]),
        ("cross_entropy", "50256", cross_entropy._row_loss_kernel, ce_sig, ce, [0, 1, 2, 3, 4], 4,
         ["logsumexp"]),
        ("cross_entropy", "50257", cross_entropy._row_loss_kernel, ce_sig, ce, [0, 1, 2, 3], 4,
         ["logsumexp"]),
        ("variants/softmax_aligned_exp2.py", "50257", sm_aligned._wide_kernel, sma_sig,
         {"BLOCK_N": 8192, "ALIGN": 8}, [0, 1, 2, 4], 8, ["pass 1, inside the row", "pass 2, inside the row"]),
        ("variants/cross_entropy_aligned_exp2.py", "50257", ce_aligned._row_loss_kernel, cea_sig,
         {"BLOCK_N": 4096, "ALIGN": 8}, [0, 1, 2, 4], 4, ["logsumexp, inside the row"]),
    ]


def main():
    starters = sys.argv[1] if len(sys.argv) > 1 else STARTERS
    print(f"triton {triton.__version__}, SASS for sm_90, float16, starters in {os.path.relpath(starters)}\n")
    print("| kernel | row width | loop | instructions per element | commonest opcodes per element |")
    print("| --- | --- | --- | --- | --- |")
    for name, width, fn, sig, const, divisible, warps, names in rows(starters):
        per_thread = const.get("BLOCK_ROWS", 1) * const["BLOCK_N"] / (warps * 32)
        loops = inner_loops(sass(fn, sig, const, divisible, warps))
        if len(loops) != len(names):
            sys.exit(f"{name} at {width}: expected {len(names)} inner loops in the SASS, found {len(loops)}")
        for loop_name, (count, ops) in zip(names, loops):
            common = ", ".join(f"{op} {n / per_thread:.1f}" for op, n in ops.most_common(6))
            print(f"| {name} | {width} | {loop_name} | {count / per_thread:.1f} | {common} |")


if __name__ == "__main__":
    main()
