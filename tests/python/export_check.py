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
- `contexts`: the installed manifest now says the verification measured the model slower
  with the kernels under torch.compile: eager calls still take the kernels, while the graph
  torch.compile builds holds none of our operators (the model's own ops, for inductor to
  fuse) and its output matches; slower in eager and deployed compiled: only the first
  eager call at a shape takes each kernel (compiled before any CUDA graph captures), and
  the compiled graph holds them; told to leave eager out, the same; told every context,
  the graph holds them.
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
    # each kernel's line names the problem shapes it takes (the manifest's), since a call at
    # any other shape runs the model's own code
    import json

    with open(pkg.MANIFEST, encoding="utf-8") as f:
        planned = {t["id"]: t.get("shapes") or [] for t in json.load(f)["targets"]}
    for r in report.to_dict()["replaced"]:
        assert r["shapes"] == planned[r["target"]] and r["shapes"], (r, planned)
        at = ", ".join("x".join(str(d) for d in s) for s in r["shapes"])
        assert f"replaced {r['target']} ({r['kind']}) at {at}" in str(report), str(report)
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

    # once per model instance: a second optimize before undo is refused, saying what to do
    try:
        pkg.optimize(model, verbose=False)
        raise AssertionError("a second optimize of one model was accepted")
    except RuntimeError as e:
        assert "already holds the kernels" in str(e) and "undo()" in str(e), e
    try:
        pkg.optimize(lambda x: x, verbose=False)
        raise AssertionError("optimize took a function")
    except TypeError as e:
        assert "torch.nn.Module" in str(e), e

    report.undo()
    assert all("forward" not in m.__dict__ for m in model.modules()), "undo left a replaced forward"
    # undone, it may be optimized again
    pkg.optimize(model, verbose=False).undo()
    # a model in another dtype than the kernels': no module computes the target, said so
    other = pkg.optimize(build().to(torch.float64), verbose=False)
    assert other.replaced == [] and all("no module of this model computes" in e["reason"]
                                        for e in other.left if e["target"] in EXPECTED), (other.replaced, other.left)
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
elif CHECK == "contexts":
    import json

    with open(pkg.MANIFEST, encoding="utf-8") as f:
        original = f.read()

    def verified(deploy, eager, compiled):
        """The installed manifest, as if the verification had measured these speedups."""
        manifest = json.loads(original)
        manifest["verification"]["deploy"] = deploy
        # what the CPU verification recorded (every context: its table has eager only); here
        # `optimize` decides from the table below
        assert manifest["verification"].pop("contexts") == ["eager", "cudagraph", "compile"], manifest
        manifest["verification"]["modes"] = [
            {"mode": "eager", "baseline_ms": 1.0, "kernels_ms": 1.0 / eager, "speedup": eager, "error": None},
            {"mode": "compile", "baseline_ms": 1.0, "kernels_ms": 1.0 / compiled, "speedup": compiled,
             "error": None},
        ]
        with open(pkg.MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f)

    def ours_in_graph(m):
        """Our operators in the graph torch.compile builds for m, and its output."""
        seen = []

        def backend(gm, example_inputs):
            seen.extend(str(n.target) for n in gm.graph.nodes if str(n.target).startswith("autokernel."))
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(m, backend=backend, fullgraph=True)(ids)
        return seen, out

    def forward_calls(report):
        with torch.no_grad():
            out = model(ids)
        assert rel_l2(out, ref) < MAX_REL_L2, rel_l2(out, ref)
        return report.calls()

    try:
        # slower under torch.compile: eager calls take the kernels, a compiled graph holds
        # none of our operators (the model's own ops, for inductor to fuse)
        verified("eager", 2.0, 0.5)
        report = pkg.optimize(model, verbose=False)
        assert sorted(r["target"] for r in report.replaced) == sorted(EXPECTED), report
        assert report.contexts == ["eager", "cudagraph"], report.contexts
        assert "in torch.compile the model's own code runs" in str(report), str(report)
        assert all(c > 0 for c in forward_calls(report).values()), report.calls()
        seen, out = ours_in_graph(model)
        assert seen == [], seen
        assert rel_l2(out, ref) < MAX_REL_L2, rel_l2(out, ref)
        report.undo()

        # slower in eager and deployed compiled: eager calls go to the model's own code once
        # each shape has run its kernel, and a compiled graph holds the operators
        verified("compile", 0.5, 2.0)
        report = pkg.optimize(model, verbose=False)
        assert report.contexts == ["cudagraph", "compile"], report.contexts
        assert "in eager the model's own code runs: the verification measured" in str(report), str(report)
        first = forward_calls(report)
        assert forward_calls(report) == first, (first, report.calls())
        seen, out = ours_in_graph(model)
        assert len(set(seen)) == len(EXPECTED), (seen, EXPECTED)
        assert rel_l2(out, ref) < MAX_REL_L2, rel_l2(out, ref)
        report.undo()

        # told to leave eager to the model: the first eager call at a shape runs each kernel
        # (compiled and loaded before any CUDA graph capture), later ones the model's own code
        report = pkg.optimize(model, contexts=("cudagraph", "compile"), verbose=False)
        assert "in eager the model's own code runs" in str(report), str(report)
        assert pkg.optimize(build(), contexts="compile", verbose=False).contexts == ["compile"]
        first = forward_calls(report)
        assert all(c > 0 for c in first.values()), first
        assert forward_calls(report) == first, (first, report.calls())
        report.undo()

        # told where: every context, whatever was measured
        report = pkg.optimize(model, contexts=("eager", "cudagraph", "compile"), verbose=False)
        assert repr(report).startswith("<autokernel Report tiny_kernels:"), repr(report)
        seen, _ = ours_in_graph(model)
        assert len(set(seen)) == len(EXPECTED), (seen, EXPECTED)
        report.undo()
    finally:
        with open(pkg.MANIFEST, "w", encoding="utf-8") as f:
            f.write(original)
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
