"""Where a fresh candidate worker's time goes: Triton's compile cache (issue 21, point 1).

Each candidate's worker gets an empty private TRITON_CACHE_DIR, so besides compiling the
candidate's kernels it builds Triton's C helpers with the host compiler: `cuda_utils` once,
and a `__triton_launcher` per kernel signature. This probe runs, for each starter given, a
fresh Python per row (new source each time, as a new candidate) and times its first calls at
a few shapes:

  cold     empty cache directory (today's sandboxed worker)
  helpers  a cache directory holding only another source's C helpers (cuda_utils and
           launchers, copied from the cold row's), the kernels themselves compiled anew
  warm     the cold row's own cache directory and source (everything cached)

Usage (GPU machine, repository root): python3 benches/gpu/triton_cache_probe.py [KIND ...]
Prints one JSON line per row: kind, row, import_s, cuda_init_s, first_calls_s (all shapes),
and the cache's file counts after the row.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STARTERS = os.path.join(HERE, "..", "..", "autokernel-bench", "python", "starters")
# shapes a shape sweep would visit (rows, cols) or (M, N, K)
SHAPES = {
    "rmsnorm": [(4096, 4096), (1024, 768), (37, 1000), (8192, 128)],
    "softmax": [(4096, 4096), (1024, 768), (37, 1000), (8192, 128)],
    "matmul": [(4096, 4096, 4096), (512, 768, 3072), (37, 100, 300)],
}

CHILD = r"""
import json, os, sys, time, importlib.util
t0 = time.perf_counter()
import torch, triton
t1 = time.perf_counter()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t2 = time.perf_counter()
spec = importlib.util.spec_from_file_location("cand", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
kind, shapes = sys.argv[2], json.loads(sys.argv[3])
for s in shapes:
    if kind == "matmul":
        M, N, K = s
        out = m.kernel_fn(torch.randn(M, K, device="cuda", dtype=torch.float16),
                          torch.randn(K, N, device="cuda", dtype=torch.float16))
    elif kind == "rmsnorm":
        out = m.kernel_fn(torch.randn(*s, device="cuda", dtype=torch.float16),
                          torch.randn(s[1], device="cuda", dtype=torch.float16))
    else:
        out = m.kernel_fn(torch.randn(*s, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "cuda_init_s": t2 - t1, "first_calls_s": t3 - t2}))
"""


def variant(kind, tag, work):
    src = open(os.path.join(STARTERS, f"{kind}.py")).read()
    # a comment at the end of every line with program_id(0): a new source for Triton
    src = re.sub(r"(tl\.program_id\(0\)[^\n]*?)$", r"\1  # variant " + tag, src, flags=re.M)
    path = os.path.join(work, f"{kind}_{tag}.py")
    open(path, "w").write(src)
    return path


def counts(cache):
    names = [f for _, _, fs in os.walk(cache) for f in fs]
    return {
        "files": len(names),
        "launchers": sum(n.startswith("__triton_launcher") for n in names),
        "cuda_utils": sum(n.startswith("cuda_utils") for n in names),
    }


def row(kind, name, path, cache):
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, path, kind, json.dumps(SHAPES[kind])],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(json.dumps({"kind": kind, "row": name, "error": out.stderr.strip().splitlines()[-3:]}), flush=True)
        return
    v = json.loads(out.stdout.strip().splitlines()[-1])
    v.update(kind=kind, row=name, cache=counts(cache))
    print(json.dumps(v), flush=True)


def main():
    kinds = sys.argv[1:] or list(SHAPES)
    work = tempfile.mkdtemp()
    for kind in kinds:
        cold = os.path.join(work, f"{kind}-cold")
        row(kind, "cold", variant(kind, "a", work), cold)
        helpers = os.path.join(work, f"{kind}-helpers")
        for d in os.listdir(cold) if os.path.isdir(cold) else []:
            full = os.path.join(cold, d)
            if any(f.endswith(".so") for f in os.listdir(full)):
                shutil.copytree(full, os.path.join(helpers, d))
        row(kind, "helpers", variant(kind, "b", work), helpers)
        row(kind, "warm", os.path.join(work, f"{kind}_a.py"), cold)


if __name__ == "__main__":
    main()
