"""The operators of kernel_ops on a GPU, what CI (CPU only) cannot check: for every starter,
the cached launcher's replay of the compiled kernels against kernel_fn (bit for bit, float16
and float32, at the tiny and the largest `cpu` shape, three inputs each), the operator
captured in a CUDA graph and replayed on new inputs, and torch.compile's reduce-overhead
mode (CUDA graphs) over two operators.

Usage (repository root; OPS_DIR as `cargo run --example kernel_ops_files -- OPS_DIR`
writes it): python3 benches/gpu/kernel_ops_gpu.py OPS_DIR
Prints one line per check and, last, `failures: N` (exit status 1 when N > 0).
"""
import os
import sys

sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402

import kernel_ops  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTERS = os.path.join(ROOT, "autokernel-bench/python/starters")
KINDS = ["matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp", "cross_entropy",
         "rotary_embedding", "reduce"]
cat = kernel_ops.catalogue_module()
failures = 0


def expect(ok, what):
    global failures
    failures += not ok
    print(("ok    " if ok else "FAIL  ") + what)


for kind in KINDS:
    op = kernel_ops.register(os.path.join(STARTERS, f"{kind}.py"))
    spec = cat.spec(kind)
    for dtype in (torch.float16, torch.float32):
        for shape in (spec["tiny_shape"], spec["shapes"]["cpu"][-1]):
            same = all(torch.equal(op.launcher(*i.values()), op.module.kernel_fn(**i))
                       for i in (cat.make_inputs(kind, shape, dtype, "cuda", seed) for seed in (1, 2, 3)))
            expect(same, f"{kind} {dtype} {shape}: launcher = kernel_fn")
    expect(not op.launcher.reasons and op.launcher.replays >= 8,
           f"{kind}: replayed {op.launcher.replays} calls, recorded {op.launcher.records}; "
           f"not replayed: {list(op.launcher.reasons.values())}")

    # capture after a warm-up on a side stream, replay with new values in the static inputs
    i = cat.make_inputs(kind, spec["tiny_shape"], torch.float16, "cuda", 7)
    static = tuple(i.values())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op.overload(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op.overload(*static)
    fresh = cat.make_inputs(kind, spec["tiny_shape"], torch.float16, "cuda", 8)
    for s, f in zip(static, fresh.values()):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    expect(torch.equal(out, op.module.kernel_fn(**fresh)), f"{kind}: CUDA graph replay on new inputs = kernel_fn")


class TwoOps(torch.nn.Module):
    def forward(self, x, w):
        return torch.ops.autokernel.rmsnorm(torch.ops.autokernel.softmax(x), w)


x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
w = torch.randn(256, device="cuda", dtype=torch.float16)
ops = kernel_ops.registered()
want = ops["rmsnorm"].module.kernel_fn(x=ops["softmax"].module.kernel_fn(x=x), weight=w)
compiled = torch.compile(TwoOps(), mode="reduce-overhead", fullgraph=True)
for _ in range(4):
    got = compiled(x, w)
expect(torch.equal(got, want), "torch.compile reduce-overhead over softmax then rmsnorm = kernel_fn")
print(f"failures: {failures}")
sys.exit(1 if failures else 0)
