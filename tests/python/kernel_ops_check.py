"""Checks of python/kernel_ops.py on the CPU, run by tests/it/kernel_ops.rs.

    kernel_ops_check.py CHECK OPS_DIR STARTERS_DIR

OPS_DIR holds kernel_ops.py, catalogue.py and catalogue.json as autokernel writes them;
STARTERS_DIR the starter kernel.py files. TRITON_INTERPRET=1 must be set. Prints ``ok`` last
when every assertion of CHECK held. Expected values come from PyTorch's own functions
written here (not the catalogue's references, which the operator's CPU path runs).
"""

import math
import os
import sys

CHECK, OPS_DIR, STARTERS = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, OPS_DIR)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernel_ops  # noqa: E402

cat = kernel_ops.catalogue_module()
cat.patch_triton_interpreter()
KINDS = ["matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp", "cross_entropy",
         "rotary_embedding", "reduce", "add_rmsnorm", "add_layernorm"]


def expected(kind, i):
    """The kind's output in float32, by PyTorch's functions (other formulas than the
    catalogue's references where PyTorch has them)."""
    f = {k: (v.float() if v.is_floating_point() else v) for k, v in i.items()}
    if kind == "matmul":
        return torch.einsum("mk,kn->mn", f["A"], f["B"])
    if kind == "softmax":
        e = (f["x"] - f["x"].amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    if kind == "layernorm":
        x = f["x"]
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * f["weight"] + f["bias"]
    if kind == "rmsnorm":
        return F.rms_norm(f["x"], (f["x"].shape[-1],), f["weight"], 1e-6)
    if kind == "flash_attention":
        return F.scaled_dot_product_attention(f["Q"], f["K"], f["V"], is_causal=True)
    if kind == "fused_mlp":
        x = f["x"]
        return F.linear(F.silu(F.linear(x, f["w_gate"])) * F.linear(x, f["w_up"]), f["w_down"])
    if kind == "cross_entropy":
        logits, t = f["logits"], f["targets"]
        return (torch.logsumexp(logits, -1) - logits.gather(1, t[:, None])[:, 0]).mean()
    if kind == "rotary_embedding":
        x = f["x"]
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(pairs * torch.complex(f["cos"], f["sin"])).flatten(-2)
    if kind in ("add_rmsnorm", "add_layernorm"):
        # the sum as the model adds it (in the judged dtype), then the norm of it
        h = (i["x"] + i["residual"]).float()
        if kind == "add_rmsnorm":
            return torch.stack([h, F.rms_norm(h, (h.shape[-1],), f["weight"], 1e-6)])
        return torch.stack([h, F.layer_norm(h, (h.shape[-1],), f["weight"], f["bias"], 1e-5)])
    return f["x"] @ torch.ones(f["x"].shape[-1])  # reduce


def expected_dims(kind, shapes):
    """The output's dims from the inputs' (name -> shape), as each kind defines it."""
    if kind == "matmul":
        return (shapes["A"][0], shapes["B"][1])
    if kind == "cross_entropy":
        return ()
    if kind == "reduce":
        return (shapes["x"][0],)
    if kind in ("add_rmsnorm", "add_layernorm"):
        return (2, *shapes["x"])
    first = {"flash_attention": "Q"}.get(kind, "x")
    return tuple(shapes[first])


def inputs(kind, dtype=torch.float32, seed=0, scale=1, distinct=False):
    """The kind's inputs at its tiny shape, dims other than 1 times `scale` (dynamo
    specialises dims of size 1, so they stay 1); with `distinct`, dim j grows by 2j first,
    so that no two dims are equal (dynamo gives equal sizes one symbol)."""
    shape = [(d + (2 * j if distinct else 0)) * scale if d > 1 else d
             for j, d in enumerate(cat.spec(kind)["tiny_shape"])]
    return cat.make_inputs(kind, shape, dtype, "cpu", seed)


def mismatch(kind, out, ref, dtype):
    """None when `out` matches `ref` within the catalogue's tolerance of `dtype`, else why."""
    tol = cat.spec(kind)["tolerances"][str(dtype).replace("torch.", "")]
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if out.dtype != (torch.float32 if kind == "cross_entropy" else dtype):
        return f"dtype {out.dtype}"
    err = (out.float() - ref).abs()
    bound = tol["atol"] + tol["rtol"] * ref.abs()
    if not bool((err <= bound).all()):
        return f"max error {float(err.max()):.3g} beyond atol {tol['atol']} + rtol {tol['rtol']}"
    return None


OPS = {k: kernel_ops.register(os.path.join(STARTERS, f"{k}.py")) for k in KINDS}


def check_outputs():
    for kind, op in OPS.items():
        for dtype in (torch.float32, torch.float16):
            i = inputs(kind, dtype)
            ref = expected(kind, i)
            why = mismatch(kind, op(**i), ref, dtype)
            assert why is None, f"{kind} {dtype}, CPU path: {why}"
            records = op.launcher.records
            with kernel_ops.force_kernel():
                assert kernel_ops.kernel_forced()
                why = mismatch(kind, op(**i), ref, dtype)
            assert why is None, f"{kind} {dtype}, forced kernel: {why}"
            assert op.launcher.records == records + 1, f"{kind}: the forced path did not run the kernel"
    assert not kernel_ops.kernel_forced()
    # keyword and positional calls are the same operator call
    i = inputs("matmul")
    assert torch.equal(OPS["matmul"](i["A"], i["B"]), OPS["matmul"](A=i["A"], B=i["B"]))
    # the operator is a torch.library operator under the autokernel namespace
    assert torch.ops.autokernel.rmsnorm.default is OPS["rmsnorm"].overload


def check_wrong_kernel():
    src = open(os.path.join(STARTERS, "rmsnorm.py")).read()
    bad = src.replace("/ n_cols + eps)", "/ (n_cols + 1) + eps)")
    assert bad != src, "the rmsnorm starter no longer has the line this check breaks"
    path = os.path.join(OPS_DIR, "rmsnorm_wrong.py")
    with open(path, "w") as f:
        f.write(bad)
    op = kernel_ops.register(path, name="rmsnorm_wrong")
    i = inputs("rmsnorm")
    ref = expected("rmsnorm", i)
    assert mismatch("rmsnorm", op(**i), ref, torch.float32) is None  # the CPU path is the reference
    with kernel_ops.force_kernel():
        why = mismatch("rmsnorm", op(**i), ref, torch.float32)
    assert why is not None and "max error" in why, why
    # and the right starter passes the same check
    with kernel_ops.force_kernel():
        assert mismatch("rmsnorm", OPS["rmsnorm"](**i), ref, torch.float32) is None


class AllKinds(torch.nn.Module):
    """A model that calls every kind's operator once."""

    def forward(self, **i):
        return [OPS[k](*i[k]) for k in KINDS]


def _flat(batch):
    return {k: tuple(v.values()) for k, v in batch.items()}


def check_compile():
    import torch._dynamo

    batch = {k: inputs(k) for k in KINDS}
    refs = [expected(k, batch[k]) for k in KINDS]
    model = AllKinds()
    explained = torch._dynamo.explain(model)(**_flat(batch))
    assert explained.graph_break_count == 0 and not explained.break_reasons, explained
    assert explained.graph_count == 1, explained
    # the explanation does count breaks: .item() breaks a graph without capture_scalar_outputs

    def broken(x):
        v = OPS["reduce"](x).sum().item()
        return OPS["reduce"](x) * v

    control = torch._dynamo.explain(broken)(batch["reduce"]["x"])
    assert control.graph_break_count == 1 and control.break_reasons and control.graph_count == 2, control

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # inductor, C++ on the CPU
    for kind, out, ref in zip(KINDS, compiled(**_flat(batch)), refs):
        assert mismatch(kind, out, ref, torch.float32) is None, f"compiled {kind}: {mismatch(kind, out, ref, torch.float32)}"
    with kernel_ops.force_kernel():  # the compiled graph calls the operator, which reads the switch
        for kind, out, ref in zip(KINDS, compiled(**_flat(batch)), refs):
            why = mismatch(kind, out, ref, torch.float32)
            assert why is None, f"compiled, forced {kind}: {why}"
    assert all(OPS[k].launcher.records + OPS[k].launcher.replays >= 1 for k in KINDS)

    # symbolic shapes: the fake implementation gives SymInt dims, and a second shape runs
    # the same graph (no recompilation)
    torch._dynamo.reset()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    dyn = torch.compile(model, backend=capture, dynamic=True, fullgraph=True)
    dyn(**_flat({k: inputs(k, distinct=True) for k in KINDS}))
    bigger = {k: inputs(k, scale=2, seed=1, distinct=True) for k in KINDS}
    for kind, out in zip(KINDS, dyn(**_flat(bigger))):
        ref = expected(kind, bigger[kind])
        assert mismatch(kind, out, ref, torch.float32) is None, f"dynamic {kind}: {mismatch(kind, out, ref, torch.float32)}"
    assert len(graphs) == 1, f"recompiled for the second shape: {len(graphs)} graphs"
    placeholders = {}
    for node in graphs[0].graph.nodes:
        if node.op == "placeholder" and isinstance(node.meta.get("example_value"), torch.Tensor):
            placeholders[node.name] = node
    seen = set()
    for node in graphs[0].graph.nodes:
        if node.op != "call_function" or not str(node.target).startswith("autokernel."):
            continue
        kind = str(node.target).split(".")[1]
        names = OPS[kind].input_names
        shapes = {n: tuple(a.meta["example_value"].shape) for n, a in zip(names, node.args)}
        out = tuple(node.meta["example_value"].shape)
        want = expected_dims(kind, shapes)
        assert len(out) == len(want) and all(str(a) == str(b) for a, b in zip(out, want)), (kind, out, want)
        assert kind == "cross_entropy" or any(isinstance(d, torch.SymInt) for d in out), (kind, out)
        seen.add(kind)
    assert seen == set(KINDS), seen


def check_launcher():
    for kind in KINDS:
        module = kernel_ops.load_kernel(os.path.join(STARTERS, f"{kind}.py"), f"_launcher_{kind}")
        calls = []

        def counted(**kw):
            calls.append(1)
            return module.kernel_fn(**kw)

        names = [i["name"] for i in cat.spec(kind)["inputs"]]
        launcher = kernel_ops.Launcher(counted, names)
        first = inputs(kind, seed=1)
        out = launcher(*first.values())
        assert torch.equal(out, module.kernel_fn(**first)), kind
        assert (len(calls), launcher.records, launcher.replays) == (1, 1, 0), (kind, launcher.reasons)
        assert not launcher.reasons, (kind, launcher.reasons)
        # other values at the same key: replayed, not derived again; same output as kernel_fn
        second = inputs(kind, seed=2)
        assert kernel_ops.Launcher.key(first.values()) == kernel_ops.Launcher.key(second.values())
        out2 = launcher(*second.values())
        assert torch.equal(out2, module.kernel_fn(**second)), kind
        assert not torch.equal(out2, out), kind  # the replay read the new inputs
        assert (len(calls), launcher.records, launcher.replays) == (1, 1, 1), kind
        # another shape is another key
        third = inputs(kind, seed=3, scale=2)
        assert torch.equal(launcher(*third.values()), module.kernel_fn(**third)), kind
        assert (len(calls), launcher.records, launcher.replays) == (2, 2, 1), kind

    # a kernel_fn that computes with torch on the host cannot be replayed: it is called
    # again at that key, and says why
    rms = kernel_ops.load_kernel(os.path.join(STARTERS, "rmsnorm.py"), "_launcher_host_op")
    launcher = kernel_ops.Launcher(lambda x, weight: rms.kernel_fn(x=x, weight=weight) * 2.0, ["x", "weight"])
    i = inputs("rmsnorm")
    for n in range(4):
        assert torch.equal(launcher(*i.values()), rms.kernel_fn(**i) * 2.0)
    assert (launcher.records, launcher.replays, launcher.direct) == (kernel_ops.MAX_RECORD_ATTEMPTS, 0,
                                                                     4 - kernel_ops.MAX_RECORD_ATTEMPTS)
    assert "aten.mul" in next(iter(launcher.reasons.values())), launcher.reasons

    # a launch the recording cannot see (here: one made from another thread, writing the
    # returned tensor) fails the replay check on copied inputs: that key is not replayed
    import threading

    def hidden(x, weight):
        rms.kernel_fn(x=x, weight=weight)  # a launch the recording sees
        y = torch.empty_like(x)
        t = threading.Thread(target=lambda: y.copy_(rms.kernel_fn(x=x, weight=weight)))
        t.start()
        t.join()
        return y

    launcher = kernel_ops.Launcher(hidden, ["x", "weight"])
    for n in range(3):
        assert torch.equal(launcher(*i.values()), rms.kernel_fn(**i))
    assert launcher.replays == 0 and launcher.direct == 1, (launcher.replays, launcher.direct)
    assert "another output" in next(iter(launcher.reasons.values())), launcher.reasons

    # a host TMA descriptor among a launch's arguments (the matmul and fused-MLP starters
    # make them on Hopper GPUs) is rebuilt per call around the new call's tensor, at the
    # recorded offset, with the recorded fields, a new object each call
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b = torch.zeros(64, 32), torch.ones(64, 32)
    rec = kernel_ops._Recorder([a])
    with rec:
        rows = a[16:]  # a view the recording traces back to input 0
    desc = TensorDescriptor.from_tensor(rows, [16, 16])
    fields = (list(desc.shape), list(desc.strides), list(desc.block_shape), desc.padding)
    for interpreted in (False, True):
        _, get = rec.template(desc, interpreted)
        first, second = get([b]), get([b])
        assert type(first) is TensorDescriptor and first is not second, interpreted
        assert first.base.data_ptr() == b.data_ptr() + 16 * 32 * 4, interpreted
        assert isinstance(first.base, torch.Tensor) == interpreted, (interpreted, first.base)
        assert (list(first.shape), list(first.strides), list(first.block_shape), first.padding) == fields
    assert desc.base is rows  # the recorded descriptor is left as it was

    # a compiled launch (GPU only; here with a stand-in for Triton's compiled kernel) passes
    # no hooks and builds no launch metadata while Triton's hook chains are empty, and
    # passes both once a hook is added (a profiler's)
    from types import SimpleNamespace

    from triton.knobs import HookChain

    launched, metadata_built = [], []
    launch = object.__new__(kernel_ops._Launch)
    launch.args, launch.dyn, launch.device = [None], [(0, lambda env: env[0])], 0
    launch.g0, launch.g1, launch.g2 = 4, 1, 1
    launch.compiled = SimpleNamespace(launch_metadata=lambda *a: metadata_built.append(a) or "metadata")
    launch.get_stream, launch.function, launch.packed = (lambda device: 7), "function", "packed"
    launch.run = lambda *a: launched.append(a)
    launch.knobs = SimpleNamespace(launch_enter_hook=HookChain(), launch_exit_hook=HookChain(reversed=True))
    launch(["x"])
    assert launched[-1] == (4, 1, 1, 7, "function", "packed", None, None, None, "x"), launched
    assert not metadata_built
    launch.knobs.launch_enter_hook.add(print)
    launch(["y"])
    assert launched[-1][6:8] == ("metadata", launch.knobs.launch_enter_hook), launched[-1]
    assert launched[-1][8] is None and launched[-1][9] == "y", launched[-1]
    assert metadata_built == [((4, 1, 1), 7, "y")], metadata_built

    # through the operator: its forced CPU path runs the same launcher
    op = OPS["softmax"]
    i = inputs("softmax", seed=5)
    with kernel_ops.force_kernel():
        op(**i)
        op(**inputs("softmax", seed=6))
    assert (op.launcher.records, op.launcher.replays) == (1, 1), (op.launcher.records, op.launcher.replays)


def check_direct():
    """A plain eager call runs the device's implementation without the dispatcher; a
    dispatch mode, the profiler or a call needing gradients goes through it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    op = OPS["rmsnorm"]
    i = inputs("rmsnorm")
    ref = expected("rmsnorm", i)
    n = op.direct_calls
    plain = op(**i)
    assert op.direct_calls == n + 1, "a plain eager call went through the dispatcher"
    assert mismatch("rmsnorm", plain, ref, torch.float32) is None
    with Seen() as seen:
        moded = op(**i)
    assert op.direct_calls == n + 1 and "autokernel.rmsnorm.default" in seen.ops, seen.ops
    assert torch.equal(moded, plain)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        op(**i)
    assert op.direct_calls == n + 1
    assert "autokernel::rmsnorm" in {e.name for e in prof.events()}, sorted({e.name for e in prof.events()})
    # forced through the kernel, the direct path runs the launcher as the operator's CPU path does
    records, replays = op.launcher.records, op.launcher.replays
    with kernel_ops.force_kernel():
        forced = op(**i)
    assert op.direct_calls == n + 2 and (op.launcher.records, op.launcher.replays) != (records, replays)
    assert mismatch("rmsnorm", forced, ref, torch.float32) is None
    # gradients needed: the dispatcher's call, which has no autograd kernel to run
    x = i["x"].clone().requires_grad_(True)
    try:
        op(x, i["weight"]).sum().backward()
    except RuntimeError:
        pass
    assert op.direct_calls == n + 2, "a call needing gradients skipped the dispatcher"
    with torch.no_grad():
        op(x, i["weight"])
    assert op.direct_calls == n + 3


{"outputs": check_outputs, "wrong_kernel": check_wrong_kernel, "compile": check_compile,
 "launcher": check_launcher, "direct": check_direct}[CHECK]()
print("ok")
