"""An exported package used as a user would (run by tests/it/export.rs in a fresh venv
where the package was installed with pip, with neither autokernel nor its worker).

argv: CHECK TINY_PY PACKAGE EXPECTED. TINY_PY is examples/models/tiny.py; PACKAGE the
package name; EXPECTED the comma-separated targets `optimize` must install (the
verification's, less those that would patch torch for the whole process). CHECK is one of:

- `use`: optimize a freshly built model; its output matches the model's own, once with the
  CPU implementation of the operators and once with the Triton kernels forced under the
  interpreter, and under torch.compile(fullgraph=True) with no graph break and no recompile
  from one call to the next; every installed
  target takes calls; a call that needs gradients runs the model's own code; undo restores
  the model; a model in training mode is left as it is, with a warning.
- `wrong`: the installed copy of one kernel now returns 1.5 times its answer: forced
  through the kernels, the model's output no longer matches (the forced path runs the
  package's kernel files, so a wrong kernel fails this test).

Prints `ok`.
"""

import importlib
import importlib.util
import os
import sys
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402

CHECK, TINY_PY, PACKAGE, EXPECTED = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
# fp32 on the CPU: the reference and the kernels agree to rounding (the model tolerance
# verification uses for float32)
MAX_REL_L2 = 1e-3


def build():
    spec = importlib.util.spec_from_file_location("tiny_example", TINY_PY)
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    torch.manual_seed(0)
    return tiny.Tiny(**tiny.EXAMPLE["kwargs"]).eval()


def rel_l2(out, ref):
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


model = build()
ids = torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    ref = model(ids)

pkg = importlib.import_module(PACKAGE)
kernel_ops = importlib.import_module(f"{PACKAGE}._autokernel.kernel_ops")
assert not os.environ.get("AUTOKERNEL_FORCE_KERNEL"), "the CPU path must be the default"

if CHECK == "use":
    report = pkg.optimize(model, verbose=False)
    assert sorted(r["target"] for r in report.replaced) == sorted(EXPECTED), report
    # the verification's deploy mode and its table travel with the package (CPU: eager only)
    assert report.deploy == "eager" and [m["mode"] for m in report.modes] == ["eager"], report.to_dict()
    assert "chosen for eager; the verification measured the model with them at eager " in str(report), report
    with torch.no_grad():
        out = model(ids)
    assert rel_l2(out, ref) < MAX_REL_L2, rel_l2(out, ref)
    calls = report.calls()
    assert all(calls[t] > 0 for t in EXPECTED), calls

    with kernel_ops.force_kernel(), torch.no_grad():
        forced = model(ids)
    assert rel_l2(forced, ref) < MAX_REL_L2, rel_l2(forced, ref)
    launches = sum(op.launcher.records + op.launcher.replays + op.launcher.direct
                   for op in kernel_ops.registered().values())
    assert launches > 0, "the forced forward ran no kernel"

    # a call that builds an autograd graph goes to the model's own code: no call counted,
    # and the output still has a backward
    before = report.calls()
    out = model(ids)
    out.sum().backward()
    assert report.calls() == before, (before, report.calls())

    explained = torch._dynamo.explain(model)(ids)
    assert explained.graph_break_count == 0, explained.break_reasons
    with torch.no_grad():
        compiled = torch.compile(model, fullgraph=True)(ids)
    assert rel_l2(compiled, ref) < MAX_REL_L2, rel_l2(compiled, ref)

    # compiled once for repeated calls: nothing the plugs change per call is guarded on
    # (a call counter was, and recompiled the model at every call until the limit)
    compiles = []

    def counting(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    torch._dynamo.reset()
    counted = torch.compile(model, backend=counting, fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            counted(ids)
    assert len(compiles) == 1, f"compiled {len(compiles)} times for 3 calls"

    report.undo()
    assert all("forward" not in m.__dict__ for m in model.modules()), "undo left a replaced forward"
    after = report.calls()
    with torch.no_grad():
        model(ids)
    assert report.calls() == after

    # training mode: nothing installed, a warning that says why
    trainee = build().train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        left = pkg.optimize(trainee, verbose=False)
    assert left.replaced == [] and any("training mode" in str(w.message) for w in caught), caught
    assert all("forward" not in m.__dict__ for m in trainee.modules())
elif CHECK == "wrong":
    root = os.path.dirname(pkg.MANIFEST)
    victim = os.path.join(root, "kernels", f"{EXPECTED[0]}.py")
    with open(victim, encoding="utf-8") as f:
        source = f.read()
    with open(victim, "w", encoding="utf-8") as f:
        f.write(source + "\n_right = kernel_fn\n\ndef kernel_fn(*args, **kwargs):\n"
                "    return _right(*args, **kwargs) * 1.5\n")
    report = pkg.optimize(model, verbose=False)
    with torch.no_grad():
        plain = model(ids)  # the CPU implementation: the reference, not the file
    assert rel_l2(plain, ref) < MAX_REL_L2, rel_l2(plain, ref)
    with kernel_ops.force_kernel(), torch.no_grad():
        forced = model(ids)
    # beyond the tolerance `use` holds the forced output to, by far: that check would fail
    assert rel_l2(forced, ref) > 10 * MAX_REL_L2, f"a kernel 1.5x off went unnoticed: {rel_l2(forced, ref)}"
else:
    raise SystemExit(f"unknown check {CHECK}")
print("ok")
